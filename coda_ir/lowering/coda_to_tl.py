"""`convert-coda-to-tl`: coda kernels -> `tl.kernel`s (Triton at the level of its Python DSL).

The first half of the Triton lowering (issue 13); `lowering/triton_printer.py` prints the
result and decides nothing. The pass

* names every kernel of every function (`_{function}_k{i}_{kind}`, launch groups
  `_{function}_g{j}_launch_group`, unique in the module) and records the name on the coda op
  as `tl.kernel = @name`: the host lowering launches that symbol;
* builds one `tl.kernel` per `coda.fold`, inserted before its function, with every decision
  made here: the order partials are folded in (lanes of BT tiles, then a fixed tree), the
  two-stage sum of rank-0 results (per-block totals in float64, a ticket, the last program
  adds them in block order), the conversions of loaded and stored elements (bf16 stores
  round to nearest even through `_coda_round_bf16`), and the scalar body as arith / math
  ops on [BLOCK] tensors (`ScalarLowering`);
* builds one `tl.kernel` per `coda.elementwise` (`tl_epilogue.lower_elementwise`: the
  kernel head, the region's primitives in `epilogue_schedule` order with their stores, the
  tile loop of `whole rows / cols` kernels);
* builds one `tl.kernel` per `coda.gemm` (`tl_gemm.lower_gemm`: the fixed mainloop as one
  templated `tl.mainloop` op whose region is the epilogue, built by the same builder), and for
  a gemm with a `#coda.mainloop` record also its Gluon kernel (`tl_gemm.lower_gluon_gemm`);
* builds the group kernel of each `coda.launch_group`: program id ranges [END_{i-1}, END_i)
  call member i with its program index and its own (suffixed) parameters.

Options: `epilogue_subtile`, `half_tile_io` (`ConvertCodaToTLPass`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, math, scf
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr, SymbolRefAttr, TensorType, f32, f64, i32, i64
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from coda_ir.dialects import coda
from coda_ir.dialects import triton_lang as tl
from coda_ir.diagnostics import CompilerError
from coda_ir.errors import ArgumentError
from coda_ir.dialects.tl_names import KERNEL_NAME_ATTR, KERNEL_SCOPE, KernelNames, gluon_entry_name, kernel_symbol
from coda_ir.lowering.tl_build import (
    Builder,
    ScalarLowering,
    is_float,
    param_names,
)
from coda_ir.transforms.legalize import LEGALIZED
from coda_ir.lowering.tl_epilogue import lower_elementwise
from coda_ir.lowering.tl_gemm import SUBTILE_MIN_BN_DEFAULT, check_subtile, lower_gemm, lower_gluon_gemm

def tl_kernels(module: ModuleOp) -> dict[str, tl.KernelOp]:
    return {op.sym_name.data: op for op in module.ops if isinstance(op, tl.KernelOp)}


# ============================================================================ run-time rows


def row_parameters(kernel: Operation, rows: coda.RowsAttr) -> list[str]:
    """The integer parameters of a kernel's Triton function that hold run-time row extents
    (`#coda.rows`): a gemm's M / N / K, an elementwise kernel's M / N, a fold's length, the tile
    counts of column partials (cdiv(M, BM)) and its program count."""
    def rowy(extent: int) -> bool:
        return rows.multiple(extent) is not None

    if isinstance(kernel, coda.GemmOp):
        return [d for d, e in zip("MNK", kernel.problem_shape()) if rowy(e)]
    if isinstance(kernel, coda.ElementwiseOp):
        return [d for d, e in zip("MN", kernel.iteration_shape()) if rowy(e)]
    assert isinstance(kernel, coda.FoldOp)
    names = ["L", "NPROG"] if rowy(kernel.length()) else []
    for i, p in enumerate(kernel.partials):
        ty = p.type
        if isinstance(ty, coda.PartialsType) and ty.axis == coda.Axis.COLS:
            names.append(f"T{i}")  # one partial per row tile of the run-time rows
    return names


def _unspecialize_rows(fn: func.FuncOp, built: dict[str, tl.KernelOp], rows: coda.RowsAttr) -> None:
    """Record on each Triton kernel of `fn` which of its integer parameters Triton must not
    specialize (divisibility by 16, equality to 1): those holding run-time row extents, so that a
    new token count reuses the kernels compiled for the bucket. A launch group's program-count
    ends depend on them too."""

    def mark(kernel: tl.KernelOp, names: Sequence[str]) -> None:
        present = [n for n in kernel.param_names() if n in set(names)]
        if present:
            kernel.attributes[tl.DO_NOT_SPECIALIZE] = ArrayAttr([StringAttr(n) for n in present])

    for k in coda.kernels(fn):
        name = kernel_symbol(k)
        names = row_parameters(k, rows)
        if name in built:
            mark(built[name], names)
        if isinstance(k, coda.GemmOp) and gluon_entry_name(name) in built:
            mark(built[gluon_entry_name(name)], names)
    for g in fn.walk():
        if isinstance(g, coda.LaunchGroupOp) and kernel_symbol(g) in built:
            group = built[kernel_symbol(g)]
            names = [f"END{i}" for i in range(len(g.members()))]
            for i, m in enumerate(g.members()):
                names += [f"{n}_{i}" for n in row_parameters(m, rows)]
            mark(group, names)


# ============================================================================ coda.fold


def _elt(value: SSAValue) -> Attribute:
    ty = value.type
    assert isinstance(ty, TensorType)
    return ty.get_element_type()


def lower_fold(op: coda.FoldOp, name: str, member: bool) -> tl.KernelOp:
    """A row-parallel kernel: each program folds the partials of BLOCK rows, reading [BLOCK, BT]
    tiles along the (contiguous) tile axis and combining lanes by a fixed tree, so the result
    never depends on the launch. Rank-0 results (sums over rows) are reduced in two fixed
    stages: every program stores its per-block total (float64), takes a ticket (an integer
    atomic, the only atomic), and the program with the last ticket adds the per-block totals in
    block order and runs the finalize body."""
    names = KernelNames(KERNEL_SCOPE)
    p_names = param_names(names, op.partials, "part")
    in_names = param_names(names, op.inputs, "in")
    out_names = param_names(names, op.outputs, "out")
    t_names = [names(f"T{i}") for i in range(len(op.partials))]
    sums = [i for i, r in enumerate(op.outputs) if not r.type.get_shape()]  # type: ignore[union-attr]
    params: list[tuple[str, Attribute]] = [("pid", i32)] if member else []
    params += [(p, tl.PointerType(f32)) for p in p_names]
    params += [(p, tl.PointerType(_elt(v))) for p, v in zip(in_names, op.inputs)]
    params += [(p, tl.PointerType(_elt(v))) for p, v in zip(out_names, op.outputs)]
    params += [("L", i32), *[(t, i32) for t in t_names]]
    if sums:
        params += [("WORK", tl.PointerType(f64)), ("TICKET", tl.PointerType(i32)), ("NPROG", i32)]
    params += [("BLOCK", i32), ("BT", i32), ("PB", i32)]
    kernel = tl.KernelOp(name, params, 3)
    arg = {n: a for (n, _), a in zip(params, kernel.body.block.args)}
    b = Builder(kernel.body.block)
    pid = arg["pid"] if member else b.value(tl.ProgramIdOp(0), "pid")
    BLOCK, BT = arg["BLOCK"], arg["BT"]
    rows = b.ibin(arith.AddiOp, b.ibin(arith.MuliOp, pid, BLOCK), b.value(tl.ArangeOp(BLOCK)), "rows")
    mask = b.cmpi("slt", rows, arg["L"], "mask")
    rows64 = b.value(tl.CastOp(rows, i64), "rows64")
    lanes = b.value(tl.ArangeOp(BT), "lanes")
    zero_i = b.const(0, i32)
    neg_inf = b.const(float("-inf"), f32)
    zero_f = b.const(0.0, f32)
    mask_rows = b.value(tl.ExpandDimsOp(mask, 1), "mask_rows") if op.partials else mask
    args: list[SSAValue] = []
    for value, p, t in zip(op.partials, p_names, t_names):
        pty = value.type
        assert isinstance(pty, coda.PartialsType)
        combine = pty.combine_kind
        T = arg[t]
        b.add(tl.CommentOp(f"fold partials ({combine.value}) over tiles: lanes of BT tiles, then a fixed tree"))
        # the row's tiles are contiguous: row r's partials start at r * T (64-bit: L * T may
        # exceed 2^31); a scalar i32 parameter widens implicitly (arith.extsi)
        T64 = b.value(arith.ExtSIOp(T, i64))
        base = b.value(tl.AddPtrOp(arg[p], b.ibin(arith.MuliOp, b.value(tl.ExpandDimsOp(rows64, 1)), T64)), f"{p[:-4]}_rows")

        def fold_loop(init: SSAValue, other: SSAValue, step, hint: str) -> SSAValue:
            """for t0 in range(0, T, BT): acc = step(acc, [BLOCK, BT] chunk of tiles t0 + lanes)."""
            body = Block(arg_types=[i32, init.type])
            body.args[0].name_hint = "t0"
            body.args[1].name_hint = hint
            inner = Builder(body)
            cols = inner.value(tl.ExpandDimsOp(inner.ibin(arith.AddiOp, body.args[0], lanes), 0), "tiles")
            m = inner.ibin(arith.AndIOp, mask_rows, inner.cmpi("slt", cols, T))  # noqa: B023
            chunk = inner.value(tl.LoadOp(inner.value(tl.AddPtrOp(base, cols)), m, other), "chunk")  # noqa: B023
            inner.add(scf.YieldOp(step(inner, body.args[1], chunk)))
            loop = b.add(scf.ForOp(zero_i, T, BT, [init], [body]))  # noqa: B023
            loop.results[0].name_hint = hint
            return loop.results[0]

        if combine == coda.Combine.SUM:
            acc = fold_loop(b.value(tl.FullOp([BLOCK, BT], zero_f, f32)), zero_f,
                            lambda k, a, x: k.fbin(arith.AddfOp, a, x), "acc")
            folded = b.value(tl.ReduceOp("sum", acc, 1), "folded")
        else:
            acc = fold_loop(b.value(tl.FullOp([BLOCK, BT], neg_inf, f32)), neg_inf,
                            lambda k, a, x: k.fbin(arith.MaximumfOp, a, x), "acc")
            folded = b.value(tl.ReduceOp("max", acc, 1), "folded")
            if combine == coda.Combine.LSE:
                # log-sum-exp relative to the row maximum (0 where a row has no finite partial)
                ref = b.where(b.cmpf("oeq", folded, neg_inf), zero_f, folded, "fref")
                ref2 = b.value(tl.ExpandDimsOp(ref, 1), "fref_rows")
                fsum = fold_loop(b.value(tl.FullOp([BLOCK, BT], zero_f, f32)), neg_inf,
                                 lambda k, a, x: k.fbin(arith.AddfOp, a, k.unary(math.ExpOp, k.fbin(arith.SubfOp, x, ref2))),  # noqa: B023
                                 "fsum")
                folded = b.fbin(arith.AddfOp, ref, b.unary(math.LogOp, b.value(tl.ReduceOp("sum", fsum, 1))), "folded")
        args.append(folded)
    for value, p in zip(op.inputs, in_names):
        ty = value.type
        assert isinstance(ty, TensorType)
        elt = ty.get_element_type()
        if ty.get_shape():
            v = b.value(tl.LoadOp(b.value(tl.AddPtrOp(arg[p], rows)), mask, b.const(0 if not is_float(elt) else 0.0, elt)), "v")
        else:
            v = b.value(tl.LoadOp(arg[p]), "v")
        args.append(b.compute_cast(v))
    scalars = ScalarLowering(b, set())
    yielded = scalars.lower_block(op.body.blocks[0], args)
    per_block: list[SSAValue] = []
    for i, (result, y, ptr) in enumerate(zip(op.outputs, yielded, out_names)):
        elt = _elt(result)
        if y in scalars.consts:
            y = b.value(tl.FullOp([BLOCK], y, f32 if is_float(elt) else i32))
        if i in sums:
            zero = b.const(0.0 if is_float(tl.element_of(y.type)) else 0, tl.element_of(y.type))
            total = b.value(tl.CastOp(b.where(mask, y, zero), f64))
            per_block.append(b.value(tl.ReduceOp("sum", total, 0), f"block{i}"))
        else:
            b.add(tl.StoreOp(b.value(tl.AddPtrOp(arg[ptr], rows)), b.store_cast(y, elt), mask))
    if not sums:
        return kernel
    S = len(sums)
    b.add(tl.CommentOp("rank-0 results: per-block totals, then the last program adds them in block order"))
    for j, total in enumerate(per_block):
        slot = b.ibin(arith.AddiOp, b.ibin(arith.MuliOp, pid, b.const(S, i32)), b.const(j, i32))
        b.add(tl.StoreOp(b.value(tl.AddPtrOp(arg["WORK"], slot)), total))
    b.add(tl.DebugBarrierOp())
    ticket = b.value(tl.AtomicAddOp(arg["TICKET"], b.const(1, i32)), "ticket")
    last = b.cmpi("eq", ticket, b.ibin(arith.SubiOp, arg["NPROG"], b.const(1, i32)))
    then = Block()
    inner = Builder(then)
    blocks = inner.value(tl.ArangeOp(arg["PB"]), "blocks")
    totals: list[SSAValue] = []
    for j, i in enumerate(sums):
        slot = inner.ibin(arith.AddiOp, inner.ibin(arith.MuliOp, blocks, inner.const(S, i32)), inner.const(j, i32))
        loaded = inner.value(tl.LoadOp(inner.value(tl.AddPtrOp(arg["WORK"], slot)), inner.cmpi("slt", blocks, arg["NPROG"]),
                                       inner.const(0.0, f64), volatile=True), "v")
        acc_ty = f32 if is_float(_elt(op.outputs[i])) else i32
        totals.append(inner.value(tl.CastOp(inner.value(tl.ReduceOp("sum", loaded, 0)), acc_ty), f"total{i}"))
    if op.finalize.blocks:
        totals = ScalarLowering(inner, set()).lower_block(op.finalize.blocks[0], totals)
    for i, t in zip(sums, totals):
        inner.add(tl.StoreOp(arg[out_names[i]], inner.store_cast(t, _elt(op.outputs[i]))))
    inner.add(scf.YieldOp())
    b.add(scf.IfOp(last, [], [then]))
    return kernel


def kernel_base_name(fn: func.FuncOp, i: int, kernel: Operation) -> str:
    """The name of the `i`-th kernel of `fn` (`coda.kernels` order): `_{function}_k{i}_{kind}` (made
    unique in the module by `KernelNames`; what a profiler shows, and what reports predict it as)."""
    return f"_{fn.sym_name.data}_k{i}_{kernel.name.split('.')[1]}"


def group_base_name(fn: func.FuncOp, j: int) -> str:
    """The name of the `j`-th `coda.launch_group` of `fn`: one launch running its members."""
    return f"_{fn.sym_name.data}_g{j}_launch_group"


# ============================================================================ coda.launch_group


def lower_launch_group(op: coda.LaunchGroupOp, name: str, members: Sequence[tuple[str, list[tuple[str, Attribute]], int]]) -> tl.KernelOp:
    """One kernel for the group: the program ids [0, END0) run member 0's body (a jit function
    taking its program index first), [END0, END1) member 1's, and so on; each member keeps its
    own parameters and constexprs, suffixed with its index. `members`: (kernel name, its
    parameters without the leading pid, how many are constexprs)."""
    runtime: list[tuple[str, Attribute]] = []
    constexprs: list[tuple[str, Attribute]] = []
    calls: list[list[str]] = []
    for i, (_, params, n_const) in enumerate(members):
        mine = [(f"{p}_{i}", t) for p, t in params]
        runtime += mine[: len(mine) - n_const]
        constexprs += mine[len(mine) - n_const :]
        calls.append([p for p, _ in mine])
    ends = [(f"END{i}", i32) for i in range(len(members))]
    all_params = [*runtime, *ends, *constexprs]
    kernel = tl.KernelOp(name, all_params, len(constexprs))
    arg = {n: a for (n, _), a in zip(all_params, kernel.body.block.args)}
    b = Builder(kernel.body.block)
    pid = b.value(tl.ProgramIdOp(0), "pid")

    def branch(i: int, into: Builder) -> None:
        """if pid < END_i: member i (else: the members after it)."""
        then, rest = Block(), Block()
        inner = Builder(then)
        start = pid if i == 0 else inner.ibin(arith.SubiOp, pid, arg[f"END{i - 1}"])
        inner.add(tl.CallOp(members[i][0], [start, *[arg[p] for p in calls[i]]]))
        inner.add(scf.YieldOp())
        cond = into.cmpi("slt", pid, arg[f"END{i}"])
        if i + 1 < len(members):
            branch(i + 1, Builder(rest))
        rest.add_op(scf.YieldOp())
        into.add(scf.IfOp(cond, [], [then], [rest] if i + 1 < len(members) else None))

    branch(0, b)
    return kernel


# ============================================================================ the pass


@dataclass(frozen=True)
class ConvertCodaToTLPass(ModulePass):
    """Name every coda kernel's Triton kernel and build its `tl.kernel` (`coda.gemm`,
    `coda.elementwise`, `coda.fold`, `coda.launch_group`).

    Options (what production uses by default; the others exist to A/B code shapes on a GPU, the
    values computed are the same): `epilogue_subtile`, heavy gemm epilogues per column half of
    tiles at least this wide (a power of two >= 2), or 0: never; `half_tile_io`, N-wide loads and
    stores of interleaved gemms as two contiguous half tiles (true) or one scatter (false)."""

    name = "convert-coda-to-tl"

    epilogue_subtile: int = SUBTILE_MIN_BN_DEFAULT
    half_tile_io: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        try:
            check_subtile(self.epilogue_subtile)
        except ValueError as error:
            raise ArgumentError(f"convert-coda-to-tl: {error}") from None
        functions = [f for f in op.walk() if isinstance(f, func.FuncOp) and f.body.blocks]
        if LEGALIZED not in op.attributes:
            unproved = next((k for f in functions for k in coda.kernels(f)
                             if isinstance(k, (coda.ElementwiseOp, coda.GemmOp))), None)
            if unproved is not None:
                # the epilogue lowering obeys the tile constraints and pair / segment forms
                # coda-legalize records, and re-derives none of them
                raise CompilerError(unproved, "convert-coda-to-tl needs the records of coda-legalize: run it first")
        kernel_names = KernelNames(f.sym_name.data for f in functions)
        for fn in functions:
            built: list[tl.KernelOp] = []
            for i, k in enumerate(coda.kernels(fn)):
                name = kernel_names(kernel_base_name(fn, i, k))
                k.attributes[KERNEL_NAME_ATTR] = SymbolRefAttr(name)
                member = isinstance(k.parent_op(), coda.LaunchGroupOp)
                if isinstance(k, coda.GemmOp):
                    built.append(lower_gemm(k, name, self.epilogue_subtile, self.half_tile_io))
                    if coda.recorded_mainloop(k) is not None:  # its Gluon kernel beside (coda-plan-mainloop)
                        built.append(lower_gluon_gemm(k, name))
                elif isinstance(k, coda.FoldOp):
                    built.append(lower_fold(k, name, member))
                elif isinstance(k, coda.ElementwiseOp):
                    built.append(lower_elementwise(k, name, member))
            kernels = {k.sym_name.data: k for k in built}
            groups = [g for g in fn.walk() if isinstance(g, coda.LaunchGroupOp)]
            for j, g in enumerate(groups):
                name = kernel_names(group_base_name(fn, j))
                g.attributes[KERNEL_NAME_ATTR] = SymbolRefAttr(name)
                members = []
                for m in g.members():
                    mname = kernel_symbol(m)
                    if isinstance(m, (coda.FoldOp, coda.ElementwiseOp)):
                        kernel = kernels[mname]
                        params = [(n, a.type) for n, a in zip(kernel.param_names(), kernel.body.block.args)]
                        members.append((mname, params[1:], kernel.constexprs.data))
                    else:
                        raise CompilerError(m, f"a {m.name} cannot be a member of a coda.launch_group")
                built.append(lower_launch_group(g, name, members))
            rows = coda.symbolic_rows(op)
            if rows is not None:
                _unspecialize_rows(fn, {k.sym_name.data: k for k in built}, rows)
            anchor = fn
            while anchor.parent_op() is not op:
                anchor = anchor.parent_op()  # type: ignore[assignment]
            for kernel in built:
                Rewriter.insert_op(kernel, InsertPoint.before(anchor))
