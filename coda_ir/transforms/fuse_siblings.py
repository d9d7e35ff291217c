"""`nn-fuse-siblings`: sibling linears that share an input become one GEMM (horizontal fusion).

Hugging Face models keep q/k/v and gate/up as separate nn.Linear weights. Two identities of the
algebra turn them into the packed forms the rest of the pipeline fuses:

* columns of a concatenation of products are a product with the concatenated weight rows:
  `concat_cols(x @ W_1.T, ..., x @ W_n.T) = x @ concat_rows(W_1, ..., W_n).T`, so
  `nn.concat{axis=1}` of `nn.linear(x, w_i)` (one x) is `nn.linear(x, nn.concat{axis=0}(w_i))`
  (the packed QKV projection);
* `silu(x @ Wg.T) * (x @ Wu.T)` is `nn.swiglu(x @ concat_rows(Wg, Wu).T)` (gate half first), and
  `gelu(...) * (...)` is `nn.geglu` with the same approximation: the gated pair that the GEMM
  epilogue fuses after interleaving.

A rewrite fires only when the pieces it removes have no other users (otherwise they would be
computed twice); it never changes a result. It runs before `nn-autodiff` (in
`coda_ir.torch.function`) so that the backward is derived from the packed form: one input
gradient GEMM instead of one per sibling plus the sums, one weight-gradient GEMM whose row blocks
are the siblings' gradients (`nn.slice`). Today the packed weight is a device copy per call
(`coda.concat` of the weights, bench/RESULTS.md says what it costs); GEMMs that read the pieces
in place are future work.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from coda_ir.dialects import nn


def _only_use_is(value: SSAValue, user: Operation) -> bool:
    return all(use.operation is user for use in value.uses) and len(list(value.uses)) == 1


def _packed_linear(x: SSAValue, weights: list[SSAValue], where: Operation) -> tuple[list[Operation], SSAValue]:
    packed = nn.ConcatOp(weights, 0)
    hints = [w.name_hint for w in weights]
    packed.result.name_hint = "_".join(hints) if all(hints) else None
    linear = nn.LinearOp(x, packed.result)
    linear.result.name_hint = where.results[0].name_hint
    for op in (packed, linear):
        op.location = where.location
    return [packed, linear], linear.result


class PackConcatOfLinears(RewritePattern):
    """`concat_cols(linear(x, w_i))` -> `linear(x, concat_rows(w_i))`."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.ConcatOp, rewriter: PatternRewriter) -> None:
        if op.axis.value.data != 1 or len(op.inputs) < 2:
            return
        linears = [v.owner for v in op.inputs]
        if not all(isinstance(lin, nn.LinearOp) for lin in linears):
            return
        x = linears[0].x  # type: ignore[union-attr]
        if any(lin.x is not x or not _only_use_is(lin.result, op) for lin in linears):  # type: ignore[union-attr]
            return
        if len({id(lin) for lin in linears}) != len(linears):  # the same linear twice
            return
        new_ops, result = _packed_linear(x, [lin.w for lin in linears], op)  # type: ignore[union-attr]
        rewriter.replace(op, new_ops, [result])
        for lin in linears:
            rewriter.erase(lin)


class GatedPairOfSiblings(RewritePattern):
    """`silu(linear(x, wg)) * linear(x, wu)` -> `swiglu(linear(x, concat_rows(wg, wu)))`
    (gelu -> geglu), in either operand order."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.MulOp, rewriter: PatternRewriter) -> None:
        for act_value, up_value in ((op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])):
            act = act_value.owner
            if not isinstance(act, (nn.SiluOp, nn.GeluOp)) or not _only_use_is(act.results[0], op):
                continue
            gate, up = act.operands[0].owner, up_value.owner
            if not (isinstance(gate, nn.LinearOp) and isinstance(up, nn.LinearOp)) or gate is up:
                continue
            if gate.x is not up.x or gate.w.type != up.w.type:
                continue
            if not (_only_use_is(gate.result, act) and _only_use_is(up.result, op)):
                continue
            new_ops, z = _packed_linear(gate.x, [gate.w, up.w], op)
            pair = nn.SwiGLUOp(z) if isinstance(act, nn.SiluOp) else nn.GeGLUOp(z, act.approximate.data)
            pair.location = op.location
            rewriter.replace(op, [*new_ops, pair], [pair.results[0]])
            for dead in (act, gate, up):
                rewriter.erase(dead)
            return


@dataclass(frozen=True)
class FuseSiblingsPass(ModulePass):
    """Pack sibling linears that share an input into one GEMM (see the module docstring)."""

    name = "nn-fuse-siblings"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([PackConcatOfLinears(), GatedPairOfSiblings()]), apply_recursively=True
        ).rewrite_module(op)
