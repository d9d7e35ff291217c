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
    from coda_ir.lowering.report_targets import FusionPlanTarget, IOReportTarget
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
