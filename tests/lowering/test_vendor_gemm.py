"""Plain gemms on the vendor library (issue 11): `coda-plan-mainloop` records
`#coda.vendor_gemm<cublas>` on every gemm whose epilogue stores the accumulator alone, the host
code passes it to `launch_gemm`, which runs cuBLAS (`torch.mm`) on a GPU and the tl kernel
elsewhere. On CPU (the interpreter) the record is inert: the results are the tl kernel's, bitwise
those of the program compiled with `mainloop=tl`. The GPU tests check the library's results against
float64 at odd shapes, with transposes and a widened (f32) output."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import coda_ir
from coda_ir import remarks
from coda_ir.dialects import coda
from coda_ir.errors import InternalError
from coda_ir.lowering import gemm_launch
from coda_ir.testing import random_inputs, random_upstream

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "programs"))

from generate import Llama, nn_llama_block  # noqa: E402

SMALL = Llama("small", m=67, d=96, f=160, hd=32, hq=3, hkv=1, eps=1e-5, theta=500000.0)


def compiled(text: str, pipeline: str):
    with remarks.printed_remarks(False):
        return coda_ir.compile(text, pipeline=pipeline)


def gemms(cm) -> list[coda.GemmOp]:
    return [k for k in cm.ir.walk() if isinstance(k, coda.GemmOp)]


def test_the_backward_plain_gemms_carry_the_record():
    """The LLaMA block's backward: its 8 dgrad / weight-gradient gemms store the accumulator
    alone and get the record; the forward's fused gemms do not. The host code names it once per
    recorded gemm."""
    cm = compiled(nn_llama_block(SMALL), "nn-autodiff,nn-to-coda")
    recorded = [k for k in gemms(cm) if coda.recorded_vendor_gemm(k) is not None]
    assert recorded and all(coda.is_plain_gemm(k) for k in recorded)
    assert all(coda.recorded_vendor_gemm(k) is None for k in gemms(cm) if not coda.is_plain_gemm(k))
    assert len(recorded) == 8
    assert cm.source.count("vendor='cublas'") == len(recorded)
    tl_only = compiled(nn_llama_block(SMALL), "nn-autodiff,nn-to-coda{mainloop=tl}")
    assert all(coda.recorded_vendor_gemm(k) is None for k in gemms(tl_only))
    assert "vendor=" not in tl_only.source


def test_cpu_runs_the_tl_kernel_with_the_same_results():
    """Under the interpreter the record is inert: forward and backward equal, bitwise, those of
    the program compiled with `mainloop=tl`."""
    text = nn_llama_block(SMALL)
    with_record = compiled(text, "nn-autodiff,nn-to-coda")
    without = compiled(text, "nn-autodiff,nn-to-coda{mainloop=tl}")
    args = random_inputs(text, seed=5)
    ups = random_upstream(text, seed=6)
    outs = []
    for cm in (with_record, without):
        fwd = cm.llama_block_fwd(*args)
        outs.append((fwd, cm.llama_block_bwd(*fwd[2:], *ups)))
        assert gemm_launch.LAST_LAUNCH["path"] != "vendor:cublas"
    (f1, b1), (f2, b2) = outs
    for got, want in zip([*f1, *b1], [*f2, *b2]):
        assert torch.equal(got, want)


def test_vendor_gemm_declines_off_the_gpu():
    """Off a CUDA device the library path does nothing and says so (the caller runs the tl kernel)."""
    a = torch.randn(5, 7, dtype=torch.bfloat16)
    b = torch.randn(7, 3, dtype=torch.bfloat16)
    out = torch.full((5, 3), float("nan"), dtype=torch.bfloat16)
    assert gemm_launch.vendor_gemm(a, b, out, transpose_a=False, transpose_b=False) is False
    assert torch.isnan(out).all()


# ---------------------------------------------------------------------------------------- GPU

CASES = [  # (M, N, K, transpose_a, transpose_b, output dtype): odd sizes, both transposes, f32 outputs
    (67, 160, 96, False, False, torch.bfloat16),
    (131, 97, 257, False, True, torch.bfloat16),
    (96, 67, 160, True, False, torch.bfloat16),
    (255, 129, 77, False, False, torch.float32),
    (160, 96, 67, True, False, torch.float32),
]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("m,n,k,ta,tb,out_dtype", CASES)
def test_gpu_vendor_gemm_matches_float64(m, n, k, ta, tb, out_dtype):
    g = torch.Generator(device="cuda").manual_seed(m * n + k)
    a = torch.randn((k, m) if ta else (m, k), device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn((n, k) if tb else (k, n), device="cuda", generator=g).to(torch.bfloat16)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=out_dtype)
    if not gemm_launch.vendor_gemm(a, b, out, transpose_a=ta, transpose_b=tb):
        assert out_dtype == torch.float32 and not gemm_launch._mm_out_dtype_ok(a.device)
        pytest.skip("this PyTorch has no torch.mm(..., out_dtype=): the tl kernel runs instead")
    want = (a.double().T if ta else a.double()) @ (b.double().T if tb else b.double())
    # f32 accumulation of k products of N(0, 1) values: |error| ~ k * 2^-24 * |terms|; the bf16
    # output adds one rounding (2^-8 relative)
    bound = (2.0 ** -8 if out_dtype == torch.bfloat16 else 1e-5) * want.abs().max().item() + 1e-4 * k
    assert (out.double() - want).abs().max().item() <= bound


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_program_runs_the_library_and_keeps_its_gradients():
    """The LLaMA block on the GPU: every recorded gemm takes the library path, and forward and
    backward agree with the `mainloop=tl` program within the bf16 rounding of their outputs."""
    text = nn_llama_block(SMALL)
    with_record = compiled(text, "nn-autodiff,nn-to-coda")
    without = compiled(text, "nn-autodiff,nn-to-coda{mainloop=tl}")
    args = random_inputs(text, seed=5, device="cuda")
    ups = random_upstream(text, seed=6, device="cuda")
    paths = []
    real = gemm_launch.vendor_gemm

    def spy(*a, **kw):
        done = real(*a, **kw)
        paths.append(done)
        return done

    gemm_launch.vendor_gemm = spy
    try:
        fwd = with_record.llama_block_fwd(*args)
        got = [*fwd[:2], *with_record.llama_block_bwd(*fwd[2:], *ups)]
    finally:
        gemm_launch.vendor_gemm = real
    assert paths and all(paths)
    fwd = without.llama_block_fwd(*args)
    want = [*fwd[:2], *without.llama_block_bwd(*fwd[2:], *ups)]
    for g, w in zip(got, want):
        scale = w.float().abs().max().item() or 1.0
        assert (g.float() - w.float()).abs().max().item() <= 0.05 * scale


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (off it the record is inert)")
def test_gpu_vendor_launch_with_more_than_its_output_is_a_bug():
    """The host code hands a vendor gemm its one output; anything else is a compiler bug, reported
    as one (never a wrong product)."""
    a = torch.zeros(4, 4, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(InternalError, match="vendor gemm's arguments"):
        gemm_launch.launch_gemm(None, a, a, lambda _cfg: (a, torch.empty_like(a)), M=4, N=4, K=4,
                                transpose_a=False, transpose_b=False, vendor="cublas")


def test_readme_vendor_gemm_snippet_runs(capsys):
    import re

    doc = (ROOT / "README.md").read_text()
    snippet = next(s for s in re.findall(r"```python\n(.*?)```", doc, re.S) if "vendor-gemms=false" in s)
    exec(compile(snippet, "README.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out == ["4 #coda.vendor_gemm<cublas>", "4 0"]
