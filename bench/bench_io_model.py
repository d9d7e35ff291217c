"""Predicted (IO model) next to measured, per kernel, for compiled blocks on the GPU (issue 5).

    python bench/bench_io_model.py                                   # examples/llama_block.mlir
    python bench/bench_io_model.py --constants $OUT/gpu_calibration.json examples/qwen3_block.mlir
    python bench/bench_io_model.py --smoke                           # CPU interpreter, small shapes, no timing

Needs xdsl on the device (carry the wheel, PERFORMANCE.md "Running on the lent GPU"). For each
function of each file: lower through nn-to-coda, compile to Triton (coda_ir.compile), make
random inputs, warm up (the GEMM autotuner runs here; its choices are recorded by wrapping
`launch_gemm`), time the whole call (`do_bench` median), then profile a few calls with
torch.profiler to get each kernel's GPU time, matched to the coda program's kernels by the
generated names `_<function>_k<index>_<kind>`. Each kernel is predicted by the IO model with the
tile the autotuner chose and the constants of `--constants` (a bench/calibrate.py JSON) or of
gpu_constants.json for this GPU. Every GEMM is also run as a plain cuBLAS `F.linear` of the same
shape, predicted and measured, so fused/plain ratios and the model's error on plain GEMMs sit
side by side. Full numbers go to $OUT/bench_io_model.json (or --out); tables are printed last.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from coda_ir.analysis import io_model as m  # noqa: E402
from coda_ir.tiling import GemmConfig  # noqa: E402


def gpu_constants(path: str | None) -> m.GPU:
    if path:
        return m.load_calibration(path)
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0).lower()
        key = "h200" if "h200" in name else "h100"
        gpu = m.load_gpu(key)
        return dataclasses.replace(gpu, sms=torch.cuda.get_device_properties(0).multi_processor_count)
    return m.load_gpu("h100")


def make_inputs(fn, device: str) -> list[torch.Tensor]:
    from xdsl.dialects.builtin import TensorType

    from coda_ir.analysis.io_extract import dtype_name

    dtypes = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "i32": torch.int32}
    gen = torch.Generator(device=device).manual_seed(0)
    out = []
    for arg in fn.body.blocks[0].args:
        ty = arg.type
        assert isinstance(ty, TensorType)
        shape = tuple(ty.get_shape())
        dt = dtypes[dtype_name(ty.get_element_type())]
        if dt == torch.int32:
            out.append((torch.arange(shape[0], device=device) % 1024).to(torch.int32))
        elif len(shape) == 1:
            out.append((1.0 + 0.1 * torch.randn(shape, device=device, generator=gen)).to(dt))
        else:
            scale = shape[-1] ** -0.5 if shape else 1.0
            out.append((torch.randn(shape, device=device, generator=gen) * scale).to(dt))
    return out


class TileRecorder:
    """Wraps gemm_launch.launch_gemm to record the config each generated kernel ran with."""

    def __init__(self) -> None:
        from coda_ir.runtime import gemm_launch

        self.module = gemm_launch
        self.original = gemm_launch.launch_gemm
        self.configs: dict[str, object] = {}

        def wrapper(kernel, *args, **kwargs):
            cfg, extra = self.original(kernel, *args, **kwargs)
            name = getattr(getattr(kernel, "fn", None), "__name__", None) or getattr(kernel, "__name__", "")
            self.configs[name] = cfg
            return cfg, extra

        gemm_launch.launch_gemm = wrapper

    def tile(self, kernel_name: str) -> GemmConfig | None:
        cfg = self.configs.get(kernel_name)
        if cfg is None:
            return None
        return GemmConfig(cfg.bm, cfg.bn, cfg.bk, cfg.group_m, num_warps=cfg.num_warps, num_stages=cfg.num_stages)  # type: ignore[attr-defined]


KERNEL_NAME = re.compile(r"_k(\d+)_(gemm|elementwise|fold)")
GROUP_NAME = re.compile(r"_g(\d+)_launch_group")  # one launch running several small kernels


def profile_kernels(call, fn_name: str, calls: int) -> dict[int, list[float]]:
    """GPU seconds of each generated kernel (by index) over `calls` calls."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    times: dict[int, list[float]] = {}
    prefix = f"_{fn_name}_k"
    for e in prof.events():
        if getattr(e, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        name = e.name
        if prefix not in name:
            continue
        match = KERNEL_NAME.search(name[name.index(prefix):])
        if match:
            times.setdefault(int(match.group(1)), []).append(e.time_range.elapsed_us() / 1e6)
    group_prefix = f"_{fn_name}_g"
    for e in prof.events():
        if getattr(e, "device_type", None) != torch.autograd.DeviceType.CUDA or group_prefix not in e.name:
            continue
        match = GROUP_NAME.search(e.name[e.name.index(group_prefix):])
        if match:  # keyed -1, -2, ...: group g is -(g + 1), apart from kernel indices
            times.setdefault(-(int(match.group(1)) + 1), []).append(e.time_range.elapsed_us() / 1e6)
    return times


def plain_gemm(kc: m.KernelCost, gpu: m.GPU, measure: bool) -> tuple[float, float | None]:
    """(predicted, measured) seconds of a plain cuBLAS GEMM of this kernel's shape."""
    g = kc.kernel.gemm
    assert g is not None
    k = m.Kernel("plain", "gemm", writes=(m.Tensor("c", (g.m, g.n), g.a.dtype),), gemm=g)
    predicted = m.kernel_cost(k, gpu).time_s
    if not measure:
        return predicted, None
    from triton.testing import do_bench

    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[g.a.dtype]
    a = torch.randn(g.m, g.k, device="cuda", dtype=dt)
    w = torch.randn(g.n, g.k, device="cuda", dtype=dt)
    t = do_bench(lambda: torch.nn.functional.linear(a, w), warmup=25, rep=100, return_mode="median") / 1e3
    del a, w
    return predicted, t


def run_file(path: Path, gpu: m.GPU, recorder: TileRecorder | None, smoke: bool) -> list[dict]:
    import coda_ir
    from xdsl.dialects import func

    from coda_ir.analysis.io_extract import extract_function

    module = coda_ir.lower(coda_ir.parse(str(path)))
    compiled = coda_ir.compile(module, pipeline=None)
    device = "cpu" if smoke else "cuda"
    results = []
    for fn in [op for op in module.walk() if isinstance(op, func.FuncOp)]:
        name = fn.sym_name.data
        args = make_inputs(fn, device)
        call = lambda: getattr(compiled, name)(*args)  # noqa: E731
        call()
        if not smoke:
            for _ in range(2):
                call()
            torch.cuda.synchronize()
        plan = extract_function(fn, gpu)
        rows = []
        measured_by_index: dict[int, list[float]] = {}
        whole = None
        if not smoke:
            from triton.testing import do_bench

            whole = do_bench(call, warmup=25, rep=200, return_mode="median") / 1e3
            measured_by_index = profile_kernels(call, name, calls=10)
        group = -1
        for i, kernel in enumerate(plan.kernels):
            gen_name = f"_{name}_k{i}_{kernel.kind}"
            opens_group = not kernel.shares_launch and i + 1 < len(plan.kernels) and plan.kernels[i + 1].shares_launch
            if opens_group:
                # the profiler sees one kernel for the whole launch group: its time goes on the
                # first member's row, with the members' summed prediction beside it
                group += 1
                gen_name = f"_{name}_g{group}_launch_group"
            tile = recorder.tile(gen_name) if recorder is not None and kernel.gemm is not None else None
            if tile is not None:
                kernel = dataclasses.replace(kernel, tile=tile)
            kc = m.kernel_cost(kernel, gpu)
            meas = measured_by_index.get(-(group + 1) if opens_group else i)
            row = {
                "kernel": kernel.name, "generated": gen_name, "kind": kernel.kind,
                "tile": kc.tile.describe() if kc.tile else "-", "tile_from": "autotuner" if tile else "model default",
                "bound": kc.bound, "predicted_s": kc.time_s, "measured_s": statistics.median(meas) if meas else None,
                "hbm_bytes": kc.hbm_bytes, "flops": kc.flops,
            }
            if kernel.gemm is not None:
                row["plain_predicted_s"], row["plain_measured_s"] = plain_gemm(kc, gpu, measure=not smoke)
            if opens_group:
                row["group_predicted_s"] = kc.time_s
                group_row = row
            elif kernel.shares_launch:
                row["generated"] = f"(in _{name}_g{group}_launch_group)"
                group_row["group_predicted_s"] += kc.time_s
            rows.append(row)
        results.append({"file": str(path), "function": name, "whole_call_s": whole, "kernels": rows,
                        "predicted_total_s": sum(r["predicted_s"] for r in rows)})
    return results


def fmt_us(seconds: float | None) -> str:
    return f"{seconds * 1e6:10.1f}" if seconds is not None else f"{'-':>10}"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:7.2f}" if a is not None and b else f"{'-':>7}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="nn programs (default: examples/llama_block.mlir; with --smoke its small twin)")
    ap.add_argument("--constants", help="a bench/calibrate.py JSON (default: gpu_constants.json for this GPU)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--smoke", action="store_true", help="CPU interpreter on tests/programs/nn/llama_block.mlir, no timing")
    args = ap.parse_args()
    smoke = args.smoke or not torch.cuda.is_available()
    default = ROOT / ("tests/programs/nn" if args.smoke else "examples") / "llama_block.mlir"
    files = args.files or [str(default)]
    gpu = gpu_constants(args.constants)
    recorder = None if smoke else TileRecorder()
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu (interpreter)"
    print(f"IO model vs measured on {device}; constants: {gpu.describe()}", flush=True)
    results = []
    for f in files:
        results.extend(run_file(Path(f), gpu, recorder, smoke))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_io_model.json").write_text(json.dumps({"device": device, "gpu": dataclasses.asdict(gpu),
                                                         "results": results}, indent=2, default=str) + "\n")
    for res in results:
        print(f"\n@{res['function']} ({res['file']}): whole call {fmt_us(res['whole_call_s']).strip()} us measured, "
              f"{res['predicted_total_s'] * 1e6:.1f} us predicted")
        print(f"{'kernel':<20} {'tile':<17} {'bound':<8} {'pred us':>10} {'meas us':>10} {'pred/meas':>7}"
              f" {'plain pred':>10} {'plain meas':>10} {'pred/meas':>7} {'fused/plain':>7}")
        for r in res["kernels"]:
            # a launch group's row: its measured time is the whole group's, so is its prediction
            pred = r.get("group_predicted_s", r["predicted_s"])
            label = ("group:" + r["kernel"]) if "group_predicted_s" in r else r["kernel"]
            print(f"{label[:20]:<20} {r['tile']:<17} {r['bound']:<8} {fmt_us(pred)} {fmt_us(r['measured_s'])}"
                  f" {ratio(pred, r['measured_s'])} {fmt_us(r.get('plain_predicted_s'))} "
                  f"{fmt_us(r.get('plain_measured_s'))} {ratio(r.get('plain_predicted_s'), r.get('plain_measured_s'))}"
                  f" {ratio(r['measured_s'], r.get('plain_measured_s'))}")
        meas = [r["measured_s"] for r in res["kernels"] if not r["generated"].startswith("(in ")]
        if all(x is not None for x in meas):
            total = sum(meas)  # type: ignore[arg-type]
            print(f"{'sum of kernels':<20} {'':<17} {'':<8} {fmt_us(res['predicted_total_s'])} {fmt_us(total)}"
                  f" {ratio(res['predicted_total_s'], total)}")
    print(f"\nwrote {out / 'bench_io_model.json'}")


if __name__ == "__main__":
    main()
