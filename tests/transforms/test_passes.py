"""The nn-to-coda passes one by one (no Triton needed): structure, proofs, remarks, options."""

from __future__ import annotations

from pathlib import Path

import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import PassPipeline

import coda_ir
from coda_ir.analysis import linear_layout as ll
from coda_ir.dialects import coda, nn
from coda_ir.context import coda_passes, make_context
from coda_ir.diagnostics import CompilerError, LocatingParser, verify_module
from coda_ir import remarks
from coda_ir.transforms import legality

PROGRAMS = Path(__file__).parent / "programs"
EXAMPLES = Path(__file__).parents[2] / "examples"


def parse(text: str) -> ModuleOp:
    return LocatingParser(make_context(), text, "<test>").parse_module()


def run(text: str, pipeline: str = "nn-to-coda") -> ModuleOp:
    module = parse(text)
    PassPipeline.parse_spec(coda_passes(), pipeline).apply(make_context(), module)
    assert verify_module(module) == []
    return module


def kinds(module: ModuleOp) -> list[str]:
    return [k.name for k in coda.kernels(module)]


def funcs(module: ModuleOp) -> list[func.FuncOp]:
    return [op for op in module.walk() if isinstance(op, func.FuncOp)]


def test_pipeline_registered():
    passes = coda_passes()
    for name in ("nn-to-coda", "convert-nn-to-coda", "coda-defer-norms", "coda-fuse", "coda-interleave", "coda-legalize"):
        assert name in passes


def test_baseline_lowers_every_op():
    module = run((PROGRAMS / "all_ops.mlir").read_text(), "convert-nn-to-coda")
    assert not [op for op in module.walk() if op.dialect_name() == "nn"]
    used = {op.name for op in parse((PROGRAMS / "all_ops.mlir").read_text()).walk() if op.dialect_name() == "nn"}
    backward = {op.name for op in nn.BACKWARD_OPS}  # lowered op by op in test_backward_lowering.py
    # the whole-model ops (embedding, attention, concat, slice) are library steps, lowered and
    # checked in test_whole_model.py on a whole model
    whole = {op.name for op in nn.WHOLE_MODEL_OPS}
    # the vocabulary-shard ops are not differentiated (all_ops.mlir also runs nn-autodiff):
    # lowered in tests/filecheck/transforms/vocab_shard_lowering.mlir, run in test_vocab_shard.py
    shard = {op.name for op in nn.VOCAB_SHARD_OPS}
    assert used == {op.name for op in nn.NN.operations} - backward - whole - shard  # every other forward nn op


@pytest.mark.parametrize("program", ["llama_block", "qwen3_block"])
def test_llama_like_blocks_have_four_gemms_and_two_row_kernels(program: str):
    module = run((PROGRAMS / f"{program}.mlir").read_text())
    assert kinds(module) == ["coda.gemm", "coda.fold", "coda.gemm", "coda.gemm", "coda.fold", "coda.gemm"]


def test_llama_example_at_real_shape():
    module = run((EXAMPLES / "llama_block.mlir").read_text())
    gemms = [k for k in coda.kernels(module) if isinstance(k, coda.GemmOp)]
    assert kinds(module).count("coda.gemm") == 4 and kinds(module).count("coda.fold") == 2
    # the IO model moves RoPE's sin/cos into one [M, hd/2] table kernel at this shape;
    # coda-group-launches runs it in an rstd fold's launch, so the block stays at 6 launches
    assert rope_tables(module) == 1 and kinds(module).count("coda.elementwise") == 1
    assert coda_ir.compile(module, pipeline=None).kernel_count("llama_block") == 6
    gate_up = gemms[1]
    _, n, _ = gate_up.problem_shape()
    assert gate_up.interleave is not None and gate_up.interleave.value.data == n // 2
    qkv = gemms[3]
    constraints = qkv.attributes[legality.CONSTRAINTS]
    rope = next(op for op in (EXAMPLES / "llama_block.mlir").read_text().splitlines() if "nn.rope" in op)
    head_dim = int(rope.split("head_dim = ")[1].split(" ")[0])
    assert constraints.bn_multiple_of.data == head_dim


def test_qwen3_example_qk_norm_and_rope_in_qkv_epilogue():
    module = run((EXAMPLES / "qwen3_block.mlir").read_text())
    qkv = [k for k in coda.kernels(module) if isinstance(k, coda.GemmOp)][-1]
    names = {op.name for op in qkv.epilogue.walk()}
    assert {"coda.segment_reduce", "coda.pair_map"} <= names
    # the only other kernel is RoPE's cos/sin table, sharing an rstd fold's launch (6 launches)
    assert rope_tables(module) == 1 and kinds(module).count("coda.elementwise") == 1
    assert "coda.load" in names and not any(op.name == "math.cos" for op in qkv.epilogue.walk())


def rope_tables(module) -> int:
    return sum(
        1 for k in coda.kernels(module)
        if isinstance(k, coda.ElementwiseOp) and k.attributes["coda.origin"].data == "nn.rope.table"
    )


def test_gpt2_example_defers_layer_norm():
    module = run((EXAMPLES / "gpt2_block.mlir").read_text())
    ks = list(coda.kernels(module))
    assert kinds(module).count("coda.gemm") == 4
    # every elementwise kernel is a per-weight GEMV (c = g @ W.T, e = b @ W.T), none reads activations
    for k in ks:
        if isinstance(k, coda.ElementwiseOp):
            assert k.attributes["coda.origin"].data == "nn.layer_norm.colvec"
    epilogue_ops = {op.name for k in ks if isinstance(k, coda.GemmOp) for op in k.epilogue.walk()}
    assert {"coda.shift", "coda.scale", "coda.map", "coda.accumulate", "coda.reduce"} <= epilogue_ops


