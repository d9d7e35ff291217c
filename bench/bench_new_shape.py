"""What a new sequence length costs (issue 30, part 3): the first training step of a from_hf model
at a [batch, seq] it has not run yet, against a warm step at that shape.

A from_hf unit compiles one program per bucket of token counts (`#coda.rows`, the next power of
two), and its GEMMs' tuned tiles are cached per bucket of M (`gemm_launch.tuning_bucket`): a new
length inside a bucket the model has run should compile no IR, tune nothing and compile no Triton
kernel (their run-time row extents are not specialized, `do_not_specialize`). What remains is the
step's allocations at the new size, the launch plans of the new sizes, and the attention library's
own per-shape setup (cuDNN's execution plans for SDPA).

Steps: the first step at --seq (cold: compiles and tunes, unless the caches are warm), --iters warm
steps there; then for each of --new-seqs the first step, its second step and --iters warm steps.
Per shape: first-step seconds, warm ms (median), the first step's overhead over warm, and what it
did: IR programs compiled (`from_hf`'s compile cache), GEMMs autotuned, GEMM tiles the IO model
inferred instead of tuning (a new bucket of a GEMM that ran at another one, `gemm_launch`), Triton
kernels compiled (a new bucket's, or a specialization not seen yet). `--compare-tuned` then tunes
the inferred GEMMs and times the warm step again: what the inference costs per step.

GPU (carry [".whl", ".devcache"] as bench_model.py; needs CUDA, transformers, the repo on PYTHONPATH):

    python bench/bench_new_shape.py --layers 4
    python bench/bench_new_shape.py --layers 4 --new-seqs 3072,4000,4001 --fresh-cache

writes $OUT/new_shape-<shape>.json when $OUT is set (or --out). CPU smoke (Triton interpreter,
tiny model): `python bench/bench_new_shape.py --smoke`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


class Counters:
    """IR compiles (from_hf's compile entry point) and GEMM autotunings, counted by wrapping them,
    and Triton kernel compiles (around `JITFunction._do_compile`, where this Triton has it)."""

    def __init__(self):
        from coda_ir.runtime import gemm_launch
        from coda_ir.torch import hf

        self.compiles = 0
        self.tunings = 0
        self.triton_compiles: list[str] = []
        self.seconds: dict[str, float] = {}
        try:
            # counted around JITFunction._do_compile (called on a kernel-cache miss), not through
            # `knobs.runtime.jit_post_compile_hook`: with a hook set, Triton 3.6 json-dumps each
            # kernel's constexprs, which fails for a Gluon kernel's layout constexpr
            from triton.runtime.jit import JITFunction

            real_compile = JITFunction._do_compile

            def compiled(jit_function, *args, **kwargs):
                self.triton_compiles.append(jit_function.fn.__qualname__)
                with self.timed("triton"):
                    return real_compile(jit_function, *args, **kwargs)

            JITFunction._do_compile = compiled
        except (ImportError, AttributeError):  # another Triton: not counted
            pass
        real_function, real_autotune, real_compiled = hf.CodaFunction, gemm_launch._autotune, hf._compiled

        def function(*args, **kwargs):
            self.compiles += 1
            return real_function(*args, **kwargs)

        def autotune(*args, **kwargs):
            self.tunings += 1
            with self.timed("tune"):
                return real_autotune(*args, **kwargs)

        def compiled_program(*args, **kwargs):  # parse, passes, lowering, the modules' import
            with self.timed("ir"):
                return real_compiled(*args, **kwargs)

        hf.CodaFunction = function
        hf._compiled = compiled_program
        gemm_launch._autotune = autotune

    @contextlib.contextmanager
    def timed(self, what: str):
        """Seconds spent in `what` ("ir": IR compiles, "tune": autotuning with its own kernel
        compiles, "triton": every Triton compile, those of tuning included)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[what] = self.seconds.get(what, 0.0) + time.perf_counter() - start

    def snapshot(self) -> tuple[int, int, int, int]:
        from coda_ir.runtime import gemm_launch

        return self.compiles, self.tunings, len(self.triton_compiles), len(gemm_launch.INFERRED)


def tune_inferred(step) -> tuple[float, dict]:
    """Tune the GEMMs whose tiles the IO model inferred (`gemm_launch.INFERRED`) now, as their
    deferred tuning would later, by running `step` with them due; returns the seconds that step
    took and, per GEMM, [the inferred tile, the tuned one]."""
    from coda_ir.runtime import gemm_launch

    inferred = {key: gemm_launch._MEMO.pop(key, None) for key in gemm_launch.INFERRED}
    gemm_launch._PLANS.clear()
    gemm_launch._DEFERRED.clear()
    gemm_launch._DUE.update(inferred)
    seconds = step()
    return seconds, {key.split("|")[0] + " " + "|".join(key.split("|")[1:4]): [
        cfg.describe() if cfg else None, gemm_launch._MEMO[key].describe() if key in gemm_launch._MEMO else None]
        for key, cfg in inferred.items()}


def main(argv=None) -> dict:
    from bench_model import SHAPES, make_model

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=sorted(SHAPES), default="llama1b")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=4096, help="the shape the model warms up at")
    p.add_argument("--new-seqs", default="3072,4000", help="comma-separated new sequence lengths, run in order")
    p.add_argument("--iters", type=int, default=5, help="warm steps timed per shape")
    p.add_argument("--fresh-cache", action="store_true",
                   help="start from an empty coda-ir cache (autotune.json, generated modules): a cold first shape")
    p.add_argument("--out", default=None, help="JSON path (default: $OUT/new_shape-<shape>.json when $OUT is set)")
    p.add_argument("--compare-tuned", action="store_true",
                   help="after a new shape's warm steps, tune the GEMMs whose tiles the IO model inferred and time "
                        "the warm step again (the inference's cost in step time)")
    p.add_argument("--smoke", action="store_true", help="tiny CPU run through the Triton interpreter")
    args = p.parse_args(argv)
    if args.smoke:
        args.shape, args.layers, args.batch, args.seq, args.new_seqs, args.iters = "smoke", 2, 2, 7, "5,8", 1
    if args.fresh_cache:
        from coda_ir.runtime import config

        config.configure(cache_dir=tempfile.mkdtemp(prefix="coda-new-shape-"))
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    if device.type == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    shape = SHAPES[args.shape]

    import coda_ir.torch
    from coda_ir.torch.hf import row_bucket

    counters = Counters()
    model = make_model(shape, args.layers, dtype, device)
    cmodel = coda_ir.torch.from_hf(model, progress=True)
    gen = torch.Generator(device=device).manual_seed(1)

    def step_for(seq: int):
        ids = torch.randint(0, shape["vocab_size"], (args.batch, seq), device=device, generator=gen)

        def step() -> float:
            model.zero_grad(set_to_none=True)
            _sync(device)
            t = time.perf_counter()
            loss = cmodel(ids, labels=ids).loss
            loss.backward()
            _sync(device)
            return time.perf_counter() - t

        return step

    rows = []
    for i, seq in enumerate([args.seq] + [int(s) for s in args.new_seqs.split(",") if s.strip()]):
        step = step_for(seq)
        before, seconds_before = counters.snapshot(), dict(counters.seconds)
        first = step()
        after = counters.snapshot()
        spent = {k: round(v - seconds_before.get(k, 0.0), 3) for k, v in counters.seconds.items()}
        second = step()
        warm = statistics.median(step() for _ in range(max(1, args.iters)))
        tokens = args.batch * seq
        row = {
            "seq": seq, "tokens": tokens, "bucket": list(row_bucket(tokens)), "tokens_mod_16": tokens % 16,
            "first_step_s": first, "second_step_s": second, "warm_step_s": warm,
            "first_step_overhead_s": first - warm,
            "ir_compiles": after[0] - before[0], "gemm_autotunings": after[1] - before[1],
            "triton_compiles": after[2] - before[2], "inferred_tiles": after[3] - before[3],
            "first_step_seconds_in": spent,
            "triton_compiled": sorted(set(counters.triton_compiles[before[2]:after[2]]))[:50],
            "role": "warm-up shape" if i == 0 else "new shape",
        }
        if args.compare_tuned and row["inferred_tiles"]:
            row["tuning_step_s"], row["inferred_vs_tuned"] = tune_inferred(step)
            row["warm_tuned_step_s"] = statistics.median(step() for _ in range(max(1, args.iters)))
            print(f"[seq {seq}] tuned the {row['inferred_tiles']} inferred GEMMs: warm {warm * 1e3:.2f} ms inferred, "
                  f"{row['warm_tuned_step_s'] * 1e3:.2f} ms tuned; {row['inferred_vs_tuned']}", flush=True)
        rows.append(row)
        print(f"[seq {seq}] first {first:.2f} s, second {second * 1e3:.1f} ms, warm {warm * 1e3:.1f} ms, "
              f"overhead {row['first_step_overhead_s']:.2f} s, {row['ir_compiles']} IR compiles, "
              f"{row['gemm_autotunings']} autotunings, {row['inferred_tiles']} inferred tiles, "
              f"{row['triton_compiles']} Triton compiles; seconds in {spent}",
              flush=True)

    import transformers

    info = {
        "date": time.strftime("%Y-%m-%d"),
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "shape": args.shape, "layers": args.layers, "batch": args.batch, "dtype": str(dtype),
        "fresh_cache": args.fresh_cache,
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:
        pass
    print(f"\n{args.shape}, {args.layers} layers, batch {args.batch}, {info['device']}")
    print(f"{'seq':>6} {'tokens%16':>9} {'first s':>8} {'second ms':>10} {'warm ms':>8} {'overhead s':>10} "
          f"{'IR comp':>7} {'tunings':>7} {'inferred':>8} {'triton':>6}  role")
    for r in rows:
        print(f"{r['seq']:>6} {r['tokens_mod_16']:>9} {r['first_step_s']:8.2f} {r['second_step_s'] * 1e3:10.1f} "
              f"{r['warm_step_s'] * 1e3:8.1f} {r['first_step_overhead_s']:10.2f} {r['ir_compiles']:>7} "
              f"{r['gemm_autotunings']:>7} {r['inferred_tiles']:>8} {r['triton_compiles']:>6}  {r['role']}")
    result = {"info": info, "shapes": rows}
    out = args.out or (os.path.join(os.environ["OUT"], f"new_shape-{args.shape}.json") if os.environ.get("OUT") else None)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1))
        print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
