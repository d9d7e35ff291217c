"""Predicted (attention model) next to measured, per attention backend, forward and forward+backward.

    python bench/bench_attention_model.py                      # on the GPU: the model shapes, < 5 minutes on an H200
    python bench/bench_attention_model.py --smoke --out DIR    # CPU: tiny shapes, the code path only, no timing claims

For each case (a model's attention shape at 2 x 4096 and 1 x 8192 tokens; a mask: causal,
packed documents, or Gemma-2's window and softcap) and each backend coda-ir can call
(coda_ir/runtime/attention.py): SDPA forced to cuDNN or flash (`torch.nn.attention.sdpa_kernel`,
GQA through `enable_gqa`), FlexAttention (`torch.compile(flex_attention)` with a `BlockMask` and a
softcap `score_mod`), and `torch.nn.attention.varlen.varlen_attn` (documents as sequences) when
this torch has it. Each runs forward alone and forward + backward (autograd, `do_bench` medians
with the gradient reset between calls), next to the attention model's prediction
(`coda_ir.analysis.attention_model`, the constants of this GPU in gpu_constants.json, or
`--constants` from bench/calibrate.py). The backward is measured as autograd runs it (FlexAttention
included: no forward rerun), so the prediction compared is the backward kernel's own time.
A backend that cannot run a case is recorded with its error. Prints a table (predicted,
measured, measured / predicted) and writes JSON to --out (default $OUT/bench_attention_model.json).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from coda_ir.analysis import attention_model as am  # noqa: E402
from coda_ir.analysis import io_model as m  # noqa: E402

# Attention shapes of the benchmarked families (bench/bench_families.py, bench/bench_model.py):
# (heads, kv_heads, head_dim, window, softcap)
MODELS = {
    "llama1b": (32, 8, 64, 0, 0.0),
    "llama8b": (32, 8, 128, 0, 0.0),
    "qwen3-1.7b": (16, 8, 128, 0, 0.0),
    "gemma2-2b": (8, 4, 256, 4096, 50.0),
}
TOKENS = ((2, 4096), (1, 8192))
DOC_LEN = 1024  # packed-document cases: documents of this many rows
BUDGET_S = 270.0  # stop starting new cases past this (the run must stay under 5 minutes)


def gpu_constants(path: str | None) -> m.GPU:
    if path:
        return m.load_calibration(path)
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0).lower()
        key = next((k for k in ("h200", "h100", "a100") if k in name), "h100")
        gpu = m.load_gpu(key)
        return dataclasses.replace(gpu, sms=torch.cuda.get_device_properties(0).multi_processor_count)
    return m.load_gpu("h100")


def cases(smoke: bool) -> list[tuple[str, am.AttentionShape, tuple[str, ...]]]:
    """(label, shape, backends) of every measurement."""
    if smoke:
        return [
            ("smoke causal", am.AttentionShape(2, 64, 4, 2, 16), ("cudnn", "flash", "flex")),
            ("smoke docs", am.AttentionShape(1, 64, 4, 2, 16, documents=(32, 32)), ("varlen",)),
            ("smoke docs window+softcap", am.AttentionShape(1, 64, 4, 2, 16, window=16, softcap=50.0,
                                                            documents=(32, 32)), ("flex",)),
        ]
    out = []
    for model, (h, kv, hd, window, softcap) in MODELS.items():
        for b, s in TOKENS:
            tag = f"{model} {b}x{s}"
            if window or softcap:  # Gemma-2's local layers: FlexAttention is the only backend that runs them
                out.append((f"{tag} window+softcap", am.AttentionShape(b, s, h, kv, hd, window=window, softcap=softcap),
                            ("flex",)))
                continue
            out.append((f"{tag} causal", am.AttentionShape(b, s, h, kv, hd), ("cudnn", "flash", "flex")))
            if model != "qwen3-1.7b":
                docs = am.AttentionShape(b, s, h, kv, hd, documents=(DOC_LEN,) * (s // DOC_LEN))
                out.append((f"{tag} docs{DOC_LEN}", docs, ("flex", "varlen")))
    return out


# ---------------------------------------------------------------- the backends


def _tensors(shape: am.AttentionShape, device: str, dtype):
    g = torch.Generator(device=device).manual_seed(0)
    B, S, H, KV, d = shape.batch, shape.seq_len, shape.heads, shape.kv_heads, shape.head_dim

    def make(heads):
        return torch.randn(B, heads, S, d, device=device, dtype=dtype, generator=g).requires_grad_(True)

    return make(H), make(KV), make(KV)


def _sdpa(backend: str, smoke: bool):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    which = SDPBackend.MATH if smoke else {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]

    def run(q, k, v, shape):
        try:
            with sdpa_kernel(which):
                return F.scaled_dot_product_attention(q, k, v, is_causal=shape.causal, enable_gqa=shape.group > 1)
        except RuntimeError:
            if backend != "cudnn" or smoke:
                raise
            # SDPA's dispatcher may refuse GQA for cuDNN; coda-ir's runtime calls the aten op, which
            # takes GQA k/v directly (coda_ir/runtime/attention.py): time what coda-ir runs
            return torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, shape.causal, False)[0]

    return run


_FLEX = {}


def _flex(smoke: bool):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    fn = flex_attention if smoke else _FLEX.setdefault("fn", torch.compile(flex_attention, dynamic=False, fullgraph=True))

    def run(q, k, v, shape):
        spans = shape.doc_spans()
        doc = torch.zeros(shape.seq_len, dtype=torch.int32, device=q.device)
        for i, (a, b) in enumerate(spans):
            doc[a:b] = i
        window = shape.window

        def mask_mod(b, h, qi, ki):
            keep = (ki <= qi) & (doc[qi] == doc[ki])
            if window:
                keep = keep & (qi - ki < window)
            return keep

        key = (shape.seq_len, window, tuple(spans))
        block_mask = _FLEX.get(key)
        if block_mask is None:
            block_mask = _FLEX[key] = create_block_mask(mask_mod, None, None, shape.seq_len, shape.seq_len,
                                                        device=q.device)
        cap = shape.softcap

        def softcap(score, b, h, qi, ki):
            return cap * torch.tanh(score / cap)

        return fn(q, k, v, score_mod=softcap if cap else None, block_mask=block_mask, enable_gqa=shape.group > 1)

    return run


def _varlen():
    from torch.nn.attention.varlen import varlen_attn

    params = inspect.signature(varlen_attn).parameters

    def run(q, k, v, shape):
        B, H, S, d = q.shape
        rows = lambda t: t.transpose(1, 2).reshape(B * S, t.shape[1], d)  # noqa: E731
        qr, kr, vr = rows(q), rows(k), rows(v)
        lengths = [b - a for a, b in shape.doc_spans()] * B
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=q.device)
        kw = {}
        if "window_size" in params:
            kw["window_size"] = (-1, 0)  # causal
        elif "is_causal" in params:
            kw["is_causal"] = True
        if shape.group > 1:
            if "enable_gqa" in params:
                kw["enable_gqa"] = True
            else:  # an older varlen without GQA: expand K/V per q head (more bytes: noted in the JSON)
                kr, vr = kr.repeat_interleave(shape.group, 1), vr.repeat_interleave(shape.group, 1)
        return varlen_attn(qr, kr, vr, cu, cu, max(lengths), max(lengths), **kw)

    return run


def runner(backend: str, smoke: bool):
    if backend in ("cudnn", "flash"):
        return _sdpa(backend, smoke)
    if backend == "flex":
        return _flex(smoke)
    if backend == "varlen":
        return _varlen()
    raise ValueError(backend)


# ---------------------------------------------------------------- timing


def _time(fn, smoke: bool) -> float:
    """Seconds per call: do_bench's median on the GPU; one wall-clock call on the CPU (smoke)."""
    if smoke:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    from triton.testing import do_bench

    return do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e-3


