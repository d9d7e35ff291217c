"""The library steps of the `coda` dialect: the steps that are not GEMM + epilogue kernels.

Attention (PyTorch's SDPA kernels, opaque per NN_DIALECT.md), the token embedding and its
gradient (PyTorch's gather and deterministic sorted scatter-add), and tensor concatenation /
slicing (device copies). They run from the host function by calling `coda_ir.runtime.library`;
the fusion passes leave them alone. Each is the twin of an nn op and shares its definition
(operands, results, properties, verifier: `library_steps.py`); the optional properties `scale`,
`window`, `softcap` and the optional `segments` operand of the attention steps mean what they
mean on `nn.attention`.

`coda_ir.dialects.coda` re-exports every name here and registers the ops in its dialect.
"""

from __future__ import annotations

from typing import ClassVar

from xdsl.dialects.builtin import f32
from xdsl.irdl import IRDLOperation, irdl_op_definition

from coda_ir.dialects.library_steps import (
    AttentionGradDef,
    AttentionWithLseDef,
    ConcatDef,
    EmbeddingDef,
    EmbeddingGradDef,
    SliceDef,
)
from coda_ir.dialects.tensor_checks import element_type_of


class LibraryStepOp(IRDLOperation):
    """Base of the library steps (one launch each in `launch_count`). Their integer properties
    may be of any integer type (`LibraryStepDef.CONTRACT_PROPERTY_TYPES`)."""

    CONTRACT_PROPERTY_TYPES: ClassVar[bool] = False


@irdl_op_definition
class AttentionOp(LibraryStepOp, AttentionWithLseDef):
    """Attention over packed `[q | k | v]` heads: `(out, lse)` (lse: flat f32 log-sum-exp);
    the twin of `nn.attention_fwd`, and what `nn.attention` lowers to."""

    name = "coda.attention"


@irdl_op_definition
class AttentionGradOp(LibraryStepOp, AttentionGradDef):
    """`d(qkv)` of coda.attention from qkv, out, lse and d(out) (then the forward's `segments`,
    when it has them): the twin of `nn.attention_grad`."""

    name = "coda.attention_grad"


@irdl_op_definition
class EmbeddingOp(LibraryStepOp, EmbeddingDef):
    """`w[ids]` (ids checked on the host before the call): the twin of `nn.embedding`."""

    name = "coda.embedding"


@irdl_op_definition
class EmbeddingGradOp(LibraryStepOp, EmbeddingGradDef):
    """`dw[v] = sum_{m: ids[m] = v} dy[m]`, summed in a fixed order: the twin of
    `nn.embedding_grad`."""

    name = "coda.embedding_grad"

    def dy_element_type_fits(self) -> bool:
        """dy has the result's element type, or f32: `coda-widen-summed-stores` stores a dy that
        only this step reads unrounded (it sums the rows in fp32 and rounds once)."""
        return super().dy_element_type_fits() or element_type_of(self.dy) == f32


@irdl_op_definition
class ConcatOp(LibraryStepOp, ConcatDef):
    """Concatenation along `axis` (a device copy): the twin of `nn.concat`."""

    name = "coda.concat"


@irdl_op_definition
class SliceOp(LibraryStepOp, SliceDef):
    """`x[start : start + size]` along `axis`, as a new contiguous tensor (a device copy): the twin
    of `nn.slice`."""

    name = "coda.slice"


LIBRARY_STEP_OPS = (AttentionOp, AttentionGradOp, EmbeddingOp, EmbeddingGradOp, ConcatOp, SliceOp)
