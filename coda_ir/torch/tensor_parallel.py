"""Tensor parallelism (Megatron layout, sequence parallel) for `from_hf` models, through DTensor plans.

A user shards the Hugging Face submodules that coda-ir's units own with PyTorch's own plans
(`torch.distributed.tensor.parallel.parallelize_module`), as torchtitan does for its LLaMA:
column-parallel q/k/v and gate/up (`ColwiseParallel`: weight `Shard(0)`), row-parallel output
and down projections (`RowwiseParallel`: `Shard(1)`), norms replicated (`SequenceParallel`:
`Replicate()`), the LM head vocabulary-parallel (`ColwiseParallel`) or replicated. `parallelize`
below applies that plan. The parameters stay the plan's DTensors; each unit reads their local
shards (`to_local()`, a view: nothing is copied or re-sharded per step) and *reads its layout off
their placements* (`layout_of`): a placement that is not the Megatron one, kv heads that the
mesh does not divide, or a weight left out of the plan is an `ArgumentError` naming the weight.

What runs (per decoder layer, T ranks, M tokens; each rank holds M / T rows of the residual
stream, the sequence-parallel layout):

    x (M/T rows) -> [fold + norm] -> h -> all-gather -> h (M rows) -> [attention segment: this
    rank's heads, its columns of wo] -> partial sum (M rows) -> all-to-all -> T pieces of M/T rows
    -> [fold + norm: x1 = x + piece_0 + ... + piece_{T-1}, h1 = rms_norm(x1)] -> all-gather ->
    [MLP segment: this rank's gate/up rows, its down columns] -> partial sum -> all-to-all -> pieces
    (folded by the next layer's first kernel, or the head's)

Each bracket is one compiled coda program (with its derived backward); the collectives are
between them. The reduce-scatter of a row-parallel GEMM is an all-to-all of its pieces whose
fold, in rank order, is the first thing the next program does: in the same row kernel as the
residual add and the next RMSNorm's statistics (row-local: a rank holds whole rows). The
attention and MLP segments are ordinary programs of the shard's shapes, so the passes plan
per shard: sibling q/k/v and gate/up packing, the SwiGLU interleave over the shard's own
gate/up columns (a pair never straddles ranks: gate row i and up row i are in the same chunk),
GQA heads H / T with kv heads KV / T.

Backward: all-gather <-> reduce-scatter (all-to-all + rank-order fold), all-to-all <-> all-to-all;
a replicated weight's gradient (the norms, summed over rows or heads that other ranks hold) is
summed over the ranks in rank order. Every fold has a fixed order: two runs are bitwise equal.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.distributed as dist

from coda_ir.errors import ArgumentError, CompileError

__all__ = ["TensorParallelLayout", "parallelize", "tensor_parallel_plan", "ReplicateParameters", "layout_of"]

# the role of a weight in the Megatron layout -> (its placement on the 1-D mesh, the style that gives it)
COLUMN, ROW, REPLICATED = "column", "row", "replicated"
_EXPECTED = {COLUMN: ("Shard(dim=0)", "ColwiseParallel()"), ROW: ("Shard(dim=1)", "RowwiseParallel()"),
             REPLICATED: ("Replicate()", "SequenceParallel() or ReplicateParameters()")}


@functools.cache
def _dtensor_type():
    # imported once: every unit call asks of each of its weights whether it is a DTensor
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch built without distributed
        return None
    return DTensor


def is_dtensor(t) -> bool:
    cls = _dtensor_type()
    return cls is not None and isinstance(t, cls)


def role_of(t: torch.Tensor) -> str | None:
    """The Megatron role that a DTensor's placement on a 1-D mesh gives it (None: no such role)."""
    from torch.distributed.tensor import Replicate, Shard

    placements = t.placements
    if len(placements) != 1:
        return None
    (p,) = placements
    if isinstance(p, Replicate):
        return REPLICATED
    if type(p) is Shard and p.dim == 0:
        return COLUMN
    if type(p) is Shard and p.dim == 1:
        return ROW
    return None


