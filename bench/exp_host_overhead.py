"""Where does the compiled LLaMA block's time go between its kernels? (GPU experiment)

    python bench/exp_host_overhead.py [--out DIR]

bench_io_model.py found the six kernels' profiled GPU times summing to ~4.89 ms while `do_bench`
timed the whole call at ~5.60 ms (H100, 2026-11-22). This script separates the candidates,
timing the compiled block and its four plain cuBLAS GEMMs the same five ways in one run:
  * do_bench (Triton: L2 flushed before every call, events around each call),
  * a loop of back-to-back calls between two events (no flush: launch gaps hidden by queueing),
  * CUDA-graph replay (no host work at all),
  * torch.profiler: per call, the sum of kernel durations and the span first-start..last-end,
  * host time to enqueue one call (perf_counter, no synchronisation).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def loop_ms(fn, calls: int = 20, rounds: int = 5) -> float:
    """Median over rounds of (time of `calls` back-to-back calls) / calls."""
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end) / calls)
    return statistics.median(out)


def graph_ms(fn) -> float:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return loop_ms(graph.replay)


def host_us(fn, calls: int = 20) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def profile_calls(fn, calls: int = 6) -> dict:
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
            torch.cuda.synchronize()  # one call per window: spans do not mix
    kernels = sorted(
        (e.time_range.start, e.time_range.end, e.name)
        for e in prof.events()
        if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA
    )
    # split into calls at gaps longer than 200 us (the synchronize between calls)
    groups, cur = [], []
    for k in kernels:
        if cur and k[0] - cur[-1][1] > 200:
            groups.append(cur)
            cur = []
        cur.append(k)
    if cur:
        groups.append(cur)
    spans = [(g[-1][1] - g[0][0]) / 1e3 for g in groups]
    busy = [sum(e - s for s, e, _ in g) / 1e3 for g in groups]
    gaps = [[round((g[i + 1][0] - g[i][1]), 1) for i in range(len(g) - 1)] for g in groups]
    durations = [[(n[:40], round((e - s) / 1e3, 4)) for s, e, n in g] for g in groups]
    return {"span_ms": statistics.median(spans), "busy_ms": statistics.median(busy),
            "gaps_us_last_call": gaps[-1] if gaps else [], "kernels_last_call": durations[-1] if durations else []}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import triton
    from triton.testing import do_bench
    from xdsl.dialects import func

    import coda_ir
    from bench.bench_io_model import make_inputs

    path = ROOT / "examples" / "llama_block.mlir"
    parsed = coda_ir.parse(str(path))
    fn = next(op for op in parsed.walk() if isinstance(op, func.FuncOp))
    inputs = make_inputs(fn, "cuda")
    x0, y0, wo, wn0, wgu, wd, wn1, wqkv, pos = inputs
    compiled = coda_ir.compile(path.read_text())
    coda = lambda: compiled.llama_block(*inputs)  # noqa: E731
    a_gu = torch.randn(8192, 4096, device="cuda").bfloat16()
    a_d = torch.randn(8192, 14336, device="cuda").bfloat16()

    def plain():
        F.linear(y0, wo)
        F.linear(a_gu, wgu)
        F.linear(a_d, wd)
        F.linear(a_gu, wqkv)

    for f in (coda, plain, coda, plain):
        f()
    torch.cuda.synchronize()
    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "triton": triton.__version__}
    for name, f in (("coda", coda), ("plain", plain)):
        r = {}
        r["do_bench_ms"] = do_bench(f, warmup=25, rep=200, return_mode="median")
        r["loop_ms"] = loop_ms(f)
        r["graph_ms"] = graph_ms(f)
        r["host_us_per_call"] = host_us(f)
        r.update(profile_calls(f))
        res[name] = r
        print(name, json.dumps(r, indent=1), flush=True)
    # the same, per launch: host cost of each generated launch call
    from coda_ir.lowering import gemm_launch

    real = gemm_launch.launch_gemm
    host = []

    def timed(*a, **k):
        t0 = time.perf_counter()
        out = real(*a, **k)
        host.append(round((time.perf_counter() - t0) * 1e6, 1))
        return out

    gen = compiled.module(False)
    gen.launch_gemm = timed
    try:
        for _ in range(3):
            host.clear()
            coda()
        torch.cuda.synchronize()
    finally:
        gen.launch_gemm = real
    res["coda"]["launch_gemm_host_us"] = host
    print("launch_gemm host us per GEMM launch:", host)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "exp_host_overhead.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
