"""The nn reference interpreter, the numerics bar, random inputs, and the hand-written coda programs.

* every nn op of coda_ir.reference against an independent PyTorch formulation, in float64 and in
  bf16 (where "computes in fp32, rounds once" is checked bit for bit when the formulation is the
  same expression);
* coda_ir.testing: the bar's exact formula, NaN and shape handling, the failure table, inputs;
* the nn programs of tests/programs/nn and examples/ load and (small ones) run;
* the coda programs of tests/programs/coda: the coda interpreter (coda_ir.interpreters) agrees
  with the hand-written references, the references agree with the nn blocks (float64) and, for the
  backward, with torch.autograd.
"""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from coda_ir.errors import ArgumentError
from coda_ir.interpreters import interleave_perm, run_coda
from coda_ir.reference import (
    element_dtype,
    f32_value,
    load_func,
    program_dtype,
    reference_pair,
    rope_inv_freq,
    run_reference,
)
from coda_ir.testing import Mismatch, argument_roles, assert_matches, check_close, random_inputs

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "tests" / "programs"


def _load(name: str, path: Path):
    """Import a helper of tests/programs under a unique module name (no sys.path changes)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


coda_refs = _load("coda_programs_references", PROGRAMS / "coda" / "references.py")

BF16_EPS = 2.0**-8  # half a bf16 ulp is 2^-9 relative; one ulp 2^-8 (2^-7 at worst in [1, 2))


# ============================================================================ helpers


def _t(shape, dtype):
    return "tensor<" + "x".join(map(str, shape)) + ("x" if shape else "") + dtype + ">"


def one_op(op: str, operands: list[tuple[str, tuple, str]], result: tuple[tuple, str], props: str = "") -> str:
    """A function with a single nn op, in the generic form (the contract form)."""
    args = ", ".join(f"%a{i}: {_t(s, d)}" for i, (_, s, d) in enumerate(operands))
    names = ", ".join(f"%a{i}" for i in range(len(operands)))
    types = ", ".join(_t(s, d) for _, s, d in operands)
    rt = _t(*result)
    props = f" <{{{props}}}>" if props else ""
    return (
        f"func.func @f({args}) -> {rt} {{\n"
        f'  %r = "{op}"({names}){props} : ({types}) -> {rt}\n'
        f"  func.return %r : {rt}\n}}\n"
    )


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def randn(*shape, seed=0, dtype=torch.float64, scale=1.0):
    return (scale * torch.randn(shape, generator=gen(seed), dtype=torch.float64)).to(dtype)


def run1(text, inputs, dtype):
    (out,) = run_reference(text, inputs, dtype)
    return out


def both(text, inputs):
    """(float64 result, bf16 result) of a one-op program."""
    return run1(text, inputs, torch.float64), run1(text, inputs, torch.bfloat16)


def assert_bf16_matches(out: torch.Tensor, fp32_expected: torch.Tensor, exact: bool = True):
    assert out.dtype == torch.bfloat16
    expected = fp32_expected.to(torch.bfloat16)
    if exact:
        assert torch.equal(out, expected), (out.float() - expected.float()).abs().max()
    else:
        torch.testing.assert_close(out.float(), expected.float(), rtol=BF16_EPS, atol=1e-6)


M, K, N = 13, 24, 20  # odd shapes


# ============================================================================ nn ops


def test_linear_and_matmul():
    x, w = randn(M, K, seed=1), randn(N, K, seed=2)
    text = one_op("nn.linear", [("x", (M, K), "bf16"), ("w", (N, K), "bf16")], ((M, N), "bf16"))
    xb, wb = x.bfloat16(), w.bfloat16()
    r64, rbf = both(text, [xb, wb])
    assert r64.dtype == torch.float64
    torch.testing.assert_close(r64, F.linear(xb.double(), wb.double()), rtol=1e-14, atol=1e-14)
    assert_bf16_matches(rbf, F.linear(xb.float(), wb.float()), exact=False)
    b = randn(K, N, seed=3)
    text = one_op("nn.matmul", [("a", (M, K), "f32"), ("b", (K, N), "f32")], ((M, N), "f32"))
    r64 = run1(text, [x.float(), b.float()], torch.float64)
    torch.testing.assert_close(r64, x.float().double() @ b.float().double(), rtol=1e-14, atol=1e-14)
    r32 = run1(text, [x.float(), b.float()], torch.float32)
    torch.testing.assert_close(r32, x.float() @ b.float())


@pytest.mark.parametrize("op,fn", [("nn.add", torch.add), ("nn.mul", torch.mul)])
def test_binary_with_and_without_broadcast(op, fn):
    a, b, v = randn(M, N, seed=1).bfloat16(), randn(M, N, seed=2).bfloat16(), randn(N, seed=3).bfloat16()
    for rhs, shape in ((b, (M, N)), (v, (N,))):
        text = one_op(op, [("a", (M, N), "bf16"), ("b", shape, "bf16")], ((M, N), "bf16"))
        r64, rbf = both(text, [a, rhs])
        torch.testing.assert_close(r64, fn(a.double(), rhs.double()), rtol=0, atol=0)
        assert_bf16_matches(rbf, fn(a.float(), rhs.float()))


@pytest.mark.parametrize(
    "op,props,fn",
    [
        ("nn.silu", "", F.silu),
        ("nn.relu", "", F.relu),
        ("nn.gelu", 'approximate = "none"', lambda x: F.gelu(x, approximate="none")),
        ("nn.gelu", 'approximate = "tanh"', lambda x: F.gelu(x, approximate="tanh")),
        ("nn.scale", "factor = 0.25 : f32", lambda x: x * 0.25),
        ("nn.softcap", "cap = 2.0 : f32", lambda x: 2.0 * torch.tanh(x / 2.0)),
    ],
)
def test_unary(op, props, fn):
    x = randn(M, N, seed=4, scale=3.0).bfloat16()
    text = one_op(op, [("x", (M, N), "bf16")], ((M, N), "bf16"), props)
    r64, rbf = both(text, [x])
    torch.testing.assert_close(r64, fn(x.double()), rtol=1e-13, atol=1e-13)
    assert_bf16_matches(rbf, fn(x.float()), exact=op != "nn.silu")


def test_gelu_none_is_exact_erf():
    x = randn(M, N, seed=5, scale=3.0)
    text = one_op("nn.gelu", [("x", (M, N), "f32")], ((M, N), "f32"), 'approximate = "none"')
    r64 = run1(text, [x.float()], torch.float64)
    torch.testing.assert_close(r64, F.gelu(x.float().double()), rtol=1e-14, atol=1e-14)
    assert (r64 - F.gelu(x.float().double(), approximate="tanh")).abs().max() > 1e-5


def test_rms_norm():
    x, w = randn(M, N, seed=6, scale=2.0).bfloat16(), (1 + 0.1 * randn(N, seed=7)).bfloat16()
    text = one_op("nn.rms_norm", [("x", (M, N), "bf16"), ("w", (N,), "bf16")], ((M, N), "bf16"), "eps = 1.0e-05 : f32")
    r64, rbf = both(text, [x, w])
    eps = f32_value(1e-5)
    torch.testing.assert_close(r64, F.rms_norm(x.double(), (N,), w.double(), eps=eps), rtol=1e-13, atol=1e-13)
    assert_bf16_matches(rbf, F.rms_norm(x.float(), (N,), w.float(), eps=eps), exact=False)


def test_layer_norm_biased_variance():
    x = (randn(M, N, seed=8, scale=2.0) + 0.5).bfloat16()
    w, b = (1 + 0.1 * randn(N, seed=9)).bfloat16(), (0.1 * randn(N, seed=10)).bfloat16()
    text = one_op(
        "nn.layer_norm",
        [("x", (M, N), "bf16"), ("w", (N,), "bf16"), ("b", (N,), "bf16")],
        ((M, N), "bf16"),
        "eps = 1.0e-05 : f32",
    )
    r64, rbf = both(text, [x, w, b])
    eps = f32_value(1e-5)
    torch.testing.assert_close(
        r64, F.layer_norm(x.double(), (N,), w.double(), b.double(), eps=eps), rtol=1e-12, atol=1e-12
    )
    assert_bf16_matches(rbf, F.layer_norm(x.float(), (N,), w.float(), b.float(), eps=eps), exact=False)
    # biased: the unbiased variance would differ visibly at N = 20
    xd = x.double()
    unbiased = (xd - xd.mean(-1, keepdim=True)) / torch.sqrt(xd.var(-1, keepdim=True, unbiased=True) + eps)
    assert (r64 - (unbiased * w.double() + b.double())).abs().max() > 1e-3


@pytest.mark.parametrize("op", ["nn.swiglu", "nn.geglu"])
def test_gated(op):
    f = 10
    z = randn(M, 2 * f, seed=11, scale=2.0).bfloat16()
    props = 'approximate = "tanh"' if op == "nn.geglu" else ""
    text = one_op(op, [("z", (M, 2 * f), "bf16")], ((M, f), "bf16"), props)
    r64, rbf = both(text, [z])
    gate, up = z.double().chunk(2, dim=1)  # gate half first, then up half
    act = F.silu(gate) if op == "nn.swiglu" else F.gelu(gate, approximate="tanh")
    torch.testing.assert_close(r64, act * up, rtol=1e-13, atol=1e-13)
    g32, u32 = z.float().chunk(2, dim=1)
    act32 = F.silu(g32) if op == "nn.swiglu" else F.gelu(g32, approximate="tanh")
    assert_bf16_matches(rbf, act32 * u32, exact=False)


def rope_hf_half(x: torch.Tensor, pos: torch.Tensor, hd: int, heads: int, theta: float) -> torch.Tensor:
    """The Hugging Face LLaMA formulation: x * cos + rotate_half(x) * sin on each rotated head."""
    m, n = x.shape
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = pos.double()[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1).to(x.dtype)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
    q = x[:, : heads * hd].reshape(m, heads, hd)
    q1, q2 = q[..., : hd // 2], q[..., hd // 2 :]
    rotated = q * cos + torch.cat([-q2, q1], dim=-1) * sin
    return torch.cat([rotated.reshape(m, heads * hd), x[:, heads * hd :]], dim=1)


def rope_complex_interleaved(x: torch.Tensor, pos: torch.Tensor, hd: int, heads: int, theta: float) -> torch.Tensor:
    """GPT-J / Meta LLaMA formulation: pairs (2i, 2i+1) as complex numbers times exp(i angle)."""
    m, n = x.shape
    inv_freq = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    angle = pos.double()[:, None] * inv_freq[None, :]
    rot = torch.polar(torch.ones_like(angle), angle)[:, None, :]
    q = torch.view_as_complex(x[:, : heads * hd].double().reshape(m, heads, hd // 2, 2).contiguous())
    out = torch.view_as_real(q * rot).reshape(m, heads * hd)
    return torch.cat([out, x[:, heads * hd :].double()], dim=1)


@pytest.mark.parametrize("style", ["half", "interleaved"])
def test_rope_against_independent_formulations(style):
    hd, heads_total, rotary = 16, 5, 3  # the last 2 heads pass through
    n = hd * heads_total
    x = randn(M, n, seed=12).bfloat16()
    pos = torch.randint(0, 4096, (M,), generator=gen(13), dtype=torch.int32)
    theta = 10000.0
    props = f'head_dim = {hd} : i64, rotary_heads = {rotary} : i64, theta = {theta} : f32, style = "{style}"'
    text = one_op("nn.rope", [("x", (M, n), "bf16"), ("pos", (M,), "i32")], ((M, n), "bf16"), props)
    r64, rbf = both(text, [x, pos])
    ref = rope_hf_half if style == "half" else rope_complex_interleaved
    expected = ref(x.double(), pos, hd, rotary, theta)
    torch.testing.assert_close(r64, expected.double(), rtol=1e-12, atol=1e-12)
    assert torch.equal(r64[:, rotary * hd :], x[:, rotary * hd :].double())  # pass-through, untouched
    assert torch.equal(rbf[:, rotary * hd :], x[:, rotary * hd :])
    # bf16: fp32 angles (pos * inv_freq rounded to fp32): within one bf16 rounding of float64
    err = (rbf.double() - r64).abs().max()
    assert err <= BF16_EPS * r64.abs().max() + 1e-3 * x.double().abs().max()


def test_rope_fp32_angle_convention():
    """angle = pos * inv_freq in fp32 with inv_freq = theta^(-2i/hd) rounded to fp32."""
    hd = 8
    x = randn(4, hd, seed=14).float()
    pos = torch.tensor([0, 1, 4095, 3000], dtype=torch.int32)
    props = f'head_dim = {hd} : i64, rotary_heads = 1 : i64, theta = 500000.0 : f32, style = "half"'
    text = one_op("nn.rope", [("x", (4, hd), "f32"), ("pos", (4,), "i32")], ((4, hd), "f32"), props)
    out = run1(text, [x, pos], torch.float32)
    inv = rope_inv_freq(hd, 500000.0, torch.float32)
    a = pos.float()[:, None] * inv[None, :]
    c, s = torch.cos(a), torch.sin(a)
    x1, x2 = x[:, : hd // 2], x[:, hd // 2 :]
    assert torch.equal(out, torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=1))
    assert torch.equal(out[0], x[0])  # position 0: identity


def test_head_rms_norm_first_heads_only():
    hd, heads_total, heads = 8, 6, 4
    n = hd * heads_total
    x, w = randn(M, n, seed=15, scale=2.0).bfloat16(), (1 + 0.1 * randn(hd, seed=16)).bfloat16()
    props = f"head_dim = {hd} : i64, heads = {heads} : i64, eps = 1.0e-06 : f32"
    text = one_op("nn.head_rms_norm", [("x", (M, n), "bf16"), ("w", (hd,), "bf16")], ((M, n), "bf16"), props)
    r64, rbf = both(text, [x, w])
    eps = f32_value(1e-6)
    normed = F.rms_norm(x.double()[:, : heads * hd].reshape(M, heads, hd), (hd,), w.double(), eps=eps)
    torch.testing.assert_close(r64[:, : heads * hd], normed.reshape(M, heads * hd), rtol=1e-13, atol=1e-13)
    assert torch.equal(r64[:, heads * hd :], x[:, heads * hd :].double())
    assert torch.equal(rbf[:, heads * hd :], x[:, heads * hd :])
    n32 = F.rms_norm(x.float()[:, : heads * hd].reshape(M, heads, hd), (hd,), w.float(), eps=eps)
    assert_bf16_matches(rbf[:, : heads * hd], n32.reshape(M, heads * hd), exact=False)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("ignore_index", [-100, 3])
def test_cross_entropy(reduction, ignore_index):
    v = 37
    logits = randn(M, v, seed=17, scale=3.0).bfloat16()
    t = torch.randint(0, v, (M,), generator=gen(18), dtype=torch.int64)
    t[[1, 5, 6]] = ignore_index
    props = f'ignore_index = {ignore_index} : i64, reduction = "{reduction}"'
    text = one_op("nn.cross_entropy", [("l", (M, v), "bf16"), ("t", (M,), "i32")], ((), "f32"), props)
    r64, rbf = both(text, [logits, t.to(torch.int32)])
    assert r64.shape == () and r64.dtype == torch.float64
    assert rbf.shape == () and rbf.dtype == torch.float32  # the IR says f32, even for bf16 logits
    expected = F.cross_entropy(logits.double(), t, ignore_index=ignore_index, reduction=reduction)
    torch.testing.assert_close(r64, expected, rtol=1e-13, atol=1e-13)
    expected32 = F.cross_entropy(logits.float(), t, ignore_index=ignore_index, reduction=reduction)
    torch.testing.assert_close(rbf, expected32, rtol=1e-6, atol=1e-6)


def test_cross_entropy_all_ignored_mean_is_nan_like_pytorch():
    v = 5
    text = one_op(
        "nn.cross_entropy",
        [("l", (3, v), "f32"), ("t", (3,), "i32")],
        ((), "f32"),
        'ignore_index = -100 : i64, reduction = "mean"',
    )
    t = torch.full((3,), -100, dtype=torch.int32)
    out = run1(text, [randn(3, v).float(), t], torch.float64)
    assert torch.isnan(out) and torch.isnan(F.cross_entropy(randn(3, v), t.long()))


def test_cross_entropy_rejects_out_of_range_targets():
    text = one_op(
        "nn.cross_entropy", [("l", (3, 5), "f32"), ("t", (3,), "i32")], ((), "f32"), 'ignore_index = -100 : i64, reduction = "mean"'
    )
    # a located ArgumentError (and still the ValueError it was)
    with pytest.raises(ArgumentError, match=r"'nn.cross_entropy' at <input>:2:3: target 5 at row 1 is out of range") as info:
        run1(text, [randn(3, 5).float(), torch.tensor([0, 5, 1], dtype=torch.int32)], torch.float64)
    assert isinstance(info.value, ValueError) and info.value.argument == "targets"


# ============================================================================ backward and whole-model ops
# Each against an independent float64 PyTorch formulation: a gradient op against torch.autograd
# of the forward it differentiates, a statistic against torch's own reduction.


def ops_program(op: str, operands: list[tuple[tuple, str]], results: list[tuple[tuple, str]], props: str = "") -> str:
    """A function with a single nn op of any number of results, in the generic form."""
    args = ", ".join(f"%a{i}: {_t(s, d)}" for i, (s, d) in enumerate(operands))
    names = ", ".join(f"%a{i}" for i in range(len(operands)))
    types = ", ".join(_t(s, d) for s, d in operands)
    rts = ", ".join(_t(*r) for r in results)
    outs = ", ".join(f"%r{i}" for i in range(len(results)))
    props = f" <{{{props}}}>" if props else ""
    return (
        f"func.func @f({args}) -> ({rts}) {{\n"
        f'  {outs} = "{op}"({names}){props} : ({types}) -> ({rts})\n'
        f"  func.return {outs} : {rts}\n}}\n"
    )


def ref64(text, inputs):
    return run_reference(text, inputs, torch.float64)


def grads_of(fn, inputs, upstream):
    """torch.autograd of `(fn(*inputs) * upstream).sum()` w.r.t. every input (float64 leaves)."""
    leaves = [x.detach().double().requires_grad_(True) for x in inputs]
    out = fn(*leaves)
    return torch.autograd.grad(out, leaves, upstream)


def close64(got, want):
    torch.testing.assert_close(got, want.double(), rtol=1e-12, atol=1e-12 * max(1.0, float(want.abs().max())))


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_transposes(ta, tb):
    a, b = randn(M, K, seed=40).float(), randn(K, N, seed=41).float()
    a_in, b_in = (a.T.contiguous() if ta else a), (b.T.contiguous() if tb else b)
    props = f"transpose_a = {str(ta).lower()}, transpose_b = {str(tb).lower()}"
    text = ops_program("nn.gemm", [(tuple(a_in.shape), "f32"), (tuple(b_in.shape), "f32")], [((M, N), "f32")], props)
    (out,) = ref64(text, [a_in, b_in])
    close64(out, torch.mm(a.double(), b.double()))


def test_column_sum_with_and_without_product():
    x, y = randn(M, N, seed=42).float(), randn(M, N, seed=43).float()
    text = ops_program("nn.column_sum", [((M, N), "f32")], [((N,), "f32")])
    close64(ref64(text, [x])[0], torch.einsum("mn->n", x.double()))
    text = ops_program("nn.column_sum", [((M, N), "f32"), ((M, N), "f32")], [((N,), "f32")])
    close64(ref64(text, [x, y])[0], torch.einsum("mn,mn->n", x.double(), y.double()))


@pytest.mark.parametrize(
    "op,props,fn",
    [
        ("nn.silu_grad", "", F.silu),
        ("nn.relu_grad", "", F.relu),
        ("nn.gelu_grad", 'approximate = "none"', lambda x: F.gelu(x, approximate="none")),
        ("nn.gelu_grad", 'approximate = "tanh"', lambda x: F.gelu(x, approximate="tanh")),
        ("nn.softcap_grad", "cap = 2.0 : f32", lambda x: 2.0 * torch.tanh(x / 2.0)),
    ],
)
def test_activation_grads_are_autograd(op, props, fn):
    dy, x = randn(M, N, seed=44).float(), randn(M, N, seed=45, scale=3.0).float()
    x[0, :4] = 0.0  # relu's derivative at 0 is 0 (PyTorch's)
    text = ops_program(op, [((M, N), "f32"), ((M, N), "f32")], [((M, N), "f32")], props)
    (got,) = ref64(text, [dy, x])
    (want,) = grads_of(fn, [x], dy.double())
    close64(got, want)


@pytest.mark.parametrize("op,props", [("nn.swiglu_grad", ""), ("nn.geglu_grad", 'approximate = "none"'),
                                      ("nn.geglu_grad", 'approximate = "tanh"')])
def test_gated_grads_are_autograd(op, props):
    f = 10
    dy, z = randn(M, f, seed=46).float(), randn(M, 2 * f, seed=47, scale=2.0).float()
    text = ops_program(op, [((M, f), "f32"), ((M, 2 * f), "f32")], [((M, 2 * f), "f32")], props)
    (got,) = ref64(text, [dy, z])
    approx = props.split('"')[1] if props else None

    def gated(z):
        gate, up = z.chunk(2, dim=1)
        return (F.silu(gate) if approx is None else F.gelu(gate, approximate=approx)) * up

    (want,) = grads_of(gated, [z], dy.double())
    close64(got, want)


@pytest.mark.parametrize("style", ["half", "interleaved"])
def test_rope_grad_is_autograd_of_independent_rope(style):
    hd, heads_total, rotary = 8, 3, 2
    n = hd * heads_total
    dy = randn(M, n, seed=48).float()
    x = randn(M, n, seed=49).double()
    pos = torch.randint(0, 4096, (M,), generator=gen(50), dtype=torch.int32)
    props = f'head_dim = {hd} : i64, rotary_heads = {rotary} : i64, theta = 10000.0 : f32, style = "{style}"'
    text = ops_program("nn.rope_grad", [((M, n), "f32"), ((M,), "i32")], [((M, n), "f32")], props)
    (got,) = ref64(text, [dy, pos])
    rope = rope_hf_half if style == "half" else rope_complex_interleaved
    (want,) = grads_of(lambda x: rope(x, pos, hd, rotary, 10000.0), [x], dy.double())
    close64(got, want)


def test_rms_norm_statistics_apply_and_grad():
    eps = f32_value(1e-5)
    dy, x, w = randn(M, N, seed=51).float(), randn(M, N, seed=52, scale=2.0).float(), (1 + 0.1 * randn(N, seed=53)).float()
    rstd = 1 / torch.sqrt(x.double().pow(2).mean(-1) + eps)
    text = ops_program("nn.rms_norm_rstd", [((M, N), "f32")], [((M,), "f32")], "eps = 1.0e-05 : f32")
    close64(ref64(text, [x])[0], rstd)
    text = ops_program("nn.rms_norm_apply", [((M, N), "f32"), ((N,), "f32"), ((M,), "f32")], [((M, N), "f32")])
    close64(ref64(text, [x, w, rstd])[0], F.rms_norm(x.double(), (N,), w.double(), eps=eps))
    want_dx, want_dw = grads_of(lambda x, w: F.rms_norm(x, (N,), w, eps=eps), [x, w], dy.double())
    text = ops_program("nn.rms_norm_grad", [((M, N), "f32")] * 2 + [((N,), "f32"), ((M,), "f32")],
                       [((M, N), "f32"), ((N,), "f32")])
    dx, dw = ref64(text, [dy, x, w, rstd])
    close64(dx, want_dx)
    close64(dw, want_dw)
    # with the row statistic sum_j dy_j h_j (h the normalized output) given instead of refolded
    hdh = (dy.double() * F.rms_norm(x.double(), (N,), w.double(), eps=eps)).sum(-1)
    text = ops_program("nn.rms_norm_grad", [((M, N), "f32")] * 2 + [((N,), "f32"), ((M,), "f32"), ((M,), "f32")],
                       [((M, N), "f32"), ((N,), "f32")])
    dx, dw = ref64(text, [dy, x, w, rstd, hdh])
    close64(dx, want_dx)
    close64(dw, want_dw)


def test_row_dot():
    a, b = randn(M, N, seed=54).float(), randn(M, N, seed=55).float()
    text = ops_program("nn.row_dot", [((M, N), "f32"), ((M, N), "f32")], [((M,), "f32")])
    close64(ref64(text, [a, b])[0], torch.einsum("mn,mn->m", a.double(), b.double()))


def test_layer_norm_statistics_apply_and_grad():
    eps = f32_value(1e-5)
    dy = randn(M, N, seed=56).float()
    x, w, b = (randn(M, N, seed=57, scale=2.0) + 0.5).float(), (1 + 0.1 * randn(N, seed=58)).float(), randn(N, seed=59).float()
    var, mean = torch.var_mean(x.double(), dim=-1, unbiased=False)
    text = ops_program("nn.layer_norm_stats", [((M, N), "f32")], [((M,), "f32"), ((M,), "f32")], "eps = 1.0e-05 : f32")
    got_mean, got_rstd = ref64(text, [x])
    close64(got_mean, mean)
    close64(got_rstd, 1 / torch.sqrt(var + eps))
    rstd = 1 / torch.sqrt(var + eps)
    text = ops_program("nn.layer_norm_apply", [((M, N), "f32"), ((N,), "f32"), ((N,), "f32"), ((M,), "f32"), ((M,), "f32")],
                       [((M, N), "f32")])
    close64(ref64(text, [x, w, b, mean, rstd])[0], F.layer_norm(x.double(), (N,), w.double(), b.double(), eps=eps))
    want = grads_of(lambda x, w, b: F.layer_norm(x, (N,), w, b, eps=eps), [x, w, b], dy.double())
    text = ops_program("nn.layer_norm_grad", [((M, N), "f32")] * 2 + [((N,), "f32"), ((M,), "f32"), ((M,), "f32")],
                       [((M, N), "f32"), ((N,), "f32"), ((N,), "f32")])
    for got, w_ in zip(ref64(text, [dy, x, w, mean, rstd]), want):
        close64(got, w_)


@pytest.mark.parametrize("first", [0, 1])
def test_head_rms_norm_grad_is_autograd(first):
    hd, heads_total, heads = 8, 5, 3
    n, eps = hd * heads_total, f32_value(1e-6)
    dy, x, w = randn(M, n, seed=60).float(), randn(M, n, seed=61, scale=2.0).float(), (1 + 0.1 * randn(hd, seed=62)).float()
    props = f"head_dim = {hd} : i64, heads = {heads} : i64, eps = 1.0e-06 : f32, first_head = {first} : i64"
    text = ops_program("nn.head_rms_norm_grad", [((M, n), "f32"), ((M, n), "f32"), ((hd,), "f32")],
                       [((M, n), "f32"), ((hd,), "f32")], props)

    def head_norm(x, w):
        lo, hi = first * hd, (first + heads) * hd
        normed = F.rms_norm(x[:, lo:hi].reshape(M, heads, hd), (hd,), w, eps=eps).reshape(M, heads * hd)
        return torch.cat([x[:, :lo], normed, x[:, hi:]], dim=1)

    for got, want in zip(ref64(text, [dy, x, w]), grads_of(head_norm, [x, w], dy.double())):
        close64(got, want)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_fwd_and_grad_are_pytorch(reduction):
    v, ignore = 37, -100
    logits = randn(M, v, seed=63, scale=3.0).float()
    t = torch.randint(0, v, (M,), generator=gen(64), dtype=torch.int64)
    t[[2, 7]] = ignore
    props = f'ignore_index = {ignore} : i64, reduction = "{reduction}"'
    text = ops_program("nn.cross_entropy_fwd", [((M, v), "f32"), ((M,), "i32")], [((), "f32"), ((M,), "f32")], props)
    loss, lse = ref64(text, [logits, t.int()])
    close64(loss, F.cross_entropy(logits.double(), t, ignore_index=ignore, reduction=reduction))
    close64(lse, torch.logsumexp(logits.double(), dim=-1))
    dloss = torch.tensor(1.7)
    (want,) = grads_of(lambda z: F.cross_entropy(z, t, ignore_index=ignore, reduction=reduction), [logits], dloss.double())
    for with_lse in (False, True):  # the saved lse is what a kernel reads; the meaning is the same
        operands = [((M, v), "f32"), ((M,), "i32"), ((), "f32")] + ([((M,), "f32")] if with_lse else [])
        text = ops_program("nn.cross_entropy_grad", operands, [((M, v), "f32")], props)
        (got,) = ref64(text, [logits, t.int(), dloss] + ([lse.float()] if with_lse else []))
        close64(got, want)
        assert bool((got[[2, 7]] == 0).all())


def test_linear_cross_entropy_grad_is_the_head_and_loss_gradient():
    """`nn.linear_cross_entropy_grad` (the chunked LM head backward) is torch.autograd of
    cross_entropy(softcap(scale * h @ w.T)) w.r.t. h and w, from the saved lse, with ignored rows
    contributing nothing; the chunk (a recorded schedule) does not change the value."""
    v, d = 37, 12
    h, w = randn(M, d, seed=81).float(), randn(v, d, seed=82).float()
    t = torch.randint(0, v, (M,), generator=torch.Generator().manual_seed(83))
    t[[1, 6]] = -100
    scale, cap = 0.5, 3.0

    def loss_of(h, w):
        z = cap * torch.tanh((h @ w.T) * scale / cap)
        return F.cross_entropy(z, t.long(), ignore_index=-100, reduction="mean")

    with torch.no_grad():
        lse = torch.logsumexp(cap * torch.tanh((h.double() @ w.double().T) * scale / cap), dim=1)
    want = grads_of(loss_of, [h, w], torch.tensor(2.0, dtype=torch.float64))
    for chunk in (16, 48):
        props = (f'ignore_index = -100 : i64, reduction = "mean", chunk = {chunk} : i64, '
                 f"scale = {scale} : f32, softcap = {cap} : f32")
        operands = [((M, d), "f32"), ((v, d), "f32"), ((M,), "i32"), ((), "f32"), ((M,), "f32")]
        text = ops_program("nn.linear_cross_entropy_grad", operands, [((M, d), "f32"), ((v, d), "f32")], props)
        dh, dw = ref64(text, [h, w, t.int(), torch.tensor(2.0), lse.float()])
        close64(dh, want[0])
        close64(dw, want[1])


def test_vocabulary_shards_are_the_whole_head_and_loss():
    """`nn.cross_entropy_partials` over each vocabulary shard, combined (docs/VOCAB_PARALLEL.md),
    is `nn.cross_entropy` of the whole logits; `nn.linear_cross_entropy_grad` over each shard
    from the combined lse is that loss's gradient: dw the shard's rows, dh summed over shards.
    Shards of unequal sizes; an ignore index inside a shard; out-of-range targets refused."""
    from coda_ir.torch.vocab_parallel import fold_partials, shard_rows

    v, d, ignore = 37, 12, 20
    h, w = randn(M, d, seed=91).float(), randn(v, d, seed=92).float()
    t = torch.randint(0, v, (M,), generator=torch.Generator().manual_seed(93))
    t[[1, 6]] = ignore
    t[0], t[2] = 0, v - 1

    def loss_of(h, w):
        return F.cross_entropy(h @ w.T, t.long(), ignore_index=ignore, reduction="mean")

    want_loss = loss_of(h.double(), w.double())
    want = grads_of(loss_of, [h, w], torch.tensor(2.0, dtype=torch.float64))
    for world in (1, 3, 4):
        shards = [shard_rows(v, r, world) for r in range(world)]
        parts = []
        for start, stop in shards:
            props = f"ignore_index = {ignore} : i64, vocab_start = {start} : i64, vocab_size = {v} : i64"
            text = ops_program("nn.cross_entropy_partials", [((M, stop - start), "f32"), ((M,), "i32")],
                               [((M,), "f32"), ((M,), "f32")], props)
            lse_r, target_r = ref64(text, [h.double() @ w.double()[start:stop].T, t.int()])
            assert bool((target_r[[1, 6]] == 0).all())  # ignored rows pick nothing, even in the shard holding 20
            parts.append(torch.stack([lse_r, target_r], dim=1))
        lse, target = fold_partials(parts)
        kept = t != ignore
        close64(torch.where(kept, lse - target, 0).sum() / kept.sum(), want_loss)
        dh = torch.zeros_like(want[0])
        for start, stop in shards:
            props = (f'ignore_index = {ignore} : i64, reduction = "mean", chunk = 16 : i64, '
                     f"vocab_start = {start} : i64, vocab_size = {v} : i64")
            operands = [((M, d), "f32"), ((stop - start, d), "f32"), ((M,), "i32"), ((), "f32"), ((M,), "f32")]
            text = ops_program("nn.linear_cross_entropy_grad", operands, [((M, d), "f32"), ((stop - start, d), "f32")],
                               props)
            dh_r, dw_r = ref64(text, [h, w[start:stop], t.int(), torch.tensor(2.0), lse])
            close64(dw_r, want[1][start:stop])
            dh = dh + dh_r
        close64(dh, want[0])
    props = "ignore_index = -100 : i64, vocab_start = 10 : i64, vocab_size = 37 : i64"
    text = ops_program("nn.cross_entropy_partials", [((M, 10), "f32"), ((M,), "i32")], [((M,), "f32"), ((M,), "f32")],
                       props)
    bad = t.int().clone()
    bad[4] = 37  # outside the whole vocabulary (the shard [10, 20) would not hold 5 either, which is fine)
    with pytest.raises(ArgumentError, match=r"'nn.cross_entropy_partials' at .*target 37 at row 4 is out of range \[0, 37\)"):
        ref64(text, [randn(M, 10).float(), bad])


def test_zeros():
    text = ops_program("nn.zeros", [], [((M, N), "bf16")])
    (z64,) = ref64(text, [])
    (zbf,) = run_reference(text, [], torch.bfloat16)
    assert torch.equal(z64, torch.zeros(M, N, dtype=torch.float64)) and torch.equal(zbf, torch.zeros(M, N, dtype=torch.bfloat16))


def test_embedding_and_grad_are_pytorch():
    rows, d = 11, N
    ids = torch.tensor([3, 0, 10, 3, 7, 3, 1, 0, 9, 2, 5, 3, 4], dtype=torch.int32)  # repeats: grads add up
    w, dy = randn(rows, d, seed=65).float(), randn(M, d, seed=66).float()
    text = ops_program("nn.embedding", [((M,), "i32"), ((rows, d), "f32")], [((M, d), "f32")])
    close64(ref64(text, [ids, w])[0], F.embedding(ids.long(), w.double()))
    text = ops_program("nn.embedding_grad", [((M, d), "f32"), ((M,), "i32")], [((rows, d), "f32")])
    (want,) = grads_of(lambda w: F.embedding(ids.long(), w), [w], dy.double())
    close64(ref64(text, [dy, ids])[0], want)


def _sdpa(qkv, b, s, heads, kv, hd, causal):
    """Independent attention: torch's scaled_dot_product_attention with GQA, packed qkv rows
    (sequence-major, then tokens) -> [B*S, H*hd]."""
    p = qkv.reshape(b, s, heads + 2 * kv, hd).transpose(1, 2)
    q, k, v = p[:, :heads], p[:, heads : heads + kv], p[:, heads + kv :]
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    return out.transpose(1, 2).reshape(b * s, heads * hd)


@pytest.mark.parametrize("causal", [True, False])
def test_attention_fwd_and_grad_are_pytorch(causal):
    b, s, heads, kv, hd = 2, 5, 4, 2, 4
    m, n = b * s, (heads + 2 * kv) * hd
    qkv, dout = randn(m, n, seed=67).float(), randn(m, heads * hd, seed=68).float()
    props = f"heads = {heads} : i64, kv_heads = {kv} : i64, head_dim = {hd} : i64, seq_len = {s} : i64, causal = {str(causal).lower()}"
    want = _sdpa(qkv.double(), b, s, heads, kv, hd, causal)
    text = ops_program("nn.attention", [((m, n), "f32")], [((m, heads * hd), "f32")], props)
    close64(ref64(text, [qkv])[0], want)
    text = ops_program("nn.attention_fwd", [((m, n), "f32")], [((m, heads * hd), "f32"), ((m * heads,), "f32")], props)
    out, lse = ref64(text, [qkv])
    close64(out, want)
    # the log-sum-exp of the scaled scores of every (sequence, head, row), in that order
    p = qkv.double().reshape(b, s, heads + 2 * kv, hd).transpose(1, 2)
    q, k = p[:, :heads], p[:, heads : heads + kv].repeat_interleave(heads // kv, 1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
    if causal:
        scores = scores + torch.full((s, s), -math.inf, dtype=torch.float64).triu(1)
    close64(lse, torch.logsumexp(scores, dim=-1).reshape(-1))
    text = ops_program(
        "nn.attention_grad",
        [((m, n), "f32"), ((m, heads * hd), "f32"), ((m * heads,), "f32"), ((m, heads * hd), "f32")],
        [((m, n), "f32")],
        props,
    )
    (got,) = ref64(text, [qkv, out.float(), lse.float(), dout])
    (want_grad,) = grads_of(lambda x: _sdpa(x, b, s, heads, kv, hd, causal), [qkv], dout.double())
    close64(got, want_grad)


def test_concat_and_slice():
    a, b = randn(M, N, seed=69).float(), randn(M, 7, seed=70).float()
    text = ops_program("nn.concat", [((M, N), "f32"), ((M, 7), "f32")], [((M, N + 7), "f32")], "axis = 1 : i64")
    close64(ref64(text, [a, b])[0], torch.cat([a.double(), b.double()], dim=1))
    text = ops_program("nn.concat", [((M, N), "f32"), ((M, N), "f32")], [((2 * M, N), "f32")], "axis = 0 : i64")
    close64(ref64(text, [a, a])[0], torch.cat([a.double(), a.double()], dim=0))
    text = ops_program("nn.slice", [((M, N), "f32")], [((M, 6), "f32")], "axis = 1 : i64, start = 9 : i64")
    close64(ref64(text, [a])[0], a.double()[:, 9:15])
    text = ops_program("nn.slice", [((M, N), "f32")], [((4, N), "f32")], "axis = 0 : i64, start = 2 : i64")
    close64(ref64(text, [a])[0], a.double()[2:6])


def test_f32_results_stay_f32_in_every_compute_dtype():
    """A loss, row statistics and the attention log-sum-exp are f32 by definition: a bf16 (or
    f16) reference computes them in fp32 and never rounds them to the program's type."""
    x = randn(M, N, seed=71, scale=2.0).bfloat16()
    t = torch.randint(0, N, (M,), generator=gen(72), dtype=torch.int32)
    cases = [
        (ops_program("nn.rms_norm_rstd", [((M, N), "bf16")], [((M,), "f32")], "eps = 1.0e-05 : f32"), [x],
         [torch.rsqrt(x.float().pow(2).mean(-1) + f32_value(1e-5))]),
        (ops_program("nn.row_dot", [((M, N), "bf16"), ((M, N), "bf16")], [((M,), "f32")]), [x, x],
         [(x.float() * x.float()).sum(-1)]),
        (ops_program("nn.cross_entropy_fwd", [((M, N), "bf16"), ((M,), "i32")], [((), "f32"), ((M,), "f32")],
                     'ignore_index = -100 : i64, reduction = "sum"'), [x, t],
         [F.cross_entropy(x.float(), t.long(), reduction="sum"), torch.logsumexp(x.float(), -1)]),
    ]
    for text, inputs, expected in cases:
        for dtype in (torch.bfloat16, torch.float16):
            outs = run_reference(text, inputs, dtype)
            for got, want in zip(outs, expected):
                assert got.dtype == torch.float32
                torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    # layer_norm_stats: both results; attention_fwd: the output is rounded, the lse is not
    text = ops_program("nn.layer_norm_stats", [((M, N), "bf16")], [((M,), "f32"), ((M,), "f32")], "eps = 1.0e-05 : f32")
    assert [o.dtype for o in run_reference(text, [x], torch.bfloat16)] == [torch.float32, torch.float32]
    props = "heads = 1 : i64, kv_heads = 1 : i64, head_dim = 4 : i64, seq_len = 13 : i64, causal = true"
    text = ops_program("nn.attention_fwd", [((M, 12), "bf16")], [((M, 4), "bf16"), ((M,), "f32")], props)
    assert [o.dtype for o in run_reference(text, [x[:, :12]], torch.bfloat16)] == [torch.bfloat16, torch.float32]


