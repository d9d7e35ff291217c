"""The LLaMA block (non-attention part), forward and forward+backward: coda-ir against its plain
GEMMs, PyTorch eager, torch.compile and Liger-Kernel, at the LLaMA-3-8B and -1B shapes.

    python bench/bench_block.py [--shapes 8b,1b] [--variants ...] [--rounds 5] [--out DIR]
    python bench/bench_block.py --smoke      # CPU interpreter, tiny shape, checks only, no timing

One process, one GPU. Per shape, the nn program is generated (tests/programs/generate.py
`nn_llama_block`), then every variant is built, run once (compile + autotune, timed), checked
against the float64 autograd reference of the nn program (`coda_ir.testing.reference_pair` /
`reference_gradients`, the NN_DIALECT.md bar of `check_close`: results and all 8 gradients), its
peak memory measured, and finally all of them are timed side by side (`do_bench` medians, rounds
in rotating order). Variants (`--variants`, comma-separated group names):

  coda      `coda fwd`: `coda_ir.compile(text, pipeline="nn-to-coda")`, one call of llama_block
  derived   `coda fwd+bwd (derived)`: pipeline "nn-autodiff,nn-to-coda": llama_block_fwd, then
            llama_block_bwd(*saved, dx2, dr); also its forward alone (`coda fwd (derived f_fwd)`)
  torch     the derived block as users run it: `coda_ir.torch.function(text)` (custom ops, autograd
            through @f_bwd), fwd+bwd = forward + torch.autograd.grad of every float input with the
            same upstream gradients (as the torch variants), `coda_ir.torch fwd+bwd`: the default,
            the backward hands its saved tensors over and donates those saved only for it
            (session 10); `coda_ir.torch fwd+bwd (donation off)`: `set_donation(False)`, the
            behaviour before (saved tensors held by the ctx until the backward returns)
  derived-epilogue  the same with `nn-to-coda{gated-grad=epilogue}`: the SwiGLU backward forced
            into the down-projection dgrad GEMM's epilogue (what `auto` chose before session 9)
  derived-options  the same with `nn-to-coda{OPTS}`, OPTS from `--derived-options` (e.g.
            "norm-grad=epilogue": the form the plan did not choose, in the same process)
  hand      `coda fwd+bwd (hand-written)`: generate.py's coda_llama_fwd/coda_llama_bwd at the
            shape (examples/coda/llama_{fwd,bwd}.mlir at 8B)
  gemms     `gemms fwd`: the 4 cuBLAS F.linear GEMMs; `gemms fwd+bwd`: those plus dX = dY @ W and
            dW = dY.T @ X of each (12 torch.matmul on same-shaped tensors): the speed of light
  eager     the block as a PyTorch user writes it (F.rms_norm, fused gate/up split by chunk, fused
            QKV split into q/k/v, HF RoPE from cos/sin tables computed once outside the timed
            region, results x2, q, k, v), fwd under no_grad, fwd+bwd = forward + autograd.grad
            with the same upstream gradients
  compile   torch.compile(eager block, fullgraph) in mode "default"
  compile-max  the same in mode "max-autotune-no-cudagraphs"
  liger     the same block with Liger-Kernel's LigerRMSNormFunction, liger_rotary_pos_emb and
            LigerFusedGateUpSiLUMulFunction (else LigerSiLUMulFunction); skipped, with the reason
            recorded, when liger_kernel does not import

A coda variant that fails its check is not timed. Autotuning is bounded by `--tune` (short: 3 of
the Hopper tile candidates, 4 for interleaved kernels) and cached on disk under $CODA_CACHE_DIR
(Triton's own cache: $TRITON_CACHE_DIR); `--budget-s` skips variants still unbuilt when the run's
wall time nears it, so the tables and JSON always come out. JSON: $OUT/bench_block.json (written
after every step), $OUT/autotune.json (the coda tuning cache), the table last.

On the lent GPU (one shape per call fits 9 minutes from cold caches; the caches under .devcache/
stay on a warm machine, so a repeat of the call, or both shapes in one call, then runs warm):

    python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl && \
    export PYTHONPATH=$PWD/.site:$PWD CODA_CACHE_DIR=$PWD/.devcache/coda \
      TRITON_CACHE_DIR=$PWD/.devcache/triton TORCHINDUCTOR_CACHE_DIR=$PWD/.devcache/inductor && \
    timeout 525 python3 bench/bench_block.py --shapes 8b --budget-s 470 --warm-compile --out $OUT
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "programs"))

from generate import Llama, coda_llama_bwd, coda_llama_fwd, nn_llama_block  # noqa: E402

SHAPES = {
    "8b": Llama("LLaMA-3-8B", m=8192, d=4096, f=14336, hd=128, hq=32, hkv=8, eps=1e-5, theta=500000.0),
    "1b": Llama("LLaMA-3.2-1B", m=16384, d=2048, f=8192, hd=64, hq=32, hkv=8, eps=1e-5, theta=500000.0),
    "smoke": Llama("smoke", m=64, d=64, f=96, hd=16, hq=2, hkv=1, eps=1e-5, theta=500000.0),
}
# Built in this order (most wanted first: a spent --budget-s skips the tail).
GROUPS = ("gemms", "eager", "coda", "derived", "torch", "compile", "liger", "hand", "compile-max", "derived-epilogue", "derived-options")
# A group starts only with this much of its shape's build budget left (s): roughly its cold
# cost on the lent H100 (Triton compiles ~3-5 s per GEMM kernel and candidate: derived has 16 GEMM
# launch sites, hand-written 12, the forward 4); a fifth of it when the autotune cache was warm.
MIN_LEFT = {"coda": 40, "derived": 150, "torch": 150, "derived-epilogue": 150, "derived-options": 150, "hand": 120, "compile": 30, "liger": 10, "compile-max": 120}
# Hopper candidates kept by --tune short (indices into coda_ir.tiling.TMA_CANDIDATES): 128x256 s3,
# 128x256 s4, 128x128 w8 s4 -- the winners of every earlier 8B run (bench/RESULTS.md).
SHORT_TMA = (0, 2, 5)

F_NAME = "llama_block"


# ============================================================================ the PyTorch block


def rope_tables(pos, hd: int, theta: float, dtype):
    """HF's cos/sin for positions `pos` ([M] ints): [M, 1, hd] in the activation dtype."""
    import torch

    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, device=pos.device, dtype=torch.int64).float() / hd))
    freqs = pos.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype)[:, None, :], emb.sin().to(dtype)[:, None, :]


