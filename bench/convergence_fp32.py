"""fp32 convergence of `from_hf` against Hugging Face fp32 at Liger-Kernel's mini-model sizes, on
the GPU: the check tests/torch/test_convergence.py runs on CPU at tiny sizes, here where Liger's
`test/convergence/fp32/test_mini_models.py` runs it (hidden 1024, 4 layers, GQA 8 / 2, vocabulary
32000, theta 5e5, 32 AdamW steps at lr 1e-4, loss rtol 1e-5), on a learnable synthetic language
(token t -> (5 t + 3) mod V, one in eight noise) of `--batch` x `--seq` tokens.

Per family: the worst step's |loss_coda - loss_hf| / |loss_hf| in units of Liger's rtol 1e-5, the
same for Hugging Face fp32 against its float64 copy (HF's own rounding, the scale of what a
reordering may cost), and with `--theta-frequencies` coda-ir rotating by theta's correctly rounded
frequencies instead of the model's inv_freq buffer (the behaviour before that fix).

    python bench/convergence_fp32.py --families llama,qwen3 --out $OUT/convergence_fp32.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MINI = dict(hidden_size=1024, intermediate_size=2048, num_attention_heads=8, num_key_value_heads=2, head_dim=128,
            num_hidden_layers=4, vocab_size=32000, rms_norm_eps=1e-5, tie_word_embeddings=False)
THETA = {"llama": 500000.0, "qwen3": 1000000.0}
TINY = dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            num_hidden_layers=2, vocab_size=128)
CLASSES = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen3": ("Qwen3Config", "Qwen3ForCausalLM")}


def language(batch, seq, vocab, seed, device):
    g = torch.Generator().manual_seed(seed)
    ids = torch.empty(batch, seq, dtype=torch.int64)
    ids[:, 0] = torch.randint(0, vocab, (batch,), generator=g)
    for s in range(1, seq):
        ids[:, s] = (5 * ids[:, s - 1] + 3) % vocab
    noise = torch.rand(batch, seq, generator=g) < 0.125
    ids[noise] = torch.randint(0, vocab, (int(noise.sum()),), generator=g)
    return ids.to(device)


def run(family: str, args, device, theta_frequencies: bool) -> dict:
    import transformers

    import coda_ir.torch.hf as hf

    cfg_cls, model_cls = (getattr(transformers, n) for n in CLASSES[family])
    mini = dict(MINI, **TINY) if args.tiny else MINI
    config = cfg_cls(**mini, rope_theta=THETA[family])
    config._attn_implementation = "sdpa"
    torch.manual_seed(42)
    with torch.device(device):
        model = model_cls(config)  # fp32
    reference = copy.deepcopy(model)
    ref64 = copy.deepcopy(model).double() if args.float64 else None
    saved = hf._inv_freq
    if theta_frequencies:
        hf._inv_freq = lambda *args, **kwargs: None
    try:
        cmodel = hf.from_hf(model, progress=False)
    finally:
        hf._inv_freq = saved
    opts = [torch.optim.AdamW(m.parameters(), lr=args.lr) for m in (model, reference)]
    opt64 = torch.optim.AdamW(ref64.parameters(), lr=args.lr) if ref64 is not None else None
    rows = []
    t0 = time.perf_counter()
    for step in range(args.steps):
        ids = language(args.batch, args.seq, mini["vocab_size"], step, device)
        losses = []
        for i, (m, o) in enumerate(zip((cmodel, reference), opts)):
            o.zero_grad(set_to_none=True)
            loss = m(ids, labels=ids).loss if i == 0 else m(input_ids=ids, labels=ids, use_cache=False).loss
            loss.backward()
            o.step()
            losses.append(loss.item())
        if ref64 is not None:
            opt64.zero_grad(set_to_none=True)
            loss = ref64(input_ids=ids, labels=ids, use_cache=False).loss
            loss.backward()
            opt64.step()
            losses.append(loss.item())
        rows.append(losses)
    out = {"family": family, "theta_frequencies": theta_frequencies, "seconds": time.perf_counter() - t0,
           "losses": rows}
    out["worst_coda_vs_hf32_in_rtol_1e-5"] = max(abs(r[0] - r[1]) / abs(r[1]) for r in rows) / 1e-5
    if ref64 is not None:
        out["worst_hf32_vs_hf64_in_rtol_1e-5"] = max(abs(r[1] - r[2]) / abs(r[2]) for r in rows) / 1e-5
        out["worst_coda_vs_hf64_in_rtol_1e-5"] = max(abs(r[0] - r[2]) / abs(r[2]) for r in rows) / 1e-5
    print(f"{family} {'theta frequencies' if theta_frequencies else 'model inv_freq'}: "
          + ", ".join(f"{k} {v:.2f}" for k, v in out.items() if k.startswith("worst")) + f"; losses {rows[0]} -> {rows[-1]}",
          flush=True)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", default="llama,qwen3")
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--float64", action="store_true", help="also train a float64 copy of HF")
    p.add_argument("--theta-frequencies", action="store_true", help="also run coda-ir with theta's frequencies (before the fix)")
    p.add_argument("--tiny", action="store_true", help="tiny shapes (a CPU check of the script)")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 (PyTorch's default, stated)
    results = []
    for family in [f for f in args.families.split(",") if f]:
        for theta_frequencies in ([False, True] if args.theta_frequencies else [False]):
            results.append(run(family, args, device, theta_frequencies))
            out = args.out or (os.path.join(os.environ["OUT"], "convergence_fp32.json") if os.environ.get("OUT") else None)
            if out:
                Path(out).write_text(json.dumps({"args": vars(args), "results": results}, indent=1))


if __name__ == "__main__":
    main()
