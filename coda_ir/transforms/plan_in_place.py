"""`coda-plan-in-place`: record `coda.writes_over` on the kernels that store an output into a
donated argument (`coda_ir.analysis.in_place`: the conditions and their proof).

Runs on coda programs before the Triton conversions, as a stage of `coda-to-triton`
(`lowering/pipeline.py`; `coda_ir.compile` runs it on the coda program it reports as
`CompiledModule.ir`, whose records `coda_ir.torch` reads back to declare the arguments its
custom op mutates); `convert-coda-to-host` passes the argument as the output
buffer, and the Triton emitter puts the barrier that pair-halves outputs need. Only arguments
the caller marked `coda.donated` are ever written over, so without donations this pass changes
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from coda_ir.analysis.in_place import in_place_choices
from coda_ir.dialects.coda import record_writes_over


def plan_in_place(fn: func.FuncOp) -> None:
    for op, choice in in_place_choices(fn).items():
        record_writes_over(op, choice)


@dataclass(frozen=True)
class PlanInPlacePass(ModulePass):
    """Record which kernel outputs are stored over donated arguments (`coda.writes_over`)."""

    name = "coda-plan-in-place"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fn in op.walk():
            if isinstance(fn, func.FuncOp) and fn.body.blocks:
                plan_in_place(fn)
