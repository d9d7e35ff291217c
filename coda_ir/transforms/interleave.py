"""`coda-interleave`: make paired columns adjacent by interleaving a gemm's output columns.

A gated activation fused into its producer is `coda.pair_map stride F` on the 2F-wide
accumulator: column j pairs with j + F, never in one tile. With `interleave F` on the gemm,
accumulator column `c = 2i + j` (within each group of 2F) holds weight row `i + j * F`, so
the pair becomes (2i, 2i + 1): `coda.pair_map stride 1`, THREAD-local on every MMA layout.
The user's weight stays in its own layout: the lowering applies the permutation through the
B-tile load addresses (a gather, or two half-width B tiles / a paired TMA box), and every
N-wide access of the epilogue (matrix loads and stores, column vectors, `coda.index cols`,
`coda.select`, column partials) uses the user's column `perm(c)`. The narrow (F-wide) result
of a 2 -> 1 pair_map is unchanged: pair i is column i either way.

RoPE "half" (pairs (i, i + hd/2) in each head) is interleaved by hd/2 only when the stride
form cannot be proven tile-local (a head_dim that is not a power of two: no BN holds whole
heads); with a power-of-two head_dim the stride form with `BN % hd == 0` is kept.

A partial half-style RoPE (`coda.pair_map stride s period P`: pairs (i, i + s) in the first 2s
columns of each P, the rest adjacent, Phi-4-mini's 96 of 128) is never interleaved: it reads
the columns in their natural order, exchanging pairs inside a tile that holds whole periods.

The rewrite is refused (`interleave_plan` says why) when another pair_map on the same columns
pairs them differently, or a segment reduction's width is not a multiple of the group 2h.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from coda_ir.dialects import coda
from coda_ir.dialects.coda import TileType
from coda_ir.transforms.legality import prove_kernel


@dataclass
class InterleavePlan:
    half: int | None
    pair_maps: list[coda.PairMapOp]
    reason: str = ""
    wide: bool = False
    """`interleave_wide`: the pairs live in the 2N-wide column space (a 1 -> 2 pair map over an
    N = F accumulator, as a gated activation's backward), not in the accumulator's own columns."""

    @property
    def gated(self) -> bool:
        """Whether a 2 -> 1 (gated) pair_map is among those interleaved."""
        return any(
            min(v.type.cols for v in op.outputs) < max(v.type.cols for v in op.inputs)  # type: ignore[attr-defined]
            for op in self.pair_maps
        )


def _n_wide(value, n: int) -> bool:
    return isinstance(value.type, TileType) and value.type.cols == n


def interleave_plan(gemm: coda.GemmOp) -> InterleavePlan:
    """Which stride the gemm's pair_maps need interleaved, or why that is not possible."""
    _, n, _ = gemm.problem_shape()
    block = gemm.epilogue.blocks[0]
    strided = [
        op for op in block.ops
        if isinstance(op, coda.PairMapOp) and op.stride.value.data > 1 and op.period is None
        and any(_n_wide(v, n) or _n_wide(v, 2 * n) for v in [*op.inputs, *op.outputs])
    ]
    if not strided:
        periodic = [op for op in block.ops if isinstance(op, coda.PairMapOp) and op.period is not None]
        if periodic:
            return InterleavePlan(None, [], f"a pair_map with a period ({periodic[0].group()}: pairs (c, c + "
                                            f"{periodic[0].stride.value.data}) in the first columns of each, the rest "
                                            "adjacent) is never interleaved")
        return InterleavePlan(None, [], "no pair_map on the accumulator's columns needs a stride")
    strides = {op.stride.value.data for op in strided}
    if len(strides) > 1:
        return InterleavePlan(None, [], f"pair_maps of different strides {sorted(strides)} on the same columns")
    half = strides.pop()
    if half == n and all(any(_n_wide(v, 2 * n) for v in [*op.inputs, *op.outputs]) for op in strided):
        # 1 -> 2 over the accumulator (gated backward): pair (j, j + F) of the 2N-wide tensors
        # becomes (2j, 2j + 1) when those tensors are accessed at the interleaved columns
        if gemm.interleave is not None or (gemm.interleave_wide is not None and gemm.interleave_wide.value.data != half):
            return InterleavePlan(None, [], "the gemm is already interleaved differently")
        for op in block.ops:
            if isinstance(op, coda.SegmentReduceOp) and any(_n_wide(v, 2 * n) for v in op.operands):
                return InterleavePlan(None, [], "a segment reduction over the 2N-wide columns would mix interleaved groups")
            if isinstance(op, coda.PairMapOp) and op not in strided and any(_n_wide(v, 2 * n) for v in [*op.inputs, *op.outputs]):
                return InterleavePlan(None, [], "another pair_map pairs the 2N-wide columns differently")
        return InterleavePlan(half, strided, wide=True)
    if gemm.interleave is not None and gemm.interleave.value.data != half:
        return InterleavePlan(None, [], f"the gemm is already interleaved by {gemm.interleave.value.data}")
    if n % (2 * half):
        return InterleavePlan(None, [], f"N = {n} is not a multiple of 2 x {half}")
    for op in block.ops:
        touches = any(_n_wide(v, n) for v in [*op.operands, *op.results])
        if not touches:
            continue
        if isinstance(op, coda.SegmentReduceOp) and op.width.value.data % (2 * half):
            return InterleavePlan(
                None, [], f"'coda.segment_reduce' width {op.width.value.data} would mix interleaved groups of {2 * half}"
            )
        if isinstance(op, coda.PairMapOp) and op not in strided:
            return InterleavePlan(None, [], "another pair_map pairs the same columns differently")
    return InterleavePlan(half, strided)


def apply_interleave(gemm: coda.GemmOp, plan: InterleavePlan) -> None:
    assert plan.half is not None
    gemm.properties["interleave_wide" if plan.wide else "interleave"] = IntegerAttr(plan.half, i64)
    for op in plan.pair_maps:
        op.properties["stride"] = IntegerAttr(1, i64)


class InterleaveGemm(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: coda.GemmOp, rewriter: PatternRewriter) -> None:
        plan = interleave_plan(op)
        if plan.half is None:
            return
        if not plan.gated and not plan.wide and prove_kernel(op).ok:
            return  # e.g. RoPE with whole heads per tile: the stride form is already tile-local
        apply_interleave(op, plan)
        for pm in plan.pair_maps:
            rewriter.notify_op_modified(pm)
        rewriter.notify_op_modified(op)


@dataclass(frozen=True)
class InterleavePass(ModulePass):
    """Set `interleave h` on gemms whose epilogue pairs columns h apart (swiglu, geglu)."""

    name = "coda-interleave"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([InterleaveGemm()], dce_enabled=False), apply_recursively=False
        ).rewrite_module(op)
