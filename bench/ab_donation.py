"""A/B of the session-10 backward (bench/RESULTS.md, session 10): the derived LLaMA block's
forward+backward through `coda_ir.torch`, with the backward's saved tensors handed over and dz
written over z ("on"), handed over only ("handover": no tensor donated, so a fresh dz and no
barrier), and neither ("off": `set_donation(False)`). Per shape: gradients bitwise equal across the
modes; ms per step (CUDA events over 5 steps, rounds in rotating order, median); the caching
allocator's device allocations (cudaMalloc) per step in steady state; and per kernel, the GPU time
of two steps (torch.profiler), to tell kernel time from host / allocator time.

    python bench/ab_donation.py --shapes 1b,8b --out $OUT     # GPU only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_block import F_NAME, SHAPES, set_tuning  # noqa: E402
from generate import nn_llama_block  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="1b,8b")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()
    import torch

    import coda_ir.torch
    from coda_ir.testing import random_inputs, random_upstream
    from coda_ir.torch.function import set_donation

    set_tuning("short")
    report: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "shapes": {}}
    for key in args.shapes.split(","):
        text = nn_llama_block(SHAPES[key], fname=F_NAME)
        fn = coda_ir.torch.function(text, remarks=False)
        inputs = random_inputs(text, seed=1, device="cuda")
        ups = random_upstream(text, seed=1, device="cuda")
        pos = inputs[-1]
        leaves = [t.detach().clone().requires_grad_(True) for t in inputs[:-1]]
        donated = fn.donated_arguments

        def step(mode: str):
            before = set_donation(mode != "off")
            fn.donated_arguments = donated if mode == "on" else (lambda: [])
            try:
                outs = fn(*leaves, pos)
                return outs, torch.autograd.grad(outs, leaves, ups)
            finally:
                set_donation(before)
                fn.donated_arguments = donated

        modes = ("on", "handover", "off")
        row: dict = {}
        results = {}
        for mode in modes:
            outs, grads = step(mode)
            results[mode] = [t.clone() for t in (*outs, *grads)]
        row["bitwise_equal"] = {m: all(torch.equal(a, b) for a, b in zip(results[m], results["off"])) for m in modes}
        del results
        for mode in modes:
            step(mode)
        torch.cuda.synchronize()
        samples: dict = defaultdict(list)
        allocs: dict = defaultdict(list)
        for r in range(args.rounds):
            for mode in modes[r % 3:] + modes[: r % 3]:
                torch.cuda.synchronize()
                n0 = torch.cuda.memory_stats().get("num_device_alloc", -1)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(5):
                    step(mode)
                end.record()
                torch.cuda.synchronize()
                samples[mode].append(start.elapsed_time(end) / 5)
                allocs[mode].append((torch.cuda.memory_stats().get("num_device_alloc", -1) - n0) / 5)
        row["ms"] = {m: statistics.median(v) for m, v in samples.items()}
        row["ms_rounds"] = dict(samples)
        row["cudamalloc_per_step"] = {m: statistics.median(v) for m, v in allocs.items()}
        kernels: dict = {}
        for mode in modes:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(2):
                    step(mode)
                torch.cuda.synchronize()
            per: dict = defaultdict(float)
            for ev in prof.events():
                if ev.device_type == torch.autograd.DeviceType.CUDA:
                    per[ev.name] += ev.device_time / 2 / 1000  # ms per step
            kernels[mode] = dict(per)
        row["gpu_ms_per_step"] = {m: sum(k.values()) for m, k in kernels.items()}
        names = sorted(set().union(*kernels.values()), key=lambda n: -kernels["off"].get(n, 0))
        row["kernels_ms"] = {n[:90]: {m: round(kernels[m].get(n, 0.0), 4) for m in modes} for n in names}
        report["shapes"][key] = row
        print(key, json.dumps({k: row[k] for k in ("bitwise_equal", "ms", "cudamalloc_per_step", "gpu_ms_per_step")}), flush=True)
        for n in names[:25]:
            print(f"  {n[:70]:70s} " + " ".join(f"{m} {kernels[m].get(n, 0):7.3f}" for m in modes), flush=True)
        del fn, leaves, inputs, ups
        torch.cuda.empty_cache()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "ab_donation.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
