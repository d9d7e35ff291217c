"""Buffer lifetimes of a host function: where each buffer a kernel allocates dies, and the memory
timeline that follows (what a call holds at each launch, its peak).

Why: the emitted host function keeps every intermediate buffer in a Python local until it
returns, so a backward's peak was the sum of all its buffers (the LLaMA block's derived backward
at the 1B shape: 1052 MiB of temporaries and gradients on top of the 992 MiB saved, bench/RESULTS.md
session 9). Dropping each buffer at its last use lets the caching allocator reuse it for the
next kernel's outputs; the peak becomes the largest set of buffers live at one launch.

`dead_after(fn)` is the fact the host emitter obeys (it drops those names after the op);
`timeline(fn)` is the same liveness with sizes, for tests and for predicting a peak before a GPU
run. Returned values are never dropped; an argument is dropped only when the caller handed its
reference over (`coda.owned`, `analysis/in_place.py`: then the host function holds the only
reference the caller gave it, and a saved tensor of a backward dies at its last reader, as in
torch.compile's backward).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, Block, Operation, SSAValue

from coda_ir.dialects import coda
from coda_ir.dialects.element_types import element_name
from coda_ir.dialects.coda import owned_arguments, writes_over

__all__ = ["dead_after", "timeline", "Step", "buffer_bytes"]

_BYTES = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2, "i64": 8, "i32": 4, "i16": 2, "i8": 1, "i1": 1}


def _top(op: Operation, block: Block) -> Operation | None:
    """The op of `block` that holds `op` (itself, or the kernel / group it is nested in)."""
    while op is not None and op.parent_block() is not block:
        op = op.parent_op()  # type: ignore[assignment]
    return op


def dead_after(fn: func.FuncOp) -> dict[Operation, list[SSAValue]]:
    """For each top-level op of `fn`: the values defined by top-level ops, and the owned arguments
    (`coda.owned`), never returned, whose last top-level use is that op, or that it defines and
    nothing uses. After the op has run, no later op reads them: the host may drop its references.
    Under the key `fn` itself: the owned arguments no op reads (dropped on entry)."""
    block = fn.body.blocks[0]
    ops = list(block.ops)
    position = {op: i for i, op in enumerate(ops)}
    dead: dict[Operation, list[SSAValue]] = {op: [] for op in ops}
    dead[fn] = []
    owned = owned_arguments(fn)
    values: list[tuple[SSAValue, Operation]] = [(a, fn) for a in block.args if a.index in owned]
    values += [(v, op) for op in ops if not isinstance(op, func.ReturnOp) for v in op.results]
    for value, definer in values:
        users = [_top(use.operation, block) for use in value.uses]
        if any(isinstance(u, func.ReturnOp) for u in users):
            continue
        last = max((u for u in users if u is not None), key=lambda u: position[u], default=definer)
        dead[last].append(value)
    return dead


def buffer_bytes(ty: Attribute, producer: Operation | None = None, tile: tuple[int, int] = (128, 128)) -> int:
    """Bytes of a buffer of type `ty`: a tensor's, or a partials buffer's (f32, one column per
    tile of its producer's iteration at `tile` = (BM, BN): the host sizes them by the launched
    config)."""
    if isinstance(ty, coda.PartialsType):
        tiles = 1
        if producer is not None:
            shape = _iteration(producer)
            if shape is not None:
                m, n = shape
                tiles = math.ceil(n / tile[1]) if ty.axis == coda.Axis.ROWS else math.ceil(m / tile[0])
        return 4 * ty.length.data * tiles
    if isinstance(ty, TensorType):
        return math.prod(ty.get_shape()) * _BYTES.get(element_name(ty.get_element_type()), 4)
    return 0


def _iteration(op: Operation) -> tuple[int, int] | None:
    if isinstance(op, coda.GemmOp):
        m, n, _ = op.problem_shape()
        return m, n
    if isinstance(op, coda.ElementwiseOp):
        m, n = op.iteration_shape()
        return m, n
    return None


@dataclass
class Step:
    """One top-level op of a host function: the bytes it allocates (outputs not written over an
    argument), what is live while it runs (earlier live buffers + its own outputs) and the bytes
    dropped after it."""

    op: Operation
    allocated: int
    live: int
    freed: int
    dropped: list[SSAValue] = field(default_factory=list)

    @property
    def label(self) -> str:
        origin = self.op.attributes.get("coda.origin")
        return f"{self.op.name} {origin.data if origin is not None else ''}".strip()  # type: ignore[union-attr]


def _producers(op: Operation) -> list[Operation | None]:
    """The kernel producing each result of a top-level op (a group's member for its outputs)."""
    if isinstance(op, coda.LaunchGroupOp):
        return [m for m in op.members() for _ in m.results]
    return [op] * len(op.results)


def _buffers_of(op: Operation) -> list[SSAValue | None]:
    """For each result of a top-level op: the input whose buffer it is stored into
    (`coda.writes_over`, a group's members in order), or None for a fresh buffer."""
    if isinstance(op, coda.LaunchGroupOp):
        return [base for m in op.members() for base in _buffers_of(m)]
    over = writes_over(op)
    if over is None:
        return [None] * len(op.results)
    return [op.operands[k] if k >= 0 else None for k in over]


def timeline(fn: func.FuncOp, tile: tuple[int, int] = (128, 128), drop_dead: bool = True,
             released: Collection[int] | None = None) -> list[Step]:
    """The memory of one call of `fn`'s host function, op by op, above the arguments it does not
    release: outputs allocated at their op, dropped after their last use (`dead_after`; with
    `drop_dead=False`, kept to the end, as the host did before). Outputs recorded to write over a
    donated argument allocate nothing. `released` (default: the owned arguments): the arguments
    whose memory dropping them frees (the host function held the last reference: a backward's
    saved tensors that only the autograd ctx held; not weights or inputs the caller keeps). They
    count as live from the entry; one written over by an output is freed when that output is
    dropped."""
    dead = dead_after(fn)
    args = fn.body.blocks[0].args
    released = set(owned_arguments(fn) if released is None else released) & set(owned_arguments(fn))
    size_of_arg = {a: buffer_bytes(a.type) for a in args if a.index in released}
    # a released argument written over by an output lives on as that output
    carried: dict[SSAValue, int] = {}
    for op in fn.body.blocks[0].ops:
        for result, base in zip(op.results, _buffers_of(op)):
            if base in size_of_arg:
                carried[result] = size_of_arg.pop(base)
    live = sum(size_of_arg.values()) + sum(carried.values())
    if drop_dead:
        live -= sum(size_of_arg.get(a, 0) for a in dead[fn])
    steps: list[Step] = []
    for op in fn.body.blocks[0].ops:
        if isinstance(op, func.ReturnOp):
            continue
        over = _buffers_of(op)
        sizes = [0 if base is not None else buffer_bytes(r.type, p, tile)
                 for r, p, base in zip(op.results, _producers(op), over)]
        allocated = sum(sizes)
        live += allocated
        step = Step(op, allocated, live, 0)
        if drop_dead:
            for value in dead[op]:
                step.dropped.append(value)
                owner = value.owner
                if not isinstance(owner, Operation):
                    step.freed += size_of_arg.get(value, 0)
                elif value in carried:
                    step.freed += carried[value]
                else:
                    j = list(owner.results).index(value)
                    if _buffers_of(owner)[j] is None:
                        step.freed += buffer_bytes(value.type, _producers(owner)[j], tile)
            live -= step.freed
        steps.append(step)
    return steps
