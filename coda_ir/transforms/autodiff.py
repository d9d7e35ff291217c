"""`nn-autodiff`: reverse-mode differentiation of nn functions (NN_DIALECT.md, "Gradients").

For every function `@f` with a floating-point argument the pass keeps `@f` and adds

* `@f_fwd`: the same arguments; returns f's results, then the tensors the backward needs;
* `@f_bwd`: those saved tensors, then one upstream gradient per result of f (same type as the
  result; a 0-d f32 for a loss); returns one gradient per floating-point argument of f, in
  argument order, each of that argument's type.

The backward is written with the nn dialect's backward ops (`nn.rms_norm_grad`,
`nn.swiglu_grad`, `nn.gemm` with transposes, ...), one op per forward op's derivative, so that
every later pass sees what a value means and fusion rules are written once per op, never by
re-recognizing decomposed arithmetic. A value used several times sums its gradients (`nn.add`).

What the forward saves is decided value by value:

* norms save their row statistics (`nn.rms_norm_rstd`, `nn.layer_norm_stats`: f32 vectors,
  computed next to the norm; `coda-defer-norms` reuses the statistics the deferred norm computes
  anyway), never the normalized activation for its own backward;
* a value the backward needs that is cheap to rebuild from values saved anyway (an activation
  from its input, a norm's output from x and the statistics) is stored or recomputed as the IO model decides (`io_plans.store_or_recompute`:
  an extra [M, N] write in forward plus a read in backward, against recomputing it in the
  backward kernel that needs it); option `cost-model=false` stores it; a gated activation's
  output g is rebuilt where its backward runs as a separate pass over z (`gated_rebuild_decision`;
  the placement it priced, either way, recorded on that backward op for nn-plan to obey, with a
  remark), option `rebuild-gated=false` stores it;
* RoPE's backward needs only the positions (its rotation is orthogonal: `dx = R(-a) dy`);
* an RMSNorm whose output feeds only GEMMs (`z = h @ W.T`) gets its backward statistic from
  `sum_k z_k dz_k` (`nn.row_dot`, reduced where dz is produced; through a RoPE of z, whose
  output is used since R is orthogonal) when z (or the RoPE output) is kept anyway: a value the
  backward reads for another reason or a result of f. Its dx is then elementwise in dy, so it
  runs in the epilogue of the GEMM producing dy.

Gradients flow only through values that depend on a floating-point argument; integer arguments
(positions, targets) get none. A floating-point argument no result depends on gets `nn.zeros`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, BoolAttr, FloatAttr, FunctionType, IntegerAttr, ModuleOp, StringAttr, TensorType, f32, i64
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from coda_ir import remarks
from coda_ir.dialects import nn
from coda_ir.dialects.element_types import element_name
from coda_ir.diagnostics import CompilerError
from coda_ir.transforms.target_machine import DEFAULT_GPU, target_gpu

if TYPE_CHECKING:
    from coda_ir.analysis.io_model import GPU

FWD_SUFFIX = "_fwd"
BWD_SUFFIX = "_bwd"
RECOMPUTED_ATTR = "nn.recomputed"
"""On `@f_bwd`: the names of the forward values its backward recomputes instead of reading a copy
the forward saved (`io_plans.store_or_recompute`), in forward order; absent when none is. What the
forward saves is `@f_fwd`'s results after f's own. Informative: no pass reads it (reports do)."""


def _is_float(value: SSAValue) -> bool:
    ty = value.type
    return isinstance(ty, TensorType) and isinstance(ty.get_element_type(), nn.FLOAT_TYPES)


def _shape(value: SSAValue) -> tuple[int, ...]:
    ty = value.type
    assert isinstance(ty, TensorType)
    return tuple(ty.get_shape())


@dataclass(frozen=True)
class Stat:
    """A row statistic that the forward computes and saves (key of a saved value): of a norm, or
    the log-sum-exp of attention or of cross-entropy's logits."""

    norm: Operation
    index: int  # rms_norm: 0 = rstd; layer_norm: 0 = mean, 1 = rstd; attention, cross_entropy: 0 = lse


Needed = SSAValue | Stat


# ----------------------------------------------------------------------------- gradient rules
#
# A rule gets the forward op, the upstream gradients of its results (None where a result has
# none), which operands need a gradient, and `fwd(v)`: the backward's copy of a forward value
# (saved or recomputed). It returns ops to append and one gradient (or None) per operand.
# `needs(op, wants)` lists the forward values the rule reads, so the forward can save them.


@dataclass
class Rule:
    needs: Callable[[Operation, list[bool]], list[Needed]]
    grad: Callable[..., tuple[list[Operation], list[SSAValue | None]]]


def _linear_needs(op, wants):
    x, w = op.operands
    return ([w] if wants[0] else []) + ([x] if wants[1] else [])


def _linear_grad(op, dys, wants, fwd):
    (dy,) = dys
    x, w = op.operands
    ops: list[Operation] = []
    dx = dw = None
    if wants[0]:  # dx = dy @ w
        ops.append(g := nn.MatmulOp(dy, fwd(w)))
        dx = g.result
    if wants[1]:  # dw = dy.T @ x
        ops.append(g := nn.GemmOp(dy, fwd(x), transpose_a=True))
        dw = g.result
    return ops, [dx, dw]


def _matmul_grad(op, dys, wants, fwd):
    (dy,) = dys
    a, b = op.operands
    ops: list[Operation] = []
    da = db = None
    if wants[0]:  # da = dy @ b.T
        ops.append(g := nn.LinearOp(dy, fwd(b)))
        da = g.result
    if wants[1]:  # db = a.T @ dy
        ops.append(g := nn.GemmOp(fwd(a), dy, transpose_a=True))
        db = g.result
    return ops, [da, db]


def _gemm_grad(op: nn.GemmOp, dys, wants, fwd):
    (dy,) = dys
    ta, tb = op.flags()
    a, b = op.operands
    ops: list[Operation] = []
    da = db = None
    if wants[0]:  # dA = dy @ B.T; da = dA or dA.T
        g = nn.GemmOp(fwd(b), dy, transpose_a=tb, transpose_b=True) if ta else nn.GemmOp(dy, fwd(b), transpose_b=not tb)
        ops.append(g)
        da = g.result
    if wants[1]:  # dB = A.T @ dy; db = dB or dB.T
        g = nn.GemmOp(dy, fwd(a), transpose_a=True, transpose_b=ta) if tb else nn.GemmOp(fwd(a), dy, transpose_a=not ta)
        ops.append(g)
        db = g.result
    return ops, [da, db]


