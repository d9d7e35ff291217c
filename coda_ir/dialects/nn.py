"""The `nn` dialect: tensor-level Transformer operators, the compiler's input language.

Names, operand order, property names and semantics are a contract (NN_DIALECT.md): outside
tests write these ops in the generic form. Every op computes in fp32 and rounds its result
once to the result element type. The pretty syntax is

    %y = nn.rms_norm %x, %w {eps = 1.0e-06 : f32} : tensor<256x128xbf16>, tensor<128xbf16> -> tensor<256x128xbf16>

i.e. operands, properties in a dictionary, then operand types and the result type.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects.builtin import (
    BoolAttr,
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    f32,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from coda_ir.dialects.library_steps import (
    AttentionGradDef,
    AttentionProperties,
    AttentionWithLseDef,
    ConcatDef,
    EmbeddingDef,
    EmbeddingGradDef,
    SliceDef,
    check_attention_qkv,
)
from coda_ir.dialects.tensor_checks import (
    FLOAT_TYPES,  # re-exported: nn.FLOAT_TYPES
    check_i32_vector,
    check_like,
    check_positive,
    check_result,
    check_same_element_type,
    check_static_float,
    element_type_of,
    float_prop,
    fmt_shape,
    int_prop,
    shape_of,
)


# ----------------------------------------------------------------------------- helpers


def _check_eps(op: IRDLOperation) -> None:
    eps = float_prop(op, "eps")
    if not (0 <= eps < math.inf):
        raise VerifyException(f"eps must be a non-negative finite number, got {eps:.6g}")


I32_RANGE = (-(2**31), 2**31 - 1)


def _check_ignore_index(op: IRDLOperation) -> None:
    """Targets are i32: an ignore index outside i32's range could never match one."""
    value = int_prop(op, "ignore_index")
    if not I32_RANGE[0] <= value <= I32_RANGE[1]:
        raise VerifyException(
            f"ignore_index must fit in i32 like the targets ([{I32_RANGE[0]}, {I32_RANGE[1]}]), got {value}"
        )


def _str_prop(op: IRDLOperation, name: str) -> str:
    attr = op.properties[name]
    assert isinstance(attr, StringAttr)
    return attr.data


def _check_choice(op: IRDLOperation, name: str, choices: Sequence[str]) -> None:
    value = _str_prop(op, name)
    if value not in choices:
        options = ", ".join(f'"{c}"' for c in choices)
        raise VerifyException(f'{name} must be one of {options}, got "{value}"')


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
        if parser.parse_optional_punctuation("(") is not None:
            result_types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
            parser.parse_punctuation(")")
        else:
            result_types = [parser.parse_type()]
        if len(operand_types) != len(unresolved):
            parser.raise_error(
                f"expected {len(unresolved)} operand types, got {len(operand_types)}",
                types_start,
                types_end,
            )
        operands = parser.resolve_operands(unresolved, operand_types, parser.pos)
        return cls.create(operands=operands, result_types=result_types, properties=dict(properties))

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list(self.operands, printer.print_operand)
        if self.properties:
            printer.print_string(" ")
            printer.print_attr_dict(self.properties)
        printer.print_string(" : ")
        printer.print_list((o.type for o in self.operands), printer.print_attribute)
        printer.print_string(" -> ")
        if len(self.results) == 1:
            printer.print_attribute(self.results[0].type)
        else:
            printer.print_string("(")
            printer.print_list((r.type for r in self.results), printer.print_attribute)
            printer.print_string(")")


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
        (m, _), (n, _) = shape_of(x), shape_of(w)
        super().__init__(operands=[x, w], result_types=[TensorType(element_type_of(x), [m, n])])

    def verify_(self) -> None:
        check_static_float(self, "x", self.x, 2)
        check_static_float(self, "w", self.w, 2)
        check_same_element_type(self, [("x", self.x), ("w", self.w)])
        (m, k), (n, k2) = shape_of(self.x), shape_of(self.w)
        if k != k2:
            raise VerifyException(
                f"x has {k} columns but w (NxK, nn.Linear layout) has {k2}: "
                f"expected w of shape Nx{k}"
            )
        check_result(self, (m, n), self.x)


@irdl_op_definition
class MatmulOp(NNOperation):
    """`a @ b`."""

    name = "nn.matmul"
    a = operand_def(TensorType)
    b = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, a: SSAValue, b: SSAValue):
        (m, _), (_, n) = shape_of(a), shape_of(b)
        super().__init__(operands=[a, b], result_types=[TensorType(element_type_of(a), [m, n])])

    def verify_(self) -> None:
        check_static_float(self, "a", self.a, 2)
        check_static_float(self, "b", self.b, 2)
        check_same_element_type(self, [("a", self.a), ("b", self.b)])
        (m, k), (k2, n) = shape_of(self.a), shape_of(self.b)
        if k != k2:
            raise VerifyException(f"a has {k} columns but b has {k2} rows: expected b of shape {k}xN")
        check_result(self, (m, n), self.a)


class _BinaryOp(NNOperation):
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, lhs: SSAValue, rhs: SSAValue):
        super().__init__(operands=[lhs, rhs], result_types=[lhs.type])

    def verify_(self) -> None:
        check_static_float(self, "lhs", self.lhs, None)
        check_static_float(self, "rhs", self.rhs, None)
        check_same_element_type(self, [("lhs", self.lhs), ("rhs", self.rhs)])
        if len(shape_of(self.lhs)) == 1:
            # vectors of the same length (sums of weight gradients written by nn-autodiff)
            if shape_of(self.rhs) != shape_of(self.lhs):
                raise VerifyException(
                    f"a rank-1 lhs needs an rhs of the same shape {fmt_shape(shape_of(self.lhs))}, got {fmt_shape(shape_of(self.rhs))}"
                )
            check_result(self, shape_of(self.lhs), self.lhs)
            return
        if len(shape_of(self.lhs)) != 2:
            raise VerifyException(f"lhs must be rank 2 (or rank 1 with an rhs of the same shape), got {self.lhs.type}")
        m, n = shape_of(self.lhs)
        rhs = shape_of(self.rhs)
        if rhs not in ((m, n), (n,)):
            raise VerifyException(
                f"rhs must have shape {m}x{n} (elementwise) or {n} (broadcast over rows), "
                f"got {fmt_shape(rhs)}"
            )
        check_result(self, (m, n), self.lhs)


@irdl_op_definition
class AddOp(_BinaryOp):
    """`lhs + rhs`: same shapes, or a rank-1 rhs broadcast over the rows of a rank-2 lhs."""

    name = "nn.add"


@irdl_op_definition
class MulOp(_BinaryOp):
    """`lhs * rhs`: same shapes, or a rank-1 rhs broadcast over the rows of a rank-2 lhs."""

    name = "nn.mul"


class _UnaryOp(NNOperation):
    x = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        check_static_float(self, "x", self.x, 2)
        check_result(self, shape_of(self.x), self.x)


@irdl_op_definition
class SiluOp(_UnaryOp):
    """`x * sigmoid(x)`."""

    name = "nn.silu"

    def __init__(self, x: SSAValue):
        super().__init__(operands=[x], result_types=[x.type])


@irdl_op_definition
class ReluOp(_UnaryOp):
    """`max(x, 0)`."""

    name = "nn.relu"

    def __init__(self, x: SSAValue):
        super().__init__(operands=[x], result_types=[x.type])


GELU_APPROXIMATIONS = ("none", "tanh")


@irdl_op_definition
class GeluOp(_UnaryOp):
    """`x * Phi(x)` (`approximate = "tanh"`: PyTorch's tanh approximation)."""

    name = "nn.gelu"
    approximate = prop_def(StringAttr)

    def __init__(self, x: SSAValue, approximate: str = "none"):
        super().__init__(
            operands=[x], result_types=[x.type], properties={"approximate": StringAttr(approximate)}
        )

    def verify_(self) -> None:
        super().verify_()
        _check_choice(self, "approximate", GELU_APPROXIMATIONS)


@irdl_op_definition
class ScaleOp(_UnaryOp):
    """`x * factor` with a scalar f32 `factor` (Granite's embedding / residual / logits
    multipliers): a map on the tile, fused into the producing GEMM's epilogue like an activation."""

    name = "nn.scale"
    factor = prop_def(FloatAttr)

    def __init__(self, x: SSAValue, factor: float):
        super().__init__(operands=[x], result_types=[x.type], properties={"factor": FloatAttr(factor, f32)})

    def verify_(self) -> None:
        super().verify_()
        factor = float_prop(self, "factor")
        if not math.isfinite(factor):
            raise VerifyException(f"factor must be a finite number, got {factor:.6g}")


@irdl_op_definition
class SoftcapOp(_UnaryOp):
    """`cap * tanh(x / cap)` with a positive f32 `cap` (Gemma2's final_logit_softcapping): a map
    on the tile, fused into the producing GEMM's epilogue (before a cross-entropy's partials)."""

    name = "nn.softcap"
    cap = prop_def(FloatAttr)

    def __init__(self, x: SSAValue, cap: float):
        super().__init__(operands=[x], result_types=[x.type], properties={"cap": FloatAttr(cap, f32)})

    def verify_(self) -> None:
        super().verify_()
        cap = float_prop(self, "cap")
        if not (0 < cap < math.inf):
            raise VerifyException(f"cap must be a positive finite number, got {cap:.6g}")


def _eps_attr(eps: float) -> FloatAttr:
    return FloatAttr(eps, f32)


def norm_offset(op: Operation) -> float:
    """An RMSNorm op's optional weight `offset` (0.0 when absent): the weight applies as `w + offset`
    (Gemma's `1 + w`, computed in fp32)."""
    attr = op.properties.get("offset")
    return 0.0 if attr is None else attr.value.data  # type: ignore[union-attr]


