"""One definition of each library step, shared by the nn op and its coda twin.

The library steps are the steps that run as one library call, not as a GEMM + epilogue kernel:
attention (PyTorch's SDPA kernels), the token embedding and its gradient, concatenation and
slicing. Each is an nn op (the contract of NN_DIALECT.md) that convert-nn-to-coda lowers one to
one to a coda op with the same operands, results and properties (`lower_nn.lower_attention`,
...). The classes below hold what the two share: operands, results, properties and the verifier,
so each shape and type rule is written once. Each dialect's op adds its name, its syntax and, on
the nn side, a builder:

| definition | nn op | coda op |
|---|---|---|
| `AttentionWithLseDef` | `nn.attention_fwd` | `coda.attention` |
| `AttentionGradDef` | `nn.attention_grad` | `coda.attention_grad` |
| `EmbeddingDef` | `nn.embedding` | `coda.embedding` |
| `EmbeddingGradDef` | `nn.embedding_grad` | `coda.embedding_grad` |
| `ConcatDef` | `nn.concat` | `coda.concat` |
| `SliceDef` | `nn.slice` | `coda.slice` |

`nn.attention` (no log-sum-exp, no coda twin: it lowers to `coda.attention` too) shares
`AttentionProperties` and `check_attention_qkv`. Two rules the twins do not share, each a switch
the coda op sets:

* the types of the integer properties: NN_DIALECT.md fixes i64 (and an i1 `causal`); the coda
  steps read the value of any integer attribute (`LibraryStepDef.CONTRACT_PROPERTY_TYPES`);
* `coda-widen-summed-stores` may store the dy of a `coda.embedding_grad` in f32
  (`EmbeddingGradDef.dy_element_type_fits`).

The errors name the operand or property; xDSL's diagnostics prefix the op and its location.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import FloatAttr, IntegerAttr, IntegerType, TensorType, f32
from xdsl.ir import SSAValue
from xdsl.irdl import IRDLOperation, operand_def, opt_prop_def, prop_def, result_def, traits_def, var_operand_def
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from coda_ir.dialects.tensor_checks import (
    check_i32_vector,
    check_like,
    check_result,
    check_same_element_type,
    check_static_float,
    element_type_of,
    float_prop,
    fmt_shape,
    int_prop,
    shape_of,
)


class LibraryStepDef(IRDLOperation):
    """Base of the shared definitions."""

    CONTRACT_PROPERTY_TYPES: ClassVar[bool] = True
    """Whether the integer properties must have the types NN_DIALECT.md fixes (i64, an i1
    `causal`), as on the nn ops; the coda steps (`coda_library.LibraryStepOp`) accept any integer
    attribute and read its value."""

    def int_property(self, name: str) -> int:
        """The value of the integer property `name`, of the type the op requires."""
        if self.CONTRACT_PROPERTY_TYPES:
            return int_prop(self, name)
        attr = self.properties[name]
        assert isinstance(attr, IntegerAttr)
        return attr.value.data

    def positive_int_property(self, name: str) -> int:
        value = self.int_property(name)
        if value <= 0:
            raise VerifyException(f"{name} must be positive, got {value}")
        return value


# ----------------------------------------------------------------------------- attention


class AttentionProperties(LibraryStepDef):
    """The properties of every attention op (nn and coda): `heads`, `kv_heads`, `head_dim`,
    `seq_len`, `causal` and the optional `scale`, `window`, `softcap` (their meaning:
    `nn.AttentionOp`)."""

    heads = prop_def(IntegerAttr)
    kv_heads = prop_def(IntegerAttr)
    head_dim = prop_def(IntegerAttr)
    seq_len = prop_def(IntegerAttr)
    causal = prop_def(IntegerAttr)
    scale = opt_prop_def(FloatAttr)
    window = opt_prop_def(IntegerAttr)
    softcap = opt_prop_def(FloatAttr)
    traits = traits_def(Pure())


def check_attention_qkv(op: AttentionProperties, qkv: SSAValue,
                        segments: Sequence[SSAValue]) -> tuple[int, int, int, int, int]:
    """(M, H, KV, hd, S) of an attention op's packed qkv operand, checked with the op's
    properties and its optional `segments` operand."""
    check_static_float(op, "qkv", qkv, 2)
    heads, kv_heads = op.positive_int_property("heads"), op.positive_int_property("kv_heads")
    hd, seq = op.positive_int_property("head_dim"), op.positive_int_property("seq_len")
    causal = op.properties.get("causal")
    if op.CONTRACT_PROPERTY_TYPES and not (isinstance(causal, IntegerAttr) and causal.type == IntegerType(1)):
        raise VerifyException(f"property 'causal' must be a boolean (true/false), got {causal}")
    if heads % kv_heads:
        raise VerifyException(f"kv_heads ({kv_heads}) must divide heads ({heads})")
    m, n = shape_of(qkv)
    if n != (heads + 2 * kv_heads) * hd:
        raise VerifyException(
            f"qkv must have (heads + 2 * kv_heads) * head_dim = {(heads + 2 * kv_heads) * hd} columns, got {n}"
        )
    if m % seq:
        raise VerifyException(f"qkv has {m} rows, not a multiple of seq_len {seq}")
    check_attention_options(op, m, segments)
    return m, heads, kv_heads, hd, seq


def check_attention_options(op: IRDLOperation, rows: int, segments: Sequence[SSAValue]) -> None:
    """The optional properties and the optional `segments` operand of an attention op, with
    messages that name them."""
    if "scale" in op.properties:
        scale = float_prop(op, "scale")
        if not (0 < scale < math.inf):
            raise VerifyException(f"scale must be a positive finite number, got {scale:.6g}")
    if "window" in op.properties:
        window = int_prop(op, "window")
        if window < 0:
            raise VerifyException(f"window must be non-negative (0: no sliding window), got {window}")
        causal = op.properties.get("causal")
        if window and not (isinstance(causal, IntegerAttr) and causal.value.data):
            raise VerifyException(f"window = {window} needs causal = true (a sliding window narrows the causal mask)")
    if "softcap" in op.properties:
        softcap = float_prop(op, "softcap")
        if not (0 <= softcap < math.inf):
            raise VerifyException(f"softcap must be a non-negative finite number (0: none), got {softcap:.6g}")
    if len(segments) > 1:
        raise VerifyException(f"takes at most one segments operand, got {len(segments)}")
    if segments:
        check_i32_vector("segments", segments[0], rows)


def _check_lse(lse: SSAValue, m: int, heads: int) -> None:
    if lse.type != TensorType(f32, [m * heads]):
        raise VerifyException(f"lse must be tensor<{m * heads}xf32>, got {lse.type}")


class AttentionWithLseDef(AttentionProperties):
    """Attention over packed `[q | k | v]` heads that also returns the log-sum-exp of every
    (sequence, head, row): `(out, lse)`, lse a flat f32 `M * heads` (what the backward needs)."""

    qkv = operand_def(TensorType)
    segments = var_operand_def(TensorType)
    out = result_def(TensorType)
    lse = result_def(TensorType)

    def verify_(self) -> None:
        m, heads, _, hd, _ = check_attention_qkv(self, self.qkv, self.segments)
        check_result(self, (m, heads * hd), self.qkv)
        _check_lse(self.lse, m, heads)


class AttentionGradDef(AttentionProperties):
    """`d(qkv)` of attention from qkv, its output, log-sum-exp and the output's gradient (then
    the forward's `segments`, when it has them)."""

    qkv = operand_def(TensorType)
    out = operand_def(TensorType)
    lse = operand_def(TensorType)
    dout = operand_def(TensorType)
    segments = var_operand_def(TensorType)
    result = result_def(TensorType)

    def verify_(self) -> None:
        m, heads, _, hd, _ = check_attention_qkv(self, self.qkv, self.segments)
        for name, v in (("out", self.out), ("dout", self.dout)):
            if v.type != TensorType(element_type_of(self.qkv), [m, heads * hd]):
                raise VerifyException(f"{name} must be the attention output's type, got {v.type}")
        _check_lse(self.lse, m, heads)
        check_like(self, 0, self.qkv, "dqkv")


