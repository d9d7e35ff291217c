"""The `nn` dialect: tensor-level Transformer operators, the compiler's input language.

Names, operand order, property names and semantics are a contract (NN_DIALECT.md): outside
tests write these ops in the generic form. Every op computes in fp32 and rounds its result
once to the result element type. The pretty syntax is

    %y = nn.rms_norm %x, %w {eps = 1.0e-06 : f32} : tensor<256x128xbf16>, tensor<128xbf16> -> tensor<256x128xbf16>

i.e. operands, properties in a dictionary, then operand types and the result type.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    f32,
    i64,
)
from xdsl.ir import Attribute, Dialect, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

FLOAT_TYPES = (Float32Type, BFloat16Type, Float16Type)


# ----------------------------------------------------------------------------- helpers


def _shape(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType)
    return tuple(value.type.get_shape())


def _element_type(value: SSAValue) -> Attribute:
    assert isinstance(value.type, TensorType)
    return value.type.get_element_type()


def _fmt(shape: Sequence[int]) -> str:
    return "x".join(str(d) for d in shape) if shape else "scalar"


def _check_static_float(op: IRDLOperation, name: str, value: SSAValue, rank: int | None) -> None:
    ty = value.type
    if not isinstance(ty, TensorType):
        raise VerifyException(f"{name} must be a ranked tensor, got {ty}")
    if any(d < 0 for d in ty.get_shape()):
        raise VerifyException(f"{name} must have a static shape, got {ty}")
    if rank is not None and len(ty.get_shape()) != rank:
        raise VerifyException(f"{name} must be rank {rank}, got {ty}")
    if not isinstance(ty.get_element_type(), FLOAT_TYPES):
        raise VerifyException(f"{name} must have element type f32, bf16 or f16, got {ty}")


def _check_i32_vector(name: str, value: SSAValue, length: int) -> None:
    ty = value.type
    if not isinstance(ty, TensorType) or len(ty.get_shape()) != 1:
        raise VerifyException(f"{name} must be a rank-1 tensor of i32, got {ty}")
    elt = ty.get_element_type()
    if not (isinstance(elt, IntegerType) and elt.width.data == 32):
        raise VerifyException(f"{name} must have element type i32, got {ty}")
    if ty.get_shape()[0] != length:
        raise VerifyException(f"{name} must have {length} elements (one per row), got {ty}")


def _check_same_element_type(op: IRDLOperation, values: Sequence[tuple[str, SSAValue]]) -> None:
    first_name, first = values[0]
    for name, value in values[1:]:
        if _element_type(value) != _element_type(first):
            raise VerifyException(
                f"{name} element type {_element_type(value)} does not match "
                f"{first_name} element type {_element_type(first)}"
            )


def _check_result(op: IRDLOperation, expected_shape: Sequence[int], like: SSAValue) -> None:
    result = op.results[0]
    _check_static_float(op, "result", result, None)
    if tuple(_shape(result)) != tuple(expected_shape):
        raise VerifyException(
            f"result shape must be {_fmt(expected_shape)}, got {_fmt(_shape(result))}"
        )
    if _element_type(result) != _element_type(like):
        raise VerifyException(
            f"result element type {_element_type(result)} does not match operand "
            f"element type {_element_type(like)}"
        )


def _int_prop(op: IRDLOperation, name: str) -> int:
    """An integer property; the contract (NN_DIALECT.md) fixes its type to i64."""
    attr = op.properties[name]
    assert isinstance(attr, IntegerAttr)
    if attr.type != i64:
        raise VerifyException(f"property {name} must be an i64 integer (e.g. `{name} = 4 : i64`), got {attr.type}")
    return attr.value.data


def _float_prop(op: IRDLOperation, name: str) -> float:
    """A float property; the contract (NN_DIALECT.md) fixes its type to f32."""
    attr = op.properties[name]
    assert isinstance(attr, FloatAttr)
    if attr.type != f32:
        raise VerifyException(f"property {name} must be an f32 float (e.g. `{name} = 1.0e-06 : f32`), got {attr.type}")
    return attr.value.data


def _str_prop(op: IRDLOperation, name: str) -> str:
    attr = op.properties[name]
    assert isinstance(attr, StringAttr)
    return attr.data


def _check_choice(op: IRDLOperation, name: str, choices: Sequence[str]) -> None:
    value = _str_prop(op, name)
    if value not in choices:
        options = ", ".join(f'"{c}"' for c in choices)
        raise VerifyException(f'{name} must be one of {options}, got "{value}"')


def _check_positive(op: IRDLOperation, name: str) -> int:
    value = _int_prop(op, name)
    if value <= 0:
        raise VerifyException(f"{name} must be positive, got {value}")
    return value


# ----------------------------------------------------------------------------- syntax


class NNOperation(IRDLOperation):
    """Shared pretty syntax: `nn.op %a, %b {props} : T_a, T_b -> T_result`."""

    @classmethod
    def parse(cls, parser: Parser) -> NNOperation:
        unresolved = parser.parse_comma_separated_list(
            parser.Delimiter.NONE, parser.parse_unresolved_operand
        )
        properties = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        types_start = parser.pos
        operand_types = parser.parse_comma_separated_list(
            parser.Delimiter.NONE, parser.parse_type
        )
        types_end = parser.pos
        parser.parse_punctuation("->")
        result_type = parser.parse_type()
        if len(operand_types) != len(unresolved):
            parser.raise_error(
                f"expected {len(unresolved)} operand types, got {len(operand_types)}",
                types_start,
                types_end,
            )
        operands = parser.resolve_operands(unresolved, operand_types, parser.pos)
        return cls.create(
            operands=operands, result_types=[result_type], properties=dict(properties)
        )

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list(self.operands, printer.print_operand)
        if self.properties:
            printer.print_string(" ")
            printer.print_attr_dict(self.properties)
        printer.print_string(" : ")
        printer.print_list((o.type for o in self.operands), printer.print_attribute)
        printer.print_string(" -> ")
        printer.print_attribute(self.results[0].type)


# ----------------------------------------------------------------------------- ops


@irdl_op_definition
class LinearOp(NNOperation):
    """`x @ w.T` with w in nn.Linear's [out_features, in_features] layout."""

    name = "nn.linear"
    x = operand_def(TensorType)
    w = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, x: SSAValue, w: SSAValue):
        (m, _), (n, _) = _shape(x), _shape(w)
        super().__init__(operands=[x, w], result_types=[TensorType(_element_type(x), [m, n])])

    def verify_(self) -> None:
        _check_static_float(self, "x", self.x, 2)
        _check_static_float(self, "w", self.w, 2)
        _check_same_element_type(self, [("x", self.x), ("w", self.w)])
        (m, k), (n, k2) = _shape(self.x), _shape(self.w)
        if k != k2:
            raise VerifyException(
                f"x has {k} columns but w (NxK, nn.Linear layout) has {k2}: "
                f"expected w of shape Nx{k}"
            )
        _check_result(self, (m, n), self.x)


