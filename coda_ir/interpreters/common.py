"""What the interpreters share: IR element types as torch dtypes, `f32` attribute values, the
function to run, and the error for a bad input.

A base module of `coda_ir.interpreters` (it imports no interpreter), so that the nn and coda
interpreters, `coda_ir.reference` and the tests read types and functions one way.
"""

from __future__ import annotations

import os
import struct

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Attribute, SSAValue

from coda_ir.dialects.element_types import TORCH_DTYPE_NAMES, element_name
from coda_ir.errors import ArgumentError

__all__ = ["InterpreterInputError", "torch_dtype", "element_dtype", "f32_value", "load_func", "check_input_count"]


class InterpreterInputError(ArgumentError, ValueError):
    """A bad input to an interpreter: the number, shape or dtype of its tensors, an index that a
    run-time check refuses (with the op and its location), a function that is not there. An
    `ArgumentError`, and still the `ValueError` (or, through `ArgumentError`, the `TypeError`)
    these errors were before."""


def torch_dtype(attr: Attribute) -> torch.dtype:
    """The torch dtype of an xDSL element type."""
    return getattr(torch, TORCH_DTYPE_NAMES[element_name(attr)])


def element_dtype(value_or_type: SSAValue | Attribute) -> torch.dtype:
    """The torch dtype of the elements of a tensor value or type."""
    ty = value_or_type.type if isinstance(value_or_type, SSAValue) else value_or_type
    assert isinstance(ty, TensorType), ty
    return torch_dtype(ty.get_element_type())


def f32_value(x: float) -> float:
    """The float32 number nearest to x, as a Python float (f32 attributes hold f32 numbers)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def load_func(source: ModuleOp | func.FuncOp | str | os.PathLike, func_name: str | None = None) -> func.FuncOp:
    """The `func.func` named `func_name` (default: the first one) of a module, MLIR text or file.

    Text and files are parsed and verified by `coda_ir.parse`, so their ops carry source
    locations (the interpreters' errors name them) and a bad program is a located
    `CompileError`; a module or function given as such is used as it is."""
    if isinstance(source, func.FuncOp):
        if func_name is not None and source.sym_name.data != func_name:
            raise InterpreterInputError(f"function is @{source.sym_name.data}, not @{func_name}", "func_name")
        return source
    if isinstance(source, (str, os.PathLike)):
        from coda_ir import parse

        source = parse(source)
    funcs = [op for op in source.walk() if isinstance(op, func.FuncOp)]
    if not funcs:
        raise InterpreterInputError("no func.func in the module", "source")
    if func_name is None:
        return funcs[0]
    for f in funcs:
        if f.sym_name.data == func_name:
            return f
    raise InterpreterInputError(f"no func.func @{func_name} (have {', '.join('@' + f.sym_name.data for f in funcs)})", "func_name")


def check_input_count(fn: func.FuncOp, inputs: object) -> None:
    """One input per argument of `fn`."""
    count = len(fn.body.blocks[0].args)
    if len(inputs) != count:  # type: ignore[arg-type]
        raise InterpreterInputError(f"@{fn.sym_name.data} takes {count} inputs, got {len(inputs)}")  # type: ignore[arg-type]
