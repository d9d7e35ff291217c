"""The attention model (coda_ir/analysis/attention_model.py): its counts against brute force,
the rules that hold for every shape, occupancy, and the backends' capabilities."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coda_ir.analysis import attention_model as am
from coda_ir.analysis import io_model as m

H100, A100 = m.load_gpu("h100"), m.load_gpu("a100")


def _visible(shape: am.AttentionShape, q: int, k: int) -> bool:
    """The mask of nn.attention, element by element (coda_ir/dialects/nn.py)."""
    doc_q = doc_k = 0
    for i, (s, e) in enumerate(shape.doc_spans()):
        doc_q = i if s <= q < e else doc_q
        doc_k = i if s <= k < e else doc_k
    if doc_q != doc_k:
        return False
    if shape.causal and k > q:
        return False
    return not (shape.window and q - k >= shape.window)


@st.composite
def shapes(draw, max_seq: int = 96):
    seq = draw(st.integers(1, max_seq))
    causal = draw(st.booleans())
    window = draw(st.integers(0, seq + 2)) if causal else 0
    cuts = sorted(draw(st.sets(st.integers(1, seq - 1), max_size=3))) if seq > 1 else []
    docs = tuple(b - a for a, b in zip([0, *cuts], [*cuts, seq])) if cuts else None
    return am.AttentionShape(1, seq, 2, 1, 16, causal=causal, window=window, documents=docs)


@settings(max_examples=60, deadline=None)
@given(shapes(), st.sampled_from([8, 16, 32]), st.sampled_from([8, 16, 32]))
def test_counts_match_brute_force(shape, bq, bk):
    """Visible scores and the tiles a kernel that skips every mask visits, against the mask
    enumerated element by element."""
    s = shape.seq_len
    seen = {(q, k) for q in range(s) for k in range(s) if _visible(shape, q, k)}
    assert shape.visible_scores() == len(seen)
    tiles = {(q // bq, k // bk) for q, k in seen}
    assert am.visited_tiles(shape, bq, bk, frozenset({"causal", "window", "documents"})) == len(tiles)
    # a kernel that skips nothing computes every tile
    assert am.visited_tiles(shape, bq, bk, frozenset()) == math.ceil(s / bq) * math.ceil(s / bk)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["cudnn", "flash", "flex"]), st.sampled_from(["fwd", "bwd"]), st.sampled_from([64, 128]),
       st.integers(1, 16).map(lambda n: 512 * n))
def test_bytes_flops_and_time_grow_with_sequence_length(backend, direction, head_dim, seq):
    """Longer sequences never cost less, at any level."""
    short = am.attention_cost(am.AttentionShape(1, seq, 16, 4, head_dim), direction, backend, H100)
    long = am.attention_cost(am.AttentionShape(1, seq + 512, 16, 4, head_dim), direction, backend, H100)
    for field in ("matmul_flops", "useful_flops", "hbm_bytes", "l2_bytes", "smem_bytes", "time_s"):
        assert getattr(long, field) >= getattr(short, field), field


@pytest.mark.parametrize("backend", ["cudnn", "flash", "flex"])
def test_causal_is_about_half_of_full(backend):
    """Causal attention computes the visible half (useful FLOPs exactly (S+1)/2S of full) plus
    the diagonal tiles (executed FLOPs within one tile row of half)."""
    full = am.attention_cost(am.AttentionShape(2, 4096, 32, 8, 64, causal=False), "fwd", backend, H100)
    causal = am.attention_cost(am.AttentionShape(2, 4096, 32, 8, 64), "fwd", backend, H100)
    assert causal.useful_flops / full.useful_flops == pytest.approx(4097 / 8192)
    ratio = causal.matmul_flops / full.matmul_flops
    assert 0.5 < ratio <= 0.5 + causal.schedule.block_q / 4096
    assert 0.45 < causal.time_s / full.time_s < 0.6


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 64).map(lambda n: 128 * n), st.integers(1, 32).map(lambda n: 64 * n))
def test_window_bounds_the_work(seq, window):
    """A sliding window of w keys: at most S * w visible scores, and FlexAttention's tiles are
    bounded by the window, not by S^2 (never more than without the window)."""
    plain = am.AttentionShape(1, seq, 8, 8, 64)
    windowed = am.AttentionShape(1, seq, 8, 8, 64, window=window)
    assert windowed.visible_scores() <= seq * window
    flex = am.attention_cost(windowed, "fwd", "flex", H100)
    assert flex.matmul_flops <= am.attention_cost(plain, "fwd", "flex", H100).matmul_flops
    tiles_per_row = math.ceil(window / 128) + 1  # mask blocks a 128-row block can touch
    assert flex.tiles <= 8 * math.ceil(seq / 128) * tiles_per_row * 2  # 2 tiles of 128x64 per mask block


def test_documents_and_varlen_skip_across_documents():
    """Packed documents: FlexAttention and varlen skip the blocks between documents; SDPA's
    dense kernels cannot run them (an error naming the backends that can)."""
    docs = am.AttentionShape(1, 8192, 32, 8, 64, documents=(1024,) * 8)
    dense = am.AttentionShape(1, 8192, 32, 8, 64)
    for backend in ("flex", "varlen"):
        assert am.attention_cost(docs, "fwd", backend, H100).matmul_flops < 0.2 * am.attention_cost(dense, "fwd", backend, H100).matmul_flops
    with pytest.raises(ValueError, match="cannot run documents .*flex, varlen"):
        am.attention_cost(docs, "fwd", "cudnn", H100)
    assert am.default_backend(docs, H100) == "flex"
    assert am.default_backend(dense, H100) == "cudnn" and am.default_backend(dense, A100) == "flash"


def test_gqa_reads_kv_once_per_kv_head_and_backward_costs_more():
    mha = am.attention_cost(am.AttentionShape(2, 4096, 32, 32, 64), "fwd", "cudnn", H100)
    gqa = am.attention_cost(am.AttentionShape(2, 4096, 32, 8, 64), "fwd", "cudnn", H100)
    assert mha.hbm_bytes - gqa.hbm_bytes == 2 * 2 * 4096 * 24 * 64 * 2  # K and V of 24 fewer kv heads
    assert mha.matmul_flops == gqa.matmul_flops
    shape = am.AttentionShape(2, 4096, 32, 8, 128)
    for backend in ("cudnn", "flash", "flex"):
        fwd, bwd = am.step_cost(shape, backend, H100)
        assert bwd.useful_flops == 2.5 * fwd.useful_flops
        assert bwd.time_s > 2 * fwd.time_s
    # coda-ir's FlexAttention backward reruns the forward first: its cost is inside the backward's
    flex_fwd, flex_bwd = am.step_cost(shape, "flex", H100)
    assert flex_bwd.forward is not None and flex_bwd.time_s > flex_fwd.time_s + max(flex_bwd.times.values())


def test_occupancy_of_flash_attention_2_and_the_per_warp_schedule():
    """FlashAttention-2's forward on an A100 (head dim 128, 128 x 64 tiles, 4 warps): 2 CTAs =
    8 warps per SM; the per-warp schedule that shares K/V across the SM's warps is bounded by
    registers alone and fits more (docs/NAPKIN_ATTENTION.md)."""
    shape = am.AttentionShape(1, 4096, 32, 32, 128)
    fa2 = am.occupancy(am.schedule("flash", "fwd", shape, A100), shape, A100)
    assert (fa2.ctas_per_sm, fa2.warps_per_sm) == (2, 8)
    napkin = am.napkin_warps_per_sm(A100, head_dim=128)
    assert napkin.limit == "registers" and napkin.warps_per_sm > fa2.warps_per_sm
    # registers per warp bound it exactly: no more warps than the register file holds
    assert napkin.warps_per_sm == A100.regs_per_sm // (32 * napkin.regs_per_thread)


def test_ampere_has_no_wgmma_and_hopper_mma_sync_is_slower():
    shape = am.AttentionShape(2, 4096, 32, 8, 128)
    # the same FlashAttention-2 schedule on both: Hopper's mma.sync reaches 2/3 of its GEMM rate
    h100 = am.attention_cost(shape, "fwd", "flash", H100)
    assert h100.schedule.instr == "mma.sync"
    assert am._mma_rate(h100.schedule, shape, H100) == pytest.approx(H100.gemm_rate("bf16") * 2 / 3)
    assert am.schedule("cudnn", "fwd", shape, A100).instr == "mma.sync"
    assert am.attention_cost(shape, "fwd", "cudnn", H100).time_s < h100.time_s


def test_bad_shapes_and_backends_are_value_errors():
    with pytest.raises(ValueError, match="kv_heads"):
        am.AttentionShape(1, 128, 6, 4, 64)
    with pytest.raises(ValueError, match="window needs a causal"):
        am.AttentionShape(1, 128, 4, 4, 64, causal=False, window=16)
    with pytest.raises(ValueError, match="sum to seq_len"):
        am.AttentionShape(1, 128, 4, 4, 64, documents=(100,))
    with pytest.raises(ValueError, match="unknown attention backend"):
        am.attention_cost(am.AttentionShape(1, 128, 4, 4, 64), backend="xformers")


def test_doc_quotes_the_claims_table():
    """docs/NAPKIN_ATTENTION.md quotes `python -m coda_ir.analysis.attention_model`: the figures
    it argues from are what the model computes now."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "NAPKIN_ATTENTION.md").read_text()
    assert am.claims_table() in doc


