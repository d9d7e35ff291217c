#!/usr/bin/env python3
"""Where a synced from_hf training step leaves the GPU idle, and what the host was doing then.

Per family (a 1-3B config of bench_plan_hf.py, `--layers` decoder layers, 2 x 4096 tokens, bf16):
* the synced step (CUDA events, each step from an idle GPU, median);
* the host's enqueue time of a step with the GPU kept busy (a long `torch.cuda._sleep` first,
  and the step's token check not waited for): what Python costs per step;
* one profiled step (torch.profiler, CPU + CUDA) read as a trace: every gap between two kernels
  whose launch ended after the earlier kernel finished is a gap the GPU waited on the host;
  gaps are added up by phase (forward / backward), by the CPU op that launched the kernel
  after them and by that kernel; per step the opening (host time until the first long kernel starts,
  which the GPU never wins back in a synced step) and the idle time inside the step's kernel span
  (`analyse`, also runnable on a saved trace with `--trace`).

* without the profiler (`phase_attribution`): per phase of the step (its opening, the embedding,
  each decoder unit's forward, the head's forward, the backward) the GPU time of a synced step
  against the same step enqueued behind a long `torch.cuda._sleep` (the host never keeps that
  one waiting): their difference is the idle time the host caused in that phase, with the host's
  own time per phase, and the garbage collector's collections during the synced steps.

Session 22 (bench/RESULTS.md) found this way that a synced step's idle time lies in the forward
(the backward's kernels are long enough for the host to stay ahead) and what it was made of.
The profiler adds host time per op, so the gaps it shows are larger than a plain step's.

GPU (carry [".whl"]): `python3 bench/bench_gaps.py --families qwen3,llama --out $OUT`
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_plan_hf as bp  # noqa: E402


def analyse(trace: dict, steps: int) -> dict:
    """Per step, from a torch.profiler chrome trace of `steps` steps whose forward and backward
    are `record_function("step:fwd")` / `("step:bwd")` ranges: per phase the kernels' time, the
    gaps between kernels and those the GPU waited on the host (`host_gap_us`: the next kernel's
    launch call ended after the earlier kernel finished); `host_gaps`, those gaps by (phase,
    outermost and innermost CPU op around the launch, kernel row of `bench_plan_hf.classify`);
    `host_deltas`, the host time between consecutive launches of one thread by the same key."""
    ev = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    kernels = sorted((e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])
    launches = {}
    for e in ev:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]] = e
    cpu_ops = defaultdict(list)
    for e in ev:
        if e.get("cat") in ("cpu_op", "user_annotation"):
            cpu_ops[e["tid"]].append(e)
    phases = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("step:")]

    def enclosing(tid, ts):
        inner, outer = None, None
        for op in cpu_ops[tid]:
            if op["ts"] <= ts <= op["ts"] + op["dur"] and not op["name"].startswith("step:"):
                if outer is None or op["dur"] > outer["dur"]:
                    outer = op
                if inner is None or op["dur"] < inner["dur"]:
                    inner = op
        return (outer["name"] if outer else "-"), (inner["name"] if inner else "-")

    def phase(ts):
        for p in phases:
            if p["ts"] <= ts <= p["ts"] + p["dur"]:
                return p["name"]
        return "none"

    gaps = defaultdict(float)
    gap_n = defaultdict(int)
    by_phase = defaultdict(lambda: defaultdict(float))
    host_delta = defaultdict(list)
    prev_end, prev_launch = None, None
    for k in kernels:
        corr = k.get("args", {}).get("correlation")
        launch = launches.get(corr)
        ph = phase(launch["ts"]) if launch else "none"
        by_phase[ph]["kernel_us"] += k["dur"]
        by_phase[ph]["kernels"] += 1
        if prev_end is not None:
            gap = k["ts"] - prev_end
            if gap > 0:
                by_phase[ph]["gap_us"] += gap
                host_bound = launch is not None and launch["ts"] + launch["dur"] > prev_end - 1.0
                if host_bound and gap > 1.5:
                    by_phase[ph]["host_gap_us"] += gap
                    outer, inner = enclosing(launch["tid"], launch["ts"])
                    key = f"{ph} | {outer[:60]} | {inner[:50]} | {bp.classify(k['name'])[:50]}"
                    gaps[key] += gap
                    gap_n[key] += 1
        if launch is not None:
            if prev_launch is not None and launch["tid"] == prev_launch["tid"]:
                outer, inner = enclosing(launch["tid"], launch["ts"])
                host_delta[f"{ph} | {inner[:50]} | {bp.classify(k['name'])[:40]}"].append(launch["ts"] - prev_launch["ts"])
            prev_launch = launch
        prev_end = max(prev_end or 0, k["ts"] + k["dur"])
    top = sorted(gaps.items(), key=lambda kv: -kv[1])[:45]
    deltas = sorted(((k, sum(v), len(v), statistics.median(v)) for k, v in host_delta.items()), key=lambda r: -r[1])[:45]
    return {
        "steps": _steps(kernels, launches, phases),
        "phases": {k: {kk: vv / steps for kk, vv in v.items()} for k, v in by_phase.items()},
        "host_gaps": [{"where": k, "us_per_step": v / steps, "count_per_step": gap_n[k] / steps} for k, v in top],
        "host_deltas": [{"where": k, "us_per_step": s / steps, "n_per_step": n / steps, "median_us": m} for k, s, n, m in deltas],
    }


LONG_KERNEL_US = 50.0
"""A kernel at least this long (a GEMM, an attention) ends a step's opening: from then on the host
can get ahead of the GPU."""


def _steps(kernels: list, launches: dict, phases: list) -> list[dict]:
    """Per step (a "step:fwd" range and the kernels launched from it until the next one): the
    opening (host time from the step's start until the first kernel of at least `LONG_KERNEL_US`
    starts, and how much of it the GPU was busy), and the idle time between the step's first
    kernel's start and its last kernel's end."""
    starts = sorted(p["ts"] for p in phases if p["name"] == "step:fwd")
    result = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else float("inf")
        mine = [k for k in kernels
                if (launch := launches.get(k.get("args", {}).get("correlation"))) is not None
                and start <= launch["ts"] < end]
        if not mine:
            continue
        first_long = next((k for k in mine if k["dur"] >= LONG_KERNEL_US), mine[-1])
        opening_busy = sum(k["dur"] for k in mine if k["ts"] < first_long["ts"])
        span = max(k["ts"] + k["dur"] for k in mine) - mine[0]["ts"]
        result.append({"opening_us": first_long["ts"] - start, "opening_busy_us": opening_busy,
                       "span_us": span, "busy_us": sum(k["dur"] for k in mine),
                       "idle_in_span_us": span - sum(k["dur"] for k in mine)})
    return result


class PhaseMarks:
    """CUDA events and host clocks at a step's phase boundaries (the embedding, each decoder unit,
    the head: forward pre-hooks; the backward's start and the step's end: `mark`), recorded without
    the profiler. A step run from an idle GPU (synced) against the same step enqueued behind a long
    `torch.cuda._sleep` (the host then never keeps the GPU waiting) gives, per phase, the GPU time the
    phase took either way: their difference is the idle time the host caused in that phase."""

    def __init__(self, coda):
        self.marks: list[tuple[str, torch.cuda.Event, float]] = []
        self.handles = [coda.embed.register_forward_pre_hook(lambda m, a: self.mark("embed"))]
        for i, layer in enumerate(coda.layers):
            self.handles.append(layer.register_forward_pre_hook(lambda m, a, i=i: self.mark(f"layer {i} fwd")))
        self.handles.append(coda.head.register_forward_pre_hook(lambda m, a: self.mark("head fwd")))

    def mark(self, name: str) -> None:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self.marks.append((name, event, time.perf_counter()))

    def take(self) -> list[tuple[str, float, float]]:
        """(phase, GPU ms, host ms) from each mark to the next; clears the marks."""
        torch.cuda.synchronize()
        m, self.marks = self.marks, []
        return [(m[i][0], m[i][1].elapsed_time(m[i + 1][1]), (m[i + 1][2] - m[i][2]) * 1e3) for i in range(len(m) - 1)]

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def phase_attribution(coda, step, rounds: int = 8) -> dict:
    """Median per phase of `PhaseMarks` over `rounds` synced and behind-sleep steps, alternating;
    also the garbage collector's collections during the synced steps (count and time)."""
    import gc

    import coda_ir.torch.hf as hf

    marks = PhaseMarks(coda)
    collections: list[float] = []
    started: list[float] = []

    def on_gc(phase, info):
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            collections.append((time.perf_counter() - started.pop()) * 1e3)

    synced, behind = defaultdict(list), defaultdict(list)
    wait = hf.TokenCheck.raise_if_bad
    try:
        for _ in range(rounds):
            torch.cuda.synchronize()
            gc.callbacks.append(on_gc)
            marks.mark("step")
            loss = step(marks)
            marks.mark("end")
            gc.callbacks.remove(on_gc)
            for name, gpu, host in marks.take():
                synced[name].append((gpu, host))
            del loss
            hf.TokenCheck.raise_if_bad = lambda self: None  # would wait for the sleep
            torch.cuda._sleep(int(1e9))
            marks.mark("step")
            loss = step(marks)
            marks.mark("end")
            hf.TokenCheck.raise_if_bad = wait
            for name, gpu, host in marks.take():
                behind[name].append((gpu, host))
            del loss
    finally:
        hf.TokenCheck.raise_if_bad = wait
        marks.remove()
    rows = []
    for name in synced:
        s_gpu = statistics.median(g for g, _ in synced[name])
        b_gpu = statistics.median(g for g, _ in behind[name])
        rows.append({"phase": name, "synced_gpu_ms": s_gpu, "gpu_only_ms": b_gpu, "host_idle_ms": s_gpu - b_gpu,
                     "synced_host_ms": statistics.median(h for _, h in synced[name])})
    return {"phases": rows, "synced_ms": sum(r["synced_gpu_ms"] for r in rows),
            "gpu_only_ms": sum(r["gpu_only_ms"] for r in rows),
            "gc_per_step": len(collections) / rounds, "gc_ms_per_step": sum(collections) / rounds,
            "gc_longest_ms": max(collections, default=0.0)}