def _reduce_to(dy: SSAValue, like: SSAValue, ops: list[Operation]) -> SSAValue:
    """The gradient of a broadcast rank-1 operand: the column sums of dy (a rank-1 operand of a
    rank-1 op, e.g. a Gemma-style weight `w + 1`, is not broadcast: its gradient is dy)."""
    if len(_shape(like)) == 1 and len(_shape(dy)) == 2:
        ops.append(s := nn.ColumnSumOp(dy))
        return s.result
    return dy


def _add_grad(op, dys, wants, fwd):
    (dy,) = dys
    ops: list[Operation] = []
    return ops, [dy if wants[0] else None, _reduce_to(dy, op.rhs, ops) if wants[1] else None]


def _mul_needs(op, wants):
    return ([op.rhs] if wants[0] else []) + ([op.lhs] if wants[1] else [])


def _mul_grad(op, dys, wants, fwd):
    (dy,) = dys
    ops: list[Operation] = []
    da = db = None
    if wants[0]:
        ops.append(m := nn.MulOp(dy, fwd(op.rhs)))
        da = m.result
    if wants[1]:
        if len(_shape(op.rhs)) == 1 and len(_shape(op.lhs)) == 2:  # a scale's gradient: one column_sum of dy * lhs (never rounded between)
            ops.append(s := nn.ColumnSumOp(dy, fwd(op.lhs)))
            db = s.result
        else:
            ops.append(m := nn.MulOp(dy, fwd(op.lhs)))
            db = m.result
    return ops, [da, db]


def _unary_grad(op, dys, wants, fwd):
    (dy,) = dys
    x = fwd(op.operands[0])
    if isinstance(op, nn.SiluOp):
        g = nn.SiluGradOp(dy, x)
    elif isinstance(op, nn.ReluOp):
        g = nn.ReluGradOp(dy, x)
    elif isinstance(op, nn.GeluOp):
        g = nn.GeluGradOp(dy, x, op.approximate.data)
    elif isinstance(op, nn.SoftcapOp):
        g = nn.SoftcapGradOp(dy, x, op.cap.value.data)
    elif isinstance(op, nn.SwiGLUOp):
        g = nn.SwiGLUGradOp(dy, x)
    else:
        assert isinstance(op, nn.GeGLUOp)
        g = nn.GeGLUGradOp(dy, x, op.approximate.data)
    return [g], [g.result]


def _scale_grad(op: nn.ScaleOp, dys, wants, fwd):
    (dy,) = dys
    g = nn.ScaleOp(dy, op.factor.value.data)  # linear: d(x * c) = dy * c
    return [g], [g.result]


def _rms_grad(op: nn.RMSNormOp, dys, wants, fwd):
    (dy,) = dys
    g = nn.RMSNormGradOp(dy, fwd(op.x), fwd(op.w), fwd(Stat(op, 0)), offset=nn.norm_offset(op))
    return [g], [g.dx if wants[0] else None, g.dw if wants[1] else None]


def _ln_grad(op: nn.LayerNormOp, dys, wants, fwd):
    (dy,) = dys
    g = nn.LayerNormGradOp(dy, fwd(op.x), fwd(op.w), fwd(Stat(op, 0)), fwd(Stat(op, 1)))
    return [g], [g.dx if wants[0] else None, g.dw if wants[1] else None, g.db if wants[2] else None]


def _rope_grad(op: nn.RoPEOp, dys, wants, fwd):
    (dy,) = dys
    props = {k: v for k, v in op.properties.items()}
    for name in ("theta", "style"):  # defaults of the forward op become explicit
        props.setdefault(name, getattr(op, name))
    g = nn.RoPEGradOp(dy, fwd(op.pos), props)
    return [g], [g.result, None]


def _heads(op: nn.HeadRMSNormOp) -> range:
    first = nn.first_head_of(op)
    return range(first, first + op.heads.value.data)


def head_norm_input(op: nn.HeadRMSNormOp) -> SSAValue:
    """The value whose columns `op`'s backward reads as its x: x itself, or, when x is the output
    of another head norm over other heads of the same width (Qwen3: the k-norm reads the q-norm's
    output), that norm's input, through any number of them: the columns of `op`'s heads pass
    through the other norm unchanged (bit for bit), and the backward reads x only there. So the
    forward saves the projection once (qkv), not also the q-normed copy ([M, (H + 2 KV) hd] each
    layer: 64 MiB at the Qwen3-1.7B shape, 1.75 GiB over its 28 layers)."""
    x = op.x
    hd = op.head_dim.value.data
    while (isinstance(x.owner, nn.HeadRMSNormOp) and x.owner.head_dim.value.data == hd
           and not set(_heads(x.owner)) & set(_heads(op))):
        x = x.owner.x
    return x


def _head_norm_grad(op: nn.HeadRMSNormOp, dys, wants, fwd):
    (dy,) = dys
    props = dict(op.properties)
    props.setdefault("eps", op.eps)
    g = nn.HeadRMSNormGradOp(dy, fwd(head_norm_input(op)), [fwd(w) for w in op.w], props)
    return [g], [g.dx if wants[0] else None, *(dw if want else None for dw, want in zip(g.dw, wants[1:]))]


def _ce_props(op: nn.CrossEntropyOp) -> dict:
    """The properties a cross-entropy's gradient op carries from it (`classes`: padding columns)."""
    props = {"ignore_index": op.ignore_index, "reduction": op.reduction}
    if op.classes is not None:
        props["classes"] = op.classes
    return props


def _ce_grad(op: nn.CrossEntropyOp, dys, wants, fwd):
    (dloss,) = dys
    props = _ce_props(op)
    g = nn.CrossEntropyGradOp(fwd(op.logits), fwd(op.targets), dloss, props, lse=fwd(Stat(op, 0)))
    return [g], [g.result, None]


def _embedding_grad(op: nn.EmbeddingOp, dys, wants, fwd):
    (dy,) = dys
    g = nn.EmbeddingGradOp(dy, fwd(op.ids), op.w.type)
    return [g], [None, g.result]


def _attention_grad(op: nn.AttentionOp, dys, wants, fwd):
    (dy,) = dys
    segments = fwd(op.segments[0]) if op.segments else None
    g = nn.AttentionGradOp(fwd(op.qkv), fwd(op.result), fwd(Stat(op, 0)), dy, dict(op.properties), segments)
    return [g], [g.result] + [None] * len(op.segments)


