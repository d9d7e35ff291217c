"""`nn-fuse-siblings`: sibling linears that share an input become one GEMM (horizontal fusion).

Hugging Face models keep q/k/v and gate/up as separate nn.Linear weights. Two identities of the
algebra turn them into the packed forms the rest of the pipeline fuses:

* columns of a concatenation of products are a product with the concatenated weight rows:
  `concat_cols(x @ W_1.T, ..., x @ W_n.T) = x @ concat_rows(W_1, ..., W_n).T`, so
  `nn.concat{axis=1}` of `nn.linear(x, w_i)` (one x) is `nn.linear(x, nn.concat{axis=0}(w_i))`
  (the packed QKV projection); with a rank-1 bias added to every sibling (Qwen2's q/k/v),
  `concat_cols(x @ W_i.T + b_i) = x @ concat_rows(W_i).T + concat(b_i)`: the packed GEMM's bias
  is the concatenated biases, a column shift in its epilogue;
* `silu(x @ Wg.T) * (x @ Wu.T)` is `nn.swiglu(x @ concat_rows(Wg, Wu).T)` (gate half first), and
  `gelu(...) * (...)` is `nn.geglu` with the same approximation: the gated pair that the GEMM
  epilogue fuses after interleaving.
* a head norm of another head norm's output over the heads that follow it (Qwen3: the k-norm of
  the q-normed qkv), same head width, eps and offset, is one grouped `nn.head_rms_norm` with both
  weights (`weight_heads`): each head's statistic reads only its own columns, which the other
  norm passes through bit for bit, so the two are one pass over the tile (one epilogue, one
  backward kernel) computing each head once, where the chain computed both norms' arithmetic on
  every column and selected.

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


def _packed_linear(x: SSAValue, weights: list[SSAValue], where: Operation,
                   biases: list[SSAValue] | None = None) -> tuple[list[Operation], SSAValue]:
    """`linear(x, concat_rows(weights))`, plus `concat(biases)` as a rank-1 `nn.add` when given."""
    packed = nn.ConcatOp(weights, 0)
    hints = [w.name_hint for w in weights]
    packed.result.name_hint = "_".join(hints) if all(hints) else None
    linear = nn.LinearOp(x, packed.result)
    new_ops: list[Operation] = [packed, linear]
    result = linear.result
    if biases is not None:
        bias = nn.ConcatOp(biases, 0)
        hints = [b.name_hint for b in biases]
        bias.result.name_hint = "_".join(hints) if all(hints) else None
        shifted = nn.AddOp(linear.result, bias.result)
        new_ops += [bias, shifted]
        result = shifted.result
    result.name_hint = where.results[0].name_hint
    for op in new_ops:
        op.location = where.location
    return new_ops, result


@dataclass
class _Sibling:
    """A linear, with the rank-1 bias added to its result when there is one:
    `linear(x, w)` or `add(linear(x, w), b)` (Hugging Face's nn.Linear with a bias)."""

    linear: nn.LinearOp
    bias: SSAValue | None
    add: nn.AddOp | None

    @property
    def result(self) -> SSAValue:
        return (self.add or self.linear).results[0]

    def ops(self) -> list[Operation]:
        """The ops the packed form replaces, users first (the erase order)."""
        return [op for op in (self.add, self.linear) if op is not None]


def _sibling(value: SSAValue) -> _Sibling | None:
    owner = value.owner
    if isinstance(owner, nn.LinearOp):
        return _Sibling(owner, None, None)
    if isinstance(owner, nn.AddOp) and isinstance(owner.lhs.owner, nn.LinearOp) and len(owner.rhs.type.get_shape()) == 1:
        linear = owner.lhs.owner
        if _only_use_is(linear.result, owner):
            return _Sibling(linear, owner.rhs, owner)
    return None


def _pack(siblings: list[_Sibling], where: Operation) -> tuple[list[Operation], SSAValue] | None:
    """The packed linear of siblings sharing one x, all with a bias or none (else None)."""
    x = siblings[0].linear.x
    if any(s.linear.x is not x for s in siblings):
        return None
    with_bias = [s.bias is not None for s in siblings]
    if any(with_bias) and not all(with_bias):
        return None  # a zero bias for the others would be a new tensor: leave them apart
    biases = [s.bias for s in siblings] if all(with_bias) else None
    return _packed_linear(x, [s.linear.w for s in siblings], where, biases)  # type: ignore[list-item]


class PackConcatOfLinears(RewritePattern):
    """`concat_cols(linear(x, w_i) [+ b_i])` -> `linear(x, concat_rows(w_i)) [+ concat(b_i)]`."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.ConcatOp, rewriter: PatternRewriter) -> None:
        if op.axis.value.data != 1 or len(op.inputs) < 2:
            return
        siblings = [_sibling(v) for v in op.inputs]
        if any(s is None for s in siblings):
            return
        if any(not _only_use_is(s.result, op) for s in siblings):  # type: ignore[union-attr]
            return
        if len({id(s.linear) for s in siblings}) != len(siblings):  # type: ignore[union-attr]
            return  # the same linear twice
        packed = _pack(siblings, op)  # type: ignore[arg-type]
        if packed is None:
            return
        new_ops, result = packed
        rewriter.replace(op, new_ops, [result])
        for s in siblings:
            for dead in s.ops():  # type: ignore[union-attr]
                rewriter.erase(dead)


class GatedPairOfSiblings(RewritePattern):
    """`silu(linear(x, wg) [+ bg]) * (linear(x, wu) [+ bu])` -> `swiglu(linear(x, concat_rows(wg, wu))
    [+ concat(bg, bu)])` (gelu -> geglu with the same approximation), in either operand order."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.MulOp, rewriter: PatternRewriter) -> None:
        for act_value, up_value in ((op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])):
            act = act_value.owner
            if not isinstance(act, (nn.SiluOp, nn.GeluOp)) or not _only_use_is(act.results[0], op):
                continue
            gate, up = _sibling(act.operands[0]), _sibling(up_value)
            if gate is None or up is None or gate.linear is up.linear:
                continue
            if gate.linear.w.type != up.linear.w.type:
                continue
            if not (_only_use_is(gate.result, act) and _only_use_is(up.result, op)):
                continue
            packed = _pack([gate, up], op)
            if packed is None:
                continue
            new_ops, z = packed
            pair = nn.SwiGLUOp(z) if isinstance(act, nn.SiluOp) else nn.GeGLUOp(z, act.approximate.data)
            pair.location = op.location
            rewriter.replace(op, [*new_ops, pair], [pair.results[0]])
            rewriter.erase(act)
            for dead in (*gate.ops(), *up.ops()):
                rewriter.erase(dead)
            return