def test_every_nn_op_has_a_test_here():
    """Every op of the nn dialect is run by a test of this file (by its quoted name)."""
    from coda_ir.dialects.nn import NN

    source = Path(__file__).read_text()
    missing = [op.name for op in NN.operations if f'"{op.name}"' not in source]
    assert missing == []


# ============================================================================ rounding model


def test_bf16_rounds_once_per_op_and_float64_never_rounds():
    text = """
    func.func @f(%x: tensor<3x4xbf16>, %y: tensor<3x4xbf16>) -> (tensor<3x4xbf16>, tensor<3x4xbf16>) {
      %a = "nn.add"(%x, %y) : (tensor<3x4xbf16>, tensor<3x4xbf16>) -> tensor<3x4xbf16>
      %b = "nn.mul"(%a, %a) : (tensor<3x4xbf16>, tensor<3x4xbf16>) -> tensor<3x4xbf16>
      func.return %a, %b : tensor<3x4xbf16>, tensor<3x4xbf16>
    }"""
    x, y = randn(3, 4, seed=20).bfloat16(), randn(3, 4, seed=21).bfloat16()
    a, b = run_reference(text, [x, y], torch.bfloat16)
    a_exp = (x.float() + y.float()).bfloat16()
    assert torch.equal(a, a_exp) and torch.equal(b, (a_exp.float() * a_exp.float()).bfloat16())
    a64, b64 = run_reference(text, [x, y], torch.float64)
    assert a64.dtype == b64.dtype == torch.float64
    assert torch.equal(b64, (x.double() + y.double()) ** 2)
    # compute_dtype None keeps the IR's types; float32 overrides them
    an, _ = run_reference(text, [x, y])
    assert an.dtype == torch.bfloat16
    a32, _ = run_reference(text, [x, y], torch.float32)
    assert a32.dtype == torch.float32 and torch.equal(a32, x.float() + y.float())


