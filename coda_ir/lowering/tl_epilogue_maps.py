"""The Triton epilogue lowerings of the ops with scalar bodies: `coda.map` (whole, one step of
a split map, or once per pair half) and `coda.pair_map` (pairs split from whole groups in the
tile, exchanged by `tl.gather` by period or in a whole-row tile, or gathered from memory), and
the region's scalar `arith` / `math` ops (lowered into the bodies that use them). Each is
registered in `LOWERINGS` for its op class (see `tl_epilogue_context`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction

from xdsl.dialects import arith, math
from xdsl.ir import Block, Operation, SSAValue

from coda_ir.analysis.epilogue_schedule import EpilogueStep
from coda_ir.dialects import coda
from coda_ir.dialects import triton_lang as tl
from coda_ir.lowering.tl_build import Builder, ScalarLowering
from coda_ir.lowering.tl_epilogue_context import Cols, EpilogueContext, EpilogueLowerings, Gathered

LOWERINGS = EpilogueLowerings()


@LOWERINGS.impl(coda.MapOp)
def lower_map(ctx: EpilogueContext, op: coda.MapOp, step: EpilogueStep) -> None:
    """The map's outputs: all of them, or those of one step of a split map (`epilogue_schedule`);
    a map coda-legalize marked `coda.pair_halves` once per pair half."""
    if coda.pair_halves_stride(op) is not None:
        map_pair_halves(ctx, op)
        return
    args = [ctx.get(op, v) for v in op.inputs]
    ty = op.outputs[0].type
    assert isinstance(ty, coda.TileType)

    def extents() -> list[SSAValue]:
        return [ctx.frame.bm, ctx.cols(op, ty.cols).tw]

    if step.body is None:
        ctx.comment(op.name)
        indices: Sequence[int] = range(len(op.outputs))
        body = ctx.body_clone(op, args, 2, extents)
        body.ops(None)
    else:
        ctx.comment(f"{op.name} results {', '.join(map(str, step.results))}")
        indices = step.results
        if op not in ctx.body_clones:
            ctx.body_clones[op] = ctx.body_clone(op, args, 2, extents)
        body = ctx.body_clones[op]
        body.ops(step.body)
    for i in indices:
        ctx.assign(op.outputs[i], body.result(i))


def map_pair_halves(ctx: EpilogueContext, op: coda.MapOp) -> None:
    """A map coda-legalize marked `coda.pair_halves`: its body once per half of its operands'
    pairs (`tl_epilogue_loads.load_pair_halves`), at the tile's pair-index columns."""
    ctx.check_gatherable(op, "coda.pair_halves")
    stride = coda.pair_halves_stride(op)
    assert stride is not None
    ctx.comment(f"{op.name}, once per pair half")
    halves = [ctx.gathered[v] for v in op.inputs]
    c = halves[0].cols
    outs: list[list[SSAValue]] = []
    for k in range(2):
        body = ctx.body_clone(op, [h.a if k == 0 else h.b for h in halves], 2, lambda: [ctx.frame.bm, c.tw])
        body.ops(None)
        outs.append([body.result(j) for j in range(len(op.outputs))])
    for j, result in enumerate(op.outputs):
        a = ctx.assign(result, outs[0][j], "pw")
        second = ctx.name(outs[1][j], "pw")
        ctx.gathered[result] = Gathered(a, second, halves[0].first, stride, c)


# -------------------------------------------------------------- pair maps


@LOWERINGS.impl(coda.PairMapOp)
def lower_pair_map(ctx: EpilogueContext, op: coda.PairMapOp, step: EpilogueStep) -> None:
    """Where the pairs meet is coda-legalize's recorded decision: gathered from memory
    (`coda.gathered`), exchanged in a whole-row tile (`coda.row_exchange`), exchanged in the
    tile by period (a pair_map with a period), else split from whole groups in the tile."""
    if ctx.gathers_pairs(op):
        gathered_pair_map(ctx, op)
    elif op.period is not None:
        period_pair_map(ctx, op)
    elif ctx.regathers(op):
        regathered_pair_map(ctx, op)
    else:
        grouped_pair_map(ctx, op)


