"""The fixed GEMM mainloop that every coda.gemm kernel shares; epilogues are spliced in.

The compiler's gemm kernels are `tl.kernel`s whose body is one `tl.mainloop portable` op
(`lowering/tl_gemm.py`); the printer (`triton_printer`) fills this template (`gemm_body`) with
the op's region, the epilogue. Contract:

* A gemm kernel's parameters are `a_ptr, b_ptr`, then the epilogue's inputs and outputs, in
  order, then the problem sizes, strides and constexprs that `gemm_launch.launch_gemm` passes
  (`gemm_parameters`; `triton_lang.GEMM_SIZES`, `GEMM_CONSTEXPRS`). `emit_gemm_kernel(name,
  extra_params, epilogue, ...)` returns the source of one with a hand-written epilogue (tests,
  bench).
* When the epilogue runs, these names are in scope (`triton_lang.GEMM_FRAME` the region's
  arguments): `acc` (fp32 [BM, BN] accumulator),
  `offs_m` ([BM] global row indices), `offs_n` ([BN] global accumulator column indices, in
  the GEMM's own -- possibly interleaved -- column space), `mask_m = offs_m < M`,
  `mask_n = offs_n < N`, `pid_m`, `pid_n` (tile coordinates), `M`, `N`, `K`, and the
  constexprs `BM`, `BN`, `BK`, `INTERLEAVE` (0, or the interleave half-width h).
  The epilogue does its own masked stores. With `INTERLEAVE > 0`, `acc_lo` and `acc_hi`
  ([BM, BN // 2]) are also in scope: the even and the odd accumulator columns (on the TMA
  path they are the two dots themselves, so a 2 -> 1 epilogue that uses them skips the
  interleaving shuffle; `acc` is then dead code).
* An optional `prologue` (same indentation as the epilogue) runs once per output tile
  before the K loop, with `offs_m`, `offs_n`, `mask_m`, `mask_n`, `pid_m`, `pid_n` in scope:
  the place to start the epilogue's memory traffic early, e.g.
  `_coda_prefetch_l2(ptrs, mask, L2_PREFETCH)` (from `prefetch_l2_source()`) on one pointer
  per 128-byte line of an auxiliary tile, so that the epilogue's loads hit L2 instead of
  DRAM. `L2_PREFETCH` is a constexpr that `launch_gemm` sets on a GPU (the interpreter has no
  inline assembly).
* With `INTERLEAVE = h`, accumulator column `c` holds the product with weight row
  `perm(c)`, where within each group of `2h` columns `c = 2i + j` maps to `i + j * h`.
  `natural_column(offs_n, h)` in generated code is `interleave_rows` below.

Two paths come from one template, picked at run time by `gemm_launch` through the
constexpr `USE_TMA`:

* `USE_TMA = 0`: the portable pointer-based tiled `tl.dot` loop, one program per output
  tile in grouped order (what the CPU interpreter runs, and the fallback anywhere).
* `USE_TMA = 1` (Hopper, a Triton with host-side tensor descriptors): `a_ptr`/`b_ptr` are
  `triton.tools.tensor_descriptor.TensorDescriptor`s built by `launch_gemm`; a persistent
  grid of `NUM_SMS` programs walks the tiles in the same grouped order, loading operand tiles
  with TMA (out-of-bounds rows/columns read as zero, so ragged M, N, K need no masks) and
  running the epilogue inside the tile loop. `A_K_CONTIG` / `B_K_CONTIG` say whether K is the
  contiguous dimension of the stored operand (B's weight layout [N, K] is K-contiguous); the
  other layout is loaded as stored and transposed with `.T`. With `INTERLEAVE = h` (and BN
  dividing 2h) the BN interleaved columns of a tile are weight rows `r0 + [0, BN/2)` and
  `r0 + h + [0, BN/2)`: two half-width B tiles, two dots, and
  `tl.join(acc_lo, acc_hi).reshape(BM, BN)` yields the interleaved accumulator. With
  `B_PAIRED` (K-contiguous B, N a multiple of 2h) B is instead a rank-4 descriptor over the
  weight viewed as [N / 2h, h, 2, K] with strides (2hK, K, hK, 1): its box [1, BN/2, 2, BK]
  arrives in interleaved row order, so one full-width dot (N = BN) does the tile.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from functools import lru_cache

from coda_ir.dialects.triton_lang import GEMM_CONSTEXPRS, GEMM_SIZES

INDENT = "    "


def interleave_rows_source() -> list[str]:
    """A jit helper mapping interleaved accumulator columns to weight rows (or tensor columns)."""
    return [
        "@triton.jit",
        "def _coda_interleave_rows(cols, H: tl.constexpr):",
        "    group = cols // (2 * H)",
        "    within = cols % (2 * H)",
        "    return group * (2 * H) + within // 2 + (within % 2) * H",
    ]


# Every name the template binds in a kernel (parameters and locals of both paths): generated
# epilogue/prologue code must not assign these (it may read the documented ones).
TEMPLATE_NAMES: frozenset[str] = frozenset(
    (
        "a_ptr b_ptr M N K stride_am stride_ak stride_bk stride_bn BM BN BK GROUP_M INTERLEAVE "
        "UPCAST USE_TMA A_K_CONTIG B_K_CONTIG NUM_SMS FLATTEN WARP_SPECIALIZE L2_PREFETCH B_PAIRED "
        "pid num_pid_m num_pid_n group_size first_m rows_in_group pid_m pid_n offs_m offs_n offs_k "
        "mask_m mask_n b_cols a_ptrs b_ptrs acc k0 k_mask a b acc_lo acc_hi start_pid num_tiles "
        "k_tiles tile_id off_m off_n off_k ki b_row b_group b_lo b_hi"
    ).split()
)


def prefetch_l2_source() -> list[str]:
    """A jit helper: prefetch into L2 the lines at `ptrs` where `mask` holds (no-op unless ENABLE)."""
    return [
        "@triton.jit",
        "def _coda_prefetch_l2(ptrs, mask, ENABLE: tl.constexpr):",
        "    if ENABLE:",
        "        tl.inline_asm_elementwise(",
        '            "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L2 [$1]; mov.u32 $0, 0; }",',
        '            "=r,l,r", [ptrs, mask.to(tl.int32)], dtype=tl.int32, is_pure=False, pack=1)',
    ]


@lru_cache(maxsize=None)
def range_features() -> frozenset[str]:
    """Keyword arguments of `tl.range` that the installed Triton understands (of those we use)."""
    try:
        import triton.language as tl

        params = inspect.signature(tl.range.__init__).parameters
    except Exception:  # pragma: no cover - Triton without tl.range
        return frozenset()
    return frozenset(p for p in ("flatten", "warp_specialize") if p in params)


def _indent(lines: Sequence[str], levels: int) -> list[str]:
    if levels < 0:
        cut = len(INDENT) * -levels
        for line in lines:
            if line.strip() and not line.startswith(INDENT * -levels):
                raise ValueError(f"spliced line is not indented by {-levels} level(s): {line!r}")
        return [line[cut:] for line in lines]
    pad = INDENT * levels
    return [pad + line if line.strip() else line for line in lines]


def _tile_loop_header() -> str:
    kwargs = []
    features = range_features()
    if "flatten" in features:
        kwargs.append("flatten=FLATTEN")
    if "warp_specialize" in features:
        kwargs.append("warp_specialize=WARP_SPECIALIZE")
    extra = "".join(", " + k for k in kwargs)
    return f"for tile_id in tl.range(start_pid, num_tiles, NUM_SMS{extra}):"


def _portable_body(precision: str, prologue: Sequence[str]) -> list[str]:
    """The pointer-based loop, at function-body indentation (one level)."""
    return [
        "    pid = tl.program_id(0)",
        "    num_pid_m = tl.cdiv(M, BM)",
        "    num_pid_n = tl.cdiv(N, BN)",
        "    # Grouped ordering: GROUP_M row-tiles share each B column-tile while it is in L2.",
        "    group_size = GROUP_M * num_pid_n",
        "    first_m = (pid // group_size) * GROUP_M",
        "    rows_in_group = min(num_pid_m - first_m, GROUP_M)",
        "    pid_m = first_m + (pid % group_size) % rows_in_group",
        "    pid_n = (pid % group_size) // rows_in_group",
        "    offs_m = pid_m * BM + tl.arange(0, BM)",
        "    offs_n = pid_n * BN + tl.arange(0, BN)",
        "    offs_k = tl.arange(0, BK)",
        "    mask_m = offs_m < M",
        "    mask_n = offs_n < N",
        "    if INTERLEAVE > 0:",
        "        b_cols = _coda_interleave_rows(offs_n, INTERLEAVE)",
        "    else:",
        "        b_cols = offs_n",
        *prologue,
        "    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak",
        "    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + b_cols[None, :] * stride_bn",
        "    acc = tl.zeros((BM, BN), dtype=tl.float32)",
        "    for k0 in range(0, K, BK):",
        "        k_mask = (k0 + offs_k) < K",
        "        a = tl.load(a_ptrs, mask=mask_m[:, None] & k_mask[None, :], other=0.0)",
        "        b = tl.load(b_ptrs, mask=k_mask[:, None] & mask_n[None, :], other=0.0)",
        "        if UPCAST:",
        "            # The interpreter cannot do arithmetic on bf16; bf16 products are exact in fp32.",
        "            a = a.to(tl.float32)",
        "            b = b.to(tl.float32)",
        f"        acc = tl.dot(a, b, acc{precision})",
        "        a_ptrs += BK * stride_ak",
        "        b_ptrs += BK * stride_bk",
        "    if INTERLEAVE > 0:",
        "        acc_lo, acc_hi = tl.split(tl.reshape(acc, (BM, BN // 2, 2)))",
    ]


def _tma_a_load() -> list[str]:
    """Load the A tile at (off_m, off_k) as `a`, [BM, BK]."""
    return [
        "if A_K_CONTIG:",
        "    a = a_ptr.load([off_m, off_k])",
        "else:",
        "    a = a_ptr.load([off_k, off_m]).T",
        "if UPCAST:",
        "    a = a.to(tl.float32)",
    ]


def _tma_b_load(rows: str, out: str) -> list[str]:
    """Load B's weight rows starting at `rows` (K-slice off_k) as `out`, [BK, rows]."""
    return [
        "if B_K_CONTIG:",
        f"    {out} = b_ptr.load([{rows}, off_k]).T",
        "else:",
        f"    {out} = b_ptr.load([off_k, {rows}])",
        "if UPCAST:",
        f"    {out} = {out}.to(tl.float32)",
    ]


