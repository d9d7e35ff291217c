"""The vocabulary-shard programs of the tensor-parallel LM head (docs/VOCAB_PARALLEL.md), in one
process: each shard's compiled `@shard_partials` / `@shard_grad` (Triton interpreter), their
partials folded in rank order as `vocab_parallel_cross_entropy` folds its all-gather, against
float64 PyTorch on the whole (gathered) logits under NN_DIALECT.md's bar. No process group: the
collectives are host tensor operations (the gloo runs are tests/torch/test_distributed.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import coda_ir
from coda_ir.testing import assert_matches
from coda_ir.torch.vocab_parallel import _compiled, fold_partials, shard_program, shard_rows

TOKENS, HIDDEN, VOCAB = 13, 16, 61  # odd vocabulary: shards of unequal sizes for 2, 3 and 4 ranks


def _case(dtype, seed=3, ignore=-100):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(TOKENS, HIDDEN, generator=g).to(dtype)
    w = (0.5 * torch.randn(VOCAB, HIDDEN, generator=g)).to(dtype)
    t = torch.randint(0, VOCAB, (TOKENS,), generator=g).to(torch.int32)
    t[[2, 9]] = ignore
    t[0], t[1] = 0, VOCAB - 1  # the first and the last shard's edges
    return h, w, t


def _sharded(h, w, t, world, reduction="mean", ignore=-100, dloss=1.0):
    """Loss, dh (the shards' terms added in rank order, in f32) and dw (the shards' rows)."""
    shards = [shard_rows(VOCAB, r, world) for r in range(world)]
    programs = [_compiled(TOKENS, HIDDEN, b - a, a, VOCAB, h.dtype, ignore) for a, b in shards]
    parts = [torch.stack(p.shard_partials(h, w[a:b].contiguous(), t), dim=1) for p, (a, b) in zip(programs, shards)]
    lse, target = fold_partials(parts)
    kept = t != ignore
    total = torch.where(kept, lse - target, torch.zeros_like(lse)).sum()
    loss = total / kept.sum() if reduction == "mean" else total
    scale = torch.tensor(dloss) / kept.sum() if reduction == "mean" else torch.tensor(dloss)  # the programs sum
    dh, dws = None, []
    for p, (a, b) in zip(programs, shards):
        dh_r, dw_r = p.shard_grad(h, w[a:b].contiguous(), t, scale, lse)
        dh = dh_r.float() if dh is None else dh + dh_r.float()
        dws.append(dw_r)
    return loss, dh.to(h.dtype), torch.cat(dws)


def _references(h, w, t, reduction, ignore, dloss):
    refs = []
    for dtype in (torch.float64, h.dtype):
        hh, ww = h.to(dtype).requires_grad_(True), w.to(dtype).requires_grad_(True)
        z = hh @ ww.t()
        loss = F.cross_entropy(z if dtype == torch.float64 else z.float(), t.long(), ignore_index=ignore,
                               reduction=reduction)
        (loss * dloss).backward()
        refs.append((loss.detach(), hh.grad, ww.grad))
    return refs


@pytest.mark.parametrize("world,dtype,reduction,ignore", [
    (2, torch.float32, "mean", -100), (4, torch.float32, "mean", -100), (3, torch.bfloat16, "sum", -100),
    (3, torch.float32, "mean", 30),  # an ignore index inside a shard (the middle one of 3)
])
def test_shards_match_float64_on_the_gathered_logits(world, dtype, reduction, ignore):
    h, w, t = _case(dtype, ignore=ignore)
    got = _sharded(h, w, t, world, reduction, ignore, dloss=1.5)
    (l64, dh64, dw64), (lT, dhT, dwT) = _references(h, w, t, reduction, ignore, 1.5)
    assert_matches(got, [l64, dh64, dw64], [lT, dhT, dwT], ["loss", "dh", "dw"], loss=(dtype, TOKENS))
    # bitwise the same in a second run
    again = _sharded(h, w, t, world, reduction, ignore, dloss=1.5)
    assert all(torch.equal(a, b) for a, b in zip(got, again))


def test_the_loss_partials_are_in_the_logits_gemm_epilogue():
    """Forward: one GEMM whose epilogue makes the partials and one fold; no [tokens, shard]
    tensor is allocated (the logits never reach memory). Backward: the logits' gradient is
    written by the GEMM that recomputes them, then dw and dh: three GEMMs."""
    program = _compiled(TOKENS, HIDDEN, 31, 30, VOCAB, torch.float32, -100)
    assert program.kernel_count("shard_partials") == 2
    assert program.kernel_count("shard_grad") == 3
    fwd = program.source.split("def shard_partials(")[1].split("\ndef ")[0]
    assert f"({TOKENS}, 31)" not in fwd  # no logits buffer
    text = str(shard_program(TOKENS, HIDDEN, 31, 30, VOCAB, torch.float32))
    assert "nn.cross_entropy_partials" in text and "vocab_start = 30" in text


def test_out_of_range_targets_are_argument_errors():
    h, w, t = _case(torch.float32)
    program = _compiled(TOKENS, HIDDEN, 31, 30, VOCAB, torch.float32, -100)
    t[5] = VOCAB  # outside the whole vocabulary (ids in [30, 61) are this shard's; 0..29 are others')
    with pytest.raises(coda_ir.ArgumentError, match=rf"holds {VOCAB} at row 5, expected targets in \[0, {VOCAB}\)"):
        program.shard_partials(h, w[30:].contiguous(), t)
    t[5] = 3  # another shard's id: fine
    program.shard_partials(h, w[30:].contiguous(), t)


def test_the_lowered_coda_program_means_the_nn_program():
    """The shard programs after nn-to-coda (fused: the partials in the GEMM's epilogue, the
    logits' gradient in the recomputing GEMM's), run by the coda interpreter in float64, give the
    nn reference's float64 results (the rewrite is an identity of exact arithmetic)."""
    from coda_ir.interpreters.coda import run_coda
    from coda_ir.reference import run_reference

    h, w, t = _case(torch.float32, ignore=40)
    start, stop = 30, 61
    nn_module = shard_program(TOKENS, HIDDEN, stop - start, start, VOCAB, torch.float32, ignore_index=40)
    lowered = coda_ir.lower(shard_program(TOKENS, HIDDEN, stop - start, start, VOCAB, torch.float32, ignore_index=40),
                            "nn-to-coda")
    args = [h, w[start:].contiguous(), t]
    want = run_reference(nn_module, args, torch.float64, func_name="shard_partials")
    got = run_coda(lowered, args, torch.float64, func_name="shard_partials")
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-12, atol=1e-12)
    lse = want[0] + 0.25  # any row statistic: the op takes it as the whole vocabulary's
    args += [torch.tensor(0.5), lse]
    want = run_reference(nn_module, args, torch.float64, func_name="shard_grad")
    got = run_coda(lowered, args, torch.float64, func_name="shard_grad")
    for a, b in zip(got, want):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-12, atol=1e-12)
