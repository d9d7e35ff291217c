"""Host-side launch of a coda GEMM kernel: path, tile configuration, grid, strides.

Generated modules call `launch_gemm`. Where the kernel runs decides the path and the tile:

* under the CPU interpreter (`TRITON_INTERPRET=1`): the portable pointer loop with a small
  fixed tile (no tuning), so tests stay fast; the launch option `path="tma"` forces the TMA
  path there too (the interpreter emulates tensor descriptors), which is how CI checks its
  indexing;
* on a GPU: the persistent TMA path (`USE_TMA=1`) where it can run -- compute capability >= 9,
  a Triton with host-side tensor descriptors (`triton.tools.tensor_descriptor`), 16-bit
  operands, each operand with one unit stride and 16-byte aligned base and other stride, and
  for interleaved kernels a BN dividing 2h -- else the portable path. `path="portable"`
  forces the portable path.

* the warp-specialized Gluon kernel of a gemm that carries a `#coda.mainloop` (the compiler's
  `coda-plan-mainloop` decision, passed as `mainloop=GluonMainloop(...)`) wherever the machine can
  run it: a Hopper GPU (compute capability 9.x), a Triton with Gluon (`gluon_supported()`, a
  feature probe), operands TMA can describe, and the launch options' `path` at "auto". It runs at
  the recorded configuration (no tuning). Elsewhere the gemm's tl kernel runs, as above.

The launch options (`LaunchOptions`: `path`, `tma_candidates`) are arguments of `launch_gemm`;
for generated modules, which call `launch_gemm` without them, they are the runtime
configuration's (`RuntimeConfig.launch`, `runtime/config.py`; `set_launch_options` sets them).

On a GPU the configuration is autotuned: each candidate in a short list (`coda_ir.tiling.TMA_CANDIDATES`;
interleaved kernels add paired-B variants) is compiled, run and timed (`triton.testing.do_bench`,
median; candidates that fail to compile are skipped), the best three are timed again in reverse
order (clocks drift on a hot GPU), and the winner is cached in memory and
on disk, in JSON at `RuntimeConfig.cache_dir/autotune.json` (default `~/.cache/coda-ir/autotune.json`),
keyed by (kernel key or source hash, the bucket of M, N, K, dtypes, transposes, interleave, tile
constraints, path, mainloop kind, GPU name, Triton version). M enters as its bucket, the next
power of two (`tuning_bucket`): a program of run-time rows (`#coda.rows`) launches its gemms at
every token count of a step, and a new count reuses the tiles tuned for its bucket instead of
tuning again (tiles tuned at 4096 rows are as good at 3072: the same waves of the same tiles, to
within the last one). Triton compiles a kernel once per specialization of its integer
arguments (M divisible by 16 or not, equal to 1): a static program's kernel compiles (not tunes)
once more for an M of the other kind; the kernels of a `#coda.rows` module are not specialized
on their row extents (`@triton.jit(do_not_specialize=...)`) and compile once. N and K enter as they are, except
those the generated code names run-time row extents (`row_extents="K"`: a weight gradient's
reduction over the tokens), which are bucketed the same way; for such a launch a bucket not
tuned yet takes the tiles of a tuned neighbour (twice or half its rows); where neither is tuned but
gemms of run-time rows already ran at another bucket in this process (a new token count in the
middle of a training run: the neighbour ran the Gluon mainloop, which records no tl tuning, or is
further away), it takes the candidate the IO model predicts fastest (`ranked_by_io_model`) that runs,
instead of tuning mid-step (H200, session 20: a new bucket's first step went from 3.0 s to 0.4 s
with the compile cache), and tunes it later, after a multiple of `DEFERRED_TUNING_LAUNCHES` launches, one tile at
a time (`RuntimeConfig.deferred_tuning=False`: keep the
inferred tile; the inferred tiles cost 2-5% of that bucket's step); the run's first bucket tunes
(a static program's launch always tunes a new bucket). Kernels of one GEMM shape and mainloop
share a tuning: the first one tunes (a line on stderr says so; `RuntimeConfig.autotune_progress=False`
silences it) and records its choice under a shape-only key, which the others take when it runs
for them (`RuntimeConfig.autotune="full"`: tune every kernel on its own; "off" skips tuning, first
candidate; the environment's defaults: `coda_ir.environment`).
Tuning runs the kernel several times per candidate: `extra_args_for(config)` must give fresh
outputs, and the kernel must not update its inputs in place. The extra args returned are from
one final run of the chosen config.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch
import triton

from coda_ir import tiling
from coda_ir.errors import InternalError
from coda_ir.runtime import config as runtime_config
from coda_ir.runtime.config import LaunchOptions
from coda_ir.tiling import GemmConfig, interpreter_config, portable_candidates


# What the latest launch used: {"config", "path", "compiled"} (the CompiledKernel, when the
# installed Triton returns one). For benchmarks and resource reports.
LAST_LAUNCH: dict[str, object] = {}


def interpreting() -> bool:
    return runtime_config.interpreting()


def launch_options() -> LaunchOptions:
    """The launch options `launch_gemm` uses when a call passes none (`RuntimeConfig.launch`)."""
    return runtime_config.current().launch


def set_launch_options(options: LaunchOptions | None = None, **fields) -> LaunchOptions:
    """Set the runtime configuration's launch options (`set_launch_options(path="tma")`, or a
    `LaunchOptions`; no argument restores the defaults). Returns the previous options, to
    restore them with `set_launch_options(previous)`."""
    before = launch_options()
    if options is not None and fields:
        raise TypeError("pass a LaunchOptions or keyword fields, not both")
    runtime_config.configure(launch=options if options is not None else LaunchOptions(**fields))
    return before


# ----------------------------------------------------------------------------- feature probes


@dataclass(frozen=True)
class GluonMainloop:
    """A gemm's `#coda.mainloop<gluon_ws, ...>` as the generated host code passes it: the Gluon
    entry point (None where the module found no Gluon) and the recorded configuration."""

    # compared and hashed by the configuration only: a launch's plan key holds the tl kernel, whose
    # Gluon kernel this is (hashing a JIT function walks its dependencies, which the interpreter's fail)
    kernel: object = dataclasses.field(compare=False)
    bm: int = 128
    bn: int = 256
    bk: int = 64
    stages: int = 3
    handoff: str = "bf16"  # or "f32"
    accumulate_first: int = -1  # epilogue input whose tile is TMA-loaded into the hand-off buffer

    kind = "gluon_ws"


@lru_cache(maxsize=None)
def gluon_supported() -> bool:
    """Whether the installed Triton has what the generated Gluon kernels use (a probe of names,
    Triton 3.6 or later: warp_specialize, Hopper wgmma, TMA, host tensor descriptors)."""
    try:
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.language.nvidia import hopper
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: F401
    except Exception:
        return False
    needed = ("warpgroup_mma", "warpgroup_mma_wait", "fence_async_shared", "mbarrier", "tma")
    return hasattr(gl, "warp_specialize") and hasattr(gl, "NVMMASharedLayout") and all(hasattr(hopper, n) for n in needed)


def _gluon_layout(shape: Sequence[int], dtype: torch.dtype):
    from triton.experimental.gluon import language as gl

    elt = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16, torch.float32: gl.float32}[dtype]
    return gl.NVMMASharedLayout.get_default_for(list(shape), elt)


@lru_cache(maxsize=None)
def tensor_descriptor_class():
    """Triton's host-side TensorDescriptor, or None when the installed Triton lacks it."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except Exception:
        return None
    return TensorDescriptor


