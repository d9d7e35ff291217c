"""Predicted (`coda-opt --plan-hf`) vs measured: whole `from_hf` training steps, and each kernel.

    python bench/bench_plan_hf.py --out $OUT/bench_plan_hf.json             # llama + qwen3, 4 layers, 2 x 4096
    python bench/bench_plan_hf.py --families llama --layers 2 --tokens 4096 --seq-len 4096
    python bench/bench_plan_hf.py --dry-run                                 # predictions only (no CUDA)

For each family (`FAMILIES`: a config under examples/hf/, its layer count replaced by `--layers`)
it predicts the step with `coda_ir.torch.plan.plan_from_config` for this GPU's constants (h200 or
h100 by the device name; `--gpu` forces one), then builds the causal LM in bf16 on cuda (random
init), wraps it with `coda_ir.torch.from_hf` compiled with the same pipeline the prediction used
(`plan.pipeline_for(gpu)`: the same decisions, so the same kernels), runs `--warmup` steps
(compile and autotune stay out), times `--steps` synced steps (forward + backward, CUDA events,
median) and profiles `--profile-steps` more with torch.profiler. Kernels are matched by the names
the compiler gives them (`_{function}_k{i}_{kind}`, `_{function}_g{j}_launch_group`,
bench_io_model's patterns; the report's `generated` column), predicted per step (times the layer
count) vs measured per step. The vendor GEMMs (cuBLAS) are one row, so is the attention forward
and backward of each backend (flash / cudnn / flex kernels by name, the model's schedule beside
them), and everything the model does not price (embedding, loss scalar, memsets) is "other".

One family failing (a refused config, an out-of-memory, a kernel error) is recorded with its error
and the others still run. Prints a table last and writes JSON to `--out` or $OUT when given (a file path; a folder
gets bench_plan_hf.json). Needs xdsl on the device (PERFORMANCE.md "Running on the lent GPU").
Runs with Triton 3.6 (the device) and 3.9 (here): nothing Triton-version-specific is used.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import torch  # noqa: E402

from bench_io_model import GROUP_NAME, KERNEL_NAME  # noqa: E402

FAMILIES = {
    "llama": "examples/hf/llama3_1b.json",
    "qwen3": "examples/hf/qwen3_1_7b.json",
    "phi3": "examples/hf/phi3_mini.json",
    "phi4mini": "examples/hf/phi4_mini.json",
    "qwen2": "examples/hf/qwen2_5_1_5b.json",
    "olmo2": "examples/hf/olmo2_1b.json",
    "granite": "examples/hf/granite_3_2b.json",
    "gemma3": "examples/hf/gemma3_1b.json",
    "gemma2": "examples/hf/gemma2_2b.json",
}
START = time.perf_counter()
GENERATED = re.compile(r"^(_[A-Za-z0-9_]+?_(?:k\d+_(?:gemm|elementwise|fold)|g\d+_launch_group))")
"""The compiler's kernel name at the start of a profiled kernel's name (a Gluon mainloop's entry
adds `_ws`; Triton may add a suffix): the same kernels bench_io_model's KERNEL_NAME / GROUP_NAME find."""
ATTENTION_NAMES = ("flash", "fmha", "sdpa", "cudnn", "attention", "attn", "flex")
BACKWARD_NAMES = ("bwd", "bprop", "backward", "dq", "dkdv", "dk_dv", "dot_do_o", "convert_dq", "cutlassb")
VENDOR_NAMES = ("nvjet", "cutlass", "gemm", "xmma", "cublas", "sm90_", "sm80_", "ampere_", "hopper", "splitk")


def classify(name: str) -> str:
    """The row a profiled kernel goes to: its compiler name, "attention fwd" / "attention bwd",
    "cuBLAS", or "other"."""
    match = GENERATED.match(name)
    if match and (KERNEL_NAME.search(name) or GROUP_NAME.search(name)):
        return match.group(1)
    low = name.lower()
    if any(a in low for a in ATTENTION_NAMES):
        return "attention bwd" if any(b in low for b in BACKWARD_NAMES) else "attention fwd"
    if any(v in low for v in VENDOR_NAMES):
        return "cuBLAS"
    return "other"


