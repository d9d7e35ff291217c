"""IO-aware cost model for GEMM-plus-epilogue programs (plain Python, no xDSL imports).

The model follows "FlashAttention on a Napkin" (layouts_napkin.md section 3): for every kernel
it counts the bytes crossing each memory level and the arithmetic it does, and bounds the
kernel's time by its slowest resource.

Data
----
* `Tensor(name, shape, dtype, role)`: a tensor a kernel reads or writes. `role` is
  "weight" (parameters: GEMM weights, norm weights, biases), "activation" (anything
  indexed by tokens: activations, row vectors such as rstd, positions, targets),
  "partials" (per-tile partial reductions, fp32) or "scalar".
* `GemmConfig` (`coda_ir.tiling`, the type the runtime launches with): a GEMM tile
  configuration (the coda.gemm `config` property). Without one, `default_tile` plays
  autotuner: of `tiling.IO_MODEL_TILES`
  (128x256x64, 8 warps, 3 stages on Hopper, then smaller ones) whose shared memory and
  registers fit the GPU with the kernel's epilogue, the one the model predicts fastest.
* `GemmSpec(m, n, k, a, b)`: the mainloop of a GEMM kernel (dtype = a's).
* `Kernel(name, kind, reads, writes, gemm=None, tile=None, epilogue_flops, sfu_ops,
  live_tiles, ops, notes, programs=None)`: one GPU launch. `reads`/`writes` are every
  tensor besides the GEMM operands, counted once each; `live_tiles` is the peak number of
  fp32 values per accumulator element live in the epilogue (1 = the accumulator alone;
  each extra stored tile adds `AUX_STORE_LIVE`); `programs` is the CTA count of a non-GEMM
  kernel when it is below the SM count (its bandwidth and ALU share shrink accordingly).
  `elementwise_tile(M, N)` mirrors the runtime's tile for coda.elementwise kernels.
* `GPU`: per-GPU constants (bandwidths, tensor/ALU/SFU throughput, launch overhead, limits);
  `load_gpu("h100" | "h200", path=None)` reads `gpu_constants.json` next to this file (or the
  table at `path`; the planning passes' `gpu` / `gpu-constants` options), `load_calibration(path)`
  reads the JSON `bench/calibrate.py` writes.

Cost of one kernel (`kernel_cost(kernel, gpu) -> KernelCost`)
--------------------------------------------------------------
* FLOPs: GEMM `2 M N K`; epilogue FLOPs and SFU ops (exp, rsqrt, sin, ...) separately.
* Device-memory bytes, three numbers:
  - `hbm_unique`: every operand, epilogue input (vectors, matrix tiles, partials) and output
    counted once (the "ideal one-kernel" count; for `nn` ops it is the PyTorch op's traffic);
  - `hbm_bytes`: `hbm_unique` plus the re-reads of a tiled GEMM that miss L2. Tiles run in
    waves of `sms` CTAs in grouped order (`group_m` rows of tiles, `sms / group_m` columns),
    so A's row band is re-read once per wave column chunk and B once per band of
    `group_m` tile rows; an operand (or A's band) that fits in `l2_reuse_fraction` of L2 is
    read once;
  - `l2_bytes`: L2 -> SM traffic: A once per column of tiles, B once per row of tiles, plus
    everything else once.
* On-chip footprint: shared memory `stages (BM + BN) BK bytes`; registers per thread
  `live_tiles BM BN / threads + REG_OVERHEAD`, against `smem_per_block` and
  `regs_per_thread`. A kernel that does not fit is flagged (`fits=False`, "spills").
* Time: `max(t_mma, t_hbm, t_l2, t_alu) + launch_s` where `t_mma` counts whole waves of
  tiles (`ceil(tiles / sms)` waves of `2 BM BN K / (tensor_flops / sms)`), `t_hbm =
  hbm_bytes / hbm_bw`, `t_l2 = l2_bytes / l2_bw` and `t_alu = epilogue_flops / simt_flops
  + sfu_ops / sfu_rate` (non-GEMM kernels with `programs < sms` get that share of
  bandwidth and ALUs). The bound reported is the largest term ("compute" = tensor cores,
  "memory", "l2", "alu"), or "launch" when every term is below the launch overhead. It is
  a lower bound (no latency, perfect overlap) except for one measured effect: matrix tiles
  a GEMM epilogue loads (residuals, saved activations) are exposed, `exposed_s =
  (their bytes / hbm_bw + waves * epilogue_latency_s) * (1 - epilogue_overlap)` is added
  (bench/RESULTS.md, H100: the residual epilogue costs 31-36 us over the plain kernel at
  8192x4096x4096, 67 MB of residual = 22 us plus ~1.3 us per wave, one CTA per SM, no
  overlap in Triton 3.6). Calibrate the constants with
  `bench/calibrate.py` on the GPU (`python -m coda_ir.analysis.io_model --merge FILE`).

`program_cost(kernels, gpu) -> ProgramCost` sums kernels (time, bytes by level, weight vs
activation bytes).

Unfused `nn` ops
----------------
`nn_op_kernel(op, inputs, output, **props)` is the kernel PyTorch eager would run for one
`nn` op: it reads each input once and writes its output once (linear/matmul: a GEMM with
the default tile). `io_fixtures.llama_block_unfused` / `llama_block_fused` build the LLaMA block of
NN_DIALECT.md one-op-per-kernel and as the 4 GEMM-epilogue kernels + 2 rstd folds of
EPILOGUES.md / coda_digest section 4.

Plans (the decisions the passes ask for) live in `io_plans`; the hand-built LLaMA block
fixtures in `io_fixtures`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from coda_ir.tiling import (
    FOLD_TILE_LANES, IO_MODEL_TILES, GemmConfig, elementwise_config, fold_config, whole_elementwise_config,
)

# ============================================================================ basic data

DTYPE_BYTES: dict[str, int] = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2, "i64": 8, "i32": 4, "i1": 1}

REG_OVERHEAD = 32
"""Registers per thread besides the epilogue's tile values (addresses, indices, loop state)."""

