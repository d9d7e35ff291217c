"""Data-parallel training steps under FSDP2 (`fully_shard`) on several GPUs: coda-ir
(`from_hf`, one FSDP2 unit per decoder unit) against Hugging Face + FSDP2 eager (sdpa),
HF + FSDP2 + `torch.compile` (each decoder layer compiled, then sharded, as torchtitan does)
and HF + FSDP2 + Liger, in one run per GPU count.

Per variant: median step time (forward + backward + AdamW step, over `--iters` steps after
`--warmup`), tokens/s per GPU, peak GPU memory, the first step's loss against eager's, and
with `--baseline JSON` (the same script's result on the smallest GPU count) the scaling
efficiency `tokens/s per GPU / baseline tokens/s per GPU`. A failing variant is recorded with
its error and the others go on. bf16 `MixedPrecisionPolicy` (fp32 master weights and
gradient reduction) for every variant.

GPUs (one process per GPU; NVLink multicast off, no multimem operations):

    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 8 bench/bench_distributed.py \\
        --shape llama8b --layers 4 --seq 8192 --out $OUT/distributed-8.json

CPU smoke (tests/torch/test_distributed.py): `python bench/bench_distributed.py --smoke`: two
gloo processes, a tiny LLaMA through the Triton interpreter, eager and coda-ir only. Its
timings mean nothing.

Not measured: tensor parallelism (coda-ir's units refuse DTensor plans; README "Distributed
training").
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_model import SHAPES, LigerPatches, make_model, timed  # noqa: E402

SHAPES = dict(SHAPES)
# LLaMA-3-8B: hidden 4096, ffn 14336, 32 / 8 heads of 128, vocab 128256, untied, theta 5e5
SHAPES["llama8b"] = dict(family="llama", hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=128, vocab_size=128256, tie_word_embeddings=False,
                         rope_theta=500000.0, rms_norm_eps=1e-5)
VARIANTS = ("eager", "compile", "liger", "coda")


def shard(name: str, model, mesh, policy, family: str):
    """The variant's module to call, with FSDP2 applied per decoder unit / layer, then the root."""
    from torch.distributed.fsdp import fully_shard

    ctx = contextlib.nullcontext
    if name == "coda":
        from coda_ir.torch import from_hf

        root = from_hf(model, progress=dist.get_rank() == 0)
        units = list(root.layers)
    else:
        root = model
        if name == "liger":
            ctx = LigerPatches(family, model).active
        if name == "compile":
            for i, layer in enumerate(model.model.layers):
                model.model.layers[i] = torch.compile(layer)
        units = list(model.model.layers)
    for unit in units:
        fully_shard(unit, mesh=mesh, mp_policy=policy)
    fully_shard(root, mesh=mesh, mp_policy=policy)
    return root, ctx