def gpu_name(forced: str | None) -> str:
    """The constants to predict with: `--gpu`, else h200 / h100 / a100 from the device name."""
    if forced:
        return forced
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0).lower()
        for key in ("h200", "h100", "a100"):
            if key in name:
                return key
    return "h200"


def config_with_layers(family: str, layers: int, folder: Path) -> tuple[dict, Path]:
    data = json.loads((ROOT / FAMILIES[family]).read_text())
    data["num_hidden_layers"] = layers
    path = folder / f"{family}_{layers}l.json"
    path.write_text(json.dumps(data))
    return data, path


def predict(config: Path, tokens: int, seq_len: int, gpu: str):
    """(StepPlan, {row: predicted seconds per step}, {row: kernel details}) for one family."""
    from coda_ir.torch.plan import plan_from_config

    plan = plan_from_config(config, tokens, seq_len, [gpu])[0]
    rows: dict[str, float] = defaultdict(float)
    detail: dict[str, dict] = {}
    for u in plan.units:
        for direction, cost, names in (("fwd", u.fwd, u.fwd_names), ("bwd", u.bwd, u.bwd_names)):
            if cost is None:
                continue
            group = None
            for c, name in zip(cost.kernels, names):
                if c.kernel.attention is not None:
                    row = f"attention {c.kernel.attention.direction}"
                elif name == "cuBLAS":
                    row = "cuBLAS"
                elif name == "":  # a member riding in the launch group above: its time is the group's
                    row = group or "other"
                else:
                    row = name
                    group = name if name.endswith("_launch_group") else None
                rows[row] += u.count * c.time_s
                d = detail.setdefault(row, {"unit": u.name, "direction": direction, "kinds": [], "bound": c.bound,
                                            "count": u.count, "kernels": []})
                d["kinds"].append(c.kernel.kind)
                d["kernels"].append(c.kernel.name)
    return plan, dict(rows), detail


def build_model(data: dict, device):
    """The causal LM of a config dict in bf16 on `device`, random init (use_cache off, SDPA)."""
    import transformers

    fields = {k: v for k, v in data.items() if k not in ("model_type", "architectures", "transformers_version",
                                                        "torch_dtype", "dtype")}
    config = transformers.AutoConfig.for_model(data["model_type"], **fields)
    config.use_cache = False
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # as from_pretrained(dtype=bf16): the rotary inv_freq stays fp32
    try:
        with torch.device(device):
            return transformers.AutoModelForCausalLM.from_config(config)
    finally:
        torch.set_default_dtype(before)


