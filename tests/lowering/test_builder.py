"""The Python builder API, including the exact example of the README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import coda_ir
from coda_ir.builder import FunctionBuilder, ModuleBuilder, exp, sigmoid, where
from coda_ir.testing import check_close

DOC = Path(__file__).resolve().parents[2] / "README.md"


def doc_snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_readme_example_runs_and_matches_pytorch(capsys):
    snippet = next(s for s in doc_snippets() if "FunctionBuilder(\"rms_swiglu\"" in s)
    scope: dict = {}
    exec(compile(snippet, str(DOC), "exec"), scope)
    assert "3 kernels, max |y - ref|" in capsys.readouterr().out
    y, x, g, w, ref, F = (scope[k] for k in ("y", "x", "g", "w_gu", "ref", "F"))
    # the numerics bar against the op-by-op bf16 computation in PyTorch
    xb = x.float()
    hb = torch.nn.functional.rms_norm(xb, (x.shape[1],), g.float(), 1e-6).bfloat16()
    zb = (hb.float() @ w.float().T).bfloat16().float()
    ref_t = (torch.nn.functional.silu(zb[:, :F]).bfloat16().float() * zb[:, F:]).bfloat16()
    ok, err, allowed = check_close(y, ref, ref_t)
    assert ok, (err, allowed)
    assert scope["program"].kernel_count("rms_swiglu") == 3


def test_readme_interpreter_example_runs(capsys):
    """The README's coda-interpreter snippet, run after the builder example it continues."""
    snippets = doc_snippets()
    builder = next(s for s in snippets if "FunctionBuilder(\"rms_swiglu\"" in s)
    interp = next(s for s in snippets if "from coda_ir.interpreters import run_coda" in s)
    scope: dict = {}
    exec(compile(builder, str(DOC), "exec"), scope)
    exec(compile(interp, str(DOC), "exec"), scope)
    assert "interpreter: ok=True" in capsys.readouterr().out
    assert scope["ref64"].dtype == torch.float64 and scope["ref_t"].dtype == torch.bfloat16
    # the interpreter's float64 meaning of the program is the PyTorch formula of the builder example
    torch.testing.assert_close(scope["ref64"], scope["ref"], rtol=1e-12, atol=1e-12)


def test_builder_module_prints_and_round_trips():
    fb = FunctionBuilder("f", a=((37, 40), "f32"), w=((48, 40), "f32"), bias=((48,), "f32"), t=((37,), "i32"))
    with fb.gemm(fb.a, fb.w, transpose_b=True) as k:
        x = k.shift(k.acc, fb.bias, "cols")
        j = k.index("cols")
        y = k.map(x, j, fn=lambda v, c: where(c < 10, exp(-v * v), v))
        k.yield_(y, k.reduce("lse", x), k.select(x, fb.t))
    y, lse, sel = k.results
    loss = fb.fold([lse, sel], lambda l, s: (l - s, l - s), out=["rows", "sum"], finalize=lambda tot: tot * (1.0 / 37))
    fb.returns(y, *loss)
    text = str(fb.module)
    assert "coda.gemm" in text and "coda.fold" in text and "finalize" in text
    program = coda_ir.compile(text, pipeline=None)
    a, w, b = torch.randn(37, 40), torch.randn(48, 40), torch.randn(48)
    t = torch.randint(0, 48, (37,), dtype=torch.int32)
    out, per_row, mean = program.f(a, w, b, t)
    z = a.double() @ w.double().T + b.double()
    cols = torch.arange(48)
    ref = torch.where(cols < 10, torch.exp(-z * z), z)
    assert torch.allclose(out.double(), ref, atol=1e-5, rtol=1e-5)
    ce = torch.logsumexp(z, 1) - z.gather(1, t.long()[:, None])[:, 0]
    assert torch.allclose(per_row.double(), ce, atol=1e-5)
    assert torch.allclose(mean.double(), ce.mean(), atol=1e-5)


def test_module_builder_and_errors():
    mb = ModuleBuilder()
    f1 = mb.function("one", x=((16, 32), "f16"))
    with f1.elementwise((16, 32), out_dtype="f16") as k:
        k.yield_(k.map(k.load(f1.x), fn=lambda v: sigmoid(v)))
    f1.returns(k.results[0])
    f2 = mb.function("two", x=((16, 32), "f16"))
    f2.returns(f2.x)
    program = coda_ir.compile(mb.module, pipeline=None)
    x = torch.randn(16, 32).half()
    assert torch.allclose(program.one(x).float(), torch.sigmoid(x.float()), atol=1e-3)
    assert torch.equal(program.two(x), x)
    assert program.kernel_count("two") == 0
    with pytest.raises(ValueError, match="never called yield_"):
        with f1.elementwise((16, 32)) as k:
            pass
    with pytest.raises(AttributeError, match="no nn op 'nope'"):
        f1.nn.nope