def rotate_half(x):
    import torch

    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def llama_block_torch(x0, y0, wo, wn0, wgu, wd, wn1, wqkv, cos, sin, *, eps: float, hd: int, hq: int, hkv: int):
    """The block as a PyTorch user writes it (Hugging Face LLaMA, fused gate/up and QKV weights)."""
    import torch.nn.functional as F

    m, d = x0.shape
    x1 = x0 + F.linear(y0, wo)
    gate, up = F.linear(F.rms_norm(x1, (d,), wn0, eps), wgu).chunk(2, dim=-1)
    x2 = x1 + F.linear(F.silu(gate) * up, wd)
    q, k, v = F.linear(F.rms_norm(x2, (d,), wn1, eps), wqkv).split([hq * hd, hkv * hd, hkv * hd], dim=-1)
    q, k = q.view(m, hq, hd), k.view(m, hkv, hd)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    return x2, q, k, v


def llama_block_eager(x0, y0, wo, wn0, wgu, wd, wn1, wqkv, pos, *, eps, head_dim, rotary_heads, theta):
    """The nn program's signature and results (x2, packed roped qkv), for bench_mainloop.py."""
    hkv = wqkv.shape[0] // head_dim - rotary_heads
    cos, sin = rope_tables(pos, head_dim, theta, x0.dtype)
    x2, q, k, v = llama_block_torch(x0, y0, wo, wn0, wgu, wd, wn1, wqkv, cos, sin, eps=eps, hd=head_dim,
                                    hq=rotary_heads - hkv, hkv=hkv)
    return x2, as_qkv(q, k, v)


def liger_fns():
    """Liger-Kernel's RMSNorm, RoPE and SwiGLU, or raise ImportError."""
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    from liger_kernel.transformers.rope import liger_rotary_pos_emb

    try:
        from liger_kernel.ops.swiglu import LigerFusedGateUpSiLUMulFunction

        def swiglu(z):
            return LigerFusedGateUpSiLUMulFunction.apply(z)

        swiglu_name = "LigerFusedGateUpSiLUMulFunction"
    except ImportError:
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction

        def swiglu(z):
            g, u = z.chunk(2, dim=-1)
            return LigerSiLUMulFunction.apply(g, u)

        swiglu_name = "LigerSiLUMulFunction"
    return LigerRMSNormFunction, liger_rotary_pos_emb, swiglu, swiglu_name


def llama_block_liger(x0, y0, wo, wn0, wgu, wd, wn1, wqkv, cos, sin, *, eps, hd, hq, hkv, fns):
    import torch.nn.functional as F

    rms, rope, swiglu, _ = fns
    m, d = x0.shape
    x1 = x0 + F.linear(y0, wo)
    z = F.linear(rms.apply(x1, wn0, eps, 0.0, "llama", True, None), wgu)
    x2 = x1 + F.linear(swiglu(z), wd)
    q, k, v = F.linear(rms.apply(x2, wn1, eps, 0.0, "llama", True, None), wqkv).split(
        [hq * hd, hkv * hd, hkv * hd], dim=-1)
    # Liger's RoPE takes HF's (batch, heads, seq, head_dim) views and cos/sin [seq, head_dim].
    q, k = rope(q.view(1, m, hq, hd).transpose(1, 2), k.view(1, m, hkv, hd).transpose(1, 2),
                cos[:, 0, :], sin[:, 0, :])
    return x2, q.transpose(1, 2).reshape(m, hq, hd), k.transpose(1, 2).reshape(m, hkv, hd), v


