"""Same inputs, same bits? Two from_hf training steps on one batch, every gradient compared bitwise.

For each family and batch kind (plain; padded, which runs flash-attention's varlen kernels), in one
process: the step under PyTorch's default settings and under `torch.use_deterministic_algorithms(True)`
(strict: a non-deterministic kernel raises instead of running). Per mode: the SDPA backend the
attention runs on, whether the loss and each gradient of two steps agree to the bit (the parameters
that differ and the largest difference), and the median synced step time over alternating rounds,
so the cost of the deterministic mode is measured in the same process.

    CUBLAS_WORKSPACE_CONFIG=:4096:8 python3 bench/check_determinism.py --families qwen3,llama --layers 2

(cuBLAS needs that variable before its first call to be deterministic, and strict mode refuses to run
a cuBLAS GEMM without it.) Output: one JSON line per case, and `--out`/determinism.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_families as bf  # noqa: E402
import bench_plan_hf as bp  # noqa: E402


def _grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _compare(a: dict, b: dict) -> dict:
    differ = {}
    for name, x in a.items():
        y = b[name]
        if not torch.equal(x.view(torch.int16) if x.dtype == torch.bfloat16 else x,
                           y.view(torch.int16) if y.dtype == torch.bfloat16 else y):
            differ[name] = float((x.float() - y.float()).abs().max())
    return {"grads": len(a), "differ": len(differ), "largest": max(differ.values(), default=0.0),
            "first": sorted(differ, key=list(a).index)[:4]}


def run_case(family: str, kind: str, layers: int, rounds: int, iters: int, out: Path) -> dict:
    import coda_ir.torch
    from coda_ir.runtime import attention

    data, _ = bp.config_with_layers(family, layers, out)
    model = bp.build_model(data, torch.device("cuda"))
    coda = coda_ir.torch.from_hf(model, progress=False)
    batch = bf.batch_of(kind, data["vocab_size"], 2, 4096, "cuda")

    def step():
        model.zero_grad(set_to_none=True)
        loss = coda(**batch).loss
        loss.backward()
        return loss

    heads, kv = data["num_attention_heads"], data.get("num_key_value_heads", data["num_attention_heads"])
    hd = data.get("head_dim") or data["hidden_size"] // heads
    probe = torch.empty(4096 * 2, (heads + 2 * kv) * hd, device="cuda", dtype=torch.bfloat16)
    result = {"family": family, "kind": kind, "layers": layers, "modes": {}}
    modes = {"default": False, "strict": True}
    for mode, strict in modes.items():
        torch.use_deterministic_algorithms(strict)
        try:
            step()  # compile / tune outside the comparison
            first = step()
            g1 = _grads(model)
            second = step()
            g2 = _grads(model)
            result["modes"][mode] = {
                "backend": {attention.FLASH: "flash", attention.CUDNN: "cudnn"}.get(
                    attention.backend(probe, heads, kv, hd, 4096, True), "math"),
                "loss_equal": bool(torch.equal(first, second)), **_compare(g1, g2), "ms": []}
        except RuntimeError as e:  # strict mode names the non-deterministic kernel
            result["modes"][mode] = {"error": str(e).splitlines()[0][:400]}
        finally:
            torch.use_deterministic_algorithms(False)
    for _ in range(rounds):
        for mode, strict in modes.items():
            if "error" in result["modes"][mode]:
                continue
            torch.use_deterministic_algorithms(strict)
            try:
                for _ in range(iters):
                    b, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    b.record(); step(); e.record(); torch.cuda.synchronize()
                    result["modes"][mode]["ms"].append(b.elapsed_time(e))
            finally:
                torch.use_deterministic_algorithms(False)
    for m in result["modes"].values():
        if m.get("ms"):
            m["median_ms"] = statistics.median(m["ms"])
    del coda, model
    torch.cuda.empty_cache()
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", default="qwen3,llama", help=f"comma-separated, of: {', '.join(bp.FAMILIES)}")
    ap.add_argument("--kinds", default="plain,padded", help="batch kinds: plain, padded, packed")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/determinism"))
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("check_determinism: needs a CUDA device", file=sys.stderr)
        return 2
    if os.environ.get("CUBLAS_WORKSPACE_CONFIG") not in (":4096:8", ":16:8"):
        print("check_determinism: set CUBLAS_WORKSPACE_CONFIG=:4096:8 (strict mode refuses cuBLAS without it)",
              file=sys.stderr)
        return 2
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    results = []
    for family in a.families.split(","):
        for kind in a.kinds.split(","):
            r = run_case(family, kind, a.layers, a.rounds, a.iters, out)
            print(json.dumps({**r, "modes": {k: {kk: vv for kk, vv in v.items() if kk != "ms"}
                                             for k, v in r["modes"].items()}}), flush=True)
            results.append(r)
    info = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
    (out / "determinism.json").write_text(json.dumps({"info": info, "cases": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