@dataclass(frozen=True)
class TensorParallelLayout:
    """The tensor-parallel layout a unit read off its weights: their 1-D device mesh."""

    mesh: object  # torch.distributed.device_mesh.DeviceMesh

    @property
    def degree(self) -> int:
        return self.mesh.size()

    @property
    def rank(self) -> int:
        return self.mesh.get_local_rank()

    @property
    def group(self):
        return self.mesh.get_group()

    def rows(self, tokens: int, where: str) -> int:
        """This rank's share of `tokens` rows of the sequence-parallel residual stream."""
        if tokens % self.degree:
            raise ArgumentError(f"{where}: tensor parallelism with sequence parallelism splits the {tokens} tokens of "
                                f"a step over {self.degree} ranks: batch * seq must be divisible by {self.degree}")
        return tokens // self.degree


def layout_of(where: str, weights: list[tuple[str, torch.Tensor, str]]) -> TensorParallelLayout | None:
    """The tensor-parallel layout of a unit whose weights are `(hf name, tensor, role)`: None when
    none is a DTensor (one process, DDP, or FSDP2 having gathered them); else every weight must
    be a DTensor on one 1-D mesh placed as its role says (a role, or a tuple of roles any of which
    will do), or an ArgumentError names the first that is not. Role None: a weight the kernels
    read whole, a plain tensor or replicated."""
    if not any(is_dtensor(t) for _, t, _ in weights):
        return None
    mesh = None
    for name, t, role in weights:
        if not is_dtensor(t):
            if role is None:
                continue
            placement, style = _EXPECTED[role if isinstance(role, str) else role[0]]
            raise ArgumentError(
                f"{where}: {name} is a plain tensor while other weights of this unit are DTensors (tensor "
                f"parallelism): it must be {placement} on their mesh ({style} in the plan)", name)
        if t.device_mesh.ndim != 1:
            raise ArgumentError(
                f"{where}: {name} is a DTensor on a {t.device_mesh.ndim}-D mesh {t.device_mesh.mesh.tolist()} when the "
                "kernels run: tensor parallelism takes a 1-D mesh (with FSDP2 on a 2-D mesh, shard with "
                "fully_shard(mesh=mesh['dp']) after the plan on mesh['tp'])", name)
        if mesh is None:
            mesh = t.device_mesh
        elif t.device_mesh != mesh:
            raise ArgumentError(f"{where}: {name} is on mesh {t.device_mesh.mesh.tolist()}, other weights of this unit "
                                f"on {mesh.mesh.tolist()}: one tensor-parallel mesh per unit", name)
        got = role_of(t)
        wanted = (REPLICATED,) if role is None else (role,) if isinstance(role, str) else tuple(role)
        if got not in wanted:
            placement, style = _EXPECTED[wanted[0]]
            raise ArgumentError(
                f"{where}: {name} is placed {tuple(t.placements)}; the Megatron layout that coda-ir runs needs "
                f"{placement} ({style} in the plan)", name)
    return TensorParallelLayout(mesh)


def check_heads(where: str, heads: int, kv_heads: int, degree: int) -> None:
    """Attention heads split across the ranks whole: q heads and (GQA) kv heads divisible by the degree."""
    for field, n in (("num_attention_heads", heads), ("num_key_value_heads", kv_heads)):
        if n % degree:
            raise CompileError([f"{where}: error: config.{field} = {n} is not divisible by the tensor-parallel degree "
                                f"{degree}: each rank must hold whole heads (and each kv head's group of q heads)"])


def local(t: torch.Tensor) -> torch.Tensor:
    """A sharded weight's local shard as a plain tensor (a view; its gradient becomes the
    DTensor's, with the weight's placement)."""
    return t.to_local() if is_dtensor(t) else t


def replicated(t: torch.Tensor, layout: TensorParallelLayout) -> torch.Tensor:
    """A replicated weight read by kernels over this rank's rows (or heads) only: its gradient is
    this rank's partial sum, summed over the ranks (in rank order) in the backward."""
    return _SumGradOverRanks.apply(local(t), layout)


# ============================================================================ collectives


