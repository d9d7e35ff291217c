"""The Triton epilogue lowerings of the ops that read memory or place a value on the tile:
`coda.load` (plain, periodic, in pair halves), `coda.broadcast`, `coda.index`, `coda.scale`,
`coda.shift`, `coda.accumulate`. Each is registered in `LOWERINGS` for its op class;
`tl_epilogue` merges the table with the other topics' (see `tl_epilogue_context`)."""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import TensorType, f32, i32
from xdsl.ir import Operation, SSAValue

from coda_ir.analysis.epilogue_schedule import EpilogueStep
from coda_ir.dialects import coda
from coda_ir.dialects import triton_lang as tl
from coda_ir.lowering.tl_build import Builder
from coda_ir.lowering.tl_epilogue_context import EpilogueContext, EpilogueLowerings, Gathered

LOWERINGS = EpilogueLowerings()



def load_matrix(ctx: EpilogueContext, op: Operation, matrix: SSAValue) -> SSAValue:
    ty = matrix.type
    assert isinstance(ty, TensorType)
    _, width = ty.get_shape()
    c = ctx.cols(op, width)
    ctx.row_offsets()
    ptr, elt = ctx.ptr(op, matrix), ty.get_element_type()
    hv = ctx.halves(op, width)
    if hv is None:
        return ctx.load(ctx.matrix_ptr(ptr, width, c.cols), c.mask2, 0, elt)

    def halves(b: Builder) -> list[SSAValue]:
        # the scatter's gather is as uncoalesced as its store: read the two contiguous halves and
        # interleave them in registers (join puts half 0 at even, half 1 at odd columns)
        ucol, umask = hv.setup()
        lo = b.value(tl.LoadOp(ctx.matrix_ptr(ptr, width, ucol), umask, ctx.i32(0)))
        hi_ptr = b.value(tl.AddPtrOp(ctx.matrix_ptr(ptr, width, ucol), ctx.i32(hv.half)))
        hi = b.value(tl.LoadOp(hi_ptr, umask, ctx.i32(0)))
        return [b.compute_cast(b.value(tl.ReshapeOp(b.value(tl.JoinOp(lo, hi)), [ctx.frame.bm, hv.tw])))]

    def scatter(b: Builder) -> list[SSAValue]:
        return [ctx.load(ctx.matrix_ptr(ptr, width, c.cols), c.mask2, 0, elt)]

    (value,) = ctx.if_constexpr(hv.cond, halves, scatter, [tl.dynamic_tensor(f32, 2)], "ld_halves")
    return value


def load_periodic(ctx: EpilogueContext, op: coda.LoadOp) -> SSAValue:
    """`T[m, c mod P]` for the tile's W-wide columns c, from an [M, P] table: a masked
    gather of the [BM, P] rows, contiguous runs of P per row, that stays in L2 across the
    column tiles of a row band. When the tile is exactly P wide (BN/2 == P for RoPE's pair
    tile) the indices are one plain [BM, P] block."""
    ty = op.result.type
    assert isinstance(ty, coda.TileType) and op.period is not None
    period = op.period
    c = ctx.cols(op, ty.cols)
    ctx.row_offsets()
    b = ctx.b
    idx = c.cols if period == ty.cols else b.ibin(arith.RemSIOp, c.cols, ctx.i32(period))
    elt = op.source.type.get_element_type()  # type: ignore[attr-defined]
    return ctx.load(ctx.matrix_ptr(ctx.ptr(op, op.source), period, idx), c.mask2, 0, elt)


def load_vector(ctx: EpilogueContext, op: Operation, vector: SSAValue, axis: coda.Axis, width: int) -> SSAValue:
    """The vector as a [BM, 1] (rows), [1, TW] (cols) or scalar operand."""
    ty = vector.type
    assert isinstance(ty, TensorType)
    elt = ty.get_element_type()
    p = ctx.ptr(op, vector)
    b = ctx.b
    if axis == coda.Axis.SCALAR:
        return b.compute_cast(b.value(tl.LoadOp(p)))
    if axis == coda.Axis.ROWS:
        return b.value(tl.ExpandDimsOp(ctx.row_vector(("vector", p), lambda: ctx.load(
            b.value(tl.AddPtrOp(p, ctx.frame.offs_m)), ctx.frame.mask_m, 0, elt), "rv"), 1))
    c = ctx.cols(op, width)
    (length,) = ty.get_shape()
    idx = c.cols if length == width else b.ibin(arith.RemSIOp, c.cols, ctx.i32(length))
    return b.value(tl.ExpandDimsOp(ctx.load(b.value(tl.AddPtrOp(p, idx)), c.mask, 0, elt), 0))


