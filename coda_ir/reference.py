"""The nn reference: what an nn program computes, op by op in PyTorch, the oracle of the numerics bar.

    max|out - ref64| <= 2 * max|ref_T - ref64| + 1e-6 * max|ref64|

(`coda_ir.testing.check_close`): `ref64 = run_reference(f, inputs, torch.float64)`, `ref_T` the
same in the program's element type; `reference_pair` gives both.

The interpreter itself, with the rounding model (float64: nothing rounded; any other
`compute_dtype`: fp32 compute, each result rounded once to its element type) and the
conventions of every op, is `coda_ir.interpreters.nn` (an xDSL `Interpreter`, `@impl` per nn
op); this module is its public API.

Public API: `run_reference`, `reference_pair`, `load_func`, `program_dtype`, `element_dtype`,
`torch_dtype`, `f32_value`, `rope_inv_freq`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from coda_ir.interpreters.common import element_dtype, f32_value, load_func, torch_dtype
from coda_ir.interpreters.nn import program_dtype, rope_inv_freq, run_nn

__all__ = [
    "run_reference",
    "reference_pair",
    "load_func",
    "element_dtype",
    "torch_dtype",
    "program_dtype",
    "f32_value",
    "rope_inv_freq",
]


def run_reference(
    module_or_func: ModuleOp | func.FuncOp | str | os.PathLike,
    inputs: Sequence[torch.Tensor],
    compute_dtype: torch.dtype | None = None,
    *,
    func_name: str | None = None,
    trace: Callable[[Operation, torch.Tensor], None] | None = None,
) -> list[torch.Tensor]:
    """Run an nn function op by op and return its results (on the inputs' device).

    `module_or_func`: an xDSL ModuleOp (its first func.func, or `func_name`), a FuncOp, MLIR
    text or a path. `inputs`: one tensor per argument, in order. `compute_dtype`:
    torch.float64 = the exact reference; bf16/f16/f32 = fp32 compute, one rounding per op;
    None = the IR's element types (`coda_ir.interpreters.nn`). `trace(op, result)` is called
    after every op. Autograd flows through the reference (inputs that require grad keep their
    graph)."""
    return run_nn(module_or_func, inputs, compute_dtype, func_name=func_name, trace=trace)


def reference_pair(
    module_or_func: ModuleOp | func.FuncOp | str | os.PathLike,
    inputs: Sequence[torch.Tensor],
    dtype: torch.dtype | None = None,
    *,
    func_name: str | None = None,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """`(ref64, ref_T)`: the float64 reference and the reference in the program's element type
    (`dtype`, default: the type of the function's first float argument)."""
    fn = load_func(module_or_func, func_name)
    ref64 = run_nn(fn, inputs, torch.float64)
    ref_t = run_nn(fn, inputs, dtype if dtype is not None else program_dtype(fn))
    return ref64, ref_t
