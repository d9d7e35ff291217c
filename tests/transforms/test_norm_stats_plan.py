"""Where RMSNorm statistics are taken is nn-plan's choice (`io_plans.stats_plan`), recorded as
`stats_in_producer_epilogue` and obeyed by coda-defer-norms: both constructions compute the
reference's numbers, and only the planned pass asks the model."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import coda_ir
from coda_ir import testing
from coda_ir.analysis import io_plans
from coda_ir.dialects import nn

BLOCK = """func.func @f(%a: tensor<13x24xf32>, %w0: tensor<32x24xf32>, %g: tensor<32xf32>, %w: tensor<40x32xf32>) -> tensor<13x40xf32> {
  %x = "nn.linear"(%a, %w0) : (tensor<13x24xf32>, tensor<32x24xf32>) -> tensor<13x32xf32>
  %h = "nn.rms_norm"(%x, %g) <{eps = 1.0e-06 : f32}> : (tensor<13x32xf32>, tensor<32xf32>) -> tensor<13x32xf32>
  %y = "nn.linear"(%h, %w) : (tensor<13x32xf32>, tensor<40x32xf32>) -> tensor<13x40xf32>
  func.return %y : tensor<13x40xf32>
}
"""


def _norms(module):
    return [op for op in module.walk() if isinstance(op, nn.RMSNormOp)]


def _force(monkeypatch, choice: str) -> list[tuple]:
    calls: list[tuple] = []
    real = io_plans.stats_plan

    def plan(m, d, **kw):
        calls.append((m, d, kw.get("K")))
        decision = real(m, d, **kw)
        return io_plans.Decision(choice, decision.costs, "forced by the test")

    monkeypatch.setattr(io_plans, "stats_plan", plan)
    return calls


def test_plan_records_a_row_kernel_and_defer_norms_obeys(monkeypatch, capfd):
    calls = _force(monkeypatch, "row_kernel")
    planned = coda_ir.lower(coda_ir.parse(BLOCK), "nn-plan", remarks=True)
    assert calls == [(13, 32, 24)]  # M, D and the producing GEMM's K
    (norm,) = _norms(planned)
    assert nn.planned(norm, "stats_in_producer_epilogue") is False
    assert "the IO model prefers a row kernel" in capfd.readouterr().err
    kept = coda_ir.lower(coda_ir.parse(BLOCK), "nn-plan,coda-defer-norms")
    assert len(_norms(kept)) == 1  # left to convert-nn-to-coda's row kernel
    inputs = testing.random_inputs(BLOCK, seed=5)
    for choice, kernels in (("row_kernel", 2), ("producer_epilogue", 3)):
        _force(monkeypatch, choice)
        compiled = coda_ir.compile(BLOCK, "nn-to-coda{group-launches=false}")
        testing.check_against_reference(BLOCK, inputs, compiled.f(*inputs))
        # row kernel: the whole-row norm rides in the first GEMM's epilogue (D = 32 fits a tile);
        # statistics: GEMM storing x * g with sum-of-squares partials, fold, GEMM with the row scale
        assert compiled.kernel_count("f") == kernels


def test_plan_prefers_statistics_in_the_epilogue_here_and_records_nothing():
    (norm,) = _norms(coda_ir.lower(coda_ir.parse(BLOCK), "nn-plan"))
    assert "stats_in_producer_epilogue" not in norm.properties


def test_no_plan_without_cost_model_or_defer_norms(monkeypatch):
    calls = _force(monkeypatch, "row_kernel")
    for pipeline in ("nn-to-coda{cost-model=false}", "nn-to-coda{defer-norms=false}", "coda-defer-norms"):
        coda_ir.lower(coda_ir.parse(BLOCK), pipeline)
    assert calls == []
