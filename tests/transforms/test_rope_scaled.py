"""Scaled and partial RoPE (issue 30: LLaMA 3.x, Phi-3.5 / Phi-4-mini, GLM4, Gemma3, Qwen2.5-long):
`nn.rope`'s optional `rotary_dim` (rotate the first rotary_dim columns of each head, pass the
rest) and `scaling` (Hugging Face's `attention_scaling`: cos and sin times it), with explicit
`inv_freq`. The reference against an independent float64 transcription of Hugging Face's
`apply_rotary_pos_emb` (Phi3 / GLM4), the lowering (`lower_nn.rope_epilogue`) standalone and in
a GEMM's epilogue, with cos/sin tables or per pair, forward and gradients against float64."""

from __future__ import annotations

import math

import pytest
import torch
from xdsl.passes import PassPipeline

import coda_ir
from coda_ir import testing
from coda_ir.context import coda_passes, make_context
from coda_ir.dialects import coda
from coda_ir.errors import CompileError
from coda_ir.interpreters.nn import run_nn
from coda_ir.transforms.autodiff import NNAutodiffPass


def _freqs(rd: int, theta: float = 1e4, factor: float = 1.0) -> list[float]:
    # an irregular spectrum (as llama3 / yarn / longrope give): not theta ** (-2i / rd)
    return [float(torch.tensor(theta ** (-2 * i / rd) / (factor + 0.37 * i), dtype=torch.float32)) for i in range(rd // 2)]


def _props(hd: int, heads: int, style: str, rd: int, scaling: float, freqs: list[float] | None) -> str:
    props = f'head_dim = {hd} : i64, rotary_heads = {heads} : i64, theta = 10000.0 : f32, style = "{style}"'
    if rd != hd:
        props += f", rotary_dim = {rd} : i64"
    if scaling != 1.0:
        props += f", scaling = {scaling:.9e} : f32"
    if freqs is not None:
        props += ", inv_freq = array<f32: " + ", ".join(f"{v:.9e}" for v in freqs) + ">"
    return props


def rope_program(m: int, hd: int, heads: int, total: int, style: str, rd: int, scaling: float,
                 freqs: list[float] | None, dt: str) -> str:
    n = hd * total
    T = f"tensor<{m}x{n}x{dt}>"
    return f"""func.func @g(%x: {T}, %p: tensor<{m}xi32>) -> {T} {{
  %y = "nn.rope"(%x, %p) <{{{_props(hd, heads, style, rd, scaling, freqs)}}}> : ({T}, tensor<{m}xi32>) -> {T}
  func.return %y : {T}
}}"""


def linear_rope_program(m: int, k: int, hd: int, heads: int, total: int, style: str, rd: int, scaling: float,
                        freqs: list[float] | None, dt: str) -> str:
    n = hd * total
    X, W, Y = f"tensor<{m}x{k}x{dt}>", f"tensor<{n}x{k}x{dt}>", f"tensor<{m}x{n}x{dt}>"
    return f"""func.func @g(%x: {X}, %w: {W}, %p: tensor<{m}xi32>) -> {Y} {{
  %q = "nn.linear"(%x, %w) : ({X}, {W}) -> {Y}
  %y = "nn.rope"(%q, %p) <{{{_props(hd, heads, style, rd, scaling, freqs)}}}> : ({Y}, tensor<{m}xi32>) -> {Y}
  func.return %y : {Y}
}}"""


def hf_rope64(x: torch.Tensor, pos: torch.Tensor, hd: int, heads: int, style: str, inv_freq: torch.Tensor,
              scaling: float) -> torch.Tensor:
    """Hugging Face's rotation in float64, transcribed from Phi3's (style "half") and GLM4's
    (style "interleaved") `apply_rotary_pos_emb` and rotary embedding: cos/sin of
    cat(freqs, freqs) times attention_scaling, the first rotary_dim columns rotated."""
    m = x.shape[0]
    freqs = pos.double()[:, None] * inv_freq.double()[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos() * scaling, emb.sin() * scaling
    q = x.double()[:, : heads * hd].reshape(m, heads, hd)
    if style == "interleaved":
        cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
        sin = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1)
    rd = cos.shape[-1]
    q_rot, q_pass = q[..., :rd], q[..., rd:]
    if style == "half":
        rotated = torch.cat([-q_rot[..., rd // 2:], q_rot[..., : rd // 2]], dim=-1)
    else:
        rotated = torch.stack([-q_rot[..., 1::2], q_rot[..., 0::2]], dim=-1).flatten(-2)
    out = torch.cat([q_rot * cos[:, None] + rotated * sin[:, None], q_pass], dim=-1)
    return torch.cat([out.reshape(m, heads * hd), x.double()[:, heads * hd:]], dim=1)


@pytest.mark.parametrize("style, hd, rd", [("half", 16, 8), ("interleaved", 16, 8), ("interleaved", 12, 6),
                                            ("half", 12, 12), ("interleaved", 20, 10)])
def test_reference_matches_hugging_face_rotation_in_float64(style, hd, rd):
    m, heads, total, scaling = 7, 2, 3, 1.2027
    freqs = _freqs(rd)
    source = rope_program(m, hd, heads, total, style, rd, scaling, freqs, "f32")
    torch.manual_seed(0)
    x, pos = torch.randn(m, hd * total), torch.randint(0, 5000, (m,), dtype=torch.int32)
    (out,) = run_nn(source, [x, pos], compute_dtype=torch.float64)
    scaling32 = float(torch.tensor(scaling, dtype=torch.float32))
    expected = hf_rope64(x, pos, hd, heads, style, torch.tensor(freqs), scaling32)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    # the columns past rotary_dim and the heads past rotary_heads are x itself
    heads_view = out[:, : heads * hd].reshape(m, heads, hd)
    assert torch.equal(heads_view[..., rd:], x.double()[:, : heads * hd].reshape(m, heads, hd)[..., rd:])
    assert torch.equal(out[:, heads * hd:], x.double()[:, heads * hd:])


def test_gradient_is_the_scaled_transpose():
    # <R_s x, dy> = <x, R_s^T dy>: nn.rope_grad is the adjoint of nn.rope (scaling included)
    m, hd, rd, heads, total, scaling = 5, 12, 6, 2, 3, 0.7931
    source = rope_program(m, hd, heads, total, "interleaved", rd, scaling, _freqs(rd), "f32")
    grad = coda_ir.parse(source)
    NNAutodiffPass().apply(make_context(), grad)
    torch.manual_seed(1)
    x, dy = torch.randn(m, hd * total, dtype=torch.float64), torch.randn(m, hd * total, dtype=torch.float64)
    pos = torch.randint(0, 4000, (m,), dtype=torch.int32)
    (y,) = run_nn(grad, [x, pos], compute_dtype=torch.float64, func_name="g")
    saved = run_nn(grad, [x, pos], compute_dtype=torch.float64, func_name="g_fwd")[1:]
    (dx,) = run_nn(grad, [*saved, dy], compute_dtype=torch.float64, func_name="g_bwd")
    assert math.isclose(float((y * dy).sum()), float((x * dx).sum()), rel_tol=1e-12)


PIPELINES = ["nn-autodiff,nn-to-coda{fuse=false}", "nn-autodiff,nn-to-coda"]


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("style, hd, rd, dt", [("half", 16, 8, "bf16"), ("interleaved", 12, 6, "f32"),
                                                ("interleaved", 16, 12, "bf16")])
def test_standalone_partial_scaled_rope_matches_float64(style, hd, rd, dt, pipeline):
    source = rope_program(13, hd, 3, 4, style, rd, 1.1609, _freqs(rd), dt)
    program = coda_ir.compile(source, pipeline)
    inputs = testing.random_inputs(source, seed=hd + rd)
    testing.check_against_reference(source, inputs, program.g(*inputs))
    testing.check_gradients(program, source, inputs, seed=5)


@pytest.mark.parametrize("rope_table", ["never", "always"])
@pytest.mark.parametrize("style, hd, rd, freqs", [("half", 16, 8, True), ("interleaved", 16, 6, True),
                                                  ("half", 32, 16, False),
                                                  # groups no power-of-two tile holds (coda-interleave)
                                                  ("half", 24, 24, True), ("half", 48, 24, True)])
def test_partial_scaled_rope_rides_in_the_gemm_epilogue(style, hd, rd, freqs, rope_table):
    """The QKV GEMM's epilogue rotates the first rotary_dim columns of each rotary head, scaled;
    one kernel forward (the rotation fused), forward and gradients match float64."""
    source = linear_rope_program(11, 24, hd, 3, 4, style, rd, 1.0823, _freqs(rd) if freqs else None, "bf16")
    fwd = coda_ir.parse(source)
    PassPipeline.parse_spec(coda_passes(), f"nn-to-coda{{rope-table={rope_table}}}").apply(make_context(), fwd)
    kernels = [k for k in coda.kernels(fwd) if not (rope_table == "always" and k.attributes.get("coda.origin")
                                                    and "table" in str(k.attributes["coda.origin"]))]
    assert [k.name for k in kernels] == ["coda.gemm"] and "coda.pair_map" in str(kernels[0])
    program = coda_ir.compile(source, f"nn-autodiff,nn-to-coda{{rope-table={rope_table}}}")
    inputs = testing.random_inputs(source, seed=rd)
    testing.check_against_reference(source, inputs, program.g(*inputs))
    testing.check_gradients(program, source, inputs, seed=7)


@pytest.mark.parametrize("props, message", [
    (", rotary_dim = 7 : i64", "rotary_dim must be even and between 2 and head_dim = 16, got 7"),
    (", rotary_dim = 18 : i64", "rotary_dim must be even and between 2 and head_dim = 16, got 18"),
    (", scaling = 0.0 : f32", "scaling must be a positive finite number"),
    (", rotary_dim = 8 : i64, inv_freq = array<f32: 1.0, 0.5>", r"inv_freq must hold rotary_dim / 2 = 4 frequencies"),
])
def test_verifier_checks_rotary_dim_and_scaling(props, message):
    T = "tensor<4x32xf32>"
    source = f"""func.func @g(%x: {T}, %p: tensor<4xi32>) -> {T} {{
  %y = "nn.rope"(%x, %p) <{{head_dim = 16 : i64, rotary_heads = 2 : i64, theta = 10000.0 : f32, style = "half"{props}}}> : ({T}, tensor<4xi32>) -> {T}
  func.return %y : {T}
}}"""
    with pytest.raises(CompileError, match=message):
        coda_ir.compile(source, "nn-to-coda")
