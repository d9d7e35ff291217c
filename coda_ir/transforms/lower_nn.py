"""`convert-nn-to-coda`: the baseline lowering of every `nn` op to standalone coda kernels.

This is the fallback that must always be correct: each `nn` op becomes its own kernels,
with no fusion between ops (the `coda-fuse` pass merges them afterwards).

| nn op | kernels |
|---|---|
| linear / matmul | `coda.gemm` (transpose_b for linear) with a plain epilogue |
| add / mul | `coda.elementwise`: accumulate / map, or shift / scale cols for a rank-1 rhs |
| silu / relu / gelu / scale / softcap | `coda.elementwise` with a `coda.map` |
| rms_norm | one row kernel (`segment_reduce sumsq width D`, D a power of two <= 8192); otherwise elementwise sum-of-squares partials, `coda.fold` -> rstd, elementwise apply |
| layer_norm | one row kernel (mean, then variance of x - mean); otherwise sum and sum-of-squares partials, fold -> (rstd, -mean), apply |
| swiglu / geglu | elementwise [M, F] over the 2F-wide z tile: `coda.pair_map stride F` (2 -> 1) |
| rope | elementwise: angles from `coda.index cols` and `pos[m]`, `coda.pair_map` (stride hd/2 or 1; stride rd/2 period hd for a "half" rotary_dim not dividing hd); with `cos_sin_table` (nn-plan) a [M, hd/2] cos/sin table kernel first and the pair_map reading it (`rope_table_kernel`, `use_rope_table`) |
| head_rms_norm | elementwise: `coda.segment_reduce sumsq width hd`, map |
| cross_entropy | elementwise LSE partials + target `coda.select`, one fold with a finalize; planned out of the logits GEMM's epilogue (nn-plan): one `whole rows` kernel (row lse and target logit complete in the program), the fold sums the rows |
| cross_entropy_partials | one vocabulary shard: elementwise LSE partials + the target logit (a map over `col + vocab_start == t[m]`, row-summed), one fold to two f32 row vectors (no loss: combined across ranks first) |

Pairs at stride F (swiglu) or hd/2 (rope) are tile-local in a standalone elementwise kernel
only when its column tile holds whole pair groups; `coda-legalize` records that as a tile
constraint on the kernel (`coda.constraints`), which the lowering honours by its choice of
BN; where no power-of-two tile holds a group, it marks the op `coda.gathered` (pairs and
segments read from memory), which the lowering emits as such.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, ModuleOp, StringAttr, TensorType, UnitAttr, f32, i32, i64
from xdsl.dialects import math as xmath
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from coda_ir.dialects import nn
from coda_ir.dialects import coda
from coda_ir.dialects.coda import Axis, ReduceKind, TileType
from coda_ir.transforms.kernel_builder import Epilogue, Scalar, elementwise, elt_of, fold, gemm, scalar_body, shape_of, stamp

ORIGIN = "coda.origin"
"""Discardable attribute naming the nn op a kernel came from (for remarks and FileCheck)."""


def prop_value(op: Operation, name: str):
    attr = op.properties[name]
    if isinstance(attr, (IntegerAttr, FloatAttr)):
        return attr.value.data
    assert isinstance(attr, StringAttr)
    return attr.data


def stamp_origin(kernel: Operation, op: Operation, role: str | None = None) -> Operation:
    kernel.attributes[ORIGIN] = StringAttr(op.name + (f".{role}" if role else ""))
    return stamp(kernel, op.location)


# ----------------------------------------------------------------------------- per-op lowerings


def lower_linear(op: nn.LinearOp | nn.MatmulOp) -> tuple[list[Operation], SSAValue]:
    a, b = op.operands
    k = gemm(a, b, [], lambda e, acc: [acc], [elt_of(op.results[0])], transpose_b=isinstance(op, nn.LinearOp))
    return [stamp_origin(k, op)], k.results[0]


def lower_binary(op: nn.AddOp | nn.MulOp) -> tuple[list[Operation], SSAValue]:
    lhs, rhs = op.lhs, op.rhs
    is_add = isinstance(op, nn.AddOp)
    if len(shape_of(lhs)) == 1:  # two vectors (summed weight gradients): a fold of no partials
        k = fold([], [lhs, rhs], [op.results[0].type], lambda s, a, b: s.add(a, b) if is_add else s.mul(a, b))
        return [stamp_origin(k, op)], k.results[0]
    if len(shape_of(rhs)) == 1:
        def build(e: Epilogue, a, v):
            t = e.load(a)
            return [e.shift(t, v, Axis.COLS) if is_add else e.scale(t, v, Axis.COLS)]
    elif is_add:
        def build(e: Epilogue, a, b):
            return [e.accumulate(e.load(a), b)]
    else:
        def build(e: Epilogue, a, b):
            return [e.map1([e.load(a), e.load(b)], lambda s, x, y: s.mul(x, y))]
    k = elementwise(shape_of(lhs), [lhs, rhs], build, [elt_of(op.results[0])])
    return [stamp_origin(k, op)], k.results[0]


def unary_fn(op: Operation) -> Callable:
    if isinstance(op, nn.SiluOp):
        return lambda s, x: s.silu(x)
    if isinstance(op, nn.ReluOp):
        return lambda s, x: s.relu(x)
    if isinstance(op, nn.ScaleOp):
        factor = prop_value(op, "factor")
        return lambda s, x: s.mul(x, s.const(factor))
    if isinstance(op, nn.SoftcapOp):
        cap = prop_value(op, "cap")
        return lambda s, x: s.mul(s.const(cap), s.tanh(s.div(x, s.const(cap))))
    assert isinstance(op, nn.GeluOp)
    approximate = prop_value(op, "approximate")
    return lambda s, x: s.gelu(x, approximate)


def lower_unary(op: nn.SiluOp | nn.ReluOp | nn.GeluOp) -> tuple[list[Operation], SSAValue]:
    fn = unary_fn(op)
    k = elementwise(shape_of(op.x), [op.x], lambda e, x: [e.map1([e.load(x)], fn)], [elt_of(op.results[0])])
    return [stamp_origin(k, op)], k.results[0]


def rms_stats(op: Operation, x: SSAValue, eps: float) -> list[Operation]:
    """Partials of sum(x^2) and the fold to rstd (shared with coda-defer-norms)."""
    m, d = shape_of(x)
    stats = elementwise((m, d), [x], lambda e, t: [e.reduce(ReduceKind.SUMSQ, e.load(t), 1)], [None])
    inv_d = 1.0 / d
    r = fold(
        [stats.results[0]], [], [TensorType(f32, [m])],
        lambda s, ss: s.rsqrt(s.add(s.mul(ss, s.const(inv_d)), s.const(eps))),
    )
    return [stamp_origin(stats, op, "stats"), stamp_origin(r, op, "rstd")]


def ln_partials(x: SSAValue) -> coda.ElementwiseOp:
    """Row partials of sum(x) and sum(x^2) (the LayerNorm statistics before their fold)."""

    def build(e: Epilogue, t):
        tile = e.load(t)
        return [e.reduce(ReduceKind.SUM, tile, 1), e.reduce(ReduceKind.SUMSQ, tile, 1)]

    return elementwise(shape_of(x), [x], build, [None, None])


def ln_moments(s: Scalar, sm: SSAValue, ss: SSAValue, d: int, eps: float) -> tuple[SSAValue, SSAValue]:
    """(mean, rstd) of a row from its folded sum and sum of squares (biased variance)."""
    inv_d = 1.0 / d
    mu = s.mul(sm, s.const(inv_d))
    var = s.max(s.sub(s.mul(ss, s.const(inv_d)), s.mul(mu, mu)), s.const(0.0))
    return mu, s.rsqrt(s.add(var, s.const(eps)))


def ln_stats(op: Operation, x: SSAValue, eps: float, with_mean: bool = False) -> list[Operation]:
    """Partials of sum(x) and sum(x^2), folded to (rstd, -mean, rstd * mean), and the mean
    itself as a fourth result `with_mean` (what an nn.layer_norm_stats of x saves)."""
    m, d = shape_of(x)
    stats = ln_partials(x)

    def body(s: Scalar, sm, ss):
        mu, r = ln_moments(s, sm, ss, d, eps)
        return [r, s.neg(mu), s.mul(r, mu), *([mu] if with_mean else [])]

    vec = TensorType(f32, [m])
    r = fold(list(stats.results), [], [vec] * (4 if with_mean else 3), body)
    return [stamp_origin(stats, op, "stats"), stamp_origin(r, op, "rstd")]


ROW_KERNEL_MAX = 8192
"""Widest row a one-kernel norm holds in a single column tile (a power of two)."""


def row_kernel_fits(d: int) -> bool:
    """Whether a norm over rows of d columns can run as one row kernel (BN = d)."""
    return d & (d - 1) == 0 and 16 <= d <= ROW_KERNEL_MAX


def norm_weight(e: Epilogue, w: SSAValue, like: SSAValue, offset: float) -> SSAValue:
    """An RMSNorm weight broadcast over the columns of `like` as the norm applies it: `w + offset`
    in fp32 (nn.rms_norm's optional offset, Gemma's `1 + w`), w itself without an offset."""
    wt = e.broadcast(w, Axis.COLS, like)
    return wt if not offset else e.map1([wt], lambda s, g: s.add(g, s.const(offset)))


def scale_by_norm_weight(e: Epilogue, tile: SSAValue, w: SSAValue, offset: float) -> SSAValue:
    """`tile * (w + offset)` over columns: a column scale without an offset."""
    if not offset:
        return e.scale(tile, w, Axis.COLS)
    return e.map1([tile, norm_weight(e, w, tile, offset)], lambda s, v, g: s.mul(v, g))


def rms_row_kernel(op: nn.RMSNormOp) -> tuple[list[Operation], SSAValue]:
    """One kernel whose column tile holds whole rows: `segment_reduce sumsq width D`."""
    m, d = shape_of(op.x)
    eps = prop_value(op, "eps")

    def build(e: Epilogue, x, w):
        t = e.load(x)
        ss = e.segment_reduce(ReduceKind.SUMSQ, t, d)
        wt = norm_weight(e, w, t, nn.norm_offset(op))
        return [e.map1([t, ss, wt], lambda s, v, q, g: s.mul(s.mul(v, s.rsqrt(s.add(s.mul(q, s.const(1.0 / d)), s.const(eps)))), g))]

    k = elementwise((m, d), [op.x, op.w], build, [elt_of(op.results[0])])
    return [stamp_origin(k, op, "row")], k.results[0]


def ln_row_kernel(op: nn.LayerNormOp) -> tuple[list[Operation], SSAValue]:
    """One row kernel, two-pass in registers: mean, then the variance of x - mean."""
    m, d = shape_of(op.x)
    eps = prop_value(op, "eps")

    def build(e: Epilogue, x, w, b):
        t = e.load(x)
        sm = e.segment_reduce(ReduceKind.SUM, t, d)
        xc = e.map1([t, sm], lambda s, v, q: s.sub(v, s.mul(q, s.const(1.0 / d))))
        var = e.segment_reduce(ReduceKind.SUMSQ, xc, d)
        wt, bt = e.broadcast(w, Axis.COLS, t), e.broadcast(b, Axis.COLS, t)

        def apply(s: Scalar, v, q, g, c):
            r = s.rsqrt(s.add(s.mul(q, s.const(1.0 / d)), s.const(eps)))
            return s.add(s.mul(s.mul(v, r), g), c)

        return [e.map1([xc, var, wt, bt], apply)]

    k = elementwise((m, d), [op.x, op.w, op.b], build, [elt_of(op.results[0])])
    return [stamp_origin(k, op, "row")], k.results[0]


def lower_rms_norm(op: nn.RMSNormOp) -> tuple[list[Operation], SSAValue]:
    if row_kernel_fits(shape_of(op.x)[1]):
        return rms_row_kernel(op)
    ops = rms_stats(op, op.x, prop_value(op, "eps"))
    apply = rms_apply_kernel(op, op.x, op.w, ops[-1].results[0])
    return [*ops, apply], apply.results[0]


def rms_apply_kernel(op: Operation, x: SSAValue, w: SSAValue, rstd: SSAValue) -> coda.ElementwiseOp:
    """`x * rstd[m] * w` from a known statistic (an RMSNorm's apply step, `nn.rms_norm_apply`)."""

    def build(e: Epilogue, xt, r, wt):
        return [scale_by_norm_weight(e, e.scale(e.load(xt), r, Axis.ROWS), wt, nn.norm_offset(op))]

    apply = elementwise(shape_of(x), [x, rstd, w], build, [elt_of(op.results[0])])
    return stamp_origin(apply, op, "apply")


def lower_rms_norm_apply(op: nn.RMSNormApplyOp) -> tuple[list[Operation], SSAValue]:
    k = rms_apply_kernel(op, op.x, op.w, op.rstd)
    return [k], k.results[0]


def lower_zeros(op: nn.ZerosOp) -> tuple[list[Operation], SSAValue]:
    """Zeros: a fold of nothing for a vector, an elementwise kernel of a constant for a matrix."""
    shape = shape_of(op.result)
    if len(shape) == 1:
        k: Operation = fold([], [], [op.result.type], lambda s: s.const(0.0))
    else:
        def build(e: Epilogue):
            cols = e._add(coda.IndexOp(Axis.COLS, TileType(shape, i32)))
            return [e.map1([cols], lambda s, c: s.const(0.0))]

        k = elementwise(shape, [], build, [elt_of(op.result)])
    return [stamp_origin(k, op)], k.results[0]


def lower_layer_norm_apply(op: nn.LayerNormApplyOp) -> tuple[list[Operation], SSAValue]:
    """`(x - mean[m]) * rstd[m] * w + b` from the saved statistics."""

    def build(e: Epilogue, x, mu, r, w, b):
        t = e.load(x)
        t = e.map1([t, e.broadcast(mu, Axis.ROWS, t)], lambda s, v, q: s.sub(v, q))
        t = e.scale(t, r, Axis.ROWS)
        return [e.shift(e.scale(t, w, Axis.COLS), b, Axis.COLS)]

    k = elementwise(shape_of(op.x), [op.x, op.mean, op.rstd, op.w, op.b], build, [elt_of(op.results[0])])
    return [stamp_origin(k, op)], k.results[0]


def lower_layer_norm(op: nn.LayerNormOp) -> tuple[list[Operation], SSAValue]:
    if row_kernel_fits(shape_of(op.x)[1]):
        return ln_row_kernel(op)
    ops = ln_stats(op, op.x, prop_value(op, "eps"))
    rstd, negmu = ops[-1].results[0], ops[-1].results[1]

    def build(e: Epilogue, x, nm, r, w, b):
        t = e.scale(e.shift(e.load(x), nm, Axis.ROWS), r, Axis.ROWS)
        return [e.shift(e.scale(t, w, Axis.COLS), b, Axis.COLS)]

    apply = elementwise(shape_of(op.x), [op.x, negmu, rstd, op.w, op.b], build, [elt_of(op.results[0])])
    return [*ops, stamp_origin(apply, op, "apply")], apply.results[0]


def gated_fn(op: Operation) -> Callable:
    if isinstance(op, nn.SwiGLUOp):
        return lambda s, g, u: s.mul(s.silu(g), u)
    approximate = prop_value(op, "approximate")
    return lambda s, g, u: s.mul(s.gelu(g, approximate), u)


def lower_gated(op: nn.SwiGLUOp | nn.GeGLUOp) -> tuple[list[Operation], SSAValue]:
    m, two_f = shape_of(op.z)
    f = two_f // 2
    fn = gated_fn(op)

    def build(e: Epilogue, z):
        return e.pair_map([e.load(z)], [(m, f)], fn, stride=f, wide=[True])

    k = elementwise((m, f), [op.z], build, [elt_of(op.results[0])])
    return [stamp_origin(k, op)], k.results[0]


def _f32(x: float) -> float:
    import struct

    return struct.unpack("f", struct.pack("f", x))[0]


def _table(s: Scalar, idx: SSAValue, values: list[float]) -> SSAValue:
    """`values[idx]` for a small integer tile, as a chain of selects."""
    out = s.const(values[0])
    for k in range(1, len(values)):
        out = s.select(s.cmpi("eq", idx, s.iconst(k)), s.const(values[k]), out)
    return out


def inv_freq(s: Scalar, i: SSAValue, hd: int, theta: float, values: tuple[float, ...] | None = None) -> SSAValue:
    """`theta ** (-2 i / hd)` in fp32 for an integer i in [0, hd/2); with `values` (nn.rope's
    `inv_freq`), `values[i]` exactly: one chain of hd/2 - 1 selects. (The model's own fp32
    frequencies are 1-2 ulp away from the correctly rounded ones in about a third of the
    entries, and no product of two tables reproduces arbitrary bits; an ulp of a frequency is
    ~1e-4 rad of angle at position 4096, 1000x the angle's own rounding.)

    Computing it as `exp(i * k)` loses ~8 ulp (the rounding of the exponent), which the
    angle `pos * inv_freq` multiplies by up to thousands of radians. Instead, with
    `i = a * S + b`, it is `T1[a] * T2[b]` from two tables of fp32 constants rounded from
    float64 (`S ~ sqrt(hd/2)`, so about 2 sqrt(hd/2) selects): at most ~1.5 ulp."""
    half = hd // 2
    if values is not None:
        return _table(s, i, [_f32(v) for v in values])
    theta = _f32(theta)
    if half <= 8:
        return _table(s, i, [_f32(theta ** (-2.0 * t / hd)) for t in range(half)])
    step = 1 << ((half - 1).bit_length() + 1) // 2
    hi = s.divi(i, s.iconst(step))
    lo = s.remi(i, s.iconst(step))
    t1 = _table(s, hi, [_f32(theta ** (-2.0 * step * a / hd)) for a in range(-(-half // step))])
    t2 = _table(s, lo, [_f32(theta ** (-2.0 * b / hd)) for b in range(step)])
    return s.mul(t1, t2)


def rope_epilogue(e: Epilogue, tile: SSAValue, pos: SSAValue, op: Operation, sign: float = 1.0,
                  parts: list[RopeParts] | None = None) -> SSAValue:
    """RoPE of `tile` (an N-wide tile) by the angles of `op` (shared with the fuser); `sign`
    -1 rotates by the negated angle (`nn.rope_grad`).

    The angles live on a narrow tile, one per rotated pair (the pair_map's P = N/2 columns):
    pair p is frequency `p mod hd/2` of head `p div hd/2` in both styles (stride hd/2 pairs
    (i, i + hd/2) in groups of hd; stride 1 pairs (2p, 2p + 1)), and also after the gemm's
    columns are interleaved (pair p is then accumulator columns 2p, 2p + 1). Half the angle
    work and registers of a per-column angle tile.

    The negation is part of the angle map, not the rotation: the cos/sin tables
    `rope_table_kernel` clones from the angle map then hold cos(-a), sin(-a), so a gradient may
    read tables too. `parts` (if given) receives the record of what was built."""
    hd, heads = prop_value(op, "head_dim"), prop_value(op, "rotary_heads")
    theta, style = prop_value(op, "theta"), prop_value(op, "style")
    freqs = nn.inv_freq_of(op)
    rd, scaling = nn.rotary_dim_of(op), nn.rope_scaling_of(op)
    m, n = tile.type.get_shape()  # type: ignore[attr-defined]
    half = hd // 2
    narrow = TileType((m, n // 2), f32)
    pairs = e._add(coda.IndexOp(Axis.COLS, narrow))
    rows = e._add(coda.BroadcastOp(pos, Axis.ROWS, narrow))

    # Pair p belongs to head p div hd/2 and is its pair j = p mod hd/2 in both styles (stride
    # rd/2 pairs (i, i + rd/2) in groups of rd, hd/rd groups a head; stride 1 pairs (2p, 2p + 1)):
    # it rotates by frequency j when j < rd/2 (the first rd columns) and the head is rotary.
    def rotary(s: Scalar, p, yes, otherwise: float):
        """`yes` on the pairs that rotate, the constant `otherwise` on those that pass through."""
        if rd != hd:
            yes = s.select(s.cmpi("slt", s.remi(p, s.iconst(half)), s.iconst(rd // 2)), yes, s.const(otherwise))
        inside = s.cmpi("slt", p, s.iconst(heads * half))
        return s.select(inside, yes, s.const(otherwise))

    def angle(s: Scalar, p, r):
        a = s.mul(s.to_f32(r), inv_freq(s, s.remi(p, s.iconst(half)), rd, theta, freqs))
        if sign < 0:
            a = s.neg(a)
        return rotary(s, p, a, 0.0)

    ang = e.map1([pairs, rows], angle)
    inputs, wide = [tile, ang], [True, False]
    if scaling != 1.0:
        # a per-pair magnitude (1 on the pairs that pass through): the cos/sin tables stay the
        # unscaled rotation's, shared by the forward and the gradient
        inputs.append(e.map1([pairs], lambda s, p: rotary(s, p, s.const(scaling), 1.0)))
        wide.append(False)

    def rotate(s: Scalar, x1, x2, a, g=None):
        c, sn = s.cos(a), s.sin(a)
        if g is not None:
            c, sn = s.mul(c, g), s.mul(sn, g)
        return [s.sub(s.mul(x1, c), s.mul(x2, sn)), s.add(s.mul(x2, c), s.mul(x1, sn))]

    stride = rd // 2 if style == "half" else 1
    # "half" with rd not dividing hd (Phi-4-mini's 96 of 128): pairs (i, i + rd/2) in the first
    # rd columns of each head, the hd - rd others paired adjacently (2j, 2j + 1) for j >= rd/2,
    # which the angle map passes through: `period hd`. Pair p is still pair p mod hd/2 of head
    # p div hd/2, so the angle map, the scaling and the cos/sin tables are unchanged.
    period = hd if style == "half" and hd % rd else None
    rotated = e.pair_map(inputs, [(m, n)], rotate, stride=stride, wide=wide, period=period)[0]
    if parts is not None:
        parts.append(RopeParts(rotated.owner, ang.owner, pos, half, heads * half))  # type: ignore[arg-type]
    return rotated


@dataclass
class RopeParts:
    """The ops `rope_epilogue` built for one rotation (its own record of them, so that the
    table form can be derived without recognizing RoPE in the arithmetic)."""

    pair_map: coda.PairMapOp
    angle: coda.MapOp  # (pair index, pos[m]) -> angle, on the narrow pair tile
    pos: SSAValue  # the kernel's block argument holding the positions
    half: int  # hd/2: the angle depends on the pair index only through p mod hd/2
    limit: int  # rotary_heads * hd/2: pairs at or beyond it are not rotated


def rope_table_kernel(pos: SSAValue, m: int, match: RopeParts) -> coda.ElementwiseOp:
    """`coda.elementwise [M, hd/2]`: cos and sin (fp32) of the angle of each (row, frequency).

    The angle map's body is cloned as is onto the [M, hd/2] tile: pair p < hd/2 gives the
    same `remsi` and (p < rotary_heads * hd/2, rotary_heads >= 1) the same select, so each
    table entry is bit-identical to what the epilogue computed for every pair p' = p mod hd/2
    of a rotary head."""
    half = match.half

    def build(e: Epilogue, p):
        like = TileType((m, half), f32)
        pairs = e._add(coda.IndexOp(Axis.COLS, like))
        rows = e._add(coda.BroadcastOp(p, Axis.ROWS, like))
        ang = e._add(coda.MapOp([pairs, rows], [like], match.angle.body.clone()))
        return e.map([ang], lambda s, a: [s.cos(a), s.sin(a)], n_out=2)

    table = elementwise((m, half), [pos], build, [f32, f32])
    table.results[0].name_hint, table.results[1].name_hint = "rope_cos", "rope_sin"  # readable IR and reports
    return table


def use_rope_table(kernel: coda.ElementwiseOp, match: RopeParts, cos: SSAValue, sin: SSAValue) -> coda.ElementwiseOp:
    """A copy of `kernel` whose RoPE reads cos/sin from the [M, hd/2] tables (`coda.load
    cols_period hd/2`) instead of computing them: pair p takes column p mod hd/2 of its row.
    Pairs of non-rotary heads (p >= rotary_heads * hd/2) keep cos = 1, sin = 0 by a select on
    the pair index, as the angle map's select to 0 did."""
    block = kernel.body.blocks[0]
    at = list(block.ops).index(match.pair_map)
    at_angle = list(block.ops).index(match.angle)
    new = coda.ElementwiseOp.create(
        operands=[*kernel.operands, cos, sin], result_types=[r.type for r in kernel.results],
        properties=dict(kernel.properties), attributes=dict(kernel.attributes), regions=[kernel.body.clone()],
    )
    new.location = kernel.location
    nblock = new.body.blocks[0]
    cos_arg = nblock.insert_arg(cos.type, len(nblock.args))
    sin_arg = nblock.insert_arg(sin.type, len(nblock.args))
    pm = list(nblock.ops)[at]
    angle = list(nblock.ops)[at_angle]  # the clone keeps the ops in order
    assert isinstance(pm, coda.PairMapOp) and isinstance(angle, coda.MapOp)
    found = RopeParts(pm, angle, nblock.args[match.pos.index], match.half, match.limit)  # type: ignore[attr-defined]
    narrow_ty = found.angle.outputs[0].type
    assert isinstance(narrow_ty, TileType)
    loc = pm.location
    built: list[Operation] = []
    c_tile = coda.LoadOp(cos_arg, found.half, narrow_ty.cols)
    s_tile = coda.LoadOp(sin_arg, found.half, narrow_ty.cols)
    built += [c_tile, s_tile]
    c_val, s_val = c_tile.result, s_tile.result
    if found.limit < narrow_ty.cols:
        limit = found.limit

        def keep(s: Scalar, p, c, sn):
            rotary = s.cmpi("slt", p, s.iconst(limit))
            return [s.select(rotary, c, s.const(1.0)), s.select(rotary, sn, s.const(0.0))]

        sel = coda.MapOp([found.angle.inputs[0], c_val, s_val], [narrow_ty, narrow_ty],
                         scalar_body([i32, f32, f32], keep))
        built.append(sel)
        c_val, s_val = sel.results
    # the rotation body, with the angle argument split into (cos, sin) arguments
    old_body = pm.body.blocks[0]
    inputs: list[SSAValue] = []
    mapping: dict[SSAValue, SSAValue] = {}
    new_block = Block()
    k = 0
    for v in pm.inputs:
        if v is found.angle.outputs[0]:
            inputs += [c_val, s_val]
            a = old_body.args[k]
            ca, sa = new_block.insert_arg(f32, len(new_block.args)), new_block.insert_arg(f32, len(new_block.args))
            for use in list(a.uses):
                mapping[use.operation.results[0]] = ca if isinstance(use.operation, xmath.CosOp) else sa
            k += 1
        else:
            inputs.append(v)
            for _ in range(2 if pm.is_wide(v) else 1):
                mapping[old_body.args[k]] = new_block.insert_arg(old_body.args[k].type, len(new_block.args))
                k += 1
    for inner in old_body.ops:
        if isinstance(inner, (xmath.CosOp, xmath.SinOp)) and inner.operands[0] in old_body.args:
            continue
        new_block.add_op(inner.clone(value_mapper=mapping))
    period = {} if pm.period is None else {"period": pm.period}
    rot = coda.PairMapOp(inputs, [r.type for r in pm.results], Region(new_block), stride=pm.stride, **period)
    rot.attributes.update(pm.attributes)
    built.append(rot)
    for op_ in built:
        stamp(op_, loc)
        nblock.insert_op_before(op_, pm)
    for old, fresh in zip(pm.results, rot.results):
        old.replace_all_uses_with(fresh)
    pm.detach()
    pm.erase()
    # the angle and its inputs are dead now (unless something else reads them)
    for inner in reversed(list(nblock.ops)):
        if inner is not nblock.last_op and inner.results and all(not r.uses for r in inner.results):
            inner.detach()
            inner.erase()
    # drop the inputs only the angle read (the positions): the gemm this fuses into would
    # otherwise carry a dead argument
    keep = [i for i, a in enumerate(nblock.args) if a.uses]
    if len(keep) != len(nblock.args):
        operands = [new.operands[i] for i in keep]
        for a in [a for a in nblock.args if not a.uses]:
            nblock.erase_arg(a)
        new.operands = operands
    new.verify()
    return new


def lower_rope(op: nn.RoPEOp | nn.RoPEGradOp) -> tuple[list[Operation], SSAValue]:
    """An elementwise rotation (the angle's sign negated for `nn.rope_grad`); where nn-plan chose
    cos/sin tables, first the [M, hd/2] table kernel, then the rotation reading it."""
    sign = -1.0 if isinstance(op, nn.RoPEGradOp) else 1.0
    parts: list[RopeParts] = []
    k = elementwise(
        shape_of(op.operands[0]), [op.operands[0], op.pos],
        lambda e, x, p: [rope_epilogue(e, e.load(x), p, op, sign=sign, parts=parts)], [elt_of(op.results[0])],
    )
    stamp_origin(k, op)
    separate = nn.planned(op, "in_producer_epilogue") is False  # nn-plan: an elementwise pass after the GEMM
    if not nn.planned(op, "cos_sin_table"):
        if separate:
            k.attributes[coda.SEPARATE] = UnitAttr()
        return [k], k.results[0]
    (built,) = parts
    table = rope_table_kernel(op.pos, shape_of(op.operands[0])[0], built)
    stamp_origin(table, op, "table")
    rotation = use_rope_table(k, built, table.results[0], table.results[1])
    k.erase()
    if separate:
        rotation.attributes[coda.SEPARATE] = UnitAttr()
    return [table, rotation], rotation.results[0]


def normalized_heads(s: Scalar, col: SSAValue, op: Operation, inside: SSAValue, outside: SSAValue) -> SSAValue:
    """`inside` on the columns of the heads a head_rms_norm(_grad) normalizes (first_head ..
    first_head + heads - 1), `outside` elsewhere."""
    hd, heads, first = prop_value(op, "head_dim"), prop_value(op, "heads"), nn.first_head_of(op)
    value = s.select(s.cmpi("slt", col, s.iconst((first + heads) * hd)), inside, outside)
    if first:
        value = s.select(s.cmpi("sge", col, s.iconst(first * hd)), value, outside)
    return value


def head_norm_weight(e: Epilogue, weights: Sequence[SSAValue], like: SSAValue, op: Operation) -> SSAValue:
    """The weight a head_rms_norm(_grad) applies at each column of `like`, as `w + offset` in f32:
    its one weight broadcast over the heads, or, grouped (`weight_heads`), each column's group's
    weight (a select by column range; columns past the last group read the last weight, which
    only columns outside the normalized heads do, and those pass through)."""
    groups = nn.head_weight_groups(op)
    offset = nn.norm_offset(op)
    if len(groups) == 1:
        return norm_weight(e, weights[0], like, offset)
    hd = prop_value(op, "head_dim")
    cols = e.index(Axis.COLS, like)
    tiles = [e.broadcast(w, Axis.COLS, like) for w in weights]
    ends = [(first + heads) * hd for _, first, heads in groups[:-1]]

    def pick(s: Scalar, c, *ws):
        value = ws[-1]
        for end, w in reversed(list(zip(ends, ws))):
            value = s.select(s.cmpi("slt", c, s.iconst(end)), w, value)
        return s.add(value, s.const(offset)) if offset else value

    return e.map1([cols, *tiles], pick)


def head_norm_epilogue(e: Epilogue, tile: SSAValue, weights: Sequence[SSAValue], op: Operation) -> SSAValue:
    hd, eps = prop_value(op, "head_dim"), prop_value(op, "eps")
    ss = e.segment_reduce(ReduceKind.SUMSQ, tile, hd)
    cols = e.index(Axis.COLS, tile)
    wt = head_norm_weight(e, weights, tile, op)

    def body(s: Scalar, x, q, c, g):
        y = s.mul(s.mul(x, s.rsqrt(s.add(s.mul(q, s.const(1.0 / hd)), s.const(eps)))), g)
        return normalized_heads(s, c, op, y, x)

    return e.map1([tile, ss, cols, wt], body)


def lower_head_rms_norm(op: nn.HeadRMSNormOp) -> tuple[list[Operation], SSAValue]:
    k = elementwise(
        shape_of(op.x), [op.x, *op.w], lambda e, x, *w: [head_norm_epilogue(e, e.load(x), w, op)],
        [elt_of(op.results[0])]
    )
    stamp_origin(k, op)
    if nn.planned(op, "in_producer_epilogue") is False:  # nn-plan: whole heads per tile do not pay here
        k.attributes[coda.SEPARATE] = UnitAttr()
    return [k], k.results[0]


def without_padding_columns(e: Epilogue, tile: SSAValue, classes: int | None) -> SSAValue:
    """A cross-entropy's logits tile with its padding columns (past `classes`) at -inf, so that
    no softmax sees them (a tile of nothing but padding reduces to the LSE's empty partial)."""
    if classes is None:
        return tile
    cols = e.index(Axis.COLS, tile)
    return e.map1([tile, cols], lambda s, l, c: s.select(s.cmpi("slt", c, s.iconst(classes)), l,
                                                            s.const(float("-inf"))))


def lower_cross_entropy(op: nn.CrossEntropyOp | nn.CrossEntropyFwdOp) -> tuple[list[Operation], list[SSAValue]]:
    """LSE partials and the target logit (absorbed into the logits GEMM's epilogue by
    coda-fuse), one fold to the loss; `nn.cross_entropy_fwd` also keeps each row's lse.

    Where nn-plan keeps it out of the producer's epilogue, one `whole rows` kernel instead: each
    program walks its rows' column tiles in order, so the row lse and target logit complete in
    the program (no [M, V / BN] partials written and folded again; the LLaMA-1B LM head's pass
    took 1.06-1.19 ms tiled against 0.72 ms for a row kernel reading the same 2.1 GB, on the
    H100), and the fold only sums the per-row losses."""

    classes = nn.padded_classes(op, shape_of(op.logits)[1])

    def build(e: Epilogue, logits, targets):
        t = e.load(logits)
        return [e.reduce(ReduceKind.LSE, without_padding_columns(e, t, classes), 1), e.select(t, targets)]

    separate = nn.planned(op, "in_producer_epilogue") is False  # nn-plan: plain GEMM + this pass is cheaper
    parts = elementwise(shape_of(op.logits), [op.logits, op.targets], build, [None, None],
                        whole=Axis.ROWS if separate else None)
    if separate:
        parts.attributes[coda.SEPARATE] = UnitAttr()
    ops, results = ce_fold(op, parts.results[0], parts.results[1], rows_complete=separate)
    return [stamp_origin(parts, op, "lse"), *ops], results


def lower_cross_entropy_partials(op: nn.CrossEntropyPartialsOp) -> tuple[list[Operation], list[SSAValue]]:
    """One vocabulary shard's row partials: the LSE partials of its logits and the target logit
    (a map comparing each column's vocabulary id `col + vocab_start` with `t[m]`, summed per row:
    one column of one tile contributes), both absorbed into the logits GEMM's epilogue by
    coda-fuse; one fold to the two f32 row vectors. No loss here: the shards' partials are
    combined across ranks first (docs/VOCAB_PARALLEL.md)."""
    m, vs = shape_of(op.logits)
    start, ignore = prop_value(op, "vocab_start"), prop_value(op, "ignore_index")
    ignore_in_shard = start <= ignore < start + vs  # else no column can match the ignore index

    def build(e: Epilogue, logits, targets):
        t = e.load(logits)
        like = TileType((m, vs), i32)
        cols = e._add(coda.IndexOp(Axis.COLS, like))
        tt = e._add(coda.BroadcastOp(targets, Axis.ROWS, like))

        def pick(s: Scalar, l, c, tgt):
            vocab_id = s.addi(c, s.iconst(start)) if start else c
            hit = s.select(s.cmpi("eq", vocab_id, tgt), l, s.const(0.0))
            return s.select(s.cmpi("ne", tgt, s.iconst(ignore)), hit, s.const(0.0)) if ignore_in_shard else hit

        return [e.reduce(ReduceKind.LSE, t, 1), e.reduce(ReduceKind.SUM, e.map1([t, cols, tt], pick), 1)]

    parts = elementwise((m, vs), [op.logits, op.targets], build, [None, None])
    rows = TensorType(f32, [m])
    k = fold([parts.results[0], parts.results[1]], [], [rows, rows], lambda s, l, t: [l, t])
    return [stamp_origin(parts, op, "partials"), stamp_origin(k, op, "fold")], [k.results[0], k.results[1]]


def ce_fold(op: nn.CrossEntropyOp | nn.CrossEntropyFwdOp, lse: SSAValue, sel: SSAValue,
            rows_complete: bool = False) -> tuple[list[Operation], list[SSAValue]]:
    """The loss (and, for `nn.cross_entropy_fwd`, the per-row lse) from the folded partials, or
    (`rows_complete`) from each row's lse and target logit as f32 vectors."""
    ignore, reduction = prop_value(op, "ignore_index"), prop_value(op, "reduction")
    keep_rows = isinstance(op, nn.CrossEntropyFwdOp)

    def body(s: Scalar, l, t, tgt):
        keep = s.cmpi("ne", tgt, s.iconst(ignore))
        sums = [s.select(keep, s.sub(l, t), s.const(0.0)), s.select(keep, s.const(1.0), s.const(0.0))]
        return sums + [l] if keep_rows else sums

    def finalize(s: Scalar, total, count):
        return [s.div(total, count) if reduction == "mean" else total, count]

    scalar = TensorType(f32, [])
    m, _ = shape_of(op.logits)
    types = [scalar, scalar] + ([TensorType(f32, [m])] if keep_rows else [])
    partials, rows = ([], [lse, sel, op.targets]) if rows_complete else ([lse, sel], [op.targets])
    k = fold(partials, rows, types, body, finalize)
    return [stamp_origin(k, op, "loss")], [k.results[0]] + ([k.results[2]] if keep_rows else [])


# ----------------------------------------------------------------------------- backward ops
#
# Statistics (row means, LSE, rstd) are f32 folds of per-tile partials; parameter gradients
# (dw, db, column sums) are column partials (`coda.reduce ... dim 0`) folded over the row
# tiles in a fixed order: deterministic, no atomics, one rounding to the result type.


def lower_gemm(op: nn.GemmOp) -> tuple[list[Operation], SSAValue]:
    ta, tb = op.flags()
    k = gemm(op.a, op.b, [], lambda e, acc: [acc], [elt_of(op.result)], transpose_a=ta, transpose_b=tb)
    return [stamp_origin(k, op)], k.results[0]


def column_fold(op: Operation, partials: list[SSAValue], elts: list, role: str) -> coda.FoldOp:
    """Column partials summed over the row tiles (in order), each rounded once to its `elts`."""
    n = partials[0].type.length.data  # type: ignore[attr-defined]
    k = fold(partials, [], [TensorType(elt, [n]) for elt in elts], lambda s, *sums: list(sums))
    stamp_origin(k, op, role)
    return k


def lower_column_sum(op: nn.ColumnSumOp) -> tuple[list[Operation], SSAValue]:
    if op.y is not None:  # the product in registers: summed unrounded, as the reference
        parts = elementwise(shape_of(op.x), [op.x, op.y], lambda e, x, y: [
            e.reduce(ReduceKind.SUM, e.map1([e.load(x), e.load(y)], lambda s, a, b: s.mul(a, b)), 0)], [None])
    else:
        parts = elementwise(shape_of(op.x), [op.x], lambda e, x: [e.reduce(ReduceKind.SUM, e.load(x), 0)], [None])
    total = column_fold(op, [parts.results[0]], [elt_of(op.result)], "sum")
    return [stamp_origin(parts, op, "partials"), total], total.results[0]


def activation_grad_fn(op: Operation) -> Callable:
    """`(S, dy, x) -> dy * act'(x)` in the reference's association."""
    if isinstance(op, nn.SiluGradOp):
        def silu_grad(s: Scalar, dy, x):
            sg, one = s.sigmoid(x), s.const(1.0)
            return s.mul(s.mul(dy, sg), s.add(one, s.mul(x, s.sub(one, sg))))

        return silu_grad
    if isinstance(op, nn.ReluGradOp):
        return lambda s, dy, x: s.select(s.cmpf("ogt", x, s.const(0.0)), dy, s.const(0.0))
    if isinstance(op, nn.SoftcapGradOp):
        cap = prop_value(op, "cap")

        def softcap_grad(s: Scalar, dy, x):
            t = s.tanh(s.div(x, s.const(cap)))
            return s.mul(dy, s.sub(s.const(1.0), s.mul(t, t)))

        return softcap_grad
    assert isinstance(op, nn.GeluGradOp)
    approximate = prop_value(op, "approximate")
    return lambda s, dy, x: s.gelu_grad(dy, x, approximate)


def lower_activation_grad(op: nn.SiluGradOp | nn.ReluGradOp | nn.GeluGradOp) -> tuple[list[Operation], SSAValue]:
    fn = activation_grad_fn(op)
    k = elementwise(
        shape_of(op.x), [op.dy, op.x], lambda e, dy, x: [e.map1([e.load(dy), e.load(x)], fn)], [elt_of(op.result)]
    )
    return [stamp_origin(k, op)], k.results[0]


def gated_grad_fn(op: Operation) -> Callable:
    """`(S, dy, gate, up) -> (dgate, dup)` of `act(gate) * up`."""
    if isinstance(op, nn.SwiGLUGradOp):
        def swiglu_grad(s: Scalar, dy, g, u):
            sg, one = s.sigmoid(g), s.const(1.0)
            return [s.mul(s.mul(s.mul(dy, u), sg), s.add(one, s.mul(g, s.sub(one, sg)))), s.mul(s.mul(dy, g), sg)]

        return swiglu_grad
    approximate = prop_value(op, "approximate")
    return lambda s, dy, g, u: [s.gelu_grad(s.mul(dy, u), g, approximate), s.mul(dy, s.gelu(g, approximate))]


def lower_gated_grad(op: nn.SwiGLUGradOp | nn.GeGLUGradOp) -> tuple[list[Operation], SSAValue]:
    """The 1 -> 2 mirror of `lower_gated`: the kernel iterates over dy's [M, F] (the columns of
    the GEMM that produces dy, so coda-fuse can absorb it there) and each pair (gate i, up i) of
    z and dz is F columns apart (`pair_map stride F`, narrow dy, wide z and dz)."""
    m, two_f = shape_of(op.z)
    f = two_f // 2
    fn = gated_grad_fn(op)

    def build(e: Epilogue, dy, z):
        return e.pair_map([e.load(dy), e.load(z)], [(m, two_f)], fn, stride=f, wide=[False, True])

    k = elementwise((m, f), [op.dy, op.z], build, [elt_of(op.result)])
    stamp_origin(k, op)
    if nn.planned(op, "in_producer_epilogue") is False:  # nn-plan: the standalone pass is cheaper here
        k.attributes[coda.SEPARATE] = UnitAttr()
    return [k], k.results[0]


def lower_rms_norm_rstd(op: nn.RMSNormRstdOp) -> tuple[list[Operation], SSAValue]:
    ops = rms_stats(op, op.x, prop_value(op, "eps"))
    return ops, ops[-1].results[0]


def lower_layer_norm_stats(op: nn.LayerNormStatsOp) -> tuple[list[Operation], list[SSAValue]]:
    m, d = shape_of(op.x)
    eps = prop_value(op, "eps")
    parts = ln_partials(op.x)
    vec = TensorType(f32, [m])
    stats = fold(list(parts.results), [], [vec, vec], lambda s, sm, ss: list(ln_moments(s, sm, ss, d, eps)))
    return [stamp_origin(parts, op, "stats"), stamp_origin(stats, op, "fold")], list(stats.results)


def lower_rms_norm_grad(op: nn.RMSNormGradOp) -> tuple[list[Operation], list[SSAValue]]:
    """With `n = x * rstd`: one pass over (dy, x) gives the row partials of `sum(dy w x)` and the
    column partials of `dw = sum_rows(dy n)`; a fold turns the first into `c = mean(dy w n)`;
    the apply kernel writes `dx = rstd * (dy w - n c)`."""
    m, d = shape_of(op.x)
    if op.hdh is not None:
        return rms_norm_grad_from_hdh(op)

    offset = nn.norm_offset(op)

    def stats(e: Epilogue, dy, x, w, r):
        dyt, xt = e.load(dy), e.load(x)
        wt, rt = norm_weight(e, w, dyt, offset), e.broadcast(r, Axis.ROWS, dyt)
        qx = e.map1([dyt, wt, xt], lambda s, g, v, u: s.mul(s.mul(g, v), u))
        dyn = e.map1([dyt, xt, rt], lambda s, g, u, q: s.mul(g, s.mul(u, q)))
        return [e.reduce(ReduceKind.SUM, qx, 1), e.reduce(ReduceKind.SUM, dyn, 0)]

    parts = elementwise((m, d), [op.dy, op.x, op.w, op.rstd], stats, [None, None])
    inv_d = 1.0 / d
    mean_qn = fold([parts.results[0]], [op.rstd], [TensorType(f32, [m])],
                   lambda s, sqx, r: s.mul(s.mul(sqx, r), s.const(inv_d)))
    dw = column_fold(op, [parts.results[1]], [elt_of(op.dw)], "dw")

    def apply(e: Epilogue, dy, x, w, r, c):
        dyt = e.load(dy)
        ins = [dyt, e.load(x), norm_weight(e, w, dyt, offset), e.broadcast(r, Axis.ROWS, dyt), e.broadcast(c, Axis.ROWS, dyt)]
        return [e.map1(ins, lambda s, g, u, v, q, k: s.mul(q, s.sub(s.mul(g, v), s.mul(s.mul(u, q), k))))]

    dx = elementwise((m, d), [op.dy, op.x, op.w, op.rstd, mean_qn.results[0]], apply, [elt_of(op.dx)])
    if nn.planned(op, "in_producer_epilogue") is False:  # recorded without hdh too (forced): obeyed by both passes
        parts.attributes[coda.SEPARATE] = UnitAttr()
        dx.attributes[coda.SEPARATE] = UnitAttr()
    ops = [stamp_origin(parts, op, "stats"), stamp_origin(mean_qn, op, "fold"), dw, stamp_origin(dx, op, "apply")]
    return ops, [dx.results[0], dw.results[0]]


def rms_norm_grad_from_hdh(op: nn.RMSNormGradOp) -> tuple[list[Operation], list[SSAValue]]:
    """The row statistic is given (`hdh = sum_j dy_j h_j`, so `mean(q n) = hdh / d`): dx is
    elementwise in dy, `rstd * (dy w - n hdh / d)`, and one kernel over (dy, x) also emits the
    column partials of dw. That kernel fuses into the epilogue of the GEMM producing dy.

    Kept out of that epilogue (nn-plan), it reads dy at full precision (`coda.full_precision`,
    so the GEMM stores dy in f32): the epilogue form computes dx from the fp32 accumulator, and
    rounding dy to bf16 first costs the Qwen3 bf16 whole-model gradients the float64 bar
    (bench/RESULTS.md, sessions 10 and 11)."""
    m, d = shape_of(op.x)
    inv_d = 1.0 / d
    separate = nn.planned(op, "in_producer_epilogue") is False  # nn-plan: plain GEMM + this pass is cheaper here

    def build(e: Epilogue, dy, x, w, r, hdh):
        dyt, xt = e.load(dy), e.load(x)
        if separate:
            dyt.owner.attributes[coda.FULL_PRECISION] = UnitAttr()  # type: ignore[union-attr]
        wt, rt, ht = norm_weight(e, w, dyt, nn.norm_offset(op)), e.broadcast(r, Axis.ROWS, dyt), e.broadcast(hdh, Axis.ROWS, dyt)
        dx, dyn = e.map([dyt, xt, wt, rt, ht], lambda s, g, u, v, q, k: [
            s.mul(q, s.sub(s.mul(g, v), s.mul(s.mul(u, q), s.mul(k, s.const(inv_d))))),
            s.mul(g, s.mul(u, q)),
        ], n_out=2)
        return [dx, e.reduce(ReduceKind.SUM, dyn, 0)]

    k = elementwise((m, d), [op.dy, op.x, op.w, op.rstd, op.hdh], build, [elt_of(op.dx), None])
    if separate:
        k.attributes[coda.SEPARATE] = UnitAttr()
    dw = column_fold(op, [k.results[1]], [elt_of(op.dw)], "dw")
    return [stamp_origin(k, op, "apply"), dw], [k.results[0], dw.results[0]]


def lower_row_dot(op: nn.RowDotOp) -> tuple[list[Operation], SSAValue]:
    """`sum_j a_j b_j` per row: row partials of a * b, folded in a fixed order."""
    m, _ = shape_of(op.a)

    def build(e: Epilogue, a, b):
        return [e.reduce(ReduceKind.SUM, e.map1([e.load(a), e.load(b)], lambda s, x, y: s.mul(x, y)), 1)]

    parts = elementwise(shape_of(op.a), [op.a, op.b], build, [None])
    total = fold([parts.results[0]], [], [TensorType(f32, [m])], lambda s, p: p)
    return [stamp_origin(parts, op, "partials"), stamp_origin(total, op, "fold")], total.results[0]


def lower_layer_norm_grad(op: nn.LayerNormGradOp) -> tuple[list[Operation], list[SSAValue]]:
    """With `n = (x - mean) rstd`, `q = dy w`: one pass gives the row partials of `sum(q)`,
    `sum(q n)` and the column partials of `dw = sum_rows(dy n)`, `db = sum_rows(dy)`; the apply
    kernel writes `dx = rstd (q - mean(q) - n mean(q n))`."""
    m, d = shape_of(op.x)

    def normalized(s: Scalar, u, mu, r):
        return s.mul(s.sub(u, mu), r)

    def stats(e: Epilogue, dy, x, w, mean, r):
        dyt, xt = e.load(dy), e.load(x)
        wt, mt, rt = e.broadcast(w, Axis.COLS, dyt), e.broadcast(mean, Axis.ROWS, dyt), e.broadcast(r, Axis.ROWS, dyt)
        q, qn, dyn = e.map([dyt, xt, wt, mt, rt], lambda s, g, u, v, mu, rr: [
            s.mul(g, v), s.mul(s.mul(g, v), normalized(s, u, mu, rr)), s.mul(g, normalized(s, u, mu, rr))], n_out=3)
        return [e.reduce(ReduceKind.SUM, q, 1), e.reduce(ReduceKind.SUM, qn, 1),
                e.reduce(ReduceKind.SUM, dyn, 0), e.reduce(ReduceKind.SUM, dyt, 0)]

    parts = elementwise((m, d), [op.dy, op.x, op.w, op.mean, op.rstd], stats, [None] * 4)
    inv_d = 1.0 / d
    vec = TensorType(f32, [m])
    means = fold(list(parts.results[:2]), [], [vec, vec],
                 lambda s, sq, sqn: [s.mul(sq, s.const(inv_d)), s.mul(sqn, s.const(inv_d))])
    dwdb = column_fold(op, list(parts.results[2:]), [elt_of(op.dw), elt_of(op.db)], "dw")

    def apply(e: Epilogue, dy, x, w, mean, r, mq, mqn):
        dyt = e.load(dy)
        ins = [dyt, e.load(x), e.broadcast(w, Axis.COLS, dyt), *(e.broadcast(v, Axis.ROWS, dyt) for v in (mean, r, mq, mqn))]

        def body(s: Scalar, g, u, v, mu, rr, a, b):
            return s.mul(rr, s.sub(s.sub(s.mul(g, v), a), s.mul(normalized(s, u, mu, rr), b)))

        return [e.map1(ins, body)]

    dx = elementwise((m, d), [op.dy, op.x, op.w, op.mean, op.rstd, *means.results], apply, [elt_of(op.dx)])
    ops = [stamp_origin(parts, op, "stats"), stamp_origin(means, op, "fold"), dwdb, stamp_origin(dx, op, "apply")]
    return ops, [dx.results[0], dwdb.results[0], dwdb.results[1]]


def head_sum_kernel(op: Operation, per_column: SSAValue, hd: int, elts: list,
                    ranges: Sequence[tuple[int, int]] | None = None) -> coda.ElementwiseOp:
    """`out[j] = sum_h v[h hd + j]` of an f32 [N] vector: a `whole cols` kernel over the
    [N, hd] space whose tile holds v[n] where `n mod hd == j` (0 elsewhere); each program walks
    all N rows of its columns in order, so the column sums complete in the kernel. With `ranges`
    ((first head, heads) per output: a grouped head norm's weights), output i sums only the
    heads of its range."""
    (n,) = shape_of(per_column)

    def build(e: Epilogue, v):
        like = TileType((n, hd), f32)
        vt = e._add(coda.BroadcastOp(v, Axis.ROWS, like))
        rows, cols = e.index(Axis.ROWS, vt), e.index(Axis.COLS, vt)
        if ranges is None:
            on_segment = e.map1([vt, rows, cols], lambda s, x, r, c: s.select(
                s.cmpi("eq", s.remi(r, s.iconst(hd)), c), x, s.const(0.0)))
            return [e.reduce(ReduceKind.SUM, on_segment, 0)]
        sums = []
        for first, heads in ranges:
            def in_range(s: Scalar, x, r, c, lo=first * hd, hi=(first + heads) * hd):
                inside = s.select(s.cmpi("sge", r, s.iconst(lo)), s.select(s.cmpi("slt", r, s.iconst(hi)), x, s.const(0.0)),
                                  s.const(0.0))
                return s.select(s.cmpi("eq", s.remi(r, s.iconst(hd)), c), inside, s.const(0.0))
            sums.append(e.reduce(ReduceKind.SUM, e.map1([vt, rows, cols], in_range), 0))
        return sums

    k = elementwise((n, hd), [per_column], build, elts, whole=Axis.COLS)
    return stamp_origin(k, op, "dw_heads")


def lower_head_rms_norm_grad(op: nn.HeadRMSNormGradOp) -> tuple[list[Operation], list[SSAValue]]:
    """Per head, RMSNorm's backward with the statistics recomputed inside the head
    (`segment_reduce` width hd, like the forward): `dx = r (q - n mean_seg(q n))` on normalized
    heads, dy elsewhere. dw: column partials of `dy n` (0 outside the normalized heads) folded to
    an f32 [N] vector, then summed over the heads by `head_sum_kernel`."""
    m, n = shape_of(op.x)
    hd, eps = prop_value(op, "head_dim"), prop_value(op, "eps")
    inv_hd = 1.0 / hd

    def build(e: Epilogue, dy, x, *w):
        dyt, xt = e.load(dy), e.load(x)
        ss = e.segment_reduce(ReduceKind.SUMSQ, xt, hd)
        wt, cols = head_norm_weight(e, w, dyt, op), e.index(Axis.COLS, dyt)

        def normalize(s: Scalar, u, q, g, v):
            r = s.rsqrt(s.add(s.mul(q, s.const(inv_hd)), s.const(eps)))
            nv = s.mul(u, r)
            qv = s.mul(g, v)
            return [r, nv, qv, s.mul(qv, nv)]

        r, nt, qt, qn = e.map([xt, ss, dyt, wt], normalize, n_out=4)
        sqn = e.segment_reduce(ReduceKind.SUM, qn, hd)

        def dx_fn(s: Scalar, c, g, rr, nv, qv, k):
            return normalized_heads(s, c, op, s.mul(rr, s.sub(qv, s.mul(nv, s.mul(k, s.const(inv_hd))))), g)

        dx = e.map1([cols, dyt, r, nt, qt, sqn], dx_fn)
        dyn = e.map1([cols, dyt, nt], lambda s, c, g, nv: normalized_heads(s, c, op, s.mul(g, nv), s.const(0.0)))
        return [dx, e.reduce(ReduceKind.SUM, dyn, 0)]

    main = elementwise((m, n), [op.dy, op.x, *op.w], build, [elt_of(op.dx), None])
    per_column = column_fold(op, [main.results[1]], [f32], "dw_cols")
    groups = nn.head_weight_groups(op)
    ranges = None if len(groups) == 1 else [(first, heads) for _, first, heads in groups]
    dw = head_sum_kernel(op, per_column.results[0], hd, [elt_of(v) for v in op.dw], ranges)
    return [stamp_origin(main, op), per_column, dw], [main.results[0], *dw.results]


def lower_cross_entropy_grad(op: nn.CrossEntropyGradOp) -> tuple[list[Operation], SSAValue]:
    """lse per row (the saved operand, else LSE partials folded from the logits) and, for
    "mean", the kept-row count; then one kernel writes
    `(exp(l - lse[m]) - [col == t[m]]) * dloss / count`, 0 on ignored rows. With `softcap` c the
    operand is z and `l = c * tanh(z / c)` (in f32 from the loaded z), the gradient times
    `1 - tanh(z / c)^2`."""
    m, v = shape_of(op.logits)
    ignore, mean = prop_value(op, "ignore_index"), prop_value(op, "reduction") == "mean"
    cap = op.cap()
    classes = nn.padded_classes(op, v)

    def capped(s: Scalar, z):
        return s.mul(s.const(cap), s.tanh(s.div(z, s.const(cap))))
    count_type = [TensorType(f32, [])] if mean else []

    def kept(s: Scalar, t):
        return s.select(s.cmpi("ne", t, s.iconst(ignore)), s.const(1.0), s.const(0.0))

    stats: list[Operation] = []
    if op.lse is not None:
        lse_rows = op.lse
        counts = []
        if mean:
            count = fold([], [op.targets], count_type, lambda s, t: [kept(s, t)])
            stats.append(stamp_origin(count, op, "count"))
            counts = [count.results[0]]
    else:
        def row_lse(e: Epilogue, l):
            tile = e.load(l)
            tile = tile if cap is None else e.map1([tile], capped)
            return [e.reduce(ReduceKind.LSE, without_padding_columns(e, tile, classes), 1)]

        parts = elementwise((m, v), [op.logits], row_lse, [None])
        lse = fold([parts.results[0]], [op.targets], [TensorType(f32, [m]), *count_type],
                   lambda s, l, t: [l, kept(s, t)] if mean else [l])
        stats += [stamp_origin(parts, op, "lse"), stamp_origin(lse, op, "fold")]
        lse_rows, counts = lse.results[0], list(lse.results[1:])
    scale_ins = [op.dloss, *counts]

    def build(e: Epilogue, logits, lse_v, targets, dloss, *count):
        lt = e.load(logits)
        like = TileType((m, v), i32)
        cols = e._add(coda.IndexOp(Axis.COLS, like))
        tt = e._add(coda.BroadcastOp(targets, Axis.ROWS, like))
        ins = [lt, e.broadcast(lse_v, Axis.ROWS, lt), cols, tt, e.broadcast(dloss, Axis.SCALAR, lt),
               *(e.broadcast(c, Axis.SCALAR, lt) for c in count)]

        def grad(s: Scalar, l, ls, c, t, dl, *cnt):
            th = s.tanh(s.div(l, s.const(cap))) if cap is not None else None
            logit = s.mul(s.const(cap), th) if th is not None else l
            onehot = s.select(s.cmpi("eq", c, t), s.const(1.0), s.const(0.0))
            scale = s.div(dl, cnt[0]) if cnt else dl
            g = s.mul(s.sub(s.exp(s.sub(logit, ls)), onehot), scale)
            if th is not None:  # d softcap / dz = 1 - tanh(z / cap)^2
                g = s.mul(g, s.sub(s.const(1.0), s.mul(th, th)))
            if classes is not None:  # padding columns: gradient 0
                g = s.select(s.cmpi("slt", c, s.iconst(classes)), g, s.const(0.0))
            return s.select(s.cmpi("ne", t, s.iconst(ignore)), g, s.const(0.0))

        return [e.map1(ins, grad)]

    k = elementwise((m, v), [op.logits, lse_rows, op.targets, *scale_ins], build, [elt_of(op.result)])
    return [*stats, stamp_origin(k, op, "apply")], k.results[0]


def lower_linear_cross_entropy_grad(op: nn.LinearCrossEntropyGradOp) -> tuple[list[Operation], list[SSAValue]]:
    """The LM head's backward chunk by chunk of vocabulary, as the op's `chunk` records; per step
    k (w[k]: `chunk` rows of w, a `coda.slice`, a view at run time):

    * `coda.gemm h, w[k] transpose_b` whose epilogue turns the recomputed logits (f32 accumulator,
      scaled and soft-capped as the op says) into their gradient `(exp(l - lse[m]) - [col == t[m]])
      * dloss / count` (through the soft-cap's and the scale's derivatives), 0 on ignored rows:
      the only [M, chunk] buffer, never the logits;
    * `dw[k] = dlogits_k.T @ h` (`transpose_a`): complete, rounded once;
    * `dh_k = dlogits_k @ w[k] + dh_{k-1}` (accumulate epilogue) stored in f32 and, at the last
      step, in dh's type: the sum over chunks in step order, rounded once.

    The pieces of dw are concatenated (`coda.concat`). One step (chunk >= V) reads w whole."""
    m, d = shape_of(op.h)
    v = shape_of(op.w)[0]
    chunk = prop_value(op, "chunk")
    ignore, mean = prop_value(op, "ignore_index"), prop_value(op, "reduction") == "mean"
    factor, cap = op.scale_factor(), op.cap()
    shard = nn.vocab_shard_of(op)
    offset = 0 if shard is None else shard[0]  # the vocabulary id of w's first row
    classes = nn.padded_classes(op, v)  # w's rows past it are padding: their logits' gradient is 0
    ops: list[Operation] = []
    counts: list[SSAValue] = []
    if mean:
        count = fold([], [op.targets], [TensorType(f32, [])], lambda s, t: [
            s.select(s.cmpi("ne", t, s.iconst(ignore)), s.const(1.0), s.const(0.0))])
        ops.append(stamp_origin(count, op, "count"))
        counts = [count.results[0]]

    def dlogits(start: int, size: int):
        def build(e: Epilogue, acc, lse_v, targets, dloss, *count):
            like = TileType((m, size), i32)
            ins = [acc, e.broadcast(lse_v, Axis.ROWS, acc), e._add(coda.IndexOp(Axis.COLS, like)),
                   e._add(coda.BroadcastOp(targets, Axis.ROWS, like)), e.broadcast(dloss, Axis.SCALAR, acc),
                   *(e.broadcast(c, Axis.SCALAR, acc) for c in count)]

            def grad(s: Scalar, z, ls, c, t, dl, *cnt):
                if factor != 1.0:
                    z = s.mul(z, s.const(factor))
                th = s.tanh(s.div(z, s.const(cap))) if cap is not None else None
                logit = s.mul(s.const(cap), th) if th is not None else z
                col = s.addi(c, s.iconst(start + offset)) if start + offset else c  # the column of the whole logits
                onehot = s.select(s.cmpi("eq", col, t), s.const(1.0), s.const(0.0))
                g = s.mul(s.sub(s.exp(s.sub(logit, ls)), onehot), s.div(dl, cnt[0]) if cnt else dl)
                if th is not None:  # d softcap / dz = 1 - tanh(z / cap)^2
                    g = s.mul(g, s.sub(s.const(1.0), s.mul(th, th)))
                if factor != 1.0:
                    g = s.mul(g, s.const(factor))
                if classes is not None:
                    g = s.select(s.cmpi("slt", col, s.iconst(classes)), g, s.const(0.0))
                return s.select(s.cmpi("ne", t, s.iconst(ignore)), g, s.const(0.0))

            return [e.map1(ins, grad)]
        return build

    pieces: list[SSAValue] = []
    dh: SSAValue | None = None
    for start in range(0, v, chunk):
        size = min(chunk, v - start)
        last = start + size >= v
        wk = op.w
        if size < v:
            piece = coda.SliceOp.create(operands=[op.w], result_types=[TensorType(elt_of(op.w), [size, d])],
                                        properties={"axis": IntegerAttr(0, i64), "start": IntegerAttr(start, i64)})
            piece.location = op.location
            ops.append(piece)
            wk = piece.results[0]
        dl = gemm(op.h, wk, [op.lse, op.targets, op.dloss, *counts], dlogits(start, size), [elt_of(op.h)],
                  transpose_b=True)
        dw = gemm(dl.results[0], op.h, [], lambda e, acc: [acc], [elt_of(op.w)], transpose_a=True, transpose_b=False)
        prev = [] if dh is None else [dh]
        dhk = gemm(dl.results[0], wk, prev, lambda e, acc, *p: [e.accumulate(acc, p[0]) if p else acc],
                   [elt_of(op.dh) if last else f32], transpose_b=False)
        ops += [stamp_origin(dl, op, "dlogits"), stamp_origin(dw, op, "dw"), stamp_origin(dhk, op, "dh")]
        pieces.append(dw.results[0])
        dh = dhk.results[0]
    assert dh is not None
    if len(pieces) == 1:
        return ops, [dh, pieces[0]]
    cat = coda.ConcatOp.create(operands=pieces, result_types=[op.dw.type], properties={"axis": IntegerAttr(0, i64)})
    cat.location = op.location
    return [*ops, cat], [dh, cat.results[0]]


# ----------------------------------------------------------------------------- library steps
# Attention, the embedding and concatenation/slicing are not GEMM epilogues: one library step
# each (coda_ir/runtime/library.py runs them), which the fusion passes leave alone.


def _library(op: Operation, step: Operation) -> tuple[list[Operation], SSAValue]:
    step.location = op.location
    return [step], step.results[0]


def lower_embedding(op: nn.EmbeddingOp) -> tuple[list[Operation], SSAValue]:
    return _library(op, coda.EmbeddingOp.create(operands=[op.ids, op.w], result_types=[op.result.type]))


def lower_embedding_grad(op: nn.EmbeddingGradOp) -> tuple[list[Operation], SSAValue]:
    return _library(op, coda.EmbeddingGradOp.create(operands=[op.dy, op.ids], result_types=[op.result.type]))


def _attention_step(op: Operation) -> coda.AttentionOp:
    qkv = op.operands[0]
    m = qkv.type.get_shape()[0]  # type: ignore[attr-defined]
    heads, hd = op.properties["heads"].value.data, op.properties["head_dim"].value.data  # type: ignore[attr-defined]
    elt = qkv.type.get_element_type()  # type: ignore[attr-defined]
    step = coda.AttentionOp.create(
        operands=list(op.operands),  # qkv, then the segments when it has them
        result_types=[TensorType(elt, [m, heads * hd]), TensorType(f32, [m * heads])],
        properties=nn.attention_carried_props(op),
    )
    step.location = op.location
    return step


def lower_attention(op: nn.AttentionOp) -> tuple[list[Operation], SSAValue]:
    step = _attention_step(op)
    return [step], step.results[0]


def lower_attention_fwd(op: nn.AttentionFwdOp) -> tuple[list[Operation], list[SSAValue]]:
    step = _attention_step(op)
    return [step], list(step.results)


def lower_attention_grad(op: nn.AttentionGradOp) -> tuple[list[Operation], SSAValue]:
    return _library(op, coda.AttentionGradOp.create(
        operands=list(op.operands), result_types=[op.result.type],
        properties=nn.attention_carried_props(op)))


def lower_concat(op: nn.ConcatOp) -> tuple[list[Operation], SSAValue]:
    return _library(op, coda.ConcatOp.create(operands=list(op.inputs), result_types=[op.result.type],
                                             properties={"axis": op.axis}))


def lower_slice(op: nn.SliceOp) -> tuple[list[Operation], SSAValue]:
    return _library(op, coda.SliceOp.create(operands=[op.x], result_types=[op.result.type],
                                            properties={"axis": op.axis, "start": op.start}))


LOWERINGS: dict[type[Operation], Callable[..., tuple[list[Operation], SSAValue | list[SSAValue]]]] = {
    nn.LinearOp: lower_linear,
    nn.MatmulOp: lower_linear,
    nn.AddOp: lower_binary,
    nn.MulOp: lower_binary,
    nn.SiluOp: lower_unary,
    nn.ReluOp: lower_unary,
    nn.GeluOp: lower_unary,
    nn.ScaleOp: lower_unary,
    nn.RMSNormOp: lower_rms_norm,
    nn.LayerNormOp: lower_layer_norm,
    nn.SwiGLUOp: lower_gated,
    nn.GeGLUOp: lower_gated,
    nn.RoPEOp: lower_rope,
    nn.HeadRMSNormOp: lower_head_rms_norm,
    nn.CrossEntropyOp: lower_cross_entropy,
    nn.CrossEntropyFwdOp: lower_cross_entropy,
    nn.CrossEntropyPartialsOp: lower_cross_entropy_partials,
    nn.RMSNormApplyOp: lower_rms_norm_apply,
    nn.LayerNormApplyOp: lower_layer_norm_apply,
    nn.ZerosOp: lower_zeros,
    nn.GemmOp: lower_gemm,
    nn.ColumnSumOp: lower_column_sum,
    nn.SiluGradOp: lower_activation_grad,
    nn.ReluGradOp: lower_activation_grad,
    nn.GeluGradOp: lower_activation_grad,
    nn.SoftcapOp: lower_unary,
    nn.SoftcapGradOp: lower_activation_grad,
    nn.SwiGLUGradOp: lower_gated_grad,
    nn.GeGLUGradOp: lower_gated_grad,
    nn.RoPEGradOp: lower_rope,
    nn.RMSNormRstdOp: lower_rms_norm_rstd,
    nn.RMSNormGradOp: lower_rms_norm_grad,
    nn.LayerNormStatsOp: lower_layer_norm_stats,
    nn.LayerNormGradOp: lower_layer_norm_grad,
    nn.HeadRMSNormGradOp: lower_head_rms_norm_grad,
    nn.CrossEntropyGradOp: lower_cross_entropy_grad,
    nn.LinearCrossEntropyGradOp: lower_linear_cross_entropy_grad,
    nn.RowDotOp: lower_row_dot,
    nn.EmbeddingOp: lower_embedding,
    nn.EmbeddingGradOp: lower_embedding_grad,
    nn.AttentionOp: lower_attention,
    nn.AttentionFwdOp: lower_attention_fwd,
    nn.AttentionGradOp: lower_attention_grad,
    nn.ConcatOp: lower_concat,
    nn.SliceOp: lower_slice,
}


class LowerNNOp(RewritePattern):
    """Any nn op -> its standalone kernels (LOWERINGS); a multi-result op (a norm's gradient,
    its statistics) is replaced by one value per result."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        lower = LOWERINGS.get(type(op))
        if lower is None:
            return
        ops, results = lower(op)
        rewriter.replace(op, ops, [results] if isinstance(results, SSAValue) else list(results))


@dataclass(frozen=True)
class ConvertNNToCodaPass(ModulePass):
    """Lower every remaining nn op to standalone coda kernels (no fusion)."""

    name = "convert-nn-to-coda"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([LowerNNOp()], dce_enabled=False), apply_recursively=False
        ).rewrite_module(op)
