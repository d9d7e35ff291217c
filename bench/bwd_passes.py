"""The derived LLaMA block's backward, kernel by kernel, for several pipelines in one process
(issue 11, session 11): where its memory-bound passes stand against device memory.

    python bench/bwd_passes.py --shapes 1b,8b --tune short [--rounds 3] [--out DIR]
    python bench/bwd_passes.py --cpu                # interpreter, tiny shape: checks and bytes only

Per shape, each variant (`--variants NAME=OPTIONS;...`, nn-to-coda pass options; default: the
session-10 backward `old` = `norm-grad=epilogue rope-table=never`, `epilogue` = `norm-grad=epilogue`,
`default` = the branch's defaults) is compiled (`nn-autodiff,nn-to-coda{OPTIONS}`), checked first
(`coda_ir.testing.check_gradients`: f's results and every gradient against float64 autograd, the
NN_DIALECT.md bar; a variant that fails is not timed), then its backward is profiled
(torch.profiler means over `--iters` calls). Every kernel of the backward is listed with its
bytes through device memory (`io_extract` of the compiled IR: the IO model's reads and writes,
partials included; a launch group sums its members) and, for non-GEMM kernels, its time against
those bytes at the copy bandwidth measured in the same process (`bound`); every GEMM beside the
plain cuBLAS GEMM of its shape. Then the whole backward of each variant (`do_bench` medians,
rounds in rotating order), and each variant's forward+backward peak memory (direct calls, saved
tensors held). JSON: $OUT/bwd_passes.json; the tables last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "programs"))
sys.path.insert(0, str(ROOT / "bench"))

DEFAULT_VARIANTS = "old=norm-grad=epilogue rope-table=never;epilogue=norm-grad=epilogue;default="
KERNELS = ("coda.gemm", "coda.elementwise", "coda.fold")


def parse_variants(text: str) -> dict[str, str]:
    out = {}
    for part in [p for p in text.split(";") if p.strip()]:
        name, _, opts = part.partition("=")
        out[name.strip()] = opts.strip()
    return out


def pipeline_of(opts: str) -> str:
    return f"nn-autodiff,nn-to-coda{{{opts}}}" if opts else "nn-autodiff,nn-to-coda"


def kernel_table(program, fn_name: str) -> dict[str, dict]:
    """Triton kernel name -> {origin, kind, bytes, gemm (m, n, k) or None} for every launch of
    `fn_name` (launch groups named by their members, bytes summed), in launch order."""
    from coda_ir.analysis import io_extract
    from coda_ir.dialects import coda

    fn = next(f for f in program.ir.body.block.ops if getattr(f, "sym_name", None) is not None
              and f.sym_name.data == fn_name)
    plan = io_extract.extract_function(fn)
    by_op = {id(op): k for op, k in zip(plan.kernel_ops, plan.kernels)}

    def nbytes(op) -> int:
        k = by_op.get(id(op))
        if k is None:
            return 0
        return sum(t.nbytes for t in k.all_reads()) + sum(t.nbytes for t in k.writes)

    def origin(op) -> str:
        return op.attributes["coda.origin"].data if "coda.origin" in op.attributes else op.name

    out: dict[str, dict] = {}
    i, g = 0, 0
    for op in fn.walk():
        if op.name == "coda.launch_group":
            members = [m for m in op.walk() if m.name in KERNELS]
            out[f"_{fn_name}_g{g}_launch_group"] = {
                "origin": " | ".join(origin(m) for m in members), "kind": "launch_group",
                "bytes": sum(nbytes(m) for m in members), "gemm": None}
            g += 1
        elif op.name in KERNELS:
            gemm = op.problem_shape() if isinstance(op, coda.GemmOp) else None
            out[f"_{fn_name}_k{i}_{op.name.split('.')[1]}"] = {
                "origin": origin(op), "kind": op.name.split(".")[1], "bytes": nbytes(op),
                "gemm": list(gemm) if gemm else None,
                "out_dtypes": [str(r.type.get_element_type()) for r in op.results
                               if hasattr(r.type, "get_element_type") and r.type.name == "tensor"]}
            i += 1
    return out


def profile(fn, iters: int) -> dict[str, float]:
    import torch
    from torch.profiler import ProfilerActivity, profile as prof_ctx

    torch.cuda.synchronize()
    with prof_ctx(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    rows = {}
    for ev in prof.key_averages():
        if ev.device_type.name != "CUDA" or ev.count == 0:
            continue
        total = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0.0)
        rows[ev.key] = total / iters / 1000.0
    return rows


def copy_bandwidth() -> float:
    """Device-to-device copy bandwidth (bytes read + written per second), 1 GiB."""
    import torch
    from triton.testing import do_bench

    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=10, rep=100, return_mode="median")
    del src, dst
    return 2.0 * (1 << 30) / (ms * 1e-3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="1b,8b")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS, help="NAME=nn-to-coda options, ';'-separated")
    ap.add_argument("--tune", choices=("short", "full", "off"), default="short")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu", action="store_true", help="interpreter at the tiny shape: checks and bytes, no timing")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    if args.cpu:
        os.environ["TRITON_INTERPRET"] = "1"
        args.shapes = "smoke"
    import torch
    import triton

    import coda_ir
    from coda_ir import testing
    from bench_block import SHAPES, peak_mib, set_tuning
    from generate import nn_llama_block

    dev = "cpu" if args.cpu else "cuda"
    variants = parse_variants(args.variants)
    report: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "gpu": torch.cuda.get_device_name() if dev == "cuda" else "cpu (Triton interpreter)",
                    "torch": torch.__version__, "triton": triton.__version__, "argv": sys.argv[1:],
                    "tuning": set_tuning(args.tune), "variants": variants, "shapes": {}}
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        (out_dir / "bwd_passes.json").write_text(json.dumps(report, indent=1, default=str))

    if dev == "cuda":
        report["copy_bytes_per_s"] = bw = copy_bandwidth()
        print(f"copy bandwidth {bw / 1e12:.3f} TB/s", flush=True)
    else:
        bw = None
    failed = False
    for key in [k for k in args.shapes.split(",") if k]:
        s = SHAPES[key]
        text = nn_llama_block(s, fname="llama_block")
        inputs = testing.random_inputs(text, seed=0, device=dev)
        ups = testing.random_upstream(text, seed=0, device=dev)
        row: dict = {"variants": {}, "cublas_ms": {}}
        report["shapes"][key] = row
        runs = {}
        for name, opts in variants.items():
            rec: dict = {"pipeline": pipeline_of(opts)}
            row["variants"][name] = rec
            t0 = time.perf_counter()
            prog = coda_ir.compile(text, pipeline=rec["pipeline"])
            rec["compile_s"] = time.perf_counter() - t0
            fwd, bwd = prog.llama_block_fwd, prog.llama_block_bwd
            t0 = time.perf_counter()
            try:
                results = testing.check_gradients(prog, text, inputs, upstream=ups)
                rec["check_ok"] = True
            except AssertionError as exc:
                results = getattr(exc, "results", [])
                rec["check_ok"] = False
                rec["check_error"] = str(exc)[:3000]
                failed = True
            rec["first_call_and_check_s"] = time.perf_counter() - t0
            rec["checks"] = [(r.name, r.error, r.bound, r.ratio) for r in results]
            worst = max((r.ratio for r in results), default=float("nan"))
            print(f"[{key} {name}] {rec['pipeline']}: check {'ok' if rec['check_ok'] else 'FAILED'} "
                  f"(worst error/bound {worst:.3f}), compile {rec['compile_s']:.1f} s", flush=True)
            rec["kernels"] = kernel_table(prog, "llama_block_bwd")
            save()
            if not rec["check_ok"] or dev != "cuda":
                for kname, k in rec["kernels"].items():
                    print(f"    {kname:34s} {k['bytes'] / 1e6:9.1f} MB  {k['origin']}", flush=True)
                continue
            saved = fwd(*inputs)[2:]

            def fb(fwd=fwd, bwd=bwd):
                o = fwd(*inputs)
                return o, bwd(*o[2:], *ups)

            times = profile(lambda: bwd(*saved, *ups), args.iters)
            for kname, k in rec["kernels"].items():
                k["ms"] = times.get(kname)
                if k["ms"] is not None and k["gemm"] is None:
                    k["bound_ms"] = k["bytes"] / bw * 1e3
                    k["x_bound"] = k["ms"] / k["bound_ms"] if k["bound_ms"] else None
            rec["bwd_kernel_sum_ms"] = sum(k["ms"] or 0.0 for k in rec["kernels"].values())
            rec["bwd_non_gemm_ms"] = sum(k["ms"] or 0.0 for k in rec["kernels"].values() if k["gemm"] is None)
            rec["bwd_non_gemm_bound_ms"] = sum(k.get("bound_ms") or 0.0 for k in rec["kernels"].values())
            del saved
            rec["peak_mib_fwd_bwd"] = peak_mib(fb, dev)
            runs[name] = (fwd, bwd)
            save()
        if dev != "cuda":
            continue
        from triton.testing import do_bench

        for rec in row["variants"].values():
            for k in rec.get("kernels", {}).values():
                if k["gemm"] and tuple(k["gemm"]) not in map(tuple, row["cublas_ms"].get("shapes", [])):
                    m, n, kk = k["gemm"]
                    a = torch.randn(m, kk, device=dev, dtype=torch.bfloat16)
                    b = torch.randn(kk, n, device=dev, dtype=torch.bfloat16)
                    row["cublas_ms"].setdefault("shapes", []).append([m, n, kk])
                    row["cublas_ms"][f"{m}x{n}x{kk}"] = do_bench(lambda: a @ b, warmup=10, rep=60)
                    del a, b
                if k["gemm"]:
                    k["cublas_ms"] = row["cublas_ms"][f"{k['gemm'][0]}x{k['gemm'][1]}x{k['gemm'][2]}"]
        samples: dict[str, list[float]] = {name: [] for name in runs}
        names = list(runs)
        held = {name: fwd(*inputs)[2:] for name, (fwd, _) in runs.items()}
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                bwd = runs[name][1]
                samples[name].append(do_bench(lambda: bwd(*held[name], *ups), warmup=10, rep=100, return_mode="median"))
        del held
        row["bwd_do_bench_ms"] = samples
        row["bwd_median_ms"] = {n: statistics.median(v) for n, v in samples.items()}
        save()
        del runs
        torch.cuda.empty_cache()
    save()
    for key, row in report["shapes"].items():
        print(f"\n== {key}: backward kernels (ms; non-GEMM: bytes and x the copy bound; GEMM: x cuBLAS)")
        for name, rec in row["variants"].items():
            if "bwd_kernel_sum_ms" not in rec:
                continue
            print(f"-- {name} ({rec['pipeline']}): kernel sum {rec['bwd_kernel_sum_ms']:.3f} ms, non-GEMM "
                  f"{rec['bwd_non_gemm_ms']:.3f} ms (bound {rec['bwd_non_gemm_bound_ms']:.3f}), "
                  f"do_bench {row.get('bwd_median_ms', {}).get(name, float('nan')):.3f} ms, "
                  f"peak fwd+bwd {rec.get('peak_mib_fwd_bwd')} MiB")
            for kname, k in rec["kernels"].items():
                ms = k.get("ms")
                if ms is None:
                    continue
                if k["gemm"]:
                    extra = f"x{ms / k['cublas_ms']:.2f} cuBLAS {k['cublas_ms']:.3f}" if k.get("cublas_ms") else ""
                else:
                    extra = f"{k['bytes'] / 1e6:8.1f} MB bound {k['bound_ms']:.4f} x{k['x_bound']:.2f}"
                print(f"   {ms:8.4f}  {extra:34s} {k['origin'][:90]}")
        if "bwd_median_ms" in row:
            print(f"-- whole backward (do_bench medians, {args.rounds} rounds): {json.dumps(row['bwd_median_ms'])}")
    if failed:
        print("\nFAILED: a variant failed its float64 check")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
