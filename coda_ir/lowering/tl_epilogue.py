"""The Triton epilogue lowering: a coda epilogue region as `tl` ops on one [BM, BN] tile.

Every epilogue of the Triton lowering is built here, in `epilogue_schedule` order, each
yielded value stored right after the step that makes it. `convert-coda-to-tl` builds each
`coda.elementwise` kernel with it (`lower_elementwise`: the kernel head, program id -> tile,
and for `whole rows` / `whole cols` kernels an `scf.for` over the tiles along the walked axis
whose carried values are the running reductions, stored after the loop), and each gemm's
epilogue (`tl_gemm`: the region of the `tl.mainloop` op, on the tile the mainloop hands it).
Every decision is made in the lowering (what is loaded from where, masks, the layout of pairs
and segments, which recorded constraint a primitive needs); `lowering/triton_printer.py` prints
the result op by op.

Each coda epilogue op is lowered by the function registered for its class in
`EPILOGUE_LOWERINGS`, the merge of the per-topic tables (`tl_epilogue_loads`,
`tl_epilogue_maps`, `tl_epilogue_reductions`); an op without an entry is an internal error.
The lowerings share an `EpilogueContext` (`tl_epilogue_context`: the tile, the column space,
the value map, the `tl` builder). This module is the driver: the schedule, the stores of yielded
values (tiles, pair halves, row / column partials, running values of whole-row kernels), the
sub-tiled epilogue of a gemm (`build_sliced_epilogue`: the region once per column slice, each on
its own frame), and the elementwise kernel.

The lowering takes the tile it works on as a `TileFrame` (the values a kernel head or a
mainloop defines). The gemm-only features: a gemm's column space (`ColumnSpace`: interleaved
accumulator columns, read and written as two contiguous half tiles where a tile lies inside one
interleave group, a `tl.constexpr_if` on the tile width), sub-tiled epilogues, and the Gluon
epilogue partition (`gluon_partition`: ranges and pair maps in explicit Gluon layouts, column
partials carried across row sub-tiles, the accumulate its mainloop applies before the hand-off).

Value names: the lowering gives a value a name hint where the printed kernel should name it
(`t_x` for coda value `%x`, `p` for partials, `rm` for masked tiles, ...); the printer writes
every other value used once in place.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith, math, scf
from xdsl.dialects.builtin import TensorType, f32, i32, i64
from xdsl.ir import Attribute, Block, Operation, SSAValue

from coda_ir.analysis.epilogue_schedule import epilogue_schedule
from coda_ir.dialects.coda import writes_over
from coda_ir.diagnostics import CompilerError, InternalCompilerBug
from coda_ir.dialects import coda
from coda_ir.dialects import triton_lang as tl
from coda_ir.dialects.tl_names import KERNEL_SCOPE, KernelNames
from coda_ir.lowering import tl_epilogue_loads, tl_epilogue_maps, tl_epilogue_reductions
from coda_ir.lowering.tl_build import Builder, param_names
from coda_ir.lowering.tl_epilogue_context import Cols, EpilogueContext, EpilogueLowerings, TileFrame, tile_width

EPILOGUE_LOWERINGS = EpilogueLowerings(tl_epilogue_loads.LOWERINGS, tl_epilogue_maps.LOWERINGS,
                                       tl_epilogue_reductions.LOWERINGS)
"""Every coda epilogue op's Triton lowering, by op class."""


def pointee(value: SSAValue) -> Attribute:
    """The element type a kernel parameter for `value` points to (partials: fp32)."""
    ty = value.type
    if isinstance(ty, coda.PartialsType):
        return f32
    assert isinstance(ty, TensorType)
    return ty.get_element_type()