@lru_cache(maxsize=None)
def _device_info(index: int) -> tuple[str, int, tuple[int, int]]:
    props = torch.cuda.get_device_properties(index)
    return props.name, props.multi_processor_count, (props.major, props.minor)


def _range_features() -> frozenset[str]:
    from coda_ir.lowering.mainloop import range_features

    return range_features()


# ----------------------------------------------------------------------------- TMA planning


def _operand_layout(t: torch.Tensor, stride_outer: int, stride_k: int) -> bool | None:
    """True if K is the unit-stride dim of the stored operand, False if the other one is,
    None if neither can feed TMA (no unit stride, or a misaligned base or row stride)."""
    size = t.element_size()
    if t.data_ptr() % 16:
        return None
    if stride_k == 1 and (stride_outer * size) % 16 == 0:
        return True
    if stride_outer == 1 and (stride_k * size) % 16 == 0:
        return False
    return None


def _tma_layouts(a, b, M, N, K, strides, interleave) -> tuple[bool, bool] | None:
    """(A_K_CONTIG, B_K_CONTIG) when the TMA path can run these operands, else None."""
    if tensor_descriptor_class() is None:
        return None
    if a.dtype != b.dtype or a.dtype not in (torch.bfloat16, torch.float16):
        return None
    if min(M, N, K) <= 0:
        return None
    if not interpreting():
        if not (a.is_cuda and b.is_cuda):
            return None
        if _device_info(a.device.index or 0)[2][0] < 9:
            return None
    stride_am, stride_ak, stride_bk, stride_bn = strides
    a_k = _operand_layout(a, stride_am, stride_ak)
    b_k = _operand_layout(b, stride_bn, stride_bk)
    if a_k is None or b_k is None:
        return None
    return a_k, b_k


def _tma_fits(cfg: GemmConfig, interleave: int, bn_multiple_of: int, bm_multiple_of: int) -> bool:
    if cfg.bn % bn_multiple_of or cfg.bm % bm_multiple_of:
        return False
    if interleave and ((2 * interleave) % cfg.bn or cfg.bn < 32):
        return False
    features = _range_features()
    if cfg.flatten and "flatten" not in features:
        return False
    if cfg.warp_specialize and "warp_specialize" not in features:
        return False
    return True


def tma_candidates(interleave=0, bn_multiple_of=1, bm_multiple_of=1, paired_ok=False,
                   only: Sequence[int] | None = None) -> list[GemmConfig]:
    """The Hopper candidates that fit the kernel's constraints, best guesses first.

    Interleaved kernels whose B can be paired (K-contiguous, N a multiple of 2h) get the
    paired-B variant of every candidate instead of the two-dot one: it measured faster (2.48 vs
    2.68 ms at 8192x28672x4096, bench/RESULTS.md); one two-dot candidate stays last as a
    fallback should the rank-4 descriptor fail to compile. `only`: indices into
    `tiling.TMA_CANDIDATES` to keep (`LaunchOptions.tma_candidates`, for experiments).
    """
    pool = tiling.TMA_CANDIDATES
    if only is not None:
        pool = tuple(tiling.TMA_CANDIDATES[i] for i in only)
    if interleave and paired_ok and only is None:
        pool = tuple(dataclasses.replace(c, b_pairs=True) for c in pool if not c.flatten) + pool[:1]
    return [c for c in pool if _tma_fits(c, interleave, bn_multiple_of, bm_multiple_of)]