@irdl_op_definition
class MatmulOp(NNOperation):
    """`a @ b`."""

    name = "nn.matmul"
    a = operand_def(TensorType)
    b = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, a: SSAValue, b: SSAValue):
        (m, _), (_, n) = _shape(a), _shape(b)
        super().__init__(operands=[a, b], result_types=[TensorType(_element_type(a), [m, n])])

    def verify_(self) -> None:
        _check_static_float(self, "a", self.a, 2)
        _check_static_float(self, "b", self.b, 2)
        _check_same_element_type(self, [("a", self.a), ("b", self.b)])
        (m, k), (k2, n) = _shape(self.a), _shape(self.b)
        if k != k2:
            raise VerifyException(f"a has {k} columns but b has {k2} rows: expected b of shape {k}xN")
        _check_result(self, (m, n), self.a)


class _BinaryOp(NNOperation):
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, lhs: SSAValue, rhs: SSAValue):
        super().__init__(operands=[lhs, rhs], result_types=[lhs.type])

    def verify_(self) -> None:
        _check_static_float(self, "lhs", self.lhs, 2)
        _check_static_float(self, "rhs", self.rhs, None)
        _check_same_element_type(self, [("lhs", self.lhs), ("rhs", self.rhs)])
        m, n = _shape(self.lhs)
        rhs = _shape(self.rhs)
        if rhs not in ((m, n), (n,)):
            raise VerifyException(
                f"rhs must have shape {m}x{n} (elementwise) or {n} (broadcast over rows), "
                f"got {_fmt(rhs)}"
            )
        _check_result(self, (m, n), self.lhs)


