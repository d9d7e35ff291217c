"""The coda interpreter (coda_ir.interpreters) on small programs whose results are known from an
independent PyTorch formulation: a gemm epilogue with every vector primitive, an interleaved
SwiGLU pair map, a cross-entropy loss through select / lse partials and a fold with finalize, a
launch group, segment reductions and period loads, the library steps, and the rounding model
(float64 keeps everything; float32 rounds each stored result once to its element type)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from xdsl.interpreter import Interpreter

from coda_ir.errors import ArgumentError
from coda_ir.interpreters import coda_interpreter, interleave_perm, run_coda
from coda_ir.reference import load_func


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def close(got, want, rtol=1e-12):
    torch.testing.assert_close(got.double(), want.double(), rtol=rtol, atol=rtol * max(1.0, float(want.abs().max())))


GEMM_EPILOGUE = """
func.func @f(%a: tensor<5x7xf32>, %w: tensor<6x7xf32>, %r: tensor<5xf32>, %b: tensor<3xf32>, %s: tensor<f32>, %c: tensor<5x6xf32>)
    -> (tensor<5x6xf32>, !coda.partials<rows, 5, sum>, !coda.partials<cols, 6, max>, tensor<5x6xi32>) {
  %y, %ss, %mx, %ix = coda.gemm %a, %w transpose_b ins(%r, %b, %s, %c : tensor<5xf32>, tensor<3xf32>, tensor<f32>, tensor<5x6xf32>)
      : tensor<5x7xf32>, tensor<6x7xf32> -> (tensor<5x6xf32>, !coda.partials<rows, 5, sum>, !coda.partials<cols, 6, max>, tensor<5x6xi32>) {
  ^bb0(%acc: !coda.tile<5x6xf32>, %r_: tensor<5xf32>, %b_: tensor<3xf32>, %s_: tensor<f32>, %c_: tensor<5x6xf32>):
    %0 = coda.scale %acc, %r_ rows : !coda.tile<5x6xf32>, tensor<5xf32>
    %1 = coda.shift %0, %b_ cols : !coda.tile<5x6xf32>, tensor<3xf32>
    %2 = coda.scale %1, %s_ scalar : !coda.tile<5x6xf32>, tensor<f32>
    %3 = coda.accumulate %2, %c_ : !coda.tile<5x6xf32>, tensor<5x6xf32>
    %4 = coda.map %3 : !coda.tile<5x6xf32> -> !coda.tile<5x6xf32> {
    ^bb0(%x: f32):
      %e = math.tanh %x : f32
      %h = arith.constant 0.5 : f32
      %m = arith.mulf %e, %h : f32
      coda.yield %m : f32
    }
    %5 = coda.reduce sumsq %4 dim 1 : !coda.tile<5x6xf32> -> !coda.partials<rows, 5, sum>
    %6 = coda.reduce max %4 dim 0 : !coda.tile<5x6xf32> -> !coda.partials<cols, 6, max>
    %i = coda.index cols : !coda.tile<5x6xi32>
    %j = coda.index rows : !coda.tile<5x6xi32>
    %k = coda.map %i, %j : (!coda.tile<5x6xi32>, !coda.tile<5x6xi32>) -> !coda.tile<5x6xi32> {
    ^bb0(%ci: i32, %ri: i32):
      %ten = arith.constant 10 : i32
      %t = arith.muli %ri, %ten : i32
      %v = arith.addi %t, %ci : i32
      coda.yield %v : i32
    }
    coda.yield %4, %5, %6, %k : !coda.tile<5x6xf32>, !coda.partials<rows, 5, sum>, !coda.partials<cols, 6, max>, !coda.tile<5x6xi32>
  }
  func.return %y, %ss, %mx, %ix : tensor<5x6xf32>, !coda.partials<rows, 5, sum>, !coda.partials<cols, 6, max>, tensor<5x6xi32>
}
"""


def test_gemm_epilogue_primitives():
    a, w, r, b, s, c = randn(5, 7, seed=1), randn(6, 7, seed=2), randn(5, seed=3), randn(3, seed=4), randn((), seed=5), randn(5, 6, seed=6)
    y, ss, mx, ix = run_coda(GEMM_EPILOGUE, [a, w, r, b, s, c])
    z = (a.double() @ w.double().T * r.double()[:, None] + b.double().repeat(2)) * s.double() + c.double()
    want = torch.tanh(z) * 0.5
    assert y.dtype == torch.float64 and ix.dtype == torch.int32
    close(y, want)
    close(ss, (want * want).sum(1))  # partials come back combined over the whole row
    close(mx, want.amax(0))
    assert torch.equal(ix, (10 * torch.arange(5)[:, None] + torch.arange(6)).int())


def test_interleaved_swiglu_pairs_gate_and_up_rows():
    """`interleave F`: accumulator columns (2i, 2i+1) hold weight rows (i, F + i), so a 2 -> 1
    pair map computes silu(gate) * up with w = [w_gate; w_up] in the user's layout."""
    text = """
func.func @swiglu(%x: tensor<4x6xf32>, %w: tensor<10x6xf32>) -> tensor<4x5xf32> {
  %y = coda.gemm %x, %w transpose_b interleave 5 : tensor<4x6xf32>, tensor<10x6xf32> -> tensor<4x5xf32> {
  ^bb0(%acc: !coda.tile<4x10xf32>):
    %p = coda.pair_map %acc : !coda.tile<4x10xf32> -> !coda.tile<4x5xf32> {
    ^bb0(%g: f32, %u: f32):
      %n = arith.negf %g : f32
      %e = math.exp %n : f32
      %one = arith.constant 1.0 : f32
      %d = arith.addf %one, %e : f32
      %sg = arith.divf %g, %d : f32
      %o = arith.mulf %sg, %u : f32
      coda.yield %o : f32
    }
    coda.yield %p : !coda.tile<4x5xf32>
  }
  func.return %y : tensor<4x5xf32>
}
"""
    x, w = randn(4, 6, seed=7), randn(10, 6, seed=8)
    (y,) = run_coda(text, [x, w])
    z = x.double() @ w.double().T
    close(y, F.silu(z[:, :5]) * z[:, 5:])
    # without the interleave the same body pairs neighbouring columns instead
    (plain,) = run_coda(text.replace(" interleave 5", ""), [x, w])
    close(plain, F.silu(z[:, 0::2]) * z[:, 1::2])
    assert interleave_perm(10, 5).tolist() == [0, 5, 1, 6, 2, 7, 3, 8, 4, 9]


