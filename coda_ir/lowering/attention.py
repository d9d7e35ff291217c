"""Opaque attention for generated host code: `nn.attention` runs PyTorch's own SDPA kernels.

Attention is never fused into a GEMM epilogue (NN_DIALECT.md): the compiler fuses everything
around it and calls these two functions, which generated modules import. The forward returns
the attention output and the per-(sequence, head, row) log-sum-exp that the backward needs, so
the backward never recomputes the forward.

Layout: `qkv` is `[M, (H + 2 KV) * hd]` with `M = B * S` rows (B sequences of S consecutive
rows); q, k and v are strided views `[B, heads, S, hd]` of it (no copies). The output is
`[M, H * hd]`; the log-sum-exp is a flat fp32 vector of `B * H * S` in the backend's own order
(only `attention_backward` reads it).

Backend: on CUDA the one SDPA itself picks (`torch._fused_sdp_choice`, with GQA enabled), so
coda-ir runs the same attention kernel as a Hugging Face model (on the H100: cuDNN, which takes
GQA k/v and the strided packed views directly, bench/RESULTS.md 2026-11-23). cuDNN and flash
are called through their aten ops; any other choice (fp32, odd head dims, CPU) runs an exact
fp32 math path. The cuDNN and flash backward passes are not bitwise reproducible (their dq
accumulation): the one exception to coda-ir's determinism, and the same kernels the baselines use.
"""

from __future__ import annotations

import math

import torch

MATH, FLASH, CUDNN = 0, 1, 3


def _views(qkv: torch.Tensor, heads: int, kv_heads: int, head_dim: int, seq_len: int):
    m, width = qkv.shape
    b = m // seq_len
    packed = qkv.view(b, seq_len, heads + 2 * kv_heads, head_dim)
    q = packed[:, :, :heads].transpose(1, 2)
    k = packed[:, :, heads : heads + kv_heads].transpose(1, 2)
    v = packed[:, :, heads + kv_heads :].transpose(1, 2)
    return q, k, v


def backend(qkv: torch.Tensor, heads: int, kv_heads: int, head_dim: int, seq_len: int, causal: bool) -> int:
    """The SDPA backend these shapes run on (torch.nn.attention.SDPBackend values)."""
    if qkv.device.type != "cuda":
        return MATH
    q, k, v = _views(qkv, heads, kv_heads, head_dim, seq_len)
    choice = int(torch._fused_sdp_choice(q, k, v, None, 0.0, causal, scale=None, enable_gqa=True))
    return choice if choice in (FLASH, CUDNN) else MATH


def _flat_rows(out: torch.Tensor) -> torch.Tensor:
    """[B, H, S, hd] -> [B * S, H * hd]."""
    b, h, s, d = out.shape
    return out.transpose(1, 2).reshape(b * s, h * d)


def _math_forward(q, k, v, causal: bool):
    group = q.shape[1] // k.shape[1]
    scale = 1.0 / math.sqrt(q.shape[-1])
    qf, kf, vf = q.float(), k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1)
    scores = (qf @ kf.transpose(-1, -2)) * scale
    if causal:
        s = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.exp(scores - lse[..., None]) @ vf
    return out.to(q.dtype), lse


def _math_backward(dout, q, k, v, out, lse, causal: bool):
    group = q.shape[1] // k.shape[1]
    scale = 1.0 / math.sqrt(q.shape[-1])
    qf, kf, vf = q.float(), k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1)
    do, of = dout.float(), out.float()
    scores = (qf @ kf.transpose(-1, -2)) * scale
    if causal:
        s = scores.shape[-1]
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    p = torch.exp(scores - lse[..., None])
    dv = p.transpose(-1, -2) @ do
    dp = do @ vf.transpose(-1, -2)
    ds = p * (dp - (do * of).sum(-1, keepdim=True))
    dq = (ds @ kf) * scale
    dk = (ds.transpose(-1, -2) @ qf) * scale
    b, h, s, d = dk.shape
    dk = dk.view(b, h // group, group, s, d).sum(2)
    dv = dv.view(b, h // group, group, s, d).sum(2)
    return dq, dk, dv


def attention_forward(qkv: torch.Tensor, heads: int, kv_heads: int, head_dim: int, seq_len: int, causal: bool):
    """(output [M, H*hd] in qkv's dtype, log-sum-exp flat fp32 [B*H*S])."""
    q, k, v = _views(qkv, heads, kv_heads, head_dim, seq_len)
    which = backend(qkv, heads, kv_heads, head_dim, seq_len, causal)
    if which == CUDNN:
        result = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False)
        out, lse = result[0], result[1]
    elif which == FLASH:
        result = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False)
        out, lse = result[0], result[1]
    else:
        out, lse = _math_forward(q, k, v, causal)
    return _flat_rows(out), lse.reshape(-1).float()


def attention_backward(qkv: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, dout: torch.Tensor,
                       heads: int, kv_heads: int, head_dim: int, seq_len: int, causal: bool) -> torch.Tensor:
    """d(qkv) [M, (H + 2 KV) * hd] from the forward's output and log-sum-exp."""
    q, k, v = _views(qkv, heads, kv_heads, head_dim, seq_len)
    b = q.shape[0]
    o = out.view(b, seq_len, heads, head_dim).transpose(1, 2)
    do = dout.view(b, seq_len, heads, head_dim).transpose(1, 2)
    which = backend(qkv, heads, kv_heads, head_dim, seq_len, causal)
    # Without dropout the random-state tensors are not read; the forward returns them as one
    # (cuDNN: seed, offset) or two (flash: rng state) int64 values. `None` is an undefined tensor
    # (no bias, no cumulative sequence lengths of a nested batch), as the forward returns them.
    if which == CUDNN:
        seed = torch.zeros(1, dtype=torch.int64, device=qkv.device)
        dq, dk, dv = torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
            do, q, k, v, o, lse.view(b, heads, seq_len, 1), seed, seed, None, None, None, seq_len, seq_len,
            0.0, causal)
    elif which == FLASH:
        state = torch.zeros(2, dtype=torch.int64, device=qkv.device)
        empty = torch.empty(0, dtype=torch.int64, device=qkv.device)
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_backward(
            do, q, k, v, o, lse.view(b, heads, seq_len), None, None, seq_len, seq_len, 0.0, causal, state, empty)
    else:
        dq, dk, dv = _math_backward(do, q, k, v, o, lse.view(b, heads, seq_len), causal)
    dqkv = torch.cat([_flat_rows(dq), _flat_rows(dk), _flat_rows(dv)], dim=1)
    return dqkv.to(qkv.dtype)