@irdl_op_definition
class AddOp(_BinaryOp):
    name = "nn.add"


@irdl_op_definition
class MulOp(_BinaryOp):
    name = "nn.mul"


class _UnaryOp(NNOperation):
    x = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        _check_static_float(self, "x", self.x, 2)
        _check_result(self, _shape(self.x), self.x)


@irdl_op_definition
class SiluOp(_UnaryOp):
    name = "nn.silu"

    def __init__(self, x: SSAValue):
        super().__init__(operands=[x], result_types=[x.type])


@irdl_op_definition
class ReluOp(_UnaryOp):
    name = "nn.relu"

    def __init__(self, x: SSAValue):
        super().__init__(operands=[x], result_types=[x.type])


GELU_APPROXIMATIONS = ("none", "tanh")


@irdl_op_definition
class GeluOp(_UnaryOp):
    name = "nn.gelu"
    approximate = prop_def(StringAttr, default_value=StringAttr("none"))

    def __init__(self, x: SSAValue, approximate: str = "none"):
        super().__init__(
            operands=[x], result_types=[x.type], properties={"approximate": StringAttr(approximate)}
        )

    def verify_(self) -> None:
        super().verify_()
        _check_choice(self, "approximate", GELU_APPROXIMATIONS)


def _eps_attr(eps: float) -> FloatAttr:
    return FloatAttr(eps, f32)


@irdl_op_definition
class RMSNormOp(NNOperation):
    """`x * rsqrt(mean_j(x^2) + eps) * w` over the last dimension."""

    name = "nn.rms_norm"
    x = operand_def(TensorType)
    w = operand_def(TensorType)
    result = result_def(TensorType)
    eps = prop_def(FloatAttr, default_value=FloatAttr(1e-6, f32))
    traits = traits_def(Pure())

    def __init__(self, x: SSAValue, w: SSAValue, eps: float = 1e-6):
        super().__init__(operands=[x, w], result_types=[x.type], properties={"eps": _eps_attr(eps)})

    def verify_(self) -> None:
        _check_static_float(self, "x", self.x, 2)
        _check_static_float(self, "w", self.w, 1)
        _check_same_element_type(self, [("x", self.x), ("w", self.w)])
        m, d = _shape(self.x)
        if _shape(self.w) != (d,):
            raise VerifyException(f"w must have shape {d} (one weight per feature), got {_fmt(_shape(self.w))}")
        if _float_prop(self, "eps") < 0:
            raise VerifyException("eps must be non-negative")
        _check_result(self, (m, d), self.x)


