"""Whole-model programs: nn.embedding, nn.attention, nn.concat/nn.slice and nn-fuse-siblings.

`programs/tiny_model.mlir` is a whole LLaMA-style model as Hugging Face computes it (embedding,
a decoder layer with GQA attention, separate q/k/v and gate/up projections, LM head and loss)
at odd sizes; every check is against the float64 reference.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import coda_ir
from coda_ir import testing
from coda_ir.reference import run_reference

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from test_autodiff import exact_gap  # noqa: E402

TINY = (HERE / "programs" / "tiny_model.mlir").read_text()


def test_derivation_is_exact():
    assert exact_gap(TINY) < 1e-12


def test_sibling_packing_is_exact():
    packed = coda_ir.lower(coda_ir.parse(TINY), "nn-fuse-siblings")
    text = str(packed)
    assert "nn.swiglu" in text and "nn.silu" not in text and text.count("nn.linear") == 5
    inputs = testing.random_inputs(TINY, seed=3)
    (a,) = run_reference(TINY, inputs, torch.float64)
    (b,) = run_reference(packed, inputs, torch.float64)
    assert abs(a.item() - b.item()) <= 1e-12 * abs(a.item())


@pytest.mark.parametrize("seed", [0, 1])
def test_compiled_loss_and_gradients(seed):
    program = coda_ir.compile(TINY, "nn-fuse-siblings,nn-autodiff,nn-to-coda")
    testing.check_gradients(program, TINY, testing.random_inputs(TINY, seed=seed), seed=seed)


def test_packed_weights_are_rebuilt_not_saved():
    # a concatenation of arguments (the packed sibling weights) is rebuilt in the backward from
    # the saved arguments: no weight-sized extra output (and no copy at all when the weights
    # are adjacent in memory, library.concat)
    from xdsl.dialects import func

    from coda_ir.dialects import nn

    module = coda_ir.lower(coda_ir.parse(TINY), "nn-fuse-siblings,nn-autodiff")
    fns = {f.sym_name.data: f for f in module.walk() if isinstance(f, func.FuncOp)}
    ret = fns["tiny_model_fwd"].body.blocks[0].last_op
    assert not any(isinstance(v.owner, nn.ConcatOp) for v in ret.operands)
    assert any(isinstance(op, nn.ConcatOp) for op in fns["tiny_model_bwd"].walk())
    store = coda_ir.lower(coda_ir.parse(TINY), "nn-fuse-siblings,nn-autodiff{cost-model=false}")
    fns = {f.sym_name.data: f for f in store.walk() if isinstance(f, func.FuncOp)}
    assert any(isinstance(v.owner, nn.ConcatOp) for v in fns["tiny_model_fwd"].body.blocks[0].last_op.operands)


def test_launch_counts():
    # forward: embedding, the first norm's ONE whole-rows statistics kernel (its input comes
    # from the embedding, not a GEMM: the row scale is deferred into the QKV GEMM all the same,
    # and the saved rstd's fold shares a launch with the next norm's), weight packings (2),
    # 4 GEMMs with epilogues, RoPE, attention, LM head with loss partials, folds; pinned so
    # that a lost fusion shows. The
    # backward reads the forward's saved lse of the logits: no pass folds the logits again; it
    # rebuilds the two packed weights (coda.concat, counted as launches: copies unless the
    # weights are adjacent in memory, as from_hf makes them, when they are views).
    program = coda_ir.compile(TINY, "nn-fuse-siblings,nn-autodiff,nn-to-coda")
    assert program.kernel_count("tiny_model_fwd") == 13  # 15 with statistics + fold + apply
    # 26 + 1: nn-plan keeps the SwiGLU backward out of the down-projection dgrad's epilogue
    # (io_plans.gated_grad_plan prefers the plain GEMM + one pass, at this size too), + 3: the
    # three RMSNorm backwards whose dy a dgrad GEMM produces run as passes after plain GEMMs
    # (io_plans.norm_grad_plan; the rebuilt normalized activations join them, which were in
    # shared launches anyway)
    assert program.kernel_count("tiny_model_bwd") == 30
    in_epilogue = coda_ir.compile(TINY, "nn-fuse-siblings,nn-autodiff,nn-to-coda{norm-grad=epilogue}")
    assert in_epilogue.kernel_count("tiny_model_bwd") == 27
    origins = [op.attributes["coda.origin"].data for op in program.ir.walk() if "coda.origin" in op.attributes]
    assert "nn.cross_entropy_fwd.loss" in origins and "nn.cross_entropy_grad.count" in origins
    assert "nn.cross_entropy_grad.lse" not in origins


def test_out_of_range_id_is_an_error():
    program = coda_ir.compile(TINY)
    inputs = testing.random_inputs(TINY, seed=0)
    inputs[0][3] = 37  # vocabulary is 37
    with pytest.raises(coda_ir.ArgumentError, match="ids"):
        program.tiny_model(*inputs)


def test_embedding_gradient_is_deterministic_with_repeated_ids():
    src = """
