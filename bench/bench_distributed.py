"""Training steps on several GPUs: coda-ir under FSDP2 (`fully_shard`) and under tensor
parallelism, against Hugging Face + FSDP2 eager (sdpa), HF + FSDP2 + `torch.compile` (each
decoder layer compiled, then sharded, as torchtitan does) and HF + FSDP2 + Liger, in one run
per GPU count.

Variants: `eager`, `compile`, `liger` (Hugging Face), `coda` (`from_hf`, one FSDP2 unit per
decoder unit), `coda-tp` (`from_hf` + `coda_ir.torch.parallelize` on the `tp` dimension of a
`(world / tp, tp)` mesh, FSDP2 on its `dp` dimension; each tensor-parallel group trains on its
ranks' sequences together, so every variant sees the same tokens per GPU). bf16
`MixedPrecisionPolicy` (fp32 master weights and gradient reduction) for every variant.

Per variant: median step time (forward + backward + AdamW step, over `--iters` steps after
`--warmup`), tokens/s per GPU, peak GPU memory of the timed steps (also above the memory
resident before the variant: the shared base model) and of a forward + backward alone (the
AdamW step's temporaries set the former), with `--profile` the GPU kernels of two steps
(NCCL's apart), the first step's time
(compiles and autotuning included) and loss against eager's, and with `--baseline JSON` (this
script's result on one GPU) the scaling efficiency `tokens/s per GPU / baseline tokens/s per GPU`
(`coda-tp` against the baseline's `coda`). The variants run one after another (each holds a
whole model and its optimizer); a failing variant is recorded with its error and the others go
on; the JSON is rewritten after each variant.

GPUs (one process per GPU; NVLink multicast off, no multimem operations):

    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    torchrun --nproc-per-node 1 bench/bench_distributed.py --shape llama8b --layers 2 --seq 4096 \\
        --variants eager,compile,liger,coda --out $OUT/distributed-1.json
    torchrun --nproc-per-node 2 bench/bench_distributed.py --shape llama8b --layers 2 --seq 4096 \\
        --baseline $OUT/distributed-1.json --out $OUT/distributed-2.json

CPU smoke (tests/torch/test_distributed.py): `python bench/bench_distributed.py --smoke`: two
gloo processes, a tiny LLaMA through the Triton interpreter, eager, coda and coda-tp. Its
timings mean nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import gc
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

from bench_model import SHAPES, LigerPatches, make_model, profile_step, timed  # noqa: E402

SHAPES = dict(SHAPES)
# LLaMA-3-8B: hidden 4096, ffn 14336, 32 / 8 heads of 128, vocab 128256, untied, theta 5e5
SHAPES["llama8b"] = dict(family="llama", hidden_size=4096, intermediate_size=14336, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=128, vocab_size=128256, tie_word_embeddings=False,
                         rope_theta=500000.0, rms_norm_eps=1e-5)
VARIANTS = ("eager", "compile", "liger", "coda", "coda-tp")
# what a run records of its environment (NVLink multicast must be off on the lent machines)
ENVIRONMENT = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")


def shard(name: str, model, meshes: dict, policy, family: str):
    """The variant's module to call, with FSDP2 applied per decoder unit / layer, then the root
    (`coda-tp`: the tensor-parallel plan first, FSDP2 on the data-parallel mesh dimension)."""
    from torch.distributed.fsdp import fully_shard

    ctx = contextlib.nullcontext
    mesh = meshes["dp"]
    if name in ("coda", "coda-tp"):
        from coda_ir.torch import from_hf, parallelize

        root = from_hf(model, progress=dist.get_rank() == 0)
        if name == "coda-tp":
            parallelize(root, meshes["tp"])
            mesh = meshes["2d"]["dp"]
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


def run_variant(name, base, args, batches, device, meshes, policy) -> dict:
    resident = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0  # the base model
    model = copy.deepcopy(base)
    fwd, ctx = shard(name, model, meshes, policy, SHAPES[args.shape]["family"])
    optimizer = torch.optim.AdamW(fwd.parameters(), lr=1e-5)
    ids = batches["tp" if name == "coda-tp" else "dp"]

    def forward_backward():
        with ctx():
            loss = (fwd(ids, labels=ids) if name.startswith("coda") else fwd(input_ids=ids, labels=ids)).loss
            loss.backward()
        return loss.detach()

    def step():
        loss = forward_backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

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
    # the mean over the ranks of their first losses: each data-parallel rank's own sequences
    # (a tensor-parallel group: all its ranks' sequences, the same loss on each of its ranks)
    dist.all_reduce(first_loss)
    tokens = ids.numel() / (meshes["tp"].size() if name == "coda-tp" else 1)  # per GPU
    out = {"step_ms": ms, "tokens_per_s_per_gpu": tokens / (ms / 1e3), "first_step_s": first_s,
           "first_loss": first_loss.item() / dist.get_world_size()}
    if device.type == "cuda":
        # the timed steps' peak: the whole process, and above what was resident before this
        # variant (its sharded model, gradients, AdamW state and the step's activations)
        out["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        out["peak_above_start_gib"] = (torch.cuda.max_memory_allocated() - resident) / 2**30
    try:  # extra measurements: a failure is recorded beside the timing, never instead of it
        if name in args.profile.split(","):
            # GPU kernels of two steps: where the time goes, NCCL's kernels (collectives) apart
            rows = profile_step(f"{name}, rank {dist.get_rank()}", step, 2)
            out["kernels_ms_per_step"] = sum(r[2] for r in rows)
            out["nccl_ms_per_step"] = sum(r[2] for r in rows if "nccl" in r[0].lower())
            out["profile_top"] = rows[:30]
        if device.type == "cuda":
            # the forward + backward alone (the optimizer step's foreach temporaries, the same
            # for every variant, set the peak above)
            torch.cuda.reset_peak_memory_stats()
            forward_backward()
            out["peak_fwd_bwd_above_start_gib"] = (torch.cuda.max_memory_allocated() - resident) / 2**30
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    except Exception as exc:
        out["extra_error"] = f"{type(exc).__name__}: {exc}"
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
    variants = args.variants.split(",")
    meshes = {"dp": init_device_mesh(device.type, (world,))}
    if "coda-tp" in variants:
        if world % args.tp:
            raise SystemExit(f"--tp {args.tp} does not divide the {world} ranks")
        meshes["2d"] = init_device_mesh(device.type, (world // args.tp, args.tp), mesh_dim_names=("dp", "tp"))
        meshes["tp"] = meshes["2d"]["tp"]

    def sequences(r: int) -> torch.Tensor:  # rank r's own rows
        g = torch.Generator().manual_seed(1 + r)
        return torch.randint(0, shape["vocab_size"], (args.batch, args.seq), generator=g)

    batches = {"dp": sequences(rank).to(device)}
    if "tp" in meshes:  # a tensor-parallel group trains on its ranks' rows together
        first = rank - meshes["tp"].get_local_rank()
        batches["tp"] = torch.cat([sequences(first + i) for i in range(args.tp)]).to(device)
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "world": world, "tp": args.tp if "tp" in meshes else None,
        "device": torch.cuda.get_device_name(device) if on_gpu else "cpu (Triton interpreter)",
        "torch": torch.__version__, "versions": _versions(), "shape": args.shape, "layers": args.layers, "batch_per_gpu": args.batch,
        "seq": args.seq, "environment": {k: os.environ.get(k) for k in ENVIRONMENT}, "results": {},
    }
    results = report["results"]
    baseline = json.loads(Path(args.baseline).read_text())["results"] if args.baseline else {}
    for name in variants:
        try:
            results[name] = run_variant(name, base, args, batches, device, meshes, policy)
        except Exception as exc:  # recorded; the other variants go on
            results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-2000:]}
        # FSDP2 modules live in reference cycles (module <-> hooks <-> state): without a cyclic
        # collection a finished variant's model and AdamW state stay allocated into the next
        # one's run and peak (seen on the 2-GPU run of 2026-11-26: one model per variant)
        gc.collect()
        if on_gpu:
            torch.cuda.empty_cache()
        dist.barrier()
        r = results[name]
        for other in results.values():  # eager may come later in --variants
            if "first_loss" in other and "first_loss" in results.get("eager", {}):
                other["loss_vs_eager"] = other["first_loss"] - results["eager"]["first_loss"]
        add_efficiency(results, baseline)
        if rank == 0:
            _print(name, r)
            if args.out:  # after every variant: a run cut short keeps what it measured
                Path(args.out).write_text(json.dumps(report, indent=1))
    return report if rank == 0 else None


def _versions() -> dict:
    from importlib import metadata

    out = {}
    for package in ("triton", "transformers", "liger-kernel", "xdsl"):
        try:
            out[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            out[package] = None
    return out


def add_efficiency(results: dict, baseline: dict) -> None:
    """Scaling efficiency of each variant: its tokens/s per GPU over the baseline run's (one GPU)
    of the same variant; `coda-tp` against the baseline's `coda` (one GPU has no tensor parallelism)."""
    for name, r in results.items():
        b = baseline.get("coda" if name == "coda-tp" else name, {})
        if "tokens_per_s_per_gpu" in r and "tokens_per_s_per_gpu" in b:
            r["scaling_efficiency"] = r["tokens_per_s_per_gpu"] / b["tokens_per_s_per_gpu"]