def test_lm_head_writes_no_logits():
    module = run((PROGRAMS / "lm_head_ce.mlir").read_text())
    gemm, fold = list(coda.kernels(module))
    assert isinstance(gemm, coda.GemmOp) and isinstance(fold, coda.FoldOp)
    assert all(isinstance(r.type, coda.PartialsType) for r in gemm.results)


def test_unfusable_norm_remark_and_remarks_as_errors(capsys):
    text = (PROGRAMS / "unfused.mlir").read_text()
    run(text)
    assert "remark: 'nn.rms_norm' op row scale not deferred" in capsys.readouterr().err
    with pytest.raises(CompilerError, match="row scale not deferred"):
        run(text, "nn-to-coda{remarks-as-errors=true}")
    with remarks.remarks_as_errors():
        with pytest.raises(CompilerError):
            run(text)


QKNORM96 = """
func.func @qknorm96(%x: tensor<8x64xf32>, %w: tensor<576x64xf32>, %g: tensor<96xf32>) -> tensor<8x576xf32> {
  %q = "nn.linear"(%x, %w) : (tensor<8x64xf32>, tensor<576x64xf32>) -> tensor<8x576xf32>
  %n = "nn.head_rms_norm"(%q, %g) <{head_dim = 96 : i64, heads = 4 : i64, eps = 1.0e-06 : f32}> : (tensor<8x576xf32>, tensor<96xf32>) -> tensor<8x576xf32>
  func.return %n : tensor<8x576xf32>
}
"""


def test_segment_split_across_tiles_stays_unfused(capsys):
    module = run(QKNORM96)
    assert kinds(module) == ["coda.gemm", "coda.elementwise"]
    assert "not fused into the epilogue of 'nn.linear'" in capsys.readouterr().err


def test_rope_with_non_power_of_two_head_dim_is_interleaved():
    module = run((PROGRAMS / "rope96.mlir").read_text())
    (gemm,) = coda.kernels(module)
    assert gemm.interleave.value.data == 48


def test_pipeline_is_idempotent():
    module = run((PROGRAMS / "llama_block.mlir").read_text())
    before = str(module)
    PassPipeline.parse_spec(coda_passes(), "nn-to-coda").apply(make_context(), module)
    assert str(module) == before


# ----------------------------------------------------------------------------- proofs


def _gemm_with_pair_map(n: int, stride: int, interleave: int | None = None) -> coda.GemmOp:
    text = f"""
func.func @f(%x: tensor<8x64xf32>, %w: tensor<{n}x64xf32>) -> tensor<8x{n // 2}xf32> {{
  %g = coda.gemm %x, %w transpose_b {f"interleave {interleave}" if interleave else ""} : tensor<8x64xf32>, tensor<{n}x64xf32> -> tensor<8x{n // 2}xf32> {{
  ^bb0(%acc: !coda.tile<8x{n}xf32>):
    %o = coda.pair_map stride {stride} %acc : !coda.tile<8x{n}xf32> -> !coda.tile<8x{n // 2}xf32> {{
    ^bb0(%a: f32, %b: f32):
      %m = arith.mulf %a, %b : f32
      coda.yield %m : f32
    }}
    coda.yield %o : !coda.tile<8x{n // 2}xf32>
  }}
  func.return %g : tensor<8x{n // 2}xf32>
}}
"""
    return next(k for k in coda.kernels(parse(text)))


@pytest.mark.parametrize("stride,expected_bn", [(1, 16), (8, 16), (32, 64), (64, 128), (128, 256)])
def test_pair_map_proof_picks_smallest_bn(stride: int, expected_bn: int):
    proof = legality.prove_kernel(_gemm_with_pair_map(1024, stride))
    assert proof.ok
    if stride > 1:
        assert proof.bn_multiple_of == expected_bn
        # cross-check the level with brute-force enumeration of the tile layout
        layout = legality.tile_layout(proof.kernel, 128, expected_bn, 8)
        assert proof.proofs[0].level == ll.brute_pair_level_for_stride(layout, "dim1", stride)


def test_pair_map_wider_than_any_tile_is_refused_unless_interleaved():
    assert not legality.prove_kernel(_gemm_with_pair_map(1024, 512)).ok
    assert legality.prove_kernel(_gemm_with_pair_map(1024, 1, interleave=512)).ok


def test_constraint_attribute_format():
    proof = legality.prove_kernel(_gemm_with_pair_map(512, 64))
    attr = proof.constraint_attr()
    assert attr is not None
    assert attr.bn_multiple_of.data == 128
    assert "coda.pair_map stride 64" in attr.reasons.data[0].data


def test_remarks_on_fused_kernels_name_the_op_at_their_line(capsys):
    """A fused kernel's coda.origin joins its ops with "+" ("nn.linear+nn.add+..."): a remark
    about it names the first, the nn op written at the kernel's location, not a cut of the chain."""
    run((EXAMPLES / "llama_block.mlir").read_text())
    err = capsys.readouterr().err
    assert "'nn.linear' op (lowered to 'coda.gemm') runs the Gluon warp-specialized mainloop" in err
    assert "+nn' op" not in err