AUX_STORE_LIVE = 0.5
"""Live fp32 tile values (in accumulator tiles) each extra stored tile adds: elementwise
epilogue code is fused per element by the compiler, so an auxiliary output is computed and
stored while the main value is held, costing about half a tile of staging registers."""

CONSTANTS_PATH = Path(__file__).with_name("gpu_constants.json")


def dtype_bytes(dtype: str) -> int:
    try:
        return DTYPE_BYTES[dtype]
    except KeyError:
        raise ValueError(f"unknown element type '{dtype}' (expected one of {', '.join(DTYPE_BYTES)})") from None


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str = "bf16"
    role: str = "activation"

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * dtype_bytes(self.dtype)

    def describe(self) -> str:
        dims = "x".join(map(str, self.shape)) if self.shape else "scalar"
        return f"{self.name} {self.dtype}[{dims}]"


def elementwise_tile(M: int, N: int, bn_multiple_of: int = 1, width_multiple: int = 1) -> GemmConfig:
    """The tile a coda.elementwise kernel runs with on the GPU (`tiling.elementwise_config`, as
    the runtime launches it), as a GemmConfig with no K step."""
    c = elementwise_config(M, N, bn_multiple_of, width_multiple=width_multiple)
    return GemmConfig(c.bm, c.bn, 0, num_warps=c.num_warps, num_stages=1)


def whole_elementwise_tile(M: int, N: int, whole: str, bn_multiple_of: int = 1) -> GemmConfig:
    """The tile a `whole rows` / `whole cols` coda.elementwise kernel runs with on the GPU
    (`tiling.whole_elementwise_config`, as the runtime launches it)."""
    c = whole_elementwise_config(M, N, whole, bn_multiple_of)
    return GemmConfig(c.bm, c.bn, 0, num_warps=c.num_warps, num_stages=1)