CROSS_ENTROPY = """
func.func @ce(%x: tensor<6x4xbf16>, %w: tensor<9x4xbf16>, %t: tensor<6xi32>) -> (tensor<f32>, tensor<6xbf16>) {
  %l, %p = coda.gemm %x, %w transpose_b ins(%t : tensor<6xi32>) : tensor<6x4xbf16>, tensor<9x4xbf16>
      -> (!coda.partials<rows, 6, lse>, !coda.partials<rows, 6, sum>) {
  ^bb0(%acc: !coda.tile<6x9xf32>, %t_: tensor<6xi32>):
    %lse = coda.reduce lse %acc dim 1 : !coda.tile<6x9xf32> -> !coda.partials<rows, 6, lse>
    %sel = coda.select %acc, %t_ : !coda.tile<6x9xf32>, tensor<6xi32> -> !coda.partials<rows, 6, sum>
    coda.yield %lse, %sel : !coda.partials<rows, 6, lse>, !coda.partials<rows, 6, sum>
  }
  %loss, %row = coda.fold %l, %p : !coda.partials<rows, 6, lse>, !coda.partials<rows, 6, sum> ins(%t : tensor<6xi32>) -> (tensor<f32>, tensor<6xbf16>) {
  ^bb0(%lv: f32, %xv: f32, %tv: i32):
    %ign = arith.constant -100 : i32
    %keep = arith.cmpi ne, %tv, %ign : i32
    %d = arith.subf %lv, %xv : f32
    %z = arith.constant 0.0 : f32
    %v = arith.select %keep, %d, %z : f32
    coda.yield %v, %d : f32, f32
  } finalize {
  ^bb0(%total: f32):
    %n = arith.constant 4.0 : f32
    %mean = arith.divf %total, %n : f32
    coda.yield %mean : f32
  }
  func.return %loss, %row : tensor<f32>, tensor<6xbf16>
}
"""


