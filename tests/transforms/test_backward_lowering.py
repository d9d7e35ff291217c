"""Numerics of the backward ops' lowering: each op compiled with the unfused baseline
(`convert-nn-to-coda`) and with the default pipeline (`nn-to-coda`, which also fuses), run on
the Triton CPU interpreter and held to the NN_DIALECT.md bar against the op-by-op reference.

Shapes are odd on purpose (37 rows, widths that are not powers of two) and small (the
interpreter is slow). Row statistics that a gradient reads are computed inside the program
(`nn.rms_norm_rstd`, `nn.layer_norm_stats`) where consistency matters, as a training step's
forward would save them.
"""

from __future__ import annotations

import os
import re

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")

import coda_ir
from coda_ir import reference, testing

PIPELINES = ["convert-nn-to-coda", "nn-to-coda"]


def typed(template: str, dtype: str) -> str:
    """The program with its float element type `T` replaced by `dtype` (f32 statistics stay)."""
    return re.sub(r"xT>", f"x{dtype}>", template)


def run_and_check(source: str, pipeline: str, seed: int = 0):
    compiled = coda_ir.compile(source, pipeline=pipeline)
    name = reference.load_func(source).sym_name.data
    inputs = testing.random_inputs(source, seed=seed)
    outputs = getattr(compiled, name)(*inputs)
    testing.check_against_reference(source, inputs, outputs)
    return compiled, name


