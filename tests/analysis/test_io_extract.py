"""The IO model on real IR: nn programs (one kernel per op) and coda programs (after nn-to-coda)."""

from __future__ import annotations

import pytest

from coda_ir.analysis import fusion_plan
from coda_ir.analysis import io_extract as x
from coda_ir.analysis import io_model as m
from coda_ir.analysis import io_fixtures
from coda_ir.tiling import GemmConfig
from coda_ir.context import coda_passes, make_context

from test_io_model import H100_ANCHOR, hand_count_unfused  # tests/analysis is on sys.path (pytest prepend mode)

LLAMA_8B = """
func.func @llama_block(%x0: tensor<8192x4096xbf16>, %y0: tensor<8192x4096xbf16>, %wo: tensor<4096x4096xbf16>,
                       %wn0: tensor<4096xbf16>, %wgu: tensor<28672x4096xbf16>, %wd: tensor<4096x14336xbf16>,
                       %wn1: tensor<4096xbf16>, %wqkv: tensor<6144x4096xbf16>, %pos: tensor<8192xi32>)
    -> (tensor<8192x4096xbf16>, tensor<8192x6144xbf16>) {
  %a = "nn.linear"(%y0, %wo) : (tensor<8192x4096xbf16>, tensor<4096x4096xbf16>) -> tensor<8192x4096xbf16>
  %x1 = "nn.add"(%x0, %a) : (tensor<8192x4096xbf16>, tensor<8192x4096xbf16>) -> tensor<8192x4096xbf16>
  %h1 = "nn.rms_norm"(%x1, %wn0) <{eps = 1.0e-05 : f32}> : (tensor<8192x4096xbf16>, tensor<4096xbf16>) -> tensor<8192x4096xbf16>
  %z = "nn.linear"(%h1, %wgu) : (tensor<8192x4096xbf16>, tensor<28672x4096xbf16>) -> tensor<8192x28672xbf16>
  %g = "nn.swiglu"(%z) : (tensor<8192x28672xbf16>) -> tensor<8192x14336xbf16>
  %d = "nn.linear"(%g, %wd) : (tensor<8192x14336xbf16>, tensor<4096x14336xbf16>) -> tensor<8192x4096xbf16>
  %x2 = "nn.add"(%x1, %d) : (tensor<8192x4096xbf16>, tensor<8192x4096xbf16>) -> tensor<8192x4096xbf16>
  %h2 = "nn.rms_norm"(%x2, %wn1) <{eps = 1.0e-05 : f32}> : (tensor<8192x4096xbf16>, tensor<4096xbf16>) -> tensor<8192x4096xbf16>
  %q = "nn.linear"(%h2, %wqkv) : (tensor<8192x4096xbf16>, tensor<6144x4096xbf16>) -> tensor<8192x6144xbf16>
  %r = "nn.rope"(%q, %pos) <{head_dim = 128 : i64, rotary_heads = 40 : i64, theta = 500000.0 : f32, style = "half"}> : (tensor<8192x6144xbf16>, tensor<8192xi32>) -> tensor<8192x6144xbf16>
  func.return %x2, %r : tensor<8192x4096xbf16>, tensor<8192x6144xbf16>
}
"""

# An F1-like kernel written by hand: out-proj + residual + RMSNorm statistics and aux store,
# then the rstd fold; 128x128 tiles so the partials are [256, 512 / 128 = 4].
CODA_F1 = """
func.func @f1(%y0: tensor<256x512xbf16>, %wo: tensor<512x512xbf16>, %x0: tensor<256x512xbf16>, %wn: tensor<512xbf16>)
    -> (tensor<256x512xbf16>, tensor<256x512xbf16>, tensor<256xf32>) {
  %x1, %s, %h = coda.gemm %y0, %wo transpose_b config #coda.config<bm = 128, bn = 128, bk = 64, warps = 8, stages = 4>
      ins(%x0, %wn : tensor<256x512xbf16>, tensor<512xbf16>) : tensor<256x512xbf16>, tensor<512x512xbf16>
      -> (tensor<256x512xbf16>, !coda.partials<rows, 256, sum>, tensor<256x512xbf16>) attributes {coda.name = "F1"} {
  ^bb0(%acc: !coda.tile<256x512xf32>, %c: tensor<256x512xbf16>, %w: tensor<512xbf16>):
    %t = coda.accumulate %acc, %c : !coda.tile<256x512xf32>, tensor<256x512xbf16>
    %p = coda.reduce sumsq %t dim 1 : !coda.tile<256x512xf32> -> !coda.partials<rows, 256, sum>
    %u = coda.scale %t, %w cols : !coda.tile<256x512xf32>, tensor<512xbf16>
    coda.yield %t, %p, %u : !coda.tile<256x512xf32>, !coda.partials<rows, 256, sum>, !coda.tile<256x512xf32>
  }
  %r = coda.fold %s : !coda.partials<rows, 256, sum> -> tensor<256xf32> {
  ^bb0(%v: f32):
    %k = arith.constant 0.001953125 : f32
    %e = arith.constant 1.0e-06 : f32
    %a = arith.mulf %v, %k : f32
    %b = arith.addf %a, %e : f32
    %c = math.rsqrt %b : f32
    coda.yield %c : f32
  }
  func.return %x1, %h, %r : tensor<256x512xbf16>, tensor<256x512xbf16>, tensor<256xf32>
}
"""