def _tma_body(precision: str, epilogue: Sequence[str], prologue: Sequence[str]) -> list[str]:
    """The persistent TMA loop, at function-body indentation, with the epilogue in the tile loop."""
    plain_k = [
        "for ki in range(k_tiles):",
        "    off_k = ki * BK",
        *_indent(_tma_a_load(), 1),
        *_indent(_tma_b_load("off_n", "b"), 1),
        f"    acc = tl.dot(a, b, acc{precision})",
    ]
    split_k = [
        "for ki in range(k_tiles):",
        "    off_k = ki * BK",
        *_indent(_tma_a_load(), 1),
        *_indent(_tma_b_load("b_row", "b_lo"), 1),
        *_indent(_tma_b_load("b_row + INTERLEAVE", "b_hi"), 1),
        f"    acc_lo = tl.dot(a, b_lo, acc_lo{precision})",
        f"    acc_hi = tl.dot(a, b_hi, acc_hi{precision})",
    ]
    paired_k = [
        "for ki in range(k_tiles):",
        "    off_k = ki * BK",
        *_indent(_tma_a_load(), 1),
        "    b = b_ptr.load([b_group, b_row, 0, off_k]).reshape(BN, BK).T",
        "    if UPCAST:",
        "        b = b.to(tl.float32)",
        f"    acc = tl.dot(a, b, acc{precision})",
    ]
    tile = [
        "first_m = (tile_id // group_size) * GROUP_M",
        "rows_in_group = min(num_pid_m - first_m, GROUP_M)",
        "pid_m = first_m + (tile_id % group_size) % rows_in_group",
        "pid_n = (tile_id % group_size) // rows_in_group",
        "off_m = pid_m * BM",
        "off_n = pid_n * BN",
        "offs_m = off_m + tl.arange(0, BM)",
        "offs_n = off_n + tl.arange(0, BN)",
        "mask_m = offs_m < M",
        "mask_n = offs_n < N",
        *_indent(prologue, -1),
        "if INTERLEAVE > 0 and B_PAIRED:",
        "    # b_ptr views the weight as [groups, h, 2, K] (strides 2hK, K, hK, 1): one TMA box",
        "    # [1, BN/2, 2, BK] lands the tile's rows already in interleaved order 2i + j.",
        "    b_group = off_n // (2 * INTERLEAVE)",
        "    b_row = (off_n % (2 * INTERLEAVE)) // 2",
        "    acc = tl.zeros((BM, BN), dtype=tl.float32)",
        *_indent(paired_k, 1),
        "    acc_lo, acc_hi = tl.split(tl.reshape(acc, (BM, BN // 2, 2)))",
        "elif INTERLEAVE > 0:",
        "    # BN divides 2h: the tile's columns 2i + j are weight rows b_row + i + j * h.",
        "    b_row = (off_n // (2 * INTERLEAVE)) * (2 * INTERLEAVE) + (off_n % (2 * INTERLEAVE)) // 2",
        "    acc_lo = tl.zeros((BM, BN // 2), dtype=tl.float32)",
        "    acc_hi = tl.zeros((BM, BN // 2), dtype=tl.float32)",
        *_indent(split_k, 1),
        "    acc = tl.join(acc_lo, acc_hi).reshape(BM, BN)",
        "else:",
        "    acc = tl.zeros((BM, BN), dtype=tl.float32)",
        *_indent(plain_k, 1),
    ]
    body = [
        "start_pid = tl.program_id(0)",
        "num_pid_m = tl.cdiv(M, BM)",
        "num_pid_n = tl.cdiv(N, BN)",
        "num_tiles = num_pid_m * num_pid_n",
        "k_tiles = tl.cdiv(K, BK)",
        "# Grouped ordering: GROUP_M row-tiles share each B column-tile while it is in L2.",
        "group_size = GROUP_M * num_pid_n",
        _tile_loop_header(),
        *_indent(tile, 1),
    ]
    # The epilogue arrives at function-body indentation; it runs inside the tile loop.
    return _indent(body, 1) + _indent(epilogue, 1)


