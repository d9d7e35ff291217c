"""`epilogue_schedule` (coda_ir/analysis/epilogue_schedule.py, obeyed by the epilogue lowering,
coda_ir/lowering/tl_epilogue.py): each output of a multi-output `coda.map` is
made at its first reader, and a column partial of such an output runs after the stores it does
not feed (issue 11; bench/RESULTS.md 2026-11-25 session 9).

Every primitive is pure and each result has its own output, so the order must not change a
single bit: each kernel here is run with the library's schedule and with the previous one
(whole ops in program order, `previous_schedule`), and both are checked against the float64
reference (`helpers.check`, the NN_DIALECT.md bar) and against each other bit for bit.
"""

from __future__ import annotations

import re

from pathlib import Path

import pytest
import torch

import coda_ir
from coda_ir import testing
from coda_ir.analysis.epilogue_schedule import partials_after_last_use
from coda_ir.dialects import coda
from coda_ir.analysis import epilogue_schedule as schedule
from coda_ir.lowering import tl_epilogue

from .helpers import check
from .test_primitives import gemm_program

ROOT = Path(__file__).resolve().parents[2]

# The RMSNorm backward + residual gradient epilogue as nn-to-coda derives it (QKV dgrad of the
# LLaMA block): dx = rstd (acc g - (x rstd) (dot rstd / D)) + dres, and the weight gradient's
# column partials sum_m acc (x rstd).
NORM_BWD = """
    %x = coda.load %x_in2 : tensor<{M}x{N}x{T}> -> !coda.tile<{M}x{N}xf32>
    %gb = coda.broadcast %g cols : tensor<{N}x{T}> -> !coda.tile<{M}x{N}xf32>
    %rb = coda.broadcast %rstd rows : tensor<{M}xf32> -> !coda.tile<{M}x{N}xf32>
    %db = coda.broadcast %dot rows : tensor<{M}xf32> -> !coda.tile<{M}x{N}xf32>
    %dn, %wg = coda.map %acc, %x, %gb, %rb, %db : (!coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>) -> (!coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>) {{
    ^bb0(%e0: f32, %xv: f32, %gv: f32, %rv: f32, %dv: f32):
      %ag = arith.mulf %e0, %gv : f32
      %xh = arith.mulf %xv, %rv : f32
      %k = arith.constant 0.015625 : f32
      %dk = arith.mulf %dv, %k : f32
      %c = arith.mulf %xh, %dk : f32
      %s = arith.subf %ag, %c : f32
      %d = arith.mulf %rv, %s : f32
      %w = arith.mulf %e0, %xh : f32
      coda.yield %d, %w : f32, f32
    }}
    %dw = coda.reduce sum %wg dim 0 : !coda.tile<{M}x{N}xf32> -> !coda.partials<cols, {N}, sum>
    %dx = coda.accumulate %dn, %dres : !coda.tile<{M}x{N}xf32>, tensor<{M}x{N}x{T}>
    coda.yield %dw, %dx : !coda.partials<cols, {N}, sum>, !coda.tile<{M}x{N}xf32>"""
NORM_INS = [("x_in2", "tensor<{M}x{N}x{T}>"), ("g", "tensor<{N}x{T}>"), ("rstd", "tensor<{M}xf32>"),
            ("dot", "tensor<{M}xf32>"), ("dres", "tensor<{M}x{N}x{T}>")]
NORM_RESULTS = ["!coda.partials<cols, {N}, sum>", "tensor<{M}x{N}x{T}>"]


def norm_program(m: int = 37, n: int = 70, k: int = 19) -> str:
    return gemm_program(NORM_BWD, NORM_INS, NORM_RESULTS, tb=True, m=m, n=n, k=k)


def previous_schedule(block):
    """The order before session 9: whole ops, partial reductions after the last tile use."""
    ops = [op for op in block.ops if not isinstance(op, coda.YieldOp)]
    return [schedule.EpilogueStep(op, tuple(range(len(op.results)))) for op in partials_after_last_use(ops)]


def region(text: str, pipeline=None, origin: str | None = None):
    module = coda_ir.lower(coda_ir.parse(text), pipeline)
    for op in module.walk():
        if isinstance(op, (coda.GemmOp, coda.ElementwiseOp)):
            if origin is None or origin in str(op.attributes.get("coda.origin")):
                return (op.epilogue if isinstance(op, coda.GemmOp) else op.body).blocks[0]
    raise AssertionError(f"no kernel with origin {origin}")


def describe(steps) -> list[tuple[str, tuple[int, ...], int | None]]:
    return [(s.op.name, s.results, None if s.body is None else len(s.body)) for s in steps]


