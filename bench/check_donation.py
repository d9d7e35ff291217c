"""GPU check of issue 11's donation: a from_hf training step (LLaMA-shaped, 2 layers, hidden 256,
vocab 32000, 2 x 1024 tokens, bf16) with and without `set_donation` gives bitwise equal loss
and gradients, and the donating step's peak is lower by about the logits' size.

    CODA_AUTOTUNE=0 python3 bench/check_donation.py     # JSON on stdout (and $OUT/bitwise.json)
"""
import json, os, torch, transformers
from coda_ir.torch.hf import from_hf
from coda_ir.torch.function import set_donation
cfg = transformers.LlamaConfig(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               vocab_size=32000, intermediate_size=512, head_dim=64, rms_norm_eps=1e-6)
cfg._attn_implementation = "sdpa"
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(cfg).cuda().bfloat16()
cm = from_hf(model, progress=False)
ids = torch.randint(0, 32000, (2, 1024), device="cuda", generator=torch.Generator("cuda").manual_seed(1))
out = {}
for donate in (False, True, False, True):
    set_donation(donate)
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize(); base = torch.cuda.memory_allocated(); torch.cuda.reset_peak_memory_stats()
    loss = cm(ids, labels=ids).loss
    loss.backward()
    torch.cuda.synchronize()
    out[donate] = (loss.detach().clone(), {n: p.grad.clone() for n, p in model.named_parameters()},
                   (torch.cuda.max_memory_allocated() - base) / 2**20)
same = torch.equal(out[False][0], out[True][0]) and all(torch.equal(out[False][1][n], out[True][1][n]) for n in out[False][1])
r = {"bitwise_equal": same, "loss": float(out[True][0]), "peak_mib_no_donate": out[False][2], "peak_mib_donate": out[True][2],
     "logits_mib": 2048 * 32000 * 2 / 2**20}
print(json.dumps(r))
if os.environ.get("OUT"):
    json.dump(r, open(os.environ["OUT"] + "/bitwise.json", "w"))