def _concat_grad(op: nn.ConcatOp, dys, wants, fwd):
    (dy,) = dys
    axis = op.axis.value.data
    ops: list[Operation] = []
    grads: list[SSAValue | None] = []
    start = 0
    for x, wanted in zip(op.inputs, wants):
        size = _shape(x)[axis]
        if wanted:
            ops.append(piece := nn.SliceOp(dy, axis, start, size))
            grads.append(piece.result)
        else:
            grads.append(None)
        start += size
    return ops, grads


def _slice_grad(op: nn.SliceOp, dys, wants, fwd):
    (dy,) = dys
    axis, start = op.axis.value.data, op.start.value.data
    full = _shape(op.x)
    size = _shape(op.result)[axis]
    ops: list[Operation] = []
    pieces: list[SSAValue] = []
    for extent in (start, None, full[axis] - start - size):
        if extent is None:
            pieces.append(dy)
        elif extent > 0:
            shape = list(full)
            shape[axis] = extent
            ops.append(z := nn.ZerosOp(TensorType(op.x.type.get_element_type(), shape)))
            pieces.append(z.result)
    if len(pieces) == 1:
        return ops, [dy]
    ops.append(cat := nn.ConcatOp(pieces, axis))
    return ops, [cat.result]


RULES: dict[type[Operation], Rule] = {
    nn.LinearOp: Rule(_linear_needs, _linear_grad),
    nn.MatmulOp: Rule(_linear_needs, _matmul_grad),
    nn.GemmOp: Rule(_linear_needs, _gemm_grad),
    nn.AddOp: Rule(lambda op, wants: [], _add_grad),
    nn.MulOp: Rule(_mul_needs, _mul_grad),
    nn.SiluOp: Rule(lambda op, wants: [op.operands[0]], _unary_grad),
    nn.ReluOp: Rule(lambda op, wants: [op.operands[0]], _unary_grad),
    nn.GeluOp: Rule(lambda op, wants: [op.operands[0]], _unary_grad),
    nn.ScaleOp: Rule(lambda op, wants: [], _scale_grad),
    nn.SoftcapOp: Rule(lambda op, wants: [op.operands[0]], _unary_grad),
    nn.SwiGLUOp: Rule(lambda op, wants: [op.operands[0]], _unary_grad),
    nn.GeGLUOp: Rule(lambda op, wants: [op.operands[0]], _unary_grad),
    nn.RMSNormOp: Rule(lambda op, wants: [op.x, op.w, Stat(op, 0)], _rms_grad),
    nn.LayerNormOp: Rule(lambda op, wants: [op.x, op.w, Stat(op, 0), Stat(op, 1)], _ln_grad),
    nn.RoPEOp: Rule(lambda op, wants: [op.pos], _rope_grad),
    nn.HeadRMSNormOp: Rule(lambda op, wants: [head_norm_input(op), *op.w], _head_norm_grad),
    # cross-entropy saves its per-row log-sum-exp (the loss computes it anyway)
    nn.CrossEntropyOp: Rule(lambda op, wants: [op.logits, op.targets, Stat(op, 0)], _ce_grad),
    nn.EmbeddingOp: Rule(lambda op, wants: [op.ids], _embedding_grad),
    # attention saves its output and log-sum-exp: the backward never re-runs the forward
    # (and its integer segments, which the gradient masks with as the forward did)
    nn.AttentionOp: Rule(lambda op, wants: [op.qkv, op.result, Stat(op, 0), *op.segments], _attention_grad),
    nn.ConcatOp: Rule(lambda op, wants: [], _concat_grad),
    nn.SliceOp: Rule(lambda op, wants: [], _slice_grad),
}


FORWARD_VARIANTS: dict[type[Operation], Callable[[Operation], Operation]] = {
    nn.AttentionOp: lambda op: nn.AttentionFwdOp(op.qkv, dict(op.properties), op.segments[0] if op.segments else None),
    nn.CrossEntropyOp: lambda op: nn.CrossEntropyFwdOp(op.logits, op.targets, dict(op.properties)),
}
"""Forward ops whose saved statistic (Stat index 0, the log-sum-exp) is a second result of a
variant op that `build_forward` puts in their place: (result, lse)."""


def hdh_sources(norm: nn.RMSNormOp) -> list[SSAValue]:
    """For an RMSNorm whose output h feeds only GEMMs as their activation (`z_i = h @ W_i.T`):
    the values z'_i with `sum_j dh_j h_j = sum_i sum_k z'_ik dz'_ik` (EPILOGUES.md, "Backward
    rewrites"): z_i itself, or the RoPE of z_i when that is z_i's only use (`z . dz = R z . dy`
    for dz = R^T dy of any linear R: a partial or scaled RoPE too); [] when h has another kind of use."""
    sources: list[SSAValue] = []
    for use in norm.results[0].uses:
        user = use.operation
        if not (isinstance(user, (nn.LinearOp, nn.MatmulOp)) and use.index == 0):
            return []
        z = user.results[0]
        uses = list(z.uses)
        if len(uses) == 1 and isinstance(uses[0].operation, nn.RoPEOp) and uses[0].index == 0:
            z = uses[0].operation.results[0]
        if z not in sources:
            sources.append(z)
    return sources


# ----------------------------------------------------------------------------- store or recompute


RECOMPUTE_COST = {
    # per element of the recomputed value: (FLOPs, special-function ops)
    nn.SiluOp: (4.0, 1.0),
    nn.GeluOp: (8.0, 1.0),
    nn.ReluOp: (1.0, 0.0),
    nn.RMSNormOp: (2.0, 0.0),
    nn.LayerNormOp: (4.0, 0.0),
}
"""Forward ops whose result the backward may rebuild instead of reading a saved copy.

Gated activations (`nn.swiglu`, `nn.geglu`) are not among them: rebuilt on their own, the pair
(j, j + F) needs a column tile holding all 2F columns of a row (measured on the H100 at the 1B
shape, F = 8192: 4.5 ms for that one kernel, against ~0.1 ms to store g in the forward and read
it back). They are rebuilt only where their backward runs as a separate pass over z
(`gated_rebuild_decision`), which coda-fuse merges the rebuild into (one more [M, F] write)."""


