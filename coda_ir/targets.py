"""Every target coda-opt knows (`-t NAME`), by stable name -> lazily imported xDSL `Target` class.

The Triton backend's printer (`coda_ir.lowering`) and the analysis reports (`coda_ir.analysis`)
are targets of one driver but belong to neither package, so the table lives above both (the
passes' table is `coda_ir.transforms.registry`; `coda_ir.context` stays below everything).
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.utils.target import Target


def _triton() -> type[Target]:
    from coda_ir.lowering.triton import TritonTarget

    return TritonTarget


def _io_report() -> type[Target]:
    from coda_ir.analysis.report_targets import IOReportTarget

    return IOReportTarget


def _fusion_plan() -> type[Target]:
    from coda_ir.analysis.report_targets import FusionPlanTarget

    return FusionPlanTarget


TARGETS: dict[str, Callable[[], type[Target]]] = {
    "triton": _triton,
    "io-report": _io_report,
    "fusion-plan": _fusion_plan,
}