def parse(text: str):
    from xdsl.parser import Parser

    return Parser(make_context(), text).parse_module()


@pytest.fixture(scope="module")
def h100() -> m.GPU:
    return H100_ANCHOR


def test_unfused_llama_from_ir_matches_hand_count(h100):
    (plan,) = x.extract_module(parse(LLAMA_8B), h100)
    assert plan.is_nn and not plan.is_coda
    cost = m.program_cost(plan.kernels, h100)
    hand = hand_count_unfused()
    assert cost.launches == 10
    assert abs(cost.hbm_unique - hand["total"]) <= 0.02 * hand["total"]
    assert abs(cost.activation_bytes - hand["activations"]) <= 0.02 * hand["activations"]
    # Same numbers as the pure model's reference plan.
    ref = m.program_cost(io_fixtures.llama_block_unfused(), h100)
    assert cost.hbm_unique == ref.hbm_unique and cost.weight_bytes == ref.weight_bytes
    assert [k.kernel.ops[0] for k in cost.kernels][:3] == ["nn.linear@a", "nn.add@x1", "nn.rms_norm@h1"]
    assert [t.name for t in plan.outputs] == ["x2", "r"]


def test_compiled_llama_activation_traffic(h100):
    passes = coda_passes()
    from xdsl.passes import PassPipeline

    module = parse(LLAMA_8B)
    unfused = m.program_cost(x.extract_module(module, h100)[0].kernels, h100)
    PassPipeline.parse_spec(passes, "nn-to-coda").apply(make_context(), module)
    (plan,) = x.extract_module(module, h100)
    assert plan.is_coda and not plan.is_nn
    compiled = m.program_cost(plan.kernels, h100)
    assert compiled.activation_bytes <= 0.45 * unfused.activation_bytes
    assert compiled.weight_bytes == pytest.approx(unfused.weight_bytes, rel=1e-3)
    # The reference plan of EPILOGUES.md has the same traffic within 2%.
    ref = m.program_cost(io_fixtures.llama_block_fused(gpu=h100), h100)
    assert compiled.activation_bytes == pytest.approx(ref.activation_bytes, rel=0.02)
    assert compiled.time_s < unfused.time_s


def test_coda_kernel_extraction(h100):
    (plan,) = x.extract_module(parse(CODA_F1), h100)
    gemm, fold = plan.kernels
    assert gemm.name == "F1" and gemm.tile == GemmConfig(128, 128, 64, num_warps=8, num_stages=4)
    assert {t.name: t.role for t in gemm.reads} == {"x0": "activation", "wn": "weight"}
    assert gemm.gemm is not None and gemm.gemm.b.role == "weight"
    shapes = {t.name: (t.shape, t.dtype, t.role) for t in gemm.writes}
    assert shapes["s"] == ((256, 4), "f32", "partials")
    assert shapes["x1"] == ((256, 512), "bf16", "activation")
    # x1 and h stored: the accumulator plus half a tile of staging
    assert gemm.live_tiles == 1.5
    # accumulate (1) + sumsq (2) + scale (1) per element
    assert gemm.epilogue_flops == 4 * 256 * 512
    assert "partial reduction" in gemm.notes
    assert fold.reads[0].shape == (256, 4)
    assert fold.sfu_ops == 256  # one rsqrt per row
    c = m.kernel_cost(gemm, h100)
    assert c.hbm_unique == (256 * 512 * 2) * 4 + 512 * 512 * 2 + 512 * 2 + 256 * 4 * 4
    assert c.fits and c.regs_per_thread == 96 + m.REG_OVERHEAD


def test_fusion_plan_dot(h100):
    plans = x.extract_module(parse(CODA_F1), h100)
    dot = fusion_plan.to_dot(plans, h100, title="test")
    assert dot.startswith("digraph fusion_plan {")
    assert "subgraph cluster_f0_k0" in dot and "subgraph cluster_f0_k1" in dot
    assert 'style="dashed", color="blue"' in dot and "partials" in dot
    assert "return x1 bf16[256x512]" in dot
    assert dot.count("{") == dot.count("}")


def test_launch_group_members_share_one_launch(h100):
    """GPT-2 through nn-to-coda: 8 kernels in 6 launches (each LayerNorm fold carries the next
    GEMM's column-vector kernel); the model charges a launch per launch, not per member."""
    from pathlib import Path

    from xdsl.passes import PassPipeline

    text = (Path(__file__).resolve().parents[2] / "tests" / "programs" / "nn" / "gpt2_block.mlir").read_text()
    module = parse(text)
    PassPipeline.parse_spec(coda_passes(), "nn-to-coda").apply(make_context(), module)
    (plan,) = x.extract_module(module, h100)
    cost = m.program_cost(plan.kernels, h100)
    riders = [c for c in cost.kernels if c.kernel.shares_launch]
    assert len(cost.kernels) == 8 and cost.launches == 6 and len(riders) == 2
    assert all(c.launch_s == 0.0 and c.hbm_bytes > 0 for c in riders)
    # ungrouped, the same kernels pay two more launches and nothing else changes
    module = parse(text)
    PassPipeline.parse_spec(coda_passes(), "nn-to-coda{group-launches=false}").apply(make_context(), module)
    (ungrouped,) = x.extract_module(module, h100)
    alone = m.program_cost(ungrouped.kernels, h100)
    assert alone.launches == 8
    assert alone.time_s - cost.time_s == pytest.approx(2 * h100.launch_s, rel=1e-6)


