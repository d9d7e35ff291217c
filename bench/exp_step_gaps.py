"""Where does a from_hf training step's time go between kernels? (GPU experiment, temporary)

    python bench/exp_step_gaps.py --shape llama1b --layers 4

Per configuration: GPU step time (events), host time to enqueue one step (no sync at the end),
and the same with the host index checks (embedding ids, cross-entropy targets) replaced by a
no-op, to see what their device-to-host syncs cost.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import bench_model  # noqa: E402


def measure(step, iters=8):
    gpu, host = [], []
    for _ in range(iters):
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t = time.perf_counter()
        s.record()
        step()
        e.record()
        host.append((time.perf_counter() - t) * 1e3)
        torch.cuda.synchronize()
        gpu.append(s.elapsed_time(e))
    return statistics.median(gpu), statistics.median(host)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="llama1b")
    p.add_argument("--layers", type=int, default=4)
    args = p.parse_args()
    shape = bench_model.SHAPES[args.shape]
    dev = torch.device("cuda")
    base = bench_model.make_model(shape, args.layers, torch.bfloat16, dev)
    step, _ = bench_model.build_variant("coda", base, shape, args.layers, 8192, 4096, torch.bfloat16, dev)
    step()
    step()
    out = {}
    out["coda"] = measure(step)
    from coda_ir.lowering import runtime

    real = runtime.check_indices
    runtime.check_indices = lambda *a, **k: None
    try:
        step()
        out["coda_no_index_checks"] = measure(step)
    finally:
        runtime.check_indices = real
    import cProfile
    import io
    import pstats

    torch.cuda.synchronize()
    prof_py = cProfile.Profile()
    prof_py.enable()
    for _ in range(3):
        step()
    prof_py.disable()
    torch.cuda.synchronize()
    buf = io.StringIO()
    pstats.Stats(prof_py, stream=buf).sort_stats("tottime").print_stats(45)
    print(buf.getvalue()[-9000:])
    buf = io.StringIO()
    pstats.Stats(prof_py, stream=buf).sort_stats("cumulative").print_stats(45)
    Path(os.environ.get("OUT", "."), "cprofile-cumulative.txt").write_text(buf.getvalue())
    # kernel sum via profiler
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        step()
        torch.cuda.synchronize()
    kernels = sorted((ev for ev in prof.events() if ev.device_type.name == "CUDA"), key=lambda ev: ev.time_range.start)
    gaps = []
    for before, after in zip(kernels, kernels[1:]):
        gap = after.time_range.start - before.time_range.end
        if gap > 0:
            gaps.append((gap / 1000.0, before.name[:60], after.name[:60]))
    total_gap = sum(g[0] for g in gaps)
    span = (kernels[-1].time_range.end - kernels[0].time_range.start) / 1000.0
    print(f"GPU span {span:.2f} ms, idle between kernels {total_gap:.2f} ms over {len(gaps)} gaps")
    for g in sorted(gaps, reverse=True)[:25]:
        print(f"  gap {g[0]:7.3f} ms after {g[1]} before {g[2]}")
    out["gaps"] = sorted(gaps, reverse=True)[:60]
    rows = []
    for ev in prof.key_averages():
        if ev.device_type.name == "CPU":
            rows.append((ev.key[:90], ev.count, ev.self_cpu_time_total / 1000.0))
    rows.sort(key=lambda r: -r[2])
    out["cpu_top"] = rows[:30]
    for k, v in out.items():
        if k != "cpu_top":
            print(f"{k:24s} gpu {v[0]:8.2f} ms  host enqueue {v[1]:8.2f} ms")
    print("CPU self time, top ops (one step):")
    for r in rows[:30]:
        print(f"  {r[2]:8.2f} ms {r[1]:5d}x {r[0]}")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "step-gaps.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