def elementwise_params(op: coda.ElementwiseOp) -> tuple[list[tuple[str, Attribute]], int]:
    """The parameters of a `coda.elementwise` kernel (its inputs' and outputs' pointers, `M`,
    `N`, then the constexprs `BM`, `BN`) and how many of them (at the end) are constexprs."""
    names = KernelNames(KERNEL_SCOPE)
    block = op.body.blocks[0]
    ins = param_names(names, block.args, "in")
    outs = param_names(names, op.outputs, "out")
    params = [(p, tl.PointerType(pointee(v))) for p, v in zip(ins, block.args)]
    params += [(p, tl.PointerType(pointee(v))) for p, v in zip(outs, op.outputs)]
    return params + [("M", i32), ("N", i32), ("BM", i32), ("BN", i32)], 2


# ============================================================================ the driver


def build_epilogue(ctx: EpilogueContext, block: Block, args: Sequence[SSAValue],
                   outputs: Sequence[tuple[SSAValue, SSAValue]]) -> None:
    """The region's ops in `epilogue_schedule` order; each yielded value is stored right after
    the step that makes it."""
    for arg, value in zip(block.args, args):
        ctx.values[arg] = value
    term = block.last_op
    if not isinstance(term, coda.YieldOp):
        raise CompilerError(ctx.kernel, "epilogue region must end in coda.yield")
    stores: dict[SSAValue, list[int]] = {}
    for i, value in enumerate(term.values):
        stores.setdefault(value, []).append(i)
    if len(term.values) != len(outputs):
        raise CompilerError(term, f"yields {len(term.values)} values for {len(outputs)} kernel results")

    def store(value: SSAValue) -> None:
        for i in stores.pop(value, []):
            result, ptr = outputs[i]
            store_yielded(ctx, term, value, i, result, ptr)

    for arg in block.args:
        store(arg)
    for step in epilogue_schedule(block):
        if step.op in ctx.prebound:  # computed before the epilogue (the Gluon mainloop's accumulate_first)
            for result in step.op.results:
                ctx.values[result] = ctx.prebound[step.op]
        else:
            EPILOGUE_LOWERINGS.lower(ctx, step)
        for i in step.results:
            store(step.op.results[i])
    for value in list(stores):  # defined outside the region (not expected), stored at the end
        store(value)


def build_sliced_epilogue(ctx: EpilogueContext, block: Block, args: Sequence[SSAValue],
                          outputs: Sequence[tuple[SSAValue, SSAValue]], parts: int = 2) -> None:
    """The whole region once per column slice of the accumulator (args[0]), `parts` of them,
    each on its own frame: columns [j BN / parts, (j + 1) BN / parts) of the tile.

    Elementwise work, tile stores and cols partials are per column, so each slice gives the
    same values as the whole tile; row vectors are loaded once, before the first slice, and
    row partials of the slices are combined in slice order (sum: p0 + p1, max, log-sum-exp)
    and stored once per tile.
    """
    b, f = ctx.b, ctx.frame
    ctx.row_vectors = {}
    ctx.row_partials = {}
    ctx.comment(f"sub-tiled epilogue: {parts} column slices of BN // {parts}")
    width = b.ibin(arith.DivSIOp, f.bn, ctx.i32(parts))
    grouped = b.value(tl.PermuteOp(b.value(tl.ReshapeOp(args[0], [f.bm, ctx.i32(parts), width])), (0, 2, 1)))
    assert parts == 2, "tl.split halves the last axis"
    split = b.add(tl.SplitOp(grouped))
    accs = list(split.results)
    for j, part in enumerate(accs):
        part.name_hint = f"acc_s{j}"
    for j in range(parts):
        ctx.comment(f"-- column slice {j} of {parts}")
        start = b.ibin(arith.MuliOp, f.pid_n, f.bn)
        if j:
            start = b.ibin(arith.AddiOp, start, b.ibin(arith.MuliOp, ctx.i32(j), b.ibin(arith.DivSIOp, f.bn, ctx.i32(parts))))
        slice_bn = b.ibin(arith.DivSIOp, f.bn, ctx.i32(parts))
        offs_n = b.ibin(arith.AddiOp, start, b.value(tl.ArangeOp(slice_bn)), f"offs_n_s{j}")
        mask_n = b.cmpi("slt", offs_n, f.n, f"mask_n_s{j}")
        ctx.frame = TileFrame(f.bm, slice_bn, f.m, f.n, f.pid_m, f.pid_n, f.offs_m, f.mask_m, offs_n, mask_n)
        ctx.slice = (j, parts)
        ctx.values.clear()
        ctx.col_cache.clear()
        ctx.body_clones.clear()
        build_epilogue(ctx, block, [accs[j], *args[1:]], outputs)
    ctx.frame, ctx.slice = f, None
    if ctx.row_partials:
        ctx.comment("-- row partials of the slices, combined in slice order")
    for index in sorted(ctx.row_partials):
        pty, ptr, xs = ctx.row_partials[index]
        combine = pty.combine_kind
        acc = xs[0]
        for x in xs[1:]:
            if combine == coda.Combine.SUM:
                acc = b.fbin(arith.AddfOp, acc, x, "pc")
            elif combine == coda.Combine.MAX:
                acc = b.fbin(arith.MaximumfOp, acc, x, "pc")
            else:
                mx = b.fbin(arith.MaximumfOp, acc, x, "pc_max")
                ref = b.where(b.cmpf("oeq", mx, b.const(float("-inf"), f32)), b.const(0.0, f32), mx, "pc_ref")
                spread = b.fbin(arith.AddfOp, b.unary(math.ExpOp, b.fbin(arith.SubfOp, acc, ref)),
                                b.unary(math.ExpOp, b.fbin(arith.SubfOp, x, ref)))
                acc = b.fbin(arith.AddfOp, ref, b.unary(math.LogOp, spread), "pc")
        ctx.comment("store partials [M, tiles_n] at [m, pid_n]")
        tiles = b.value(arith.ExtSIOp(b.value(tl.CdivOp(f.n, f.bn)), i64))
        at = b.value(tl.AddPtrOp(ptr, b.ibin(arith.MuliOp, ctx.row_offsets(), tiles)))
        b.add(tl.StoreOp(b.value(tl.AddPtrOp(at, f.pid_n)), acc, f.mask_m))
    ctx.row_vectors = ctx.row_partials = None


