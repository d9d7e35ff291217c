"""The tiling policy, in one place: config types, candidate lists, elementwise tiles and the
power-of-two arithmetic they share (plain Python, no xDSL or Triton imports).

Who reads it:

* `transforms/legality.py` proves epilogues tile-local over the column-tile widths a kernel
  may run with (`GEMM_BNS`, `ELEMENTWISE_BNS`) and records `bn_multiple_of`;
* `runtime/gemm_launch.py` autotunes a GEMM over `TMA_CANDIDATES` (Hopper) or
  `portable_candidates` (elsewhere), rounded up to the recorded multiples; the interpreter runs
  `interpreter_config`;
* `runtime/compiled.py` launches elementwise kernels with `elementwise_config` /
  `whole_elementwise_config`;
* `analysis/io_model.py` predicts with the same `GemmConfig` (its autotuner stand-in picks among
  `IO_MODEL_TILES`) and the same `elementwise_config` the runtime uses on a GPU.

A `#coda.config<...>` on a kernel (`coda.TileConfigAttr`) fixes the GEMM tile instead of tuning;
`config_from_attr` turns it into a `GemmConfig`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

# ----------------------------------------------------------------------------- powers of two


def is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for a >= 0, b > 0: `triton.cdiv` without its cost on the host (from Triton 3.5
    on that is a `constexpr_function`, ~3.6 us a call from Python against 0.03 us; a decoder
    unit's host code calls it ~20 times a forward)."""
    return -(-a // b)


def pow2_at_least(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(n - 1, 0).bit_length()


def round_up_pow2_multiple(value: int, multiple: int) -> int:
    """The smallest power of two >= value that is a multiple of `multiple`."""
    p = pow2_at_least(max(value, 1))
    while p % multiple:
        p *= 2
        if p > 1 << 16:
            raise ValueError(f"no power-of-two tile width is a multiple of {multiple}")
    return p


# ----------------------------------------------------------------------------- column widths

MIN_BN = 16
"""The narrowest column tile any kernel runs with (`tl.dot` needs N >= 16; elementwise tiles
use the same floor), so a requirement of a power of two up to 16 always holds."""

GEMM_BNS = (16, 32, 64, 128, 256)
"""Column-tile widths a gemm may run with (the candidates' BN and the interpreter's)."""

MAX_GEMM_BN = GEMM_BNS[-1]

ELEMENTWISE_BNS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
"""Column-tile widths an elementwise kernel may run with (a recorded multiple widens it)."""

MAX_ROW_EXCHANGE_ELEMENTWISE = ELEMENTWISE_BNS[-1]
"""The widest row an elementwise kernel's single column tile covers for an in-tile exchange."""


# ----------------------------------------------------------------------------- GEMM configs


@dataclass(frozen=True)
class GemmConfig:
    """One GEMM kernel configuration: the tile, the launch order and the mainloop's options."""

    bm: int
    bn: int
    bk: int
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 3
    tma: bool = False  # persistent tensor-descriptor path (USE_TMA=1) when it can run
    flatten: bool = False  # tl.range(flatten=...) on the persistent tile loop
    warp_specialize: bool = False  # tl.range(warp_specialize=...) on the persistent tile loop
    b_pairs: bool = False  # interleaved B through one rank-4 descriptor (B_PAIRED) when possible
    ctas_per_sm: int = 1  # persistent programs per SM (2: one's epilogue can overlap the other's MMA)

    @property
    def threads(self) -> int:
        return 32 * self.num_warps

    def describe(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}/w{self.num_warps}s{self.num_stages}"


def config_from_attr(values: Mapping[str, int], tma: bool = False) -> GemmConfig:
    """The GemmConfig of a `#coda.config` (`coda.TileConfigAttr.as_dict()`)."""
    return GemmConfig(values["bm"], values["bn"], values["bk"], num_warps=values["warps"],
                      num_stages=values["stages"], tma=tma)


TMA_CANDIDATES: tuple[GemmConfig, ...] = (
    GemmConfig(128, 256, 64, 8, num_warps=8, num_stages=3, tma=True),
    GemmConfig(128, 256, 64, 8, num_warps=8, num_stages=3, tma=True, flatten=True),
    GemmConfig(128, 256, 64, 8, num_warps=8, num_stages=4, tma=True),
    GemmConfig(128, 256, 64, 8, num_warps=8, num_stages=3, tma=True, warp_specialize=True),
    GemmConfig(128, 256, 64, 16, num_warps=8, num_stages=3, tma=True, flatten=True),
    GemmConfig(128, 128, 64, 8, num_warps=8, num_stages=4, tma=True),
    GemmConfig(128, 128, 64, 8, num_warps=4, num_stages=4, tma=True),
    GemmConfig(128, 128, 64, 8, num_warps=4, num_stages=4, tma=True, flatten=True),
    GemmConfig(256, 128, 64, 8, num_warps=8, num_stages=3, tma=True),
)
"""Hopper candidates, best guesses first (the first is used when tuning is off)."""

TMA_TILE_MIN_COLS = min(c.bn for c in TMA_CANDIDATES)
"""The narrowest column tile of the TMA mainloop: an interleaved gemm runs it only where its
interleave groups hold such tiles (`gemm_launch._tma_fits`), nn-plan keeps RoPE out of a GEMM
whose groups would not (`NNPlanPass.plan_rope_placement`)."""

PORTABLE_CANDIDATES_16: tuple[GemmConfig, ...] = (
    GemmConfig(128, 128, 64, 8, num_warps=8, num_stages=3),
    GemmConfig(128, 128, 64, 8, num_warps=4, num_stages=4),
    GemmConfig(128, 64, 64, 8, num_warps=4, num_stages=4),
)
"""Pointer-path candidates for 16-bit operands (widths rounded up to the recorded multiples)."""

PORTABLE_CANDIDATES_32: tuple[GemmConfig, ...] = (
    GemmConfig(64, 64, 32, 8, num_warps=4, num_stages=3),
    GemmConfig(128, 64, 32, 8, num_warps=8, num_stages=3),
)
"""Pointer-path candidates for fp32 operands."""


def portable_candidates(float32_operands: bool, bn_multiple_of: int = 1, bm_multiple_of: int = 1) -> list[GemmConfig]:
    pool = PORTABLE_CANDIDATES_32 if float32_operands else PORTABLE_CANDIDATES_16
    out: list[GemmConfig] = []
    for c in pool:
        c = dataclasses.replace(c, bm=round_up_pow2_multiple(c.bm, bm_multiple_of),
                                bn=round_up_pow2_multiple(c.bn, bn_multiple_of))
        if c not in out:
            out.append(c)
    return out


def interpreter_config(bn_multiple_of: int = 1, bm_multiple_of: int = 1) -> GemmConfig:
    """The CPU interpreter's fixed tile: small, so tests stay fast (its cost is per program)."""
    return GemmConfig(bm=round_up_pow2_multiple(32, bm_multiple_of), bn=round_up_pow2_multiple(32, bn_multiple_of),
                      bk=32, group_m=4, num_warps=4, num_stages=1)


IO_MODEL_TILES: tuple[GemmConfig, ...] = (
    GemmConfig(128, 256, 64, num_warps=8, num_stages=3),
    GemmConfig(128, 128, 64, num_warps=8, num_stages=4),
    GemmConfig(128, 128, 32, num_warps=8, num_stages=3),
    GemmConfig(64, 128, 64, num_warps=4, num_stages=4),
    GemmConfig(64, 64, 32, num_warps=4, num_stages=3),
)
"""The IO model's stand-in for the autotuner: tiles it may predict a GEMM runs with, preferred
first (the Hopper candidates' tile shapes plus smaller ones for heavy epilogues, whose
registers the model checks; `io_model.default_tile` takes the fastest that fits)."""


# ----------------------------------------------------------------------------- elementwise tiles


@dataclass(frozen=True)
class ElementwiseConfig:
    """The tile of a coda.elementwise kernel (rows x columns per program)."""

    bm: int
    bn: int
    num_warps: int = 4


ELEMENTWISE_PROGRAM_ELEMENTS = 2048
"""Elements of the iteration space per coda.elementwise program on a GPU (16 rows of 128 columns)."""
ELEMENTWISE_WARPS = 2
"""Warps of a coda.elementwise program on a GPU per column tile of its widest tile."""


def elementwise_config(M: int, N: int, bn_multiple_of: int = 1, *, width_multiple: int = 1,
                       interpreting: bool = False) -> ElementwiseConfig:
    """BN = clamp(next_pow2(N), 16..128) (at least the recorded multiple), BM = clamp(next_pow2(M),
    16..2048 / BN), and 2 warps per column tile of the program's widest tile (`width_multiple`:
    2 for a kernel holding [BM, 2 BN] tiles, the gated backward reading z in pair halves).

    Measured on the H200 (bench/RESULTS.md, session 24: every elementwise pass of six families'
    whole steps under five tile rules, one process per family): small programs at 2 warps were
    the fastest or within 3% for every pass (one of Granite's within 6%) but the gated backward, which runs best at 4 (the old
    64 x 128 tile at 8 warps ran it 1.54-1.73x slower in five families, 1.07x in OLMo2's; 2 warps
    1.1x); more warps than that split
    a row's head segments across warps, and the head-norm + RoPE backward ran 1.3-1.44x slower
    at 4 (16 x 128 and 16 x 256 tiles). The interpreter keeps few, large programs (its cost is
    per program instance): a budget of 4096, warps irrelevant."""
    bn = max(min(pow2_at_least(N), 128), bn_multiple_of, MIN_BN)
    if interpreting:
        return ElementwiseConfig(max(min(pow2_at_least(M), 4096 // bn), 16), bn)
    bm = max(min(pow2_at_least(M), ELEMENTWISE_PROGRAM_ELEMENTS // bn), 16)
    return ElementwiseConfig(bm, bn, num_warps=min(ELEMENTWISE_WARPS * width_multiple, 8))


FOLD_BLOCK = 256
"""Rows per coda.fold program at most."""
FOLD_TILE_LANES = 64
"""Partial tiles a fold reads per row per step at most."""
FOLD_ELEMENTS = 4096
"""BLOCK x lanes of one fold step at most."""
def fold_config(L: int, tiles: int) -> tuple[int, int]:
    """(rows per program, tile lanes) of a coda.fold over L rows of `tiles` partials each: a
    row's partials fold in lanes of `lanes` tiles, then a fixed tree; programs take the most rows
    a step of FOLD_ELEMENTS holds. (Splitting folds without rank-0 sums into 128 programs or
    more, which changes no bit, was measured in session 24: the column folds of LLaMA and
    Gemma3 ran 22-24% faster, Qwen3's 8% slower, 0.01-0.04 ms a step either way: not kept.)"""
    lanes = max(2, min(FOLD_TILE_LANES, pow2_at_least(tiles)))
    return min(FOLD_BLOCK, max(16, pow2_at_least(L)), max(16, FOLD_ELEMENTS // lanes)), lanes


LONG_ROWS = 16384
"""Rows at least this long are walked one per program in `whole rows` kernels (vocabulary-wide
rows: the cross-entropy pass); shorter ones (norm statistics, GEMVs) in blocks of 16-32 rows."""


def whole_elementwise_config(M: int, N: int, whole: str, bn_multiple_of: int = 1, *,
                             interpreting: bool = False) -> ElementwiseConfig:
    """Tiles of a `whole rows` (`whole cols`) kernel: each program walks its rows' (columns')
    tiles in order, so the grid is cdiv(M, bm) (cdiv(N, bn)) programs; on a GPU the fixed side
    is kept small enough to give every SM work on weight-sized extents (4096 rows: 128 programs)."""
    if interpreting:
        # few programs, but tiles narrow enough along the walked axis that small test shapes
        # take more than one step of the loop
        if whole == "rows":
            bn = max(min(pow2_at_least(N), 64), bn_multiple_of, MIN_BN)
            return ElementwiseConfig(max(min(pow2_at_least(M), 4096 // bn), 16), bn)
        bm = max(min(pow2_at_least(M), 64), 16)
        return ElementwiseConfig(bm, max(min(pow2_at_least(N), 4096 // bm), bn_multiple_of, MIN_BN))
    if whole == "rows" and N >= LONG_ROWS:
        # one row per program, long column tiles: a row walk then streams at the copy bandwidth (the
        # LLaMA-1B LM head's cross-entropy pass over [8192, 128256] bf16 logits on the H100:
        # 1x4096 w4 0.704 ms, 1x8192 w8 0.706, 1x2048 w4 0.761, 2x2048 w4 0.761, 4x1024 w4 1.01,
        # 16x256 w4 1.47, 32x128 w4 (the rule below) 2.23)
        return ElementwiseConfig(1, max(4096, bn_multiple_of), 4)
    if whole == "rows":
        bn = max(min(pow2_at_least(N), 128), bn_multiple_of, MIN_BN)
        return ElementwiseConfig(max(min(pow2_at_least(M), 32), 16), bn)
    bn = max(min(pow2_at_least(N), 32), bn_multiple_of, MIN_BN)
    return ElementwiseConfig(max(min(pow2_at_least(M), 128), 16), bn)
