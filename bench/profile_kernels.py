"""Per-kernel GPU times of a compiled program (torch.profiler), beside the plain cuBLAS GEMM of
each GEMM kernel's shape: where a derived forward+backward spends its time.

    python bench/profile_kernels.py --shape 1b [--out DIR]

Compiles the LLaMA block at the shape with `nn-autodiff,nn-to-coda`, runs `@f_fwd` and
`@f_bwd` a few times under torch.profiler and prints every kernel's mean time (launch order),
then the plain GEMMs (`torch.matmul` on same-shaped operands, transposes as the kernel has them).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "programs"))

import torch  # noqa: E402

import coda_ir  # noqa: E402
from coda_ir import testing  # noqa: E402
from coda_ir.dialects import coda  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from bench_block import SHAPES, set_tuning  # noqa: E402
from generate import nn_llama_block  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="1b", choices=sorted(SHAPES))
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--pipeline", default="nn-autodiff,nn-to-coda")
    ap.add_argument("--no-plain", action="store_true", help="skip timing the plain GEMMs")
    ap.add_argument("--tune", choices=("short", "full", "off"), default="full",
                    help="bound the coda GEMM autotuner as bench_block.py --tune does")
    ap.add_argument("--timeline", action="store_true",
                    help="also: the GPU's idle time between the kernels of one forward+backward call, and the "
                         "host's enqueue time of each function with the GPU kept busy (is the host the limit?)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    set_tuning(args.tune)
    s = SHAPES[args.shape]
    text = nn_llama_block(s, fname="llama_block")
    program = coda_ir.compile(text, pipeline=args.pipeline)
    dev = "cuda"
    inputs = testing.random_inputs(text, seed=0, device=dev)
    ups = testing.random_upstream(text, seed=0, device=dev)
    fwd = program.llama_block_fwd(*inputs)
    saved = fwd[2:]
    program.llama_block_bwd(*saved, *ups)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.iters):
            out = program.llama_block_fwd(*inputs)
            program.llama_block_bwd(*out[2:], *ups)
        torch.cuda.synchronize()
    timeline = host_and_gaps(program, inputs, ups, args.iters) if args.timeline else None
    rows = []
    for ev in prof.key_averages():
        if ev.device_type.name != "CUDA" or ev.count == 0:
            continue
        total = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0.0)
        rows.append((ev.key, ev.count // args.iters, total / ev.count / 1000.0))
    rows.sort(key=lambda r: -r[2] * r[1])
    # plain GEMMs of every coda.gemm in the compiled module
    module = program.ir
    plain = []
    if module is not None and not args.no_plain:
        for f in module.body.block.ops:
            name = getattr(f, "sym_name", None)
            for op in f.walk():
                if isinstance(op, coda.GemmOp):
                    m, n, kk = op.problem_shape()
                    a = torch.randn(m, kk, device=dev, dtype=torch.bfloat16)
                    b = torch.randn(kk, n, device=dev, dtype=torch.bfloat16)
                    from triton.testing import do_bench

                    t = do_bench(lambda: a @ b, warmup=10, rep=50)
                    plain.append((name.data if name else "?", op.attributes.get("coda.origin").data
                                  if "coda.origin" in op.attributes else "gemm", m, n, kk, t))
    print("kernel                                                                   calls   mean ms")
    origins = {}
    for f in module.body.block.ops:
        for op in f.walk():
            if "coda.origin" in op.attributes and op.name in ("coda.elementwise", "coda.gemm", "coda.fold"):
                origins.setdefault(op.attributes["coda.origin"].data, None)
    for key, cnt, t in rows:
        print(f"{key[:72]:72s} {cnt:6d} {t:9.4f}")
    print("origins in order:", list(origins))
    print("\nplain cuBLAS GEMM per coda.gemm (function, origin, M, N, K, ms)")
    for row in plain:
        print(row)
    tag = "" if args.pipeline == "nn-autodiff,nn-to-coda" else "_" + "".join(c if c.isalnum() else "_" for c in args.pipeline)
    with open(Path(args.out) / f"profile_{args.shape}{tag}.json", "w") as fh:
        json.dump({"kernels": rows, "plain": plain, "timeline": timeline}, fh, indent=1)
    return 0


def host_and_gaps(program, inputs, ups, iters: int) -> dict:
    """Where a call's wall time goes besides its kernels.

    Host: each function's enqueue time (perf_counter around the call) while the GPU is held busy
    by `torch.cuda._sleep`, so no launch waits for a free queue slot and a hidden device-to-host
    sync would show as the sleep's length. GPU: one forward+backward under the profiler; the idle
    time before each kernel (from the previous kernel's end) and the span from the first kernel's
    start to the last one's end, against the sum of kernel times."""
    from torch.profiler import ProfilerActivity, profile

    fwd_fn, bwd_fn = program.llama_block_fwd, program.llama_block_bwd
    host: dict[str, list[float]] = {"fwd": [], "bwd": []}
    for _ in range(iters):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time: the queue stays busy
        t0 = time.perf_counter()
        out = fwd_fn(*inputs)
        t1 = time.perf_counter()
        bwd_fn(*out[2:], *ups)
        t2 = time.perf_counter()
        torch.cuda.synchronize()
        host["fwd"].append((t1 - t0) * 1e3)
        host["bwd"].append((t2 - t1) * 1e3)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda.synchronize()
        out = fwd_fn(*inputs)
        bwd_fn(*out[2:], *ups)
        torch.cuda.synchronize()
    kernels = sorted(
        (ev for ev in prof.events() if ev.device_type.name == "CUDA"),
        key=lambda ev: ev.time_range.start,
    )
    seq, prev_end = [], None
    for ev in kernels:
        start, end = ev.time_range.start, ev.time_range.end
        gap = 0.0 if prev_end is None else max(0.0, start - prev_end)
        seq.append({"kernel": ev.name, "gap_before_us": gap, "us": end - start})
        prev_end = end if prev_end is None else max(prev_end, end)
    busy = sum(k["us"] for k in seq) / 1e3
    from triton.testing import do_bench

    def fb():
        o = fwd_fn(*inputs)
        return bwd_fn(*o[2:], *ups)

    bench_ms = do_bench(fb, warmup=25, rep=200, return_mode="median")  # bench_block's method (L2 flushed)
    plain_seq = plain_gemm_sequence(program)
    sustained_runs = {"coda fwd+bwd": sustained(fb), "plain GEMMs": sustained(plain_seq)}
    print(f"fwd+bwd: do_bench median {bench_ms:.3f} ms (L2 flushed before each call)")
    for what, run in sustained_runs.items():
        picks = {i: run["per_call_ms"][i] for i in (0, 1, 4, 9, 19, 39) if i < len(run["per_call_ms"])}
        print(f"{what}: back to back, ms of call " + ", ".join(f"#{i + 1} {t:.3f}" for i, t in picks.items())
              + f"; SM clock MHz / power W sampled while they ran: {run['clock_power']}")
    span = (prev_end - kernels[0].time_range.start) / 1e3 if kernels else 0.0
    print("\nhost enqueue ms (GPU kept busy), per call: fwd " + " ".join(f"{t:.2f}" for t in host["fwd"])
          + " | bwd " + " ".join(f"{t:.2f}" for t in host["bwd"]))
    print(f"one fwd+bwd under the profiler: kernels {busy:.3f} ms, span {span:.3f} ms, idle {span - busy:.3f} ms")
    print("gap before (us)   kernel (us)   kernel")
    for k in seq:
        print(f"{k['gap_before_us']:15.1f} {k['us']:13.1f}   {k['kernel'][:70]}")
    return {"host_ms": host, "kernels_ms": busy, "span_ms": span, "do_bench_ms": bench_ms,
            "sustained": sustained_runs, "sequence": seq}


def plain_gemm_sequence(program):
    """Every coda.gemm of the forward and backward functions as a plain cuBLAS matmul, in order."""
    pairs = []
    for f in program.ir.body.block.ops:
        if getattr(f, "sym_name", None) is None or f.sym_name.data not in ("llama_block_fwd", "llama_block_bwd"):
            continue
        for op in f.walk():
            if isinstance(op, coda.GemmOp):
                m, n, kk = op.problem_shape()
                pairs.append((torch.randn(m, kk, device="cuda", dtype=torch.bfloat16),
                              torch.randn(kk, n, device="cuda", dtype=torch.bfloat16)))

    def run():
        for a, b in pairs:
            a @ b

    return run


def sustained(fn, calls: int = 40) -> dict:
    """`calls` calls enqueued back to back, one CUDA event between calls: per-call GPU time as the
    GPU warms up (clock and power sampled from NVML while the queue drains)."""
    torch.cuda.synchronize()
    time.sleep(1.0)  # start each run from an idle GPU
    events = [torch.cuda.Event(enable_timing=True) for _ in range(calls + 1)]
    events[0].record()
    for i in range(calls):
        fn()
        events[i + 1].record()
    samples = []
    for _ in range(6):
        try:
            samples.append((torch.cuda.clock_rate(), round(torch.cuda.power_draw() / 1000)))
        except Exception as exc:  # NVML missing: say so rather than fail the run
            samples.append(str(exc)[:60])
            break
        if events[-1].query():
            break
        time.sleep(0.08)
    torch.cuda.synchronize()
    return {"per_call_ms": [events[i].elapsed_time(events[i + 1]) for i in range(calls)], "clock_power": samples}


if __name__ == "__main__":
    sys.exit(main())
