"""GPU benchmark of the coda GEMM mainloop (issue 3): correctness first, then timings.

    python bench/bench_mainloop.py            # on the GPU: checks, then the tables
    python bench/bench_mainloop.py --smoke    # CPU interpreter, tiny shapes, checks only
    python bench/bench_mainloop.py --coda     # also the coda-lowered LLaMA kernels at 8B shapes
    python bench/bench_mainloop.py --coda-only

Part 1 checks every kernel against torch float64 of the same (bf16) inputs on fresh random
data, with outputs poisoned to NaN first, including ragged, transposed, unaligned (portable
fallback) and interleaved cases. Part 2 times, side by side in one run, the plain mainloop (an
epilogue that stores acc as bf16) against cuBLAS (`torch.matmul(x, w.T)`, nn.Linear layout)
at the LLaMA-8B shapes. Part 3 times hand-written fused epilogues on the same template
(residual add + sum-of-squares partials; interleaved SwiGLU 2 -> 1) against the plain cuBLAS
GEMM of the same shape and against the same computation unfused in eager PyTorch.
Everything goes through `launch_gemm` (autotuned, cached under $CODA_CACHE_DIR). Full
numbers go to $OUT/bench_mainloop.json (or --out), the table is printed last.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPES_8B = [(8192, 4096, 4096), (8192, 28672, 4096), (8192, 4096, 14336), (8192, 6144, 4096)]

PLAIN = [
    "    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :]",
    "    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])",
]
# Streaming store (.cs: evict-first in L2, keeps A/B tiles resident).
PLAIN_CS = [
    "    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :]",
    "    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :],",
    "             cache_modifier=\".cs\")",
]
# TMA-store variant (TMA path only): how much the pointer store costs.
PLAIN_TMA_STORE = [
    "    c_ptr.store([pid_m * BM, pid_n * BN], acc.to(c_ptr.dtype))",
]
RESIDUAL_SUMSQ = [
    "    mask = mask_m[:, None] & mask_n[None, :]",
    "    r = tl.load(res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :], mask=mask, other=0.0)",
    "    y = (acc + r.to(tl.float32)).to(out_ptr.dtype.element_ty)",
    "    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], y, mask=mask)",
    "    yf = tl.where(mask, y.to(tl.float32), 0.0)",
    "    tl.store(part_ptr + offs_m * stride_pm + pid_n, tl.sum(yf * yf, axis=1), mask=mask_m)",
]
SWIGLU = [
    "    g, u = tl.split(tl.reshape(acc, (BM, BN // 2, 2)))",
    "    y = g * tl.sigmoid(g) * u",
    "    offs_h = pid_n * (BN // 2) + tl.arange(0, BN // 2)",
    "    mask_h = offs_h < N // 2",
    "    tl.store(o_ptr + offs_m[:, None] * stride_om + offs_h[None, :],",
    "             y.to(o_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_h[None, :])",
]
# The same with streaming hints: the residual read and the output write evict first from L2.
RESIDUAL_STREAM = [
    "    mask = mask_m[:, None] & mask_n[None, :]",
    "    r = tl.load(res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :], mask=mask, other=0.0,",
    "                eviction_policy=\"evict_first\")",
    "    y = (acc + r.to(tl.float32)).to(out_ptr.dtype.element_ty)",
    "    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :], y, mask=mask, cache_modifier=\".cs\")",
    *RESIDUAL_SUMSQ[4:],
]
# The same, with the residual tile prefetched into L2 by the prologue (before the K loop).
RESIDUAL_PREFETCH = [
    "    pf_cols = pid_n * BN + tl.arange(0, (BN + 63) // 64) * 64",
    "    _coda_prefetch_l2(res_ptr + offs_m[:, None] * stride_rm + pf_cols[None, :],",
    "                      mask_m[:, None] & (pf_cols < N)[None, :], L2_PREFETCH)",
]
# SwiGLU on the even/odd halves the mainloop exposes (no interleaving shuffle).
SWIGLU_SPLIT = [
    "    y = acc_lo * tl.sigmoid(acc_lo) * acc_hi",
    "    offs_h = pid_n * (BN // 2) + tl.arange(0, BN // 2)",
    "    mask_h = offs_h < N // 2",
    "    tl.store(o_ptr + offs_m[:, None] * stride_om + offs_h[None, :],",
    "             y.to(o_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_h[None, :])",
]
# The same, with the residual tile loaded by the prologue (before the K loop): its DRAM latency
# hides under the mainloop, at the price of holding it in registers.
RESIDUAL_EARLY_PROLOGUE = [
    "    r_early = tl.load(res_ptr + offs_m[:, None] * stride_rm + offs_n[None, :],",
    "                      mask=mask_m[:, None] & mask_n[None, :], other=0.0)",
]
RESIDUAL_EARLY = [
    "    mask = mask_m[:, None] & mask_n[None, :]",
    "    y = (acc + r_early.to(tl.float32)).to(out_ptr.dtype.element_ty)",
    *RESIDUAL_SUMSQ[3:],
]
RES_PARAMS = ["res_ptr", "out_ptr", "part_ptr", "stride_rm", "stride_om", "stride_pm"]
KERNELS = {
    "plain": (["c_ptr", "stride_cm"], PLAIN),
    "plain_tmastore": (["c_ptr"], PLAIN_TMA_STORE),
    "residual_sumsq": (RES_PARAMS, RESIDUAL_SUMSQ),
    "residual_sumsq_pf": (RES_PARAMS, RESIDUAL_SUMSQ, RESIDUAL_PREFETCH),
    "residual_sumsq_early": (RES_PARAMS, RESIDUAL_EARLY, RESIDUAL_EARLY_PROLOGUE),
    "plain_il": (["c_ptr", "stride_cm"], PLAIN),
    "plain_cs": (["c_ptr", "stride_cm"], PLAIN_CS),
    "residual_sumsq_stream": (RES_PARAMS, RESIDUAL_STREAM),
    "swiglu": (["o_ptr", "stride_om"], SWIGLU),
    "swiglu_split": (["o_ptr", "stride_om"], SWIGLU_SPLIT),
}


def build_kernels(tmpdir: Path) -> dict:
    from coda_ir.lowering.mainloop import emit_gemm_kernel, interleave_rows_source, prefetch_l2_source

    lines = ["import triton", "import triton.language as tl", "", *interleave_rows_source(), "",
             *prefetch_l2_source(), ""]
    for name, (params, epi, *pro) in KERNELS.items():
        lines += [*emit_gemm_kernel(f"bench_{name}", params, epi, float32_operands=False,
                                    prologue=pro[0] if pro else ()), ""]
    modname = f"coda_bench_{uuid.uuid4().hex[:8]}"
    path = tmpdir / f"{modname}.py"
    path.write_text("\n".join(lines))
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    return {name: getattr(mod, f"bench_{name}") for name in KERNELS}


# ------------------------------------------------------------------------------ runners


def run_plain(k, x, w, M, N, K, *, transpose_a=False, transpose_b=True, key="bench_plain"):
    import torch

    from coda_ir.runtime.gemm_launch import launch_gemm

    def extra(cfg):
        c = torch.empty(M, N, device=x.device, dtype=x.dtype)
        return [c, c.stride(0)]

    cfg, ex = launch_gemm(k, x, w, extra, M=M, N=N, K=K, transpose_a=transpose_a,
                          transpose_b=transpose_b, key=key)
    return ex[0]


def run_plain_tmastore(k, x, w, M, N, K):
    import torch

    from coda_ir.runtime.gemm_launch import launch_gemm, tensor_descriptor_class

    desc = tensor_descriptor_class()

    def extra(cfg):
        c = torch.empty(M, N, device=x.device, dtype=x.dtype)
        run_plain_tmastore.out = c
        return [desc(c, [M, N], [c.stride(0), 1], [cfg.bm, cfg.bn])]

    launch_gemm(k, x, w, extra, M=M, N=N, K=K, transpose_a=False, transpose_b=True,
                key="bench_plain_tmastore")
    return run_plain_tmastore.out


def run_plain_il(k, x, w, M, N, K):
    """The plain store with interleave h = N / 2: the interleaved mainloop's own cost."""
    import torch

    from coda_ir.runtime.gemm_launch import launch_gemm

    def extra(cfg):
        c = torch.empty(M, N, device=x.device, dtype=x.dtype)
        return [c, c.stride(0)]

    _, ex = launch_gemm(k, x, w, extra, M=M, N=N, K=K, transpose_a=False, transpose_b=True,
                        interleave=N // 2, bn_multiple_of=2, key="bench_plain_il")
    return ex[0]


def run_residual(k, x, w, res, M, N, K, key="bench_residual_sumsq"):
    import torch

    from coda_ir.runtime.gemm_launch import launch_gemm

    def extra(cfg):
        out = torch.empty(M, N, device=x.device, dtype=x.dtype)
        part = torch.empty(M, -(-N // cfg.bn), device=x.device, dtype=torch.float32)
        return [res, out, part, res.stride(0), out.stride(0), part.stride(0)]

    _, ex = launch_gemm(k, x, w, extra, M=M, N=N, K=K, transpose_a=False, transpose_b=True, key=key)
    return ex[1], ex[2]


def run_swiglu(k, x, w, M, N, K, key="bench_swiglu"):
    import torch

    from coda_ir.runtime.gemm_launch import launch_gemm

    h = N // 2

    def extra(cfg):
        o = torch.empty(M, h, device=x.device, dtype=x.dtype)
        return [o, o.stride(0)]

    _, ex = launch_gemm(k, x, w, extra, M=M, N=N, K=K, transpose_a=False, transpose_b=True,
                        interleave=h, bn_multiple_of=2, key=key)
    return ex[0]


# ------------------------------------------------------------------------------ checks


def rel_err(out, ref) -> float:
    import torch

    out = out.double()
    if torch.isnan(out).any():
        return float("nan")
    return ((out - ref).norm() / ref.norm()).item()


def checks(ks, dev, dtype, shapes, ragged, log) -> list[dict]:
    import torch

    from coda_ir.runtime import gemm_launch

    results = []
    tol = 1e-2

    def record(name, err, path=None, extra=None):
        row = {"check": name, "rel_err": err, "path": path or gemm_launch.LAST_LAUNCH.get("path"),
               "ok": bool(err == err and err < tol)}
        if extra:
            row.update(extra)
        results.append(row)
        log(f"check {name:48s} path={row['path']:9s} rel_err={err:.2e} {'ok' if row['ok'] else 'FAIL'}")

    def poison(t):
        # Poison the allocator's next blocks so unwritten outputs show as NaN.
        torch.empty(t, device=dev, dtype=dtype).fill_(float("nan"))

    g = torch.Generator(device=dev).manual_seed(int(time.time()))
    rnd = lambda *s: torch.randn(*s, device=dev, generator=g).to(dtype)  # noqa: E731
    for M, N, K in shapes:
        x, w = rnd(M, K), rnd(N, K)
        ref = x.double() @ w.double().T
        poison((M, N))
        record(f"plain {M}x{N}x{K}", rel_err(run_plain(ks["plain"], x, w, M, N, K), ref))
        poison((M, N))
        record(f"plain_cs {M}x{N}x{K}", rel_err(run_plain(ks["plain_cs"], x, w, M, N, K, key="bench_plain_cs"), ref))
        if dev != "cpu":
            record(f"cublas {M}x{N}x{K}", rel_err(x @ w.T, ref), path="cublas")
        del ref
    from coda_ir.runtime import config

    before = config.configure(autotune="off")  # edge cases: correctness only, first candidate
    try:
        for (M, N, K), ta, tb in ragged:
            a = rnd(K, M) if ta else rnd(M, K)
            b = rnd(N, K) if tb else rnd(K, N)
            ref = (a.double().T if ta else a.double()) @ (b.double().T if tb else b.double())
            poison((M, N))
            out = run_plain(ks["plain"], a, b, M, N, K, transpose_a=ta, transpose_b=tb)
            record(f"ragged {M}x{N}x{K} tA={int(ta)} tB={int(tb)}", rel_err(out, ref))
    finally:
        config.configure(before)
    return results


# residual_sumsq_pf (L2 prefetch) and residual_sumsq_early (register prefetch) measured slower
# (bench/RESULTS.md); they stay defined for reproduction but are not run by default.
RESIDUAL_VARIANTS = ("residual_sumsq", "residual_sumsq_stream")


def fused_checks(ks, dev, dtype, M, N_res, K_res, N_glu, K_glu, log, results):
    import torch

    from coda_ir.runtime import gemm_launch

    def poison(shape):
        torch.empty(shape, device=dev, dtype=dtype).fill_(float("nan"))

    g = torch.Generator(device=dev).manual_seed(int(time.time()) + 1)
    rnd = lambda *s: torch.randn(*s, device=dev, generator=g).to(dtype)  # noqa: E731
    tol = 1e-2
    x, w, res = rnd(M, K_res), rnd(N_res, K_res), rnd(M, N_res)
    y_ref = res.double() + x.double() @ w.double().T
    out, part = run_residual(ks["residual_sumsq"], x, w, res, M, N_res, K_res)
    e1 = rel_err(out, y_ref)
    e2 = rel_err(part.sum(1), (out.double() ** 2).sum(1))
    for name, e in ((f"residual {M}x{N_res}x{K_res} out", e1), (f"residual {M}x{N_res}x{K_res} sumsq", e2)):
        results.append({"check": name, "rel_err": e, "ok": bool(e == e and e < tol)})
        log(f"check {name:48s} rel_err={e:.2e} {'ok' if e == e and e < tol else 'FAIL'}")
    for v in RESIDUAL_VARIANTS[1:]:
        out, part = run_residual(ks[v], x, w, res, M, N_res, K_res, key=f"bench_{v}")
        for name, e in ((f"{v} {M}x{N_res}x{K_res} out", rel_err(out, y_ref)),
                        (f"{v} {M}x{N_res}x{K_res} sumsq", rel_err(part.sum(1), (out.double() ** 2).sum(1)))):
            results.append({"check": name, "rel_err": e, "ok": bool(e == e and e < tol)})
            log(f"check {name:48s} rel_err={e:.2e} {'ok' if e == e and e < tol else 'FAIL'}")
    del y_ref
    x, w = rnd(M, K_glu), rnd(N_glu, K_glu)
    h = N_glu // 2
    gte = x.double() @ w[:h].double().T
    up = x.double() @ w[h:].double().T
    ref = gte * torch.sigmoid(gte) * up
    del gte, up
    natural = x.double() @ w.double().T
    cols = torch.arange(N_glu, device=dev)
    perm = (cols // (2 * h)) * (2 * h) + (cols % (2 * h)) // 2 + (cols % 2) * h
    poison((M, N_glu))
    e = rel_err(run_plain_il(ks["plain_il"], x, w, M, N_glu, K_glu), natural[:, perm])
    del natural
    name = f"plain_il {M}x{N_glu}x{K_glu}"
    results.append({"check": name, "rel_err": e, "ok": bool(e == e and e < tol)})
    log(f"check {name:48s} rel_err={e:.2e} {'ok' if e == e and e < tol else 'FAIL'} {gemm_launch.LAST_LAUNCH['config']}")
    if dev != "cpu":
        # Both interleave mainloops explicitly, whatever the tuner picks: two half dots, and
        # the rank-4 paired descriptor; ragged M and K.
        from coda_ir.runtime.gemm_launch import GemmConfig, launch_gemm

        hh, Mr, Kr = 1024, 1000, 1064
        xr, wr = rnd(Mr, Kr), rnd(2 * hh, Kr)
        nat = xr.double() @ wr.double().T
        c2 = torch.arange(2 * hh, device=dev)
        ref_il = nat[:, (c2 % 2) * hh + c2 // 2]
        for pairs in (False, True):
            cfg = GemmConfig(128, 256, 64, 8, num_warps=8, num_stages=3, tma=True, b_pairs=pairs)
            c = torch.full((Mr, 2 * hh), float("nan"), device=dev, dtype=dtype)
            launch_gemm(ks["plain_il"], xr, wr, lambda cfg: [c, c.stride(0)], M=Mr, N=2 * hh, K=Kr,
                        transpose_a=False, transpose_b=True, interleave=hh, bn_multiple_of=2, config=cfg)
            e = rel_err(c, ref_il)
            name = f"plain_il {Mr}x{2 * hh}x{Kr} b_pairs={int(pairs)}"
            results.append({"check": name, "rel_err": e, "ok": bool(e == e and e < tol)})
            log(f"check {name:48s} rel_err={e:.2e} {'ok' if e == e and e < tol else 'FAIL'}")
    for variant in ("swiglu", "swiglu_split"):
        e = rel_err(run_swiglu(ks[variant], x, w, M, N_glu, K_glu, key=f"bench_{variant}"), ref)
        name = f"{variant} {M}x{N_glu}x{K_glu}"
        results.append({"check": name, "rel_err": e, "ok": bool(e == e and e < tol)})
        log(f"check {name:48s} rel_err={e:.2e} {'ok' if e == e and e < tol else 'FAIL'}")


# ------------------------------------------------------------------------------ timing


def resources(compiled) -> dict:
    out = {}
    for attr in ("n_regs", "n_spills"):
        out[attr] = getattr(compiled, attr, None)
    md = getattr(compiled, "metadata", None)
    out["shared_bytes"] = getattr(md, "shared", None)
    try:
        sass = compiled.asm["sass"]
        out["sass_hgmma"] = sass.count("HGMMA")
        out["sass_hmma"] = sass.count("HMMA")
        out["sass_local"] = sass.count("LDL") + sass.count("STL")
    except Exception as exc:  # nvdisasm missing, or the Triton lacks asm['sass']
        out["sass"] = f"unavailable: {type(exc).__name__}"
    return out


def side_by_side(fns: dict, rounds: int = 5, rep: int = 60) -> dict:
    """Median over `rounds` of each fn's do_bench median, the order rotating every round (a
    hot GPU's clocks drift: back-to-back blocks would favour whoever runs first)."""
    from triton.testing import do_bench

    names = list(fns)
    per: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for n in order:
            per[n].append(do_bench(fns[n], warmup=10, rep=rep, return_mode="median"))
    out = {n: sorted(v)[len(v) // 2] for n, v in per.items()}
    out["_rounds"] = per
    return out


def ratio_median(per: dict, num: str, den: str) -> float:
    """Median over rounds of num/den (times), each pair taken in the same round."""
    rs = sorted(a / b for a, b in zip(per[num], per[den]))
    return rs[len(rs) // 2]


def _cfg_dict(info):
    import dataclasses

    return dataclasses.asdict(info["config"])


def timings(ks, dev, dtype, log, quick=False) -> dict:
    import torch

    from coda_ir.runtime import gemm_launch

    g = torch.Generator(device=dev).manual_seed(1234)
    rnd = lambda *s: torch.randn(*s, device=dev, generator=g).to(dtype)  # noqa: E731
    rounds = 3 if quick else 7
    rows = {"plain": [], "fused": []}
    for M, N, K in SHAPES_8B:
        x, w = rnd(M, K), rnd(N, K)
        flops = 2.0 * M * N * K
        t0 = time.time()
        run_plain(ks["plain"], x, w, M, N, K)  # tunes once (cached)
        row = {"shape": [M, N, K], "tune_s": time.time() - t0}
        info = dict(gemm_launch.LAST_LAUNCH)
        run_plain(ks["plain_cs"], x, w, M, N, K, key="bench_plain_cs")
        row["cs_config"] = _cfg_dict(gemm_launch.LAST_LAUNCH)
        fns = {"cublas": lambda: torch.matmul(x, w.T),
               "coda": lambda: run_plain(ks["plain"], x, w, M, N, K),
               "coda_cs": lambda: run_plain(ks["plain_cs"], x, w, M, N, K, key="bench_plain_cs")}
        if not quick:
            # a diagnostic: fewer compiles (the launch options, restored below)
            saved = gemm_launch.set_launch_options(dataclasses.replace(gemm_launch.launch_options(), tma_candidates=(0, 1, 2)))
            try:
                run_plain_tmastore(ks["plain_tmastore"], x, w, M, N, K)
                row["tmastore_config"] = _cfg_dict(gemm_launch.LAST_LAUNCH)
                fns["coda_tmastore"] = lambda: run_plain_tmastore(ks["plain_tmastore"], x, w, M, N, K)
            except Exception as exc:
                row["coda_tmastore"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            finally:
                gemm_launch.set_launch_options(saved)
        t = side_by_side(fns, rounds)
        row.update({
            "cublas_ms": t["cublas"], "coda_ms": t["coda"], "coda_tmastore_ms": t.get("coda_tmastore"),
            "coda_cs_ms": t["coda_cs"], "ratio_cs": 1.0 / ratio_median(t["_rounds"], "coda_cs", "cublas"),
            "cublas_tflops": flops / t["cublas"] / 1e9, "coda_tflops": flops / t["coda"] / 1e9,
            "ratio_throughput": 1.0 / ratio_median(t["_rounds"], "coda", "cublas"),
            "rounds_ms": t["_rounds"], "path": info.get("path"), "config": _cfg_dict(info),
            "resources": resources(info.get("compiled")),
        })
        rows["plain"].append(row)
        log(f"plain {M}x{N}x{K}: cublas {t['cublas']:.3f} ms, coda {t['coda']:.3f} ms "
            f"({row['ratio_throughput']:.3f}x), .cs store {t['coda_cs']:.3f} ({row['ratio_cs']:.3f}x), "
            f"tmastore {t.get('coda_tmastore')}, {row['config']}, {row['resources']}")
        del x, w
        torch.cuda.empty_cache()

    # Fused epilogues vs the plain cuBLAS GEMM of the same shape, and vs eager unfused.
    M = 8192
    for N, K in ((4096, 4096), (4096, 14336)):
        x, w, res = rnd(M, K), rnd(N, K), rnd(M, N)
        fns = {"cublas": lambda: torch.matmul(x, w.T)}
        infos = {}
        for variant in RESIDUAL_VARIANTS:
            run_residual(ks[variant], x, w, res, M, N, K, key=f"bench_{variant}")
            infos[variant] = dict(gemm_launch.LAST_LAUNCH)
            fns[variant] = (lambda v: lambda: run_residual(ks[v], x, w, res, M, N, K, key=f"bench_{v}"))(variant)

        def eager():
            y = res + x @ w.T
            return y, y.float().pow(2).sum(1)

        fns["eager"] = eager
        t = side_by_side(fns, rounds)
        for variant, info in infos.items():
            rows["fused"].append({
                "kernel": variant, "shape": [M, N, K], "cublas_ms": t["cublas"], "fused_ms": t[variant],
                "eager_ms": t["eager"], "ratio_vs_cublas_time": ratio_median(t["_rounds"], variant, "cublas"),
                "rounds_ms": t["_rounds"], "path": info.get("path"), "config": _cfg_dict(info),
                "resources": resources(info.get("compiled")),
            })
            log(f"{variant} {M}x{N}x{K}: cublas {t['cublas']:.3f} fused {t[variant]:.3f} "
                f"({rows['fused'][-1]['ratio_vs_cublas_time']:.3f}x) eager {t['eager']:.3f} {rows['fused'][-1]['config']}")
        del x, w, res
    N, K = 28672, 4096
    x, w = rnd(M, K), rnd(N, K)
    fns = {"cublas": lambda: torch.matmul(x, w.T)}
    infos = {}
    run_plain(ks["plain"], x, w, M, N, K)
    infos["plain"] = dict(gemm_launch.LAST_LAUNCH)
    fns["plain"] = lambda: run_plain(ks["plain"], x, w, M, N, K)
    run_plain_il(ks["plain_il"], x, w, M, N, K)
    infos["plain_il"] = dict(gemm_launch.LAST_LAUNCH)
    fns["plain_il"] = lambda: run_plain_il(ks["plain_il"], x, w, M, N, K)
    for variant in ("swiglu", "swiglu_split"):
        run_swiglu(ks[variant], x, w, M, N, K, key=f"bench_{variant}")
        infos[variant] = dict(gemm_launch.LAST_LAUNCH)
        fns[variant] = (lambda v: lambda: run_swiglu(ks[v], x, w, M, N, K, key=f"bench_{v}"))(variant)

    def eager_glu():
        gu = x @ w.T
        return torch.nn.functional.silu(gu[:, : N // 2]) * gu[:, N // 2 :]

    fns["eager"] = eager_glu
    t = side_by_side(fns, rounds)
    for variant, info in infos.items():
        rows["fused"].append({
            "kernel": variant + ("" if variant.startswith("plain") else " (interleaved 2->1)"), "shape": [M, N, K], "cublas_ms": t["cublas"],
            "fused_ms": t[variant], "eager_ms": t["eager"],
            "ratio_vs_cublas_time": ratio_median(t["_rounds"], variant, "cublas"), "rounds_ms": t["_rounds"],
            "path": info.get("path"), "config": _cfg_dict(info), "resources": resources(info.get("compiled")),
        })
        log(f"{variant} {M}x{N}x{K}: cublas {t['cublas']:.3f} fused {t[variant]:.3f} "
            f"({rows['fused'][-1]['ratio_vs_cublas_time']:.3f}x) eager {t['eager']:.3f} {rows['fused'][-1]['config']}")
    return rows


# Real-shape coda programs (examples/coda) and their reference parameters.
CODA_PROGRAMS = {
    "llama_fwd": dict(eps=1e-5, theta=500000.0, head_dim=128, rotary_heads=40),
    "llama_bwd": dict(theta=500000.0, head_dim=128, rotary_heads=40),
}


def _coda_inputs(name: str, refs, dev: str, seed: int = 0) -> list:
    """8B-shape inputs: llama_block's (examples/llama_block.mlir) for the forward; the backward's
    saved tensors from the forward's fp32 reference (as references.make_inputs does)."""
    import torch

    from coda_ir.testing import random_inputs

    fwd = [t.to(dev) for t in random_inputs(ROOT / "examples" / "llama_block.mlir", seed)]
    if name == "llama_fwd":
        return fwd
    x0, y0, wo, wn0, wgu, wd, wn1, wqkv, pos = fwd
    with torch.device(dev):
        x2, qkv, x1, z1, rstd1, rstd2 = refs.llama_fwd(*fwd, compute=torch.float32, **CODA_PROGRAMS["llama_fwd"])
    g = torch.Generator(device=dev).manual_seed(seed + 1000)
    dqkv = torch.randn(qkv.shape, generator=g, device=dev).to(qkv.dtype)
    dx2 = torch.randn(x2.shape, generator=g, device=dev).to(x2.dtype)
    return [dqkv, dx2, qkv, x1, x2, z1, rstd1, rstd2, y0, pos, wo, wgu, wd, wqkv, wn0, wn1]


def _eager_program(name: str, inputs: list, dev: str):
    """The same computation unfused in PyTorch eager, as a timed closure (GPU runs only).

    llama_fwd: bench_block's idiomatic eager block (bf16 GEMMs, fp32 RMSNorm, RoPE).
    llama_bwd: autograd's backward through that eager block, from the program's upstream
    gradients (dqkv, dx2) to the gradients the program returns (dx0, dy0 and the six weights'),
    with the forward's graph built once outside the timed region (what eager training saves).
    """
    import torch

    if dev == "cpu" or name not in ("llama_fwd", "llama_bwd"):
        return None
    from bench.bench_block import llama_block_eager

    from coda_ir.testing import random_inputs

    props = {k: v for k, v in CODA_PROGRAMS["llama_fwd"].items()}
    if name == "llama_fwd":
        return lambda: llama_block_eager(*inputs, **props)
    fwd = [t.to(dev) for t in random_inputs(ROOT / "examples" / "llama_block.mlir", 0)]
    *floats, pos = fwd
    leaves = [t.detach().requires_grad_() for t in floats]
    x2, qkv = llama_block_eager(*leaves, pos, **props)
    dqkv, dx2 = inputs[0], inputs[1]

    def eager_backward():
        torch.autograd.grad((x2, qkv), leaves, (dx2, dqkv), retain_graph=True)

    return eager_backward


def bench_coda(log, dev: str = "cuda", rounds: int = 5, out_dir: Path | None = None) -> list[dict]:
    """The coda-lowered LLaMA-block kernels at 8B shapes (examples/coda), on the GPU.

    Each program is compiled with `coda_ir.compile`, run once (autotuning every GEMM kernel),
    checked against tests/programs/coda/references.py (float64 and the fp32/rounded-store bar of
    `coda_ir.testing.check_close`, computed on the GPU), then every GEMM launch it made is
    replayed and timed side by side with the plain cuBLAS GEMM of the same shape and
    transposes, and the whole function against the sum of those plain GEMMs.
    """
    import torch

    try:
        import coda_ir
        from coda_ir.runtime import gemm_launch
        from coda_ir.testing import check_close
    except Exception as exc:
        log(f"--coda: coda_ir not importable ({exc})")
        return []
    if not hasattr(coda_ir, "compile"):
        log("--coda: coda_ir.compile not available yet; skipped")
        return []
    sys.path.insert(0, str(ROOT / "tests" / "programs" / "coda"))
    import references as refs

    out = []

    def save():  # partial results survive a run cut off at its time limit
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "bench_coda.json").write_text(json.dumps(out, indent=1, default=str))

    only = os.environ.get("CODA_BENCH_PROGRAMS")  # e.g. "llama_bwd"
    for name, params in CODA_PROGRAMS.items():
        if only and name not in only.split(","):
            continue
        row: dict = {"program": name}
        out.append(row)
        try:
            t0 = time.time()
            small = dev == "cpu"  # the smoke test: small programs through the interpreter
            src_dir = ROOT / ("tests/programs/coda" if small else "examples/coda")
            mod = coda_ir.compile((src_dir / f"{name}.mlir").read_text())
            row["compile_s"] = time.time() - t0
            if small:
                params = {}
                inputs = refs.make_inputs(name)
            else:
                inputs = _coda_inputs(name, refs, dev)
            gen = mod.module(interpret=small)
            real = gemm_launch.launch_gemm
            launches = []

            def recorder(kernel, a, b, extra_args_for, **kw):
                launches.append((kernel, a, b, extra_args_for, kw))
                return real(kernel, a, b, extra_args_for, **kw)

            gen.launch_gemm = recorder
            t0 = time.time()
            try:
                outs = getattr(mod, name)(*inputs)
                if not small:
                    torch.cuda.synchronize()
            finally:
                gen.launch_gemm = real
            row["first_call_s"] = time.time() - t0  # compile + autotune of every kernel
            log(f"--coda {name}: compiled in {row['compile_s']:.1f} s, first call (Triton compile + "
                f"autotune of {len(launches)} GEMMs) {row['first_call_s']:.1f} s")
            outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
            with torch.device(dev):
                r64 = refs.PROGRAMS[name].reference(*inputs, compute=torch.float64, **params)
                rT = refs.PROGRAMS[name].reference(*inputs, compute=torch.float32, **params)
            checks = []
            for oname, o, a64, aT in zip(refs.PROGRAMS[name].outputs, outs, r64, rT):
                ok, err, bound = check_close(o, a64, aT)
                checks.append({"output": oname, "ok": bool(ok), "max_err": err, "bound": bound})
                log(f"--coda check {name}.{oname}: {'ok' if ok else 'FAIL'} max|err| {err:.3e} bound {bound:.3e}")
            row["checks"] = checks
            del r64, rT
            if small:
                row["launches"] = [[kw["M"], kw["N"], kw["K"]] for *_, kw in launches]
                continue
            torch.cuda.empty_cache()

            kernels, plain = [], []
            for kernel, a, b, xf, kw in launches:
                A = a.T if kw["transpose_a"] else a
                B = b.T if kw["transpose_b"] else b
                plain.append((A, B))
                info = {}

                def fused(kernel=kernel, a=a, b=b, xf=xf, kw=kw):
                    real(kernel, a, b, xf, **kw)
                    info.update(gemm_launch.LAST_LAUNCH)

                fused()
                t = side_by_side({"cublas": lambda A=A, B=B: torch.matmul(A, B), "fused": fused}, rounds)
                k = {
                    "kernel": getattr(getattr(kernel, "fn", None), "__name__", str(kernel)),
                    "shape": [kw["M"], kw["N"], kw["K"]], "transpose_a": kw["transpose_a"],
                    "transpose_b": kw["transpose_b"], "interleave": kw.get("interleave", 0),
                    "cublas_ms": t["cublas"], "fused_ms": t["fused"],
                    "ratio_vs_cublas_time": ratio_median(t["_rounds"], "fused", "cublas"),
                    "path": info.get("path"), "config": _cfg_dict(info),
                    "resources": resources(info.get("compiled")),
                }
                kernels.append(k)
                row["kernels"] = kernels
                save()
                log(f"--coda {name} {k['kernel']} {k['shape']} tA={int(k['transpose_a'])} tB={int(k['transpose_b'])} "
                    f"il={k['interleave']}: cublas {t['cublas']:.3f} fused {t['fused']:.3f} "
                    f"({k['ratio_vs_cublas_time']:.3f}x) {k['config']} {k['resources']}")
            row["kernels"] = kernels
            fn = getattr(mod, name)

            def gemms():
                for A, B in plain:
                    torch.matmul(A, B)

            eager = _eager_program(name, inputs, dev)
            fns = {"gemms": gemms, "coda": lambda: fn(*inputs)}
            if eager is not None:
                fns["eager"] = eager
            t = side_by_side(fns, rounds)
            row.update(sum_gemms_ms=t["gemms"], coda_ms=t["coda"],
                       ratio_vs_gemms=ratio_median(t["_rounds"], "coda", "gemms"))
            if eager is not None:
                row.update(eager_ms=t["eager"], ratio_vs_eager=ratio_median(t["_rounds"], "coda", "eager"))
            log(f"--coda {name} whole function: plain cuBLAS GEMMs {t['gemms']:.3f} ms, coda {t['coda']:.3f} ms "
                f"({row['ratio_vs_gemms']:.3f}x, {mod.kernel_count(name)} launches)"
                + (f", eager {t['eager']:.3f} ms (coda/eager {row['ratio_vs_eager']:.3f})" if eager is not None else ""))
            del eager
            del inputs, outs, launches, plain
            torch.cuda.empty_cache()
            save()
        except Exception as exc:
            import traceback

            row["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
            log(f"--coda {name}: {row['error']}\n{traceback.format_exc()[-1500:]}")
            save()
    return out


def probe_warp_specialize(log) -> bool:
    """Compile and run the warp-specialized candidate in a child process (a crash stays there)."""
    code = (
        "import os,sys,tempfile,pathlib,torch;sys.path.insert(0,%r);"
        "os.environ['CODA_AUTOTUNE']='0';"
        "import bench.bench_mainloop as b;from coda_ir.runtime import gemm_launch as gl;"
        "gl.set_launch_options(tma_candidates=(3,));"
        "ks=b.build_kernels(pathlib.Path(tempfile.mkdtemp()));"
        "x=torch.randn(1024,512,device='cuda').bfloat16();w=torch.randn(768,512,device='cuda').bfloat16();"
        "c=b.run_plain(ks['plain'],x,w,1024,768,512);"
        "e=b.rel_err(c,x.double()@w.double().T);print('WSPROBE',gl.LAST_LAUNCH['config'].warp_specialize,e);"
        "sys.exit(0 if gl.LAST_LAUNCH['config'].warp_specialize and e<1e-2 else 3)" % str(ROOT)
    )
    env = dict(os.environ, CODA_CACHE_DIR=tempfile.mkdtemp())
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env)
        ok = r.returncode == 0
        log(f"warp_specialize probe: rc={r.returncode} {r.stdout.strip()[-200:]} {r.stderr.strip()[-600:] if not ok else ''}")
    except subprocess.TimeoutExpired:
        ok = False
        log("warp_specialize probe: timed out")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny shapes, checks only")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, no TMA-store variant")
    ap.add_argument("--coda", action="store_true", help="also the coda-lowered kernels (8B shapes, GPU)")
    ap.add_argument("--coda-only", action="store_true", help="only the coda-lowered kernels")
    ap.add_argument("--no-ws-probe", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import triton

    from coda_ir import tiling
    from coda_ir.runtime import gemm_launch
    from coda_ir.lowering.mainloop import range_features

    if args.smoke:
        gemm_launch.set_launch_options(path="tma")  # the interpreter runs the TMA path's indexing too

    lines: list[str] = []

    def log(msg):
        print(msg, flush=True)
        lines.append(msg)

    dev = "cpu" if args.smoke else "cuda"
    env = {
        "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "torch": torch.__version__, "triton": triton.__version__,
        "gpu": torch.cuda.get_device_name() if dev == "cuda" else "cpu (interpreter)",
        "tensor_descriptor": gemm_launch.tensor_descriptor_class() is not None,
        "range_features": sorted(range_features()),
        "cache": str(gemm_launch.cache_path()),
    }
    log(json.dumps(env))
    if dev == "cuda" and not args.no_ws_probe and "warp_specialize" in range_features():
        if not probe_warp_specialize(log):
            keep = tuple(i for i, c in enumerate(tiling.TMA_CANDIDATES) if not c.warp_specialize)
            gemm_launch.set_launch_options(dataclasses.replace(gemm_launch.launch_options(), tma_candidates=keep))
            env["warp_specialize"] = "disabled: probe failed"
    ks = build_kernels(Path(tempfile.mkdtemp()))
    dtype = torch.bfloat16
    if args.coda_only:
        results = []
        report = {"env": env, "checks": results}
    elif args.smoke:
        shapes = [(96, 64, 80)]
        ragged = [((37, 40, 24), False, True), ((40, 24, 32), True, False), ((33, 35, 29), False, True)]
        results = checks(ks, dev, dtype, shapes, ragged, log)
        fused_checks(ks, dev, dtype, 72, 64, 48, 128, 40, log, results)
        report = {"env": env, "checks": results}
    else:
        ragged = [((1000, 1000, 1064), False, True), ((1000, 1000, 1064), True, False),
                  ((1000, 1000, 1064), True, True), ((1000, 1000, 1064), False, False),
                  ((777, 1000, 1001), False, True), ((8192, 4096, 4096 + 8), False, True)]
        results = checks(ks, dev, dtype, SHAPES_8B, ragged, log)
        fused_checks(ks, dev, dtype, 8192, 4096, 4096, 28672, 4096, log, results)
        report = {"env": env, "checks": results}
        if not all(r["ok"] for r in results):
            log("CORRECTNESS FAILURES: timings still run, but do not trust them")
        report["timings"] = timings(ks, dev, dtype, log, quick=args.quick)
    if args.coda or args.coda_only:
        report["coda"] = bench_coda(log, dev, out_dir=Path(args.out))
        for prog in report["coda"]:
            for c in prog.get("checks", []):
                results.append({"check": f"coda {prog['program']}.{c['output']}", "rel_err": c["max_err"], "ok": c["ok"]})
            if "error" in prog:
                results.append({"check": f"coda {prog['program']}", "rel_err": float("nan"), "ok": False})
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench_mainloop.json").write_text(json.dumps(report, indent=1, default=str))
    (out_dir / "bench_mainloop.log").write_text("\n".join(lines) + "\n")
    cache = gemm_launch.cache_path()
    if cache.exists():
        (out_dir / "autotune.json").write_text(cache.read_text())
    # The short table, last.
    print(f"\n{env['gpu']} torch {env['torch']} triton {env['triton']} {env['date_utc']}")
    bad = [r["check"] for r in results if not r["ok"]]
    print(f"checks: {len(results) - len(bad)}/{len(results)} ok" + (f"; FAILED: {bad}" if bad else ""))
    if "timings" in report:
        print(f"{'M x N x K':22s} {'cuBLAS ms':>10s} {'coda ms':>9s} {'cuBLAS TF/s':>11s} {'coda TF/s':>9s} {'ratio':>6s} {'.cs':>6s}  config (ratio: cuBLAS time / coda time, median of rounds; .cs: streaming store)")
        for r in report["timings"]["plain"]:
            c = r["config"]
            cfg = f"{c['bm']}x{c['bn']}x{c['bk']} w{c['num_warps']} s{c['num_stages']}" + (" fl" if c["flatten"] else "") + (" ws" if c["warp_specialize"] else "")
            print(f"{'x'.join(map(str, r['shape'])):22s} {r['cublas_ms']:10.3f} {r['coda_ms']:9.3f} {r['cublas_tflops']:11.0f} {r['coda_tflops']:9.0f} {r['ratio_throughput']:6.3f} {r['ratio_cs']:6.3f}  {cfg} {r['path']}")
        print(f"{'fused kernel':36s} {'M x N x K':18s} {'cuBLAS ms':>9s} {'fused ms':>9s} {'eager ms':>9s} {'fused/cuBLAS':>12s}")
        for r in report["timings"]["fused"]:
            print(f"{r['kernel']:36s} {'x'.join(map(str, r['shape'])):18s} {r['cublas_ms']:9.3f} {r['fused_ms']:9.3f} {r['eager_ms']:9.3f} {r['ratio_vs_cublas_time']:12.3f}")
    for prog in report.get("coda", []):
        if "kernels" in prog:
            print(f"coda {prog['program']}: whole function {prog.get('coda_ms', float('nan')):.3f} ms vs plain cuBLAS GEMMs "
                  f"{prog.get('sum_gemms_ms', float('nan')):.3f} ms ({prog.get('ratio_vs_gemms', float('nan')):.3f}x)")
            for k in prog["kernels"]:
                print(f"  {k['kernel']:28s} {'x'.join(map(str, k['shape'])):18s} tA={int(k['transpose_a'])} tB={int(k['transpose_b'])} "
                      f"cuBLAS {k['cublas_ms']:.3f} fused {k['fused_ms']:.3f} ratio {k['ratio_vs_cublas_time']:.3f}")
        elif "error" in prog:
            print(f"coda {prog['program']}: {prog['error'][:200]}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
