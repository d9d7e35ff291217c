"""`coda-to-triton`: the pipeline from legalized coda kernels to the `tl` / `host` IR that the
`triton` target prints (the target itself runs no pass: it prints, deciding nothing).

    coda-legalize          only on a module it has not run on (hand-written coda): the tl
                           conversion obeys the tile constraints and forms it records
    coda-plan-in-place     record which outputs are stored over donated arguments
    convert-coda-to-tl     every coda kernel -> its `tl.kernel` (options below)
    convert-coda-to-host   every function -> its `host.func`

Options (`-p 'coda-to-triton{epilogue-subtile=256 half-tile-io=false}'`; from Python
`TritonOptions`): those of `convert-coda-to-tl`. The defaults are what production uses; the others
exist to A/B code shapes on a GPU (the values computed are the same either way).

`coda-opt FILE -p nn-to-coda -t triton` keeps working because the driver, not the target, appends
this pipeline when the program it is about to print has not been lowered yet
(`coda_ir.tools.coda_opt`). The Python API (`coda_ir.compile`) runs it through
`lower_to_triton`: the records (legalize, in-place plan) land on the coda program the caller
inspects as `CompiledModule.ir`, the conversions run on a copy that only the printer reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from coda_ir.context import make_context
from coda_ir.errors import ArgumentError
from coda_ir.lowering.coda_to_host import ConvertCodaToHostPass
from coda_ir.lowering.coda_to_tl import ConvertCodaToTLPass
from coda_ir.lowering.tl_gemm import SUBTILE_MIN_BN_DEFAULT, check_subtile
from coda_ir.transforms.legalize import LEGALIZED, LegalizePass
from coda_ir.transforms.plan_in_place import PlanInPlacePass


@dataclass(frozen=True)
class TritonOptions:
    """Options of the Triton lowering (`coda_ir.compile(..., options=...)`; on the command line
    the options of `coda-to-triton`). The defaults are what production uses; the others exist to
    A/B code shapes on a GPU (the values computed are the same either way).

    `epilogue_subtile`: run heavy gemm epilogues per column half of tiles at least this wide (a
    power of two >= 2), or 0: never. `half_tile_io`: N-wide loads and stores of interleaved
    kernels as two contiguous half tiles (True) or one scatter (False).
    """

    epilogue_subtile: int = SUBTILE_MIN_BN_DEFAULT
    half_tile_io: bool = True

    def __post_init__(self) -> None:
        check_subtile(self.epilogue_subtile)


@dataclass(frozen=True)
class CodaToTritonPass(ModulePass):
    """Lower coda kernels to the `tl` kernels and `host` functions that `-t triton` prints:
    coda-legalize (where it has not run), coda-plan-in-place, convert-coda-to-tl,
    convert-coda-to-host.

    Options: `epilogue_subtile` and `half_tile_io`, passed to convert-coda-to-tl (`TritonOptions`)."""

    name = "coda-to-triton"

    epilogue_subtile: int = SUBTILE_MIN_BN_DEFAULT
    half_tile_io: bool = True

    @staticmethod
    def of(options: TritonOptions | None) -> CodaToTritonPass:
        options = options if options is not None else TritonOptions()
        return CodaToTritonPass(options.epilogue_subtile, options.half_tile_io)

    def record_stages(self, module: ModuleOp) -> list[ModulePass]:
        """The coda -> coda stages: they only add records (tile constraints, in-place choices)."""
        # a module coda-legalize proved already keeps its records (the nn-to-coda pipeline ends there)
        legalize: list[ModulePass] = [] if LEGALIZED in module.attributes else [LegalizePass()]
        # only acts on arguments the caller donated (`coda.donated`); without donations a no-op
        return [*legalize, PlanInPlacePass()]

    def conversion_stages(self) -> list[ModulePass]:
        """The coda -> tl / host conversions (the coda functions stay, annotated with kernel names)."""
        return [ConvertCodaToTLPass(self.epilogue_subtile, self.half_tile_io), ConvertCodaToHostPass()]

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        try:
            check_subtile(self.epilogue_subtile)
        except ValueError as error:
            raise ArgumentError(f"coda-to-triton: option epilogue-subtile: {error}") from None
        for stage in [*self.record_stages(op), *self.conversion_stages()]:
            stage.apply(ctx, op)


def lower_to_triton(module: ModuleOp, options: TritonOptions | None = None) -> ModuleOp:
    """Run `coda-to-triton` for the Python API: its record stages on `module` itself (the coda
    program `CompiledModule.ir` shows, whose `coda.writes_over` records `coda_ir.torch` reads),
    its conversions on a copy, which is returned for the printer (`lowering.triton.print_module`)."""
    pipeline = CodaToTritonPass.of(options)
    ctx = make_context()
    for stage in pipeline.record_stages(module):
        stage.apply(ctx, module)
    lowered = module.clone()
    for stage in pipeline.conversion_stages():
        stage.apply(ctx, lowered)
    return lowered