PROGRAMS = {
    "gemm": """
func.func @gemm(%a: tensor<37x80xT>, %at: tensor<80x37xT>, %b: tensor<80x48xT>, %bt: tensor<48x80xT>)
    -> (tensor<37x48xT>, tensor<37x48xT>, tensor<37x48xT>, tensor<37x48xT>) {
  %nn = "nn.gemm"(%a, %b) <{transpose_a = false, transpose_b = false}> : (tensor<37x80xT>, tensor<80x48xT>) -> tensor<37x48xT>
  %nt = "nn.gemm"(%a, %bt) <{transpose_a = false, transpose_b = true}> : (tensor<37x80xT>, tensor<48x80xT>) -> tensor<37x48xT>
  %tn = "nn.gemm"(%at, %b) <{transpose_a = true, transpose_b = false}> : (tensor<80x37xT>, tensor<80x48xT>) -> tensor<37x48xT>
  %tt = "nn.gemm"(%at, %bt) <{transpose_a = true, transpose_b = true}> : (tensor<80x37xT>, tensor<48x80xT>) -> tensor<37x48xT>
  func.return %nn, %nt, %tn, %tt : tensor<37x48xT>, tensor<37x48xT>, tensor<37x48xT>, tensor<37x48xT>
}""",
    "column_sum": """
func.func @column_sum(%x: tensor<37x96xT>) -> tensor<96xT> {
  %s = "nn.column_sum"(%x) : (tensor<37x96xT>) -> tensor<96xT>
  func.return %s : tensor<96xT>
}""",
    "activation_grads": """
func.func @activation_grads(%dy: tensor<37x80xT>, %x: tensor<37x80xT>)
    -> (tensor<37x80xT>, tensor<37x80xT>, tensor<37x80xT>, tensor<37x80xT>, tensor<37x80xT>) {
  %s = "nn.silu_grad"(%dy, %x) : (tensor<37x80xT>, tensor<37x80xT>) -> tensor<37x80xT>
  %c = "nn.softcap_grad"(%dy, %x) <{cap = 2.0 : f32}> : (tensor<37x80xT>, tensor<37x80xT>) -> tensor<37x80xT>
  %r = "nn.relu_grad"(%dy, %x) : (tensor<37x80xT>, tensor<37x80xT>) -> tensor<37x80xT>
  %g = "nn.gelu_grad"(%dy, %x) <{approximate = "none"}> : (tensor<37x80xT>, tensor<37x80xT>) -> tensor<37x80xT>
  %gt = "nn.gelu_grad"(%dy, %x) <{approximate = "tanh"}> : (tensor<37x80xT>, tensor<37x80xT>) -> tensor<37x80xT>
  func.return %s, %r, %g, %gt, %c : tensor<37x80xT>, tensor<37x80xT>, tensor<37x80xT>, tensor<37x80xT>, tensor<37x80xT>
}""",
    "gated_grads": """
func.func @gated_grads(%dy: tensor<37x64xT>, %z: tensor<37x128xT>) -> (tensor<37x128xT>, tensor<37x128xT>, tensor<37x128xT>) {
  %s = "nn.swiglu_grad"(%dy, %z) : (tensor<37x64xT>, tensor<37x128xT>) -> tensor<37x128xT>
  %g = "nn.geglu_grad"(%dy, %z) <{approximate = "none"}> : (tensor<37x64xT>, tensor<37x128xT>) -> tensor<37x128xT>
  %gt = "nn.geglu_grad"(%dy, %z) <{approximate = "tanh"}> : (tensor<37x64xT>, tensor<37x128xT>) -> tensor<37x128xT>
  func.return %s, %g, %gt : tensor<37x128xT>, tensor<37x128xT>, tensor<37x128xT>
}""",
    "rope_grad": """
func.func @rope_grad(%dy: tensor<37x96xT>, %pos: tensor<37xi32>) -> (tensor<37x96xT>, tensor<37x96xT>) {
  %h = "nn.rope_grad"(%dy, %pos) <{head_dim = 32 : i64, rotary_heads = 2 : i64, theta = 10000.0 : f32, style = "half"}> : (tensor<37x96xT>, tensor<37xi32>) -> tensor<37x96xT>
  %i = "nn.rope_grad"(%dy, %pos) <{head_dim = 16 : i64, rotary_heads = 6 : i64, theta = 500000.0 : f32, style = "interleaved"}> : (tensor<37x96xT>, tensor<37xi32>) -> tensor<37x96xT>
  func.return %h, %i : tensor<37x96xT>, tensor<37x96xT>
}""",
    "rms_norm_grad": """
func.func @rms_norm_grad(%dy: tensor<37x80xT>, %x: tensor<37x80xT>, %wn: tensor<80xT>) -> (tensor<37xf32>, tensor<37x80xT>, tensor<80xT>) {
  %rstd = "nn.rms_norm_rstd"(%x) <{eps = 1.0e-05 : f32}> : (tensor<37x80xT>) -> tensor<37xf32>
  %dx, %dw = "nn.rms_norm_grad"(%dy, %x, %wn, %rstd) : (tensor<37x80xT>, tensor<37x80xT>, tensor<80xT>, tensor<37xf32>) -> (tensor<37x80xT>, tensor<80xT>)
  func.return %rstd, %dx, %dw : tensor<37xf32>, tensor<37x80xT>, tensor<80xT>
}""",
    "layer_norm_grad": """
func.func @layer_norm_grad(%dy: tensor<37x80xT>, %x: tensor<37x80xT>, %wn: tensor<80xT>)
    -> (tensor<37xf32>, tensor<37xf32>, tensor<37x80xT>, tensor<80xT>, tensor<80xT>) {
  %mean, %rstd = "nn.layer_norm_stats"(%x) <{eps = 1.0e-05 : f32}> : (tensor<37x80xT>) -> (tensor<37xf32>, tensor<37xf32>)
  %dx, %dw, %db = "nn.layer_norm_grad"(%dy, %x, %wn, %mean, %rstd) : (tensor<37x80xT>, tensor<37x80xT>, tensor<80xT>, tensor<37xf32>, tensor<37xf32>) -> (tensor<37x80xT>, tensor<80xT>, tensor<80xT>)
  func.return %mean, %rstd, %dx, %dw, %db : tensor<37xf32>, tensor<37xf32>, tensor<37x80xT>, tensor<80xT>, tensor<80xT>
}""",
    "head_rms_norm_grad": """
func.func @head_rms_norm_grad(%dy: tensor<37x96xT>, %x: tensor<37x96xT>, %wn: tensor<16xT>)
    -> (tensor<37x96xT>, tensor<16xT>, tensor<37x96xT>, tensor<16xT>) {
  %dx, %dw = "nn.head_rms_norm_grad"(%dy, %x, %wn) <{head_dim = 16 : i64, heads = 3 : i64, eps = 1.0e-06 : f32, first_head = 2 : i64}> : (tensor<37x96xT>, tensor<37x96xT>, tensor<16xT>) -> (tensor<37x96xT>, tensor<16xT>)
  %dx0, %dw0 = "nn.head_rms_norm_grad"(%dy, %x, %wn) <{head_dim = 16 : i64, heads = 6 : i64, eps = 1.0e-06 : f32}> : (tensor<37x96xT>, tensor<37x96xT>, tensor<16xT>) -> (tensor<37x96xT>, tensor<16xT>)
  func.return %dx, %dw, %dx0, %dw0 : tensor<37x96xT>, tensor<16xT>, tensor<37x96xT>, tensor<16xT>
}""",
    "head_rms_norm_first_head": """
func.func @head_rms_norm_first_head(%x: tensor<37x96xT>, %wn: tensor<32xT>) -> tensor<37x96xT> {
  %y = "nn.head_rms_norm"(%x, %wn) <{head_dim = 32 : i64, heads = 1 : i64, eps = 1.0e-06 : f32, first_head = 1 : i64}> : (tensor<37x96xT>, tensor<32xT>) -> tensor<37x96xT>
  func.return %y : tensor<37x96xT>
}""",
    # grouped (nn-fuse-siblings of Qwen3's q- then k-norm): three weights over heads 1-2, 3, 4-6
    # of 7, head 0 passing through; the forward in its own kernel and in a GEMM's epilogue
    "head_rms_norm_grad_grouped": """
func.func @head_rms_norm_grad_grouped(%dy: tensor<37x112xT>, %x: tensor<37x112xT>, %wa: tensor<16xT>, %wb: tensor<16xT>, %wc: tensor<16xT>)
    -> (tensor<37x112xT>, tensor<16xT>, tensor<16xT>, tensor<16xT>) {
  %dx, %dwa, %dwb, %dwc = "nn.head_rms_norm_grad"(%dy, %x, %wa, %wb, %wc) <{head_dim = 16 : i64, heads = 6 : i64, eps = 1.0e-06 : f32, first_head = 1 : i64, weight_heads = array<i64: 2, 1, 3>}> : (tensor<37x112xT>, tensor<37x112xT>, tensor<16xT>, tensor<16xT>, tensor<16xT>) -> (tensor<37x112xT>, tensor<16xT>, tensor<16xT>, tensor<16xT>)
  func.return %dx, %dwa, %dwb, %dwc : tensor<37x112xT>, tensor<16xT>, tensor<16xT>, tensor<16xT>
}""",
    "head_rms_norm_grouped": """
func.func @head_rms_norm_grouped(%a: tensor<37x40xT>, %w: tensor<112x40xT>, %wa: tensor<16xT>, %wb: tensor<16xT>) -> (tensor<37x112xT>, tensor<37x112xT>) {
  %x = "nn.linear"(%a, %w) : (tensor<37x40xT>, tensor<112x40xT>) -> tensor<37x112xT>
  %y = "nn.head_rms_norm"(%x, %wa, %wb) <{head_dim = 16 : i64, heads = 5 : i64, eps = 1.0e-06 : f32, weight_heads = array<i64: 3, 2>}> : (tensor<37x112xT>, tensor<16xT>, tensor<16xT>) -> tensor<37x112xT>
  func.return %y, %x : tensor<37x112xT>, tensor<37x112xT>
}""",
    "cross_entropy_grad": """
func.func @cross_entropy_grad(%logits: tensor<37x80xT>, %targets: tensor<37xi32>, %dloss: tensor<f32>) -> (tensor<37x80xT>, tensor<37x80xT>) {
  %m = "nn.cross_entropy_grad"(%logits, %targets, %dloss) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<37x80xT>, tensor<37xi32>, tensor<f32>) -> tensor<37x80xT>
  %s = "nn.cross_entropy_grad"(%logits, %targets, %dloss) <{ignore_index = -100 : i64, reduction = "sum"}> : (tensor<37x80xT>, tensor<37xi32>, tensor<f32>) -> tensor<37x80xT>
  func.return %m, %s : tensor<37x80xT>, tensor<37x80xT>
}""",
}

