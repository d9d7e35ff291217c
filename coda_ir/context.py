"""The compiler's context: the dialects a program may use and the passes that run on it.

A base module (below passes, lowering and the CLI) so that the Python API, the report targets
and `coda-opt` share one registry without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.context import Context
from xdsl.passes import ModulePass


def universe_dialects() -> dict[str, Callable[[], object]]:
    def builtin():
        from xdsl.dialects.builtin import Builtin

        return Builtin

    def func():
        from xdsl.dialects.func import Func

        return Func

    def arith():
        from xdsl.dialects.arith import Arith

        return Arith

    def math():
        from xdsl.dialects.math import Math

        return Math

    def test():
        from xdsl.dialects.test import Test

        return Test

    def nn():
        from coda_ir.dialects.nn import NN

        return NN

    def coda():
        from coda_ir.dialects.coda import CODA

        return CODA

    def scf():
        from xdsl.dialects.scf import Scf

        return Scf

    def tl():
        from coda_ir.dialects.triton_lang import TL

        return TL

    def host():
        from coda_ir.dialects.triton_host import HOST

        return HOST

    return {"builtin": builtin, "func": func, "arith": arith, "math": math, "scf": scf, "test": test, "nn": nn,
            "coda": coda, "tl": tl, "host": host}


def coda_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Every pass coda-opt knows, by stable name. Kept importable so the Python API shares it."""
    from coda_ir.transforms import registry

    passes = dict(registry.PASSES)

    def canonicalize():
        from xdsl.transforms.canonicalize import CanonicalizePass

        return CanonicalizePass

    def cse():
        from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination

        return CommonSubexpressionElimination

    def dce():
        from xdsl.transforms.dead_code_elimination import DeadCodeElimination

        return DeadCodeElimination

    passes.update({"canonicalize": canonicalize, "cse": cse, "dce": dce})
    return passes


def make_context() -> Context:
    ctx = Context()
    for name, factory in universe_dialects().items():
        ctx.register_dialect(name, factory)  # type: ignore[arg-type]
    return ctx
