"""The nn and coda dialects built from Python: typed constructors, builder idioms, verifiers.

The FileCheck tests under tests/filecheck/dialects pin the textual forms; these tests pin what
the Python API promises (result types inferred by the typed `__init__`s, properties with the
contract's attribute types) and, with hypothesis, that the shape verifiers accept exactly the
consistent programs.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.builder import Builder, ImplicitBuilder
from xdsl.dialects import arith, func, math
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    TensorType,
    bf16,
    f16,
    f32,
    i32,
    i64,
)
from xdsl.ir import Block, Region
from xdsl.printer import Printer
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import VerifyException

from coda_ir.dialects import coda, library_steps, nn
from coda_ir.dialects.coda import Axis, Combine, PartialsType, ReduceKind, TileConfigAttr, TileType
from coda_ir.context import make_context
from coda_ir.diagnostics import LocatingParser, verify_module


def T(*shape: int, elt=bf16) -> TensorType:
    return TensorType(elt, list(shape))


def parse(text: str) -> ModuleOp:
    return LocatingParser(make_context(), text, "test.mlir").parse_module()


def text_of(module: ModuleOp, generic: bool = False) -> str:
    import io

    out = io.StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(module)
    return out.getvalue()


# ============================================================================ nn, built from Python


def build_llama_block(m: int = 32, d: int = 64, f: int = 96, hd: int = 16, q: int = 6) -> ModuleOp:
    """The non-attention part of a LLaMA block (NN_DIALECT.md's example), built through the
    public builder (`fb.nn.<op>`: the dialect's typed __init__s)."""
    from coda_ir.builder import FunctionBuilder

    fb = FunctionBuilder(
        "llama_block", x0=((m, d), "bf16"), y0=((m, d), "bf16"), wo=((d, d), "bf16"), wn0=((d,), "bf16"),
        wgu=((2 * f, d), "bf16"), wd=((d, f), "bf16"), wn1=((d,), "bf16"), wqkv=((q * hd, d), "bf16"),
        pos=((m,), "i32"),
    )
    a = fb.nn.linear(fb.y0, fb.wo)
    x1 = fb.nn.add(fb.x0, a)
    h1 = fb.nn.rms_norm(x1, fb.wn0, eps=1e-5)
    z = fb.nn.linear(h1, fb.wgu)
    g = fb.nn.swiglu(z)
    dd = fb.nn.linear(g, fb.wd)
    x2 = fb.nn.add(x1, dd)
    h2 = fb.nn.rms_norm(x2, fb.wn1)
    qkv = fb.nn.linear(h2, fb.wqkv)
    r = fb.nn.rope(qkv, fb.pos, head_dim=hd, rotary_heads=q - 2)
    fb.returns(x2, r)
    return fb.module


def test_llama_block_builds_and_verifies():
    module = build_llama_block()
    module.verify()
    ops = [op for op in module.walk() if op.name.startswith("nn.")]
    assert [op.name for op in ops] == [
        "nn.linear", "nn.add", "nn.rms_norm", "nn.linear", "nn.swiglu",
        "nn.linear", "nn.add", "nn.rms_norm", "nn.linear", "nn.rope",
    ]  # fmt: skip
    # Result types come from the typed constructors: x @ w.T, the gated half, rope keeps x.
    z, g = ops[3].results[0].type, ops[4].results[0].type
    assert z == T(32, 192) and g == T(32, 96)
    assert ops[-1].results[0].type == T(32, 96)


def test_llama_block_round_trips_through_both_syntaxes():
    module = build_llama_block()
    pretty, generic = text_of(module), text_of(module, generic=True)
    assert text_of(parse(pretty)) == pretty
    assert text_of(parse(generic), generic=True) == generic
    assert text_of(parse(generic)) == pretty
    # The contract's generic spelling of properties (NN_DIALECT.md).
    assert re.search(r'"nn.rms_norm"\(%\w+, %\w+\) <\{eps = 1.000000e-05 : f32\}>', generic)
    assert re.search(
        r'"nn.rope"\(%\w+, %\w+\) <\{head_dim = 16 : i64, rotary_heads = 4 : i64, '
        r'theta = 1.000000e\+04 : f32, style = "half"\}>',
        generic,
    )


def test_every_nn_op_has_a_typed_constructor():
    arg_types = [T(8, 32, elt=f32), T(32, elt=f32), T(8, 32, elt=f32), T(32, 16, elt=f32), T(8, elt=i32), T(8, elt=f32)]
    fn = func.FuncOp("all", (arg_types, []))
    with ImplicitBuilder(fn.body) as (x, w, y, b, t, hv):
        ops = [
            nn.LinearOp(x, y),  # y as an nn.Linear weight: 8x32 -> result 8x8
            nn.MatmulOp(x, b),
            nn.AddOp(x, w),
            nn.MulOp(x, y),
            nn.SiluOp(x),
            nn.ReluOp(x),
            nn.GeluOp(x, approximate="tanh"),
            nn.RMSNormOp(x, w, eps=1e-6),
            nn.LayerNormOp(x, w, w, eps=1e-5),
            nn.SwiGLUOp(x),
            nn.GeGLUOp(x, approximate="none"),
            nn.RoPEOp(x, t, head_dim=8, rotary_heads=3, theta=5e5, style="interleaved"),
            nn.HeadRMSNormOp(x, hv, head_dim=8, heads=4),
            ce := nn.CrossEntropyOp(x, t, ignore_index=-1, reduction="sum"),
            nn.ScaleOp(x, 0.25),
            nn.SoftcapOp(x, 30.0),
            nn.RMSNormOp(x, w, eps=1e-6, offset=1.0),
            nn.CrossEntropyPartialsOp(x, t, vocab_start=8, vocab_size=64),  # x: columns [8, 40) of 64
        ]
        # backward ops (nn-autodiff); hv doubles as an f32 row statistic (8 rows)
        rope_props = dict(ops[11].properties)
        ops += [
            nn.GemmOp(x, y, transpose_a=True),
            nn.ColumnSumOp(x),
            nn.SiluGradOp(y, x),
            nn.ReluGradOp(y, x),
            nn.GeluGradOp(y, x, "tanh"),
            nn.SwiGLUGradOp(ops[9].results[0], x),
            nn.GeGLUGradOp(ops[9].results[0], x, "none"),
            nn.RoPEGradOp(y, t, rope_props),
            nn.RMSNormRstdOp(x, 1e-6),
            nn.RMSNormGradOp(y, x, w, hv),
            nn.RMSNormGradOp(y, x, w, hv, hv),
            nn.LayerNormStatsOp(x, 1e-5),
            nn.LayerNormGradOp(y, x, w, hv, hv),
            nn.HeadRMSNormGradOp(y, x, ops[12].operands[1], dict(ops[12].properties)),
            nn.CrossEntropyGradOp(x, t, ce.results[0], dict(ce.properties)),
            ce_fwd := nn.CrossEntropyFwdOp(x, t, dict(ce.properties)),
            nn.CrossEntropyGradOp(x, t, ce_fwd.loss, dict(ce.properties), lse=ce_fwd.lse),
            nn.RMSNormApplyOp(x, w, hv),
            nn.LayerNormApplyOp(x, w, w, hv, hv),
            nn.ZerosOp(x.type),
            nn.RowDotOp(x, y),
            nn.RMSNormGradOp(y, x, w, hv, offset=1.0),  # Gemma's 1 + w norms
            nn.RMSNormApplyOp(x, w, hv, 1.0),
            nn.SoftcapGradOp(y, x, 30.0),
            # y as a [V = 8, 32] head weight; hv as the saved per-row lse
            nn.LinearCrossEntropyGradOp(x, y, t, ce.results[0], hv,
                                        dict(ce.properties, chunk=IntegerAttr(nn.LOGITS_CHUNK_TILE, i64))),
        ]
        # whole-model ops: x doubles as a packed qkv of 2 q heads + 1 kv head of 8 (32 columns)
        attn = nn.AttentionOp(x, heads=2, kv_heads=1, head_dim=8, seq_len=4, causal=True)
        fwd = nn.AttentionFwdOp(x, dict(attn.properties))
        ops += [
            nn.EmbeddingOp(t, y),
            nn.EmbeddingGradOp(x, t, y.type),
            attn,
            fwd,
            nn.AttentionGradOp(x, fwd.out, fwd.lse, attn.result, dict(attn.properties)),
            nn.ConcatOp([x, y], 0),
            nn.SliceOp(x, 1, 8, 16),
        ]
        func.ReturnOp()
    ModuleOp([fn]).verify()
    assert {op.name for op in ops} == {op.name for op in nn.NN.operations}
    shapes = {op.name: tuple(op.results[0].type.get_shape()) for op in ops}
    assert shapes["nn.linear"] == (8, 8) and shapes["nn.matmul"] == (8, 16)
    assert shapes["nn.swiglu"] == (8, 16) and shapes["nn.geglu"] == (8, 16)
    assert shapes["nn.cross_entropy"] == () and ce.results[0].type == TensorType(f32, [])
    assert shapes["nn.attention"] == (8, 16) and shapes["nn.concat"] == (16, 32) and shapes["nn.slice"] == (8, 16)
    assert fwd.lse.type == TensorType(f32, [16]) and shapes["nn.embedding"] == (8, 32)
    # Property attribute types are the contract's: i64 integers, f32 floats, strings.
    rope = ops[11]
    assert rope.properties["head_dim"] == IntegerAttr(8, i64)
    assert rope.properties["theta"] == FloatAttr(5e5, f32)
    assert rope.properties["style"] == StringAttr("interleaved")
    assert ops[7].properties["eps"].type == f32


def test_nn_defaults_are_filled_for_generic_input():
    module = parse(
        """
        func.func @f(%x: tensor<4x64xf16>, %p: tensor<4xi32>, %t: tensor<4xi32>) {
          %0 = "nn.gelu"(%x) <{approximate = "none"}> : (tensor<4x64xf16>) -> tensor<4x64xf16>
          %1 = "nn.rope"(%x, %p) <{head_dim = 32 : i64, rotary_heads = 1 : i64, theta = 1.000000e+04 : f32, style = "half"}> : (tensor<4x64xf16>, tensor<4xi32>) -> tensor<4x64xf16>
          %2 = "nn.cross_entropy"(%x, %t) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<4x64xf16>, tensor<4xi32>) -> tensor<f32>
          func.return
        }
        """
    )
    module.verify()
    gelu, rope, ce = [op for op in module.walk() if op.name.startswith("nn.")]
    assert gelu.approximate.data == "none"
    assert rope.style.data == "half" and rope.theta.value.data == 10000.0
    assert ce.reduction.data == "mean" and ce.ignore_index.value.data == -100


def test_rope_inv_freq_is_optional_and_checked():
    # the model's own frequencies (Hugging Face's fp32 inv_freq buffer), exact in the reference
    import torch

    from coda_ir.interpreters.nn import _rope

    rope = """
        func.func @f(%x: tensor<3x8xf32>, %p: tensor<3xi32>) {{
          %1 = "nn.rope"(%x, %p) <{{head_dim = 8 : i64, rotary_heads = 1 : i64, theta = 1.000000e+04 : f32, style = "half"{extra}}}> : (tensor<3x8xf32>, tensor<3xi32>) -> tensor<3x8xf32>
          func.return
        }}"""
    freqs = (1.0, 0.1, 0.00999999977648258, 0.0010000000474974513)
    module = parse(rope.format(extra=", inv_freq = array<f32: " + ", ".join(f"{v:.9e}" for v in freqs) + ">"))
    module.verify()
    op = next(o for o in module.walk() if o.name == "nn.rope")
    assert nn.inv_freq_of(op) == tuple(float(torch.tensor(v, dtype=torch.float32)) for v in freqs)
    x, pos = torch.randn(3, 8, dtype=torch.float64), torch.tensor([0, 1, 4000])
    out = _rope(x, pos, 8, 1, 1e4, "half", freqs=nn.inv_freq_of(op))
    angle = 4000 * torch.tensor(nn.inv_freq_of(op), dtype=torch.float64)
    assert torch.allclose(out[2, 0:4], x[2, 0:4] * angle.cos() - x[2, 4:8] * angle.sin(), rtol=0, atol=1e-12)
    assert nn.inv_freq_of(parse(rope.format(extra="")).body.block.first_op.body.block.first_op) is None
    with pytest.raises(VerifyException, match="head_dim / 2 = 4 frequencies, got 2"):
        parse(rope.format(extra=", inv_freq = array<f32: 1.0, 0.5>")).verify()


def test_nn_verifier_diagnostics_name_op_and_location():
    module = parse(
        """func.func @f(%x: tensor<4x8xf32>, %w: tensor<16x4xf32>) {
  %0 = "nn.linear"(%x, %w) : (tensor<4x8xf32>, tensor<16x4xf32>) -> tensor<4x16xf32>
  func.return
}"""
    )
    [diagnostic] = verify_module(module)
    assert str(diagnostic) == (
        "test.mlir:2:3: error: 'nn.linear' op x has 8 columns but w (NxK, nn.Linear layout) "
        "has 4: expected w of shape Nx8"
    )


# ============================================================================ nn verifiers, hypothesis

FLOATS = [f32, bf16, f16]
dims = st.integers(1, 6)
elts = st.sampled_from(FLOATS)


def verifies(op_cls, operand_types, result_type, **properties) -> bool:
    """Build `op_cls` generically (no typed __init__, so nothing is inferred) and verify it."""
    block = Block(arg_types=operand_types)
    props = {k: v for k, v in properties.items()}
    op = op_cls.create(operands=list(block.args), result_types=[result_type], properties=props)
    block.add_op(op)
    try:
        op.verify()
    except VerifyException:
        return False
    return True


settings_ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings_
@given(m=dims, k=dims, n=dims, k2=dims, rm=dims, rn=dims, ex=elts, ew=elts, er=elts)
def test_linear_verifies_iff_shapes_are_consistent(m, k, n, k2, rm, rn, ex, ew, er):
    ok = verifies(nn.LinearOp, [T(m, k, elt=ex), T(n, k2, elt=ew)], T(rm, rn, elt=er))
    assert ok == (k == k2 and (rm, rn) == (m, n) and ex == ew == er)


@settings_
@given(
    m=dims,
    n=dims,
    rhs=st.one_of(
        st.tuples(dims), st.tuples(dims, dims), st.just("full"), st.just("row"), st.tuples(dims, dims, dims)
    ),
    result=st.one_of(st.just("same"), st.tuples(dims, dims)),
    op=st.sampled_from([nn.AddOp, nn.MulOp]),
    ex=elts,
    ey=elts,
)
def test_add_mul_verify_iff_shapes_are_consistent(m, n, rhs, result, op, ex, ey):
    rhs_shape = {"full": (m, n), "row": (n,)}.get(rhs, rhs) if isinstance(rhs, str) else rhs
    result_shape = (m, n) if result == "same" else result
    ok = verifies(op, [T(m, n, elt=ex), T(*rhs_shape, elt=ey)], T(*result_shape, elt=ex))
    assert ok == (rhs_shape in ((m, n), (n,)) and result_shape == (m, n) and ex == ey)


@settings_
@given(
    m=dims,
    d=dims,
    w=st.one_of(st.tuples(dims), st.tuples(dims, dims)),
    eps=st.floats(-1.0, 1.0, allow_nan=False, width=32),  # eps is an f32 attribute
    result=st.one_of(st.just("same"), st.tuples(dims, dims)),
    ex=elts,
    ew=elts,
)
def test_rms_norm_verifies_iff_shapes_are_consistent(m, d, w, eps, result, ex, ew):
    result_shape = (m, d) if result == "same" else result
    ok = verifies(
        nn.RMSNormOp, [T(m, d, elt=ex), T(*w, elt=ew)], T(*result_shape, elt=ex), eps=FloatAttr(eps, f32)
    )
    assert ok == (w == (d,) and eps >= 0 and result_shape == (m, d) and ex == ew)


@settings(max_examples=40, deadline=None)
@given(
    heads=st.integers(1, 4),
    hd=st.integers(1, 8),
    extra=st.integers(0, 3),
    rotary=st.integers(-1, 5),
    style=st.sampled_from(["half", "interleaved", "neox"]),
)
def test_rope_verifies_iff_properties_are_consistent(heads, hd, extra, rotary, style):
    n = heads * hd + extra
    ok = verifies(
        nn.RoPEOp,
        [T(4, n), T(4, elt=i32)],
        T(4, n),
        head_dim=IntegerAttr(hd, i64),
        rotary_heads=IntegerAttr(rotary, i64),
        theta=FloatAttr(10000.0, f32),
        style=StringAttr(style),
    )
    consistent = hd % 2 == 0 and n % hd == 0 and 0 <= rotary <= n // hd and style != "neox"
    assert ok == consistent


# ============================================================================ coda, built from Python


def scalar_region(arg_types, body):
    """A single-block region for coda.map / pair_map / fold bodies, via Builder.implicit_region."""

    @Builder.implicit_region(arg_types)
    def region(args):
        coda.YieldOp(*body(*args))

    return region


def test_gemm_with_every_broadcast_primitive_builds_and_verifies():
    m, n, k = 64, 128, 32
    a, b = T(m, k), T(n, k)
    res, rstd, g, alpha = T(m, n), T(m, elt=f32), T(n), TensorType(f32, [])
    acc_t = TileType((m, n))
    block = Block(arg_types=[acc_t, res, rstd, g, alpha])
    acc, res_, rstd_, g_, alpha_ = block.args
    builder = Builder(InsertPoint.at_end(block))
    x = builder.insert(coda.AccumulateOp(acc, res_)).result
    s = builder.insert(coda.ScaleOp(x, rstd_, Axis.ROWS)).result
    s = builder.insert(coda.ScaleOp(s, g_, Axis.COLS)).result
    s = builder.insert(coda.ShiftOp(s, alpha_, Axis.SCALAR)).result
    ss = builder.insert(coda.ReduceOp(ReduceKind.SUMSQ, x, 1)).result
    silu = builder.insert(
        coda.MapOp(
            [s],
            [acc_t],
            scalar_region([f32], lambda v: [arith.MulfOp(v, arith.DivfOp(v, v).result).result]),
        )
    ).results[0]
    gated = builder.insert(
        coda.PairMapOp([silu], [TileType((m, n // 2))], scalar_region([f32, f32], lambda p, q: [arith.MulfOp(p, q).result]))
    ).results[0]
    builder.insert(coda.YieldOp(x, ss, gated))
    assert ss.type == PartialsType(Axis.ROWS, m, Combine.SUM)

    fn = func.FuncOp("k", ([a, b, res, rstd, g, alpha], [T(m, n), ss.type, T(m, n // 2)]))
    args = fn.body.block.args
    gemm = coda.GemmOp(
        args[0],
        args[1],
        list(args[2:]),
        [T(m, n), ss.type, T(m, n // 2)],
        Region(block),
        transpose_b=True,
        config=TileConfigAttr(64, 64, 32, warps=4, stages=3),
    )
    fn.body.block.add_op(gemm)
    fn.body.block.add_op(func.ReturnOp(*gemm.results))
    module = ModuleOp([fn])
    module.verify()
    assert gemm.problem_shape() == (m, n, k)
    assert [op.name for op in gemm.epilogue.block.ops] == [
        "coda.accumulate", "coda.scale", "coda.scale", "coda.shift", "coda.reduce",
        "coda.map", "coda.pair_map", "coda.yield",
    ]  # fmt: skip
    # Round trip through text, custom and generic.
    assert text_of(parse(text_of(module))) == text_of(module)
    assert text_of(parse(text_of(module, generic=True))) == text_of(module)


def test_elementwise_and_fold_build_and_verify():
    m, n = 16, 64
    block = Block(arg_types=[T(m, n), T(m, elt=i32), T(32, elt=f32)])
    z, t, invf = block.args
    with ImplicitBuilder(block):
        x = coda.LoadOp(z).result
        f = coda.BroadcastOp(invf, Axis.COLS, x.type).result
        cols = coda.IndexOp(Axis.COLS, x.type).result
        seg = coda.SegmentReduceOp(ReduceKind.SUMSQ, x, 16).result
        lse = coda.ReduceOp(ReduceKind.LSE, x, 1).result
        tgt = coda.SelectOp(x, t).result
        mx = coda.ReduceOp(ReduceKind.MAX, f, 0).result
        coda.YieldOp(seg, lse, tgt, mx, cols)
    assert f.type == TileType((m, n)) and cols.type == TileType((m, n), i32)
    assert mx.type == PartialsType(Axis.COLS, n, Combine.MAX)
    result_types = [T(m, n, elt=f32), lse.type, tgt.type, mx.type, T(m, n, elt=i32)]
    fn = func.FuncOp("ew", ([T(m, n), T(m, elt=i32), T(32, elt=f32)], []))
    outer = fn.body.block
    ew = coda.ElementwiseOp((m, n), list(outer.args), result_types, Region(block))
    outer.add_op(ew)
    assert ew.iteration_shape() == (m, n)

    lse_p, tgt_p = ew.results[1], ew.results[2]
    fold = coda.FoldOp(
        [lse_p, tgt_p],
        [outer.args[1]],
        [TensorType(f32, []), T(m, elt=f32)],
        scalar_region([f32, f32, i32], lambda l, s, ti: [arith.SubfOp(l, s).result, l]),
        scalar_region([f32], lambda total: [math.SqrtOp(total).result]),
    )
    outer.add_op(fold)
    outer.add_op(func.ReturnOp())
    module = ModuleOp([fn])
    module.verify()
    assert verify_module(module) == []
    assert fold.length() == m
    assert list(coda.kernels(module)) == [ew, fold]
    assert text_of(parse(text_of(module, generic=True))) == text_of(module)


def test_coda_types_and_attributes_verify_on_construction():
    assert TileType((4, 8)).get_shape() == (4, 8)
    assert TileConfigAttr(128, 128, 64, warps=8, stages=4).as_dict() == {
        "bm": 128, "bn": 128, "bk": 64, "warps": 8, "stages": 4
    }  # fmt: skip
    with pytest.raises(VerifyException, match="must be rank 2"):
        TileType((4,))
    with pytest.raises(VerifyException, match="element type must be f32"):
        TileType((4, 4), f16)
    with pytest.raises(VerifyException, match="bm must be a positive power of two, got 96"):
        TileConfigAttr(96, 64, 32)
    with pytest.raises(VerifyException, match="at least 16"):
        TileConfigAttr(64, 64, 8)
    with pytest.raises(VerifyException, match="stages must be positive"):
        TileConfigAttr(64, 64, 32, stages=0)
    with pytest.raises(VerifyException, match="not scalar"):
        PartialsType(Axis.SCALAR, 4, Combine.SUM)
    # Unreachable from text (the parser only accepts known combines): the verifier's own rule.
    from xdsl.dialects.builtin import IntAttr

    with pytest.raises(VerifyException, match="unknown combine 'mean'"):
        PartialsType.new((coda.AxisAttr(Axis.ROWS), IntAttr(4), StringAttr("mean")))


def test_coda_verifier_rejects_programmatic_mistakes():
    """Rules that text cannot easily reach: mistakes a Python builder can make."""
    m, n = 16, 32
    # A gemm whose epilogue block has the wrong accumulator type.
    block = Block(arg_types=[TileType((m, m))])
    block.add_op(coda.YieldOp(block.args[0]))
    outer = Block(arg_types=[T(m, 8), T(8, n)])
    gemm = coda.GemmOp(outer.args[0], outer.args[1], [], [T(m, m)], Region(block))
    outer.add_op(gemm)
    with pytest.raises(VerifyException, match=r"accumulator !coda.tile<16x32xf32>"):
        gemm.verify()
    # A map whose body yields a value of the wrong element type.
    block = Block(arg_types=[T(m, n)])
    with ImplicitBuilder(block) as (z,):
        x = coda.LoadOp(z).result
        bad = coda.MapOp([x], [x.type], scalar_region([f32], lambda v: [arith.FPToSIOp(v, i32).result]))
        coda.YieldOp(bad.results[0])
    ew = coda.ElementwiseOp((m, n), [], [T(m, n)], Region(block))
    Block(arg_types=[]).add_op(ew)
    with pytest.raises(VerifyException, match="body yields i32 for a tile of f32"):
        bad.verify()


def test_verify_module_reports_every_failing_op_innermost_first():
    module = parse(
        """func.func @f(%m: tensor<16x32xf32>, %v: tensor<8xf32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v : tensor<16x32xf32>, tensor<8xf32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<8xf32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.scale %x, %v_ rows : !coda.tile<16x32xf32>, tensor<8xf32>
    coda.yield %y : !coda.tile<16x32xf32>
  }
  %1 = "nn.relu"(%m) : (tensor<16x32xf32>) -> tensor<16x16xf32>
  func.return
}"""
    )
    messages = [str(d) for d in verify_module(module)]
    assert messages == [
        "test.mlir:5:5: error: 'coda.scale' op vector operand must have shape 16 "
        "(one value per row of the tile), got 8",
        "test.mlir:8:3: error: 'nn.relu' op result shape must be 16x32, got 16x16",
    ]


LIBRARY_STEP_TWINS = [
    (nn.AttentionFwdOp, coda.AttentionOp, library_steps.AttentionWithLseDef),
    (nn.AttentionGradOp, coda.AttentionGradOp, library_steps.AttentionGradDef),
    (nn.EmbeddingOp, coda.EmbeddingOp, library_steps.EmbeddingDef),
    (nn.EmbeddingGradOp, coda.EmbeddingGradOp, library_steps.EmbeddingGradDef),
    (nn.ConcatOp, coda.ConcatOp, library_steps.ConcatDef),
    (nn.SliceOp, coda.SliceOp, library_steps.SliceDef),
]


@pytest.mark.parametrize("nn_op, coda_op, definition", LIBRARY_STEP_TWINS, ids=lambda c: c.__name__)
def test_library_steps_share_their_nn_twins_definition(nn_op, coda_op, definition):
    """A coda library step and its nn twin have one definition (library_steps.py): the same
    operands, results, properties and verifier (what it says: the next test)."""
    assert issubclass(nn_op, definition) and issubclass(coda_op, definition)
    assert "verify_" in vars(definition)
    nn_def, coda_def = nn_op.get_irdl_definition(), coda_op.get_irdl_definition()
    assert [n for n, _ in nn_def.operands] == [n for n, _ in coda_def.operands]
    assert [n for n, _ in nn_def.results] == [n for n, _ in coda_def.results]
    assert nn_def.properties.keys() == coda_def.properties.keys()


def test_library_step_diagnostics_name_the_op_of_either_dialect():
    module = parse(
        """func.func @f(%a: tensor<4x8xf32>, %b: tensor<4x6xf32>, %dy: tensor<6x8xf32>, %ids: tensor<6xi32>) {
  %0 = "nn.concat"(%a, %b) <{axis = 0 : i64}> : (tensor<4x8xf32>, tensor<4x6xf32>) -> tensor<8x8xf32>
  %1 = "coda.concat"(%a, %b) <{axis = 0 : i64}> : (tensor<4x8xf32>, tensor<4x6xf32>) -> tensor<8x8xf32>
  %2 = "coda.slice"(%a) <{axis = 1 : i32, start = 6 : i32}> : (tensor<4x8xf32>) -> tensor<4x4xf32>
  %3 = "nn.embedding_grad"(%dy, %ids) : (tensor<6x8xf32>, tensor<6xi32>) -> tensor<5x8xbf16>
  %4 = "coda.embedding_grad"(%dy, %ids) : (tensor<6x8xf32>, tensor<6xi32>) -> tensor<5x8xbf16>
  func.return
}"""
    )
    shape_rule = "input #1 has shape 4x6; every input must match input #0 (4x8) except along axis 0"
    assert [str(d) for d in verify_module(module)] == [
        f"test.mlir:2:3: error: 'nn.concat' op {shape_rule}",
        f"test.mlir:3:3: error: 'coda.concat' op {shape_rule}",
        # coda's integer properties may be of any integer type; the nn contract fixes i64
        "test.mlir:4:3: error: 'coda.slice' op slice [6, 10) is outside [0, 8) along axis 1",
        # coda-widen-summed-stores may store the dy of a coda.embedding_grad in f32, never nn's
        "test.mlir:5:3: error: 'nn.embedding_grad' op result must be Vx8 of dy's element type, "
        "got tensor<5x8xbf16>",
    ]


@pytest.mark.parametrize("elt_cls", [Float32Type, BFloat16Type, Float16Type])
def test_float_types_are_the_contracts(elt_cls):
    assert elt_cls in nn.FLOAT_TYPES and elt_cls in coda.FLOAT_TYPES
    assert not isinstance(i32, tuple(nn.FLOAT_TYPES)) and isinstance(i32, IntegerType)
