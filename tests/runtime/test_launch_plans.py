"""`launch_gemm`'s launch plans (issue 11): a plan per launch key is reused on later calls and
changes no bit of any result; a call whose operands differ in what the plan depends on (here a
transposed, non-contiguous operand: other strides) gets its own plan."""

from __future__ import annotations

import torch

import coda_ir
from coda_ir.runtime import gemm_launch

from tests.lowering.helpers import DEVICE

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


GROUPS = """
func.func @f(%a: tensor<37x40xbf16>, %w: tensor<52x40xbf16>, %r: tensor<37x52xbf16>) -> (tensor<37x52xbf16>, tensor<37x52xbf16>, tensor<37xf32>) {
  %plain = coda.gemm %a, %w transpose_b : tensor<37x40xbf16>, tensor<52x40xbf16> -> tensor<37x52xbf16> {
  ^bb0(%acc: !coda.tile<37x52xf32>):
    coda.yield %acc : !coda.tile<37x52xf32>
  }
  %res = coda.gemm %a, %w transpose_b ins(%r : tensor<37x52xbf16>) : tensor<37x40xbf16>, tensor<52x40xbf16> -> tensor<37x52xbf16> {
  ^bb0(%acc: !coda.tile<37x52xf32>, %ri: tensor<37x52xbf16>):
    %x = coda.accumulate %acc, %ri : !coda.tile<37x52xf32>, tensor<37x52xbf16>
    coda.yield %x : !coda.tile<37x52xf32>
  }
  %p = coda.gemm %a, %w transpose_b : tensor<37x40xbf16>, tensor<52x40xbf16> -> !coda.partials<rows, 37, sum> {
  ^bb0(%acc: !coda.tile<37x52xf32>):
    %s = coda.reduce sumsq %acc dim 1 : !coda.tile<37x52xf32> -> !coda.partials<rows, 37, sum>
    coda.yield %s : !coda.partials<rows, 37, sum>
  }
  %q = coda.fold %p : !coda.partials<rows, 37, sum> -> tensor<37xf32> {
  ^bb0(%v: f32):
    coda.yield %v : f32
  }
  func.return %plain, %res, %q : tensor<37x52xbf16>, tensor<37x52xbf16>, tensor<37xf32>
}
"""


def test_tuning_groups_are_decided_by_the_compiler():
    """Kernels of one GEMM shape share a tuning only within a tuning group, which
    convert-coda-to-host decides from the epilogue's [M, N] matrices (twice their count): a
    plain GEMM storing [M, N] is in group 2, the same GEMM also reading a residual [M, N] in 4,
    one writing only row partials ([M, tiles]) in 0. The printed launch passes the group to
    launch_gemm; nothing is re-derived from the arguments at run time."""
    from coda_ir.dialects import triton_host as host
    from coda_ir.lowering.pipeline import lower_to_triton
    from coda_ir.lowering.triton import print_module

    module = lower_to_triton(coda_ir.parse(GROUPS))
    (fn,) = [op for op in module.walk() if isinstance(op, host.FuncOp)]
    launches = [op for op in fn.walk() if isinstance(op, host.LaunchGemmOp)]
    assert [op.epilogue_half_tiles.data for op in launches] == [2, 4, 0]
    text = print_module(module)
    for group in (2, 4, 0):
        assert f"tuning_group='epilogue-half-tiles={group}'" in text
    assert not hasattr(gemm_launch, "epilogue_tiles")
