"""The planned memory of a whole-model training step, per fusion unit, computed on the CPU from the
programs `coda_ir.torch.from_hf` runs (no GPU, no Triton compile): what each unit's forward saves
for its backward (`@f_fwd`'s extra outputs, by name), what its backward recomputes (forward ops in
`@f_bwd`) and writes in place (`coda.writes_over`), and its backward's peak above what it was
handed (the liveness model, `coda_ir.analysis.liveness.timeline`, with the saved tensors released
at their last reader as the donating backward does). Then the step's predicted peak above the
resident model: after the forward every unit's saved set is alive; the backward runs the head,
then the decoder units from the last, each releasing its saved set while the parameter gradients
(bf16, allocated as they are produced) accumulate.

    PYTHONPATH=$PWD python bench/planned_memory.py --shape llama1b --layers 16
    PYTHONPATH=$PWD python bench/planned_memory.py --shape llama1b --layers 16 --budget-mib 100000   # stored logits

The model is built on the meta device (no weights are allocated); the unit programs are the ones
from_hf compiles at 2 x 4096 tokens (its bucket's representative row count when it has one).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MIB = 2**20
_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i32": 4, "i64": 8}


def _bytes(ty) -> int:
    from coda_ir.dialects.element_types import element_name

    return math.prod(ty.get_shape()) * _BYTES.get(element_name(ty.get_element_type()), 4)


def _func(module, name: str):
    from xdsl.dialects import func

    return next(f for f in module.walk() if isinstance(f, func.FuncOp) and f.sym_name.data == name)


def unit_plan(program: str, pipeline: str) -> dict:
    """Saved, recomputed, in place and the backward's peak of one unit's program."""
    from xdsl.dialects import func

    from coda_ir import remarks
    from coda_ir.analysis import liveness
    from coda_ir.dialects import coda, nn
    from coda_ir.torch.function import CodaFunction

    with remarks.printed_remarks(False):
        fn = CodaFunction(program, pipeline=pipeline)
        fwd_nn = _func(fn.nn_module, fn.fwd_name)
        bwd_nn = _func(fn.nn_module, fn.bwd_name)
        n_results = len(fn.results)
        outs = list(fwd_nn.body.blocks[0].last_op.operands)[n_results:]  # type: ignore[union-attr]
        saved = []
        for value, spec in zip(outs, fn.saved):
            if spec.source != "extra":
                continue
            saved.append((value.name_hint or "?", str(value.type), _bytes(value.type)))
        recomputed = sorted({op.name for op in bwd_nn.body.blocks[0].ops if not op.name.endswith(("_grad", "gemm"))
                             and op.name.startswith("nn.") and op.name not in ("nn.add", "nn.row_dot", "nn.zeros",
                                                                                "nn.concat", "nn.slice", "nn.matmul")})
        bwd = fn.backward_module([True] * len(fn.float_args), donate=bool(fn.donated_arguments()), hand_over=True)
        bwd_fn = next(f for f in bwd.ir.walk() if isinstance(f, func.FuncOp))
        extra = [j for j, s in enumerate(fn.saved) if s.source == "extra"]
        steps = liveness.timeline(bwd_fn, released=extra)
        in_place = sorted({op.attributes["coda.origin"].data for op in bwd_fn.walk()  # type: ignore[attr-defined]
                           if coda.writes_over(op) is not None and "coda.origin" in op.attributes})
        fwd_steps = liveness.timeline(_func(fn.forward_module.ir, fn.fwd_name))
    peak = max(steps, key=lambda s: s.live)
    return {
        "saved": saved,
        "saved_bytes": sum(b for _, _, b in saved),
        "recomputed": recomputed,
        "in_place": in_place,
        "backward_peak_bytes": peak.live,  # above the non-released arguments, saved set included
        "backward_peak_at": peak.label,
        "forward_peak_bytes": max(s.live for s in fwd_steps),
        "nn_grad_ops": sorted({op.name for op in bwd_nn.body.blocks[0].ops if op.name.endswith("_grad")}),
    }


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="llama1b")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--budget-mib", type=int, default=None, help="nn-autodiff's memory-budget-mib (default: the pass's)")
    p.add_argument("--checkpoint", action="store_true",
                   help="activation checkpointing of every decoder unit (from_hf's gradient_checkpointing_enable): a "
                        "unit keeps only its input until its backward re-runs its forward")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    import torch

    from bench_model import SHAPES, make_model
    from coda_ir.torch import hf

    shape = SHAPES[args.shape]
    model = make_model(shape, args.layers, torch.bfloat16, "meta")
    spec = hf.spec_of(model)
    tokens = args.batch * args.seq
    autodiff = "nn-autodiff" if args.budget_mib is None else f"nn-autodiff{{memory-budget-mib={args.budget_mib}}}"
    pipeline = f"{autodiff},nn-to-coda"
    units = {
        "embedding": hf.embedding_program(spec, tokens),
        "decoder layer": hf.decoder_program(spec, tokens, args.seq),
        "head (norm, LM head, loss)": hf.head_program(spec, tokens, loss=True),
    }
    plans = {name: unit_plan(text, pipeline) for name, text in units.items()}
    params = {n: p.numel() * 2 for n, p in model.named_parameters()}  # bf16 gradients
    layer_grads = sum(b for n, b in params.items() if ".layers.0." in n)
    head_grads = sum(b for n, b in params.items() if "layers" not in n)  # embedding (tied) + final norm
    dec, head = plans["decoder layer"], plans["head (norm, LM head, loss)"]
    dec_saved = 0 if args.checkpoint else dec["saved_bytes"]  # held from the forward to the unit's backward
    saved_all = plans["embedding"]["saved_bytes"] + args.layers * dec_saved + head["saved_bytes"]
    x_bytes = tokens * spec.hidden * 2  # the residual stream each unit hands on (its input, saved as such)
    resident_x = (args.layers + 1) * x_bytes  # unit inputs the units keep for their backward
    after_forward = saved_all + resident_x
    # the head's backward: every decoder unit's saved set alive beside it; then each decoder unit
    # in turn (its gradient dx is the next one's upstream), gradients accumulating
    timeline = [("head backward", after_forward - head["saved_bytes"] + head["backward_peak_bytes"] + head_grads)]
    grads = head_grads
    below = after_forward - head["saved_bytes"]
    for layer in reversed(range(args.layers)):
        below -= dec_saved + x_bytes
        timeline.append((f"layer {layer} backward", below + dec["saved_bytes"] + dec["backward_peak_bytes"] + grads + x_bytes))
        grads += layer_grads
    peak_at, peak = max(timeline, key=lambda t: t[1])
    out = {"shape": args.shape, "layers": args.layers, "checkpoint": args.checkpoint, "tokens": tokens, "pipeline": pipeline, "units": plans,
           "after_forward_bytes": after_forward, "step_peak_bytes": peak, "step_peak_at": peak_at,
           "gradients_bytes": grads}

    print(f"\n{args.shape}, {args.layers} layers, {tokens} tokens, pipeline {pipeline}"
          + (", every decoder unit checkpointed" if args.checkpoint else ""))
    print("| unit | saved for the backward (MiB) | what | recomputed in the backward | written in place | backward peak (MiB) at |")
    print("|---|---|---|---|---|---|")
    for name, u in plans.items():
        what = ", ".join(f"{n} {t.split('<')[1].rstrip('>')} ({b / MIB:.0f})" for n, t, b in u["saved"]) or "-"
        print(f"| {name} | {u['saved_bytes'] / MIB:.0f} | {what} | {', '.join(u['recomputed']) or '-'} | "
              f"{', '.join(u['in_place']) or '-'} | {u['backward_peak_bytes'] / MIB:.0f} at {u['backward_peak_at']} |")
    print(f"\nafter the forward: {after_forward / 2**30:.2f} GiB (saved sets + unit inputs); predicted step peak "
          f"{peak / 2**30:.2f} GiB at the {peak_at} (parameter gradients {grads / 2**30:.2f} GiB in all)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
