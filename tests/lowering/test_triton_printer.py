"""The `tl` dialect's verifiers and the printer (`lowering/triton_printer.py`) on hand-built IR.

A kernel built op by op is printed, imported as a `@triton.jit` function and run by Triton's
interpreter on CPU against a float64 reference: what the IR says is what runs. The verifiers
refuse ill-typed ops. The printer's textual choices (minimal parentheses, loads and carried
values written in place) keep the program: checked against the fully parenthesized form for
all expression trees (hypothesis) and on the cases that must not be written in place.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import uuid

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects import arith, math, scf
from xdsl.dialects.builtin import bf16, f32, i1, i32, i64
from xdsl.ir import Block, SSAValue
from xdsl.utils.exceptions import VerifyException

from coda_ir.dialects import triton_lang as tl
from coda_ir.lowering.triton import PRELUDE
from coda_ir.lowering.triton_printer import KernelPrinter, print_kernel
from coda_ir.lowering.tl_build import Builder


def _load(lines: list[str], tmp_path, name: str):
    path = tmp_path / f"tl_{uuid.uuid4().hex}.py"
    path.write_text(PRELUDE + "\n\n" + "\n".join(lines) + "\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


def _row_softmax_sum_kernel() -> tl.KernelOp:
    """out[r] = sum_c exp(x[r, c] - max_c x[r, c]) over C columns in tiles of BC (a loop
    carrying the running sum), rows masked at R; bf16 output rounded by the prelude."""
    k = tl.KernelOp("k", [("x_ptr", tl.PointerType(f32)), ("out_ptr", tl.PointerType(bf16)), ("R", i32), ("C", i32),
                          ("BR", i32), ("BC", i32)], 2)
    x_ptr, out_ptr, R, C, BR, BC = k.body.block.args
    b = Builder(k.body.block)
    pid = b.value(tl.ProgramIdOp(0), "pid")
    rows = b.ibin(arith.AddiOp, b.ibin(arith.MuliOp, pid, BR), b.value(tl.ArangeOp(BR)), "rows")
    mask = b.cmpi("slt", rows, R, "mask")
    base = b.value(tl.AddPtrOp(x_ptr, b.ibin(arith.MuliOp, b.value(tl.ExpandDimsOp(rows, 1)), C)), "row_ptrs")
    lanes = b.value(tl.ArangeOp(BC), "lanes")
    neg_inf = b.const(float("-inf"), f32)
    zero_i = b.const(0, i32)

    def loop(init, step, hint):
        body = Block(arg_types=[i32, init.type])
        inner = Builder(body)
        cols = inner.value(tl.ExpandDimsOp(inner.ibin(arith.AddiOp, body.args[0], lanes), 0), "cols")
        m = inner.ibin(arith.AndIOp, inner.value(tl.ExpandDimsOp(mask, 1)), inner.cmpi("slt", cols, C))
        x = inner.value(tl.LoadOp(inner.value(tl.AddPtrOp(base, cols)), m, neg_inf), "x")
        inner.add(scf.YieldOp(step(inner, body.args[1], x)))
        return b.add(scf.ForOp(zero_i, C, BC, [init], [body]), hint).results[0]

    mx = loop(b.value(tl.FullOp([BR, BC], neg_inf, f32)), lambda k, a, x: k.fbin(arith.MaximumfOp, a, x), "mx")
    rmax = b.value(tl.ExpandDimsOp(b.value(tl.ReduceOp("max", mx, 1)), 1), "rmax")
    total = loop(b.value(tl.FullOp([BR, BC], b.const(0.0, f32), f32)),
                 lambda k, a, x: k.fbin(arith.AddfOp, a, k.unary(math.ExpOp, k.fbin(arith.SubfOp, x, rmax))), "s")
    out = b.store_cast(b.value(tl.ReduceOp("sum", total, 1)), bf16)
    b.add(tl.StoreOp(b.value(tl.AddPtrOp(out_ptr, rows)), out, mask))
    return k


def test_printed_kernel_runs_as_built(tmp_path):
    kernel = _row_softmax_sum_kernel()
    kernel.verify()
    lines = print_kernel(kernel)
    text = "\n".join(lines)
    assert lines[:2] == ["@triton.jit", "def k(x_ptr, out_ptr, R, C, BR: tl.constexpr, BC: tl.constexpr):"]
    assert "for " in text and "_coda_round_bf16(" in text and "tl.exp(" in text
    fn = _load(lines, tmp_path, "k")
    R, C, BR, BC = 37, 45, 16, 16
    x = torch.randn(R, C, generator=torch.Generator().manual_seed(3))
    out = torch.full((R,), float("nan"), dtype=torch.bfloat16)
    fn[(triton_cdiv(R, BR),)](x, out, R, C, BR=BR, BC=BC)
    xd = x.double()
    ref = torch.exp(xd - xd.max(1, keepdim=True).values).sum(1)
    torch.testing.assert_close(out.double(), ref, rtol=8e-3, atol=0)  # one bf16 rounding


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def test_constant_expressions_stay_python_literals():
    """A value computed from constants only is written in place (Python folds it in double
    precision at trace time); a pure value used once in its block is written at its use."""
    k = tl.KernelOp("c", [("o", tl.PointerType(f32))], 0)
    b = Builder(k.body.block)
    c = b.fbin(arith.MulfOp, b.const(2.0, f32), b.const(3.0, f32))
    v = b.value(tl.FullOp([], c, f32))
    b.add(tl.StoreOp(k.body.block.args[0], b.unary(math.ExpOp, v)))
    assert print_kernel(k)[2:] == ["    tl.store(o, tl.exp(tl.full((), 2.0 * 3.0, tl.float32)))"]


def test_verifiers_refuse_ill_typed_ops():
    k = tl.KernelOp("v", [("p", tl.PointerType(f32)), ("q", tl.PointerType(bf16)), ("n", i32)], 0)
    p, q, n = k.body.block.args
    b = Builder(k.body.block)
    rows = b.value(tl.ArangeOp(n))
    with pytest.raises(VerifyException, match="storing"):
        tl.StoreOp(q, b.value(tl.LoadOp(p))).verify()  # f32 through a bf16 pointer
    with pytest.raises(VerifyException, match="mask is boolean"):
        tl.LoadOp(b.value(tl.AddPtrOp(p, rows)), rows).verify()
    with pytest.raises(VerifyException, match="needs a mask"):
        op = tl.LoadOp(b.value(tl.AddPtrOp(p, rows)), None, b.const(0.0, f32))
        op.verify()
    with pytest.raises(VerifyException, match="axis out of range"):
        tl.ReduceOp("sum", b.value(tl.CastOp(rows, f32)), 1).verify()
    with pytest.raises(VerifyException, match="unknown predicate"):
        tl.CmpIOp("olt", rows, rows).verify()
    with pytest.raises(VerifyException, match="base must be a pointer"):
        tl.AddPtrOp(rows, rows).verify()
    with pytest.raises(VerifyException, match="constexpr parameters are integers"):
        tl.KernelOp("w", [("p", tl.PointerType(f32))], 1).verify()
    with pytest.raises(VerifyException, match="distinct identifiers"):
        tl.KernelOp("w", [("p", i32), ("p", i32)], 0).verify()
    with pytest.raises(VerifyException, match="condition is boolean"):
        tl.WhereOp(rows, rows, rows).verify()
    good = tl.CmpIOp("slt", rows, rows)
    good.verify()
    assert good.result.type == tl.dynamic_tensor(i1, 1)
    assert tl.AtomicAddOp(b.value(tl.AddPtrOp(p, n)), b.const(1.0, f32)).result.type == f32
    with pytest.raises(VerifyException, match="scalar of the pointee type"):
        tl.AtomicAddOp(p, b.const(1, i64)).verify()


# ---------------------------------------------------------------- textual choices keep the program

_OPS = {"+": arith.AddfOp, "-": arith.SubfOp, "*": arith.MulfOp, "/": arith.DivfOp}


def _expression_kernel(tree) -> tuple[tl.KernelOp, list[SSAValue]]:
    """A kernel storing the value of `tree` (nested tuples (op, lhs, rhs), ("neg", x), ("<", a, b)
    for a comparison selecting between its operands, or a leaf index into the scalar parameters)."""
    k = tl.KernelOp("e", [("o", tl.PointerType(f32)), *[(f"x{i}", f32) for i in range(4)]], 0)
    o, *xs = k.body.block.args
    b = Builder(k.body.block)

    def build(t):
        if isinstance(t, int):
            return xs[t]
        if t[0] == "neg":
            return b.value(arith.NegfOp(build(t[1])))
        if t[0] == "<":
            lhs, rhs = build(t[1]), build(t[2])
            return b.where(b.cmpf("olt", lhs, rhs), lhs, rhs)
        return b.fbin(_OPS[t[0]], build(t[1]), build(t[2]))

    b.add(tl.StoreOp(o, build(tree)))
    return k, xs


def _stored_expression(lines: list[str]) -> ast.AST:
    (store,) = [line for line in lines if "tl.store(" in line]
    return ast.parse(store.strip()).body[0].value.args[1]  # type: ignore[attr-defined]


_trees = st.recursive(
    st.integers(0, 3),
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(sorted(_OPS)), inner, inner),
        st.tuples(st.just("neg"), inner),
        st.tuples(st.just("<"), inner, inner),
    ),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None)
@given(_trees)
def test_minimal_parentheses_parse_to_the_fully_parenthesized_program(tree):
    """A kernel printed whole writes only the parentheses Python needs: for every expression it
    parses to the same AST as the gemm fragments' form, which parenthesizes every operation."""
    kernel, _ = _expression_kernel(tree)
    kernel.verify()
    minimal = print_kernel(kernel)
    full = KernelPrinter(kernel)
    full.minimal = False
    assert ast.dump(_stored_expression(minimal)) == ast.dump(_stored_expression(full.print()))


