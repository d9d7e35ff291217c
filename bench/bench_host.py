#!/usr/bin/env python3
"""Host time of coda-ir's launches in a whole-model training step (issue 11), and the A/B of
`launch_gemm`'s launch plans (`gemm_launch.set_launch_plans`), both variants in one process.

Per variant, in rounds whose order alternates:
* the step's GPU time (CUDA events around each step, median), as bench_model.py times it;
* the step's host time with the GPU kept busy (a long `torch.cuda._sleep` enqueued first, so the
  host never waits on the queue): what it costs Python to enqueue one step;
* in separate, instrumented steps, where that host time goes per GEMM launch: re-deriving the
  launch (path, layouts, tuning key, config, grid), allocating the epilogue's outputs
  (`extra_args_for`), building TMA descriptors and Triton's own launch (`kernel[grid](...)`),
  and the other launches (folds, elementwise, groups) in total.

GPU (carry [".whl", ".devcache"]):

    python bench/bench_host.py --shape llama1b --layers 4 --out $OUT/host.json

CPU smoke (tests/test_bench_smoke.py): `python bench/bench_host.py --smoke`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_model  # noqa: E402


class Meter:
    """Wraps the launch helpers (before any generated module imports them) and, while `on`,
    adds up host seconds per part."""

    def __init__(self):
        from coda_ir.runtime import gemm_launch as gl
        from coda_ir.runtime import compiled as rt

        self.on = False
        self.t: dict[str, float] = {}
        self.n: dict[str, int] = {}
        clock = time.perf_counter

        def add(part, dt):
            self.t[part] = self.t.get(part, 0.0) + dt
            self.n[part] = self.n.get(part, 0) + 1

        orig_gemm, orig_run, orig_desc = gl.launch_gemm, gl._run_plan, gl.tensor_descriptor_class

        def launch_gemm(kernel, a, b, extra_args_for, **kw):
            if not self.on:
                return orig_gemm(kernel, a, b, extra_args_for, **kw)

            def timed_extra(cfg):
                t = clock()
                out = extra_args_for(cfg)
                add("gemm: allocate epilogue outputs", clock() - t)
                return out

            t = clock()
            out = orig_gemm(kernel, a, b, timed_extra, **kw)
            add("gemm: launch_gemm total", clock() - t)
            return out

        def run_plan(*args, **kw):
            if not self.on:
                return orig_run(*args, **kw)
            t = clock()
            out = orig_run(*args, **kw)
            add("gemm: descriptors + Triton launch", clock() - t)
            return out

        class TimedDesc:
            def __init__(self, cls):
                self.cls = cls

            def __call__(self, *args):
                t = clock()
                out = self.cls(*args)
                if self.on_ref():
                    add("gemm: TMA descriptors", clock() - t)
                return out

        real_desc = orig_desc()
        timed_desc = TimedDesc(real_desc) if real_desc is not None else None
        if timed_desc is not None:
            timed_desc.on_ref = lambda: self.on
        gl.launch_gemm = launch_gemm
        gl._run_plan = run_plan
        gl.tensor_descriptor_class = lambda: timed_desc

        for name in ("launch_fold", "launch_group", "launch_elementwise"):
            orig = getattr(rt, name)

            def wrapped(*args, _orig=orig, _name=name, **kw):
                if not self.on:
                    return _orig(*args, **kw)
                t = clock()
                out = _orig(*args, **kw)
                add(f"other: {_name}", clock() - t)
                return out

            setattr(rt, name, wrapped)

    @contextlib.contextmanager
    def measuring(self):
        self.on = True
        try:
            yield
        finally:
            self.on = False

    def take(self, steps: int) -> dict[str, dict[str, float]]:
        """{part: {per_step_ms, calls_per_step, us_per_call}} since the last take."""
        out = {}
        for part, total in sorted(self.t.items()):
            n = self.n[part]
            out[part] = {"per_step_ms": total / steps * 1e3, "calls_per_step": n / steps, "us_per_call": total / n * 1e6}
        self.t, self.n = {}, {}
        return out


def host_step_ms(step, device, iters: int, sleep_cycles: int) -> list[float]:
    """Host seconds to enqueue one step while the GPU is still busy with a long sleep kernel."""
    times = []
    for _ in range(iters):
        bench_model.sync(device)
        if device.type == "cuda" and sleep_cycles:
            torch.cuda._sleep(sleep_cycles)
        t = time.perf_counter()
        step()
        times.append((time.perf_counter() - t) * 1e3)
        bench_model.sync(device)
    return times


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=sorted(bench_model.SHAPES), default="llama1b")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--sleep-ms", type=float, default=0.0,
                   help="GPU sleep ahead of each host-timed step (0: none). A step waits once for its token "
                        "check's event, so a sleep ahead of it is waited for: keep 0 unless that changes")
    p.add_argument("--out", default=None)
    p.add_argument("--smoke", action="store_true", help="tiny CPU run through the Triton interpreter")
    args = p.parse_args(argv)
    if args.smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        args.shape, args.layers, args.batch, args.seq, args.rounds, args.iters = "smoke", 1, 2, 16, 1, 1
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    meter = Meter()  # before the generated modules import launch_gemm
    from coda_ir.runtime import gemm_launch as gl

    shape = bench_model.SHAPES[args.shape]
    tokens = args.batch * args.seq
    base = bench_model.make_model(shape, args.layers, dtype, device)
    step, _ = bench_model.build_variant("coda", base, shape, args.layers, tokens, args.seq, dtype, device)
    t = time.perf_counter()
    loss0 = float(step())
    bench_model.sync(device)
    first = time.perf_counter() - t
    sleep_cycles = 0
    if device.type == "cuda" and args.sleep_ms > 0:  # cycles of the sleep kernel per ms, measured
        torch.cuda._sleep(10**6)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.cuda._sleep(10**7)
        e.record()
        torch.cuda.synchronize()
        sleep_cycles = int(10**7 / s.elapsed_time(e) * args.sleep_ms)
    variants = {"plans": True, "no plans": False}
    res: dict[str, dict] = {v: {"gpu_ms": [], "host_ms": [], "losses": []} for v in variants}
    for r in range(args.rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for v in order:
            gl.set_launch_plans(variants[v])
            step()  # first call under this setting (plans built) stays out of the timings
            bench_model.sync(device)
            res[v]["gpu_ms"].append(bench_model.timed(step, device, args.iters))
            res[v]["host_ms"] += host_step_ms(step, device, args.iters, sleep_cycles)
            with meter.measuring():
                res[v]["losses"] += [float(x) for x in host_step_loss(step, device, args.iters, sleep_cycles)]
            res[v].setdefault("parts", []).append(meter.take(args.iters))
    gl.set_launch_plans(True)
    same_across = len({x for e in res.values() for x in e["losses"]}) == 1
    for v, e in res.items():
        e["gpu_median_ms"] = statistics.median(e["gpu_ms"])
        e["host_median_ms"] = statistics.median(e["host_ms"])
        # per part, the median over rounds of its per-step time and of its calls per step
        names = sorted({k for parts in e["parts"] for k in parts})
        last = {k: {"per_step_ms": statistics.median(r[k]["per_step_ms"] for r in e["parts"] if k in r),
                    "calls_per_step": statistics.median(r[k]["calls_per_step"] for r in e["parts"] if k in r)}
                for k in names}
        for k, x in last.items():
            x["us_per_call"] = x["per_step_ms"] * 1e3 / x["calls_per_step"] if x["calls_per_step"] else 0.0
        e["parts_median"] = last
        total = last.get("gemm: launch_gemm total", {})
        alloc = last.get("gemm: allocate epilogue outputs", {})
        run = last.get("gemm: descriptors + Triton launch", {})
        desc = last.get("gemm: TMA descriptors", {})
        n = total.get("calls_per_step", 0) or 1
        e["gemm_us_per_launch"] = {
            "total": total.get("us_per_call", 0.0),
            "derive (total - allocs - run)": (total.get("per_step_ms", 0) - alloc.get("per_step_ms", 0) - run.get("per_step_ms", 0)) * 1e3 / n,
            "allocate outputs": alloc.get("per_step_ms", 0) * 1e3 / n,
            "TMA descriptors": desc.get("per_step_ms", 0) * 1e3 / n,
            "Triton launch (run - descriptors)": (run.get("per_step_ms", 0) - desc.get("per_step_ms", 0)) * 1e3 / n,
            "launches per step": total.get("calls_per_step", 0),
        }
        e["deterministic_loss"] = len(set(e["losses"])) == 1
    info = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
            "torch": torch.__version__, "triton": __import__("triton").__version__, "shape": args.shape,
            "layers": args.layers, "batch": args.batch, "seq": args.seq, "first_step_s": first, "loss": loss0}
    report = {"info": info, "results": res, "same_loss_across_variants": same_across}
    out = args.out or (os.path.join(os.environ["OUT"], f"host-{args.shape}.json") if os.environ.get("OUT") else None)
    if out:
        Path(out).write_text(json.dumps(report, indent=1, default=str))
    print(f"\n{args.shape}: {args.layers} layers, {tokens} tokens, {info['device']}, torch {info['torch']}, triton {info['triton']}")
    print(f"{'variant':9} {'GPU step ms':>11} {'host step ms':>12}  GEMM launch us (median over rounds): total / derive / allocs / descs / Triton (launches)")
    for v, e in res.items():
        g = e["gemm_us_per_launch"]
        print(f"{v:9} {e['gpu_median_ms']:11.2f} {e['host_median_ms']:12.2f}  "
              f"{g['total']:.1f} / {g['derive (total - allocs - run)']:.1f} / {g['allocate outputs']:.1f} / "
              f"{g['TMA descriptors']:.1f} / {g['Triton launch (run - descriptors)']:.1f} ({g['launches per step']:.0f})")
        others = {k: round(x["us_per_call"], 1) for k, x in e["parts_median"].items() if k.startswith("other")}
        print(f"{'':9} other launches, us per call: {others}; same loss every step: {e['deterministic_loss']}")
    print(f"same loss in every instrumented step of both variants: {same_across}")
    return report


def host_step_loss(step, device, iters: int, sleep_cycles: int) -> list[float]:
    """Instrumented steps (host time split by part): their losses, to check determinism."""
    losses = []
    for _ in range(iters):
        bench_model.sync(device)
        if device.type == "cuda" and sleep_cycles:
            torch.cuda._sleep(sleep_cycles)
        losses.append(step())
        bench_model.sync(device)
    return losses


if __name__ == "__main__":
    main()
