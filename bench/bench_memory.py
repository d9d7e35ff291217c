"""Peak memory and step time of a whole-model training step, each variant in its own process (so one
variant's allocator cache and autotuning never count in another's peak): HF eager, HF + Liger
(fused linear cross-entropy, RMSNorm, SwiGLU, RoPE) and coda-ir `from_hf`, with the LM head's
logits stored for the backward (`coda`: nn-autodiff's default budget stores them at these shapes) or recomputed in
vocabulary chunks (`coda-chunked`, `nn-autodiff{memory-budget-mib=256}`: the A/B of issue 31).

Shapes (bench_model.SHAPES, bf16 models built as `from_pretrained(dtype=bf16)` builds them:
rotary inv_freq kept fp32): LLaMA-3.2-1B (16 layers) and Qwen3-1.7B (28 layers), 2 x 4096 tokens,
labels = inputs, no optimizer. Per variant: 2 warm-up steps (compile / autotune), then `--iters`
steps each synced; `torch.cuda.max_memory_allocated` over those steps above the allocation before
them (the resident model; gradients set to None between steps, so the peak includes them), the
median step time, and the loss (checked against eager's: every variant's loss within 2e-2, and
coda's loss equal to coda-chunked's to 1e-3). Prints one table; JSON under $OUT.

GPU (carry [".whl"]; the device has transformers, torch, Triton; Liger carried as a wheel):

    python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl && \
    export PYTHONPATH=$PWD/.site:$PWD && python bench/bench_memory.py --out $OUT/memory.json

(8 processes, coda first; `--budget-s` (285) skips what has not started by then.) Activation
checkpointing's cost: `--variants coda,coda-ckpt`; the rebuilt gated output's: `--variants coda,coda-saved-g`. `--child` runs one variant and prints its JSON line (internal).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CASES = (("llama1b", 16), ("qwen3", 28))
VARIANTS = ("coda", "liger", "eager", "coda-chunked")  # most needed first: a cut budget skips the last
PIPELINES = {"coda": "nn-to-coda", "coda-ckpt": "nn-to-coda",
             "coda-chunked": "nn-autodiff{memory-budget-mib=256},nn-to-coda",
             "coda-saved-g": "nn-autodiff{rebuild-gated=false},nn-to-coda"}
# not run by default: coda-ckpt, from_hf with activation checkpointing of every decoder unit;
# coda-saved-g, the forward saving g = swiglu(z) instead of the backward rebuilding it (session 23's A/B)


def child(shape_name: str, layers: int, variant: str, batch: int, seq: int, iters: int, tune: str) -> dict:
    import torch

    from bench_model import SHAPES, LigerPatches, make_model

    shape = SHAPES[shape_name]
    cuda = torch.cuda.is_available()  # the CPU runs it through the Triton interpreter (a smoke run)
    device = torch.device("cuda" if cuda else "cpu")
    model = make_model(shape, layers, torch.bfloat16 if cuda else torch.float32, device)
    ids = torch.randint(0, shape["vocab_size"], (batch, seq), device=device,
                        generator=torch.Generator(device=device).manual_seed(1))
    ctx = None
    if variant == "liger":
        patches = LigerPatches(shape["family"], model)
        ctx = patches.active
        fwd = model
    elif variant.startswith("coda"):
        import coda_ir.torch
        from bench_block import set_tuning

        set_tuning(tune)
        fwd = coda_ir.torch.from_hf(model, pipeline=PIPELINES[variant], progress=False)
        if variant == "coda-ckpt":
            fwd.gradient_checkpointing_enable()
    else:
        fwd = model

    def step():
        model.zero_grad(set_to_none=True)
        out = fwd(ids, labels=ids) if variant.startswith("coda") else fwd(input_ids=ids, labels=ids)
        out.loss.backward()
        return out.loss.detach()

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def run():
        start = time.perf_counter()
        for _ in range(2 if cuda else 1):
            step()
        sync()
        first = time.perf_counter() - start
        model.zero_grad(set_to_none=True)
        sync()
        base = torch.cuda.memory_allocated() if cuda else 0
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        times, loss = [], None
        for _ in range(iters):
            begin = time.perf_counter()
            loss = step()
            sync()
            times.append((time.perf_counter() - begin) * 1e3)
        peak = torch.cuda.max_memory_allocated() - base if cuda else 0
        return {"step_ms": statistics.median(times), "peak_gib": peak / 2**30, "loss": float(loss),
                "warmup_s": first, "resident_gib": base / 2**30}

    if ctx is not None:
        with ctx():
            return run()
    return run()


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default=",".join(f"{s}:{n}" for s, n in CASES), help="shape:layers,...")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--tune", choices=("short", "full", "off"), default="short")
    p.add_argument("--timeout-s", type=float, default=150.0, help="per variant process")
    p.add_argument("--budget-s", type=float, default=285.0, help="wall time: variants not started by then are skipped")
    p.add_argument("--out", default=None)
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        shape, layers, variant = args.child.split(":")
        try:
            result = child(shape, int(layers), variant, args.batch, args.seq, args.iters, args.tune)
        except Exception as e:  # recorded, the other variants go on
            result = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]}
        print("RESULT " + json.dumps(result), flush=True)
        return result

    import torch

    info = {"date": time.strftime("%Y-%m-%d %H:%M"), "torch": torch.__version__,
            "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu (smoke: no memory figures)"}
    results: dict = {"info": info, "runs": {}}
    deadline = time.perf_counter() + args.budget_s
    for case in args.cases.split(","):
        shape, layers = case.split(":")
        for variant in args.variants.split(","):
            if time.perf_counter() > deadline:
                results["runs"][f"{shape}:{layers}:{variant}"] = {"error": "skipped: over --budget-s"}
                continue
            cmd = [sys.executable, __file__, "--child", f"{shape}:{layers}:{variant}", "--batch", str(args.batch),
                   "--seq", str(args.seq), "--iters", str(args.iters), "--tune", args.tune]
            start = time.perf_counter()
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s, env=os.environ.copy())
                line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
                r = json.loads(line[7:]) if line else {"error": f"no result (rc {done.returncode})",
                                                       "trace": done.stderr[-2000:]}
            except subprocess.TimeoutExpired:
                r = {"error": f"timed out after {args.timeout_s:.0f} s"}
            r["process_s"] = time.perf_counter() - start
            results["runs"][f"{shape}:{layers}:{variant}"] = r
            print(f"{shape} x{layers} {variant}: {r}", file=sys.stderr, flush=True)

    # correctness: losses against eager's, and coda's against coda-chunked's
    checks = []
    for case in args.cases.split(","):
        runs = {v: results["runs"].get(f"{case}:{v}", {}) for v in args.variants.split(",")}
        eager = runs.get("eager", {}).get("loss")
        for v, r in runs.items():
            if "loss" in r and eager is not None:
                ok = abs(r["loss"] - eager) <= 2e-2
                checks.append((case, v, ok))
                r["loss_ok"] = ok
        a, b = runs.get("coda", {}).get("loss"), runs.get("coda-chunked", {}).get("loss")
        if a is not None and b is not None:
            runs["coda"]["same_loss_as_chunked"] = abs(a - b) <= 1e-3
    print("\n| model | variant | step ms | peak GiB (above the model) | vs Liger's peak | loss | check |")
    print("|---|---|---|---|---|---|---|")
    for case in args.cases.split(","):
        liger = results["runs"].get(f"{case}:liger", {}).get("peak_gib")
        for v in args.variants.split(","):
            r = results["runs"].get(f"{case}:{v}", {})
            if "error" in r:
                print(f"| {case} | {v} | - | - | - | - | {r['error'][:80]} |")
                continue
            ratio = f"{r['peak_gib'] / liger:.2f}x" if liger and r["peak_gib"] else "-"
            check = "ok" if r.get("loss_ok", True) and r.get("same_loss_as_stored", True) else "LOSS MISMATCH"
            print(f"| {case} | {v} | {r['step_ms']:.1f} | {r['peak_gib']:.2f} | {ratio} | {r['loss']:.5f} | {check} |")
    out = args.out or (os.path.join(os.environ["OUT"], "memory.json") if os.environ.get("OUT") else None)
    if out:
        Path(out).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
