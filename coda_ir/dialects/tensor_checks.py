"""The operand and property checks that the verifiers of the nn ops and of the library steps
share (`library_steps.py`): static float tensors, i32 vectors, result shapes and element types,
typed integer and float properties. Each raises a `VerifyException` that names the operand or
property; xDSL prefixes the op and its location.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    TensorType,
    f32,
    i64,
)
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import IRDLOperation
from xdsl.utils.exceptions import VerifyException

FLOAT_TYPES = (Float32Type, BFloat16Type, Float16Type)


def shape_of(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType)
    return tuple(value.type.get_shape())


def element_type_of(value: SSAValue) -> Attribute:
    assert isinstance(value.type, TensorType)
    return value.type.get_element_type()


def fmt_shape(shape: Sequence[int]) -> str:
    return "x".join(str(d) for d in shape) if shape else "scalar"


def check_static_float(op: IRDLOperation, name: str, value: SSAValue, rank: int | None) -> None:
    ty = value.type
    if not isinstance(ty, TensorType):
        raise VerifyException(f"{name} must be a ranked tensor, got {ty}")
    if any(d < 0 for d in ty.get_shape()):
        raise VerifyException(f"{name} must have a static shape, got {ty}")
    check_size(name, ty)
    if rank is not None and len(ty.get_shape()) != rank:
        raise VerifyException(f"{name} must be rank {rank}, got {ty}")
    if not isinstance(ty.get_element_type(), FLOAT_TYPES):
        raise VerifyException(f"{name} must have element type f32, bf16 or f16, got {ty}")


MAX_ELEMENTS = 2**63 - 1
"""The most elements one tensor may have: sizes and offsets are int64 in the emitted code."""


def check_size(name: str, ty: TensorType) -> None:
    """Every dimension at least 1, and the element count within int64 (a dimension beyond
    int64 would otherwise be emitted as is)."""
    shape = ty.get_shape()
    if any(d == 0 for d in shape):
        raise VerifyException(f"{name} has a zero-size dimension ({ty}): every dimension must be at least 1")
    if math.prod(shape) > MAX_ELEMENTS:
        raise VerifyException(
            f"{name} has {math.prod(shape)} elements ({fmt_shape(shape)}), more than int64 can index ({MAX_ELEMENTS})"
        )


def check_i32_vector(name: str, value: SSAValue, length: int) -> None:
    ty = value.type
    if not isinstance(ty, TensorType) or len(ty.get_shape()) != 1:
        raise VerifyException(f"{name} must be a rank-1 tensor of i32, got {ty}")
    elt = ty.get_element_type()
    if not (isinstance(elt, IntegerType) and elt.width.data == 32):
        raise VerifyException(f"{name} must have element type i32, got {ty}")
    check_size(name, ty)
    if ty.get_shape()[0] != length:
        raise VerifyException(f"{name} must have {length} elements (one per row), got {ty}")


def check_same_element_type(op: IRDLOperation, values: Sequence[tuple[str, SSAValue]]) -> None:
    first_name, first = values[0]
    for name, value in values[1:]:
        if element_type_of(value) != element_type_of(first):
            raise VerifyException(
                f"{name} element type {element_type_of(value)} does not match "
                f"{first_name} element type {element_type_of(first)}"
            )


def check_result(op: IRDLOperation, expected_shape: Sequence[int], like: SSAValue) -> None:
    result = op.results[0]
    check_static_float(op, "result", result, None)
    if tuple(shape_of(result)) != tuple(expected_shape):
        raise VerifyException(
            f"result shape must be {fmt_shape(expected_shape)}, got {fmt_shape(shape_of(result))}"
        )
    if element_type_of(result) != element_type_of(like):
        raise VerifyException(
            f"result element type {element_type_of(result)} does not match operand "
            f"element type {element_type_of(like)}"
        )


def int_prop(op: IRDLOperation, name: str) -> int:
    """An integer property; the contract (NN_DIALECT.md) fixes its type to i64."""
    attr = op.properties[name]
    assert isinstance(attr, IntegerAttr)
    if attr.type != i64:
        raise VerifyException(f"property {name} must be an i64 integer (e.g. `{name} = 4 : i64`), got {attr.type}")
    return attr.value.data


def float_prop(op: IRDLOperation, name: str) -> float:
    """A float property; the contract (NN_DIALECT.md) fixes its type to f32."""
    attr = op.properties[name]
    assert isinstance(attr, FloatAttr)
    if attr.type != f32:
        raise VerifyException(f"property {name} must be an f32 float (e.g. `{name} = 1.0e-06 : f32`), got {attr.type}")
    return attr.value.data


def check_positive(op: IRDLOperation, name: str) -> int:
    value = int_prop(op, name)
    if value <= 0:
        raise VerifyException(f"{name} must be positive, got {value}")
    return value


def check_like(op: IRDLOperation, index: int, like: SSAValue, what: str) -> None:
    result = op.results[index]
    if result.type != like.type:
        raise VerifyException(f"result #{index} ({what}) must have type {like.type}, got {result.type}")
