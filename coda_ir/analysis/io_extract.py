"""Build the IO model's kernel descriptions (`io_model.Kernel`) from xDSL `nn` / `coda` IR.

`extract_module(module) -> list[FunctionPlan]`: per `func.func`, in program order,

* every `nn` op becomes the kernel PyTorch eager would run for it (`io_model.nn_op_kernel`:
  each input read once, the output written once; linear/matmul a GEMM);
* every `coda.gemm` / `coda.elementwise` / `coda.fold` becomes one kernel: the GEMM operands,
  every epilogue input that the region reads (once each), every result (tensors at their
  element type; `!coda.partials` results as fp32 `[M, ceil(N / BN)]` (rows) or
  `[N, ceil(M / BM)]` (cols) for the kernel's tile), the epilogue's FLOPs and SFU ops
  counted from its primitives and scalar bodies, and its live tile state (below). Folds
  and elementwise kernels record their program count (a fold with rank-0 results is one
  program walking all rows, so it gets 1/sms of the bandwidth).

Tile: the `config` property (`#coda.config<...>`) when present; otherwise the model's
default (`io_model.default_tile`: the fastest of `tiling.IO_MODEL_TILES` that fits with the epilogue
and honours `coda.constraints = #coda.tile_constraints<bn_multiple_of = k>` set by coda-legalize).

Live state (registers): elementwise epilogue code is fused per element, so the accumulator is
the one full tile held; each stored fp32 tile beyond the first adds `AUX_STORE_LIVE` (width
relative to the accumulator), and every fp32 tile that must stay live across a reduction
(`coda.reduce`, `coda.segment_reduce`, `coda.select`) besides the reduced one adds its width.

Tensor roles: GEMM `b` operands, column-broadcast vectors (`coda.broadcast/scale/shift ...
cols`) and nn weights (linear/matmul `w`, norm weights and biases, rank-1 add/mul operands)
are "weight" when they are function arguments; partials are "partials"; everything else is
"activation". So `activation_bytes` is the traffic of token-indexed data.

Provenance (for reports and the fusion-plan diagram)
----------------------------------------------------
Passes mark each coda kernel with the discardable attribute

* `coda.origin`: a `StringAttr` (entries joined by "+" or ",") or an `ArrayAttr` of
  `StringAttr`, one entry per nn op (or part of one) the kernel runs:
  `"<nn op name>[.<role>][@<result name>]"`, e.g.
  `"nn.linear@a"`, `"nn.rms_norm.stats@h1"`, `"nn.rms_norm.rstd@h1"`,
  `"nn.rms_norm.scale@h1"` (its deferred scale applied here). Roles the diagram marks:
  `stats`/`lse` (partial reductions), `rstd`/`loss` (folds), `scale` (deferred scales),
  `prescale` (the aux store h = x * w feeding the next GEMM).
  `nn_op_id(op)` gives the `@<result name>` part the passes should use.
* `coda.name` (optional `StringAttr`): a short kernel label ("F1") for tables and diagrams.

Without `coda.origin`, labels are inferred from the epilogue's primitives.
"""

from __future__ import annotations

import dataclasses

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from coda_ir.dialects.element_types import element_name
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    Float64Type,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, SSAValue

from coda_ir.analysis import io_model as m
from coda_ir.analysis import io_plans
from coda_ir.dialects import coda
from coda_ir.tiling import IO_MODEL_TILES, GemmConfig, config_from_attr

ORIGIN = "coda.origin"
NAME = "coda.name"
CONSTRAINTS = coda.CONSTRAINTS

# math ops that run on the SFU (one "sfu op" per element); other arith/math ops are FLOPs.
SFU_OPS = {
    "math.exp", "math.exp2", "math.expm1", "math.log", "math.log2", "math.log1p", "math.rsqrt", "math.sqrt",
    "math.sin", "math.cos", "math.tan", "math.tanh", "math.erf", "math.powf", "math.atan", "math.atan2",
    "arith.divf",
}
FREE_OPS = {"arith.constant", "coda.yield", "arith.index_cast", "arith.bitcast"}
REDUCE_FLOPS = {"sum": (1, 0), "sumsq": (2, 0), "max": (1, 0), "lse": (3, 1)}


