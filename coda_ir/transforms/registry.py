"""Stable pass names -> lazily imported pass classes (shared by coda-opt and the Python API)."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass

PASSES: dict[str, Callable[[], type[ModulePass]]] = {}