# ----------------------------------------------------------------------------- embedding


class EmbeddingDef(LibraryStepDef):
    """`w[ids[m]]`: the rows of the table `w` (V x D) that the i32 ids pick."""

    ids = operand_def(TensorType)
    w = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        check_static_float(self, "w", self.w, 2)
        ids = self.ids.type
        if not (isinstance(ids, TensorType) and len(ids.get_shape()) == 1 and ids.get_element_type() == IntegerType(32)):
            raise VerifyException(f"ids must be a rank-1 tensor of i32, got {ids}")
        (m,), (_, d) = shape_of(self.ids), shape_of(self.w)
        check_result(self, (m, d), self.w)


class EmbeddingGradDef(LibraryStepDef):
    """`dw[v] = sum over m with ids[m] = v of dy[m]` (V rows, from the result type), summed in a
    fixed order."""

    dy = operand_def(TensorType)
    ids = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def dy_element_type_fits(self) -> bool:
        """Whether dy's element type fits the result's: here, the same one."""
        return element_type_of(self.result) == element_type_of(self.dy)

    def verify_(self) -> None:
        check_static_float(self, "dy", self.dy, 2)
        m, d = shape_of(self.dy)
        check_i32_vector("ids", self.ids, m)
        check_static_float(self, "result", self.result, 2)
        if shape_of(self.result)[1] != d or not self.dy_element_type_fits():
            raise VerifyException(f"result must be Vx{d} of dy's element type, got {self.result.type}")