def epilogue_of(source: str) -> str:
    """The first kernel's epilogue text (its first copy: the TMA branch)."""
    start = source.index("# ---- epilogue ----")
    return source[start:source.index("    else:", start)]


def run_both(monkeypatch, text: str, seed: int = 0, int_high=None):
    """The kernel with the library's schedule and with `previous_schedule`: both against the
    reference; every output bitwise equal between the two."""
    cm_new, inputs, new = check(text, seed=seed, int_high=int_high)
    monkeypatch.setattr(tl_epilogue, "epilogue_schedule", previous_schedule)
    cm_old, _, old = check(text, inputs=inputs, int_high=int_high)
    monkeypatch.undo()
    assert cm_new.source != cm_old.source  # the order did change
    for i, (a, b) in enumerate(zip(new, old)):
        assert torch.equal(a, b), f"result #{i} differs between the two orders"
    return cm_new


def test_norm_backward_steps():
    """The map's residual-gradient output at the accumulate that reads it, its weight-gradient
    output (only `acc * (x rstd)`, one scalar op) just before the column reduction, which
    runs last."""
    steps = schedule.epilogue_schedule(region(norm_program()))
    assert describe(steps) == [
        ("coda.load", (0,), None), ("coda.broadcast", (0,), None), ("coda.broadcast", (0,), None),
        ("coda.broadcast", (0,), None),
        ("coda.map", (0,), 7),  # ag, xh, k, dk, c, s, d
        ("coda.accumulate", (0,), None),
        ("coda.map", (1,), 1),  # w = a * xh
        ("coda.reduce", (0,), None),
    ]
    assert [op.results[0].name_hint for op in steps[6].body] == ["w"]


def test_norm_backward_residual_stored_before_column_partials(monkeypatch):
    """The emitted kernel stores dx before it computes acc * (x rstd) and reduces it over the
    rows; same bits as the previous order (which made both map outputs and reduced first)."""
    cm = run_both(monkeypatch, norm_program(), seed=3)
    epi = epilogue_of(cm.source)
    marks = ["# coda.map results 0", "t_dx = t_dn + ", "_coda_round_bf16(t_dx)", "# coda.map results 1",
             "t_wg = ", "tl.sum(rm, axis=0)", "# store partials [L, tiles_m]"]
    at = [epi.index(mark) for mark in marks]
    assert at == sorted(at), epi
    # the weight-gradient product is the one op between the store and the reduction
    between = epi[epi.index("_coda_round_bf16(t_dx)"):epi.index("# coda.reduce")]
    assigned = re.findall(r"^\s*(\w+) = (.*)$", between, re.M)
    assert len(assigned) == 1 and assigned[0][0] == "t_wg" and assigned[0][1].startswith("acc * "), between


# A 3-output map (LayerNorm backward statistics, GPT-2): two outputs reduced over rows, one
# over columns, the rounded accumulator reduced over columns too and yielded.
LN_STATS = """
    %ar = coda.map %acc : !coda.tile<{M}x{N}xf32> -> !coda.tile<{M}x{N}xf32> {{
    ^bb0(%e0: f32):
      %h = arith.truncf %e0 : f32 to bf16
      %f = arith.extf %h : bf16 to f32
      coda.yield %f : f32
    }}
    %x = coda.load %x_in : tensor<{M}x{N}x{T}> -> !coda.tile<{M}x{N}xf32>
    %gb = coda.broadcast %g cols : tensor<{N}x{T}> -> !coda.tile<{M}x{N}xf32>
    %mb = coda.broadcast %mean rows : tensor<{M}xf32> -> !coda.tile<{M}x{N}xf32>
    %rb = coda.broadcast %rstd rows : tensor<{M}xf32> -> !coda.tile<{M}x{N}xf32>
    %o0, %o1, %o2 = coda.map %ar, %x, %gb, %mb, %rb : (!coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>) -> (!coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>) {{
    ^bb0(%av: f32, %xv: f32, %gv: f32, %mv: f32, %rv: f32):
      %ag = arith.mulf %av, %gv : f32
      %xc = arith.subf %xv, %mv : f32
      %xh = arith.mulf %xc, %rv : f32
      %p1 = arith.mulf %ag, %xh : f32
      %p2 = arith.mulf %av, %xh : f32
      coda.yield %ag, %p1, %p2 : f32, f32, f32
    }}
    %r0 = coda.reduce sum %o0 dim 1 : !coda.tile<{M}x{N}xf32> -> !coda.partials<rows, {M}, sum>
    %r1 = coda.reduce sum %o1 dim 1 : !coda.tile<{M}x{N}xf32> -> !coda.partials<rows, {M}, sum>
    %c2 = coda.reduce sum %o2 dim 0 : !coda.tile<{M}x{N}xf32> -> !coda.partials<cols, {N}, sum>
    %ca = coda.reduce sum %ar dim 0 : !coda.tile<{M}x{N}xf32> -> !coda.partials<cols, {N}, sum>
    coda.yield %acc, %r0, %r1, %c2, %ca : !coda.tile<{M}x{N}xf32>, !coda.partials<rows, {M}, sum>, !coda.partials<rows, {M}, sum>, !coda.partials<cols, {N}, sum>, !coda.partials<cols, {N}, sum>"""
