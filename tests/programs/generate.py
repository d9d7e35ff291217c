"""Writes the example and test programs from one set of hand-written templates.

    .venv/bin/python tests/programs/generate.py          # rewrite every file
    .venv/bin/python tests/programs/generate.py --check  # exit 1 if a file is stale

nn blocks (the input language):   examples/{llama_block,gpt2_block,qwen3_block,lm_head}.mlir at
                                  real shapes; tests/programs/nn/*.mlir at small odd shapes, bf16
                                  and f32.
coda programs (hand-written):     tests/programs/coda/{llama_fwd,llama_bwd,gpt2_fwd,lm_head_ce}.mlir
                                  at small odd shapes; examples/coda/*.mlir at real shapes.

The templates below *are* the hand-written programs; the generator only substitutes shapes
and constants, so the small and the real programs have the same kernels. Each coda program's
header comment documents its signature and layouts; tests/programs/coda/references.py holds
the float64 reference of each one.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


# ============================================================================ formatting


def flt(x: float) -> str:
    """An MLIR float literal."""
    s = repr(float(x))
    if "e" in s and "." not in s.split("e")[0]:
        mant, exp = s.split("e")
        s = f"{mant}.0e{exp}"
    return s


def T(*shape_and_type) -> str:
    *shape, elt = shape_and_type
    return "tensor<" + "x".join(str(d) for d in shape) + ("x" if shape else "") + f"{elt}>"


def tile(m: int, n: int, elt: str = "f32") -> str:
    return f"!coda.tile<{m}x{n}x{elt}>"


def parts(axis: str, n: int, combine: str = "sum") -> str:
    return f"!coda.partials<{axis}, {n}, {combine}>"


def indent(text: str, n: int) -> str:
    pad = " " * n
    return "\n".join(pad + line if line.strip() else line for line in text.splitlines())


# ============================================================================ shapes


@dataclass(frozen=True)
class Llama:
    name: str
    m: int  # tokens
    d: int  # hidden
    f: int  # ffn (gate and up are F each, 2F together)
    hd: int  # head dim
    hq: int  # query heads
    hkv: int  # key/value heads
    eps: float = 1e-5
    theta: float = 500000.0
    dt: str = "bf16"

    @property
    def qkv(self) -> int:
        return (self.hq + 2 * self.hkv) * self.hd

    @property
    def rot(self) -> int:
        return self.hq + self.hkv


@dataclass(frozen=True)
class Gpt2:
    name: str
    m: int
    d: int
    f: int
    eps: float = 1e-5
    dt: str = "bf16"

    @property
    def qkv(self) -> int:
        return 3 * self.d


@dataclass(frozen=True)
class LmHead:
    name: str
    m: int
    d: int
    v: int
    eps: float = 1e-5
    ignore_index: int = -100
    dt: str = "bf16"


LLAMA3_8B = Llama("LLaMA-3-8B", m=8192, d=4096, f=14336, hd=128, hq=32, hkv=8, eps=1e-5, theta=500000.0)
QWEN3_8B = Llama("Qwen3-8B", m=8192, d=4096, f=12288, hd=128, hq=32, hkv=8, eps=1e-6, theta=1000000.0)
GPT2_MEDIUM = Gpt2("GPT-2 medium", m=8192, d=1024, f=4096, eps=1e-5)
LLAMA3_LM_HEAD = LmHead("LLaMA-3-8B LM head", m=8192, d=4096, v=128256, eps=1e-5)

LLAMA_SMALL = Llama("small", m=67, d=96, f=160, hd=32, hq=3, hkv=1, eps=1e-5, theta=500000.0)
QWEN3_SMALL = Llama("small", m=67, d=96, f=160, hd=32, hq=3, hkv=1, eps=1e-6, theta=1000000.0)
GPT2_SMALL = Gpt2("small", m=67, d=96, f=384, eps=1e-5)
LM_HEAD_SMALL = LmHead("small", m=67, d=96, v=200, eps=1e-5)


# ============================================================================ nn programs


def nn_llama_block(s: Llama, qk_norm: bool = False, fname: str = "llama_block") -> str:
    dt, m, d, f, q = s.dt, s.m, s.d, s.f, s.qkv
    X, W, V = T(m, d, dt), T(d, d, dt), T(d, dt)
    eps = f"{{eps = {flt(s.eps)} : f32}}"
    rope_in = "%qn" if qk_norm else "%q"
    qk = ""
    args_extra = ""
    if qk_norm:
        args_extra = f", %wqk: {T(s.hd, dt)}"
        qk = (
            f"  // QK-norm: RMSNorm over each of the {s.rot} q and k heads (shared weight), v heads pass\n"
            f"  %qn = nn.head_rms_norm %q, %wqk {{head_dim = {s.hd} : i64, heads = {s.rot} : i64, eps = {flt(s.eps)} : f32}}"
            f" : {T(m, q, dt)}, {T(s.hd, dt)} -> {T(m, q, dt)}\n"
        )
    model = "Qwen3" if qk_norm else "LLaMA"
    return f"""\
// The non-attention part of one {model} block ({s.name}: tokens {m}, hidden {d}, ffn {f},
// {s.hq} q heads + {s.hkv} kv heads of {s.hd} -> packed QKV {q}), {dt}. From the attention output
// projection of layer l to the QKV projection of layer l+1 (NN_DIALECT.md), so every RMSNorm sits
// between a producing GEMM and a consuming GEMM.
//   inputs:  x0 residual stream, y0 attention output, wo out-proj, wn0 post-attention norm weight,
//            wgu gate/up weight [gate rows | up rows] (2F x D), wd down-proj, wn1 next layer's
//            input norm weight, wqkv next layer's packed [q | k | v] projection{", wqk the QK-norm weight" if qk_norm else ""}, pos positions
//   results: x2 (residual stream after the MLP), the next layer's qkv with RoPE on q and k heads
func.func @{fname}(%x0: {X}, %y0: {X}, %wo: {W}, %wn0: {V}, %wgu: {T(2 * f, d, dt)},
                       %wd: {T(d, f, dt)}, %wn1: {V}, %wqkv: {T(q, d, dt)}{args_extra}, %pos: {T(m, "i32")})
    -> ({X}, {T(m, q, dt)}) {{
  %a = nn.linear %y0, %wo : {X}, {W} -> {X}
  %x1 = nn.add %x0, %a : {X}, {X} -> {X}
  %h1 = nn.rms_norm %x1, %wn0 {eps} : {X}, {V} -> {X}
  %z = nn.linear %h1, %wgu : {X}, {T(2 * f, d, dt)} -> {T(m, 2 * f, dt)}
  %g = nn.swiglu %z : {T(m, 2 * f, dt)} -> {T(m, f, dt)}
  %dn = nn.linear %g, %wd : {T(m, f, dt)}, {T(d, f, dt)} -> {X}
  %x2 = nn.add %x1, %dn : {X}, {X} -> {X}
  %h2 = nn.rms_norm %x2, %wn1 {eps} : {X}, {V} -> {X}
  %q = nn.linear %h2, %wqkv : {X}, {T(q, d, dt)} -> {T(m, q, dt)}
{qk}  %r = nn.rope {rope_in}, %pos {{head_dim = {s.hd} : i64, rotary_heads = {s.rot} : i64, theta = {flt(s.theta)} : f32, style = "half"}} : {T(m, q, dt)}, {T(m, "i32")} -> {T(m, q, dt)}
  func.return %x2, %r : {X}, {T(m, q, dt)}
}}
"""


def nn_gpt2_block(s: Gpt2, fname: str = "gpt2_block") -> str:
    dt, m, d, f, q = s.dt, s.m, s.d, s.f, s.qkv
    X, W, V = T(m, d, dt), T(d, d, dt), T(d, dt)
    eps = f"{{eps = {flt(s.eps)} : f32}}"
    return f"""\