def grouped_pair_map(ctx: EpilogueContext, op: coda.PairMapOp) -> None:
    """A pair_map on tiles that hold whole groups of 2 stride columns: each wide tile reshaped
    to its groups and split into the pairs' first and second elements, the results joined back."""
    stride = op.stride.value.data
    pairs = op.pair_count()
    wide_cols = ctx.cols(op, 2 * pairs)
    # groups of 2*stride columns must not straddle tiles: BN * W / N % (2 s) == 0
    ctx.need_bn(op, Fraction(2 * stride * ctx.n, 2 * pairs))
    b = ctx.b
    bm, s = ctx.frame.bm, ctx.i32(stride)
    groups = b.ibin(arith.DivSIOp, wide_cols.tw, ctx.i32(2 * stride))
    ctx.comment(f"{op.name} stride {stride}")
    args: list[SSAValue] = []
    like: SSAValue | None = None  # the first split wide operand (the narrow ones take its layout)
    narrows: list[SSAValue] = []
    for value in op.inputs:
        src = ctx.get(op, value)
        if op.is_wide(value):
            reshaped = b.value(tl.ReshapeOp(src, [bm, groups, ctx.i32(2), s]))
            grouped = b.value(tl.PermuteOp(reshaped, (0, 1, 3, 2)), "pw")
            split = b.add(tl.SplitOp(grouped))
            split.results[0].name_hint, split.results[1].name_hint = "pa", "pb"
            args += list(split.results)
            if like is None:
                like = split.results[0]
        else:
            narrows.append(b.value(tl.ReshapeOp(src, [bm, groups, s]), "pn"))
            args.append(narrows[-1])
    body = ctx.body_clone(op, args, 3, lambda: [bm, groups, s])
    body.ops(None)
    i = 0
    for result in op.outputs:
        ty = result.type
        assert isinstance(ty, coda.TileType)
        shape = ctx.tile_shape(op, ty)
        if op.is_wide(result):
            a, second = body.result(i), body.result(i + 1)
            i += 2
            joined = b.value(tl.PermuteOp(b.value(tl.JoinOp(a, second)), (0, 1, 3, 2)))
            ctx.assign(result, relayout(ctx, b.value(tl.ReshapeOp(joined, shape))))
        else:
            a = body.result(i)
            i += 1
            ctx.assign(result, relayout(ctx, b.value(tl.ReshapeOp(a, shape))))
    if ctx.gluon_partition and like is not None:
        narrows_like(ctx, b, narrows, like)


