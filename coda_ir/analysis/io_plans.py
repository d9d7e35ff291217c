"""Plan decisions for the passes, priced with the IO cost model (`io_model`; plain Python).

Decision API for the passes
---------------------------
Each returns a `Decision(choice, costs, reason)` where `costs` maps every plan considered to
its `PlanCost` (predicted time, bytes, kernels), so a pass can print why it chose.

* `stats_plan(M, D, *, K=None, dtype="bf16", gpu=None, tile=None, residual=True,
  producer_live_tiles=1.0) -> Decision[choice in {"producer_epilogue", "row_kernel"}]`:
  compute a norm's row statistics in the epilogue of the GEMM producing x (partials + a
  fold, and the aux store h = x*w) or in a small row kernel reading x again (and writing h
  and rstd). `K` is the producer GEMM's contraction size; `K=None` means there is no
  producer GEMM (first layer), so "row_kernel". With `tile` pinned and an epilogue that
  already holds `producer_live_tiles`, the producer plan can stop fitting in registers, and
  a plan that does not fit is never chosen over one that does.
* `store_or_recompute(M, N, *, dtype="bf16", gpu=None, recompute_flops_per_element,
  recompute_sfu_per_element=0.0, recompute_extra_read_bytes=0, uses=1, fwd_host=None,
  bwd_host=None) -> Decision[choice in {"store", "recompute"}]`: keep an [M, N]
  activation for backward (write it in forward, read it `uses` times in backward) or
  recompute it in the backward kernel(s) that need it. `fwd_host`/`bwd_host` are the
  kernels whose epilogues would do the store / the recompute (default: memory-bound
  elementwise kernels touching the same [M, N] tensor); extra bytes and FLOPs are added to
  them, so in a compute-bound GEMM host they may be free.
* `qk_norm_tile_width(head_dim, N, *, M, K, heads=None, dtype="bf16", gpu=None,
  widths=(64, 128, 256, 512)) -> Decision[choice = BN (int)]`: the tile width of a GEMM
  followed by a per-head RMSNorm over `heads` heads of `head_dim` columns. `BN % head_dim
  == 0` keeps whole heads in one tile (segment reduction in the epilogue, one kernel);
  otherwise the GEMM emits per-head partials and an elementwise kernel normalises
  (one more read + write of [M, N], one more launch). Costs are keyed "bn=<width>".

* `rope_table_plan(M, N, head_dim, *, K, dtype="bf16", gpu=None, tile=None) ->
  Decision[choice in {"epilogue", "table"}]`: RoPE fused into a GEMM's epilogue computes
  angle + libdevice sin/cos per pair after each tile's mainloop (tens of instructions per
  pair, exposed), or reads them from [M, head_dim/2] cos/sin tables a small kernel computes
  once (one more launch, L2-resident reads). Priced with `SINCOS_INSTR_PER_PAIR` and
  `rope_angle_instr`, and `Kernel.exposed_flops` (epilogue arithmetic added per wave).

* `gated_grad_plan(M, F, *, K, dtype="bf16", gpu=None, tile=None) -> Decision[choice in
  {"epilogue", "separate"}]`: a gated activation's backward (dz [M, 2F] and the z . dz row
  partials) in the epilogue of the GEMM producing dy [M, F] (`GATED_GRAD_LIVE_TILES` live tiles:
  spills, priced by `spill_s`; z loads, dz stores and spills exposed after each tile's mainloop)
  or as the plain GEMM storing dy plus one elementwise pass.

* `norm_grad_plan(M, D, *, K, dtype="bf16", gpu=None, tile=None, residual=True) -> Decision[choice
  in {"epilogue", "separate"}]`: an RMSNorm backward with its row statistic given (dx and the dw
  column partials, plus a residual gradient added to dx) in the epilogue of the GEMM producing dy
  (`NORM_GRAD_LIVE_TILES`, the x and dres loads, spills and `NORM_GRAD_EPILOGUE_WAVE_S` after each
  tile's mainloop) or as the plain GEMM storing dy plus one elementwise pass. Both share
  `_epilogue_or_pass`.

All of them take `gpu` as a `GPU` or a name ("h100", "h200"); `None` means "h100".
`coda-opt FILE -t 'io-report{decisions=true}'` prints what they choose for each choice an
nn function offers (io_extract.nn_decisions).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from coda_ir.analysis.io_model import (
    AUX_STORE_LIVE, GPU, GemmSpec, Kernel, KernelCost, Tensor, as_gpu, dtype_bytes, elementwise_tile, kernel_cost,
    tile_fits, whole_elementwise_tile,
)
from coda_ir.tiling import IO_MODEL_TILES, GemmConfig

# ============================================================================ decisions for the passes


@dataclass(frozen=True)
class PlanCost:
    kernels: tuple[KernelCost, ...]
    note: str = ""

    @property
    def time_s(self) -> float:
        return sum(k.time_s for k in self.kernels)

    @property
    def hbm_bytes(self) -> float:
        return sum(k.hbm_bytes for k in self.kernels)

    @property
    def fits(self) -> bool:
        return all(k.fits for k in self.kernels)


@dataclass(frozen=True)
class Decision:
    choice: object
    costs: Mapping[str, PlanCost]
    reason: str = ""

    def summary(self) -> str:
        parts = ", ".join(f"{name} {cost.time_s * 1e6:.1f} us" for name, cost in self.costs.items())
        return f"{self.choice} ({parts}){': ' + self.reason if self.reason else ''}"


def _cheapest(costs: Mapping[str, PlanCost]) -> str:
    feasible = {k: v for k, v in costs.items() if v.fits} or dict(costs)
    return min(feasible, key=lambda k: (feasible[k].time_s, list(costs).index(k)))


def _decide(costs: Mapping[str, PlanCost]) -> tuple[str, str]:
    """(the cheapest plan that fits, a one-line reason naming the runner-up)."""
    choice = _cheapest(costs)
    others = [k for k in costs if k != choice]
    if not others:
        return choice, costs[choice].note
    spilling = [k for k in others if not costs[k].fits and costs[choice].fits]
    if spilling:
        return choice, f"{', '.join(spilling)} does not fit on chip (registers or shared memory)"
    runner = min(others, key=lambda k: costs[k].time_s)
    saved = costs[runner].time_s - costs[choice].time_s
    return choice, f"{saved * 1e6:.1f} us faster than {runner}"


def _best_tile_cost(kernel: Kernel, gpu: GPU, candidates: Sequence[GemmConfig] = IO_MODEL_TILES) -> KernelCost:
    """The kernel at the cheapest fitting tile among `candidates` (its own tile if it has one)."""
    if kernel.tile is not None:
        return kernel_cost(kernel, gpu)
    costs = [kernel_cost(replace(kernel, tile=t), gpu) for t in candidates]
    fitting = [c for c in costs if c.fits] or costs
    return min(fitting, key=lambda c: c.time_s)


def stats_plan(M: int, D: int, *, K: int | None = None, dtype: str = "bf16", gpu: GPU | str | None = None,
               tile: GemmConfig | None = None, residual: bool = True, producer_live_tiles: float = 1.0) -> Decision:
    """Where to compute RMSNorm statistics of x [M, D] (x produced by a GEMM with contraction K).

    "producer_epilogue": the producer GEMM's epilogue also stores h = x*w and per-tile
    partial sums of squares [M, ceil(D/BN)] fp32, then a fold
    kernel turns them into rstd [M]. "row_kernel": the producer stores x only and a row kernel
    reads x, writes h and rstd. Both plans pick their cheapest tile that fits (or use `tile`).
    `producer_live_tiles` is the live state of the producer's epilogue before the stats (1 =
    the accumulator); the aux store of h adds `AUX_STORE_LIVE`. A plan whose pinned `tile`
    does not fit is only chosen when no plan fits.
    """
    gpu = as_gpu(gpu)
    x = Tensor("x", (M, D), dtype)
    h = Tensor("h", (M, D), dtype)
    w = Tensor("w", (D,), dtype, "weight")
    rstd = Tensor("rstd", (M,), "f32")
    row = Kernel("row_stats", "reduction", (x, w), (h, rstd), epilogue_flops=4.0 * M * D, sfu_ops=float(M))
    if K is None:
        costs = {"row_kernel": PlanCost((kernel_cost(row, gpu),), "no producer GEMM")}
        return Decision("row_kernel", costs, "no GEMM produces x")
    a = Tensor("a", (M, K), dtype)
    wp = Tensor("w_producer", (D, K), dtype, "weight")
    res = (Tensor("residual", (M, D), dtype),) if residual else ()
    plain = Kernel("producer", "gemm", res, (x,), gemm=GemmSpec(M, D, K, a, wp), tile=tile,
                   epilogue_flops=float(M * D) if residual else 0.0, live_tiles=producer_live_tiles)
    plain_cost = _best_tile_cost(plain, gpu)
    fused = replace(plain, reads=(*res, w), epilogue_flops=plain.epilogue_flops + 3.0 * M * D,
                    live_tiles=producer_live_tiles + AUX_STORE_LIVE)
    fused_cost = _best_tile_cost(fused, gpu)
    assert fused_cost.tile is not None
    partials = Tensor("partials", (M, math.ceil(D / fused_cost.tile.bn)), "f32", "partials")
    fused = replace(fused, tile=fused_cost.tile, writes=(x, h, partials))
    fold = Kernel("fold", "fold", (partials,), (rstd,), epilogue_flops=float(partials.numel + 2 * M), sfu_ops=float(M))
    costs = {
        "producer_epilogue": PlanCost((kernel_cost(fused, gpu), kernel_cost(fold, gpu)),
                                      f"producer tile {fused_cost.tile.describe()}"),
        "row_kernel": PlanCost((plain_cost, kernel_cost(row, gpu)),
                               f"producer tile {plain_cost.tile.describe() if plain_cost.tile else '-'}"),
    }
    choice, reason = _decide(costs)
    return Decision(choice, costs, reason)


def store_or_recompute(M: int, N: int, *, dtype: str = "bf16", gpu: GPU | str | None = None,
                       recompute_flops_per_element: float = 0.0, recompute_sfu_per_element: float = 0.0,
                       recompute_extra_read_bytes: int = 0, uses: int = 1,
                       fwd_host: Kernel | None = None, bwd_host: Kernel | None = None) -> Decision:
    """Store an activation y [M, N] in forward for backward, or recompute it in backward.

    "store": `fwd_host` also writes y; each of the `uses` backward hosts reads it.
    "recompute": each backward host recomputes y (extra FLOPs/SFU per element and
    `recompute_extra_read_bytes` of inputs it would not otherwise read).
    Hosts default to memory-bound elementwise kernels over an [M, N] tensor of `dtype`.
    """
    gpu = as_gpu(gpu)
    y = Tensor("y", (M, N), dtype)
    base_in = Tensor("host_in", (M, N), dtype)
    base_out = Tensor("host_out", (M, N), dtype)
    fwd = fwd_host or Kernel("fwd_host", "elementwise", (base_in,), (base_out,), epilogue_flops=float(M * N))
    bwd = bwd_host or Kernel("bwd_host", "elementwise", (base_in,), (base_out,), epilogue_flops=float(M * N))
    fwd_store = replace(fwd, writes=(*fwd.writes, y))
    bwd_load = replace(bwd, reads=(*bwd.reads, y))
    extra = (Tensor("recompute_inputs", (recompute_extra_read_bytes,), "i1"),) if recompute_extra_read_bytes else ()
    bwd_recompute = replace(
        bwd,
        reads=(*bwd.reads, *extra),
        epilogue_flops=bwd.epilogue_flops + recompute_flops_per_element * M * N,
        sfu_ops=bwd.sfu_ops + recompute_sfu_per_element * M * N,
        live_tiles=bwd.live_tiles + (AUX_STORE_LIVE if bwd.gemm is not None else 0.0),
    )
    costs = {
        "store": PlanCost((kernel_cost(fwd_store, gpu), *[kernel_cost(bwd_load, gpu)] * uses),
                          f"keeps {y.nbytes / 1e6:.1f} MB alive until backward"),
        "recompute": PlanCost((kernel_cost(fwd, gpu), *[kernel_cost(bwd_recompute, gpu)] * uses)),
    }
    choice, reason = _decide(costs)
    return Decision(choice, costs, reason)


def qk_norm_tile_width(head_dim: int, N: int, *, M: int, K: int, heads: int | None = None, dtype: str = "bf16",
                       gpu: GPU | str | None = None, widths: Sequence[int] = (64, 128, 256, 512),
                       bms: Sequence[int] = (128, 64), warps: int = 8) -> Decision:
    """The tile width BN for a GEMM [M, N] = [M, K] @ W.T followed by a per-head RMSNorm of the
    first `heads` heads of `head_dim` columns (QK-norm).

    BN % head_dim == 0: whole heads per tile, the norm runs in the epilogue (segment
    reduction over the accumulator, normalised in place) and the GEMM writes the
    normalised output. Otherwise: the GEMM writes the raw output and per-head partial sums of
    squares, and an elementwise kernel reads both and writes the normalised output.
    For each width, BM is the largest of `bms` (at most M rounded up to a power of two, and
    at least 64) whose tile fits. Costs keyed "bn=<width>".
    """
    gpu = as_gpu(gpu)
    heads = heads if heads is not None else N // head_dim
    a = Tensor("a", (M, K), dtype)
    w = Tensor("w", (N, K), dtype, "weight")
    wn = Tensor("w_norm", (head_dim,), dtype, "weight")
    out = Tensor("out", (M, N), dtype)
    costs: dict[str, PlanCost] = {}
    for bn in widths:
        in_tile = bn % head_dim == 0
        live = 1.0
        tile = None
        cap = max(64, 1 << max(0, (M - 1).bit_length()))  # no taller tiles than the problem needs
        for bm in [b for b in bms if b <= cap] or list(bms):
            for bk, stages in ((64, 3), (32, 3)):
                cand = GemmConfig(bm, bn, bk, num_warps=warps, num_stages=stages)
                if tile_fits(cand, dtype, live, gpu):
                    tile = cand
                    break
            if tile is not None:
                break
        if tile is None:
            tile = GemmConfig(bms[-1], bn, 32, num_warps=warps, num_stages=2)
        elems = M * head_dim * heads
        if in_tile:
            k = Kernel("gemm_qknorm", "gemm", (wn,), (out,), gemm=GemmSpec(M, N, K, a, w), tile=tile,
                       epilogue_flops=4.0 * elems, sfu_ops=float(M * heads), live_tiles=live)
            costs[f"bn={bn}"] = PlanCost((kernel_cost(k, gpu),), f"whole heads in tile {tile.describe()}")
        else:
            segments = math.ceil(head_dim / bn)
            raw = Tensor("raw", (M, N), dtype)
            part = Tensor("head_partials", (M, heads * segments), "f32", "partials")
            k = Kernel("gemm_head_partials", "gemm", (), (raw, part), gemm=GemmSpec(M, N, K, a, w), tile=tile,
                       epilogue_flops=2.0 * elems, live_tiles=live)
            e = Kernel("head_norm", "elementwise", (raw, part, wn), (out,), epilogue_flops=2.0 * elems + part.numel,
                       sfu_ops=float(M * heads))
            costs[f"bn={bn}"] = PlanCost((kernel_cost(k, gpu), kernel_cost(e, gpu)),
                                         f"per-head partials, tile {tile.describe()}")
    best, reason = _decide(costs)
    return Decision(int(best.split("=")[1]), costs, f"{costs[best].note}; {reason}")


SINCOS_INSTR_PER_PAIR = 50.0
"""FP32-pipe instructions of libdevice `sinf` + `cosf` for one angle (range reduction,
polynomials, quadrant fix-up): what `tl.cos`/`tl.sin` compile to, not one SFU op each."""

ROPE_ROTATE_INSTR_PER_PAIR = 6.0
"""The rotation itself: 4 multiplies, 2 adds per pair."""


def rope_angle_instr(head_dim: int, explicit_freqs: bool = False) -> float:
    """Instructions per pair of the angle `pos[m] * inv_freq(p mod hd/2)` as lower_nn builds it:
    inv_freq is two select chains of ~sqrt(hd/2) constants (compare + select each), or with
    `explicit_freqs` (nn.rope's `inv_freq`) one chain of hd/2, plus the div/rem of the index,
    the int -> float conversion, the multiply and the rotary-head select."""
    half = head_dim // 2
    if half <= 8 or explicit_freqs:
        chain = 2.0 * (half - 1)
    else:
        step = 1 << ((half - 1).bit_length() + 1) // 2
        chain = 2.0 * (-(-half // step) - 1) + 2.0 * (step - 1)
    return chain + 8.0


def rope_table_plan(M: int, N: int, head_dim: int, *, K: int, dtype: str = "bf16", gpu: GPU | str | None = None,
                    tile: GemmConfig | None = None, explicit_freqs: bool = False) -> Decision:
    """Where a GEMM [M, N] = [M, K] @ W.T followed by RoPE (head_dim, pairs over all N/2 pair
    columns) gets its rotation coefficients. Choice in {"epilogue", "table"}:

    "epilogue": every tile computes the angle and libdevice sin/cos for each of its BM x BN/2
    pairs after its mainloop (`rope_angle_instr + SINCOS_INSTR_PER_PAIR` instructions per
    pair, 2 FLOP-equivalents each at `simt_flops`), exposed per wave.
    "table": a small elementwise kernel computes cos/sin once per (row, frequency), [M, hd/2]
    each (fp32), one more launch; the GEMM tiles read their [BM, hd/2] slices (the 2 M hd/2
    fp32 stay in L2) as exposed epilogue loads, and only rotate.
    The same rotation runs in both; both use the tile that is cheapest for the plain GEMM.
    """
    gpu = as_gpu(gpu)
    half = head_dim // 2
    pairs = M * (N // 2)
    a = Tensor("a", (M, K), dtype)
    w = Tensor("w", (N, K), dtype, "weight")
    out = Tensor("out", (M, N), dtype)
    pos = Tensor("pos", (M,), "i32")
    rotate = 2.0 * ROPE_ROTATE_INSTR_PER_PAIR * pairs
    base = Kernel("gemm_rope", "gemm", (pos,), (out,), gemm=GemmSpec(M, N, K, a, w), tile=tile)
    chosen = tile or _best_tile_cost(base, gpu).tile
    angle_sincos = rope_angle_instr(head_dim, explicit_freqs) + SINCOS_INSTR_PER_PAIR
    in_epi = replace(base, tile=chosen, exposed_flops=rotate + 2.0 * angle_sincos * pairs)
    cos_t, sin_t = Tensor("cos", (M, half), "f32"), Tensor("sin", (M, half), "f32")
    table = Kernel("rope_table", "elementwise", (pos,), (cos_t, sin_t),
                   epilogue_flops=2.0 * angle_sincos * M * half)
    # the select keeping cos = 1, sin = 0 on non-rotary heads: a compare and two selects
    with_table = replace(base, tile=chosen, reads=(cos_t, sin_t), exposed_flops=rotate + 2.0 * 3.0 * pairs)
    costs = {
        "epilogue": PlanCost((kernel_cost(in_epi, gpu),),
                             f"{angle_sincos:.0f} instructions of angle + sin/cos per pair, {pairs} pairs"),
        "table": PlanCost((kernel_cost(table, gpu), kernel_cost(with_table, gpu)),
                          f"cos/sin tables of {M}x{half} fp32 computed once"),
    }
    choice, reason = _decide(costs)
    return Decision(choice, costs, reason)


ROPE_PASS_ALU_EXPOSED = 0.55
"""The fraction of a RoPE pass's arithmetic (angle, libdevice sin/cos, rotation) that adds to its
memory time. Fitted on the H100 (bench/RESULTS.md session 11, one process): the derived LLaMA
backward's RoPE pass with sin/cos in it (plus the r . dr partials, 308 MB) took ~0.14 ms at both
shapes (its launch group with the rebuilt h1, h2, 0.256 / 0.257 ms, less that group's h kernels
with the table kernel, 0.12 ms), against 0.102 ms of bytes at the measured copy bandwidth and
72 / 79 us of modelled arithmetic: 0.5-0.6 of it showed; reading tables the pass ran at
1.00-1.09x its bytes. (Fully added, the session-8 reading, it predicted a 2x larger gain.)"""


def rope_pass_plan(M: int, N: int, head_dim: int, *, dtype: str = "bf16", gpu: GPU | str | None = None,
                   explicit_freqs: bool = False) -> Decision:
    """Where a RoPE whose input no GEMM produces gets its rotation coefficients: the backward's
    rotation of the attention gradient (`nn.rope_grad` of dq, dk), an elementwise pass reading x
    [M, N] and writing the rotated [M, N] (pairs over all N/2 pair columns). Choice in
    {"epilogue", "table"}, named as in `rope_table_plan`:

    "epilogue": the pass computes the angle and libdevice sin/cos of each pair
    (`rope_angle_instr + SINCOS_INSTR_PER_PAIR` instructions) besides the rotation.
    "table": a small elementwise kernel computes cos/sin once per (row, frequency), [M, hd/2]
    each (fp32), one more launch; the pass reads its [BM, hd/2] slices (L2) and only rotates.

    The pass's arithmetic is priced as time partly added to its memory time, not hidden under it
    (the roofline's max): each tile loads, then computes, then stores; `ROPE_PASS_ALU_EXPOSED` of
    it shows (bench/RESULTS.md session 11)."""
    gpu = as_gpu(gpu)
    half = head_dim // 2
    pairs = M * (N // 2)
    x = Tensor("x", (M, N), dtype)
    out = Tensor("out", (M, N), dtype)
    pos = Tensor("pos", (M,), "i32")
    angle_sincos = rope_angle_instr(head_dim, explicit_freqs) + SINCOS_INSTR_PER_PAIR
    tile = elementwise_tile(M, N)

    def pass_cost(kernel: Kernel, instr_per_pair: float) -> KernelCost:
        c = kernel_cost(kernel, gpu)
        return replace(c, exposed_s=c.exposed_s + ROPE_PASS_ALU_EXPOSED * 2.0 * instr_per_pair * pairs / gpu.simt_flops)

    in_pass = Kernel("rope_pass", "elementwise", (x, pos), (out,), tile=tile)
    cos_t, sin_t = Tensor("cos", (M, half), "f32"), Tensor("sin", (M, half), "f32")
    table = Kernel("rope_table", "elementwise", (pos,), (cos_t, sin_t), epilogue_flops=2.0 * angle_sincos * M * half)
    # the tables stay in L2 (2 M hd/2 fp32): read once from device memory; a compare and two
    # selects keep cos = 1, sin = 0 on non-rotary heads
    with_table = Kernel("rope_pass_table", "elementwise", (x, cos_t, sin_t), (out,), tile=tile)
    costs = {
        "epilogue": PlanCost((pass_cost(in_pass, ROPE_ROTATE_INSTR_PER_PAIR + angle_sincos),),
                             f"{angle_sincos:.0f} instructions of angle + sin/cos per pair, {pairs} pairs"),
        "table": PlanCost((kernel_cost(table, gpu), pass_cost(with_table, ROPE_ROTATE_INSTR_PER_PAIR + 3.0)),
                          f"cos/sin tables of {M}x{half} fp32 computed once"),
    }
    choice, reason = _decide(costs)
    return Decision(choice, costs, reason)


GATED_GRAD_LIVE_TILES = 5.0
"""Live fp32 values per accumulator element in the epilogue of a gated backward fused into the
GEMM producing dy (`dy = dout @ Wd`): the accumulator dy (1), the 2N-wide tile of z (2), read by
the pair map and again by the z . dz row partials, and the 2N-wide dz (2), stored and read by
the partials. Registers 5 BM BN / threads + REG_OVERHEAD: 352 at 128x128 with 8 warps, 672 at
128x256 (compiled on the H100, bench/RESULTS.md session 8: 255 + 72 spilled, 255 + 568)."""

GATED_GRAD_FLOPS_PER_PAIR = 16.0
"""Arithmetic of one (gate, up) pair of the SwiGLU backward and its two z . dz products
(sigmoid as exp + add + divide, 8 multiplies, 3 adds, the two roundings of dz)."""


def spill_s(tile: GemmConfig, regs: int, waves: int, gpu: GPU) -> float:
    """Time of the register spills of a GEMM epilogue that needs `regs` registers per thread
    (above `regs_per_thread`), exposed after each wave's mainloop (one CTA per SM: nothing
    overlaps it). Each spilled 32-bit value is written to local memory and read back once; the
    shared-memory carve-out of a pipelined mainloop leaves L1 too small for a tile's spills, so
    they travel to L2 and back at one SM's share of the L2 bandwidth."""
    excess = regs - gpu.regs_per_thread
    if excess <= 0:
        return 0.0
    per_tile = 2.0 * excess * 4 * tile.threads
    return waves * per_tile / (gpu.l2_bw / gpu.sms)


def _epilogue_or_pass(fused_at: Callable[[GemmConfig], tuple[Kernel, float]], plain: Kernel, pass_: Kernel,
                      gpu: GPU, tile: GemmConfig | None, separate_note: str, *, plain_extra_bytes: float = 0.0,
                      pass_extra_bytes: float = 0.0, epilogue_also: tuple[Kernel, ...] = ()) -> Decision:
    """The choice between an elementwise consumer in the epilogue of the GEMM producing its input
    ("epilogue") and the plain GEMM storing that input plus one elementwise pass at full bandwidth
    ("separate"). `fused_at(t)` is the fused kernel at tile t and the bytes its epilogue stores
    beyond the plain GEMM's output; with one CTA per SM those drain before the SM's next tile
    starts, as do the spills (`spill_s`) of a kernel needing more than `regs_per_thread`, and the
    `plain_extra_bytes` the plain GEMM stores beyond an output of the program's element type (dy
    in f32 for a pass that reads it unrounded); `pass_extra_bytes`: the pass's time beyond its bytes
    at the copy bandwidth, as bytes (measured). `epilogue_also`: kernels only the epilogue plan
    runs (work the pass does on the side). Each plan runs at its cheapest tile, spilling or not (an
    autotuner picks a spilling tile when it is fastest), or at `tile` when pinned."""
    fused_costs = []
    for t in (tile,) if tile is not None else IO_MODEL_TILES:
        k, extra_bytes = fused_at(t)
        c = kernel_cost(k, gpu)
        assert k.gemm is not None
        waves = math.ceil(math.ceil(k.gemm.m / t.bm) * math.ceil(k.gemm.n / t.bn) / gpu.sms)
        extra = extra_bytes / gpu.hbm_bw + spill_s(t, c.regs_per_thread, waves, gpu)
        fused_costs.append(replace(c, exposed_s=c.exposed_s + extra))
    fused = min(fused_costs, key=lambda c: c.time_s)
    plain_cost = _best_tile_cost(replace(plain, tile=tile), gpu)
    if plain_extra_bytes:
        plain_cost = replace(plain_cost, exposed_s=plain_cost.exposed_s + plain_extra_bytes / gpu.hbm_bw)
    pass_cost = kernel_cost(pass_, gpu)
    if pass_extra_bytes:
        pass_cost = replace(pass_cost, exposed_s=pass_cost.exposed_s + pass_extra_bytes / gpu.hbm_bw)
    costs = {
        "epilogue": PlanCost((fused, *(kernel_cost(k, gpu) for k in epilogue_also)),
                             f"tile {fused.tile.describe() if fused.tile else '-'}, "
                             f"{fused.regs_per_thread} registers per thread"),
        "separate": PlanCost((plain_cost, pass_cost),
                             f"plain GEMM tile {plain_cost.tile.describe() if plain_cost.tile else '-'}{separate_note}"),
    }
    choice = min(costs, key=lambda k: (costs[k].time_s, list(costs).index(k)))
    runner = next(k for k in costs if k != choice)
    saved = costs[runner].time_s - costs[choice].time_s
    return Decision(choice, costs, f"{saved * 1e6:.1f} us faster than {runner}")


def gated_grad_plan(M: int, F: int, *, K: int, dtype: str = "bf16", gpu: GPU | str | None = None,
                    tile: GemmConfig | None = None) -> Decision:
    """Where the backward of a gated activation (`nn.swiglu_grad`: dz [M, 2F] from dy [M, F] and
    the saved z [M, 2F], plus the `z . dz` row partials of the norm backward that follows) runs,
    when dy = dout @ Wd is a GEMM [M, F] with contraction K. Choice in {"epilogue", "separate"}:

    "epilogue": the GEMM's epilogue loads z, writes dz and the row partials. It holds
    `GATED_GRAD_LIVE_TILES` tiles of live values, so wide tiles spill (`spill_s`); with one CTA
    per SM everything the epilogue does follows the tile's mainloop: the z loads (exposed, as
    every epilogue load), the dz stores, which double the tile's output bytes and drain at the
    SM's share of the bandwidth before its next tile starts, and the spills.
    "separate": the plain GEMM stores dy (its epilogue hides under the next tile's mainloop),
    then one elementwise pass reads dy and z and writes dz and the partials, at full bandwidth.
    Each plan runs at its cheapest tile, spills priced (`_epilogue_or_pass`).
    """
    gpu = as_gpu(gpu)
    a = Tensor("dout", (M, K), dtype)
    w = Tensor("w_down", (K, F), dtype, "weight")
    z = Tensor("z", (M, 2 * F), dtype)
    dz = Tensor("dz", (M, 2 * F), dtype)
    dy = Tensor("dy", (M, F), dtype)
    pairs = float(M * F)
    flops = GATED_GRAD_FLOPS_PER_PAIR * pairs

    def fused_at(t: GemmConfig) -> tuple[Kernel, float]:
        part = Tensor("partials", (M, math.ceil(F / t.bn)), "f32", "partials")
        k = Kernel("gemm_gated_grad", "gemm", (z,), (dz, part), gemm=GemmSpec(M, F, K, a, w), tile=t,
                   exposed_flops=flops, sfu_ops=pairs, live_tiles=GATED_GRAD_LIVE_TILES)
        # dz is two dy-sized tiles: one more than a plain kernel's output
        return k, float(dz.nbytes - dy.nbytes)

    et = elementwise_tile(M, F, width_multiple=2)  # z and dz in pair halves: [BM, 2 BN] tiles
    part = Tensor("partials", (M, math.ceil(F / et.bn)), "f32", "partials")
    pass_ = Kernel("gated_grad", "elementwise", (dy, z), (dz, part), tile=et, epilogue_flops=flops, sfu_ops=pairs)
    plain = Kernel("gemm_dy", "gemm", (), (dy,), gemm=GemmSpec(M, F, K, a, w))
    return _epilogue_or_pass(fused_at, plain, pass_, gpu, tile, "")


NORM_GRAD_LIVE_TILES = 3.0
"""Live fp32 values per accumulator element in the epilogue of an RMSNorm backward (with its
row statistic hdh given) fused into the GEMM producing dy: the accumulator dy, the x tile (read
by dx and again by the dw column partial `dy x rstd`, which runs after the stores) and the
residual gradient dres added to dx before the store. Registers 3 BM BN / threads + REG_OVERHEAD:
416 at 128x256 with 8 warps, 224 at 128x128 (compiled on the H100 with the session-9 epilogue
order, bench/RESULTS.md: 255 + 160 spilled, and no spills)."""

NORM_GRAD_FLOPS_PER_ELEMENT = 9.0
"""`dx = rstd (dy w - x rstd hdh / D) (+ dres)` and the dw column partial `dy x rstd`."""

NORM_GRAD_EPILOGUE_WAVE_S = 4.5e-6
"""Per wave of tiles, the part of an RMSNorm-backward epilogue that the bandwidth, spill and
arithmetic terms do not explain: two dependent matrix loads (x, then dres), the dx store, and the
column reduction of the dw partials across the CTA's warps (shared memory and barriers) before
the partials' store, all after the tile's mainloop at one CTA per SM. Fitted to the QKV dgrad of
the derived LLaMA block (bench/RESULTS.md session 9: 0.432 ms at 16384x2048x3072 128x128, 16
waves; 0.73-0.76 ms at 8192x4096x6144), the model without it falls 0.07-0.1 ms short. Checked in
session 10 (H100, same process, fused vs plain dgrad + pass): the excess over the plain dgrad is
0.13-0.14 ms at 1B as modelled, but 0.20-0.27 ms at 8B (same M D and tiles), so the model's gain
of the separate plan is right at 1B and half the measured one at 8B."""


def norm_grad_plan(M: int, D: int, *, K: int, dtype: str = "bf16", gpu: GPU | str | None = None,
                   tile: GemmConfig | None = None, residual: bool = True, rebuilt_h: bool = False) -> Decision:
    """Where an RMSNorm backward whose row statistic is given (`nn.rms_norm_grad` with `hdh`: dx
    elementwise in dy, plus the dw column partials) runs, when dy = dout @ W is a GEMM [M, D] with
    contraction K; `residual`: dx is added to a residual gradient dres [M, D] in the same kernel.
    Choice in {"epilogue", "separate"}:

    "epilogue": the GEMM's epilogue loads x (and dres), writes dx and the dw partials
    [ceil(M / BM), D]. `NORM_GRAD_LIVE_TILES` live tiles: 128x256 spills; the loads (exposed, as
    every epilogue load), the spills, the arithmetic and `NORM_GRAD_EPILOGUE_WAVE_S` follow each
    tile's mainloop at one CTA per SM. It stores nothing beyond a plain GEMM's output (dx instead
    of dy), so a long mainloop (large K) makes it cheap relative to the GEMM.
    "separate": the plain GEMM stores dy in f32 (the pass reads it unrounded, as the epilogue
    reads the accumulator: `coda.full_precision`), then one elementwise pass reads dy, x (and
    dres) and writes dx and the partials at full bandwidth: 2 M D f32 more bytes through device
    memory, and the plain GEMM's store of them beyond a bf16 output drains after each tile.

    `rebuilt_h`: the backward also rebuilds the norm's output h = x rstd w (for the weight
    gradient of the GEMM that read h) in a kernel of its own, which reads x [M, D] and writes h.
    The separate pass loads x anyway and writes h beside dx (coda-fuse's sibling merge); with the
    epilogue form that kernel stays (it shares a launch with other small kernels).
    """
    gpu = as_gpu(gpu)
    a = Tensor("dout", (M, K), dtype)
    wg = Tensor("w_gemm", (K, D), dtype, "weight")
    dy = Tensor("dy", (M, D), "f32")
    x = Tensor("x", (M, D), dtype)
    h = (Tensor("h", (M, D), dtype),) if rebuilt_h else ()
    dres = (Tensor("dres", (M, D), dtype),) if residual else ()
    dx = Tensor("dx", (M, D), dtype)
    vectors = (Tensor("w", (D,), dtype, "weight"), Tensor("rstd", (M,), "f32"), Tensor("hdh", (M,), "f32"))
    flops = (NORM_GRAD_FLOPS_PER_ELEMENT + (1.0 if residual else 0.0)) * M * D

    def fused_at(t: GemmConfig) -> tuple[Kernel, float]:
        part = Tensor("dw_partials", (math.ceil(M / t.bm), D), "f32", "partials")
        k = Kernel("gemm_norm_grad", "gemm", (x, *dres, *vectors), (dx, part), gemm=GemmSpec(M, D, K, a, wg), tile=t,
                   exposed_flops=flops, live_tiles=NORM_GRAD_LIVE_TILES)
        waves = math.ceil(math.ceil(M / t.bm) * math.ceil(D / t.bn) / gpu.sms)
        # the per-wave remainder, as bytes at the device bandwidth (the helper's unit)
        return k, waves * NORM_GRAD_EPILOGUE_WAVE_S * gpu.hbm_bw

    et = elementwise_tile(M, D)
    part = Tensor("dw_partials", (math.ceil(M / et.bm), D), "f32", "partials")
    pass_ = Kernel("norm_grad", "elementwise", (dy, x, *dres, *vectors), (dx, part, *h), tile=et,
                   epilogue_flops=flops + 2.0 * len(h) * M * D)
    plain = Kernel("gemm_dy", "gemm", (), (dy,), gemm=GemmSpec(M, D, K, a, wg))
    rebuild = tuple(Kernel("rebuild_h", "elementwise", (x, *vectors[:2]), h, tile=et, epilogue_flops=2.0 * M * D,
                           shares_launch=True) for _ in h)
    note = f" (dy in f32), then one pass over dy, x{' and dres' if residual else ''}{' writing h too' if h else ''}"
    return _epilogue_or_pass(fused_at, plain, pass_, gpu, tile, note,
                             plain_extra_bytes=float(M * D * (dtype_bytes("f32") - dtype_bytes(dtype))),
                             epilogue_also=rebuild)


CE_FLOPS_PER_ELEMENT = 6.0
"""Cross-entropy forward per logit besides its exp: the running row max, the shift, the sum of
exponentials, and the compare / select of the target logit."""

CE_EPILOGUE_WAVE_S = 3.9e-6
"""Per wave of tiles, the part of a cross-entropy epilogue (row log-sum-exp and target-logit
partials) that the arithmetic and SFU terms do not explain: the row reductions across the CTA's
warps (shared memory, barriers) and the partials' stores after each tile's mainloop at one CTA
per SM, for a 128x256 tile (scaled by the tile's elements for others). Fitted to the LLaMA-1B LM
head on the H100 (bench/RESULTS.md, session 13: at
8192x128256x2048 with the logits stored, 7.65 ms with the epilogue, 6.33 ms for the plain GEMM:
1.32 ms = 0.36 exposed arithmetic + 249 waves x 3.9 us)."""

def cross_entropy_plan(M: int, V: int, *, K: int, dtype: str = "bf16", gpu: GPU | str | None = None,
                       tile: GemmConfig | None = None, logits_stored: bool = True) -> Decision:
    """Where the cross-entropy forward (`nn.cross_entropy` / `nn.cross_entropy_fwd`: per row the
    log-sum-exp of the logits and the target's logit, as per-tile partials that one fold turns
    into the loss) runs, when logits = h @ W is a GEMM [M, V] with contraction K. Choice in
    {"epilogue", "separate"}:

    "epilogue": the GEMM's epilogue computes the partials from the accumulator: an exp per logit
    and two row reductions after each tile's mainloop at one CTA per SM (exposed, with
    `CE_EPILOGUE_WAVE_S` per wave); it stores the logits only where something else reads them
    (`logits_stored`: the saved logits of a differentiated forward), and that store drains
    after each tile.
    "separate": the plain GEMM stores the logits, which drain after each tile too, then one
    `whole rows` pass, a row per program, reads them and writes each row's lse and target logit
    (at its bytes' time: 0.704 ms for the 2.1 GB of LLaMA-1B logits on the H100, session 15; the
    tiled pass before it, writing [M, V / BN] partials and comparing every column with the target,
    took 1.06-2.26 ms).

    So the pass pays where the logits are stored anyway (a differentiated forward saves them:
    LLaMA-1B LM head 7.52 vs 7.65 ms on the H100 with the slower tiled pass), and the epilogue
    where they are not (it then stores nothing but partials: the 8B LM head forward 12.77 vs
    13.32 ms with the tiled pass, session 13).
    """
    gpu = as_gpu(gpu)
    a = Tensor("h", (M, K), dtype)
    w = Tensor("w_vocab", (K, V), dtype, "weight")
    logits = Tensor("logits", (M, V), dtype)
    targets = Tensor("targets", (M,), "i32")
    elements = float(M * V)
    flops = CE_FLOPS_PER_ELEMENT * elements
    # the exps run after the mainloop too: priced as the fp32 operations they displace
    exposed = flops + elements * gpu.simt_flops / gpu.sfu_rate

    def partials(bn: int) -> tuple[Tensor, Tensor]:
        return (Tensor("lse_partials", (M, math.ceil(V / bn)), "f32", "partials"),
                Tensor("target_partials", (M, math.ceil(V / bn)), "f32", "partials"))

    def fused_at(t: GemmConfig) -> tuple[Kernel, float]:
        k = Kernel("gemm_cross_entropy", "gemm", (targets,), ((logits,) if logits_stored else ()) + partials(t.bn),
                   gemm=GemmSpec(M, V, K, a, w), tile=t, exposed_flops=exposed, sfu_ops=elements)
        waves = math.ceil(math.ceil(M / t.bm) * math.ceil(V / t.bn) / gpu.sms)
        # the logits' store drains after each tile (one CTA per SM); the per-wave remainder as bytes
        # (the fitted per-wave remainder scales with the tile's elements: it was a 128x256 tile's)
        remainder = waves * CE_EPILOGUE_WAVE_S * (t.bm * t.bn) / (128 * 256)
        return k, (logits.nbytes if logits_stored else 0) + remainder * gpu.hbm_bw

    rows = (Tensor("lse", (M,), "f32"), Tensor("target_logit", (M,), "f32"))
    pass_ = Kernel("cross_entropy", "elementwise", (logits, targets), rows, tile=whole_elementwise_tile(M, V, "rows"),
                   epilogue_flops=flops, sfu_ops=elements)
    plain = Kernel("gemm_logits", "gemm", (), (logits,), gemm=GemmSpec(M, V, K, a, w))
    # the plain GEMM's logits store drains after each tile as well (session 13: 6.33 ms against
    # 5.45-5.54 ms for the same-size GEMMs of the LM head's backward, whose outputs are small)
    return _epilogue_or_pass(fused_at, plain, pass_, gpu, tile, ", then one pass over the logits",
                             plain_extra_bytes=float(logits.nbytes))
