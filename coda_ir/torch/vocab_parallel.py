"""Vocabulary-parallel LM head + cross-entropy that never gathers the logits.

Each rank of a process group holds a contiguous block of rows of the LM-head weight (its
vocabulary shard) and the same hidden states and targets. A rank computes its shard's logits
and reduces them at once to three fp32 numbers per row, the *partials* of the cross-entropy:

    (max of the shard's logits, sum of exp(logit - that max), the target's logit or 0)

(the target's logit is non-zero on the one rank whose shard holds the target). One
`all_gather` of the `[tokens, 3]` partials, folded in rank order on every rank (a
deterministic fold: the same additions in the same order everywhere, unlike a float
all-reduce whose order NCCL chooses), gives every row's log-sum-exp and target logit, hence
the loss. The backward recomputes the shard's logits, takes the softmax from the combined
log-sum-exp and makes the shard's weight gradient locally; the hidden states' gradient is
the sum of every shard's contribution (gathered and summed in rank order, so deterministic).

Compared with gathering the logits (`[tokens, vocab]` on every rank) this moves
`3 * tokens` floats forward and `tokens * hidden` backward.

The targets are checked on every rank before any collective: a target outside `[0, vocab)`
that is not `ignore_index` raises the same `ArgumentError` on every rank (the targets are
replicated), as one device's cross-entropy does; it never becomes a number or a hang.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from coda_ir.errors import ArgumentError

__all__ = ["vocab_parallel_cross_entropy", "shard_rows"]


def shard_rows(rows: int, rank: int, world: int) -> tuple[int, int]:
    """`(start, stop)` of rank `rank`'s block when `rows` rows are split over `world` ranks as
    `torch.chunk` does (the split of `distribute_tensor(..., [Shard(0)])`)."""
    per = -(-rows // world)
    start = min(rank * per, rows)
    return start, min(start + per, rows)


def _gather_rank_order(t: torch.Tensor, group) -> list[torch.Tensor]:
    world = dist.get_world_size(group)
    out = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(out, t.contiguous(), group=group)
    return out


def _fold_partials(partials: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows' log-sum-exp and target logit from the ranks' `[M, 3]` partials, folded in rank
    order (the same float operations in the same order on every rank)."""
    m = partials[0][:, 0]
    for p in partials[1:]:
        m = torch.maximum(m, p[:, 0])
    safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # a row of -inf logits everywhere
    total = torch.zeros_like(m)
    target = torch.zeros_like(m)
    for p in partials:
        total = total + p[:, 1] * torch.exp(p[:, 0] - safe)
        target = target + p[:, 2]
    return safe + torch.log(total), target


class _VocabParallelCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, start, ignore_index, mean, group, sum_hidden_grad):
        rows = weight.shape[0]
        logits = torch.matmul(hidden, weight.t()).float()  # the shard's logits, [M, Vs]
        local = targets.long() - start
        in_shard = (local >= 0) & (local < rows) & (targets != ignore_index)
        if rows:
            m = logits.max(dim=1).values
            safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
            s = torch.exp(logits - safe[:, None]).sum(dim=1)
            z = torch.gather(logits, 1, local.clamp(0, rows - 1)[:, None])[:, 0]
        else:  # an empty shard (more ranks than vocabulary blocks): contributes nothing
            safe = torch.full((hidden.shape[0],), float("-inf"), device=hidden.device)
            s = torch.zeros_like(safe)
            z = torch.zeros_like(safe)
        partials = torch.stack([safe, s, torch.where(in_shard, z, torch.zeros_like(z))], dim=1)
        lse, target_logit = _fold_partials(_gather_rank_order(partials, group))
        kept = targets != ignore_index
        per_row = torch.where(kept, lse - target_logit, torch.zeros_like(lse))
        count = int(kept.sum())
        # the sum in row order; "mean" divides by the kept rows (0/0 = nan when none, as torch)
        loss = per_row.sum() / count if mean else per_row.sum()
        ctx.save_for_backward(hidden, weight, local, in_shard, kept, lse)
        ctx.mean, ctx.count, ctx.group, ctx.sum_hidden_grad = mean, count, group, sum_hidden_grad
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        hidden, weight, local, in_shard, kept, lse = ctx.saved_tensors
        scale = grad_loss.float() / ctx.count if ctx.mean else grad_loss.float()
        logits = torch.matmul(hidden, weight.t()).float()  # recomputed, never saved
        dlogits = torch.exp(logits - lse[:, None])  # the global softmax, restricted to the shard
        if weight.shape[0]:
            onehot = torch.zeros_like(dlogits)
            onehot.scatter_(1, local.clamp(0, weight.shape[0] - 1)[:, None], in_shard.float()[:, None])
            dlogits = dlogits - onehot
        dlogits = (dlogits * torch.where(kept, scale, torch.zeros_like(scale))[:, None]).to(hidden.dtype)
        grad_weight = torch.matmul(dlogits.t(), hidden) if ctx.needs_input_grad[1] else None
        grad_hidden = None
        if ctx.needs_input_grad[0] and not ctx.sum_hidden_grad:
            # the caller sums the ranks' partial gradients (tensor parallelism: the backward of
            # the all-gather of the hidden rows is a reduce-scatter)
            grad_hidden = torch.matmul(dlogits, weight)
        elif ctx.needs_input_grad[0]:
            partial = torch.matmul(dlogits, weight)
            pieces = _gather_rank_order(partial.float(), ctx.group)
            total = pieces[0]
            for p in pieces[1:]:
                total = total + p
            grad_hidden = total.to(hidden.dtype)
        return grad_hidden, grad_weight, None, None, None, None, None, None


