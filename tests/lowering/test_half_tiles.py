"""Half-tile loads and stores of interleaved tiles (`EpilogueContext.halves`).

Under `interleave h` (N-wide tensors) and `interleave_wide h` (2N-wide tensors) a tile whose TW
columns lie inside one interleave group of 2h is written as its even and its odd columns, two
contiguous blocks h apart, and read the same way; otherwise the kernel keeps the perm(c)
scatter. Each case runs against the float64 reference (odd M, several h, tiles per group, groups
per tensor) and must be bitwise equal to the scatter (`TritonOptions(half_tile_io=False)`) and to itself.
"""

from __future__ import annotations

import pytest
import torch

from coda_ir.runtime import gemm_launch

from coda_ir.lowering.pipeline import TritonOptions

from .helpers import DEVICE, check, use_gemm_path
from .test_primitives import gemm_program

M, K = 37, 40


def _config(bn: int | None) -> str:
    return f" config #coda.config<bm = 16, bn = {bn}, bk = 16, warps = 4, stages = 2>" if bn else ""


def _run_both(monkeypatch, text: str, seed: int):
    """(source, outputs) with half tiles, after checking them against the reference, the scatter
    and a second run bit for bit."""
    scatter_cm, _, scatter = check(text, seed=seed, options=TritonOptions(half_tile_io=False))
    assert "half_cols" not in scatter_cm.source
    cm, _, outs = check(text, seed=seed)
    _, _, again = check(text, seed=seed)
    for o, s, a in zip(outs, scatter, again):
        assert torch.equal(o, s) and torch.equal(o, a)
    return cm.source, outs


# (h, N, BN, path): tiles per group 1 (16/32, 32/64), 3 (48/32, 24/16), groups per tensor 1..3;
# h = 12 (2h = 24 holds no tile of 16 or more: no branch at all) and 2h < BN keep the scatter.
INTERLEAVE_CASES = [
    (16, 64, 32, "portable"),
    (48, 96, 32, "portable"),
    (24, 48, 16, "portable"),
    (32, 64, 64, "portable"),
    (16, 96, 64, "portable"),  # 2h < BN: a tile holds 2 groups, runs of h columns: scatter
    (12, 48, 32, "portable"),
    (16, 64, None, "tma"),  # the persistent descriptor path (interpreter config, BN = 32)
]


@pytest.mark.parametrize("h,n,bn,path", INTERLEAVE_CASES)
def test_interleave_half_tiles(monkeypatch, h, n, bn, path):
    """N-wide loads (coda.load, coda.accumulate) and stores in the user's layout, SwiGLU beside."""
    use_gemm_path(monkeypatch, path)
    epi = """
    %c = coda.load %cm : tensor<{M}x{N}x{T}> -> !coda.tile<{M}x{N}xf32>
    %x = coda.accumulate %acc, %r : !coda.tile<{M}x{N}xf32>, tensor<{M}x{N}x{T}>
    %z = coda.map %x, %c : (!coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>) -> !coda.tile<{M}x{N}xf32> {{
    ^bb0(%p: f32, %q: f32):
      %s = arith.mulf %p, %q : f32
      coda.yield %s : f32
    }}
    %y = coda.pair_map %x : (!coda.tile<{M}x{N}xf32>) -> !coda.tile<{M}x{P}xf32> {{
    ^bb0(%gate: f32, %up: f32):
      %o = arith.mulf %gate, %up : f32
      coda.yield %o : f32
    }}
    coda.yield %x, %z, %y : !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{P}xf32>"""
    p = n // 2
    text = gemm_program(
        epi.replace("{P}", str(p)),
        [("cm", "tensor<{M}x{N}x{T}>"), ("r", "tensor<{M}x{N}x{T}>")],
        ["tensor<{M}x{N}x{T}>", "tensor<{M}x{N}xf32>", f"tensor<{{M}}x{p}x{{T}}>"],
        tb=True, interleave=h, m=M, n=n, k=K,
    ).replace(" transpose_b", " transpose_b" + _config(bn), 1)
    source, (x, _, _) = _run_both(monkeypatch, text, seed=h + n)
    largest = (2 * h) & -(2 * h)
    assert ("half_cols" in source) == (largest >= 16)
    if largest >= 16:
        assert f"if BN <= {largest}:" in source
    if DEVICE == "cpu" or path == "portable":
        assert gemm_launch.LAST_LAUNCH["path"] == path
    # On a Hopper GPU no TMA candidate tile (BN >= 128) fits in a 2h = 32 group, so the
    # launcher runs the portable path there (H100, 2026-11-22); the numbers are checked above.


# (hw, N, BN): the wide tile is 2 BN columns of the 2N-wide space; 2hw = 2N (LLaMA's [gate | up])
# and 2hw < 2N (3 groups); BN = 32 at hw = 48 makes 64-wide tiles straddle groups: scatter.
WIDE_CASES = [(48, 48, 16), (16, 48, 16), (32, 64, 32), (48, 48, 32)]


@pytest.mark.parametrize("hw,n,bn", WIDE_CASES)
def test_interleave_wide_half_tiles(monkeypatch, hw, n, bn):
    """2N-wide load and store (the saved z and its gradient of the SwiGLU backward)."""
    w = 2 * n
    epi = f"""
    %zt = coda.load %z : tensor<{{M}}x{w}x{{T}}> -> !coda.tile<{{M}}x{w}xf32>
    %d, %y = coda.pair_map %acc, %zt : (!coda.tile<{{M}}x{{N}}xf32>, !coda.tile<{{M}}x{w}xf32>) -> (!coda.tile<{{M}}x{w}xf32>, !coda.tile<{{M}}x{{N}}xf32>) {{{{
    ^bb0(%dy: f32, %gate: f32, %up: f32):
      %ra = arith.mulf %dy, %up : f32
      %rb = arith.mulf %dy, %gate : f32
      %rs = arith.subf %gate, %up : f32
      coda.yield %ra, %rb, %rs : f32, f32, f32
    }}}}
    coda.yield %d, %y : !coda.tile<{{M}}x{w}xf32>, !coda.tile<{{M}}x{{N}}xf32>"""
    text = gemm_program(
        epi, [("z", f"tensor<{{M}}x{w}x{{T}}>")], [f"tensor<{{M}}x{w}x{{T}}>", "tensor<{M}x{N}x{T}>"],
        tb=True, m=M, n=n, k=K,
    ).replace(" transpose_b", f" transpose_b interleave_wide {hw}" + _config(bn), 1)
    source, (d, _) = _run_both(monkeypatch, text, seed=hw + n)
    assert f"if BN * 2 <= {(2 * hw) & -(2 * hw)}:" in source
    assert d.shape == (M, w)
