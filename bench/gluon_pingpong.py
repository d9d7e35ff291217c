"""Issue 11, "hide the epilogue": a persistent warp-specialized Hopper GEMM in Gluon whose
epilogue runs in its own warpgroup while the MMA warpgroups compute the next tile, against
cuBLAS (and the coda Triton mainloop) in one process.

    python bench/gluon_pingpong.py [--epilogues plain,residual,normbwd] [--rounds 3]
                                   [--only SUBSTR,...] [--no-coda] [--out DIR]

Results and every variant tried: bench/RESULTS.md, "2026-11-25 (session 10): Gluon ping-pong
mainloop".

C = A @ B^T (B stored [N, K], the coda mainloop's `transpose_b` weight layout) or C = A @ B
(B stored [K, N], the dgrad's layout), bf16 operands, fp32 accumulation, bf16 outputs.

Schedule (one program per SM, tiles in grouped order, GROUP_M = 8):

* producer (1 warp): TMA loads of the A [BM, BK] and B tiles into a STAGES-deep shared-memory
  ring (mbarriers `ready` / `empty`), running ahead across tile boundaries;
* two MMA warpgroups (cooperative): each owns BM / 2 rows of the same BM x BN tile (both read
  the one B tile of a stage: B is loaded once per stage) and runs async wgmma, one group in
  flight (`warpgroup_mma_wait(1)`, the previous stage released); after the K loop each writes
  its accumulator rows into a [BM, BN] hand-off buffer in shared memory (bf16 or fp32) and
  arrives on `acc_ready`, then starts the next tile;
* epilogue partition (2 warps; 4 in `gemm_epilogue_ws4`): waits on `acc_ready`, runs the
  epilogue on the hand-off buffer in row sub-tiles (plain: one TMA store of the buffer;
  residual: + residual, bf16 store, row sums of squares per column tile; normbwd: the RMSNorm
  backward dx = rstd * (dy * w - n * s / d) + dres and the dw column partials), then arrives
  on `acc_empty`.

The epilogue of tile i thus runs while the tensor cores work on tile i + 1 (the overlap that
one Triton program per SM cannot express: bench/RESULTS.md, sessions 8 and 10). Not a
ping-pong in CUTLASS's sense (consumer warpgroups alternating whole tiles): a ping-pong
consumer owns a whole tile, i.e. 128 x 128 or 64 x 256 per warpgroup, whose mainloop is the
one that ran at 0.83x cuBLAS in session 8 (more shared-memory and L2 traffic per FLOP than the
cooperative 128 x 256); the epilogue partition gives the overlap at the 128 x 256 tile.

`gemm_epilogue_ws4` is the producer-less form: MMA warpgroup 0 also issues the TMA loads and
the epilogue partition has 4 warps (12 warps; 13 do not compile in Triton 3.6: ptxas then
allots 128 registers a thread, the 64 x 256 wgmma needs ~154).

GPU only (Hopper, Triton 3.6's Gluon: `gl.warp_specialize([(fn, args), ...], warps, regs)`,
`tma.async_copy_global_to_shared`; later names are picked when present). Not in the CPU smoke
list (`tests/test_bench_smoke.py`): Gluon kernels do not run in the interpreter. Each variant
is checked against float64 before it is timed; a failed check or a compile error is recorded
and the variant is not timed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402

# Triton 3.6 names; later releases renamed them (async_load / async_store / barrier).
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
_tma_store = getattr(tma, "async_copy_shared_to_global", None) or tma.async_store
_partition_barrier = getattr(gl, "thread_barrier", None) or gl.barrier

# Values passed through warp_specialize lose constexpr-ness (session 8), so the partitions read
# tile sizes back from the descriptors' and buffers' types and the group size from here.
GROUP_M = gl.constexpr(8)
# The epilogue partition's warps: 4 + 4 + 1 + 4 = 13 warps make ptxas compile the kernel for 128
# registers a thread (65536 / 512), less than a 64 x 256 wgmma accumulator needs (~154; Triton
# 3.6: "Insufficient registers (128)"); 4 + 4 + 1 + 2 = 11 warps leave 168.
EPI_WARPS = gl.constexpr(2)


@gluon.jit
def _tile_coords(tile, num_pid_m, num_pid_n):
    group = GROUP_M * num_pid_n
    first_m = (tile // group) * GROUP_M
    rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % group) % rows
    pid_n = (tile % group) // rows
    return pid_m, pid_n


@gluon.jit
def _producer(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3, e4,
              e5, e6, M, N, K, inv_d):
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    STAGES: gl.constexpr = a_bufs.type.shape[0]
    B_T: gl.constexpr = b_desc.block_type.shape[1] == BK
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(K, BK)
    it = 0
    for tile in range(pid, num_pid_m * num_pid_n, nprog):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n)
        for kk in range(k_tiles):
            s = it % STAGES
            # a fresh barrier counts as having completed the phase before 0
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            _tma_load(a_desc, [pid_m * BM, kk * BK], ready.index(s), a_bufs.index(s))
            if B_T:
                _tma_load(b_desc, [pid_n * BN, kk * BK], ready.index(s), b_bufs.index(s))
            else:
                _tma_load(b_desc, [kk * BK, pid_n * BN], ready.index(s), b_bufs.index(s))
            it += 1


@gluon.jit
def _issue_load(q, a_bufs, b_bufs, ready, empty, a_desc, b_desc, pid, nprog, num_pid_m, num_pid_n, k_tiles,
                BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, B_T: gl.constexpr):
    # the q-th load of this program (tile pid + (q // k_tiles) * nprog, K step q % k_tiles)
    s = q % STAGES
    pid_m, pid_n = _tile_coords(pid + (q // k_tiles) * nprog, num_pid_m, num_pid_n)
    kk = q % k_tiles
    mbarrier.wait(empty.index(s), ((q // STAGES) & 1) ^ 1)
    mbarrier.expect(ready.index(s), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
    _tma_load(a_desc, [pid_m * BM, kk * BK], ready.index(s), a_bufs.index(s))
    if B_T:
        _tma_load(b_desc, [pid_n * BN, kk * BK], ready.index(s), b_bufs.index(s))
    else:
        _tma_load(b_desc, [kk * BK, pid_n * BN], ready.index(s), b_bufs.index(s))


@gluon.jit
def _mma(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, M, N, K,
         CID: gl.constexpr, LOADER: gl.constexpr = False):
    # LOADER: this warpgroup also issues the TMA loads (no producer warp: 12 warps in all, so the
    # epilogue partition can have 4 warps under ptxas's 168-register cap). It issues load
    # it + STAGES - 1 right after releasing stage it - 1, so STAGES - 1 loads are in flight.
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    HM: gl.constexpr = BM // 2
    STAGES: gl.constexpr = a_bufs.type.shape[0]
    B_T: gl.constexpr = b_desc.block_type.shape[1] == BK
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                      instr_shape=[16, BN if BN <= 256 else 256, 16])
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(K, BK)
    it = 0
    j = 0
    if LOADER:
        total = gl.cdiv(num_pid_m * num_pid_n - pid, nprog) * k_tiles
        for q in range(STAGES - 1):
            if q < total:
                _issue_load(q, a_bufs, b_bufs, ready, empty, a_desc, b_desc, pid, nprog, num_pid_m, num_pid_n,
                            k_tiles, BM, BN, BK, STAGES, B_T)
    for tile in range(pid, num_pid_m * num_pid_n, nprog):
        acc = gl.zeros([HM, BN], gl.float32, layout=layout)
        for kk in range(k_tiles):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            a = a_bufs.index(s).slice(CID * HM, HM)
            if B_T:
                acc = warpgroup_mma(a, b_bufs.index(s).permute((1, 0)), acc, is_async=True)
            else:
                acc = warpgroup_mma(a, b_bufs.index(s), acc, is_async=True)
            # one group in flight: the previous stage's wgmma is done, give its buffers back
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            if kk > 0:
                mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
            if LOADER:
                if it + STAGES - 1 < total:
                    _issue_load(it + STAGES - 1, a_bufs, b_bufs, ready, empty, a_desc, b_desc, pid, nprog, num_pid_m,
                                num_pid_n, k_tiles, BM, BN, BK, STAGES, B_T)
            it += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
        # hand the accumulator to the epilogue warpgroup once it has finished the previous tile
        mbarrier.wait(acc_empty, (j & 1) ^ 1)
        c_smem.slice(CID * HM, HM).store(acc.to(c_smem.dtype))
        fence_async_shared()
        _partition_barrier()
        mbarrier.arrive(acc_ready)
        j += 1


@gluon.jit
def _mma0(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3, e4, e5,
          e6, M, N, K, inv_d):
    _mma(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, M, N, K, 0)


@gluon.jit
def _mma1(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3, e4, e5,
          e6, M, N, K, inv_d):
    _mma(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, M, N, K, 1)


@gluon.jit
def _epi_plain(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3, e4,
               e5, e6, M, N, K, inv_d):
    # the hand-off buffer is the TMA store's source (bf16)
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    j = 0
    for tile in range(pid, num_pid_m * num_pid_n, nprog):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n)
        mbarrier.wait(acc_ready, j & 1)
        _tma_store(c_desc, [pid_m * BM, pid_n * BN], c_smem)
        tma.store_wait(0)
        mbarrier.arrive(acc_empty)
        j += 1


@gluon.jit
def _res_load(r_ptr, pid_m, pid_n, r0, M, N, BM: gl.constexpr, BN: gl.constexpr, SUB: gl.constexpr, READ: gl.constexpr,
              blk: gl.constexpr):
    offs_m = pid_m * BM + r0 + gl.arange(0, SUB, layout=gl.SliceLayout(1, blk))
    offs_n = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, blk))
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    idx = offs_m.to(gl.int64)[:, None] * N + offs_n[None, :]
    # READ = False masks the load off (no memory traffic): the diagnostic without the residual read
    return gl.load(r_ptr + idx, mask=mask & READ, other=0.0)


@gluon.jit
def _epi_residual(c_smem, acc_ready, acc_empty, a_desc, c_desc, out_ptr, r_ptr, p_ptr, M, N, SUB: gl.constexpr,
                  PF: gl.constexpr, READ: gl.constexpr, W: gl.constexpr = EPI_WARPS, TMA: gl.constexpr = False):
    # out = acc + res (bf16); p[row, pid_n] = sum over the tile's columns of out^2 (fp32).
    # PF: the residual of the first sub-tile is loaded before the accumulator arrives and each
    # next sub-tile's before the current one is computed (two loads in flight).
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    NSUB: gl.constexpr = BM // SUB
    blk: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [W, 1], [1, 0])
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    j = 0
    for tile in range(pid, num_pid_m * num_pid_n, nprog):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n)
        offs_n = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, blk))
        mask_n = offs_n < N
        if PF:
            r_next = _res_load(r_ptr, pid_m, pid_n, 0, M, N, BM, BN, SUB, READ, blk)
        mbarrier.wait(acc_ready, j & 1)
        for i in gl.static_range(NSUB):
            if PF:
                r = r_next
                if i + 1 < NSUB:
                    r_next = _res_load(r_ptr, pid_m, pid_n, (i + 1) * SUB, M, N, BM, BN, SUB, READ, blk)
            else:
                r = _res_load(r_ptr, pid_m, pid_n, i * SUB, M, N, BM, BN, SUB, READ, blk)
            offs_m = pid_m * BM + i * SUB + gl.arange(0, SUB, layout=gl.SliceLayout(1, blk))
            mask_m = offs_m < M
            mask = mask_m[:, None] & mask_n[None, :]
            idx = offs_m.to(gl.int64)[:, None] * N + offs_n[None, :]
            c = c_smem.slice(i * SUB, SUB).load(blk).to(gl.float32)
            y = (c + r.to(gl.float32)).to(gl.bfloat16)
            if TMA:
                # written back over the hand-off rows it came from (each thread its own elements)
                c_smem.slice(i * SUB, SUB).store(y)
            else:
                gl.store(out_ptr + idx, y, mask=mask)
            yf = gl.where(mask, y.to(gl.float32), 0.0)
            gl.store(p_ptr + offs_m.to(gl.int64) * num_pid_n + pid_n, gl.sum(yf * yf, axis=1), mask=mask_m)
        if TMA:
            # one bulk store of the tile from the hand-off buffer (as the plain epilogue)
            fence_async_shared()
            _partition_barrier()
            _tma_store(c_desc, [pid_m * BM, pid_n * BN], c_smem)
            tma.store_wait(0)
        _partition_barrier()
        mbarrier.arrive(acc_empty)
        j += 1


@gluon.jit
def _epi_normbwd(c_smem, acc_ready, acc_empty, a_desc, c_desc, dx_ptr, x_ptr, w_ptr, rstd_ptr, s_ptr, dres_ptr, dwp_ptr,
                 M, N, inv_d, SUB: gl.constexpr, PF: gl.constexpr, W: gl.constexpr = EPI_WARPS,
                 TMA: gl.constexpr = False):
    # RMSNorm backward after the dgrad (the derived block's `nn.matmul+nn.rms_norm_grad.apply+nn.add`):
    # n = x * rstd; dx = rstd * (dy * w - n * s * inv_d) + dres (bf16); dwp[pid_m, col] = sum_rows dy * n.
    # PF: x and dres of the first sub-tile are loaded before the accumulator arrives.
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    NSUB: gl.constexpr = BM // SUB
    blk: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [W, 1], [1, 0])
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    j = 0
    for tile in range(pid, num_pid_m * num_pid_n, nprog):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n)
        offs_n = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, blk))
        mask_n = offs_n < N
        w = gl.load(w_ptr + offs_n, mask=mask_n, other=0.0).to(gl.float32)
        dw = gl.zeros([BN], gl.float32, layout=gl.SliceLayout(0, blk))
        if PF:
            x_next = _res_load(x_ptr, pid_m, pid_n, 0, M, N, BM, BN, SUB, True, blk)
            d_next = _res_load(dres_ptr, pid_m, pid_n, 0, M, N, BM, BN, SUB, True, blk)
        mbarrier.wait(acc_ready, j & 1)
        for i in gl.static_range(NSUB):
            if PF:
                xb = x_next
                db = d_next
                if i + 1 < NSUB:
                    x_next = _res_load(x_ptr, pid_m, pid_n, (i + 1) * SUB, M, N, BM, BN, SUB, True, blk)
                    d_next = _res_load(dres_ptr, pid_m, pid_n, (i + 1) * SUB, M, N, BM, BN, SUB, True, blk)
            else:
                xb = _res_load(x_ptr, pid_m, pid_n, i * SUB, M, N, BM, BN, SUB, True, blk)
                db = _res_load(dres_ptr, pid_m, pid_n, i * SUB, M, N, BM, BN, SUB, True, blk)
            offs_m = pid_m * BM + i * SUB + gl.arange(0, SUB, layout=gl.SliceLayout(1, blk))
            mask_m = offs_m < M
            mask = mask_m[:, None] & mask_n[None, :]
            idx = offs_m.to(gl.int64)[:, None] * N + offs_n[None, :]
            rstd = gl.load(rstd_ptr + offs_m, mask=mask_m, other=0.0)
            sc = gl.load(s_ptr + offs_m, mask=mask_m, other=0.0) * inv_d
            dy = c_smem.slice(i * SUB, SUB).load(blk).to(gl.float32)
            n = xb.to(gl.float32) * rstd[:, None]
            dx = rstd[:, None] * (dy * w[None, :] - n * sc[:, None]) + db.to(gl.float32)
            if TMA:
                c_smem.slice(i * SUB, SUB).store(dx.to(gl.bfloat16))
            else:
                gl.store(dx_ptr + idx, dx.to(gl.bfloat16), mask=mask)
            dw += gl.sum(gl.where(mask, dy * n, 0.0), axis=0)
        if TMA:
            fence_async_shared()
            _partition_barrier()
            _tma_store(c_desc, [pid_m * BM, pid_n * BN], c_smem)
            tma.store_wait(0)
        _partition_barrier()
        mbarrier.arrive(acc_empty)
        gl.store(dwp_ptr + pid_m.to(gl.int64) * N + offs_n, dw, mask=mask_n)
        j += 1


@gluon.jit
def _mma0_loader(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3, e4,
                 e5, e6, M, N, K, inv_d):
    _mma(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, M, N, K, 0, True)


@gluon.jit
def _epi_res_s16_w4(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3,
                    e4, e5, e6, M, N, K, inv_d):
    _epi_residual(c_smem, acc_ready, acc_empty, a_desc, c_desc, e0, e1, e2, M, N, 16, False, True, 4)


@gluon.jit
def _epi_res_s32_w4(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3,
                    e4, e5, e6, M, N, K, inv_d):
    _epi_residual(c_smem, acc_ready, acc_empty, a_desc, c_desc, e0, e1, e2, M, N, 32, False, True, 4)


@gluon.jit
def _epi_norm_s16_w4(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3,
                     e4, e5, e6, M, N, K, inv_d):
    _epi_normbwd(c_smem, acc_ready, acc_empty, a_desc, c_desc, e0, e1, e2, e3, e4, e5, e6, M, N, inv_d, 16, False, 4)


@gluon.jit
def _epi_norm_s16_pf_w4(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2,
                        e3, e4, e5, e6, M, N, K, inv_d):
    _epi_normbwd(c_smem, acc_ready, acc_empty, a_desc, c_desc, e0, e1, e2, e3, e4, e5, e6, M, N, inv_d, 16, True, 4)


@gluon.jit
def _epi_res_s16_tma(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2,
                     e3, e4, e5, e6, M, N, K, inv_d):
    _epi_residual(c_smem, acc_ready, acc_empty, a_desc, c_desc, e0, e1, e2, M, N, 16, False, True, EPI_WARPS, True)


@gluon.jit
def _epi_res_s8_tma(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2,
                    e3, e4, e5, e6, M, N, K, inv_d):
    _epi_residual(c_smem, acc_ready, acc_empty, a_desc, c_desc, e0, e1, e2, M, N, 8, False, True, EPI_WARPS, True)


@gluon.jit
def _epi_norm_s8_pf_tma(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2,
                        e3, e4, e5, e6, M, N, K, inv_d):
    _epi_normbwd(c_smem, acc_ready, acc_empty, a_desc, c_desc, e0, e1, e2, e3, e4, e5, e6, M, N, inv_d, 8, True,
                 EPI_WARPS, True)


# Partition entry points of the epilogue variants (warp_specialize passes values, so each
# (SUB, PF, READ) choice is its own function with literal constexprs).
@gluon.jit
def _epi_res_s16(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3, e4,
                 e5, e6, M, N, K, inv_d):
    _epi_residual(c_smem, acc_ready, acc_empty, a_desc, c_desc, e0, e1, e2, M, N, 16, False, True)


@gluon.jit
def _epi_res_s8(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3, e4,
                e5, e6, M, N, K, inv_d):
    _epi_residual(c_smem, acc_ready, acc_empty, a_desc, c_desc, e0, e1, e2, M, N, 8, False, True)


@gluon.jit
def _epi_res_s32(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3, e4,
                 e5, e6, M, N, K, inv_d):
    _epi_residual(c_smem, acc_ready, acc_empty, a_desc, c_desc, e0, e1, e2, M, N, 32, False, True)


@gluon.jit
def _epi_res_s16_pf(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3,
                    e4, e5, e6, M, N, K, inv_d):
    _epi_residual(c_smem, acc_ready, acc_empty, a_desc, c_desc, e0, e1, e2, M, N, 16, True, True)


@gluon.jit
def _epi_res_s8_pf(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3,
                   e4, e5, e6, M, N, K, inv_d):
    _epi_residual(c_smem, acc_ready, acc_empty, a_desc, c_desc, e0, e1, e2, M, N, 8, True, True)


@gluon.jit
def _epi_res_noread(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3,
                    e4, e5, e6, M, N, K, inv_d):
    _epi_residual(c_smem, acc_ready, acc_empty, a_desc, c_desc, e0, e1, e2, M, N, 16, False, False)


@gluon.jit
def _epi_norm_s16(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3,
                  e4, e5, e6, M, N, K, inv_d):
    _epi_normbwd(c_smem, acc_ready, acc_empty, a_desc, c_desc, e0, e1, e2, e3, e4, e5, e6, M, N, inv_d, 16, False)


@gluon.jit
def _epi_norm_s8(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3, e4,
                 e5, e6, M, N, K, inv_d):
    _epi_normbwd(c_smem, acc_ready, acc_empty, a_desc, c_desc, e0, e1, e2, e3, e4, e5, e6, M, N, inv_d, 8, False)


@gluon.jit
def _epi_norm_s4(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3, e4,
                 e5, e6, M, N, K, inv_d):
    _epi_normbwd(c_smem, acc_ready, acc_empty, a_desc, c_desc, e0, e1, e2, e3, e4, e5, e6, M, N, inv_d, 4, False)


@gluon.jit
def _epi_norm_s8_pf(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3,
                    e4, e5, e6, M, N, K, inv_d):
    _epi_normbwd(c_smem, acc_ready, acc_empty, a_desc, c_desc, e0, e1, e2, e3, e4, e5, e6, M, N, inv_d, 8, True)


@gluon.jit
def gemm_epilogue_ws(a_desc, b_desc, c_desc, e0, e1, e2, e3, e4, e5, e6, M, N, K, inv_d, STAGES: gl.constexpr,
                     C_LAYOUT: gl.constexpr, C_FP32: gl.constexpr, EPI: gl.constexpr, MMA_REGS: gl.constexpr,
                     PRODUCER_REGS: gl.constexpr, EPI_REGS: gl.constexpr):
    dtype: gl.constexpr = a_desc.dtype
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    if C_FP32:
        c_smem = gl.allocate_shared_memory(gl.float32, [BM, BN], C_LAYOUT)
    else:
        c_smem = gl.allocate_shared_memory(dtype, [BM, BN], C_LAYOUT)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    acc_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    acc_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # one arrival per MMA warpgroup
    mbarrier.init(acc_ready, count=2)
    mbarrier.init(acc_empty, count=1)
    fence_async_shared()
    args = (a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3, e4, e5,
            e6, M, N, K, inv_d)
    if EPI == 0:
        gl.warp_specialize([(_mma0, args), (_mma1, args), (_producer, args), (_epi_plain, args)], [4, 1, EPI_WARPS],
                           [MMA_REGS, PRODUCER_REGS, EPI_REGS])
    elif EPI == 1:
        gl.warp_specialize([(_mma0, args), (_mma1, args), (_producer, args), (_epi_res_s16, args)], [4, 1, EPI_WARPS],
                           [MMA_REGS, PRODUCER_REGS, EPI_REGS])
    elif EPI == 2:
        gl.warp_specialize([(_mma0, args), (_mma1, args), (_producer, args), (_epi_res_s8, args)], [4, 1, EPI_WARPS],
                           [MMA_REGS, PRODUCER_REGS, EPI_REGS])
    elif EPI == 3:
        gl.warp_specialize([(_mma0, args), (_mma1, args), (_producer, args), (_epi_res_s32, args)], [4, 1, EPI_WARPS],
                           [MMA_REGS, PRODUCER_REGS, EPI_REGS])
    elif EPI == 4:
        gl.warp_specialize([(_mma0, args), (_mma1, args), (_producer, args),
                            (_epi_res_s16_pf, args)], [4, 1, EPI_WARPS],
                           [MMA_REGS, PRODUCER_REGS, EPI_REGS])
    elif EPI == 5:
        gl.warp_specialize([(_mma0, args), (_mma1, args), (_producer, args), (_epi_res_s8_pf, args)], [4, 1, EPI_WARPS],
                           [MMA_REGS, PRODUCER_REGS, EPI_REGS])
    elif EPI == 6:
        gl.warp_specialize([(_mma0, args), (_mma1, args), (_producer, args),
                            (_epi_res_noread, args)], [4, 1, EPI_WARPS],
                           [MMA_REGS, PRODUCER_REGS, EPI_REGS])
    elif EPI == 7:
        gl.warp_specialize([(_mma0, args), (_mma1, args), (_producer, args), (_epi_norm_s16, args)], [4, 1, EPI_WARPS],
                           [MMA_REGS, PRODUCER_REGS, EPI_REGS])
    elif EPI == 8:
        gl.warp_specialize([(_mma0, args), (_mma1, args), (_producer, args), (_epi_norm_s8, args)], [4, 1, EPI_WARPS],
                           [MMA_REGS, PRODUCER_REGS, EPI_REGS])
    elif EPI == 9:
        gl.warp_specialize([(_mma0, args), (_mma1, args), (_producer, args), (_epi_norm_s4, args)], [4, 1, EPI_WARPS],
                           [MMA_REGS, PRODUCER_REGS, EPI_REGS])
    elif EPI == 10:
        gl.warp_specialize([(_mma0, args), (_mma1, args), (_producer, args),
                            (_epi_norm_s8_pf, args)], [4, 1, EPI_WARPS],
                           [MMA_REGS, PRODUCER_REGS, EPI_REGS])
    elif EPI == 11:
        gl.warp_specialize([(_mma0, args), (_mma1, args), (_producer, args),
                            (_epi_res_s16_tma, args)], [4, 1, EPI_WARPS],
                           [MMA_REGS, PRODUCER_REGS, EPI_REGS])
    elif EPI == 12:
        gl.warp_specialize([(_mma0, args), (_mma1, args), (_producer, args),
                            (_epi_res_s8_tma, args)], [4, 1, EPI_WARPS],
                           [MMA_REGS, PRODUCER_REGS, EPI_REGS])
    elif EPI == 13:
        gl.warp_specialize([(_mma0, args), (_mma1, args), (_producer, args),
                            (_epi_norm_s8_pf_tma, args)], [4, 1, EPI_WARPS],
                           [MMA_REGS, PRODUCER_REGS, EPI_REGS])


@gluon.jit
def gemm_epilogue_ws4(a_desc, b_desc, c_desc, e0, e1, e2, e3, e4, e5, e6, M, N, K, inv_d, STAGES: gl.constexpr,
                      C_LAYOUT: gl.constexpr, C_FP32: gl.constexpr, EPI: gl.constexpr, MMA_REGS: gl.constexpr,
                      PRODUCER_REGS: gl.constexpr, EPI_REGS: gl.constexpr):
    # the producer-less form: MMA warpgroup 0 issues the loads, the epilogue partition has 4 warps
    dtype: gl.constexpr = a_desc.dtype
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    a_bufs = gl.allocate_shared_memory(dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    if C_FP32:
        c_smem = gl.allocate_shared_memory(gl.float32, [BM, BN], C_LAYOUT)
    else:
        c_smem = gl.allocate_shared_memory(dtype, [BM, BN], C_LAYOUT)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    acc_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    acc_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    mbarrier.init(acc_ready, count=2)
    mbarrier.init(acc_empty, count=1)
    fence_async_shared()
    args = (a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, c_desc, e0, e1, e2, e3, e4, e5,
            e6, M, N, K, inv_d)
    if EPI == 0:
        gl.warp_specialize([(_mma0_loader, args), (_mma1, args), (_epi_plain, args)], [4, 4], [MMA_REGS, EPI_REGS])
    elif EPI == 1:
        gl.warp_specialize([(_mma0_loader, args), (_mma1, args), (_epi_res_s16_w4, args)], [4, 4], [MMA_REGS, EPI_REGS])
    elif EPI == 2:
        gl.warp_specialize([(_mma0_loader, args), (_mma1, args), (_epi_res_s32_w4, args)], [4, 4], [MMA_REGS, EPI_REGS])
    elif EPI == 3:
        gl.warp_specialize([(_mma0_loader, args), (_mma1, args),
                            (_epi_norm_s16_w4, args)], [4, 4], [MMA_REGS, EPI_REGS])
    elif EPI == 4:
        gl.warp_specialize([(_mma0_loader, args), (_mma1, args),
                            (_epi_norm_s16_pf_w4, args)], [4, 4], [MMA_REGS, EPI_REGS])


EPILOGUES = {name: i for i, name in enumerate(
    ("plain", "res_s16", "res_s8", "res_s32", "res_s16_pf", "res_s8_pf", "res_noread", "norm_s16", "norm_s8", "norm_s4",
     "norm_s8_pf", "res_s16_tma", "res_s8_tma", "norm_s8_pf_tma"))}
# the producer-less kernel's epilogue variants (4 epilogue warps)
EPILOGUES_W4 = {name: i for i, name in enumerate(("plain", "res_s16", "res_s32", "norm_s16", "norm_s16_pf"))}


def launch(code: str, a, b, b_t: bool, extras: list, *, BM=128, BN=256, BK=64, STAGES=3, c_fp32=False,
           regs=(184, 24, 120), out=None, inv_d=1.0, w4=False):
    """One launch of epilogue variant `code` (a key of EPILOGUES); `extras` are the epilogue's
    seven pointer arguments (unused ones: any tensor)."""
    M, K = a.shape
    N = b.shape[0] if b_t else b.shape[1]
    a_layout = gl.NVMMASharedLayout.get_default_for([BM, BK], gl.bfloat16)
    b_block = [BN, BK] if b_t else [BK, BN]
    b_layout = gl.NVMMASharedLayout.get_default_for(b_block, gl.bfloat16)
    c_layout = gl.NVMMASharedLayout.get_default_for([BM, BN], gl.bfloat16)
    h_layout = gl.NVMMASharedLayout.get_default_for([BM, BN], gl.float32) if c_fp32 else c_layout
    a_desc = TensorDescriptor(a, list(a.shape), list(a.stride()), [BM, BK], a_layout)
    b_desc = TensorDescriptor(b, list(b.shape), list(b.stride()), b_block, b_layout)
    if out is None:
        out = torch.empty(M, N, device=a.device, dtype=torch.bfloat16)
    c_desc = TensorDescriptor(out, [M, N], list(out.stride()), [BM, BN], c_layout)
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    grid = (min(sms, triton.cdiv(M, BM) * triton.cdiv(N, BN)), )
    ex = list(extras) + [out] * (7 - len(extras))
    kernel, codes = (gemm_epilogue_ws4, EPILOGUES_W4) if w4 else (gemm_epilogue_ws, EPILOGUES)
    launch.last_kernel = kernel[grid](a_desc, b_desc, c_desc, *ex, M, N, K, inv_d, STAGES, h_layout, int(c_fp32),
                                      codes[code], regs[0], regs[1], regs[2], num_warps=4)
    return out


# --------------------------------------------------------------------------- the problems


def make_problem(epi: str, M: int, N: int, K: int):
    """Inputs, the float64 reference and the runners of one (epilogue, shape)."""
    g = torch.Generator(device="cuda").manual_seed(0)
    dev = "cuda"
    a = torch.randn(M, K, device=dev, dtype=torch.bfloat16, generator=g)
    if epi == "normbwd":
        # dgrad: dy = dqkv @ Wqkv, B stored [K, N]
        b = (torch.randn(K, N, device=dev, dtype=torch.bfloat16, generator=g) / K ** 0.5)
        b_t = False
        ref_c = a.double() @ b.double()
    else:
        b = (torch.randn(N, K, device=dev, dtype=torch.bfloat16, generator=g) / K ** 0.5)
        b_t = True
        ref_c = a.double() @ b.double().T
    cb_out = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
    if b_t:
        cublas = lambda: torch.matmul(a, b.T, out=cb_out)  # noqa: E731
    else:
        cublas = lambda: torch.matmul(a, b, out=cb_out)  # noqa: E731
    p = {"a": a, "b": b, "b_t": b_t, "cublas": cublas, "M": M, "N": N, "K": K}
    if epi == "plain":
        p["ref"] = {"out": ref_c}
    elif epi == "residual":
        res = torch.randn(M, N, device=dev, dtype=torch.bfloat16, generator=g)
        p["res"] = res
        y = ref_c + res.double()
        p["ref"] = {"out": y}
    else:
        x = torch.randn(M, N, device=dev, dtype=torch.bfloat16, generator=g)
        w = (1.0 + 0.1 * torch.randn(N, device=dev, generator=g)).to(torch.bfloat16)
        rstd = (0.5 + torch.rand(M, device=dev, generator=g)).float()
        s = torch.randn(M, device=dev, generator=g).float() * 8.0
        dres = torch.randn(M, N, device=dev, dtype=torch.bfloat16, generator=g)
        p.update(x=x, w=w, rstd=rstd, s=s, dres=dres)
        xd, rd = x.double(), rstd.double()[:, None]
        nd = xd * rd
        dx = rd * (ref_c * w.double()[None, :] - nd * (s.double()[:, None] / N)) + dres.double()
        p["ref"] = {"out": dx, "dw": (ref_c * nd).sum(0)}
    return p


def gluon_runner(epi: str, p: dict, cfg: dict):
    M, N, K = p["M"], p["N"], p["K"]
    BM, BN = cfg.get("BM", 128), cfg.get("BN", 256)
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    kw = {k: v for k, v in cfg.items() if k in ("BM", "BN", "BK", "STAGES", "c_fp32", "regs", "w4")}
    if epi == "plain":
        extras = []
        collect = lambda: {"out": out}  # noqa: E731
    elif epi == "residual":
        part = torch.empty(M, triton.cdiv(N, BN), device="cuda", dtype=torch.float32)
        extras = [out, p["res"], part]
        collect = lambda: {"out": out, "part": part}  # noqa: E731
    else:
        dwp = torch.empty(triton.cdiv(M, BM), N, device="cuda", dtype=torch.float32)
        extras = [out, p["x"], p["w"], p["rstd"], p["s"], p["dres"], dwp]
        collect = lambda: {"out": out, "dw": dwp.sum(0)}  # noqa: E731
    code = cfg.get("epi", {"plain": "plain", "residual": "res_s16", "normbwd": "norm_s16"}[epi])
    fn = lambda: launch(code, p["a"], p["b"], p["b_t"], extras, out=out, inv_d=1.0 / N, **kw)  # noqa: E731
    return fn, collect


def rel_err(got, want):
    return ((got.double() - want).abs().max() / want.abs().max()).item()


def check(epi: str, p: dict, got: dict, BN: int, noread: bool = False) -> dict:
    # noread: the diagnostic variant whose residual load is masked off computes acc alone
    want = p["ref"]["out"] - p["res"].double() if noread else p["ref"]["out"]
    e = {"out_rel_err": rel_err(got["out"], want)}
    ok = e["out_rel_err"] < 1e-2
    if epi == "residual":
        ss = (got["out"].double() ** 2).reshape(p["M"], -1, BN).sum(-1)
        e["partials_rel_err"] = rel_err(got["part"], ss)
        ok = ok and e["partials_rel_err"] < 1e-4
    if epi == "normbwd":
        e["dw_rel_err"] = rel_err(got["dw"], p["ref"]["dw"])
        ok = ok and e["dw_rel_err"] < 1e-2
    e["ok"] = bool(ok)
    return e


def torch_bar(epi: str, p: dict) -> dict:
    """The error of the unfused torch path (bf16 cuBLAS GEMM, then the epilogue in fp32): the bar
    the fused kernels are compared with."""
    if epi == "plain":
        return {"out_rel_err": rel_err(p["a"] @ (p["b"].T if p["b_t"] else p["b"]), p["ref"]["out"])}
    if epi == "residual":
        c = (p["a"] @ p["b"].T).float()
        return {"out_rel_err": rel_err((c + p["res"].float()).to(torch.bfloat16), p["ref"]["out"])}
    dy = (p["a"] @ p["b"]).float()
    n = p["x"].float() * p["rstd"][:, None]
    dx = p["rstd"][:, None] * (dy * p["w"].float()[None, :] - n * (p["s"][:, None] / p["N"])) + p["dres"].float()
    return {"out_rel_err": rel_err(dx.to(torch.bfloat16), p["ref"]["out"]),
            "dw_rel_err": rel_err((dy * n).sum(0), p["ref"]["dw"])}


# (name, config): 128 x 256 tiles, two MMA warpgroups of 64 x 256, registers (MMA, producer, epilogue)
def _v(regs, STAGES=3, BK=64, c_fp32=False, epi=None, w4=False):
    name = f"ws{'4 (no producer warp)' if w4 else ''} 128x256 BK{BK} S{STAGES} {'fp32' if c_fp32 else 'bf16'} " \
        f"r{regs[0]}/{regs[1]}/{regs[2]}"
    cfg = dict(STAGES=STAGES, BK=BK, c_fp32=c_fp32, regs=regs, w4=w4)
    if epi:
        name += f" {epi}"
        cfg["epi"] = epi
    return name, cfg


R = (168, 24, 176)
R4 = (168, 0, 176)  # producer-less kernel: (MMA, unused, epilogue)
VARIANTS = {
    "plain": [_v(R), _v(R4, w4=True)],
    "residual": [_v(R, epi="res_s16"), _v(R, epi="res_s16_tma"), _v(R, epi="res_s8_tma"),
                 _v(R4, epi="res_s16", w4=True)],
    "normbwd": [_v(R, epi="norm_s8_pf"), _v(R, epi="norm_s8_pf_tma"),
                _v(R, STAGES=4, BK=32, c_fp32=True, epi="norm_s8_pf"), _v(R4, epi="norm_s16_pf", w4=True)],
}
# Tried in earlier runs of this session and dropped (bench/RESULTS.md, session 10): registers
# (184, 24, 144), (184, 144, 144), (200, 24, 112), (160, 24, 192); res_s32 / res_s16_pf /
# res_s8_pf / res_noread; norm_s16 / norm_s8 / norm_s4 (does not compile: "We don't support
# splitting along the swizzling pattern"); the fp32 hand-off with STAGES = 2; the producer-less
# kernel at BK = 32, STAGES = 6 and with the fp32 hand-off (out of shared memory: 233568 B).

SHAPES = {"plain": ["8192,4096,4096", "16384,2048,2048"], "residual": ["8192,4096,4096", "16384,2048,2048"],
          "normbwd": ["16384,2048,3072", "8192,4096,6144"]}


def coda_triton(epi: str, p: dict, ks: dict):
    from bench_mainloop import run_plain, run_residual

    M, N, K = p["M"], p["N"], p["K"]
    if epi == "plain":
        fn = lambda: run_plain(ks["plain"], p["a"], p["b"], M, N, K)  # noqa: E731
        return fn, lambda out: {"out": out}
    if epi == "residual":
        fn = lambda: run_residual(ks["residual_sumsq"], p["a"], p["b"], p["res"], M, N, K)  # noqa: E731
        return fn, lambda r: {"out": r[0], "part": r[1]}
    # the dgrad's plain mainloop (B stored [K, N]); its check is the GEMM alone
    fn = lambda: run_plain(ks["plain"], p["a"], p["b"], M, N, K, transpose_b=False)  # noqa: E731
    return fn, None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epilogues", default="plain,residual,normbwd")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-coda", action="store_true", help="skip the coda Triton comparators")
    ap.add_argument("--only", default="", help="comma list of variant-name substrings to keep")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    from triton.testing import do_bench

    report = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "runs": {}}
    print(json.dumps({k: report[k] for k in ("gpu", "torch", "triton")}), flush=True)
    ks = None
    if not args.no_coda:
        from bench_mainloop import build_kernels

        ks = build_kernels(Path(tempfile.mkdtemp()))
    only = [s for s in args.only.split(",") if s]
    for epi in args.epilogues.split(","):
        for shape in SHAPES[epi]:
            M, N, K = (int(v) for v in shape.split(","))
            key = f"{epi} {M}x{N}x{K}"
            run = report["runs"][key] = {"bar_unfused_torch": None, "variants": {}}
            p = make_problem(epi, M, N, K)
            run["bar_unfused_torch"] = torch_bar(epi, p)
            fns = {"cublas plain": p["cublas"]}
            if ks is not None:
                fn, coll = coda_triton(epi, p, ks)
                if fn is not None:
                    cname = "coda triton (tuned)" if coll is not None else "coda triton plain mainloop (tuned)"
                    ent = run["variants"][cname] = {}
                    t0 = time.perf_counter()
                    r = fn()
                    torch.cuda.synchronize()
                    ent["first_call_s"] = time.perf_counter() - t0
                    if coll is not None:
                        ent.update(check(epi, p, coll(r), 256))
                    else:
                        ent["out_rel_err"] = rel_err(r, p["a"].double() @ p["b"].double())
                        ent["ok"] = ent["out_rel_err"] < 1e-2
                    if ent["ok"]:
                        fns[cname] = fn
            for name, cfg in VARIANTS[epi]:
                if only and not any(s in name for s in only):
                    continue
                ent = run["variants"][name] = {"config": {k: v for k, v in cfg.items()}}
                try:
                    fn, collect = gluon_runner(epi, p, cfg)
                    t0 = time.perf_counter()
                    fn()
                    torch.cuda.synchronize()
                    ent["first_call_s"] = time.perf_counter() - t0
                    ent.update(check(epi, p, collect(), cfg.get("BN", 256), noread=cfg.get("epi") == "res_noread"))
                    kern = launch.last_kernel  # the CompiledKernel the launch returned
                    ent["n_regs"], ent["n_spills"] = kern.n_regs, kern.n_spills
                    ent["smem"] = kern.metadata.shared
                    if ent["ok"]:
                        fns[name] = fn
                except Exception as exc:  # noqa: BLE001
                    ent["error"] = "".join(traceback.format_exception(exc))[-2500:]
                print(key, name, {k: v for k, v in ent.items() if k != "error"}, ent.get("error", ""), flush=True)
            times = {k: [] for k in fns}
            names = list(fns)
            for r in range(args.rounds):
                order = names[r % len(names):] + names[:r % len(names)]
                for k in order:
                    times[k].append(do_bench(fns[k], warmup=25, rep=100, return_mode="median"))
            base = sorted(times["cublas plain"])[args.rounds // 2]
            flops = 2.0 * M * N * K
            print(f"\n{report['gpu']}, torch {report['torch']}, triton {report['triton']}, {key}; "
                  f"unfused torch bar {run['bar_unfused_torch']}")
            for k in names:
                ms = sorted(times[k])[args.rounds // 2]
                ent = run["variants"].setdefault(k, {})
                ent.update(ms=ms, rounds_ms=times[k], x_cublas=ms / base)
                print(f"  {k:42s} {ms:8.4f} ms  {ms / base:6.3f}x cuBLAS  {flops / ms / 1e9:7.1f} TFLOP/s", flush=True)
            del p
            torch.cuda.empty_cache()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "gluon_pingpong.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