def _fold(pieces: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Sum over the first dimension in index (rank) order, in fp32, rounded once."""
    total = pieces[0].float()
    for p in pieces[1:]:
        total = total + p.float()
    return total.to(dtype)


class _SumGradOverRanks(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w, layout):
        ctx.layout = layout
        return w.view_as(w)

    @staticmethod
    def backward(ctx, grad):
        layout = ctx.layout
        flat = grad.reshape(-1).contiguous()
        gathered = torch.empty(layout.degree * flat.numel(), dtype=grad.dtype, device=grad.device)
        dist.all_gather_into_tensor(gathered, flat, group=layout.group)
        return _fold(gathered.view(layout.degree, *grad.shape), grad.dtype), None


class _GatherRows(torch.autograd.Function):
    """All-gather of the ranks' rows (rank order). Backward: with `partial_grads` (each rank's
    consumer computes a partial gradient of all rows: a column- or head-parallel segment) the
    reduce-scatter, as an all-to-all of the row blocks and a rank-order fold; else (every rank's
    consumer computes the same whole gradient) this rank's rows of it."""

    @staticmethod
    def forward(ctx, x, layout, partial_grads):
        ctx.layout, ctx.partial_grads, ctx.rows = layout, partial_grads, x.shape[0]
        out = torch.empty((layout.degree * x.shape[0], *x.shape[1:]), dtype=x.dtype, device=x.device)
        dist.all_gather_into_tensor(out, x.contiguous(), group=layout.group)
        return out

    @staticmethod
    def backward(ctx, grad):
        layout, rows = ctx.layout, ctx.rows
        if not ctx.partial_grads:
            return grad[layout.rank * rows:(layout.rank + 1) * rows], None, None
        blocks = torch.empty_like(grad, memory_format=torch.contiguous_format)
        dist.all_to_all_single(blocks, grad.contiguous(), group=layout.group)
        return _fold(blocks.view(layout.degree, rows, *grad.shape[1:]), grad.dtype), None, None


class _ScatterRows(torch.autograd.Function):
    """This rank's rows of a tensor every rank holds whole (the embedding's output). Backward:
    the all-gather of the rows' gradients, so every rank's producer gets the whole gradient."""

    @staticmethod
    def forward(ctx, x, layout):
        ctx.layout = layout
        rows = x.shape[0] // layout.degree
        return x[layout.rank * rows:(layout.rank + 1) * rows].clone()

    @staticmethod
    def backward(ctx, grad):
        layout = ctx.layout
        out = torch.empty((layout.degree * grad.shape[0], *grad.shape[1:]), dtype=grad.dtype, device=grad.device)
        dist.all_gather_into_tensor(out, grad.contiguous(), group=layout.group)
        return out, None