# ----------------------------------------------------------------------------- copies


class ConcatDef(LibraryStepDef):
    """Concatenation along `axis` (0: rows, 1: columns) of tensors of one rank and element type."""

    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        if not self.inputs:
            raise VerifyException("needs at least one input")
        for i, x in enumerate(self.inputs):
            check_static_float(self, f"input #{i}", x, None)
        check_same_element_type(self, [(f"input #{i}", x) for i, x in enumerate(self.inputs)])
        shapes = [shape_of(x) for x in self.inputs]
        rank = len(shapes[0])
        axis = self.int_property("axis")
        if rank not in (1, 2) or not 0 <= axis < rank:
            raise VerifyException(f"axis must be 0 or 1 for rank-2 inputs and 0 for rank-1 ones, got {axis} for rank {rank}")
        for i, shape in enumerate(shapes):
            if len(shape) != rank or any(a != b for d, (a, b) in enumerate(zip(shape, shapes[0])) if d != axis):
                raise VerifyException(
                    f"input #{i} has shape {fmt_shape(shape)}; every input must match input #0 ({fmt_shape(shapes[0])}) "
                    f"except along axis {axis}"
                )
        expected = list(shapes[0])
        expected[axis] = sum(s[axis] for s in shapes)
        check_result(self, expected, self.inputs[0])


class SliceDef(LibraryStepDef):
    """`x[start : start + size]` along `axis` (the result's extent along it is `size`)."""

    x = operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr)
    start = prop_def(IntegerAttr)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        check_static_float(self, "x", self.x, None)
        shape = shape_of(self.x)
        axis, start = self.int_property("axis"), self.int_property("start")
        if not 0 <= axis < len(shape):
            raise VerifyException(f"axis {axis} out of range for rank {len(shape)}")
        rshape = shape_of(self.result)
        if len(rshape) != len(shape) or any(a != b for d, (a, b) in enumerate(zip(rshape, shape)) if d != axis):
            raise VerifyException(f"result {self.result.type} must match x ({self.x.type}) except along axis {axis}")
        if not (0 <= start and start + rshape[axis] <= shape[axis]):
            raise VerifyException(f"slice [{start}, {start + rshape[axis]}) is outside [0, {shape[axis]}) along axis {axis}")
        if self.result.type.get_element_type() != element_type_of(self.x):
            raise VerifyException("result element type must be x's")
