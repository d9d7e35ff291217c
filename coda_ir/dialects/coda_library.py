"""The library steps of the `coda` dialect: the steps that are not GEMM + epilogue kernels.

`coda_ir.dialects.coda` re-exports every name here and registers the ops in its dialect.
"""

from __future__ import annotations

from xdsl.dialects.builtin import (
    FloatAttr,
    IntegerAttr,
    TensorType,
)
from xdsl.ir import SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from coda_ir.dialects.nn import check_attention_options

# ============================================================================ library steps
# Steps that are not GEMM + epilogue kernels: attention (PyTorch's SDPA kernels, opaque per
# NN_DIALECT.md), the token embedding and its gradient (PyTorch's gather and deterministic
# sorted scatter-add), and tensor concatenation / slicing (device copies). They run from the
# host function by calling `coda_ir.runtime.library`; the fusion passes leave them alone.


def _static_tensor(value: SSAValue, what: str) -> tuple[int, ...]:
    ty = value.type
    if not (isinstance(ty, TensorType) and all(d >= 0 for d in ty.get_shape())):
        raise VerifyException(f"{what} must be a statically shaped tensor, got {ty}")
    return tuple(ty.get_shape())


class LibraryStepOp(IRDLOperation):
    """Base of the library steps (one launch each in `launch_count`)."""


def _attention_config(op: IRDLOperation) -> tuple[int, int, int, int]:
    vals = []
    for name in ("heads", "kv_heads", "head_dim", "seq_len"):
        attr = op.properties[name]
        if not (isinstance(attr, IntegerAttr) and attr.value.data > 0):
            raise VerifyException(f"property {name} must be a positive integer, got {attr}")
        vals.append(attr.value.data)
    return tuple(vals)  # type: ignore[return-value]


@irdl_op_definition
class AttentionOp(LibraryStepOp):
    """Attention over packed `[q | k | v]` heads: `(out, lse)` (lse: flat f32 log-sum-exp).
    The optional properties `scale`, `window`, `softcap` and the optional `segments` operand
    mean what they mean on `nn.attention` (coda_ir/dialects/nn.py)."""

    name = "coda.attention"
    qkv = operand_def(TensorType)
    segments = var_operand_def(TensorType)
    out = result_def(TensorType)
    lse = result_def(TensorType)
    heads = prop_def(IntegerAttr)
    kv_heads = prop_def(IntegerAttr)
    head_dim = prop_def(IntegerAttr)
    seq_len = prop_def(IntegerAttr)
    causal = prop_def(IntegerAttr)
    scale = opt_prop_def(FloatAttr)
    window = opt_prop_def(IntegerAttr)
    softcap = opt_prop_def(FloatAttr)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        h, kv, hd, s = _attention_config(self)
        m, n = _static_tensor(self.qkv, "qkv")
        if n != (h + 2 * kv) * hd or m % s or h % kv:
            raise VerifyException(f"qkv {self.qkv.type} does not fit heads={h}, kv_heads={kv}, head_dim={hd}, seq_len={s}")
        if _static_tensor(self.out, "out") != (m, h * hd) or _static_tensor(self.lse, "lse") != (m * h,):
            raise VerifyException("out must be M x heads*head_dim and lse M*heads")
        check_attention_options(self, m, self.segments)


@irdl_op_definition
class AttentionGradOp(LibraryStepOp):
    """`d(qkv)` of coda.attention from qkv, out, lse and d(out) (then the forward's `segments`,
    when it has them; the same optional properties)."""

    name = "coda.attention_grad"
    qkv = operand_def(TensorType)
    out = operand_def(TensorType)
    lse = operand_def(TensorType)
    dout = operand_def(TensorType)
    segments = var_operand_def(TensorType)
    result = result_def(TensorType)
    heads = prop_def(IntegerAttr)
    kv_heads = prop_def(IntegerAttr)
    head_dim = prop_def(IntegerAttr)
    seq_len = prop_def(IntegerAttr)
    causal = prop_def(IntegerAttr)
    scale = opt_prop_def(FloatAttr)
    window = opt_prop_def(IntegerAttr)
    softcap = opt_prop_def(FloatAttr)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        h, kv, hd, s = _attention_config(self)
        m, n = _static_tensor(self.qkv, "qkv")
        if n != (h + 2 * kv) * hd or m % s or h % kv:
            raise VerifyException(f"qkv {self.qkv.type} does not fit heads={h}, kv_heads={kv}, head_dim={hd}, seq_len={s}")
        if self.result.type != self.qkv.type:
            raise VerifyException("d(qkv) must have qkv's type")
        check_attention_options(self, m, self.segments)


@irdl_op_definition
class EmbeddingOp(LibraryStepOp):
    """`w[ids]` (ids checked on the host before the call)."""

    name = "coda.embedding"
    ids = operand_def(TensorType)
    w = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        (m,), (_, d) = _static_tensor(self.ids, "ids"), _static_tensor(self.w, "w")
        if _static_tensor(self.result, "result") != (m, d):
            raise VerifyException(f"result must be {m}x{d}")


@irdl_op_definition
class EmbeddingGradOp(LibraryStepOp):
    """`dw[v] = sum_{m: ids[m] = v} dy[m]`, summed in a fixed order."""

    name = "coda.embedding_grad"
    dy = operand_def(TensorType)
    ids = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        (m, d), (mi,) = _static_tensor(self.dy, "dy"), _static_tensor(self.ids, "ids")
        if m != mi or _static_tensor(self.result, "result")[1] != d:
            raise VerifyException("dy must have one row per id and the result dy's width")


@irdl_op_definition
class ConcatOp(LibraryStepOp):
    """Concatenation along `axis` (a device copy)."""

    name = "coda.concat"
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        axis = self.axis.value.data
        shapes = [_static_tensor(x, "input") for x in self.inputs]
        expected = list(shapes[0])
        expected[axis] = sum(sh[axis] for sh in shapes)
        if list(_static_tensor(self.result, "result")) != expected:
            raise VerifyException(f"result must have shape {expected}")


@irdl_op_definition
class SliceOp(LibraryStepOp):
    """`x[start : start + size]` along `axis`, as a new contiguous tensor (a device copy)."""

    name = "coda.slice"
    x = operand_def(TensorType)
    result = result_def(TensorType)
    axis = prop_def(IntegerAttr)
    start = prop_def(IntegerAttr)
    traits = traits_def(Pure())

    def verify_(self) -> None:
        axis, start = self.axis.value.data, self.start.value.data
        shape, rshape = _static_tensor(self.x, "x"), _static_tensor(self.result, "result")
        if not (0 <= axis < len(shape)) or start < 0 or start + rshape[axis] > shape[axis]:
            raise VerifyException("slice out of range")


LIBRARY_STEP_OPS = (AttentionOp, AttentionGradOp, EmbeddingOp, EmbeddingGradOp, ConcatOp, SliceOp)
