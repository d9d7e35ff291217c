"""The library steps of generated host code (coda.attention, coda.embedding, coda.concat, ...).

These are the parts of a program that are not GEMM + epilogue kernels: attention runs PyTorch's
own SDPA kernels (coda_ir/lowering/attention.py), the embedding PyTorch's gather and its
gradient PyTorch's embedding backward (on CUDA a sort + segmented reduction: deterministic, no
float atomics), concatenation and slicing are device copies. Generated modules import this
module as `_lib`.
"""

from __future__ import annotations

import torch

from coda_ir.lowering.attention import attention_backward, attention_forward

__all__ = ["attention_forward", "attention_backward", "embedding", "embedding_grad", "concat", "adjacent_view", "slice_copy"]


def embedding(ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """`w[ids]`. The ids are range-checked by the caller: on the host before the call, or (from_hf)
    on the device with the error raised before the forward returns; so that an id out of
    range is never read out of bounds meanwhile (a device-side assert would poison the CUDA
    context), ids are clamped to the table (no effect on valid ids)."""
    return torch.nn.functional.embedding(ids.long().clamp_(0, w.shape[0] - 1), w)


def embedding_grad(dy: torch.Tensor, ids: torch.Tensor, num_rows: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`dw[v] = sum of dy[m] over ids[m] = v`, in a fixed order, as `dtype` (default dy's).

    PyTorch's dense embedding backward: on CUDA it sorts the ids and reduces each run of equal
    ids in order (fp32 accumulation); on CPU it accumulates row by row in order. An f32 `dy`
    with a bf16/f16 `dtype` (coda-widen-summed-stores) is summed in fp32 and rounded once."""
    dtype = dtype or dy.dtype
    if dy.device.type == "cpu" and dy.dtype != torch.float32:
        # the CPU kernel would accumulate in bf16/f16: sum in fp32 like the CUDA one, round once
        grad = torch.zeros((num_rows, dy.shape[1]), dtype=torch.float32)
        return grad.index_add_(0, ids.long(), dy.float()).to(dtype)
    return torch.ops.aten.embedding_dense_backward(dy, ids.long(), num_rows, -1, False).to(dtype)


def concat(tensors: list[torch.Tensor], axis: int) -> torch.Tensor:
    """`torch.cat`, except that tensors already adjacent in one storage (contiguous, in order,
    along axis 0: e.g. sibling weights that `coda_ir.torch.from_hf` packed once) are returned
    as one view of that storage, with no copy."""
    packed = adjacent_view(tensors) if axis == 0 else None
    return packed if packed is not None else torch.cat(tensors, dim=axis)


def adjacent_view(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """The row concatenation of `tensors` as a view, when they lie back to back in one storage
    (each contiguous, same dtype, device and trailing shape); else None."""
    first = tensors[0]
    if not all(t.is_contiguous() and t.dim() == first.dim() >= 1 for t in tensors):
        return None
    if any(t.dtype != first.dtype or t.device != first.device or t.shape[1:] != first.shape[1:] for t in tensors):
        return None
    storage = first.untyped_storage().data_ptr()
    offset = first.storage_offset()
    for t in tensors:
        if t.untyped_storage().data_ptr() != storage or t.storage_offset() != offset:
            return None
        offset += t.numel()
    rows = sum(t.shape[0] for t in tensors)
    return first.as_strided((rows, *first.shape[1:]), first.stride(), first.storage_offset())


def slice_copy(x: torch.Tensor, axis: int, start: int, size: int) -> torch.Tensor:
    """`x` narrowed along `axis`: a view when that is contiguous (rows of a row-major tensor),
    else a contiguous copy."""
    return x.narrow(axis, start, size).contiguous()
