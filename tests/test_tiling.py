"""The one tiling policy (coda_ir.tiling): what legality proves over, the runtime launches and
the IO model predicts must be the same tiles."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coda_ir import tiling
from coda_ir.analysis import io_model
from coda_ir.runtime import compiled, gemm_launch
from coda_ir.transforms import legality

pow2_multiples = st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256])


@given(st.integers(1, 5000), pow2_multiples)
def test_round_up_pow2_multiple(value, multiple):
    p = tiling.round_up_pow2_multiple(value, multiple)
    assert tiling.is_pow2(p) and p >= value and p % multiple == 0
    assert p // 2 < value or (p // 2) % multiple  # the smallest such


def test_round_up_refuses_a_multiple_no_power_of_two_has():
    with pytest.raises(ValueError, match="multiple of 48"):
        tiling.round_up_pow2_multiple(16, 48)


@given(st.integers(0, 10**9), st.integers(1, 5000))
def test_cdiv_is_tritons(a, b):
    """The host's tile counts: `tiling.cdiv` replaced `triton.cdiv` there (a constexpr function
    from Triton 3.5 on, ~8 us a call from Python); it must count the same tiles."""
    import triton

    assert tiling.cdiv(a, b) == triton.cdiv(a, b) == (a + b - 1) // b


@given(st.integers(1, 70000))
def test_pow2_at_least(n):
    p = tiling.pow2_at_least(n)
    assert tiling.is_pow2(p) and p >= n and (p == 1 or p // 2 < n)


@given(st.integers(1, 100000), st.integers(1, 20000), pow2_multiples, st.booleans())
def test_elementwise_tiles_are_powers_of_two_holding_the_recorded_multiple(m, n, multiple, interpreting):
    c = tiling.elementwise_config(m, n, multiple, interpreting=interpreting)
    assert tiling.is_pow2(c.bm) and tiling.is_pow2(c.bn)
    assert c.bn % multiple == 0 and c.bn >= tiling.MIN_BN and c.bm >= 16
    for whole in ("rows", "cols"):
        w = tiling.whole_elementwise_config(m, n, whole, multiple, interpreting=interpreting)
        assert tiling.is_pow2(w.bm) and tiling.is_pow2(w.bn) and w.bn % multiple == 0


@given(st.integers(1, 100000), st.integers(1, 20000), pow2_multiples, st.sampled_from([1, 2, 4, 8]))
def test_io_model_predicts_the_tile_the_runtime_launches(m, n, multiple, width):
    gpu = tiling.elementwise_config(m, n, multiple, width_multiple=width, interpreting=False)
    model = io_model.elementwise_tile(m, n, multiple, width)
    assert (model.bm, model.bn, model.num_warps) == (gpu.bm, gpu.bn, gpu.num_warps)


@given(st.integers(1, 100000), st.integers(1, 20000), pow2_multiples, st.sampled_from([1, 2, 4, 8]))
def test_gpu_elementwise_programs_are_small_with_warps_by_their_widest_tile(m, n, multiple, width):
    """16-row programs of at most 2048 elements unless the recorded multiple widens them, 2 warps
    per column tile of the widest tile a program holds (tiling.elementwise_config's measurements)."""
    c = tiling.elementwise_config(m, n, multiple, width_multiple=width, interpreting=False)
    assert c.bm * c.bn <= max(2048, 16 * c.bn)
    assert c.num_warps == min(2 * width, 8)
    assert c.bm == max(min(tiling.pow2_at_least(m), 2048 // c.bn), 16)


def test_runtime_uses_the_interpreter_policy_under_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert compiled.elementwise_config(1000, 300) == tiling.elementwise_config(1000, 300, interpreting=True)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert compiled.elementwise_config(1000, 300) == tiling.elementwise_config(1000, 300, interpreting=False)


def test_legality_proves_over_every_width_a_gemm_runs_with():
    """A gemm launched with a BN legality never proved would run an unproven epilogue."""
    launched = {c.bn for c in (*tiling.TMA_CANDIDATES, *tiling.IO_MODEL_TILES)}
    for multiple in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        launched.add(tiling.interpreter_config(multiple).bn)
        for fp32 in (False, True):
            launched |= {c.bn for c in tiling.portable_candidates(fp32, multiple)}
    assert launched <= set(legality.GEMM_BNS) == set(tiling.GEMM_BNS)
    assert max(launched) == tiling.MAX_GEMM_BN


def test_one_config_type():
    assert gemm_launch.GemmConfig is tiling.GemmConfig
    assert io_model.default_tile.__annotations__["return"] in ("GemmConfig", tiling.GemmConfig)
    assert compiled.ElementwiseConfig is tiling.ElementwiseConfig


@given(st.integers(1, 100000), st.integers(tiling.LONG_ROWS, 300000))
def test_long_rows_walk_one_row_per_program(m, n):
    """Vocabulary-wide rows (the cross-entropy pass): one row per program, 4096-wide tiles, on a
    GPU; the interpreter and shorter rows keep their blocks of rows."""
    assert tiling.whole_elementwise_config(m, n, "rows") == tiling.ElementwiseConfig(1, 4096, 4)
    assert tiling.whole_elementwise_config(m, n, "rows", interpreting=True).bm >= 16
    assert tiling.whole_elementwise_config(m, tiling.LONG_ROWS - 1, "rows").bm >= 16
    assert tiling.whole_elementwise_config(m, n, "cols").bm >= 16


@given(st.integers(1, 300000), st.integers(1, 5000))
def test_fold_programs_take_the_most_rows_a_step_holds_and_the_io_model_counts_them(L, tiles):
    block, lanes = tiling.fold_config(L, tiles)
    assert tiling.is_pow2(block) and tiling.is_pow2(lanes) and 16 <= block <= tiling.FOLD_BLOCK
    assert 2 <= lanes <= tiling.FOLD_TILE_LANES and (lanes >= tiles or lanes == tiling.FOLD_TILE_LANES)
    assert block == min(tiling.FOLD_BLOCK, max(16, tiling.pow2_at_least(L)), max(16, tiling.FOLD_ELEMENTS // lanes))
    assert compiled.fold_blocks(L, tiles) == (block, lanes, -(-L // block))
    assert io_model.fold_programs(L) == -(-L // tiling.fold_config(L, tiling.FOLD_TILE_LANES)[0])