def test_input_validation_and_func_selection():
    text = one_op("nn.relu", [("x", (2, 3), "f32")], ((2, 3), "f32"))
    with pytest.raises(ValueError, match="shape"):
        run_reference(text, [torch.zeros(3, 2)], torch.float64)
    with pytest.raises(ValueError, match="takes 1 inputs"):
        run_reference(text, [], torch.float64)
    with pytest.raises(ValueError, match="no func.func @g"):
        run_reference(text, [torch.zeros(2, 3)], torch.float64, func_name="g")


def test_autograd_flows_through_float64_reference():
    text = one_op("nn.rms_norm", [("x", (M, N), "f32"), ("w", (N,), "f32")], ((M, N), "f32"), "eps = 1.0e-05 : f32")
    x = randn(M, N, seed=22).requires_grad_(True)
    w = (1 + 0.1 * randn(N, seed=23)).requires_grad_(True)
    (out,) = run_reference(text, [x, w], torch.float64)
    gx, gw = torch.autograd.grad(out.sum(), [x, w])
    x2, w2 = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
    ex, ew = torch.autograd.grad(F.rms_norm(x2, (N,), w2, eps=f32_value(1e-5)).sum(), [x2, w2])
    torch.testing.assert_close(gx, ex) and torch.testing.assert_close(gw, ew)


