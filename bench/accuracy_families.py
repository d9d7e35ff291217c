"""A training step's loss and every gradient per model family, against an fp32 reference, on the GPU.

What a user's training feels: for each family (`bench_families.FAMILIES` shapes, `--layers`
decoder layers, `--batch` x `--seq` tokens), the same random weights in three runs of one
forward + backward:

* the reference: the Hugging Face model in float32 (weights upcast from the bf16 ones, the rotary
  `inv_freq` fp32 as `from_pretrained` keeps it, SDPA);
* Hugging Face eager in bf16 (what the peers start from);
* coda-ir `from_hf` in bf16.

Per run: the loss's relative error and the gradients' relative L2 error over all parameters
(`||g - g_ref|| / ||g_ref||`, every parameter concatenated) and the worst parameter's. coda-ir
meets the project's bar when its errors are at most twice eager bf16's. With `--padded`, llama
also runs a 30%-padded batch (2-D attention mask, the padding's labels -100).

GPU (carry [".whl"]; transformers on the device):

    python3 bench/accuracy_families.py --families llama,qwen3,gemma,olmo2,mistral,qwen2,phi3,granite,smollm3 --padded

prints a table and writes $OUT/accuracy.json when $OUT is set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def loss_and_grads(run, model) -> tuple[float, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = run()
    loss.backward()
    grads = {n: p.grad.detach().float().clone() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss.detach().float()), grads


def errors(loss: float, grads: dict, ref_loss: float, ref: dict) -> dict:
    names = sorted(ref)
    missing = [n for n in names if n not in grads]
    if missing:
        return {"missing": missing}
    num = sum(float((grads[n] - ref[n]).pow(2).sum()) for n in names)
    den = sum(float(ref[n].pow(2).sum()) for n in names)
    per = {n: float((grads[n] - ref[n]).norm() / ref[n].norm().clamp_min(1e-30)) for n in names}
    worst = max(per, key=per.get)
    return {"loss_rel": abs(loss - ref_loss) / abs(ref_loss), "grad_rel_l2": (num / den) ** 0.5,
            "worst_param": worst, "worst_rel_l2": per[worst]}


def case(family: str, kind: str, args, device) -> dict:
    import bench_families as bf

    import coda_ir.torch

    shape = bf.shape_of(family, False)
    model = bf.make_model(shape, args.layers, torch.bfloat16, device)
    data = bf.batch_of(kind, shape["vocab_size"], args.batch, args.seq, device)
    ref_model = bf.make_model(shape, args.layers, torch.float32, device)
    with torch.no_grad():
        for p32, p16 in zip(ref_model.parameters(), model.parameters()):
            p32.copy_(p16.float())
    out = {"family": family, "batch": kind}
    ref_loss, ref = loss_and_grads(lambda: ref_model(**data).loss, ref_model)
    del ref_model
    eager_loss, eager = loss_and_grads(lambda: model(**data).loss, model)
    out["eager"] = errors(eager_loss, eager, ref_loss, ref)
    del eager
    cmodel = coda_ir.torch.from_hf(model, progress=False)
    coda_loss, coda = loss_and_grads(lambda: cmodel(**data).loss, model)
    out["coda"] = errors(coda_loss, coda, ref_loss, ref)
    out["ref_loss"] = ref_loss
    e, c = out["eager"], out["coda"]
    if "missing" not in c and "missing" not in e:
        out["meets_bar"] = (c["grad_rel_l2"] <= 2 * e["grad_rel_l2"] and c["worst_rel_l2"] <= 2 * e["worst_rel_l2"]
                            and c["loss_rel"] <= 2 * e["loss_rel"] + 2 * 2 ** -9 / (args.batch * args.seq) ** 0.5)
    torch.cuda.empty_cache()
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", default="llama,qwen3,gemma,olmo2")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--padded", action="store_true", help="also llama with a 30%%-padded batch")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    device = torch.device("cuda")
    import transformers

    info = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "transformers": transformers.__version__, "layers": args.layers, "batch": args.batch, "seq": args.seq}
    cases = []
    todo = [(f.strip(), "plain") for f in args.families.split(",") if f.strip()]
    if args.padded:
        todo.append(("llama", "padded"))
    for family, kind in todo:
        try:
            cases.append(case(family, kind, args, device))
        except Exception as error:  # a refused family or a failure: recorded, the others go on
            cases.append({"family": family, "batch": kind, "error": f"{type(error).__name__}: {error}"[:400]})
        print(json.dumps(cases[-1]), flush=True)
    print(f"\n{'family':10} {'batch':7} {'eager loss':>10} {'coda loss':>10} {'eager grad':>10} {'coda grad':>10} "
          f"{'eager worst':>11} {'coda worst':>10}  bar")
    for c in cases:
        if "error" in c or "missing" in c.get("coda", {}):
            print(f"{c['family']:10} {c['batch']:7} {c.get('error', c.get('coda'))}")
            continue
        e, d = c["eager"], c["coda"]
        print(f"{c['family']:10} {c['batch']:7} {e['loss_rel']:10.2e} {d['loss_rel']:10.2e} {e['grad_rel_l2']:10.2e} "
              f"{d['grad_rel_l2']:10.2e} {e['worst_rel_l2']:11.2e} {d['worst_rel_l2']:10.2e}  {c['meets_bar']}")
    report = {"info": info, "cases": cases}
    out = args.out or (os.path.join(os.environ["OUT"], "accuracy.json") if os.environ.get("OUT") else None)
    if out:
        Path(out).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