def run_variant(name, base, args, ids, device, mesh, policy) -> dict:
    model = copy.deepcopy(base)
    fwd, ctx = shard(name, model, mesh, policy, SHAPES[args.shape]["family"])
    optimizer = torch.optim.AdamW(fwd.parameters(), lr=1e-5)

    def step():
        with ctx():
            loss = (fwd(ids, labels=ids) if name == "coda" else fwd(input_ids=ids, labels=ids)).loss
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    start = time.perf_counter()
    first_loss = step().float()
    if device.type == "cuda":
        torch.cuda.synchronize()
    first_s = time.perf_counter() - start
    if args.warmup == 0:  # the smoke: one step, its time includes compiling
        ms = first_s * 1e3
    else:
        for _ in range(args.warmup - 1):
            step()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        ms = timed(step, device, args.iters)
    dist.all_reduce(first_loss)
    tokens = ids.numel()  # per GPU
    out = {"step_ms": ms, "tokens_per_s_per_gpu": tokens / (ms / 1e3), "first_step_s": first_s,
           "first_loss": first_loss.item() / dist.get_world_size()}
    if device.type == "cuda":
        out["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return out


def run(rank: int, world: int, args) -> dict | None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy

    on_gpu = dist.get_backend() == "nccl"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank))) if on_gpu else torch.device("cpu")
    if on_gpu:
        torch.cuda.set_device(device)
    shape = SHAPES[args.shape]
    # fp32 master weights; bf16 compute on GPUs (on the CPU interpreter fp32 keeps the smoke quick)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if on_gpu else MixedPrecisionPolicy()
    base = make_model(shape, args.layers, torch.float32, device)
    mesh = init_device_mesh(device.type, (world,))
    g = torch.Generator().manual_seed(1 + rank)  # each rank its own rows
    ids = torch.randint(0, shape["vocab_size"], (args.batch, args.seq), generator=g).to(device)
    results = {}
    for name in args.variants.split(","):
        try:
            results[name] = run_variant(name, base, args, ids, device, mesh, policy)
        except Exception as exc:  # recorded; the other variants go on
            results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
        if on_gpu:
            torch.cuda.empty_cache()
        dist.barrier()
    if "eager" in results and "first_loss" in results.get("eager", {}):
        for r in results.values():
            if "first_loss" in r:
                r["loss_vs_eager"] = r["first_loss"] - results["eager"]["first_loss"]
    if args.baseline:
        baseline = json.loads(Path(args.baseline).read_text())["results"]
        for name, r in results.items():
            b = baseline.get(name, {})
            if "tokens_per_s_per_gpu" in r and "tokens_per_s_per_gpu" in b:
                r["scaling_efficiency"] = r["tokens_per_s_per_gpu"] / b["tokens_per_s_per_gpu"]
    if rank != 0:
        return None
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "world": world, "device": torch.cuda.get_device_name(device) if on_gpu else "cpu (Triton interpreter)",
        "torch": torch.__version__, "shape": args.shape, "layers": args.layers, "batch_per_gpu": args.batch,
        "seq": args.seq, "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE"), "results": results,
    }
    for name, r in results.items():
        if "error" in r:
            print(f"{name:8s} error: {r['error']}", flush=True)
        else:
            extra = f"  peak {r['peak_gib']:.2f} GiB" if "peak_gib" in r else ""
            eff = f"  efficiency {r['scaling_efficiency']:.2f}" if "scaling_efficiency" in r else ""
            print(f"{name:8s} {r['step_ms']:9.1f} ms/step  {r['tokens_per_s_per_gpu']:10.0f} tokens/s/GPU{extra}{eff}  "
                  f"loss {r['first_loss']:.4f}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))
    return report


def _spawned(rank: int, world: int, port: int, args) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(minutes=5))
    try:
        run(rank, world, args)
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None, start_method: str = "spawn") -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=sorted(SHAPES), default="llama8b")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=1, help="sequences per GPU")
    p.add_argument("--seq", type=int, default=8192)
    p.add_argument("--warmup", type=int, default=3, help="steps before the timed ones, the first included (0: time only the first)")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--baseline", help="this script's JSON at the smallest GPU count: adds scaling efficiency")
    p.add_argument("--out", help="JSON path (rank 0 writes it)")
    p.add_argument("--smoke", action="store_true", help="2 CPU processes over gloo, a tiny LLaMA, eager and coda")
    args = p.parse_args(argv)
    if args.smoke:
        args.shape, args.layers, args.seq, args.warmup, args.iters, args.variants = "smoke", 2, 8, 0, 1, "eager,coda"
    if "RANK" in os.environ:  # torchrun
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        try:
            run(dist.get_rank(), dist.get_world_size(), args)
        finally:
            dist.destroy_process_group()
        return
    if not args.smoke:
        p.error("run under torchrun (one process per GPU), or pass --smoke for the 2-process CPU check")
    os.environ.setdefault("TRITON_INTERPRET", "1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.start_processes(_spawned, args=(2, port, args), nprocs=2, join=True, start_method=start_method)


if __name__ == "__main__":
    main()