# ============================================================================ the bar


def test_check_close_formula():
    ref64 = torch.tensor([1.0, -4.0, 2.0], dtype=torch.float64)
    ref_t = torch.tensor([1.0, -4.0, 2.5])  # gap 0.5
    bound = 2 * 0.5 + 1e-6 * 4.0
    ok, err, b = check_close(torch.tensor([1.0, -4.0, 3.0]), ref64, ref_t)
    assert ok and err == 1.0 and b == pytest.approx(bound)
    ok, err, _ = check_close(torch.tensor([1.0, -2.99, 2.0]), ref64, ref_t)
    assert not ok and err == pytest.approx(1.01)
    # zero gap: only the 1e-6 relative floor
    ok, _, b = check_close(ref64 + 3e-6, ref64, ref64)
    assert b == pytest.approx(4e-6) and ok
    assert not check_close(ref64 + 5e-6, ref64, ref64)[0]


def test_check_close_nan_inf_and_shapes():
    r = torch.tensor([float("nan"), 1.0], dtype=torch.float64)
    assert check_close(torch.tensor([float("nan"), 1.0]), r, r)[0]
    assert not check_close(torch.tensor([0.0, 1.0]), r, r)[0]
    finite = torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert not check_close(torch.tensor([1.0, float("nan")]), finite, finite + 1)[0]
    assert not check_close(torch.tensor([1.0, float("inf")]), finite, finite + 1)[0]
    assert not check_close(torch.zeros(3), finite, finite)[0]
    assert check_close(torch.tensor(2.0), torch.tensor(2.0, dtype=torch.float64), torch.tensor(2.0))[0]
    # an inf of ref64 (a log-sum-exp over nothing) must be matched by the same inf, then is left out
    inf = torch.tensor([-math.inf, 1.0], dtype=torch.float64)
    ok, err, _ = check_close(torch.tensor([-math.inf, 1.0]), inf, inf)
    assert ok and err == 0.0
    assert not check_close(torch.tensor([math.inf, 1.0]), inf, inf)[0]
    assert not check_close(torch.tensor([-1e30, 1.0]), inf, inf)[0]


