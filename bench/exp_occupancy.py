"""Experiment: does a second persistent program per SM (smaller tiles, 2 CTAs/SM) hide the
epilogue's memory traffic under the other program's mainloop? Plain and residual+sumsq
epilogues at 8192x4096x{4096,14336}, fixed configs side by side with cuBLAS.

    python bench/exp_occupancy.py    # on the GPU; JSON to $OUT/exp_occupancy.json
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import bench.bench_mainloop as bm  # noqa: E402
from coda_ir.lowering import gemm_launch as gl  # noqa: E402
from coda_ir.lowering.gemm_launch import GemmConfig, launch_gemm  # noqa: E402

CONFIGS = {
    "128x256 w8 s3 (1/SM)": GemmConfig(128, 256, 64, 8, num_warps=8, num_stages=3, tma=True),
    "128x256 w8 s3 fl (1/SM)": GemmConfig(128, 256, 64, 8, num_warps=8, num_stages=3, tma=True, flatten=True),
    "128x128 w4 s2 x2/SM": GemmConfig(128, 128, 64, 8, num_warps=4, num_stages=2, tma=True, ctas_per_sm=2),
    "128x128 w4 s3 x2/SM": GemmConfig(128, 128, 64, 8, num_warps=4, num_stages=3, tma=True, ctas_per_sm=2),
    "128x128 w8 s3 x2/SM": GemmConfig(128, 128, 64, 8, num_warps=8, num_stages=3, tma=True, ctas_per_sm=2),
    "128x256 w8 s2 x2/SM": GemmConfig(128, 256, 64, 8, num_warps=8, num_stages=2, tma=True, ctas_per_sm=2),
}


def occupancy(compiled, warps):
    shared = compiled.metadata.shared
    regs = compiled.n_regs
    by_smem = (232448 // max(shared + 1024, 1)) if shared else 32
    by_regs = 65536 // max(regs * 32 * warps, 1)
    return {"shared": shared, "n_regs": regs, "n_spills": compiled.n_spills, "ctas_per_sm_fit": min(by_smem, by_regs)}


def main():
    ks = bm.build_kernels(Path(tempfile.mkdtemp()))
    g = torch.Generator(device="cuda").manual_seed(7)
    out = []
    for N, K in ((4096, 4096), (4096, 14336)):
        M = 8192
        x = torch.randn(M, K, device="cuda", generator=g).bfloat16()
        w = torch.randn(N, K, device="cuda", generator=g).bfloat16()
        res = torch.randn(M, N, device="cuda", generator=g).bfloat16()
        ref = res.double() + x.double() @ w.double().T
        fns = {"cublas": lambda: torch.matmul(x, w.T)}
        info = {}
        for name, cfg in CONFIGS.items():
            for kind in ("plain", "residual"):
                if kind == "plain":
                    def run(cfg=cfg):
                        c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
                        launch_gemm(ks["plain"], x, w, lambda _: [c, c.stride(0)], M=M, N=N, K=K,
                                    transpose_a=False, transpose_b=True, config=cfg)
                        return c
                else:
                    def run(cfg=cfg):
                        o = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
                        p = torch.empty(M, -(-N // cfg.bn), device="cuda", dtype=torch.float32)
                        launch_gemm(ks["residual_sumsq"], x, w,
                                    lambda _: [res, o, p, res.stride(0), o.stride(0), p.stride(0)],
                                    M=M, N=N, K=K, transpose_a=False, transpose_b=True, config=cfg)
                        return o
                try:
                    y = run()
                    err = bm.rel_err(y, ref if kind == "residual" else ref - res.double())
                    info[f"{kind} {name}"] = {"rel_err": err, **occupancy(gl.LAST_LAUNCH["compiled"], cfg.num_warps)}
                    fns[f"{kind} {name}"] = run
                except Exception as exc:
                    info[f"{kind} {name}"] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        t = bm.side_by_side(fns, rounds=5, rep=50)
        for k in fns:
            if k == "cublas":
                continue
            r = bm.ratio_median(t["_rounds"], k, "cublas")
            info[k].update(ms=t[k], vs_cublas_time=r)
        for k, v in info.items():
            print(f"{M}x{N}x{K} {k:34s} {v}")
        print(f"{M}x{N}x{K} cublas {t['cublas']:.3f} ms")
        out.append({"shape": [M, N, K], "cublas_ms": t["cublas"], "variants": info})
    Path(os.environ.get("OUT", "."), "exp_occupancy.json").write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