def gemm_body(epilogue: Sequence[str], *, float32_operands: bool, prologue: Sequence[str] = ()) -> list[str]:
    """The body of a GEMM kernel (function-body indentation) with `epilogue` (already indented by
    one level) spliced in: once after the portable loop and once inside the persistent TMA tile
    loop (re-indented); the constexpr `USE_TMA` keeps one of them."""
    precision = ', input_precision="ieee"' if float32_operands else ""
    return [
        "    if USE_TMA:",
        *_indent(_tma_body(precision, epilogue, prologue), 1),
        "    else:",
        *_indent(_portable_body(precision, prologue), 1),
        *_indent(epilogue, 1),
    ]


def gemm_parameters(extra_params: Sequence[str]) -> list[str]:
    """The parameter list of a GEMM kernel: `a_ptr, b_ptr`, the epilogue's, then the template's
    (`triton_lang.GEMM_SIZES`, `GEMM_CONSTEXPRS` with their defaults)."""
    out = ["a_ptr", "b_ptr", *extra_params, *GEMM_SIZES]
    for name, _, default in GEMM_CONSTEXPRS:
        out.append(f"{name}: tl.constexpr" + ("" if default is None else f" = {default}"))
    return out


def emit_gemm_kernel(
    name: str,
    extra_params: Sequence[str],
    epilogue: Sequence[str],
    *,
    float32_operands: bool,
    prologue: Sequence[str] = (),
) -> list[str]:
    """Source lines of a GEMM kernel with `epilogue` (already indented by one level) spliced in
    (`gemm_body`): the template with a hand-written epilogue (tests, bench). The compiler's gemm
    kernels are `tl.kernel`s whose `tl.mainloop` the tl printer fills the same template with."""
    return [
        "@triton.jit",
        f"def {name}({', '.join(gemm_parameters(extra_params))}):",
        *gemm_body(epilogue, float32_operands=float32_operands, prologue=prologue),
    ]
