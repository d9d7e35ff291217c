"""Train a small Hugging Face LLaMA through coda-ir under FSDP2 (`fully_shard`).

    python examples/train_fsdp.py                        # 2 CPU processes over gloo (spawned here)
    python examples/train_fsdp.py --nproc 4 --steps 10
    torchrun --nproc-per-node 8 examples/train_fsdp.py --bf16 --checkpoint   # GPUs over NCCL

The model is sharded the way people shard a Hugging Face model: each of coda-ir's decoder
units (`cm.layers`) is an FSDP2 unit, then the whole model (the embedding and the LM head +
loss unit). The optimizer is built from `cm.parameters()` after sharding; they are FSDP2's
DTensors, the Hugging Face model's own parameters. `--bf16` trains with a bf16
`MixedPrecisionPolicy` (fp32 master weights and gradient reduction), `--checkpoint` with
activation checkpointing per decoder unit. `--save DIR` writes the trained model with
`save_pretrained` under the Hugging Face parameter names (`cm.hf_state_dict()`).

Every rank trains on its own rows of one fixed batch (so the loss visibly falls in a few steps)
and rank 0 prints the mean loss over the ranks.
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import os
import socket
import sys

import torch
import torch.distributed as dist
import transformers
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from coda_ir.torch import from_hf

VOCAB = 128


def small_llama() -> transformers.LlamaForCausalLM:
    torch.manual_seed(0)  # the same initial weights on every rank
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=16, vocab_size=VOCAB)
    return transformers.LlamaForCausalLM(config)


def train(rank: int, world: int, args: argparse.Namespace) -> None:
    on_gpu = dist.get_backend() == "nccl"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank))) if on_gpu else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    model = small_llama().to(device)
    cm = from_hf(model, progress=rank == 0)
    if args.checkpoint:
        cm.gradient_checkpointing_enable()

    mesh = init_device_mesh(device.type, (world,))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if args.bf16 else MixedPrecisionPolicy()
    for unit in cm.layers:
        fully_shard(unit, mesh=mesh, mp_policy=policy)
    fully_shard(cm, mesh=mesh, mp_policy=policy)
    optimizer = torch.optim.AdamW(cm.parameters(), lr=args.lr)

    g = torch.Generator().manual_seed(1)  # one fixed batch; each rank takes its own rows
    ids = torch.randint(0, VOCAB, (args.batch * world, args.seq), generator=g)[rank::world].to(device)
    for step in range(args.steps):
        loss = cm(ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        mean = loss.detach().float().clone()
        dist.all_reduce(mean)
        if rank == 0:
            print(f"step {step}: loss {mean.item() / world:.4f}", flush=True)

    state = cm.hf_state_dict()  # every rank takes part; rank 0 gets the full tensors
    if rank == 0 and args.save:
        model.save_pretrained(args.save, state_dict=state)
        print(f"saved to {args.save}", flush=True)
    # no rank leaves (and tears down its connections) while another still works: rank 0 saves
    # before any process exits, so a failure at another rank's exit cannot lose the model
    dist.barrier()


def _spawned(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(minutes=5))
    try:
        train(rank, world, args)
    finally:
        dist.destroy_process_group()
    _exit_rank()


def _exit_rank() -> None:
    """End a spawned rank without the interpreter's teardown. FSDP2 keeps the gloo process
    group alive after `destroy_process_group()` (its parameter groups hold the mesh's group,
    and the modules outlive `train`): the group's worker threads, its TCP loop and rank 0's
    TCPStore server still run (measured after destroy_process_group and gc.collect), and the
    interpreter's finalization then tears them down while the other ranks exit: the likely
    source of the `terminate called without an active exception` (SIGABRT) of 3 runs in 14
    (issue 34). Everything is done here: the exit handlers run as at a normal exit (they
    release multiprocessing's semaphores, e.g. tqdm's lock of save_pretrained, which would
    otherwise be reported leaked), then the process ends with status 0 without finalizing."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv: list[str] | None = None, start_method: str = "spawn") -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc", type=int, default=2, help="CPU processes to spawn when not run by torchrun")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=1, help="sequences per rank")
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--bf16", action="store_true", help="bf16 MixedPrecisionPolicy (fp32 reduction)")
    parser.add_argument("--checkpoint", action="store_true", help="activation checkpointing per decoder unit")
    parser.add_argument("--save", help="save_pretrained() the trained model into this directory")
    args = parser.parse_args(argv)

    if "RANK" in os.environ:  # under torchrun: NCCL on GPUs, gloo on CPUs (spawned here: gloo, CPU)
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        try:
            train(dist.get_rank(), dist.get_world_size(), args)
        finally:
            dist.destroy_process_group()
        _exit_rank()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.start_processes(_spawned, args=(args.nproc, port, args), nprocs=args.nproc, join=True,
                                          start_method=start_method)


if __name__ == "__main__":
    main()