def test_cross_entropy_through_select_lse_and_fold_finalize():
    x, w = randn(6, 4, seed=9, dtype=torch.bfloat16), randn(9, 4, seed=10, dtype=torch.bfloat16)
    t = torch.tensor([3, -100, 0, 8, -100, 5], dtype=torch.int32)  # two ignored rows: 4 kept
    loss, row = run_coda(CROSS_ENTROPY, [x, w, t])
    logits = x.double() @ w.double().T
    close(loss, F.cross_entropy(logits, t.long(), ignore_index=-100))
    # an ignored row selects nothing (index outside the tile): its value is the plain lse
    close(row, torch.logsumexp(logits, 1) - torch.where(t >= 0, logits.gather(1, t.clamp(min=0).long()[:, None])[:, 0], 0))
    assert loss.dtype == row.dtype == torch.float64

    # float32 compute: fp32 tiles, each stored result rounded once (the bf16 row), the f32 loss stays f32
    loss32, row32 = run_coda(CROSS_ENTROPY, [x, w, t], torch.float32)
    assert loss32.dtype == torch.float32 and row32.dtype == torch.bfloat16
    close(row32, row.to(torch.bfloat16), rtol=0)
    close(loss32, loss, rtol=1e-6)


def test_launch_group_runs_its_members():
    text = """
func.func @group(%p: !coda.partials<rows, 8, sum>, %w: tensor<3x4xf32>, %g: tensor<4xf32>) -> (tensor<8xf32>, tensor<3xf32>) {
  %r, %c = coda.launch_group -> (tensor<8xf32>, tensor<3xf32>) {
    %r0 = coda.fold %p : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
    ^bb0(%x: f32):
      %q = math.rsqrt %x : f32
      coda.yield %q : f32
    }
    %c0 = coda.elementwise [3, 4] whole rows ins(%w, %g : tensor<3x4xf32>, tensor<4xf32>) -> tensor<3xf32> {
    ^bb0(%wt: tensor<3x4xf32>, %gv: tensor<4xf32>):
      %t = coda.load %wt : tensor<3x4xf32> -> !coda.tile<3x4xf32>
      %tg = coda.scale %t, %gv cols : !coda.tile<3x4xf32>, tensor<4xf32>
      %s = coda.reduce sum %tg dim 1 : !coda.tile<3x4xf32> -> !coda.partials<rows, 3, sum>
      coda.yield %s : !coda.partials<rows, 3, sum>
    }
    coda.yield %r0, %c0 : tensor<8xf32>, tensor<3xf32>
  }
  func.return %r, %c : tensor<8xf32>, tensor<3xf32>
}
"""
    p = torch.rand(8, generator=torch.Generator().manual_seed(11)) + 0.5  # a partials argument: combined values
    w, g = randn(3, 4, seed=12), randn(4, seed=13)
    r, c = run_coda(text, [p, w, g])
    close(r, torch.rsqrt(p.double()))
    close(c, (w.double() * g.double()).sum(1))


def test_segment_reduce_and_period_load():
    text = """
func.func @seg(%x: tensor<3x8xf32>, %tab: tensor<3x2xf32>) -> (tensor<3x8xf32>, tensor<3x8xf32>) {
  %m, %t = coda.elementwise [3, 8] ins(%x, %tab : tensor<3x8xf32>, tensor<3x2xf32>) -> (tensor<3x8xf32>, tensor<3x8xf32>) {
  ^bb0(%x_: tensor<3x8xf32>, %tab_: tensor<3x2xf32>):
    %xt = coda.load %x_ : tensor<3x8xf32> -> !coda.tile<3x8xf32>
    %s = coda.segment_reduce max %xt width 4 : !coda.tile<3x8xf32>
    %tt = coda.load %tab_ cols_period 2 : tensor<3x2xf32> -> !coda.tile<3x8xf32>
    coda.yield %s, %tt : !coda.tile<3x8xf32>, !coda.tile<3x8xf32>
  }
  func.return %m, %t : tensor<3x8xf32>, tensor<3x8xf32>
}
"""
    x, tab = randn(3, 8, seed=14), randn(3, 2, seed=15)
    m, t = run_coda(text, [x, tab])
    close(m, x.double().reshape(3, 2, 4).amax(-1).repeat_interleave(4, 1))
    close(t, tab.double().repeat(1, 4))