# ----------------------------------------------------------------------------- disk cache


def cache_path() -> Path:
    return runtime_config.current().cache_root() / "autotune.json"


_MEMO: dict[str, GemmConfig] = {}


SHARED_TUNING = "shared-by-gemm-shape"
"""The kernel key (with the launch's `tuning_group`) under which the first tuned kernel of a
GEMM shape and mainloop records its choice for the others of its group (`CODA_AUTOTUNE=full`
tunes every kernel on its own)."""


def _cached_config(key: str) -> GemmConfig | None:
    entry = _MEMO.get(key)
    if entry is not None:
        return entry
    found = _load_disk().get(key)
    if found is None:
        return None
    try:
        return GemmConfig(**found["config"])
    except (TypeError, KeyError):
        return None


def _runs(run_with, cfg: GemmConfig, extra_args_for) -> bool:
    """Whether `cfg` compiles and runs for this kernel (an epilogue may not fit a tile that
    another kernel's did)."""
    try:
        run_with(cfg, list(extra_args_for(cfg)))
        return True
    except Exception:
        return False


def _progress(message: str) -> None:
    """A line on stderr about long work (autotuning); `RuntimeConfig.autotune_progress=False`
    (`CODA_AUTOTUNE_PROGRESS=0`) silences it."""
    if runtime_config.current().autotune_progress:
        print(message, file=sys.stderr, flush=True)


def _load_disk() -> dict:
    try:
        return json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}


def _store_disk(key: str, entry: dict) -> None:
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _load_disk()
        data[key] = entry
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".autotune.", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only home only costs re-tuning


def _kernel_identity(kernel, key: str) -> str:
    if key:
        return key
    src = getattr(kernel, "src", None) or getattr(getattr(kernel, "fn", None), "__name__", "")
    name = getattr(getattr(kernel, "fn", None), "__name__", "kernel")
    return f"{name}:{hashlib.sha256(str(src).encode()).hexdigest()[:16]}"


# The buckets of M the gemms of run-time rows ran at in this process, on either mainloop: a new
# bucket then is a new token count in the middle of a training run (a tuning there stalls a
# step), not the run's first shape (which tunes). Kept for all gemms, not per kernel: a new
# bucket's program can hold kernels its neighbours' programs do not (other plans at other sizes).
_RAN_BUCKETS: set[int] = set()

INFERRED: list[str] = []
"""The tuning keys whose tile the IO model inferred (`_inferred_config`), in order: for benches
and tests."""


def _ran(M: int) -> None:
    _RAN_BUCKETS.add(tuning_bucket(M))


def _ran_in_other_bucket(M: int) -> bool:
    """Whether gemms of run-time rows ran at a bucket of M other than this one in this process."""
    return bool(_RAN_BUCKETS - {tuning_bucket(M)})


DEFERRED_TUNING_LAUNCHES = 32
"""Launches of an inferred tile (at a few per training step) before it is tuned; the n-th tile
inferred while others wait is tuned at n times that many of its launches, so that the tunings
come one or two steps apart instead of all in one step. Counted, not timed: the same run tunes
at the same launches (which tile wins is a timing, as every tuning's is)."""

# plan key -> [tuning key, launches so far, launches when due] of the launches running an inferred
# tile; and the tuning keys whose deferred tuning is due (the next launch tunes instead of inferring)
_DEFERRED: dict[tuple, list] = {}
_DUE: set[str] = set()


def _defer_tuning(plan_key: tuple, tune_key: str) -> None:
    waiting = {e[0] for e in _DEFERRED.values()}
    order = len(waiting) + (tune_key not in waiting)
    _DEFERRED[plan_key] = [tune_key, 0, DEFERRED_TUNING_LAUNCHES * order]


def _deferred_tuning_due(plan_key: tuple) -> bool:
    """Count a launch of an inferred tile; True (and every plan and memo of its tuning key
    forgotten) at the launch its tuning is due (`DEFERRED_TUNING_LAUNCHES`)."""
    entry = _DEFERRED[plan_key]
    entry[1] += 1
    if entry[1] < entry[2] or (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
        return False  # (a tuning synchronizes: never inside a CUDA graph capture; a later launch tunes)
    for key in [k for k, e in _DEFERRED.items() if e[0] == entry[0]]:
        del _DEFERRED[key]
        _PLANS.pop(key, None)
    _MEMO.pop(entry[0], None)
    _DUE.add(entry[0])
    return True


_TORCH_DTYPES = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}


@lru_cache(maxsize=None)
def _io_model_gpu(index: int):
    """The IO model's constants for CUDA device `index`: the shipped table's entry named in the
    device's name (H100 / H200 / A100; else h100's), with the device's own SM count."""
    from coda_ir.analysis import io_model

    name, sms, _ = _device_info(index)
    table = io_model.load_gpu_table()
    known = next((k for k in table if k in name.lower()), "h100")
    return dataclasses.replace(table[known], sms=sms)


def ranked_by_io_model(candidates: Sequence[GemmConfig], M: int, N: int, K: int, dtype: str, gpu) -> list[GemmConfig]:
    """`candidates` from the IO model's fastest predicted time to its slowest (stable: the
    candidate list's order breaks ties, so equal tiles keep their best-guess order)."""
    from coda_ir.analysis import io_model

    gemm = io_model.GemmSpec(M, N, K, io_model.Tensor("a", (M, K), dtype), io_model.Tensor("b", (K, N), dtype, "weight"))
    kernel = io_model.Kernel("gemm", "gemm", writes=(io_model.Tensor("c", (M, N), dtype),), gemm=gemm)
    times = [io_model.kernel_cost(dataclasses.replace(kernel, tile=c), gpu).time_s for c in candidates]
    return [candidates[i] for i in sorted(range(len(candidates)), key=lambda i: (round(times[i], 12), i))]