def test_nn_graph_builder():
    doc = next(s for s in doc_snippets() if 'FunctionBuilder("mlp"' in s)
    build, _, _ = doc.partition("program = ")
    scope: dict = {"FunctionBuilder": FunctionBuilder}
    exec(build, scope)
    text = str(scope["fb"].module)
    for op in ("nn.rms_norm", "nn.linear", "nn.swiglu", "func.return"):
        assert op in text
    from coda_ir.transforms.registry import PASSES

    if "nn-to-coda" not in PASSES:
        with pytest.raises(coda_ir.CompileError, match="not registered"):
            coda_ir.compile(scope["fb"].module)


def test_nn_ops_are_discoverable_and_callable():
    """Issue 34: `dir(fb.nn)` was empty and `fb.nn.concat` could not be called (a list was
    refused, two tensors clashed with `axis`). Every op of the dialect is listed with its
    signature and meaning; concat takes a list or separate tensors; several results: a tuple."""
    import inspect

    from coda_ir.dialects.nn import NN

    fb = FunctionBuilder("cat", a=((5, 24), "f32"), b=((5, 40), "f32"), c=((3, 24), "f32"))
    assert dir(fb.nn) == sorted(op.name.removeprefix("nn.") for op in NN.operations)
    for name in dir(fb.nn):
        doc = getattr(fb.nn, name).__doc__
        assert doc.startswith(f"nn.{name}(") and "\n\n" in doc, doc  # signature, then meaning
    assert str(inspect.signature(fb.nn.concat)) == "(inputs: Sequence[SSAValue], axis: int)"
    cols = fb.nn.concat(fb.a, fb.b, axis=1)
    rows = fb.nn.concat([fb.a, fb.c], axis=0)
    mean, rstd = fb.nn.layer_norm_stats(rows, 1e-5)
    fb.returns(cols, rows, rstd)
    program = coda_ir.compile(fb.module)
    a, b, c = torch.randn(5, 24), torch.randn(5, 40), torch.randn(3, 24)
    y_cols, y_rows, y_rstd = program.cat(a, b, c)
    assert torch.equal(y_cols, torch.cat([a, b], 1)) and torch.equal(y_rows, torch.cat([a, c], 0))
    ref = torch.rsqrt(torch.cat([a, c], 0).double().var(1, unbiased=False) + 1e-5)
    torch.testing.assert_close(y_rstd.double(), ref, rtol=1e-5, atol=0)
    fb2 = FunctionBuilder("bad", a=((5, 24), "f32"))
    with pytest.raises(coda_ir.ArgumentError, match=r"nn\.concat: 'inputs' needs at least one tensor value"):
        fb2.nn.concat([], axis=0)
    with pytest.raises(coda_ir.ArgumentError, match=r"nn\.concat: operand #1 must be a tensor value.*got int"):
        fb2.nn.concat([fb2.a, 3], axis=0)
    with pytest.raises(coda_ir.ArgumentError, match=r"nn\.concat: missing a required argument: 'axis'; expected nn\.concat\(inputs"):
        fb2.nn.concat(fb2.a, fb2.a)


@pytest.mark.parametrize("op, fn", [
    ("silu", lambda fb, x: fb.nn.silu(x)),
    ("gelu", lambda fb, x: fb.nn.gelu(x, approximate="tanh")),
    ("gelu_grad", lambda fb, x: fb.nn.gelu_grad(x, x, approximate="none")),
])
def test_scalar_functions_are_the_lowering_s(op, fn):
    """Issue 34: the builder and the passes' kernel builder wrote silu (and gelu) differently. One
    definition now: the scalar body nn-to-coda lowers `nn.<op>` to is the body the public builder's
    function of that name builds, op for op."""
    from coda_ir import builder
    from coda_ir.dialects import coda

    def body_ops(module) -> list[str]:
        (mapped,) = [o for o in module.walk() if isinstance(o, coda.MapOp)]
        return [f"{o.name} {[str(a) for a in o.attributes.values()]} {[str(p) for p in o.properties.values()]}"
                for o in mapped.body.block.ops]

    fb = FunctionBuilder("lowered", x=((5, 24), "f32"))
    fb.returns(fn(fb, fb.x))
    lowered = coda_ir.lower(fb.module, "nn-to-coda{fuse=false}")

    by_hand = FunctionBuilder("by_hand", x=((5, 24), "f32"))
    scalar = {"silu": builder.silu, "gelu": lambda v: builder.gelu(v, "tanh"),
              "gelu_grad": lambda v: builder.gelu_grad(v, v, "none")}[op]
    with by_hand.elementwise((5, 24)) as k:
        k.yield_(k.map(k.load(by_hand.x), fn=scalar))
    by_hand.returns(k.results[0])
    assert body_ops(lowered) == body_ops(by_hand.module) and len(body_ops(lowered)) > 4
