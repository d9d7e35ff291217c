"""Hand-built LLaMA block fixtures for the IO cost model (`io_model`): the NN_DIALECT.md block
one kernel per nn op, and the 4 GEMM-epilogue kernels + 2 rstd folds of EPILOGUES.md. Tests and
bench/calibrate.py compare the extracted plans against them."""

from __future__ import annotations

import math
from dataclasses import replace

from coda_ir.analysis.io_model import (
    AUX_STORE_LIVE, GPU, GemmSpec, Kernel, Tensor, as_gpu, default_tile, load_gpu, nn_op_kernel, program_cost,
)
from coda_ir.tiling import GemmConfig

# ============================================================================ reference LLaMA plans


def llama_block_unfused(M: int = 8192, D: int = 4096, F: int = 14336, Q: int = 6144, dtype: str = "bf16",
                        head_dim: int = 128, rotary_heads: int | None = None) -> list[Kernel]:
    """The NN_DIALECT.md LLaMA block (out-proj .. next QKV + RoPE), one kernel per nn op."""
    act = lambda name, cols: Tensor(name, (M, cols), dtype)  # noqa: E731
    wt = lambda name, *shape: Tensor(name, tuple(shape), dtype, "weight")  # noqa: E731
    x0, y0 = act("x0", D), act("y0", D)
    wo, wn0, wgu, wd, wn1, wqkv = wt("wo", D, D), wt("wn0", D), wt("wgu", 2 * F, D), wt("wd", D, F), wt("wn1", D), wt("wqkv", Q, D)
    pos = Tensor("pos", (M,), "i32")
    a, x1, h1, z, g, d, x2, h2, q, r = (
        act("a", D), act("x1", D), act("h1", D), act("z", 2 * F), act("g", F), act("d", D), act("x2", D),
        act("h2", D), act("q", Q), act("r", Q),
    )
    heads = rotary_heads if rotary_heads is not None else Q // head_dim
    return [
        nn_op_kernel("nn.linear", [y0, wo], a),
        nn_op_kernel("nn.add", [x0, a], x1),
        nn_op_kernel("nn.rms_norm", [x1, wn0], h1),
        nn_op_kernel("nn.linear", [h1, wgu], z),
        nn_op_kernel("nn.swiglu", [z], g),
        nn_op_kernel("nn.linear", [g, wd], d),
        nn_op_kernel("nn.add", [x1, d], x2),
        nn_op_kernel("nn.rms_norm", [x2, wn1], h2),
        nn_op_kernel("nn.linear", [h2, wqkv], q),
        nn_op_kernel("nn.rope", [q, pos], r, head_dim=head_dim, rotary_heads=heads),
    ]


def llama_block_fused(M: int = 8192, D: int = 4096, F: int = 14336, Q: int = 6144, dtype: str = "bf16",
                      store_preactivation: bool = False, tile: GemmConfig | None = None, gpu: GPU | str | None = None,
                      head_dim: int = 128) -> list[Kernel]:
    """The compiled forward of EPILOGUES.md / coda_digest section 4: 4 GEMM-epilogue kernels
    and 2 rstd folds. `store_preactivation` also stores z (gate/up pre-activation) for
    backward, as CODA's training forward does."""
    gpu = as_gpu(gpu)
    act = lambda name, cols, dt=dtype: Tensor(name, (M, cols), dt)  # noqa: E731
    wt = lambda name, *shape: Tensor(name, tuple(shape), dtype, "weight")  # noqa: E731
    x0, y0 = act("x0", D), act("y0", D)
    wo, wn0, wgu, wd, wn1, wqkv = wt("wo", D, D), wt("wn0", D), wt("wgu", 2 * F, D), wt("wd", D, F), wt("wn1", D), wt("wqkv", Q, D)
    pos = Tensor("pos", (M,), "i32")
    inv_freq = Tensor("inv_freq", (head_dim // 2,), "f32", "weight")

    def partials(name: str, kernel: Kernel) -> Tensor:
        t = tile or default_tile(kernel, gpu)
        return Tensor(name, (M, math.ceil(D / t.bn)), "f32", "partials")

    def producer(name: str, a: Tensor, w: Tensor, res: Tensor, wn: Tensor, x: str, h: str, s: str, ops: tuple[str, ...]):
        base = Kernel(name, "gemm", gemm=GemmSpec(M, D, a.shape[1], a, w), tile=tile, live_tiles=1.0 + AUX_STORE_LIVE)
        part = partials(s, base)
        # accumulate (1), h = x*w (1), x^2 and sum (2) per element
        return replace(base, reads=(res, wn), writes=(act(x, D), act(h, D), part), epilogue_flops=4.0 * M * D,
                       ops=ops, notes=("partial sumsq", "aux store h = x*w")), part

    def fold(name: str, part: Tensor, r: str, ops: tuple[str, ...]) -> Kernel:
        return Kernel(name, "fold", (part,), (Tensor(r, (M,), "f32"),),
                      epilogue_flops=float(part.numel + 2 * M), sfu_ops=float(M), ops=ops, notes=("fold partials",))

    f1, s1 = producer("F1", y0, wo, x0, wn0, "x1", "h1", "S1", ("nn.linear:a", "nn.add:x1", "nn.rms_norm:h1/stats"))
    k1 = fold("rstd1", s1, "rstd1", ("nn.rms_norm:h1/fold",))
    rstd1 = k1.writes[0]
    f2_writes = (act("z", 2 * F), act("g", F)) if store_preactivation else (act("g", F),)
    f2 = Kernel("F2", "gemm", (rstd1,), f2_writes, gemm=GemmSpec(M, 2 * F, D, act("h1", D), wgu), tile=tile,
                epilogue_flops=(1 + 5 / 2) * M * 2 * F, sfu_ops=2.0 * M * F,
                live_tiles=1.0 + (AUX_STORE_LIVE * 0.5 if store_preactivation else 0.0),
                ops=("nn.rms_norm:h1/scale", "nn.linear:z", "nn.swiglu:g"), notes=("deferred rstd scale",))
    f3, s2 = producer("F3", act("g", F), wd, act("x1", D), wn1, "x2", "h2", "S2", ("nn.linear:d", "nn.add:x2", "nn.rms_norm:h2/stats"))
    k2 = fold("rstd2", s2, "rstd2", ("nn.rms_norm:h2/fold",))
    rstd2 = k2.writes[0]
    rotated = M * head_dim * (Q // head_dim)
    f4 = Kernel("F4", "gemm", (rstd2, pos, inv_freq), (act("r", Q),), gemm=GemmSpec(M, Q, D, act("h2", D), wqkv), tile=tile,
                epilogue_flops=M * Q + 4.0 * rotated, sfu_ops=float(rotated), live_tiles=1.0,
                ops=("nn.rms_norm:h2/scale", "nn.linear:q", "nn.rope:r"), notes=("deferred rstd scale",))
    return [f1, k1, f2, f3, k2, f4]


if __name__ == "__main__":  # python -m coda_ir.analysis.io_fixtures --gpu h200
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100")
    args = parser.parse_args()
    gpu = load_gpu(args.gpu)
    unfused, fused = program_cost(llama_block_unfused(), gpu), program_cost(llama_block_fused(gpu=gpu), gpu)
    print(f"LLaMA-8B block forward: unfused {unfused.time_s * 1e3:.3f} ms ({unfused.hbm_unique / 1e9:.3f} GB), "
          f"fused {fused.time_s * 1e3:.3f} ms ({fused.hbm_unique / 1e9:.3f} GB)")