// The non-attention part of one GPT-2 block ({s.name}: tokens {m}, hidden {d}, MLP {f}, packed
// QKV {q}), {dt}, pre-LayerNorm: from the attention output projection of layer l to the QKV
// projection of layer l+1, like the LLaMA block.
//   inputs:  x0 residual stream, y0 attention output, wo/bo out-proj, g1/b1 LayerNorm before the
//            MLP, wfc/bfc MLP up, wproj/bproj MLP down, g2/b2 next layer's LayerNorm, wqkv/bqkv
//            next layer's packed [q | k | v] projection
//   results: x2 (residual stream after the MLP), next layer's qkv (with bias)
func.func @{fname}(%x0: {X}, %y0: {X}, %wo: {W}, %bo: {V}, %g1: {V}, %b1: {V},
                      %wfc: {T(f, d, dt)}, %bfc: {T(f, dt)}, %wproj: {T(d, f, dt)}, %bproj: {V},
                      %g2: {V}, %b2: {V}, %wqkv: {T(q, d, dt)}, %bqkv: {T(q, dt)})
    -> ({X}, {T(m, q, dt)}) {{
  %a0 = nn.linear %y0, %wo : {X}, {W} -> {X}
  %a = nn.add %a0, %bo : {X}, {V} -> {X}
  %x1 = nn.add %x0, %a : {X}, {X} -> {X}
  %h1 = nn.layer_norm %x1, %g1, %b1 {eps} : {X}, {V}, {V} -> {X}
  %u0 = nn.linear %h1, %wfc : {X}, {T(f, d, dt)} -> {T(m, f, dt)}
  %u = nn.add %u0, %bfc : {T(m, f, dt)}, {T(f, dt)} -> {T(m, f, dt)}
  %act = nn.gelu %u {{approximate = "tanh"}} : {T(m, f, dt)} -> {T(m, f, dt)}
  %p0 = nn.linear %act, %wproj : {T(m, f, dt)}, {T(d, f, dt)} -> {X}
  %p = nn.add %p0, %bproj : {X}, {V} -> {X}
  %x2 = nn.add %x1, %p : {X}, {X} -> {X}
  %h2 = nn.layer_norm %x2, %g2, %b2 {eps} : {X}, {V}, {V} -> {X}
  %q0 = nn.linear %h2, %wqkv : {X}, {T(q, d, dt)} -> {T(m, q, dt)}
  %qkv = nn.add %q0, %bqkv : {T(m, q, dt)}, {T(q, dt)} -> {T(m, q, dt)}
  func.return %x2, %qkv : {X}, {T(m, q, dt)}
}}
"""


def nn_lm_head(s: LmHead, fname: str = "lm_head") -> str:
    dt, m, d, v = s.dt, s.m, s.d, s.v
    X = T(m, d, dt)
    return f"""\
// The LM head with its loss ({s.name}: tokens {m}, hidden {d}, vocabulary {v}), {dt}: final
// RMSNorm, vocabulary projection, cross-entropy (mean over rows whose target is not {s.ignore_index}).
//   inputs:  x final residual stream, wn final norm weight, wlm vocabulary projection (V x D),
//            targets (i32, {s.ignore_index} = ignored row)
//   result:  the mean loss, a 0-d f32 tensor
func.func @{fname}(%x: {X}, %wn: {T(d, dt)}, %wlm: {T(v, d, dt)}, %targets: {T(m, "i32")}) -> tensor<f32> {{
  %h = nn.rms_norm %x, %wn {{eps = {flt(s.eps)} : f32}} : {X}, {T(d, dt)} -> {X}
  %logits = nn.linear %h, %wlm : {X}, {T(v, d, dt)} -> {T(m, v, dt)}
  %loss = nn.cross_entropy %logits, %targets {{ignore_index = {s.ignore_index} : i64, reduction = "mean"}} : {T(m, v, dt)}, {T(m, "i32")} -> tensor<f32>
  func.return %loss : tensor<f32>
}}
"""


# ============================================================================ coda building blocks


def rstd_fold(result: str, partials: str, m: int, d: int, eps: float) -> str:
    """`rstd = rsqrt(sum(x^2) / D + eps)` from sum-of-squares partials."""
    return f"""\
{result} = coda.fold {partials} : {parts("rows", m)} -> {T(m, "f32")} {{
^bb0(%ss: f32):
  %d = arith.constant {flt(d)} : f32
  %eps = arith.constant {flt(eps)} : f32
  %ms = arith.divf %ss, %d : f32
  %v = arith.addf %ms, %eps : f32
  %r = math.rsqrt %v : f32
  coda.yield %r : f32
}}"""


def residual_norm_gemm(res: tuple[str, str, str], a: str, w: str, xres: str, g: str, m: int, k: int, d: int, dt: str) -> str:
    """F1/F3: `x = xres + a @ w.T` (residual accumulate), `h = x * g`, sum-of-squares partials of x."""
    x, h, ss = res
    return f"""\
{x}, {h}, {ss} = coda.gemm {a}, {w} transpose_b ins({xres}, {g} : {T(m, d, dt)}, {T(d, dt)}) : {T(m, k, dt)}, {T(d, k, dt)} -> ({T(m, d, dt)}, {T(m, d, dt)}, {parts("rows", m)}) {{
^bb0(%acc: {tile(m, d)}, %res: {T(m, d, dt)}, %g: {T(d, dt)}):
  %x = coda.accumulate %acc, %res : {tile(m, d)}, {T(m, d, dt)}
  %h = coda.scale %x, %g cols : {tile(m, d)}, {T(d, dt)}
  %ss = coda.reduce sumsq %x dim 1 : {tile(m, d)} -> {parts("rows", m)}
  coda.yield %x, %h, %ss : {tile(m, d)}, {tile(m, d)}, {parts("rows", m)}
}}"""


def rope_body(hd: int, n_rot_cols: int, theta: float, inverse: bool) -> str:
    """Body of a stride-hd/2 pair_map over (x tile, pos tile, column-index tile): rotate the pair
    (ra, rb) = (column c, column c + hd/2) by angle pos * theta^(-2i/hd), i = c mod hd; columns
    >= n_rot_cols (v heads) get angle 0 (pass through exactly). `inverse` rotates by -angle."""
    if inverse:
        o1 = "  %t1 = arith.mulf %ra, %cos : f32\n  %t2 = arith.mulf %rb, %sin : f32\n  %o1 = arith.addf %t1, %t2 : f32\n"
        o2 = "  %t3 = arith.mulf %rb, %cos : f32\n  %t4 = arith.mulf %ra, %sin : f32\n  %o2 = arith.subf %t3, %t4 : f32\n"
    else:
        o1 = "  %t1 = arith.mulf %ra, %cos : f32\n  %t2 = arith.mulf %rb, %sin : f32\n  %o1 = arith.subf %t1, %t2 : f32\n"
        o2 = "  %t3 = arith.mulf %rb, %cos : f32\n  %t4 = arith.mulf %ra, %sin : f32\n  %o2 = arith.addf %t3, %t4 : f32\n"
    return f"""\
