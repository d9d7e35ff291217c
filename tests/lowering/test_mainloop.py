"""The GEMM mainloop template under the CPU interpreter: portable and TMA paths, odd shapes,
bf16/f16/f32, transposed operands, interleaved columns, a persistent tile loop."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
import uuid

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from coda_ir import tiling  # noqa: E402
from coda_ir.runtime import gemm_launch  # noqa: E402

from .helpers import use_gemm_path, use_launch_options  # noqa: E402
from coda_ir.lowering.mainloop import (  # noqa: E402
    TEMPLATE_NAMES,
    emit_gemm_kernel,
    interleave_rows_source,
    prefetch_l2_source,
)

STORE_EPILOGUE = [
    "    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :]",
    "    tl.store(c_ptrs, acc, mask=mask_m[:, None] & mask_n[None, :])",
]

# SwiGLU-style 2 -> 1 on interleaved columns: out[:, c // 2] = acc[:, c even] * acc[:, c odd].
PAIR_EPILOGUE = [
    "    pairs = tl.reshape(acc, (BM, BN // 2, 2))",
    "    g, u = tl.split(pairs)",
    "    offs_h = pid_n * (BN // 2) + tl.arange(0, BN // 2)",
    "    o_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_h[None, :]",
    "    tl.store(o_ptrs, g * u, mask=mask_m[:, None] & (offs_h < N // 2)[None, :])",
]


# The 2 -> 1 epilogue again, on the even/odd column halves the mainloop exposes.
PAIR_SPLIT_EPILOGUE = [
    "    offs_h = pid_n * (BN // 2) + tl.arange(0, BN // 2)",
    "    o_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_h[None, :]",
    "    tl.store(o_ptrs, acc_lo * acc_hi, mask=mask_m[:, None] & (offs_h < N // 2)[None, :])",
]

# A prologue (before the K loop) that prefetches and loads a per-column vector; c = acc + v[n].
BIAS_PROLOGUE = [
    "    _coda_prefetch_l2(v_ptr + offs_n, mask_n, L2_PREFETCH)",
    "    v = tl.load(v_ptr + offs_n, mask=mask_n, other=0.0)",
]
BIAS_EPILOGUE = [
    "    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :]",
    "    tl.store(c_ptrs, acc + v[None, :], mask=mask_m[:, None] & mask_n[None, :])",
]


def _build(epilogue, float32_operands, tmp_path_factory, params=("c_ptr", "stride_cm"), prologue=()):
    name = f"k_{uuid.uuid4().hex[:8]}"
    lines = [
        "import triton",
        "import triton.language as tl",
        "",
        *interleave_rows_source(),
        "",
        *prefetch_l2_source(),
        "",
        *emit_gemm_kernel(name, list(params), epilogue, float32_operands=float32_operands, prologue=prologue),
        "",
    ]
    path = tmp_path_factory.mktemp("kernels") / f"{name}.py"
    path.write_text("\n".join(lines))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return getattr(mod, name)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return {
        ("store", False): _build(STORE_EPILOGUE, False, tmp_path_factory),
        ("store", True): _build(STORE_EPILOGUE, True, tmp_path_factory),
        ("pair", False): _build(PAIR_EPILOGUE, False, tmp_path_factory),
        ("pair_split", False): _build(PAIR_SPLIT_EPILOGUE, False, tmp_path_factory),
        ("bias", False): _build(BIAS_EPILOGUE, False, tmp_path_factory, ("v_ptr", "c_ptr", "stride_cm"), BIAS_PROLOGUE),
    }


def _operands(M, N, K, dtype, transpose_a, transpose_b, gen):
    a = torch.randn(K, M, generator=gen) if transpose_a else torch.randn(M, K, generator=gen)
    b = torch.randn(N, K, generator=gen) if transpose_b else torch.randn(K, N, generator=gen)
    return a.to(dtype), b.to(dtype)


def _reference(a, b, transpose_a, transpose_b):
    a64 = a.double().T if transpose_a else a.double()
    b64 = b.double().T if transpose_b else b.double()
    return a64 @ b64


def _run_store(kernel, a, b, M, N, K, transpose_a, transpose_b, interleave=0):
    out = torch.full((M, N), float("nan"), dtype=torch.float32)
    cfg, _ = gemm_launch.launch_gemm(
        kernel, a, b, lambda cfg: [out, out.stride(0)], M=M, N=N, K=K,
        transpose_a=transpose_a, transpose_b=transpose_b, interleave=interleave,
        bn_multiple_of=2 if interleave else 1,
    )
    return cfg, out


def _check(out, ref, dtype):
    assert not torch.isnan(out).any(), "unwritten output elements"
    err = ((out.double() - ref).norm() / ref.norm()).item()
    # Operands are exact in fp32; fp32 dots use input_precision="ieee".
    assert err < 1e-5, err


PATHS = ["portable", "tma"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    "dtype,M,N,K,transpose_a,transpose_b",
    [
        (torch.bfloat16, 37, 53, 72, False, True),
        (torch.float16, 72, 40, 48, True, False),
        (torch.float16, 70, 40, 48, True, False),
        (torch.bfloat16, 33, 65, 40, True, True),
        (torch.float32, 45, 31, 29, False, False),
    ],
)
def test_store(kernels, monkeypatch, path, dtype, M, N, K, transpose_a, transpose_b):
    use_gemm_path(monkeypatch, path)
    gen = torch.Generator().manual_seed(M * 1000 + N)
    a, b = _operands(M, N, K, dtype, transpose_a, transpose_b, gen)
    cfg, out = _run_store(kernels[("store", dtype == torch.float32)], a, b, M, N, K, transpose_a, transpose_b)
    # TMA needs 16-byte aligned row strides: fall back to the portable path otherwise.
    elem = a.element_size()
    aligned = all(
        (s * elem) % 16 == 0 for t in (a, b) for s in t.stride() if s != 1
    ) and dtype != torch.float32
    assert gemm_launch.LAST_LAUNCH["path"] == ("tma" if path == "tma" and aligned else "portable")
    _check(out, _reference(a, b, transpose_a, transpose_b), dtype)


@pytest.mark.parametrize("dtype,M,N,K,transpose_a,transpose_b", [
    (torch.bfloat16, 37, 53, 75, False, True),  # A's and B's rows of 75 elements: 150 bytes apart
    (torch.float16, 70, 43, 48, True, False),  # A stored [K, M] with rows of 70, B [K, N] with 43
])
def test_misaligned_rows_are_repitched_for_tma(kernels, monkeypatch, dtype, M, N, K, transpose_a, transpose_b):
    """An operand whose rows are not 16 bytes apart is copied into aligned rows (above
    `repitch_min_macs`) and the gemm runs on the TMA path, with the same result; below the
    threshold it stays on the portable path."""
    from coda_ir.runtime import gemm_launch as gl

    gen = torch.Generator().manual_seed(M + N + K)
    a, b = _operands(M, N, K, dtype, transpose_a, transpose_b, gen)
    assert gl._row_pitch_misaligned(a) or gl._row_pitch_misaligned(b)
    ref = _reference(a, b, transpose_a, transpose_b)
    for min_macs, path in ((M * N * K + 1, "portable"), (M * N * K, "tma")):
        use_launch_options(monkeypatch, gl.LaunchOptions(path="tma", repitch_min_macs=min_macs))
        _cfg, out = _run_store(kernels[("store", False)], a, b, M, N, K, transpose_a, transpose_b)
        assert gl.LAST_LAUNCH["path"] == path
        _check(out, ref, dtype)
    r = gl.repitched(a)
    assert torch.equal(r, a) and (r.stride(0) * r.element_size()) % 16 == 0 and r.stride(1) == 1


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("transpose_b", [True, False])
def test_interleave_store(kernels, monkeypatch, path, transpose_b):
    """Accumulator column c = 2i + j within groups of 2h holds weight row i + j * h."""
    use_gemm_path(monkeypatch, path)
    h, groups, M, K = 32, 2, 40, 56
    N = 2 * h * groups
    gen = torch.Generator().manual_seed(7)
    a, b = _operands(M, N, K, torch.bfloat16, False, transpose_b, gen)
    cfg, out = _run_store(kernels[("store", False)], a, b, M, N, K, False, transpose_b, interleave=h)
    assert gemm_launch.LAST_LAUNCH["path"] == path
    natural = _reference(a, b, False, transpose_b)
    cols = torch.arange(N)
    perm = (cols // (2 * h)) * (2 * h) + (cols % (2 * h)) // 2 + (cols % 2) * h
    _check(out, natural[:, perm], torch.bfloat16)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("which", ["pair", "pair_split"])
def test_interleave_pairs(kernels, monkeypatch, path, which):
    """A 2 -> 1 epilogue on interleaved columns: out = (x @ W_g^T) * (x @ W_u^T)."""
    use_gemm_path(monkeypatch, path)
    h, M, K = 64, 35, 48
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(M, K, generator=gen).to(torch.bfloat16)
    w = torch.randn(2 * h, K, generator=gen).to(torch.bfloat16)  # [gate; up] rows
    out = torch.full((M, h), float("nan"), dtype=torch.float32)
    gemm_launch.launch_gemm(
        kernels[(which, False)], x, w, lambda cfg: [out, out.stride(0)], M=M, N=2 * h, K=K,
        transpose_a=False, transpose_b=True, interleave=h, bn_multiple_of=2,
    )
    assert gemm_launch.LAST_LAUNCH["path"] == path
    ref = (x.double() @ w[:h].double().T) * (x.double() @ w[h:].double().T)
    assert not torch.isnan(out).any()
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-5


@pytest.mark.parametrize("path", PATHS)
def test_prologue(kernels, monkeypatch, path):
    use_gemm_path(monkeypatch, path)
    M, N, K = 70, 72, 40
    gen = torch.Generator().manual_seed(5)
    a, b = _operands(M, N, K, torch.float16, False, True, gen)
    v = torch.randn(N, generator=gen)
    out = torch.full((M, N), float("nan"), dtype=torch.float32)
    gemm_launch.launch_gemm(
        kernels[("bias", False)], a, b, lambda cfg: [v, out, out.stride(0)], M=M, N=N, K=K,
        transpose_a=False, transpose_b=True,
    )
    assert gemm_launch.LAST_LAUNCH["path"] == path
    _check(out, _reference(a, b, False, True) + v.double()[None, :], torch.float16)


@pytest.mark.parametrize("which", ["store", "pair", "pair_split"])
def test_interleave_paired_descriptor(kernels, monkeypatch, which):
    """B_PAIRED: the weight as a rank-4 [N/2h, h, 2, K] descriptor, one dot per tile."""
    use_gemm_path(monkeypatch, "tma")
    h, groups, M, K = 32, 2, 40, 56
    N = 2 * h * groups
    gen = torch.Generator().manual_seed(13)
    a, b = _operands(M, N, K, torch.bfloat16, False, True, gen)
    width = N if which == "store" else N // 2
    out = torch.full((M, width), float("nan"), dtype=torch.float32)
    cfg = dataclasses.replace(gemm_launch.interpreter_config(2), tma=True, b_pairs=True)
    gemm_launch.launch_gemm(
        kernels[("store" if which == "store" else which, False)], a, b, lambda cfg: [out, out.stride(0)],
        M=M, N=N, K=K, transpose_a=False, transpose_b=True, interleave=h, bn_multiple_of=2, config=cfg,
    )
    assert gemm_launch.LAST_LAUNCH["path"] == "tma"
    natural = _reference(a, b, False, True)
    cols = torch.arange(N)
    perm = (cols // (2 * h)) * (2 * h) + (cols % (2 * h)) // 2 + (cols % 2) * h
    inter = natural[:, perm]
    ref = inter if which == "store" else inter[:, 0::2] * inter[:, 1::2]
    _check(out, ref, torch.bfloat16)


def test_persistent_loop_covers_many_tiles(kernels, monkeypatch):
    """More tiles than programs: each TMA program walks several tiles (grouped order)."""
    use_gemm_path(monkeypatch, "tma")
    M, N, K = 160, 96, 32  # 5 x 3 tiles of 32 over 2 programs
    gen = torch.Generator().manual_seed(3)
    a, b = _operands(M, N, K, torch.float16, False, True, gen)
    _, out = _run_store(kernels[("store", False)], a, b, M, N, K, False, True)
    assert gemm_launch.LAST_LAUNCH["path"] == "tma"
    _check(out, _reference(a, b, False, True), torch.float16)


def test_emitted_source_has_both_paths():
    src = "\n".join(emit_gemm_kernel("k", ["c_ptr"], ["    pass"], float32_operands=True))
    assert "USE_TMA: tl.constexpr = 0" in src
    assert "tl.range(start_pid, num_tiles, NUM_SMS" in src
    assert src.count('input_precision="ieee"') == 5  # portable, TMA plain, paired, lo/hi
    assert "tl.join(acc_lo, acc_hi).reshape(BM, BN)" in src


def test_template_names_cover_every_binding():
    """TEMPLATE_NAMES lists every name the template binds (what generated code must avoid)."""
    import ast

    src = "\n".join(emit_gemm_kernel("k", ["x_ptr"], ["    pass"], float32_operands=False))
    fn = ast.parse(src).body[0]
    bound = {a.arg for a in fn.args.args} - {"x_ptr"}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    assert bound <= TEMPLATE_NAMES, sorted(bound - TEMPLATE_NAMES)


def test_paired_candidates_for_interleaved_kernels():
    paired = gemm_launch.tma_candidates(interleave=128, bn_multiple_of=2, paired_ok=True)
    assert paired and all(c.b_pairs for c in paired[:-1]) and not paired[-1].b_pairs
    assert not any(c.b_pairs for c in gemm_launch.tma_candidates(interleave=128, bn_multiple_of=2))
    assert all((2 * 128) % c.bn == 0 for c in paired)


def test_autotune_cache_roundtrip(tmp_path, monkeypatch):
    monkeypatch.setenv("CODA_CACHE_DIR", str(tmp_path))
    entry = {"config": {"bm": 128, "bn": 256, "bk": 64, "tma": True}}
    gemm_launch._store_disk("k|M=1", entry)
    assert gemm_launch._load_disk()["k|M=1"] == entry
    assert gemm_launch.GemmConfig(**entry["config"]).bn == 256


def test_launch_options_are_explicit_validated_and_restored(monkeypatch):
    """The path and the TMA candidates are launch options, never environment variables."""
    monkeypatch.setenv("CODA_GEMM_PATH", "tma")  # the old experiment variables are not read
    monkeypatch.setenv("CODA_TMA_CANDIDATES", "3")
    assert gemm_launch.launch_options() == gemm_launch.LaunchOptions()
    assert gemm_launch.launch_options().path == "auto" and gemm_launch.launch_options().tma_candidates is None
    with pytest.raises(ValueError):
        gemm_launch.LaunchOptions(path="fast")
    with pytest.raises(ValueError):
        gemm_launch.LaunchOptions(tma_candidates=(len(tiling.TMA_CANDIDATES),))
    before = gemm_launch.set_launch_options(path="portable", tma_candidates=(0, 5))
    try:
        assert gemm_launch.launch_options() == gemm_launch.LaunchOptions("portable", (0, 5))
        chosen = gemm_launch.tma_candidates(only=gemm_launch.launch_options().tma_candidates)
        assert tiling.TMA_CANDIDATES[0] in chosen
        assert set(chosen) <= {tiling.TMA_CANDIDATES[0], tiling.TMA_CANDIDATES[5]}
    finally:
        gemm_launch.set_launch_options(before)
    assert gemm_launch.launch_options() == before == gemm_launch.LaunchOptions()