def measure(data: dict, tokens: int, seq_len: int, pipeline: str, warmup: int, steps: int,
            profile_steps: int) -> dict:
    """Step ms (median of `steps` synced steps), {row: measured seconds per step}, compile time."""
    import coda_ir.torch
    from torch.profiler import ProfilerActivity, profile

    device = torch.device("cuda")
    model = build_model(data, device)
    coda = coda_ir.torch.from_hf(model, pipeline=pipeline, progress=False)
    batch = tokens // seq_len
    gen = torch.Generator(device=device).manual_seed(0)
    ids = torch.randint(0, data["vocab_size"], (batch, seq_len), device=device, generator=gen)

    def step():
        model.zero_grad(set_to_none=True)
        coda(ids, labels=ids).loss.backward()

    start = time.perf_counter()
    step()
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    for _ in range(max(0, warmup - 1)):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(begin.elapsed_time(end))
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()  # the weights alone: the step adds its activations and gradients
    step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(profile_steps):
            step()
        torch.cuda.synchronize()
    rows: dict[str, float] = defaultdict(float)
    names: dict[str, set] = defaultdict(set)
    launches: dict[str, int] = defaultdict(int)
    for e in prof.events():
        if getattr(e, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        row = classify(e.name)
        rows[row] += e.time_range.elapsed_us() / 1e6 / profile_steps
        launches[row] += 1
        if row in ("cuBLAS", "other") or row.startswith("attention"):
            names[row].add(e.name[:90])
    del coda, model
    torch.cuda.empty_cache()
    return {"step_s": statistics.median(times) / 1e3, "steps_ms": times, "first_step_s": first,
            "peak_bytes_above_weights": peak, "rows": dict(rows),
            "launches_per_step": {k: v // profile_steps for k, v in launches.items()},
            "names": {k: sorted(v)[:12] for k, v in names.items()}}


def table(result: dict) -> list[dict]:
    """Rows of predicted vs measured seconds per step, in predicted step order, then the rest."""
    pred, meas = result["predicted"]["rows"], (result.get("measured") or {}).get("rows", {})
    out = []
    for row in list(pred) + [r for r in meas if r not in pred]:
        p, mm = pred.get(row), meas.get(row)
        out.append({"kernel": row, "predicted_s": p, "measured_s": mm,
                    "ratio": (mm / p) if (p and mm) else None, **result["predicted"]["detail"].get(row, {})})
    return out


def run_family(family: str, args, gpu: str, folder: Path) -> dict:
    from coda_ir.torch.plan import pipeline_for

    result: dict = {"family": family, "config": FAMILIES[family], "layers": args.layers, "tokens": args.tokens,
                    "seq_len": args.seq_len, "gpu_constants": gpu, "pipeline": pipeline_for(gpu)}
    try:
        data, path = config_with_layers(family, args.layers, folder)
        start = time.perf_counter()
        plan, rows, detail = predict(path, args.tokens, args.seq_len, gpu)
        result["predicted"] = {"step_s": plan.step_s, "limit_s": plan.limit_s, "peak_bytes": plan.peak_bytes,
                               "activation_peak_bytes": plan.activation_peak_bytes,
                               # what the step adds to the resident weights: activations and the gradients
                               "above_weights_bytes": plan.activation_peak_bytes + plan.param_bytes, "rows": rows, "detail": detail,
                               "plan_s": time.perf_counter() - start, "model": plan.model}
    except Exception as error:  # noqa: BLE001 - one family failing must not stop the others
        result["error"] = f"predict: {type(error).__name__}: {error}"
        result["traceback"] = traceback.format_exc()[-3000:]
        return result
    if args.dry_run:
        return result
    if time.perf_counter() - START > args.budget_s:
        result["error"] = f"measure: skipped, the run's time budget ({args.budget_s:.0f} s) is spent"
        return result
    try:
        result["measured"] = measure(data, args.tokens, args.seq_len, pipeline_for(gpu), args.warmup, args.steps,
                                     args.profile_steps)
        result["step_ratio"] = result["measured"]["step_s"] / plan.step_s
    except Exception as error:  # noqa: BLE001
        result["error"] = f"measure: {type(error).__name__}: {str(error)[:500]}"
        result["traceback"] = traceback.format_exc()[-3000:]
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return result


def _ms(s: float | None) -> str:
    return f"{s * 1e3:9.3f}" if s is not None else f"{'-':>9}"


def print_report(results: list[dict], device: str) -> None:
    print(f"\npredicted (coda-opt --plan-hf) vs measured on {device}")
    for r in results:
        print(f"\n== {r['family']}: {r['layers']} layers, {r['tokens']} tokens ({r['tokens'] // r['seq_len']} x {r['seq_len']}), "
              f"constants {r['gpu_constants']}")
        if "predicted" not in r:
            print(f"   failed: {r.get('error')}")
            continue
        pred = r["predicted"]
        meas = r.get("measured")
        if meas:
            print(f"   step: predicted {pred['step_s'] * 1e3:.3f} ms, measured {meas['step_s'] * 1e3:.3f} ms "
                  f"(measured/predicted {r['step_ratio']:.3f}); first step {meas['first_step_s']:.1f} s; peak above the "
                  f"weights (activations + gradients) predicted {pred['above_weights_bytes'] / 2**30:.2f} GiB, measured "
                  f"{meas['peak_bytes_above_weights'] / 2**30:.2f} GiB")
        else:
            print(f"   step: predicted {pred['step_s'] * 1e3:.3f} ms (limit {pred['limit_s'] * 1e3:.3f} ms)"
                  + (f"; not measured: {r['error']}" if r.get("error") else " (dry run)"))
        print(f"   {'kernel (per step)':<42} {'pred ms':>9} {'meas ms':>9} {'meas/pred':>9}  unit")
        for row in table(r):
            ratio = f"{row['ratio']:9.3f}" if row["ratio"] is not None else f"{'-':>9}"
            unit = f"{row.get('unit', '')} {row.get('direction', '')} x{row.get('count', '')}" if "unit" in row else ""
            print(f"   {row['kernel'][:42]:<42} {_ms(row['predicted_s'])} {_ms(row['measured_s'])} {ratio}  {unit}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", default="llama,qwen3", help=f"comma-separated, of: {', '.join(FAMILIES)}")
    ap.add_argument("--layers", type=int, default=4, help="decoder layers (default 4)")
    ap.add_argument("--tokens", type=int, default=8192, help="tokens per step (default 8192)")
    ap.add_argument("--seq-len", type=int, default=4096, help="tokens per sequence (default 4096)")
    ap.add_argument("--gpu", default=None, help="the constants to predict with (default: from the device name)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--profile-steps", type=int, default=3)
    ap.add_argument("--dry-run", action="store_true", help="predictions only, no CUDA needed")
    ap.add_argument("--autotune", default=None, choices=("shared", "full", "off"),
                    help="the runtime's GEMM autotune mode (default: the runtime's, 'shared')")
    ap.add_argument("--budget-s", type=float, default=210.0,
                    help="families not started by then are predicted but not measured (default 210 s)")
    ap.add_argument("--out", default=os.environ.get("OUT"),
                    help="JSON file (a folder: bench_plan_hf.json in it); default $OUT, else the table is only printed")
    args = ap.parse_args(argv)
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        ap.error(f"unknown family {unknown[0]!r} (known: {', '.join(FAMILIES)})")
    if args.layers <= 0 or args.tokens <= 0 or args.seq_len <= 0 or args.tokens % args.seq_len:
        ap.error("--layers, --tokens and --seq-len must be positive, --tokens a multiple of --seq-len")
    if not args.dry_run and not torch.cuda.is_available():
        print("bench_plan_hf.py: no CUDA device: running --dry-run (predictions only)", file=sys.stderr)
        args.dry_run = True
    if args.autotune is not None:
        from coda_ir.runtime.config import configure

        configure(autotune=args.autotune)
    gpu = gpu_name(args.gpu)
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu (predictions only)"
    versions = {"torch": torch.__version__}
    for mod in ("triton", "transformers", "xdsl"):
        try:
            versions[mod] = str(__import__(mod).__version__)
        except Exception:  # noqa: BLE001
            versions[mod] = None
    print(f"bench_plan_hf on {device}; constants {gpu}; {versions}", flush=True)
    start = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for family in families:
            t = time.perf_counter()
            results.append(run_family(family, args, gpu, Path(folder)))
            print(f"{family}: done in {time.perf_counter() - t:.1f} s" +
                  (f" ({results[-1]['error']})" if results[-1].get("error") else ""), flush=True)
    for r in results:
        if "predicted" in r:
            r["table"] = table(r)
    print_report(results, device)
    if args.out is not None:
        out = Path(args.out)
        if out.is_dir() or not out.suffix:
            out.mkdir(parents=True, exist_ok=True)
            out = out / "bench_plan_hf.json"
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"device": device, "versions": versions, "gpu_constants": gpu,
                                   "wall_s": time.perf_counter() - start, "results": results}, indent=1,
                                  default=str) + "\n")
        print(f"\nwrote {out}")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
