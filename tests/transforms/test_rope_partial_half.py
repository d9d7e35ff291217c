"""Partial half-style RoPE whose rotary_dim does not divide head_dim (issue 30: Phi-4-mini,
96 of 128): pairs (i, i + rd/2) for i < rd/2 of each head rotate by frequency i, the head's
columns rd..hd-1 pass through. `lower_nn.rope_epilogue` writes it as `coda.pair_map stride rd/2
period hd` (the tail paired adjacently, angle 0); standalone (pairs gathered from memory), in the
QKV GEMM's epilogue (whole heads in a tile, or the whole row exchanged in one tile) and, when
neither fits, as a separate kernel with a located remark. Forward and gradients against float64:
the references of `coda_ir.testing` and an independent float64 transcription of Hugging Face's
Phi3 `apply_rotary_pos_emb` (`hf_rope64`)."""

from __future__ import annotations

import pytest
import torch
from xdsl.passes import PassPipeline

import coda_ir
from coda_ir import testing
from coda_ir.context import coda_passes, make_context
from coda_ir.dialects import coda
from coda_ir.interpreters import run_coda
from coda_ir.interpreters.nn import run_nn
from test_rope_scaled import _freqs, hf_rope64, linear_rope_program, rope_program  # tests/transforms on sys.path

# (head_dim, rotary_dim, rotary heads, heads): Phi-4-mini's head; an odd, non-power-of-two head
CASES = [(128, 96, 2, 3), (40, 24, 3, 5), (16, 12, 4, 4)]


def _pair_maps(module) -> list[coda.PairMapOp]:
    return [op for op in module.walk() if isinstance(op, coda.PairMapOp)]


