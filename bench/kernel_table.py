"""Per-kernel resource table of the derived LLaMA block forward+backward, and a tile sweep.

    python bench/kernel_table.py --shapes 1b,8b [--budget-s 420] [--sweep default|short|narrow|none] --out DIR
    python bench/kernel_table.py --sweep short --only "swiglu_grad|rms_norm_grad" --hand hand,norm_order --unfused
    TRITON_INTERPRET=1 python bench/kernel_table.py --cpu --shapes smoke --sweep cpu --hand hand

For every shape: compiles the block with `nn-autodiff,nn-to-coda` (tuning off: the first Hopper
candidate everywhere, 128x256x64 w8 s3), runs `llama_block_fwd` and `llama_block_bwd` once while
recording every `launch_gemm` call (kernel, operands, the epilogue's argument builder), then per
GEMM kernel, in launch order:

* the plain cuBLAS GEMM of the same operands and transposes (`torch.matmul(..., out=)`), timed
  before and after the kernel's configurations (their mean is the ratio's denominator);
* each tile configuration of the sweep (compiled first, in parallel threads), its time, the
  compiled kernel's registers per thread, spills and shared memory, CTAs per SM that those
  allow, and whether its outputs match the default configuration's (same-shaped outputs; the
  per-tile partials change shape with the tile and are not compared);
* then the whole forward and backward, with the default configuration and with each kernel's
  fastest configuration of the sweep (put into the tuner's memo), and a profiler pass for the
  non-GEMM kernels.

`--only` restricts this to kernels whose origin contains one of the given substrings (no
whole-function timing). `--hand` replaces the generated epilogue of the SwiGLU-backward and
RMSNorm-backward kernels by hand-written ones (`HAND_VARIANTS`: same per-element arithmetic)
and times both at the same tiles, checking the outputs bitwise; `--unfused` times the SwiGLU
backward as the cuBLAS dgrad plus one Triton pass. Configurations are function arguments
(`SWEEPS`), not environment variables. Writes $OUT/kernel_table_<shape>.json after every
kernel. `--cpu` runs the plumbing under the interpreter (no timing claims).

Plain gemms (`#coda.vendor_gemm`, session 16) run cuBLAS in the whole-function timings; their
per-kernel rows (each with a fixed configuration) time the generated tl kernel.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "programs"))
sys.path.insert(0, str(ROOT / "bench"))

os.environ.setdefault("CODA_AUTOTUNE", "0")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.testing import do_bench as _do_bench  # noqa: E402

import coda_ir  # noqa: E402
from coda_ir import testing  # noqa: E402
from coda_ir.dialects import coda  # noqa: E402
from coda_ir.runtime import gemm_launch as gl  # noqa: E402

from bench_block import SHAPES  # noqa: E402
from generate import nn_llama_block  # noqa: E402

C = gl.GemmConfig
SWEEPS: dict[str, tuple[tuple[str, object], ...]] = {
    "none": (("128x256 w8 s3", C(128, 256, 64, 8, 8, 3, tma=True)),),
    "default": (
        ("128x256 w8 s3", C(128, 256, 64, 8, 8, 3, tma=True)),
        ("128x256 w8 s4", C(128, 256, 64, 8, 8, 4, tma=True)),
        ("128x256 w8 s2", C(128, 256, 64, 8, 8, 2, tma=True)),
        ("128x256 w8 s3 ws", C(128, 256, 64, 8, 8, 3, tma=True, warp_specialize=True)),
        ("256x128 w8 s3", C(256, 128, 64, 8, 8, 3, tma=True)),
        ("128x128 w8 s4", C(128, 128, 64, 8, 8, 4, tma=True)),
        ("128x128 w4 s4", C(128, 128, 64, 8, 4, 4, tma=True)),
        ("128x128 w4 s3 2cta", C(128, 128, 64, 8, 4, 3, tma=True, ctas_per_sm=2)),
        ("128x128 w8 s3 2cta", C(128, 128, 64, 8, 8, 3, tma=True, ctas_per_sm=2)),
        ("64x256 w4 s4", C(64, 256, 64, 8, 4, 4, tma=True)),
        ("128x64 w4 s4 2cta", C(128, 64, 64, 8, 4, 4, tma=True, ctas_per_sm=2)),
        ("128x128x128 w8 s2 2cta", C(128, 128, 128, 8, 8, 2, tma=True, ctas_per_sm=2)),
    ),
}
SWEEPS["narrow"] = (
    ("128x128 w8 s4", C(128, 128, 64, 8, 8, 4, tma=True)),
    ("128x128 w8 s4 ws", C(128, 128, 64, 8, 8, 4, tma=True, warp_specialize=True)),
    ("128x64 w8 s3", C(128, 64, 64, 8, 8, 3, tma=True)),
    ("128x64 w8 s4", C(128, 64, 64, 8, 8, 4, tma=True)),
    ("128x64 w8 s4 ws", C(128, 64, 64, 8, 8, 4, tma=True, warp_specialize=True)),
    ("128x64 w8 s3 2cta", C(128, 64, 64, 8, 8, 3, tma=True, ctas_per_sm=2)),
    ("128x64 w4 s4", C(128, 64, 64, 8, 4, 4, tma=True)),
    ("256x64 w8 s3", C(256, 64, 64, 8, 8, 3, tma=True)),
)
SWEEPS["short"] = tuple(SWEEPS["default"][i] for i in (0, 1, 3, 5))
SWEEPS["cpu"] = (SWEEPS["default"][0], SWEEPS["default"][7])

DEV = {"device": "cuda"}


def do_bench(fn, warmup=10, rep=60, return_mode="median"):
    if DEV["device"] == "cpu":  # --cpu: the plumbing under the interpreter, one call, no timing claim
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    return _do_bench(fn, warmup=warmup, rep=rep, return_mode=return_mode)


RECORD: list[dict] = []
PHASE = {"name": None}
_orig_launch = gl.launch_gemm


def _recording_launch(kernel, a, b, extra_args_for, **kw):
    cfg, extra = _orig_launch(kernel, a, b, extra_args_for, **kw)
    if PHASE["name"] is not None:
        RECORD.append(dict(kernel=kernel, a=a, b=b, extra_args_for=extra_args_for, kw=kw, config=cfg,
                           phase=PHASE["name"], extra=extra))
    return cfg, extra


gl.launch_gemm = _recording_launch  # before compile: generated modules import it by name


def sync():
    if DEV["device"] == "cuda":
        torch.cuda.synchronize()


def resources(compiled) -> dict:
    if compiled is None:
        return {}
    try:
        compiled._init_handles()
    except Exception:
        pass
    md = compiled.metadata
    regs = getattr(compiled, "n_regs", None)
    warps = getattr(md, "num_warps", None)
    shared = getattr(md, "shared", None)
    out = {"n_regs": regs, "n_spills": getattr(compiled, "n_spills", None), "shared": shared, "num_warps": warps}
    if regs and warps and shared is not None:
        per_warp = ((regs * 32 + 255) // 256) * 256
        by_regs = 65536 // (per_warp * warps)
        by_smem = (233472 // max(shared + 1024, 1)) if shared else 32
        out["ctas_per_sm_possible"] = min(by_regs, by_smem, 64 // warps)
    return out


def operands(rec):
    a, b, kw = rec["a"], rec["b"], rec["kw"]
    A = a.T if kw["transpose_a"] else a
    B = b.T if kw["transpose_b"] else b
    return A, B


def plain_ms(rec) -> float:
    A, B = operands(rec)
    out = torch.empty(A.shape[0], B.shape[1], device=A.device, dtype=A.dtype)
    return do_bench(lambda: torch.matmul(A, B, out=out), warmup=10, rep=60, return_mode="median")


def fits(rec, cfg) -> bool:
    kw = rec["kw"]
    return gl._tma_fits(cfg, kw.get("interleave", 0), kw.get("bn_multiple_of", 1), kw.get("bm_multiple_of", 1))


def with_pairs(rec, cfg):
    if rec["kw"].get("interleave", 0):
        return dataclasses.replace(cfg, b_pairs=True)
    return cfg


def launch_args(rec, cfg):
    a, b, kw = rec["a"], rec["b"], rec["kw"]
    M, N, K = kw["M"], kw["N"], kw["K"]
    sa = (a.stride(1), a.stride(0)) if kw["transpose_a"] else (a.stride(0), a.stride(1))
    sb = (b.stride(1), b.stride(0)) if kw["transpose_b"] else (b.stride(0), b.stride(1))
    strides = (*sa, *sb)
    il = kw.get("interleave", 0)
    layouts = gl._tma_layouts(a, b, M, N, K, strides, il)
    use = layouts if (cfg.tma and fits(rec, cfg)) else None
    return M, N, K, strides, il, use


def compile_cfg(rec, cfg):
    M, N, K, strides, il, use = launch_args(rec, cfg)
    extra = [t.dtype if isinstance(t, torch.Tensor) else t for t in rec["extra_args_for"](cfg)]
    return gl._launch(rec["kernel"], rec["a"], rec["b"], extra, M, N, K, strides, cfg, il, use, False, compile_only=True)


def run_cfg(rec, cfg):
    kw = {k: v for k, v in rec["kw"].items() if k != "config"}
    return _orig_launch(rec["kernel"], rec["a"], rec["b"], rec["extra_args_for"], config=cfg, **kw)


def compare(ref_extra, extra) -> float | None:
    """Worst |diff| / max|ref| over same-shaped floating outputs (None if nothing comparable)."""
    worst = None
    for r, e in zip(ref_extra, extra):
        if not (isinstance(r, torch.Tensor) and isinstance(e, torch.Tensor)) or r.shape != e.shape:
            continue
        if r.data_ptr() == e.data_ptr() or not r.dtype.is_floating_point:
            continue
        scale = r.float().abs().max().item() or 1.0
        d = (r.float() - e.float()).abs().max().item() / scale
        worst = d if worst is None else max(worst, d)
    return worst


def origins_in_order(program) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in program.ir.body.block.ops:
        name = getattr(f, "sym_name", None)
        if name is None:
            continue
        lst = out.setdefault(name.data, [])
        for op in f.walk():
            if isinstance(op, coda.GemmOp):
                o = op.attributes.get("coda.origin")
                lst.append(o.data if o is not None else "gemm")
    return out


def profile_nongemm(program, inputs, ups, iters=3) -> list:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            out = program.llama_block_fwd(*inputs)
            program.llama_block_bwd(*out[2:], *ups)
        if DEV["device"] == "cuda":
            torch.cuda.synchronize()
    rows = []
    for ev in prof.key_averages():
        if ev.device_type.name != "CUDA" or ev.count == 0:
            continue
        total = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0.0)
        rows.append((ev.key, ev.count // iters, total / ev.count / 1000.0))
    rows.sort(key=lambda r: -r[2] * r[1])
    return rows


# ----------------------------------------------------------------------------- hand-edited epilogues
# Measured leads for the epilogue emitter (coda_ir/lowering/triton.py), not adopted: the
# generated epilogue of a kernel is replaced by a hand-written one with the same per-element
# arithmetic in the same order (so the stored tiles are bitwise equal), and both are timed at the
# same configurations. `--hand` turns this on.

HAND_CFGS = ("128x128 w8 s4", "128x256 w8 s3", "128x256 w8 s3 ws", "128x256 w8 s4", "256x128 w8 s3",
             "128x128 w8 s3 2cta")
I12 = " " * 12


def _tma_epilogue_span(lines: list[str], name: str) -> tuple[int, int] | None:
    """[start, end) of the TMA branch's epilogue lines of kernel `name` in the module source."""
    try:
        start = next(i for i, l in enumerate(lines) if l.startswith(f"def {name}("))
        epi = next(i for i in range(start, len(lines)) if lines[i] == I12 + "# ---- epilogue ----")
        end = next(i for i in range(epi, len(lines)) if lines[i] == "    else:")
    except StopIteration:
        return None
    return epi, end


