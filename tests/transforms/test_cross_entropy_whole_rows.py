"""The separate cross-entropy pass (nn-plan `in_producer_epilogue = false`) as one `whole rows`
kernel whose row lse and target logit complete in the program, the fold summing the rows.

Checked through the interpreter against the stored logits in float64, with targets on the
column tiles' edges (first and last column of a tile, the last column of the vocabulary, in the
ragged last tile) and ignored rows: the row lse the forward returns, and the loss from it (a
target logit read at the wrong column, or dropped, moves the loss by O(1) / kept rows). Once
with the interpreter's tiles (BN = 64 < V) and once with the GPU's (`tiling.LONG_ROWS` and
longer rows: one row per program, BM = 1, 4096-wide tiles), which the interpreter never picks
by itself.
"""

from __future__ import annotations

import pytest
import torch

import coda_ir
from coda_ir import remarks, tiling
from coda_ir.runtime import compiled

from test_cross_entropy_plan import kernels, lm_head  # tests/transforms is on sys.path (pytest prepend mode)


def _targets(m: int, v: int, bn: int) -> torch.Tensor:
    edges = []
    for start in range(0, v, bn):
        edges += [start, min(start + bn, v) - 1]
    edges += [v - 1, -100, 0, -100]
    return torch.tensor((edges * (m // len(edges) + 1))[:m], dtype=torch.int32)


def _check(m: int, d: int, v: int, bn: int) -> None:
    text = lm_head(m, d, v)
    with remarks.printed_remarks(False):
        program = coda_ir.compile(text, pipeline="nn-autodiff,nn-to-coda{cross-entropy=separate}")
    assert "nn.cross_entropy_fwd.lse separate" in kernels(program, "lm_head_fwd")
    assert "nn.cross_entropy.lse separate" in kernels(program, "lm_head")
    g = torch.Generator().manual_seed(v)
    h = torch.randn(m, d, generator=g).to(torch.bfloat16)
    w = (torch.randn(v, d, generator=g) * 0.5).to(torch.bfloat16)
    t = _targets(m, v, bn)
    loss, *_, logits, lse = program.lm_head_fwd(h, w, t)
    x = logits.double()
    lse_ref = torch.logsumexp(x, 1)
    assert torch.allclose(lse.double(), lse_ref, rtol=0, atol=2e-5), (lse.double() - lse_ref).abs().max()
    kept = t != -100
    picked = x[torch.arange(m), t.clamp(0, v - 1).long()]
    # the loss from the kernel's own lse: only the target logits and the fold's f32 sum differ
    expected = (lse.double() - picked)[kept].sum() / kept.sum()
    assert abs(float(loss) - float(expected)) < 1e-5, (float(loss), float(expected))
    # the plain forward (nn.cross_entropy, nothing saved) gives the same loss
    alone = program.lm_head(h, w, t)
    assert abs(float(alone) - float(expected)) < 1e-5, (float(alone), float(expected))


def test_targets_on_tile_edges_and_ignored_rows():
    """The interpreter's whole-rows tiles: BN = 64 over V = 301 (5 tiles, the last ragged)."""
    bn = tiling.whole_elementwise_config(37, 301, "rows", interpreting=True).bn
    assert bn < 301
    _check(37, 40, 301, bn)


def test_one_row_per_program_as_on_the_gpu(monkeypatch):
    """The GPU's tile for vocabulary-wide rows (BM = 1, BN = 4096) run by the interpreter: 5
    tiles per row, the last 116 wide."""
    v = tiling.LONG_ROWS + 116
    gpu = tiling.whole_elementwise_config(7, v, "rows", interpreting=False)
    assert (gpu.bm, gpu.bn) == (1, 4096)
    used = []

    def as_on_the_gpu(M, N, whole, bn_multiple_of=1):
        used.append(tiling.whole_elementwise_config(M, N, whole, bn_multiple_of, interpreting=False))
        return used[-1]

    monkeypatch.setattr(compiled, "whole_elementwise_config", as_on_the_gpu)
    _check(7, 16, v, gpu.bn)
    assert used and all((c.bm, c.bn) == (1, 4096) for c in used), used