def fold_programs(L: int) -> int:
    """Programs of a coda.fold over L rows (`tiling.fold_config`, as the runtime launches it),
    its partials taken to span a full step of tile lanes (many row tiles: the GPU's shapes)."""
    block, _ = fold_config(L, FOLD_TILE_LANES)
    return math.ceil(L / block)


@dataclass(frozen=True)
class GemmSpec:
    m: int
    n: int
    k: int
    a: Tensor
    b: Tensor

    @property
    def dtype(self) -> str:
        return self.a.dtype

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k


@dataclass(frozen=True)
class Kernel:
    name: str
    kind: str  # "gemm", "elementwise", "fold", "reduction", or an nn op name for unfused ops
    reads: tuple[Tensor, ...] = ()
    writes: tuple[Tensor, ...] = ()
    gemm: GemmSpec | None = None
    tile: GemmConfig | None = None
    epilogue_flops: float = 0.0
    sfu_ops: float = 0.0
    live_tiles: float = 1.0
    ops: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    programs: int | None = None  # CTAs of a non-GEMM kernel; None: enough to fill the GPU
    # A member of a launch group after the first: it runs in the first member's launch, so
    # it pays no launch overhead of its own (its bytes and FLOPs still add up).
    shares_launch: bool = False
    exposed_flops: float = 0.0
    """GEMM epilogue arithmetic that runs after each tile's mainloop with nothing to overlap it
    (one CTA per SM, Triton 3.6): added per wave, like exposed epilogue loads."""
    attention: object | None = None
    """An attention step (`attention_model.AttentionCall`, whose `kernel_cost(kernel, gpu)` this
    module calls): priced with the attention model's tiled streaming schedule instead of as a
    memory pass."""

    def all_reads(self) -> tuple[Tensor, ...]:
        if self.gemm is None:
            return self.reads
        return (self.gemm.a, self.gemm.b, *self.reads)


@dataclass(frozen=True)
class GPU:
    name: str
    hbm_bw: float  # B/s, device copy bandwidth (read + write counted)
    l2_bw: float  # B/s, L2 -> SM read bandwidth
    tensor_flops: Mapping[str, float]  # FLOP/s of dense GEMMs by operand dtype
    simt_flops: float  # FLOP/s of fp32 CUDA-core arithmetic (FMA = 2)
    sfu_rate: float  # transcendental ops / s
    launch_s: float  # per-kernel launch overhead on a busy stream
    sms: int = 132
    l2_bytes: int = 50 * 2**20
    smem_per_block: int = 227 * 1024
    regs_per_thread: int = 255
    regs_per_sm: int = 65536
    l2_reuse_fraction: float = 0.5
    epilogue_overlap: float = 0.0  # fraction of a GEMM epilogue's input loads hidden under MMA
    epilogue_latency_s: float = 1.0e-6  # per wave of tiles whose epilogue loads a matrix tile
    source: str = ""
    # Occupancy and shared-memory terms of the attention model (attention_model.py); the
    # defaults are the Hopper datasheet values, so older constant files keep working.
    arch: str = "hopper"  # "hopper" (wgmma) or "ampere" (mma.sync only)
    smem_per_sm: int = 228 * 1024
    smem_bw: float = 33.4e12  # B/s, all SMs: 128 B per clock per SM
    max_warps_per_sm: int = 64
    max_ctas_per_sm: int = 32

    def gemm_rate(self, dtype: str) -> float:
        if dtype in self.tensor_flops:
            return self.tensor_flops[dtype]
        if dtype == "f32":  # ieee fp32: CUDA cores
            return self.simt_flops
        return self.tensor_flops.get("bf16", self.simt_flops)

    def describe(self) -> str:
        return (
            f"{self.name}: hbm {self.hbm_bw / 1e12:.2f} TB/s, l2 {self.l2_bw / 1e12:.1f} TB/s, "
            f"bf16 {self.gemm_rate('bf16') / 1e12:.0f} TFLOP/s, launch {self.launch_s * 1e6:.1f} us "
            f"({self.source or 'unknown source'})"
        )


