"""The one registry of tiny Hugging Face configurations that the `from_hf` tests run, per family.

`FAMILIES` maps a family (its `config.model_type`) to (config class, causal-LM class, the family's
own fields of the tiny config). Adding a family that `coda_ir.torch.from_hf` learns to train is
one entry here; tests/torch/test_hf.py checks its loss and gradients against float64 and
tests/torch/test_convergence.py (`--convergence-families`) trains it against Hugging Face.

The shapes are tiny and odd on purpose (no tile divides the 7-token sequences of the tests):
hidden 64, 2 layers, GQA 4 / 2 heads of head_dim 16, intermediate 96, vocabulary 128.
"""

from __future__ import annotations

import torch
import transformers

VOCAB = 128

# family -> (config class, causal-LM class, the family's own fields of the tiny config). Special
# token ids stay inside the tiny vocabulary (or None); the rest is each family's default.
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {}),  # sliding_window 4096 >= seq: full causal
    "ministral": ("MinistralConfig", "MinistralForCausalLM", {}),  # layer_types: sliding, window 4096
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),  # q/k/v biases
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(pad_token_id=None, bos_token_id=1, eos_token_id=2)),  # fused qkv / gate_up
    # the multipliers of Granite 3 (attention_multiplier: 1/sqrt(head_dim), the default softmax scale)
    "granite": ("GraniteConfig", "GraniteForCausalLM", dict(embedding_multiplier=12.0, residual_multiplier=0.22,
                                                            logits_scaling=8.0, attention_multiplier=0.25)),
    # layer 1 without RoPE (NoPE every second layer)
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM", dict(no_rope_layer_interval=2, pad_token_id=None,
                                                            bos_token_id=1, eos_token_id=2)),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", dict(pad_token_id=None, eos_token_id=2)),  # post-norms, full qk-norm
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {}),  # (1 + w) norms, scaled embedding, GeGLU (tanh)
    # + pre/post norms around attention and MLP, sliding layers (window 4096 >= seq), soft-capped
    # logits (a cap of 3 for the tiny logits: Gemma2's 30 would be the identity here); the
    # default softmax scale and no attention soft-capping (nn.attention's `scale` / `softcap`)
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", dict(query_pre_attn_scalar=16, attn_logit_softcapping=None,
                                                          final_logit_softcapping=3.0)),
    # + per-head q/k norms with 1 + w, a RoPE base per layer type (sliding layer 0: 1e4, full
    # layer 1: 1e6)
    # interleaved RoPE, q/k/v biases, fused gate_up, post-norms after attention and MLP; RoPE
    # over whole heads (every released GLM-4 rotates half of each head: refused by the field)
    "glm4": ("Glm4Config", "Glm4ForCausalLM", dict(partial_rotary_factor=1.0, pad_token_id=None, eos_token_id=2)),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        query_pre_attn_scalar=16, layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})),
    # Scaled and partial RoPE (nn.rope's inv_freq / rotary_dim / scaling), each family with the
    # RoPE of its released long-context models, shrunk to the tiny shape (original contexts of
    # 8-16 tokens so the scalings bend frequencies these positions use):
    # LLaMA 3.1 / 3.2: "llama3" (factor 8 at wavelengths above the original context, smooth between)
    "llama3_rope": ("LlamaConfig", "LlamaForCausalLM", dict(
        rope_theta=5e5, max_position_embeddings=128, rope_scaling={
            "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16})),
    # Phi-3.5: longrope (short factors up to the original context, long past it; magnitude
    # sqrt(1 + ln 8 / ln 8)) and a partial rotation (rotary_dim 8 of 16)
    "phi3_longrope": ("Phi3Config", "Phi3ForCausalLM", dict(
        pad_token_id=None, bos_token_id=1, eos_token_id=2, partial_rotary_factor=0.5, max_position_embeddings=64,
        original_max_position_embeddings=8, rope_scaling={
            "rope_type": "longrope", "short_factor": [1.0, 1.1, 1.3, 1.7], "long_factor": [1.5, 2.5, 4.0, 7.0],
            "original_max_position_embeddings": 8})),
    # Phi-4-mini as released: partial_rotary_factor 0.75 (12 of 16 here, 96 of 128 there: pairs
    # (i, i + 6) for i < 6, columns 12..15 of each head pass through; rotary_dim does not divide
    # head_dim, `coda.pair_map period`), longrope over those 6 frequencies, tied embeddings
    "phi4_mini": ("Phi3Config", "Phi3ForCausalLM", dict(
        pad_token_id=None, bos_token_id=1, eos_token_id=2, partial_rotary_factor=0.75, max_position_embeddings=64,
        original_max_position_embeddings=8, tie_word_embeddings=True, rope_scaling={
            "rope_type": "longrope", "short_factor": [1.0, 1.05, 1.1, 1.3, 1.6, 2.0],
            "long_factor": [1.2, 1.9, 2.7, 3.8, 5.2, 7.0], "original_max_position_embeddings": 8})),
    # GLM-4 as released: interleaved pairs over half of each head (partial_rotary_factor 0.5). Its
    # k bias's pass-through columns have a gradient of exactly 0 (q . b_pass is the same for every
    # key: softmax ignores it), so AdamW moves them by normalized rounding noise: k_proj.bias is
    # 0.03 from Hugging Face fp32 after 8 steps, as far as Hugging Face fp32 is from its float64
    # run (0.028); test_convergence's aggregate check takes the float64 bar there (its docstring).
    "glm4_partial": ("Glm4Config", "Glm4ForCausalLM", dict(partial_rotary_factor=0.5, pad_token_id=None, eos_token_id=2)),
    # Gemma3 4B+: linear scaling (factor 8) on the global layers, the local ones unscaled
    "gemma3_linear": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(
        query_pre_attn_scalar=16, layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})),
    # Qwen2.5 long-context: yarn (factor 4, magnitude 0.1 ln 4 + 1)
    "qwen2_yarn": ("Qwen2Config", "Qwen2ForCausalLM", dict(max_position_embeddings=64, rope_scaling={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16})),
}