^bb0(%ra: f32, %rb: f32, %pa: i32, %pb: i32, %ca: i32, %cb: i32):
  %hd = arith.constant {hd} : i32
  %nrot = arith.constant {n_rot_cols} : i32
  %m2 = arith.constant -2 : i32
  %hdf = arith.constant {flt(hd)} : f32
  %theta = arith.constant {flt(theta)} : f32
  %zero = arith.constant 0.0 : f32
  %i = arith.remsi %ca, %hd : i32
  %mi = arith.muli %i, %m2 : i32
  %mif = arith.sitofp %mi : i32 to f32
  %ex = arith.divf %mif, %hdf : f32
  %inv = math.powf %theta, %ex : f32
  %pf = arith.sitofp %pa : i32 to f32
  %a0 = arith.mulf %pf, %inv : f32
  %isrot = arith.cmpi slt, %ca, %nrot : i32
  %a = arith.select %isrot, %a0, %zero : f32
  %cos = math.cos %a : f32
  %sin = math.sin %a : f32
{o1}{o2}  coda.yield %o1, %o2 : f32, f32"""


def norm_bwd_gemm(
    res: tuple[str, str, str], a: str, w: str, ins: tuple[str, str, str, str, str], m: int, k: int, d: int, dt: str
) -> str:
    """B2/B6: RMSNorm backward through `a @ w` (q = dz @ W, the norm's consumer GEMM transposed).

    ins = (x, rstd, zdz, g, dres): x the saved norm input, rstd its rstd, zdz = (1/D) sum z*dz
    per row, g the norm weight, dres the incoming gradient of x from the residual path.
    n = x * rstd;  dx = dres + rstd * (q * g - n * zdz);  x_out = n * g (for the weight gradient);
    dg partials = sum over rows of q * n (column partials)."""
    dx, xo, dg = res
    x, r, s, g, dres = ins
    X = T(m, d, dt)
    t = tile(m, d)
    return f"""\
{dx}, {xo}, {dg} = coda.gemm {a}, {w} ins({x}, {r}, {s}, {g}, {dres} : {X}, {T(m, "f32")}, {T(m, "f32")}, {T(d, dt)}, {X}) : {T(m, k, dt)}, {T(k, d, dt)} -> ({X}, {X}, {parts("cols", d)}) {{
^bb0(%acc: {t}, %x: {X}, %r: {T(m, "f32")}, %s: {T(m, "f32")}, %g: {T(d, dt)}, %dres: {X}):
  %xt = coda.load %x : {X} -> {t}
  %n = coda.scale %xt, %r rows : {t}, {T(m, "f32")}
  %qg = coda.scale %acc, %g cols : {t}, {T(d, dt)}
  %ns = coda.scale %n, %s rows : {t}, {T(m, "f32")}
  %diff = coda.map %qg, %ns : ({t}, {t}) -> {t} {{
  ^bb0(%a: f32, %b: f32):
    %o = arith.subf %a, %b : f32
    coda.yield %o : f32
  }}
  %dxn = coda.scale %diff, %r rows : {t}, {T(m, "f32")}
  %dx = coda.accumulate %dxn, %dres : {t}, {X}
  %xo = coda.scale %n, %g cols : {t}, {T(d, dt)}
  %qn = coda.map %acc, %n : ({t}, {t}) -> {t} {{
  ^bb0(%a: f32, %b: f32):
    %o = arith.mulf %a, %b : f32
    coda.yield %o : f32
  }}
  %dg = coda.reduce sum %qn dim 0 : {t} -> {parts("cols", d)}
  coda.yield %dx, %xo, %dg : {t}, {t}, {parts("cols", d)}
}}"""


def zdz_fold(result: str, partials: str, m: int, d: int) -> str:
    return f"""\
{result} = coda.fold {partials} : {parts("rows", m)} -> {T(m, "f32")} {{
^bb0(%zdz: f32):
  %d = arith.constant {flt(d)} : f32
  %s = arith.divf %zdz, %d : f32
  coda.yield %s : f32
}}"""


def column_fold(result: str, partials: str, d: int, dt: str) -> str:
    return f"""\
{result} = coda.fold {partials} : {parts("cols", d)} -> {T(d, dt)} {{
^bb0(%dg: f32):
  coda.yield %dg : f32
}}"""


def plain_gemm(result: str, a: str, b: str, ta: str, tb: str, out: str, m: int, n: int, transpose: str) -> str:
    return f"""\
{result} = coda.gemm {a}, {b}{" " + transpose if transpose else ""} : {ta}, {tb} -> {out} {{
^bb0(%acc: {tile(m, n)}):
  coda.yield %acc : {tile(m, n)}
}}"""


def func_text(header: str, signature: str, body: list[str], ret: str) -> str:
    return header + signature + " {\n" + "\n".join(indent(b, 2) for b in body) + "\n  " + ret + "\n}\n"


# ============================================================================ coda: LLaMA forward


def coda_llama_fwd(s: Llama) -> str:
    dt, m, d, f, q, hd = s.dt, s.m, s.d, s.f, s.qkv, s.hd
    X = T(m, d, dt)
    R = T(m, "f32")
    header = f"""\
// LLaMA block forward as 4 GEMM-epilogue kernels + 2 rstd folds (EPILOGUES.md, coda_digest F1-F4).
// Shapes: M = {m} tokens, D = {d} hidden, F = {f} ffn, {s.hq} q + {s.hkv} kv heads of hd = {hd}
// (QKV = {q} columns, RoPE on the first {s.rot} heads = {s.rot * hd} columns), eps = {flt(s.eps)},
// theta = {flt(s.theta)}, {dt} tensors, f32 rstd vectors.
//
// Inputs (all in the user's layout; nothing is pre-permuted):
//   x0   [M, D]   residual stream            y0   [M, D]   attention output
//   wo   [D, D]   out-proj (nn.Linear)       wn0  [D]      post-attention RMSNorm weight
//   wgu  [2F, D]  [gate rows | up rows]      wd   [D, F]   down-proj
//   wn1  [D]      next input RMSNorm weight  wqkv [QKV, D] next layer's packed [q | k | v]
//   pos  [M] i32  positions
// Results:
//   x2   [M, D]   residual stream after the MLP          (= nn llama_block result #0)
//   qkv  [M, QKV] next layer's q, k (RoPE, style half), v (= nn llama_block result #1)
//   x1   [M, D]   residual stream after attention        (saved for backward)
//   z1   [M, 2F]  rstd1 * h1 @ wgu.T, the SwiGLU pre-activation in the user's [gate | up] layout
//   rstd1, rstd2 [M] f32  rsqrt(mean(x^2) + eps) of x1 and x2
// Kernels:
//   F1  x1 = x0 + y0 @ wo.T; h1 = x1 * wn0; partials sum(x1^2)        (deferred RMSNorm producer)
//   fold rstd1
//   F2  z1 = rstd1 * (h1 @ wgu.T); y1 = silu(gate) * up               (interleave F: the mainloop
//       reads weight row perm(c), so accumulator columns (2i, 2i+1) are (gate i, up i), and the
//       2 -> 1 pair_map is tile-local; z1 is stored at perm(c), i.e. in the user's layout)
//   F3  x2 = x1 + y1 @ wd.T; h2 = x2 * wn1; partials sum(x2^2)
//   fold rstd2
//   F4  qkv = rope(rstd2 * (h2 @ wqkv.T))   (pair_map stride hd/2: pairs (c, c + hd/2) in a head;
//       angle = pos[m] * theta^(-2i/hd), i = c mod hd, from coda.index cols; v heads: angle 0)
"""
    sig = (
        f"func.func @llama_fwd(%x0: {X}, %y0: {X}, %wo: {T(d, d, dt)}, %wn0: {T(d, dt)}, %wgu: {T(2 * f, d, dt)},\n"
        f"                     %wd: {T(d, f, dt)}, %wn1: {T(d, dt)}, %wqkv: {T(q, d, dt)}, %pos: {T(m, 'i32')})\n"
        f"    -> ({X}, {T(m, q, dt)}, {X}, {T(m, 2 * f, dt)}, {R}, {R})"
    )
    z, y = tile(m, 2 * f), tile(m, f)
    f2 = f"""\
// F2: gate/up GEMM, deferred rstd1, SwiGLU over adjacent (gate, up) accumulator columns
%z1, %y1 = coda.gemm %h1, %wgu transpose_b interleave {f} ins(%rstd1 : {R}) : {X}, {T(2 * f, d, dt)} -> ({T(m, 2 * f, dt)}, {T(m, f, dt)}) {{
^bb0(%acc: {z}, %r: {R}):
  %z = coda.scale %acc, %r rows : {z}, {R}
  %y = coda.pair_map %z : {z} -> {y} {{
  ^bb0(%gate: f32, %up: f32):
    %one = arith.constant 1.0 : f32
    %ng = arith.negf %gate : f32
    %e = math.exp %ng : f32
    %den = arith.addf %one, %e : f32
    %silu = arith.divf %gate, %den : f32
    %o = arith.mulf %silu, %up : f32
    coda.yield %o : f32
  }}
  coda.yield %z, %y : {z}, {y}
}}"""
    qt, qi = tile(m, q), tile(m, q, "i32")
    f4 = f"""\
// F4: QKV GEMM, deferred rstd2, RoPE (half style) on the q and k heads
%qkv = coda.gemm %h2, %wqkv transpose_b ins(%rstd2, %pos : {R}, {T(m, "i32")}) : {X}, {T(q, d, dt)} -> {T(m, q, dt)} {{
^bb0(%acc: {qt}, %r: {R}, %p: {T(m, "i32")}):
  %z = coda.scale %acc, %r rows : {qt}, {R}
  %pt = coda.broadcast %p rows : {T(m, "i32")} -> {qi}
  %ct = coda.index cols : {qi}
  %o = coda.pair_map stride {hd // 2} %z, %pt, %ct : ({qt}, {qi}, {qi}) -> {qt} {{
{indent(rope_body(hd, s.rot * hd, s.theta, inverse=False), 2)}
  }}
  coda.yield %o : {qt}
}}"""
    body = [
        "// F1: out-proj GEMM + residual, stores x1 and h1 = x1 * wn0, emits sum(x1^2) partials",
        residual_norm_gemm(("%x1", "%h1", "%ss1"), "%y0", "%wo", "%x0", "%wn0", m, d, d, dt),
        rstd_fold("%rstd1", "%ss1", m, d, s.eps),
        f2,
        "// F3: down-proj GEMM + residual, stores x2 and h2 = x2 * wn1, emits sum(x2^2) partials",
        residual_norm_gemm(("%x2", "%h2", "%ss2"), "%y1", "%wd", "%x1", "%wn1", m, f, d, dt),
        rstd_fold("%rstd2", "%ss2", m, d, s.eps),
        f4,
    ]
    ret = f"func.return %x2, %qkv, %x1, %z1, %rstd1, %rstd2 : {X}, {T(m, q, dt)}, {X}, {T(m, 2 * f, dt)}, {R}, {R}"
    return func_text(header, sig, body, ret)


# ============================================================================ coda: LLaMA backward


def coda_llama_bwd(s: Llama) -> str:
    dt, m, d, f, q, hd = s.dt, s.m, s.d, s.f, s.qkv, s.hd
    X = T(m, d, dt)
    R = T(m, "f32")
    Q = T(m, q, dt)
    Z = T(m, 2 * f, dt)
    header = f"""\
