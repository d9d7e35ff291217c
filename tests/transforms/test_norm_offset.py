"""`nn.rms_norm`'s optional `offset` (Gemma: `x * rstd * (1 + w)`, the sum in fp32) and `nn.scale`
(Granite's multipliers): forward and every gradient of small programs against the op-by-op
reference, unfused (`convert-nn-to-coda`) and fused (`nn-to-coda`: the deferred norm's
pre-scale and the GEMM epilogues, the RMSNorm backward in the dgrad's epilogue). The norm is
taken once of a GEMM's output (deferred into the consumer) and once of an argument (a row
kernel for D = 64, statistics + apply for D = 80)."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

import coda_ir  # noqa: E402
from coda_ir import testing  # noqa: E402


def program(d: int, dtype: str) -> str:
    M, K, N = 13, 48, 40
    T = lambda *s: "tensor<" + "x".join(map(str, s)) + f"x{dtype}>"  # noqa: E731
    return f"""
func.func @gemma_norms(%a: {T(M, K)}, %w0: {T(d, K)}, %g: {T(d)}, %w1: {T(N, d)}, %x: {T(M, d)}, %g2: {T(d)})
    -> ({T(M, N)}, {T(M, d)}) {{
  %x0 = "nn.linear"(%a, %w0) : ({T(M, K)}, {T(d, K)}) -> {T(M, d)}
  %h = "nn.rms_norm"(%x0, %g) <{{eps = 1.0e-06 : f32, offset = 1.0 : f32}}> : ({T(M, d)}, {T(d)}) -> {T(M, d)}
  %z = "nn.linear"(%h, %w1) : ({T(M, d)}, {T(N, d)}) -> {T(M, N)}
  %s = "nn.scale"(%z) <{{factor = 0.125 : f32}}> : ({T(M, N)}) -> {T(M, N)}
  %h2 = "nn.rms_norm"(%x, %g2) <{{eps = 1.0e-06 : f32, offset = 1.0 : f32}}> : ({T(M, d)}, {T(d)}) -> {T(M, d)}
  func.return %s, %h2 : {T(M, N)}, {T(M, d)}
}}"""


# fused: D = 64 (the deferred pre-scale, the row kernel, the backward in the dgrad epilogue);
# unfused: D = 80 (statistics + apply kernels, the separate backward); ~4 s each
@pytest.mark.parametrize("d, dtype, pipeline", [(64, "bf16", "nn-to-coda"), (80, "f32", "convert-nn-to-coda")])
def test_offset_norm_and_scale_gradients_match_reference(d: int, dtype: str, pipeline: str):
    source = program(d, dtype)
    compiled = coda_ir.compile(source, f"nn-autodiff,{pipeline}")
    inputs = testing.random_inputs(source, seed=d)
    testing.check_gradients(compiled, source, inputs, seed=d)


def test_offset_is_applied_in_fp32_not_rounded_into_the_weight():
    # (1 + w) with w in bf16: rounding 1 + w to bf16 would lose w's low bits; the reference
    # (and the op) add in fp32, as Gemma's RMSNorm does
    from coda_ir import reference

    x = torch.randn(5, 64).bfloat16()
    w = (0.01 * torch.randn(64)).bfloat16()
    src = ('func.func @n(%x: tensor<5x64xbf16>, %w: tensor<64xbf16>) -> tensor<5x64xbf16> {\n'
           '  %h = "nn.rms_norm"(%x, %w) <{eps = 1.0e-06 : f32, offset = 1.0 : f32}> : (tensor<5x64xbf16>, tensor<64xbf16>) -> tensor<5x64xbf16>\n'
           '  func.return %h : tensor<5x64xbf16>\n}')
    (ref,) = reference.run_reference(reference.load_func(src), [x.double(), w.double()], torch.float64)
    xd = x.double()
    expected = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + torch.tensor(1e-6, dtype=torch.float32).item()) * (1 + w.double())
    torch.testing.assert_close(ref, expected, rtol=1e-12, atol=1e-12)
    out = coda_ir.compile(src).n(x, w).float()
    n = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
    gemma = (n * (1 + w.float())).bfloat16().float()  # Hugging Face's GemmaRMSNorm
    folded = (n * (1 + w).float()).bfloat16().float()  # the weight rounded to bf16 first
    assert (out - gemma).abs().max() < 0.5 * (folded - gemma).abs().max()


def test_offset_must_be_finite():
    src = ('func.func @n(%x: tensor<5x64xf32>, %w: tensor<64xf32>) -> tensor<5x64xf32> {\n'
           '  %h = "nn.rms_norm"(%x, %w) <{eps = 1.0e-06 : f32, offset = 0x7F800000 : f32}> : (tensor<5x64xf32>, tensor<64xf32>) -> tensor<5x64xf32>\n'
           '  func.return %h : tensor<5x64xf32>\n}')
    with pytest.raises(coda_ir.CodaError, match="offset must be a finite number"):
        coda_ir.compile(src)


def test_head_norm_offset_gradients_match_reference():
    # Gemma3's q/k norms: 1 + w per head, in the QKV GEMM's epilogue (fused), and the backward
    source = """
func.func @qk_norms(%a: tensor<13x48xbf16>, %w: tensor<64x48xbf16>, %wq: tensor<16xbf16>, %wk: tensor<16xbf16>) -> tensor<13x64xbf16> {
  %z = "nn.linear"(%a, %w) : (tensor<13x48xbf16>, tensor<64x48xbf16>) -> tensor<13x64xbf16>
  %q = "nn.head_rms_norm"(%z, %wq) <{head_dim = 16 : i64, heads = 2 : i64, eps = 1.0e-06 : f32, offset = 1.0 : f32}> : (tensor<13x64xbf16>, tensor<16xbf16>) -> tensor<13x64xbf16>
  %k = "nn.head_rms_norm"(%q, %wk) <{head_dim = 16 : i64, heads = 1 : i64, eps = 1.0e-06 : f32, first_head = 2 : i64, offset = 1.0 : f32}> : (tensor<13x64xbf16>, tensor<16xbf16>) -> tensor<13x64xbf16>
  func.return %k : tensor<13x64xbf16>
}"""
    compiled = coda_ir.compile(source, "nn-autodiff,nn-to-coda")
    inputs = testing.random_inputs(source, seed=3)
    testing.check_gradients(compiled, source, inputs, seed=3)
