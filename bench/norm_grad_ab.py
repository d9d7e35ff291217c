"""Kernel A/B of where the RMSNorm backward runs (issue 11, session 10): the derived LLaMA block's
backward compiled with `nn-to-coda{norm-grad=epilogue}` and `{norm-grad=separate}` in one process,
per kernel (torch.profiler means) and the whole backward function (`do_bench`, alternating order),
beside the plain cuBLAS GEMMs of the two dgrads that carry the norm backward, and the IO model's
prediction of each.

    python bench/norm_grad_ab.py --shapes 1b,8b --tune short [--rounds 3] [--out DIR]

Kernels are named by their origin (`coda.origin`, in the walk order the Triton kernel names
`_<fn>_k<i>_<kind>` count); a launch group's time is its members' together.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "programs"))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

import coda_ir  # noqa: E402
from coda_ir import testing  # noqa: E402
from coda_ir.analysis import io_plans  # noqa: E402
from bench_block import SHAPES, set_tuning  # noqa: E402
from generate import nn_llama_block  # noqa: E402

MODES = ("epilogue", "separate")
KERNELS = ("coda.gemm", "coda.elementwise", "coda.fold")


def kernel_origins(program, fn: str) -> dict[str, str]:
    """Triton kernel name -> origin for the kernels of `fn` (groups named by their members)."""
    out: dict[str, str] = {}
    for f in program.ir.body.block.ops:
        if getattr(f, "sym_name", None) is None or f.sym_name.data != fn:
            continue
        i, g = 0, 0
        for op in f.walk():
            if op.name == "coda.launch_group":
                members = [m for m in op.walk() if m.name in KERNELS]
                out[f"_{fn}_g{g}_launch_group"] = " | ".join(
                    m.attributes["coda.origin"].data if "coda.origin" in m.attributes else m.name for m in members)
                g += 1
            elif op.name in KERNELS:
                kind = op.name.split(".")[1]
                out[f"_{fn}_k{i}_{kind}"] = op.attributes["coda.origin"].data if "coda.origin" in op.attributes else op.name
                i += 1
    return out


def profile(fn, iters: int) -> dict[str, float]:
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="1b,8b")
    ap.add_argument("--tune", choices=("short", "full", "off"), default="short")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    from triton.testing import do_bench
    import triton

    report: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "gpu": torch.cuda.get_device_name(),
                    "torch": torch.__version__, "triton": triton.__version__, "tuning": set_tuning(args.tune), "shapes": {}}
    for key in [k for k in args.shapes.split(",") if k]:
        s = SHAPES[key]
        text = nn_llama_block(s, fname="llama_block")
        inputs = testing.random_inputs(text, seed=0, device="cuda")
        ups = testing.random_upstream(text, seed=0, device="cuda")
        row: dict = {"modes": {}}
        report["shapes"][key] = row
        m, d, f = s.m, s.d, s.f
        q = (s.hq + 2 * s.hkv) * s.hd
        row["model"] = {}
        for name, k in (("qkv_dgrad", q), ("gate_up_dgrad", 2 * f)):
            dec = io_plans.norm_grad_plan(m, d, K=k)
            row["model"][name] = {"choice": dec.choice, **{p: c.time_s * 1e3 for p, c in dec.costs.items()},
                                  "kernels": {p: [(kc.kernel.name, kc.time_s * 1e3) for kc in c.kernels]
                                              for p, c in dec.costs.items()}}
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(k, d, device="cuda", dtype=torch.bfloat16)
            row[f"cublas_{name}_ms"] = do_bench(lambda: a @ b, warmup=10, rep=60)
            del a, b
        runs = {}
        for mode in MODES:
            t0 = time.perf_counter()
            prog = coda_ir.compile(text, pipeline=f"nn-autodiff,nn-to-coda{{norm-grad={mode}}}")
            fwd, bwd = prog.llama_block_fwd, prog.llama_block_bwd
            saved = fwd(*inputs)[2:]
            bwd(*saved, *ups)
            torch.cuda.synchronize()
            rec = {"compile_and_first_s": time.perf_counter() - t0}
            names = kernel_origins(prog, "llama_block_bwd")
            times = profile(lambda: bwd(*saved, *ups), args.iters)
            rec["kernels"] = [(k, names.get(k, "?"), t) for k, t in times.items()]
            rec["bwd_kernel_sum_ms"] = sum(t for k, t in times.items() if k in names)
            row["modes"][mode] = rec
            runs[mode] = (bwd, saved)
            print(f"[{key} {mode}] bwd kernel sum {rec['bwd_kernel_sum_ms']:.3f} ms", flush=True)
            for k, o, t in sorted(rec["kernels"], key=lambda r: -r[2]):
                print(f"  {t:8.4f}  {k:40s} {o}", flush=True)
        # whole backward function, alternating order
        samples: dict[str, list[float]] = {mode: [] for mode in MODES}
        for r in range(args.rounds):
            order = MODES if r % 2 == 0 else MODES[::-1]
            for mode in order:
                bwd, saved = runs[mode]
                samples[mode].append(do_bench(lambda: bwd(*saved, *ups), warmup=10, rep=100))
        row["bwd_do_bench_ms"] = samples
        print(f"[{key}] bwd do_bench rounds: {json.dumps(samples)}", flush=True)
        print(f"[{key}] cublas qkv {row['cublas_qkv_dgrad_ms']:.3f} gate/up {row['cublas_gate_up_dgrad_ms']:.3f}; "
              f"model {json.dumps({k: {p: round(v, 4) for p, v in r.items() if p in MODES} for k, r in row['model'].items()})}",
              flush=True)
        del runs
        torch.cuda.empty_cache()
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "norm_grad_ab.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
