"""Widths that no power-of-two column tile holds (issue 12, item 4): standalone gated
activations with F = 40, 96 or 200 and RoPE with head_dim 12, 48 or 80 compile in every
pipeline (the unfused fallback included) and match float64, forward and gradients. Their
pair_maps read each pair's two elements straight from memory (`gathers_pairs`). A head
RMSNorm with such a head_dim compiles forward (segments gathered from memory,
`gathers_segments`) and backward (its segment sums are of computed values: exchanged by
`tl.gather` inside a tile that covers the whole row)."""

from __future__ import annotations

import pytest

import coda_ir
from coda_ir import testing

PIPELINES = ["nn-autodiff,nn-to-coda{fuse=false}", "nn-autodiff,nn-to-coda", "nn-autodiff,convert-nn-to-coda"]


def gated(op: str, f: int, m: int, dt: str) -> str:
    extra = ' {approximate = "tanh"}' if op == "nn.geglu" else ""
    return f"""func.func @g(%z: tensor<{m}x{2 * f}x{dt}>) -> tensor<{m}x{f}x{dt}> {{
  %y = {op} %z{extra} : tensor<{m}x{2 * f}x{dt}> -> tensor<{m}x{f}x{dt}>
  func.return %y : tensor<{m}x{f}x{dt}>
}}"""


def rope(hd: int, heads: int, m: int, dt: str, style: str) -> str:
    n = hd * heads
    return f"""func.func @g(%x: tensor<{m}x{n}x{dt}>, %p: tensor<{m}xi32>) -> tensor<{m}x{n}x{dt}> {{
  %y = nn.rope %x, %p {{head_dim = {hd} : i64, rotary_heads = {heads} : i64, theta = 10000.0 : f32, style = "{style}"}} : tensor<{m}x{n}x{dt}>, tensor<{m}xi32> -> tensor<{m}x{n}x{dt}>
  func.return %y : tensor<{m}x{n}x{dt}>
}}"""


CASES = [
    *(pytest.param(gated(op, f, m, dt), pipe, id=f"{op[3:]}-F{f}-{dt}-{pipe.split(',')[1]}")
      for op in ("nn.swiglu", "nn.geglu") for f, m, dt in ((96, 37, "bf16"), (40, 5, "f32")) for pipe in PIPELINES),
    pytest.param(gated("nn.swiglu", 200, 19, "bf16"), PIPELINES[0], id="swiglu-F200-bf16-unfused"),
    *(pytest.param(rope(hd, heads, m, dt, style), pipe, id=f"rope-{style}-hd{hd}-{dt}-{pipe.split(',')[1]}")
      for hd, heads, m, dt, style in ((48, 2, 37, "bf16", "half"), (12, 2, 9, "f32", "half"), (80, 3, 11, "f32", "half"))
      for pipe in PIPELINES[:2]),
]


@pytest.mark.parametrize("source, pipeline", CASES)
def test_odd_width_compiles_and_matches_float64(source, pipeline):
    program = coda_ir.compile(source, pipeline)
    inputs = testing.random_inputs(source, seed=len(source))
    testing.check_against_reference(source, inputs, program.g(*inputs))
    testing.check_gradients(program, source, inputs, seed=3)


def head_norm(hd: int, heads: int, normed: int, first: int, m: int, dt: str) -> str:
    n = hd * heads
    return f"""func.func @g(%x: tensor<{m}x{n}x{dt}>, %w: tensor<{hd}x{dt}>) -> tensor<{m}x{n}x{dt}> {{
  %y = nn.head_rms_norm %x, %w {{head_dim = {hd} : i64, heads = {normed} : i64, eps = 1.0e-06 : f32, first_head = {first} : i64}} : tensor<{m}x{n}x{dt}>, tensor<{hd}x{dt}> -> tensor<{m}x{n}x{dt}>
  func.return %y : tensor<{m}x{n}x{dt}>
}}"""


@pytest.mark.parametrize("pipeline", ["nn-to-coda{fuse=false}", "convert-nn-to-coda", "nn-to-coda"])
@pytest.mark.parametrize("hd, heads, normed, first, m, dt", [(48, 2, 2, 0, 37, "bf16"), (80, 3, 2, 1, 11, "f32"), (12, 4, 3, 0, 9, "bf16")])
def test_odd_head_dim_norm_forward_matches_float64(hd, heads, normed, first, m, dt, pipeline):
    source = head_norm(hd, heads, normed, first, m, dt)
    program = coda_ir.compile(source, pipeline)
    inputs = testing.random_inputs(source, seed=hd)
    testing.check_against_reference(source, inputs, program.g(*inputs))


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("hd, heads, normed, first, m, dt", [(48, 2, 2, 0, 37, "bf16"), (80, 3, 2, 1, 11, "f32"), (12, 4, 3, 0, 9, "bf16")])
def test_odd_head_dim_norm_backward_matches_float64(hd, heads, normed, first, m, dt, pipeline):
    """The backward's segment sums are of computed values (not loads): they are exchanged
    inside a tile that covers the whole row (`emit_regathered_segment_reduce`)."""
    source = head_norm(hd, heads, normed, first, m, dt)
    program = coda_ir.compile(source, pipeline)
    testing.check_gradients(program, source, testing.random_inputs(source, seed=hd + 1), seed=hd)


def test_gathered_pairs_in_the_triton_source():
    program = coda_ir.compile(gated("nn.swiglu", 96, 37, "bf16"), "nn-to-coda{fuse=false}")
    assert "pairs gathered from memory" in program.source
    # a power-of-two F keeps the grouped tile (one load, pairs split in registers)
    program = coda_ir.compile(gated("nn.swiglu", 64, 37, "bf16"), "nn-to-coda{fuse=false}")
    assert "pairs gathered from memory" not in program.source