def test_launch_group_results_are_their_members_tensors(h100):
    """The 8B LLaMA block: the QKV GEMM reads the rstd fold's vector and RoPE's cos/sin tables
    through the launch group's results; the model (and the fusion-plan edges) must see the
    members' tensors, not new ones."""
    from xdsl.passes import PassPipeline

    module = parse(LLAMA_8B)
    PassPipeline.parse_spec(coda_passes(), "nn-to-coda").apply(make_context(), module)
    (plan,) = x.extract_module(module, h100)
    written = {t.name for k in plan.kernels for t in k.writes} | {t.name for t in plan.inputs}
    qkv = plan.kernels[-1]
    assert {"rope_cos", "rope_sin"} <= {t.name for t in qkv.reads}
    assert all(t.name in written for k in plan.kernels for t in k.all_reads())
    dot = fusion_plan.to_dot([plan], h100)
    assert any("rope_cos" in line and "->" in line for line in dot.splitlines())  # the table -> QKV edge


@pytest.mark.parametrize("tokens", [2048, 8192])
def test_whole_rows_kernels_are_priced_with_the_tile_they_launch_with(h100, tokens):
    """The separate cross-entropy pass is a `whole rows` kernel walking one vocabulary-wide row per
    program on the GPU (`tiling.whole_elementwise_config`): the IO model counts M programs and
    prices it at its bytes, the same time per row at 2048 as at 8192 tokens (not the tiled
    kernel's program count, which made the 2048-token pass look 4x slower)."""
    from xdsl.passes import PassPipeline

    v, k = 128256, 2048
    text = f"""
func.func @lm_head(%h: tensor<{tokens}x{k}xbf16>, %w: tensor<{v}x{k}xbf16>, %t: tensor<{tokens}xi32>) -> tensor<f32> {{
  %logits = "nn.linear"(%h, %w) : (tensor<{tokens}x{k}xbf16>, tensor<{v}x{k}xbf16>) -> tensor<{tokens}x{v}xbf16>
  %loss = "nn.cross_entropy"(%logits, %t) <{{ignore_index = -100 : i64, reduction = "mean"}}> : (tensor<{tokens}x{v}xbf16>, tensor<{tokens}xi32>) -> tensor<f32>
  func.return %loss : tensor<f32>
}}
"""
    module = parse(text)
    PassPipeline.parse_spec(coda_passes(), "nn-to-coda{cross-entropy=separate group-launches=false}").apply(make_context(), module)
    (plan,) = x.extract_module(module, h100)
    (ce,) = [kernel for kernel in plan.kernels if kernel.kind == "elementwise"]
    assert ce.programs == tokens
    seconds_per_row = m.kernel_cost(ce, h100).time_s / tokens
    logits_bytes_per_row = v * 2
    assert seconds_per_row == pytest.approx(logits_bytes_per_row / h100.hbm_bw, rel=0.15)


def test_vendor_gemms_are_reported_as_the_library(h100):
    """The LLaMA block's backward: each plain gemm `coda-plan-mainloop` gave `#coda.vendor_gemm`
    carries the note, and `io-report` names cuBLAS in its tile column (no tile, registers or shared
    memory of a generated kernel); the fused forward gemms keep their tiles."""
    import io

    from xdsl.passes import PassPipeline

    from coda_ir.dialects import coda
    from coda_ir.analysis.report_targets import IOReportTarget

    module = parse(LLAMA_8B)
    PassPipeline.parse_spec(coda_passes(), "nn-autodiff,nn-to-coda").apply(make_context(), module)
    plans = {p.name: p for p in x.extract_module(module, h100)}
    vendor = [k for k in plans["llama_block_bwd"].kernels if x.VENDOR_NOTE in k.notes]
    recorded = [g for g in module.walk() if isinstance(g, coda.GemmOp) and coda.recorded_vendor_gemm(g) is not None]
    assert len(vendor) == len(recorded) == 8
    assert not any(x.VENDOR_NOTE in k.notes for k in plans["llama_block_fwd"].kernels)
    out = io.StringIO()
    IOReportTarget().emit(make_context(), module, out)
    rows = [line for line in out.getvalue().splitlines() if line.startswith("// gemm:")]
    tiles = [line.split()[3] for line in rows]  # "//", kernel, kind, tile, ...
    assert tiles.count("cuBLAS") == 8  # the backward's plain gemms
    import re

    assert all(re.fullmatch(r"\d+x\d+x\d+/w\d+s\d+", t) for t in tiles if t != "cuBLAS")  # the fused gemms' tiles
