"""Experiment: two costs seen in the coda-lowered llama_fwd kernels (bench/RESULTS.md), each as
generated and rewritten, one fixed config, side by side with cuBLAS at the same shape:

* F1 (out-proj + residual, scale, sumsq partials), 8192x4096x4096: generated order keeps t_x and
  t_h ([BM, BN] fp32 each) live together (174 spills at 128x256); rewritten: store x1 and the
  partials first, then compute and store h1.
* F2 (gate/up, interleave h = 14336, rstd scale, SwiGLU), 8192x28672x4096: generated z1 store at
  perm(c) scatters pairs of columns h apart; rewritten: the tile's even/odd columns are two
  contiguous runs of BN/2 natural columns, stored as two coalesced half tiles.

    python bench/exp_epilogue_stores.py    # on the GPU; JSON to $OUT/exp_epilogue_stores.json
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import bench.bench_mainloop as bm  # noqa: E402
from coda_ir.lowering import gemm_launch as gl  # noqa: E402
from coda_ir.lowering.gemm_launch import GemmConfig, launch_gemm  # noqa: E402
from coda_ir.lowering.mainloop import emit_gemm_kernel, interleave_rows_source  # noqa: E402

F1_PARAMS = ["res_ptr", "g_ptr", "x1_ptr", "h1_ptr", "ss1_ptr"]
F1_GENERATED = [  # as coda_ir/lowering/triton.py emitted it (bf16 rounding inlined)
    "    mask_mn = mask_m[:, None] & mask_n[None, :]",
    "    rows64 = offs_m.to(tl.int64)",
    "    t_x = acc + tl.load(res_ptr + rows64[:, None] * 4096 + offs_n[None, :], mask=mask_mn, other=0).to(tl.float32)",
    "    t_h = t_x * tl.load(g_ptr + offs_n, mask=mask_n, other=0).to(tl.float32)[None, :]",
    "    rm = tl.where(mask_mn, t_x * t_x, 0.0)",
    "    p_ss = tl.sum(rm, axis=1)",
    "    tl.store(x1_ptr + rows64[:, None] * 4096 + offs_n[None, :], t_x.to(tl.bfloat16), mask=mask_mn)",
    "    tl.store(h1_ptr + rows64[:, None] * 4096 + offs_n[None, :], t_h.to(tl.bfloat16), mask=mask_mn)",
    "    tl.store(ss1_ptr + rows64 * tl.cdiv(N, BN) + pid_n, p_ss, mask=mask_m)",
]
F1_REORDERED = [
    "    mask_mn = mask_m[:, None] & mask_n[None, :]",
    "    rows64 = offs_m.to(tl.int64)",
    "    t_x = acc + tl.load(res_ptr + rows64[:, None] * 4096 + offs_n[None, :], mask=mask_mn, other=0).to(tl.float32)",
    "    tl.store(x1_ptr + rows64[:, None] * 4096 + offs_n[None, :], t_x.to(tl.bfloat16), mask=mask_mn)",
    "    rm = tl.where(mask_mn, t_x * t_x, 0.0)",
    "    tl.store(ss1_ptr + rows64 * tl.cdiv(N, BN) + pid_n, tl.sum(rm, axis=1), mask=mask_m)",
    "    t_h = t_x * tl.load(g_ptr + offs_n, mask=mask_n, other=0).to(tl.float32)[None, :]",
    "    tl.store(h1_ptr + rows64[:, None] * 4096 + offs_n[None, :], t_h.to(tl.bfloat16), mask=mask_mn)",
]
F2_PARAMS = ["r_ptr", "z1_ptr", "y1_ptr"]
F2_GENERATED = [
    "    t_z = acc * tl.load(r_ptr + offs_m, mask=mask_m, other=0)[:, None]",
    "    cols_n = _coda_interleave_rows(offs_n, 14336)",
    "    mask_mn = mask_m[:, None] & mask_n[None, :]",
    "    pw = tl.permute(tl.reshape(t_z, (BM, (BN // 2), 2, 1)), (0, 1, 3, 2))",
    "    pa, pb = tl.split(pw)",
    "    s3 = (pa / (1.0 + tl.exp(-pa))) * pb",
    "    cols_w = pid_n * (BN // 2) + tl.arange(0, (BN // 2))",
    "    mask_mw = mask_m[:, None] & (cols_w < 14336)[None, :]",
    "    t_y = tl.reshape(s3, (BM, (BN // 2)))",
    "    rows64 = offs_m.to(tl.int64)",
    "    tl.store(z1_ptr + rows64[:, None] * 28672 + cols_n[None, :], t_z.to(tl.bfloat16), mask=mask_mn)",
    "    tl.store(y1_ptr + rows64[:, None] * 14336 + cols_w[None, :], t_y.to(tl.bfloat16), mask=mask_mw)",
]
F2_HALVES = [
    "    r = tl.load(r_ptr + offs_m, mask=mask_m, other=0)[:, None]",
    "    z_lo = acc_lo * r",
    "    z_hi = acc_hi * r",
    "    rows64 = offs_m.to(tl.int64)",
    "    n0 = pid_n * BN",
    "    cols_h = (n0 // (2 * INTERLEAVE)) * (2 * INTERLEAVE) + (n0 % (2 * INTERLEAVE)) // 2 + tl.arange(0, BN // 2)",
    "    mask_h = mask_m[:, None] & (cols_h < N)[None, :]",
    "    tl.store(z1_ptr + rows64[:, None] * 28672 + cols_h[None, :], z_lo.to(tl.bfloat16), mask=mask_h)",
    "    tl.store(z1_ptr + rows64[:, None] * 28672 + (cols_h + INTERLEAVE)[None, :], z_hi.to(tl.bfloat16), mask=mask_h)",
    "    y = (z_lo / (1.0 + tl.exp(-z_lo))) * z_hi",
    "    cols_w = pid_n * (BN // 2) + tl.arange(0, (BN // 2))",
    "    tl.store(y1_ptr + rows64[:, None] * 14336 + cols_w[None, :], y.to(tl.bfloat16),",
    "             mask=mask_m[:, None] & (cols_w < 14336)[None, :])",
]


def build():
    lines = ["import triton", "import triton.language as tl", "", *interleave_rows_source(), ""]
    for name, params, epi in (("f1_gen", F1_PARAMS, F1_GENERATED), ("f1_reord", F1_PARAMS, F1_REORDERED),
                              ("f2_gen", F2_PARAMS, F2_GENERATED), ("f2_halves", F2_PARAMS, F2_HALVES)):
        lines += [*emit_gemm_kernel(name, params, epi, float32_operands=False), ""]
    path = Path(tempfile.mkdtemp()) / f"exp_{uuid.uuid4().hex[:8]}.py"
    path.write_text("\n".join(lines))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod


def main():
    mod = build()
    dev, M, D, F = "cuda", 8192, 4096, 14336
    g = torch.Generator(device=dev).manual_seed(3)
    rnd = lambda *s: (torch.randn(*s, device=dev, generator=g) * 0.1).bfloat16()  # noqa: E731
    report = {}
    cfg = GemmConfig(128, 256, 64, 8, num_warps=8, num_stages=3, tma=True)
    cfg_p = GemmConfig(128, 256, 64, 8, num_warps=8, num_stages=3, tma=True, b_pairs=True)

    # F1
    y0, wo, x0, wn0 = rnd(M, D), rnd(D, D), rnd(M, D), rnd(D)
    outs, fns, info = {}, {"cublas": lambda: torch.matmul(y0, wo.T)}, {}
    for name in ("f1_gen", "f1_reord"):
        def run(k=getattr(mod, name), name=name):
            x1, h1 = torch.empty(M, D, device=dev, dtype=torch.bfloat16), torch.empty(M, D, device=dev, dtype=torch.bfloat16)
            ss = torch.empty(M, D // cfg.bn, device=dev, dtype=torch.float32)
            launch_gemm(k, y0, wo, lambda _: [x0, wn0, x1, h1, ss], M=M, N=D, K=D, transpose_a=False,
                        transpose_b=True, config=cfg)
            outs[name] = (x1, h1, ss)
        run()
        info[name] = bm.resources(gl.LAST_LAUNCH["compiled"])
        fns[name] = run
    same = [torch.equal(a, b) for a, b in zip(outs["f1_gen"], outs["f1_reord"])]
    ref = x0.float() + y0.float() @ wo.float().T
    err = bm.rel_err(outs["f1_gen"][0], ref.double())
    t = bm.side_by_side(fns, rounds=5, rep=50)
    report["F1 8192x4096x4096"] = {n: {"ms": t[n], **({"vs_cublas": bm.ratio_median(t["_rounds"], n, "cublas"), **info[n]} if n != "cublas" else {})} for n in fns}
    report["F1 8192x4096x4096"]["bitwise_equal_outputs"] = same
    report["F1 8192x4096x4096"]["x1_rel_err_vs_fp32"] = err
    del y0, wo, x0, wn0, outs, ref

    # F2
    h1, wgu, r = rnd(M, D), rnd(2 * F, D), torch.rand(M, device=dev, generator=g) + 0.5
    outs, fns, info = {}, {"cublas": lambda: torch.matmul(h1, wgu.T)}, {}
    for name in ("f2_gen", "f2_halves"):
        def run(k=getattr(mod, name), name=name):
            z1 = torch.empty(M, 2 * F, device=dev, dtype=torch.bfloat16)
            y1 = torch.empty(M, F, device=dev, dtype=torch.bfloat16)
            launch_gemm(k, h1, wgu, lambda _: [r, z1, y1], M=M, N=2 * F, K=D, transpose_a=False,
                        transpose_b=True, interleave=F, bn_multiple_of=2, config=cfg_p)
            outs[name] = (z1, y1)
        run()
        info[name] = bm.resources(gl.LAST_LAUNCH["compiled"])
        fns[name] = run
    zref = (h1.float() @ wgu.float().T) * r[:, None]
    yref = torch.nn.functional.silu(zref[:, :F]) * zref[:, F:]
    errs = {n: [bm.rel_err(outs[n][0], zref.double()), bm.rel_err(outs[n][1], yref.double())] for n in outs}
    del zref, yref
    t = bm.side_by_side(fns, rounds=5, rep=50)
    report["F2 8192x28672x4096"] = {n: {"ms": t[n], **({"vs_cublas": bm.ratio_median(t["_rounds"], n, "cublas"), **info[n], "rel_err_z_y": errs[n]} if n != "cublas" else {})} for n in fns}
    for k, v in report.items():
        for n, row in v.items():
            print(f"{k:20s} {n:10s} {row}")
    Path(os.environ.get("OUT", "."), "exp_epilogue_stores.json").write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
