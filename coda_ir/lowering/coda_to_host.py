"""`convert-coda-to-host`: each `func.func` of coda kernels -> its `host.func` (the host wrapper).

The host half of the Triton lowering (issue 13); `lowering/host_printer.py` prints the result,
one op per statement, and decides nothing. Runs after `convert-coda-to-tl`, whose kernel names
(`tl.kernel = @name` on every coda kernel and launch group) the launches refer to. Every
decision the host code embodies is made here and recorded in the ops:

* the signature: every argument a tensor (its shape and dtype are what the function checks);
* which arguments are made contiguous: those a kernel reads with row-major strides (the
  inputs of gemm epilogues, of elementwise kernels and of folds; a gemm's A and B are read
  with their strides);
* allocations: every output is a fresh `host.empty` of its type, partials `[L, tiles]` in
  float32 with `tiles` the tile count of the configuration the launch picks along the
  partials' axis (`host.tiles`: columns for row partials, rows for column partials); an
  output that `coda-plan-in-place` recorded (`coda.writes_over`) to write over a donated argument
  of its type is that argument's buffer instead (anything else recorded is a compiler bug);
* launches: kernel symbol, problem shape, transposes, interleave, the kernel's recorded
  `bn_multiple_of` (coda-legalize's `#coda.tile_constraints`), a gemm's `#coda.mainloop`
  (coda-plan-mainloop: its Gluon kernel where the machine runs it) or `#coda.vendor_gemm` (the
  library's GEMM on a GPU), a fixed `#coda.config` checked
  against it (a located error), `whole` rows / cols, the inputs-then-outputs argument order;
  launch groups as one spec per member and one launch, outputs read back per member;
* library steps: which `_lib` function, and its literal arguments (head counts, causality,
  the gradient's row count and dtype, the axis and bounds of a concat / slice);
* buffer lifetimes: after each op, `host.drop` of the buffers no later op reads
  (`liveness.dead_after`), with the launch's argument tuple, or the group's specs;
* the calling convention: a function with arguments the caller hands over (`coda.owned`)
  records them on the `host.func` (`owned`: it takes its arguments in a list it empties), and
  drops each after its last reader like its own buffers; without, arguments are positional
  and never dropped.

* run-time rows: in a module with `#coda.rows` (`coda.RowsAttr`), every extent that is a
  multiple `c * count` of its representative row count is the call's `c * M`: such dimensions
  are dynamic in the host types (the signature marks them, `arg_rows`), the function reads M
  once from its first argument that has one (`host.row_count`: `_M = x.shape[0]`), and every
  allocation, launch size (M, N, K), fold length and tile count takes `_M` (times c) instead of
  the constant; an attention whose `seq_len` is `count` takes the call's `seq_len` argument.
  Tile plans and autotuning stay per launch (the runtime buckets its tuning by M).

The `func.func` stays (its coda.gemm / coda.elementwise kernels are still emitted as text by
`lowering/triton.py`); the `host.func` is inserted right after it.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, FloatAttr, IntAttr, IntegerAttr, ModuleOp, TensorType, f32, f64, i1
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import VerifyException

from coda_ir.diagnostics import CompilerError, InternalCompilerBug
from coda_ir.dialects import coda, nn
from coda_ir.dialects import triton_host as host
from coda_ir.dialects.coda import WRITES_OVER, donated_arguments, owned_arguments, writes_over
from coda_ir.analysis.liveness import dead_after
from coda_ir.dialects.tl_names import kernel_symbol


def host_type(ty: Attribute, rows: coda.RowsAttr | None = None) -> Attribute:
    """The torch tensor holding a coda value: itself, or for partials a float32 [L, tiles]
    buffer whose tile count the launch's configuration fixes. With run-time `rows`, every
    extent that is a multiple of the row count is dynamic (`?`)."""
    if isinstance(ty, coda.PartialsType):
        ty = TensorType(f32, [ty.length.data, DYNAMIC_INDEX])
    if rows is not None and isinstance(ty, TensorType):
        shape = [DYNAMIC_INDEX if d != DYNAMIC_INDEX and rows.multiple(d) else d for d in ty.get_shape()]
        if shape != list(ty.get_shape()):
            return TensorType(ty.get_element_type(), shape)
    return ty


def row_multiples(ty: Attribute, rows: coda.RowsAttr | None) -> list[int]:
    """Per dimension of a (tensor or partials) type: c where it is c times the row count, else 0."""
    if isinstance(ty, coda.PartialsType):
        shape = [ty.length.data, DYNAMIC_INDEX]
    elif isinstance(ty, TensorType):
        shape = list(ty.get_shape())
    else:
        return []
    if rows is None:
        return [0] * len(shape)
    return [(rows.multiple(d) or 0) if d != DYNAMIC_INDEX else 0 for d in shape]


def _hint(value: SSAValue, default: str) -> str:
    """The Python name a value asks for: its SSA name when that is an identifier."""
    return value.name_hint if value.name_hint and re.fullmatch(r"[A-Za-z_]\w*", value.name_hint) else default


def takes_seq_len(fn: func.FuncOp, rows: coda.RowsAttr | None) -> bool:
    """Whether an attention of `fn` takes the call's sequence length: with run-time rows, one
    whose `seq_len` is the representative row count (all rows one sequence, as planned)."""
    if rows is None:
        return False
    return any(isinstance(op, (coda.AttentionOp, coda.AttentionGradOp))
               and op.properties["seq_len"].value.data == rows.count.data for op in fn.walk())


class _FunctionLowering:
    def __init__(self, fn: func.FuncOp, rows: coda.RowsAttr | None = None):
        self.fn = fn
        self.rows = rows
        self.row_count: SSAValue | None = None  # `_M`, read from the arguments (run-time rows)
        self.vals: dict[SSAValue, SSAValue] = {}
        self.block: Block
        self.device: SSAValue
        self.launched: SSAValue | None = None  # the last launch's argument tuple (`_e`)
        self.group_specs: list[SSAValue] = []

    def add(self, op: Operation) -> Operation:
        self.block.add_op(op)
        return op

    def get(self, op: Operation, value: SSAValue) -> SSAValue:
        if value not in self.vals:
            raise CompilerError(op, "uses a value that the host function does not hold")
        return self.vals[value]

    def bind(self, coda_values, host_values, default) -> None:
        for i, (c, h) in enumerate(zip(coda_values, host_values)):
            h.name_hint = _hint(c, default(i))
            self.vals[c] = h

    # ------------------------------------------------------------------ function
    def lower(self) -> host.FuncOp:
        fn = self.fn
        name = fn.sym_name.data
        if not name.isidentifier() or keyword.iskeyword(name):
            raise CompilerError(fn, f"function name '{name}' is not a Python identifier")
        entry = fn.body.blocks[0]
        for i, arg in enumerate(entry.args):
            if not isinstance(arg.type, TensorType):
                raise CompilerError(fn, f"argument #{i} must be a tensor to be passed from torch, got {arg.type}")
        ret = entry.last_op
        rows = self.rows
        outputs = [host_type(v.type, rows) for v in ret.operands] if isinstance(ret, func.ReturnOp) else []
        owned = owned_arguments(fn)
        arg_rows = [row_multiples(a.type, rows) for a in entry.args] if rows is not None else None
        for i, dims in enumerate(arg_rows or []):
            if dims.count(0) == 0 and len(dims) > 1:
                raise CompilerError(fn, f"argument #{i} ({entry.args[i].type}) has only row extents of the run-time row "
                                        f"count {rows.count.data} (#coda.rows): which is which is ambiguous")
        hfn = host.FuncOp(name, [host_type(a.type, rows) for a in entry.args], outputs, coda.launch_count(fn),
                          sorted(owned) if owned else None, arg_rows, seq_len=self.takes_seq_len())
        self.block = hfn.body.block
        params = list(self.block.args)
        self.bind(entry.args, params, lambda i: f"arg{i}")
        self.add(host.CheckArgumentsOp(params))
        if arg_rows is not None:
            # the row count, from the first argument with a row extent (one of M rows if any)
            found = [(c != 1, i, d, c) for i, dims in enumerate(arg_rows) for d, c in enumerate(dims) if c]
            if found:
                _, i, d, c = min(found)
                self.row_count = self.add(host.RowCountOp(params[i], d, c)).results[0]
        self.device = self.add(host.DeviceOfOp(params)).results[0]
        # tensors read by epilogues/folds are read with contiguous row-major strides
        dense: set[SSAValue] = set()
        for k in coda.kernels(fn):
            if isinstance(k, coda.GemmOp):
                dense.update(k.inputs)
            elif isinstance(k, (coda.ElementwiseOp, coda.FoldOp)):
                dense.update(k.operands)
        for arg in entry.args:
            if arg in dense:
                c = self.add(host.ContiguousOp(self.vals[arg])).results[0]
                c.name_hint = self.vals[arg].name_hint
                self.vals[arg] = c
        dead = dead_after(fn)
        unread = [self.vals[a] for a in dead[fn]]  # owned arguments no kernel reads
        if unread:
            self.add(host.DropOp(unread))
        for op in entry.ops:
            if isinstance(op, coda.LaunchGroupOp):
                self.launch_group(op)
            elif isinstance(op, coda.GemmOp):
                self.launch_gemm(op)
            elif isinstance(op, coda.ElementwiseOp):
                self.launch_elementwise(op)
            elif isinstance(op, coda.FoldOp):
                self.launch_fold(op)
            elif isinstance(op, coda.LibraryStepOp):
                self.library_step(op)
            elif isinstance(op, func.ReturnOp):
                self.add(host.ReturnOp([self.get(op, v) for v in op.arguments]))
            else:
                raise CompilerError(
                    op,
                    "has no Triton lowering at function level (only coda.gemm, coda.elementwise, coda.fold, "
                    "coda.launch_group and func.return; run the nn-to-coda pipeline first for nn ops)",
                )
            self.drop(op, dead.get(op, []))
        return hfn

    def drop(self, op: Operation, dead: list[SSAValue]) -> None:
        """Drop the host's references to the buffers no later op reads, so the caching allocator
        reuses them for the next kernels' outputs. A launch's argument tuple and a group's launch
        descriptions go right after the launch, always: they hold every output buffer, which
        would otherwise stay live past its last reader until the next launch reassigns the name
        (measured: dy [M, F] of the separate SwiGLU-backward pass held through the next GEMM,
        +224 MiB at the LLaMA-8B shape)."""
        values = [self.vals[v] for v in dead if v in self.vals]
        if isinstance(op, coda.LaunchGroupOp):
            values = self.group_specs + values
        elif isinstance(op, (coda.GemmOp, coda.ElementwiseOp, coda.FoldOp)) and (
            values or not isinstance(op.next_op, func.ReturnOp)  # (nothing allocates after the last)
        ):
            assert self.launched is not None
            values = [self.launched, *values]
        if values:
            self.add(host.DropOp(values))

    # ------------------------------------------------------------------ run-time rows
    def takes_seq_len(self) -> bool:
        return takes_seq_len(self.fn, self.rows)

    def size(self, op: Operation, extent: int) -> IntAttr | host.RowsAttr | int:
        """A launch's extent: the constant, or `#host.rows<c>` for c times the run-time row count."""
        per = self.rows.multiple(extent) if self.rows is not None else None
        if not per:
            return extent
        if self.row_count is None:
            raise CompilerError(op, f"has an extent {extent} of the run-time row count (#coda.rows), but no argument "
                                    "of the function has one to read it from")
        return host.RowsAttr(per)

    def rows_extent(self, op: Operation, per: int, into: Block) -> SSAValue:
        """`_M * per` as an index value (a dynamic extent of an allocation)."""
        if self.row_count is None:
            raise CompilerError(op, "allocates a buffer of run-time rows (#coda.rows), but no argument of the function "
                                    "has a row extent to read the row count from")
        if per == 1:
            return self.row_count
        scaled = host.RowsOp(self.row_count, per)
        into.add_op(scaled)
        return scaled.result

    def text(self, extent: int) -> str:
        """An extent in a comment: `M` / `32M` for run-time rows."""
        per = self.rows.multiple(extent) if self.rows is not None else None
        return extent if not per else ("M" if per == 1 else f"{per}M")

    # ------------------------------------------------------------------ buffers
    def alloc(self, result: SSAValue, config: SSAValue | None, m: int, n: int, into: Block) -> SSAValue:
        ty = result.type
        extents: list[SSAValue] = []
        for per in row_multiples(ty, self.rows)[:1] if isinstance(ty, coda.PartialsType) else []:
            if per:  # a partials buffer [L, tiles] over the run-time rows
                extents.append(self.rows_extent(result.owner, per, into))
        if isinstance(ty, coda.PartialsType):
            assert config is not None
            # one partial per tile along the reduced axis: row partials per column tile
            rows = ty.axis == coda.Axis.ROWS
            tiles = host.TilesOp(config, self.size(result.owner, n if rows else m), "bn" if rows else "bm")
            into.add_op(tiles)
            extents.append(tiles.result)
        else:
            extents = [self.rows_extent(result.owner, per, into) for per in row_multiples(ty, self.rows) if per]
        empty = host.EmptyOp(self.device, host_type(ty, self.rows), extents)
        into.add_op(empty)
        return empty.result

    def args_region(self, op: coda.GemmOp | coda.ElementwiseOp, m: int, n: int) -> Region:
        """The launch's `lambda _cfg: (inputs..., outputs...)`: the outputs freshly allocated
        (partials sized by `_cfg`), or the donated input an output was recorded to write over."""
        region = host.args_region()
        block = region.block
        config = block.args[0]
        ins = [self.get(op, v) for v in op.inputs]
        outs = [self.alloc(r, config, m, n, block) for r in op.outputs]
        over = writes_over(op)
        if over is not None:
            for j, k in enumerate(over):
                if k < 0:
                    continue
                value = op.inputs[k]
                if not (isinstance(op, coda.ElementwiseOp) and isinstance(value, BlockArgument)
                        and value.index in donated_arguments(self.fn) and value.type == op.outputs[j].type):
                    raise InternalCompilerBug(op, f"records {WRITES_OVER} output #{j} over input #{k}, which is no donated argument of its type")
                dead = outs[j].owner
                assert isinstance(dead, Operation)
                dead.detach()
                dead.erase()
                outs[j] = ins[k]
        block.add_op(host.YieldOp([*ins, *outs]))
        return region

    @staticmethod
    def checked_config(op: coda.GemmOp | coda.ElementwiseOp) -> coda.TileConfigAttr | None:
        config = op.config
        if config is None:
            return None
        multiple = coda.recorded_bn_multiple_of(op)
        if config.bn.data % multiple:
            raise CompilerError(
                op,
                f"tile config bn = {config.bn.data} must be a multiple of {multiple} for this epilogue "
                "(pair groups and segments must not straddle column tiles)",
            )
        return config

    def unpack(self, op: Operation, launched: SSAValue, start: int) -> None:
        if op.results:
            self.bind(op.results, self.add(host.UnpackOp(launched, start)).results, lambda i: f"r{i}")

    # ------------------------------------------------------------------ launches
    def launch_gemm(self, op: coda.GemmOp) -> None:
        name = kernel_symbol(op)
        m, n, k = op.problem_shape()
        args = self.args_region(op, m, n)
        ty = host.TupleType([v.type for v in args.block.last_op.operands])  # type: ignore[union-attr]
        self.add(host.CommentOp(f"{name}: coda.gemm {self.text(m)}x{self.text(n)}x{self.text(k)}"))
        launch = host.LaunchGemmOp(
            name, self.get(op, op.a), self.get(op, op.b), tuple(self.size(op, e) for e in (m, n, k)),
            transpose_a=op.transpose_a is not None, transpose_b=op.transpose_b is not None,
            interleave=op.interleave.value.data if op.interleave is not None else 0,
            bn_multiple_of=coda.recorded_bn_multiple_of(op), n_inputs=len(op.inputs),
            config=self.checked_config(op), epilogue_half_tiles=epilogue_half_tiles(op), result_type=ty, args=args,
            mainloop=coda.recorded_mainloop(op), vendor=coda.recorded_vendor_gemm(op),
        )
        self.add(launch)
        self.launched = launch.result
        self.unpack(op, launch.result, len(op.inputs))

    def elementwise(self, op: coda.ElementwiseOp) -> tuple[dict, Region, str]:
        """What a standalone elementwise launch and a group member's spec share."""
        m, n = op.iteration_shape()
        args = self.args_region(op, m, n)
        whole = op.whole_axis.value if op.whole_axis is not None else None
        kw = dict(bn_multiple_of=coda.recorded_bn_multiple_of(op), n_inputs=len(op.inputs), whole=whole,
                  config=self.checked_config(op), args=args,
                  width_multiple=1 if whole is not None else op.tile_width_multiple())
        comment = f"coda.elementwise {self.text(m)}x{self.text(n)}{' whole ' + whole if whole else ''}"
        return kw, args, comment

    def iteration_sizes(self, op: coda.ElementwiseOp) -> tuple:
        return tuple(self.size(op, e) for e in op.iteration_shape())

    def launch_elementwise(self, op: coda.ElementwiseOp) -> None:
        name = kernel_symbol(op)
        kw, args, comment = self.elementwise(op)
        ty = host.TupleType([v.type for v in args.block.last_op.operands])  # type: ignore[union-attr]
        self.add(host.CommentOp(f"{name}: {comment}"))
        launch = self.add(host.LaunchElementwiseOp(name, self.iteration_sizes(op), result_type=ty, **kw))
        self.launched = launch.results[0]
        self.unpack(op, launch.results[0], len(op.inputs))

    def fold_operands(self, op: coda.FoldOp) -> tuple[list[SSAValue], list[SSAValue], list[SSAValue], dict]:
        parts = [self.get(op, v) for v in op.partials]
        ins = [self.get(op, v) for v in op.inputs]
        outs = [self.alloc(r, None, 0, 0, self.block) for r in op.outputs]
        sums = any(not r.type.get_shape() for r in op.outputs)  # type: ignore[union-attr]
        return parts, ins, outs, {"length": self.size(op, op.length()), "sums": sums}

    def launch_fold(self, op: coda.FoldOp) -> None:
        name = kernel_symbol(op)
        self.add(host.CommentOp(f"{name}: coda.fold over {self.text(op.length())} rows"))
        parts, ins, outs, kw = self.fold_operands(op)
        launch = self.add(host.LaunchFoldOp(name, parts, ins, outs, **kw))
        self.launched = launch.results[0]
        self.unpack(op, launch.results[0], 0)

    def launch_group(self, group: coda.LaunchGroupOp) -> None:
        members = group.members()
        self.add(host.CommentOp(f"{kernel_symbol(group)}: coda.launch_group, one launch of {len(members)} kernels"))
        specs: list[SSAValue] = []
        for op in members:
            if isinstance(op, coda.ElementwiseOp):
                kw, args, comment = self.elementwise(op)
                outs = [v.type for v in list(args.block.last_op.operands)[len(op.inputs):]]  # type: ignore[union-attr]
                self.add(host.CommentOp(f"  {kernel_symbol(op)}: {comment}"))
                spec = self.add(host.ElementwiseSpecOp(self.iteration_sizes(op), result_type=host.LaunchSpecType(outs), **kw))
            elif isinstance(op, coda.FoldOp):
                self.add(host.CommentOp(f"  {kernel_symbol(op)}: coda.fold over {self.text(op.length())} rows"))
                parts, ins, outs_v, kw2 = self.fold_operands(op)
                spec = self.add(host.FoldSpecOp(parts, ins, outs_v, **kw2))
            else:
                raise CompilerError(op, f"a {op.name} cannot be a member of a coda.launch_group")
            spec.results[0].name_hint = "_g"
            specs.append(spec.results[0])
        self.add(host.LaunchGroupOp(kernel_symbol(group), specs))
        self.group_specs = specs
        k = 0
        for op, spec in zip(members, specs):
            mine = list(group.outputs[k : k + len(op.results)])
            if mine:
                self.bind(mine, self.add(host.ResultsOp(spec)).results, lambda i, k=k: f"r{k + i}")
            k += len(op.results)

    # ------------------------------------------------------------------ library steps
    def library_step(self, op: Operation) -> None:
        """One call into coda_ir.runtime.library (the step's typed properties become literals)."""
        args = [self.get(op, v) for v in op.operands]
        literals: list[Attribute] = []
        as_list = False
        if isinstance(op, (coda.AttentionOp, coda.AttentionGradOp)):
            callee = "attention_forward" if isinstance(op, coda.AttentionOp) else "attention_backward"
            literals = [IntAttr(op.properties[k].value.data) for k in ("heads", "kv_heads", "head_dim", "seq_len")]
            if self.takes_seq_len() and literals[3].data == self.rows.count.data:  # type: ignore[union-attr]
                literals[3] = host.SeqLenAttr()  # the call's sequence length
            literals.append(IntegerAttr(int(bool(op.properties["causal"].value.data)), i1))
            options = nn.attention_options(op)
            if op.segments:
                # the tensors come first in the call: a variant that takes the segments second
                callee += "_segments"
            if op.segments or not options.plain:
                # scale (the effective one: the property's f32 value, else 1 / sqrt(head_dim)),
                # window, softcap; a plain attention keeps the short call (its SDPA default scale)
                hd = op.properties["head_dim"].value.data
                literals += [FloatAttr(options.effective_scale(hd), f64), IntAttr(options.window),
                             FloatAttr(options.softcap, f64)]
        elif isinstance(op, coda.EmbeddingOp):
            callee = "embedding"
        elif isinstance(op, coda.EmbeddingGradOp):
            callee = "embedding_grad"
            literals = [IntAttr(op.result.type.get_shape()[0]), op.result.type.get_element_type()]
        elif isinstance(op, coda.ConcatOp):
            callee, as_list = "concat", True
            literals = [IntAttr(op.axis.value.data)]
        elif isinstance(op, coda.SliceOp):
            callee = "slice_copy"
            axis = op.axis.value.data
            literals = [IntAttr(axis), IntAttr(op.start.value.data), IntAttr(op.result.type.get_shape()[axis])]
            if self.rows is not None and any(self.rows.multiple(lit.data) for lit in literals[1:]):
                raise CompilerError(op, "slices along the run-time rows (#coda.rows): not supported")
        else:
            raise CompilerError(op, f"'{op.name}' has no library function")
        self.add(host.CommentOp(op.name))
        call = self.add(host.LibraryCallOp(callee, args, literals, [host_type(r.type, self.rows) for r in op.results], as_list))
        self.bind(op.results, call.results, lambda i: "t")


