"""The library steps of generated host code (coda.attention, coda.embedding, coda.concat, ...).

These are the parts of a program that are not GEMM + epilogue kernels: attention runs PyTorch's
own SDPA kernels (coda_ir/runtime/attention.py), the embedding PyTorch's gather and its
gradient PyTorch's embedding backward (on CUDA a sort + segmented reduction: deterministic, no
float atomics), concatenation and slicing are device copies. Generated modules import this
module as `_lib`.
"""

from __future__ import annotations

import torch
import triton.language as tl

from coda_ir import tiling
from coda_ir.errors import ArgumentError
from coda_ir.runtime.attention import (
    attention_backward,
    attention_backward_segments,
    attention_forward,
    attention_forward_segments,
)

__all__ = ["attention_forward", "attention_backward", "attention_forward_segments", "attention_backward_segments",
           "embedding", "embedding_grad", "embedding_grad_into", "concat",
           "adjacent_view", "slice_copy", "step_tokens"]


def embedding(ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """`w[ids]`. The ids are range-checked by the caller: on the host before the call, or (from_hf)
    on the device with the error raised before the forward returns; so that an id out of
    range is never read out of bounds meanwhile (a device-side assert would poison the CUDA
    context), ids are clamped to the table (no effect on valid ids)."""
    # int32 or int64 ids index as they are (one clamp, no widening copy); never the caller's ids in place
    return torch.nn.functional.embedding(ids.clamp(0, w.shape[0] - 1), w)


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


ROW_RUN_CHUNK = 16
"""Rows of one id summed per step of `_add_row_runs`: a frequent token (hundreds of repeats in a
step's 8192 ids) takes a few dozen steps, each loading 16 rows at once, not hundreds of serial loads."""
ROW_RUN_COLUMNS = 256
ROW_RUN_WARPS = 1
"""Measured on the H100 (bench/RESULTS.md, session 14; LLaMA-1B's [128256, 2048] weight, 8192 ids,
the sort included): 256 columns, chunks of 16 rows, 1 warp: 164 us for uniform ids and 236 us for
Zipf-distributed ones (one id 1121 times); 4 warps 699 / 484 us (most programs start no run and
exit, and a small program a warp wide packs more of them per SM); PyTorch's dense embedding
backward plus the add of the two dense gradients: 1029 / 933 us."""


def _add_row_runs(dst_ptr, rows_ptr, sorted_ids_ptr, order_ptr, n, d, stride_dst, stride_rows,
                  BLOCK_D: tl.constexpr, CHUNK: tl.constexpr):
    """Program (p, c): if sorted position p starts a run of equal ids v, columns block c of
    dst[v] += the rows of that run, in sorted (stable: original) order, in fp32, rounded once."""
    p = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    in_row = cols < d
    v = tl.load(sorted_ids_ptr + p)
    before = tl.load(sorted_ids_ptr + tl.maximum(p - 1, 0))
    if (p == 0) | (before != v):
        acc = tl.load(dst_ptr + v * stride_dst + cols, mask=in_row, other=0.0).to(tl.float32)
        q = p
        more = v == v
        while more:
            at = q + tl.arange(0, CHUNK)
            ids = tl.load(sorted_ids_ptr + at, mask=at < n, other=-1)
            mine = ids == v
            src = tl.load(order_ptr + at, mask=mine, other=0)
            vals = tl.load(rows_ptr + src[:, None] * stride_rows + cols[None, :], mask=mine[:, None] & in_row[None, :],
                           other=0.0)
            acc += tl.sum(vals.to(tl.float32), axis=0)
            q += CHUNK
            more = tl.sum(mine.to(tl.int32), axis=0) == CHUNK
        tl.store(dst_ptr + v * stride_dst + cols, acc.to(dst_ptr.dtype.element_ty), mask=in_row)


_KERNELS: dict[tuple[object, bool], object] = {}


def _kernel(fn, interpret: bool, unspecialized: tuple[str, ...] = ()):
    """`fn` as Triton's interpreter runs it (CPU tensors) or as it compiles it (CUDA tensors):
    decorated once per mode, as generated modules are (`runtime.load_module`). `unspecialized`:
    integer arguments Triton must not specialize on (a step's token count: a new sequence length
    whose token count is not a multiple of 16 must not compile the kernel again, 1.5 s of a
    first step on the H200)."""
    kernel = _KERNELS.get((fn, interpret))
    if kernel is None:
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction

        kernel = _KERNELS[(fn, interpret)] = (InterpretedFunction(fn) if interpret
                                              else JITFunction(fn, do_not_specialize=list(unspecialized)))
    return kernel


def embedding_grad_into(dst: torch.Tensor, dy: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """`dst[v] += sum of dy[m] over ids[m] = v`, in place, and returns `dst`: the embedding's
    gradient added into an existing gradient of the same (tied) weight without a dense
    [V, D] embedding gradient (coda_ir.torch.hf's tied-weight path, issue 11).

    Deterministic, no float atomics: the ids are sorted (stably), and the program at the start
    of each run of equal ids adds the run's rows to dst's row, in sorted order, in fp32, rounded
    once. No host sync. `ids` must be in [0, V) (the caller checked them). A run is summed by one
    program, 16 rows a step: thousands of one id (a padded batch whose pad id has no
    `padding_idx`) take a few hundred us; still below the dense path's ~1 ms at LLaMA-1B."""
    if dst.dim() != 2 or dy.dim() != 2 or ids.dim() != 1 or tuple(dy.shape) != (ids.shape[0], dst.shape[1]):
        raise ArgumentError(f"embedding_grad_into(): dst [V, D], dy [N, D], ids [N]; got dst {list(dst.shape)}, "
                            f"dy {list(dy.shape)}, ids {list(ids.shape)}", "dy")
    if ids.numel() == 0:
        return dst
    from coda_ir.runtime.compiled import triton_mode

    # CPU tensors through Triton's interpreter, CUDA tensors compiled, under the same mode switch
    # as every generated call (the interpreter patches `triton.language` while it runs)
    interpret = dst.device.type == "cpu"
    dst_c = dst if dst.is_contiguous() else dst.contiguous()
    dy = dy.contiguous()
    sorted_ids, order = torch.sort(ids.long(), stable=True)
    n, d = dy.shape
    grid = (n, tiling.cdiv(d, ROW_RUN_COLUMNS))
    with triton_mode(interpret):
        _kernel(_add_row_runs, interpret, ("n",))[grid](dst_c, dy, sorted_ids, order, n, d, dst_c.stride(0), dy.stride(0),
                                         BLOCK_D=ROW_RUN_COLUMNS, CHUNK=ROW_RUN_CHUNK, num_warps=ROW_RUN_WARPS)
    if dst_c is not dst:
        dst.copy_(dst_c)
    return dst


def _step_tokens(ids_ptr, labels_ptr, ids_out, targets_out, flags_ptr, n, seq, vocab, ignore,
                 HAS_LABELS: tl.constexpr, BLOCK: tl.constexpr):
    """Over the flat [batch * seq] ids (and labels): the ids as int32; the shifted targets
    (position s of a row predicts labels[s + 1], a row's last position the ignore index) as
    int32; flags[0] = 1 where an id lies outside [0, vocab), flags[1] = 1 where a label lies
    outside [0, vocab) and is not the ignore index (integer atomic max: order-free)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offs < n
    ids = tl.load(ids_ptr + offs, mask=live, other=0).to(tl.int64)
    tl.store(ids_out + offs, ids.to(tl.int32), mask=live)
    bad_ids = live & ((ids < 0) | (ids >= vocab))
    tl.atomic_max(flags_ptr, tl.max(bad_ids.to(tl.int32), axis=0))
    if HAS_LABELS:
        labels = tl.load(labels_ptr + offs, mask=live, other=ignore).to(tl.int64)
        bad_labels = live & ((labels < 0) | (labels >= vocab)) & (labels != ignore)
        tl.atomic_max(flags_ptr + 1, tl.max(bad_labels.to(tl.int32), axis=0))
        last = (offs % seq) == seq - 1
        after = tl.load(labels_ptr + offs + 1, mask=live & ~last, other=ignore)
        tl.store(targets_out + offs, after.to(tl.int32), mask=live)


STEP_TOKENS_BLOCK = 1024


def step_tokens(input_ids: torch.Tensor, labels: torch.Tensor | None, vocab: int,
                ignore_index: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """What a training step makes of its `input_ids` and `labels` ([batch, seq] integers), in one
    kernel: `(ids, targets, flags)` with `ids` the flat int32 ids, `targets` the flat int32
    shifted labels (Hugging Face's causal-LM targets: position s predicts labels[s + 1], a row's
    last position nothing) or None without labels, and `flags` an int32 [2] device tensor:
    whether an id lies outside [0, vocab), whether a label does (the ignore index aside).
    No host sync: the caller reads the flags when it can wait (`coda_ir.torch.hf.TokenCheck`).
    (Before, the same took 15 small PyTorch kernels: host time a step's GPU idled on.)"""
    if input_ids.dim() != 2 or (labels is not None and tuple(labels.shape) != tuple(input_ids.shape)):
        raise ArgumentError(f"step_tokens(): input_ids [batch, seq] and labels of its shape; got "
                            f"{list(input_ids.shape)} and {None if labels is None else list(labels.shape)}", "labels")
    from coda_ir.runtime.compiled import triton_mode

    device = input_ids.device
    batch, seq = input_ids.shape
    n = batch * seq
    ids_in = input_ids.contiguous()
    labels_in = labels.to(device).contiguous() if labels is not None else ids_in
    ids = torch.empty(n, dtype=torch.int32, device=device)
    targets = torch.empty(n, dtype=torch.int32, device=device) if labels is not None else ids
    flags = torch.zeros(2, dtype=torch.int32, device=device)
    if n:
        interpret = device.type == "cpu"
        with triton_mode(interpret):
            _kernel(_step_tokens, interpret, ("n", "seq"))[(tiling.cdiv(n, STEP_TOKENS_BLOCK),)](
                ids_in, labels_in, ids, targets, flags, n, seq, vocab, ignore_index,
                HAS_LABELS=labels is not None, BLOCK=STEP_TOKENS_BLOCK)
    return ids, (targets if labels is not None else None), flags


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
