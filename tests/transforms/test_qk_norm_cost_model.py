"""QK-norm placement chosen by the IO model in `coda-fuse` (option `cost-model`): when
`io_plans.qk_norm_tile_width` prefers tiles narrower than a head, the norm stays a separate
elementwise kernel (with a remark); both plans must compute the reference's numbers."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")

import coda_ir
from coda_ir import testing
from coda_ir.analysis import io_plans

ROWS, HD, N, K = 7, 128, 384, 64  # 3 heads of 128 columns, the first 2 normalised


def source(dtype: str) -> str:
    x, w, q = f"tensor<{ROWS}x{K}x{dtype}>", f"tensor<{N}x{K}x{dtype}>", f"tensor<{ROWS}x{N}x{dtype}>"
    g = f"tensor<{HD}x{dtype}>"
    return f"""func.func @qkv(%x: {x}, %w: {w}, %g: {g}) -> {q} {{
  %q = "nn.linear"(%x, %w) : ({x}, {w}) -> {q}
  %n = "nn.head_rms_norm"(%q, %g) <{{head_dim = {HD} : i64, heads = 2 : i64, eps = 1.0e-06 : f32}}> : ({q}, {g}) -> {q}
  func.return %n : {q}
}}
"""


def run_and_check(text: str, pipeline: str):
    compiled = coda_ir.compile(text, pipeline=pipeline, remarks=True)  # the tests read the remarks
    inputs = testing.random_inputs(text, seed=3)
    outputs = compiled.qkv(*inputs)
    testing.check_against_reference(text, inputs, outputs)
    return compiled


def test_model_choice_flips_with_dtype_at_this_shape():
    # f32 tiles hold half the columns per register budget: 64-wide tiles with per-head
    # partials beat a 128-wide tile; in bf16 the whole-head tile is cheaper.
    f32 = io_plans.qk_norm_tile_width(HD, N, M=ROWS, K=K, heads=N // HD, dtype="f32")
    bf16 = io_plans.qk_norm_tile_width(HD, N, M=ROWS, K=K, heads=N // HD, dtype="bf16")
    assert f32.choice % HD != 0 and bf16.choice % HD == 0


@pytest.mark.parametrize("dtype,unfused", [("f32", True), ("bf16", False)])
def test_qk_norm_placement_matches_reference(dtype: str, unfused: bool, capfd):
    text = source(dtype)
    compiled = run_and_check(text, "nn-to-coda")
    err = capfd.readouterr().err
    if unfused:
        assert compiled.kernel_count("qkv") == 2  # the GEMM, then the standalone norm kernel
        assert "QK-norm not fused" in err and "the IO model found the unfused plan cheaper" in err
    else:
        assert compiled.kernel_count("qkv") == 1  # the norm in the GEMM's epilogue
        assert "QK-norm not fused" not in err
    # without the plan (nn-plan) the norm fuses whenever it is legal, same numbers
    fused = run_and_check(
        text, "coda-defer-norms,convert-nn-to-coda,coda-fuse,coda-interleave,coda-legalize,cse"
    )
    assert fused.kernel_count("qkv") == 1