@irdl_op_definition
class LayerNormOp(NNOperation):
    """`(x - mean) * rsqrt(var + eps) * w + b`, biased variance, over the last dimension."""

    name = "nn.layer_norm"
    x = operand_def(TensorType)
    w = operand_def(TensorType)
    b = operand_def(TensorType)
    result = result_def(TensorType)
    eps = prop_def(FloatAttr, default_value=FloatAttr(1e-5, f32))
    traits = traits_def(Pure())

    def __init__(self, x: SSAValue, w: SSAValue, b: SSAValue, eps: float = 1e-5):
        super().__init__(
            operands=[x, w, b], result_types=[x.type], properties={"eps": _eps_attr(eps)}
        )

    def verify_(self) -> None:
        _check_static_float(self, "x", self.x, 2)
        _check_static_float(self, "w", self.w, 1)
        _check_static_float(self, "b", self.b, 1)
        _check_same_element_type(self, [("x", self.x), ("w", self.w), ("b", self.b)])
        m, d = _shape(self.x)
        for name, v in (("w", self.w), ("b", self.b)):
            if _shape(v) != (d,):
                raise VerifyException(f"{name} must have shape {d} (one per feature), got {_fmt(_shape(v))}")
        if _float_prop(self, "eps") < 0:
            raise VerifyException("eps must be non-negative")
        _check_result(self, (m, d), self.x)