// LLaMA block backward as 3 GEMM-epilogue kernels + 1 elementwise kernel + 5 plain GEMMs + 4 folds
// (EPILOGUES.md "Backward rewrites", coda_digest B1-B8). Same shapes as llama_fwd: M = {m}, D = {d},
// F = {f}, hd = {hd}, QKV = {q} ({s.rot} rotary heads), theta = {flt(s.theta)}, {dt}.
//
// Inputs: the upstream gradients, then what llama_fwd saved, then the weights (user's layouts):
//   dqkv [M, QKV]  gradient of llama_fwd's qkv      dx2  [M, D]  gradient of llama_fwd's x2
//   qkv  [M, QKV]  llama_fwd's qkv (post-RoPE)      x1, x2 [M, D]  llama_fwd's x1, x2
//   z1   [M, 2F]   llama_fwd's z1 ([gate | up])     rstd1, rstd2 [M] f32   llama_fwd's rstds
//   y0   [M, D]    attention output                  pos  [M] i32
//   wo [D, D], wgu [2F, D] ([gate | up] rows), wd [D, F], wqkv [QKV, D], wn0 [D], wn1 [D]
// Results (gradients of the nn llama_block's loss w.r.t. its inputs, all {dt}):
//   dx0 [M, D], dy0 [M, D], dwo [D, D], dwgu [2F, D] ([gate | up] rows), dwd [D, F],
//   dwqkv [QKV, D], dwn0 [D], dwn1 [D]
// Kernels (s = (1/D) sum_k z_k dz_k is the ZdZ trick: the norm backward needs no pass over q):
//   B1  elementwise [M, QKV]: dz2 = R(-angle) dqkv (pair_map stride hd/2);
//       partials sum(qkv * dqkv) (= sum(z * dz2): R is orthogonal); fold zdz2 = that / D
//   B2  dxa = dx2 + rstd2 * (q * wn1 - n * zdz2), q = dz2 @ wqkv, n = x2 * rstd2;
//       xo2 = n * wn1; column partials of sum_rows(q * n); fold dwn1
//   B3  dwqkv = dz2.T @ xo2
//   B4  dy = dxa @ wd; interleave_wide F: the 2F-wide z1 / dz1 are read and written at perm(c), so
//       the 1 -> 2 pair_map sees (gate i, up i) adjacent: dgate = dy * up * s (1 + gate (1 - s)),
//       dup = dy * silu(gate), s = sigmoid(gate); y1 = silu(gate) * up recomputed (for dwd);
//       partials sum(gate * dgate + up * dup); fold zdz1 = that / D
//   B5  dwd = dxa.T @ y1
//   B6  dx0 = dxa + rstd1 * (q * wn0 - n * zdz1), q = dz1 @ wgu, n = x1 * rstd1; xo1 = n * wn0;
//       column partials; fold dwn0
//   B7  dwgu = dz1.T @ xo1
//   B8  dy0 = dx0 @ wo;  dwo = dx0.T @ y0
"""
    sig = (
        f"func.func @llama_bwd(%dqkv: {Q}, %dx2: {X}, %qkv: {Q}, %x1: {X}, %x2: {X}, %z1: {Z},\n"
        f"                     %rstd1: {R}, %rstd2: {R}, %y0: {X}, %pos: {T(m, 'i32')}, %wo: {T(d, d, dt)},\n"
        f"                     %wgu: {T(2 * f, d, dt)}, %wd: {T(d, f, dt)}, %wqkv: {T(q, d, dt)}, %wn0: {T(d, dt)}, %wn1: {T(d, dt)})\n"
        f"    -> ({X}, {X}, {T(d, d, dt)}, {T(2 * f, d, dt)}, {T(d, f, dt)}, {T(q, d, dt)}, {T(d, dt)}, {T(d, dt)})"
    )
    qt, qi = tile(m, q), tile(m, q, "i32")
    b1 = f"""\
