"""A whole-model training step (forward + backward) of Hugging Face models: coda-ir against
HF eager (sdpa), HF + torch.compile and HF + Liger, with the step's limit measured in the same
rounds (its GEMMs via cuBLAS plus its attention via SDPA, PERFORMANCE.md).

Per variant: median step time (each step from an idle GPU, synced) and its ratio to the limit;
the same for steps run back to back ("pipelined": the host enqueues the next step while the GPU
finishes this one, as a loop that does not read the loss every step); tokens/s, peak memory above
the resident model, first-step time (compile / autotune), the loss against eager's. Variants run in rounds
whose order rotates; a failing variant is recorded with its error and the others go on.

GPU (carry [".whl", ".devcache"]; the device has transformers, torch, Triton):

    python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl && \
    export PYTHONPATH=$PWD/.site:$PWD CODA_CACHE_DIR=$PWD/.devcache/coda && \
    python bench/bench_model.py --shape llama1b --layers 4 --out $OUT/model-llama1b.json

CPU smoke (tests/test_bench_smoke.py): `python bench/bench_model.py --smoke`.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import shutil
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = {
    # LLaMA-3.2-1B: hidden 2048, ffn 8192, 32 / 8 heads of 64, vocab 128256, tied, theta 5e5
    "llama1b": dict(family="llama", hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
                    num_key_value_heads=8, head_dim=64, vocab_size=128256, tie_word_embeddings=True,
                    rope_theta=500000.0, rms_norm_eps=1e-5),
    # Qwen3-1.7B: hidden 2048, ffn 6144, 16 / 8 heads of 128, vocab 151936, tied, QK-norm
    "qwen3": dict(family="qwen3", hidden_size=2048, intermediate_size=6144, num_attention_heads=16,
                  num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True,
                  rope_theta=1000000.0, rms_norm_eps=1e-6),
    "smoke": dict(family="llama", hidden_size=64, intermediate_size=96, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, vocab_size=128, tie_word_embeddings=False,
                  rope_theta=10000.0, rms_norm_eps=1e-6),
}
VARIANTS = ("limit", "eager", "compile", "liger", "coda")
# Not run by default: coda-ir with launch_gemm's launch plans off (every launch re-derives its
# path, tuning key, configuration and grid), the A/B of issue 11 in one process.
# coda-no-donate: the backward allocates fresh outputs instead of writing over the tensors the
# forward saved only for it (dlogits beside the saved logits): the peak-memory A/B of issue 11.
# liger-compile: Liger's kernels with the rest of the model under torch.compile (Liger's best form,
# the bar a user who already combines both would hold us to).
# coda-tl-plain: plain gemms on the generated tl kernel instead of cuBLAS (`vendor-gemms=false`).
# coda-saved-g: the forward saves g = swiglu(z) instead of the backward rebuilding it in its gated
# pass (`nn-autodiff{rebuild-gated=false}`): the time side of session 23's A/B (bench_memory: the peak).
# coda-loads-in-order: merged elementwise kernels read their second body's inputs after the first
# body's stores (`nn-to-coda{merged-loads=in-order}`, the order before session 23).
EXTRA_VARIANTS = ("coda-no-plans", "coda-no-donate", "coda-tl-plain", "liger-compile", "coda-saved-g",
                  "coda-loads-in-order")
CODA_PIPELINES = {"coda-tl-plain": "nn-to-coda{vendor-gemms=false}",
                  "coda-saved-g": "nn-autodiff{rebuild-gated=false},nn-to-coda",
                  "coda-loads-in-order": "nn-to-coda{merged-loads=in-order}"}


def make_model(shape: dict, layers: int, dtype, device):
    import transformers

    kw = {k: v for k, v in shape.items() if k not in ("family", "rope_theta")}
    cls_cfg = transformers.LlamaConfig if shape["family"] == "llama" else transformers.Qwen3Config
    config = cls_cfg(num_hidden_layers=layers, **kw)
    if hasattr(config, "rope_parameters") and isinstance(config.rope_parameters, dict):
        config.rope_parameters["rope_theta"] = shape["rope_theta"]
    else:
        config.rope_theta = shape["rope_theta"]
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    cls = transformers.LlamaForCausalLM if shape["family"] == "llama" else transformers.Qwen3ForCausalLM
    # built in `dtype` the way `from_pretrained(dtype=...)` builds it: `.to(dtype)` afterwards would
    # also round the rotary inv_freq buffer to bf16 (RoPE angles off by up to position x 2^-9 rad)
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = cls(config)
    finally:
        torch.set_default_dtype(before)
    return model


# ----------------------------------------------------------------------------- the limit


def limit_step(shape: dict, layers: int, tokens: int, seq: int, dtype, device):
    """The step's GEMMs (forward, dX, dW of every projection and of the LM head) and its attention
    (SDPA forward + backward, GQA, causal): two closures timed separately."""
    D, F, H, KV, hd, V = (shape[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                            "num_key_value_heads", "head_dim", "vocab_size"))
    # a vocabulary that is not a multiple of 8 (Granite's 49155) leaves the logits' rows unaligned and
    # cuBLAS on a slow path (the limit came out above the steps themselves); the limit is a lower
    # bound, so it times the head at the vocabulary rounded up to 128 (+0.2% FLOPs for Granite)
    V = -(-V // 128) * 128
    g = torch.Generator(device=device).manual_seed(0)

    def rnd(*s):
        return torch.randn(*s, device=device, dtype=dtype, generator=g) * 0.02

    projections = [(D, (H + 2 * KV) * hd), (H * hd, D), (D, 2 * F), (F, D)]
    mats = []
    for k, n in projections:
        mats.append((rnd(tokens, k), rnd(n, k), rnd(tokens, n)))
    head = (rnd(tokens, D), rnd(V, D), rnd(tokens, V))

    def gemms():
        for _ in range(layers):
            for x, w, dy in mats:
                x @ w.T
                dy @ w
                dy.T @ x
        x, w, dy = head
        x @ w.T
        dy @ w
        dy.T @ x

    b = tokens // seq
    q = rnd(b, H, seq, hd).requires_grad_(True)
    k = rnd(b, KV, seq, hd).requires_grad_(True)
    v = rnd(b, KV, seq, hd).requires_grad_(True)
    do = rnd(b, H, seq, hd)

    def attention():
        for _ in range(layers):
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            torch.autograd.grad(o, (q, k, v), do)

    return gemms, attention


# ----------------------------------------------------------------------------- variants


class LigerPatches:
    """Liger patches module-level functions (RoPE) of transformers: install them only while the
    Liger variant runs, so that eager and compile stay plain Hugging Face."""

    def __init__(self, family: str, model):
        import importlib

        from liger_kernel import transformers as lt

        self.module = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
        before = dict(vars(self.module))
        apply = getattr(lt, f"apply_liger_kernel_to_{family}")
        apply(rope=True, rms_norm=True, swiglu=True, cross_entropy=False, fused_linear_cross_entropy=True, model=model)
        after = dict(vars(self.module))
        self.liger = {k: v for k, v in after.items() if before.get(k) is not v}
        self.plain = {k: before.get(k) for k in self.liger}
        self._set(self.plain)

    def _set(self, values):
        for k, v in values.items():
            setattr(self.module, k, v)

    @contextlib.contextmanager
    def active(self):
        self._set(self.liger)
        try:
            yield
        finally:
            self._set(self.plain)


@contextlib.contextmanager
def donation_off():
    from coda_ir.torch.function import set_donation

    before = set_donation(False)
    try:
        yield
    finally:
        set_donation(before)


@contextlib.contextmanager
def plans_off():
    from coda_ir.runtime import gemm_launch

    before = gemm_launch.set_launch_plans(False)
    try:
        yield
    finally:
        gemm_launch.set_launch_plans(before)


def build_variant(name: str, base, shape, layers, tokens, seq, dtype, device):
    """(step closure returning the loss or None, context manager factory)."""
    ids = torch.randint(0, shape["vocab_size"], (tokens // seq, seq), device=device,
                        generator=torch.Generator(device=device).manual_seed(1))
    ctx = contextlib.nullcontext
    if name == "limit":
        gemms, attention = limit_step(shape, layers, tokens, seq, dtype, device)

        def step():
            gemms()
            attention()
            return None

        step.parts = {"gemms": gemms, "attention": attention}  # type: ignore[attr-defined]
        return step, ctx
    model = copy.deepcopy(base)
    if name == "compile":
        fwd = torch.compile(model)
    elif name in ("liger", "liger-compile"):
        patches = LigerPatches(shape["family"], model)
        ctx = patches.active
        # compiled with the patches installed and always called under them, so dynamo's guards on
        # the patched module globals hold for every step
        fwd = torch.compile(model) if name == "liger-compile" else model
    elif name == "coda" or name in EXTRA_VARIANTS and name.startswith("coda"):
        import coda_ir.torch

        pipeline = CODA_PIPELINES.get(name, "nn-to-coda")
        fwd = coda_ir.torch.from_hf(model, pipeline=pipeline, progress=True)
        if name == "coda-no-plans":
            ctx = plans_off
        elif name == "coda-no-donate":
            ctx = donation_off
    else:
        fwd = model

    def step(memory: dict | None = None):
        """One step; with `memory` (CUDA), records GiB allocated after the forward (every saved
        tensor alive) and the backward's peak, both above the allocation before the step."""
        model.zero_grad(set_to_none=True)
        if memory is not None:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        loss = (fwd(ids, labels=ids) if name.startswith("coda") else fwd(input_ids=ids, labels=ids)).loss
        if memory is not None:
            torch.cuda.synchronize()
            memory["after_forward_gib"] = (torch.cuda.memory_allocated() - base) / 2**30
            memory["forward_peak_gib"] = (torch.cuda.max_memory_allocated() - base) / 2**30
            torch.cuda.reset_peak_memory_stats()
        loss.backward()
        if memory is not None:
            torch.cuda.synchronize()
            memory["backward_peak_gib"] = (torch.cuda.max_memory_allocated() - base) / 2**30
        return loss.detach()

    return step, ctx


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device, iters: int) -> float:
    """Median ms of `iters` calls (CUDA events on a GPU)."""
    times = []
    for _ in range(iters):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def pipelined(fn, device, iters: int) -> float:
    """ms a step of `iters` steps run back to back, one sync at the end: as a training loop that
    does not read the loss every step runs them (the host enqueues the next step while the GPU
    finishes this one), where `timed` starts every step from an idle GPU."""
    sync(device)
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / iters
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t) * 1e3 / iters