def _head_groups(norm: nn.HeadRMSNormOp) -> tuple[list[SSAValue], list[int], int]:
    groups = nn.head_weight_groups(norm)
    return [w for w, _, _ in groups], [h for _, _, h in groups], groups[0][1]


class GroupChainedHeadNorms(RewritePattern):
    """`head_rms_norm(head_rms_norm(x, w_a), w_b)` over adjacent head ranges (in either order),
    same head_dim, eps and offset, the inner one used only here -> one grouped head_rms_norm of x
    (weights in head order). Plans (`in_producer_epilogue`) are not yet made when this runs."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.HeadRMSNormOp, rewriter: PatternRewriter) -> None:
        inner = op.x.owner
        if not isinstance(inner, nn.HeadRMSNormOp) or not _only_use_is(inner.result, op):
            return
        if any(op.properties.get(name) != inner.properties.get(name) for name in ("head_dim", "eps", "offset")):
            return
        if any(name in norm.properties for norm in (op, inner) for name in nn.PLAN_PROPERTIES):
            return
        (w_in, h_in, f_in), (w_out, h_out, f_out) = _head_groups(inner), _head_groups(op)
        if f_in + sum(h_in) == f_out:
            weights, counts, first = [*w_in, *w_out], [*h_in, *h_out], f_in
        elif f_out + sum(h_out) == f_in:
            weights, counts, first = [*w_out, *w_in], [*h_out, *h_in], f_out
        else:
            return  # not adjacent: a grouped op covers one run of heads
        grouped = nn.HeadRMSNormOp.grouped(inner.x, weights, counts, op.head_dim.value.data, op.eps,
                                           first_head=first, offset=nn.norm_offset(op))
        grouped.location = op.location
        rewriter.replace(op, [grouped], [grouped.result])
        rewriter.erase(inner)


@dataclass(frozen=True)
class FuseSiblingsPass(ModulePass):
    """Pack sibling linears that share an input into one GEMM (see the module docstring)."""

    name = "nn-fuse-siblings"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([PackConcatOfLinears(), GatedPairOfSiblings(), GroupChainedHeadNorms()]), apply_recursively=True
        ).rewrite_module(op)
