"""The LM head + cross-entropy whose backward never holds the [tokens, vocab] logits
(`nn-autodiff{logits-chunk=...}` / its memory budget -> `nn.linear_cross_entropy_grad`, lowered
chunk by chunk of vocabulary): loss and gradients against the float64 reference under the
NN_DIALECT.md bar, through the Triton interpreter, at odd shapes (a vocabulary that is not a
multiple of the chunk or of any tile, ignored rows, the Gemma2 soft-cap, Granite's logits scale),
and what the forward saves (no logits) and the backward allocates (no [M, V] buffer)."""

from __future__ import annotations

import pytest
import torch

import coda_ir
from coda_ir import remarks, testing
from coda_ir.analysis import liveness
from coda_ir.transforms.autodiff import logits_chunk_plan

M, D = 37, 24  # odd rows, a hidden size that is not a power of two


def head(v: int, *, scale: float | None = None, cap: float | None = None, m: int = M, d: int = D,
         elt: str = "bf16", reduction: str = "mean") -> str:
    X, L = f"tensor<{m}x{d}x{elt}>", f"tensor<{m}x{v}x{elt}>"
    body = [f'%h = nn.rms_norm %x, %wn {{eps = 1.0e-05 : f32}} : {X}, tensor<{d}x{elt}> -> {X}',
            f'%z = nn.linear %h, %w : {X}, tensor<{v}x{d}x{elt}> -> {L}']
    last = "%z"
    if scale is not None:
        body.append(f'%s = "nn.scale"({last}) <{{factor = {scale!r} : f32}}> : ({L}) -> {L}')
        last = "%s"
    if cap is not None:
        body.append(f'%c = "nn.softcap"({last}) <{{cap = {cap!r} : f32}}> : ({L}) -> {L}')
        last = "%c"
    body.append(f'%loss = "nn.cross_entropy"({last}, %t) <{{ignore_index = -100 : i64, reduction = "{reduction}"}}> '
                f': ({L}, tensor<{m}xi32>) -> tensor<f32>')
    args = f"%x: {X}, %wn: tensor<{d}x{elt}>, %w: tensor<{v}x{d}x{elt}>, %t: tensor<{m}xi32>"
    return "\n".join([f"func.func @head({args}) -> tensor<f32> {{", *("  " + b for b in body),
                      "  func.return %loss : tensor<f32>", "}", ""])


def _compile(text: str, chunk: int):
    with remarks.printed_remarks(False):
        return coda_ir.compile(text, pipeline=f"nn-autodiff{{logits-chunk={chunk}}},nn-to-coda")


def _func(program, name: str):
    from xdsl.dialects import func

    return next(f for f in program.ir.ops if isinstance(f, func.FuncOp) and f.sym_name.data == name)


def _check(text: str, chunk: int, seed: int = 0) -> coda_ir.CompiledModule:
    program = _compile(text, chunk)
    inputs = testing.random_inputs(text, seed=seed, ignore_fraction=0.2)
    inputs[2] = inputs[2] * 4  # logits of a few units: the softmax is not flat, the soft-cap bends
    testing.check_gradients(program, text, inputs, seed=seed, loss_rows=M)
    return program


