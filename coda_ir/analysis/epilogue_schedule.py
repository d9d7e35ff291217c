"""The emission order of an epilogue region (gemm or elementwise): `epilogue_schedule`.

A pure function of the coda region, obeyed by the Triton lowering's epilogue driver
(`lowering/tl_epilogue.py`, for elementwise kernels, gemm epilogues and Gluon epilogue
partitions alike): the same IR gives the same steps. Every primitive is pure and each result
has its own output, so only how many [BM, BN] tiles are live at once changes with the order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.ir import Block, Operation, SSAValue

from coda_ir.dialects import coda


@dataclass(frozen=True)
class EpilogueStep:
    """One step of an epilogue's emission order (`epilogue_schedule`): `op` makes its results
    `results` (indices) here, and each of them is stored right after if the region yields it.

    Every op but a multi-output `coda.map` is one step that makes all its results. A multi-output
    map may be split into one step per group of outputs; `body` then lists the map's scalar ops
    this step emits (in body order): those its outputs need that no earlier step of the map
    emitted, and on the map's last step every op still left (so that nothing in the body is
    dropped). `body` is None for a step that makes the whole op.
    """

    op: Operation
    results: tuple[int, ...]
    body: tuple[Operation, ...] | None = None


def _only_yielded(op: Operation) -> bool:
    return all(isinstance(u.operation, coda.YieldOp) for r in op.results for u in r.uses)


def partials_after_last_use(ops: list[Operation]) -> list[Operation]:
    """Program order, except that a partial reduction (`coda.reduce`, `coda.select`) whose tile is
    still used by a later tile op is emitted right after that last use: the reduction then
    consumes its tile as it dies instead of running while the tile must stay live (its masked
    copy and the reduction's temporaries beside it; the LLaMA out-proj epilogue compiled for
    sm_90a: 824 -> 328 bytes of stack)."""
    partial_ops = (coda.ReduceOp, coda.SelectOp)
    after: dict[int, list[Operation]] = {}
    order: list[Operation] = []
    for i, op in enumerate(ops):
        if isinstance(op, partial_ops) and _only_yielded(op):
            tile = op.operands[0]
            later = [j for j in range(i + 1, len(ops)) if not isinstance(ops[j], partial_ops) and tile in ops[j].operands]
            if later:
                after.setdefault(max(later), []).append(op)
                continue
        order.append(op)
        order.extend(after.pop(i, []))
    assert not after
    return order


def _deferred_outputs(ops: list[Operation]) -> set[SSAValue]:
    """Outputs of multi-output `coda.map`s made at their first reader instead of at the map:
    those the region does not yield (a yielded output is stored at the map) and some op reads.
    A map coda-legalize marked `coda.pair_halves` is made whole (once per pair half, by
    `emit_halves`), never split per output."""
    deferred: set[SSAValue] = set()
    for op in ops:
        if isinstance(op, coda.MapOp) and len(op.outputs) > 1 and coda.pair_halves_stride(op) is None:
            for r in op.outputs:
                if r.uses and not any(isinstance(u.operation, coda.YieldOp) for u in r.uses):
                    deferred.add(r)
    return deferred


def _body_needs(map_op: coda.MapOp, indices: Sequence[int]) -> set[Operation]:
    """The scalar ops of the map's body that the yielded values `indices` depend on."""
    block = map_op.body.blocks[0]
    term = block.last_op
    assert isinstance(term, coda.YieldOp)
    need: set[Operation] = set()
    stack = [term.values[i] for i in indices]
    while stack:
        v = stack.pop()
        owner = v.owner
        if isinstance(owner, Operation) and owner.parent_block() is block and owner not in need:
            need.add(owner)
            stack.extend(owner.operands)
    return need


def epilogue_schedule(block: Block) -> list[EpilogueStep]:
    """The region's ops (without the yield) as emission steps.

    Every primitive is pure and each result has its own output, so the stored values are the
    same in any order that respects the dataflow; only how many [BM, BN] tiles are live at once
    (registers, spills) changes. The order:

    1. Program order, with partial reductions after the last tile use of their input
       (`partials_after_last_use`).
    2. A multi-output `coda.map` makes each output the region does not yield at its first
       reader, not all outputs at the map: its scalar ops for that output run there, so a value
       needed only late (e.g. the RMSNorm backward's `acc * (x * rstd)`, only reduced into the
       weight gradient's column partials) is not live across the stores before it. Outputs the
       region yields (and unused ones) are made at the map and stored right after it.
    3. A column partial (`coda.reduce ... dim 0`, only yielded) whose tile is such a deferred map
       output, read by nothing but column partials, runs after every other op, i.e. after the
       stores it does not feed, with that output made just before it. A column reduction combines
       values across warps (shared memory and barriers); run last, nothing else is live across
       it. Moving it alone, with its tile made at the map, keeps the tile live instead
       (session 8's columns-last schedule: spills down, time mixed; with the output deferred as
       here, the RMSNorm-backward kernels ran 1-9% faster on an H100: bench/RESULTS.md
       2026-11-25 sessions 8 and 9), so other column partials stay at step 1's place.

    A pure function of the region: the same IR gives the same steps.
    """
    ops = [op for op in block.ops if not isinstance(op, coda.YieldOp)]
    order = partials_after_last_use(ops)
    deferred = _deferred_outputs(ops)

    def column_partial(op: Operation) -> bool:
        return isinstance(op, coda.ReduceOp) and op.dim.value.data == 0 and _only_yielded(op)

    last = [
        op for op in order
        if column_partial(op) and op.tile in deferred and all(column_partial(u.operation) for u in op.tile.uses)
    ]
    if last:
        order = [op for op in order if op not in last] + last

    steps: list[EpilogueStep] = []
    made: set[SSAValue] = set()  # deferred outputs already made
    emitted: dict[Operation, set[Operation]] = {}  # split map -> its body ops emitted so far
    done: dict[Operation, set[int]] = {}  # split map -> its outputs made so far

    def map_step(op: coda.MapOp, indices: list[int]) -> None:
        indices = sorted(indices)
        body = op.body.blocks[0]
        done.setdefault(op, set()).update(indices)
        if len(done[op]) == len(op.outputs) and op not in emitted:
            steps.append(EpilogueStep(op, tuple(indices)))  # not split: the whole map at once
            return
        have = emitted.setdefault(op, set())
        need = _body_needs(op, indices) if len(done[op]) < len(op.outputs) else set(body.ops)
        picked = tuple(o for o in body.ops if o in need and o not in have and not isinstance(o, coda.YieldOp))
        have.update(picked)
        steps.append(EpilogueStep(op, tuple(indices), picked))

    def make(values: Sequence[SSAValue]) -> None:
        """Make the deferred map outputs among `values` (grouped per map, in first-read order)."""
        groups: dict[Operation, list[int]] = {}
        for v in values:
            if v in deferred and v not in made:
                made.add(v)
                groups.setdefault(v.owner, []).append(v.index)  # type: ignore[union-attr]
        for owner, indices in groups.items():
            assert isinstance(owner, coda.MapOp)
            make(owner.inputs)
            map_step(owner, indices)

    for op in order:
        if isinstance(op, coda.MapOp) and len(op.outputs) > 1:
            now = [i for i, r in enumerate(op.outputs) if r not in deferred]
            if now:
                make(op.inputs)
                map_step(op, now)
            continue
        make(op.operands)
        steps.append(EpilogueStep(op, tuple(range(len(op.results)))))
    assert made == deferred  # every deferred output has a reader in `order`
    return steps
