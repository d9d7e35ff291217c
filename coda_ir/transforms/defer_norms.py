"""`coda-defer-norms`: move RMSNorm / LayerNorm row scales across the GEMMs that consume them.

For a row x with `r = rsqrt(mean(x^2) + eps)`: `rms_norm(x, g) @ W.T = r * ((x * g) @ W.T)`.
So instead of normalising x before the GEMM we compute

* the statistics as per-tile partials (`coda.reduce sumsq`) in an elementwise kernel over x,
  folded by a small row kernel (`coda.fold` -> rstd per row);
* the pre-scaled input `h' = x * g` (an elementwise kernel over x);
* the GEMM on `h'`, whose epilogue scales the accumulator by `r[m]` (`coda.scale rows`).

The two elementwise kernels over x are then absorbed by `coda-fuse` into the epilogue of the
GEMM that produces x (partials + an extra output): no standalone norm kernel touches [M, D]
when a GEMM does (when none does, see below).

LayerNorm: `layer_norm(x, g, b) @ W.T = r * ((x * g) @ W.T) - (r * mu) * c + e` with the
column vectors `c = g @ W.T` and `e = b @ W.T`. The statistics are partial sums of x and x^2
(one fold gives r and r * mu); c and e are computed once per weight by a GEMV: one
`coda.elementwise whole rows` kernel over W whose programs walk whole rows of W in a fixed
order, completing both reductions (`sum_k W[n, k] g[k]`, `sum_k W[n, k] b[k]`) in the kernel
(1 small kernel per weight, independent of the tokens: `coda-group-launches` can share its
launch with another small kernel).

When no GEMM produces x (a function argument, the first layer, an embedding's output), there is
no epilogue to carry the partials: ONE `coda.elementwise whole rows` kernel over x then walks
each row block's column tiles in order, so sum(x^2) (LayerNorm: also sum(x)) completes in the
program (no partials, no fold), and writes `h' = x * g`; the consuming GEMMs map the completed
sums to rstd (LayerNorm: rstd and rstd * mean, then the same c / e column vectors) in their
epilogues. One launch before the GEMM for any D (was statistics + fold + apply, 3, where no
power-of-two tile holds a row). The rstd map reads only the row broadcast, so Triton's broadcast
reordering runs it once per row rather than per accumulator element. This rounds `x * g`, not
the normalized value as the op-by-op program does: an independent rounding of the same size
(a scalar loss downstream is then checked with NN_DIALECT.md's 0-d term).
A LayerNorm whose row fits one tile (`row_kernel_fits`) keeps its two-pass row kernel instead
(mean, then the variance of x - mean): the whole-row statistics are one-pass moments
(E[x^2] - mean^2, as the GEMM-epilogue statistics are), which cancel when |mean| >> std, and
the row kernel is one launch too. (Where no tile holds a row, the alternative's statistics are
the same one-pass moments.)
Option `whole-rows-stats=false` leaves such a norm to `convert-nn-to-coda` instead (one row
kernel when the row fits one tile, else statistics + fold + apply), with a remark.

A norm is deferred for each of its users that is the activation operand of an `nn.linear` /
`nn.matmul`; when it has other users too, the `nn` op stays for them (lowered by
`convert-nn-to-coda`). A norm with no GEMM user is left alone, with a remark.

A training step's forward also saves the norm's statistics for the backward
(`nn.rms_norm_rstd` / `nn.layer_norm_stats` of the same x and eps): when the norm is deferred,
those ops take their values from the deferral's statistics fold (rstd; the LayerNorm fold then
also yields the mean) instead of a second pass over x; with whole-row statistics, from a fold
of no partials that maps the completed sums.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType, f32
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
from coda_ir.dialects.coda import Axis, ReduceKind
from coda_ir import remarks
from coda_ir.transforms.kernel_builder import Epilogue, elementwise, elt_of, fold, gemm, shape_of
from coda_ir.transforms.lower_nn import (
    ln_moments,
    ln_stats,
    prop_value,
    rms_stats,
    row_kernel_fits,
    scale_by_norm_weight,
    stamp_origin,
)


ELEMENTWISE_NN = (nn.AddOp, nn.MulOp, nn.SiluOp, nn.ReluOp, nn.GeluOp, nn.ScaleOp, nn.SoftcapOp)


def gemm_produced(value: SSAValue, depth: int = 4) -> bool:
    """Whether `value` comes out of a GEMM epilogue once fused: an nn.linear / nn.matmul, or
    elementwise ops over one (residual adds, biases, activations)."""
    owner = value.owner
    if isinstance(owner, (nn.LinearOp, nn.MatmulOp)):
        return True
    if depth > 0 and isinstance(owner, ELEMENTWISE_NN):
        return any(gemm_produced(v, depth - 1) for v in owner.operands if len(shape_of(v)) == 2)
    return False


def _saved_stats(norm: Operation) -> list[Operation]:
    """The nn.rms_norm_rstd (nn.layer_norm_stats) ops of the same x and eps as `norm`."""
    kind = nn.LayerNormStatsOp if isinstance(norm, nn.LayerNormOp) else nn.RMSNormRstdOp
    eps = norm.properties["eps"]
    return [use.operation for use in norm.x.uses
            if isinstance(use.operation, kind) and use.operation.properties["eps"] == eps]


def gemm_consumes(value: SSAValue) -> bool:
    """Whether an nn.linear / nn.matmul reads `value` as its left operand (its row scale can
    then move into that GEMM's epilogue)."""
    return bool(_gemm_users(value))


def _gemm_users(value: SSAValue) -> list[Operation]:
    users = []
    for use in value.uses:
        op = use.operation
        if isinstance(op, (nn.LinearOp, nn.MatmulOp)) and use.index == 0:
            if op not in users:
                users.append(op)
    return users


def ln_column_vectors(norm: nn.LayerNormOp, w: SSAValue, transposed: bool) -> list[Operation]:
    """`c = g @ W.T`, `e = b @ W.T` (per output column n) as one GEMV kernel: a `whole rows`
    elementwise kernel over W (`whole cols` over an nn.matmul operand) whose programs walk
    their rows' tiles in order, so both reductions complete in the kernel (no fold)."""
    g, b = norm.w, norm.b
    if transposed:  # nn.linear weight [N, D]: reduce each row of W
        n, d = shape_of(w)

        def build(e: Epilogue, wt, gv, bv):
            t = e.load(wt)
            return [e.reduce(ReduceKind.SUM, e.scale(t, gv, Axis.COLS), 1),
                    e.reduce(ReduceKind.SUM, e.scale(t, bv, Axis.COLS), 1)]

        gemv = elementwise((n, d), [w, g, b], build, [None, None], whole=Axis.ROWS)
    else:  # nn.matmul operand [D, N]: reduce each column
        d, n = shape_of(w)

        def build(e: Epilogue, wt, gv, bv):
            t = e.load(wt)
            return [e.reduce(ReduceKind.SUM, e.scale(t, gv, Axis.ROWS), 0),
                    e.reduce(ReduceKind.SUM, e.scale(t, bv, Axis.ROWS), 0)]

        gemv = elementwise((d, n), [w, g, b], build, [None, None], whole=Axis.COLS)
    return [stamp_origin(gemv, norm, "colvec")]


class DeferNorm(RewritePattern):
    def __init__(self, remarks_as_errors: bool = False, whole_rows: bool = True):
        self.remarks_as_errors = remarks_as_errors
        self.whole_rows = whole_rows
        self.reported: set[int] = set()

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.RMSNormOp | nn.LayerNormOp, rewriter: PatternRewriter) -> None:
        users = _gemm_users(op.results[0])
        if not users:
            if id(op) not in self.reported:
                self.reported.add(id(op))
                kinds = sorted({use.operation.name for use in op.results[0].uses}) or ["nothing"]
                remarks.emit_remark(
                    op,
                    f"row scale not deferred: no GEMM consumes the normalized value (used by {', '.join(kinds)}); "
                    "it runs as a standalone norm",
                    as_error=self.remarks_as_errors,
                )
            return
        if nn.planned(op, "stats_in_producer_epilogue") is False and not gemm_produced(op.x):
            # recorded by nn-plan or nn-autodiff (a chunked LM head recomputes its logits from this
            # norm's rounded output, so the forward's logits must come from that same h): the norm
            # is applied, not deferred
            return
        x, g = op.x, op.w
        if not gemm_produced(x):
            # a LayerNorm whose row fits one tile keeps its two-pass row kernel (mean, then the
            # variance of x - mean, in registers): the whole-row statistics are one-pass
            # moments, E[x^2] - mean^2, which cancel when |mean| >> std (an input offset by 10
            # already misses the bar); one launch before the GEMM either way
            two_pass = isinstance(op, nn.LayerNormOp) and row_kernel_fits(shape_of(x)[1])
            if self.whole_rows and not two_pass:
                self.defer_whole_rows(op, users, rewriter)
                return
            if id(op) not in self.reported:
                self.reported.add(id(op))
                how = (
                    "one row kernel normalizes it (mean, then the variance of x - mean: more accurate than one-pass "
                    "statistics when |mean| >> std, and as few launches)"
                    if two_pass
                    else "one row kernel normalizes it (cheaper than statistics + fold + pre-scale kernels)"
                    if row_kernel_fits(shape_of(x)[1])
                    else "standalone kernels normalize it (rounding h like the op-by-op program does)"
                )
                remarks.emit_remark(
                    op, f"row scale not deferred: no GEMM produces the input to carry the statistics, so {how}",
                    as_error=False,
                )
            return
        if nn.planned(op, "stats_in_producer_epilogue") is False:
            return  # nn-plan chose a row kernel (and said why)
        eps = prop_value(op, "eps")
        is_ln = isinstance(op, nn.LayerNormOp)
        saved = _saved_stats(op)
        stats_ops: list[Operation] = list(ln_stats(op, x, eps, with_mean=bool(saved)) if is_ln else rms_stats(op, x, eps))
        stats = stats_ops[-1]
        rstd = stats.results[0]
        scaled = elementwise(
            shape_of(x), [x, g], lambda e, xt, gv: [scale_by_norm_weight(e, e.load(xt), gv, nn.norm_offset(op))], [elt_of(x)]
        )
        # the statistics go before the first op that needs them (a saved-stats op may come
        # before the norm); they read x only, which dominates both
        block = op.parent_block()
        assert block is not None
        first = min([op, *saved], key=block.get_operation_index)
        rewriter.insert(stats_ops, _before(first))
        rewriter.insert([stamp_origin(scaled, op, "prescale")], _before(op))
        for user in saved:
            values = [stats.results[3], stats.results[0]] if is_ln else [stats.results[0]]
            rewriter.replace(user, [], values)
        for user in users:
            transposed = isinstance(user, nn.LinearOp)
            w = user.operands[1]
            before: list[Operation] = []
            if is_ln:
                before = ln_column_vectors(op, w, transposed)
                c, e_vec = before[-1].results
                rmu = stats.results[2]

                def build(e: Epilogue, acc, r, rm, cv, ev):
                    t = e.scale(acc, r, Axis.ROWS)
                    t = e.map1(
                        [t, e.broadcast(rm, Axis.ROWS, t), e.broadcast(cv, Axis.COLS, t)],
                        lambda s, a, p, q: s.sub(a, s.mul(p, q)),
                    )
                    return [e.shift(t, ev, Axis.COLS)]

                ins = [rstd, rmu, c, e_vec]
            else:
                def build(e: Epilogue, acc, r):
                    return [e.scale(acc, r, Axis.ROWS)]

                ins = [rstd]
            k = gemm(scaled.results[0], w, ins, build, [elt_of(user.results[0])], transpose_b=transposed)
            _replace_consumer(user, before, k, rewriter)
        _drop_if_unused(op, rewriter)

    def defer_whole_rows(self, op: nn.RMSNormOp | nn.LayerNormOp, users: list[Operation], rewriter: PatternRewriter) -> None:
        """No GEMM produces x to carry the statistics' partials: one `whole rows` kernel over x
        completes the row sums itself (no fold) and writes the pre-scaled `h' = x * g`; each
        consuming GEMM turns the sums into the row scale in its epilogue. One launch before the
        GEMM for any D, instead of statistics + fold + apply (or a row kernel for D = 2^k)."""
        x, g = op.x, op.w
        m, d = shape_of(x)
        eps = prop_value(op, "eps")
        is_ln = isinstance(op, nn.LayerNormOp)

        def build(e: Epilogue, xt, gv):
            t = e.load(xt)
            sums = [e.reduce(ReduceKind.SUM, t, 1)] if is_ln else []
            return [scale_by_norm_weight(e, t, gv, nn.norm_offset(op)), *sums, e.reduce(ReduceKind.SUMSQ, t, 1)]

        stats = elementwise((m, d), [x, g], build, [elt_of(x), *([None] if is_ln else []), None], whole=Axis.ROWS)
        stamp_origin(stats, op, "stats")
        scaled, sums = stats.results[0], list(stats.results[1:])
        saved = _saved_stats(op)
        block = op.parent_block()
        assert block is not None
        first = min([op, *saved], key=block.get_operation_index)
        rewriter.insert([stats], _before(first))
        for user in saved:
            # the backward's saved statistics: a fold of no partials maps the completed sums
            # (mean, rstd) as a standalone norm's statistics would give them
            vec = TensorType(f32, [m])
            if is_ln:
                k = fold([], sums, [vec, vec], lambda s, sm, ss: list(ln_moments(s, sm, ss, d, eps)))
            else:
                k = fold([], sums, [vec], lambda s, ss: s.rsqrt(s.add(s.mul(ss, s.const(1.0 / d)), s.const(eps))))
            stamp_origin(k, user, "fold")
            rewriter.replace(user, [k], list(k.results))
        for user in users:
            transposed = isinstance(user, nn.LinearOp)
            w = user.operands[1]
            before: list[Operation] = []
            if is_ln:
                before = ln_column_vectors(op, w, transposed)
                c, e_vec = before[-1].results

                def build_ln(e: Epilogue, acc, sm, ss, cv, ev):
                    # (rstd, rstd * mean) from row broadcasts alone: Triton's broadcast
                    # reordering then computes them once per row, not per element
                    r, rmu = e.map([e.broadcast(sm, Axis.ROWS, acc), e.broadcast(ss, Axis.ROWS, acc)],
                                   lambda s, p, q: (lambda mu, r: [r, s.mul(r, mu)])(*ln_moments(s, p, q, d, eps)),
                                   n_out=2)
                    t = e.map1([acc, r, rmu, e.broadcast(cv, Axis.COLS, acc)],
                               lambda s, a, rr, rm, cc: s.sub(s.mul(a, rr), s.mul(rm, cc)))
                    return [e.shift(t, ev, Axis.COLS)]

                k = gemm(scaled, w, [*sums, c, e_vec], build_ln, [elt_of(user.results[0])], transpose_b=transposed)
            else:
                def build_rms(e: Epilogue, acc, ss):
                    # rstd from the row broadcast alone (once per row after Triton's broadcast
                    # reordering), then the row scale
                    r = e.map1([e.broadcast(ss, Axis.ROWS, acc)],
                               lambda s, q: s.rsqrt(s.add(s.mul(q, s.const(1.0 / d)), s.const(eps))))
                    return [e.map1([acc, r], lambda s, a, rr: s.mul(a, rr))]

                k = gemm(scaled, w, sums, build_rms, [elt_of(user.results[0])], transpose_b=transposed)
            _replace_consumer(user, before, k, rewriter)
        _drop_if_unused(op, rewriter)