LN_INS = [("x_in", "tensor<{M}x{N}x{T}>"), ("g", "tensor<{N}x{T}>"), ("mean", "tensor<{M}xf32>"), ("rstd", "tensor<{M}xf32>")]
LN_RESULTS = ["tensor<{M}x{N}x{T}>", "!coda.partials<rows, {M}, sum>", "!coda.partials<rows, {M}, sum>",
              "!coda.partials<cols, {N}, sum>", "!coda.partials<cols, {N}, sum>"]


def test_three_outputs_each_at_its_reduction(monkeypatch):
    """Each output right before the reduction that reads it; the one over columns last. The
    column partial of the rounded accumulator (not a map output: deferring it would keep its
    tile live) stays after its last tile use."""
    text = gemm_program(LN_STATS, LN_INS, LN_RESULTS, tb=True, m=37, n=70, k=19)
    steps = schedule.epilogue_schedule(region(text))
    got = [(s.op.name, s.results, None if s.body is None else len(s.body)) for s in steps]
    assert got == [
        ("coda.map", (0,), None), ("coda.load", (0,), None), ("coda.broadcast", (0,), None),
        ("coda.broadcast", (0,), None), ("coda.broadcast", (0,), None),
        ("coda.map", (0,), 1), ("coda.reduce", (0,), None),  # ag, its row sum
        ("coda.map", (1,), 3), ("coda.reduce", (0,), None),  # xc, xh, p1, its row sum
        ("coda.reduce", (0,), None),  # %ca: after the 3-output map, its last tile use
        ("coda.map", (2,), 1), ("coda.reduce", (0,), None),  # p2, its column sum: last
    ]
    assert steps[9].op.results[0].name_hint == "ca" and steps[11].op.results[0].name_hint == "c2"
    run_both(monkeypatch, text, seed=5)


# Outputs read by one op come in one step, the whole map as before; a yielded output is made
# (and stored) at the map; a deferred output read first by another multi-output map is made
# before that map's step, wherever that lands.
CHAIN = """
    %y, %u, %v = coda.map %acc : !coda.tile<{M}x{N}xf32> -> (!coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>) {{
    ^bb0(%e0: f32):
      %two = arith.constant 2.0 : f32
      %t = arith.mulf %e0, %two : f32
      %q = arith.mulf %e0, %e0 : f32
      %dead = arith.addf %q, %two : f32
      %e = math.exp %q : f32
      coda.yield %t, %q, %e : f32, f32, f32
    }}
    %rl = coda.load %r_in : tensor<{M}x{N}x{T}> -> !coda.tile<{M}x{N}xf32>
    %s = coda.accumulate %y, %r_in : !coda.tile<{M}x{N}xf32>, tensor<{M}x{N}x{T}>
    %p, %w = coda.map %u, %rl : (!coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>) -> (!coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>) {{
    ^bb0(%uv: f32, %rv: f32):
      %pv = arith.subf %uv, %rv : f32
      %wv = arith.mulf %uv, %rv : f32
      coda.yield %pv, %wv : f32, f32
    }}
    %cw = coda.reduce sum %w dim 0 : !coda.tile<{M}x{N}xf32> -> !coda.partials<cols, {N}, sum>
    %rowv = coda.reduce max %v dim 1 : !coda.tile<{M}x{N}xf32> -> !coda.partials<rows, {M}, max>
    coda.yield %y, %s, %p, %cw, %rowv : !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>, !coda.partials<cols, {N}, sum>, !coda.partials<rows, {M}, max>"""
CHAIN_RESULTS = ["tensor<{M}x{N}x{T}>", "tensor<{M}x{N}x{T}>", "tensor<{M}x{N}x{T}>", "!coda.partials<cols, {N}, sum>",
                 "!coda.partials<rows, {M}, max>"]


