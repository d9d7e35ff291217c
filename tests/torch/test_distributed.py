"""from_hf under data parallelism: DDP and FSDP2 (`fully_shard` on the fusion units), two CPU
processes over gloo, against one process on the whole batch.

Each rank takes half of the batch; with no ignored labels both halves count the same number
of targets, so the mean of the two ranks' losses is the whole batch's loss and the averaged
gradients are the whole batch's gradients (up to the order of fp32 additions).
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).parent))
from test_hf import batch, tiny_model  # noqa: E402

from coda_ir.torch.hf import from_hf  # noqa: E402

WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, mode: str, port: int, out: str) -> None:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    # a rank that fails makes the other time out instead of waiting forever
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=180))
    try:
        model = tiny_model("llama")
        cmodel = from_hf(model, progress=False)
        if mode == "ddp":
            wrapped = torch.nn.parallel.DistributedDataParallel(cmodel)
        else:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            mesh = init_device_mesh("cpu", (WORLD,))
            for unit in cmodel.layers:
                fully_shard(unit, mesh=mesh)
            wrapped = fully_shard(cmodel, mesh=mesh)
        ids, labels = batch(ignored=False)
        rows = slice(rank, rank + 1)  # BATCH == WORLD: one sequence per rank
        loss = wrapped(ids[rows], labels=labels[rows]).loss
        loss.backward()
        grads = {}
        for name, p in model.named_parameters():  # the Hugging Face names (the same parameters)
            g = p.grad
            if hasattr(g, "full_tensor"):  # FSDP2: a sharded DTensor gradient
                g = g.full_tensor()
            grads[name] = g.detach().clone()
        losses = [torch.zeros(()) for _ in range(WORLD)]
        dist.all_gather(losses, loss.detach())
        if rank == 0:
            torch.save({"loss": torch.stack(losses).mean(), "grads": grads}, out)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("mode", ["ddp", "fsdp2"])
def test_two_processes_match_one(mode, tmp_path):
    out = str(tmp_path / "rank0.pt")
    mp.start_processes(_worker, args=(mode, _free_port(), out), nprocs=WORLD, join=True, start_method="spawn")
    result = torch.load(out)

    model = tiny_model("llama")
    ids, labels = batch(ignored=False)
    loss = from_hf(model, progress=False)(ids, labels=labels).loss
    loss.backward()
    assert torch.allclose(result["loss"], loss.detach(), rtol=1e-5, atol=1e-6)
    for name, p in model.named_parameters():
        got = result["grads"][name]
        scale = p.grad.abs().max().item()
        assert (got - p.grad).abs().max().item() <= 1e-5 * scale + 1e-7, name