func.func @f(%ids: tensor<64xi32>, %w: tensor<5x24xbf16>) -> tensor<64x24xbf16> {
  %x = nn.embedding %ids, %w : tensor<64xi32>, tensor<5x24xbf16> -> tensor<64x24xbf16>
  func.return %x : tensor<64x24xbf16>
}"""
    program = coda_ir.compile(src, "nn-autodiff,nn-to-coda")
    ids = torch.randint(0, 5, (64,), dtype=torch.int32)
    w = torch.randn(5, 24).bfloat16()
    dy = torch.randn(64, 24).bfloat16()
    _, saved_ids = program.f_fwd(ids, w)
    first = program.f_bwd(saved_ids, dy)
    assert all(torch.equal(first, program.f_bwd(saved_ids, dy)) for _ in range(3))
    exact = torch.zeros(5, 24, dtype=torch.float64).index_add_(0, ids.long(), dy.double())
    torch.testing.assert_close(first.double(), exact, rtol=2 ** -7, atol=1e-2)


@pytest.mark.parametrize(
    "props, match",
    [
        ("heads = 3 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true", "divide"),
        ("heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 3 : i64, causal = true", "seq_len"),
        ("heads = 4 : i64, kv_heads = 2 : i64, head_dim = 8 : i64, seq_len = 5 : i64, causal = true", "columns"),
        ("heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = 1 : i64", "causal"),
        ("heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64", "causal"),
    ],
)
def test_attention_verifier(props, match):
    src = f"""
func.func @f(%qkv: tensor<10x128xf32>) -> tensor<10x64xf32> {{
  %y = "nn.attention"(%qkv) <{{{props}}}> : (tensor<10x128xf32>) -> tensor<10x64xf32>
  func.return %y : tensor<10x64xf32>
}}"""
    with pytest.raises(coda_ir.CodaError, match=match):
        coda_ir.parse(src)


def test_concat_and_slice_verifiers():
    bad_concat = """
func.func @f(%a: tensor<4x3xf32>, %b: tensor<5x3xf32>) -> tensor<4x6xf32> {
  %c = nn.concat %a, %b {axis = 1 : i64} : tensor<4x3xf32>, tensor<5x3xf32> -> tensor<4x6xf32>
  func.return %c : tensor<4x6xf32>
}"""
    with pytest.raises(coda_ir.CodaError, match="input #1"):
        coda_ir.parse(bad_concat)
    bad_slice = """
func.func @f(%a: tensor<4x3xf32>) -> tensor<4x2xf32> {
  %c = nn.slice %a {axis = 1 : i64, start = 2 : i64} : tensor<4x3xf32> -> tensor<4x2xf32>
  func.return %c : tensor<4x2xf32>
}"""
    with pytest.raises(coda_ir.CodaError, match="outside"):
        coda_ir.parse(bad_slice)