def vocab_parallel_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    vocab_size: int,
    group=None,
    ignore_index: int = -100,
    reduction: str = "mean",
) -> torch.Tensor:
    """Cross-entropy of `hidden @ W.T` against `targets`, where this rank holds rows
    `shard_rows(vocab_size, rank, world)` of the LM-head weight `W` as `weight` (the
    `torch.chunk` split of `distribute_tensor(W, mesh, [Shard(0)])`; a `DTensor` sharded that
    way is accepted and its local shard used).

    `hidden` [tokens, hidden] and `targets` [tokens] (integers) are the same on every rank of
    `group` (default: the world). Returns the fp32 loss (`reduction` "mean" over the targets
    that are not `ignore_index`, or "sum"), the same on every rank; gradients flow to `hidden`
    (summed over the shards) and to this rank's `weight`. Collectives: one all-gather of
    `[tokens, 3]` fp32 forward, one of `[tokens, hidden]` fp32 backward."""
    if not dist.is_available() or not dist.is_initialized():
        raise ArgumentError("vocab_parallel_cross_entropy: torch.distributed is not initialized (init_process_group first)")
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    if hasattr(weight, "to_local") and hasattr(weight, "placements"):  # a DTensor
        from torch.distributed.tensor import Shard

        if tuple(weight.placements) != (Shard(0),):
            raise ArgumentError(f"vocab_parallel_cross_entropy: a DTensor weight must be placed [Shard(0)] on a 1-D mesh "
                                f"(the vocabulary split over the ranks), got {list(weight.placements)}", "weight")
        if weight.shape[0] != vocab_size:
            raise ArgumentError(f"vocab_parallel_cross_entropy: the DTensor weight has {weight.shape[0]} rows, "
                                f"vocab_size is {vocab_size}", "weight")
        weight = weight.to_local()
    if reduction not in ("mean", "sum"):
        raise ArgumentError(f"vocab_parallel_cross_entropy: reduction must be 'mean' or 'sum', got {reduction!r}", "reduction")
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 2 or not hidden.dtype.is_floating_point:
        raise ArgumentError("vocab_parallel_cross_entropy: hidden must be a floating tensor [tokens, hidden]", "hidden")
    start, stop = shard_rows(vocab_size, rank, world)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2 or weight.shape != (stop - start, hidden.shape[1]) \
            or weight.dtype != hidden.dtype:
        got = f"{list(weight.shape)} {weight.dtype}" if isinstance(weight, torch.Tensor) else type(weight).__name__
        raise ArgumentError(f"vocab_parallel_cross_entropy: rank {rank} of {world} must hold rows [{start}, {stop}) of the "
                            f"[{vocab_size}, {hidden.shape[1]}] weight, i.e. a [{stop - start}, {hidden.shape[1]}] {hidden.dtype} "
                            f"tensor; got {got}", "weight")
    if not isinstance(targets, torch.Tensor) or targets.shape != (hidden.shape[0],) or targets.dtype not in (
            torch.int32, torch.int64):
        raise ArgumentError(f"vocab_parallel_cross_entropy: targets must be an integer tensor [{hidden.shape[0]}]", "targets")
    bad = ((targets < 0) | (targets >= vocab_size)) & (targets != ignore_index)
    if bool(bad.any()):  # the targets are replicated: every rank raises here, before any collective
        where = int(bad.nonzero()[0, 0])
        raise ArgumentError(f"vocab_parallel_cross_entropy: targets[{where}] = {int(targets[where])} is outside "
                            f"[0, {vocab_size}) and not the ignore index {ignore_index}", "targets")
    return _VocabParallelCE.apply(hidden, weight, targets, start, ignore_index, reduction == "mean", group, True)


def sharded_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *, vocab_size: int,
                          group, ignore_index: int = -100, reduction: str = "mean") -> torch.Tensor:
    """The mean (or `reduction="sum"`: summed) vocabulary-parallel cross-entropy for a caller that has checked its arguments
    (the targets too) and sums the hidden states' gradient itself: the backward returns this
    rank's partial gradient of `hidden` (tensor parallelism: `hidden` is an all-gather of the
    ranks' rows, whose backward reduce-scatters it)."""
    start, _ = shard_rows(vocab_size, dist.get_rank(group), dist.get_world_size(group))
    return _VocabParallelCE.apply(hidden, weight, targets, start, ignore_index, reduction == "mean", group, False)
