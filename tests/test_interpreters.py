"""The interpreters of coda_ir.interpreters (xDSL Interpreters, `@impl` per op).

The coda interpreter on small programs whose results are known from an independent PyTorch
formulation: a gemm epilogue with every vector primitive, an interleaved SwiGLU pair map, a
cross-entropy loss through select / lse partials and a fold with finalize, a launch group,
segment reductions and period loads, the library steps, and the rounding model (float64 keeps
everything; float32 rounds each stored result once to its element type).

The nn interpreter (`coda_ir.reference`'s engine): a plain xDSL Interpreter, `func.call` through
the shared `FuncFunctions`, the trace, and its errors (located, `CodaError`s). Its ops are
tested one by one in tests/test_reference.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from xdsl.interpreter import Interpreter

from coda_ir.errors import ArgumentError, CompileError, InternalError
from coda_ir.interpreters import coda_interpreter, interleave_perm, nn_interpreter, run_coda
from coda_ir.reference import f32_value, load_func, run_reference


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


# ============================================================================ the nn interpreter
# Its op semantics are tested op by op in tests/test_reference.py (against independent float64
# PyTorch); here: that it is an xDSL Interpreter, calls, errors and the trace.

NN_FN = """func.func @f(%x: tensor<5x6xbf16>, %w: tensor<6xbf16>, %t: tensor<5xi32>) -> (tensor<5x6xbf16>, tensor<f32>) {
  %n = "nn.rms_norm"(%x, %w) <{eps = 1.0e-05 : f32}> : (tensor<5x6xbf16>, tensor<6xbf16>) -> tensor<5x6xbf16>
  %s = "nn.silu"(%n) : (tensor<5x6xbf16>) -> tensor<5x6xbf16>
  %l = "nn.cross_entropy"(%s, %t) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<5x6xbf16>, tensor<5xi32>) -> tensor<f32>
  func.return %s, %l : tensor<5x6xbf16>, tensor<f32>
}
"""


def _nn_inputs(targets=(0, 5, -100, 2, 3)):
    x, w = randn(5, 6, seed=20, dtype=torch.bfloat16), (1 + 0.1 * randn(6, seed=21)).bfloat16()
    return [x, w, torch.tensor(targets, dtype=torch.int32)]


def test_nn_interpreter_is_an_xdsl_interpreter():
    """`nn_interpreter` is a plain xDSL Interpreter (nn ops on `NnFunctions`, functions on xDSL's
    `FuncFunctions`): a function runs through `call_op`, as `run_reference` runs it."""
    fn = load_func(NN_FN)
    inputs = _nn_inputs()
    for compute in (torch.float64, torch.bfloat16):
        interpreter = nn_interpreter(fn.parent_op(), compute)
        assert isinstance(interpreter, Interpreter)
        args = tuple(x.to(compute) if x.is_floating_point() else x.long() for x in inputs)
        for got, want in zip(interpreter.call_op(fn, args), run_reference(fn, inputs, compute)):
            assert got.dtype == want.dtype and torch.equal(got, want)


def test_nn_func_call_runs_the_callee_op_by_op():
    """A `func.call` of an nn function (xDSL's FuncFunctions, shared with the coda interpreter)
    means the callee's ops in place: bit for bit the inlined program, in every compute dtype."""
    called = """
func.func @norm(%x: tensor<5x6xbf16>, %w: tensor<6xbf16>) -> tensor<5x6xbf16> {
  %n = "nn.rms_norm"(%x, %w) <{eps = 1.0e-05 : f32}> : (tensor<5x6xbf16>, tensor<6xbf16>) -> tensor<5x6xbf16>
  func.return %n : tensor<5x6xbf16>
}
func.func @f(%x: tensor<5x6xbf16>, %w: tensor<6xbf16>, %t: tensor<5xi32>) -> (tensor<5x6xbf16>, tensor<f32>) {
  %n = func.call @norm(%x, %w) : (tensor<5x6xbf16>, tensor<6xbf16>) -> tensor<5x6xbf16>
  %s = "nn.silu"(%n) : (tensor<5x6xbf16>) -> tensor<5x6xbf16>
  %l = "nn.cross_entropy"(%s, %t) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<5x6xbf16>, tensor<5xi32>) -> tensor<f32>
  func.return %s, %l : tensor<5x6xbf16>, tensor<f32>
}
"""
    inputs = _nn_inputs()
    for compute in (torch.float64, torch.bfloat16, None):
        got = run_reference(called, inputs, compute, func_name="f")
        want = run_reference(NN_FN, inputs, compute)
        assert all(g.dtype == w.dtype and torch.equal(g, w) for g, w in zip(got, want))
    # independent float64 check of the result
    x, w, t = (v.double() if v.is_floating_point() else v.long() for v in inputs)
    s = F.silu(F.rms_norm(x, (6,), w, eps=f32_value(1e-5)))
    close(run_reference(called, inputs, torch.float64, func_name="f")[1], F.cross_entropy(s, t))


def test_nn_trace_sees_every_result():
    seen = []
    run_reference(NN_FN, _nn_inputs(), torch.bfloat16, trace=lambda op, r: seen.append((op.name, r.dtype)))
    assert seen == [("nn.rms_norm", torch.bfloat16), ("nn.silu", torch.bfloat16), ("nn.cross_entropy", torch.float32)]


def test_nn_errors_are_located_coda_errors():
    # a target outside [0, V) that is not the ignore index: a run-time error naming the op and where it is
    with pytest.raises(ArgumentError) as info:
        run_reference(NN_FN, _nn_inputs((0, 6, -100, 2, 3)), torch.float64)
    assert "'nn.cross_entropy' at <input>:4:3: target 6 at row 1 is out of range [0, 6)" in str(info.value)
    assert info.value.argument == "targets"
    # an op the nn interpreter has no rule for: a located CompileError, before anything runs
    text = """func.func @f(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %r = "nn.relu"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %y = arith.addf %r, %r : tensor<2x3xf32>
  func.return %y : tensor<2x3xf32>
}"""
    with pytest.raises(CompileError, match=r"^<input>:3:3: error: 'arith.addf' op is not an nn op"):
        run_reference(text, [torch.zeros(2, 3)], torch.float64)
    # bad inputs: ArgumentErrors (still the ValueErrors they were), in both interpreters
    with pytest.raises(ArgumentError, match="takes 3 inputs, got 1"):
        run_reference(NN_FN, [torch.zeros(5, 6)])
    with pytest.raises(ArgumentError, match=r"input #1 has shape \(5,\)"):
        run_reference(NN_FN, [torch.zeros(5, 6), torch.zeros(5), torch.zeros(5, dtype=torch.int32)])
    with pytest.raises(ArgumentError, match="input #2 must be an integer tensor"):
        run_reference(NN_FN, [torch.zeros(5, 6), torch.zeros(6), torch.zeros(5)])
    with pytest.raises(ArgumentError, match="no func.func @g"):
        run_reference(NN_FN, _nn_inputs(), func_name="g")
    with pytest.raises(ArgumentError, match="takes 6 inputs"):
        run_coda(GEMM_EPILOGUE, [randn(5, 7)])
    with pytest.raises(CompileError, match="<input>:1:"):
        run_reference("func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> { func.return %y : tensor<2xf32> }", [torch.zeros(2)])


def test_nn_bug_is_an_internal_error(monkeypatch):
    import coda_ir.interpreters.nn as nn_interpreters

    def broken(x, w, eps):
        raise KeyError("oops")

    monkeypatch.setattr(nn_interpreters, "_rms_norm", broken)
    with pytest.raises(InternalError, match=r"(?s)interpreting 'nn.rms_norm' at <input>:2:3: KeyError.*bug in coda-ir") as info:
        run_reference(NN_FN, _nn_inputs(), torch.float64)
    assert isinstance(info.value.__cause__, KeyError)


def test_coda_interpreter_limit_is_an_internal_error():
    """A constant the coda interpreter has no value for (a dense arith.constant in a scalar body)
    is coda-ir's limit, reported as an internal error, never a raw NotImplementedError."""
    from xdsl.dialects.builtin import StringAttr

    from coda_ir import parse

    module = parse(GEMM_EPILOGUE)
    const = next(op for op in module.walk() if op.name == "arith.constant")
    const.properties["value"] = StringAttr("not a number")
    inputs = [randn(5, 7, seed=1), randn(6, 7, seed=2), randn(5, seed=3), randn(3, seed=4), randn((), seed=5), randn(5, 6, seed=6)]
    with pytest.raises(InternalError, match=r"(?s)interpreting @.*NotImplementedError.*bug in coda-ir") as info:
        run_coda(module, inputs)
    assert isinstance(info.value.__cause__, NotImplementedError)
