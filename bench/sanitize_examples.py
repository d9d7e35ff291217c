#!/usr/bin/env python3
"""Run every example's compiled kernels, forward and backward, on small odd shapes: for
compute-sanitizer (issue 12 item 6) and for gradient checks on the GPU (issue 9).

The four examples (LLaMA, Qwen3 with QK-norm, GPT-2 with LayerNorm/GELU, LM head +
cross-entropy) are generated from the templates examples/*.mlir come from
(tests/programs/generate.py) at sizes whose M, N and K are no multiple of any GEMM tile, then
compiled with `nn-autodiff,nn-to-coda`; `@f`, `@f_fwd` and `@f_bwd` each run once.

On the GPU (one process per sanitizer tool; the PyTorch caching allocator is off so that
memcheck sees each tensor as its own allocation, and tuning is off so that each kernel runs
once, at its first candidate; a finding fails the run through --error-exitcode):

    export PYTORCH_NO_CUDA_MEMORY_CACHING=1 CODA_AUTOTUNE=0
    compute-sanitizer --tool memcheck --error-exitcode 3 python bench/sanitize_examples.py
    compute-sanitizer --tool racecheck --error-exitcode 3 python bench/sanitize_examples.py

Gradient checks (f's results and every gradient against float64 autograd under the
NN_DIALECT.md bar, `coda_ir.testing.check_gradients`), a table last and JSON in --out:

    python bench/sanitize_examples.py --check --out sanitize.json

Without a GPU (or with --cpu) the same runs go through the Triton interpreter at --sizes tiny
(tests/test_bench_smoke.py runs that in CI).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "programs"))

import torch  # noqa: E402


def sizes() -> dict[str, dict[str, object]]:
    """name -> {example name: generator spec}. Tiles on the GPU are 64-256 wide (K steps 32-64):
    every M, N, K below leaves a partial tile. "small" is the test programs' size (K = 96: the
    TMA path where a tile fits); "odd" has prime token counts and widths no power of two; in
    "unaligned" a row of D = 100 bf16 is 200 bytes, no multiple of 16, so the GEMMs take the
    portable pointer path (TMA needs 16-byte row strides)."""
    from generate import Gpt2, Llama, LmHead

    def four(m, d, f, gf, v, hd, name):
        return {
            "llama_block": Llama(name, m=m, d=d, f=f, hd=hd, hq=3, hkv=1, eps=1e-5, theta=500000.0),
            "qwen3_block": Llama(name, m=m, d=d, f=f, hd=hd, hq=3, hkv=1, eps=1e-6, theta=1000000.0),
            "gpt2_block": Gpt2(name, m=m, d=d, f=gf, eps=1e-5),
            "lm_head": LmHead(name, m=m, d=d, v=v, eps=1e-5),
        }

    return {
        "tiny": four(m=19, d=24, f=40, gf=56, v=37, hd=8, name="tiny"),
        "small": four(m=67, d=96, f=160, gf=384, v=200, hd=32, name="small"),
        "odd": four(m=301, d=200, f=328, gf=552, v=1037, hd=64, name="odd"),
        "unaligned": four(m=131, d=100, f=120, gf=260, v=333, hd=32, name="unaligned"),
    }


def source_of(example: str, spec) -> str:
    from generate import nn_gpt2_block, nn_llama_block, nn_lm_head

    if example == "llama_block":
        return nn_llama_block(spec)
    if example == "qwen3_block":
        return nn_llama_block(spec, qk_norm=True, fname="qwen3_block")
    if example == "gpt2_block":
        return nn_gpt2_block(spec)
    return nn_lm_head(spec)


def run_one(example: str, size: str, spec, device: str, check: bool, seed: int) -> dict:
    import coda_ir
    from coda_ir import testing
    from coda_ir.reference import load_func, reference_pair

    text = source_of(example, spec)
    record: dict[str, object] = {"example": example, "size": size, "spec": repr(spec)}
    started = time.perf_counter()
    program = coda_ir.compile(text, pipeline="nn-autodiff,nn-to-coda")
    record["compile_s"] = round(time.perf_counter() - started, 2)
    record["kernels"] = {n: program.kernel_count(n) for n in (example, f"{example}_fwd", f"{example}_bwd")}
    inputs = testing.random_inputs(text, seed=seed, device=device)
    started = time.perf_counter()
    f_out = getattr(program, example)(*inputs)
    if check:
        # the loss (0-d) gets NN_DIALECT.md's slack 2 u |ref64| / sqrt(M), M = every row (the
        # stricter count: ignored rows reduce nothing); its strict ratio is recorded as well
        loss = (testing.program_dtype_of(text), spec.m) if example == "lm_head" else None
        testing.check_against_reference(text, inputs, f_out, loss=loss)
        # check_gradients runs @f_fwd then @f_bwd and checks f's results and every gradient
        results = testing.check_gradients(program, text, inputs, seed=seed, loss=loss)
        if loss is not None:
            ref64, ref_t = reference_pair(load_func(text), inputs)
            strict = testing.check_close(f_out, ref64[0], ref_t[0])
            record["loss_without_slack"] = dict(error=strict[1], bound=strict[2], ratio=strict[1] / strict[2])
        record["worst"] = max(((r.ratio, r.name) for r in results), default=(0.0, ""))
        record["results"] = [dict(name=r.name, error=r.error, bound=r.bound, ratio=r.ratio, ok=r.ok) for r in results]
    else:
        n = len(f_out) if isinstance(f_out, (tuple, list)) else 1
        fwd = getattr(program, f"{example}_fwd")(*inputs)
        fwd = list(fwd) if isinstance(fwd, (tuple, list)) else [fwd]
        upstream = testing.random_upstream(text, seed=seed, device=device)
        getattr(program, f"{example}_bwd")(*fwd[n:], *upstream)
    if device == "cuda":
        torch.cuda.synchronize()  # a fault surfaces here, inside this example's record
    record["run_s"] = round(time.perf_counter() - started, 2)
    return record


def in_processes(pairs, args) -> list[dict]:
    """Each (size, example) by this script in a child process, `args.jobs` at once; their
    output is printed whole, in order, as each finishes."""
    import subprocess
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    tmp = Path(tempfile.mkdtemp(prefix="sanitize-"))

    def one(pair):
        size, example = pair
        out = tmp / f"{size}-{example}.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--sizes", size, "--examples", example,
               "--seed", str(args.seed), "--out", str(out)] + (["--check"] if args.check else []) + (["--cpu"] if args.cpu else [])
        r = subprocess.run(cmd, capture_output=True, text=True)
        try:
            found = json.loads(out.read_text())["records"]
        except (OSError, ValueError, KeyError):
            found = [{"example": example, "size": size, "ok": False,
                      "error": f"child process exited {r.returncode} without a report: {r.stderr[-2000:]}"}]
        return r.stdout + r.stderr[-4000:], found

    records = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for text, found in pool.map(one, pairs):
            print(text, flush=True)
            records += found
    return records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="run through the Triton interpreter even if a GPU is present")
    parser.add_argument("--sizes", default=None, help="comma-separated (tiny, small, odd, unaligned); default: small,odd,unaligned on a GPU, tiny on CPU")
    parser.add_argument("--examples", default="llama_block,qwen3_block,gpt2_block,lm_head")
    parser.add_argument("--check", action="store_true", help="check results and gradients against float64 (slower; not under a sanitizer)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="JSON report path")
    parser.add_argument("--jobs", type=int, default=1,
                        help="run each (example, size) in its own process, this many at once (Triton compiles "
                             "each kernel on the host: ~100 per size; compute-sanitizer follows child processes)")
    args = parser.parse_args()

    gpu = torch.cuda.is_available() and not args.cpu
    if not gpu:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported
    device = "cuda" if gpu else "cpu"
    all_sizes = sizes()
    chosen = (args.sizes or ("small,odd,unaligned" if gpu else "tiny")).split(",")
    records = []
    pairs = [(size, example) for size in chosen for example in args.examples.split(",")]
    if args.jobs > 1:
        records = in_processes(pairs, args)
        pairs = []
    for size, example in pairs:
        spec = all_sizes[size][example]
        print(f"== {example} at {size}: {spec}", flush=True)
        try:
            record = run_one(example, size, spec, device, args.check, args.seed)
            record["ok"] = True
        except AssertionError as error:  # outside the bar: reported, the run goes on
            record = {"example": example, "size": size, "ok": False, "error": str(error)}
        except Exception as error:
            record = {"example": example, "size": size, "ok": False,
                      "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-3000:]}
        print(json.dumps(record, default=str)[:3000] if not record["ok"] else
              f"   ok  kernels {record['kernels']}  compile {record['compile_s']} s  run {record['run_s']} s"
              + (f"  worst error/bound {record['worst'][0]:.3f} ({record['worst'][1]})" if "worst" in record else ""),
              flush=True)
        records.append(record)
    report = {
        "device": torch.cuda.get_device_name() if gpu else "cpu (Triton interpreter)",
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "check": args.check,
        "records": records,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    print("\nexample       size       result")
    for r in records:
        what = "ok" if r["ok"] else "FAIL: " + r["error"].splitlines()[0][:150]
        if r["ok"] and "worst" in r:
            what += f" (worst error/bound {r['worst'][0]:.3f})"
        print(f"{r['example']:<13} {r['size']:<10} {what}")
    return 0 if all(r["ok"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
