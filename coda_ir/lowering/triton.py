"""`-t triton`: lower coda kernels to one Python module of Triton kernels and host functions.

The emitted module has, in order:

* imports, and a small prelude of `@triton.jit` helpers (`_coda_interleave_rows` from the
  mainloop, `_coda_tanh`, `_coda_pow`, `_coda_round_bf16`) plus two constexpr switches fixed
  when the module is imported: `_CODA_INTERPRETING` (TRITON_INTERPRET was set: round bf16
  stores by integer arithmetic, because the interpreter truncates) and `_CODA_LIBDEVICE`
  (libdevice's tanh/pow are callable: on a GPU, not under the interpreter);
* one `@triton.jit` kernel per coda kernel: `coda.gemm` is the fixed mainloop of
  `lowering/mainloop.py` with the epilogue spliced after the K loop; `coda.elementwise` is the
  same epilogue primitives on a tile without a mainloop; `coda.fold` is a row kernel that folds
  partials in a fixed order; a `coda.launch_group` one kernel that calls its members;
* for each `coda.gemm` that carries a `#coda.mainloop` (coda-plan-mainloop), also its
  warp-specialized Gluon kernel (`lowering/gluon.py`'s templates around the epilogue partition),
  in one block defined only where the installed Triton has Gluon;
* one host function per `func.func`, same name, taking torch tensors in argument order: it
  checks the arguments, allocates outputs (partials per tile configuration), launches the
  kernels in program order and returns a tensor or a tuple.

The lowering runs as passes on a copy of the module, then prints (issue 13):
`convert-coda-to-tl` (`lowering/coda_to_tl.py`) names every kernel (recorded on the coda op
as `tl.kernel = @name`) and builds each as `tl.kernel` IR (the `tl` dialect,
`dialects/triton_lang.py`): folds and launch groups there, elementwise kernels and every
epilogue by the epilogue builder (`lowering/tl_epilogue.py`), gemm kernels as one templated
`tl.mainloop` op whose region is the epilogue (`lowering/tl_gemm.py`: the portable kernel and
the Gluon one). `triton_printer.print_kernel` prints them, filling the mainloop templates,
deciding nothing. `convert-coda-to-host` (`lowering/coda_to_host.py`) builds each function's
host wrapper as a `host.func` (the `host` dialect, `dialects/triton_host.py`), which
`host_printer.print_host_function` prints. Options (`TritonOptions`: `epilogue_subtile`,
`half_tile_io`) are the target's arguments and convert-coda-to-tl's pass options. Everything
that cannot be lowered raises a located `CompilerError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import IO

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.utils.target import Target

from coda_ir.context import make_context
from coda_ir.diagnostics import CompilerError, InternalCompilerBug
from coda_ir.dialects import coda
from coda_ir.dialects import triton_host as host
from coda_ir.dialects import triton_lang as tl
from coda_ir.lowering.gluon import GLUON_PRELUDE
from coda_ir.lowering.host_printer import print_host_function
from coda_ir.lowering.mainloop import interleave_rows_source
from coda_ir.lowering.triton_printer import print_kernel
from coda_ir.lowering import coda_to_tl
from coda_ir.lowering.coda_to_host import ConvertCodaToHostPass, host_functions
from coda_ir.lowering.coda_to_tl import ConvertCodaToTLPass, kernel_symbol
from coda_ir.transforms.plan_in_place import PlanInPlacePass
from coda_ir.dialects.tl_names import gluon_entry_name
from coda_ir.lowering.tl_gemm import SUBTILE_MIN_BN_DEFAULT, check_subtile

# (re-exported: tests and bench/kernel_table.py read the emission order from here)
from coda_ir.analysis.epilogue_schedule import EpilogueStep, epilogue_schedule  # noqa: F401

IND = "    "

# ============================================================================ prelude

PRELUDE = '''\
import os

import torch
import triton
import triton.language as tl

from coda_ir.runtime import library as _lib
from coda_ir.runtime import compiled as _rt
from coda_ir.runtime.gemm_launch import launch_gemm

try:
    from triton.language.extra import libdevice
except ImportError:  # pragma: no cover - very old Triton
    libdevice = None

# Fixed when this module is imported (the runtime imports it once per mode).
_CODA_INTERPRETING = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"))
_CODA_LIBDEVICE = tl.constexpr(
    not _CODA_INTERPRETING and libdevice is not None and hasattr(libdevice, "tanh") and hasattr(libdevice, "pow")
)


@triton.jit
def _coda_round_bf16(x):
    if _CODA_INTERPRETING:
        # The interpreter truncates fp32 -> bf16; round to nearest even by hand (NaN/inf kept).
        bits = x.to(tl.uint32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
        bits = bits & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True).to(tl.bfloat16)
    else:
        return x.to(tl.bfloat16)


@triton.jit
def _coda_tanh(x):
    if _CODA_LIBDEVICE:
        return libdevice.tanh(x)
    else:
        ax = tl.abs(x)
        e = tl.exp(-2.0 * ax)
        big = (1.0 - e) / (1.0 + e)
        x2 = x * x
        # odd Taylor series for |x| < 0.4 (no cancellation), error < 1e-9
        small = ax * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0 + x2 * (
            62.0 / 2835.0 + x2 * (-1382.0 / 155925.0 + x2 * (21844.0 / 6081075.0)))))))
        r = tl.where(ax < 0.4, small, big)
        return tl.where(x < 0, -r, r)


@triton.jit
def _coda_pow(x, y):
    if _CODA_LIBDEVICE:
        return libdevice.pow(x, y)
    else:
        r = tl.exp2(y * tl.log2(tl.abs(x)))
        yi = tl.floor(y)
        is_int = yi == y
        odd = is_int & ((yi - 2.0 * tl.floor(yi * 0.5)) == 1.0)
        r = tl.where(x < 0, tl.where(is_int, tl.where(odd, -r, r), float("nan")), r)
        return tl.where(y == 0, 1.0, r)
'''


@dataclass(frozen=True)
class TritonOptions:
    """Options of the Triton lowering (the `triton` target's and the lowering passes' options;
    `coda_ir.compile(..., options=...)`). The defaults are what production uses; the others
    exist to A/B code shapes on a GPU (the values computed are the same either way).

    `epilogue_subtile`: run heavy gemm epilogues per column half of tiles at least this wide (a
    power of two >= 2), or 0: never. `half_tile_io`: N-wide loads and stores of interleaved
    kernels as two contiguous half tiles (True) or one scatter (False).
    """

    epilogue_subtile: int = SUBTILE_MIN_BN_DEFAULT
    half_tile_io: bool = True

    def __post_init__(self) -> None:
        check_subtile(self.epilogue_subtile)


# ============================================================================ kernels


@dataclass
class KernelInfo:
    """What the host side needs to launch one kernel."""

    op: Operation
    name: str
    kind: str  # gemm | elementwise | fold | launch_group
    bn_multiple_of: int = 1
    source: list[str] = field(default_factory=list)
    params: list[str] = field(default_factory=list)  # runtime parameters, then constexprs (no annotation)
    constexprs: int = 0  # how many of `params` (at the end) are tl.constexpr


# ============================================================================ host functions


def count_kernels(fn: func.FuncOp) -> int:
    """GPU kernel launches one call of the function makes (a `coda.launch_group` is one)."""
    return coda.launch_count(fn)


# ============================================================================ module


def function_ops(module: ModuleOp) -> list[func.FuncOp]:
    return [op for op in module.walk() if isinstance(op, func.FuncOp) and op.body.blocks]


def emit_module(module: ModuleOp, options: TritonOptions | None = None) -> str:
    """The Triton source of a whole module (see the module docstring for its layout)."""
    options = options if options is not None else TritonOptions()
    from coda_ir.transforms.legalize import ensure_legalized

    ensure_legalized(module)  # convert-coda-to-tl obeys the tile constraints and forms it records
    # only acts on arguments the caller donated; its `coda.writes_over` records stay on the
    # caller's module (coda_ir.torch reads them from `CompiledModule.ir`)
    PlanInPlacePass().apply(make_context(), module)
    # The passes of the lowering run on a copy: the caller's module stays the coda program.
    module = module.clone()
    ctx = make_context()
    ConvertCodaToTLPass(options.epilogue_subtile, options.half_tile_io).apply(ctx, module)
    ConvertCodaToHostPass().apply(ctx, module)
    tl_kernels = coda_to_tl.tl_kernels(module)
    out: list[str] = [
        '"""Generated by coda-ir (coda -> Triton). Host functions: '
        + ", ".join(f.sym_name.data for f in function_ops(module))
        + '."""',
        PRELUDE,
        "",
        *interleave_rows_source(),
    ]
    sources: dict[str, list[str]] = {}
    gluon_kernels: list[str] = []  # the Gluon entry points (gemms with a coda.mainloop record)
    gluon_source: list[str] = []
    for fn in function_ops(module):
        infos: dict[Operation, KernelInfo] = {}
        for k in coda.kernels(fn):
            name = kernel_symbol(k)
            member = isinstance(k.parent_op(), coda.LaunchGroupOp)
            if isinstance(k, coda.GemmOp):  # (never a launch group member: the pass refuses one)
                info = printed_kernel_info(k, tl_kernels[name], "gemm", False)
                if coda.recorded_mainloop(k) is not None:
                    gluon_kernels.append(gluon_entry_name(name))
                    gluon_source += print_kernel(tl_kernels[gluon_kernels[-1]])
            else:
                assert isinstance(k, (coda.ElementwiseOp, coda.FoldOp))
                kind = "elementwise" if isinstance(k, coda.ElementwiseOp) else "fold"
                info = printed_kernel_info(k, tl_kernels[name], kind, member)
            infos[k] = info
            out += ["", ""] + info.source
        groups = [g for g in fn.walk() if isinstance(g, coda.LaunchGroupOp)]
        for g in groups:
            kernel = tl_kernels[kernel_symbol(g)]
            for i, m in enumerate(g.members()):  # the group kernel calls each member as emitted
                mine = [p[: -len(f"_{i}")] for p in kernel.param_names() if p.endswith(f"_{i}")]
                if mine != infos[m].params:
                    raise InternalCompilerBug(m, f"launch group member parameters {mine} != the kernel's {infos[m].params}")
            info = printed_kernel_info(g, kernel, "launch_group", False)
            infos[g] = info
            out += ["", ""] + info.source
        sources.update({info.name: info.source for info in infos.values()})
    if gluon_kernels:
        # defined where the installed Triton has Gluon (else None: launch_gemm runs the tl kernel)
        out += ["", "", GLUON_PRELUDE.rstrip("\n"), *gluon_source, "else:", *[f"{IND}{g} = None" for g in gluon_kernels]]
    for hfn in host_functions(module):
        out += ["", ""] + print_host_function(hfn, sources)
    for op in module.ops:
        if not isinstance(op, (func.FuncOp, tl.KernelOp, host.FuncOp)):
            raise CompilerError(op, "only func.func ops can be lowered at module level")
    return "\n".join(out) + "\n"