def test_assert_matches_table():
    ref64 = [torch.ones(2, 3, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)]
    ref_t = [torch.ones(2, 3) + 0.01, torch.zeros(4)]
    results = assert_matches([torch.ones(2, 3).bfloat16(), torch.zeros(4)], ref64, ref_t, ["x2", "loss"])
    assert [r.ok for r in results] == [True, True]
    with pytest.raises(Mismatch) as info:
        assert_matches([torch.ones(2, 3) + 0.5, torch.zeros(4)], ref64, ref_t, ["x2", "loss"])
    message = str(info.value)
    assert "x2" in message and "FAIL" in message and "loss" in message and "error/bound" in message
    assert [r.ok for r in info.value.results] == [False, True]
    with pytest.raises(Mismatch, match="2 outputs but 1"):
        assert_matches([torch.ones(1), torch.ones(1)], ref64[:1], ref_t[:1])


def test_random_inputs_roles_and_determinism():
    path = PROGRAMS / "nn" / "lm_head.mlir"
    fn = load_func(path)
    assert [r.kind for r in argument_roles(fn)] == ["activation", "norm_weight", "weight", "targets"]
    x, wn, wlm, t = random_inputs(fn, seed=3)
    assert x.dtype == wn.dtype == wlm.dtype == torch.bfloat16 and t.dtype == torch.int32
    assert 0.9 < float(x.double().std()) < 1.1
    assert abs(float(wlm.double().std()) * math.sqrt(wlm.shape[1]) - 1) < 0.1
    assert abs(float(wn.double().mean()) - 1) < 0.05
    assert int((t == -100).sum()) >= 1 and bool(((t == -100) | ((t >= 0) & (t < 200))).all())
    assert all(torch.equal(a, b) for a, b in zip(random_inputs(fn, seed=3), [x, wn, wlm, t]))
    assert not torch.equal(random_inputs(fn, seed=4)[0], x)
    llama = load_func(PROGRAMS / "nn" / "llama_block.mlir")
    pos = random_inputs(llama, seed=0)[-1]
    assert pos.dtype == torch.int32 and int(pos.min()) >= 0 and int(pos.max()) < 4096
    assert random_inputs(llama, seed=0, dtype=torch.float32)[0].dtype == torch.float32