def as_qkv(q, k, v):
    import torch

    m = v.shape[0]
    return torch.cat([q.reshape(m, -1), k.reshape(m, -1), v.reshape(m, -1)], dim=1)


# ============================================================================ helpers


def timed_rounds(fns: dict, rounds: int) -> tuple[dict[str, float], dict[str, list[float]]]:
    import triton.testing

    samples: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            samples[name].append(triton.testing.do_bench(fns[name], warmup=25, rep=200, return_mode="median"))
    return {name: statistics.median(v) for name, v in samples.items()}, samples


def ratio_median(samples: dict, num: str, den: str) -> float:
    """Median over rounds of num/den, each pair from the same round."""
    return statistics.median(a / b for a, b in zip(samples[num], samples[den]))


def sync(dev: str) -> None:
    if dev == "cuda":
        import torch

        torch.cuda.synchronize()


def peak_mib(fn, dev: str) -> float | None:
    """Peak memory one call allocates above what was resident before it (MiB)."""
    if dev != "cuda":
        return None
    import torch

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak / 2**20


def gemm_flops(s: Llama) -> float:
    return 2.0 * s.m * s.d * (s.d + 2 * s.f + s.qkv) + 2.0 * s.m * s.f * s.d


def set_tuning(mode: str) -> dict:
    """Bound the coda GEMM autotuner (bench-local: the runtime is not changed)."""
    from coda_ir import tiling
    from coda_ir.runtime import gemm_launch

    info = {"tune": mode, "cache": str(gemm_launch.cache_path())}
    if mode == "off":
        from coda_ir.runtime import config

        config.configure(autotune="off")
    elif mode == "short":
        # Replacing the candidate list (not LaunchOptions.tma_candidates, which also turns off
        # the paired-B variants of interleaved kernels).
        tiling.TMA_CANDIDATES = tuple(tiling.TMA_CANDIDATES[i] for i in SHORT_TMA)
        info["candidates"] = [asdict(c) for c in tiling.TMA_CANDIDATES]
    try:
        info["cache_entries_before"] = len(json.loads(gemm_launch.cache_path().read_text()))
    except (OSError, ValueError):
        info["cache_entries_before"] = 0
    return info


# ============================================================================ one shape


