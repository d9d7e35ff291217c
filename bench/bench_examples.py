"""Every bundled example through nn-to-coda on the GPU: correctness at the real shapes, then time.

    python bench/bench_examples.py [--out DIR] [--pipelines "nn-to-coda;nn-to-coda{group-launches=false}"]
                                   [--autodiff] [--rounds 3] [examples/NAME.mlir ...]

For each `examples/*.mlir` and each pipeline: compile with `coda_ir.compile`, run on random inputs
(`coda_ir.testing.random_inputs`), check every output against the float64 op-by-op reference with
the NN_DIALECT.md bar (`check_against_reference`, computed on the GPU; a 0-d result, the LM
head's loss, with the bar's slack for a loss over its rows), then time every (example, pipeline)
with `do_bench` (median) in `--rounds` rounds of rotating order, so that pipelines of one example
are compared under the same clocks. Prints a table (example, pipeline, launches, ms, check) and
writes JSON.

`--profile`: afterwards, one call of each under torch.profiler: its GPU kernels by time (where a
pipeline's difference comes from).

`--autodiff`: compile `nn-autodiff,PIPELINE` and time `@f_fwd` followed by `@f_bwd` (a
training step's part of the example), checking f's results and every gradient against float64
autograd (`check_gradients`) first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402


def loss_slack(text: str):
    """NN_DIALECT.md's slack for a function whose only result is a 0-d loss: (element type, rows)."""
    from coda_ir.reference import load_func
    from coda_ir.testing import program_dtype_of

    fn = load_func(text)
    outs = fn.function_type.outputs.data
    if len(outs) != 1 or outs[0].get_shape():
        return None
    rows = fn.body.blocks[0].args[0].type.get_shape()[0]
    return program_dtype_of(text), rows


def build(path: Path, pipeline: str, autodiff: bool) -> tuple[dict, object]:
    """Compile, run once, check; (row, the call to time)."""
    import coda_ir
    from coda_ir.testing import check_against_reference, check_gradients, random_inputs, random_upstream

    text = path.read_text()
    row: dict = {"example": path.name, "pipeline": pipeline, "autodiff": autodiff}
    t0 = time.time()
    mod = coda_ir.compile(text, pipeline=f"nn-autodiff,{pipeline}" if autodiff else pipeline)
    name = next(n for n in mod.functions if not n.endswith(("_fwd", "_bwd")))
    inputs = [t.to("cuda") for t in random_inputs(text, 0)]
    loss = loss_slack(text)
    if autodiff:
        fwd, bwd = getattr(mod, f"{name}_fwd"), getattr(mod, f"{name}_bwd")
        row["launches"] = mod.kernel_count(f"{name}_fwd") + mod.kernel_count(f"{name}_bwd")
        ups = random_upstream(text, 0, device="cuda")
        n = len(ups)

        def fn():
            out = fwd(*inputs)
            out = list(out) if isinstance(out, (tuple, list)) else [out]
            return bwd(*out[n:], *ups)

        fn()
        torch.cuda.synchronize()
        row["first_call_s"] = round(time.time() - t0, 1)
        try:
            results = check_gradients(mod, text, inputs, loss=loss)
            bad = [r for r in results if not r.ok]
            row["check"] = "ok" if not bad else "FAIL: " + ", ".join(f"{r.name} {r.ratio:.3f}" for r in bad)
            row["worst_error_over_bound"] = max(r.ratio for r in results)
        except AssertionError as exc:
            row["check"] = "FAIL: " + str(exc)[:600]
        return row, fn
    f = getattr(mod, name)
    row["launches"] = mod.kernel_count(name)
    outs = f(*inputs)
    torch.cuda.synchronize()
    row["first_call_s"] = round(time.time() - t0, 1)
    try:
        results = check_against_reference(text, inputs, outs, loss=loss)
        row["check"] = "ok"
        row["worst_error_over_bound"] = max(r.ratio for r in results)
    except AssertionError as exc:
        row["check"] = "FAIL: " + str(exc)[:600]
    return row, lambda: f(*inputs)


def profile(fn) -> list[tuple[str, float]]:
    """(kernel, ms) of one call's GPU kernels, costliest first."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    fn()
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    rows = []
    for ev in prof.key_averages():
        if ev.device_type.name == "CUDA" and ev.count:
            total = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0.0)
            rows.append((ev.key[:60], total / 1000.0))
    return sorted(rows, key=lambda r: -r[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None)
    ap.add_argument("--pipelines", default="nn-to-coda;nn-to-coda{group-launches=false}")
    ap.add_argument("--autodiff", action="store_true", help="time @f_fwd + @f_bwd of nn-autodiff,PIPELINE")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="then profile one call of each: GPU kernels by time")
    ap.add_argument("examples", nargs="*")
    args = ap.parse_args()
    import triton
    from triton.testing import do_bench

    files = [Path(p) for p in args.examples] or sorted((ROOT / "examples").glob("*.mlir"))
    rows = []
    for path in files:
        fns = {}
        for pipeline in [p for p in args.pipelines.split(";") if p]:
            try:
                row, fn = build(path, pipeline, args.autodiff)
                if not row["check"].startswith("FAIL"):
                    fns[pipeline] = fn
            except Exception as exc:  # one broken example must not hide the others
                row = {"example": path.name, "pipeline": pipeline,
                       "error": f"{type(exc).__name__}: {exc}"[:800] + "\n" + traceback.format_exc()[-1200:]}
            rows.append(row)
            print(json.dumps(row), flush=True)
        names = list(fns)
        samples: dict[str, list[float]] = {p: [] for p in names}
        for r in range(args.rounds):
            for p in names[r % len(names):] + names[:r % len(names)] if names else []:
                samples[p].append(do_bench(fns[p], warmup=25, rep=200, return_mode="median"))
        for row in rows:
            if row["example"] == path.name and row["pipeline"] in samples:
                row["rounds_ms"] = samples[row["pipeline"]]
                row["ms"] = statistics.median(samples[row["pipeline"]])
                if args.profile:
                    row["kernels"] = profile(fns[row["pipeline"]])
                    print(f"{path.name} {row['pipeline']}: " + ", ".join(f"{k} {ms:.3f}" for k, ms in row["kernels"][:12]),
                          flush=True)
        del fns
        torch.cuda.empty_cache()
    print(f"\n{torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}{', fwd+bwd' if args.autodiff else ''}, "
          f"{args.rounds} rotating rounds")
    print(f"{'example':20s} {'pipeline':42s} {'launches':>8s} {'ms':>8s}  check")
    for r in rows:
        ms = f"{r['ms']:8.3f}" if "ms" in r else "       -"
        print(f"{r['example']:20s} {r['pipeline']:42s} {r.get('launches', '-')!s:>8s} {ms}  "
              f"{r.get('check', r.get('error', '?')[:200])}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "bench_examples.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
