"""Stable pass names -> lazily imported pass classes (shared by coda-opt and the Python API)."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass

PASSES: dict[str, Callable[[], type[ModulePass]]] = {}


def _lower_nn():
    from coda_ir.transforms.lower_nn import ConvertNNToCodaPass

    return ConvertNNToCodaPass


PASSES["convert-nn-to-coda"] = _lower_nn