def load_pair_halves(ctx: EpilogueContext, op: coda.LoadOp) -> None:
    """A load coda-legalize marked `coda.pair_halves` (a gathered pair_map's wide tile, read as
    its two halves at the tile's pair-index columns: the first columns and `stride` further)."""
    ctx.check_gatherable(op, "coda.pair_halves")
    stride = coda.pair_halves_stride(op)
    assert stride is not None
    ty = op.result.type
    assert isinstance(ty, coda.TileType)
    first, c = ctx.pair_first(op, stride, ty.cols // 2)
    ptr = ctx.ptr(op, op.source)
    ctx.row_offsets()
    elt = op.source.type.get_element_type()  # type: ignore[attr-defined]
    ctx.comment(f"{op.name}, pair halves (columns first, first + {stride})")
    a = ctx.assign(op.result, ctx.pair_load(ptr, ty.cols, first, 0, c, elt), "pa")
    second = ctx.name(ctx.pair_load(ptr, ty.cols, first, stride, c, elt), "pb")
    ctx.gathered[op.result] = Gathered(a, second, first, stride, c)


@LOWERINGS.impl(coda.LoadOp)
def lower_load(ctx: EpilogueContext, op: coda.LoadOp, step: EpilogueStep) -> None:
    if op.period is not None:
        ctx.comment(f"{op.name} cols_period {op.period}")
        ctx.assign(op.result, load_periodic(ctx, op))
    elif coda.pair_halves_stride(op) is not None:
        load_pair_halves(ctx, op)
    elif op.result.uses and all(
        ctx.gathers_pairs(u.operation) and u.operation.is_wide(op.result) for u in op.result.uses  # type: ignore[attr-defined]
    ):
        return  # read by its pair_maps as two gathers (tl_epilogue_maps.gathered_pair_map)
    else:
        ctx.comment(op.name)
        ctx.assign(op.result, load_matrix(ctx, op, op.source))


@LOWERINGS.impl(coda.BroadcastOp)
def lower_broadcast(ctx: EpilogueContext, op: coda.BroadcastOp, step: EpilogueStep) -> None:
    ty = op.result.type
    assert isinstance(ty, coda.TileType)
    shape = ctx.tile_shape(op, ty)
    vec = load_vector(ctx, op, op.source, op.axis.data, ty.cols)
    ctx.comment(f"{op.name} {op.axis.data.value}")
    ctx.assign(op.result, ctx.b.value(tl.BroadcastToOp(vec, shape)))


@LOWERINGS.impl(coda.IndexOp)
def lower_index(ctx: EpilogueContext, op: coda.IndexOp, step: EpilogueStep) -> None:
    b = ctx.b
    ty = op.result.type
    assert isinstance(ty, coda.TileType)
    shape = ctx.tile_shape(op, ty)
    c = ctx.cols(op, ty.cols)
    if op.axis.data == coda.Axis.ROWS:
        src = b.value(tl.ExpandDimsOp(ctx.frame.offs_m, 1))
    else:
        src = b.value(tl.ExpandDimsOp(c.cols, 0))
    ctx.comment(f"{op.name} {op.axis.data.value}")
    ctx.assign(op.result, b.value(tl.BroadcastToOp(b.value(tl.CastOp(src, i32)), shape)))


@LOWERINGS.impl(coda.ScaleOp, coda.ShiftOp)
def lower_scale_or_shift(ctx: EpilogueContext, op: coda.ScaleOp | coda.ShiftOp, step: EpilogueStep) -> None:
    ty = op.tile.type
    assert isinstance(ty, coda.TileType)
    vec = load_vector(ctx, op, op.vector, op.axis.data, ty.cols)
    ctx.comment(f"{op.name} {op.axis.data.value}")
    cls = arith.MulfOp if isinstance(op, coda.ScaleOp) else arith.AddfOp
    ctx.assign(op.result, ctx.b.fbin(cls, ctx.get(op, op.tile), vec))


@LOWERINGS.impl(coda.AccumulateOp)
def lower_accumulate(ctx: EpilogueContext, op: coda.AccumulateOp, step: EpilogueStep) -> None:
    ctx.comment(op.name)
    ctx.assign(op.result, ctx.b.fbin(arith.AddfOp, ctx.get(op, op.tile), load_matrix(ctx, op, op.matrix)))