def _phi3_rope64(x: torch.Tensor, pos: torch.Tensor, hd: int, heads: int, freqs: list[float], scaling: float) -> torch.Tensor:
    """Hugging Face's Phi3 rotation (`hf_rope64`, style "half") in float64 of the angles the
    kernels form: `pos * inv_freq` rounded once to fp32 (at positions in the thousands that
    rounding, not the rotation, dominates the difference from exact angles)."""
    angle = (pos.float()[:, None] * torch.tensor(freqs, dtype=torch.float32)[None, :]).double()
    m, rd = x.shape[0], 2 * len(freqs)
    emb = torch.cat([angle, angle], dim=-1)
    cos, sin = emb.cos() * scaling, emb.sin() * scaling
    q = x.double()[:, : heads * hd].reshape(m, heads, hd)
    q_rot, q_pass = q[..., :rd], q[..., rd:]
    rotated = torch.cat([-q_rot[..., rd // 2:], q_rot[..., : rd // 2]], dim=-1)
    out = torch.cat([q_rot * cos[:, None] + rotated * sin[:, None], q_pass], dim=-1)
    return torch.cat([out.reshape(m, heads * hd), x.double()[:, heads * hd:]], dim=1)


def _phi3_grad64(dy: torch.Tensor, pos: torch.Tensor, hd: int, heads: int, freqs: list[float], scaling: float) -> torch.Tensor:
    """The gradient of `_phi3_rope64` (float64 autograd: the transpose of the rotation)."""
    x = torch.zeros(dy.shape, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(_phi3_rope64(x, pos, hd, heads, freqs, scaling), x, dy.double())
    return g


@pytest.mark.parametrize("hd, rd, heads, total", CASES)
def test_lowering_emits_a_pair_map_with_a_period(hd, rd, heads, total):
    module = coda_ir.parse(rope_program(5, hd, heads, total, "half", rd, 1.0, _freqs(rd), "f32"))
    PassPipeline.parse_spec(coda_passes(), "nn-to-coda{fuse=false}").apply(make_context(), module)
    (pm,) = _pair_maps(module)
    assert (pm.stride.value.data, pm.period.value.data) == (rd // 2, hd)  # type: ignore[union-attr]
    first, second = pm.pair_columns(hd // 2)
    assert first == [*range(rd // 2), *range(rd, hd, 2)]
    assert second == [*range(rd // 2, rd), *range(rd + 1, hd, 2)]


STANDALONE_PIPELINES = ["nn-autodiff,nn-to-coda{fuse=false}", "nn-autodiff,nn-to-coda",
                        "nn-autodiff,nn-to-coda{rope-table=always}"]


def pytest_generate_tests(metafunc):
    # --long: every head x pipeline x dtype (18). CI: each head in each dtype, the pipelines
    # rotated over them (f32: head i with pipeline i, bf16: head i with pipeline i + 1), so every
    # head, every pipeline and every dtype runs, each pipeline in both dtypes and each head with
    # two pipelines (6 cases)
    if metafunc.function.__name__ != "test_standalone_partial_half_rope_matches_float64":
        return
    if metafunc.config.getoption("--long"):
        cases = [(dt, c, p) for dt in ("f32", "bf16") for c in CASES for p in STANDALONE_PIPELINES]
    else:
        cases = [(dt, c, STANDALONE_PIPELINES[(i + shift) % len(STANDALONE_PIPELINES)])
                 for dt, shift in (("f32", 0), ("bf16", 1)) for i, c in enumerate(CASES)]
    metafunc.parametrize("dt, hd, rd, heads, total, pipeline", [(dt, *c, p) for dt, c, p in cases],
                         ids=[f"{dt}-{'-'.join(map(str, c))}-{p}" for dt, c, p in cases])


def test_standalone_partial_half_rope_matches_float64(hd, rd, heads, total, dt, pipeline):
    scaling = 1.1609
    freqs = _freqs(rd)
    source = rope_program(9, hd, heads, total, "half", rd, scaling, freqs, dt)
    program = coda_ir.compile(source, pipeline)
    inputs = testing.random_inputs(source, seed=hd + rd)
    (y,) = [program.g(*inputs)]
    testing.check_against_reference(source, inputs, y)
    testing.check_gradients(program, source, inputs, seed=5)
    if dt == "f32":
        # one fp32 rounding of the rotation: against Hugging Face's formula in float64
        x, pos = inputs
        scaling32 = float(torch.tensor(scaling, dtype=torch.float32))
        torch.testing.assert_close(y.double(), _phi3_rope64(x, pos, hd, heads, freqs, scaling32), rtol=2e-6, atol=2e-6)
        # the pass-through columns of every head and the heads past rotary_heads are x, bit for bit
        m = x.shape[0]
        assert torch.equal(y[:, : heads * hd].reshape(m, heads, hd)[..., rd:], x[:, : heads * hd].reshape(m, heads, hd)[..., rd:])
        assert torch.equal(y[:, heads * hd:], x[:, heads * hd:])
        fwd = program.g_fwd(*inputs)
        saved = list(fwd)[1:] if isinstance(fwd, (list, tuple)) else []
        dy = torch.randn_like(x)
        dx = program.g_bwd(*saved, dy)
        dx = dx[0] if isinstance(dx, (list, tuple)) else dx
        torch.testing.assert_close(dx.double(), _phi3_grad64(dy, pos, hd, heads, freqs, scaling32), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("rope_table", ["never", "always"])
@pytest.mark.parametrize("hd, rd, heads, total", [(128, 96, 1, 2), (40, 24, 3, 4), (16, 12, 3, 4),
                                                  (16, 12, 20, 32)])  # 512 columns: several column tiles
def test_partial_half_rope_rides_in_the_gemm_epilogue(hd, rd, heads, total, rope_table):
    """One kernel forward: the QKV GEMM's epilogue holds the period pair map (whole heads in a
    tile for a power-of-two head_dim; hd 40 x 4 = 160 columns exchanged in one tile covering the
    row); forward and gradients match float64."""
    source = linear_rope_program(11, 24, hd, heads, total, "half", rd, 1.0823, _freqs(rd), "bf16")
    fwd = coda_ir.parse(source)
    PassPipeline.parse_spec(coda_passes(), f"nn-to-coda{{rope-table={rope_table}}}").apply(make_context(), fwd)
    kernels = [k for k in coda.kernels(fwd) if "table" not in str(k.attributes.get("coda.origin", ""))]
    assert [k.name for k in kernels] == ["coda.gemm"] and kernels[0].interleave is None  # type: ignore[attr-defined]
    (pm,) = _pair_maps(kernels[0])
    assert pm.period is not None and pm.period.value.data == hd
    program = coda_ir.compile(source, f"nn-autodiff,nn-to-coda{{rope-table={rope_table}}}")
    inputs = testing.random_inputs(source, seed=rd)
    testing.check_against_reference(source, inputs, program.g(*inputs))
    testing.check_gradients(program, source, inputs, seed=7)


def test_partial_half_rope_that_cannot_fuse_stays_separate_with_a_remark(capsys):
    # head_dim 40: no power-of-two tile holds whole heads, and 8 heads (320 columns) are more
    # than one GEMM tile covers: a separate elementwise kernel reading its pairs from memory
    hd, rd, heads, total = 40, 24, 6, 8
    source = linear_rope_program(7, 16, hd, heads, total, "half", rd, 1.0, None, "f32")
    fwd = coda_ir.parse(source)
    PassPipeline.parse_spec(coda_passes(), "nn-to-coda{rope-table=never}").apply(make_context(), fwd)
    err = capsys.readouterr().err
    assert "<input>:3:" in err and "not fused into the epilogue of" in err and "period 40" in err
    assert [k.name for k in coda.kernels(fwd)] == ["coda.gemm", "coda.elementwise"]
    (pm,) = _pair_maps(fwd)
    assert coda.is_gathered(pm)
    program = coda_ir.compile(source, "nn-autodiff,nn-to-coda")
    inputs = testing.random_inputs(source, seed=3)
    testing.check_against_reference(source, inputs, program.g(*inputs))
    testing.check_gradients(program, source, inputs, seed=3)


@pytest.mark.parametrize("hd, rd, heads, total", CASES)
def test_coda_interpreter_runs_the_period_pair_map_in_float64(hd, rd, heads, total):
    # the coda program (after nn-to-coda, forward and gradient) on the coda interpreter in
    # float64 against Hugging Face's rotation and its transpose
    source = rope_program(6, hd, heads, total, "half", rd, 0.9, _freqs(rd), "f32")
    module = coda_ir.parse(source)
    PassPipeline.parse_spec(coda_passes(), "nn-autodiff,nn-to-coda{fuse=false}").apply(make_context(), module)
    torch.manual_seed(2)
    x, dy = torch.randn(6, hd * total, dtype=torch.float64), torch.randn(6, hd * total, dtype=torch.float64)
    pos = torch.randint(0, 3000, (6,), dtype=torch.int32)
    scaling32 = float(torch.tensor(0.9, dtype=torch.float32))
    expected = hf_rope64(x, pos, hd, heads, "half", torch.tensor(_freqs(rd)), scaling32)
    (y, *saved) = run_coda(module, [x, pos], func_name="g_fwd")
    torch.testing.assert_close(y, expected, rtol=1e-12, atol=1e-12)
    (dx,) = run_coda(module, [*saved, dy], func_name="g_bwd")
    xg = torch.zeros_like(x, requires_grad=True)
    (expected_dx,) = torch.autograd.grad(hf_rope64(xg, pos, hd, heads, "half", torch.tensor(_freqs(rd)), scaling32), xg, dy)
    torch.testing.assert_close(dx, expected_dx, rtol=1e-12, atol=1e-12)
    (ref,) = run_nn(source, [x, pos], compute_dtype=torch.float64)
    torch.testing.assert_close(ref, expected, rtol=1e-12, atol=1e-12)
