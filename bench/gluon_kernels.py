"""Per-kernel table of the gemms `coda-plan-mainloop` gives the Gluon warp-specialized mainloop
(issue 11): each such kernel of the derived LLaMA block (forward and backward) as its Gluon
kernel, as its tl kernel (the TMA path at 128x256x64 w8 s3 and 128x128x64 w8 s4, the Hopper
candidates that won every earlier run), and the plain cuBLAS GEMM of the same operands.

    python bench/gluon_kernels.py --shapes 1b,8b [--rounds 3] --out DIR
    python bench/gluon_kernels.py --shapes none --examples gpt2_block,qwen3_block,lm_head --out DIR

`--examples` adds the programs of examples/NAME.mlir at their real shapes (the GPT-2 block's
LayerNorm / GELU epilogues, the Qwen3 block's QK-norm, the LM head), compiled the same way.

Compiles `nn-autodiff,nn-to-coda` at the shape, runs `f_fwd` and `f_bwd` once
while recording every `launch_gemm` call that carries a mainloop, then per recorded kernel:
checks the Gluon kernel's outputs against the tl kernel's at the same 128x256 tile (same-shaped
outputs: stored tiles and partials; max |diff| / max |tl|, and whether the Gluon path really
ran), reads the compiled kernels' registers, spills and shared memory, and times cuBLAS, Gluon
and both tl tiles with `do_bench` (warmup 25, rep 100) in `--rounds` rounds of rotating order.
The block-level numerics (every output and gradient against float64) are `bench_block.py`'s and
`sanitize_examples.py --check`'s. Writes $OUT/gluon_kernels.json; prints a table last. GPU only
(Hopper, a Triton with Gluon).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "programs"))
sys.path.insert(0, str(ROOT / "bench"))

os.environ.setdefault("CODA_AUTOTUNE", "0")

import torch  # noqa: E402
import triton  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from coda_ir import tiling  # noqa: E402
from coda_ir.runtime import gemm_launch as gl  # noqa: E402

from bench_block import SHAPES  # noqa: E402
from generate import nn_llama_block  # noqa: E402

RECORD: list[dict] = []
_orig_launch = gl.launch_gemm


def _recording_launch(kernel, a, b, extra_args_for, **kw):
    cfg, extra = _orig_launch(kernel, a, b, extra_args_for, **kw)
    if kw.get("mainloop") is not None:
        # the host function drops its buffers after their last reader, so the argument builder
        # cannot run later: build each tile's arguments now (outputs reused across the timed runs)
        built = {(c.bm, c.bn): list(extra_args_for(c)) for c in (cfg, *TL_TILES.values())}
        RECORD.append(dict(kernel=kernel, a=a, b=b, extra_args_for=lambda c, built=built: built[(c.bm, c.bn)], kw=kw,
                           path=gl.LAST_LAUNCH.get("path")))
    return cfg, extra


gl.launch_gemm = _recording_launch  # before compiling: generated modules import it by name

TL_TILES = {"tl 128x256 w8s3": tiling.TMA_CANDIDATES[0], "tl 128x128 w8s4": tiling.TMA_CANDIDATES[5]}


def resources(compiled) -> dict:
    if compiled is None:
        return {}
    try:
        compiled._init_handles()
    except Exception:
        pass
    return {"n_regs": getattr(compiled, "n_regs", None), "n_spills": getattr(compiled, "n_spills", None),
            "shared": getattr(compiled.metadata, "shared", None)}


def compare(ref, got) -> float | None:
    worst = None
    for r, e in zip(ref, got):
        if not (isinstance(r, torch.Tensor) and isinstance(e, torch.Tensor)) or r.shape != e.shape:
            continue
        if r.data_ptr() == e.data_ptr() or not r.dtype.is_floating_point:
            continue
        scale = r.float().abs().max().item() or 1.0
        d = (r.float() - e.float()).abs().max().item() / scale
        worst = d if worst is None else max(worst, d)
    return worst


def one_shape(key: str, rounds: int, log) -> dict:
    """The LLaMA block at a `bench_block.SHAPES` shape."""
    return one_program(key, nn_llama_block(SHAPES[key], fname="llama_block"), "llama_block", rounds, log)


def one_example(name: str, rounds: int, log) -> dict:
    """examples/NAME.mlir (its one function) at its own shapes."""
    text = (ROOT / "examples" / f"{name}.mlir").read_text()
    fname = re.search(r"func\.func @([\w.]+)", text).group(1)
    return one_program(name, text, fname, rounds, log)


def one_program(key: str, text: str, fname: str, rounds: int, log) -> dict:
    import coda_ir
    from coda_ir.testing import random_inputs, random_upstream

    inputs = random_inputs(text, seed=1, device="cuda")
    ups = random_upstream(text, seed=1, device="cuda")  # one per result of @fname
    t0 = time.perf_counter()
    prog = coda_ir.compile(text, pipeline="nn-autodiff,nn-to-coda")
    RECORD.clear()
    fo = getattr(prog, f"{fname}_fwd")(*inputs)
    fo = list(fo) if isinstance(fo, (tuple, list)) else [fo]
    getattr(prog, f"{fname}_bwd")(*fo[len(ups):], *ups)
    del fo
    torch.cuda.synchronize()
    out = {"first_calls_s": time.perf_counter() - t0, "kernels": []}
    seen = set()
    for rec in list(RECORD):
        kw = rec["kw"]
        name = getattr(rec["kernel"], "__name__", None) or rec["kernel"].fn.__name__
        if name in seen:
            continue
        seen.add(name)
        M, N, K = kw["M"], kw["N"], kw["K"]
        row = {"kernel": name, "M": M, "N": N, "K": K, "path_ran": rec["path"],
               "mainloop": {k: v for k, v in vars(kw["mainloop"]).items() if k != "kernel"}}
        log(f"{key} {name} {M}x{N}x{K} {row['mainloop']} ran {rec['path']}")
        a, b = rec["a"], rec["b"]
        A = a.T if kw["transpose_a"] else a
        B = b.T if kw["transpose_b"] else b
        cb = torch.empty(M, N, device="cuda", dtype=a.dtype)
        fns = {"cublas": lambda A=A, B=B, cb=cb: torch.matmul(A, B, out=cb)}
        try:
            base = {k: v for k, v in kw.items() if k not in ("mainloop", "config")}
            extras = {}
            _, got = _orig_launch(rec["kernel"], a, b, rec["extra_args_for"], **kw)
            torch.cuda.synchronize()
            # the tl runs below write the same output buffers: keep the Gluon kernel's results
            extras["gluon"] = [t.clone() if isinstance(t, torch.Tensor) else t for t in got]
            row["gluon"] = resources(gl.LAST_LAUNCH.get("compiled")) | {"path": gl.LAST_LAUNCH.get("path")}
            fns["gluon"] = lambda r=rec, k=kw: _orig_launch(r["kernel"], a, b, r["extra_args_for"], **k)
            for label, cfg in TL_TILES.items():
                _, extras[label] = _orig_launch(rec["kernel"], a, b, rec["extra_args_for"], config=cfg, **base)
                row[label] = resources(gl.LAST_LAUNCH.get("compiled")) | {"path": gl.LAST_LAUNCH.get("path")}
                fns[label] = lambda r=rec, c=cfg, k=base: _orig_launch(r["kernel"], a, b, r["extra_args_for"], config=c, **k)
            torch.cuda.synchronize()
            row["gluon_vs_tl_rel_diff"] = compare(extras["tl 128x256 w8s3"], extras["gluon"])
            log(f"   gluon {row['gluon']}  tl {row['tl 128x256 w8s3']}  rel diff vs tl {row['gluon_vs_tl_rel_diff']}")
        except Exception as exc:  # noqa: BLE001
            row["error"] = "".join(traceback.format_exception(exc))[-3000:]
            log(f"   ERROR {row['error']}")
        names = list(fns)
        times = {k: [] for k in names}
        for r in range(rounds):
            for k in names[r % len(names):] + names[:r % len(names)]:
                times[k].append(do_bench(fns[k], warmup=25, rep=100, return_mode="median"))
        med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        row["ms"] = med
        row["rounds_ms"] = times
        row["x_cublas"] = {k: med[k] / med["cublas"] for k in med}
        log("   x cuBLAS: " + ", ".join(f"{k} {v:.3f}" for k, v in row["x_cublas"].items()))
        out["kernels"].append(row)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="1b,8b", help="LLaMA block shapes (bench_block.SHAPES), or none")
    ap.add_argument("--examples", default="", help="comma-separated examples/*.mlir names, e.g. gpt2_block")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    report = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "gluon_supported": gl.gluon_supported(), "shapes": {}}
    print(json.dumps({k: report[k] for k in ("gpu", "torch", "triton", "gluon_supported")}), flush=True)

    def log(msg):
        print(msg, flush=True)

    Path(args.out).mkdir(parents=True, exist_ok=True)
    jobs = [(k, one_shape) for k in args.shapes.split(",") if k and k != "none"]
    jobs += [(k, one_example) for k in args.examples.split(",") if k]
    for key, run in jobs:
        try:
            report["shapes"][key] = run(key, args.rounds, log)
        except Exception as exc:  # noqa: BLE001
            report["shapes"][key] = {"error": "".join(traceback.format_exception(exc))[-3000:]}
            log(report["shapes"][key]["error"])
        (Path(args.out) / "gluon_kernels.json").write_text(json.dumps(report, indent=1, default=str))
        torch.cuda.empty_cache()
    print(f"\n{report['gpu']}, torch {report['torch']}, triton {report['triton']}")
    for key, row in report["shapes"].items():
        for k in row.get("kernels", []):
            x = k.get("x_cublas", {})
            g = k.get("gluon", {})
            print(f"{key:11s} {k['kernel']:32s} {k['M']}x{k['N']}x{k['K']:<6} ran {k['path_ran']:9s} "
                  + " ".join(f"{n} {v:.3f}" for n, v in x.items() if n != "cublas")
                  + f"  regs {g.get('n_regs')} spills {g.get('n_spills')} diff {k.get('gluon_vs_tl_rel_diff')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