class ShapeRun:
    def __init__(self, key: str, s: Llama, args, dev: str, log, save):
        import torch

        from coda_ir.reference import load_func
        from coda_ir.testing import random_inputs, random_upstream

        self.key, self.s, self.args, self.dev, self.log, self.save = key, s, args, dev, log, save
        self.text = nn_llama_block(s, fname=F_NAME)
        self.fn = load_func(self.text)
        self.inputs = random_inputs(self.fn, seed=1, device=dev)
        self.ups = random_upstream(self.fn, seed=1, device=dev)  # dx2 [M, D], dr [M, QKV]
        self.props = dict(eps=s.eps, hd=s.hd, hq=s.hq, hkv=s.hkv)
        x0 = self.inputs[0]
        self.cos, self.sin = rope_tables(self.inputs[-1], s.hd, s.theta, x0.dtype)
        dr = self.ups[1]
        m = s.m
        self.torch_ups = [self.ups[0], dr[:, : s.hq * s.hd].reshape(m, s.hq, s.hd).contiguous(),
                          dr[:, s.hq * s.hd: (s.hq + s.hkv) * s.hd].reshape(m, s.hkv, s.hd).contiguous(),
                          dr[:, (s.hq + s.hkv) * s.hd:].contiguous()]
        self.row: dict = {"shape": {**asdict(s), "qkv": s.qkv, "rotary_heads": s.rot},
                          "gemm_tflop_fwd": gemm_flops(s) / 1e12, "variants": {}, "skipped": {}}
        self.fns_fwd: dict = {}
        self.fns_fb: dict = {}
        self.row["fn_variant"] = {}
        self.cost_scale = 1.0
        self.ref = None
        torch.manual_seed(0)

    # ------------------------------------------------------------------ reference and checks

    def reference(self):
        from coda_ir.testing import reference_gradients
        from coda_ir.reference import reference_pair

        t0 = time.perf_counter()
        ref64, ref_t = reference_pair(self.fn, self.inputs)
        g64, g_t = reference_gradients(self.fn, self.inputs, self.ups)
        sync(self.dev)
        self.ref = (ref64 + g64, ref_t + g_t)
        self.row["reference"] = {"what": "float64 autograd through the nn op-by-op reference "
                                 "(coda_ir.testing.reference_pair + reference_gradients; the bf16 one for the bar)",
                                 "seconds": time.perf_counter() - t0}

    NAMES = ("x2", "r", "dx0", "dy0", "dwo", "dwn0", "dwgu", "dwd", "dwn1", "dwqkv")

    def check(self, outs, fwd_only: bool = False) -> tuple[bool, list[dict]]:
        from coda_ir.testing import check_close

        ref64, ref_t = self.ref
        rows, ok_all = [], True
        n = 2 if fwd_only else len(self.NAMES)
        for name, o, a64, at in zip(self.NAMES[:n], outs[:n], ref64[:n], ref_t[:n]):
            ok, err, bound = check_close(o, a64, at)
            ok_all &= bool(ok)
            rows.append({"output": name, "ok": bool(ok), "max_err": err, "bound": bound})
        bad = [r["output"] for r in rows if not r["ok"]]
        worst = max(rows, key=lambda r: r["max_err"] / r["bound"] if r["bound"] else math.inf)
        self.log(f"    check: {'ok' if ok_all else 'FAIL ' + ','.join(bad)} "
                 f"(worst {worst['output']}: {worst['max_err']:.3e} / bar {worst['bound']:.3e})")
        return ok_all, rows

    # ------------------------------------------------------------------ variants

    def register(self, variant: str, fwd_name: str, fwd, fb_name: str | None = None, fb=None) -> None:
        self.fns_fwd[fwd_name] = fwd
        self.row["fn_variant"][fwd_name] = variant
        if fb is not None:
            self.fns_fb[fb_name] = fb
            self.row["fn_variant"][fb_name] = variant

    def leaves(self):
        return [t.detach().clone().requires_grad_(True) for t in self.inputs[:-1]]

    def torch_fwd_bwd(self, block):
        """fwd+bwd closure of a PyTorch block: forward, then autograd.grad of every float input."""
        import torch

        cos, sin = self.cos, self.sin
        ups = self.torch_ups

        def run():
            leaves = self.leaves_cache
            outs = block(*leaves, cos, sin)
            grads = torch.autograd.grad(outs, leaves, ups)
            return outs, grads

        self.leaves_cache = self.leaves()
        return run

    def torch_outs(self, outs, grads):
        x2, q, k, v = outs
        return [x2, as_qkv(q, k, v), *grads]

    def add_torch(self, name: str, block, *, compile_mode: str | None = None, extra: dict | None = None):
        import torch

        args = self.inputs[:-1]
        cos, sin = self.cos, self.sin
        rec: dict = {"kind": "baseline", **(extra or {})}
        if compile_mode is not None:
            import torch._dynamo

            # No dynamo reset between modes: each mode's graphs (inference, training) stay cached
            # under its own backend guard.
            torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 16)
            inner = block

            def block(*a):
                return inner(*a)

            # A code object of its own per mode (dynamo caches compiled frames per code object).
            import types

            block = types.FunctionType(block.__code__.replace(co_name=f"block_{compile_mode.replace('-', '_')}"),
                                       block.__globals__, block.__name__, None, block.__closure__)
            block = torch.compile(block, mode=compile_mode, fullgraph=True, dynamic=False)
        fb = self.torch_fwd_bwd(block)

        def fwd():
            with torch.no_grad():
                return block(*args, cos, sin)

        t0 = time.perf_counter()
        fwd()
        sync(self.dev)
        rec["first_call_fwd_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        outs, grads = fb()
        sync(self.dev)
        rec["first_call_fwd_bwd_s"] = time.perf_counter() - t0
        ok, rec["checks"] = self.check(self.torch_outs(outs, grads))
        rec["check_ok"] = ok
        del outs, grads
        rec["peak_mib_fwd_bwd"] = peak_mib(fb, self.dev)
        rec["peak_mib_fwd"] = peak_mib(fwd, self.dev)
        self.register(name, f"{name} fwd", fwd, f"{name} fwd+bwd", fb)
        self.row["variants"][name] = rec

    def g_gemms(self):
        import torch
        import torch.nn.functional as F

        s, dev, dt = self.s, self.dev, self.inputs[0].dtype
        x0, y0, wo, wn0, wgu, wd, wn1, wqkv, pos = self.inputs
        rnd = lambda *sh: torch.randn(*sh, device=dev, dtype=dt)  # noqa: E731
        h1, g, h2 = rnd(s.m, s.d), rnd(s.m, s.f), rnd(s.m, s.d)
        dy_o, dz, dy_d, dq = rnd(s.m, s.d), rnd(s.m, 2 * s.f), rnd(s.m, s.d), rnd(s.m, s.qkv)

        def fwd():
            F.linear(y0, wo)
            F.linear(h1, wgu)
            F.linear(g, wd)
            return F.linear(h2, wqkv)

        def fb():
            fwd()
            for dy, w, x in ((dq, wqkv, h2), (dy_d, wd, g), (dz, wgu, h1), (dy_o, wo, y0)):
                torch.matmul(dy, w)      # dX [M, in]
                torch.matmul(dy.T, x)    # dW [out, in]

        self.register("gemms", "gemms fwd", fwd, "gemms fwd+bwd", fb)
        self.row["variants"]["gemms"] = {"kind": "speed of light", "peak_mib_fwd_bwd": peak_mib(fb, self.dev)}

    def g_eager(self):
        import functools

        self.add_torch("eager", functools.partial(llama_block_torch, **self.props))

    def g_compile(self, mode: str = "default"):
        import functools

        self.add_torch(f"torch.compile {mode}", functools.partial(llama_block_torch, **self.props),
                       compile_mode=mode)

    def g_compile_max(self):
        self.g_compile("max-autotune-no-cudagraphs")

    def g_liger(self):
        import functools

        try:
            import liger_kernel  # noqa: F401

            fns = liger_fns()
            version = getattr(liger_kernel, "__version__", None)
            if version is None:
                from importlib.metadata import version as v

                version = v("liger-kernel")
        except Exception as exc:
            self.row["skipped"]["liger"] = f"liger_kernel not importable: {type(exc).__name__}: {exc}"
            self.log(f"  liger: skipped ({self.row['skipped']['liger']})")
            return
        if self.dev == "cpu":
            self.row["skipped"]["liger"] = "Liger's kernels need a GPU"
            return
        self.add_torch("liger", functools.partial(llama_block_liger, **self.props, fns=fns),
                       extra={"liger_kernel": version, "swiglu": fns[3]})

    def compile_coda(self, text: str, pipeline: str, rec: dict):
        import coda_ir

        t0 = time.perf_counter()
        prog = coda_ir.compile(text, pipeline=pipeline)
        rec["compile_s"] = time.perf_counter() - t0
        rec["pipeline"] = pipeline
        return prog

    def g_coda(self):
        rec: dict = {"kind": "coda"}
        self.row["variants"]["coda"] = rec
        prog = self.compile_coda(self.text, "nn-to-coda", rec)
        run = getattr(prog, F_NAME)
        rec["kernels"] = prog.kernel_count(F_NAME)
        t0 = time.perf_counter()
        outs = run(*self.inputs)
        sync(self.dev)
        rec["first_call_s"] = time.perf_counter() - t0
        ok, rec["checks"] = self.check(list(outs), fwd_only=True)
        rec["check_ok"] = ok
        rec["peak_mib_fwd"] = peak_mib(lambda: run(*self.inputs), self.dev)
        if ok:
            self.register("coda", "coda fwd", lambda: run(*self.inputs))

    def g_derived_epilogue(self):
        """The derived program with the gated backward forced into the dgrad GEMM's epilogue."""
        self.g_derived("nn-autodiff,nn-to-coda{gated-grad=epilogue}", " gated-grad=epilogue")

    def g_derived_options(self):
        """The derived program with the pass options of `--derived-options` on nn-to-coda."""
        opts = self.args.derived_options.strip()
        if not opts:  # in the default variant list: nothing to add without options
            self.row["skipped"]["derived-options"] = "no --derived-options given"
            return
        self.g_derived(f"nn-autodiff,nn-to-coda{{{opts}}}", f" {opts}")

    def g_derived(self, pipeline: str = "nn-autodiff,nn-to-coda", tag: str = ""):
        rec: dict = {"kind": "coda"}
        self.row["variants"]["coda derived" + tag] = rec
        prog = self.compile_coda(self.text, pipeline, rec)
        f_fwd, f_bwd = getattr(prog, f"{F_NAME}_fwd"), getattr(prog, f"{F_NAME}_bwd")
        rec["kernels_fwd"] = prog.kernel_count(f"{F_NAME}_fwd")
        rec["kernels_bwd"] = prog.kernel_count(f"{F_NAME}_bwd")
        inputs, ups = self.inputs, self.ups

        def fb():
            o = f_fwd(*inputs)
            return o, f_bwd(*o[2:], *ups)

        t0 = time.perf_counter()
        fo = f_fwd(*inputs)
        sync(self.dev)
        rec["first_call_fwd_s"] = time.perf_counter() - t0
        rec["saved"] = [list(t.shape) + [str(t.dtype)] for t in fo[2:]]
        t0 = time.perf_counter()
        grads = f_bwd(*fo[2:], *ups)
        sync(self.dev)
        rec["first_call_bwd_s"] = time.perf_counter() - t0
        grads = list(grads) if isinstance(grads, (tuple, list)) else [grads]
        ok, rec["checks"] = self.check([fo[0], fo[1], *grads])
        rec["check_ok"] = ok
        rec["check_method"] = "float64 autograd reference, NN_DIALECT.md bar (what coda_ir.testing.check_gradients does)"
        if self.dev == "cpu":
            from coda_ir.testing import check_gradients

            try:
                check_gradients(prog, self.text, self.inputs, upstream=self.ups)
                rec["check_gradients"] = "ok"
                self.log("    coda_ir.testing.check_gradients: ok")
            except AssertionError as exc:
                rec["check_gradients"] = str(exc)[:2000]
                rec["check_ok"] = ok = False
                self.log(f"    coda_ir.testing.check_gradients: FAIL\n{exc}")
        del fo, grads
        rec["peak_mib_fwd_bwd"] = peak_mib(fb, self.dev)
        rec["peak_mib_fwd"] = peak_mib(lambda: f_fwd(*inputs), self.dev)
        if ok:
            self.register("coda derived" + tag, f"coda fwd (derived f_fwd{tag})", lambda: f_fwd(*inputs),
                          f"coda fwd+bwd (derived{tag})", fb)
        if not tag and self.args.warm_compile and self.dev == "cuda" and time.time() < self.deadline - 150 * self.cost_scale:
            rec["warm_compile"] = warm_compile_probe(self.key, self.args)
            self.log(f"    warm compile (new process, disk caches): {rec['warm_compile']}")

    def g_torch(self):
        """The derived block through `coda_ir.torch` autograd, with and without donation."""
        import torch

        import coda_ir.torch
        from coda_ir.torch.function import set_donation

        t0 = time.perf_counter()
        fn = coda_ir.torch.function(self.text, pipeline="nn-to-coda", remarks=False)
        compile_s = time.perf_counter() - t0
        pos, ups = self.inputs[-1], self.ups

        def make(donate: bool):
            leaves = self.leaves()

            def run():
                before = set_donation(donate)
                try:
                    outs = fn(*leaves, pos)
                    return outs, torch.autograd.grad(outs, leaves, ups)
                finally:
                    set_donation(before)
            return run

        for donate, variant in ((True, "coda_ir.torch"), (False, "coda_ir.torch (donation off)")):
            rec: dict = {"kind": "coda", "compile_s": compile_s if donate else 0.0,
                         "what": "coda_ir.torch.function autograd, set_donation(%s)" % donate}
            self.row["variants"][variant] = rec
            run = make(donate)
            t0 = time.perf_counter()
            outs, grads = run()
            sync(self.dev)
            rec["first_call_s"] = time.perf_counter() - t0
            ok, rec["checks"] = self.check([outs[0], outs[1], *grads])
            rec["check_ok"] = ok
            del outs, grads
            rec["peak_mib_fwd_bwd"] = peak_mib(run, self.dev)
            self.log(f"    {variant}: peak fwd+bwd {rec['peak_mib_fwd_bwd']} MiB")
            if donate:
                bwd = fn.backward_module([True] * len(fn.float_args), donate=True, hand_over=True)
                rec["written_over"] = [op.attributes["coda.origin"].data for op in bwd.ir.walk()
                                       if "coda.writes_over" in op.attributes]
            if ok:
                name = f"{variant} fwd+bwd"
                self.fns_fb[name] = run
                self.row["fn_variant"][name] = variant

    def g_hand(self):
        rec: dict = {"kind": "coda", "source": "tests/programs/generate.py coda_llama_fwd/coda_llama_bwd at this shape"
                     + (" (= examples/coda/llama_{fwd,bwd}.mlir)" if self.key == "8b" else "")}
        self.row["variants"]["coda hand-written"] = rec
        s = self.s
        if s.m == SHAPES["8b"].m and s.d == SHAPES["8b"].d:
            ftext = (ROOT / "examples" / "coda" / "llama_fwd.mlir").read_text()
            btext = (ROOT / "examples" / "coda" / "llama_bwd.mlir").read_text()
            if ftext != coda_llama_fwd(s) or btext != coda_llama_bwd(s):
                rec["note"] = "examples/coda differ from generate.py at this shape; used the examples"
        else:
            ftext, btext = coda_llama_fwd(s), coda_llama_bwd(s)
        pf = self.compile_coda(ftext, "nn-to-coda", rec)
        t0 = time.perf_counter()
        pb = self.compile_coda(btext, "nn-to-coda", {})
        rec["compile_s"] += time.perf_counter() - t0
        fwd, bwd = pf.llama_fwd, pb.llama_bwd
        rec["kernels_fwd"] = pf.kernel_count("llama_fwd")
        rec["kernels_bwd"] = pb.kernel_count("llama_bwd")
        x0, y0, wo, wn0, wgu, wd, wn1, wqkv, pos = self.inputs
        dx2, dr = self.ups

        def bwd_of(o):
            x2, qkv, x1, z1, rstd1, rstd2 = o
            return bwd(dr, dx2, qkv, x1, x2, z1, rstd1, rstd2, y0, pos, wo, wgu, wd, wqkv, wn0, wn1)

        def fb():
            o = fwd(*self.inputs)
            return o, bwd_of(o)

        t0 = time.perf_counter()
        o = fwd(*self.inputs)
        sync(self.dev)
        rec["first_call_fwd_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        g = bwd_of(o)
        sync(self.dev)
        rec["first_call_bwd_s"] = time.perf_counter() - t0
        dx0, dy0, dwo, dwgu, dwd, dwqkv, dwn0, dwn1 = g
        ok, rec["checks"] = self.check([o[0], o[1], dx0, dy0, dwo, dwn0, dwgu, dwd, dwn1, dwqkv])
        rec["check_ok"] = ok
        del o, g
        rec["peak_mib_fwd_bwd"] = peak_mib(fb, self.dev)
        if ok:
            self.register("coda hand-written", "coda fwd (hand-written)", lambda: fwd(*self.inputs),
                          "coda fwd+bwd (hand-written)", fb)

    # ------------------------------------------------------------------ driver

    def build(self, groups: list[str], deadline: float) -> None:
        self.log(f"== {self.key}: {self.s.name} M={self.s.m} D={self.s.d} F={self.s.f} hd={self.s.hd} "
                 f"QKV={self.s.qkv} rotary_heads={self.s.rot}")
        self.deadline = deadline
        self.reference()
        for g in groups:
            if time.time() > deadline - MIN_LEFT.get(g, 0) * self.cost_scale:
                self.row["skipped"][g] = "wall-time budget (--budget-s) spent"
                self.log(f"  {g}: skipped (budget)")
                continue
            t0 = time.perf_counter()
            self.log(f"  {g} ...")
            try:
                getattr(self, "g_" + g.replace("-", "_"))()
            except Exception as exc:
                self.row.setdefault("errors", {})[g] = f"{type(exc).__name__}: {str(exc)[:3000]}"
                self.log(f"  {g}: ERROR {type(exc).__name__}: {str(exc)[:3000]}\n{traceback.format_exc()[-2500:]}")
            self.row.setdefault("build_s", {})[g] = time.perf_counter() - t0
            self.save()
        self.ref = None
        if self.dev == "cuda":
            import torch

            torch.cuda.empty_cache()

    def time_all(self, rounds: int) -> None:
        for label, fns, base in (("fwd", self.fns_fwd, "gemms fwd"), ("fwd+bwd", self.fns_fb, "gemms fwd+bwd")):
            if not fns:
                continue
            med, samples = timed_rounds(fns, rounds)
            out = {}
            for name, ms in med.items():
                out[name] = {"ms": ms, "rounds_ms": samples[name]}
                if base in samples:
                    out[name]["x_gemms"] = ratio_median(samples, name, base)
            self.row.setdefault("times", {})[label] = out
            self.save()


def warm_compile_probe(key: str, args) -> dict:
    """compile + first call of the derived fwd+bwd in a fresh process, with the disk caches warm."""
    code = (
        "import sys,time,json;sys.path.insert(0,%r);sys.argv=['x'];"
        "import bench.bench_block as b;print('WARM',json.dumps(b.compile_once(%r,%r)))" % (str(ROOT), key, args.tune)
    )
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        for line in r.stdout.splitlines():
            if line.startswith("WARM "):
                return json.loads(line[5:])
        return {"error": f"rc={r.returncode}: {r.stderr[-800:]}"}
    except subprocess.TimeoutExpired:
        return {"error": "timed out (300 s)"}


def compile_once(key: str, tune: str) -> dict:
    import torch

    import coda_ir
    from coda_ir.testing import random_inputs, random_upstream

    set_tuning(tune)
    s = SHAPES[key]
    text = nn_llama_block(s, fname=F_NAME)
    inputs = random_inputs(text, seed=1, device="cuda")
    ups = random_upstream(text, seed=1, device="cuda")
    t0 = time.perf_counter()
    prog = coda_ir.compile(text, pipeline="nn-autodiff,nn-to-coda")
    t1 = time.perf_counter()
    o = getattr(prog, F_NAME + "_fwd")(*inputs)
    getattr(prog, F_NAME + "_bwd")(*o[2:], *ups)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return {"compile_s": t1 - t0, "first_call_s": t2 - t1, "total_s": t2 - t0}


def print_table(report: dict, tune: str) -> None:
    """The short table: per shape, every timed variant with its ratio to the plain GEMMs."""
    print(f"\n{report['gpu']}, torch {report['torch']}, triton {report['triton']}, "
          f"liger {report['liger_kernel']}, {report['date']}, wall {report['wall_s']:.0f} s, tune={tune}")
    for key, row in report["shapes"].items():
        s = SHAPES[key]
        print(f"\n{key}: {s.name} M={s.m} D={s.d} F={s.f} hd={s.hd} QKV={s.qkv}")
        print(f"  {'variant':<44} {'ms':>8} {'x GEMMs':>8} {'peak MiB':>9} {'kernels':>8} {'1st call s':>10} check")
        times = row.get("times", {})

        def info_for(name: str) -> dict:
            return row["variants"].get(row.get("fn_variant", {}).get(name), {})

        for label in ("fwd", "fwd+bwd"):
            for name, t in times.get(label, {}).items():
                rec = info_for(name)
                fb = label == "fwd+bwd"
                peak = rec.get("peak_mib_fwd_bwd" if fb else "peak_mib_fwd")
                if "kernels_fwd" in rec:
                    kern = f"{rec['kernels_fwd']}+{rec['kernels_bwd']}" if fb else str(rec["kernels_fwd"])
                else:
                    kern = str(rec.get("kernels", ""))
                first = rec.get("first_call_s")
                if first is None and "first_call_fwd_s" in rec:
                    first = rec["first_call_fwd_s"] + (rec.get("first_call_bwd_s", 0) if fb else 0)
                    if fb and "first_call_fwd_bwd_s" in rec:
                        first = rec["first_call_fwd_s"] + rec["first_call_fwd_bwd_s"]
                if first is not None and "compile_s" in rec:
                    first += rec["compile_s"]
                chk = {True: "ok", False: "FAIL", None: ""}[rec.get("check_ok")]
                print(f"  {name:<44} {t['ms']:8.3f} {t.get('x_gemms', float('nan')):8.3f} "
                      f"{'' if peak is None else f'{peak:9.0f}':>9} {kern:>8} "
                      f"{'' if first is None else f'{first:10.1f}':>10} {chk}")
        if not times:
            for vname, rec in row["variants"].items():
                kern = rec.get("kernels", f"{rec['kernels_fwd']}+{rec['kernels_bwd']}" if "kernels_bwd" in rec else "-")
                chk = {True: "ok", False: "FAIL", None: "-"}[rec.get("check_ok")]
                print(f"  {vname:<44} kernels {kern!s:>6}  check {chk}")
        for g, why in row.get("skipped", {}).items():
            print(f"  skipped {g}: {why[:160]}")
        for g, err in row.get("errors", {}).items():
            print(f"  ERROR {g}: {err.splitlines()[0][:300]}")


# ============================================================================ main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="CPU interpreter at a tiny shape, checks only")
    parser.add_argument("--shapes", default="8b,1b", help="comma-separated: 8b, 1b (smoke: the tiny one)")
    parser.add_argument("--variants", default=",".join(GROUPS), help=f"comma-separated groups: {','.join(GROUPS)}")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tune", choices=("short", "full", "off"), default="short",
                        help="coda GEMM autotuning: 3-4 candidates (short), all, or the first")
    parser.add_argument("--budget-s", type=float, default=0,
                        help="skip building variants once this much wall time has passed (0: no limit); "
                             "~60 s per shape is kept for the timing rounds")
    parser.add_argument("--warm-compile", action="store_true",
                        help="also time compile + first call of the derived fwd+bwd in a fresh process (warm caches)")
    parser.add_argument("--derived-options", default="",
                        help="nn-to-coda pass options of the derived-options variant, e.g. norm-grad=epilogue")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()

    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
        args.shapes = "smoke"
    t_start = time.time()
    import torch

    dev = "cpu" if args.smoke else "cuda"
    groups = [g for g in args.variants.split(",") if g]
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {GROUPS}")
    if args.smoke:
        groups = [g for g in groups if g in ("coda", "derived", "torch", "derived-options", "hand", "eager", "liger")]
    keys = [k for k in args.shapes.split(",") if k]
    lines: list[str] = []

    def log(msg: str) -> None:
        print(msg, flush=True)
        lines.append(msg)

    import triton

    report: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "gpu": torch.cuda.get_device_name() if dev == "cuda" else "cpu (Triton interpreter)",
        "torch": torch.__version__, "triton": triton.__version__,
        "argv": sys.argv[1:], "tuning": set_tuning(args.tune), "shapes": {},
    }
    try:
        from importlib.metadata import version

        report["liger_kernel"] = version("liger-kernel")
    except Exception:
        report["liger_kernel"] = None
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        (out_dir / "bench_block.json").write_text(json.dumps(report, indent=1, default=str))

    log(json.dumps({k: report[k] for k in ("date", "gpu", "torch", "triton", "liger_kernel")}))
    if args.budget_s:
        # Each shape gets budget / shapes for its builds (less 60 s of timing rounds): say up front
        # which groups cannot start even on the first shape, instead of only skipping them later.
        share = args.budget_s / len(keys) - 60
        scale = 0.2 if report["tuning"]["cache_entries_before"] else 1.0
        starved = [g for g in groups if MIN_LEFT.get(g, 0) * scale > share]
        if starved:
            need = 60 + max(MIN_LEFT[g] for g in starved) * scale
            log(f"warning: --budget-s {args.budget_s:g} over {len(keys)} shape(s) leaves {share:.0f} s of builds per "
                f"shape; {', '.join(starved)} need(s) up to {need - 60:.0f} s (cold caches): they will be skipped. "
                f"Give at least {need * len(keys):.0f} s, or one shape per call.")
    failed = False
    for i, key in enumerate(keys):
        s = SHAPES[key]
        run = ShapeRun(key, s, args, dev, log, save)
        run.cost_scale = 0.2 if report["tuning"]["cache_entries_before"] else 1.0
        report["shapes"][key] = run.row
        # Each shape's builds get an equal share of the budget (what one leaves rolls over to the
        # next), less ~60 s kept for its timing rounds.
        deadline = t_start + args.budget_s * (i + 1) / len(keys) - 60 if args.budget_s else math.inf
        run.build(groups, deadline)
        for name, rec in run.row["variants"].items():
            if rec.get("kind") == "coda" and rec.get("check_ok") is False:
                failed = True
        if run.row.get("errors") and any(g in ("coda", "derived", "torch", "hand") for g in run.row["errors"]):
            failed = True
        if not args.smoke:
            run.time_all(args.rounds)
        del run
        if dev == "cuda":
            torch.cuda.empty_cache()
    report["wall_s"] = time.time() - t_start
    from coda_ir.runtime import gemm_launch

    if gemm_launch.cache_path().exists():
        (out_dir / "autotune.json").write_text(gemm_launch.cache_path().read_text())
    save()
    (out_dir / "bench_block.log").write_text("\n".join(lines) + "\n")

    print_table(report, args.tune)
    if failed:
        print("\nFAILED: a coda variant failed its check or did not build")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