@dataclass
class FunctionPlan:
    name: str
    kernels: list[m.Kernel]
    inputs: list[m.Tensor]
    outputs: list[m.Tensor]
    kernel_ops: list[Operation] = field(default_factory=list)  # the IR op of each kernel

    @property
    def is_nn(self) -> bool:
        return any(op.name.startswith("nn.") for op in self.kernel_ops)

    @property
    def is_coda(self) -> bool:
        return any(op.name.startswith("coda.") for op in self.kernel_ops)


def dtype_name(attr: Attribute) -> str:
    try:
        return element_name(attr)
    except TypeError:
        return "f32"  # the model sizes anything else like fp32
    if isinstance(attr, Float64Type):
        return "f64"
    if isinstance(attr, IntegerType):
        return {1: "i1", 32: "i32", 64: "i64"}.get(attr.width.data, "i32")
    return "f32"


def nn_op_id(op: Operation) -> str:
    """`<op name>@<result name>` (or `#<index in its block>` without a name hint): how a
    `coda.origin` entry names the nn op a kernel came from."""
    hint = op.results[0].name_hint if op.results else None
    if hint:
        return f"{op.name}@{hint}"
    block = op.parent_block()
    index = list(block.ops).index(op) if block is not None else 0
    return f"{op.name}#{index}"


def origin_entries(op: Operation) -> list[str]:
    attr = op.attributes.get(ORIGIN)
    if isinstance(attr, StringAttr):
        return [s.strip() for s in attr.data.replace("+", ",").split(",") if s.strip()]
    if isinstance(attr, ArrayAttr):
        return [a.data for a in attr.data if isinstance(a, StringAttr)]
    return []


class _Names:
    """Unique, readable tensor names per function."""

    def __init__(self) -> None:
        self.names: dict[SSAValue, str] = {}
        self.used: set[str] = set()
        self.counter = 0

    def __call__(self, value: SSAValue) -> str:
        if value in self.names:
            return self.names[value]
        base = value.name_hint
        if base is None and isinstance(value, BlockArgument):
            base = f"arg{value.index}"
        if base is None:
            base = self._derived(value)
        if base is None:
            base = f"t{self.counter}"
            self.counter += 1
        name, i = base, 1
        while name in self.used:
            name = f"{base}_{i}"
            i += 1
        self.used.add(name)
        self.names[value] = name
        return name

    def _derived(self, value: SSAValue) -> str | None:
        """A readable name for an unnamed kernel result: `<named sibling>.partials` /
        `<named sibling>.out<i>`, or `<first operand>.folded` for a fold."""
        owner = value.owner
        if not isinstance(owner, Operation) or isinstance(value, BlockArgument):
            return None
        if isinstance(owner, coda.FoldOp) and owner.operands:
            return f"{self(owner.operands[0]).removesuffix('.partials')}.folded"
        named = next((r for r in owner.results if r.name_hint), None)
        if named is None or not isinstance(owner, (coda.GemmOp, coda.ElementwiseOp)):
            return None
        index = list(owner.results).index(value)
        suffix = "partials" if isinstance(value.type, coda.PartialsType) else f"out{index}"
        return f"{named.name_hint}.{suffix}"


ATTENTION_OPS = ("nn.attention", "nn.attention_fwd", "nn.attention_grad", "coda.attention", "coda.attention_grad")
"""The attention steps the attention model prices (coda_ir/analysis/attention_model.py)."""