def hand_swiglu(epi: str) -> list[str] | None:
    """SwiGLU backward + z.dz row partials on the two z halves (gate, up) as loaded: no
    join/permute/split round trip through the interleaved [BM, 2BN] tile, dz stored per half,
    the row partial summed over gate and up halves (sum order differs from the generated one)."""
    m = re.search(r"rows64\[:, None\] \* (\d+) \+ half_cols\[None, :\] \+ (\d+)", epi)
    need = ("s = (-pa)", "s8 = (s4 * s7)", "s10 = (s9 * s2)", "s13 = (t1 * t3)", "tl.sum(rm, axis=1)")
    if m is None or not all(x in epi for x in need):
        return None
    w2, f = int(m.group(1)), int(m.group(2))
    body = [
        "# ---- epilogue (hand: z halves, no interleaved tile) ----",
        "rows64 = offs_m.to(tl.int64)",
        f"half_cols = (pid_n // ({w2} // (BN * 2))) * {w2} + (pid_n % ({w2} // (BN * 2))) * BN + tl.arange(0, BN)",
        f"half_mask = mask_m[:, None] & (half_cols < {w2})[None, :]",
        f"zp = in0_ptr + rows64[:, None] * {w2} + half_cols[None, :]",
        "pa = tl.load(zp, mask=half_mask, other=0).to(tl.float32)",
        f"pb = tl.load(zp + {f}, mask=half_mask, other=0).to(tl.float32)",
        "pn = acc",
        "s = (-pa)", "s0 = tl.exp(s)", "s1 = (1.0 + s0)", "s2 = (1.0 / s1)", "s3 = (pn * pb)", "s4 = (s3 * s2)",
        "s5 = (1.0 - s2)", "s6 = (pa * s5)", "s7 = (1.0 + s6)", "s8 = (s4 * s7)", "s9 = (pn * pa)", "s10 = (s9 * s2)",
        "d_lo = _coda_round_bf16(s8)",
        "d_hi = _coda_round_bf16(s10)",
        f"op = out0_ptr + rows64[:, None] * {w2} + half_cols[None, :]",
        "tl.store(op, d_lo, mask=half_mask)",
        f"tl.store(op + {f}, d_hi, mask=half_mask)",
        "p = tl.sum(tl.where(half_mask, pa * d_lo.to(tl.float32) + pb * d_hi.to(tl.float32), 0.0), axis=1)",
        "tl.store(out1_ptr + rows64 * tl.cdiv(N, BN) + pid_n, p, mask=mask_m)",
    ]
    return [I12 + l for l in body]