def _replace_consumer(user: Operation, before: list[Operation], kernel: Operation, rewriter: PatternRewriter) -> None:
    """Put `kernel` (the consuming GEMM with the row scale in its epilogue) where `user` was,
    keeping its provenance and location for diagnostics."""
    stamp_origin(kernel, user)
    kernel.location = user.location
    rewriter.replace(user, [*before, kernel], [kernel.results[0]])


def _drop_if_unused(norm: Operation, rewriter: PatternRewriter) -> None:
    """Erase the norm once every consumer carries its row scale; a norm something else still
    reads (a non-GEMM user, the function's return) stays."""
    if not norm.results[0].uses:
        rewriter.erase(norm)
    else:
        rewriter.notify_op_modified(norm)


def _before(op: Operation):
    from xdsl.rewriter import InsertPoint

    return InsertPoint.before(op)


@dataclass(frozen=True)
class DeferNormsPass(ModulePass):
    """Defer RMSNorm / LayerNorm row scales into the consuming GEMMs' epilogues (an nn.rms_norm
    that `nn-plan` marked `stats_in_producer_epilogue = false` is left to its row kernel)."""

    name = "coda-defer-norms"

    remarks_as_errors: bool = False
    whole_rows_stats: bool = True
    """When no GEMM produces the norm's input (a function argument, a non-GEMM kernel's
    result): defer anyway, its statistics from one `whole rows` kernel (no fold); off: leave
    such a norm to `convert-nn-to-coda` (a row kernel, or statistics + fold + apply)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([DeferNorm(self.remarks_as_errors, self.whole_rows_stats)], dce_enabled=False),
            apply_recursively=False,
        ).rewrite_module(op)
