"""Sub-tiled gemm epilogues (`tl_epilogue.build_sliced_epilogue`): a heavy epilogue runs once
per column half of the accumulator. Off by default; `TritonOptions(epilogue_subtile=N)` turns it on for
tiles >= N wide (N = 32 / 64 here, so the interpreter's tiles take the sliced branch). The
sliced kernel must match the reference, give the whole-tile kernel's tiles and cols partials
bit for bit (they are per column), its row partials up to the order of the sum (max / select
exactly), and give the same bits on every run.
"""

from __future__ import annotations

import pytest
import torch

from coda_ir.lowering.tl_gemm import SUBTILE_MIN_BN_DEFAULT
from coda_ir.lowering.pipeline import TritonOptions

from .helpers import check
from .test_primitives import gemm_program

HEAVY = """
    %x = coda.accumulate %acc, %r : !coda.tile<{M}x{N}xf32>, tensor<{M}x{N}x{T}>
    %h = coda.scale %x, %g cols : !coda.tile<{M}x{N}xf32>, tensor<{N}x{T}>
    %ss = coda.reduce sumsq %x dim 1 : !coda.tile<{M}x{N}xf32> -> !coda.partials<rows, {M}, sum>
    %mx = coda.reduce max %h dim 1 : !coda.tile<{M}x{N}xf32> -> !coda.partials<rows, {M}, max>
    %ls = coda.reduce lse %h dim 1 : !coda.tile<{M}x{N}xf32> -> !coda.partials<rows, {M}, lse>
    %lc = coda.reduce lse %h dim 0 : !coda.tile<{M}x{N}xf32> -> !coda.partials<cols, {N}, lse>
    %se = coda.select %x, %t : !coda.tile<{M}x{N}xf32>, tensor<{M}xi32> -> !coda.partials<rows, {M}, sum>
    %sg = coda.segment_reduce max %h width 4 : !coda.tile<{M}x{N}xf32>
    %y = coda.pair_map stride 2 %h : (!coda.tile<{M}x{N}xf32>) -> !coda.tile<{M}x{P}xf32> {{
    ^bb0(%a0: f32, %a1: f32):
      %p = arith.mulf %a0, %a1 : f32
      coda.yield %p : f32
    }}
    coda.yield %x, %h, %y, %sg, %ss, %mx, %ls, %lc, %se : !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>,
        !coda.tile<{M}x{P}xf32>, !coda.tile<{M}x{N}xf32>, !coda.partials<rows, {M}, sum>, !coda.partials<rows, {M}, max>,
        !coda.partials<rows, {M}, lse>, !coda.partials<cols, {N}, lse>, !coda.partials<rows, {M}, sum>"""
RESULTS = ["tensor<{M}x{N}x{T}>", "tensor<{M}x{N}x{T}>", "tensor<{M}x{P}xf32>", "tensor<{M}x{N}xf32>",
           "!coda.partials<rows, {M}, sum>", "!coda.partials<rows, {M}, max>", "!coda.partials<rows, {M}, lse>",
           "!coda.partials<cols, {N}, lse>", "!coda.partials<rows, {M}, sum>"]
# per output: True where the sliced kernel must give the same bits as the whole-tile one
EXACT = [True, True, True, True, False, True, False, True, True]