// B1: RoPE backward (rotate by -angle) and the ZdZ partials of the QKV projection
%dz2, %zp2 = coda.elementwise [{m}, {q}] ins(%qkv, %dqkv, %pos : {Q}, {Q}, {T(m, "i32")}) -> ({Q}, {parts("rows", m)}) {{
^bb0(%y: {Q}, %dy: {Q}, %p: {T(m, "i32")}):
  %yt = coda.load %y : {Q} -> {qt}
  %dyt = coda.load %dy : {Q} -> {qt}
  %pt = coda.broadcast %p rows : {T(m, "i32")} -> {qi}
  %ct = coda.index cols : {qi}
  %dz = coda.pair_map stride {hd // 2} %dyt, %pt, %ct : ({qt}, {qi}, {qi}) -> {qt} {{
{indent(rope_body(hd, s.rot * hd, s.theta, inverse=True), 2)}
  }}
  %ydy = coda.map %yt, %dyt : ({qt}, {qt}) -> {qt} {{
  ^bb0(%a: f32, %b: f32):
    %o = arith.mulf %a, %b : f32
    coda.yield %o : f32
  }}
  %zp = coda.reduce sum %ydy dim 1 : {qt} -> {parts("rows", m)}
  coda.yield %dz, %zp : {qt}, {parts("rows", m)}
}}"""
    fy, zt = tile(m, f), tile(m, 2 * f)
    b4 = f"""\