# ============================================================================ nn programs


NN_SMALL = sorted((PROGRAMS / "nn").glob("*.mlir"))
EXAMPLES = sorted((ROOT / "examples").glob("*.mlir"))


def test_programs_exist():
    names = {p.stem for p in NN_SMALL}
    assert {"llama_block", "gpt2_block", "qwen3_block", "lm_head"} <= names
    assert {"llama_block", "gpt2_block", "qwen3_block", "lm_head"} <= {p.stem for p in EXAMPLES}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_load_bf16(path):
    fn = load_func(path)
    assert program_dtype(fn) == torch.bfloat16
    assert all(op.name.startswith(("nn.", "func.")) for op in fn.body.blocks[0].ops)


@pytest.mark.parametrize("path", NN_SMALL, ids=lambda p: p.name)
def test_small_programs_run_and_reference_pair_is_consistent(path):
    fn = load_func(path)
    inputs = random_inputs(fn, seed=0)
    ref64, ref_t = reference_pair(fn, inputs)
    assert len(ref64) == len(ref_t) == len(fn.function_type.outputs.data)
    for r64, rt, ty in zip(ref64, ref_t, fn.function_type.outputs.data):
        assert r64.dtype == torch.float64 and rt.dtype == element_dtype(ty)
        assert bool(torch.isfinite(r64).all())
        # the low-precision reference is itself within the bar, with room to spare
        assert check_close(rt, r64, rt)[0]
    # a result rounded once from float64 is as good as the op-by-op reference in practice
    assert_matches([r.to(t.dtype) for r, t in zip(ref64, ref_t)], ref64, ref_t)


