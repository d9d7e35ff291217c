"""In-place outputs over donated arguments: which kernel results may be stored into a buffer the
caller gave away, decided on the IR and recorded there for the Triton host emitter to obey.

Why: the backward of the LM head + cross-entropy reads the saved logits [tokens, vocab] once, in
one elementwise kernel that writes dlogits of the same shape and type, and never reads them
again. A fresh dlogits buffer beside the dead logits is a second logits-sized allocation at the
step's peak (2 GiB at 8192 tokens x 128256 vocab in bf16). When the caller donates the logits
(the `coda_ir.torch` backward owns its saved tensors), dlogits can be written over them.

* `coda.donated` (unit, a `func.func` argument attribute): the caller hands this buffer to the
  function; its contents may be overwritten once the function no longer reads them. Set only by
  callers that own the buffer (`coda_ir.torch.function` for the tensors it saved only for the
  backward).
* `coda.owned` (unit, a `func.func` argument attribute): the caller hands its reference over
  (issue 11, peak memory: torch.compile's backward frees each saved tensor at its last use). The
  host function then takes its arguments in one list, which it empties on entry
  (`convert-coda-to-host` records the convention on the `host.func`), and drops each owned
  argument after its last reader (`liveness.dead_after`), so the caching allocator can reuse it
  as soon as no one else holds the tensor. Dropping a reference never changes a tensor's
  contents, so any caller may own any argument; callers that pass tensors positionally are
  unchanged (no argument owned). `coda_ir.torch.function` owns the saved tensors of an eager
  backward that does not keep the graph.
* `coda.writes_over` (on a function-level `coda.elementwise`, an array of i64, one per output):
  -1 = a fresh buffer; k >= 0 = the output is stored into input operand k (a donated argument).

An output may write over input k only when every element is read before it is written: the input
is read through exactly one plain `coda.load` of the whole iteration shape (tile-local: each
program reads exactly the elements it stores), by no gathered op (those read other columns from
memory); each element of the output is computed from the same element of that load by
per-element ops (so its store waits for that element's load, whatever the emitter's store
placement: outputs are stored early, as soon as computed, possibly before other loads); the
kernel is not a launch-group member (another member could read the buffer in the same launch);
no later op of the function (nor its return) uses the argument; and the output is no result of
the function (donated buffers are scratch: a result aliasing an argument would be copied).
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, TensorType, UnitAttr, i64
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue

from coda_ir.dialects import coda

DONATED = "coda.donated"
OWNED = "coda.owned"
WRITES_OVER = "coda.writes_over"

__all__ = ["DONATED", "OWNED", "WRITES_OVER", "donate_arguments", "donated_arguments", "own_arguments",
           "owned_arguments", "plan_in_place", "writes_over"]


def donate_arguments(fn: func.FuncOp, indices: set[int] | list[int]) -> None:
    """Mark arguments `indices` of `fn` as donated (`coda.donated` argument attribute)."""
    _mark_arguments(fn, indices, DONATED)


def own_arguments(fn: func.FuncOp, indices: set[int] | list[int]) -> None:
    """Mark arguments `indices` of `fn` as handed over (`coda.owned` argument attribute)."""
    _mark_arguments(fn, indices, OWNED)


def _mark_arguments(fn: func.FuncOp, indices: set[int] | list[int], key: str) -> None:
    n = len(fn.body.blocks[0].args)
    old = list(fn.arg_attrs.data) if fn.arg_attrs is not None else [DictionaryAttr({}) for _ in range(n)]
    new: list[Attribute] = []
    for i, attrs in enumerate(old):
        entries = dict(attrs.data)  # type: ignore[attr-defined]
        if i in indices:
            entries[key] = UnitAttr()
        new.append(DictionaryAttr(entries))
    fn.arg_attrs = ArrayAttr(new)


def donated_arguments(fn: func.FuncOp) -> set[int]:
    return _marked_arguments(fn, DONATED)


def owned_arguments(fn: func.FuncOp) -> set[int]:
    """The arguments whose reference the caller hands over (`coda.owned`)."""
    return _marked_arguments(fn, OWNED)


def _marked_arguments(fn: func.FuncOp, key: str) -> set[int]:
    if fn.arg_attrs is None:
        return set()
    return {i for i, attrs in enumerate(fn.arg_attrs.data) if key in attrs.data}  # type: ignore[attr-defined]


def writes_over(op: Operation) -> list[int] | None:
    """The recorded `coda.writes_over` of a kernel (None when none is recorded)."""
    attr = op.attributes.get(WRITES_OVER)
    if not isinstance(attr, ArrayAttr):
        return None
    return [a.value.data for a in attr.data]  # type: ignore[attr-defined]


def _single_tile_local_load(op: coda.ElementwiseOp, position: int) -> SSAValue | None:
    """The one `coda.load` through which input `position` of `op` is read, when it is a plain
    whole-shape load (tile-local: each program reads exactly the elements it stores) and the
    kernel holds no op that reads memory at other coordinates (gathered pairs / segments);
    else None."""
    arg = op.body.blocks[0].args[position]
    uses = list(arg.uses)
    if len(uses) != 1:
        return None
    load = uses[0].operation
    if not isinstance(load, coda.LoadOp) or load.period is not None:
        return None
    if tuple(load.result.type.get_shape()) != tuple(op.iteration_shape()):  # type: ignore[attr-defined]
        return None
    if any(coda.is_gathered(inner) for inner in op.walk()):
        return None
    return load.result


def _depends_elementwise(value: SSAValue, loaded: SSAValue) -> bool:
    """Whether every element of tile `value` is computed from the same element of `loaded`
    through per-element ops only (`coda.map` whose body reads that operand, the tile operand of
    `coda.scale` / `coda.shift` / `coda.accumulate`). Then storing element e of `value` waits
    for the load of element e, whatever the emitter's store placement (early stores) or the
    threads' layouts: a store over the loaded buffer never overtakes the load of that element."""
    seen: set[SSAValue] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if v is loaded:
            return True
        if v in seen:
            continue
        seen.add(v)
        owner = v.owner
        if isinstance(owner, coda.MapOp):
            body_args = owner.body.blocks[0].args
            stack.extend(o for o, a in zip(owner.operands, body_args) if a.uses)
        elif isinstance(owner, (coda.ScaleOp, coda.ShiftOp, coda.AccumulateOp)):
            stack.append(owner.tile)
    return False


