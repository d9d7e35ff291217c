"""The gemm kernels of `convert-coda-to-tl`: one `tl.kernel` per `coda.gemm`, its body the fixed
mainloop as one templated op (`tl.mainloop`, `lowering/mainloop.py`'s template) whose region is
the epilogue, built by the epilogue lowering (`tl_epilogue.build_epilogue`) on the tile the
mainloop hands it (`GEMM_FRAME`: the accumulator, the tile's rows and columns, their masks and
indices). Every decision about the epilogue is made here and in that lowering, and recorded as ops:

* the kernel's parameters: `a_ptr`, `b_ptr`, the epilogue's inputs and outputs, then the
  template's sizes, strides and tile constexprs (`triton_lang.GEMM_SIZES`, `GEMM_CONSTEXPRS`);
* the gemm's column space (`ColumnSpace`): interleaved accumulator columns (`interleave`,
  `interleave_wide`), read and written as two contiguous half tiles where a tile lies inside
  one interleave group (a `tl.constexpr_if` on the tile width, option `half_tile_io`);
* sub-tiled epilogues (option `epilogue_subtile`): a heavy epilogue (some op needs
  `SUBTILE_HEAVY_TILES` [BM, BN] fp32 tiles at once, `epilogue_tile_pressure`) runs once per
  column half of tiles at least that wide (`tl.constexpr_if BN >= ...`, the whole-tile epilogue
  in the other branch, so the autotuner's narrower tiles keep it). Off by default: with
  Triton's layout propagation both halves are converted out of the MMA layout up front, and the
  sliced LLaMA out-proj/down-proj epilogues compiled for sm_90a spilled more than the whole tile
  with early stores (bench/RESULTS.md, "Epilogue liveness").

The printer (`lowering/triton_printer.py`) fills the template and prints the region at each of
its splice points (after the portable loop, inside the persistent TMA tile loop).
"""

from __future__ import annotations

from fractions import Fraction

from xdsl.dialects.builtin import Float32Type, TensorType, i32
from xdsl.ir import Block, SSAValue

from coda_ir.diagnostics import CompilerError, InternalCompilerBug
from coda_ir.dialects import coda
from coda_ir.dialects import triton_lang as tl
from coda_ir.transforms.plan_mainloop import epilogue_column_lanes
from coda_ir.dialects.tl_names import GLUON_SCOPE, KERNEL_SCOPE, KernelNames, gluon_entry_name
from coda_ir.lowering.tl_build import Builder, param_names
from coda_ir.lowering.tl_epilogue import build_epilogue, build_sliced_epilogue, pointee
from coda_ir.lowering.tl_epilogue_context import ColumnSpace, EpilogueContext, TileFrame

# `epilogue_subtile`: the minimum BN (a power of two >= 2) at which heavy epilogues run per column
# half, or 0 (the default: never)
SUBTILE_MIN_BN_DEFAULT = 0
# an epilogue is heavy when some op needs this many [BM, BN] fp32 tiles at once (values live
# across it, its tile operands and results, matrix tiles it loads)
SUBTILE_HEAVY_TILES = 3