class _Extractor:
    def __init__(self, fn: func.FuncOp, gpu: m.GPU, attention_backend: str = "", doc_len: int = 0):
        self.fn = fn
        self.gpu = gpu
        self.attention_backend = attention_backend
        self.doc_len = doc_len
        self.names = _Names()
        self.partials: dict[SSAValue, m.Tensor] = {}
        self.args = list(fn.body.blocks[0].args) if fn.body.blocks else []
        # a launch group's results are its members' results under new SSA names
        self.group_results: dict[SSAValue, SSAValue] = {}

    # ---------------------------------------------------------------- tensors

    def tensor(self, value: SSAValue, role: str | None = None) -> m.Tensor:
        value = self.group_results.get(value, value)
        if value in self.partials:
            return self.partials[value]
        ty = value.type
        if isinstance(ty, TensorType):
            shape = tuple(ty.get_shape())
            dtype = dtype_name(ty.get_element_type())
        else:
            shape, dtype = (), "f32"
        if role is None or (role == "weight" and value not in self.args):
            role = "activation" if shape else "scalar"
        return m.Tensor(self.names(value), shape, dtype, role)

    # ---------------------------------------------------------------- nn ops

    def nn_kernel(self, op: Operation) -> m.Kernel:
        operands = list(op.operands)
        roles: list[str | None] = [None] * len(operands)
        if op.name in ("nn.linear", "nn.matmul"):
            roles[1] = "weight"
        elif op.name in ("nn.rms_norm", "nn.layer_norm", "nn.head_rms_norm"):
            roles[1:] = ["weight"] * (len(operands) - 1)
        elif op.name in ("nn.rms_norm_grad", "nn.layer_norm_grad"):
            roles[2] = "weight"
        elif op.name == "nn.head_rms_norm_grad":
            roles[2:] = ["weight"] * (len(operands) - 2)  # one weight per group of heads
        elif op.name in ("nn.add", "nn.mul") and len(operands) == 2:
            ty = operands[1].type
            if isinstance(ty, TensorType) and len(ty.get_shape()) == 1:
                roles[1] = "weight"
        inputs = [self.tensor(v, r) for v, r in zip(operands, roles)]
        output, *extra = [self.tensor(r) for r in op.results]  # multi-result backward ops write all
        props = {
            k: v.value.data for k, v in op.properties.items() if isinstance(v, IntegerAttr)
        }
        kernel = m.nn_op_kernel(op.name, inputs, output, extra_outputs=extra, **props)
        return m.Kernel(**{**kernel.__dict__, "ops": (nn_op_id(op),)})

    # ---------------------------------------------------------------- coda kernels

    def input_roles(self, block: Block, offset: int, values: Sequence[SSAValue]) -> list[m.Tensor | None]:
        """One tensor per kernel input the region reads (None when unused)."""
        tensors: list[m.Tensor | None] = []
        for arg, value in zip(block.args[offset:], values):
            if not arg.uses:
                tensors.append(None)
                continue
            role: str | None = None
            col_uses = [
                u.operation for u in arg.uses
                if isinstance(u.operation, (coda.BroadcastOp, coda.ScaleOp, coda.ShiftOp))
                and u.operation.axis.data == coda.Axis.COLS
            ]
            if col_uses and len(col_uses) == len(list(arg.uses)):
                role = "weight"
            tensors.append(self.tensor(value, role))
        return tensors

    def epilogue_work(self, block: Block, acc_cols: int | None) -> tuple[float, float, float, list[str]]:
        """(flops, sfu ops, live tiles, inferred labels) of an epilogue region."""
        flops = sfu = 0.0
        labels: list[str] = []
        ops = [op for op in block.ops if not isinstance(op, coda.YieldOp)]
        for op in ops:
            tile = _result_tile(op)
            elems = tile[0] * tile[1] if tile else 0
            if isinstance(op, (coda.ScaleOp, coda.ShiftOp)):
                flops += elems
                axis = op.axis.data.value
                labels.append(f"{'scale' if isinstance(op, coda.ScaleOp) else 'shift'} {axis}")
            elif isinstance(op, coda.AccumulateOp):
                flops += elems
                labels.append("accumulate")
            elif isinstance(op, coda.MapOp):
                f, s = _body_work(op.body.blocks[0])
                flops += f * elems
                sfu += s * elems
                labels.append("map")
            elif isinstance(op, coda.PairMapOp):
                f, s = _body_work(op.body.blocks[0])
                rows = _tile_of(op.inputs[0])[0]
                pairs = rows * op.pair_count()
                flops += f * pairs
                sfu += s * pairs
                widths = [_tile_of(v)[1] for v in op.inputs]
                outs = [_tile_of(v)[1] for v in op.outputs]
                kind = "2->1" if min(outs) < max(widths) else ("1->2" if max(outs) > max(widths) else "2->2")
                labels.append(f"pair_map {kind}")
            elif isinstance(op, (coda.ReduceOp, coda.SegmentReduceOp)):
                src = _tile_of(op.tile)
                f, s = REDUCE_FLOPS[op.kind.data.value]
                flops += f * src[0] * src[1]
                sfu += s * src[0] * src[1]
                labels.append(f"{'segment_' if isinstance(op, coda.SegmentReduceOp) else ''}reduce {op.kind.data.value}")
            elif isinstance(op, coda.SelectOp):
                src = _tile_of(op.tile)
                flops += src[0] * src[1]
                labels.append("select")
            elif op.name.split(".")[0] in ("arith", "math") and op.name not in FREE_OPS:
                flops += 1
        live = _live_tiles(block, acc_cols)
        return flops, sfu, live, labels

    def region_outputs(self, op: Operation, tile: GemmConfig, m_rows: int, n_cols: int) -> list[m.Tensor]:
        writes = []
        for result in op.results:
            ty = result.type
            if isinstance(ty, coda.PartialsType):
                if ty.axis == coda.Axis.ROWS:
                    shape = (ty.length.data, math.ceil(n_cols / tile.bn))
                else:
                    shape = (ty.length.data, math.ceil(m_rows / tile.bm))
                t = m.Tensor(self.names(result), shape, "f32", "partials")
                self.partials[result] = t
                writes.append(t)
            else:
                writes.append(self.tensor(result))
        return writes

    def gemm_kernel(self, op: coda.GemmOp) -> m.Kernel:
        mm, nn_, kk = op.problem_shape()
        block = op.epilogue.blocks[0]
        a = self.tensor(op.a)
        b = self.tensor(op.b, "weight")
        reads = [t for t in self.input_roles(block, 1, op.inputs) if t is not None]
        flops, sfu, live, labels = self.epilogue_work(block, nn_)
        tile = _config(op)
        kernel = m.Kernel(
            _kernel_name(op, self.names, "gemm"), "gemm", tuple(reads), (), m.GemmSpec(mm, nn_, kk, a, b), tile,
            flops, sfu, live, tuple(origin_entries(op)) or ("gemm", *labels), _notes(op, labels, self.partials),
        )
        if tile is None:
            multiple = _bn_multiple(op)
            candidates = [t for t in IO_MODEL_TILES if t.bn % multiple == 0] or [GemmConfig(128, multiple, 32, num_warps=8, num_stages=2)]
            tile = m.default_tile(kernel, self.gpu, candidates)
        writes = self.region_outputs(op, tile, mm, nn_)
        return m.Kernel(**{**kernel.__dict__, "tile": tile, "writes": tuple(writes)})

    def elementwise_kernel(self, op: coda.ElementwiseOp) -> m.Kernel:
        mm, nn_ = op.iteration_shape()
        block = op.body.blocks[0]
        reads = [t for t in self.input_roles(block, 0, op.inputs) if t is not None]
        flops, sfu, live, labels = self.epilogue_work(block, nn_)
        whole = op.whole_axis
        tile = _config(op) or (m.whole_elementwise_tile(mm, nn_, whole.value, _bn_multiple(op)) if whole is not None
                               else m.elementwise_tile(mm, nn_, _bn_multiple(op), op.tile_width_multiple()))
        writes = self.region_outputs(op, tile, mm, nn_)
        return m.Kernel(
            _kernel_name(op, self.names, "elementwise"), "elementwise", tuple(reads), tuple(writes), None, None,
            flops, sfu, live, tuple(origin_entries(op)) or tuple(labels), _notes(op, labels, self.partials),
            programs=(
                math.ceil(mm / tile.bm) if op.whole_axis == coda.Axis.ROWS
                else math.ceil(nn_ / tile.bn) if op.whole_axis == coda.Axis.COLS
                else math.ceil(mm / tile.bm) * math.ceil(nn_ / tile.bn)
            ),
        )

    def fold_kernel(self, op: coda.FoldOp) -> m.Kernel:
        length = op.length()
        reads = [self.tensor(v) for v in op.partials]
        reads += [self.tensor(v) for v in op.inputs]
        writes = [self.tensor(r) for r in op.results]
        f, s = _body_work(op.body.blocks[0])
        flops = f * length
        sfu = s * length
        for v in op.partials:
            t = self.partials.get(v)
            n = t.numel if t is not None else length
            if isinstance(v.type, coda.PartialsType) and v.type.combine_kind == coda.Combine.LSE:
                flops += 3 * n
                sfu += n
            else:
                flops += n
        if op.finalize.blocks:
            f2, s2 = _body_work(op.finalize.blocks[0])
            flops += f2
            sfu += s2
        sums = any(isinstance(r.type, TensorType) and not r.type.get_shape() for r in op.results)
        programs = m.fold_programs(length)
        notes = ("fold partials", "rank-0 sums: per-block totals, folded in block order") if sums else ("fold partials",)
        return m.Kernel(
            _kernel_name(op, self.names, "fold"), "fold", tuple(reads), tuple(writes), None, None, flops, sfu, 1.0,
            tuple(origin_entries(op)) or ("fold",), notes, programs=programs,
        )

    # ---------------------------------------------------------------- attention

    def attention_kernel(self, op: Operation) -> m.Kernel:
        """An attention step, priced by the attention model (`attention_model`): its shape and
        mask from the op's properties; `segments` (document ids known only at run time) run
        FlexAttention and are priced as `documents` equal documents per sequence (`doc_len`
        rows each; one document when not given: the dense causal upper bound)."""
        from coda_ir.analysis import attention_model as am
        from coda_ir.dialects.nn import attention_config, attention_options

        heads, kv_heads, head_dim, seq_len, causal = attention_config(op)
        options = attention_options(op)
        qkv = op.operands[0]
        rows = qkv.type.get_shape()[0] if isinstance(qkv.type, TensorType) else seq_len
        segments = getattr(op, "segments", ())
        documents = None
        notes = []
        if segments:
            notes.append("segments")
            if self.doc_len and seq_len % self.doc_len == 0 and self.doc_len < seq_len:
                documents = (self.doc_len,) * (seq_len // self.doc_len)
        window = options.window if options.window and options.window < seq_len else 0
        shape = am.AttentionShape(max(1, rows // seq_len), seq_len, heads, kv_heads, head_dim, causal=causal,
                                  window=window, softcap=options.softcap, documents=documents,
                                  dtype=dtype_name(qkv.type.get_element_type()) if isinstance(qkv.type, TensorType) else "bf16")
        backend = self.attention_backend or None
        if backend is None and segments:
            backend = "flex"  # the runtime's choice for a masked call (coda_ir/runtime/attention.py)
        direction = "bwd" if op.name.endswith("_grad") else "fwd"
        label = f"attn:{self.names(op.results[0])}" if op.results else "attention"
        kernel = am.attention_kernel(_kernel_name(op, self.names, "attn_grad" if direction == "bwd" else "attn")
                                     if op.name.startswith("coda.") else label,
                                     shape, direction, backend, ops=(nn_op_id(op) if op.name.startswith("nn.") else op.name,),
                                     notes=tuple(notes))
        reads = [self.tensor(v) for v in op.operands]
        writes = [self.tensor(r) for r in op.results]
        return dataclasses.replace(kernel, reads=tuple(reads), writes=tuple(writes))

    # ---------------------------------------------------------------- function

    def run(self) -> FunctionPlan:
        kernels: list[m.Kernel] = []
        kernel_ops: list[Operation] = []
        inputs = [self.tensor(a) for a in self.args] if self.fn.body.blocks else []
        outputs: list[m.Tensor] = []
        ops: list[Operation] = []
        riders: set[int] = set()  # ops that run inside an earlier member's launch
        for op in self.fn.body.ops if self.fn.body.blocks else []:
            if isinstance(op, coda.LaunchGroupOp):
                # a launch group's members are priced as the kernels they are, sharing one launch
                members = list(op.members())
                riders.update(id(member) for member in members[1:])
                member_results = [r for member in members for r in member.results]
                self.group_results.update(zip(op.results, member_results))
                ops += members
            else:
                ops.append(op)
        for op in ops:
            if op.name in ATTENTION_OPS:
                kernels.append(self.attention_kernel(op))
            elif op.name.startswith("nn."):
                kernels.append(self.nn_kernel(op))
            elif isinstance(op, coda.GemmOp):
                kernels.append(self.gemm_kernel(op))
            elif isinstance(op, coda.ElementwiseOp):
                kernels.append(self.elementwise_kernel(op))
            elif isinstance(op, coda.FoldOp):
                kernels.append(self.fold_kernel(op))
            elif isinstance(op, func.ReturnOp):
                outputs = [self.tensor(v) for v in op.arguments]
                continue
            else:
                continue
            if id(op) in riders:
                kernels[-1] = dataclasses.replace(kernels[-1], shares_launch=True)
            kernel_ops.append(op)
        # Re-resolve weight roles of inputs for the input list.
        roles = {t.name: t.role for k in kernels for t in k.all_reads()}
        inputs = [m.Tensor(t.name, t.shape, t.dtype, roles.get(t.name, t.role)) for t in inputs]
        return FunctionPlan(self.fn.sym_name.data, kernels, inputs, outputs, kernel_ops)


def _config(op: Operation) -> GemmConfig | None:
    config = op.properties.get("config")
    if isinstance(config, coda.TileConfigAttr):
        d = config.as_dict()
        return config_from_attr(d)
    return None


def _bn_multiple(op: Operation) -> int:
    """`coda.constraints = #coda.tile_constraints<bn_multiple_of = k>` (set by coda-legalize):
    BN must be a multiple of k."""
    constraints = op.attributes.get(CONSTRAINTS)
    if isinstance(constraints, coda.TileConstraintsAttr):
        return constraints.bn_multiple_of.data
    return 1


def _kernel_name(op: Operation, names: _Names, kind: str) -> str:
    attr = op.attributes.get(NAME)
    if isinstance(attr, StringAttr):
        return attr.data
    if op.results:
        return f"{kind}:{names(op.results[0])}"
    return kind


VENDOR_NOTE = "vendor gemm (cuBLAS)"
"""The note on a gemm `coda-plan-mainloop` gave `#coda.vendor_gemm`: reports name the library instead of a tile."""


def _notes(op: Operation, labels: Iterable[str], partials: dict[SSAValue, m.Tensor]) -> tuple[str, ...]:
    notes = []
    labels = list(labels)
    if any(label.startswith(("reduce", "segment_reduce", "select")) for label in labels):
        if any(isinstance(r.type, coda.PartialsType) for r in op.results):
            notes.append("partial reduction")
    # a row scale by a vector folded from partials: a deferred norm scale
    block = op.regions[0].blocks[0]
    offset = 1 if isinstance(op, coda.GemmOp) else 0
    for arg, value in zip(block.args[offset:], op.operands[2:] if isinstance(op, coda.GemmOp) else op.operands):
        owner = value.owner if not isinstance(value, BlockArgument) else None
        if isinstance(op, coda.GemmOp) and isinstance(owner, coda.FoldOp) and any(
            isinstance(u.operation, coda.ScaleOp) and u.operation.axis.data == coda.Axis.ROWS for u in arg.uses
        ):
            notes.append("deferred row scale")
            break
    if isinstance(op, coda.GemmOp) and coda.recorded_vendor_gemm(op) is not None:
        notes.append(VENDOR_NOTE)  # priced as the model's tile, run by the vendor library on a GPU
    return tuple(notes)


def _result_tile(op: Operation) -> tuple[int, int] | None:
    for r in op.results:
        if isinstance(r.type, coda.TileType):
            return r.type.get_shape()
    return None


def _tile_of(value: SSAValue) -> tuple[int, int]:
    ty = value.type
    assert isinstance(ty, coda.TileType)
    return ty.get_shape()


def _body_work(block: Block) -> tuple[float, float]:
    """(flops, sfu ops) of one execution of a scalar body."""
    flops = sfu = 0.0
    for op in block.walk():
        if op.name in FREE_OPS:
            continue
        if op.name in SFU_OPS:
            sfu += 1
        elif op.name == "math.fma":
            flops += 2
        elif op.name.split(".")[0] in ("arith", "math"):
            flops += 1
    return flops, sfu


def _live_tiles(block: Block, acc_cols: int | None) -> float:
    """Peak live fp32 tile state in accumulator tiles (see the module docstring)."""
    ops = list(block.ops)
    terminator = ops[-1] if ops and isinstance(ops[-1], coda.YieldOp) else None

    def width(v: SSAValue) -> float:
        if not isinstance(v.type, coda.TileType) or v.type.element_type != coda.f32:
            return 0.0
        cols = v.type.cols
        return cols / acc_cols if acc_cols else 1.0

    stored = sum(width(v) for v in (terminator.values if terminator else ()))
    live = 1.0 + m.AUX_STORE_LIVE * max(0.0, stored - 1.0)
    index = {op: i for i, op in enumerate(ops)}
    held_peak = 0.0
    for i, op in enumerate(ops):
        if not isinstance(op, (coda.ReduceOp, coda.SegmentReduceOp, coda.SelectOp)):
            continue
        held = 0.0
        candidates = [a for a in block.args] + [r for o in ops[:i] for r in o.results]
        for v in candidates:
            if v is op.tile or width(v) == 0.0:
                continue
            later = [u for u in v.uses if u.operation is not terminator and index.get(u.operation, -1) > i]
            if later:
                held += width(v)
        held_peak = max(held_peak, held)
    return live + held_peak


def extract_function(fn: func.FuncOp, gpu: m.GPU | str | None = None, attention_backend: str = "",
                     doc_len: int = 0) -> FunctionPlan:
    """`attention_backend`: the backend attention steps are priced as ("": the runtime's choice);
    `doc_len`: the document length of programs with `segments` (0: one document per sequence)."""
    return _Extractor(fn, m.as_gpu(gpu), attention_backend, doc_len).run()


def extract_module(module: ModuleOp, gpu: m.GPU | str | None = None, attention_backend: str = "",
                   doc_len: int = 0) -> list[FunctionPlan]:
    gpu = m.as_gpu(gpu)
    return [extract_function(op, gpu, attention_backend, doc_len) for op in module.walk() if isinstance(op, func.FuncOp)]


# ============================================================================ decisions on nn programs


def _gemm_producer(value: SSAValue) -> tuple[int | None, bool]:
    """(K of the GEMM producing `value`, whether a residual add sits in between)."""
    owner = value.owner
    if isinstance(owner, Operation) and owner.name in ("nn.linear", "nn.matmul"):
        ty = owner.operands[0].type
        assert isinstance(ty, TensorType)
        return ty.get_shape()[1], False
    if isinstance(owner, Operation) and owner.name == "nn.add":
        for operand in owner.operands:
            k, _ = _gemm_producer(operand)
            if k is not None and operand.owner is not None and getattr(operand.owner, "name", "") != "nn.add":
                return k, True
    return None, False


def nn_decisions(fn: func.FuncOp, gpu: m.GPU | str | None = None) -> list[tuple[str, io_plans.Decision]]:
    """What the decision API of io_model says for the choices this nn function offers:
    `stats_plan` per RMSNorm, `qk_norm_tile_width` per head RMSNorm fed by a GEMM, and
    `store_or_recompute` (for backward) per gated activation, `gated_grad_plan` per gated
    backward, `norm_grad_plan` per RMSNorm backward with hdh whose dy a GEMM produces and
    `cross_entropy_plan` per cross-entropy whose logits a GEMM produces. Each entry: (call, decision)."""
    gpu = m.as_gpu(gpu)
    names = _Names()
    out: list[tuple[str, io_plans.Decision]] = []
    for op in fn.body.ops if fn.body.blocks else []:
        if op.name in ("nn.cross_entropy", "nn.cross_entropy_fwd"):
            logits = op.operands[0]
            k, through_add = _gemm_producer(logits)
            if k is None or through_add:  # nn-plan asks only when a GEMM produces the logits itself
                continue
            rows, cols = logits.type.get_shape()  # type: ignore[attr-defined]
            stored = any(u.operation is not op for u in logits.uses)  # nn-plan's test
            d = io_plans.cross_entropy_plan(rows, cols, K=k, dtype=dtype_name(logits.type.get_element_type()),  # type: ignore[attr-defined]
                                     gpu=gpu, logits_stored=stored)
            out.append((f"cross_entropy_plan({names(logits)}: M={rows}, V={cols}, K={k}, logits_stored={stored})", d))
            continue
        result = op.results[0] if op.results else None
        ty = result.type if result is not None else None
        if not isinstance(ty, TensorType) or len(ty.get_shape()) != 2:
            continue
        rows, cols = ty.get_shape()
        dtype = dtype_name(ty.get_element_type())
        label = names(result)  # type: ignore[arg-type]
        if op.name == "nn.rms_norm":
            k, residual = _gemm_producer(op.operands[0])
            d = io_plans.stats_plan(rows, cols, K=k, dtype=dtype, gpu=gpu, residual=residual)
            out.append((f"stats_plan({label}: M={rows}, D={cols}, K={k})", d))
        elif op.name == "nn.head_rms_norm":
            k, _ = _gemm_producer(op.operands[0])
            if k is None:
                continue
            hd = op.properties["head_dim"].value.data  # type: ignore[attr-defined]
            heads = op.properties["heads"].value.data  # type: ignore[attr-defined]
            d = io_plans.qk_norm_tile_width(hd, cols, M=rows, K=k, heads=heads, dtype=dtype, gpu=gpu)
            out.append((f"qk_norm_tile_width({label}: head_dim={hd}, heads={heads}, N={cols}, M={rows}, K={k})", d))
        elif op.name in ("nn.swiglu", "nn.geglu"):
            flops, sfu = (5, 2) if op.name == "nn.swiglu" else (9, 1)
            d = io_plans.store_or_recompute(rows, cols, dtype=dtype, gpu=gpu, recompute_flops_per_element=flops,
                                     recompute_sfu_per_element=sfu)
            out.append((f"store_or_recompute({label}: M={rows}, N={cols}, from the saved pre-activation)", d))
        elif op.name in ("nn.swiglu_grad", "nn.geglu_grad"):
            k, through_add = _gemm_producer(op.operands[0])
            if k is None or through_add:  # nn-plan asks only when a GEMM produces dy itself
                continue
            f = cols // 2
            d = io_plans.gated_grad_plan(rows, f, K=k, dtype=dtype, gpu=gpu)
            out.append((f"gated_grad_plan({label}: M={rows}, F={f}, K={k})", d))
        elif op.name == "nn.rms_norm_grad" and len(op.operands) == 5:  # with hdh: dx elementwise in dy
            k, through_add = _gemm_producer(op.operands[0])
            if k is None or through_add:  # nn-plan asks only when a GEMM produces dy itself
                continue
            uses = list(op.results[0].uses)
            residual = len(uses) == 1 and uses[0].operation.name == "nn.add"
            x, w, rstd = op.operands[1:4]
            rebuilt = any(u.operation.name == "nn.rms_norm_apply" and tuple(u.operation.operands) == (x, w, rstd)
                          for u in x.uses)  # the norm's output rebuilt for a weight gradient (nn-plan's test)
            d = io_plans.norm_grad_plan(rows, cols, K=k, dtype=dtype, gpu=gpu, residual=residual, rebuilt_h=rebuilt)
            out.append((f"norm_grad_plan({label}: M={rows}, D={cols}, K={k}, residual={residual}, "
                        f"rebuilt_h={rebuilt})", d))
    return out
