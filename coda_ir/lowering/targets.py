"""Stable target names (`coda-opt -t NAME`) -> lazily imported xDSL `Target` classes."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.utils.target import Target

TARGETS: dict[str, Callable[[], type[Target]]] = {}


def _triton_target() -> type[Target]:
    from coda_ir.lowering.triton import TritonTarget

    return TritonTarget


TARGETS["triton"] = _triton_target


def _io_report_target() -> type[Target]:
    from coda_ir.lowering.report_targets import IOReportTarget

    return IOReportTarget


def _fusion_plan_target() -> type[Target]:
    from coda_ir.lowering.report_targets import FusionPlanTarget

    return FusionPlanTarget


TARGETS["io-report"] = _io_report_target
TARGETS["fusion-plan"] = _fusion_plan_target