def _offset_props(offset: float) -> dict[str, Attribute]:
    return {"offset": FloatAttr(offset, f32)} if offset else {}


def _check_offset(op: IRDLOperation) -> None:
    if "offset" in op.properties and not math.isfinite(float_prop(op, "offset")):
        raise VerifyException(f"offset must be a finite number, got {float_prop(op, 'offset'):.6g}")


@irdl_op_definition
class RMSNormOp(NNOperation):
    """`x * rsqrt(mean_j(x^2) + eps) * (w + offset)` over the last dimension (optional `offset`,
    default 0.0; Gemma's norms are `1 + w`, the sum taken in fp32, never rounded to w's type)."""

    name = "nn.rms_norm"
    x = operand_def(TensorType)
    w = operand_def(TensorType)
    result = result_def(TensorType)
    eps = prop_def(FloatAttr)
    offset = opt_prop_def(FloatAttr)  # optional, 0.0 when absent: see norm_offset
    stats_in_producer_epilogue = opt_prop_def(BoolAttr)  # a plan (nn-plan), not semantics: see PLAN_PROPERTIES
    traits = traits_def(Pure())

    def __init__(self, x: SSAValue, w: SSAValue, eps: float = 1e-6, offset: float = 0.0):
        super().__init__(operands=[x, w], result_types=[x.type], properties={"eps": _eps_attr(eps), **_offset_props(offset)})

    def verify_(self) -> None:
        check_static_float(self, "x", self.x, 2)
        check_static_float(self, "w", self.w, 1)
        check_same_element_type(self, [("x", self.x), ("w", self.w)])
        m, d = shape_of(self.x)
        if shape_of(self.w) != (d,):
            raise VerifyException(f"w must have shape {d} (one weight per feature), got {fmt_shape(shape_of(self.w))}")
        _check_eps(self)
        _check_offset(self)
        check_result(self, (m, d), self.x)


@irdl_op_definition
class LayerNormOp(NNOperation):
    """`(x - mean) * rsqrt(var + eps) * w + b`, biased variance, over the last dimension."""

    name = "nn.layer_norm"
    x = operand_def(TensorType)
    w = operand_def(TensorType)
    b = operand_def(TensorType)
    result = result_def(TensorType)
    eps = prop_def(FloatAttr)
    traits = traits_def(Pure())

    def __init__(self, x: SSAValue, w: SSAValue, b: SSAValue, eps: float = 1e-5):
        super().__init__(
            operands=[x, w, b], result_types=[x.type], properties={"eps": _eps_attr(eps)}
        )

    def verify_(self) -> None:
        check_static_float(self, "x", self.x, 2)
        check_static_float(self, "w", self.w, 1)
        check_static_float(self, "b", self.b, 1)
        check_same_element_type(self, [("x", self.x), ("w", self.w), ("b", self.b)])
        m, d = shape_of(self.x)
        for name, v in (("w", self.w), ("b", self.b)):
            if shape_of(v) != (d,):
                raise VerifyException(f"{name} must have shape {d} (one per feature), got {fmt_shape(shape_of(v))}")
        _check_eps(self)
        check_result(self, (m, d), self.x)