// B4: down-proj backward + SwiGLU backward (1 -> 2 over the saved z1) + y1 recompute + ZdZ partials
%dz1, %y1, %zp1 = coda.gemm %dxa, %wd interleave_wide {f} ins(%z1 : {Z}) : {X}, {T(d, f, dt)} -> ({Z}, {T(m, f, dt)}, {parts("rows", m)}) {{
^bb0(%acc: {fy}, %z: {Z}):
  %zt = coda.load %z : {Z} -> {zt}
  %dz, %y, %t = coda.pair_map %acc, %zt : ({fy}, {zt}) -> ({zt}, {fy}, {fy}) {{
  ^bb0(%dy: f32, %gate: f32, %up: f32):
    %one = arith.constant 1.0 : f32
    %ng = arith.negf %gate : f32
    %e = math.exp %ng : f32
    %den = arith.addf %one, %e : f32
    %sg = arith.divf %one, %den : f32
    %silu = arith.mulf %gate, %sg : f32
    %du = arith.mulf %dy, %silu : f32
    %oms = arith.subf %one, %sg : f32
    %gs = arith.mulf %gate, %oms : f32
    %fac = arith.addf %one, %gs : f32
    %dyu = arith.mulf %dy, %up : f32
    %dys = arith.mulf %dyu, %sg : f32
    %dg = arith.mulf %dys, %fac : f32
    %yv = arith.mulf %silu, %up : f32
    %zg = arith.mulf %gate, %dg : f32
    %zu = arith.mulf %up, %du : f32
    %zz = arith.addf %zg, %zu : f32
    coda.yield %dg, %du, %yv, %zz : f32, f32, f32, f32
  }}
  %zp = coda.reduce sum %t dim 1 : {fy} -> {parts("rows", m)}
  coda.yield %dz, %y, %zp : {zt}, {fy}, {parts("rows", m)}
}}"""
    body = [
        b1,
        zdz_fold("%zdz2", "%zp2", m, d),
        "// B2: QKV-projection backward + RMSNorm backward (x2) + the residual gradient dx2",
        norm_bwd_gemm(("%dxa", "%xo2", "%dgp1"), "%dz2", "%wqkv", ("%x2", "%rstd2", "%zdz2", "%wn1", "%dx2"), m, q, d, dt),
        column_fold("%dwn1", "%dgp1", d, dt),
        "// B3: QKV weight gradient",
        plain_gemm("%dwqkv", "%dz2", "%xo2", Q, X, T(q, d, dt), q, d, "transpose_a"),
        b4,
        zdz_fold("%zdz1", "%zp1", m, d),
        "// B5: down-proj weight gradient",
        plain_gemm("%dwd", "%dxa", "%y1", X, T(m, f, dt), T(d, f, dt), d, f, "transpose_a"),
        "// B6: gate/up backward + RMSNorm backward (x1) + the residual gradient dxa",
        norm_bwd_gemm(("%dx0", "%xo1", "%dgp0"), "%dz1", "%wgu", ("%x1", "%rstd1", "%zdz1", "%wn0", "%dxa"), m, 2 * f, d, dt),
        column_fold("%dwn0", "%dgp0", d, dt),
        "// B7: gate/up weight gradient (rows in the user's [gate | up] layout)",
        plain_gemm("%dwgu", "%dz1", "%xo1", Z, X, T(2 * f, d, dt), 2 * f, d, "transpose_a"),
        "// B8: out-proj input and weight gradients",
        plain_gemm("%dy0", "%dx0", "%wo", X, T(d, d, dt), X, m, d, ""),
        plain_gemm("%dwo", "%dx0", "%y0", X, X, T(d, d, dt), d, d, "transpose_a"),
    ]
    ret = (
        f"func.return %dx0, %dy0, %dwo, %dwgu, %dwd, %dwqkv, %dwn0, %dwn1 : {X}, {X}, {T(d, d, dt)}, "
        f"{T(2 * f, d, dt)}, {T(d, f, dt)}, {T(q, d, dt)}, {T(d, dt)}, {T(d, dt)}"
    )
    return func_text(header, sig, body, ret)


# ============================================================================ coda: GPT-2 forward


def layer_norm_gemm(res: tuple[str, str, str, str], a: str, w: str, ins: tuple[str, str, str], m: int, k: int, d: int, dt: str) -> str:
    """G1/G3: `x = xres + a @ w.T + bias`, `h = x * g`, partials of sum(x) and sum(x^2)."""
    x, h, s1, s2 = res
    xres, bias, g = ins
    X = T(m, d, dt)
    t = tile(m, d)
    return f"""\
{x}, {h}, {s1}, {s2} = coda.gemm {a}, {w} transpose_b ins({xres}, {bias}, {g} : {X}, {T(d, dt)}, {T(d, dt)}) : {T(m, k, dt)}, {T(d, k, dt)} -> ({X}, {X}, {parts("rows", m)}, {parts("rows", m)}) {{
^bb0(%acc: {t}, %res: {X}, %b: {T(d, dt)}, %g: {T(d, dt)}):
  %ab = coda.shift %acc, %b cols : {t}, {T(d, dt)}
  %x = coda.accumulate %ab, %res : {t}, {X}
  %h = coda.scale %x, %g cols : {t}, {T(d, dt)}
  %s = coda.reduce sum %x dim 1 : {t} -> {parts("rows", m)}
  %ss = coda.reduce sumsq %x dim 1 : {t} -> {parts("rows", m)}
  coda.yield %x, %h, %s, %ss : {t}, {t}, {parts("rows", m)}, {parts("rows", m)}
}}"""


def layer_norm_fold(res: tuple[str, str], partials: tuple[str, str], m: int, d: int, eps: float) -> str:
    r, rmu = res
    return f"""\
{r}, {rmu} = coda.fold {partials[0]}, {partials[1]} : {parts("rows", m)}, {parts("rows", m)} -> ({T(m, "f32")}, {T(m, "f32")}) {{
^bb0(%s: f32, %ss: f32):
  %d = arith.constant {flt(d)} : f32
  %eps = arith.constant {flt(eps)} : f32
  %zero = arith.constant 0.0 : f32
  %mu = arith.divf %s, %d : f32
  %ex2 = arith.divf %ss, %d : f32
  %mu2 = arith.mulf %mu, %mu : f32
  %var0 = arith.subf %ex2, %mu2 : f32
  %var = arith.maximumf %var0, %zero : f32
  %ve = arith.addf %var, %eps : f32
  %r = math.rsqrt %ve : f32
  %rmu = arith.mulf %r, %mu : f32
  coda.yield %r, %rmu : f32, f32
}}"""


def deferred_ln_prologue(m: int, n: int, dt: str) -> str:
    t = tile(m, n)
    return f"""\
  %t = coda.scale %acc, %r rows : {t}, {T(m, "f32")}
  %rmt = coda.broadcast %rmu rows : {T(m, "f32")} -> {t}
  %ct = coda.broadcast %c cols : {T(n, "f32")} -> {t}
  %cen = coda.map %t, %rmt, %ct : ({t}, {t}, {t}) -> {t} {{
  ^bb0(%tv: f32, %rm: f32, %cc: f32):
    %p = arith.mulf %rm, %cc : f32
    %o = arith.subf %tv, %p : f32
    coda.yield %o : f32
  }}
  %te = coda.shift %cen, %e cols : {t}, {T(n, "f32")}
  %pre = coda.shift %te, %bias cols : {t}, {T(n, dt)}"""


def coda_gpt2_fwd(s: Gpt2) -> str:
    dt, m, d, f, q = s.dt, s.m, s.d, s.f, s.qkv
    X = T(m, d, dt)
    R = T(m, "f32")
    header = f"""\
// GPT-2 block forward (pre-LayerNorm, GELU tanh MLP, biases) with deferred LayerNorm: 4 GEMM-epilogue
// kernels + 2 statistics folds. Shapes: M = {m} tokens, D = {d} hidden, F = {f} MLP, QKV = {q};
// eps = {flt(s.eps)}; {dt} tensors, f32 statistics and column vectors.
//
// Deferred LayerNorm (EPILOGUES.md): layer_norm(x, g, b) @ W.T = r * ((x * g) @ W.T) - r * mu * c + e
// with r = rsqrt(var + eps), mu = mean(x), c = g @ W.T, e = b @ W.T. The producer GEMM stores h = x * g
// and emits partials of sum(x) and sum(x^2); a fold gives r and r * mu per row; the consumer GEMM's
// epilogue is acc * r[m] - (r * mu)[m] * c[n] + e[n] (+ the linear's own bias).
//
// Inputs (user's layouts):
//   x0 [M, D] residual stream, y0 [M, D] attention output, wo [D, D], bo [D]  attention out-proj
//   g1, b1 [D]  LayerNorm before the MLP;  wfc [F, D], bfc [F]  MLP up;  wproj [D, F], bproj [D]
//   g2, b2 [D]  next layer's LayerNorm;    wqkv [QKV, D], bqkv [QKV]  next layer's QKV projection
//   c1, e1 [F] f32    c1 = g1 @ wfc.T, e1 = b1 @ wfc.T   (GEMVs, computed once per weight update)
//   c2, e2 [QKV] f32  c2 = g2 @ wqkv.T, e2 = b2 @ wqkv.T
// Results:
//   x2 [M, D], qkv [M, QKV]          (= nn gpt2_block results #0, #1)
//   x1 [M, D], u [M, F] (MLP pre-activation, saved for backward)
//   rstd1, rmu1, rstd2, rmu2 [M] f32 (r and r * mu of x1 and x2)
// Kernels:
//   G1  x1 = x0 + (y0 @ wo.T + bo); h1 = x1 * g1; partials sum(x1), sum(x1^2);  fold r1, rmu1
//   G2  u = r1 * (h1 @ wfc.T) - rmu1 * c1 + e1 + bfc; a = gelu_tanh(u)
//   G3  x2 = x1 + (a @ wproj.T + bproj); h2 = x2 * g2; partials;                fold r2, rmu2
//   G4  qkv = r2 * (h2 @ wqkv.T) - rmu2 * c2 + e2 + bqkv
"""
    V = T(d, dt)
    sig = (
        f"func.func @gpt2_fwd(%x0: {X}, %y0: {X}, %wo: {T(d, d, dt)}, %bo: {V}, %g1: {V}, %b1: {V},\n"
        f"                    %wfc: {T(f, d, dt)}, %bfc: {T(f, dt)}, %wproj: {T(d, f, dt)}, %bproj: {V}, %g2: {V}, %b2: {V},\n"
        f"                    %wqkv: {T(q, d, dt)}, %bqkv: {T(q, dt)}, %c1: {T(f, 'f32')}, %e1: {T(f, 'f32')},\n"
        f"                    %c2: {T(q, 'f32')}, %e2: {T(q, 'f32')})\n"
        f"    -> ({X}, {T(m, q, dt)}, {X}, {T(m, f, dt)}, {R}, {R}, {R}, {R})"
    )
    ft, qt = tile(m, f), tile(m, q)
    k0, k1 = math.sqrt(2.0 / math.pi), 0.044715
    g2 = f"""\
