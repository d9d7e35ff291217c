"""The Triton epilogue lowerings of the ops that reduce along the columns: `coda.reduce` (also
over a gathered pair map's two halves), `coda.segment_reduce` (in the tile, in a whole-row
tile, or gathered from memory) and `coda.select` (a row's element at a column index). Each is
registered in `LOWERINGS` for its op class (see `tl_epilogue_context`)."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from xdsl.dialects import arith, math, scf
from xdsl.dialects.builtin import f32, i32, i64
from xdsl.ir import Block, Operation, SSAValue

from coda_ir.analysis.epilogue_schedule import EpilogueStep
from coda_ir.diagnostics import CompilerError
from coda_ir.dialects import coda
from coda_ir.dialects import triton_lang as tl
from coda_ir.lowering.tl_build import Builder
from coda_ir.lowering.tl_epilogue_context import Cols, EpilogueContext, EpilogueLowerings

LOWERINGS = EpilogueLowerings()


def masked_tile(ctx: EpilogueContext, op: Operation, x: SSAValue, ty: coda.TileType, kind: coda.ReduceKind) -> SSAValue:
    """The tile with its out-of-bounds elements neutral for `kind` (sumsq: squared)."""
    c = ctx.cols(op, ty.cols)
    b = ctx.b
    if kind == coda.ReduceKind.SUM:
        return b.where(c.mask2, x, b.const(0.0, f32))
    if kind == coda.ReduceKind.SUMSQ:
        return b.where(c.mask2, b.fbin(arith.MulfOp, x, x), b.const(0.0, f32))
    return b.where(c.mask2, x, b.const(float("-inf"), f32))


@LOWERINGS.impl(coda.ReduceOp)
def lower_reduce(ctx: EpilogueContext, op: coda.ReduceOp, step: EpilogueStep) -> None:
    if coda.pair_halves_stride(op) is not None:
        reduce_pair_halves(ctx, op)
        return
    ty = op.tile.type
    assert isinstance(ty, coda.TileType)
    kind = op.kind.data
    dim = op.dim.value.data
    x = ctx.get(op, op.tile)
    b = ctx.b
    ctx.comment(f"{op.name} {kind.value} dim {dim}")
    masked = ctx.name(masked_tile(ctx, op, x, ty, kind), "rm")
    if kind in (coda.ReduceKind.SUM, coda.ReduceKind.SUMSQ):
        ctx.assign(op.result, b.value(tl.ReduceOp("sum", masked, dim)), "p")
    elif kind == coda.ReduceKind.MAX:
        ctx.assign(op.result, b.value(tl.ReduceOp("max", masked, dim)), "p")
    else:
        mx = b.value(tl.ReduceOp("max", masked, dim), "lse_max")
        neg_inf = b.const(float("-inf"), f32)
        safe = b.where(b.cmpf("oeq", mx, neg_inf), b.const(0.0, f32), mx, "lse_ref")
        spread = b.value(tl.ExpandDimsOp(safe, 1 if dim == 1 else 0))
        # exp(-inf) = 0: masked elements do not contribute; an all-masked partial is -inf
        total = b.value(tl.ReduceOp("sum", b.unary(math.ExpOp, b.fbin(arith.SubfOp, masked, spread)), dim))
        ctx.assign(op.result, b.fbin(arith.AddfOp, safe, b.unary(math.LogOp, total)), "p")


def reduce_pair_halves(ctx: EpilogueContext, op: coda.ReduceOp) -> None:
    """A reduction coda-legalize marked `coda.pair_halves`: both halves of a gathered pair_map's
    wide tile (`tl_epilogue_maps.map_pair_halves`) reduced into one row partial."""
    ctx.check_gatherable(op, "coda.pair_halves")
    assert coda.pair_halves_stride(op) is not None
    b = ctx.b
    g = ctx.gathered[op.tile]
    kind = op.kind.data
    ctx.comment(f"{op.name} {kind.value} dim 1 over both pair halves")
    if kind == coda.ReduceKind.MAX:
        neg_inf = b.const(float("-inf"), f32)
        lo = b.value(tl.ReduceOp("max", b.where(g.cols.mask2, g.a, neg_inf), 1))
        hi = b.value(tl.ReduceOp("max", b.where(g.cols.mask2, g.b, neg_inf), 1))
        ctx.assign(op.result, b.fbin(arith.MaximumfOp, lo, hi), "p")
    else:
        def sq(x: SSAValue) -> SSAValue:
            return b.fbin(arith.MulfOp, x, x) if kind == coda.ReduceKind.SUMSQ else x

        lo = b.value(tl.ReduceOp("sum", b.where(g.cols.mask2, sq(g.a), b.const(0.0, f32)), 1))
        hi = b.value(tl.ReduceOp("sum", b.where(g.cols.mask2, sq(g.b), b.const(0.0, f32)), 1))
        ctx.assign(op.result, b.fbin(arith.AddfOp, lo, hi), "p")


# -------------------------------------------------------------- segments


@LOWERINGS.impl(coda.SegmentReduceOp)
def lower_segment_reduce(ctx: EpilogueContext, op: coda.SegmentReduceOp, step: EpilogueStep) -> None:
    """In the tile by reshaping to its segments, unless coda-legalize recorded otherwise: segments
    gathered from memory (`coda.gathered`) or in a whole-row tile (`coda.row_exchange`)."""
    ty = op.tile.type
    assert isinstance(ty, coda.TileType)
    kind = op.kind.data
    w = op.width.value.data
    group = ctx.perm_half(ty.cols)
    if group and w % (2 * group):
        raise CompilerError(
            op,
            f"segment width {w} is not a multiple of the interleave group {2 * group}: segments "
            "would mix interleaved columns",
        )
    c = ctx.cols(op, ty.cols)
    if gathers_segments(ctx, op):
        gathered_segment_reduce(ctx, op, c)
        return
    if ctx.regathers(op):
        regathered_segment_reduce(ctx, op)
        return
    ctx.need_bn(op, Fraction(w * ctx.n, ty.cols))
    x = ctx.get(op, op.tile)
    b = ctx.b
    ctx.comment(f"{op.name} {kind.value} width {w}")
    bm, segments = ctx.frame.bm, b.ibin(arith.DivSIOp, c.tw, ctx.i32(w))
    seg = b.value(tl.ReshapeOp(masked_tile(ctx, op, x, ty, kind), [bm, segments, ctx.i32(w)]), "seg")
    reduced = b.value(tl.ReduceOp("max" if kind == coda.ReduceKind.MAX else "sum", seg, 2))
    spread = b.value(tl.BroadcastToOp(b.value(tl.ExpandDimsOp(reduced, 2)), [bm, b.ibin(arith.DivSIOp, c.tw, ctx.i32(w)),
                                                                              ctx.i32(w)]))
    ctx.assign(op.result, b.value(tl.ReshapeOp(spread, [bm, c.tw])))


def segment_loop(ctx: EpilogueContext, kind: coda.ReduceKind, c: Cols, w: int, fetch: Callable[[Builder, SSAValue, SSAValue], SSAValue],
                 square: bool) -> SSAValue:
    """for k in range(0, w): acc = acc (+ or max) fetch(k), the segment's k-th value at each
    column (segstart: the column's segment start); the accumulated tile."""
    b = ctx.b
    start = b.ibin(arith.MuliOp, b.ibin(arith.DivSIOp, c.cols, ctx.i32(w)), ctx.i32(w), "segstart")
    shape = [ctx.frame.bm, c.tw]
    init = b.const(float("-inf") if kind == coda.ReduceKind.MAX else 0.0, f32)
    acc0 = b.value(tl.FullOp(shape, init, f32))
    body = Block(arg_types=[i32, acc0.type])
    body.args[0].name_hint, body.args[1].name_hint = "segk", "segacc"
    inner = Builder(body)
    v = fetch(inner, start, body.args[0])
    v.name_hint = "segv"
    if kind == coda.ReduceKind.MAX:
        nxt = inner.fbin(arith.MaximumfOp, body.args[1], v)
    else:
        nxt = inner.fbin(arith.AddfOp, body.args[1], inner.fbin(arith.MulfOp, v, v) if square else v)
    inner.add(scf.YieldOp(nxt))
    loop = b.add(scf.ForOp(ctx.i32(0), ctx.i32(w), ctx.i32(1), [acc0], [body]))
    loop.results[0].name_hint = "segacc"
    return loop.results[0]


def regathered_segment_reduce(ctx: EpilogueContext, op: coda.SegmentReduceOp) -> None:
    """A segment reduction on a tile covering the whole row, for a width no power-of-two
    tile holds whole: each column accumulates its segment's w values, fetched from the
    (masked) tile by `tl.gather` in the segment's order."""
    ty = op.tile.type
    assert isinstance(ty, coda.TileType)
    kind, w = op.kind.data, op.width.value.data
    ctx.cover_row(op)
    c = ctx.cols(op, ty.cols)
    x = ctx.name(masked_tile(ctx, op, ctx.get(op, op.tile), ty, kind), "segx")
    ctx.comment(f"{op.name} {kind.value} width {w}, segments gathered in a whole-row tile")

    def fetch(inner: Builder, start: SSAValue, k: SSAValue) -> SSAValue:
        clamped = inner.ibin(arith.MinSIOp, inner.ibin(arith.AddiOp, start, k), inner.ibin(arith.SubiOp, c.tw, ctx.i32(1)))
        index = inner.value(tl.BroadcastToOp(inner.value(tl.ExpandDimsOp(clamped, 0)), [ctx.frame.bm, c.tw]))
        return inner.value(tl.GatherOp(x, index, 1))

    # masked() squared the values already for sumsq
    ctx.assign(op.result, segment_loop(ctx, kind, c, w, fetch, square=False))


def gathers_segments(ctx: EpilogueContext, op: coda.SegmentReduceOp) -> bool:
    """Whether a segment reduction reads its segments straight from memory: the ones
    coda-legalize marked `coda.gathered` (a segment width no power-of-two column tile holds
    whole, e.g. a head_dim of 48 or 80, over a plain load of a kernel input). Each column
    then sums its own segment from memory (w loads per tile, L1/L2 resident): slower than
    the in-register reduction, but any width compiles."""
    if not coda.is_gathered(op):
        return False
    ctx.check_gatherable(op)
    return True


def gathered_segment_reduce(ctx: EpilogueContext, op: coda.SegmentReduceOp, c: Cols) -> None:
    ty = op.tile.type
    assert isinstance(ty, coda.TileType)
    kind, w = op.kind.data, op.width.value.data
    load = op.tile.owner
    assert isinstance(load, coda.LoadOp)
    ptr = ctx.ptr(op, load.source)
    ctx.row_offsets()
    elt = load.source.type.get_element_type()  # type: ignore[attr-defined]
    ctx.comment(f"{op.name} {kind.value} width {w}, segments gathered from memory")
    other = float("-inf") if kind == coda.ReduceKind.MAX else 0

    def fetch(inner: Builder, start: SSAValue, k: SSAValue) -> SSAValue:
        with ctx.building_into(inner):
            return ctx.load(ctx.matrix_ptr(ptr, ty.cols, inner.ibin(arith.AddiOp, start, k)), c.mask2, other, elt)

    ctx.assign(op.result, segment_loop(ctx, kind, c, w, fetch, square=kind == coda.ReduceKind.SUMSQ))


# -------------------------------------------------------------- select


@LOWERINGS.impl(coda.SelectOp)
def lower_select(ctx: EpilogueContext, op: coda.SelectOp, step: EpilogueStep) -> None:
    """Each row's element at column idx[m] (`indices`), as a row partial."""
    ty = op.tile.type
    assert isinstance(ty, coda.TileType)
    c = ctx.cols(op, ty.cols)
    x = ctx.get(op, op.tile)
    b = ctx.b
    ctx.comment(op.name)
    ptr = ctx.ptr(op, op.indices)
    idx = ctx.row_vector(("indices", ptr), lambda: b.value(tl.LoadOp(b.value(tl.AddPtrOp(ptr, ctx.frame.offs_m)),
                                                         ctx.frame.mask_m, ctx.i32(-1))), "sel_idx")
    if ctx.row_vectors is None:
        idx = ctx.name(idx, "sel_idx")
    load = op.tile.owner
    if (isinstance(load, coda.LoadOp) and load.period is None and ty.cols == ctx.n and not ctx.h
            and ctx.slice is None and not ctx.written_over(load.source)):
        # the tile is the plain load of an N-wide matrix at the kernel's own columns: read the one
        # element at idx[m] instead of comparing every column with it and reducing the tile (the
        # compare, select and row sum over each [BM, BN] tile cost the LLaMA-1B LM head's
        # whole-rows cross-entropy pass 0.37 ms of its 1.16 on the H100); the same value, since
        # the tile is that element widened to f32 and the sum adds only zeros to it
        f = ctx.frame
        first = b.ibin(arith.MuliOp, f.pid_n, f.bn)
        inside = b.ibin(arith.AndIOp, b.cmpi("sge", idx, first),
                        b.cmpi("slt", idx, b.ibin(arith.AddiOp, first, f.bn)))
        hit = b.ibin(arith.AndIOp, f.mask_m, b.ibin(arith.AndIOp, inside, b.cmpi("slt", idx, f.n)), "sel_hit")
        ptr_m = ctx.ptr(op, load.source)
        row = b.value(tl.AddPtrOp(ptr_m, b.ibin(arith.MuliOp, ctx.row_offsets(), b.const(ty.cols, i64))))
        elt = load.source.type.get_element_type()  # type: ignore[attr-defined]
        ctx.assign(op.result, ctx.load(b.value(tl.AddPtrOp(row, idx)), hit, 0, elt), "p")
        return
    hit = b.ibin(arith.AndIOp, c.mask2, b.cmpi("eq", b.value(tl.ExpandDimsOp(c.cols, 0)), b.value(tl.ExpandDimsOp(idx, 1))))
    ctx.assign(op.result, b.value(tl.ReduceOp("sum", b.where(hit, x, b.const(0.0, f32)), 1)), "p")
