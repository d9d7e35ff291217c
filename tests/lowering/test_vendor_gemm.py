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
from coda_ir.runtime import gemm_launch
from coda_ir.testing import check_gradients, format_table, random_inputs, random_upstream

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


def test_cpu_runs_the_tl_kernel_with_the_same_results(monkeypatch):
    """Under the interpreter the record is inert (the library is never called): forward and
    backward equal, bitwise, those of the program compiled with `mainloop=tl`."""
    calls = []
    monkeypatch.setattr(gemm_launch, "vendor_gemm", lambda *a, **kw: calls.append(a) or False)
    text = nn_llama_block(SMALL)
    with_record = compiled(text, "nn-autodiff,nn-to-coda")
    without = compiled(text, "nn-autodiff,nn-to-coda{mainloop=tl}")
    args = random_inputs(text, seed=5)
    ups = random_upstream(text, seed=6)
    outs = []
    for cm in (with_record, without):
        fwd = cm.llama_block_fwd(*args)
        outs.append((fwd, cm.llama_block_bwd(*fwd[2:], *ups)))
    assert not calls
    (f1, b1), (f2, b2) = outs
    for got, want in zip([*f1, *b1], [*f2, *b2]):
        assert torch.equal(got, want)


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_vendor_gemm_maps_operands_and_transposes(ta, tb):
    """The operand mapping (transposes as strided views) against float64, on CPU where the library
    is PyTorch's own matmul: the same call `launch_gemm` makes on a GPU. Operands that require
    grad are detached (`out=` refuses them)."""
    m, n, k = 67, 97, 131
    g = torch.Generator().manual_seed(m + n + k + 2 * ta + tb)
    a = torch.randn((k, m) if ta else (m, k), generator=g).to(torch.bfloat16).requires_grad_(True)
    b = torch.randn((n, k) if tb else (k, n), generator=g).to(torch.bfloat16).requires_grad_(True)
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    assert gemm_launch.vendor_gemm(a, b, out, transpose_a=ta, transpose_b=tb) is True
    want = (a.detach().double().T if ta else a.detach().double()) @ (b.detach().double().T if tb else b.detach().double())
    assert not out.requires_grad
    # one bf16 rounding of an f32 sum of k products
    assert (out.double() - want).abs().max().item() <= 2.0 ** -8 * want.abs().max().item() + 1e-4 * k


def test_vendor_gemm_declines_what_it_cannot_write():
    """An f32 output of bf16 operands off CUDA (no `out_dtype` kernel there), or operands on
    another device than the output: nothing is written, the caller runs the tl kernel."""
    a = torch.randn(5, 7, dtype=torch.bfloat16)
    b = torch.randn(7, 3, dtype=torch.bfloat16)
    out = torch.full((5, 3), float("nan"), dtype=torch.float32)
    assert gemm_launch.vendor_gemm(a, b, out, transpose_a=False, transpose_b=False) is False
    assert torch.isnan(out).all()
    meta = torch.empty((5, 3), dtype=torch.bfloat16, device="meta")
    assert gemm_launch.vendor_gemm(a, b, meta, transpose_a=False, transpose_b=False) is False


def test_a_vendor_launch_with_more_than_its_output_is_a_bug(monkeypatch):
    """The host code hands a vendor gemm its one output; anything else is a compiler bug, reported
    as one (never a wrong product). The check runs where the library would: a GPU tensor outside
    the interpreter; a tensor that claims to be on CUDA stands in for one here."""
    monkeypatch.setattr(gemm_launch, "interpreting", lambda: False)

    class OnCuda(torch.Tensor):
        @property
        def is_cuda(self):  # noqa: D401  (the only property launch_gemm reads before the check)
            return True

    a = torch.zeros(4, 4, dtype=torch.bfloat16).as_subclass(OnCuda)
    with pytest.raises(InternalError, match="vendor gemm's arguments"):
        gemm_launch.launch_gemm(None, a, a, lambda _cfg: (torch.zeros(4, 4), torch.zeros(4, 4)), M=4, N=4, K=4,
                                transpose_a=False, transpose_b=False, vendor="cublas")


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
def test_gpu_vendor_gemm_is_capturable():
    """Inside CUDA-graph capture the library path neither synchronizes nor changes its mind: an
    f32-output gemm captured first, then replayed, writes the product."""
    a = torch.randn(96, 160, device="cuda").to(torch.bfloat16)
    b = torch.randn(160, 67, device="cuda").to(torch.bfloat16)
    out = torch.zeros(96, 67, device="cuda", dtype=torch.float32)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        took = gemm_launch.vendor_gemm(a, b, out, transpose_a=False, transpose_b=False)
    torch.cuda.current_stream().wait_stream(stream)
    assert took is gemm_launch.MM_WRITES_F32
    if took:
        graph.replay()
        torch.cuda.synchronize()
        want = a.double() @ b.double()
        assert (out.double() - want).abs().max().item() <= 1e-5 * want.abs().max().item() + 1e-4 * 160


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_program_runs_the_library_and_keeps_its_gradients():
    """The LLaMA block on the GPU: every recorded gemm takes the library path (on a PyTorch
    without `out_dtype`, the f32-output dgrads fall back to the tl kernel), and the results and
    every gradient meet the NN_DIALECT.md bar against float64."""
    text = nn_llama_block(SMALL)
    cm = compiled(text, "nn-autodiff,nn-to-coda")
    args = random_inputs(text, seed=5, device="cuda")
    paths = []
    real = gemm_launch.vendor_gemm

    def spy(*a, **kw):
        done = real(*a, **kw)
        paths.append(done)
        return done

    gemm_launch.vendor_gemm = spy
    try:
        results = check_gradients(cm, text, args, seed=6)
    finally:
        gemm_launch.vendor_gemm = real
    assert all(r.ok for r in results), format_table(results)
    assert len(paths) == 8
    assert all(paths) if gemm_launch.MM_WRITES_F32 else any(paths)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_same_inputs_same_bits():
    """Determinism with the library in the backward: two runs of forward + backward on the same
    inputs give the same bits."""
    text = nn_llama_block(SMALL)
    cm = compiled(text, "nn-autodiff,nn-to-coda")
    args = random_inputs(text, seed=7, device="cuda")
    ups = random_upstream(text, seed=8, device="cuda")
    runs = []
    for _ in range(2):
        fwd = cm.llama_block_fwd(*args)
        runs.append([*fwd[:2], *cm.llama_block_bwd(*fwd[2:], *ups)])
    for a, b in zip(*runs):
        assert torch.equal(a, b)


def test_readme_vendor_gemm_snippet_runs(capsys):
    import re

    doc = (ROOT / "README.md").read_text()
    snippet = next(s for s in re.findall(r"```python\n(.*?)```", doc, re.S) if "vendor-gemms=false" in s)
    exec(compile(snippet, "README.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out == ["4 #coda.vendor_gemm<cublas>", "4 0"]