// G2: MLP-up GEMM, deferred LayerNorm 1, bias, GELU (tanh)
%u, %a = coda.gemm %h1, %wfc transpose_b ins(%r1, %rmu1, %c1, %e1, %bfc : {R}, {R}, {T(f, "f32")}, {T(f, "f32")}, {T(f, dt)}) : {X}, {T(f, d, dt)} -> ({T(m, f, dt)}, {T(m, f, dt)}) {{
^bb0(%acc: {ft}, %r: {R}, %rmu: {R}, %c: {T(f, "f32")}, %e: {T(f, "f32")}, %bias: {T(f, dt)}):
{deferred_ln_prologue(m, f, dt)}
  %act = coda.map %pre : {ft} -> {ft} {{
  ^bb0(%v: f32):
    %half = arith.constant 0.5 : f32
    %one = arith.constant 1.0 : f32
    %k0 = arith.constant {flt(k0)} : f32
    %k1 = arith.constant {flt(k1)} : f32
    %v2 = arith.mulf %v, %v : f32
    %v3 = arith.mulf %v2, %v : f32
    %kv3 = arith.mulf %k1, %v3 : f32
    %inner = arith.addf %v, %kv3 : f32
    %arg = arith.mulf %k0, %inner : f32
    %th = math.tanh %arg : f32
    %onep = arith.addf %one, %th : f32
    %hv = arith.mulf %half, %v : f32
    %o = arith.mulf %hv, %onep : f32
    coda.yield %o : f32
  }}
  coda.yield %pre, %act : {ft}, {ft}
}}"""
    g4 = f"""\
// G4: QKV GEMM, deferred LayerNorm 2, bias
%qkv = coda.gemm %h2, %wqkv transpose_b ins(%r2, %rmu2, %c2, %e2, %bqkv : {R}, {R}, {T(q, "f32")}, {T(q, "f32")}, {T(q, dt)}) : {X}, {T(q, d, dt)} -> {T(m, q, dt)} {{
^bb0(%acc: {qt}, %r: {R}, %rmu: {R}, %c: {T(q, "f32")}, %e: {T(q, "f32")}, %bias: {T(q, dt)}):
{deferred_ln_prologue(m, q, dt)}
  coda.yield %pre : {qt}
}}"""
    body = [
        "// G1: attention out-proj GEMM + bias + residual; stores x1, h1 = x1 * g1; emits sum(x1), sum(x1^2)",
        layer_norm_gemm(("%x1", "%h1", "%s1", "%ss1"), "%y0", "%wo", ("%x0", "%bo", "%g1"), m, d, d, dt),
        layer_norm_fold(("%r1", "%rmu1"), ("%s1", "%ss1"), m, d, s.eps),
        g2,
        "// G3: MLP-down GEMM + bias + residual; stores x2, h2 = x2 * g2; emits sum(x2), sum(x2^2)",
        layer_norm_gemm(("%x2", "%h2", "%s2", "%ss2"), "%a", "%wproj", ("%x1", "%bproj", "%g2"), m, f, d, dt),
        layer_norm_fold(("%r2", "%rmu2"), ("%s2", "%ss2"), m, d, s.eps),
        g4,
    ]
    ret = (
        f"func.return %x2, %qkv, %x1, %u, %r1, %rmu1, %r2, %rmu2 : {X}, {T(m, q, dt)}, {X}, {T(m, f, dt)}, {R}, {R}, {R}, {R}"
    )
    return func_text(header, sig, body, ret)


# ============================================================================ coda: LM head + CE


def coda_lm_head_ce(s: LmHead) -> str:
    dt, m, d, v, ign = s.dt, s.m, s.d, s.v, s.ignore_index
    X = T(m, d, dt)
    R = T(m, "f32")
    I = T(m, "i32")
    S = "tensor<f32>"
    header = f"""\
// LM head with cross-entropy: final RMSNorm (no producer GEMM, so a row kernel), vocabulary GEMM
// with online log-sum-exp partials and the selected target logit (the [M, V] logits are never
// written), ONE fold kernel that gives the per-row lse and, in its finalize region, the mean loss
// over non-ignored rows; then the training gradient of the logits by recomputing the GEMM.
// Shapes: M = {m} tokens, D = {d} hidden, V = {v} vocabulary; eps = {flt(s.eps)}; ignore_index = {ign}.
//
// Inputs:
//   x [M, D] {dt}  final residual stream     wn [D] {dt}  final RMSNorm weight
//   wlm [V, D] {dt}  vocabulary projection   targets [M] i32 ({ign} = ignored row)
//   dloss 0-d f32  upstream gradient of the loss (1.0 for a plain backward)
// Results:
//   loss  0-d f32   mean over rows with targets != {ign} of lse(logits[m]) - logits[m, targets[m]]
//                   (= nn lm_head's result; nan when every row is ignored, as PyTorch)
//   dlogits [M, V] {dt}  dloss * (softmax(logits) - onehot(targets)) / count, 0 on ignored rows
//   h [M, D] {dt}  x * wn (the deferred-norm GEMM operand)     rstd [M] f32
//   lse [M] f32   logsumexp of each row of logits = rstd * (h @ wlm.T)
//   count 0-d f32  the number of non-ignored rows
// Kernels:
//   K1  elementwise [M, D]: h = x * wn, partials sum(x^2);  fold rstd
//   K2  logits = rstd * (h @ wlm.T) (registers only): lse partials (dim 1), select(logits, targets)
//   K3  fold: lse per row; sums of (lse - target logit) and 1 over kept rows; finalize -> mean, count
//   K4  dlogits = recompute logits; (exp(logits - lse[m]) - [col == target]) * dloss / count, or 0
"""
    sig = (
        f"func.func @lm_head_ce(%x: {X}, %wn: {T(d, dt)}, %wlm: {T(v, d, dt)}, %targets: {I}, %dloss: {S})\n"
        f"    -> ({S}, {T(m, v, dt)}, {X}, {R}, {R}, {S})"
    )
    xt = tile(m, d)
    vt, vi = tile(m, v), tile(m, v, "i32")
    k1 = f"""\