class _ExchangePieces(torch.autograd.Function):
    """The reduce-scatter of a row-parallel GEMM's partial sums, without its sum: an all-to-all
    that gives rank r block r of every rank's partial, `[T, rows / T, ...]` in rank order, for the
    next program to fold. Backward: the all-to-all of the pieces' gradients."""

    @staticmethod
    def forward(ctx, partial, layout):
        ctx.layout = layout
        out = torch.empty_like(partial, memory_format=torch.contiguous_format)
        dist.all_to_all_single(out, partial.contiguous(), group=layout.group)
        return out.view(layout.degree, partial.shape[0] // layout.degree, *partial.shape[1:])

    @staticmethod
    def backward(ctx, grad):
        layout = ctx.layout
        grad = grad.reshape(-1, *grad.shape[2:]).contiguous()
        out = torch.empty_like(grad)
        dist.all_to_all_single(out, grad, group=layout.group)
        return out, None


def gather_rows(x: torch.Tensor, layout: TensorParallelLayout, *, partial_grads: bool = True) -> torch.Tensor:
    return _GatherRows.apply(x, layout, partial_grads)


def scatter_rows(x: torch.Tensor, layout: TensorParallelLayout) -> torch.Tensor:
    return _ScatterRows.apply(x, layout)


def exchange_pieces(partial: torch.Tensor, layout: TensorParallelLayout) -> torch.Tensor:
    return _ExchangePieces.apply(partial, layout)


def gather_columns(x: torch.Tensor, layout: TensorParallelLayout, columns: int) -> torch.Tensor:
    """The whole `[rows, columns]` from each rank's `torch.chunk` block of columns (no gradient)."""
    from torch.distributed.tensor import DTensor, Shard

    return DTensor.from_local(x, layout.mesh, [Shard(1)], run_check=False, shape=torch.Size((x.shape[0], columns)),
                              stride=(columns, 1)).full_tensor()


# ============================================================================ the plan


try:
    from torch.distributed.tensor.parallel import ParallelStyle as _ParallelStyle
except ImportError:  # torch built without distributed
    _ParallelStyle = object


class ReplicateParameters(_ParallelStyle):
    """A ParallelStyle that replicates a module's parameters on the mesh and changes nothing
    else (the QK-norm weights and the embedding, which coda-ir's units read whole)."""

    def _apply(self, module, device_mesh):
        from torch.distributed.tensor import distribute_module

        return distribute_module(module, device_mesh)

    def __repr__(self) -> str:
        return "ReplicateParameters()"


def tensor_parallel_plan(cm, *, vocab_parallel: bool | None = None) -> dict:
    """The `parallelize_module` plan of a `from_hf` model `cm`, keyed by its module names (as
    torchtitan's LLaMA plan, on the Hugging Face names): per decoder unit, norms
    `SequenceParallel()`, q/k/v and gate/up `ColwiseParallel()`, o and down `RowwiseParallel()`,
    QK-norm weights replicated; the final norm `SequenceParallel()`; the LM head
    `ColwiseParallel()` (vocabulary-parallel loss) unless `vocab_parallel` is False or the
    embeddings are tied, then replicated with the embedding."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

    spec = cm.spec
    if vocab_parallel is None:
        vocab_parallel = not spec.tied
    if vocab_parallel and spec.tied:
        raise CompileError(["<from_hf>: error: config.tie_word_embeddings = True: a vocabulary-parallel LM head would "
                            "shard the embedding too; coda-ir reads the embedding whole (vocab_parallel=False)"])
    plan = {}
    for i in range(len(cm.layers)):
        p = f"layers.{i}.layer."
        plan[p + "input_layernorm"] = SequenceParallel()
        for proj in ("q_proj", "k_proj", "v_proj"):
            plan[p + "self_attn." + proj] = ColwiseParallel()
        if spec.qk_norm:
            plan[p + "self_attn.q_norm"] = ReplicateParameters()
            plan[p + "self_attn.k_norm"] = ReplicateParameters()
        plan[p + "self_attn.o_proj"] = RowwiseParallel()
        plan[p + "post_attention_layernorm"] = SequenceParallel()
        plan[p + "mlp.gate_proj"] = ColwiseParallel()
        plan[p + "mlp.up_proj"] = ColwiseParallel()
        plan[p + "mlp.down_proj"] = RowwiseParallel()
    plan["embed.embed_tokens"] = ReplicateParameters()
    plan["head.norm"] = SequenceParallel()
    if not spec.tied:
        plan["head.lm_head"] = ColwiseParallel() if vocab_parallel else ReplicateParameters()
    return plan


def parallelize(cm, mesh, *, vocab_parallel: bool | None = None):
    """Apply `tensor_parallel_plan(cm)` to the `from_hf` model `cm` on the 1-D device mesh `mesh`
    (`parallelize_module`), after checking that the heads split across its ranks; then move each
    decoder unit's local q/k/v and gate/up shards into one storage each (once), so that the
    packed GEMM reads them with no copy. Returns `cm`. Compose with FSDP2 by calling this on
    `mesh["tp"]` of a 2-D mesh, then `fully_shard(..., mesh=mesh["dp"])`."""
    from torch.distributed.tensor.parallel import parallelize_module

    if mesh.ndim != 1:
        raise ArgumentError(f"parallelize: the tensor-parallel mesh must be 1-D, got {mesh.ndim}-D "
                            f"{mesh.mesh.tolist()} (pass mesh['tp'] of a 2-D mesh)", "mesh")
    check_heads("<from_hf>", cm.spec.heads, cm.spec.kv_heads, mesh.size())
    parallelize_module(cm, mesh, tensor_parallel_plan(cm, vocab_parallel=vocab_parallel))
    for unit in cm.layers:
        unit.pack_weights()
    return cm