def hand2_swiglu(epi: str) -> list[str] | None:
    """As `hand_swiglu`, ordered so that tiles die early: z kept in bf16 until used, the up
    gradient stored and its share of the row partial summed before the gate gradient."""
    base = hand_swiglu(epi)
    if base is None:
        return None
    m = re.search(r"rows64\[:, None\] \* (\d+) \+ half_cols\[None, :\] \+ (\d+)", epi)
    w2, f = int(m.group(1)), int(m.group(2))
    body = [
        "# ---- epilogue (hand2: z halves in bf16, up gradient first) ----",
        "rows64 = offs_m.to(tl.int64)",
        f"half_cols = (pid_n // ({w2} // (BN * 2))) * {w2} + (pid_n % ({w2} // (BN * 2))) * BN + tl.arange(0, BN)",
        f"half_mask = mask_m[:, None] & (half_cols < {w2})[None, :]",
        f"zp = in0_ptr + rows64[:, None] * {w2} + half_cols[None, :]",
        f"op = out0_ptr + rows64[:, None] * {w2} + half_cols[None, :]",
        "z_gate = tl.load(zp, mask=half_mask, other=0)",
        f"z_up = tl.load(zp + {f}, mask=half_mask, other=0)",
        "pa = z_gate.to(tl.float32)",
        "s2 = (1.0 / (1.0 + tl.exp(-pa)))",
        "s10 = ((acc * pa) * s2)",
        "d_hi = _coda_round_bf16(s10)",
        f"tl.store(op + {f}, d_hi, mask=half_mask)",
        "p = tl.sum(tl.where(half_mask, z_up.to(tl.float32) * d_hi.to(tl.float32), 0.0), axis=1)",
        "s8 = (((acc * z_up.to(tl.float32)) * s2) * (1.0 + (pa * (1.0 - s2))))",
        "d_lo = _coda_round_bf16(s8)",
        "tl.store(op, d_lo, mask=half_mask)",
        "p = p + tl.sum(tl.where(half_mask, pa * d_lo.to(tl.float32), 0.0), axis=1)",
        "tl.store(out1_ptr + rows64 * tl.cdiv(N, BN) + pid_n, p, mask=mask_m)",
    ]
    return [I12 + l for l in body]