# -------------------------------------------------------------- stores


def store_yielded(ctx: EpilogueContext, op: Operation, value: SSAValue, index: int, result: SSAValue, ptr: SSAValue) -> None:
    """Store one yielded value (output `index` of the kernel) as soon as it is final."""
    x = ctx.get(op, value)
    rty = result.type
    b, f = ctx.b, ctx.frame
    if isinstance(value.type, coda.PartialsType):
        pty = value.type
        src = value.owner
        assert isinstance(src, Operation)
        if ctx.whole is not None:
            combine_running(ctx, index, pty, x, src)
            return
        if pty.axis == coda.Axis.ROWS:
            if ctx.row_partials is not None:
                # a column slice's partial: combined with the other slices' after the last one
                ctx.row_partials.setdefault(index, (pty, ptr, []))[2].append(x)
                return
            ctx.comment("store partials [M, tiles_n] at [m, pid_n]")
            tiles = b.value(arith.ExtSIOp(b.value(tl.CdivOp(f.n, f.bn)), i64))
            at = b.value(tl.AddPtrOp(ptr, b.ibin(arith.MuliOp, ctx.row_offsets(), tiles)))
            b.add(tl.StoreOp(b.value(tl.AddPtrOp(at, f.pid_n)), x, f.mask_m))
        elif ctx.gluon_partition:
            tile = src.operands[0].type
            assert isinstance(tile, coda.TileType)
            carry_column_partials(ctx, index, pty, x, ctx.cols(op, tile.cols))
        else:
            tile = src.operands[0].type
            assert isinstance(tile, coda.TileType)
            c = ctx.cols(op, tile.cols)
            ctx.comment("store partials [L, tiles_m] at [n, pid_m]")
            tiles = b.value(arith.ExtSIOp(b.value(tl.CdivOp(f.m, f.bm)), i64))
            at = b.value(tl.AddPtrOp(ptr, b.ibin(arith.MuliOp, b.value(tl.CastOp(c.cols, i64)), tiles)))
            b.add(tl.StoreOp(b.value(tl.AddPtrOp(at, f.pid_m)), x, c.mask))
    elif value in ctx.gathered:
        # a wide pair_map result gathered from memory: each pair's two columns
        g = ctx.gathered[value]
        assert isinstance(value.type, coda.TileType) and isinstance(rty, TensorType)
        ctx.row_offsets()
        elt = rty.get_element_type()
        over = writes_over(ctx.kernel)
        if over is not None and over[index] >= 0:
            # stored over the input it reads in pair halves: each half's store waits for every
            # thread's loads of this program (analysis/in_place.py's pair-halves rule, point 2)
            b.add(tl.DebugBarrierOp())
        for half, offset in ((g.a, 0), (g.b, g.stride)):
            base = b.value(tl.AddPtrOp(ptr, b.ibin(arith.MuliOp, ctx.rows2(), b.const(value.type.cols, i64))))
            if offset and g.second is not None:
                cols = g.second
            else:
                cols = g.first if not offset else b.ibin(arith.AddiOp, g.first, ctx.i32(offset))
            at = b.value(tl.AddPtrOp(base, b.value(tl.ExpandDimsOp(cols, 0))))
            b.add(tl.StoreOp(at, b.store_cast(half, elt), g.cols.mask2))
    else:
        ty = value.type
        assert isinstance(ty, coda.TileType) and isinstance(rty, TensorType)
        c = ctx.cols(op, ty.cols)
        ctx.row_offsets()
        elt = rty.get_element_type()
        hv = ctx.halves(op, ty.cols)

        def scatter(inner: Builder) -> list[SSAValue]:
            stored = inner.store_cast(x, elt)
            inner.add(tl.StoreOp(ctx.matrix_ptr(ptr, ty.cols, c.cols), stored, c.mask2))
            return []

        if hv is None:
            scatter(b)
            return

        def halves(inner: Builder) -> list[SSAValue]:
            # interleaved columns -> the user's layout: the even columns (first half, e.g. gate)
            # and the odd ones (second half, up) each as one contiguous block, not a scatter whose
            # adjacent lanes write h columns apart
            ucol, umask = hv.setup()
            shape = [ctx.frame.bm, inner.ibin(arith.DivSIOp, hv.tw, ctx.i32(2)), ctx.i32(2)]
            split = inner.add(tl.SplitOp(inner.value(tl.ReshapeOp(inner.store_cast(x, elt), shape))))
            split.results[0].name_hint, split.results[1].name_hint = "st_lo", "st_hi"
            inner.add(tl.StoreOp(ctx.matrix_ptr(ptr, ty.cols, ucol), split.results[0], umask))
            hi = inner.value(tl.AddPtrOp(ctx.matrix_ptr(ptr, ty.cols, ucol), ctx.i32(hv.half)))
            inner.add(tl.StoreOp(hi, split.results[1], umask))
            return []

        ctx.if_constexpr(hv.cond, halves, scatter)


