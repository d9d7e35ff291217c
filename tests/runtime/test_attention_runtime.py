"""coda_ir.runtime.attention: the opaque attention that nn.attention runs, against SDPA."""

from __future__ import annotations

import pytest
import torch

from coda_ir.runtime.attention import MATH, attention_backward, attention_forward, backend


def _sdpa(qkv, heads, kv_heads, hd, seq, causal):
    b = qkv.shape[0] // seq
    p = qkv.view(b, seq, heads + 2 * kv_heads, hd)
    q, k, v = p[:, :, :heads].transpose(1, 2), p[:, :, heads : heads + kv_heads].transpose(1, 2), p[:, :, heads + kv_heads :].transpose(1, 2)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    return out.transpose(1, 2).reshape(b * seq, heads * hd)


@pytest.mark.parametrize("heads, kv_heads, hd, seq, causal", [(4, 2, 16, 5, True), (6, 2, 24, 7, False), (3, 3, 8, 1, True)])
def test_forward_and_backward_match_sdpa_autograd(heads, kv_heads, hd, seq, causal):
    torch.manual_seed(heads * 100 + seq)
    qkv = torch.randn(2 * seq, (heads + 2 * kv_heads) * hd, dtype=torch.float64, requires_grad=True)
    ref = _sdpa(qkv, heads, kv_heads, hd, seq, causal)
    dout = torch.randn_like(ref)
    ref.backward(dout)
    assert backend(qkv, heads, kv_heads, hd, seq, causal) == MATH  # CPU
    out, lse = attention_forward(qkv.detach(), heads, kv_heads, hd, seq, causal)
    assert lse.dtype == torch.float32 and lse.shape == (2 * heads * seq,)
    torch.testing.assert_close(out, ref.detach(), rtol=1e-5, atol=1e-5)
    dqkv = attention_backward(qkv.detach(), out, lse, dout, heads, kv_heads, hd, seq, causal)
    torch.testing.assert_close(dqkv, qkv.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_bf16_backend_matches_sdpa():
    heads, kv_heads, hd, seq = 8, 2, 64, 256
    torch.manual_seed(0)
    qkv = torch.randn(2 * seq, (heads + 2 * kv_heads) * hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    ref = _sdpa(qkv, heads, kv_heads, hd, seq, True)
    dout = torch.randn_like(ref)
    ref.backward(dout)
    out, lse = attention_forward(qkv.detach(), heads, kv_heads, hd, seq, True)
    dqkv = attention_backward(qkv.detach(), out, lse, dout, heads, kv_heads, hd, seq, True)
    torch.testing.assert_close(out, ref.detach(), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(dqkv, qkv.grad, rtol=2e-2, atol=2e-2)