@pytest.mark.parametrize("gpu", [A100, H100])
@pytest.mark.parametrize("head_dim", [64, 96, 128, 256])
def test_every_backend_fits_every_head_dim(gpu, head_dim):
    """Large heads get smaller tiles (the kernels' own choice), never a spilling or unlaunchable
    schedule; every prediction is a positive time."""
    shape = am.AttentionShape(2, 4096, 8, 2, head_dim)
    for backend in ("cudnn", "flash", "flex"):
        for direction in ("fwd", "bwd"):
            cost = am.attention_cost(shape, direction, backend, gpu)
            assert cost.occupancy.ctas_per_sm >= 1 and not cost.occupancy.spills, cost.summary()
            assert cost.time_s > 0 and cost.useful_flops <= cost.matmul_flops


def test_a_soft_capped_backward_is_priced_as_the_runtime_runs_it():
    """A softcap's backward without documents runs with its scores materialized (runtime:
    `materialized_backward`), its forward on FlexAttention: the model's default backends follow;
    the materialized time is its five GEMMs plus its score traffic one after the other, a causal
    block's keys end at its last row, and its block of rows is the runtime's."""
    from coda_ir.runtime import attention as runtime

    capped = am.AttentionShape(2, 4096, 8, 4, 256, softcap=50.0)
    assert am.default_backend(capped, H100, "fwd") == "flex"
    assert am.default_backend(capped, H100, "bwd") == "materialized"
    docs = am.AttentionShape(1, 4096, 8, 4, 256, softcap=50.0, documents=(2048, 2048))
    assert am.default_backend(docs, H100, "bwd") == "flex"
    sched = am.schedule("materialized", "bwd", capped, H100)
    assert len(runtime._row_blocks(2 * 8, 4096)) == -(-4096 // sched.block_q)
    cost = am.attention_cost(capped, "bwd", None, H100)
    gemm_s = cost.matmul_flops / H100.gemm_rate("bf16")
    assert cost.time_s > gemm_s and cost.forward is None  # no forward rerun
    full = am.attention_cost(am.AttentionShape(2, 4096, 8, 4, 256, causal=False, softcap=50.0), "bwd", None, H100)
    assert 0.5 < cost.matmul_flops / full.matmul_flops < 1  # two row blocks: the first over half the keys
    with pytest.raises(ValueError, match="backwards only"):
        am.attention_cost(capped, "fwd", "materialized", H100)
    with pytest.raises(ValueError, match="cannot run documents"):
        am.attention_cost(docs, "bwd", "materialized", H100)
