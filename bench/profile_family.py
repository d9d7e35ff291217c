"""Where a whole `from_hf` training step of one family spends its GPU time, kernel by kernel
(torch.profiler), grouped by kernel name: the tool for "why is family X further from its limit".

    python bench/profile_family.py --families granite,gemma2,qwen3 [--layers 4] [--top 25] [--out DIR]

Builds each family's bench shape (`bench_families.FAMILIES`, bf16, fp32 inv_freq), compiles it
with `from_hf`, runs warm steps, profiles `--iters` steps and prints, per kernel name, the total
CUDA time per step, its share of the step and the launch count per step; then the step's own
limit (`bench_model.limit_step`: its GEMMs in cuBLAS + SDPA) for scale. JSON to `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from bench_families import batch_of, make_model, shape_of  # noqa: E402
from bench_model import limit_step  # noqa: E402


def profile_steps(step, iters: int) -> dict[str, tuple[float, int]]:
    """{kernel name: (total CUDA ms over `iters` steps, launches)}."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            step()
        torch.cuda.synchronize()
    out: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            out[ev.name][0] += ev.device_time / 1e3
            out[ev.name][1] += 1
    return {k: (v[0], v[1]) for k, v in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", default="granite,gemma2,qwen3")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--pipeline", default=None,
                    help="from_hf's pipeline (default: its own), e.g. 'nn-autodiff{memory-budget-mib=100000},nn-to-coda'")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("profile_family.py needs a CUDA GPU", file=sys.stderr)
        return 2
    import coda_ir.torch

    device, dtype = torch.device("cuda"), torch.bfloat16
    report = {}
    for family in [f.strip() for f in args.families.split(",") if f.strip()]:
        shape = shape_of(family, smoke=False)
        model = make_model(shape, args.layers, dtype, device)
        data = batch_of("plain", shape["vocab_size"], args.batch, args.seq, device)
        coda = (coda_ir.torch.from_hf(model, progress=False) if args.pipeline is None
                else coda_ir.torch.from_hf(model, progress=False, pipeline=args.pipeline))
        ids, labels = data["input_ids"], data["labels"]

        def step():
            model.zero_grad(set_to_none=True)
            coda(ids, labels=labels).loss.backward()

        for _ in range(3):
            step()
        kernels = profile_steps(step, args.iters)
        gemms, attention = limit_step(shape, args.layers, ids.numel(), args.seq, dtype, device)
        for _ in range(2):
            gemms(), attention()
        limit = profile_steps(lambda: (gemms(), attention()), args.iters)
        total = sum(t for t, _ in kernels.values()) / args.iters
        limit_total = sum(t for t, _ in limit.values()) / args.iters
        rows = sorted(kernels.items(), key=lambda kv: -kv[1][0])
        print(f"\n== {family}: {args.layers} layers, {ids.numel()} tokens; kernels {total:.2f} ms per step, "
              f"limit kernels {limit_total:.2f} ms ({total / limit_total:.3f}x)")
        print(f"{'ms/step':>9} {'share':>6} {'launches':>8}  kernel")
        for name, (t, n) in rows[: args.top]:
            print(f"{t / args.iters:9.3f} {100 * t / args.iters / total:5.1f}% {n // args.iters:8d}  {name[:110]}")
        print("-- limit:")
        for name, (t, n) in sorted(limit.items(), key=lambda kv: -kv[1][0])[:8]:
            print(f"{t / args.iters:9.3f} {100 * t / args.iters / limit_total:5.1f}% {n // args.iters:8d}  {name[:110]}")
        report[family] = {"step_kernels_ms": total, "limit_kernels_ms": limit_total,
                          "kernels": {k: {"ms_per_step": t / args.iters, "launches_per_step": n // args.iters}
                                      for k, (t, n) in rows}}
        del coda, model
        torch.cuda.empty_cache()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "profile_family.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
