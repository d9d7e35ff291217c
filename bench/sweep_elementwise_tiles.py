"""Each coda.elementwise kernel of a whole `from_hf` step against its tile budget (elements per
program, warps), and against another pipeline, in one process (kernel times from torch.profiler).

    python bench/sweep_elementwise_tiles.py --families llama,qwen3,gemma3_text --out $OUT
    python bench/sweep_elementwise_tiles.py --tiles default,8192:8 --pipelines 'nn-to-coda{merged-loads=in-order}'

For every family (bench_families' bench shapes, `--layers`, 2 x 4096 tokens) it compiles the step
once, then for each tile rule in `--tiles` (budget:warps, e.g. 2048:4) replaces
`coda_ir.tiling.elementwise_config`'s budget while the step runs (the runtime reads the tile at
launch, so the same compiled programs run with each; Triton compiles one more variant per tile),
runs warm steps, times 5 synced steps (median), profiles `--iters` steps and records every
generated kernel's CUDA time per step.
Rules run in rounds (forward order, then reversed) so a drift of the machine shows as a round
difference. `--pipelines` adds other from_hf pipelines at the default tile (e.g. the load order
of merged kernels). The loss of every run is recorded: a tile changes no bit of it.
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
from bench_model import sync, timed  # noqa: E402
from bench_plan_hf import classify  # noqa: E402
from profile_family import profile_steps  # noqa: E402



def tile_rule(spec: str):
    """`B:W`: B elements a program, W warps; `B:tT`: B elements a program, warps for T elements
    of the widest tile a thread (the kernel's width_multiple counted); `wideBMxBN:W`: a BM x BN
    tile at W warps for kernels over rows of `tiling.LONG_ROWS` columns or more (the LM head's
    [tokens, vocabulary] passes), the default rule for the others."""
    from coda_ir import tiling

    if spec.startswith("wide"):  # `wideBMxBN:W`: that tile for vocabulary-wide rows, the default rule elsewhere
        dims, warps_ = spec.removeprefix("wide").split(":")
        wbm, wbn = map(int, dims.split("x"))
        default = tiling.elementwise_config

        def wide(M: int, N: int, bn_multiple_of: int = 1, *, width_multiple: int = 1, interpreting: bool = False):
            if N >= tiling.LONG_ROWS and width_multiple == 1:
                return tiling.ElementwiseConfig(wbm, max(wbn, bn_multiple_of), num_warps=int(warps_))
            return default(M, N, bn_multiple_of, width_multiple=width_multiple, interpreting=interpreting)

        return wide
    budget, rest = spec.split(":")
    budget = int(budget)

    def config(M: int, N: int, bn_multiple_of: int = 1, *, width_multiple: int = 1, interpreting: bool = False):
        bn = max(min(tiling.pow2_at_least(N), 128), bn_multiple_of, tiling.MIN_BN)
        bm = max(min(tiling.pow2_at_least(M), budget // bn), 16)
        if rest.startswith("t"):
            warps = min(max(bm * bn * width_multiple // int(rest[1:]) // 32, 1), 8)
        else:
            warps = int(rest)
        return tiling.ElementwiseConfig(bm, bn, num_warps=warps)

    return config


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", default="llama,qwen3,gemma3_text")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tiles", default="default,8192:8,2048:2,2048:t16",
                    help="tile rules: 'default' (tiling.elementwise_config as it is), B:W or B:tT (tile_rule)")
    ap.add_argument("--pipelines", default="",
                    help="';'-separated from_hf pipelines also timed at the default tile, e.g. 'nn-to-coda{merged-loads=in-order}'")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("sweep_elementwise_tiles.py needs a CUDA GPU", file=sys.stderr)
        return 2
    import coda_ir.torch
    from coda_ir import tiling

    default_rule = tiling.elementwise_config
    device, dtype = torch.device("cuda"), torch.bfloat16
    report: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    import triton
    report["triton"] = triton.__version__
    rules = [t for t in args.tiles.split(",") if t]
    for family in [f for f in args.families.split(",") if f]:
        shape = shape_of(family, smoke=False)
        model = make_model(shape, args.layers, dtype, device)
        data = batch_of("plain", shape["vocab_size"], 2, 4096, device)
        ids, labels = data["input_ids"], data["labels"]
        wrappers = {"default": coda_ir.torch.from_hf(model, progress=False)}
        for p in [p for p in args.pipelines.split(";") if p]:
            wrappers[p] = coda_ir.torch.from_hf(model, progress=False, pipeline=p)
        runs: dict[str, list] = defaultdict(list)
        steps_ms: dict[str, list] = defaultdict(list)
        losses: dict[str, float] = {}

        def measure(label: str, wrapper) -> None:
            def step():
                model.zero_grad(set_to_none=True)
                loss = wrapper(ids, labels=labels).loss
                loss.backward()
                return loss

            for _ in range(2):
                loss = step()
            losses[label] = float(loss)
            sync(device)
            steps_ms[label].append(timed(step, device, 5))
            kernels = profile_steps(step, args.iters)
            per = {}
            for name, (t, n) in kernels.items():
                key = classify(name)
                per[key] = per.get(key, 0.0) + t / args.iters
            runs[label].append(per)

        order = []
        for r in range(args.rounds):
            seq = ["tile " + t for t in rules] + list(wrappers)[1:]
            order += seq if r % 2 == 0 else seq[::-1]
        for label in order:
            if label.startswith("tile "):
                spec = label.removeprefix("tile ")
                tiling.elementwise_config = default_rule if spec == "default" else tile_rule(spec)
                try:
                    measure(label, wrappers["default"])
                finally:
                    tiling.elementwise_config = default_rule
            else:
                measure(label, wrappers[label])
        names = sorted({k for rs in runs.values() for r in rs for k in r})
        table = {label: {k: [r.get(k, 0.0) for r in rs] for k in names} for label, rs in runs.items()}
        report[family] = {"losses": losses, "kernels_ms": table, "steps_ms": dict(steps_ms)}
        labels_ = list(runs)
        print(f"\n== {family} ({args.layers} layers): losses {set(losses.values())}")
        print(f"{'kernel':44s} " + " ".join(f"{lb[:14]:>14s}" for lb in labels_))
        for k in names:
            if "elementwise" not in k and "fold" not in k:
                continue
            vals = [min(table[lb][k]) for lb in labels_]
            if max(vals) < 0.02:
                continue
            print(f"{k[-44:]:44s} " + " ".join(f"{v:14.3f}" for v in vals))
        for k in ("cuBLAS", "attention fwd", "attention bwd", "other"):
            print(f"{k:44s} " + " ".join(f"{min(table[lb].get(k, [0])):14.3f}" for lb in labels_))
        print(f"{'elementwise + fold kernels':44s} " + " ".join(
            f"{sum(min(v) for k, v in table[lb].items() if 'elementwise' in k or 'fold' in k):14.3f}" for lb in labels_))
        print(f"{'synced step (median of 5, each round)':44s} " + " ".join(
            f"{'/'.join(f'{t:.1f}' for t in steps_ms[lb]):>14s}" for lb in labels_))
        del wrappers, model
        torch.cuda.empty_cache()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "sweep_elementwise_tiles.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