def test_library_steps():
    text = """
func.func @lib(%ids: tensor<5xi32>, %w: tensor<7x12xf32>) -> (tensor<5x12xf32>, tensor<5x4xf32>, tensor<10x12xf32>, tensor<5x4xf32>, tensor<5x12xf32>, tensor<7x12xf32>) {
  %e = "coda.embedding"(%ids, %w) : (tensor<5xi32>, tensor<7x12xf32>) -> tensor<5x12xf32>
  %s = "coda.slice"(%e) <{axis = 1 : i64, start = 8 : i64}> : (tensor<5x12xf32>) -> tensor<5x4xf32>
  %c = "coda.concat"(%e, %e) <{axis = 0 : i64}> : (tensor<5x12xf32>, tensor<5x12xf32>) -> tensor<10x12xf32>
  %o, %l = "coda.attention"(%e) <{heads = 1 : i64, kv_heads = 1 : i64, head_dim = 4 : i64, seq_len = 5 : i64, causal = 1 : i64}>
      : (tensor<5x12xf32>) -> (tensor<5x4xf32>, tensor<5xf32>)
  %dq = "coda.attention_grad"(%e, %o, %l, %s) <{heads = 1 : i64, kv_heads = 1 : i64, head_dim = 4 : i64, seq_len = 5 : i64, causal = 1 : i64}>
      : (tensor<5x12xf32>, tensor<5x4xf32>, tensor<5xf32>, tensor<5x4xf32>) -> tensor<5x12xf32>
  %dw = "coda.embedding_grad"(%dq, %ids) : (tensor<5x12xf32>, tensor<5xi32>) -> tensor<7x12xf32>
  func.return %e, %s, %c, %o, %dq, %dw : tensor<5x12xf32>, tensor<5x4xf32>, tensor<10x12xf32>, tensor<5x4xf32>, tensor<5x12xf32>, tensor<7x12xf32>
}
"""
    ids = torch.tensor([6, 0, 3, 3, 1], dtype=torch.int32)
    w = randn(7, 12, seed=16)
    e, s, c, o, dq, dw = run_coda(text, [ids, w])
    w64 = w.double()
    close(e, w64[ids.long()])
    close(s, w64[ids.long()][:, 8:])
    close(c, torch.cat([e, e]))
    qkv = w64[ids.long()].clone().requires_grad_(True)
    q, k, v = qkv[:, :4], qkv[:, 4:8], qkv[:, 8:]
    want = F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=True)[0]
    close(o, want.detach())
    (grad,) = torch.autograd.grad(want, qkv, s)
    close(dq, grad)
    close(dw, torch.zeros(7, 12, dtype=torch.float64).index_add_(0, ids.long(), grad))
    # an id outside the table is an error at run time (NN_DIALECT.md), never a number
    with pytest.raises(ArgumentError, match="id 7 at row 1 is outside"):
        run_coda(text, [torch.tensor([0, 7, 1, 2, 3], dtype=torch.int32), w])


def test_it_is_an_xdsl_interpreter():
    """`coda_interpreter` is a plain xDSL Interpreter: a function runs through `call_op`."""
    fn = load_func(GEMM_EPILOGUE)
    interpreter = coda_interpreter(fn.parent_op(), torch.float64)
    assert isinstance(interpreter, Interpreter)
    args = [randn(5, 7), randn(6, 7), randn(5), randn(3), randn(()), randn(5, 6)]
    got = interpreter.call_op(fn, tuple(a.double() for a in args))
    for x, y in zip(got, run_coda(fn, args)):
        assert torch.equal(x, y)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="takes 6 inputs, got 1"):
        run_coda(GEMM_EPILOGUE, [randn(5, 7)])
    with pytest.raises(ValueError, match="shape"):
        run_coda(GEMM_EPILOGUE, [randn(5, 8), randn(6, 7), randn(5), randn(3), randn(()), randn(5, 6)])
