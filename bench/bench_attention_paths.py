"""nn.attention's CUDA paths against each other at model shapes (issue 30, part 2): the plain
fused SDPA kernel (cuDNN / flash), flash-attention's varlen kernels (whole documents, windows)
FlexAttention (masks, softcaps; its backward recomputes the forward) and, for a softcap, the
scores materialized per kv head (cuBLAS + one fused pass), forward and backward timed separately through `coda_ir.runtime.attention` as generated code calls it.

    python bench/bench_attention_paths.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coda_ir.runtime import attention  # noqa: E402

# (name, batch, seq, heads, kv_heads, head_dim, window, softcap, segments kind)
CASES = [
    ("llama1b plain", 2, 4096, 32, 8, 64, 0, 0.0, None),
    ("llama1b packed", 2, 4096, 32, 8, 64, 0, 0.0, "documents"),
    ("llama1b padded (-1)", 2, 4096, 32, 8, 64, 0, 0.0, "padding"),
    ("gemma3-1b sliding 512", 2, 4096, 4, 1, 256, 512, 0.0, None),
    ("gemma2-2b softcap 50", 2, 4096, 8, 4, 256, 0, 50.0, None),
    ("gemma2-2b sliding 4096 of 8192", 1, 8192, 8, 4, 256, 4096, 0.0, None),
    ("mistral sliding 1024", 2, 4096, 32, 8, 128, 1024, 0.0, None),
]


def segments_of(kind: str | None, b: int, s: int) -> torch.Tensor | None:
    if kind is None:
        return None
    g = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(b):
        if kind == "documents":  # documents of 64 .. s/2 tokens
            ids, doc = [], 0
            while len(ids) < s:
                n = int(torch.randint(64, s // 2, (1,), generator=g))
                ids += [doc] * n
                doc += 1
            rows.append(ids[:s])
        else:  # 30% right padding
            n = int(s * 0.7)
            rows.append([0] * n + [-1] * (s - n))
    return torch.tensor(rows, dtype=torch.int32).reshape(-1).cuda()


def timed(fn, iters: int = 10) -> float:
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def run(case, path: str) -> dict:
    name, b, s, h, kv, hd, window, softcap, kind = case
    m = b * s
    torch.manual_seed(0)
    qkv = torch.randn(m, (h + 2 * kv) * hd, device="cuda", dtype=torch.bfloat16)
    dout = torch.randn(m, h * hd, device="cuda", dtype=torch.bfloat16)
    seg = segments_of(kind, b, s)
    real, real_materialized = attention.varlen_layout, attention._materialized
    if path in ("flex", "materialized"):
        attention.varlen_layout = lambda *a, **k: None
    if path == "flex":
        attention._materialized = lambda *a, **k: False
    try:
        if path == "materialized" and not attention._materialized(qkv, softcap, seg):
            return {"case": name, "path": path, "skipped": "not a softcap without segments (or no fp32 bmm results)"}
        args = (h, kv, hd, s, True, None, window, softcap, seg)
        if path == "varlen" and attention.varlen_layout(qkv, hd, s, window, softcap, seg) is None:
            return {"case": name, "path": path, "skipped": "varlen does not take it"}
        out, lse = attention.attention_forward(qkv, *args)
        fwd = timed(lambda: attention.attention_forward(qkv, *args))
        bwd = timed(lambda: attention.attention_backward(qkv, out, lse, dout, *args))
    finally:
        attention.varlen_layout, attention._materialized = real, real_materialized
    return {"case": name, "path": path, "fwd_ms": round(fwd, 3), "bwd_ms": round(bwd, 3), "total_ms": round(fwd + bwd, 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None)
    p.add_argument("--cases", default="", help="substring filter of the case names (comma-separated)")
    p.add_argument("--flex-mode", default=None,
                   help="torch.compile mode for FlexAttention (e.g. max-autotune-no-cudagraphs: tunes its block sizes)")
    args = p.parse_args()
    if args.flex_mode:
        from torch.nn.attention.flex_attention import flex_attention

        attention._FLEX = torch.compile(flex_attention, dynamic=False, fullgraph=True, mode=args.flex_mode)
    rows = []
    wanted = [w for w in args.cases.split(",") if w]
    for case in CASES:
        if wanted and not any(w in case[0] for w in wanted):
            continue
        masked = bool(case[6] or case[7] or case[8])
        for path in (("varlen", "materialized", "flex") if masked else ("plain",)):
            try:
                row = run(case, path)
            except Exception as exc:  # a path that cannot run this case
                row = {"case": case[0], "path": path, "error": f"{type(exc).__name__}: {str(exc)[:160]}"}
            rows.append(row)
            print(json.dumps(row), flush=True)
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "flex_mode": args.flex_mode}
    if args.out:
        Path(args.out).write_text(json.dumps({"info": info, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