# Gated pairs sit F columns apart: a standalone kernel's column tile must hold whole pair
# groups, and Triton tiles are powers of two, so F is one here (64; the rows stay odd).
DTYPES = {name: ["f32", "bf16"] for name in PROGRAMS}
DTYPES["activation_grads"] += ["f16"]
DTYPES["rms_norm_grad"] += ["f16"]
DTYPES["cross_entropy_grad"] += ["f16"]

CASES = [(name, dtype) for name in PROGRAMS for dtype in DTYPES[name]]


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("program,dtype", CASES)
def test_backward_op_matches_reference(program: str, dtype: str, pipeline: str):
    run_and_check(typed(PROGRAMS[program], dtype), pipeline)


def test_rms_norm_grad_with_given_rstd():
    """The gradient is a formula of its operands: any positive rstd (not only x's) gives the
    reference's answer."""
    source = typed("""
func.func @given_rstd(%dy: tensor<37x48xT>, %x: tensor<37x48xT>, %wn: tensor<48xT>, %rstd: tensor<37xf32>) -> (tensor<37x48xT>, tensor<48xT>) {
  %dx, %dw = "nn.rms_norm_grad"(%dy, %x, %wn, %rstd) : (tensor<37x48xT>, tensor<37x48xT>, tensor<48xT>, tensor<37xf32>) -> (tensor<37x48xT>, tensor<48xT>)
  func.return %dx, %dw : tensor<37x48xT>, tensor<48xT>
}""", "bf16")
    run_and_check(source, "convert-nn-to-coda")