@pytest.mark.parametrize("v,chunk", [(301, 128), (40, 16), (301, 512)])
def test_chunks_against_float64(v, chunk):
    """Three chunks with a ragged last one (301 = 128 + 128 + 45), 40 = 16 + 16 + 8, and one
    chunk wider than the vocabulary (w read whole, no slice, no concatenation)."""
    program = _check(head(v), chunk)
    steps = -(-v // chunk)
    assert str(_func(program, "head_bwd")).count('"nn.linear_cross_entropy_grad.dlogits') == steps


def test_softcap_and_scale_against_float64():
    """Gemma2's final soft-cap and Granite's logits scale, both in the recomputed epilogue and in
    the gradient's chain rule."""
    _check(head(301, scale=0.25, cap=5.0), 128, seed=1)


def test_sum_reduction_against_float64():
    _check(head(173, reduction="sum"), 64, seed=2)


def test_forward_saves_no_logits_and_backward_allocates_no_full_logits():
    v = 301
    program = _compile(head(v, cap=5.0), 128)
    fwd, bwd = _func(program, "head_fwd"), _func(program, "head_bwd")
    shapes = [tuple(t.get_shape()) for t in fwd.function_type.outputs.data]
    assert (M, v) not in shapes, shapes
    # no kernel of either function allocates an [M, V] buffer; the widest [M, *] one is a chunk
    for fn in (fwd, bwd):
        for op in fn.body.blocks[0].ops:
            for r in op.results:
                ty = r.type
                if hasattr(ty, "get_shape") and len(ty.get_shape()) == 2 and ty.get_shape()[0] == M:
                    assert ty.get_shape()[1] <= 128, (op.name, ty)
    # the liveness model's peak of the backward (above its arguments) against the stored-logits
    # backward's, whose dlogits [M, V] is allocated beside everything else
    with remarks.printed_remarks(False):
        stored = coda_ir.compile(head(v, cap=5.0), pipeline="nn-autodiff{memory-budget-mib=1024},nn-to-coda")
    peak = max(s.live for s in liveness.timeline(bwd))
    peak_stored = max(s.live for s in liveness.timeline(_func(stored, "head_bwd")))
    assert peak < peak_stored, (peak, peak_stored)


def test_budget_decides_and_records():
    """Under the budget the logits are stored (today's backward); above it the chunk is the
    widest multiple of 128 columns whose [M, chunk] gradient fits, recorded on the op."""
    from xdsl.dialects import func

    module = coda_ir.parse(head(128256, m=8192, d=2048))
    f = next(op for op in module.ops if isinstance(op, func.FuncOp))
    ce = list(f.body.blocks[0].ops)[-2]
    plan = logits_chunk_plan(ce, 256, 0)
    assert plan is not None and plan.chunk == 16384, plan
    assert logits_chunk_plan(ce, 4096, 0) is None  # 2004 MiB of logits fit a 4 GiB budget
    with remarks.printed_remarks(False):
        text = str(coda_ir.lower(coda_ir.parse(head(128256, m=8192, d=2048)), "nn-autodiff{memory-budget-mib=256}"))
    assert "nn.linear_cross_entropy_grad" in text and "chunk = 16384 : i64" in text


def test_bad_chunk_option_is_an_argument_error():
    with pytest.raises(coda_ir.CodaError, match="logits-chunk must be 0 or a positive multiple of 16"):
        _compile(head(40), 10)


def _stored(text: str) -> coda_ir.CompiledModule:
    with remarks.printed_remarks(False):
        return coda_ir.compile(text, pipeline="nn-autodiff{memory-budget-mib=4096},nn-to-coda")


@pytest.mark.parametrize("scale", [None, 0.25])
def test_stored_softcap_head_keeps_the_cap_input_alone(scale):
    """Under the budget a soft-capped head stores its logits, and only the cap's input z: the
    backward is one `nn.cross_entropy_grad {softcap}` (no `nn.softcap_grad`) that takes the
    capped logits and the cap's derivative from z in f32; loss and gradients against float64
    (through the interpreter, logits of a few units where the cap bends)."""
    v = 301
    text = head(v, scale=scale, cap=5.0)
    with remarks.printed_remarks(False):
        lowered = str(coda_ir.lower(coda_ir.parse(text), "nn-autodiff{memory-budget-mib=4096}"))
    assert lowered.count("nn.cross_entropy_grad") == 1 and "softcap = 5.0" in lowered.split("nn.cross_entropy_grad")[1]
    assert "nn.softcap_grad" not in lowered and "nn.linear_cross_entropy_grad" not in lowered
    program = _stored(text)
    shapes = [tuple(t.get_shape()) for t in _func(program, "head_fwd").function_type.outputs.data]
    assert shapes.count((M, v)) == 1, shapes  # z, not z and the capped logits
    inputs = testing.random_inputs(text, seed=3, ignore_fraction=0.2)
    inputs[2] = inputs[2] * 4
    testing.check_gradients(program, text, inputs, seed=3, loss_rows=M)


def test_cross_entropy_grad_with_softcap_from_the_logits_alone():
    """`nn.cross_entropy_grad {softcap}` without the saved lse folds the capped logits' lse from z
    itself: its lowered kernels against the interpreter's float64 semantics, odd shapes."""
    m, v, cap = 29, 203, 3.0
    text = (f"func.func @g(%z: tensor<{m}x{v}xf32>, %t: tensor<{m}xi32>, %dl: tensor<f32>) -> tensor<{m}x{v}xf32> {{\n"
            f'  %d = "nn.cross_entropy_grad"(%z, %t, %dl) <{{ignore_index = -100 : i64, reduction = "mean", '
            f"softcap = {cap!r} : f32}}> : (tensor<{m}x{v}xf32>, tensor<{m}xi32>, tensor<f32>) -> tensor<{m}x{v}xf32>\n"
            f"  func.return %d : tensor<{m}x{v}xf32>\n}}\n")
    g = torch.Generator().manual_seed(5)
    z = (torch.randn(m, v, generator=g) * 6).requires_grad_(True)
    t = torch.randint(0, v, (m,), generator=g, dtype=torch.int32)
    t[::4] = -100
    loss = torch.nn.functional.cross_entropy(cap * torch.tanh(z.double() / cap), t.long(), ignore_index=-100)
    (want,) = torch.autograd.grad(loss, z)
    with remarks.printed_remarks(False):
        got = coda_ir.compile(text).g(z.detach(), t, torch.tensor(1.0))
    torch.testing.assert_close(got.double(), want.double(), rtol=1e-4, atol=1e-7)


def test_cross_entropy_grad_softcap_must_be_positive():
    text = ('func.func @g(%z: tensor<4x8xf32>, %t: tensor<4xi32>, %dl: tensor<f32>) -> tensor<4x8xf32> {\n'
            '  %d = "nn.cross_entropy_grad"(%z, %t, %dl) <{ignore_index = -100 : i64, reduction = "mean", '
            'softcap = -1.0 : f32}> : (tensor<4x8xf32>, tensor<4xi32>, tensor<f32>) -> tensor<4x8xf32>\n'
            '  func.return %d : tensor<4x8xf32>\n}\n')
    with pytest.raises(coda_ir.CodaError, match="softcap must be a positive finite number"):
        coda_ir.compile(text)