def test_loads_are_written_in_place_only_where_no_store_comes_between():
    k = tl.KernelOp("l", [("p", tl.PointerType(f32)), ("q", tl.PointerType(f32))], 0)
    p, q = k.body.block.args
    b = Builder(k.body.block)
    early = b.value(tl.LoadOp(p))  # a store to p comes before its use: named where it is read
    b.add(tl.StoreOp(p, b.const(1.0, f32)))
    late = b.value(tl.LoadOp(p))  # nothing between it and its use: written in place
    b.add(tl.StoreOp(q, b.fbin(arith.AddfOp, early, late)))
    assert print_kernel(k)[2:] == ["    v = tl.load(p)", "    tl.store(p, 1.0)", "    tl.store(q, v + tl.load(p))"]


def test_carried_values_are_assigned_where_made_only_when_no_later_read_needs_the_old_one():
    """`acc = acc + x` where the new value is made when the old one is not read after it; else
    the new value gets its own name and the carried variable is reassigned at the end."""
    k = tl.KernelOp("f", [("o", tl.PointerType(f32)), ("n", i32)], 0)
    o, n = k.body.block.args
    b = Builder(k.body.block)
    zero, one = b.const(0.0, f32), b.const(1.0, f32)
    body = Block(arg_types=[i32, f32, f32])
    body.args[0].name_hint, body.args[1].name_hint, body.args[2].name_hint = "i", "acc", "old"
    inner = Builder(body)
    new_acc = inner.fbin(arith.AddfOp, body.args[1], one)  # acc not read after: in place
    new_old = inner.fbin(arith.MulfOp, body.args[2], one)
    later = inner.fbin(arith.AddfOp, new_old, body.args[2])  # reads old after its new value
    inner.add(scf.YieldOp(new_acc, later))
    loop = b.add(scf.ForOp(b.const(0, i32), n, b.const(1, i32), [zero, zero], [body]))
    b.add(tl.StoreOp(o, b.fbin(arith.AddfOp, loop.results[0], loop.results[1])))
    assert print_kernel(k)[2:] == [
        "    acc = 0.0",
        "    old = 0.0",
        "    for i in range(0, n):",
        "        acc = acc + 1.0",
        "        old = old * 1.0 + old",
        "    tl.store(o, acc + old)",
    ]