def heavy_program(m: int, n: int, k: int, dt: str = "bf16", config: str = "") -> str:
    p = str(n // 2)
    text = gemm_program(
        HEAVY.replace("{P}", p),
        [("r", "tensor<{M}x{N}x{T}>"), ("g", "tensor<{N}x{T}>"), ("t", "tensor<{M}xi32>")],
        [r.replace("{P}", p) for r in RESULTS],
        dt=dt, tb=True, m=m, n=n, k=k,
    )
    if config:
        text = text.replace(" transpose_b", f" transpose_b config {config}", 1)
    return text


def compile_and_run(text: str, n: int, seed: int, subtile: int):
    return check(text, seed=seed, int_high={4: (-3, n)}, options=TritonOptions(epilogue_subtile=subtile))


@pytest.mark.parametrize(
    "m,n,k,threshold,config",
    [
        (37, 68, 40, "32", ""),  # interpreter tile BN 32: halves of 16
        (5, 36, 3, "32", ""),
        (130, 100, 17, "32", ""),
        (37, 68, 40, "64", "#coda.config<bm = 16, bn = 64, bk = 16, warps = 4, stages = 2>"),  # halves of 32
    ],
)
def test_sliced_epilogue_matches_whole_tile_and_is_deterministic(m, n, k, threshold, config):
    text = heavy_program(m, n, k, config=config)
    cm_whole, inputs, whole = compile_and_run(text, n, seed=m + n + k, subtile=0)
    assert "acc_s0" not in cm_whole.source
    cm_sub, inputs_sub, sub = compile_and_run(text, n, seed=m + n + k, subtile=int(threshold))
    assert f"if BN >= {threshold}:" in cm_sub.source and "acc_s0, acc_s1 = tl.split(" in cm_sub.source
    assert all(torch.equal(x, y) for x, y in zip(inputs, inputs_sub))
    for i, (w, s, exact) in enumerate(zip(whole, sub, EXACT)):
        if exact:
            assert torch.equal(w, s), f"result #{i} differs between the whole tile and its halves"
        else:
            torch.testing.assert_close(s, w, rtol=1e-5, atol=1e-5, msg=f"result #{i}")
    # the slices' row partials fold in a fixed order: the same bits on every run
    again = getattr(cm_sub, "f")(*inputs)
    assert all(torch.equal(x, y) for x, y in zip(sub, again))


def test_sliced_lse_partials_of_an_empty_half():
    """N = 20 on a 32-wide tile: the second half is all masked (partials -inf / 0 / max -inf)."""
    cm, inputs, outs = compile_and_run(heavy_program(9, 20, 8, dt="f32"), 20, seed=3, subtile=32)
    assert "acc_s1" in cm.source
    assert torch.isfinite(outs[6]).all()  # lse of the row = the first half's


def test_interleaved_heavy_epilogue_sliced():
    """Interleaved columns: each half reads and writes its own permuted columns."""
    n, f = 48, 24
    epi = """
    %x = coda.accumulate %acc, %r : !coda.tile<{M}x{N}xf32>, tensor<{M}x{N}x{T}>
    %ss = coda.reduce sumsq %x dim 1 : !coda.tile<{M}x{N}xf32> -> !coda.partials<rows, {M}, sum>
    %g = coda.pair_map %x : (!coda.tile<{M}x{N}xf32>) -> !coda.tile<{M}x24xf32> {{
    ^bb0(%gate: f32, %up: f32):
      %y = arith.mulf %gate, %up : f32
      coda.yield %y : f32
    }}
    coda.yield %x, %g, %ss : !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x24xf32>, !coda.partials<rows, {M}, sum>"""
    text = gemm_program(
        epi, [("r", "tensor<{M}x{N}x{T}>")],
        ["tensor<{M}x{N}x{T}>", "tensor<{M}x24xf32>", "!coda.partials<rows, {M}, sum>"],
        tb=True, interleave=f, m=37, n=n,
    )
    _, _, whole = check(text, seed=5, options=TritonOptions(epilogue_subtile=0))
    cm, _, sub = check(text, seed=5, options=TritonOptions(epilogue_subtile=32))
    assert "cols_n_s1 = _coda_interleave_rows(offs_n_s1, 24)" in cm.source
    assert torch.equal(whole[0], sub[0]) and torch.equal(whole[1], sub[1])
    torch.testing.assert_close(sub[2], whole[2], rtol=1e-5, atol=1e-5)


def test_light_epilogue_not_sliced_and_threshold_holds_whole_groups():
    assert TritonOptions().epilogue_subtile == SUBTILE_MIN_BN_DEFAULT == 0  # off unless asked for
    light = gemm_program("""
    %h = coda.scale %acc, %g cols : !coda.tile<{M}x{N}xf32>, tensor<{N}x{T}>
    coda.yield %h : !coda.tile<{M}x{N}xf32>""", [("g", "tensor<{N}x{T}>")], tb=True)
    cm, _, _ = check(light, options=TritonOptions(epilogue_subtile=256))
    assert "acc_s0" not in cm.source
    # a 1 -> 2 map with stride 64 needs 256-column groups of the wide tile: halves only from BN 256
    import coda_ir

    text = heavy_program(37, 256, 16).replace("stride 2", "stride 64").replace("width 4", "width 128")
    assert "if BN >= 256:" in coda_ir.compile(text, pipeline=None, options=TritonOptions(epilogue_subtile=32)).source
    for bad in (7, 1, -2):
        with pytest.raises(ValueError):
            TritonOptions(epilogue_subtile=bad)


def test_reductions_after_the_last_tile_use_same_bits():
    """`epilogue_schedule`: a reduction whose tile a later op reads is emitted after that op
    (and after its store); the program written in either order gives the same kernel and bits."""
    reduce_first = """
    %x = coda.accumulate %acc, %r : !coda.tile<{M}x{N}xf32>, tensor<{M}x{N}x{T}>
    %ss = coda.reduce sumsq %x dim 1 : !coda.tile<{M}x{N}xf32> -> !coda.partials<rows, {M}, sum>
    %h = coda.scale %x, %g cols : !coda.tile<{M}x{N}xf32>, tensor<{N}x{T}>
    coda.yield %x, %h, %ss : !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>, !coda.partials<rows, {M}, sum>"""
    lines = reduce_first.strip().splitlines()
    scale_first = "\n".join([lines[0], lines[2], lines[1], lines[3]])
    results = ["tensor<{M}x{N}x{T}>", "tensor<{M}x{N}x{T}>", "!coda.partials<rows, {M}, sum>"]
    ins = [("r", "tensor<{M}x{N}x{T}>"), ("g", "tensor<{N}x{T}>")]
    cm_a, inputs, outs_a = check(gemm_program(reduce_first, ins, results, tb=True, m=37, n=70, k=19), seed=7)
    cm_b, _, outs_b = check(gemm_program(scale_first, ins, results, tb=True, m=37, n=70, k=19), seed=7)
    src = cm_a.source
    epi = src[src.index("# ---- epilogue ----"):]
    order = [epi.index(s) for s in ("t_x = acc + ", "_coda_round_bf16(t_x)", "t_h = t_x * ", "_coda_round_bf16(t_h)", "# coda.reduce sumsq", "p_ss, mask=mask_m)")]
    assert order == sorted(order), epi[:1500]
    assert all(torch.equal(a, b) for a, b in zip(outs_a, outs_b))


def test_sliced_epilogue_with_groups_no_power_of_two_tile_holds():
    """Segments of 6 and pairs (c, c + 3) in groups of 6 (no power-of-two tile holds whole
    groups): the tile covers the whole row (N = 48 -> BN >= 64) and exchanges values with
    tl.gather; sliced in halves of 64 the first half holds the row, the second is all masked.
    Same bits as the whole tile, and both match the reference (`check`)."""
    text = heavy_program(37, 48, 40, config="#coda.config<bm = 16, bn = 128, bk = 16, warps = 4, stages = 2>")
    text = text.replace("width 4", "width 6").replace("stride 2", "stride 3")
    cm_whole, inputs, whole = compile_and_run(text, 48, seed=11, subtile=0)
    assert "pairs exchanged in a whole-row tile" in cm_whole.source and "segments gathered in a whole-row tile" in cm_whole.source
    cm_sub, _, sub = compile_and_run(text, 48, seed=11, subtile=32)
    assert "if BN >= 128:" in cm_sub.source and "acc_s0, acc_s1 = tl.split(" in cm_sub.source
    for i, (w, s, exact) in enumerate(zip(whole, sub, EXACT)):
        if exact:
            assert torch.equal(w, s), f"result #{i} differs between the whole tile and its halves"
        else:
            torch.testing.assert_close(s, w, rtol=1e-5, atol=1e-5, msg=f"result #{i}")