# ============================================================================ GPU constants

_GPU_FIELDS = {
    "hbm_bw", "l2_bw", "tensor_flops", "simt_flops", "sfu_rate", "launch_s", "sms", "l2_bytes",
    "smem_per_block", "regs_per_thread", "regs_per_sm", "l2_reuse_fraction", "epilogue_overlap",
    "epilogue_latency_s", "source", "arch", "smem_per_sm", "smem_bw", "max_warps_per_sm", "max_ctas_per_sm",
}


def gpu_from_dict(name: str, data: Mapping[str, object], base: GPU | None = None) -> GPU:
    """A `GPU` from a JSON entry; fields missing from `data` come from `base`."""
    values = {k: v for k, v in data.items() if k in _GPU_FIELDS}
    if "tensor_flops" in values:
        values["tensor_flops"] = dict(values["tensor_flops"])  # type: ignore[arg-type]
    if base is not None:
        merged = dict(base.tensor_flops)
        merged.update(values.get("tensor_flops", {}))  # type: ignore[arg-type]
        values["tensor_flops"] = merged
        return replace(base, name=name, **values)  # type: ignore[arg-type]
    missing = {"hbm_bw", "l2_bw", "tensor_flops", "simt_flops", "sfu_rate", "launch_s"} - values.keys()
    if missing:
        raise ValueError(f"GPU constants for '{name}' lack {', '.join(sorted(missing))}")
    return GPU(name=name, **values)  # type: ignore[arg-type]


def load_gpu_table(path: str | os.PathLike[str] | None = None) -> dict[str, GPU]:
    path = Path(path or CONSTANTS_PATH)
    data = json.loads(path.read_text())
    return {name: gpu_from_dict(name, entry) for name, entry in data.items() if not name.startswith("_")}


def load_gpu(name: str = "h100", path: str | os.PathLike[str] | None = None) -> GPU:
    """The constants of GPU `name` ("h100", "h200") from gpu_constants.json."""
    table = load_gpu_table(path)
    key = name.lower()
    if key not in table:
        raise ValueError(f"unknown GPU '{name}' (known: {', '.join(sorted(table))})")
    return table[key]


def load_calibration(path: str | os.PathLike[str], base: GPU | str | None = None) -> GPU:
    """A `GPU` from the JSON written by bench/calibrate.py (measured fields override `base`,
    which defaults to the gpu_constants.json entry named by the file's "gpu" key)."""
    data = json.loads(Path(path).read_text())
    entry = data.get("constants", data)
    name = str(data.get("gpu", entry.get("gpu", "h100"))).lower()
    if base is None:
        try:
            base = load_gpu(name)
        except ValueError:
            base = None
    elif isinstance(base, str):
        base = load_gpu(base)
    return gpu_from_dict(name, entry, base)


def as_gpu(gpu: GPU | str | None) -> GPU:
    if gpu is None:
        return load_gpu("h100")
    if isinstance(gpu, str):
        return load_gpu(gpu)
    return gpu


# ============================================================================ the cost of one kernel