def test_yielded_outputs_at_the_map_deferred_ones_at_their_reader(monkeypatch):
    text = gemm_program(CHAIN, [("r_in", "tensor<{M}x{N}x{T}>")], CHAIN_RESULTS, dt="f32", tb=True, m=37, n=70, k=19)
    steps = schedule.epilogue_schedule(region(text))
    first, second = steps[0].op, steps[4].op
    got = [(s.op, s.results, None if s.body is None else [o.name for o in s.body]) for s in steps]
    assert got == [
        (first, (0,), ["arith.constant", "arith.mulf"]),  # y: yielded, made and stored at the map
        (steps[1].op, (0,), None),  # load
        (steps[2].op, (0,), None),  # accumulate (reads y)
        (first, (1,), ["arith.mulf"]),  # u: before the step of the map that reads it ...
        (second, (0,), ["arith.subf"]),  # ... p: yielded, at the second map's place
        (first, (2,), ["arith.addf", "math.exp"]),  # v, at its row max; the dead op on the last step
        (steps[6].op, (0,), None),  # the row max of v
        (second, (1,), ["arith.mulf"]),  # w, only reduced over columns: last
        (steps[8].op, (0,), None),  # its column partial
    ]
    assert [steps[i].op.name for i in (1, 2, 6, 8)] == ["coda.load", "coda.accumulate", "coda.reduce", "coda.reduce"]
    assert steps[6].op.dim.value.data == 1 and steps[8].op.dim.value.data == 0
    run_both(monkeypatch, text, seed=9)


def test_outputs_read_by_one_op_stay_one_step():
    """Both outputs of RoPE's cos/sin map are read by its pair_map: one step, the whole map,
    the code as before (no `results` tag)."""
    text = gemm_program("""
    %c, %s = coda.map %acc : !coda.tile<{M}x{N}xf32> -> (!coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>) {{
    ^bb0(%e0: f32):
      %cv = math.cos %e0 : f32
      %sv = math.sin %e0 : f32
      coda.yield %cv, %sv : f32, f32
    }}
    %y = coda.map %c, %s : (!coda.tile<{M}x{N}xf32>, !coda.tile<{M}x{N}xf32>) -> !coda.tile<{M}x{N}xf32> {{
    ^bb0(%x0: f32, %x1: f32):
      %m = arith.mulf %x0, %x1 : f32
      coda.yield %m : f32
    }}
    coda.yield %y : !coda.tile<{M}x{N}xf32>""", [], ["tensor<{M}x{N}xf32>"], dt="f32", m=21, n=40, k=16)
    steps = schedule.epilogue_schedule(region(text))
    assert describe(steps) == [("coda.map", (0, 1), None), ("coda.map", (0,), None)]
    cm, _, _ = check(text, seed=1)
    assert "# coda.map results" not in cm.source


def test_schedule_is_a_function_of_the_ir():
    """The same IR (parsed again, or printed and parsed back) gives the same kernels."""
    text = norm_program()
    a = coda_ir.compile(text, pipeline=None).source
    b = coda_ir.compile(text, pipeline=None).source
    printed = str(coda_ir.lower(coda_ir.parse(text), None))
    c = coda_ir.compile(printed, pipeline=None).source
    assert a == b == c


@pytest.mark.parametrize("name", ["llama_block", "lm_head"])
def test_derived_norm_backward_order_and_gradients(name):
    """The derived programs (nn-autodiff, nn-to-coda) whose RMSNorm backward takes a matmul
    epilogue: in every such kernel the residual / input gradient is stored before the weight
    gradient's column partial is computed, and f's results and every gradient meet the bar."""
    path = ROOT / "tests" / "programs" / "nn" / f"{name}.mlir"
    text = path.read_text()
    # the epilogue form (nn-plan's default puts the LLaMA norm backward in a separate pass)
    program = coda_ir.compile(text, pipeline="nn-autodiff,nn-to-coda{norm-grad=epilogue}")
    src = program.source
    # the tl kernels (the Gluon section after them prints the same schedule per row sub-tile)
    tl_part = src.split("\nif _CODA_GLUON:")[0]
    kernels = [k for k in tl_part.split("@triton.jit") if "# coda.map results 1" in k and "tl.sum(rm, axis=0)" in k]
    assert kernels, "no split norm-backward epilogue"
    for k in kernels:
        epi = epilogue_of(k)
        later = epi.index("# coda.map results 1")
        assert epi.index("tl.sum(rm, axis=0)") > later
        if "_coda_round_bf16(" in epi:  # bf16 tile store(s): all before the late output
            assert epi.rindex("_coda_round_bf16(") < later
    inputs = testing.random_inputs(text, seed=0)
    loss = (testing.program_dtype_of(text), inputs[0].shape[0]) if name == "lm_head" else None
    results = testing.check_gradients(program, text, inputs, seed=0, loss=loss)
    assert results and all(r.ok for r in results), [(r.name, r.ratio) for r in results if not r.ok]
