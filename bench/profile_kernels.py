"""Per-kernel GPU times of a compiled program (torch.profiler), beside the plain cuBLAS GEMM of
each GEMM kernel's shape: where a derived forward+backward spends its time.

    python bench/profile_kernels.py --shape 1b [--out DIR]

Compiles the LLaMA block at the shape with `nn-autodiff,nn-to-coda`, runs `@f_fwd` and
`@f_bwd` a few times under torch.profiler and prints every kernel's mean time (launch order),
then the plain GEMMs (`torch.matmul` on same-shaped operands, transposes as the kernel has them).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "programs"))

import torch  # noqa: E402

import coda_ir  # noqa: E402
from coda_ir import testing  # noqa: E402
from coda_ir.dialects import coda  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from bench_block import SHAPES, set_tuning  # noqa: E402
from generate import nn_llama_block  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="1b", choices=sorted(SHAPES))
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--pipeline", default="nn-autodiff,nn-to-coda")
    ap.add_argument("--no-plain", action="store_true", help="skip timing the plain GEMMs")
    ap.add_argument("--tune", choices=("short", "full", "off"), default="full",
                    help="bound the coda GEMM autotuner as bench_block.py --tune does")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    set_tuning(args.tune)
    s = SHAPES[args.shape]
    text = nn_llama_block(s, fname="llama_block")
    program = coda_ir.compile(text, pipeline=args.pipeline)
    dev = "cuda"
    inputs = testing.random_inputs(text, seed=0, device=dev)
    ups = testing.random_upstream(text, seed=0, device=dev)
    fwd = program.llama_block_fwd(*inputs)
    saved = fwd[2:]
    program.llama_block_bwd(*saved, *ups)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.iters):
            out = program.llama_block_fwd(*inputs)
            program.llama_block_bwd(*out[2:], *ups)
        torch.cuda.synchronize()
    rows = []
    for ev in prof.key_averages():
        if ev.device_type.name != "CUDA" or ev.count == 0:
            continue
        total = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0.0)
        rows.append((ev.key, ev.count // args.iters, total / ev.count / 1000.0))
    rows.sort(key=lambda r: -r[2] * r[1])
    # plain GEMMs of every coda.gemm in the compiled module
    module = program.ir
    plain = []
    if module is not None and not args.no_plain:
        for f in module.body.block.ops:
            name = getattr(f, "sym_name", None)
            for op in f.walk():
                if isinstance(op, coda.GemmOp):
                    m, n, kk = op.problem_shape()
                    a = torch.randn(m, kk, device=dev, dtype=torch.bfloat16)
                    b = torch.randn(kk, n, device=dev, dtype=torch.bfloat16)
                    from triton.testing import do_bench

                    t = do_bench(lambda: a @ b, warmup=10, rep=50)
                    plain.append((name.data if name else "?", op.attributes.get("coda.origin").data
                                  if "coda.origin" in op.attributes else "gemm", m, n, kk, t))
    print("kernel                                                                   calls   mean ms")
    origins = {}
    for f in module.body.block.ops:
        for op in f.walk():
            if "coda.origin" in op.attributes and op.name in ("coda.elementwise", "coda.gemm", "coda.fold"):
                origins.setdefault(op.attributes["coda.origin"].data, None)
    for key, cnt, t in rows:
        print(f"{key[:72]:72s} {cnt:6d} {t:9.4f}")
    print("origins in order:", list(origins))
    print("\nplain cuBLAS GEMM per coda.gemm (function, origin, M, N, K, ms)")
    for row in plain:
        print(row)
    tag = "" if args.pipeline == "nn-autodiff,nn-to-coda" else "_" + "".join(c if c.isalnum() else "_" for c in args.pipeline)
    with open(Path(args.out) / f"profile_{args.shape}{tag}.json", "w") as fh:
        json.dump({"kernels": rows, "plain": plain}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