def plan_in_place(fn: func.FuncOp) -> None:
    """Record `coda.writes_over` on the function-level `coda.elementwise` kernels of `fn` that can
    store an output into a donated argument (conditions: the module docstring). Each donated
    argument is written over at most once; an argument no kernel can take stays as it is."""
    donated = donated_arguments(fn)
    if not donated or not fn.body.blocks:
        return
    block = fn.body.blocks[0]
    ops = list(block.ops)
    position = {op: i for i, op in enumerate(ops)}
    taken: set[int] = set()
    for i, op in enumerate(ops):
        if not isinstance(op, coda.ElementwiseOp) or WRITES_OVER in op.attributes:
            continue
        choice = [-1] * len(op.outputs)
        for k, value in enumerate(op.inputs):
            if not (isinstance(value, BlockArgument) and value.block is block and value.index in donated):
                continue
            if value.index in taken or list(op.inputs).count(value) != 1:
                continue
            # no use after this kernel: the buffer holds the output from here on
            if any(position.get(_top(use.operation, block), -1) > i for use in value.uses):
                continue
            loaded = _single_tile_local_load(op, k)
            if loaded is None:
                continue
            yielded = op.body.blocks[0].last_op.operands  # type: ignore[union-attr]
            for j, result in enumerate(op.outputs):
                # a result the function returns is not stored there: the caller donated scratch,
                # and a result aliasing an argument is copied by callers that forbid it (torch ops)
                returned = any(isinstance(use.operation, func.ReturnOp) for use in result.uses)
                if (choice[j] == -1 and not returned and isinstance(result.type, TensorType) and result.type == value.type
                        and _depends_elementwise(yielded[j], loaded)):
                    choice[j] = k
                    taken.add(value.index)
                    break
        if any(c >= 0 for c in choice):
            op.attributes[WRITES_OVER] = ArrayAttr([IntegerAttr(c, i64) for c in choice])


def _top(op: Operation, block) -> Operation | None:
    """The op of `block` that holds `op` (itself, or the kernel / group it is nested in)."""
    while op is not None and op.parent_block() is not block:
        op = op.parent_op()  # type: ignore[assignment]
    return op