def test_qwen3_is_llama_plus_qk_norm():
    llama, qwen = PROGRAMS / "nn" / "llama_block.mlir", PROGRAMS / "nn" / "qwen3_block.mlir"
    ins = random_inputs(qwen, seed=1)
    hd = 32
    ones = torch.ones(hd, dtype=torch.bfloat16)
    lins = ins[:8] + [ins[9]]
    q64 = run_reference(qwen, ins[:8] + [ones] + [ins[9]], torch.float64)
    l64 = run_reference(llama, lins, torch.float64)
    # the blocks differ only in the norms' eps (1e-6 vs 1e-5)
    torch.testing.assert_close(q64[0], l64[0], rtol=0, atol=1e-4 * float(l64[0].abs().max()))
    # the qk-normed rotated heads have unit RMS per head; v heads are untouched by the norm
    qn = q64[1][:, : 4 * hd].reshape(-1, 4, hd)
    torch.testing.assert_close(qn.pow(2).mean(-1), torch.ones_like(qn[..., 0]), rtol=1e-4, atol=1e-4)


# ============================================================================ coda programs


CODA = list(coda_refs.PROGRAMS)


def test_generated_programs_are_up_to_date():
    result = subprocess.run(
        [sys.executable, str(PROGRAMS / "generate.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", CODA)
def test_coda_program_interpreter_matches_float64_reference(name):
    prog = coda_refs.PROGRAMS[name]
    inputs = coda_refs.make_inputs(name, seed=0)
    ref64, _ = coda_refs.reference_pair(name, inputs)
    out = run_coda(prog.path, inputs, torch.float64)
    assert len(out) == len(ref64) == len(prog.outputs)
    for o, r, label in zip(out, ref64, prog.outputs):
        assert o.shape == r.shape, label
        torch.testing.assert_close(o, r, rtol=1e-12, atol=1e-12 * max(1.0, float(r.abs().max())), msg=label)


@pytest.mark.parametrize("name", CODA)
def test_coda_program_fp32_interpretation_meets_the_bar(name):
    """What a correct lowering does: fp32 tiles, rounded stores. Must pass the NN_DIALECT bar
    against the program's (ref64, ref_T), and match ref_T to about one rounding."""
    prog = coda_refs.PROGRAMS[name]
    inputs = coda_refs.make_inputs(name, seed=1)
    ref64, ref_t = coda_refs.reference_pair(name, inputs)
    out = run_coda(prog.path, inputs, torch.float32)
    for o, rt in zip(out, ref_t):
        assert o.dtype == rt.dtype
    assert_matches(out, ref64, ref_t, [f"{name}.{n}" for n in prog.outputs])
    for o, rt, label in zip(out, ref_t, prog.outputs):
        tol = BF16_EPS if rt.dtype == torch.bfloat16 else 1e-5
        torch.testing.assert_close(o.double(), rt.double(), rtol=tol, atol=tol * float(rt.double().abs().max()), msg=label)


@pytest.mark.parametrize("name", [n for n in CODA if coda_refs.PROGRAMS[n].nn_program])
def test_coda_reference_agrees_with_nn_block(name):
    """The deferred-norm / interleaved / fused math equals the nn block op by op (float64)."""
    prog = coda_refs.PROGRAMS[name]
    inputs = coda_refs.make_inputs(name, seed=2)
    nn_path = PROGRAMS / "nn" / f"{prog.nn_program}.mlir"
    n_nn = len(load_func(nn_path).body.blocks[0].args)
    nn64 = run_reference(nn_path, inputs[:n_nn], torch.float64)
    ref64, _ = coda_refs.reference_pair(name, inputs)
    # gpt2 uses f32-rounded c/e vectors and GELU constants: agreement to ~1e-7 relative
    rtol = 1e-6 if name == "gpt2_fwd" else 1e-12
    for a, b in zip(nn64, ref64):
        torch.testing.assert_close(b, a, rtol=rtol, atol=rtol * float(a.abs().max()))


def test_llama_bwd_reference_is_the_gradient_of_the_nn_block():
    x0, y0, wo, wn0, wgu, wd, wn1, wqkv, pos = [
        t.double() if t.dtype.is_floating_point else t for t in coda_refs.make_inputs("llama_fwd", seed=3)
    ]
    leaves = [x0, y0, wo, wgu, wd, wqkv, wn0, wn1]
    for t in leaves:
        t.requires_grad_(True)
    nn_path = PROGRAMS / "nn" / "llama_block.mlir"
    x2, qkv = run_reference(nn_path, [x0, y0, wo, wn0, wgu, wd, wn1, wqkv, pos], torch.float64)
    dqkv, dx2 = randn(*qkv.shape, seed=30), randn(*x2.shape, seed=31)
    grads = torch.autograd.grad((qkv * dqkv).sum() + (x2 * dx2).sum(), leaves)
    with torch.no_grad():
        det = [t.detach() for t in (x0, y0, wo, wn0, wgu, wd, wn1, wqkv)]
        sx2, sqkv, sx1, sz1, r1, r2 = coda_refs.llama_fwd(*det, pos)
        dx0, dy0, dwo, dwgu, dwd, dwqkv, dwn0, dwn1 = coda_refs.llama_bwd(
            dqkv, dx2, sqkv, sx1, sx2, sz1, r1, r2, det[1], pos, det[2], det[4], det[5], det[7], det[3], det[6]
        )
    for got, want in zip((dx0, dy0, dwo, dwgu, dwd, dwqkv, dwn0, dwn1), grads):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10 * float(want.abs().max()))


def test_interleave_perm():
    assert interleave_perm(8, 4).tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    assert interleave_perm(8, 2).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]
    assert interleave_perm(6, 1).tolist() == [0, 1, 2, 3, 4, 5]


def test_dropping_interleave_breaks_the_swiglu_pairing():
    """Dropping `interleave` from llama_fwd's F2 (the SwiGLU would then pair wrong columns) must
    change y1 -- so the tests above really exercise the interleaved layout."""
    prog = coda_refs.PROGRAMS["llama_fwd"]
    text = prog.path.read_text().replace("transpose_b interleave 160 ", "transpose_b ")
    assert text != prog.path.read_text()
    inputs = coda_refs.make_inputs("llama_fwd", seed=0)
    good = run_coda(prog.path, inputs, torch.float64)
    bad = run_coda(text, inputs, torch.float64)
    assert torch.equal(good[3], bad[3])  # z1 is stored in the user's layout either way
    assert not torch.allclose(good[0], bad[0])  # but x2 depends on the SwiGLU pairing
