"""Vocabulary-parallel LM head + cross-entropy that never gathers (nor stores) the logits.

Each rank of a process group holds a contiguous block of rows of the LM-head weight (its
vocabulary shard `[start, start + Vs)`) and the same hidden states and targets. The math is
in docs/VOCAB_PARALLEL.md; the kernels are coda programs (`shard_program`):

* forward, `@shard_partials(h, w, targets)`: the shard's logits GEMM, whose epilogue reduces
  each tile to row log-sum-exp partials and the target logit where the target is in the shard
  (`nn.linear` + `nn.cross_entropy_partials`, fused by coda-fuse: the logits never reach
  memory), one fold to two f32 numbers per row: the shard's log-sum-exp (its max and sum of
  exp in one number) and its target logit (0 off the shard);
* one `all_gather` of the `[tokens, 2]` partials, folded in rank order on every rank (the
  same float operations in the same order everywhere, unlike a float all-reduce whose order
  the backend chooses: deterministic), gives every row's log-sum-exp and target logit, hence
  the loss (host arithmetic on `[tokens]` vectors);
* backward, `@shard_grad(h, w, targets, dloss, lse)`: `nn.linear_cross_entropy_grad` over the
  shard (`vocab_start` / `vocab_size`): the dgrad GEMM's epilogue recomputes the shard's
  logits and writes their gradient from the combined log-sum-exp (`exp(l - lse) - onehot`,
  scaled), then `dw = dlogits.T @ h` (the shard's rows of the head's gradient) and
  `dh = dlogits @ w` (this shard's term; the ranks' terms are summed by the caller, or here
  gathered and summed in rank order).

Compared with gathering the logits (`[tokens, vocab]` on every rank) this moves `2 * tokens`
floats forward and `tokens * hidden` backward.

The targets are checked on every rank before any collective: a target outside `[0, vocab)`
that is not `ignore_index` raises the same `ArgumentError` on every rank (the targets are
replicated), as one device's cross-entropy does; it never becomes a number or a hang.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from coda_ir.errors import ArgumentError

__all__ = ["vocab_parallel_cross_entropy", "shard_rows", "shard_program", "fold_partials"]


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


def fold_partials(partials: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows' log-sum-exp and target logit from the ranks' `[M, 2]` partials (each row: the
    shard's log-sum-exp, its target logit or 0), folded in rank order (the same float
    operations in the same order on every rank): `M = max_r lse_r`, `lse = M + log sum_r
    exp(lse_r - M)`, the target logit the sum. An empty shard's lse is -inf (adds 0)."""
    m = partials[0][:, 0]
    for p in partials[1:]:
        m = torch.maximum(m, p[:, 0])
    safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # a row of -inf logits everywhere
    total = torch.zeros_like(m)
    target = torch.zeros_like(m)
    for p in partials:
        total = total + torch.exp(p[:, 0] - safe)
        target = target + p[:, 1]
    return safe + torch.log(total), target


# ---------------------------------------------------------------- the shard's coda programs

_ELEMENT = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
_PROGRAMS: dict[tuple, object] = {}
_PROGRAMS_LOCK = threading.Lock()