def tiny_config(family: str, **overrides):
    common = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  vocab_size=VOCAB, intermediate_size=96, head_dim=16, rms_norm_eps=1e-6)
    config_cls, _, own = FAMILIES[family]
    common.update(own)
    common.update(overrides)
    return getattr(transformers, config_cls)(**common)


def tiny_model(family: str, dtype=torch.float32, seed: int = 0, **overrides):
    """A random-init model of `family` in `dtype`, its rotary `inv_freq` kept in fp32 as
    `from_pretrained(torch_dtype=...)` keeps it (`to_dtype`)."""
    torch.manual_seed(seed)
    model = getattr(transformers, FAMILIES[family][1])(tiny_config(family, **overrides))
    # random norm weights and biases too (HF initialises them to ones / zeros, which would hide
    # a wrong or missing one): norm weights 1 + 0.3 N(0, 1) as applied (Gemma's norms apply
    # 1 + w: w = 0.3 N(0, 1)), biases 0.1 N(0, 1). (Biases of
    # 0.3 N(0, 1) put the second layer's q gradients of the tiny Qwen2 at 1.1-1.25x the bar in
    # fp32: a common component of the keys makes dq = dS K a cancellation, rowsum(dS) = 0, where
    # the attention backward's rounding differs from Hugging Face's SDPA. Not the biases' path.)
    centre = 0.0 if family.startswith("gemma") else 1.0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                bias = name.endswith(".bias")
                p.copy_((0.0 if bias else centre) + (0.1 if bias else 0.3) * torch.randn_like(p))
    return to_dtype(model, dtype)


def to_dtype(model, dtype: torch.dtype):
    """`model.to(dtype)` keeping every rotary embedding's `inv_freq` (and `original_inv_freq`)
    in float32, as `from_pretrained(torch_dtype=dtype)` does (a `Module.to(bfloat16)` rounds
    them to bf16: a RoPE no checkpoint loaded for training has)."""
    keep = {name: buf.clone() for name, buf in model.named_buffers() if name.endswith("inv_freq")}
    model = model.to(dtype)
    for name, buf in keep.items():
        owner, attr = model.get_submodule(name.rpartition(".")[0]), name.rpartition(".")[2]
        setattr(owner, attr, buf)
    return model