def test_readme_tl_example_is_what_the_pass_builds_and_the_printer_prints():
    """The README's `scale.mlir`: its tl excerpt (lines in order, `...` skipping) is the pass's
    output and its Python kernel the printed one, exactly."""
    import io
    import re
    from pathlib import Path

    from xdsl.printer import Printer

    import coda_ir

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    source = next(s for s in re.findall(r"```mlir\n(.*?)```", readme, re.S) if "func.func @scale" in s)
    excerpt = next(s for s in re.findall(r"```mlir\n(.*?)```", readme, re.S) if "tl.kernel @_scale_k0" in s)
    kernel = next(s for s in re.findall(r"```python\n(.*?)```", readme, re.S) if "def _scale_k0" in s)
    module = coda_ir.lower(coda_ir.parse(source), "coda-legalize,convert-coda-to-tl")
    out = io.StringIO()
    Printer(stream=out).print_op(next(op for op in module.ops if isinstance(op, tl.KernelOp)))
    built = [line.rstrip() for line in out.getvalue().splitlines()]
    at = 0
    for line in excerpt.rstrip().splitlines():
        if line.strip() == "...":
            continue
        assert line in built[at:], f"not in the pass's output (in order): {line}"
        at = built.index(line, at) + 1
    printed = coda_ir.compile(source, pipeline=None).source
    assert kernel in printed
