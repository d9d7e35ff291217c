"""The per-op table of the Triton epilogue lowering (`tl_epilogue.EPILOGUE_LOWERINGS`, issue 34):
every coda epilogue primitive has exactly one registered lowering, and dispatch on an op without
one is an internal error naming the op, never a silent skip."""

from __future__ import annotations

import pytest
from xdsl.dialects import arith, test
from xdsl.dialects.builtin import i32

from coda_ir.analysis.epilogue_schedule import EpilogueStep
from coda_ir.diagnostics import InternalCompilerBug
from coda_ir.dialects import coda
from coda_ir.lowering.tl_epilogue import EPILOGUE_LOWERINGS
from coda_ir.lowering.tl_epilogue_context import EpilogueLowerings


def test_every_epilogue_primitive_has_a_lowering():
    primitives = {op for op in coda.CODA.operations if issubclass(op, coda.TileOperation)}
    assert primitives, "no coda epilogue primitives found"
    missing = sorted(op.__name__ for op in primitives if op not in EPILOGUE_LOWERINGS.by_op)
    assert not missing, f"coda epilogue primitives without a Triton lowering: {missing}"


def test_scalar_ops_of_the_region_are_registered():
    # the verifier admits arith / math ops in a region (`coda.ELEMENTWISE_BODY_DIALECTS`)
    assert arith.AddfOp in EPILOGUE_LOWERINGS.by_op and arith.ConstantOp in EPILOGUE_LOWERINGS.by_op


def test_an_op_without_a_lowering_is_an_internal_error():
    op = test.TestOp(result_types=[i32])
    with pytest.raises(InternalCompilerBug, match="'test.op' has no lowering in the Triton epilogue table"):
        EPILOGUE_LOWERINGS.lower(None, EpilogueStep(op, (0,)))  # type: ignore[arg-type]


def test_registering_an_op_twice_is_refused():
    first, second = EpilogueLowerings(), EpilogueLowerings()
    first.impl(coda.LoadOp)(lambda ctx, op, step: None)
    second.impl(coda.LoadOp)(lambda ctx, op, step: None)
    with pytest.raises(ValueError, match="two Triton epilogue lowerings for LoadOp"):
        EpilogueLowerings(first, second)