def hand_norm(epi: str) -> list[str] | None:
    """RMSNorm backward + residual gradient: the residual sum stored before the column partials
    are computed (the generated order keeps both full tiles live across the column reduction),
    row/column vectors not broadcast to tiles. Same per-element arithmetic, same reduction."""
    m = re.search(r"in0_ptr \+ rows64\[:, None\] \* (\d+) \+ offs_n", epi)
    c = re.search(r"s1 = \(t4 \* ([0-9.e+-]+)\)", epi)
    need = ("s = (acc * t2)", "s0 = (t1 * t3)", "s2 = (s0 * s1)", "s3 = (s - s2)", "s4 = (t3 * s3)",
            "s5 = (acc * s0)", "tl.sum(rm, axis=0)", "t7 = t5 + tl.load(in4_ptr")
    if m is None or c is None or not all(x in epi for x in need):
        return None
    w, k = m.group(1), c.group(1)
    body = [
        "# ---- epilogue (hand: residual first, vectors unbroadcast) ----",
        "mask_mn = mask_m[:, None] & mask_n[None, :]",
        "rows64 = offs_m.to(tl.int64)",
        f"t1 = tl.load(in0_ptr + rows64[:, None] * {w} + offs_n[None, :], mask=mask_mn, other=0).to(tl.float32)",
        "t2 = tl.load(in1_ptr + offs_n, mask=mask_n, other=0).to(tl.float32)[None, :]",
        "t3 = tl.load(in2_ptr + offs_m, mask=mask_m, other=0)[:, None]",
        "t4 = tl.load(in3_ptr + offs_m, mask=mask_m, other=0)[:, None]",
        "s = (acc * t2)", "s0 = (t1 * t3)", f"s1 = (t4 * {k})", "s2 = (s0 * s1)", "s3 = (s - s2)", "s4 = (t3 * s3)",
        f"t7 = s4 + tl.load(in4_ptr + rows64[:, None] * {w} + offs_n[None, :], mask=mask_mn, other=0).to(tl.float32)",
        f"tl.store(out1_ptr + rows64[:, None] * {w} + offs_n[None, :], _coda_round_bf16(t7), mask=mask_mn)",
        "s5 = (acc * s0)",
        "p = tl.sum(tl.where(mask_mn, s5, 0.0), axis=0)",
        "tl.store(out0_ptr + offs_n.to(tl.int64) * tl.cdiv(M, BM) + pid_m, p, mask=mask_n)",
    ]
    return [I12 + l for l in body]


def hand_norm_order(epi: str) -> list[str] | None:
    """Ablation of `hand_norm`: its order (residual stored first), the vectors broadcast to
    [BM, BN] tiles as generated."""
    lines = hand_norm(epi)
    if lines is None:
        return None
    out = []
    for line in lines:
        for v in ("t2", "t3", "t4"):
            if line.startswith(I12 + f"{v} = tl.load("):
                expr = line[len(I12) + len(v) + 3:]
                line = I12 + f"{v} = tl.broadcast_to({expr}, (BM, BN))"
        out.append(line)
    return out


def hand_norm_vec(epi: str) -> list[str] | None:
    """Ablation of `hand_norm`: the generated order (column partials, then the residual sum and
    its store), the vectors not broadcast."""
    lines = hand_norm(epi)
    if lines is None:
        return None
    head = [l for l in lines if not any(l.startswith(I12 + x) for x in ("t7 =", "tl.store(out1", "s5 =", "p =", "tl.store(out0"))]
    pick = {x: next(l for l in lines if l.startswith(I12 + x)) for x in ("t7 =", "tl.store(out1", "s5 =", "p =", "tl.store(out0")}
    return head + [pick["s5 ="], pick["p ="], pick["tl.store(out0"], pick["t7 ="], pick["tl.store(out1"]]


def previous_epilogue_schedule(block):
    """The library's order before session 9 (kept here only, to A/B it): whole ops in program
    order with partial reductions after the last tile use of their input, every output of a
    multi-output `coda.map` made at the map."""
    from coda_ir.analysis.epilogue_schedule import partials_after_last_use
    from coda_ir.analysis.epilogue_schedule import EpilogueStep

    ops = [op for op in block.ops if not isinstance(op, coda.YieldOp)]
    return [EpilogueStep(op, tuple(range(len(op.results)))) for op in partials_after_last_use(ops)]


