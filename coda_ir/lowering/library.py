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

__all__ = ["attention_forward", "attention_backward", "embedding", "embedding_grad", "concat", "slice_copy"]


def embedding(ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """`w[ids]` (ids were range-checked on the host before the call)."""
    return torch.nn.functional.embedding(ids.long(), w)


def embedding_grad(dy: torch.Tensor, ids: torch.Tensor, num_rows: int) -> torch.Tensor:
    """`dw[v] = sum of dy[m] over ids[m] = v`, in a fixed order.

    PyTorch's dense embedding backward: on CUDA it sorts the ids and reduces each run of equal
    ids in order (fp32 accumulation); on CPU it accumulates row by row in order."""
    if dy.device.type == "cpu" and dy.dtype != torch.float32:
        # the CPU kernel would accumulate in bf16/f16: sum in fp32 like the CUDA one, round once
        grad = torch.zeros((num_rows, dy.shape[1]), dtype=torch.float32)
        return grad.index_add_(0, ids.long(), dy.float()).to(dy.dtype)
    return torch.ops.aten.embedding_dense_backward(dy, ids.long(), num_rows, -1, False)


def concat(tensors: list[torch.Tensor], axis: int) -> torch.Tensor:
    return torch.cat(tensors, dim=axis)


def slice_copy(x: torch.Tensor, axis: int, start: int, size: int) -> torch.Tensor:
    return x.narrow(axis, start, size).contiguous()