def carry_column_partials(ctx: EpilogueContext, index: int, pty: coda.PartialsType, x: SSAValue, c: Cols) -> None:
    """The Gluon partition: this row sub-tile's column partials added to (max: combined with)
    the running ones of output `index`, in sub-tile order; the template stores them once per
    tile."""
    if c.cols is not ctx.frame.offs_n:
        raise InternalCompilerBug(ctx.kernel, "column partials of a tile that is not N wide in a Gluon epilogue "
                                               "(coda-plan-mainloop admits N-wide ones only)")
    if index not in ctx.carried:
        raise InternalCompilerBug(ctx.kernel, f"output #{index}'s column partials are not carried by the Gluon "
                                               "epilogue's region")
    b = ctx.b
    ctx.comment("column partials: carried across the row sub-tiles (in sub-tile order)")
    if pty.combine_kind == coda.Combine.MAX:
        ctx.carried[index] = b.fbin(arith.MaximumfOp, ctx.carried[index], x)
    elif pty.combine_kind == coda.Combine.SUM:
        ctx.carried[index] = b.fbin(arith.AddfOp, ctx.carried[index], x)
    else:
        raise InternalCompilerBug(ctx.kernel, f"{pty.combine_kind.value} column partials in a Gluon epilogue")


def combine_running(ctx: EpilogueContext, index: int, pty: coda.PartialsType, x: SSAValue, src: Operation) -> None:
    """Whole rows/cols: combine this tile's partial into the program's running value, in
    tile order (the loop order), as a fold would combine the stored partials."""
    assert ctx.running is not None
    if index not in ctx.completed:
        width = src.operands[0].type.cols if pty.axis == coda.Axis.COLS else 0  # type: ignore[attr-defined]
        ctx.completed[index] = (pty, ctx.running(index, x.type, f"whole{index}"), width)
    _, acc, width = ctx.completed[index]
    combine = pty.combine_kind
    b = ctx.b
    ctx.comment(f"combine with the previous tiles' {pty.axis.value} partials ({combine.value})")
    if combine == coda.Combine.SUM:
        acc = b.fbin(arith.AddfOp, acc, x)
    elif combine == coda.Combine.MAX:
        acc = b.fbin(arith.MaximumfOp, acc, x)
    else:
        mx = b.fbin(arith.MaximumfOp, acc, x, "wc_max")
        ref = b.where(b.cmpf("oeq", mx, b.const(float("-inf"), f32)), b.const(0.0, f32), mx, "wc_ref")
        spread = b.fbin(arith.AddfOp, b.unary(math.ExpOp, b.fbin(arith.SubfOp, acc, ref)),
                        b.unary(math.ExpOp, b.fbin(arith.SubfOp, x, ref)))
        acc = b.fbin(arith.AddfOp, ref, b.unary(math.LogOp, spread))
    ctx.completed[index] = (pty, acc, width)