class _GatedOp(NNOperation):
    z = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        check_static_float(self, "z", self.z, 2)
        m, two_f = shape_of(self.z)
        if two_f % 2:
            raise VerifyException(
                f"z must have an even number of columns (gate half then up half), got {two_f}"
            )
        check_result(self, (m, two_f // 2), self.z)


def _gated_result(z: SSAValue) -> TensorType:
    m, two_f = shape_of(z)
    return TensorType(element_type_of(z), [m, two_f // 2])


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
    approximate = prop_def(StringAttr)

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

PLAN_PROPERTIES = ("cos_sin_table", "in_producer_epilogue", "stats_in_producer_epilogue")
"""Optional properties that record the `nn-plan` pass's IO-model decisions on an op; they never
change what the op computes (the reference ignores them), only how the later passes build it:
`cos_sin_table` on nn.rope / nn.rope_grad: read cos/sin from [M, head_dim/2] tables that one
small kernel computes, instead of sin/cos per pair in the epilogue (or in the elementwise pass
of a RoPE whose input no GEMM produces); `in_producer_epilogue =
false` on nn.rope: keep the rotation out of its producing GEMM's epilogue (an elementwise pass
after it: the GEMM would need its columns interleaved in groups that hold no TMA tile), on
nn.head_rms_norm: keep the norm out of its producing GEMM's epilogue (per-head
partials do not pay at this shape), and on nn.swiglu_grad / nn.geglu_grad: keep the gated
backward (and the `z . dz` row partials that join it) out of the epilogue of the GEMM producing
dy (a plain GEMM storing dy, then one elementwise pass over dy and z), and on nn.rms_norm_grad:
keep the norm backward (dx, the dw column partials and a residual add that joins them) out of
the epilogue of the GEMM producing dy (a plain GEMM storing dy in f32, then one elementwise pass
reading it unrounded);
and on nn.cross_entropy / nn.cross_entropy_fwd: keep the row log-sum-exp and target-logit partials
out of the epilogue of the GEMM producing the logits (a plain GEMM storing them, then one
elementwise pass over them);
`stats_in_producer_epilogue = false` on nn.rms_norm: take the
row statistics in a row kernel, not as partials in the producing GEMM's epilogue (coda-defer-norms
leaves the norm alone; nn-autodiff also records it on the norm feeding an LM head whose backward
recomputes the logits in chunks, so that both passes compute them from the same rounded h). Absent: no plan, the default construction."""


def planned(op: Operation, name: str) -> bool | None:
    """The plan `nn-plan` recorded in `op`'s property `name` (None: none recorded)."""
    attr = op.properties.get(name)
    return None if attr is None else bool(attr.value.data)  # type: ignore[attr-defined]


@irdl_op_definition
class RoPEOp(NNOperation):
    """Rotary embedding of the first `rotary_heads` heads of width `head_dim`.

    `inv_freq` (optional, `array<f32: ...>` of hd/2 numbers): the rotation frequencies as the
    model holds them, e.g. a Hugging Face model's `rotary_emb.inv_freq` buffer, which its fp32
    formula `1 / theta ** (arange(0, hd, 2) / hd)` gives up to an ulp or two away from the
    correctly rounded `theta ** (-2i / hd)`, or a scaled RoPE's ("linear", "llama3", "yarn",
    "longrope": Hugging Face's `ROPE_INIT_FUNCTIONS`). Absent: `theta ** (-2i / rd)` rounded to
    fp32. Present, it is the frequencies (`theta` is then the base they came from, informative).

    `rotary_dim` (optional i64, default `head_dim`): only the first `rotary_dim` columns of each
    rotary head rotate (Hugging Face's `partial_rotary_factor`: Phi-4-mini, GLM4), paired by
    `style` inside them ("half": `(i, i + rd/2)`, "interleaved": `(2i, 2i + 1)`, i < rd/2), with
    rd/2 frequencies; the head's other columns pass through unchanged.

    `scaling` (optional f32, default 1.0): the rotated columns are `scaling * R(a) x` (Hugging
    Face's `attention_scaling` of "yarn" / "longrope", which multiplies cos and sin); columns
    that pass through are not scaled."""

    name = "nn.rope"
    x = operand_def(TensorType)
    pos = operand_def(TensorType)
    result = result_def(TensorType)
    head_dim = prop_def(IntegerAttr)
    rotary_heads = prop_def(IntegerAttr)
    theta = prop_def(FloatAttr)
    style = prop_def(StringAttr)
    cos_sin_table = opt_prop_def(BoolAttr)  # a plan (nn-plan), not semantics: see PLAN_PROPERTIES
    in_producer_epilogue = opt_prop_def(BoolAttr)  # a plan (nn-plan), not semantics: see PLAN_PROPERTIES
    inv_freq = opt_prop_def(DenseArrayBase)  # optional: the frequencies themselves (see above)
    rotary_dim = opt_prop_def(IntegerAttr)  # optional, head_dim when absent: see rotary_dim_of
    scaling = opt_prop_def(FloatAttr)  # optional, 1.0 when absent: see rope_scaling_of
    traits = traits_def(Pure())

    def __init__(
        self,
        x: SSAValue,
        pos: SSAValue,
        head_dim: int,
        rotary_heads: int,
        theta: float = 10000.0,
        style: str = "half",
        inv_freq: Sequence[float] | None = None,
        rotary_dim: int | None = None,
        scaling: float = 1.0,
    ):
        props = {
            "head_dim": IntegerAttr(head_dim, i64),
            "rotary_heads": IntegerAttr(rotary_heads, i64),
            "theta": FloatAttr(theta, f32),
            "style": StringAttr(style),
        }
        if inv_freq is not None:
            props["inv_freq"] = DenseArrayBase.from_list(f32, list(inv_freq))
        if rotary_dim is not None and rotary_dim != head_dim:
            props["rotary_dim"] = IntegerAttr(rotary_dim, i64)
        if scaling != 1.0:
            props["scaling"] = FloatAttr(scaling, f32)
        super().__init__(operands=[x, pos], result_types=[x.type], properties=props)

    def verify_(self) -> None:
        check_static_float(self, "x", self.x, 2)
        m, n = shape_of(self.x)
        check_i32_vector("pos", self.pos, m)
        hd = check_positive(self, "head_dim")
        if hd % 2:
            raise VerifyException(f"head_dim must be even (rotation pairs), got {hd}")
        if n % hd:
            raise VerifyException(f"x has {n} columns, not a multiple of head_dim {hd}")
        heads = int_prop(self, "rotary_heads")
        if not 0 <= heads <= n // hd:
            raise VerifyException(
                f"rotary_heads must be between 0 and {n // hd} (x has {n // hd} heads of {hd}), got {heads}"
            )
        theta = float_prop(self, "theta")
        if not (0 < theta < math.inf):
            raise VerifyException(f"theta must be a positive finite number, got {theta:.6g}")
        _check_choice(self, "style", ROPE_STYLES)
        rd = hd
        if "rotary_dim" in self.properties:
            rd = int_prop(self, "rotary_dim")
            if not (0 < rd <= hd and rd % 2 == 0):
                raise VerifyException(f"rotary_dim must be even and between 2 and head_dim = {hd}, got {rd}")
        if "scaling" in self.properties:
            scaling = float_prop(self, "scaling")
            if not (0 < scaling < math.inf):
                raise VerifyException(f"scaling must be a positive finite number, got {scaling:.6g}")
        freqs = inv_freq_of(self)
        if freqs is not None:
            if self.properties["inv_freq"].get_element_type() != f32:  # type: ignore[attr-defined]
                raise VerifyException("inv_freq must be an array<f32: ...>")
            if len(freqs) != rd // 2:
                what = "head_dim" if rd == hd else "rotary_dim"
                raise VerifyException(f"inv_freq must hold {what} / 2 = {rd // 2} frequencies, got {len(freqs)}")
            if not all(0 <= f < math.inf for f in freqs):
                raise VerifyException("inv_freq must hold finite frequencies >= 0")
        check_result(self, (m, n), self.x)


def inv_freq_of(op: IRDLOperation) -> tuple[float, ...] | None:
    """The explicit frequencies of an nn.rope / nn.rope_grad (`inv_freq`), None when absent."""
    attr = op.properties.get("inv_freq")
    return None if attr is None else tuple(attr.get_values())  # type: ignore[attr-defined]


def rotary_dim_of(op: Operation) -> int:
    """The columns of each head an nn.rope / nn.rope_grad rotates (`rotary_dim`, optional:
    `head_dim` when absent)."""
    attr = op.properties.get("rotary_dim")
    if attr is None:
        attr = op.properties["head_dim"]
    return attr.value.data  # type: ignore[attr-defined]


def rope_scaling_of(op: Operation) -> float:
    """The magnitude an nn.rope / nn.rope_grad multiplies its rotated columns by (`scaling`,
    optional: 1.0 when absent), the f32 number it holds."""
    attr = op.properties.get("scaling")
    if attr is None:
        return 1.0
    return struct.unpack("f", struct.pack("f", attr.value.data))[0]  # type: ignore[attr-defined]


@irdl_op_definition
class HeadRMSNormOp(NNOperation):
    """RMSNorm of each of the heads `first_head .. first_head + heads - 1` over its `head_dim`
    columns (QK-norm), with the weight applied as `w + offset` (optional `offset`, 0.0 when absent:
    Gemma3's `1 + w`).

    Grouped form (what `nn-fuse-siblings` makes of Qwen3's q-norm followed by its k-norm): several
    weights `w_0, w_1, ...` and `weight_heads = array<i64: h_0, h_1, ...>` (summing to `heads`):
    the first h_0 heads are normalized with w_0, the next h_1 with w_1, and so on. One statistic
    per head either way, so the grouped op equals the chain of single-weight ops bit for bit; it
    is one pass over the tile (and one backward) instead of one per weight."""

    name = "nn.head_rms_norm"
    x = operand_def(TensorType)
    w = var_operand_def(TensorType)  # one weight, or one per group of `weight_heads`
    result = result_def(TensorType)
    head_dim = prop_def(IntegerAttr)
    heads = prop_def(IntegerAttr)
    eps = prop_def(FloatAttr)
    first_head = opt_prop_def(IntegerAttr)  # optional, 0 when absent (NN_DIALECT.md): see first_head_of
    weight_heads = opt_prop_def(DenseArrayBase)  # optional, [heads] when absent: see head_weight_groups
    offset = opt_prop_def(FloatAttr)  # optional, 0.0 when absent: see norm_offset
    in_producer_epilogue = opt_prop_def(BoolAttr)  # a plan (nn-plan), not semantics: see PLAN_PROPERTIES
    traits = traits_def(Pure())

    def __init__(self, x: SSAValue, w: SSAValue, head_dim: int, heads: int, eps: float = 1e-6, first_head: int = 0,
                 offset: float = 0.0):
        props = {"head_dim": IntegerAttr(head_dim, i64), "heads": IntegerAttr(heads, i64), "eps": _eps_attr(eps),
                 **_offset_props(offset)}
        if first_head:
            props["first_head"] = IntegerAttr(first_head, i64)
        super().__init__(operands=[x, [w]], result_types=[x.type], properties=props)

    @classmethod
    def grouped(cls, x: SSAValue, weights: Sequence[SSAValue], weight_heads: Sequence[int], head_dim: int,
                eps: float | FloatAttr, first_head: int = 0, offset: float = 0.0) -> "HeadRMSNormOp":
        """The grouped form: `weights[i]` normalizes the next `weight_heads[i]` heads from `first_head`."""
        props: dict[str, Attribute] = {
            "head_dim": IntegerAttr(head_dim, i64), "heads": IntegerAttr(sum(weight_heads), i64),
            "eps": eps if isinstance(eps, FloatAttr) else _eps_attr(eps), **_offset_props(offset)}
        if first_head:
            props["first_head"] = IntegerAttr(first_head, i64)
        if len(weights) > 1:
            props["weight_heads"] = DenseArrayBase.from_list(i64, list(weight_heads))
        return cls.create(operands=[x, *weights], result_types=[x.type], properties=props)

    def verify_(self) -> None:
        check_static_float(self, "x", self.x, 2)
        m, n = shape_of(self.x)
        hd = check_positive(self, "head_dim")
        if n % hd:
            raise VerifyException(f"x has {n} columns, not a multiple of head_dim {hd}")
        _check_head_weights(self, hd)
        _check_head_range(self, n, hd)
        _check_eps(self)
        _check_offset(self)
        check_result(self, (m, n), self.x)


def first_head_of(op: IRDLOperation) -> int:
    """`first_head` of a head_rms_norm (or its gradient): optional, 0 when absent."""
    attr = op.properties.get("first_head")
    return 0 if attr is None else int_prop(op, "first_head")


def head_weight_groups(op: IRDLOperation) -> list[tuple[SSAValue, int, int]]:
    """(weight, first head, heads) of each weight of a head_rms_norm (or its gradient), in operand
    order: one group of all `heads` without `weight_heads`."""
    first = first_head_of(op)
    attr = op.properties.get("weight_heads")
    counts = [int_prop(op, "heads")] if attr is None else list(attr.get_values())  # type: ignore[attr-defined]
    groups = []
    for w, h in zip(op.w, counts):  # type: ignore[attr-defined]
        groups.append((w, first, h))
        first += h
    return groups


def _check_head_weights(op: IRDLOperation, hd: int) -> None:
    """The weights of a head_rms_norm(_grad): each [hd] of x's element type; one per entry of
    `weight_heads` (positive counts summing to `heads`), or exactly one without it."""
    weights = list(op.w)  # type: ignore[attr-defined]
    attr = op.properties.get("weight_heads")
    if attr is None:
        if len(weights) != 1:
            raise VerifyException(f"expected one weight without weight_heads, got {len(weights)}")
    else:
        if not isinstance(attr, DenseArrayBase) or attr.elt_type != i64:
            raise VerifyException("weight_heads must be an array<i64: ...> of head counts")
        counts = list(attr.get_values())
        if len(counts) != len(weights):
            raise VerifyException(f"weight_heads has {len(counts)} entries for {len(weights)} weights")
        if any(c <= 0 for c in counts) or sum(counts) != int_prop(op, "heads"):
            raise VerifyException(f"weight_heads must be positive head counts summing to heads "
                                  f"({int_prop(op, 'heads')}), got {counts}")
    for i, w in enumerate(weights):
        what = "w" if len(weights) == 1 else f"w#{i}"
        check_static_float(op, what, w, 1)
        check_same_element_type(op, [("x", op.x), (what, w)])  # type: ignore[attr-defined]
        if shape_of(w) != (hd,):
            raise VerifyException(f"{what} must have shape {hd} (head_dim), got {fmt_shape(shape_of(w))}")


def _check_head_range(op: IRDLOperation, n: int, hd: int) -> None:
    heads = int_prop(op, "heads")
    first = first_head_of(op)
    if first < 0:
        raise VerifyException(f"first_head must be non-negative, got {first}")
    if not 0 <= heads <= n // hd - first:
        start = f", starting at head {first}" if first else ""
        raise VerifyException(
            f"heads must be between 0 and {n // hd - first} (x has {n // hd} heads of {hd}{start}), got {heads}"
        )


CROSS_ENTROPY_REDUCTIONS = ("mean", "sum")


def padded_classes(op: IRDLOperation, width: int) -> int | None:
    """A cross-entropy's `classes` when its logits carry padding columns past them (fewer
    classes than `width` columns), else None."""
    attr = op.properties.get("classes")
    if attr is None:
        return None
    classes = int_prop(op, "classes")
    return classes if classes < width else None


def _check_classes(op: IRDLOperation, width: int) -> None:
    if op.properties.get("classes") is not None and not 0 < int_prop(op, "classes") <= width:
        raise VerifyException(f"classes must be between 1 and the logits' width {width}, got {int_prop(op, 'classes')}")


@irdl_op_definition
class CrossEntropyOp(NNOperation):
    """Mean (or sum) of `lse(logits[m]) - logits[m, t[m]]` over rows whose target is kept.
    Optional `classes` (C, at most the logits' width V, V when absent): only the first C columns
    are classes; the columns past them are padding (rows of an LM head padded to an aligned
    width) that enter no softmax and get gradient 0."""

    name = "nn.cross_entropy"
    logits = operand_def(TensorType)
    targets = operand_def(TensorType)
    result = result_def(TensorType)
    ignore_index = prop_def(IntegerAttr)
    reduction = prop_def(StringAttr)
    classes = opt_prop_def(IntegerAttr)  # optional, the logits' width when absent: see padded_classes
    in_producer_epilogue = opt_prop_def(BoolAttr)  # a plan (nn-plan), not semantics: see PLAN_PROPERTIES
    traits = traits_def(Pure())

    def __init__(
        self, logits: SSAValue, targets: SSAValue, ignore_index: int = -100, reduction: str = "mean",
        classes: int | None = None,
    ):
        props: dict[str, Attribute] = {"ignore_index": IntegerAttr(ignore_index, i64), "reduction": StringAttr(reduction)}
        if classes is not None:
            props["classes"] = IntegerAttr(classes, i64)
        super().__init__(operands=[logits, targets], result_types=[TensorType(f32, [])], properties=props)

    def verify_(self) -> None:
        check_static_float(self, "logits", self.logits, 2)
        m, v = shape_of(self.logits)
        check_i32_vector("targets", self.targets, m)
        _check_ignore_index(self)
        _check_choice(self, "reduction", CROSS_ENTROPY_REDUCTIONS)
        _check_classes(self, v)
        ty = self.result.type
        if not (isinstance(ty, TensorType) and not ty.get_shape() and ty.get_element_type() == f32):
            raise VerifyException(f"result must be a 0-d tensor of f32 (tensor<f32>), got {ty}")


@irdl_op_definition
class CrossEntropyFwdOp(NNOperation):
    """`nn.cross_entropy` that also returns `lse(logits[m])` of every row (f32 [M]): what its
    backward needs besides the logits (`nn-autodiff`'s forward saves it; the loss computes it
    anyway)."""

    name = "nn.cross_entropy_fwd"
    logits = operand_def(TensorType)
    targets = operand_def(TensorType)
    loss = result_def(TensorType)
    lse = result_def(TensorType)
    ignore_index = prop_def(IntegerAttr)
    reduction = prop_def(StringAttr)
    classes = opt_prop_def(IntegerAttr)  # as nn.cross_entropy's
    in_producer_epilogue = opt_prop_def(BoolAttr)  # a plan (nn-plan), not semantics: see PLAN_PROPERTIES
    traits = traits_def(Pure())

    def __init__(self, logits: SSAValue, targets: SSAValue, properties: dict[str, Attribute]):
        m, _ = shape_of(logits)
        super().__init__(operands=[logits, targets], result_types=[TensorType(f32, []), TensorType(f32, [m])],
                         properties=dict(properties))

    def verify_(self) -> None:
        check_static_float(self, "logits", self.logits, 2)
        m, _ = shape_of(self.logits)
        check_i32_vector("targets", self.targets, m)
        _check_ignore_index(self)
        _check_choice(self, "reduction", CROSS_ENTROPY_REDUCTIONS)
        _check_classes(self, shape_of(self.logits)[1])
        ty = self.loss.type
        if not (isinstance(ty, TensorType) and not ty.get_shape() and ty.get_element_type() == f32):
            raise VerifyException(f"loss must be a 0-d tensor of f32 (tensor<f32>), got {ty}")
        _check_f32_vector("lse", self.lse, m)


@irdl_op_definition
class CrossEntropyPartialsOp(NNOperation):
    """One vocabulary shard's part of `nn.cross_entropy` (vocabulary-parallel LM head): `logits`
    [M, Vs] are the columns `[vocab_start, vocab_start + Vs)` of the [M, vocab_size] logits;
    `targets` [M] (i32) are ids in the whole vocabulary. Results, f32 [M] each:

    * `lse[m]` = log sum_j exp(logits[m, j]) over the shard's columns (the shard's (max, sum of
      exp) pair in one number: `max + log(sum exp(l - max))`);
    * `target_logit[m]` = logits[m, t[m] - vocab_start] where `vocab_start <= t[m] < vocab_start
      + Vs` and `t[m] != ignore_index`, else 0 (exactly one shard holds a kept target).

    The shards' partials combine, in rank order, to the row's log-sum-exp (`M = max_r lse_r`,
    `lse = M + log sum_r exp(lse_r - M)`) and target logit (their sum): docs/VOCAB_PARALLEL.md.
    A target outside `[0, vocab_size)` that is not `ignore_index` is an error at run time, as
    in `nn.cross_entropy`. Not differentiated by nn-autodiff: its backward is
    `nn.linear_cross_entropy_grad` with the same `vocab_start` / `vocab_size` and the combined lse."""

    name = "nn.cross_entropy_partials"
    logits = operand_def(TensorType)
    targets = operand_def(TensorType)
    lse = result_def(TensorType)
    target_logit = result_def(TensorType)
    ignore_index = prop_def(IntegerAttr)
    vocab_start = prop_def(IntegerAttr)
    vocab_size = prop_def(IntegerAttr)
    traits = traits_def(Pure())

    def __init__(self, logits: SSAValue, targets: SSAValue, vocab_start: int, vocab_size: int,
                 ignore_index: int = -100):
        m, _ = shape_of(logits)
        super().__init__(
            operands=[logits, targets],
            result_types=[TensorType(f32, [m]), TensorType(f32, [m])],
            properties={
                "ignore_index": IntegerAttr(ignore_index, i64),
                "vocab_start": IntegerAttr(vocab_start, i64),
                "vocab_size": IntegerAttr(vocab_size, i64),
            },
        )

    def verify_(self) -> None:
        check_static_float(self, "logits", self.logits, 2)
        m, vs = shape_of(self.logits)
        check_i32_vector("targets", self.targets, m)
        _check_ignore_index(self)
        _check_vocab_shard(self, vs)
        _check_f32_vector("lse", self.lse, m)
        _check_f32_vector("target_logit", self.target_logit, m)


def vocab_shard_of(op: IRDLOperation) -> tuple[int, int] | None:
    """`(vocab_start, vocab_size)` of an op over one vocabulary shard, None for the whole."""
    if op.properties.get("vocab_start") is None:
        return None
    return int_prop(op, "vocab_start"), int_prop(op, "vocab_size")


def _check_vocab_shard(op: IRDLOperation, columns: int) -> None:
    """`vocab_start` / `vocab_size` (given together): the op's `columns` vocabulary entries are
    `[vocab_start, vocab_start + columns)` of `vocab_size`, within i32 (targets are i32)."""
    start, size = op.properties.get("vocab_start"), op.properties.get("vocab_size")
    if (start is None) != (size is None):
        raise VerifyException("vocab_start and vocab_size must be given together (a vocabulary shard) or not at all")
    if start is None:
        return
    first, total = int_prop(op, "vocab_start"), int_prop(op, "vocab_size")
    if not (0 <= first and first + columns <= total <= I32_RANGE[1]):
        raise VerifyException(f"the shard [vocab_start, vocab_start + {columns}) = [{first}, {first + columns}) must lie in "
                              f"[0, vocab_size) = [0, {total}), vocab_size at most {I32_RANGE[1]}")


# ----------------------------------------------------------------------------- backward ops
#
# `nn-autodiff` writes the backward of a program with these ops. Each keeps the meaning of one
# forward op's derivative (a norm's backward is one op, not decomposed arithmetic), so the
# passes that fuse them are written once per op, like the forward ones. They are the nn
# dialect's own ops: they verify, print, run in the reference interpreter and lower through
# `convert-nn-to-coda` like the forward ops. Statistics are f32 vectors, one value per row.


def _check_f32_vector(name: str, value: SSAValue, length: int) -> None:
    ty = value.type
    if not (isinstance(ty, TensorType) and len(ty.get_shape()) == 1 and ty.get_element_type() == f32):
        raise VerifyException(f"{name} must be a rank-1 tensor of f32 (one value per row), got {ty}")
    if ty.get_shape()[0] != length:
        raise VerifyException(f"{name} must have {length} elements (one per row), got {ty}")


def _check_grad_pair(op: IRDLOperation, dy: SSAValue, x: SSAValue, x_name: str = "x") -> None:
    check_static_float(op, "dy", dy, 2)
    check_static_float(op, x_name, x, 2)
    check_same_element_type(op, [("dy", dy), (x_name, x)])


def _f32_vector(x: SSAValue) -> TensorType:
    return TensorType(f32, [shape_of(x)[0]])


@irdl_op_definition
class GemmOp(NNOperation):
    """`op(a) @ op(b)` where `op` transposes when `transpose_a` / `transpose_b` is true: the
    transposed products of a backward (`dy @ w`, `dy.T @ x`) without copying an operand."""

    name = "nn.gemm"
    a = operand_def(TensorType)
    b = operand_def(TensorType)
    result = result_def(TensorType)
    transpose_a = prop_def(IntegerAttr)
    transpose_b = prop_def(IntegerAttr)
    traits = traits_def(Pure())

    def __init__(self, a: SSAValue, b: SSAValue, transpose_a: bool = False, transpose_b: bool = False):
        sa, sb = shape_of(a), shape_of(b)
        m = sa[1] if transpose_a else sa[0]
        n = sb[0] if transpose_b else sb[1]
        super().__init__(
            operands=[a, b],
            result_types=[TensorType(element_type_of(a), [m, n])],
            properties={"transpose_a": IntegerAttr.from_bool(transpose_a), "transpose_b": IntegerAttr.from_bool(transpose_b)},
        )

    def flags(self) -> tuple[bool, bool]:
        return bool(self.transpose_a.value.data), bool(self.transpose_b.value.data)

    def problem(self) -> tuple[int, int, int]:
        ta, tb = self.flags()
        (a0, a1), (b0, b1) = shape_of(self.a), shape_of(self.b)
        m, k = (a1, a0) if ta else (a0, a1)
        k2, n = (b1, b0) if tb else (b0, b1)
        return m, n, k if k == k2 else -1

    def verify_(self) -> None:
        for name in ("transpose_a", "transpose_b"):
            attr = self.properties[name]
            if not (isinstance(attr, IntegerAttr) and isinstance(attr.type, IntegerType) and attr.type.width.data == 1):
                raise VerifyException(f"property {name} must be a boolean (`true` or `false`), got {attr}")
        check_static_float(self, "a", self.a, 2)
        check_static_float(self, "b", self.b, 2)
        check_same_element_type(self, [("a", self.a), ("b", self.b)])
        m, n, k = self.problem()
        if k < 0:
            raise VerifyException(
                f"the contraction sizes of a {fmt_shape(shape_of(self.a))} and b {fmt_shape(shape_of(self.b))} differ "
                f"(transpose_a = {self.flags()[0]}, transpose_b = {self.flags()[1]})"
            )
        check_result(self, (m, n), self.a)


@irdl_op_definition
class ColumnSumOp(NNOperation):
    """`sum_m x[m, n]`, or with `y` `sum_m x[m, n] * y[m, n]`: one value per column (bias and
    vector-scale gradients), in fp32, rounded once. The product form is one op so that the
    product of a scale's gradient is never rounded on its own (PyTorch's autograd of the
    op-by-op reference does not round it either)."""

    name = "nn.column_sum"
    x = operand_def(TensorType)
    y = opt_operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, x: SSAValue, y: SSAValue | None = None):
        super().__init__(operands=[x, [y] if y is not None else []],
                         result_types=[TensorType(element_type_of(x), [shape_of(x)[1]])])

    def verify_(self) -> None:
        check_static_float(self, "x", self.x, 2)
        if self.y is not None:
            check_static_float(self, "y", self.y, 2)
            check_same_element_type(self, [("x", self.x), ("y", self.y)])
            if shape_of(self.y) != shape_of(self.x):
                raise VerifyException(f"y has shape {fmt_shape(shape_of(self.y))} but x has {fmt_shape(shape_of(self.x))}")
        check_result(self, (shape_of(self.x)[1],), self.x)


class _ActivationGradOp(NNOperation):
    """`dy * act'(x)`."""

    dy = operand_def(TensorType)
    x = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        _check_grad_pair(self, self.dy, self.x)
        if shape_of(self.dy) != shape_of(self.x):
            raise VerifyException(f"dy has shape {fmt_shape(shape_of(self.dy))} but x has {fmt_shape(shape_of(self.x))}")
        check_result(self, shape_of(self.x), self.x)


@irdl_op_definition
class SiluGradOp(_ActivationGradOp):
    name = "nn.silu_grad"

    def __init__(self, dy: SSAValue, x: SSAValue):
        super().__init__(operands=[dy, x], result_types=[x.type])


@irdl_op_definition
class ReluGradOp(_ActivationGradOp):
    name = "nn.relu_grad"

    def __init__(self, dy: SSAValue, x: SSAValue):
        super().__init__(operands=[dy, x], result_types=[x.type])


@irdl_op_definition
class SoftcapGradOp(_ActivationGradOp):
    """`dy * (1 - tanh(x / cap)^2)`: the gradient of `nn.softcap` from its input x."""

    name = "nn.softcap_grad"
    cap = prop_def(FloatAttr)

    def __init__(self, dy: SSAValue, x: SSAValue, cap: float):
        super().__init__(operands=[dy, x], result_types=[x.type], properties={"cap": FloatAttr(cap, f32)})

    def verify_(self) -> None:
        super().verify_()
        cap = float_prop(self, "cap")
        if not (0 < cap < math.inf):
            raise VerifyException(f"cap must be a positive finite number, got {cap:.6g}")


@irdl_op_definition
class GeluGradOp(_ActivationGradOp):
    name = "nn.gelu_grad"
    approximate = prop_def(StringAttr)

    def __init__(self, dy: SSAValue, x: SSAValue, approximate: str = "none"):
        super().__init__(operands=[dy, x], result_types=[x.type], properties={"approximate": StringAttr(approximate)})

    def verify_(self) -> None:
        super().verify_()
        _check_choice(self, "approximate", GELU_APPROXIMATIONS)


class _GatedGradOp(NNOperation):
    """`dz` (M x 2F) of a gated activation from `dy` (M x F) and the saved pre-activation z."""

    dy = operand_def(TensorType)
    z = operand_def(TensorType)
    result = result_def(TensorType)
    in_producer_epilogue = opt_prop_def(BoolAttr)  # a plan (nn-plan), not semantics: see PLAN_PROPERTIES
    traits = traits_def(Pure())

    def verify_(self) -> None:
        _check_grad_pair(self, self.dy, self.z, "z")
        m, two_f = shape_of(self.z)
        if two_f % 2 or shape_of(self.dy) != (m, two_f // 2):
            raise VerifyException(
                f"dy must have shape {m}x{two_f // 2} (half of z's {two_f} columns), got {fmt_shape(shape_of(self.dy))}"
            )
        check_result(self, (m, two_f), self.z)


@irdl_op_definition
class SwiGLUGradOp(_GatedGradOp):
    name = "nn.swiglu_grad"

    def __init__(self, dy: SSAValue, z: SSAValue):
        super().__init__(operands=[dy, z], result_types=[z.type])


@irdl_op_definition
class GeGLUGradOp(_GatedGradOp):
    name = "nn.geglu_grad"
    approximate = prop_def(StringAttr)

    def __init__(self, dy: SSAValue, z: SSAValue, approximate: str = "none"):
        super().__init__(operands=[dy, z], result_types=[z.type], properties={"approximate": StringAttr(approximate)})

    def verify_(self) -> None:
        super().verify_()
        _check_choice(self, "approximate", GELU_APPROXIMATIONS)


@irdl_op_definition
class RoPEGradOp(NNOperation):
    """The transpose of `nn.rope`: the same pairs rotated by the negated angle (R is orthogonal)
    and scaled by the same `scaling` (a scalar multiple is its own transpose); columns past
    `rotary_dim` pass through, as in the forward."""

    name = "nn.rope_grad"
    dy = operand_def(TensorType)
    pos = operand_def(TensorType)
    result = result_def(TensorType)
    head_dim = prop_def(IntegerAttr)
    rotary_heads = prop_def(IntegerAttr)
    theta = prop_def(FloatAttr)
    style = prop_def(StringAttr)
    cos_sin_table = opt_prop_def(BoolAttr)  # a plan (nn-plan), not semantics: see PLAN_PROPERTIES
    inv_freq = opt_prop_def(DenseArrayBase)  # optional: the forward's frequencies (nn.rope)
    rotary_dim = opt_prop_def(IntegerAttr)  # optional: the forward's (nn.rope)
    scaling = opt_prop_def(FloatAttr)  # optional: the forward's (nn.rope)
    traits = traits_def(Pure())

    def __init__(self, dy: SSAValue, pos: SSAValue, properties: dict[str, Attribute]):
        super().__init__(operands=[dy, pos], result_types=[dy.type], properties=dict(properties))

    verify_ = RoPEOp.verify_

    @property
    def x(self) -> SSAValue:  # the rotated operand, named as in nn.rope for shared checks
        return self.dy


@irdl_op_definition
class RMSNormRstdOp(NNOperation):
    """`rsqrt(mean_j(x^2) + eps)` per row (f32): the statistic an RMSNorm's backward keeps."""

    name = "nn.rms_norm_rstd"
    x = operand_def(TensorType)
    result = result_def(TensorType)
    eps = prop_def(FloatAttr)
    traits = traits_def(Pure())

    def __init__(self, x: SSAValue, eps: float):
        super().__init__(operands=[x], result_types=[_f32_vector(x)], properties={"eps": _eps_attr(eps)})

    def verify_(self) -> None:
        check_static_float(self, "x", self.x, 2)
        _check_eps(self)
        _check_f32_vector("result", self.result, shape_of(self.x)[0])


@irdl_op_definition
class RowDotOp(NNOperation):
    """`sum_j a[m, j] * b[m, j]` per row, in fp32 (f32 [M]). nn-autodiff writes it for the
    RMSNorm backward's row statistic: with `z = h @ W.T` and `dh = dz @ W`,
    `sum_j dh_j h_j = sum_k dz_k z_k`, so the statistic is reduced where dz is produced."""

    name = "nn.row_dot"
    a = operand_def(TensorType)
    b = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, a: SSAValue, b: SSAValue):
        super().__init__(operands=[a, b], result_types=[_f32_vector(a)])

    def verify_(self) -> None:
        check_static_float(self, "a", self.a, 2)
        check_static_float(self, "b", self.b, 2)
        check_same_element_type(self, [("a", self.a), ("b", self.b)])
        if shape_of(self.a) != shape_of(self.b):
            raise VerifyException(f"a and b must have the same shape, got {fmt_shape(shape_of(self.a))} and {fmt_shape(shape_of(self.b))}")
        _check_f32_vector("result", self.result, shape_of(self.a)[0])


@irdl_op_definition
class RMSNormGradOp(NNOperation):
    """Backward of `nn.rms_norm` from its saved statistic: with `n = x * rstd` and `q = dy * (w + offset)`,
    `dx = rstd * (q - n * mean_j(q_j n_j))` and `dw = sum_rows(dy * n)` (the offset does not change dw).

    The optional last operand `hdh` is the row statistic `sum_j dy_j h_j` with h the norm's
    output (so `mean_j(q_j n_j) = hdh / d`), computed elsewhere: for `z = h @ W.T` and
    `dy = dz @ W` it equals `sum_k dz_k z_k`, an `nn.row_dot` reduced where dz is produced. Then
    dx is elementwise in dy and can run in the epilogue of the GEMM that produces dy."""

    name = "nn.rms_norm_grad"
    dy = operand_def(TensorType)
    x = operand_def(TensorType)
    w = operand_def(TensorType)
    rstd = operand_def(TensorType)
    hdh = opt_operand_def(TensorType)
    dx = result_def(TensorType)
    dw = result_def(TensorType)
    offset = opt_prop_def(FloatAttr)  # the forward's, 0.0 when absent: see norm_offset
    in_producer_epilogue = opt_prop_def(BoolAttr)  # a plan (nn-plan), not semantics: see PLAN_PROPERTIES
    traits = traits_def(Pure())

    def __init__(self, dy: SSAValue, x: SSAValue, w: SSAValue, rstd: SSAValue, hdh: SSAValue | None = None,
                 offset: float = 0.0):
        super().__init__(operands=[dy, x, w, rstd, [hdh] if hdh is not None else []], result_types=[x.type, w.type],
                         properties=_offset_props(offset))

    def verify_(self) -> None:
        _check_grad_pair(self, self.dy, self.x)
        check_static_float(self, "w", self.w, 1)
        check_same_element_type(self, [("x", self.x), ("w", self.w)])
        m, d = shape_of(self.x)
        if shape_of(self.dy) != (m, d) or shape_of(self.w) != (d,):
            raise VerifyException(f"dy must be {m}x{d} and w {d}, got {fmt_shape(shape_of(self.dy))} and {fmt_shape(shape_of(self.w))}")
        _check_f32_vector("rstd", self.rstd, m)
        if self.hdh is not None:
            _check_f32_vector("hdh", self.hdh, m)
        _check_offset(self)
        check_like(self, 0, self.x, "dx")
        check_like(self, 1, self.w, "dw")


@irdl_op_definition
class LayerNormStatsOp(NNOperation):
    """`(mean, rsqrt(var + eps))` per row (f32, biased variance): what a LayerNorm's backward keeps."""

    name = "nn.layer_norm_stats"
    x = operand_def(TensorType)
    mean = result_def(TensorType)
    rstd = result_def(TensorType)
    eps = prop_def(FloatAttr)
    traits = traits_def(Pure())

    def __init__(self, x: SSAValue, eps: float):
        super().__init__(operands=[x], result_types=[_f32_vector(x)] * 2, properties={"eps": _eps_attr(eps)})

    def verify_(self) -> None:
        check_static_float(self, "x", self.x, 2)
        _check_eps(self)
        _check_f32_vector("mean", self.mean, shape_of(self.x)[0])
        _check_f32_vector("rstd", self.rstd, shape_of(self.x)[0])


@irdl_op_definition
class LayerNormGradOp(NNOperation):
    """Backward of `nn.layer_norm`: with `n = (x - mean) * rstd`, `q = dy * w`:
    `dx = rstd * (q - mean_j(q) - n * mean_j(q n))`, `dw = sum_rows(dy * n)`, `db = sum_rows(dy)`."""

    name = "nn.layer_norm_grad"
    dy = operand_def(TensorType)
    x = operand_def(TensorType)
    w = operand_def(TensorType)
    mean = operand_def(TensorType)
    rstd = operand_def(TensorType)
    dx = result_def(TensorType)
    dw = result_def(TensorType)
    db = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, dy: SSAValue, x: SSAValue, w: SSAValue, mean: SSAValue, rstd: SSAValue):
        super().__init__(operands=[dy, x, w, mean, rstd], result_types=[x.type, w.type, w.type])

    def verify_(self) -> None:
        _check_grad_pair(self, self.dy, self.x)
        check_static_float(self, "w", self.w, 1)
        check_same_element_type(self, [("x", self.x), ("w", self.w)])
        m, d = shape_of(self.x)
        if shape_of(self.dy) != (m, d) or shape_of(self.w) != (d,):
            raise VerifyException(f"dy must be {m}x{d} and w {d}, got {fmt_shape(shape_of(self.dy))} and {fmt_shape(shape_of(self.w))}")
        _check_f32_vector("mean", self.mean, m)
        _check_f32_vector("rstd", self.rstd, m)
        check_like(self, 0, self.x, "dx")
        check_like(self, 1, self.w, "dw")
        check_like(self, 2, self.w, "db")


@irdl_op_definition
class HeadRMSNormGradOp(NNOperation):
    """Backward of `nn.head_rms_norm` (same properties): per normalized head, RMSNorm's backward
    over its `head_dim` columns (statistics recomputed inside the head; dx reads `w + offset`, dw
    does not read w); other columns pass dy."""

    name = "nn.head_rms_norm_grad"
    dy = operand_def(TensorType)
    x = operand_def(TensorType)
    w = var_operand_def(TensorType)  # the forward's weights (one per group of `weight_heads`)
    dx = result_def(TensorType)
    dw = var_result_def(TensorType)  # one per weight
    head_dim = prop_def(IntegerAttr)
    heads = prop_def(IntegerAttr)
    eps = prop_def(FloatAttr)
    first_head = opt_prop_def(IntegerAttr)  # optional, 0 when absent (NN_DIALECT.md): see first_head_of
    weight_heads = opt_prop_def(DenseArrayBase)  # the forward's: see head_weight_groups
    offset = opt_prop_def(FloatAttr)  # the forward's, 0.0 when absent: see norm_offset
    traits = traits_def(Pure())

    def __init__(self, dy: SSAValue, x: SSAValue, w: SSAValue | Sequence[SSAValue], properties: dict[str, Attribute]):
        weights = [w] if isinstance(w, SSAValue) else list(w)
        super().__init__(operands=[dy, x, weights], result_types=[x.type, [v.type for v in weights]],
                         properties=dict(properties))

    def verify_(self) -> None:
        _check_grad_pair(self, self.dy, self.x)
        m, n = shape_of(self.x)
        if shape_of(self.dy) != (m, n):
            raise VerifyException(f"dy must have shape {m}x{n} like x, got {fmt_shape(shape_of(self.dy))}")
        hd = check_positive(self, "head_dim")
        if n % hd:
            raise VerifyException(f"x must have a multiple of head_dim {hd} columns, got {n}")
        _check_head_weights(self, hd)
        _check_head_range(self, n, hd)
        _check_eps(self)
        _check_offset(self)
        check_like(self, 0, self.x, "dx")
        if len(self.dw) != len(self.w):
            raise VerifyException(f"expected one dw per weight ({len(self.w)}), got {len(self.dw)}")
        for i, w in enumerate(self.w):
            check_like(self, 1 + i, w, "dw" if len(self.w) == 1 else f"dw#{i}")


@irdl_op_definition
class CrossEntropyGradOp(NNOperation):
    """`dlogits[m, v] = (softmax(logits[m])[v] - [v == t[m]]) * dloss / count` for kept rows
    (`count` = kept rows for "mean", 1 for "sum"), 0 for rows whose target is `ignore_index`.
    A target outside `[0, V)` that is not ignored is a run-time error, as in the forward.
    The optional last operand is the saved `lse(logits[m])` (f32 [M], `nn.cross_entropy_fwd`):
    then the backward never folds the logits again.

    Optional `softcap` (f32 cap c, Gemma2's final_logit_softcapping): the operand is the soft-cap's
    input z, the loss's logits are `c * tanh(z / c)` (the lse is theirs), and the result is the
    gradient with respect to z, `dlogits * (1 - tanh(z / c)^2)`: what `nn-autodiff` writes for
    `nn.softcap` -> `nn.cross_entropy`, so that the backward keeps z alone (one [M, V] tensor, not
    z and the capped logits) and takes the derivative from z in f32 (from the rounded capped
    logits, `1 - (y / c)^2` cancels where the cap saturates)."""

    name = "nn.cross_entropy_grad"
    logits = operand_def(TensorType)
    targets = operand_def(TensorType)
    dloss = operand_def(TensorType)
    lse = opt_operand_def(TensorType)
    result = result_def(TensorType)
    ignore_index = prop_def(IntegerAttr)
    reduction = prop_def(StringAttr)
    softcap = opt_prop_def(FloatAttr)
    classes = opt_prop_def(IntegerAttr)  # the forward's: padding columns get gradient 0
    traits = traits_def(Pure())

    def cap(self) -> float | None:
        return None if self.softcap is None else float_prop(self, "softcap")

    def __init__(self, logits: SSAValue, targets: SSAValue, dloss: SSAValue, properties: dict[str, Attribute],
                 lse: SSAValue | None = None):
        super().__init__(operands=[logits, targets, dloss, [lse] if lse is not None else []],
                         result_types=[logits.type], properties=dict(properties))

    def verify_(self) -> None:
        check_static_float(self, "logits", self.logits, 2)
        m, _ = shape_of(self.logits)
        check_i32_vector("targets", self.targets, m)
        ty = self.dloss.type
        if not (isinstance(ty, TensorType) and not ty.get_shape() and ty.get_element_type() == f32):
            raise VerifyException(f"dloss must be a 0-d tensor of f32 (tensor<f32>), got {ty}")
        if self.lse is not None:
            _check_f32_vector("lse", self.lse, m)
        _check_ignore_index(self)
        _check_choice(self, "reduction", CROSS_ENTROPY_REDUCTIONS)
        _check_classes(self, shape_of(self.logits)[1])
        if self.softcap is not None and not (0 < float_prop(self, "softcap") < math.inf):
            raise VerifyException(f"softcap must be a positive finite number, got {float_prop(self, 'softcap'):.6g}")
        check_like(self, 0, self.logits, "dlogits")


LOGITS_CHUNK_TILE = 16
"""`chunk` of `nn.linear_cross_entropy_grad` is a multiple of this (a GEMM column tile)."""


@irdl_op_definition
class LinearCrossEntropyGradOp(NNOperation):
    """The gradients `(dh, dw)` of `cross_entropy(softcap(scale * (h @ w.T)), targets)` (the LM
    head and its loss) with respect to h [M, D] and w [V, D], from the forward's saved per-row
    `lse` of the (scaled, soft-capped) logits: what `nn-autodiff` writes instead of
    `nn.cross_entropy_grad` + `nn.softcap_grad` + the linear's two GEMMs when the [M, V] logits
    would not fit its memory budget, so the forward never stores them.

    `chunk` (required, a multiple of LOGITS_CHUNK_TILE): the recorded decision of how many rows
    of w (vocabulary columns of the logits) one step covers. Step k recomputes its logits
    `h @ w[k].T` and writes their gradient (from lse, targets and dloss) in the GEMM's epilogue,
    then `dw[k] = dlogits_k.T @ h` (complete: each row of dw is one step's) and `dh += dlogits_k @
    w[k]` (summed in f32 in step order, rounded once): at most one [M, chunk] buffer is live.
    Optional `scale` (f32, default 1: Granite's 1 / logits_scaling) and `softcap` (f32 cap, absent:
    none: Gemma2's final_logit_softcapping), applied in this order as `nn.scale` / `nn.softcap`.

    Optional `vocab_start` / `vocab_size` (together; absent: w is the whole head): w holds rows
    `[vocab_start, vocab_start + V)` of a `vocab_size`-row head (one rank's vocabulary shard),
    `targets` are ids in the whole vocabulary and `lse` is the log-sum-exp over the whole
    vocabulary (the shards' `nn.cross_entropy_partials` combined); then the op's meaning takes
    the softmax from that `lse` (`exp(logit - lse[m])`), the one-hot at `t[m] - vocab_start`
    where the shard holds it, and `dh` is this shard's term of the sum over shards, `dw` the
    shard's rows of the head's gradient (docs/VOCAB_PARALLEL.md)."""

    name = "nn.linear_cross_entropy_grad"
    h = operand_def(TensorType)
    w = operand_def(TensorType)
    targets = operand_def(TensorType)
    dloss = operand_def(TensorType)
    lse = operand_def(TensorType)
    dh = result_def(TensorType)
    dw = result_def(TensorType)
    ignore_index = prop_def(IntegerAttr)
    reduction = prop_def(StringAttr)
    chunk = prop_def(IntegerAttr)
    scale = opt_prop_def(FloatAttr)
    softcap = opt_prop_def(FloatAttr)
    vocab_start = opt_prop_def(IntegerAttr)
    vocab_size = opt_prop_def(IntegerAttr)
    classes = opt_prop_def(IntegerAttr)  # the forward's: w's rows past it are padding
    traits = traits_def(Pure())

    def __init__(self, h: SSAValue, w: SSAValue, targets: SSAValue, dloss: SSAValue, lse: SSAValue,
                 properties: dict[str, Attribute]):
        super().__init__(operands=[h, w, targets, dloss, lse], result_types=[h.type, w.type],
                         properties=dict(properties))

    def scale_factor(self) -> float:
        return 1.0 if self.scale is None else float_prop(self, "scale")

    def cap(self) -> float | None:
        return None if self.softcap is None else float_prop(self, "softcap")

    def verify_(self) -> None:
        check_static_float(self, "h", self.h, 2)
        check_static_float(self, "w", self.w, 2)
        check_same_element_type(self, [("h", self.h), ("w", self.w)])
        m, d = shape_of(self.h)
        v, dw = shape_of(self.w)
        if dw != d:
            raise VerifyException(f"w must be [V, {d}] (h has {d} columns), got {self.w.type}")
        check_i32_vector("targets", self.targets, m)
        ty = self.dloss.type
        if not (isinstance(ty, TensorType) and not ty.get_shape() and ty.get_element_type() == f32):
            raise VerifyException(f"dloss must be a 0-d tensor of f32 (tensor<f32>), got {ty}")
        _check_f32_vector("lse", self.lse, m)
        _check_ignore_index(self)
        _check_choice(self, "reduction", CROSS_ENTROPY_REDUCTIONS)
        chunk = int_prop(self, "chunk")
        if chunk <= 0 or chunk % LOGITS_CHUNK_TILE:
            raise VerifyException(f"chunk must be a positive multiple of {LOGITS_CHUNK_TILE}, got {chunk}")
        if self.scale is not None and not (0 < abs(float_prop(self, "scale")) < math.inf):
            raise VerifyException(f"scale must be a non-zero finite number, got {float_prop(self, 'scale'):.6g}")
        if self.softcap is not None and not (0 < float_prop(self, "softcap") < math.inf):
            raise VerifyException(f"softcap must be a positive finite number, got {float_prop(self, 'softcap'):.6g}")
        _check_vocab_shard(self, v)
        _check_classes(self, v)
        if self.classes is not None and self.vocab_start is not None:
            raise VerifyException("classes (padding columns) and a vocabulary shard (vocab_start) do not combine")
        check_like(self, 0, self.h, "dh")
        check_like(self, 1, self.w, "dw")


@irdl_op_definition
class RMSNormApplyOp(NNOperation):
    """`x * rstd[m] * (w + offset)`: an RMSNorm from its saved statistic (a backward rebuilding the
    normalized activation instead of reading a stored copy)."""

    name = "nn.rms_norm_apply"
    x = operand_def(TensorType)
    w = operand_def(TensorType)
    rstd = operand_def(TensorType)
    result = result_def(TensorType)
    offset = opt_prop_def(FloatAttr)  # the forward's, 0.0 when absent: see norm_offset
    traits = traits_def(Pure())

    def __init__(self, x: SSAValue, w: SSAValue, rstd: SSAValue, offset: float = 0.0):
        super().__init__(operands=[x, w, rstd], result_types=[x.type], properties=_offset_props(offset))

    def verify_(self) -> None:
        check_static_float(self, "x", self.x, 2)
        check_static_float(self, "w", self.w, 1)
        check_same_element_type(self, [("x", self.x), ("w", self.w)])
        m, d = shape_of(self.x)
        if shape_of(self.w) != (d,):
            raise VerifyException(f"w must have shape {d}, got {fmt_shape(shape_of(self.w))}")
        _check_f32_vector("rstd", self.rstd, m)
        _check_offset(self)
        check_result(self, (m, d), self.x)


@irdl_op_definition
class LayerNormApplyOp(NNOperation):
    """`(x - mean[m]) * rstd[m] * w + b`: a LayerNorm from its saved statistics."""

    name = "nn.layer_norm_apply"
    x = operand_def(TensorType)
    w = operand_def(TensorType)
    b = operand_def(TensorType)
    mean = operand_def(TensorType)
    rstd = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, x: SSAValue, w: SSAValue, b: SSAValue, mean: SSAValue, rstd: SSAValue):
        super().__init__(operands=[x, w, b, mean, rstd], result_types=[x.type])

    def verify_(self) -> None:
        check_static_float(self, "x", self.x, 2)
        check_same_element_type(self, [("x", self.x), ("w", self.w), ("b", self.b)])
        m, d = shape_of(self.x)
        for name, v in (("w", self.w), ("b", self.b)):
            if shape_of(v) != (d,):
                raise VerifyException(f"{name} must have shape {d}, got {fmt_shape(shape_of(v))}")
        _check_f32_vector("mean", self.mean, m)
        _check_f32_vector("rstd", self.rstd, m)
        check_result(self, (m, d), self.x)


@irdl_op_definition
class ZerosOp(NNOperation):
    """A tensor of zeros: the gradient of an argument no result depends on."""

    name = "nn.zeros"
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def __init__(self, result_type: Attribute):
        super().__init__(operands=[], result_types=[result_type])

    def verify_(self) -> None:
        check_static_float(self, "result", self.result, None)
        if len(shape_of(self.result)) not in (1, 2):
            raise VerifyException(f"result must be rank 1 or 2, got {self.result.type}")


# ----------------------------------------------------------------------------- whole-model ops
# The token embedding, opaque attention and concatenation, so that a whole model (embedding,
# every layer with its attention, the LM head and the loss) is nn programs (NN_DIALECT.md).


@irdl_op_definition
class EmbeddingOp(NNOperation, EmbeddingDef):
    """`w[ids[m]]`; an id outside `[0, V)` is a run-time error."""

    name = "nn.embedding"

    def __init__(self, ids: SSAValue, w: SSAValue):
        (m,), (_, d) = shape_of(ids), shape_of(w)
        super().__init__(operands=[ids, w], result_types=[TensorType(element_type_of(w), [m, d])])


def attention_props(heads: int, kv_heads: int, head_dim: int, seq_len: int, causal: bool, *,
                    scale: float | None = None, window: int = 0, softcap: float = 0.0) -> dict[str, Attribute]:
    """The properties of an attention op; the optional ones only where they differ from their
    default (so a plain attention prints as before)."""
    props: dict[str, Attribute] = {
        "heads": IntegerAttr(heads, i64),
        "kv_heads": IntegerAttr(kv_heads, i64),
        "head_dim": IntegerAttr(head_dim, i64),
        "seq_len": IntegerAttr(seq_len, i64),
        "causal": causal if isinstance(causal, IntegerAttr) else IntegerAttr.from_bool(causal),
    }
    if scale is not None:
        props["scale"] = FloatAttr(scale, f32)
    if window:
        props["window"] = IntegerAttr(window, i64)
    if softcap:
        props["softcap"] = FloatAttr(softcap, f32)
    return props


ATTENTION_PROPS = ("heads", "kv_heads", "head_dim", "seq_len", "causal")
ATTENTION_OPTIONAL_PROPS = ("scale", "window", "softcap")
"""The optional properties of the attention ops (`attention_options`): absent means the default."""


def attention_config(op: IRDLOperation) -> tuple[int, int, int, int, bool]:
    """(heads, kv_heads, head_dim, seq_len, causal) of an attention op (its optional properties:
    `attention_options`)."""
    return (int_prop(op, "heads"), int_prop(op, "kv_heads"), int_prop(op, "head_dim"), int_prop(op, "seq_len"),
            bool(op.properties["causal"].value.data))


def attention_carried_props(op: IRDLOperation) -> dict[str, Attribute]:
    """The properties an attention op hands to its forward variant, gradient and coda twin:
    the required ones and those optional ones it has."""
    return {k: op.properties[k] for k in (*ATTENTION_PROPS, *ATTENTION_OPTIONAL_PROPS) if k in op.properties}


@dataclass(frozen=True)
class AttentionOptions:
    """The optional properties of an attention op, with their defaults filled in.

    * `scale`: the softmax scale (None: the default `1 / sqrt(head_dim)`);
    * `window`: Hugging Face's sliding window (0: none): query row i sees key row j only if
      `i - j < window` (transformers' `sliding_window_overlay`: `kv_idx > q_idx - window`);
    * `softcap`: scores become `softcap * tanh(scores / softcap)` after scaling, before masking
      (0: none, Gemma2's `attn_logit_softcapping`)."""

    scale: float | None = None
    window: int = 0
    softcap: float = 0.0

    @property
    def plain(self) -> bool:
        """No option differs from its default."""
        return self.scale is None and not self.window and not self.softcap

    def effective_scale(self, head_dim: int) -> float:
        return 1.0 / math.sqrt(head_dim) if self.scale is None else self.scale


def attention_options(op: IRDLOperation) -> AttentionOptions:
    """The optional properties of an attention op (nn or coda), defaults filled in."""
    scale = op.properties.get("scale")
    window = op.properties.get("window")
    softcap = op.properties.get("softcap")
    return AttentionOptions(
        scale=None if scale is None else scale.value.data,  # type: ignore[attr-defined]
        window=0 if window is None else window.value.data,  # type: ignore[attr-defined]
        softcap=0.0 if softcap is None else softcap.value.data,  # type: ignore[attr-defined]
    )


@irdl_op_definition
class AttentionOp(NNOperation, AttentionProperties):
    """Opaque multi-head attention over a packed `[q heads | k heads | v heads]` (GQA: q head
    `h` reads kv head `h // (H / KV)`); never fused, run as one attention kernel.

    Optional properties (absent: the default; a program without them means what it always did):
    `scale` (f32, default `1 / sqrt(head_dim)`) the softmax scale; `window` (i64, default 0 = none)
    Hugging Face's sliding window: query row i sees key row j only if `i - j < window` (needs
    `causal`); `softcap` (f32, default 0 = none): scores become `softcap * tanh(scores / softcap)`
    after scaling, before masking.

    Optional operand `segments: tensor<M x i32>` (after the others): the document of each row. A
    query row sees a key row only within its `seq_len` block, causally (with `causal`), within
    the window, and when `segments[key] >= 0` and either `segments[query] == segments[key]` or
    `segments[query] < 0`. A negative id (-1) marks a padding row: no query sees it as a key; as
    a query it sees the non-padding keys of its block, as Hugging Face's 2-D padding mask does
    (it masks keys, never queries). A query row that sees no key at all (left padding before the
    first token) gets output 0, log-sum-exp -inf and passes no gradient.
    """

    name = "nn.attention"
    qkv = operand_def(TensorType)
    segments = var_operand_def(TensorType)
    result = result_def(TensorType)

    def __init__(self, qkv: SSAValue, heads: int, kv_heads: int, head_dim: int, seq_len: int, causal: bool = True, *,
                 scale: float | None = None, window: int = 0, softcap: float = 0.0, segments: SSAValue | None = None):
        m, _ = shape_of(qkv)
        super().__init__(operands=[qkv, [segments] if segments is not None else []],
                         result_types=[TensorType(element_type_of(qkv), [m, heads * head_dim])],
                         properties=attention_props(heads, kv_heads, head_dim, seq_len, causal,
                                                    scale=scale, window=window, softcap=softcap))

    def verify_(self) -> None:
        m, heads, _, hd, _ = check_attention_qkv(self, self.qkv, self.segments)
        check_result(self, (m, heads * hd), self.qkv)


@irdl_op_definition
class ConcatOp(NNOperation, ConcatDef):
    """Concatenation along `axis` (0: rows, 1: columns) of tensors of one rank and element type."""

    name = "nn.concat"

    def __init__(self, inputs: Sequence[SSAValue], axis: int):
        shapes = [shape_of(x) for x in inputs]
        shape = list(shapes[0])
        shape[axis] = sum(s[axis] for s in shapes)
        super().__init__(operands=[list(inputs)], result_types=[TensorType(element_type_of(inputs[0]), shape)],
                         properties={"axis": IntegerAttr(axis, i64)})


@irdl_op_definition
class SliceOp(NNOperation, SliceDef):
    """`x[start : start + size]` along `axis` (the result's extent along it is `size`)."""

    name = "nn.slice"

    def __init__(self, x: SSAValue, axis: int, start: int, size: int):
        shape = list(shape_of(x))
        shape[axis] = size
        super().__init__(operands=[x], result_types=[TensorType(element_type_of(x), shape)],
                         properties={"axis": IntegerAttr(axis, i64), "start": IntegerAttr(start, i64)})


WHOLE_MODEL_OPS = (EmbeddingOp, AttentionOp, ConcatOp, SliceOp)

VOCAB_SHARD_OPS = (CrossEntropyPartialsOp,)
"""Forward ops over one vocabulary shard (tensor parallelism): not differentiated by
nn-autodiff (a shard's loss is not a function of the shard alone)."""

@irdl_op_definition
class EmbeddingGradOp(NNOperation, EmbeddingGradDef):
    """`dw[v] = sum over m with ids[m] = v of dy[m]` (V rows, from the result type), summed in
    a fixed order (deterministic)."""

    name = "nn.embedding_grad"

    def __init__(self, dy: SSAValue, ids: SSAValue, w_type: Attribute):
        super().__init__(operands=[dy, ids], result_types=[w_type])


@irdl_op_definition
class AttentionFwdOp(NNOperation, AttentionWithLseDef):
    """`nn.attention` that also returns the log-sum-exp of every (sequence, head, row): what its
    backward needs (flat f32 `B*H*S`, in the attention kernel's own order). Same optional
    properties and `segments` operand as `nn.attention`."""

    name = "nn.attention_fwd"

    def __init__(self, qkv: SSAValue, properties: dict[str, Attribute], segments: SSAValue | None = None):
        m, _ = shape_of(qkv)
        heads, hd = properties["heads"].value.data, properties["head_dim"].value.data
        super().__init__(operands=[qkv, [segments] if segments is not None else []], properties=dict(properties),
                         result_types=[TensorType(element_type_of(qkv), [m, heads * hd]), TensorType(f32, [m * heads])])


@irdl_op_definition
class AttentionGradOp(NNOperation, AttentionGradDef):
    """`d(qkv)` of `nn.attention` from qkv, its output, log-sum-exp and the output's gradient
    (then the forward's `segments`, when it has them; same optional properties)."""

    name = "nn.attention_grad"

    def __init__(self, qkv: SSAValue, out: SSAValue, lse: SSAValue, dout: SSAValue, properties: dict[str, Attribute],
                 segments: SSAValue | None = None):
        super().__init__(operands=[qkv, out, lse, dout, [segments] if segments is not None else []],
                         result_types=[qkv.type], properties=dict(properties))



BACKWARD_OPS = (
    GemmOp,
    ColumnSumOp,
    SiluGradOp,
    SoftcapGradOp,
    ReluGradOp,
    GeluGradOp,
    SwiGLUGradOp,
    GeGLUGradOp,
    RoPEGradOp,
    RMSNormRstdOp,
    RMSNormGradOp,
    LayerNormStatsOp,
    LayerNormGradOp,
    HeadRMSNormGradOp,
    CrossEntropyGradOp,
    CrossEntropyFwdOp,
    LinearCrossEntropyGradOp,
    RMSNormApplyOp,
    LayerNormApplyOp,
    ZerosOp,
    RowDotOp,
    EmbeddingGradOp,
    AttentionFwdOp,
    AttentionGradOp,
)


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
        ScaleOp,
        SoftcapOp,
        RMSNormOp,
        LayerNormOp,
        SwiGLUOp,
        GeGLUOp,
        RoPEOp,
        HeadRMSNormOp,
        CrossEntropyOp,
        *VOCAB_SHARD_OPS,
        *WHOLE_MODEL_OPS,
        *BACKWARD_OPS,
    ],
    [],
)