def epilogue_half_tiles(op: coda.GemmOp) -> int:
    """The tuning group of a GEMM kernel: twice the [M, N] matrices its epilogue reads or writes
    (2-D tensors with the GEMM's M rows, in units of M x N, to the nearest half; the stored
    product counts 1). Kernels of one GEMM shape and mainloop share a tuning only within a
    group: a plain dgrad (2) and the same GEMM carrying the SwiGLU backward (z and dz, 2N wide
    each: 8) want different tiles (the heavy one inherited the plain one's 128x256, spilled and
    ran 2.5x slower; bench/RESULTS.md 2026-11-25 session 9). Row partials and vectors round to 0."""
    m, n, _ = op.problem_shape()
    elements = 0
    for value in (*op.inputs, *op.outputs):
        ty = value.type
        if isinstance(ty, TensorType) and len(ty.get_shape()) == 2 and ty.get_shape()[0] == m:
            rows, cols = ty.get_shape()
            elements += rows * cols
    return round(2 * elements / max(m * n, 1))


def lower_function(fn: func.FuncOp) -> host.FuncOp:
    """The `host.func` of one function of coda kernels (named by convert-coda-to-tl), with the
    run-time row count of its module's `#coda.rows` where it has one."""
    return _FunctionLowering(fn, coda.symbolic_rows(fn)).lower()


def host_functions(module: ModuleOp) -> list[host.FuncOp]:
    return [op for op in module.walk() if isinstance(op, host.FuncOp)]


@dataclass(frozen=True)
class ConvertCodaToHostPass(ModulePass):
    """Build the `host.func` of every function of coda kernels (after convert-coda-to-tl)."""

    name = "convert-coda-to-host"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in [f for f in op.walk() if isinstance(f, func.FuncOp) and f.body.blocks]:
            hfn = lower_function(fn)
            Rewriter.insert_op(hfn, InsertPoint.after(fn))
            try:
                hfn.verify()
            except VerifyException as error:
                raise InternalCompilerBug(fn, f"convert-coda-to-host built an invalid host.func: {error}") from None
