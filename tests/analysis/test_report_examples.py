"""io-report and fusion-plan run on every example (nn and coda) and every test program."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from coda_ir.analysis import io_model as m

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted([*ROOT.glob("examples/*.mlir"), *ROOT.glob("examples/coda/*.mlir"), *ROOT.glob("tests/programs/nn/*.mlir")])


def _module(path: Path):
    import coda_ir

    return coda_ir.parse(str(path))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_reports_on_example(path):
    from coda_ir.analysis.report_targets import FusionPlanTarget, IOReportTarget
    from coda_ir.context import make_context

    module = _module(path)
    has_nn = any(op.name.startswith("nn.") for op in module.walk())
    out = io.StringIO()
    IOReportTarget(decisions=True).emit(make_context(), module, out)
    text = out.getvalue()
    assert text.startswith("// io-report on h100")
    assert "// total:" in text and "SPILLS" not in text
    if has_nn:
        assert "compiled/unfused" in text or "compiled: not shown" in text
    dot = io.StringIO()
    FusionPlanTarget().emit(make_context(), module, dot)
    assert dot.getvalue().startswith("digraph fusion_plan {") and dot.getvalue().count("{") == dot.getvalue().count("}")


def test_compiled_examples_move_fewer_bytes():
    """Every nn example compiled by nn-to-coda moves fewer activation bytes than unfused."""
    import coda_ir
    from coda_ir.analysis.io_extract import extract_module

    checked = 0
    for path in ROOT.glob("examples/*.mlir"):
        module = _module(path)
        if not any(op.name.startswith("nn.") for op in module.walk()):
            continue
        unfused = {p.name: m.program_cost(p.kernels) for p in extract_module(module)}
        compiled = {p.name: m.program_cost(p.kernels) for p in extract_module(coda_ir.lower(module))}
        for name, cost in compiled.items():
            assert cost.activation_bytes < unfused[name].activation_bytes, (path.name, name)
            checked += 1
    assert checked, "no nn examples were checked"


def test_fusion_plan_labels_whole_rows_reductions_complete():
    """The LM head's final-norm statistics run as one `whole rows` kernel (row sums complete in the
    program): labelled a row reduction, not a partial one; the logits GEMM's lse partials stay
    partial (dashed)."""
    from coda_ir import remarks
    from coda_ir.analysis.report_targets import FusionPlanTarget
    from coda_ir.context import make_context
    import coda_ir

    with remarks.printed_remarks(False):
        module = coda_ir.lower(_module(ROOT / "examples" / "lm_head.mlir"), "nn-to-coda")
    dot = io.StringIO()
    FusionPlanTarget().emit(make_context(), module, dot)
    lines = dot.getvalue().splitlines()
    stats = [line for line in lines if "nn.rms_norm.stats" in line and "label=" in line]
    lse = [line for line in lines if "nn.cross_entropy.lse" in line and "label=" in line]
    assert stats and all("(row reduction, whole rows)" in line and "dashed" not in line for line in stats)
    assert lse and all("(partial reduction)" in line and "dashed" in line for line in lse)
