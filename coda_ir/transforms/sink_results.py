"""`coda-sink-results`: a kernel whose outputs are only returned runs as late as its operands allow,
so its outputs do not sit in memory while other kernels run.

Why: a backward computes each weight gradient next to its activation gradient (`nn-autodiff`:
dX, then dW), but dW is a result, held to the end, while dX's consumers run on. In the derived
LLaMA block the down projection's dWd ([D, F]: 112 MiB at the 8B shape) was allocated before
the SwiGLU backward's dz ([M, 2F], 448 MiB) lived its life; moving dWd after the last reader of
its operand dh (the gate/up dgrad) lowers the backward's peak by dWd's bytes
(`coda_ir.analysis.liveness.timeline`; bench/RESULTS.md session 9).

Per function, from the first kernel down: a top-level kernel K (not in a launch group) all of whose
results only `func.return` reads moves to just after P, the last other top-level reader (or the
definer) of its non-argument operands, when P is after K. Moving K keeps SSA dominance (its
operands are defined at or before P; only the return reads K) and the program's values
(kernels are pure functions of their tensors). K's outputs stop being live from K's old place
to P, but an operand whose last use was K now lives until P, and K's outputs meet P's; so the
move is kept only when the memory timeline of the function (`liveness.timeline`: buffers dropped
at last use, as the host does) has a lower peak with it, and stated in an informational remark.

Option `enabled=false` keeps the order.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, BlockArgument, Operation
from xdsl.passes import ModulePass

from coda_ir.dialects import coda
from coda_ir.analysis.liveness import timeline
from coda_ir.remarks import emit_remark


def _top(op: Operation, block: Block) -> Operation | None:
    while op is not None and op.parent_block() is not block:
        op = op.parent_op()  # type: ignore[assignment]
    return op


def _result_only(k: Operation) -> bool:
    """A kernel whose results only the function's return reads."""
    return isinstance(k, coda.KERNEL_OPS) and bool(k.results) and all(
        isinstance(u.operation, func.ReturnOp) for r in k.results for u in r.uses)


def _peak(fn: func.FuncOp) -> int:
    # memory above the arguments, owned ones included (`released=()`): whether dropping an
    # argument frees it depends on who else holds it, which the function cannot know; counting
    # every owned argument as freed misled the moves (the derived LLaMA block's backward owned
    # by coda_ir.torch kept dWd beside dz: 1421 / 1409 MiB measured vs 1393 / 1301 modelled for
    # the order chosen this way, bench/RESULTS.md session 10), and the order no longer depends
    # on the calling convention
    return max((step.live for step in timeline(fn, released=())), default=0)


def sink_results(fn: func.FuncOp) -> list[tuple[Operation, Operation, int, int]]:
    """Move `fn`'s result-only kernels down (module docstring); returns (kernel, placed after,
    peak bytes before, after) per move."""
    if not fn.body.blocks:
        return []
    block = fn.body.blocks[0]
    moves = []
    # first kernel first: a weight gradient computed early is live the longest (in the LLaMA
    # backward, moving dWd first leaves dWgu where it is; the other way round both move, with a
    # higher peak)
    for k in [op for op in block.ops if _result_only(op)]:
        ops = list(block.ops)
        pos = {op: i for i, op in enumerate(ops)}
        here = last = pos[k]
        for v in set(k.operands):
            if isinstance(v, BlockArgument):
                continue
            owner = v.owner
            assert isinstance(owner, Operation)
            # the return keeps a returned operand alive to the end anyway
            readers = [pos[t] for u in v.uses
                       if (t := _top(u.operation, block)) is not None and t is not k and not isinstance(t, func.ReturnOp)]
            last = max(last, pos[_top(owner, block)], *readers)
        if last <= here or all(_result_only(op) for op in ops[here + 1 : last + 1]):
            continue  # nothing it would stop overlapping allocates: keep the order
        before = _peak(fn)
        k.detach()
        block.insert_op_after(k, ops[last])
        after = _peak(fn)
        if after < before:
            moves.append((k, ops[last], before, after))
        else:  # the model finds no lower peak: back where it was
            k.detach()
            block.insert_op_before(k, ops[here + 1])
    return moves


@dataclass(frozen=True)
class SinkResultsPass(ModulePass):
    """Run kernels whose outputs are only returned (weight gradients) as late as their operands
    allow (module docstring)."""

    name = "coda-sink-results"

    enabled: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not self.enabled:
            return
        for fn in [f for f in op.body.block.ops if isinstance(f, func.FuncOp)]:
            for k, after, before, peak in sink_results(fn):
                origin = after.attributes.get("coda.origin")
                what = origin.data if origin is not None else after.name  # type: ignore[union-attr]
                emit_remark(k, f"runs after '{what}': its results are only returned; the function's peak of live "
                               f"buffers (coda_ir.analysis.liveness) {before / 2**20:.1f} -> {peak / 2**20:.1f} MiB",
                            informational=True)