class _GatedOp(NNOperation):
    z = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        _check_static_float(self, "z", self.z, 2)
        m, two_f = _shape(self.z)
        if two_f % 2:
            raise VerifyException(
                f"z must have an even number of columns (gate half then up half), got {two_f}"
            )
        _check_result(self, (m, two_f // 2), self.z)


def _gated_result(z: SSAValue) -> TensorType:
    m, two_f = _shape(z)
    return TensorType(_element_type(z), [m, two_f // 2])


@irdl_op_definition
class SwiGLUOp(_GatedOp):
    """`silu(z[:, :F]) * z[:, F:]`: gate half first, then up half."""

    name = "nn.swiglu"

    def __init__(self, z: SSAValue):
        super().__init__(operands=[z], result_types=[_gated_result(z)])


@irdl_op_definition
class GeGLUOp(_GatedOp):
    """`gelu(z[:, :F]) * z[:, F:]`."""

    name = "nn.geglu"
    approximate = prop_def(StringAttr, default_value=StringAttr("none"))

    def __init__(self, z: SSAValue, approximate: str = "none"):
        super().__init__(
            operands=[z],
            result_types=[_gated_result(z)],
            properties={"approximate": StringAttr(approximate)},
        )

    def verify_(self) -> None:
        super().verify_()
        _check_choice(self, "approximate", GELU_APPROXIMATIONS)


ROPE_STYLES = ("half", "interleaved")


@irdl_op_definition
class RoPEOp(NNOperation):
    """Rotary embedding of the first `rotary_heads` heads of width `head_dim`."""

    name = "nn.rope"
    x = operand_def(TensorType)
    pos = operand_def(TensorType)
    result = result_def(TensorType)
    head_dim = prop_def(IntegerAttr)
    rotary_heads = prop_def(IntegerAttr)
    theta = prop_def(FloatAttr, default_value=FloatAttr(10000.0, f32))
    style = prop_def(StringAttr, default_value=StringAttr("half"))
    traits = traits_def(Pure())

    def __init__(
        self,
        x: SSAValue,
        pos: SSAValue,
        head_dim: int,
        rotary_heads: int,
        theta: float = 10000.0,
        style: str = "half",
    ):
        super().__init__(
            operands=[x, pos],
            result_types=[x.type],
            properties={
                "head_dim": IntegerAttr(head_dim, i64),
                "rotary_heads": IntegerAttr(rotary_heads, i64),
                "theta": FloatAttr(theta, f32),
                "style": StringAttr(style),
            },
        )

    def verify_(self) -> None:
        _check_static_float(self, "x", self.x, 2)
        m, n = _shape(self.x)
        _check_i32_vector("pos", self.pos, m)
        hd = _check_positive(self, "head_dim")
        if hd % 2:
            raise VerifyException(f"head_dim must be even (rotation pairs), got {hd}")
        if n % hd:
            raise VerifyException(f"x has {n} columns, not a multiple of head_dim {hd}")
        heads = _int_prop(self, "rotary_heads")
        if not 0 <= heads <= n // hd:
            raise VerifyException(
                f"rotary_heads must be between 0 and {n // hd} (x has {n // hd} heads of {hd}), got {heads}"
            )
        if _float_prop(self, "theta") <= 0:
            raise VerifyException("theta must be positive")
        _check_choice(self, "style", ROPE_STYLES)
        _check_result(self, (m, n), self.x)


@irdl_op_definition
class HeadRMSNormOp(NNOperation):
    """RMSNorm of each of the first `heads` heads over its `head_dim` columns (QK-norm)."""

    name = "nn.head_rms_norm"
    x = operand_def(TensorType)
    w = operand_def(TensorType)
    result = result_def(TensorType)
    head_dim = prop_def(IntegerAttr)
    heads = prop_def(IntegerAttr)
    eps = prop_def(FloatAttr, default_value=FloatAttr(1e-6, f32))
    traits = traits_def(Pure())

    def __init__(self, x: SSAValue, w: SSAValue, head_dim: int, heads: int, eps: float = 1e-6):
        super().__init__(
            operands=[x, w],
            result_types=[x.type],
            properties={
                "head_dim": IntegerAttr(head_dim, i64),
                "heads": IntegerAttr(heads, i64),
                "eps": _eps_attr(eps),
            },
        )

    def verify_(self) -> None:
        _check_static_float(self, "x", self.x, 2)
        _check_static_float(self, "w", self.w, 1)
        _check_same_element_type(self, [("x", self.x), ("w", self.w)])
        m, n = _shape(self.x)
        hd = _check_positive(self, "head_dim")
        if n % hd:
            raise VerifyException(f"x has {n} columns, not a multiple of head_dim {hd}")
        if _shape(self.w) != (hd,):
            raise VerifyException(f"w must have shape {hd} (head_dim), got {_fmt(_shape(self.w))}")
        heads = _int_prop(self, "heads")
        if not 0 <= heads <= n // hd:
            raise VerifyException(
                f"heads must be between 0 and {n // hd} (x has {n // hd} heads of {hd}), got {heads}"
            )
        if _float_prop(self, "eps") < 0:
            raise VerifyException("eps must be non-negative")
        _check_result(self, (m, n), self.x)


CROSS_ENTROPY_REDUCTIONS = ("mean", "sum")


@irdl_op_definition
class CrossEntropyOp(NNOperation):
    """Mean (or sum) of `lse(logits[m]) - logits[m, t[m]]` over rows whose target is kept."""

    name = "nn.cross_entropy"
    logits = operand_def(TensorType)
    targets = operand_def(TensorType)
    result = result_def(TensorType)
    ignore_index = prop_def(IntegerAttr, default_value=IntegerAttr(-100, i64))
    reduction = prop_def(StringAttr, default_value=StringAttr("mean"))
    traits = traits_def(Pure())

    def __init__(
        self, logits: SSAValue, targets: SSAValue, ignore_index: int = -100, reduction: str = "mean"
    ):
        super().__init__(
            operands=[logits, targets],
            result_types=[TensorType(f32, [])],
            properties={
                "ignore_index": IntegerAttr(ignore_index, i64),
                "reduction": StringAttr(reduction),
            },
        )

    def verify_(self) -> None:
        _check_static_float(self, "logits", self.logits, 2)
        m, _ = _shape(self.logits)
        _check_i32_vector("targets", self.targets, m)
        _int_prop(self, "ignore_index")
        _check_choice(self, "reduction", CROSS_ENTROPY_REDUCTIONS)
        ty = self.result.type
        if not (isinstance(ty, TensorType) and not ty.get_shape() and ty.get_element_type() == f32):
            raise VerifyException(f"result must be a 0-d tensor of f32 (tensor<f32>), got {ty}")


NN = Dialect(
    "nn",
    [
        LinearOp,
        MatmulOp,
        AddOp,
        MulOp,
        SiluOp,
        ReluOp,
        GeluOp,
        RMSNormOp,
        LayerNormOp,
        SwiGLUOp,
        GeGLUOp,
        RoPEOp,
        HeadRMSNormOp,
        CrossEntropyOp,
    ],
    [],
)