def profile_step(name: str, step, iters: int) -> list:
    """[kernel name, launches per step, ms per step] of the GPU kernels of `iters` steps, costliest
    first: where a variant's step goes beyond its limit."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            step()
        torch.cuda.synchronize()
    rows = []
    for ev in prof.key_averages():
        if ev.device_type.name != "CUDA" or ev.count == 0:
            continue
        total = getattr(ev, "device_time_total", None) or getattr(ev, "cuda_time_total", 0.0)
        rows.append([ev.key[:160], ev.count / iters, total / iters / 1000.0])
    rows.sort(key=lambda r: -r[2])
    print(f"\n[{name}] kernels of one step, costliest first ({sum(r[2] for r in rows):.2f} ms in kernels):")
    for key, count, ms in rows[:40]:
        print(f"  {ms:8.3f} ms  {count:5.1f}x  {key[:110]}")
    return rows


def step_gaps(name: str, step) -> dict:
    """Where one step's GPU waits: the step under the profiler (CUDA kernels and the host-side
    calls that launch them), its span from the first kernel's start to the last one's end, the
    time in kernels, and the longest idle gaps with the kernels around them and what the host
    was doing when the GPU went idle (the innermost host event spanning the gap's start)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    events = prof.events()
    kernels = sorted((ev for ev in events if ev.device_type.name == "CUDA"), key=lambda ev: ev.time_range.start)
    host = [ev for ev in events if ev.device_type.name == "CPU"]
    gaps, prev_end, prev_name, busy = [], None, None, 0.0
    for ev in kernels:
        start, end = ev.time_range.start, ev.time_range.end
        busy += end - start
        if prev_end is not None and start > prev_end:
            gaps.append((start - prev_end, prev_name, ev.name, prev_end))
        if prev_end is None or end > prev_end:
            prev_end, prev_name = end, ev.name
    span = (prev_end - kernels[0].time_range.start) if kernels else 0.0
    gaps.sort(key=lambda g: -g[0])
    top = []
    for us, before, after, at in gaps[:15]:
        # host events are on the host clock the profiler aligns with the GPU's; the innermost one
        # open when the GPU went idle says what the host was busy with
        open_then = [ev for ev in host if ev.time_range.start <= at <= ev.time_range.end]
        inner = min(open_then, key=lambda ev: ev.time_range.end - ev.time_range.start, default=None)
        top.append({"idle_us": us, "after": before[:80], "before": after[:80],
                    "host_busy_with": inner.name[:80] if inner is not None else None})
    idle = sum(g[0] for g in gaps)
    print(f"\n[{name}] one step: kernels {busy / 1e3:.2f} ms in a span of {span / 1e3:.2f} ms, idle {idle / 1e3:.2f} ms "
          f"in {len(gaps)} gaps; the longest:")
    for g in top:
        print(f"  {g['idle_us']:8.1f} us  after {g['after'][:40]:40s} before {g['before'][:40]:40s} host: {g['host_busy_with']}")
    return {"kernels_ms": busy / 1e3, "span_ms": span / 1e3, "idle_ms": idle / 1e3, "gaps": len(gaps), "longest": top}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=sorted(SHAPES), default="llama1b")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iters", type=int, default=5, help="timed steps per variant per round")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--out", default=None, help="JSON path (default: $OUT/model-<shape>.json when $OUT is set)")
    p.add_argument("--smoke", action="store_true", help="tiny CPU run through the Triton interpreter")
    p.add_argument("--profile", action="store_true",
                   help="after timing, profile one step of each variant (torch.profiler, GPU kernels by total "
                        "time) and where its GPU waits (idle gaps between kernels, what the host was doing)")
    args = p.parse_args(argv)
    if args.smoke:
        args.shape, args.layers, args.batch, args.seq, args.rounds, args.iters = "smoke", 2, 2, 16, 1, 1
        args.variants = "limit,eager,coda"
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    shape = SHAPES[args.shape]
    tokens = args.batch * args.seq
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    import transformers

    info = {
        "date": time.strftime("%Y-%m-%d"),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "shape": args.shape, "layers": args.layers, "batch": args.batch, "seq": args.seq, "dtype": str(dtype),
    }
    with contextlib.suppress(Exception):
        import triton

        info["triton"] = triton.__version__
    with contextlib.suppress(Exception):
        import importlib.metadata as md

        info["liger"] = md.version("liger-kernel")
    base = make_model(shape, args.layers, dtype, device)
    resident = torch.cuda.memory_allocated() if device.type == "cuda" else 0
    results: dict[str, dict] = {}
    steps = {}
    for name in names:
        entry = results.setdefault(name, {})
        try:
            step, ctx = build_variant(name, base, shape, args.layers, tokens, args.seq, dtype, device)
            with ctx():
                sync(device)
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated() if device.type == "cuda" else 0
                t = time.perf_counter()
                loss = step()
                sync(device)
                entry["first_step_s"] = time.perf_counter() - t
                t = time.perf_counter()
                step()
                sync(device)
                entry["warm_step_s"] = time.perf_counter() - t
                if device.type == "cuda":
                    entry["peak_gib_above_model"] = (torch.cuda.max_memory_allocated() - before) / 2**30
                    if name != "limit":
                        # a warm step on its own (no autotuning in it), split at the backward
                        memory: dict = {}
                        step(memory)
                        sync(device)
                        entry["warm_memory"] = memory
                if loss is not None:
                    entry["loss"] = float(loss)
            steps[name] = (step, ctx)
            entry["ms"] = []
            print(f"[{name}] first step {entry['first_step_s']:.1f} s, warm {entry['warm_step_s'] * 1e3:.1f} ms, "
                  f"peak {entry.get('peak_gib_above_model', float('nan')):.2f} GiB, warm {entry.get('warm_memory')}, "
                  f"loss {entry.get('loss')}", flush=True)
        except Exception as exc:  # recorded, the others go on
            entry["error"] = f"{type(exc).__name__}: {exc}"[:2000]
            entry["traceback"] = traceback.format_exc()[-4000:]
            print(f"[{name}] failed: {entry['error'][:300]}", file=sys.stderr)
    order = list(steps)
    for r in range(args.rounds):
        rotated = order[r % len(order):] + order[: r % len(order)] if order else []
        for name in rotated:
            step, ctx = steps[name]
            with ctx():
                results[name]["ms"].append(timed(step, device, args.iters))
                results[name].setdefault("pipelined_ms", []).append(pipelined(step, device, args.iters))
                if name == "limit":
                    for part, fn in step.parts.items():
                        results[name].setdefault(f"{part}_ms", []).append(timed(fn, device, args.iters))
    if args.profile and device.type == "cuda":
        for name, (step, ctx) in steps.items():
            with ctx():
                results[name]["kernels"] = profile_step(name, step, args.iters)
                results[name]["gaps"] = step_gaps(name, step)
    limit = statistics.median(results["limit"]["ms"]) if results.get("limit", {}).get("ms") else None
    limit_pipelined = statistics.median(results["limit"]["pipelined_ms"]) if limit else None
    eager_loss = results.get("eager", {}).get("loss")
    for name, entry in results.items():
        if entry.get("ms"):
            entry["median_ms"] = statistics.median(entry["ms"])
            entry["tokens_per_s"] = tokens / (entry["median_ms"] / 1e3)
            entry["pipelined_median_ms"] = statistics.median(entry["pipelined_ms"])
            if limit:
                entry["x_limit"] = entry["median_ms"] / limit
            if limit_pipelined:
                entry["x_limit_pipelined"] = entry["pipelined_median_ms"] / limit_pipelined
        if eager_loss is not None and "loss" in entry:
            entry["loss_minus_eager"] = entry["loss"] - eager_loss
    report = {"info": info, "resident_gib": resident / 2**30, "results": results}
    out = args.out or (os.path.join(os.environ["OUT"], f"model-{args.shape}.json") if os.environ.get("OUT") else None)
    if out:
        Path(out).write_text(json.dumps(report, indent=1, default=str))
        cache = Path(os.environ.get("CODA_CACHE_DIR", "")) / "autotune.json"
        if os.environ.get("OUT") and cache.is_file():  # bring the tuning back for the next run
            shutil.copy(cache, Path(os.environ["OUT"]) / f"autotune-{args.shape}.json")
    print(f"\n{args.shape}: {args.layers} layers, {args.batch} x {args.seq} tokens, {info['device']}, torch {info['torch']}")
    print(f"{'variant':10} {'ms':>9} {'x limit':>8} {'pipelined':>10} {'x limit':>8} {'tok/s':>10} {'peak GiB':>9} "
          f"{'first s':>8} {'loss-eager':>11}")
    for name, e in results.items():
        if "error" in e:
            print(f"{name:10} error: {e['error'][:100]}")
            continue
        print(f"{name:10} {e.get('median_ms', float('nan')):9.2f} {e.get('x_limit', float('nan')):8.3f} "
              f"{e.get('pipelined_median_ms', float('nan')):10.2f} {e.get('x_limit_pipelined', float('nan')):8.3f} "
              f"{e.get('tokens_per_s', float('nan')):10.0f} {e.get('peak_gib_above_model', float('nan')):9.2f} "
              f"{e.get('first_step_s', float('nan')):8.1f} {e.get('loss_minus_eager', float('nan')):11.2e}")
    if limit and "gemms_ms" in results["limit"]:
        print(f"limit parts: GEMMs {statistics.median(results['limit']['gemms_ms']):.2f} ms, "
              f"attention {statistics.median(results['limit']['attention_ms']):.2f} ms")
    return report


if __name__ == "__main__":
    main()