def cols_last_epilogue_schedule(block):
    """An alternative to `coda_ir.analysis.epilogue_schedule.epilogue_schedule` (measured, not adopted:
    bench/RESULTS.md 2026-11-25 session 8): `previous_epilogue_schedule`, then every column
    reduction (`coda.reduce ... dim 0`, only yielded) moved last, after the stores it does not
    feed, its tile still made at the map."""
    order = previous_epilogue_schedule(block)
    late = [st for st in order if isinstance(st.op, coda.ReduceOp) and st.op.dim.value.data == 0
            and all(isinstance(u.operation, coda.YieldOp) for r in st.op.results for u in r.uses)]
    return [st for st in order if st not in late] + late


def compile_with_schedule(text: str, schedule):
    from coda_ir.lowering import tl_epilogue

    saved = tl_epilogue.epilogue_schedule  # the order the epilogue lowering obeys
    tl_epilogue.epilogue_schedule = schedule
    try:
        return coda_ir.compile(text, pipeline="nn-autodiff,nn-to-coda")
    finally:
        tl_epilogue.epilogue_schedule = saved


# variant -> (SwiGLU-backward epilogue, RMSNorm-backward epilogue) builders; "sched_cols_last"
# and "sched_prev" take both from the block compiled with `cols_last_epilogue_schedule` /
# `previous_epilogue_schedule` (`hand_variants`, `ALT_SCHEDULES`). The hand edits match the
# epilogues generated before session 9 (they return None on today's, and are skipped).
HAND_VARIANTS = {"hand": (hand_swiglu, hand_norm), "hand2": (hand2_swiglu, None),
                 "norm_order": (None, hand_norm_order), "norm_vec": (None, hand_norm_vec)}
ALT_SCHEDULES = {"sched_cols_last": cols_last_epilogue_schedule, "sched_prev": previous_epilogue_schedule}