# ============================================================================ coda.elementwise


def lower_elementwise(op: coda.ElementwiseOp, name: str, member: bool) -> tl.KernelOp:
    """The kernel of a `coda.elementwise`: each program one [BM, BN] tile (program id -> tile
    row-major over the column tiles), the region built on it; `whole rows` (`whole cols`): each
    program one block of BM rows (BN columns), the region in an `scf.for` over the column (row)
    tiles in order, reductions along them running values carried by the loop and stored after
    it. A member of a launch group takes its program index as its first parameter."""
    params, constexprs = elementwise_params(op)
    all_params = [("pid", i32), *params] if member else params
    kernel = tl.KernelOp(name, all_params, constexprs)
    arg = {n: a for (n, _), a in zip(all_params, kernel.body.block.args)}
    block = op.body.blocks[0]
    n_in = len(block.args)
    pointers = [arg[p] for p, _ in params[: n_in + len(op.outputs)]]
    b = Builder(kernel.body.block)
    M, N, BM, BN = arg["M"], arg["N"], arg["BM"], arg["BN"]
    pid = arg["pid"] if member else b.value(tl.ProgramIdOp(0), "pid")
    _, n = op.iteration_shape()
    outputs = list(zip(op.outputs, pointers[n_in:]))

    def tile_of(into: Builder, pid_: SSAValue, extent: SSAValue, size: SSAValue, axis: str) -> tuple[SSAValue, SSAValue]:
        offs = into.ibin(arith.AddiOp, into.ibin(arith.MuliOp, pid_, size), into.value(tl.ArangeOp(size)), f"offs_{axis}")
        return offs, into.cmpi("slt", offs, extent, f"mask_{axis}")

    whole = op.whole_axis
    if whole is None:
        num_pid_n = b.value(tl.CdivOp(N, BN), "num_pid_n")
        pid_m = b.ibin(arith.DivSIOp, pid, num_pid_n, "pid_m")
        pid_n = b.ibin(arith.RemSIOp, pid, num_pid_n, "pid_n")
        offs_m = b.ibin(arith.AddiOp, b.ibin(arith.MuliOp, pid_m, BM), b.value(tl.ArangeOp(BM)), "offs_m")
        offs_n = b.ibin(arith.AddiOp, b.ibin(arith.MuliOp, pid_n, BN), b.value(tl.ArangeOp(BN)), "offs_n")
        mask_m = b.cmpi("slt", offs_m, M, "mask_m")
        mask_n = b.cmpi("slt", offs_n, N, "mask_n")
        frame = TileFrame(BM, BN, M, N, pid_m, pid_n, offs_m, mask_m, offs_n, mask_n)
        build_epilogue(EpilogueContext(op, b, frame, n, dict(zip(block.args, pointers))), block, pointers[:n_in], outputs)
        return kernel

    # whole rows (cols): this program's BM rows (BN columns), the region once per tile along
    # them in order; completed reductions are running values carried by the loop
    rows = whole == coda.Axis.ROWS
    if not member:
        pid.name_hint = "pid_m" if rows else "pid_n"
    fixed_offs, fixed_mask = tile_of(b, pid, M if rows else N, BM if rows else BN, "m" if rows else "n")
    loop_extent, loop_size = (N, BN) if rows else (M, BM)
    body = Block(arg_types=[i32])
    body.args[0].name_hint = "pid_n" if rows else "pid_m"
    inner = Builder(body)
    offs, mask = tile_of(inner, body.args[0], loop_extent, loop_size, "n" if rows else "m")
    if rows:
        frame = TileFrame(BM, BN, M, N, pid, body.args[0], fixed_offs, fixed_mask, offs, mask)
    else:
        frame = TileFrame(BM, BN, M, N, body.args[0], pid, offs, mask, fixed_offs, fixed_mask)
    inits: list[tuple[int, coda.PartialsType]] = []  # the carried values' outputs, in output order

    def running(index: int, ty: Attribute, hint: str) -> SSAValue:
        """A new carried value of the loop (its initial value is made before the loop)."""
        position = sum(1 for i, _ in inits if i < index)
        carried = body.insert_arg(ty, 1 + position)
        carried.name_hint = hint
        pty = op.body.blocks[0].last_op.operands[index].type  # type: ignore[union-attr]
        inits.insert(position, (index, pty))
        return carried

    ctx = EpilogueContext(op, inner, frame, n, dict(zip(block.args, pointers)))
    ctx.whole = whole
    ctx.running = running
    build_epilogue(ctx, block, pointers[:n_in], outputs)
    order = [index for index, _ in inits]
    inner.add(scf.YieldOp(*[ctx.completed[i][1] for i in order]))
    init_values = []
    for index, pty in inits:
        width = ctx.completed[index][2]
        shape = [BM] if rows else [tile_width(b, BN, width, n)]
        value = b.const(0.0 if pty.combine_kind == coda.Combine.SUM else float("-inf"), f32)
        init_values.append(b.value(tl.FullOp(shape, value, f32)))
    b.add(tl.CommentOp(f"whole {whole.value}: the {'column' if rows else 'row'} tiles in order"))
    ub = b.value(tl.CdivOp(loop_extent, loop_size))
    loop = b.add(scf.ForOp(b.const(0, i32), ub, b.const(1, i32), init_values, [body]))
    for result, (index, _) in zip(loop.results, inits):
        result.name_hint = f"whole{index}"
    final = dict(zip(order, loop.results))
    for index in sorted(final):
        result = op.outputs[index]
        rty = result.type
        assert isinstance(rty, TensorType)
        stored = b.store_cast(final[index], rty.get_element_type())
        ptr = pointers[n_in + index]
        if rows:
            b.add(tl.StoreOp(b.value(tl.AddPtrOp(ptr, fixed_offs)), stored, fixed_mask))
        else:
            width = ctx.completed[index][2]
            tw = tile_width(b, BN, width, n)
            cols = b.ibin(arith.AddiOp, b.ibin(arith.MuliOp, pid, tw), b.value(tl.ArangeOp(tw)), f"cols{index}")
            b.add(tl.StoreOp(b.value(tl.AddPtrOp(ptr, cols)), stored, b.cmpi("slt", cols, b.const(width, i32))))
    return kernel