// K1: the final RMSNorm's statistics and h = x * wn (first norm: no producer GEMM)
%h, %ssp = coda.elementwise [{m}, {d}] ins(%x, %wn : {X}, {T(d, dt)}) -> ({X}, {parts("rows", m)}) {{
^bb0(%xx: {X}, %g: {T(d, dt)}):
  %xv = coda.load %xx : {X} -> {xt}
  %hv = coda.scale %xv, %g cols : {xt}, {T(d, dt)}
  %ss = coda.reduce sumsq %xv dim 1 : {xt} -> {parts("rows", m)}
  coda.yield %hv, %ss : {xt}, {parts("rows", m)}
}}"""
    k2 = f"""\
// K2: vocabulary GEMM, deferred rstd, online LSE partials and the target logit
%lsep, %tlp = coda.gemm %h, %wlm transpose_b ins(%rstd, %targets : {R}, {I}) : {X}, {T(v, d, dt)} -> ({parts("rows", m, "lse")}, {parts("rows", m)}) {{
^bb0(%acc: {vt}, %r: {R}, %t: {I}):
  %z = coda.scale %acc, %r rows : {vt}, {R}
  %l = coda.reduce lse %z dim 1 : {vt} -> {parts("rows", m, "lse")}
  %tl = coda.select %z, %t : {vt}, {I} -> {parts("rows", m)}
  coda.yield %l, %tl : {parts("rows", m, "lse")}, {parts("rows", m)}
}}"""
    k3 = f"""\
// K3: one fold kernel: per-row lse, loss and count summed over rows, finalize -> mean loss, count
%lse, %loss, %count = coda.fold %lsep, %tlp : {parts("rows", m, "lse")}, {parts("rows", m)} ins(%targets : {I}) -> ({R}, {S}, {S}) {{
^bb0(%l: f32, %tl: f32, %t: i32):
  %ign = arith.constant {ign} : i32
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %keep = arith.cmpi ne, %t, %ign : i32
  %nll = arith.subf %l, %tl : f32
  %row = arith.select %keep, %nll, %zero : f32
  %cnt = arith.select %keep, %one, %zero : f32
  coda.yield %l, %row, %cnt : f32, f32, f32
}} finalize {{
^bb0(%total: f32, %n: f32):
  %mean = arith.divf %total, %n : f32
  coda.yield %mean, %n : f32, f32
}}"""
    k4 = f"""\
// K4: dlogits by recomputing the logits tile: softmax - onehot, scaled by dloss / count
%dlogits = coda.gemm %h, %wlm transpose_b ins(%rstd, %lse, %targets, %count, %dloss : {R}, {R}, {I}, {S}, {S}) : {X}, {T(v, d, dt)} -> {T(m, v, dt)} {{
^bb0(%acc: {vt}, %r: {R}, %ls: {R}, %t: {I}, %cn: {S}, %dl: {S}):
  %z = coda.scale %acc, %r rows : {vt}, {R}
  %lt = coda.broadcast %ls rows : {R} -> {vt}
  %tt = coda.broadcast %t rows : {I} -> {vi}
  %ct = coda.index cols : {vi}
  %nt = coda.broadcast %cn scalar : {S} -> {vt}
  %dt = coda.broadcast %dl scalar : {S} -> {vt}
  %g = coda.map %z, %lt, %tt, %ct, %nt, %dt : ({vt}, {vt}, {vi}, {vi}, {vt}, {vt}) -> {vt} {{
  ^bb0(%zv: f32, %lv: f32, %tv: i32, %cv: i32, %nv: f32, %dv: f32):
    %ign = arith.constant {ign} : i32
    %zero = arith.constant 0.0 : f32
    %one = arith.constant 1.0 : f32
    %sh = arith.subf %zv, %lv : f32
    %p = math.exp %sh : f32
    %hit = arith.cmpi eq, %cv, %tv : i32
    %oh = arith.select %hit, %one, %zero : f32
    %gr = arith.subf %p, %oh : f32
    %sc = arith.divf %dv, %nv : f32
    %gs = arith.mulf %gr, %sc : f32
    %keep = arith.cmpi ne, %tv, %ign : i32
    %o = arith.select %keep, %gs, %zero : f32
    coda.yield %o : f32
  }}
  coda.yield %g : {vt}
}}"""
    body = [k1, rstd_fold("%rstd", "%ssp", m, d, s.eps), k2, k3, k4]
    ret = f"func.return %loss, %dlogits, %h, %rstd, %lse, %count : {S}, {T(m, v, dt)}, {X}, {R}, {R}, {S}"
    return func_text(header, sig, body, ret)


# ============================================================================ files


def _with_dt(s, dt: str):
    from dataclasses import replace

    return replace(s, dt=dt)


def all_files() -> dict[Path, str]:
    files: dict[Path, str] = {}
    ex = ROOT / "examples"
    files[ex / "llama_block.mlir"] = nn_llama_block(LLAMA3_8B)
    files[ex / "qwen3_block.mlir"] = nn_llama_block(QWEN3_8B, qk_norm=True, fname="qwen3_block")
    files[ex / "gpt2_block.mlir"] = nn_gpt2_block(GPT2_MEDIUM)
    files[ex / "lm_head.mlir"] = nn_lm_head(LLAMA3_LM_HEAD)
    nn_dir = ROOT / "tests" / "programs" / "nn"
    for dt, suffix in (("bf16", ""), ("f32", "_f32")):
        files[nn_dir / f"llama_block{suffix}.mlir"] = nn_llama_block(_with_dt(LLAMA_SMALL, dt))
        files[nn_dir / f"qwen3_block{suffix}.mlir"] = nn_llama_block(
            _with_dt(QWEN3_SMALL, dt), qk_norm=True, fname="qwen3_block"
        )
        files[nn_dir / f"gpt2_block{suffix}.mlir"] = nn_gpt2_block(_with_dt(GPT2_SMALL, dt))
        files[nn_dir / f"lm_head{suffix}.mlir"] = nn_lm_head(_with_dt(LM_HEAD_SMALL, dt))
    coda_dir = ROOT / "tests" / "programs" / "coda"
    files[coda_dir / "llama_fwd.mlir"] = coda_llama_fwd(LLAMA_SMALL)
    files[coda_dir / "llama_bwd.mlir"] = coda_llama_bwd(LLAMA_SMALL)
    files[coda_dir / "gpt2_fwd.mlir"] = coda_gpt2_fwd(GPT2_SMALL)
    files[coda_dir / "lm_head_ce.mlir"] = coda_lm_head_ce(LM_HEAD_SMALL)
    cex = ex / "coda"
    files[cex / "llama_fwd.mlir"] = coda_llama_fwd(LLAMA3_8B)
    files[cex / "llama_bwd.mlir"] = coda_llama_bwd(LLAMA3_8B)
    files[cex / "gpt2_fwd.mlir"] = coda_gpt2_fwd(GPT2_MEDIUM)
    files[cex / "lm_head_ce.mlir"] = coda_lm_head_ce(LLAMA3_LM_HEAD)
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if a generated file differs")
    args = parser.parse_args()
    stale = []
    for path, text in all_files().items():
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if stale:
        print("stale generated programs:\n" + "\n".join(str(p.relative_to(ROOT)) for p in stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
