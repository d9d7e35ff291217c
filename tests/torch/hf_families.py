"""The one registry of tiny Hugging Face configurations that the `from_hf` tests run, per family.

`FAMILIES` maps a family name (its `config.model_type`) to a factory `(**overrides) -> (config,
model class)`. Adding a family that `coda_ir.torch.from_hf` learns to train is one entry here:
every test parametrized over `FAMILIES` (tests/torch/test_convergence.py) then runs it.

The shapes are tiny and odd on purpose (no tile divides the 7-token sequences): hidden 64,
2 layers, GQA 4 / 2 heads of head_dim 16, intermediate 96, vocabulary 128. Norm weights are
drawn around 1 (`tiny_model`): Hugging Face initialises them to ones, which would hide a wrong
weight.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import transformers

VOCAB = 128

COMMON = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              vocab_size=VOCAB, intermediate_size=96, head_dim=16, rms_norm_eps=1e-6)


def _factory(config_cls: str, model_cls: str, **family_defaults) -> Callable:
    def make(**overrides):
        kw = {**COMMON, **family_defaults, **overrides}
        return getattr(transformers, config_cls)(**kw), getattr(transformers, model_cls)
    return make


FAMILIES: dict[str, Callable[..., tuple[transformers.PretrainedConfig, type]]] = {
    "llama": _factory("LlamaConfig", "LlamaForCausalLM"),
    "qwen3": _factory("Qwen3Config", "Qwen3ForCausalLM"),
}


def tiny_config(family: str, **overrides) -> transformers.PretrainedConfig:
    return FAMILIES[family](**overrides)[0]


def tiny_model(family: str, dtype: torch.dtype = torch.float32, seed: int = 0, **overrides):
    """A random-init model of `family` in `dtype`. The rotary `inv_freq` buffer stays float32
    as `from_pretrained(torch_dtype=...)` leaves it (a `Module.to(bfloat16)` would round it
    to bfloat16, a RoPE no checkpoint loaded for training has)."""
    torch.manual_seed(seed)
    config, cls = FAMILIES[family](**overrides)
    model = cls(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.copy_(1 + 0.3 * torch.randn_like(p))
    return to_dtype(model, dtype)


def to_dtype(model, dtype: torch.dtype):
    """`model.to(dtype)` keeping every rotary embedding's `inv_freq` (and `original_inv_freq`)
    in float32, as `from_pretrained(torch_dtype=dtype)` does."""
    keep = {name: buf.clone() for name, buf in model.named_buffers() if name.endswith("inv_freq")}
    model = model.to(dtype)
    for name, buf in keep.items():
        owner, attr = model.get_submodule(name.rpartition(".")[0]), name.rpartition(".")[2]
        setattr(owner, attr, buf)
    return model
