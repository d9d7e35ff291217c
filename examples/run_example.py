#!/usr/bin/env python3
"""Compile a bundled example end to end and check it against PyTorch.

    python examples/run_example.py              # GPU when present, else the Triton interpreter
    python examples/run_example.py --cpu        # force the interpreter (small size)
    python examples/run_example.py --no-bench   # GPU: skip the timing table

The example is the non-attention part of a LLaMA block written in the nn dialect
(examples/llama_block.mlir: LLaMA-3-8B shapes, bf16). `coda_ir.compile` runs the nn-to-coda
pipeline (deferred RMSNorms, residual adds, SwiGLU and RoPE fused into GEMM epilogues), emits
Triton and runs it. On a GPU the real shapes run, are checked against the float64 op-by-op
reference with the numerics bar of NN_DIALECT.md, and are timed against PyTorch eager and the
block's plain cuBLAS GEMMs. Without a GPU the same block, generated from the same template at a
small size, runs through the Triton interpreter (well under a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402


def small_llama_block() -> tuple[str, str]:
    """(mlir text, description) of the LLaMA block at a size the interpreter runs quickly."""
    try:
        sys.path.insert(0, str(ROOT / "tests" / "programs"))
        from generate import Llama, nn_llama_block  # the template examples/llama_block.mlir comes from

        s = Llama("interpreter size", m=128, d=256, f=384, hd=64, hq=2, hkv=1, eps=1e-5, theta=500000.0)
        return nn_llama_block(s), f"M={s.m} tokens, D={s.d}, F={s.f}, {s.hq}+{s.hkv} heads of {s.hd}"
    except Exception:  # pragma: no cover - a checkout without the generator
        path = ROOT / "tests" / "programs" / "nn" / "llama_block.mlir"
        return path.read_text(), f"{path.relative_to(ROOT)}"


def eager_llama_block(x0, y0, wo, wn0, wgu, wd, wn1, wqkv, pos, hd=128, rot_heads=40, theta=500000.0, eps=1e-5):
    """The same block in PyTorch eager (bf16), for timing."""
    F = torch.nn.functional
    x1 = x0 + F.linear(y0, wo)
    h1 = F.rms_norm(x1, (x1.shape[1],), wn0, eps)
    z = F.linear(h1, wgu)
    f = z.shape[1] // 2
    g = F.silu(z[:, :f]) * z[:, f:]
    x2 = x1 + F.linear(g, wd)
    h2 = F.rms_norm(x2, (x2.shape[1],), wn1, eps)
    q = F.linear(h2, wqkv)
    m = q.shape[0]
    heads = q.view(m, -1, hd)
    inv = theta ** (-torch.arange(0, hd // 2, device=q.device, dtype=torch.float32) * 2 / hd)
    ang = pos.float()[:, None] * inv[None, :]
    cos, sin = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
    r = heads[:, :rot_heads].float()
    a, b = r[..., : hd // 2], r[..., hd // 2 :]
    rotated = torch.cat([a * cos - b * sin, b * cos + a * sin], -1).to(q.dtype)
    out = torch.cat([rotated, heads[:, rot_heads:]], 1).view(m, -1)
    return x2, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="run through the Triton interpreter even if a GPU is present")
    parser.add_argument("--no-bench", action="store_true", help="on the GPU, skip the timing table")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--remarks", action="store_true", help="print the compiler's remarks (why a rewrite did not fire)")
    args = parser.parse_args()

    gpu = torch.cuda.is_available() and not args.cpu
    if not gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported
    import coda_ir
    from coda_ir.testing import check_against_reference, format_table, random_inputs

    if gpu:
        text = (ROOT / "examples" / "llama_block.mlir").read_text()
        what = "examples/llama_block.mlir (LLaMA-3-8B: M=8192, D=4096, F=14336, 32+8 heads of 128)"
        device = "cuda"
    else:
        text, size = small_llama_block()
        what = f"the LLaMA block of examples/llama_block.mlir at {size}"
        device = "cpu"
    print(f"== {what}")
    print(f"== device: {torch.cuda.get_device_name() if gpu else 'CPU (Triton interpreter)'}")

    t0 = time.perf_counter()
    # diagnostics name the example's file: the small program is generated from the same
    # template, line for line; remarks (the IO model's choices, for an H100) only with --remarks
    program = coda_ir.compile(text, pipeline="nn-to-coda", name="examples/llama_block.mlir", remarks=args.remarks)
    t1 = time.perf_counter()
    n_kernels = program.kernel_count("llama_block")
    print(f"compiled nn -> coda -> Triton in {t1 - t0:.1f} s: {n_kernels} kernel launches per call "
          f"({program.source.count('@triton.jit') } jit functions, {len(program.source.splitlines())} lines of Triton)")
    from coda_ir.analysis.fusion_plan import to_text
    from coda_ir.analysis.io_extract import extract_module

    print("fusion: the nn ops each kernel runs (coda-opt FILE -t 'fusion-plan{format=text}'):")
    print(to_text(extract_module(program.ir)), end="")

    with tempfile.NamedTemporaryFile("w", suffix=".mlir", delete=False) as f:
        f.write(text)
        path = f.name
    inputs = random_inputs(path, args.seed, device=device)
    t2 = time.perf_counter()
    outputs = program.llama_block(*inputs)
    if gpu:
        torch.cuda.synchronize()
    t3 = time.perf_counter()
    print(f"ran in {t3 - t2:.1f} s (first call: {'compilation and autotuning' if gpu else 'interpreter'} included)")

    # the reference runs op by op in float64 on the CPU (at 8B shapes: ~3.6 TFLOP, under a minute)
    t4 = time.perf_counter()
    results = check_against_reference(path, [x.cpu() for x in inputs], [o.cpu() for o in outputs])
    print(f"reference computed in {time.perf_counter() - t4:.1f} s")
    os.unlink(path)
    print("correctness against the float64 PyTorch reference (bar: max|out - ref64| <= 2 max|ref_bf16 - ref64| + 1e-6 max|ref64|):")
    print(format_table(results))
    ok = all(r.ok for r in results)

    if gpu and not args.no_bench:
        import triton.testing

        def ms(fn):
            return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")

        x0, y0, wo, wn0, wgu, wd, wn1, wqkv, pos = inputs
        t_coda = ms(lambda: program.llama_block(*inputs))
        t_eager = ms(lambda: eager_llama_block(*inputs))
        h = torch.randn_like(x0)
        g = torch.randn(x0.shape[0], wd.shape[1], device="cuda", dtype=x0.dtype)

        def gemms():
            torch.matmul(y0, wo.T)
            torch.matmul(h, wgu.T)
            torch.matmul(g, wd.T)
            torch.matmul(h, wqkv.T)

        t_gemm = ms(gemms)
        print(f"timing (median ms): coda {t_coda:.3f}   PyTorch eager {t_eager:.3f}   plain cuBLAS GEMMs {t_gemm:.3f}")
        print(f"coda / plain GEMMs = {t_coda / t_gemm:.3f}x   eager / coda = {t_eager / t_coda:.2f}x")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