@dataclass(frozen=True)
class GatedPlacement:
    """Where the IO model runs a gated activation's backward (`io_plans.gated_grad_plan`), as
    nn-autodiff priced it for its store-or-rebuild choice: recorded on the `nn.swiglu_grad` /
    `nn.geglu_grad` it builds (`in_producer_epilogue`), so nn-plan obeys one decision."""

    in_epilogue: bool
    summary: str


def gated_rebuild_decision(op: Operation, gpu: GPU | None = None) -> tuple[str, str, GatedPlacement | None] | None:
    """Store or rebuild the output g [M, F] of a gated activation that its backward's weight
    gradient (`dWd = dy.T @ g`) reads: rebuild it where the IO model runs the gated backward as a
    separate pass over dy and z (`io_plans.gated_grad_plan` on `gpu`, the plan nn-plan then records): that
    pass reads both halves of z anyway and coda-fuse merges the rebuild into it (coda-legalize
    handles both pairings in halves), so g costs one [M, F] write in the backward instead of
    staying alive from the forward to the backward (128 MiB a layer at the LLaMA-1B shape: 2 GiB of
    its 16-layer step's peak). Bit for bit the forward's g: the forward computes it from the
    rounded z it stores (coda-fuse reads a stored value rounded). Where the backward joins the
    dgrad GEMM's epilogue, a rebuild would be a kernel of its own over 2F-wide tiles: g is stored.
    The third entry is the placement priced (None: none was). None: not a gated activation."""
    if not isinstance(op, (nn.SwiGLUOp, nn.GeGLUOp)):
        return None
    producer = op.operands[0].owner
    if not isinstance(producer, (nn.LinearOp, nn.MatmulOp)):
        return "store", "its input is no GEMM's output", None
    m, two_f = _shape(op.operands[0])
    k = _shape(producer.operands[0])[1]
    try:
        from coda_ir.analysis import io_plans

        decision = io_plans.gated_grad_plan(m, two_f // 2, K=k, dtype=_dtype_name(op.operands[0]), gpu=gpu)
    except (ImportError, ValueError, KeyError, ZeroDivisionError):
        return "store", "no cost model", None
    placement = GatedPlacement(decision.choice == "epilogue", decision.summary())
    if decision.choice == "separate":
        return "recompute", f"rebuilt in the gated backward's separate pass over z: {decision.summary()}", placement
    return "store", f"its backward runs in the dgrad epilogue: {decision.summary()}", placement


def _recompute_inputs(op: Operation) -> list[Needed]:
    """What rebuilding op's result reads (norms: x, weights and the saved statistics)."""
    if isinstance(op, nn.RMSNormOp):
        return [op.x, op.w, Stat(op, 0)]
    if isinstance(op, nn.LayerNormOp):
        return [op.x, op.w, op.b, Stat(op, 0), Stat(op, 1)]
    return list(op.operands)


def _dtype_name(value: SSAValue) -> str:
    ty = value.type
    assert isinstance(ty, TensorType)
    return element_name(ty.get_element_type())


def recompute_decision(value: SSAValue, cost_model: bool, gpu: GPU | None = None,
                       rebuild_gated: bool = True) -> tuple[str, str, GatedPlacement | None]:
    """("store" | "recompute", why, the gated backward's placement where one was priced) for a
    forward value the backward reads, priced on `gpu` (the pass's target machine; None: the IO
    model's default, the H100). `rebuild_gated` false: a gated activation's output is stored
    (`gated_rebuild_decision` not asked)."""
    op = value.owner
    if cost_model and isinstance(op, nn.ConcatOp) and all(isinstance(v, BlockArgument) for v in op.inputs):
        # e.g. the packed weight of sibling linears (nn-fuse-siblings): the arguments are saved
        # anyway (as themselves, no copy), and concatenating tensors that are adjacent in memory
        # costs nothing at run time (from_hf packs sibling weights so), where storing it would be
        # an extra saved copy of the weights
        return "recompute", "a concatenation of arguments: rebuilt from the saved arguments", None
    if isinstance(op, (nn.SwiGLUOp, nn.GeGLUOp)) and not rebuild_gated:
        return "store", "rebuild-gated=false", None
    gated = gated_rebuild_decision(op, gpu) if cost_model else None
    if gated is not None:
        return gated
    if not cost_model or type(op) not in RECOMPUTE_COST or len(_shape(value)) != 2:
        return "store", "no cost model" if not cost_model else "not rebuildable", None
    flops, sfu = RECOMPUTE_COST[type(op)]
    m, n = _shape(value)
    try:
        from coda_ir.analysis import io_plans

        decision = io_plans.store_or_recompute(m, n, dtype=_dtype_name(value), recompute_flops_per_element=flops,
                                               recompute_sfu_per_element=sfu, gpu=gpu)
    except ImportError:  # the model is optional
        return "store", "no cost model", None
    return decision.choice, decision.summary(), None


# ----------------------------------------------------------------------------- logits in chunks

_ELEMENT_BYTES = {"bf16": 2, "f16": 2, "f32": 4}
CHUNK_GRANULE = 128
"""An automatic chunk is a multiple of this many vocabulary columns (whole GEMM column tiles)."""


@dataclass(frozen=True)
class LogitsChunks:
    """An LM head + loss whose backward recomputes its logits chunk by chunk of vocabulary
    (`nn.linear_cross_entropy_grad`): `linear` (h @ w.T) -> optional `scale` -> optional
    `softcap` -> the cross-entropy, each intermediate used only by the next."""

    linear: nn.LinearOp
    scale: nn.ScaleOp | None
    softcap: nn.SoftcapOp | None
    chunk: int
    why: str

    def ops(self) -> list[Operation]:
        return [op for op in (self.linear, self.scale, self.softcap) if op is not None]


def _only_use(value: SSAValue, user: Operation) -> bool:
    uses = list(value.uses)
    return len(uses) == 1 and uses[0].operation is user


def logits_chunk_plan(ce: nn.CrossEntropyOp, budget_mib: int, forced: int) -> LogitsChunks | None:
    """Whether the backward of `ce` recomputes its logits in vocabulary chunks, and how wide.

    The stored-logits backward keeps the [M, V] logits from the forward to the backward (with a
    soft-cap, its input instead: `capped_logits`) and writes dlogits over them: at the LLaMA-1B shape (8192
    tokens, vocabulary 128256) 1.96 GiB of a 4.6 GiB backward peak (bench/RESULTS.md, issue 11).
    When those bytes exceed `budget_mib`, the backward recomputes the logits instead, `chunk`
    vocabulary columns at a time: the widest multiple of CHUNK_GRANULE whose [M, chunk] gradient
    fits the budget (the GEMMs stay large: 8192 x 16384 x 2048 at 256 MiB), at the price of one
    more [M, V, D] GEMM (the logits again). `forced` > 0 (a multiple of LOGITS_CHUNK_TILE): always
    that chunk. None: the logits are stored (under the budget, or not an LM head's shape)."""
    v = ce.logits
    softcap = scale = None
    if isinstance(v.owner, nn.SoftcapOp) and _only_use(v, ce):
        softcap = v.owner
        v = softcap.operands[0]
    user: Operation = softcap or ce
    if isinstance(v.owner, nn.ScaleOp) and _only_use(v, user):
        scale = v.owner
        user, v = scale, scale.operands[0]
    linear = v.owner
    if not (isinstance(linear, nn.LinearOp) and _only_use(v, user)):
        return None
    if isinstance(linear.operands[0].owner, nn.LayerNormOp):
        # its forward defers the norm into the logits GEMM (a rounding of h the backward would not
        # reproduce: an lse inconsistent with the recomputed logits), and nothing records otherwise
        return None
    m, vocab = _shape(ce.logits)
    elt = _ELEMENT_BYTES.get(_dtype_name(ce.logits), 4)
    stored = m * vocab * elt  # a soft-capped head keeps the cap's input alone (`capped_logits`)
    if forced > 0:
        return LogitsChunks(linear, scale, softcap, forced, f"forced: {forced} vocabulary columns per chunk")
    budget = budget_mib * 2**20
    if stored <= budget:
        return None
    chunk = max(CHUNK_GRANULE, budget // (m * elt) // CHUNK_GRANULE * CHUNK_GRANULE)
    chunk = min(chunk, -(-vocab // nn.LOGITS_CHUNK_TILE) * nn.LOGITS_CHUNK_TILE)
    steps = -(-vocab // chunk)
    why = (f"the logits [{m}x{vocab}] ({stored / 2**20:.0f} MiB stored for the backward) exceed the memory budget "
           f"({budget_mib} MiB): the backward recomputes them in {steps} chunks of {chunk} vocabulary columns "
           f"([{m}x{chunk}]: {m * chunk * elt / 2**20:.0f} MiB), one more [{m}x{vocab}] GEMM")
    return LogitsChunks(linear, scale, softcap, chunk, why)


def capped_logits(ce: nn.CrossEntropyOp) -> nn.SoftcapOp | None:
    """The soft-cap whose result is `ce`'s logits and nothing else's: its backward and the
    cross-entropy's are one `nn.cross_entropy_grad` with `softcap`, which reads the cap's input z
    alone (the stored-logits backward then keeps one [M, V] tensor, not z and the capped logits)."""
    owner = ce.logits.owner
    return owner if isinstance(owner, nn.SoftcapOp) and _only_use(ce.logits, ce) else None


def _capped_grad(op: nn.CrossEntropyOp, cap: nn.SoftcapOp, dloss: SSAValue, fwd) -> nn.CrossEntropyGradOp:
    props = {**_ce_props(op), "softcap": FloatAttr(cap.cap.value.data, f32)}
    return nn.CrossEntropyGradOp(fwd(cap.operands[0]), fwd(op.targets), dloss, props, lse=fwd(Stat(op, 0)))


def _chunked_grad(op: nn.CrossEntropyOp, plan: LogitsChunks, dloss: SSAValue, fwd) -> nn.LinearCrossEntropyGradOp:
    props: dict = {**_ce_props(op), "chunk": IntegerAttr(plan.chunk, i64)}
    if plan.scale is not None:
        props["scale"] = FloatAttr(plan.scale.factor.value.data, f32)
    if plan.softcap is not None:
        props["softcap"] = FloatAttr(plan.softcap.cap.value.data, f32)
    h, w = plan.linear.operands
    return nn.LinearCrossEntropyGradOp(fwd(h), fwd(w), fwd(op.targets), dloss, fwd(Stat(op, 0)), props)


# ----------------------------------------------------------------------------- the pass


@dataclass
class _Differentiator:
    f: func.FuncOp
    cost_model: bool
    remarks_as_errors: bool = False
    saved: list[Needed] = field(default_factory=list)
    recomputed: list[SSAValue] = field(default_factory=list)
    memory_budget_mib: int = 4096
    logits_chunk: int = 0
    rebuild_gated: bool = True
    chunked: dict[Operation, LogitsChunks] = field(default_factory=dict)
    """Cross-entropies whose backward recomputes the logits in chunks (`logits_chunk_plan`)."""
    capped: dict[Operation, nn.SoftcapOp] = field(default_factory=dict)
    """Cross-entropies of soft-capped logits differentiated with their cap (`capped_logits`)."""
    hdh_plan: dict[Operation, list[SSAValue]] = field(default_factory=dict)
    """RMSNorms whose backward statistic is reduced where their consumers' gradients are made
    (`hdh_sources`), with the forward values z' whose `row_dot(z', dz')` it sums."""
    gpu: GPU | None = None
    """The target machine store-or-recompute is priced on (None: the IO model's default)."""
    gated_placement: dict[Operation, GatedPlacement] = field(default_factory=dict)
    """Gated activations whose backward's placement the store-or-rebuild choice priced."""

    @property
    def block(self) -> Block:
        return self.f.body.blocks[0]

    def returned(self) -> list[SSAValue]:
        ret = self.block.last_op
        assert isinstance(ret, func.ReturnOp)
        return list(ret.arguments)

    def active_values(self) -> set[SSAValue]:
        """Float values that depend on a float argument and reach a result."""
        forward: set[SSAValue] = {a for a in self.block.args if _is_float(a)}
        for op in self.block.ops:
            if any(v in forward for v in op.operands):
                forward.update(r for r in op.results if _is_float(r))
        backward: set[SSAValue] = set(self.returned())
        for op in reversed(list(self.block.ops)):
            if any(r in backward for r in op.results):
                backward.update(op.operands)
        return forward & backward

    def plan(self) -> tuple[list[Operation], dict[Operation, list[bool]]]:
        """The ops to differentiate (reverse order), what each wants, and what the backward reads."""
        active = self.active_values()
        order: list[Operation] = []
        wants_of: dict[Operation, list[bool]] = {}
        needed: list[Needed] = []
        folded: set[Operation] = set()  # ops whose gradient a later op's backward produces (chunked head, cap)
        for op in self.block.ops:
            if isinstance(op, nn.CrossEntropyOp) and op.logits in active:
                plan = logits_chunk_plan(op, self.memory_budget_mib, self.logits_chunk)
                if plan is not None and all(v in active for v in plan.linear.operands):
                    self.chunked[op] = plan
                    folded.update(plan.ops())
                    remarks.emit_remark(op, f"logits not stored: {plan.why}", informational=True)
                elif (cap := capped_logits(op)) is not None and cap.operands[0] in active:
                    self.capped[op] = cap
                    folded.add(cap)
        for op in reversed(list(self.block.ops)):
            if isinstance(op, func.ReturnOp) or not any(r in active for r in op.results):
                continue
            rule = RULES.get(type(op))
            if rule is None:
                raise CompilerError(op, f"nn-autodiff has no gradient rule for '{op.name}'")
            wants = [v in active for v in op.operands]
            order.append(op)
            wants_of[op] = wants
            if op in folded:
                continue  # its gradient comes from its cross-entropy's backward (chunked, or with the cap)
            if op in self.chunked:
                h, w = self.chunked[op].linear.operands
                reads: list[Needed] = [h, w, op.targets, Stat(op, 0)]
            elif op in self.capped:
                reads = [self.capped[op].operands[0], op.targets, Stat(op, 0)]
            else:
                reads = rule.needs(op, wants)
            for v in reads:
                if v not in needed:
                    needed.append(v)
        # the RMSNorm backward statistic from the consumers' z . dz, where z' is kept anyway
        returned = set(self.returned())
        for op in order:
            if isinstance(op, nn.RMSNormOp):
                sources = hdh_sources(op)
                if sources and all(z in needed or z in returned for z in sources):
                    self.hdh_plan[op] = sources
                    for z in sources:
                        if z not in needed:
                            needed.append(z)
        # store or recompute: a value rebuilt in backward must be rebuilt from saved values
        available = set(needed)
        for v in list(needed):
            if isinstance(v, Stat) or isinstance(v, BlockArgument) or not _is_float(v):
                continue
            choice, why, placement = recompute_decision(v, self.cost_model, self.gpu, self.rebuild_gated)
            if placement is not None:
                self.gated_placement[v.owner] = placement
            if choice == "recompute":
                inputs = _recompute_inputs(v.owner)
                if all(i in available or isinstance(i, BlockArgument) for i in inputs):
                    self.recomputed.append(v)
                    for i in inputs:
                        if i not in needed:
                            needed.append(i)
                            available.add(i)
        self.saved = sorted((v for v in needed if v not in self.recomputed), key=self._program_order)
        return order, wants_of

    def _program_order(self, v: Needed) -> tuple[int, int, int]:
        """Saved tensors in program order: arguments, then values as defined (statistics right
        after their norm), so f_fwd's extra results read like the program."""
        if isinstance(v, BlockArgument):
            return (0, v.index, 0)
        ops = list(self.block.ops)
        if isinstance(v, Stat):
            return (1, ops.index(v.norm), 1 + v.index)
        assert isinstance(v.owner, Operation)
        return (1, ops.index(v.owner), 0)

    def build_forward(self, name: str) -> func.FuncOp:
        mapping: dict[SSAValue, SSAValue] = {}
        fwd = self.f.clone(value_mapper=mapping)
        fwd.sym_name = StringAttr(name)
        block = fwd.body.blocks[0]
        stats: dict[Operation, Operation] = {}
        for v in self.saved:
            if isinstance(v, Stat) and type(v.norm) in FORWARD_VARIANTS and v.norm not in stats:
                # the forward op becomes its variant that also returns the log-sum-exp it computes
                old = mapping[v.norm.results[0]].owner
                assert isinstance(old, type(v.norm))
                new = FORWARD_VARIANTS[type(old)](old)
                new.location = old.location
                new.results[0].name_hint = old.results[0].name_hint
                new.results[1].name_hint = self.stat_name(v)
                block.insert_op_after(new, old)
                old.results[0].replace_all_uses_with(new.results[0])
                old.detach()
                old.erase()
                mapping[v.norm.results[0]] = new.results[0]
                stats[v.norm] = new
                continue
            if isinstance(v, Stat) and v.norm not in stats:
                norm = mapping[v.norm.results[0]].owner
                assert isinstance(norm, Operation)
                eps = norm.properties.get("eps") or v.norm.eps  # type: ignore[union-attr]
                stat_op = (nn.RMSNormRstdOp if isinstance(norm, nn.RMSNormOp) else nn.LayerNormStatsOp)(
                    norm.operands[0], eps.value.data)  # type: ignore[union-attr]
                stat_op.properties["eps"] = eps
                stat_op.location = norm.location
                base = norm.operands[0].name_hint or "x"
                if isinstance(stat_op, nn.RMSNormRstdOp):
                    stat_op.results[0].name_hint = f"rstd_{base}"
                else:
                    stat_op.results[0].name_hint, stat_op.results[1].name_hint = f"mean_{base}", f"rstd_{base}"
                block.insert_op_after(stat_op, norm)
                stats[v.norm] = stat_op
        for plan in self.chunked.values():
            norm = mapping[plan.linear.operands[0]].owner if plan.linear.operands[0] in mapping else None
            if isinstance(norm, nn.RMSNormOp):
                # the backward recomputes the logits from h rebuilt from x, w and rstd, rounded once;
                # a deferred norm (rstd applied to the GEMM's accumulator of x * w) would give the
                # forward's lse other logits (off by h's rounding: the softmax no longer sums to 1)
                norm.properties["stats_in_producer_epilogue"] = BoolAttr.from_bool(False)
        values = [self.stat_value(stats[v.norm], v) if isinstance(v, Stat) else mapping[v] for v in self.saved]
        ret = block.last_op
        assert isinstance(ret, func.ReturnOp)
        results = [*ret.arguments, *values]
        new_ret = func.ReturnOp(*results)
        new_ret.location = ret.location
        block.insert_op_before(new_ret, ret)
        ret.detach()
        ret.erase()
        fwd.function_type = FunctionType.from_lists(list(fwd.function_type.inputs), [r.type for r in results])
        return fwd

    @staticmethod
    def stat_value(op: Operation, v: Stat) -> SSAValue:
        """The saved statistic `v` among the results of its op in f_fwd."""
        if isinstance(op, (nn.AttentionFwdOp, nn.CrossEntropyFwdOp)):
            return op.lse
        return op.results[v.index]

    @staticmethod
    def stat_name(v: Stat) -> str:
        """The name of a saved log-sum-exp (attention's, or cross-entropy's of its logits)."""
        if isinstance(v.norm, nn.AttentionOp):
            return f"lse_{v.norm.result.name_hint or 'attention'}"
        return f"lse_{v.norm.operands[0].name_hint or 'logits'}"

    def stat_type(self, v: Stat) -> TensorType:
        from xdsl.dialects.builtin import f32

        rows = _shape(v.norm.operands[0])[0]
        if isinstance(v.norm, nn.AttentionOp):
            return TensorType(f32, [rows * v.norm.heads.value.data])
        return TensorType(f32, [rows])

    def build_backward(self, name: str, order: list[Operation], wants_of: dict[Operation, list[bool]]) -> func.FuncOp:
        results = self.returned()
        saved_types = [self.stat_type(v) if isinstance(v, Stat) else v.type for v in self.saved]
        block = Block(arg_types=[*saved_types, *(r.type for r in results)])
        loc = self.f.location
        fwd_map: dict[Needed, SSAValue] = {}
        for v, arg in zip(self.saved, block.args):
            fwd_map[v] = arg
            if isinstance(v, Stat) and isinstance(v.norm, (nn.AttentionOp, nn.CrossEntropyOp)):
                arg.name_hint = self.stat_name(v)
            elif isinstance(v, Stat):
                base = v.norm.operands[0].name_hint or "x"
                arg.name_hint = (("rstd",) if isinstance(v.norm, nn.RMSNormOp) else ("mean", "rstd"))[v.index] + f"_{base}"
            elif v.name_hint:
                arg.name_hint = v.name_hint
        for op_ in self.block.ops:  # rebuild recomputed values in forward order
            for r in op_.results:
                if r in self.recomputed:
                    block.add_op(self.recompute(r, fwd_map))
        grads: dict[SSAValue, SSAValue] = {}

        def add_grad(v: SSAValue, g: SSAValue, where: Operation) -> None:
            if v in grads:
                s = nn.AddOp(grads[v], g)
                s.location = where.location
                block.add_op(s)
                grads[v] = s.result
            else:
                grads[v] = g

        for r, arg in zip(results, block.args[len(self.saved):]):
            arg.name_hint = f"d{r.name_hint}" if r.name_hint else None
            if _is_float(r):
                add_grad(r, arg, self.block.last_op)  # type: ignore[arg-type]

        def fwd(v: Needed) -> SSAValue:
            if v not in fwd_map:
                raise AssertionError(f"backward reads a forward value that was not saved: {v}")
            return fwd_map[v]

        for op in order:
            dys = [grads.get(r) for r in op.results]
            if all(d is None for d in dys):
                continue
            if any(d is None for d in dys):  # nn ops have one result; defensive for future multi-result ops
                raise CompilerError(op, "nn-autodiff: some results of this op have no gradient")
            if op in self.chunked:
                plan = self.chunked[op]
                g = _chunked_grad(op, plan, dys[0], fwd)
                g.location = op.location
                block.add_op(g)
                add_grad(plan.linear.operands[0], g.dh, op)
                add_grad(plan.linear.operands[1], g.dw, op)
                continue
            if op in self.capped:
                cap = self.capped[op]
                g = _capped_grad(op, cap, dys[0], fwd)
                g.location = op.location
                block.add_op(g)
                add_grad(cap.operands[0], g.result, op)  # the cap's own rule never runs: no gradient reaches its result
                continue
            if op in self.hdh_plan:
                new_ops, dxs = self.rms_grad_from_consumers(op, dys, wants_of[op], fwd, grads)
            else:
                new_ops, dxs = RULES[type(op)].grad(op, dys, wants_of[op], fwd)
            placement = self.gated_placement.get(op)
            if placement is not None:
                # the placement the store-or-rebuild choice rests on (`gated_rebuild_decision`),
                # recorded once here, either way: nn-plan obeys it (a rebuild always finds the
                # separate pass it joins, a stored g the epilogue it was kept for)
                for new in new_ops:
                    if isinstance(new, (nn.SwiGLUGradOp, nn.GeGLUGradOp)):
                        new.properties["in_producer_epilogue"] = BoolAttr.from_bool(placement.in_epilogue)
                        g = "stored" if placement.in_epilogue else ("rebuilt in that pass" if op.results[0] in self.recomputed
                                                                   else "stored (its rebuild's inputs are not kept)")
                        where = "runs in the epilogue of the GEMM producing dy" if placement.in_epilogue else "runs as a separate pass"
                        remarks.emit_remark(new, f"{new.name} {where}, g = {op.name}'s output {g}: the IO model's "
                                                 f"choice {placement.summary}", informational=True)
            for new in new_ops:
                new.location = op.location
                block.add_op(new)
            for v, g, wanted in zip(op.operands, dxs, wants_of[op]):
                if g is not None and wanted:
                    add_grad(v, g, op)  # an operand used twice (x * x) gets both terms
        outs: list[SSAValue] = []
        for arg in self.block.args:
            if not _is_float(arg):
                continue
            if arg not in grads:  # no result depends on it: its gradient is zero (PyTorch: zeros)
                zeros = nn.ZerosOp(arg.type)
                zeros.location = loc
                block.add_op(zeros)
                grads[arg] = zeros.result
            g = grads[arg]
            if g.type != arg.type:
                raise CompilerError(self.f, f"nn-autodiff: gradient of %{arg.name_hint} has type {g.type}, expected {arg.type}")
            outs.append(g)
        ret = func.ReturnOp(*outs)
        ret.location = loc
        block.add_op(ret)
        bwd = func.FuncOp(name, FunctionType.from_lists(list(block.arg_types), [o.type for o in outs]), Region(block))
        bwd.location = loc
        return bwd

    def rms_grad_from_consumers(self, op: nn.RMSNormOp, dys, wants, fwd, grads):
        """`nn.rms_norm_grad` whose statistic `sum_j dh_j h_j` is `sum_i row_dot(z'_i, dz'_i)`."""
        (dy,) = dys
        ops: list[Operation] = []
        total: SSAValue | None = None
        for z in self.hdh_plan[op]:
            if z not in grads:
                continue  # a consumer that reaches no result adds nothing to dh
            ops.append(dot := nn.RowDotOp(fwd(z), grads[z]))
            if total is None:
                total = dot.result
            else:
                ops.append(acc := nn.AddOp(total, dot.result))
                total = acc.result
        if total is None:
            return RULES[nn.RMSNormOp].grad(op, dys, wants, fwd)
        g = nn.RMSNormGradOp(dy, fwd(op.x), fwd(op.w), fwd(Stat(op, 0)), total, offset=nn.norm_offset(op))
        ops.append(g)
        return ops, [g.dx if wants[0] else None, g.dw if wants[1] else None]

    def recompute(self, value: SSAValue, fwd_map: dict[Needed, SSAValue]) -> Operation:
        op = value.owner
        assert isinstance(op, Operation)
        new: Operation
        if isinstance(op, nn.RMSNormOp):
            new = nn.RMSNormApplyOp(fwd_map[op.x], fwd_map[op.w], fwd_map[Stat(op, 0)], nn.norm_offset(op))
        elif isinstance(op, nn.LayerNormOp):
            new = nn.LayerNormApplyOp(fwd_map[op.x], fwd_map[op.w], fwd_map[op.b], fwd_map[Stat(op, 0)],
                                      fwd_map[Stat(op, 1)])
        else:
            new = op.clone(value_mapper={v: fwd_map[v] for v in op.operands})
        new.location = op.location
        fwd_map[value] = new.results[0]
        if value.name_hint:
            new.results[0].name_hint = value.name_hint
        return new


def differentiate(f: func.FuncOp, cost_model: bool = True, memory_budget_mib: int = 4096,
                  logits_chunk: int = 0, gpu: GPU | None = None,
                  rebuild_gated: bool = True) -> tuple[func.FuncOp, func.FuncOp]:
    """`(f_fwd, f_bwd)` of an nn function (detached; the caller inserts them)."""
    name = f.sym_name.data
    d = _Differentiator(f, cost_model, memory_budget_mib=memory_budget_mib, logits_chunk=logits_chunk, gpu=gpu,
                        rebuild_gated=rebuild_gated)
    order, wants = d.plan()
    bwd = d.build_backward(name + BWD_SUFFIX, order, wants)
    fwd = d.build_forward(name + FWD_SUFFIX)
    if d.recomputed:
        # the store-or-recompute decision, recorded once where it is made: what the forward saves
        # is @f_fwd's extra results, what the backward rebuilds is named here (reports read it)
        bwd.attributes[RECOMPUTED_ATTR] = ArrayAttr([StringAttr(v.name_hint or f"%{i}") for i, v in enumerate(d.recomputed)])
    return fwd, bwd


@dataclass(frozen=True)
class NNAutodiffPass(ModulePass):
    """Add `@f_fwd` (results, then saved tensors) and `@f_bwd` (saved tensors and upstream
    gradients -> one gradient per float argument) for every function `@f` (module docstring)."""

    name = "nn-autodiff"

    cost_model: bool = True
    """Ask the IO model (`io_plans.store_or_recompute`) whether the backward rebuilds a cheap
    activation (silu, gated, norm outputs) instead of reading a copy the forward saved; off: save it."""
    memory_budget_mib: int = 4096
    """The most a cross-entropy's stored logits may take (MiB): above it the forward stores none
    and the backward recomputes them in vocabulary chunks whose [tokens, chunk] gradient fits it
    (`logits_chunk_plan`, recorded as `chunk` on `nn.linear_cross_entropy_grad`). 4096 by default:
    the recomputation costs one more [tokens, vocab, hidden] GEMM (H200, 2026-11-28: +4.4% of a
    LLaMA-1B step, +13% of a Qwen3-1.7B one) for 1.5-1.7 GiB at 8192 tokens, so the logits of the
    common shapes (LLaMA-1B / Qwen3 at 8192 tokens: 2.0 / 2.4 GiB) are stored and larger ones
    (longer batches, Gemma's 256k vocabulary) chunked; 256 trades the speed for the memory."""
    rebuild_gated: bool = True
    """false: a gated activation's output g is saved by the forward, never rebuilt (the form before
    the backward rebuilt it; tests that pin the gated backward in the dgrad epilogue use it). True:
    the IO model decides (`gated_rebuild_decision`) and the gated backward records the placement
    that decision priced (`in_producer_epilogue`: false for the separate pass a rebuild joins,
    true for the dgrad epilogue a stored g serves), which nn-plan obeys."""
    logits_chunk: int = 0
    """> 0: always recompute the logits in chunks of this many vocabulary columns (a multiple of
    16), whatever the budget (tests, experiments); 0: the budget decides."""
    gpu: str = DEFAULT_GPU
    """The target machine store-or-recompute is priced on (`transforms/target_machine.py`)."""
    gpu_constants: str = ""
    """A table of GPU constants to read `gpu` from instead of the shipped one."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from coda_ir.errors import ArgumentError

        if self.logits_chunk < 0 or self.logits_chunk % nn.LOGITS_CHUNK_TILE:
            raise ArgumentError(f"pass option logits-chunk must be 0 or a positive multiple of {nn.LOGITS_CHUNK_TILE}, "
                                f"got {self.logits_chunk}", "logits-chunk")
        if self.memory_budget_mib < 0:
            raise ArgumentError(f"pass option memory-budget-mib must be non-negative, got {self.memory_budget_mib}",
                                "memory-budget-mib")
        gpu = target_gpu(self.name, self.gpu, self.gpu_constants) if self.cost_model else None
        funcs = [f for f in op.body.block.ops if isinstance(f, func.FuncOp) and f.body.blocks]
        names = {f.sym_name.data for f in funcs}
        for f in funcs:
            name = f.sym_name.data
            if not any(_is_float(a) for a in f.body.blocks[0].args):
                continue
            for suffix in (FWD_SUFFIX, BWD_SUFFIX):
                if name + suffix in names:
                    raise CompilerError(f, f"nn-autodiff: @{name}{suffix} exists already; rename it")
            fwd, bwd = differentiate(f, self.cost_model, self.memory_budget_mib, self.logits_chunk, gpu,
                                     self.rebuild_gated)
            op.body.block.insert_op_after(bwd, f)
            op.body.block.insert_op_after(fwd, f)