SWIGLU_BACKWARD = """
func.func @swiglu_backward(%dd: tensor<37x64xT>, %wd: tensor<64x64xT>, %z: tensor<37x128xT>) -> tensor<37x128xT> {
  %dy = "nn.gemm"(%dd, %wd) <{transpose_a = false, transpose_b = false}> : (tensor<37x64xT>, tensor<64x64xT>) -> tensor<37x64xT>
  %dz = "nn.swiglu_grad"(%dy, %z) : (tensor<37x64xT>, tensor<37x128xT>) -> tensor<37x128xT>
  func.return %dz : tensor<37x128xT>
}"""


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_swiglu_grad_fuses_into_the_gemm_of_dy(dtype: str):
    """As in a backward: dy comes out of the down projection's transposed GEMM and the SwiGLU
    backward runs in its epilogue (one kernel; dy never goes to memory) when nn-plan puts it
    there (`gated-grad=epilogue`); kept separate, it is the plain GEMM and one pass."""
    compiled, name = run_and_check(typed(SWIGLU_BACKWARD, dtype), "nn-to-coda{gated-grad=epilogue}")
    assert compiled.kernel_count(name) == 1
    compiled, name = run_and_check(typed(SWIGLU_BACKWARD, dtype), "nn-to-coda{gated-grad=separate}")
    assert compiled.kernel_count(name) == 2


LINEAR_ROPE_GRAD = """
func.func @linear_rope_grad(%x: tensor<37x64xT>, %w: tensor<96x64xT>, %pos: tensor<37xi32>) -> tensor<37x96xT> {
  %q = "nn.linear"(%x, %w) : (tensor<37x64xT>, tensor<96x64xT>) -> tensor<37x96xT>
  %r = "nn.rope_grad"(%q, %pos) <{head_dim = 32 : i64, rotary_heads = 2 : i64, theta = 10000.0 : f32, style = "half"}> : (tensor<37x96xT>, tensor<37xi32>) -> tensor<37x96xT>
  func.return %r : tensor<37x96xT>
}"""