def _chunk(tokens: int, rows: int, itemsize: int) -> int:
    """Vocabulary columns per backward step: the shard's whole block (rounded up to a column
    tile) unless its `[tokens, rows]` logits gradient would exceed nn-autodiff's default
    memory budget, then the same chunk policy as one device (`logits_chunk_plan`)."""
    from coda_ir.dialects.nn import LOGITS_CHUNK_TILE
    from coda_ir.transforms.autodiff import CHUNK_GRANULE, NNAutodiffPass

    whole = -(-rows // LOGITS_CHUNK_TILE) * LOGITS_CHUNK_TILE
    budget = NNAutodiffPass.memory_budget_mib * 2**20
    if tokens * rows * itemsize <= budget:
        return whole
    return min(whole, max(CHUNK_GRANULE, budget // (tokens * itemsize) // CHUNK_GRANULE * CHUNK_GRANULE))


def shard_program(tokens: int, hidden: int, rows: int, start: int, vocab: int, dtype: torch.dtype, *,
                  ignore_index: int = -100, reduction: str = "sum"):
    """The xDSL module of a vocabulary shard's head (rows `[start, start + rows)` of a
    `[vocab, hidden]` head, `tokens` rows of hidden states of `dtype`): `@shard_partials(h, w,
    targets) -> (lse, target_logit)` (f32 [tokens] each) and `@shard_grad(h, w, targets, dloss,
    lse) -> (dh, dw)` (`lse` the whole vocabulary's, `dloss` the loss's upstream gradient; the
    runs here use `reduction="sum"` with `dloss / count` for a mean, one program for both)."""
    from xdsl.dialects.builtin import IntegerAttr, StringAttr, i64

    from coda_ir.builder import ModuleBuilder

    elt = _ELEMENT[dtype]
    shapes = dict(h=((tokens, hidden), elt), w=((rows, hidden), elt), targets=((tokens,), "i32"))
    mb = ModuleBuilder()
    fwd = mb.function("shard_partials", **shapes)
    logits = fwd.nn.linear(fwd.h, fwd.w)
    fwd.returns(*fwd.nn.cross_entropy_partials(logits, fwd.targets, vocab_start=start, vocab_size=vocab,
                                               ignore_index=ignore_index))
    bwd = mb.function("shard_grad", **shapes, dloss=((), "f32"), lse=((tokens,), "f32"))
    props = {"ignore_index": IntegerAttr(ignore_index, i64), "reduction": StringAttr(reduction),
             "chunk": IntegerAttr(_chunk(tokens, rows, torch.tensor([], dtype=dtype).element_size()), i64),
             "vocab_start": IntegerAttr(start, i64), "vocab_size": IntegerAttr(vocab, i64)}
    bwd.returns(*bwd.nn.linear_cross_entropy_grad(bwd.h, bwd.w, bwd.targets, bwd.dloss, bwd.lse, props))
    return mb.module


class _Float64:
    """float64 inputs (CPU checks): the same programs run by the nn reference interpreter in
    float64 (coda kernels are f32 / bf16 / f16), so a float64 caller gets float64 numbers."""

    def __init__(self, module):
        self.module = module

    def shard_partials(self, *args):
        from coda_ir.reference import run_reference

        return run_reference(self.module, args, torch.float64, func_name="shard_partials")

    def shard_grad(self, *args):
        from coda_ir.reference import run_reference

        return run_reference(self.module, args, torch.float64, func_name="shard_grad")


@dataclass(frozen=True)
class CompileOptions:
    """How the shard programs are lowered: `from_hf`'s options (its lowering pipeline, the
    compile message on stderr, the compiler's remarks)."""

    pipeline: str | None = "nn-to-coda"
    progress: bool = False
    remarks: bool = False


def _compiled(tokens: int, hidden: int, rows: int, start: int, vocab: int, dtype: torch.dtype, ignore_index: int,
              options: CompileOptions = CompileOptions()):
    """The shard's compiled programs (`reduction="sum"`: a mean's backward takes `dloss / count`),
    once per process, shape and options."""
    import coda_ir

    key = (tokens, hidden, rows, start, vocab, dtype, ignore_index, options)
    with _PROGRAMS_LOCK:
        compiled = _PROGRAMS.get(key)
        if compiled is None:
            module = shard_program(tokens, hidden, rows, start, vocab, dtype if dtype != torch.float64 else torch.float32,
                                   ignore_index=ignore_index)
            if dtype == torch.float64:
                compiled = _Float64(module)
            else:
                what = f"the vocabulary-parallel head, rows [{start}, {start + rows}) of {vocab} ({tokens} tokens, {dtype})"
                began = time.perf_counter()
                if options.progress:
                    print(f"coda-ir: compiling {what} ...", file=sys.stderr, flush=True)
                compiled = coda_ir.compile(module, options.pipeline, remarks=options.remarks,
                                           name="<vocab-parallel head>")
                if options.progress:
                    print(f"coda-ir: compiled {what} in {time.perf_counter() - began:.1f} s", file=sys.stderr, flush=True)
            _PROGRAMS[key] = compiled
        return compiled


class _VocabParallelCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, start, vocab, ignore_index, mean, group, sum_hidden_grad, options):
        from coda_ir.runtime.compiled import indices_checked

        rows, (tokens, width) = weight.shape[0], hidden.shape
        targets = targets.to(torch.int32)
        program = None
        if rows:
            program = _compiled(tokens, width, rows, start, vocab, hidden.dtype, ignore_index, options)
            with indices_checked():  # the caller checked the targets (on every rank, before any collective)
                lse_r, target_r = program.shard_partials(hidden.contiguous(), weight.contiguous(), targets)
        else:  # an empty shard (more ranks than vocabulary blocks): contributes nothing
            lse_r = torch.full((tokens,), float("-inf"), device=hidden.device,
                               dtype=torch.float64 if hidden.dtype == torch.float64 else torch.float32)
            target_r = torch.zeros_like(lse_r)
        lse, target_logit = fold_partials(_gather_rank_order(torch.stack([lse_r, target_r], dim=1), group))
        kept = targets != ignore_index
        per_row = torch.where(kept, lse - target_logit, torch.zeros_like(lse))
        # the sum in row order; "mean" divides by the kept rows (0/0 = nan when none, as torch;
        # a tensor: no device-to-host copy)
        count = kept.sum().to(per_row.dtype) if mean else None
        loss = per_row.sum() / count if mean else per_row.sum()
        ctx.save_for_backward(hidden, weight, targets, lse, *([count] if mean else []))
        ctx.program, ctx.group, ctx.sum_hidden_grad = program, group, sum_hidden_grad
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        from coda_ir.runtime.compiled import indices_checked

        hidden, weight, targets, lse, *count = ctx.saved_tensors
        # the summed loss's program: a mean's upstream gradient divided by the count once here
        # (the same fp32 division the mean program's epilogue would make per element)
        dloss = grad_loss.detach().to(lse.dtype).reshape(())
        if count:
            dloss = dloss / count[0]
        if ctx.program is not None:
            with indices_checked():
                grad_hidden, grad_weight = ctx.program.shard_grad(hidden.contiguous(), weight.contiguous(), targets,
                                                                  dloss, lse)
        else:
            grad_hidden, grad_weight = torch.zeros_like(hidden), torch.zeros_like(weight)
        if ctx.sum_hidden_grad and ctx.needs_input_grad[0]:
            # every rank's term, summed in rank order (deterministic, the same on every rank)
            pieces = _gather_rank_order(grad_hidden.float(), ctx.group)
            total = pieces[0]
            for p in pieces[1:]:
                total = total + p
            grad_hidden = total.to(hidden.dtype)
        # (without sum_hidden_grad the caller sums the ranks' terms: tensor parallelism, where
        # the backward of the all-gather of the hidden rows is a reduce-scatter)
        return (grad_hidden if ctx.needs_input_grad[0] else None, grad_weight if ctx.needs_input_grad[1] else None,
                None, None, None, None, None, None, None, None)


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
    `[tokens, 2]` fp32 forward, one of `[tokens, hidden]` fp32 backward.

    The shard's head runs as coda kernels (`shard_program`: the loss's partials in the logits
    GEMM's epilogue, the logits' gradient in the dgrad GEMM's), compiled once per shape; float32,
    bfloat16 and float16 inputs, and float64 ones through the nn reference interpreter in float64
    (then the loss and partials are float64 too)."""
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
    if not isinstance(hidden, torch.Tensor) or hidden.dim() != 2 or hidden.dtype not in (*_ELEMENT, torch.float64):
        got = f"{list(hidden.shape)} {hidden.dtype}" if isinstance(hidden, torch.Tensor) else type(hidden).__name__
        raise ArgumentError("vocab_parallel_cross_entropy: hidden must be a [tokens, hidden] tensor of float32, bfloat16, "
                            f"float16 or float64, got {got}", "hidden")
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
    return _VocabParallelCE.apply(hidden, weight, targets, start, vocab_size, ignore_index, reduction == "mean", group, True,
                                  CompileOptions())


def sharded_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *, vocab_size: int,
                          group, ignore_index: int = -100, reduction: str = "mean",
                          options: CompileOptions = CompileOptions()) -> torch.Tensor:
    """The mean (or `reduction="sum"`: summed) vocabulary-parallel cross-entropy for a caller that has checked its arguments
    (the targets too) and sums the hidden states' gradient itself: the backward returns this
    rank's partial gradient of `hidden` (tensor parallelism: `hidden` is an all-gather of the
    ranks' rows, whose backward reduce-scatters it)."""
    start, _ = shard_rows(vocab_size, dist.get_rank(group), dist.get_world_size(group))
    return _VocabParallelCE.apply(hidden, weight, targets, start, vocab_size, ignore_index, reduction == "mean", group, False,
                                  options)
