"""Host-side launch of a coda GEMM kernel: tile configuration, grid, strides.

Generated modules call `launch_gemm`. The tile configuration depends on where the kernel
runs: under the CPU interpreter a small fixed tile keeps tests fast; on a GPU the
configuration is tuned per (kernel, shape, dtype, GPU) and cached on disk.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import triton


@dataclass(frozen=True)
class GemmConfig:
    bm: int
    bn: int
    bk: int
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 3


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _round_up_pow2_multiple(value: int, multiple: int) -> int:
    """The smallest power of two >= value that is a multiple of `multiple`."""
    v = max(value, 1)
    p = 1
    while p < v or p % multiple:
        p *= 2
        if p > 1 << 16:
            raise ValueError(f"no power-of-two tile width is a multiple of {multiple}")
    return p


def interpreter_config(bn_multiple_of: int = 1, bm_multiple_of: int = 1) -> GemmConfig:
    bn = _round_up_pow2_multiple(32, bn_multiple_of)
    bm = _round_up_pow2_multiple(32, bm_multiple_of)
    return GemmConfig(bm=bm, bn=bn, bk=32, group_m=4, num_warps=4, num_stages=1)


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
) -> tuple[GemmConfig, Sequence[object]]:
    """Launch `kernel` for `op(a) @ op(b)`; returns the config and the extra args it used.

    `extra_args_for(config)` builds the epilogue's arguments (inputs and freshly allocated
    outputs: partials have one column per tile, so their shape depends on the config).
    """
    if config is None:
        config = interpreter_config(bn_multiple_of, bm_multiple_of)
    stride_am, stride_ak = (a.stride(1), a.stride(0)) if transpose_a else (a.stride(0), a.stride(1))
    stride_bk, stride_bn = (b.stride(1), b.stride(0)) if transpose_b else (b.stride(0), b.stride(1))
    extra = list(extra_args_for(config))
    grid = (triton.cdiv(M, config.bm) * triton.cdiv(N, config.bn),)
    upcast = interpreting() and a.dtype == torch.bfloat16
    kernel[grid](
        a,
        b,
        *extra,
        M,
        N,
        K,
        stride_am,
        stride_ak,
        stride_bk,
        stride_bn,
        BM=config.bm,
        BN=config.bn,
        BK=config.bk,
        GROUP_M=config.group_m,
        INTERLEAVE=interleave,
        UPCAST=upcast,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return config, extra