def check_subtile(value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0 or value == 1 or value & (value - 1):
        raise ValueError(f"epilogue_subtile must be 0 (off) or a power of two >= 2, got {value!r}")


def epilogue_tile_pressure(block: Block, n: int) -> Fraction:
    """Peak [BM, BN]-tile equivalents an epilogue needs at once, with each store right after its value.

    A W-wide tile counts W / N; broadcast and index tiles count 0 (one value per row or column);
    `coda.load` and `coda.accumulate` count the matrix tile they read.
    """

    def weight(v: SSAValue) -> Fraction:
        ty = v.type
        if not isinstance(ty, coda.TileType):
            return Fraction(0)
        if isinstance(v.owner, (coda.BroadcastOp, coda.IndexOp)):
            return Fraction(0)
        return Fraction(ty.cols, n)

    ops = [op for op in block.ops if not isinstance(op, coda.YieldOp)]
    last: dict[SSAValue, int] = {}
    for i, op in enumerate(ops):
        for v in op.operands:
            last[v] = i
    defined: list[SSAValue] = list(block.args)
    peak = Fraction(0)
    for i, op in enumerate(ops):
        operands = set(op.operands)
        across = sum((weight(v) for v in defined if v not in operands and last.get(v, -1) > i), Fraction(0))
        here = sum((weight(v) for v in operands), Fraction(0)) + sum((weight(r) for r in op.results), Fraction(0))
        if isinstance(op, coda.AccumulateOp):
            here += weight(op.result)
        peak = max(peak, across + here)
        defined.extend(op.results)
    return peak


def lower_gemm(op: coda.GemmOp, name: str, epilogue_subtile: int = SUBTILE_MIN_BN_DEFAULT,
               half_tile_io: bool = True) -> tl.KernelOp:
    """The `tl.kernel` of a `coda.gemm`: the mainloop op, its region the epilogue (see the module
    docstring)."""
    if isinstance(op.parent_op(), coda.LaunchGroupOp):
        raise CompilerError(op, "a coda.gemm cannot be a member of a coda.launch_group")
    names = KernelNames(KERNEL_SCOPE)
    block = op.epilogue.blocks[0]
    in_params = param_names(names, block.args[1:], "in")
    out_params = param_names(names, op.outputs, "out")
    a_elt = op.a.type.get_element_type()  # type: ignore[union-attr]
    b_elt = op.b.type.get_element_type()  # type: ignore[union-attr]
    params = [("a_ptr", tl.PointerType(a_elt)), ("b_ptr", tl.PointerType(b_elt))]
    params += [(p, tl.PointerType(pointee(v))) for p, v in zip(in_params, block.args[1:])]
    params += [(p, tl.PointerType(pointee(v))) for p, v in zip(out_params, op.outputs)]
    params += [(s, i32) for s in tl.GEMM_SIZES]
    params += [(c, ty) for c, ty, _ in tl.GEMM_CONSTEXPRS]
    defaults = [d for _, _, d in tl.GEMM_CONSTEXPRS if d is not None]
    kernel = tl.KernelOp(name, params, len(tl.GEMM_CONSTEXPRS), defaults)
    arg = {p: a for (p, _), a in zip(params, kernel.body.block.args)}
    template = [arg[p] for p in [*tl.GEMM_SIZES, *(c for c, _, _ in tl.GEMM_CONSTEXPRS)]]
    mainloop = tl.MainloopOp("portable", arg["a_ptr"], arg["b_ptr"], template, isinstance(a_elt, Float32Type))
    kernel.body.block.add_op(mainloop)

    at = mainloop.frame()
    frame = TileFrame(arg["BM"], arg["BN"], arg["M"], arg["N"], at["pid_m"], at["pid_n"], at["offs_m"], at["mask_m"],
                      at["offs_n"], at["mask_n"])
    _, n, _ = op.problem_shape()
    columns = ColumnSpace(op.interleave.value.data if op.interleave is not None else 0,
                          op.interleave_wide.value.data if op.interleave_wide is not None else 0, half_tile_io,
                          in_gemm=True)
    pointers = {v: arg[p] for v, p in zip(block.args[1:], in_params)}
    outputs = [(r, arg[p]) for r, p in zip(op.outputs, out_params)]
    args = [at["acc"], *(arg[p] for p in in_params)]
    b = Builder(mainloop.epilogue.block)
    b.add(tl.CommentOp("---- epilogue ----"))
    whole = EpilogueContext(op, b, frame, n, pointers, columns)
    if not (epilogue_subtile and epilogue_tile_pressure(block, n) >= SUBTILE_HEAVY_TILES):
        build_epilogue(whole, block, args, outputs)
        return kernel
    # heavy epilogue: on tiles at least `threshold` wide (each half still a multiple of what the
    # primitives need), once per column half; the whole tile otherwise
    threshold = max(epilogue_subtile, 2 * whole.bn_multiple_of)

    def sliced(into: Builder) -> list[SSAValue]:
        build_sliced_epilogue(EpilogueContext(op, into, frame, n, pointers, columns), block, args, outputs)
        return []

    def unsliced(into: Builder) -> list[SSAValue]:
        with whole.building_into(into):
            build_epilogue(whole, block, args, outputs)
        return []

    whole.if_constexpr(b.cmpi("sge", arg["BN"], b.const(threshold, i32)), sliced, unsliced)
    return kernel


def lower_gluon_gemm(op: coda.GemmOp, name: str) -> tl.KernelOp:
    """The Gluon kernel of a gemm with a `#coda.mainloop` record: a `tl.kernel` whose body is a
    `tl.mainloop gluon_ws` (`lowering/gluon.py`'s template: the MMA and producer partitions, the
    epilogue partition's loops), its region the epilogue on one row sub-tile of the hand-off
    buffer, built by the same epilogue lowering in the partition's layout (`#tl.layout<epilogue>`, with
    `epilogue_column_lanes` lanes along the columns): column ranges in its column slice, a pair
    map's narrow operands in its split operands' layout and its results back in the epilogue
    layout, column partials carried across the sub-tiles (the region's arguments and what it
    yields). With `accumulate_first` = i the MMA warpgroups apply the epilogue's first op,
    `coda.accumulate` of input i, before the hand-off: its result is the accumulator."""
    record = coda.recorded_mainloop(op)
    if record is None:
        raise InternalCompilerBug(op, "lower_gluon_gemm on a gemm without a coda.mainloop record")
    names = KernelNames([*KERNEL_SCOPE, *GLUON_SCOPE])
    block = op.epilogue.blocks[0]
    in_params = param_names(names, block.args[1:], "in")
    out_params = param_names(names, op.outputs, "out")
    first = record.accumulate_first.data
    params = [("a_desc", tl.PointerType(op.a.type.get_element_type())),  # type: ignore[union-attr]
              ("b_desc", tl.PointerType(op.b.type.get_element_type()))]  # type: ignore[union-attr]
    if first >= 0:
        accumulated = block.args[1 + first].type
        assert isinstance(accumulated, TensorType)
        params.append(("r_desc", tl.PointerType(accumulated.get_element_type())))
    params += [(p, tl.PointerType(pointee(v))) for p, v in zip(in_params, block.args[1:])]
    params += [(p, tl.PointerType(pointee(v))) for p, v in zip(out_params, op.outputs)]
    params += [(s, i32) for s in ("M", "N", "K")]
    kernel = tl.KernelOp(gluon_entry_name(name), params, 0)
    arg = {p: a for (p, _), a in zip(params, kernel.body.block.args)}

    term = block.last_op
    assert isinstance(term, coda.YieldOp)
    # every column-partials output is carried from sub-tile to sub-tile (coda-plan-mainloop admits
    # sums and maxima of N-wide tiles only)
    carried = [(i, v.type) for i, v in enumerate(term.values)
               if isinstance(v.type, coda.PartialsType) and v.type.axis == coda.Axis.COLS]
    mainloop = tl.MainloopOp(
        "gluon_ws", arg["a_desc"], arg["b_desc"], [arg[p] for p in ("M", "N", "K", *(["r_desc"] if first >= 0 else []))],
        record=record, column_lanes=epilogue_column_lanes(op), transpose_b=op.transpose_b is not None,
        carried=[(arg[out_params[i]], pty.combine_kind.value) for i, pty in carried])
    kernel.body.block.add_op(mainloop)
    at = mainloop.frame()
    frame = TileFrame(at["BM"], at["BN"], arg["M"], arg["N"], at["pid_m"], at["pid_n"], at["offs_m"], at["mask_m"],
                      at["offs_n"], at["mask_n"])
    _, n, _ = op.problem_shape()
    b = Builder(mainloop.epilogue.block)
    ctx = EpilogueContext(op, b, frame, n, {v: arg[p] for v, p in zip(block.args[1:], in_params)},
                          ColumnSpace(in_gemm=True), gluon_partition=True)
    for (i, _), running in zip(carried, mainloop.carried_args()):
        running.name_hint = f"colp{i}"
        ctx.carried[i] = running
    if first >= 0:
        uses = list(block.args[0].uses)
        if len(uses) != 1 or not isinstance(uses[0].operation, coda.AccumulateOp) \
                or uses[0].operation.matrix is not block.args[1 + first]:
            raise InternalCompilerBug(op, f"coda.mainloop accumulate_first = {first}, but the accumulator's only use "
                                          "is not coda.accumulate of that input")
        ctx.prebound[uses[0].operation] = at["acc"]
    build_epilogue(ctx, block, [at["acc"], *(arg[p] for p in in_params)],
                   [(r, arg[p]) for r, p in zip(op.outputs, out_params)])
    b.add(tl.YieldOp(*(ctx.carried[i] for i, _ in carried)))
    return kernel