def _inferred_config(run_with, candidates: list[GemmConfig], extra_args_for, a, b, M, N, K) -> GemmConfig | None:
    """The first candidate, in the IO model's order, that compiles and runs (None: none did)."""
    if not a.is_cuda:
        return None
    dtype = _TORCH_DTYPES.get(a.dtype, "bf16")
    for cfg in ranked_by_io_model(candidates, M, N, K, dtype, _io_model_gpu(a.device.index or 0)):
        if _runs(run_with, cfg, extra_args_for):
            return cfg
    return None


def tuning_bucket(extent: int) -> int:
    """The bucket of a gemm extent that shares one tuning: the next power of two."""
    return tiling.pow2_at_least(extent)


def _tuning_key(kernel, key, a, b, M, N, K, transpose_a, transpose_b, interleave,
                bn_multiple_of, bm_multiple_of, path, layouts, mainloop_kind: str = "tl", row_extents: str = "") -> str:
    gpu = _device_info(a.device.index or 0)[0] if a.is_cuda else "cpu"
    n = f"N<={tuning_bucket(N)}" if "N" in row_extents else f"N={N}"
    k = f"K<={tuning_bucket(K)}" if "K" in row_extents else f"K={K}"
    parts = [
        _kernel_identity(kernel, key), f"M<={tuning_bucket(M)}", n, k,
        f"a={a.dtype}", f"b={b.dtype}", f"tA={int(transpose_a)}", f"tB={int(transpose_b)}",
        f"il={interleave}", f"bn%{bn_multiple_of}", f"bm%{bm_multiple_of}",
        f"path={path}", f"mainloop={mainloop_kind}", f"layout={layouts}", f"gpu={gpu}", f"triton={triton.__version__}",
    ]
    return "|".join(parts)


# ----------------------------------------------------------------------------- launch


_PLANS: dict[tuple, "_Plan"] = {}


def set_launch_plans(enabled: bool) -> bool:
    """Whether `launch_gemm` keeps one launch plan (configuration, grid, constexprs, descriptor
    shapes) per launch key and reuses it (default: on). Off re-derives everything on every call,
    as before plans existed: for A/B timing of host overhead and for debugging. Returns the
    previous setting."""
    return runtime_config.configure(launch_plans=bool(enabled)).launch_plans


@dataclass(frozen=True)
class _Plan:
    """Everything about one launch that does not depend on the tensors' data: grid, scalar and
    constexpr arguments, and how to describe A and B to TMA ((shape, strides, block) per
    operand, or None for a plain pointer). Built once per launch key (`launch_gemm`)."""

    config: GemmConfig
    grid: tuple[int, ...]
    strides: tuple[int, int, int, int]
    kwargs: dict
    a_desc: tuple | None
    b_desc: tuple | None
    path: str
    r_desc: tuple | None = None  # Gluon: (input index, shape, strides, block) of the accumulated input
    layouts: tuple = ()  # Gluon: the NVMMA shared layouts of A, B, the accumulated input's tile