def period_pair_map(ctx: EpilogueContext, op: coda.PairMapOp) -> None:
    """A pair_map with a period on tiles in the wide columns' natural order, exchanged by
    `tl.gather` inside the tile: each narrow position p reads columns (first(p), second(p))
    of the wide tiles (`period_columns`, tile-relative); each wide column k reads pair
    back(k) = (k // P) P/2 + (k % P % s if k % P < 2s else k % P // 2) of the narrow
    results, the second element when k % P // s == 1 (k % P < 2s) or k is odd (else). The
    tile holds whole periods (BN constraint), or the whole row (`coda.row_exchange`);
    indices are clamped into the tile (lanes past N are masked on store)."""
    stride, period, pairs = op.stride.value.data, op.group(), op.pair_count()
    if ctx.regathers(op):
        ctx.cover_row(op)
    else:
        ctx.need_bn(op, Fraction(period * ctx.n, 2 * pairs))  # whole periods in a tile
    narrow, wide = ctx.cols(op, pairs), ctx.cols(op, 2 * pairs)
    b = ctx.b
    bm = ctx.frame.bm
    ctx.comment(f"{op.name} stride {stride} period {period}, pairs exchanged in the tile")

    def spread(index: SSAValue, limit: SSAValue, width: SSAValue, hint: str) -> SSAValue:
        clamped = b.ibin(arith.MinSIOp, index, b.ibin(arith.SubiOp, limit, ctx.i32(1)))
        return b.value(tl.BroadcastToOp(b.value(tl.ExpandDimsOp(clamped, 0)), [bm, width]), hint)

    first, second = period_columns(ctx, ctx.column_arange(narrow.tw), stride, period)
    first, second = spread(first, wide.tw, narrow.tw, "pfirst"), spread(second, wide.tw, narrow.tw, "psecond")

    def back_and_upper() -> tuple[SSAValue, SSAValue]:
        k = ctx.column_arange(wide.tw)
        r = b.ibin(arith.RemSIOp, k, ctx.i32(period))
        grouped = b.cmpi("slt", r, ctx.i32(2 * stride))
        j = b.where(grouped, b.ibin(arith.RemSIOp, r, ctx.i32(stride)), b.ibin(arith.DivSIOp, r, ctx.i32(2)))
        pair = b.ibin(arith.AddiOp, b.ibin(arith.MuliOp, b.ibin(arith.DivSIOp, k, ctx.i32(period)),
                                            ctx.i32(period // 2)), j)
        back = spread(pair, narrow.tw, wide.tw, "pback")
        which = b.where(grouped, b.ibin(arith.DivSIOp, r, ctx.i32(stride)), b.ibin(arith.RemSIOp, r, ctx.i32(2)))
        return back, b.value(tl.ExpandDimsOp(b.cmpi("ne", which, ctx.i32(0)), 0), "pupper")

    exchanged_in_tile(ctx, op, narrow, first, second, back_and_upper)


def period_columns(ctx: EpilogueContext, p: SSAValue, stride: int, period: int) -> tuple[SSAValue, SSAValue]:
    """The (first, second) columns of pair indices p of a pair_map with a period
    (`coda.pair_columns`): g = p // (P/2), j = p % (P/2); (g P + j, + s) for j < s, else
    (g P + 2j, + 1). Relative to a tile when p is (its tiles start at whole periods)."""
    b = ctx.b
    half = period // 2
    base = b.ibin(arith.MuliOp, b.ibin(arith.DivSIOp, p, ctx.i32(half)), ctx.i32(period))
    j = b.ibin(arith.RemSIOp, p, ctx.i32(half))
    rotated = b.cmpi("slt", j, ctx.i32(stride))
    first = b.ibin(arith.AddiOp, base, b.where(rotated, j, b.ibin(arith.MuliOp, j, ctx.i32(2))), "pfirst")
    second = b.where(rotated, b.ibin(arith.AddiOp, first, ctx.i32(stride)), b.ibin(arith.AddiOp, first, ctx.i32(1)),
                     "psecond")
    return first, second


def period_pair_columns(ctx: EpilogueContext, op: coda.PairMapOp, pairs: int) -> tuple[SSAValue, SSAValue, Cols]:
    """The tile's pair indices' (first, second) columns of a pair_map with a period, built once."""
    stride, period = op.stride.value.data, op.group()
    if (stride, period) not in ctx.period_pairs:
        c = ctx.cols(op, pairs)
        ctx.period_pairs[(stride, period)] = (*period_columns(ctx, c.cols, stride, period), c)
    return ctx.period_pairs[(stride, period)]


def gathered_pair_map(ctx: EpilogueContext, op: coda.PairMapOp) -> None:
    stride, pairs = op.stride.value.data, op.pair_count()
    ctx.row_offsets()
    ctx.comment(f"{op.name} stride {stride}{'' if op.period is None else f' period {op.group()}'}, "
                 "pairs gathered from memory")
    if op.period is not None:
        first, second_cols, c = period_pair_columns(ctx, op, pairs)
        gathered_pairs(ctx, op, first, second_cols, c)
        return
    first, c = ctx.pair_first(op, stride, pairs)  # the tile's pair indices p; each is (first, first + stride)
    gathered_pairs(ctx, op, first, None, c)


def gathered_pairs(ctx: EpilogueContext, op: coda.PairMapOp, first: SSAValue, second_cols: SSAValue | None, c: Cols) -> None:
    stride, pairs = op.stride.value.data, op.pair_count()
    args: list[SSAValue] = []
    for value in op.inputs:
        if op.is_wide(value) and value in ctx.gathered:  # loaded in halves (coda.pair_halves)
            args += [ctx.gathered[value].a, ctx.gathered[value].b]
        elif op.is_wide(value):
            load = value.owner
            assert isinstance(load, coda.LoadOp)
            ptr = ctx.ptr(op, load.source)
            elt = load.source.type.get_element_type()  # type: ignore[attr-defined]
            a = ctx.name(ctx.pair_load(ptr, 2 * pairs, first, 0, c, elt), "pa")
            if second_cols is not None:
                second = ctx.name(ctx.pair_load(ptr, 2 * pairs, second_cols, 0, c, elt), "pb")
            else:
                second = ctx.name(ctx.pair_load(ptr, 2 * pairs, first, stride, c, elt), "pb")
            args += [a, second]
        else:
            args.append(ctx.get(op, value))
    body = ctx.body_clone(op, args, 2, lambda: [ctx.frame.bm, c.tw])
    body.ops(None)
    i = 0
    for result in op.outputs:
        count = 2 if op.is_wide(result) else 1
        values = [body.result(j) for j in range(i, i + count)]
        i += count
        if count == 2:
            a, second = (ctx.assign(result, v, "pw") for v in values)
            ctx.gathered[result] = Gathered(a, second, first, stride, c, second_cols)
        else:
            ctx.assign(result, values[0])


def regathered_pair_map(ctx: EpilogueContext, op: coda.PairMapOp) -> None:
    """A pair_map on tiles that cover the whole row, the partners exchanged by `tl.gather`
    along the columns: each narrow position p reads (first(p), first(p) + stride) of the
    wide tiles, first(p) = (p // stride) * 2 stride + p % stride; each wide column c reads
    pair p(c) of the narrow results, the first or the second element by c's half of its
    group. Indices are clamped into the tile (lanes past N are masked on store)."""
    stride, pairs = op.stride.value.data, op.pair_count()
    ctx.cover_row(op)
    narrow, wide = ctx.cols(op, pairs), ctx.cols(op, 2 * pairs)
    b = ctx.b
    ctx.comment(f"{op.name} stride {stride}, pairs exchanged in a whole-row tile")
    first = clamped_index(ctx, narrow.cols, stride, 2 * stride, stride, 0, wide.tw, narrow.tw, "pfirst")
    second = clamped_index(ctx, narrow.cols, stride, 2 * stride, stride, stride, wide.tw, narrow.tw, "psecond")

    def back_and_upper() -> tuple[SSAValue, SSAValue]:  # wide column c <- pair (c // 2s) * s + c % s, second when c % 2s >= s
        back = clamped_index(ctx, wide.cols, 2 * stride, stride, stride, 0, narrow.tw, wide.tw, "pback")
        upper_cols = b.cmpi("sge", b.ibin(arith.RemSIOp, wide.cols, ctx.i32(2 * stride)), ctx.i32(stride))
        return back, b.value(tl.ExpandDimsOp(upper_cols, 0), "pupper")

    exchanged_in_tile(ctx, op, narrow, first, second, back_and_upper)


def exchanged_in_tile(ctx: EpilogueContext, op: coda.PairMapOp, narrow: Cols, first: SSAValue, second: SSAValue,
                      back_and_upper: Callable[[], tuple[SSAValue, SSAValue]]) -> None:
    """A pair map whose partners are exchanged inside the tile by `tl.gather`: each wide input
    gathered at the pairs' `first` and `second` columns, the body on those narrow tiles, and
    each wide result gathered back (`back_and_upper()`, built at the first wide result: the
    pair each wide column reads, and whether it takes the pair's second element)."""
    b = ctx.b
    args: list[SSAValue] = []
    for value in op.inputs:
        src = ctx.get(op, value)
        if op.is_wide(value):
            args += [b.value(tl.GatherOp(src, first, 1), "pa"), b.value(tl.GatherOp(src, second, 1), "pb")]
        else:
            args.append(src)
    body = ctx.body_clone(op, args, 2, lambda: [ctx.frame.bm, narrow.tw])
    body.ops(None)
    back = upper = None
    i = 0
    for result in op.outputs:
        count = 2 if op.is_wide(result) else 1
        values = [body.result(j) for j in range(i, i + count)]
        i += count
        if count == 1:
            ctx.assign(result, values[0])
            continue
        if back is None:
            back, upper = back_and_upper()
        a, partner = (ctx.name(v, "pw") for v in values)
        ctx.assign(result, b.where(upper, b.value(tl.GatherOp(partner, back, 1)), b.value(tl.GatherOp(a, back, 1))))


def clamped_index(ctx: EpilogueContext, cols: SSAValue, divisor: int, scale: int, modulo: int, offset: int, limit: SSAValue,
                  width: SSAValue, hint: str | None) -> SSAValue:
    """broadcast_to(minimum((cols // divisor) * scale + cols % modulo (+ offset), limit - 1)[None, :], (BM, width))."""
    b = ctx.b
    index = b.ibin(arith.AddiOp, b.ibin(arith.MuliOp, b.ibin(arith.DivSIOp, cols, ctx.i32(divisor)), ctx.i32(scale)),
                   b.ibin(arith.RemSIOp, cols, ctx.i32(modulo)))
    if offset:
        index = b.ibin(arith.AddiOp, index, ctx.i32(offset))
    clamped = b.ibin(arith.MinSIOp, index, b.ibin(arith.SubiOp, limit, ctx.i32(1)))
    return b.value(tl.BroadcastToOp(b.value(tl.ExpandDimsOp(clamped, 0)), [ctx.frame.bm, width]), hint)


def relayout(ctx: EpilogueContext, v: SSAValue) -> SSAValue:
    """A tile a pair map made by reshaping its pairs back: in the Gluon partition, converted to
    the epilogue layout (the reshape's own layout is Triton's to infer)."""
    if not ctx.gluon_partition:
        return v
    return ctx.b.value(tl.ConvertLayoutOp(v, tl.LayoutAttr()))


def narrows_like(ctx: EpilogueContext, b: Builder, narrows: Sequence[SSAValue], like: SSAValue) -> None:
    """In the Gluon partition, a pair map's narrow operands take the layout of its split wide
    ones (`gl.convert_layout(n, like.type.layout)`; free: the epilogue layout keeps each pair
    in one thread, `plan_mainloop.epilogue_column_lanes`), converted at each use, as the
    kernels measured on the H100 were written."""
    for narrow in narrows:
        for use in list(narrow.uses):
            user = use.operation
            convert = tl.ConvertLayoutOp(narrow, like=like)
            b.block.insert_op_before(convert, user)
            user.operands[use.index] = convert.result


# -------------------------------------------------------------- the region's scalars


def check_region_scalar(ctx: EpilogueContext, op: Operation, step: EpilogueStep) -> None:
    """A scalar of the region (a function of constants): lowered into each body that uses it
    (`tl_build.ScalarLowering`); lowered here only to report an op that has none."""
    ScalarLowering(Builder(Block()), set()).lower_outside(op.results[0], {}, op)


# the region's scalar ops are the verifier's `coda.ELEMENTWISE_BODY_DIALECTS`
LOWERINGS.impl(*arith.Arith.operations, *math.Math.operations)(check_region_scalar)