def measure(backend: str, shape: am.AttentionShape, smoke: bool, device: str) -> dict:
    run = runner(backend, smoke)
    dtype = torch.float32 if smoke else torch.bfloat16
    q, k, v = _tensors(shape, device, dtype)
    qd, kd, vd = q.detach(), k.detach(), v.detach()  # the forward alone: inputs that need no gradient
    with torch.no_grad():
        out = run(qd, kd, vd, shape)  # compiles / checks the backend runs the case at all
    dout = torch.randn_like(out)

    def fwd():
        with torch.no_grad():
            run(qd, kd, vd, shape)

    def fwd_bwd():
        for t in (q, k, v):
            t.grad = None
        run(q, k, v, shape).backward(dout)

    result = {"fwd_s": _time(fwd, smoke)}
    try:
        fwd_bwd()
        result["fwd_bwd_s"] = _time(fwd_bwd, smoke)
    except NotImplementedError as error:  # FlexAttention has no CPU backward (smoke): the forward still counts
        result["bwd_error"] = str(error).splitlines()[0][:200]
    return result


def predict(backend: str, shape: am.AttentionShape, gpu: m.GPU) -> dict:
    fwd, bwd = am.step_cost(shape, backend, gpu)
    own_bwd = bwd.time_s - (bwd.forward.time_s if bwd.forward is not None else 0.0)
    return {"fwd_s": fwd.time_s, "fwd_bwd_s": fwd.time_s + own_bwd, "fwd": fwd.summary(), "bwd": bwd.summary(),
            "tflops_fwd": fwd.tflops, "useful_flops_fwd": fwd.useful_flops, "useful_flops_bwd": bwd.useful_flops}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes: the code path only (times mean nothing)")
    ap.add_argument("--constants", help="a bench/calibrate.py JSON (default: gpu_constants.json for this GPU)")
    ap.add_argument("--out", help="JSON path or directory (default: $OUT/bench_attention_model.json)")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() and not args.smoke else "cpu"
    if not args.smoke and device != "cuda":
        print("bench_attention_model: no CUDA device (use --smoke on a CPU)", file=sys.stderr)
        return 1
    gpu = gpu_constants(args.constants)
    start = time.perf_counter()
    rows = []
    # SDPA's kernels first, FlexAttention (a compile per shape and mask) last: if the time budget
    # runs out, what is skipped is the slowest to set up, and it is recorded as skipped
    order = {"cudnn": 0, "flash": 1, "varlen": 2, "flex": 3}
    work = sorted(((label, shape, backend) for label, shape, backends in cases(args.smoke) for backend in backends),
                  key=lambda item: order[item[2]])
    if not args.smoke:
        import torch._dynamo as dynamo

        dynamo.config.cache_size_limit = max(dynamo.config.cache_size_limit, 64)  # a compile per shape
    for label, shape, backend in work:
        record = {"case": label, "backend": backend, "shape": dataclasses.asdict(shape)}
        if time.perf_counter() - start > BUDGET_S:
            record["error"] = "skipped: time budget spent"
            rows.append(record)
            continue
        try:
            record["predicted"] = predict(backend, shape, gpu)
        except ValueError as error:
            record["predicted"] = {"error": str(error)}
        try:
            record["measured"] = measure(backend, shape, args.smoke, device)
        except Exception as error:  # a backend that cannot run this case: recorded, not fatal
            record["error"] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]
        finally:
            if device == "cuda":
                torch.cuda.empty_cache()
        rows.append(record)
        print(f"  {label:<32} {backend:<7} {'ok' if 'measured' in record else record.get('error')}", flush=True)
    meta = {
        "gpu": torch.cuda.get_device_name(0) if device == "cuda" else "cpu (smoke: no timing claims)",
        "constants": gpu.describe(), "torch": torch.__version__, "smoke": args.smoke,
        "elapsed_s": time.perf_counter() - start,
    }
    try:
        import triton

        meta["triton"] = triton.__version__
    except ImportError:
        pass
    out = args.out or (os.path.join(os.environ["OUT"], "bench_attention_model.json") if os.environ.get("OUT") else None)
    if out:
        path = Path(out)
        if path.is_dir() or not path.suffix:
            path.mkdir(parents=True, exist_ok=True)
            path = path / "bench_attention_model.json"
        path.write_text(json.dumps({"meta": meta, "results": rows}, indent=2) + "\n")
        print(f"wrote {path}")
    rows.sort(key=lambda r: ([c[0] for c in cases(args.smoke)].index(r["case"]), order[r["backend"]]))
    print(f"\n{meta['gpu']}; model constants: {meta['constants']}")
    print(f"{'case':<32} {'backend':<7} {'pred fwd ms':>11} {'meas fwd ms':>11} {'ratio':>6} "
          f"{'pred f+b ms':>11} {'meas f+b ms':>11} {'ratio':>6}")
    for r in rows:
        p, x = r.get("predicted", {}), r.get("measured")
        if x is None or "fwd_s" not in p:
            why = r.get("error") or p.get("error", "")
            print(f"{r['case']:<32} {r['backend']:<7} {why[:70]}")
            continue
        def ratio(a, b):
            return "     -" if args.smoke or not a or not b else f"{a / b:6.2f}"

        meas_fb = x.get("fwd_bwd_s")
        print(f"{r['case']:<32} {r['backend']:<7} {p['fwd_s'] * 1e3:>11.3f} {x['fwd_s'] * 1e3:>11.3f} "
              f"{ratio(x['fwd_s'], p['fwd_s'])} {p['fwd_bwd_s'] * 1e3:>11.3f} "
              f"{(meas_fb or math.nan) * 1e3:>11.3f} {ratio(meas_fb, p['fwd_bwd_s'])}")
    print("ratio = measured / predicted (the model is a lower bound: > 1 is expected; within 1.15 is the bar)"
          + ("; smoke: CPU math kernels, no ratios" if args.smoke else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