def run(family, layers, out, steps):
    import coda_ir.torch
    import coda_ir.torch.hf as hf
    out.mkdir(parents=True, exist_ok=True)
    data, _ = bp.config_with_layers(family, layers, out)
    model = bp.build_model(data, torch.device("cuda"))
    coda = coda_ir.torch.from_hf(model, progress=False)
    gen = torch.Generator(device="cuda").manual_seed(0)
    ids = torch.randint(0, data["vocab_size"], (2, 4096), device="cuda", generator=gen)

    def step(marks=None):
        model.zero_grad(set_to_none=True)
        with record_function("step:fwd"):
            loss = coda(ids, labels=ids).loss
        if marks is not None:
            marks.mark("backward")
        with record_function("step:bwd"):
            loss.backward()
        return loss

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    synced = []
    for _ in range(10):
        b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        b.record(); step(); e.record(); torch.cuda.synchronize()
        synced.append(b.elapsed_time(e))
    # host time of a step with the GPU kept busy (the token check's wait would wait for the sleep:
    # skipped here, the ids are in range)
    wait = hf.TokenCheck.raise_if_bad
    hf.TokenCheck.raise_if_bad = lambda self: None
    host = []
    try:
        for _ in range(6):
            torch.cuda._sleep(int(1e9))
            t = time.perf_counter(); step(); host.append((time.perf_counter() - t) * 1e3)
            torch.cuda.synchronize()
    finally:
        hf.TokenCheck.raise_if_bad = wait
    phases = phase_attribution(coda, step)
    print(json.dumps({"family": family, **{k: v for k, v in phases.items() if k != "phases"}}), flush=True)
    for r in phases["phases"]:
        print(f"  {r['phase']:12} synced {r['synced_gpu_ms']:7.3f} ms  GPU-only {r['gpu_only_ms']:7.3f} ms  "
              f"host idle {r['host_idle_ms']:6.3f} ms  (host {r['synced_host_ms']:6.3f} ms)", flush=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
            torch.cuda.synchronize()
    path = out / f"{family}-trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    with gzip.open(str(path) + ".gz", "wt") as f:
        json.dump(trace, f)
    path.unlink()
    res = {"family": family, "layers": layers, "synced_ms": statistics.median(synced), "synced_all": synced,
           "host_ms": statistics.median(host), "host_all": host, "unprofiled": phases, **analyse(trace, steps)}
    (out / f"{family}-gaps.json").write_text(json.dumps(res, indent=1))
    print(json.dumps({k: res[k] for k in ("family", "synced_ms", "host_ms", "phases", "steps")}), flush=True)
    for g in res["host_gaps"][:15]:
        print(f"  {g['us_per_step']:8.1f} us {g['count_per_step']:5.1f}x  {g['where']}")
    del coda, model
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", default="qwen3,llama", help=f"comma-separated, of: {', '.join(bp.FAMILIES)}")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=2, help="profiled steps")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gaps"), help="folder for the JSON and traces")
    ap.add_argument("--trace", help="analyse a saved trace (.json or .json.gz) of --steps steps instead")
    a = ap.parse_args()
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    if a.trace:
        opener = gzip.open if a.trace.endswith(".gz") else open
        with opener(a.trace, "rt") as f:
            print(json.dumps(analyse(json.load(f), a.steps), indent=1))
        return
    for f in a.families.split(","):
        run(f, a.layers, out, a.steps)


if __name__ == "__main__":
    main()