@triton.jit
def _swiglu_bwd_unfused(dg_ptr, z_ptr, dz_ptr, part_ptr, M, F: tl.constexpr, TILES: tl.constexpr,
                        BM: tl.constexpr, BN: tl.constexpr):
    """The SwiGLU backward + z.dz row partials as a standalone pass over a stored dg [M, F] and
    z = [gate | up] [M, 2F] (the fused kernel's arithmetic, after dg is rounded to bf16)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BM + tl.arange(0, BM)
    cols = pid_n * BN + tl.arange(0, BN)
    mask = (rows < M)[:, None]
    r64 = rows.to(tl.int64)[:, None]
    dg = tl.load(dg_ptr + r64 * F + cols[None, :], mask=mask, other=0).to(tl.float32)
    g = tl.load(z_ptr + r64 * (2 * F) + cols[None, :], mask=mask, other=0).to(tl.float32)
    u = tl.load(z_ptr + r64 * (2 * F) + F + cols[None, :], mask=mask, other=0).to(tl.float32)
    sig = 1.0 / (1.0 + tl.exp(-g))
    d_lo = (((dg * u) * sig) * (1.0 + g * (1.0 - sig))).to(tl.bfloat16)
    d_hi = ((dg * g) * sig).to(tl.bfloat16)
    tl.store(dz_ptr + r64 * (2 * F) + cols[None, :], d_lo, mask=mask)
    tl.store(dz_ptr + r64 * (2 * F) + F + cols[None, :], d_hi, mask=mask)
    p = tl.sum(g * d_lo.to(tl.float32) + u * d_hi.to(tl.float32), axis=1)
    tl.store(part_ptr + rows.to(tl.int64) * TILES + pid_n, p, mask=rows < M)


def unfused_swiglu(key: str, log) -> list[dict]:
    """Time the SwiGLU-backward kernels unfused: the plain cuBLAS dgrad storing dg, then
    `_swiglu_bwd_unfused`, against the fused kernel at 128x128 w8 s4 (its tuned tile)."""
    rows = []
    for rec in RECORD:
        if "swiglu_grad" not in rec["origin"]:
            continue
        kw = rec["kw"]
        M, F = kw["M"], kw["N"]
        z = next(t for t in rec["extra"] if isinstance(t, torch.Tensor) and tuple(t.shape) == (M, 2 * F))
        A, B = operands(rec)
        dg = torch.empty(M, F, device=A.device, dtype=A.dtype)
        dz = torch.empty(M, 2 * F, device=A.device, dtype=A.dtype)
        res = {"origin": rec["origin"], "M": M, "F": F, "K": kw["K"]}
        for bm, bn, warps in ((32, 128, 4), (64, 128, 8), (16, 256, 4)):
            tiles = F // bn
            part = torch.empty(M, tiles, device=A.device, dtype=torch.float32)
            grid = (triton.cdiv(M, bm), tiles)

            def elem():
                _swiglu_bwd_unfused[grid](dg, z, dz, part, M, F, tiles, bm, bn, num_warps=warps)

            def both():
                torch.matmul(A, B, out=dg)
                elem()

            res[f"elementwise {bm}x{bn} w{warps} ms"] = do_bench(elem, warmup=10, rep=60, return_mode="median")
            res[f"gemm+elementwise {bm}x{bn} w{warps} ms"] = do_bench(both, warmup=10, rep=60, return_mode="median")
        res["plain_ms"] = plain_ms(rec)
        fused = dict(SWEEPS["default"])["128x128 w8 s4"]
        res["fused 128x128 w8 s4 ms"] = do_bench(lambda: run_cfg(rec, fused), warmup=10, rep=60, return_mode="median")
        res["plain_ms_again"] = plain_ms(rec)
        log(f"[{key}] unfused SwiGLU bwd: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in res.items()))
        rows.append(res)
    return rows


def hand_variants(program, key: str, out_dir: Path, log, variant: str = "hand", only: str = "",
                  sweep: str = "default", labels=HAND_CFGS, text: str = "", rounds: int = 1) -> list[dict]:
    """Time each target kernel generated and with the variant's epilogue at the same tiles.
    `rounds` > 1: that many do_bench pairs per tile in alternating order (generated first in
    even rounds, the variant first in odd ones; a kernel timed second right after the other
    measured up to ~8% faster on the long-K kernels), ms = the median over rounds, and
    `ratio_median` = the median of the per-round variant / generated ratios."""
    import importlib.util

    lines = program.source.splitlines()
    if variant in ALT_SCHEDULES:  # the same kernels' epilogues as the alternative schedule emits them
        alt = compile_with_schedule(text, ALT_SCHEDULES[variant]).source.splitlines()

        def from_alt(name):
            span = _tma_epilogue_span(alt, name)
            return (lambda epi: alt[span[0]:span[1]]) if span else None

        swiglu_fn = norm_fn = None
    else:
        swiglu_fn, norm_fn = HAND_VARIANTS[variant]
        from_alt = None
    targets = []
    for i, rec in enumerate(RECORD):
        name = rec["kernel"].fn.__name__
        span = _tma_epilogue_span(lines, name)
        if span is None:
            continue
        epi = "\n".join(lines[span[0]:span[1]])
        if only and only not in rec["origin"]:
            continue
        fn = swiglu_fn if "swiglu_grad" in rec["origin"] else norm_fn if "rms_norm_grad" in rec["origin"] else None
        if from_alt is not None and ("swiglu_grad" in rec["origin"] or "rms_norm_grad" in rec["origin"]):
            fn = from_alt(name)
        if fn is None:
            continue
        new = fn(epi) if fn is not None else None
        if new is None:
            continue
        targets.append((i, name, span, new))
    for _, _, span, new in sorted(targets, key=lambda t: -t[2][0]):
        lines[span[0]:span[1]] = new
    path = out_dir / f"{variant}_{key}.py"
    path.write_text("\n".join(lines) + "\n")
    spec = importlib.util.spec_from_file_location(f"coda_{variant}_{key}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rows = []
    cfgs = dict(SWEEPS[sweep])
    labels = [label for label in labels if label in cfgs] or list(cfgs)
    if DEV["device"] == "cpu":  # the interpreter's tile, on the TMA path (--cpu sets path="tma")
        cfgs = {"interp": dataclasses.replace(gl.interpreter_config(), tma=True)}
        labels = ("interp",)
    for i, name, _, _ in targets:
        rec = RECORD[i]
        hrec = dict(rec, kernel=getattr(mod, name))
        kw = rec["kw"]
        plain = plain_ms(rec)
        row = {"variant": variant, "i": i, "origin": rec["origin"], "kernel": name, "M": kw["M"], "N": kw["N"], "K": kw["K"],
               "plain_ms": plain, "configs": {}}
        for label in labels:
            cfg = cfgs[label]
            if not fits(rec, cfg):
                continue
            entry = {}
            pair = (("generated", rec), ("hand", hrec))
            for tag, r in pair:
                try:
                    _, extra = run_cfg(r, cfg)
                    compiled = gl.LAST_LAUNCH.get("compiled")
                    sync()
                    entry[tag] = {"ms_rounds": [], **resources(compiled)}
                    entry[tag + "_extra"] = extra
                except Exception as exc:  # noqa: BLE001
                    entry[tag] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            timed = [(tag, r) for tag, r in pair if "ms_rounds" in entry[tag]]
            for k in range(rounds):
                for tag, r in (timed if k % 2 == 0 else timed[::-1]):
                    entry[tag]["ms_rounds"].append(do_bench(lambda: run_cfg(r, cfg), warmup=10, rep=60, return_mode="median"))
            for tag, _ in timed:
                entry[tag]["ms"] = sorted(entry[tag]["ms_rounds"])[len(entry[tag]["ms_rounds"]) // 2]
                entry[tag]["x_plain"] = entry[tag]["ms"] / plain
            if len(timed) == 2:
                ratios = sorted(h / g for g, h in zip(entry["generated"]["ms_rounds"], entry["hand"]["ms_rounds"]))
                entry["ratio_median"] = ratios[len(ratios) // 2]
            if "generated_extra" in entry and "hand_extra" in entry:
                g, h = entry.pop("generated_extra"), entry.pop("hand_extra")
                diffs = []
                for a, b in zip(g, h):
                    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.data_ptr() != b.data_ptr() \
                            and a.dtype.is_floating_point and a.shape == b.shape:
                        diffs.append({"shape": list(a.shape), "dtype": str(a.dtype), "bitwise": bool(torch.equal(a, b)),
                                      "max_rel": (a.float() - b.float()).abs().max().item() / (a.float().abs().max().item() or 1.0)})
                entry["outputs"] = diffs
            entry.pop("generated_extra", None)
            entry.pop("hand_extra", None)
            row["configs"][label] = entry
            g, h = entry.get("generated", {}), entry.get("hand", {})
            log(f"[{key}] {variant} {rec['origin'][:50]:50s} {label:20s} generated {g.get('ms', float('nan')):.3f} "
                f"({g.get('x_plain', float('nan')):.3f}x regs {g.get('n_regs')} spills {g.get('n_spills')}) hand "
                f"{h.get('ms', float('nan')):.3f} ({h.get('x_plain', float('nan')):.3f}x regs {h.get('n_regs')} "
                f"spills {h.get('n_spills')}) {variant}/generated {entry.get('ratio_median', float('nan')):.3f} "
                f"outputs {[(d['bitwise'], round(d['max_rel'], 8)) for d in entry.get('outputs', [])]}")
        rows.append(row)
    return rows


def run_shape(key: str, sweep: str, deadline: float, out_dir: Path, log, hand: str = "", only: str = "",
              unfused: bool = False, rounds: int = 1) -> dict:
    s = SHAPES[key]
    text = nn_llama_block(s, fname="llama_block")
    t0 = time.perf_counter()
    program = coda_ir.compile(text, pipeline="nn-autodiff,nn-to-coda")
    inputs = testing.random_inputs(text, seed=0, device=DEV["device"])
    ups = testing.random_upstream(text, seed=0, device=DEV["device"])
    RECORD.clear()
    PHASE["name"] = "fwd"
    fwd = program.llama_block_fwd(*inputs)
    PHASE["name"] = "bwd"
    program.llama_block_bwd(*fwd[2:], *ups)
    PHASE["name"] = None
    sync()
    log(f"[{key}] compiled + first call {time.perf_counter() - t0:.1f} s, {len(RECORD)} GEMM launches")
    origins = origins_in_order(program)
    per_phase = {"fwd": iter(origins.get("llama_block_fwd", [])), "bwd": iter(origins.get("llama_block_bwd", []))}
    for rec in RECORD:
        rec["origin"] = next(per_phase[rec["phase"]], "?")
    configs = SWEEPS[sweep]
    # compile every (kernel, configuration) on threads first
    from concurrent.futures import ThreadPoolExecutor

    jobs = []
    chosen = [i for i, rec in enumerate(RECORD) if not only or any(o in rec["origin"] for o in only.split("|"))]
    for i in chosen:
        rec = RECORD[i]
        for label, cfg in configs:
            cfg = with_pairs(rec, cfg)
            if fits(rec, cfg):
                jobs.append((i, label, cfg))
    t1 = time.perf_counter()
    errors: dict = {}

    def one(job):
        i, label, cfg = job
        try:
            compile_cfg(RECORD[i], cfg)
        except Exception as exc:  # noqa: BLE001
            errors[(i, label)] = f"{type(exc).__name__}: {str(exc)[:160]}"

    with ThreadPoolExecutor(max_workers=12) as pool:
        list(pool.map(one, jobs))
    log(f"[{key}] compiled {len(jobs)} (kernel, config) pairs in {time.perf_counter() - t1:.1f} s, {len(errors)} failed")
    result = {"shape": key, "kernels": [], "nongemm": None}
    best_cfg: dict[int, object] = {}
    for i in chosen:
        rec = RECORD[i]
        kw = rec["kw"]
        row = {"i": i, "phase": rec["phase"], "origin": rec["origin"], "kernel": rec["kernel"].fn.__name__,
               "M": kw["M"], "N": kw["N"], "K": kw["K"], "tA": kw["transpose_a"], "tB": kw["transpose_b"],
               "interleave": kw.get("interleave", 0), "bn_multiple_of": kw.get("bn_multiple_of", 1),
               "configs": {}}
        p0 = plain_ms(rec)
        ref_extra = None
        for label, cfg in configs:
            cfg = with_pairs(rec, cfg)
            if not fits(rec, cfg):
                continue
            if (i, label) in errors:
                row["configs"][label] = {"error": errors[(i, label)]}
                continue
            if time.perf_counter() > deadline and label != configs[0][0]:
                row["configs"][label] = {"skipped": "budget"}
                continue
            try:
                _, extra = run_cfg(rec, cfg)
                compiled = gl.LAST_LAUNCH.get("compiled")
                sync()
                diff = None
                if ref_extra is None:
                    ref_extra = [t.clone() if isinstance(t, torch.Tensor) else t for t in extra]
                else:
                    diff = compare(ref_extra, extra)
                ms = do_bench(lambda: run_cfg(rec, cfg), warmup=10, rep=60, return_mode="median")
                row["configs"][label] = {"ms": ms, "cfg": dataclasses.asdict(cfg), "diff_vs_default": diff,
                                         **resources(compiled)}
            except Exception as exc:  # noqa: BLE001
                row["configs"][label] = {"error": f"{type(exc).__name__}: {str(exc)[:160]}"}
        p1 = plain_ms(rec)
        row["plain_ms"] = [p0, p1]
        plain = (p0 + p1) / 2
        timed = {k: v for k, v in row["configs"].items() if "ms" in v and (v["diff_vs_default"] is None or v["diff_vs_default"] < 2e-2)}
        for v in timed.values():
            v["x_plain"] = v["ms"] / plain
        if timed:
            bl = min(timed, key=lambda k: timed[k]["ms"])
            row["best"] = bl
            best_cfg[i] = gl.GemmConfig(**timed[bl]["cfg"])
        d = row["configs"].get(configs[0][0], {})
        log(f"[{key}] {rec['phase']} {rec['origin'][:60]:60s} {kw['M']}x{kw['N']}x{kw['K']} plain {plain:.3f} "
            f"default {d.get('ms', float('nan')):.3f} ({d.get('x_plain', float('nan')):.3f}x, regs {d.get('n_regs')}, "
            f"spills {d.get('n_spills')}, smem {d.get('shared')}) best {row.get('best')} "
            f"{timed[row['best']]['ms'] if 'best' in row else float('nan'):.3f} "
            f"({timed[row['best']]['x_plain'] if 'best' in row else float('nan'):.3f}x)")
        result["kernels"].append(row)
        (out_dir / f"kernel_table_{key}.json").write_text(json.dumps(result, indent=1, default=str))
    # whole functions: default configs, then each kernel's best (through the tuner's memo)
    def fwd_bwd():
        out = program.llama_block_fwd(*inputs)
        program.llama_block_bwd(*out[2:], *ups)

    def time_program(tag):
        t_f = do_bench(lambda: program.llama_block_fwd(*inputs), warmup=5, rep=100, return_mode="median")
        t_fb = do_bench(fwd_bwd, warmup=5, rep=100, return_mode="median")
        return {"fwd_ms": t_f, "fwd_bwd_ms": t_fb}

    if time.perf_counter() < deadline + 60 and not only:
        plain_sum_f = sum(sum(r["plain_ms"]) / 2 for r in result["kernels"] if r["phase"] == "fwd")
        plain_sum = sum(sum(r["plain_ms"]) / 2 for r in result["kernels"])
        result["plain_sum"] = {"fwd": plain_sum_f, "fwd_bwd": plain_sum}
        result["program_default"] = time_program("default")
        # best per kernel: through the memo of the tuner (tuning key of each launch)
        gl._PLANS.clear()
        for i, cfg in best_cfg.items():
            rec = RECORD[i]
            kw = rec["kw"]
            M, N, K, strides, il, _ = launch_args(rec, cfg)
            layouts = gl._tma_layouts(rec["a"], rec["b"], M, N, K, strides, il)
            tkey = gl._tuning_key(rec["kernel"], kw.get("key", ""), rec["a"], rec["b"], M, N, K, kw["transpose_a"],
                                  kw["transpose_b"], il, kw.get("bn_multiple_of", 1), kw.get("bm_multiple_of", 1),
                                  "tma", layouts)
            gl._MEMO[tkey] = cfg
        result["program_best"] = time_program("best")
        result["program_default_again"] = None
        gl._MEMO.clear()
        gl._PLANS.clear()
        result["program_default_again"] = time_program("default")
        if DEV["device"] == "cuda":
            result["nongemm"] = profile_nongemm(program, inputs, ups)
        log(f"[{key}] plain sum fwd {plain_sum_f:.3f} fwd+bwd {plain_sum:.3f}; default {result['program_default']} "
            f"best {result['program_best']} default again {result['program_default_again']}")
    if unfused and DEV["device"] == "cuda":
        result["unfused_swiglu"] = unfused_swiglu(key, log)
    if hand:
        result["hand"] = []
        for variant in hand.split(","):
            result["hand"] += hand_variants(program, key, out_dir, log, variant, sweep=sweep,
                                            labels=[label for label, _ in SWEEPS[sweep]] if only else HAND_CFGS,
                                            text=text, rounds=rounds)
    (out_dir / f"kernel_table_{key}.json").write_text(json.dumps(result, indent=1, default=str))
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="1b,8b")
    ap.add_argument("--sweep", default="default", choices=sorted(SWEEPS))
    ap.add_argument("--budget-s", type=float, default=420.0, help="per-config timing stops after this (s)")
    ap.add_argument("--hand", default="", help="comma-separated hand-edited epilogue variants to time (hand, hand2)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="--hand: timed pairs per tile, in alternating order (median over rounds)")
    ap.add_argument("--only", default="", help="'|'-separated origin substrings: only these kernels (no whole-program timing)")
    ap.add_argument("--unfused", action="store_true", help="time the SwiGLU backward unfused (cuBLAS dgrad + a Triton pass)")
    ap.add_argument("--cpu", action="store_true", help="plumbing check under TRITON_INTERPRET=1 (shape smoke)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    shapes = args.shapes.split(",")

    def log(msg):
        print(f"{time.perf_counter() - start:7.1f}s {msg}", flush=True)

    if args.cpu:
        DEV["device"] = "cpu"
        gl.set_launch_options(path="tma")  # the interpreter emulates tensor descriptors: check the TMA epilogues' indexing
    log(f"{torch.cuda.get_device_name() if not args.cpu else 'cpu'} torch {torch.__version__} triton {triton.__version__}")
    for n, key in enumerate(shapes):
        # split the remaining budget over the remaining shapes
        left = args.budget_s - (time.perf_counter() - start)
        deadline = time.perf_counter() + left / (len(shapes) - n)
        run_shape(key, args.sweep, deadline, out_dir, log, hand=args.hand, only=args.only, unfused=args.unfused,
                  rounds=args.rounds)
        if not args.cpu:
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
