"""The compiled LLaMA block forward against its plain GEMMs, PyTorch eager and torch.compile.

    python bench/bench_block.py [--out DIR] [--modes default,max-autotune-no-cudagraphs]
    python bench/bench_block.py --smoke      # CPU interpreter, small shapes, no timing

One run, one GPU: compile `examples/llama_block.mlir` (8B shape) with the default nn-to-coda
pipeline, check every output against the float64 op-by-op reference with the NN_DIALECT.md bar,
then time side by side (`do_bench` medians, rounds in rotating order):
  * coda: the compiled block (all its kernels, one host call),
  * plain GEMMs: the block's four cuBLAS GEMMs alone (`F.linear`), the speed of light,
  * eager: the same block written idiomatically in PyTorch (HF-style fp32 RMSNorm),
  * torch.compile of that function in each requested mode.
Prints a table last; writes JSON to --out.
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

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def rope_half(q: torch.Tensor, pos: torch.Tensor, head_dim: int, rotary_heads: int, theta: float) -> torch.Tensor:
    m = q.shape[0]
    half = head_dim // 2
    inv_freq = theta ** (-torch.arange(0, half, device=q.device, dtype=torch.float32) * 2.0 / head_dim)
    angle = pos.float()[:, None] * inv_freq[None, :]
    cos, sin = angle.cos()[:, None, :], angle.sin()[:, None, :]
    rot = q[:, : rotary_heads * head_dim].float().view(m, rotary_heads, head_dim)
    a, b = rot[..., :half], rot[..., half:]
    out = torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1).view(m, rotary_heads * head_dim)
    return torch.cat([out.to(q.dtype), q[:, rotary_heads * head_dim :]], dim=1)


def llama_block_eager(x0, y0, wo, wn0, wgu, wd, wn1, wqkv, pos, *, eps, head_dim, rotary_heads, theta):
    x1 = x0 + F.linear(y0, wo)
    z = F.linear(rms_norm(x1, wn0, eps), wgu)
    f = z.shape[1] // 2
    x2 = x1 + F.linear(F.silu(z[:, :f]) * z[:, f:], wd)
    q = F.linear(rms_norm(x2, wn1, eps), wqkv)
    return x2, rope_half(q, pos, head_dim, rotary_heads, theta)


def block_properties(fn) -> dict:
    props = {}
    for op in fn.body.blocks[0].ops:
        if op.name == "nn.rms_norm":
            props["eps"] = op.properties["eps"].value.data
        if op.name == "nn.rope":
            props["head_dim"] = op.properties["head_dim"].value.data
            props["rotary_heads"] = op.properties["rotary_heads"].value.data
            props["theta"] = op.properties["theta"].value.data
    return props


def timed_rounds(fns: dict, rounds: int) -> dict[str, float]:
    import triton.testing

    samples: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            samples[name].append(triton.testing.do_bench(fns[name], warmup=25, rep=200, return_mode="median"))
    return {name: statistics.median(v) for name, v in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", nargs="?", default=str(ROOT / "examples" / "llama_block.mlir"))
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter at small shapes, correctness only")
    parser.add_argument("--modes", default="default,max-autotune-no-cudagraphs")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()

    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        args.file = str(ROOT / "tests" / "programs" / "nn" / "llama_block.mlir")
    import coda_ir
    from coda_ir.reference import load_func, reference_pair
    from coda_ir.testing import check_close, random_inputs

    device = "cpu" if args.smoke else "cuda"
    fn = load_func(args.file)
    props = block_properties(fn)
    t0 = time.perf_counter()
    compiled = coda_ir.compile(args.file)
    name = fn.sym_name.data
    run = getattr(compiled, name)
    inputs = random_inputs(fn, seed=1, device=device)
    outputs = run(*inputs)  # first call: Triton compiles and the GEMM autotuner runs
    if device == "cuda":
        torch.cuda.synchronize()
    print(f"compile + first call: {time.perf_counter() - t0:.1f} s, {compiled.kernel_count(name)} kernel launches")

    ref64, ref_t = reference_pair(fn, inputs)
    eager_out = llama_block_eager(*inputs, **props)
    report = {"file": args.file, "kernels": compiled.kernel_count(name), "checks": []}
    ok_all = True
    for i, (out, r64, rt, eg) in enumerate(zip(outputs, ref64, ref_t, eager_out)):
        ok, err, bound = check_close(out, r64, rt)
        eager_ok, eager_err, _ = check_close(eg, r64, rt)
        ok_all &= ok
        report["checks"].append({"output": i, "ok": ok, "error": err, "bound": bound, "eager_error": eager_err})
        print(f"output {i}: max|coda - ref64| = {err:.3e} (bar {bound:.3e}) {'OK' if ok else 'FAIL'}; "
              f"eager error {eager_err:.3e}")
    del ref64, ref_t
    if not ok_all:
        raise SystemExit("correctness check failed: not timing a wrong program")
    if args.smoke:
        print("smoke run OK")
        return

    x0, y0, wo, wn0, wgu, wd, wn1, wqkv, pos = inputs
    m = x0.shape[0]
    h = torch.randn_like(x0)
    g = torch.randn(m, wd.shape[1], device=device, dtype=x0.dtype)

    def plain_gemms():
        F.linear(y0, wo)
        F.linear(h, wgu)
        F.linear(g, wd)
        F.linear(h, wqkv)

    fns = {"coda": lambda: run(*inputs), "plain GEMMs": plain_gemms,
           "eager": lambda: llama_block_eager(*inputs, **props)}
    for mode in [m_ for m_ in args.modes.split(",") if m_]:
        compiled_fn = torch.compile(llama_block_eager, mode=mode, fullgraph=True, dynamic=False)
        t1 = time.perf_counter()
        for _ in range(3):
            compiled_fn(*inputs, **props)
        torch.cuda.synchronize()
        print(f"torch.compile({mode}) warm-up: {time.perf_counter() - t1:.1f} s")
        fns[f"torch.compile {mode}"] = (lambda f=compiled_fn: f(*inputs, **props))
    times = timed_rounds(fns, args.rounds)
    base = times["plain GEMMs"]
    flops = 2 * m * wo.shape[1] * (wo.shape[0] + wgu.shape[0] + wqkv.shape[0]) + 2 * m * wd.shape[1] * wd.shape[0]
    report.update({
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "times_ms": times,
    })
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "bench_block.json").write_text(json.dumps(report, indent=2))
    print(f"\n{report['gpu']}, torch {report['torch']}, triton {report['triton']}, {report['date']}")
    print(f"{'variant':<42} {'ms':>8} {'x plain GEMMs':>14} {'GEMM TFLOP/s':>13}")
    for key, ms in times.items():
        print(f"{key:<42} {ms:8.3f} {ms / base:14.3f} {flops / ms / 1e9:13.0f}")


if __name__ == "__main__":
    main()
