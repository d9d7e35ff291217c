"""References of the hand-written coda programs in tests/programs/coda (one function per program).

Each function takes the program's inputs in the program's argument order (see the header comment
of the .mlir file, repeated in each docstring) and returns its results in order, computed op by op
exactly as the program's kernels compute them:

* `compute=torch.float64` (the default): every input is converted to float64 and everything stays
  float64 -- no rounding anywhere. This is `ref64` of the numerics bar.
* `compute=torch.float32`: every kernel computes in fp32 from the (rounded) values earlier kernels
  stored, and every stored result is rounded once to its declared element type (the activation
  dtype -- that of the first input, bf16 for these programs -- for matrices and weight gradients,
  float32 for rstd / statistics / lse / loss). This is `ref_T` of the bar: what a compiled
  program computes up to fp32 summation order and transcendental ulps.

Use `reference_pair(name, inputs) -> (ref64, ref_T)` and `coda_ir.testing.assert_matches`.

Input conventions (all programs): every tensor is in the user's layout; the `interleave` /
`interleave_wide` of a gemm only changes which accumulator column holds which product (the
mainloop reads weight row perm(c), perm: within groups of 2h, c = 2i + j -> i + j*h) and where
N-wide (2N-wide) tensors are read and written -- at perm(c) -- so it never changes the math and
the references ignore it: `wgu` is [gate rows | up rows], `z1` / `dz1` / `dwgu` are [gate | up].
Constants that the programs write as f32 (`eps`, theta, the GELU constants) are used at their f32
value. RoPE angles are `pos * theta ** (-2i / hd)` with i = c mod hd (c the first column of the
pair (c, c + hd/2)); columns >= rotary_heads * hd have angle 0.

`make_inputs(name, seed)` builds consistent random inputs (for llama_bwd: the saved tensors come
from llama_fwd's fp32/bf16 reference, so they are what a real forward would have stored).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from coda_ir.reference import f32_value  # noqa: E402

__all__ = [
    "llama_fwd",
    "llama_bwd",
    "gpt2_fwd",
    "lm_head_ce",
    "gpt2_ln_vectors",
    "reference_pair",
    "make_inputs",
    "PROGRAMS",
]


# ============================================================================ numerics helper


class _K:
    """Kernel numerics: `t(x)` converts an input, `store(x, dtype)` rounds a stored result."""

    def __init__(self, compute: torch.dtype, act: torch.dtype):
        if compute not in (torch.float64, torch.float32):
            raise ValueError("compute must be torch.float64 or torch.float32")
        self.c = compute
        self.exact = compute == torch.float64
        self.act = act if act in (torch.bfloat16, torch.float16, torch.float32) else torch.bfloat16

    def t(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.c) if x.dtype.is_floating_point else x.to(torch.int64)

    def k(self, v: float) -> torch.Tensor:
        """An f32 constant of the program."""
        return torch.tensor(f32_value(v), dtype=self.c)  # 0-d: combines with tensors on any device

    def store(self, x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Round a stored result to its element type (activation dtype by default) and read it back."""
        if self.exact:
            return x
        return x.to(dtype or self.act).to(self.c)

    def out(self, x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """A program result, in its declared dtype (float64 in exact mode)."""
        return x if self.exact else x.to(dtype or self.act)


def _silu_parts(k: _K, gate: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sigmoid(gate), silu(gate)) as the programs compute them: 1 / (1 + exp(-g)), g * that."""
    den = k.k(1.0) + torch.exp(-gate)
    return k.k(1.0) / den, gate / den


def _rope(k: _K, x: torch.Tensor, pos: torch.Tensor, hd: int, rotary_heads: int, theta: float, inverse: bool) -> torch.Tensor:
    """Half-style rotation of the pairs (c, c + hd/2) of the first `rotary_heads` heads, exactly as
    the programs' pair_map bodies: inv = powf(theta, (-2i) / hd), a = float(pos) * inv."""
    m, n = x.shape
    heads = n // hd
    half = hd // 2
    i = torch.arange(half, dtype=k.c, device=x.device)
    inv = torch.pow(k.k(theta), (-2.0 * i) / k.k(float(hd)))  # [hd/2]
    angle = pos.to(k.c)[:, None, None] * inv[None, None, :]  # [M, 1, hd/2]
    rot = (torch.arange(heads, device=x.device) < rotary_heads)[None, :, None]  # [1, H, 1]
    angle = torch.where(rot, angle, torch.zeros((), dtype=k.c))  # [M, H, hd/2]
    cos, sin = torch.cos(angle), torch.sin(angle)
    xh = x.reshape(m, heads, hd)
    a, b = xh[..., :half], xh[..., half:]
    if inverse:
        oa, ob = a * cos + b * sin, b * cos - a * sin
    else:
        oa, ob = a * cos - b * sin, b * cos + a * sin
    return torch.cat([oa, ob], dim=-1).reshape(m, n)


def _rstd(k: _K, ss: torch.Tensor, d: int, eps: float) -> torch.Tensor:
    return torch.rsqrt(ss / k.k(float(d)) + k.k(eps))


# ============================================================================ LLaMA forward


def llama_fwd(
    x0, y0, wo, wn0, wgu, wd, wn1, wqkv, pos,
    *, compute: torch.dtype = torch.float64, eps: float = 1e-5, theta: float = 500000.0,
    head_dim: int = 32, rotary_heads: int = 4,
) -> tuple[torch.Tensor, ...]:
    """tests/programs/coda/llama_fwd.mlir (examples/coda: eps 1e-5, theta 5e5, head_dim 128, rotary_heads 40).

    Inputs: x0, y0 [M, D]; wo [D, D]; wn0 [D]; wgu [2F, D] ([gate rows | up rows]); wd [D, F];
    wn1 [D]; wqkv [QKV, D]; pos [M] int.
    Returns (x2, qkv, x1, z1, rstd1, rstd2): x2/x1 [M, D], qkv [M, QKV] (RoPE on the first
    rotary_heads heads), z1 [M, 2F] ([gate | up]), rstd1/rstd2 [M] (float32 in fp32 mode).
    """
    k = _K(compute, x0.dtype)
    x0, y0, wo, wn0, wgu, wd, wn1, wqkv, pos = map(k.t, (x0, y0, wo, wn0, wgu, wd, wn1, wqkv, pos))
    d = x0.shape[1]
    f = wgu.shape[0] // 2
    # F1
    x1 = y0 @ wo.T + x0
    h1 = x1 * wn0
    rstd1 = _rstd(k, (x1 * x1).sum(1), d, eps)
    x1, h1, rstd1 = k.store(x1), k.store(h1), k.store(rstd1, torch.float32)
    # F2
    z1 = (h1 @ wgu.T) * rstd1[:, None]
    _, silu = _silu_parts(k, z1[:, :f])
    y1 = silu * z1[:, f:]
    z1, y1 = k.store(z1), k.store(y1)
    # F3
    x2 = y1 @ wd.T + x1
    h2 = x2 * wn1
    rstd2 = _rstd(k, (x2 * x2).sum(1), d, eps)
    x2, h2, rstd2 = k.store(x2), k.store(h2), k.store(rstd2, torch.float32)
    # F4
    q = (h2 @ wqkv.T) * rstd2[:, None]
    qkv = _rope(k, q, pos, head_dim, rotary_heads, theta, inverse=False)
    f32 = torch.float32
    return k.out(x2), k.out(qkv), k.out(x1), k.out(z1), k.out(rstd1, f32), k.out(rstd2, f32)


# ============================================================================ LLaMA backward


def _norm_bwd(k: _K, q, x, r, s, g, dres):
    """dx = dres + r * (q * g - n * s), x_out = n * g, dg = sum_rows(q * n), n = x * r."""
    n = x * r[:, None]
    dx = (q * g - n * s[:, None]) * r[:, None] + dres
    return dx, n * g, (q * n).sum(0)


def llama_bwd(
    dqkv, dx2, qkv, x1, x2, z1, rstd1, rstd2, y0, pos, wo, wgu, wd, wqkv, wn0, wn1,
    *, compute: torch.dtype = torch.float64, theta: float = 500000.0, head_dim: int = 32, rotary_heads: int = 4,
) -> tuple[torch.Tensor, ...]:
    """tests/programs/coda/llama_bwd.mlir (examples/coda: theta 5e5, head_dim 128, rotary_heads 40).

    Inputs: dqkv [M, QKV] and dx2 [M, D] (upstream gradients of llama_fwd's qkv and x2), then
    llama_fwd's saved qkv, x1, x2, z1 ([gate | up]), rstd1, rstd2 (float32), the attention output
    y0, pos, and the weights wo, wgu ([gate | up] rows), wd, wqkv, wn0, wn1.
    Returns (dx0, dy0, dwo, dwgu, dwd, dwqkv, dwn0, dwn1) in the inputs' layouts.
    """
    k = _K(compute, dqkv.dtype)
    (dqkv, dx2, qkv, x1, x2, z1, rstd1, rstd2, y0, pos, wo, wgu, wd, wqkv, wn0, wn1) = map(
        k.t, (dqkv, dx2, qkv, x1, x2, z1, rstd1, rstd2, y0, pos, wo, wgu, wd, wqkv, wn0, wn1)
    )
    d = x1.shape[1]
    f = wd.shape[1]
    dkf = k.k(float(d))
    # B1 (elementwise) + fold
    dz2 = _rope(k, dqkv, pos, head_dim, rotary_heads, theta, inverse=True)
    zdz2 = (qkv * dqkv).sum(1) / dkf
    dz2, zdz2 = k.store(dz2), k.store(zdz2, torch.float32)
    # B2 + fold
    dxa, xo2, dwn1 = _norm_bwd(k, dz2 @ wqkv, x2, rstd2, zdz2, wn1, dx2)
    dxa, xo2, dwn1 = k.store(dxa), k.store(xo2), k.store(dwn1)
    # B3
    dwqkv = k.store(dz2.T @ xo2)
    # B4 + fold
    dy = dxa @ wd
    gate, up = z1[:, :f], z1[:, f:]
    sg, silu = _silu_parts(k, gate)
    du = dy * silu
    dg = dy * up * sg * (k.k(1.0) + gate * (k.k(1.0) - sg))
    y1 = silu * up
    zdz1 = (gate * dg + up * du).sum(1) / dkf
    dz1 = torch.cat([dg, du], dim=1)
    dz1, y1, zdz1 = k.store(dz1), k.store(y1), k.store(zdz1, torch.float32)
    # B5
    dwd = k.store(dxa.T @ y1)
    # B6 + fold
    dx0, xo1, dwn0 = _norm_bwd(k, dz1 @ wgu, x1, rstd1, zdz1, wn0, dxa)
    dx0, xo1, dwn0 = k.store(dx0), k.store(xo1), k.store(dwn0)
    # B7, B8
    dwgu = k.store(dz1.T @ xo1)
    dy0 = k.store(dx0 @ wo)
    dwo = k.store(dx0.T @ y0)
    return tuple(k.out(t) for t in (dx0, dy0, dwo, dwgu, dwd, dwqkv, dwn0, dwn1))


# ============================================================================ GPT-2 forward


GELU_K0 = math.sqrt(2.0 / math.pi)
GELU_K1 = 0.044715


def gpt2_ln_vectors(g1, b1, wfc, g2, b2, wqkv) -> tuple[torch.Tensor, ...]:
    """The deferred-LayerNorm column vectors (c1, e1, c2, e2) = (g1 @ wfc.T, b1 @ wfc.T,
    g2 @ wqkv.T, b2 @ wqkv.T), computed in float64 from the given (rounded) weights and rounded
    to float32 -- the convention of gpt2_fwd's inputs."""
    f64 = torch.float64
    c1 = g1.to(f64) @ wfc.to(f64).T
    e1 = b1.to(f64) @ wfc.to(f64).T
    c2 = g2.to(f64) @ wqkv.to(f64).T
    e2 = b2.to(f64) @ wqkv.to(f64).T
    return tuple(t.to(torch.float32) for t in (c1, e1, c2, e2))


def _ln_stats(k: _K, x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The fold: mu = sum/D, var = max(sumsq/D - mu^2, 0), r = rsqrt(var + eps), rmu = r * mu."""
    d = k.k(float(x.shape[1]))
    mu = x.sum(1) / d
    var = torch.clamp_min((x * x).sum(1) / d - mu * mu, 0.0)
    r = torch.rsqrt(var + k.k(eps))
    return r, r * mu


def _gelu_tanh(k: _K, v: torch.Tensor) -> torch.Tensor:
    inner = v + k.k(GELU_K1) * (v * v * v)
    return k.k(0.5) * v * (k.k(1.0) + torch.tanh(k.k(GELU_K0) * inner))


def gpt2_fwd(
    x0, y0, wo, bo, g1, b1, wfc, bfc, wproj, bproj, g2, b2, wqkv, bqkv, c1, e1, c2, e2,
    *, compute: torch.dtype = torch.float64, eps: float = 1e-5,
) -> tuple[torch.Tensor, ...]:
    """tests/programs/coda/gpt2_fwd.mlir (and examples/coda/gpt2_fwd.mlir: same eps).

    Inputs: x0, y0 [M, D]; wo [D, D], bo [D]; g1, b1 [D]; wfc [F, D], bfc [F]; wproj [D, F],
    bproj [D]; g2, b2 [D]; wqkv [QKV, D], bqkv [QKV]; c1, e1 [F] and c2, e2 [QKV] float32
    (`gpt2_ln_vectors`; the reference uses them as given).
    Returns (x2, qkv, x1, u, rstd1, rmu1, rstd2, rmu2): u [M, F] is the MLP pre-activation.
    """
    k = _K(compute, x0.dtype)
    (x0, y0, wo, bo, g1, b1, wfc, bfc, wproj, bproj, g2, b2, wqkv, bqkv, c1, e1, c2, e2) = map(
        k.t, (x0, y0, wo, bo, g1, b1, wfc, bfc, wproj, bproj, g2, b2, wqkv, bqkv, c1, e1, c2, e2)
    )
    f32 = torch.float32
    # G1 + fold
    x1 = (y0 @ wo.T + bo) + x0
    h1 = x1 * g1
    r1, rmu1 = _ln_stats(k, x1, eps)
    x1, h1, r1, rmu1 = k.store(x1), k.store(h1), k.store(r1, f32), k.store(rmu1, f32)
    # G2
    u = ((h1 @ wfc.T) * r1[:, None] - rmu1[:, None] * c1) + e1 + bfc
    act = _gelu_tanh(k, u)
    u, act = k.store(u), k.store(act)
    # G3 + fold
    x2 = (act @ wproj.T + bproj) + x1
    h2 = x2 * g2
    r2, rmu2 = _ln_stats(k, x2, eps)
    x2, h2, r2, rmu2 = k.store(x2), k.store(h2), k.store(r2, f32), k.store(rmu2, f32)
    # G4
    qkv = ((h2 @ wqkv.T) * r2[:, None] - rmu2[:, None] * c2) + e2 + bqkv
    return (
        k.out(x2), k.out(qkv), k.out(x1), k.out(u),
        k.out(r1, f32), k.out(rmu1, f32), k.out(r2, f32), k.out(rmu2, f32),
    )


# ============================================================================ LM head + CE


def lm_head_ce(
    x, wn, wlm, targets, dloss, *, compute: torch.dtype = torch.float64, eps: float = 1e-5, ignore_index: int = -100
) -> tuple[torch.Tensor, ...]:
    """tests/programs/coda/lm_head_ce.mlir (and examples/coda/lm_head_ce.mlir: same eps, ignore_index).

    Inputs: x [M, D]; wn [D]; wlm [V, D]; targets [M] int (ignore_index = ignored row);
    dloss 0-d (upstream gradient of the loss).
    Returns (loss, dlogits, h, rstd, lse, count): loss 0-d (mean over kept rows, nan if none),
    dlogits [M, V] = dloss * (softmax - onehot) / count on kept rows, 0 on ignored rows,
    h = x * wn [M, D], rstd [M], lse [M] (of logits = rstd * h @ wlm.T), count 0-d.
    """
    k = _K(compute, x.dtype)
    x, wn, wlm, targets, dloss = map(k.t, (x, wn, wlm, targets, dloss))
    f32 = torch.float32
    m, d = x.shape
    v = wlm.shape[0]
    # K1 + fold
    h = k.store(x * wn)
    rstd = k.store(_rstd(k, (x * x).sum(1), d, eps), f32)
    # K2
    z = (h @ wlm.T) * rstd[:, None]
    lse = torch.logsumexp(z, dim=1)
    inside = (targets >= 0) & (targets < v)
    tl = torch.where(inside, z.gather(1, torch.where(inside, targets, 0)[:, None])[:, 0], torch.zeros((), dtype=k.c))
    # K3 (one fold)
    keep = targets != ignore_index
    zero = torch.zeros((), dtype=k.c)
    total = torch.where(keep, lse - tl, zero).sum()
    count = torch.where(keep, k.k(1.0), zero).sum()
    loss = total / count
    lse, loss, count = k.store(lse, f32), k.store(loss, f32), k.store(count, f32)
    # K4
    p = torch.exp(z - lse[:, None])
    onehot = (torch.arange(v, device=z.device)[None, :] == targets[:, None]).to(k.c)
    g = (p - onehot) * (dloss / count)
    dlogits = torch.where(keep[:, None], g, zero)
    return k.out(loss, f32), k.out(dlogits), k.out(h), k.out(rstd, f32), k.out(lse, f32), k.out(count, f32)


# ============================================================================ registry and inputs


@dataclass(frozen=True)
class Program:
    name: str
    path: Path
    reference: Callable[..., tuple[torch.Tensor, ...]]
    outputs: tuple[str, ...]
    nn_program: str | None  # the nn block whose results are this program's first results


PROGRAMS: dict[str, Program] = {
    "llama_fwd": Program(
        "llama_fwd", HERE / "llama_fwd.mlir", llama_fwd, ("x2", "qkv", "x1", "z1", "rstd1", "rstd2"), "llama_block"
    ),
    "llama_bwd": Program(
        "llama_bwd", HERE / "llama_bwd.mlir", llama_bwd,
        ("dx0", "dy0", "dwo", "dwgu", "dwd", "dwqkv", "dwn0", "dwn1"), None,
    ),
    "gpt2_fwd": Program(
        "gpt2_fwd", HERE / "gpt2_fwd.mlir", gpt2_fwd,
        ("x2", "qkv", "x1", "u", "rstd1", "rmu1", "rstd2", "rmu2"), "gpt2_block",
    ),
    "lm_head_ce": Program(
        "lm_head_ce", HERE / "lm_head_ce.mlir", lm_head_ce, ("loss", "dlogits", "h", "rstd", "lse", "count"), "lm_head"
    ),
}

NN_DIR = HERE.parent / "nn"


def reference_pair(name: str, inputs: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(ref64, ref_T) of a program: the float64 reference and the fp32-compute / rounded-store one."""
    fn = PROGRAMS[name].reference
    return list(fn(*inputs, compute=torch.float64)), list(fn(*inputs, compute=torch.float32))


def make_inputs(name: str, seed: int = 0) -> list[torch.Tensor]:
    """Random inputs for a program (bf16 activations/weights, f32 vectors, int32 pos/targets).

    llama_fwd / gpt2_fwd / lm_head_ce draw the inputs of the matching nn block
    (`coda_ir.testing.random_inputs` on tests/programs/nn/<block>.mlir) and add what the program
    needs on top (gpt2: c1, e1, c2, e2 from `gpt2_ln_vectors`; lm head: dloss = 0.75).
    llama_bwd: runs llama_fwd's fp32 reference on llama_fwd inputs of the same seed for the saved
    tensors, and draws dqkv, dx2 ~ randn.
    """
    from coda_ir.testing import random_inputs

    if name == "llama_fwd":
        return random_inputs(NN_DIR / "llama_block.mlir", seed)
    if name == "gpt2_fwd":
        ins = random_inputs(NN_DIR / "gpt2_block.mlir", seed)
        (_, _, _, _, g1, b1, wfc, _, _, _, g2, b2, wqkv, _) = ins
        return ins + list(gpt2_ln_vectors(g1, b1, wfc, g2, b2, wqkv))
    if name == "lm_head_ce":
        return random_inputs(NN_DIR / "lm_head.mlir", seed) + [torch.tensor(0.75, dtype=torch.float32)]
    if name == "llama_bwd":
        x0, y0, wo, wn0, wgu, wd, wn1, wqkv, pos = make_inputs("llama_fwd", seed)
        x2, qkv, x1, z1, rstd1, rstd2 = llama_fwd(x0, y0, wo, wn0, wgu, wd, wn1, wqkv, pos, compute=torch.float32)
        gen = torch.Generator().manual_seed(seed + 1000)
        dqkv = torch.randn(qkv.shape, generator=gen, dtype=torch.float64).to(qkv.dtype)
        dx2 = torch.randn(x2.shape, generator=gen, dtype=torch.float64).to(x2.dtype)
        return [dqkv, dx2, qkv, x1, x2, z1, rstd1, rstd2, y0, pos, wo, wgu, wd, wqkv, wn0, wn1]
    raise KeyError(f"unknown program {name!r} (have {', '.join(PROGRAMS)})")

