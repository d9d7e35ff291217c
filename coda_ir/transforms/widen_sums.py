"""`coda-widen-summed-stores`: a kernel output that only a scatter-sum reads is stored in f32.

`coda.embedding_grad` sums the rows of `dy` that share an id (in fp32, in a fixed order) and
rounds the sum once. When `dy` is a kernel output (bf16/f16) whose every use is such a sum,
rounding each row before the sum throws away accuracy that costs nothing to keep: the row is
an fp32 tile in the kernel's epilogue anyway. Storing it in f32 makes the embedding gradient
one rounding of an fp32 sum of unrounded rows, instead of a rounding of a sum of rounded rows,
whose error grows with the number of repeated ids (the fuzzer's seed 368, a 1.7-ulp result
from two rows, tests/test_fuzz_numerics.py).

The cost is the width of that one tensor (M x D in f32 instead of bf16: 16 MB more per 4096
tokens of a 2048-wide model, read once). Outputs that anything else reads (another kernel, the
function's return) keep their type: every other consumer is written against the program's
element type, and changing its input would change its numerics contract.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import BFloat16Type, Float16Type, ModuleOp, TensorType, f32
from xdsl.ir import OpResult
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from coda_ir.dialects import coda


class WidenEmbeddingGradInput(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: coda.EmbeddingGradOp, rewriter: PatternRewriter) -> None:
        dy = op.dy
        ty = dy.type
        if not isinstance(dy, OpResult) or not isinstance(dy.op, (coda.ElementwiseOp, coda.GemmOp)):
            return  # a function argument or a library step's result: its type is not ours to choose
        if not isinstance(ty, TensorType) or not isinstance(ty.get_element_type(), (BFloat16Type, Float16Type)):
            return
        if not all(isinstance(use.operation, coda.EmbeddingGradOp) for use in dy.uses):
            return
        rewriter.replace_value_with_new_type(dy, TensorType(f32, ty.get_shape()))


@dataclass(frozen=True)
class WidenSummedStoresPass(ModulePass):
    """Store in f32 the kernel outputs that only `coda.embedding_grad` reads (see module doc)."""

    name = "coda-widen-summed-stores"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([WidenEmbeddingGradInput()]), apply_recursively=False
        ).rewrite_module(op)