@dataclass(frozen=True)
class KernelCost:
    kernel: Kernel
    tile: GemmConfig | None
    gemm_flops: float
    epilogue_flops: float
    sfu_ops: float
    read_bytes: int  # unique
    write_bytes: int  # unique
    weight_bytes: int  # unique bytes of role "weight"
    hbm_bytes: float  # with tiled re-reads that miss L2
    l2_bytes: float  # L2 -> SM traffic
    smem_bytes: int
    regs_per_thread: int
    fits: bool
    times: Mapping[str, float]
    launch_s: float
    exposed_s: float = 0.0  # GEMM epilogue loads not hidden under the mainloop (added to the max)

    @property
    def hbm_unique(self) -> int:
        return self.read_bytes + self.write_bytes

    @property
    def activation_bytes(self) -> int:
        return self.hbm_unique - self.weight_bytes

    @property
    def flops(self) -> float:
        return self.gemm_flops + self.epilogue_flops

    @property
    def intensity(self) -> float:
        return self.flops / self.hbm_bytes if self.hbm_bytes else 0.0

    @property
    def bound(self) -> str:
        """The resource with the largest time: "compute" (tensor cores), "memory" (device
        memory), "l2", "alu" (epilogue arithmetic) or "launch"."""
        resource = max(self.times, key=lambda r: self.times[r])
        if self.times[resource] < self.launch_s:
            return "launch"
        return {"mma": "compute", "hbm": "memory", "sfu": "alu"}.get(resource, resource)

    @property
    def time_s(self) -> float:
        return max(self.times.values()) + self.exposed_s + self.launch_s


def _tile_footprint(tile: GemmConfig, dtype: str, live_tiles: float) -> tuple[int, int]:
    smem = tile.num_stages * (tile.bm + tile.bn) * tile.bk * dtype_bytes(dtype)
    regs = math.ceil(live_tiles * tile.bm * tile.bn / tile.threads) + REG_OVERHEAD
    return smem, regs


def tile_fits(tile: GemmConfig, dtype: str, live_tiles: float, gpu: GPU) -> bool:
    smem, regs = _tile_footprint(tile, dtype, live_tiles)
    return smem <= gpu.smem_per_block and regs <= gpu.regs_per_thread


def default_tile(kernel: Kernel, gpu: GPU, candidates: Sequence[GemmConfig] = IO_MODEL_TILES) -> GemmConfig:
    """What an autotuner would pick, by the model: the candidate with the lowest predicted
    time among those whose shared memory and registers fit with this epilogue (the earlier
    candidate on a tie; the last candidate when none fits)."""
    dtype = kernel.gemm.dtype if kernel.gemm else "bf16"
    fitting = [t for t in candidates if tile_fits(t, dtype, kernel.live_tiles, gpu)]
    if not fitting:
        return candidates[-1]
    if kernel.gemm is None or len(fitting) == 1:
        return fitting[0]
    times = [kernel_cost(replace(kernel, tile=t), gpu).time_s for t in fitting]
    return fitting[min(range(len(fitting)), key=lambda i: (round(times[i], 12), i))]