def _print(name: str, r: dict) -> None:
    if "error" in r:
        print(f"{name:8s} error: {r['error']}", flush=True)
        return
    extra = f"  peak {r['peak_gib']:.2f} GiB" if "peak_gib" in r else ""
    if "peak_fwd_bwd_above_start_gib" in r:
        extra += f" (fwd+bwd {r['peak_fwd_bwd_above_start_gib']:.2f} GiB above the base model)"
    if "nccl_ms_per_step" in r:
        extra += f"  NCCL kernels {r['nccl_ms_per_step']:.1f} of {r['kernels_ms_per_step']:.1f} ms"
    eff = f"  efficiency {r['scaling_efficiency']:.2f}" if "scaling_efficiency" in r else ""
    print(f"{name:8s} {r['step_ms']:9.1f} ms/step  {r['tokens_per_s_per_gpu']:10.0f} tokens/s/GPU{extra}{eff}  "
          f"loss {r['first_loss']:.4f}  first step {r['first_step_s']:.1f} s", flush=True)


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
    p.add_argument("--variants", help=f"comma-separated, of {', '.join(VARIANTS)} (default: all; --smoke: eager,coda,coda-tp)")
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel degree of coda-tp")
    p.add_argument("--profile", default="", help="comma-separated variants whose GPU kernels of two steps are "
                   "recorded (torch.profiler; NCCL's share apart)")
    p.add_argument("--baseline", help="this script's JSON at the smallest GPU count: adds scaling efficiency")
    p.add_argument("--out", help="JSON path (rank 0 writes it)")
    p.add_argument("--smoke", action="store_true", help="2 CPU processes over gloo, a tiny LLaMA, eager, coda and coda-tp")
    p.add_argument("--efficiency", metavar="RESULT_JSON",
                   help="add the scaling efficiency against --baseline to this script's RESULT_JSON (no run)")
    args = p.parse_args(argv)
    if args.efficiency:
        if not args.baseline:
            p.error("--efficiency needs --baseline")
        report = json.loads(Path(args.efficiency).read_text())
        add_efficiency(report["results"], json.loads(Path(args.baseline).read_text())["results"])
        report["baseline"] = {"path": Path(args.baseline).name, "world": json.loads(Path(args.baseline).read_text())["world"]}
        Path(args.efficiency).write_text(json.dumps(report, indent=1))
        for name, r in report["results"].items():
            _print(name, r)
        return
    if args.smoke:
        args.shape, args.layers, args.seq, args.warmup, args.iters = "smoke", 2, 8, 0, 1
        args.variants = args.variants or "eager,coda,coda-tp"
    args.variants = args.variants or ",".join(VARIANTS)
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