def _plan_launch(kernel, M, N, K, strides, cfg: GemmConfig, interleave, layouts, upcast, device_index: int) -> _Plan:
    stride_am, stride_ak, stride_bk, stride_bn = strides
    kwargs = dict(
        BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, INTERLEAVE=interleave,
        UPCAST=upcast, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    if not interpreting() and "L2_PREFETCH" in getattr(kernel, "arg_names", ()):
        kwargs["L2_PREFETCH"] = True  # the prologue's _coda_prefetch_l2 (inline PTX) is live
    if cfg.tma and layouts is not None:
        a_k, b_k = layouts
        b_rows = cfg.bn // 2 if interleave else cfg.bn
        if a_k:
            a_desc = ([M, K], [stride_am, 1], [cfg.bm, cfg.bk])
        else:
            a_desc = ([K, M], [stride_ak, 1], [cfg.bk, cfg.bm])
        paired = bool(cfg.b_pairs and interleave and b_k and N % (2 * interleave) == 0)
        if paired:
            h = interleave
            b_desc = ([N // (2 * h), h, 2, K], [2 * h * stride_bn, stride_bn, h * stride_bn, 1],
                      [1, cfg.bn // 2, 2, cfg.bk])
        elif b_k:
            b_desc = ([N, K], [stride_bn, 1], [b_rows, cfg.bk])
        else:
            b_desc = ([K, N], [stride_bk, 1], [cfg.bk, b_rows])
        num_tiles = tiling.cdiv(M, cfg.bm) * tiling.cdiv(N, cfg.bn)
        num_sms = 2 if interpreting() else _device_info(device_index)[1] * cfg.ctas_per_sm
        # NUM_SMS (the tile stride, a constexpr) stays the SM count so that small problems
        # reuse the compiled kernel; a grid of fewer programs still covers every tile.
        grid = (max(1, min(num_sms, num_tiles)),)
        kwargs.update(USE_TMA=1, A_K_CONTIG=a_k, B_K_CONTIG=b_k, NUM_SMS=num_sms)
        if cfg.flatten:
            kwargs["FLATTEN"] = True
        if cfg.warp_specialize:
            kwargs["WARP_SPECIALIZE"] = True
        if paired:
            kwargs["B_PAIRED"] = True
        return _Plan(cfg, grid, strides, kwargs, a_desc, b_desc, "tma")
    grid = (tiling.cdiv(M, cfg.bm) * tiling.cdiv(N, cfg.bn),)
    return _Plan(cfg, grid, strides, kwargs, None, None, "portable")


def _run_plan(kernel, plan: _Plan, a, b, extra, M, N, K, compile_only=False):
    """Launch (or with `compile_only`, only compile: Triton's `warmup`) the kernel by `plan`;
    the tensor descriptors are built here, per call, since they hold the tensors."""
    if plan.path == "gluon_ws":
        return _run_gluon(kernel, plan, a, b, extra, M, N, K)
    if plan.a_desc is not None:
        desc = tensor_descriptor_class()
        a_arg, b_arg = desc(a, *plan.a_desc), desc(b, *plan.b_desc)
    else:
        a_arg, b_arg = a, b
    if compile_only:
        return kernel.warmup(a_arg, b_arg, *extra, M, N, K, *plan.strides, grid=plan.grid, **plan.kwargs)
    compiled = kernel[plan.grid](a_arg, b_arg, *extra, M, N, K, *plan.strides, **plan.kwargs)
    LAST_LAUNCH.update(config=plan.config, path=plan.path, compiled=compiled)
    return compiled


def _gluon_operand_ok(r) -> bool:
    return isinstance(r, torch.Tensor) and r.is_contiguous() and r.data_ptr() % 16 == 0


def _gluon_plan(mainloop: GluonMainloop, a, b, extra, M, N, K, transpose_a, transpose_b) -> _Plan | None:
    """The launch of the gemm's Gluon kernel, or None where this machine or these operands cannot
    run it (the tl kernel runs instead)."""
    if mainloop.kernel is None or interpreting() or not gluon_supported():
        return None
    if not (a.is_cuda and b.is_cuda) or _device_info(a.device.index or 0)[2][0] != 9:
        return None  # wgmma is Hopper's (sm_90)
    if transpose_a or a.dtype != b.dtype or a.dtype not in (torch.bfloat16, torch.float16):
        return None
    if _operand_layout(a, a.stride(0), a.stride(1)) is not True:
        return None  # A is loaded as K-contiguous [BM, BK] tiles
    b_k = _operand_layout(b, b.stride(0), b.stride(1)) if transpose_b else _operand_layout(b, b.stride(1), b.stride(0))
    if b_k is not (True if transpose_b else False):
        return None
    bm, bn, bk = mainloop.bm, mainloop.bn, mainloop.bk
    r_desc = None
    layouts = [_gluon_layout([bm, bk], a.dtype)]
    if transpose_b:
        b_desc = ([N, K], [b.stride(0), 1], [bn, bk])
        layouts.append(_gluon_layout([bn, bk], b.dtype))
    else:
        b_desc = ([K, N], [b.stride(0), 1], [bk, bn])
        layouts.append(_gluon_layout([bk, bn], b.dtype))
    if mainloop.accumulate_first >= 0:
        r = extra[mainloop.accumulate_first]
        if (not isinstance(r, torch.Tensor) or r.dtype != torch.bfloat16 or tuple(r.shape) != (M, N)
                or not r.is_contiguous() or r.data_ptr() % 16):
            return None
        r_desc = (mainloop.accumulate_first, [M, N], [N, 1], [bm, bn])
        layouts.append(_gluon_layout([bm, bn], torch.bfloat16))
    handoff = _gluon_layout([bm, bn], torch.float32 if mainloop.handoff == "f32" else torch.bfloat16)
    config = GemmConfig(bm, bn, bk, num_warps=4, num_stages=mainloop.stages, tma=True)
    num_tiles = tiling.cdiv(M, bm) * tiling.cdiv(N, bn)
    grid = (max(1, min(_device_info(a.device.index or 0)[1], num_tiles)),)
    return _Plan(config, grid, (0, 0, 0, 0), {"HANDOFF_LAYOUT": handoff, "num_warps": 4},
                 ([M, K], [a.stride(0), 1], [bm, bk]), b_desc, "gluon_ws", r_desc, tuple(layouts))


def _run_gluon(kernel, plan: _Plan, a, b, extra, M, N, K):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    descs = [TensorDescriptor(a, *plan.a_desc, plan.layouts[0]), TensorDescriptor(b, *plan.b_desc, plan.layouts[1])]
    if plan.r_desc is not None:
        index, *desc = plan.r_desc
        descs.append(TensorDescriptor(extra[index], *desc, plan.layouts[2]))
    compiled = kernel[plan.grid](*descs, *extra, M, N, K, **plan.kwargs)
    LAST_LAUNCH.update(config=plan.config, path=plan.path, compiled=compiled)
    return compiled


def _launch(kernel, a, b, extra, M, N, K, strides, cfg: GemmConfig, interleave, layouts, upcast, compile_only=False):
    """Launch (or with `compile_only`, only compile: Triton's `warmup`) the kernel at `cfg`."""
    plan = _plan_launch(kernel, M, N, K, strides, cfg, interleave, layouts, upcast, a.device.index or 0)
    return _run_plan(kernel, plan, a, b, extra, M, N, K, compile_only)


def _precompile(compile_with, candidates: list[GemmConfig], extra_args_for) -> None:
    """Compile every candidate at once, on threads (Triton's compile spends much of its time in
    ptxas subprocesses and native passes), so the timing loop below finds them compiled. A
    candidate that fails here fails again, with its reason recorded, when it is timed."""
    from concurrent.futures import ThreadPoolExecutor

    # Compiling needs only the epilogue arguments' dtypes (Triton's warmup takes a dtype for a
    # tensor): each candidate's outputs are allocated and dropped one at a time, so that eight
    # logits-sized outputs never coexist.
    prepared = []
    for cfg in candidates:
        try:
            extra = [t.dtype if isinstance(t, torch.Tensor) else t for t in extra_args_for(cfg)]
        except Exception:
            continue
        prepared.append((cfg, extra))

    def one(item):
        try:
            compile_with(*item)
        except Exception:
            pass

    with ThreadPoolExecutor(max_workers=min(8, len(prepared) or 1)) as pool:
        list(pool.map(one, prepared))


def _autotune(run_with, candidates: list[GemmConfig], extra_args_for, compile_with=None) -> tuple[GemmConfig, dict]:
    from triton.testing import do_bench

    if compile_with is not None and len(candidates) > 1:
        _precompile(compile_with, candidates, extra_args_for)
    timings: dict[str, object] = {}
    best, best_ms = None, float("inf")
    for cfg in candidates:
        label = json.dumps(dataclasses.asdict(cfg), sort_keys=True)
        try:
            extra = list(extra_args_for(cfg))
            run_with(cfg, extra)  # compile (may raise OutOfResources and the like)
            # a first reading of every candidate, short: only the best three are decided on, and
            # they are timed again at full length below (a new bucket of token counts tunes in
            # the middle of a training step: 9 candidates at 50 ms were 0.6 s a GEMM, H200)
            ms = do_bench(lambda: run_with(cfg, extra), warmup=5, rep=15, return_mode="median")
        except Exception as exc:  # a candidate that cannot compile or run is skipped
            timings[label] = f"{type(exc).__name__}: {str(exc)[:200]}"
            continue
        timings[label] = ms
        if ms < best_ms:
            best, best_ms = cfg, ms
    if best is None:
        raise RuntimeError(f"no GEMM configuration could run: {timings}")
    # Clocks drift while a hot GPU runs back to back: time the best three again, in reverse
    # order, and keep each one's faster reading.
    def label_of(cfg):
        return json.dumps(dataclasses.asdict(cfg), sort_keys=True)

    timed = [c for c in candidates if isinstance(timings.get(label_of(c)), float)]
    finalists = sorted(timed, key=lambda c: timings[label_of(c)])[:3]
    if len(finalists) > 1:
        best, best_ms = None, float("inf")
        for cfg in reversed(finalists):
            label = label_of(cfg)
            extra = list(extra_args_for(cfg))
            again = do_bench(lambda: run_with(cfg, extra), warmup=10, rep=40, return_mode="median")
            ms = min(timings[label], again)
            timings[label] = [timings[label], again]
            if ms < best_ms:
                best, best_ms = cfg, ms
    return best, timings


MM_WRITES_F32 = hasattr(torch.ops.aten.mm, "dtype_out")
"""Whether this PyTorch has `torch.mm(a, b, out_dtype=torch.float32, out=...)` (added in 2.8; its
kernel is CUDA's cuBLAS with an f32 output). Decided from the operator's overloads, not by running
one: a probe would synchronize (not allowed while a CUDA graph is captured) and could fail for
reasons of its own (out of memory)."""


def vendor_gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, *, transpose_a: bool, transpose_b: bool) -> bool:
    """`out = op(a) @ op(b)` by the vendor library through `torch.mm` (cuBLAS; hipBLAS on a ROCm
    build), for a gemm `coda-plan-mainloop` recorded as `#coda.vendor_gemm`; `launch_gemm` calls it
    on a GPU. Transposed operands are strided views (no copy); the operands are detached (the
    kernel computes a value, autograd is the caller's business, and `out=` refuses operands that
    require grad). Returns False, having done nothing, where the library cannot: operands and
    output not on one device, or an f32 output of 16-bit operands off CUDA or without
    `MM_WRITES_F32`; the caller then runs the tl kernel."""
    if not (b.device == a.device and out.device == a.device):
        return False
    lhs = (a.t() if transpose_a else a).detach()
    rhs = (b.t() if transpose_b else b).detach()
    if out.dtype == a.dtype:
        torch.mm(lhs, rhs, out=out)
        return True
    if out.dtype == torch.float32 and a.is_cuda and MM_WRITES_F32:
        torch.mm(lhs, rhs, out_dtype=torch.float32, out=out)
        return True
    return False


def _row_pitch_misaligned(t: torch.Tensor) -> bool:
    """A 16-bit matrix of unit column stride whose rows do not start 16 bytes apart."""
    return (t.dim() == 2 and t.dtype in (torch.bfloat16, torch.float16) and t.shape[0] > 1 and t.shape[1] > 1
            and t.stride(1) == 1 and (t.stride(0) * t.element_size()) % 16 != 0)


def repitched(t: torch.Tensor) -> torch.Tensor:
    """`t`'s values in fresh storage whose rows are padded to a multiple of 16 bytes: a [rows,
    cols] view of [rows, pitch] storage (the padding is never read: the gemm's extents stop at
    `cols`). The values are copied exactly."""
    per = 16 // t.element_size()
    pitch = -(-t.shape[1] // per) * per
    view = torch.empty((t.shape[0], pitch), dtype=t.dtype, device=t.device)[:, : t.shape[1]]
    view.copy_(t)
    return view


def launch_gemm(
    kernel,
    a: torch.Tensor,
    b: torch.Tensor,
    extra_args_for: Callable[[GemmConfig], Sequence[object]],
    *,
    M: int,
    N: int,
    K: int,
    transpose_a: bool,
    transpose_b: bool,
    interleave: int = 0,
    bn_multiple_of: int = 1,
    bm_multiple_of: int = 1,
    config: GemmConfig | None = None,
    key: str = "",
    options: LaunchOptions | None = None,
    tuning_group: str | None = None,
    mainloop: GluonMainloop | None = None,
    vendor: str | None = None,
    row_extents: str = "",
) -> tuple[GemmConfig | None, Sequence[object]]:
    """Launch `kernel` for `op(a) @ op(b)`; returns the config and the extra args it used.

    `extra_args_for(config)` builds the epilogue's arguments (inputs and freshly allocated
    outputs: partials have one column per tile, so their shape depends on the config).
    `key` names the kernel and its epilogue for the autotune cache (default: a hash of the
    kernel's source). `options`: the path and candidates (default: `launch_options()`).
    `tuning_group`: kernels of one GEMM shape and mainloop in the same group share a tuning
    (the first to run tunes, the others reuse its choice if it runs for them); the compiler
    decides it (`host.launch_gemm`'s `epilogue_half_tiles`). None: this kernel tunes alone.
    `mainloop`: the gemm's Gluon kernel and its recorded configuration (`coda-plan-mainloop`),
    launched instead of `kernel` wherever the machine can run it (`_gluon_plan`).
    `vendor`: the gemm's `#coda.vendor_gemm` library (a plain gemm: its one argument is its
    output): on a GPU, outside the interpreter and with the default path, `vendor_gemm` runs it
    (the returned config is then None: no tile of the generated kernel ran).
    `row_extents`: which of "M", "N", "K" are run-time row counts (`#coda.rows`); N and K are
    then tuned per bucket like M (`tuning_bucket`), and a bucket not tuned yet takes the tiles of
    a tuned neighbouring bucket (twice or half the rows) where it has one, else, where gemms of
    run-time rows already ran at another bucket, the IO model's tile (module docstring), instead of tuning.
    """
    if options is None:
        options = launch_options()
    if (M * N * K >= options.repitch_min_macs
            and (options.path == "tma" or (options.path == "auto" and a.is_cuda and not interpreting()))):
        # rows of an odd width keep TMA and cuBLAS's aligned kernels off this gemm: one copy pays for
        # itself many times over at this size (LaunchOptions.repitch_min_macs)
        a = repitched(a) if _row_pitch_misaligned(a) else a
        b = repitched(b) if _row_pitch_misaligned(b) else b
    if vendor is not None and config is None and options.path == "auto" and a.is_cuda and not interpreting():
        extra = list(extra_args_for(tiling.TMA_CANDIDATES[0]))  # a plain gemm's output does not depend on the tile
        if len(extra) != 1 or not isinstance(extra[0], torch.Tensor) or tuple(extra[0].shape) != (M, N):
            raise InternalError(f"launch_gemm: a vendor gemm's arguments are its one [{M}, {N}] output "
                                "(this is a bug in coda-ir, not a problem with the input; please report it)")
        if vendor_gemm(a, b, extra[0], transpose_a=transpose_a, transpose_b=transpose_b):
            LAST_LAUNCH.update(config=None, path=f"vendor:{vendor}", compiled=None)
            return None, extra
        # the library declined (an f32 output on a PyTorch without out_dtype): the tl kernel writes
        # the output already allocated
        built = extra
        extra_args_for = lambda _cfg: built  # noqa: E731
    plan_key = None
    config_now = runtime_config.current()
    if config_now.launch_plans:
        # Everything the launch's path, layouts, tuning key, configuration and grid depend on,
        # the launch options included: a hit skips re-deriving them (the
        # host cost of a launch is what leaves the GPU idle between short kernels, issue 11).
        plan_key = (kernel, key, M, N, K, transpose_a, transpose_b, interleave, bn_multiple_of, bm_multiple_of,
                    config, a.dtype, b.dtype, a.stride(), b.stride(), a.data_ptr() % 16 == 0, b.data_ptr() % 16 == 0,
                    a.device, b.device, interpreting(), options, mainloop)
        plan = _PLANS.get(plan_key)
        if plan is not None and _DEFERRED and plan_key in _DEFERRED and _deferred_tuning_due(plan_key):
            plan = None  # an inferred tile's tuning is due: planned afresh below, which tunes
        if plan is not None:
            extra = list(extra_args_for(plan.config))
            if plan.path != "gluon_ws" or plan.r_desc is None or _gluon_operand_ok(extra[plan.r_desc[0]]):
                _run_plan(mainloop.kernel if plan.path == "gluon_ws" else kernel, plan, a, b, extra, M, N, K)
                return plan.config, extra
            plan_key = None  # this call's accumulated input cannot be described to TMA: plan afresh
    if mainloop is not None and config is None and options.path == "auto":
        # the arguments' shapes depend on the tile only (partials per tile): made once, for either kernel
        gconfig = GemmConfig(mainloop.bm, mainloop.bn, mainloop.bk, num_warps=4, num_stages=mainloop.stages, tma=True)
        extra = list(extra_args_for(gconfig))
        gplan = _gluon_plan(mainloop, a, b, extra, M, N, K, transpose_a, transpose_b)
        if gplan is not None:
            if row_extents:
                _ran(M)
            if plan_key is not None:
                _PLANS[plan_key] = gplan
            _run_plan(mainloop.kernel, gplan, a, b, extra, M, N, K)
            return gplan.config, extra
    stride_am, stride_ak = (a.stride(1), a.stride(0)) if transpose_a else (a.stride(0), a.stride(1))
    stride_bk, stride_bn = (b.stride(1), b.stride(0)) if transpose_b else (b.stride(0), b.stride(1))
    strides = (stride_am, stride_ak, stride_bk, stride_bn)
    upcast = interpreting() and a.dtype == torch.bfloat16
    override = options.path
    layouts = None
    if override != "portable" and (override == "tma" or not interpreting()):
        layouts = _tma_layouts(a, b, M, N, K, strides, interleave)

    def run_with(cfg: GemmConfig, extra, compile_only=False):
        use = layouts if (cfg.tma and _tma_fits(cfg, interleave, bn_multiple_of, bm_multiple_of)) else None
        return _launch(kernel, a, b, extra, M, N, K, strides, cfg, interleave, use, upcast, compile_only)

    def compile_with(cfg: GemmConfig, extra):
        return run_with(cfg, extra, compile_only=True)

    inferred = False  # the IO model's tile, to be tuned later (`_DEFERRED`)
    if config is None:
        if interpreting():
            config = interpreter_config(bn_multiple_of, bm_multiple_of)
            if layouts is not None:
                tma_cfg = dataclasses.replace(config, tma=True)
                if _tma_fits(tma_cfg, interleave, bn_multiple_of, bm_multiple_of):
                    config = tma_cfg
        else:
            paired_ok = bool(layouts and layouts[1] and interleave and N % (2 * interleave) == 0)
            candidates = (tma_candidates(interleave, bn_multiple_of, bm_multiple_of, paired_ok, options.tma_candidates)
                          if layouts else [])
            path = "tma" if candidates else "portable"
            if not candidates:
                candidates = portable_candidates(a.dtype == torch.float32, bn_multiple_of, bm_multiple_of)
            # the tl kernel's tuning (also where it stands in for a gemm's Gluon mainloop)
            tune_key = _tuning_key(kernel, key, a, b, M, N, K, transpose_a, transpose_b,
                                   interleave, bn_multiple_of, bm_multiple_of, path, layouts, "tl", row_extents)
            config = _MEMO.get(tune_key)
            if config is None:
                config = _cached_config(tune_key)
                mode = config_now.autotune
                shape_key = None
                if tuning_group is not None:
                    shape_key = _tuning_key(kernel, f"{SHARED_TUNING}:{tuning_group}", a, b, M, N, K,
                                            transpose_a, transpose_b, interleave, bn_multiple_of, bm_multiple_of,
                                            path, layouts, "tl", row_extents)
                if config is None and shape_key is not None and mode == "shared":
                    shared = _cached_config(shape_key)
                    if shared is not None and shared in candidates and _runs(run_with, shared, extra_args_for):
                        config = shared
                if config is None and row_extents and mode == "shared":
                    # a new bucket of M next to a tuned one (a new token count of a program of
                    # run-time rows): its tiles, not a tuning in the middle of a training step
                    bucket = tuning_bucket(M)
                    for near in (2 * bucket, bucket // 2):
                        if near < 1:
                            continue
                        near_key = _tuning_key(kernel, key, a, b, near, N, K, transpose_a, transpose_b, interleave,
                                               bn_multiple_of, bm_multiple_of, path, layouts, "tl", row_extents)
                        found = _MEMO.get(near_key) or _cached_config(near_key)
                        if found is not None and found in candidates and _runs(run_with, found, extra_args_for):
                            config = found
                            break
                if (config is None and row_extents and mode == "shared" and tune_key not in _DUE
                        and _ran_in_other_bucket(M)):
                    # a new bucket of a gemm that already ran in this process at another bucket,
                    # with no tuned neighbour (the neighbour ran the Gluon mainloop, or is further
                    # away): the IO model's tile, not a tuning in the middle of a training step
                    config = _inferred_config(run_with, candidates, extra_args_for, a, b, M, N, K)
                    if config is not None:
                        INFERRED.append(tune_key)
                        inferred = config_now.deferred_tuning
                if config is None:
                    if mode != "off" and len(candidates) > 1:
                        started = time.perf_counter()
                        _progress(f"coda-ir: autotuning a GEMM {M}x{N}x{K} ({len(candidates)} tile configurations) ...")
                        config, timings = _autotune(run_with, candidates, extra_args_for, compile_with)
                        _progress(f"coda-ir: autotuned it in {time.perf_counter() - started:.1f} s")
                        entry = {"config": dataclasses.asdict(config), "timings_ms": timings}
                        _store_disk(tune_key, entry)
                        _DUE.discard(tune_key)
                        if shape_key is not None and _cached_config(shape_key) is None:
                            _store_disk(shape_key, entry)
                    else:
                        config = candidates[0]
                _MEMO[tune_key] = config
    if row_extents:
        _ran(M)
    extra = list(extra_args_for(config))
    use = layouts if (config.tma and _tma_fits(config, interleave, bn_multiple_of, bm_multiple_of)) else None
    plan = _plan_launch(kernel, M, N, K, strides, config, interleave, use, upcast, a.device.index or 0)
    if plan_key is not None:
        _PLANS[plan_key] = plan
        if config is not None and inferred:
            _defer_tuning(plan_key, tune_key)
    _run_plan(kernel, plan, a, b, extra, M, N, K)
    return config, extra
