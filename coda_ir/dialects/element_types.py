"""One name per element type the dialects use, shared by every layer that maps them
(the Triton emitter, the reference interpreter, the IO model's extraction)."""

from __future__ import annotations

from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, Float64Type, IndexType, IntegerType
from xdsl.ir import Attribute

_FLOATS = ((BFloat16Type, "bf16"), (Float16Type, "f16"), (Float32Type, "f32"), (Float64Type, "f64"))
_INTEGER_WIDTHS = {1: "i1", 8: "i8", 16: "i16", 32: "i32", 64: "i64"}


def element_name(attr: Attribute) -> str:
    """`bf16`, `f16`, `f32`, `f64`, `i1` ... `i64` (`index` is `i64`); TypeError otherwise."""
    for cls, name in _FLOATS:
        if isinstance(attr, cls):
            return name
    if isinstance(attr, IndexType):
        return "i64"
    if isinstance(attr, IntegerType) and attr.width.data in _INTEGER_WIDTHS:
        return _INTEGER_WIDTHS[attr.width.data]
    raise TypeError(f"unsupported element type {attr}")


TORCH_DTYPE_NAMES = {
    "bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64",
    "i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
}
TRITON_DTYPE_NAMES = {
    "bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64",
    "i1": "int1", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
}
