"""`launch_gemm`'s launch plans (issue 11): a plan per launch key is reused on later calls and
changes no bit of any result; a call whose operands differ in what the plan depends on (here a
transposed, non-contiguous operand: other strides) gets its own plan."""

from __future__ import annotations

import torch

import coda_ir
from coda_ir.lowering import gemm_launch

from .helpers import DEVICE

PROGRAM = """
func.func @f(%x: tensor<37x40xbf16>, %w: tensor<52x40xbf16>, %g: tensor<40xbf16>) -> tensor<37x52xbf16> {
  %h = nn.rms_norm %x, %g {eps = 1.0e-05 : f32} : tensor<37x40xbf16>, tensor<40xbf16> -> tensor<37x40xbf16>
  %y = nn.linear %h, %w : tensor<37x40xbf16>, tensor<52x40xbf16> -> tensor<37x52xbf16>
  %z = nn.silu %y : tensor<37x52xbf16> -> tensor<37x52xbf16>
  func.return %z : tensor<37x52xbf16>
}
"""


def test_plans_are_reused_and_change_no_bit():
    cm = coda_ir.compile(PROGRAM)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, 40, generator=g).bfloat16().to(DEVICE)
    w = torch.randn(52, 40, generator=g).bfloat16().to(DEVICE)
    wn = (1 + 0.1 * torch.randn(40, generator=g)).bfloat16().to(DEVICE)
    before = gemm_launch.set_launch_plans(False)
    try:
        gemm_launch._PLANS.clear()
        reference = cm.f(x, w, wn)
        assert not gemm_launch._PLANS  # off: nothing kept
        gemm_launch.set_launch_plans(True)
        first = cm.f(x, w, wn)
        plans = dict(gemm_launch._PLANS)
        assert plans
        second = cm.f(x.clone(), w.clone(), wn)
        assert gemm_launch._PLANS == plans  # same key: the plan is reused, none added
        assert torch.equal(first, reference) and torch.equal(second, reference)
        # a transposed view of the weight: other strides, so another plan, same bits
        wt = w.t().contiguous().t()
        assert wt.stride() != w.stride()
        third = cm.f(x, wt, wn)
        assert len(gemm_launch._PLANS) > len(plans)
        assert torch.equal(third, reference)
    finally:
        gemm_launch.set_launch_plans(before)


def test_epilogue_weight_separates_shared_tunings():
    """Kernels of one GEMM shape share a tuning only with the same epilogue weight: a plain GEMM
    storing [M, N] weighs 1, the same GEMM reading z [M, 2N] and writing dz [M, 2N] (the SwiGLU
    backward in the dgrad's epilogue) 4; row partials ([M, tiles]) and vectors barely count."""
    m, n = 96, 80
    plain = [torch.empty(m, n)]
    swiglu = [torch.empty(m, 2 * n), torch.empty(m, 2 * n), torch.empty(m, 3)]
    norm = [torch.empty(m, n), torch.empty(m, n), torch.empty(n), torch.empty(3, n), 1e-5]
    weights = [gemm_launch.epilogue_tiles(extra, m, n) for extra in (plain, swiglu, norm)]
    assert weights == [1, 4, 2]
    # a weight only counts tensors with the GEMM's M rows: a [N, *] operand is not an M x N tile
    assert gemm_launch.epilogue_tiles([torch.empty(n, n)], m, n) == 0
