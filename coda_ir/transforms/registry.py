"""Stable pass names -> lazily imported pass classes (shared by coda-opt and the Python API)."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass

PASSES: dict[str, Callable[[], type[ModulePass]]] = {}


def _lower_nn():
    from coda_ir.transforms.lower_nn import ConvertNNToCodaPass

    return ConvertNNToCodaPass


PASSES["convert-nn-to-coda"] = _lower_nn


def _lazy(module: str, cls: str, package: str = "coda_ir.transforms") -> Callable[[], type[ModulePass]]:
    def load() -> type[ModulePass]:
        import importlib

        return getattr(importlib.import_module(f"{package}.{module}"), cls)

    return load


PASSES["coda-defer-norms"] = _lazy("defer_norms", "DeferNormsPass")
PASSES["coda-fuse"] = _lazy("fuse", "FusePass")
PASSES["coda-interleave"] = _lazy("interleave", "InterleavePass")
PASSES["coda-legalize"] = _lazy("legalize", "LegalizePass")
PASSES["coda-widen-summed-stores"] = _lazy("widen_sums", "WidenSummedStoresPass")
PASSES["convert-coda-to-tl"] = _lazy("coda_to_tl", "ConvertCodaToTLPass", "coda_ir.lowering")
PASSES["convert-coda-to-host"] = _lazy("coda_to_host", "ConvertCodaToHostPass", "coda_ir.lowering")
PASSES["coda-to-triton"] = _lazy("pipeline", "CodaToTritonPass", "coda_ir.lowering")
PASSES["coda-group-launches"] = _lazy("group_launches", "GroupLaunchesPass")
PASSES["coda-sink-results"] = _lazy("sink_results", "SinkResultsPass")
PASSES["coda-plan-in-place"] = _lazy("plan_in_place", "PlanInPlacePass")
PASSES["coda-plan-mainloop"] = _lazy("plan_mainloop", "PlanMainloopPass")
PASSES["nn-autodiff"] = _lazy("autodiff", "NNAutodiffPass")
PASSES["nn-fuse-siblings"] = _lazy("fuse_siblings", "FuseSiblingsPass")
PASSES["nn-plan"] = _lazy("plan", "NNPlanPass")
PASSES["nn-to-coda"] = _lazy("pipeline", "NNToCodaPass")