def printed_kernel_info(op: Operation, kernel: tl.KernelOp, kind: str, member: bool) -> KernelInfo:
    """The launch description of a kernel built by convert-coda-to-tl, with its printed source
    (a launch group member's leading `pid` is the group kernel's, not a launch argument)."""
    params = kernel.param_names()[1 if member else 0 :]
    return KernelInfo(op, kernel.sym_name.data, kind, coda.recorded_bn_multiple_of(op) if kind != "fold" else 1,
                      print_kernel(kernel), params, kernel.constexprs.data)


def kernel_counts(module: ModuleOp) -> dict[str, int]:
    return {fn.sym_name.data: count_kernels(fn) for fn in function_ops(module)}


@dataclass(frozen=True)
class TritonTarget(Target):
    """`coda-opt FILE -t triton`: print one Python module of Triton kernels and host functions.

    Its arguments are `TritonOptions`' fields: `-t 'triton{epilogue_subtile=256 half_tile_io=false}'`.
    """

    name = "triton"

    epilogue_subtile: int = SUBTILE_MIN_BN_DEFAULT
    half_tile_io: bool = True

    def options(self) -> TritonOptions:
        return TritonOptions(self.epilogue_subtile, self.half_tile_io)

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        output.write(emit_module(module, self.options()))