def gemm_hbm_bytes(gemm: GemmSpec, tile: GemmConfig, gpu: GPU) -> tuple[float, float]:
    """(device-memory bytes, L2 -> SM bytes) of the A and B operands of a tiled GEMM."""
    a_bytes, b_bytes = gemm.a.nbytes, gemm.b.nbytes
    tm, tn = math.ceil(gemm.m / tile.bm), math.ceil(gemm.n / tile.bn)
    l2_traffic = float(a_bytes * tn + b_bytes * tm)
    room = gpu.l2_reuse_fraction * gpu.l2_bytes
    g = min(tile.group_m, tm)
    wave_cols = max(1, min(tn, gpu.sms // g))
    band_a = g * tile.bm * gemm.k * dtype_bytes(gemm.dtype)
    if a_bytes + b_bytes <= room:
        hbm = float(a_bytes + b_bytes)
    else:
        a_reads = 1 if (a_bytes <= room or band_a <= room) else math.ceil(tn / wave_cols)
        b_reads = 1 if b_bytes <= room else math.ceil(tm / g)
        hbm = float(a_bytes * a_reads + b_bytes * b_reads)
    return min(hbm, l2_traffic), l2_traffic


def kernel_cost(kernel: Kernel, gpu: GPU | str | None = None) -> KernelCost:
    gpu = as_gpu(gpu)
    if kernel.attention is not None:  # priced by its own model (attention_model builds on this module)
        return kernel.attention.kernel_cost(kernel, gpu)  # type: ignore[attr-defined]
    reads = kernel.all_reads()
    read_bytes = sum(t.nbytes for t in reads)
    write_bytes = sum(t.nbytes for t in kernel.writes)
    weight_bytes = sum(t.nbytes for t in (*reads, *kernel.writes) if t.role == "weight")
    side_bytes = sum(t.nbytes for t in kernel.reads) + write_bytes
    times: dict[str, float] = {}
    alu = kernel.epilogue_flops / gpu.simt_flops + kernel.sfu_ops / gpu.sfu_rate
    exposed = 0.0
    if kernel.gemm is not None:
        gemm = kernel.gemm
        tile = kernel.tile or default_tile(kernel, gpu)
        smem, regs = _tile_footprint(tile, gemm.dtype, kernel.live_tiles)
        fits = smem <= gpu.smem_per_block and regs <= gpu.regs_per_thread
        hbm_ab, l2_ab = gemm_hbm_bytes(gemm, tile, gpu)
        hbm = hbm_ab + side_bytes
        l2 = l2_ab + side_bytes
        tiles = math.ceil(gemm.m / tile.bm) * math.ceil(gemm.n / tile.bn)
        waves = math.ceil(tiles / gpu.sms)
        per_sm = gpu.gemm_rate(gemm.dtype) / gpu.sms
        times["mma"] = waves * 2.0 * tile.bm * tile.bn * gemm.k / per_sm
        gemm_flops = gemm.flops
        # Matrix tiles the epilogue loads (residuals, saved activations) arrive after the
        # tile's mainloop with one CTA per SM: the tensor cores wait for them.
        epi_loads = sum(t.nbytes for t in kernel.reads if len(t.shape) == 2)
        if epi_loads:
            exposed = (epi_loads / gpu.hbm_bw + waves * gpu.epilogue_latency_s) * (1.0 - gpu.epilogue_overlap)
        if kernel.exposed_flops:
            # each SM runs its tile's share of the arithmetic after its mainloop, once per wave
            exposed += waves * (kernel.exposed_flops / tiles) / (gpu.simt_flops / gpu.sms)
    else:
        tile = None
        smem, regs, fits = 0, 0, True
        hbm = l2 = float(read_bytes + write_bytes)
        gemm_flops = 0.0
    # A kernel with fewer CTAs than SMs (a fold summing all rows in one program) gets that
    # fraction of the GPU's bandwidth and ALUs.
    share = 1.0 if kernel.programs is None else max(1, kernel.programs) / gpu.sms
    share = min(1.0, share)
    times["hbm"] = hbm / gpu.hbm_bw / share
    times["l2"] = l2 / gpu.l2_bw / share
    times["alu"] = alu / share
    return KernelCost(
        kernel=kernel,
        tile=tile,
        gemm_flops=gemm_flops,
        epilogue_flops=kernel.epilogue_flops,
        sfu_ops=kernel.sfu_ops,
        read_bytes=read_bytes,
        write_bytes=write_bytes,
        weight_bytes=weight_bytes,
        hbm_bytes=hbm,
        l2_bytes=l2,
        smem_bytes=smem,
        regs_per_thread=regs,
        fits=fits,
        times=times,
        launch_s=0.0 if kernel.shares_launch else gpu.launch_s,
        exposed_s=exposed,
    )


@dataclass(frozen=True)
class ProgramCost:
    kernels: tuple[KernelCost, ...]

    @property
    def time_s(self) -> float:
        return sum(k.time_s for k in self.kernels)

    @property
    def hbm_unique(self) -> int:
        return sum(k.hbm_unique for k in self.kernels)

    @property
    def hbm_bytes(self) -> float:
        return sum(k.hbm_bytes for k in self.kernels)

    @property
    def l2_bytes(self) -> float:
        return sum(k.l2_bytes for k in self.kernels)

    @property
    def weight_bytes(self) -> int:
        return sum(k.weight_bytes for k in self.kernels)

    @property
    def activation_bytes(self) -> int:
        return sum(k.activation_bytes for k in self.kernels)

    @property
    def gemm_flops(self) -> float:
        return sum(k.gemm_flops for k in self.kernels)

    @property
    def epilogue_flops(self) -> float:
        return sum(k.epilogue_flops for k in self.kernels)

    @property
    def launches(self) -> int:
        return sum(1 for k in self.kernels if not k.kernel.shares_launch)


def program_cost(kernels: Iterable[Kernel], gpu: GPU | str | None = None) -> ProgramCost:
    gpu = as_gpu(gpu)
    return ProgramCost(tuple(kernel_cost(k, gpu) for k in kernels))


# ============================================================================ unfused nn ops

# Per-element costs of the PyTorch eager kernels (fp32 math): (flops, sfu ops).
_ELEMENTWISE_COST: dict[str, tuple[float, float]] = {
    "nn.add": (1, 0),
    "nn.mul": (1, 0),
    "nn.relu": (1, 0),
    "nn.scale": (1, 0),
    "nn.softcap": (3, 1),  # divide, tanh, multiply
    "nn.silu": (4, 2),  # x / (1 + exp(-x)): neg, exp, add, rcp, mul
    "nn.gelu": (8, 1),  # erf or tanh
}


_BACKWARD_COST: dict[str, tuple[float, float, float]] = {
    # (flops, sfu ops) per element of the op's largest operand, sfu ops per row of it
    "nn.column_sum": (1, 0, 0),
    "nn.relu_grad": (1, 0, 0),
    "nn.silu_grad": (8, 2, 0),  # sigmoid (4, 2) and dy s (1 + x (1 - s))
    "nn.gelu_grad": (12, 2, 0),
    "nn.softcap_grad": (5, 1, 0),  # tanh(x / cap) and dy (1 - t^2)  # cdf (erf or tanh) and pdf (exp)
    "nn.swiglu_grad": (5, 1, 0),  # per element of z: sigmoid once per pair, both derivatives
    "nn.geglu_grad": (8, 1, 0),
    "nn.rms_norm_rstd": (2, 0, 1),  # x^2 and sum; one rsqrt per row
    "nn.layer_norm_stats": (3, 0, 1),
    "nn.rms_norm_grad": (9, 0, 0),  # row statistic, dx and the dw column partials
    "nn.layer_norm_grad": (14, 0, 0),
    "nn.head_rms_norm_grad": (12, 0, 0),  # + one rsqrt per row and head (below)
    "nn.cross_entropy_grad": (6, 1, 1),  # LSE pass, then exp(l - lse) - onehot, scaled
}


def nn_op_kernel(op: str, inputs: Sequence[Tensor], output: Tensor, name: str | None = None,
                 extra_outputs: Sequence[Tensor] = (), **props: object) -> Kernel:
    """The kernel PyTorch eager runs for one nn op: each input read once, the outputs written
    once (`extra_outputs`: the results after the first of a multi-result op, e.g. a norm's
    dw). `props` are the op's properties (head_dim, heads, rotary_heads, ...)."""
    label = name or output.name
    ops = (f"{op}:{output.name}",)
    writes = (output, *extra_outputs)
    if op in ("nn.linear", "nn.matmul", "nn.gemm"):
        x, w = inputs[0], inputs[1]
        m, n = output.shape
        k = x.shape[0] if op == "nn.gemm" and props.get("transpose_a") else x.shape[1]
        return Kernel(label, "gemm", writes=writes, gemm=GemmSpec(m, n, k, x, w), ops=ops)
    if op in _BACKWARD_COST:
        flops, sfu, per_row = _BACKWARD_COST[op]
        big = max(inputs, key=lambda t: t.numel)
        row_sfu = per_row * big.shape[0]
        if op == "nn.head_rms_norm_grad":
            row_sfu = big.shape[0] * int(props.get("heads", 1))
        return Kernel(label, op, tuple(inputs), writes, epilogue_flops=flops * big.numel,
                      sfu_ops=sfu * big.numel + row_sfu, ops=ops)
    if op == "nn.rope_grad":
        op = "nn.rope"  # the same rotation by the negated angle
    elems = output.numel
    if op in _ELEMENTWISE_COST:
        flops, sfu = _ELEMENTWISE_COST[op]
        return Kernel(label, op, tuple(inputs), (output,), epilogue_flops=flops * elems, sfu_ops=sfu * elems, ops=ops)
    if op in ("nn.rms_norm", "nn.head_rms_norm"):
        rows = output.shape[0]
        groups = rows
        if op == "nn.head_rms_norm":
            groups = rows * int(props.get("heads", output.shape[1] // int(props.get("head_dim", output.shape[1]))))
        # x^2 and sum (2), scale by rstd and weight (2); one rsqrt per row (or head)
        return Kernel(label, op, tuple(inputs), (output,), epilogue_flops=4.0 * elems, sfu_ops=groups, ops=ops)
    if op == "nn.layer_norm":
        rows = output.shape[0]
        return Kernel(label, op, tuple(inputs), (output,), epilogue_flops=8.0 * elems, sfu_ops=rows, ops=ops)
    if op in ("nn.swiglu", "nn.geglu"):
        flops, sfu = (5, 2) if op == "nn.swiglu" else (9, 1)
        return Kernel(label, op, tuple(inputs), (output,), epilogue_flops=flops * elems, sfu_ops=sfu * elems, ops=ops)
    if op == "nn.rope":
        rows, cols = output.shape
        hd = int(props.get("head_dim", cols))
        rotated = rows * hd * int(props.get("rotary_heads", cols // hd))
        # angle (1 mul), 2 mul + 1 add per element; sin and cos once per pair
        return Kernel(label, op, tuple(inputs), (output,), epilogue_flops=4.0 * rotated, sfu_ops=float(rotated), ops=ops)
    if op in ("nn.cross_entropy", "nn.cross_entropy_fwd"):
        logits = inputs[0]
        n = logits.numel
        # max, subtract, exp, sum (4); one log per row
        return Kernel(label, op, tuple(inputs), (output,), epilogue_flops=4.0 * n, sfu_ops=n + logits.shape[0], ops=ops)
    # Unknown op: a memory-bound pass over its operands.
    return Kernel(label, op, tuple(inputs), (output,), epilogue_flops=float(elems), ops=ops)


# ============================================================================ calibration files


def merge_calibration(calibration: str | os.PathLike[str], constants: str | os.PathLike[str] | None = None) -> str:
    """Write the measured fields of a bench/calibrate.py JSON into gpu_constants.json (or
    `constants`) under the calibrated GPU's name; returns that name."""
    target = Path(constants or CONSTANTS_PATH)
    table = json.loads(target.read_text())
    gpu = load_calibration(calibration, base=None)
    data = json.loads(Path(calibration).read_text())
    entry = dict(table.get(gpu.name, {}))
    measured = {k: v for k, v in data.get("constants", data).items() if k in _GPU_FIELDS}
    if "tensor_flops" in measured:
        merged = dict(entry.get("tensor_flops", {}))
        merged.update(measured["tensor_flops"])
        measured["tensor_flops"] = merged
    entry.update(measured)
    table[gpu.name] = entry
    target.write_text(json.dumps(table, indent=2) + "\n")
    return gpu.name


if __name__ == "__main__":  # python -m coda_ir.analysis.io_model --merge calib.json
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--merge", metavar="CALIBRATION_JSON", help="merge bench/calibrate.py output into gpu_constants.json")
    parser.add_argument("--gpu", default="h100")
    args = parser.parse_args()
    if args.merge:
        print(f"updated {merge_calibration(args.merge)} in {CONSTANTS_PATH}")
    gpu = load_gpu(args.gpu)
    print(gpu.describe())
    # the LLaMA block example: python -m coda_ir.analysis.io_fixtures --gpu NAME (the fixtures import this module)
