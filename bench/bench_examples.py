"""Every bundled example through nn-to-coda on the GPU: correctness at the real shapes, then time.

    python bench/bench_examples.py [--out DIR] [--pipelines "nn-to-coda;nn-to-coda{group-launches=false}"]

For each `examples/*.mlir` and each pipeline: compile with `coda_ir.compile`, run on random inputs
(`coda_ir.testing.random_inputs`), check every output against the float64 op-by-op reference with
the NN_DIALECT.md bar (`check_against_reference`, computed on the GPU), then time the call with
`do_bench` (median). Prints a table (example, pipeline, launches, ms, check) and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--pipelines", default="nn-to-coda;nn-to-coda{group-launches=false}")
    ap.add_argument("examples", nargs="*")
    args = ap.parse_args()
    import triton
    from triton.testing import do_bench

    import coda_ir
    from coda_ir.testing import check_against_reference, random_inputs

    files = [Path(p) for p in args.examples] or sorted((ROOT / "examples").glob("*.mlir"))
    rows = []
    for path in files:
        for pipeline in [p for p in args.pipelines.split(";") if p]:
            row: dict = {"example": path.name, "pipeline": pipeline}
            rows.append(row)
            try:
                t0 = time.time()
                mod = coda_ir.compile(path.read_text(), pipeline=pipeline)
                (name,) = mod.functions
                row["launches"] = mod.kernel_count(name)
                inputs = [t.to("cuda") for t in random_inputs(path.read_text(), 0)]
                fn = getattr(mod, name)
                outs = fn(*inputs)
                torch.cuda.synchronize()
                row["first_call_s"] = round(time.time() - t0, 1)
                try:
                    results = check_against_reference(path.read_text(), inputs, outs)
                    row["check"] = "ok"
                    row["worst_error_over_bound"] = max(r.ratio for r in results)
                except AssertionError as exc:
                    row["check"] = "FAIL: " + str(exc)[:600]
                row["ms"] = do_bench(lambda: fn(*inputs), warmup=25, rep=200, return_mode="median")
                del inputs, outs
                torch.cuda.empty_cache()
            except Exception as exc:  # one broken example must not hide the others
                row["error"] = f"{type(exc).__name__}: {exc}"[:800] + "\n" + traceback.format_exc()[-1200:]
            print(json.dumps(row), flush=True)
    print(f"\n{torch.cuda.get_device_name(0)}, torch {torch.__version__}, triton {triton.__version__}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
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
