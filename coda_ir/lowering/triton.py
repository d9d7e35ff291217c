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

This module prints; it runs no pass and decides nothing (issue 34). The `coda-to-triton`
pipeline (`lowering/pipeline.py`) lowers first: `convert-coda-to-tl` (`lowering/coda_to_tl.py`)
names every kernel (recorded on the coda op as `tl.kernel = @name`) and builds each as
`tl.kernel` IR (the `tl` dialect, `dialects/triton_lang.py`): folds and launch groups there,
elementwise kernels and every epilogue by the epilogue lowering (`lowering/tl_epilogue.py`), gemm
kernels as one templated `tl.mainloop` op whose region is the epilogue (`lowering/tl_gemm.py`:
the portable kernel and the Gluon one); `convert-coda-to-host` (`lowering/coda_to_host.py`)
builds each function's host wrapper as a `host.func` (the `host` dialect,
`dialects/triton_host.py`). `print_module` then prints that IR without changing it:
`triton_printer.print_kernel` each `tl.kernel` (filling the mainloop templates),
`host_printer.print_host_function` each `host.func`. A module that has not been lowered is a
located `CompilerError` naming the pipeline to run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import IO

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.utils.target import Target

from coda_ir.diagnostics import CompilerError, InternalCompilerBug
from coda_ir.dialects import coda
from coda_ir.dialects import triton_host as host
from coda_ir.dialects import triton_lang as tl
from coda_ir.dialects.tl_names import gluon_entry_name, kernel_symbol
from coda_ir.lowering.gluon import GLUON_PRELUDE
from coda_ir.lowering.host_printer import print_host_function
from coda_ir.lowering.mainloop import interleave_rows_source
from coda_ir.lowering.triton_printer import print_kernel

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


def lowered_functions(module: ModuleOp) -> set[str]:
    """The functions of `module` that coda-to-triton lowered (each has its `host.func`)."""
    return {op.py_name for op in module.walk() if isinstance(op, host.FuncOp)}


def seq_len_functions(module: ModuleOp) -> list[str]:
    """The lowered functions that take their attention's sequence length (`host.func`'s `seq_len`)."""
    return sorted(op.py_name for op in module.walk() if isinstance(op, host.FuncOp) and op.seq_len is not None)


def is_lowered(module: ModuleOp) -> bool:
    """Whether coda-to-triton ran: every function with a body has its `host.func`."""
    lowered = lowered_functions(module)
    return all(fn.sym_name.data in lowered for fn in function_ops(module))


def require_lowered(module: ModuleOp) -> None:
    """A located error for the first function coda-to-triton has not lowered (nothing to print)."""
    lowered = lowered_functions(module)
    for fn in function_ops(module):
        if fn.sym_name.data not in lowered:
            raise CompilerError(fn, "the triton target prints tl / host IR: lower this function first "
                                    "(-p coda-to-triton, or coda_ir.compile)")


def print_module(module: ModuleOp) -> str:
    """The Triton source of a module lowered by coda-to-triton (see the module docstring for its
    layout). Reads `module`, never changes it."""
    require_lowered(module)
    tl_kernels = {op.sym_name.data: op for op in module.ops if isinstance(op, tl.KernelOp)}
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
    for hfn in [op for op in module.walk() if isinstance(op, host.FuncOp)]:
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
    """`coda-opt FILE -t triton`: print the `tl` / `host` IR of coda-to-triton as one Python module of Triton kernels and host functions (coda-opt runs coda-to-triton first when -p did not).

    The target runs no pass. Lowering options are the pipeline's:
    `-p 'nn-to-coda,coda-to-triton{epilogue-subtile=256}' -t triton`.
    """

    name = "triton"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        output.write(print_module(module))