@pytest.mark.parametrize("rope_table", ["always", "never"])
def test_rope_grad_in_a_gemm_epilogue(rope_table: str):
    """nn-plan may give a gradient's rotation (its angle map negates the angle) cos/sin tables
    too: they then hold cos(-a), sin(-a), and the rotation reads them in the GEMM's epilogue."""
    source = typed(LINEAR_ROPE_GRAD, "bf16")
    run_and_check(source, f"nn-to-coda{{rope-table={rope_table}}}")
    program = coda_ir.compile(source, f"nn-to-coda{{rope-table={rope_table}}}")
    assert ("cols_period" in program.source) == (rope_table == "always")
    assert program.kernel_count(program.functions[0]) == (2 if rope_table == "always" else 1)


NORM_FORWARD_SAVING_STATS = """
func.func @saves_stats(%a: tensor<37x64xT>, %wa: tensor<80x64xT>, %wn: tensor<80xT>, %wq: tensor<48x80xT>, %g: tensor<80xT>, %b: tensor<80xT>)
    -> (tensor<37x48xT>, tensor<37xf32>, tensor<37x48xT>, tensor<37xf32>, tensor<37xf32>) {
  %x = "nn.linear"(%a, %wa) : (tensor<37x64xT>, tensor<80x64xT>) -> tensor<37x80xT>
  %h = "nn.rms_norm"(%x, %wn) <{eps = 1.0e-05 : f32}> : (tensor<37x80xT>, tensor<80xT>) -> tensor<37x80xT>
  %y = "nn.linear"(%h, %wq) : (tensor<37x80xT>, tensor<48x80xT>) -> tensor<37x48xT>
  %rstd = "nn.rms_norm_rstd"(%x) <{eps = 1.0e-05 : f32}> : (tensor<37x80xT>) -> tensor<37xf32>
  %l = "nn.layer_norm"(%x, %g, %b) <{eps = 1.0e-05 : f32}> : (tensor<37x80xT>, tensor<80xT>, tensor<80xT>) -> tensor<37x80xT>
  %yl = "nn.linear"(%l, %wq) : (tensor<37x80xT>, tensor<48x80xT>) -> tensor<37x48xT>
  %mean, %lrstd = "nn.layer_norm_stats"(%x) <{eps = 1.0e-05 : f32}> : (tensor<37x80xT>) -> (tensor<37xf32>, tensor<37xf32>)
  func.return %y, %rstd, %yl, %mean, %lrstd : tensor<37x48xT>, tensor<37xf32>, tensor<37x48xT>, tensor<37xf32>, tensor<37xf32>
}"""


def test_deferred_norm_statistics_are_reused():
    """A deferred norm's statistics fold also answers nn.rms_norm_rstd / nn.layer_norm_stats of
    the same x and eps: no second pass over x (no extra statistics kernels)."""
    source = typed(NORM_FORWARD_SAVING_STATS, "bf16")
    text = str(coda_ir.compile(source, pipeline="nn-to-coda{cost-model=false}").ir)
    assert "nn.rms_norm_rstd.stats" not in text and "nn.layer_norm_stats.stats" not in text
    run_and_check(source, "nn-to-coda{cost-model=false}")


def test_tanh_geglu_backward_computes_one_tanh_per_pair():
    """GeGLU's backward needs gelu(g) (for du) and gelu'(g) (for dg), both of
    tanh(sqrt(2/pi) (g + 0.044715 g^3)): written with the same association (PyTorch's (g g) g),
    CSE leaves one tanh in the kernel, not two (fewer instructions; on the H200 the pass's time
    did not move with it: bench/RESULTS.md session 21)."""
    source = typed("""
func.func @geglu_tanh_grad(%dy: tensor<37x64xT>, %z: tensor<37x128xT>) -> tensor<37x128xT> {
  %g = "nn.geglu_grad"(%dy, %z) <{approximate = "tanh"}> : (tensor<37x64xT>, tensor<37x128xT>) -> tensor<37x128xT>
  func.return %g : tensor<37x128xT>
}""", "bf16")
    compiled = coda_ir.compile(source, "nn-to-coda")
    calls = [line for line in compiled.source.splitlines() if "_coda_tanh(" in line and "def _coda_tanh" not in line]
    assert len(calls) == 1, calls
    run_and_check(source, "nn-to-coda")
