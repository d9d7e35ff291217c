"""bench/bench_gaps.py's trace reading: which gaps between kernels the GPU waited on the host."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import bench_gaps  # noqa: E402


def _x(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid, "args": args}


def test_a_gap_counts_as_the_hosts_only_when_the_launch_came_late():
    trace = {"traceEvents": [
        _x("user_annotation", "step:fwd", 0, 1000),
        _x("cpu_op", "coda_ir::layer", 5, 900),
        # kernel a: launched at 10, runs 20..120
        _x("cuda_driver", "cuLaunchKernelEx", 10, 5, correlation=1),
        _x("kernel", "_layer_fwd_k0_elementwise", 20, 100, tid=7, correlation=1),
        # kernel b: launched at 30 (early), queued behind a: starts at 125, a 5 us gap the GPU
        # did not wait on the host for
        _x("cuda_driver", "cuLaunchKernelEx", 30, 5, correlation=2),
        _x("kernel", "_layer_fwd_k1_gemm", 125, 100, tid=7, correlation=2),
        # kernel c: launched at 400, after b ended at 225: a 190 us gap the GPU waited for
        _x("cpu_op", "aten::empty", 300, 10),
        _x("cuda_driver", "cuLaunchKernelEx", 400, 5, correlation=3),
        _x("kernel", "_layer_fwd_k2_fold", 415, 10, tid=7, correlation=3),
    ]}
    got = bench_gaps.analyse(trace, steps=1)
    fwd = got["phases"]["step:fwd"]
    assert fwd["kernels"] == 3 and fwd["kernel_us"] == 210
    assert fwd["gap_us"] == 5 + 190 and fwd["host_gap_us"] == 190
    assert [(g["where"], g["us_per_step"]) for g in got["host_gaps"]] == [
        ("step:fwd | coda_ir::layer | coda_ir::layer | _layer_fwd_k2_fold", 190)]
    deltas = {d["where"]: d["us_per_step"] for d in got["host_deltas"]}
    assert deltas["step:fwd | coda_ir::layer | _layer_fwd_k2_fold"] == 370  # 400 - 30


def test_a_steps_opening_lasts_until_its_first_long_kernel():
    trace = {"traceEvents": [
        _x("user_annotation", "step:fwd", 100, 2000),
        _x("cuda_driver", "cuLaunchKernelEx", 150, 5, correlation=1),
        _x("kernel", "tokens", 160, 4, tid=7, correlation=1),            # short: the opening goes on
        _x("cuda_driver", "cuLaunchKernelEx", 600, 5, correlation=2),
        _x("kernel", "_layer_fwd_k3_gemm", 700, 300, tid=7, correlation=2),  # the first long one
        _x("cuda_driver", "cuLaunchKernelEx", 650, 5, correlation=3),
        _x("kernel", "_layer_fwd_k4_gemm", 1100, 100, tid=7, correlation=3),
    ]}
    (step,) = bench_gaps.analyse(trace, steps=1)["steps"]
    assert step["opening_us"] == 600 and step["opening_busy_us"] == 4
    assert step["span_us"] == 1200 - 160 and step["busy_us"] == 404
    assert step["idle_in_span_us"] == 1040 - 404
