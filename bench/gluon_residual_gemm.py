"""Prototype (issue 11): a warp-specialized persistent Hopper GEMM in Gluon whose residual
epilogue of one tile runs while the tensor cores work on another tile, against cuBLAS and the
coda Triton mainloop with the same epilogue, in one process.

    python bench/gluon_residual_gemm.py [--shape 8192,4096,4096] [--out DIR]

out = x @ w.T + res (bf16) and the row sums of squares of out per column tile (fp32 partials),
the LLaMA out-projection's epilogue. Schedule: each persistent program (one per SM) has two
consumer warpgroups, each computing its own 128 x BN output tiles (tiles alternate between them)
with async wgmma from a STAGES-deep shared-memory ring, and one producer warp per consumer
issuing the TMA loads of that ring (mbarriers `ready` / `empty`). When one consumer is in its
epilogue (residual load, add, store, partials), the other one's wgmmas keep the tensor cores
busy: the overlap that one Triton program per SM cannot express (bench/RESULTS.md, "Limiting
factor: residual epilogue at K=4096"). Not part of the compiler; a measurement.

The Gluon API moved between Triton releases (`gl.warp_specialize`'s arguments): the form is
picked from its signature at run time. GPU only (Hopper).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait  # noqa: E402
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402


# TMA load: `async_copy_global_to_shared` in Triton 3.6, renamed `async_load` later.
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared


def ws_form() -> int:
    """0: (default_args, default_fn, worker_args, workers, warps, regs); 1: (args, default_fn,
    workers, warps, regs); 2: ([(fn, args), ...], warps, regs)."""
    names = list(inspect.signature(gl.warp_specialize).parameters)
    if names[0] == "functions_and_args":
        return 2
    if "worker_args" in names:
        return 0
    return 1


@gluon.jit
def _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
    group = GROUP_M * num_pid_n
    first_m = (tile // group) * GROUP_M
    rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % group) % rows
    pid_n = (tile % group) // rows
    return pid_m, pid_n


@gluon.jit
def _producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, CID: gl.constexpr,
              BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr):
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = gl.cdiv(K, BK)
    it = 0
    for tile in range(pid + CID * nprog, num_tiles, 2 * nprog):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        for kk in range(k_tiles):
            s = it % STAGES
            # a fresh barrier counts as having completed the phase before 0: the first pass
            # through the ring does not wait
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            _tma_load(a_desc, [pid_m * BM, kk * BK], ready.index(s), a_bufs.index(s))
            _tma_load(b_desc, [pid_n * BN, kk * BK], ready.index(s), b_bufs.index(s))
            it += 1


@gluon.jit
def _consumer(a_bufs, b_bufs, ready, empty, c_ptr, r_ptr, p_ptr, M, N, K, HAS_RES, CID: gl.constexpr,
              BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr):
    mma_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                          instr_shape=[16, BN if BN <= 256 else 256, 16])
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    num_pid_m = gl.cdiv(M, BM)
    num_pid_n = gl.cdiv(N, BN)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = gl.cdiv(K, BK)
    it = 0
    for tile in range(pid + CID * nprog, num_tiles, 2 * nprog):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = gl.zeros([BM, BN], gl.float32, layout=mma_layout)
        for kk in range(k_tiles):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s).permute((1, 0)), acc, is_async=True)
            # one wgmma in flight: the previous stage's is done, give its buffers back
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            if kk > 0:
                mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
            it += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
        # epilogue: out = acc + res (bf16), partial row sums of squares of out
        offs_m = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, mma_layout))
        offs_n = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, mma_layout))
        mask_m = offs_m < M
        mask = mask_m[:, None] & (offs_n < N)[None, :]
        idx = offs_m.to(gl.int64)[:, None] * N + offs_n[None, :]
        # HAS_RES = 0 masks the residual load off (no DRAM read): the mainloop's own speed with
        # a plain store (a runtime branch here failed to lower in Triton 3.6's warp-specialized
        # partitions, ConvertTritonGPUToLLVM)
        r = gl.load(r_ptr + idx, mask=mask & (HAS_RES != 0), other=0.0)
        y = (acc + r.to(gl.float32)).to(gl.bfloat16)
        gl.store(c_ptr + idx, y, mask=mask)
        yf = gl.where(mask, y.to(gl.float32), 0.0)
        gl.store(p_ptr + offs_m.to(gl.int64) * num_pid_n + pid_n, gl.sum(yf * yf, axis=1), mask=mask_m)


# Partition entry points: warp_specialize passes their arguments as values (a constexpr in the
# tuple arrives as a tensor), so the tile sizes are read back from the descriptors' types and the
# group size is this global (the kernel's GROUP_M parameter is not used by the partitions).
GROUP_M_DEFAULT = gl.constexpr(8)


@gluon.jit
def _consumer0(a_bufs0, b_bufs0, ready0, empty0, a_bufs1, b_bufs1, ready1, empty1, a_desc, b_desc, c_ptr, r_ptr, p_ptr,
               M, N, K, HAS_RES):
    _consumer(a_bufs0, b_bufs0, ready0, empty0, c_ptr, r_ptr, p_ptr, M, N, K, HAS_RES, 0, a_desc.block_type.shape[0],
              b_desc.block_type.shape[0], a_desc.block_type.shape[1], a_bufs0.type.shape[0], GROUP_M_DEFAULT)


@gluon.jit
def _consumer1(a_bufs0, b_bufs0, ready0, empty0, a_bufs1, b_bufs1, ready1, empty1, a_desc, b_desc, c_ptr, r_ptr, p_ptr,
               M, N, K, HAS_RES):
    _consumer(a_bufs1, b_bufs1, ready1, empty1, c_ptr, r_ptr, p_ptr, M, N, K, HAS_RES, 1, a_desc.block_type.shape[0],
              b_desc.block_type.shape[0], a_desc.block_type.shape[1], a_bufs1.type.shape[0], GROUP_M_DEFAULT)


@gluon.jit
def _producer0(a_bufs0, b_bufs0, ready0, empty0, a_bufs1, b_bufs1, ready1, empty1, a_desc, b_desc, c_ptr, r_ptr, p_ptr,
               M, N, K, HAS_RES):
    _producer(a_desc, b_desc, a_bufs0, b_bufs0, ready0, empty0, M, N, K, 0, a_desc.block_type.shape[0],
              b_desc.block_type.shape[0], a_desc.block_type.shape[1], a_bufs0.type.shape[0], GROUP_M_DEFAULT)


@gluon.jit
def _producer1(a_bufs0, b_bufs0, ready0, empty0, a_bufs1, b_bufs1, ready1, empty1, a_desc, b_desc, c_ptr, r_ptr, p_ptr,
               M, N, K, HAS_RES):
    _producer(a_desc, b_desc, a_bufs1, b_bufs1, ready1, empty1, M, N, K, 1, a_desc.block_type.shape[0],
              b_desc.block_type.shape[0], a_desc.block_type.shape[1], a_bufs1.type.shape[0], GROUP_M_DEFAULT)


@gluon.jit
def gemm_residual_ws(a_desc, b_desc, c_ptr, r_ptr, p_ptr, M, N, K, HAS_RES, BM: gl.constexpr, BN: gl.constexpr,
                     BK: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr, WS_FORM: gl.constexpr,
                     CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    dtype: gl.constexpr = a_desc.dtype
    a_bufs0 = gl.allocate_shared_memory(dtype, [STAGES, BM, BK], a_desc.layout)
    b_bufs0 = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], b_desc.layout)
    a_bufs1 = gl.allocate_shared_memory(dtype, [STAGES, BM, BK], a_desc.layout)
    b_bufs1 = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], b_desc.layout)
    ready0 = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty0 = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    ready1 = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty1 = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready0.index(i), count=1)
        mbarrier.init(empty0.index(i), count=1)
        mbarrier.init(ready1.index(i), count=1)
        mbarrier.init(empty1.index(i), count=1)
    args = (a_bufs0, b_bufs0, ready0, empty0, a_bufs1, b_bufs1, ready1, empty1, a_desc, b_desc, c_ptr, r_ptr, p_ptr,
            M, N, K, HAS_RES)
    if WS_FORM == 0:
        gl.warp_specialize(args, _consumer0, args, [_consumer1, _producer0, _producer1], [4, 1, 1],
                           [CONSUMER_REGS, PRODUCER_REGS, PRODUCER_REGS])
    elif WS_FORM == 1:
        gl.warp_specialize(args, _consumer0, [_consumer1, _producer0, _producer1], [4, 1, 1],
                           [CONSUMER_REGS, PRODUCER_REGS, PRODUCER_REGS])
    else:
        gl.warp_specialize([(_consumer0, args), (_consumer1, args), (_producer0, args), (_producer1, args)],
                           [4, 1, 1], [CONSUMER_REGS, PRODUCER_REGS, PRODUCER_REGS])


def gluon_residual(x, w, res, BN=128, BK=64, STAGES=3, GROUP_M=8, regs=(232, 40), BM=128, has_res=True):
    M, K = x.shape
    N = w.shape[0]
    a_layout = gl.NVMMASharedLayout.get_default_for([BM, BK], gl.bfloat16)
    b_layout = gl.NVMMASharedLayout.get_default_for([BN, BK], gl.bfloat16)
    a_desc = TensorDescriptor(x, list(x.shape), list(x.stride()), [BM, BK], a_layout)
    b_desc = TensorDescriptor(w, list(w.shape), list(w.stride()), [BN, BK], b_layout)
    out = torch.empty(M, N, device=x.device, dtype=x.dtype)
    part = torch.empty(M, triton.cdiv(N, BN), device=x.device, dtype=torch.float32)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    grid = (min(sms, triton.cdiv(tiles, 2)),)
    gemm_residual_ws[grid](a_desc, b_desc, out, res, part, M, N, K, int(has_res), BM, BN, BK, STAGES, GROUP_M, ws_form(),
                           regs[0], regs[1], num_warps=4)
    return out, part


# (BM, BN, STAGES, (consumer, producer) registers, residual epilogue)
VARIANTS = ((128, 128, 3, (240, 24), True), (128, 128, 3, (240, 24), False), (64, 256, 2, (240, 24), True),
            (64, 256, 2, (240, 24), False), (64, 128, 4, (240, 24), True), (64, 128, 4, (240, 24), False))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="8192,4096,4096", help="M,N,K")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    M, N, K = (int(v) for v in args.shape.split(","))
    from triton.testing import do_bench

    report = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "shape": [M, N, K], "ws_form": ws_form(),
              "ws_signature": str(inspect.signature(gl.warp_specialize)), "variants": {}}
    print(json.dumps({k: report[k] for k in ("gpu", "torch", "triton", "shape", "ws_form", "ws_signature")}), flush=True)
    torch.manual_seed(0)
    x = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
    res = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    ref = (x.double() @ w.double().T + res.double())
    ref_ss = None

    fns = {}
    c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    fns["cublas plain"] = lambda: torch.matmul(x, w.T, out=c)
    # the coda Triton mainloop with the same epilogue (bench_mainloop.py's residual + sum of squares)
    from bench_mainloop import build_kernels, run_residual

    ks = build_kernels(Path(tempfile.mkdtemp()))
    t0 = time.perf_counter()
    out_t, part_t = run_residual(ks["residual_sumsq"], x, w, res, M, N, K)
    torch.cuda.synchronize()
    err_t = ((out_t.double() - ref).abs().max() / ref.abs().max()).item()
    report["variants"]["coda triton (tuned)"] = {"first_call_s": time.perf_counter() - t0, "max_rel_err": err_t}
    fns["coda triton (tuned)"] = lambda: run_residual(ks["residual_sumsq"], x, w, res, M, N, K)
    from coda_ir.lowering import gemm_launch

    report["variants"]["coda triton (tuned)"]["config"] = str(gemm_launch.LAST_LAUNCH.get("config"))
    for BM, BN, STAGES, regs, has_res in VARIANTS:
        name = f"gluon ws {BM}x{BN} S={STAGES} regs={regs} {'residual' if has_res else 'no residual read'}"
        entry = report["variants"].setdefault(name, {})
        try:
            t0 = time.perf_counter()
            out_g, part_g = gluon_residual(x, w, res, BN=BN, STAGES=STAGES, regs=regs, BM=BM, has_res=has_res)
            torch.cuda.synchronize()
            entry["first_call_s"] = time.perf_counter() - t0
            want = ref if has_res else ref - res.double()
            entry["max_rel_err"] = ((out_g.double() - want).abs().max() / want.abs().max()).item()
            ss_ref = (out_g.double() ** 2).reshape(M, -1, BN).sum(-1)
            entry["partials_rel_err"] = ((part_g.double() - ss_ref).abs().max() / ss_ref.abs().max()).item()
            ok = entry["max_rel_err"] < 2e-2 and entry["partials_rel_err"] < 1e-4
            entry["ok"] = ok
            print(name, entry, flush=True)
            if ok:
                fns[name] = (lambda bm, b, s, r, h: lambda: gluon_residual(x, w, res, BN=b, STAGES=s, regs=r, BM=bm,
                                                                           has_res=h))(BM, BN, STAGES, regs, has_res)
        except Exception as exc:  # noqa: BLE001
            import traceback

            text = "".join(traceback.format_exception(exc))
            entry["error"] = f"{type(exc).__name__}: {text[-3000:]}"
            print(name, "ERROR", entry["error"], flush=True)
    times = {k: [] for k in fns}
    names = list(fns)
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for k in order:
            times[k].append(do_bench(fns[k], warmup=25, rep=100, return_mode="median"))
    base = None
    for k in names:
        ms = sorted(times[k])[len(times[k]) // 2]
        report["variants"].setdefault(k, {})["ms"] = ms
        report["variants"][k]["rounds_ms"] = times[k]
    base = report["variants"]["cublas plain"]["ms"]
    flops = 2.0 * M * N * K
    print(f"\n{report['gpu']}, torch {report['torch']}, triton {report['triton']}, {M}x{N}x{K}")
    for k in names:
        ms = report["variants"][k]["ms"]
        report["variants"][k]["x_cublas"] = ms / base
        print(f"  {k:40s} {ms:8.4f} ms  {ms / base:6.3f}x cuBLAS plain  {flops / ms / 1e9:7.1f} TFLOP/s")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "gluon_residual_gemm.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
