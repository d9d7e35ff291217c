"""`coda_ir.torch.from_hf`: train a Hugging Face causal LM (LLaMA, Mistral, Qwen2/3, Phi3, Granite,
SmolLM3, OLMo2, Gemma 1/2/3, GLM4: `FAMILIES`) through coda-ir.

`from_hf(model)` reads `model.config`, writes one nn program per *fusion unit* (the token
embedding, each decoder layer with its attention, the final norm + LM head + cross-entropy),
compiles each with `coda_ir.torch.function` (custom ops with autograd through the derived
`@f_bwd`) and returns a `torch.nn.Module` that runs them over the model's own parameters:

* no copies of the weights: every unit holds the Hugging Face submodules it reads, so
  `module.parameters()` *are* `model.parameters()`, gradients land in them, and any optimizer
  built on `model.parameters()` works unchanged;
* the programs are written as Hugging Face computes (separate q/k/v and gate/up linears with
  their biases, `act(gate) * up`; fused `qkv_proj` / `gate_up_proj` weights as they are); the
  `nn-fuse-siblings` step of the pipeline derives the packed QKV GEMM and the gated pair that
  the GEMM epilogues fuse;
* what differs between families is data (`ModelSpec`, read by `spec_of` from config fields and
  the layers' modules): biases, the gate activation, which RMSNorms a layer has and their
  `1 + w` offset, QK-norm kind, multipliers (`nn.scale`), per-layer RoPE / windows;
* one program per bucket of token counts and layer kind, not per shape: a unit's program is
  written for a run-time row count (`#coda.rows`: planned at a representative count of the
  power-of-two bucket `(hi/2, hi]` of the step's tokens, the attention's sequence length an
  argument of the call), so a new [batch, seq] in a bucket already compiled runs the same
  program (the GEMMs' tuned tiles are shared per bucket too, `gemm_launch`); decoder layers of
  one kind (RoPE or not, its base, its window) share one program, so a bucket compiles once for
  all of them (progress is printed to stderr unless `progress=False`);
* `layers` is a `ModuleList` of the decoder units, the modules that FSDP2's `fully_shard` and
  activation checkpointing wrap; `embed` and `head` are the first and last units;
* each unit reads its tensor-parallel layout off its weights' placements at each call
  (`named_weights()` gives each weight's Megatron role): plain weights run the unit's one
  program; DTensors of a `parallelize_module` plan run its per-shard segments with collectives
  between them (coda_ir/torch/tensor_parallel.py).

Scaled and partial RoPE ("linear", "llama3", "yarn", "longrope"; `partial_rotary_factor`) are
per-layer data too (`LayerKind`: nn.rope's `inv_freq`, `scaling`, `rotary_dim`; longrope's long
factors a program variant picked per step). A configuration this bridge does not implement
("dynamic" RoPE scaling, dropout, mixture-of-experts, another activation) is a `CompileError` naming the config field;
it never runs something different from the Hugging Face model. Tensor parallelism covers the LLaMA / Qwen3 blocks (`ModelSpec.tensor_parallel_gaps`).
"""

from __future__ import annotations

import gc
import io
import re
import sys
import threading
import time
from dataclasses import dataclass, fields, replace

import torch
import torch.utils.checkpoint
from xdsl.printer import Printer

from coda_ir.builder import FunctionBuilder
from coda_ir.errors import ArgumentError, CompileError
from coda_ir.runtime.compiled import indices_checked
from coda_ir.runtime.library import step_tokens
from coda_ir.torch import tensor_parallel as tp
from coda_ir.torch.function import BoundFunction, CodaFunction

__all__ = ["from_hf", "CodaCausalLM", "ModelSpec"]

IGNORE_INDEX = -100
_MLIR_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}

# ============================================================================ the model's shape


@dataclass(frozen=True)
class LayerKind:
    """What may differ between the decoder layers of one model (per-layer config fields): whether
    the layer rotates q/k (SmolLM3's `no_rope_layers`), its RoPE base, and its sliding window
    (keys `k` with `q - k < window` are seen, Hugging Face's `sliding_window`; None: full causal)."""

    rope: bool = True
    theta: float | None = None  # None: the model's `ModelSpec.theta`
    window: int | None = None
    # A scaled or partial RoPE (`rope_parameters`: "linear", "llama3", "yarn", "longrope", a
    # `partial_rotary_factor`), or a per-layer-type one with its own buffer (Gemma3): the columns
    # of each head it rotates (None: all), its frequencies exactly as the Hugging Face model
    # holds them (None: ModelSpec.inv_freq where theta is the model's, else theta's own), and the
    # magnitude its cos / sin are multiplied by (`attention_scaling`); nn.rope's `rotary_dim`,
    # `inv_freq`, `scaling`.
    rotary_dim: int | None = None
    inv_freq: tuple[float, ...] | None = None
    rope_scaling: float = 1.0
    # longrope: the frequencies of a call whose largest position + 1 exceeds `long_after` (the
    # config's original_max_position_embeddings); Hugging Face decides per forward, as `from_hf`
    long_inv_freq: tuple[float, ...] | None = None
    long_after: int | None = None


@dataclass(frozen=True)
class ModelSpec:
    """What the programs depend on, read from a Hugging Face config, the layers' module structure
    (biases, fused projections, which norms a layer has) and the weights' dtype. Every field is
    data: a family that differs from a supported one only by its name maps to the same spec."""

    family: str  # config.model_type (informative: the programs read the fields below)
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    eps: float
    theta: float
    qk_norm: bool | str  # "none", "head" (one weight per head_dim, Qwen3) or "full" (over all heads' columns, OLMo2); bools: False / True = "head"
    tied: bool
    dtype: torch.dtype
    qkv_bias: bool = False  # q/k/v projections with a bias (Qwen2, attention_bias)
    o_bias: bool = False
    mlp_bias: bool = False
    fused_qkv: bool = False  # one `qkv_proj` weight [q rows | k rows | v rows] (Phi3)
    fused_gate_up: bool = False  # one `gate_up_proj` weight [gate rows | up rows] (Phi3)
    activation: str = "silu"  # the gate's: "silu", "gelu" (erf) or "gelu_tanh"
    norm_offset: float = 0.0  # RMSNorm weight w applied as (w + offset) (Gemma: 1)
    norms: tuple = ("input_layernorm", None, "post_attention_layernorm", None)
    """The layer's RMSNorm modules: (before attention, after attention, before the MLP, after the
    MLP); None where the layer has none (OLMo2: post-norms only; Gemma2/3, GLM4: all four)."""
    embed_scale: float = 1.0  # embedding rows times this (Granite embedding_multiplier, Gemma sqrt(hidden))
    embed_scale_rounded: bool = False  # the scale is first rounded to the weights' dtype (Gemma)
    residual_scale: float = 1.0  # attention / MLP outputs times this before the residual add (Granite)
    logits_scale: float = 1.0  # logits times this (Granite: 1 / logits_scaling)
    logits_softcap: float | None = None  # logits -> cap * tanh(logits / cap) (Gemma2's final_logit_softcapping)
    attention_scale: float | None = None  # the softmax scale; None: 1 / sqrt(head_dim)
    attention_softcap: float | None = None  # scores -> softcap * tanh(scores / softcap) (Gemma2's attn_logit_softcapping)
    layer_kinds: tuple = ()  # LayerKind per layer; () = every layer the default LayerKind()
    rope_style: str = "half"  # nn.rope's style: "half" (LLaMA, NeoX) or "interleaved" (GLM4)
    # the model's own RoPE frequencies (its rotary_emb.inv_freq buffer, fp32 numbers), which the
    # programs use bit for bit: Hugging Face's fp32 formula is 1-2 ulp off theta ** (-2i / hd) in
    # about a third of them, ~1e-4 rad of angle at position 4096 (see _inv_freq); a layer whose RoPE
    # base is the model's uses them. None: from theta.
    inv_freq: tuple[float, ...] | None = None

    def __post_init__(self):
        if isinstance(self.qk_norm, bool):
            object.__setattr__(self, "qk_norm", "head" if self.qk_norm else "none")

    @property
    def element(self) -> str:
        return _MLIR_DTYPES[self.dtype]

    def layer(self, index: int) -> LayerKind:
        kind = self.layer_kinds[index] if self.layer_kinds else LayerKind()
        return kind if kind.theta is not None else replace(kind, theta=self.theta)

    def tensor_parallel_gaps(self) -> list[str]:
        """What of this model the tensor-parallel segments (`tp_*_program`, LLaMA / Qwen3
        blocks) do not implement; [] when they cover it."""
        default = ModelSpec(family=self.family, hidden=self.hidden, layers=self.layers, heads=self.heads,
                            kv_heads=self.kv_heads, head_dim=self.head_dim, intermediate=self.intermediate,
                            vocab=self.vocab, eps=self.eps, theta=self.theta, qk_norm=self.qk_norm,
                            tied=self.tied, dtype=self.dtype)
        gaps = [f.name for f in fields(self) if f.name not in _TP_FIELDS and getattr(self, f.name) != getattr(default, f.name)]
        if self.qk_norm not in ("none", "head"):
            gaps.append(f"qk_norm={self.qk_norm!r}")
        if any(self.layer(i) != LayerKind(theta=self.theta) for i in range(self.layers)):
            gaps.append("layer_kinds (per-layer RoPE / sliding windows)")
        return gaps


_TP_FIELDS = {"family", "hidden", "layers", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "eps", "theta",
              "qk_norm", "tied", "dtype", "layer_kinds", "inv_freq"}


def _unsupported(field: str, value: object, why: str) -> CompileError:
    return CompileError([f"<from_hf>: error: config.{field} = {value!r} is not supported: {why}"])


_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "longrope")
"""The `rope_type`s whose frequencies are static (computed once from the config: Hugging Face's
`ROPE_INIT_FUNCTIONS`); "dynamic" recomputes them from each call's length and is refused."""

_ROPE_KEYS = {"rope_type", "type", "rope_theta", "partial_rotary_factor", "factor", "original_max_position_embeddings",
              "low_freq_factor", "high_freq_factor", "attention_factor", "beta_fast", "beta_slow", "mscale",
              "mscale_all_dim", "truncate", "long_factor", "short_factor"}
"""The `rope_parameters` keys the static RoPE types read (transformers' `modeling_rope_utils`)."""


@dataclass(frozen=True)
class RopeKind:
    """One RoPE of a model (per layer type where `rope_parameters` is keyed by layer type): its
    base, and what the layers of that type put on nn.rope besides it (see `LayerKind`)."""

    theta: float
    rotary_dim: int | None = None
    inv_freq: tuple[float, ...] | None = None
    scaling: float = 1.0
    long_inv_freq: tuple[float, ...] | None = None
    long_after: int | None = None


def _rope_kinds(config, model, head_dim: int, style: str) -> dict:
    """The RoPE of each layer type: `{layer type: RopeKind}` where `rope_parameters` is keyed
    by layer type (Gemma3: a local base for sliding layers), else `{None: RopeKind}`."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
        return {kind: _rope_kind(config, model, head_dim, style, sub, kind) for kind, sub in params.items()}
    return {None: _rope_kind(config, model, head_dim, style)}


def _float_list(tensor) -> tuple[float, ...] | None:
    """fp32 frequencies as Python floats, or None for a tensor that cannot be them exactly (not
    fp32 / fp64: a `Module.to(bfloat16)` rounded it, angles off by up to position * 2^-9 rad)."""
    if (not isinstance(tensor, torch.Tensor) or tensor.dim() != 1 or tensor.is_meta
            or tensor.dtype not in (torch.float32, torch.float64)):
        return None
    values = tensor.detach().to(device="cpu", dtype=torch.float32)
    if not bool(torch.isfinite(values).all()) or bool((values < 0).any()):
        return None
    return tuple(float(v) for v in values.tolist())


def _rope_kind(config, model, head_dim: int, style: str, params=None, layer_type: str | None = None) -> RopeKind:
    """One RoPE, from both config layouts (transformers >= 5 `rope_parameters`, older
    `rope_theta` + `rope_scaling`): its base, the columns it rotates and, for a scaled type,
    the frequencies and magnitude Hugging Face computes (`ROPE_INIT_FUNCTIONS` on this config)."""
    top = params is None
    where = "rope_scaling" if top else f"rope_parameters['{layer_type}']"
    if top:
        params = getattr(config, "rope_parameters", None)
        if not isinstance(params, dict) or not params:
            params = getattr(config, "rope_scaling", None) or {}
    rope_type = params.get("rope_type", params.get("type")) or "default"
    if rope_type not in _ROPE_TYPES:
        why = ("its frequencies depend on each call's length (dynamic NTK scaling): only static RoPE frequencies "
               f"({', '.join(_ROPE_TYPES)}) are implemented" if "dynamic" in str(rope_type)
               else f"the implemented RoPE types are {', '.join(_ROPE_TYPES)}")
        raise _unsupported(f"{where}['rope_type']", rope_type, why)
    extra = sorted(set(params) - _ROPE_KEYS)
    if extra:
        raise _unsupported(f"{where}['{extra[0]}']", params[extra[0]], f"not a field of the RoPE type {rope_type!r}")
    theta = params.get("rope_theta", getattr(config, "rope_theta", None))
    if theta is None:
        raise _unsupported("rope_theta", None, "the RoPE base is missing")
    factor = params.get("partial_rotary_factor", getattr(config, "partial_rotary_factor", None))
    factor_field = f"{where}['partial_rotary_factor']" if "partial_rotary_factor" in params else "partial_rotary_factor"
    rd = head_dim if factor is None else int(head_dim * float(factor))  # Hugging Face's dim (int() truncates)
    if not (2 <= rd <= head_dim and rd % 2 == 0):
        raise _unsupported(factor_field, factor, f"rotates {rd} of {head_dim} columns a head: must be an even number >= 2")
    kind = RopeKind(theta=float(theta), rotary_dim=None if rd == head_dim else rd)
    # the model's own buffer (bit for bit what it rotates by; `original_` as built, before a
    # longrope forward swaps the long frequencies in), where it holds fp32 numbers
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    prefix = "" if layer_type is None else f"{layer_type}_"
    buffer = getattr(rotary, f"{prefix}original_inv_freq", None)
    if buffer is None:
        buffer = getattr(rotary, f"{prefix}inv_freq", None)
    freqs = _float_list(buffer)
    if freqs is not None and len(freqs) != rd // 2:
        freqs = None
    if rope_type == "default":
        # a model-wide default RoPE keeps its buffer in ModelSpec.inv_freq (_inv_freq); a layer
        # type's (Gemma3) in its RopeKind
        return replace(kind, inv_freq=freqs) if layer_type is not None else kind
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    init = ROPE_INIT_FUNCTIONS[rope_type]
    extra_args = {} if layer_type is None else {"layer_type": layer_type}
    try:
        computed, scaling = init(config, "cpu", **extra_args)
        long = None
        if rope_type == "longrope":
            long_after = int(params["original_max_position_embeddings"])
            long, _ = init(config, "cpu", seq_len=long_after + 1, **extra_args)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise _unsupported(where, dict(params), f"Hugging Face's {rope_type!r} RoPE cannot read it ({exc})") from exc
    if freqs is None:  # not fp32 in the model (rounded): Hugging Face's formula on the config, in fp32
        freqs = _float_list(computed.to(torch.float32))
    if freqs is None or len(freqs) != rd // 2:
        raise _unsupported(where, dict(params), f"its {rope_type!r} frequencies are not {rd // 2} finite numbers >= 0")
    kind = replace(kind, inv_freq=freqs, scaling=float(scaling))
    if long is not None:
        long_freqs = _float_list(long.to(torch.float32))
        if long_freqs is None or len(long_freqs) != rd // 2:
            raise _unsupported(f"{where}['long_factor']", params.get("long_factor"),
                               f"its frequencies are not {rd // 2} finite numbers >= 0")
        kind = replace(kind, long_inv_freq=long_freqs, long_after=long_after)
    return kind


def _inv_freq(model, head_dim: int, rotary_dim: int | None = None) -> tuple[float, ...] | None:
    """The frequencies the Hugging Face model rotates by: its `model.rotary_emb.inv_freq`
    buffer, computed at construction by `1 / theta ** (arange(0, hd, 2) / hd)` in fp32 ops
    (`compute_default_rope_parameters`). Those are not the correctly rounded theta ** (-2i / hd)
    that nn.rope's `theta` means (1-2 ulp off in about a third of them, and the bits depend on
    the pow of the device that computed them), so the programs carry them explicitly: in fp32
    the loss then tracks Hugging Face's to ~1e-7 at any position instead of drifting with it.
    A buffer that is not fp32 (a `Module.to(bfloat16)` rounds it: angles off by up to
    position * 2^-9 rad) is not taken: the programs then rotate by the config's theta exactly
    (`from_pretrained(dtype=...)` keeps the buffer fp32, so users get the first case)."""
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    # `original_inv_freq` as built: a longrope forward past the original context swaps the long
    # frequencies into `inv_freq` in place
    buf = getattr(rotary, "original_inv_freq", None)
    if buf is None:
        buf = getattr(rotary, "inv_freq", None)
    freqs = _float_list(buf)
    return freqs if freqs is not None and len(freqs) == (rotary_dim or head_dim) // 2 else None


FAMILIES = ("llama", "mistral", "ministral", "qwen2", "qwen3", "phi3", "granite", "smollm3", "olmo2", "gemma", "gemma2",
            "gemma3_text", "glm4")
"""`config.model_type`s whose decoder layers are the spec's data (README table). Models of
these types are read by the same code: config fields and the layers' modules give the spec."""

_NORM_OFFSET = {"gemma": 1.0, "gemma2": 1.0, "gemma3_text": 1.0}
"""RMSNorm weights applied as `1 + w` (the family's RMSNorm class: not a config field)."""

_ROPE_STYLE = {"glm4": "interleaved"}
"""RoPE pairs (2i, 2i + 1) (the family's `rotate_half`: not a config field); others (i, i + hd/2)."""

_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh"}
"""Hugging Face `hidden_act` names -> the gate activation (ACT2FN: `gelu` is the erf form)."""

_MOE_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


def _dropout_fields(config) -> None:
    for field in ("attention_dropout", "resid_pdrop", "embd_pdrop", "hidden_dropout", "mlp_dropout"):
        value = getattr(config, field, 0.0)
        if value not in (None, 0, 0.0):
            raise _unsupported(field, value, "dropout is not implemented")


def _layer_kinds(config, family: str, layers: int, ropes: dict) -> tuple:
    """Per layer: RoPE on/off (`no_rope_layers`, 1 = rotate) and the sliding window
    (`layer_types` with `sliding_window`; without layer_types a `sliding_window` applies to
    every layer, as Mistral / Phi3 do)."""
    no_rope = getattr(config, "no_rope_layers", None)
    if no_rope is not None and len(no_rope) != layers:
        raise _unsupported("no_rope_layers", no_rope, f"needs one entry per layer ({layers})")
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if types is not None and len(types) != layers:
        raise _unsupported("layer_types", types, f"needs one entry per layer ({layers})")
    if types is not None:
        bad = next((t for t in types if t not in ("full_attention", "sliding_attention")), None)
        if bad is not None:
            raise _unsupported("layer_types", bad, "only full and sliding-window causal attention layers are implemented")
    if family == "smollm3" and not getattr(config, "use_sliding_window", False):
        window = None  # SmolLM3's attention reads its window only with use_sliding_window
    if window is not None and int(window) <= 0:
        raise _unsupported("sliding_window", window, "a window must be positive")
    if None not in ropes and (types is None or any(t not in ropes for t in types)):
        missing = next((t for t in (types or ["full_attention"]) if t not in ropes), "full_attention")
        raise _unsupported("rope_parameters", sorted(ropes), f"has no RoPE for the layer type {missing!r}")
    kinds = []
    for i in range(layers):
        sliding = window is not None and (types is None or types[i] == "sliding_attention")
        rope = ropes[None] if None in ropes else ropes[types[i]]
        kinds.append(LayerKind(rope=bool(no_rope[i]) if no_rope is not None else True, theta=rope.theta,
                               window=int(window) if sliding else None, rotary_dim=rope.rotary_dim,
                               inv_freq=rope.inv_freq, rope_scaling=rope.scaling, long_inv_freq=rope.long_inv_freq,
                               long_after=rope.long_after))
    return tuple(kinds)


def _norm_names(layer) -> tuple:
    """(before attention, after attention, before the MLP, after the MLP) RMSNorm module names,
    from the layer's structure: a `post_feedforward_layernorm` makes `post_attention_layernorm`
    the attention's post-norm (OLMo2, Gemma2/3); without one it is the MLP's pre-norm (LLaMA,
    GLM4 with its `post_self_attn_layernorm` / `post_mlp_layernorm`)."""
    has = lambda name: isinstance(getattr(layer, name, None), torch.nn.Module)  # noqa: E731
    if has("post_feedforward_layernorm"):
        names = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm")
    elif has("post_mlp_layernorm"):  # GLM4: post_attention_layernorm stays the MLP's pre-norm
        names = ("input_layernorm", "post_self_attn_layernorm", "post_attention_layernorm", "post_mlp_layernorm")
    else:
        names = ("input_layernorm", None, "post_attention_layernorm", None)
    return tuple(n if n is not None and has(n) else None for n in names)


def spec_of(model) -> ModelSpec:
    """The ModelSpec of a Hugging Face causal LM of a supported family (`FAMILIES`), or a
    CompileError naming the first config field (or model property) this bridge does not implement."""
    config = getattr(model, "config", None)
    family = getattr(config, "model_type", None)
    for field in _MOE_FIELDS:
        experts = getattr(config, field, None)
        if isinstance(experts, int) and experts > 0:
            raise _unsupported(field, experts, "mixture-of-experts layers are not implemented")
    if family not in FAMILIES:
        raise CompileError([f"<from_hf>: error: {type(model).__name__} (config.model_type = {family!r}) is not supported: "
                            f"from_hf takes a causal LM of model_type {', '.join(FAMILIES)} (e.g. LlamaForCausalLM, "
                            "Qwen3ForCausalLM)"])
    if not hasattr(model, "lm_head") or not hasattr(getattr(model, "model", None), "layers"):
        raise CompileError([f"<from_hf>: error: {type(model).__name__} has no .model.layers / .lm_head: pass the ...ForCausalLM model"])
    act_field = "hidden_activation" if getattr(config, "hidden_activation", None) else "hidden_act"
    act = getattr(config, act_field, "silu")
    if act not in _ACTIVATIONS:
        raise _unsupported(act_field, act, f"the MLP gate's activation must be one of {', '.join(_ACTIVATIONS)}")
    _dropout_fields(config)
    if getattr(config, "pretraining_tp", 1) not in (None, 1):
        raise _unsupported("pretraining_tp", config.pretraining_tp, "tensor-parallel pretraining slices are not implemented")
    final_cap = getattr(config, "final_logit_softcapping", None)
    if final_cap is not None and not float(final_cap) > 0:
        raise _unsupported("final_logit_softcapping", final_cap, "a soft-cap must be positive")
    if getattr(config, "use_bidirectional_attention", False):
        raise _unsupported("use_bidirectional_attention", True, "only causal attention is implemented")
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    hidden = int(config.hidden_size)
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    if heads % kv_heads:
        raise _unsupported("num_key_value_heads", kv_heads, f"must divide num_attention_heads = {heads}")
    dtypes = {p.dtype for p in model.parameters()}
    if len(dtypes) != 1 or next(iter(dtypes)) not in _MLIR_DTYPES:
        raise ArgumentError(f"from_hf: the model's parameters must all be one of float32, bfloat16, float16; got {sorted(map(str, dtypes))}")
    layers = int(config.num_hidden_layers)
    ropes = _rope_kinds(config, model, head_dim, _ROPE_STYLE.get(family, "half"))
    model_rope = ropes.get(None, ropes.get("full_attention", next(iter(ropes.values()))))
    theta = model_rope.theta
    layer0 = model.model.layers[0]
    attn, mlp = layer0.self_attn, layer0.mlp
    has_bias = lambda module: getattr(module, "bias", None) is not None  # noqa: E731
    fused_qkv = hasattr(attn, "qkv_proj")
    fused_gate_up = hasattr(mlp, "gate_up_proj")
    qk_norm = "none"
    if isinstance(getattr(attn, "q_norm", None), torch.nn.Module):
        qk_norm = "head" if attn.q_norm.weight.shape[0] == head_dim else "full"
    if getattr(config, "attention_multiplier", None) is not None:  # Granite: the scale itself
        scale = float(config.attention_multiplier)
    elif getattr(config, "query_pre_attn_scalar", None) is not None:  # Gemma2/3: 1 / sqrt(that)
        scale = float(config.query_pre_attn_scalar) ** -0.5
    else:
        scale = head_dim ** -0.5
    softcap = getattr(config, "attn_logit_softcapping", None)
    embed_scale = float(getattr(config, "embedding_multiplier", 1.0))
    scalar = getattr(model.model.embed_tokens, "scalar_embed_scale", None)  # a scaled embedding module (Gemma)
    if scalar is not None:
        embed_scale *= float(scalar)
    logits_scaling = float(getattr(config, "logits_scaling", 1.0))
    if logits_scaling == 0:
        raise _unsupported("logits_scaling", 0, "the logits are divided by it")
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    return ModelSpec(
        family=family,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=int(config.intermediate_size),
        vocab=int(config.vocab_size),
        eps=float(config.rms_norm_eps),
        theta=theta,
        qk_norm=qk_norm,
        tied=tied,
        dtype=next(iter(dtypes)),
        qkv_bias=has_bias(attn.qkv_proj if fused_qkv else attn.q_proj),
        o_bias=has_bias(attn.o_proj),
        mlp_bias=has_bias(mlp.gate_up_proj if fused_gate_up else mlp.gate_proj),
        fused_qkv=fused_qkv,
        fused_gate_up=fused_gate_up,
        activation=_ACTIVATIONS[act],
        norm_offset=_NORM_OFFSET.get(family, 0.0),
        norms=_norm_names(layer0),
        embed_scale=embed_scale,
        embed_scale_rounded=scalar is not None,
        residual_scale=float(getattr(config, "residual_multiplier", 1.0)),
        logits_scale=1.0 / logits_scaling,
        attention_scale=None if scale == head_dim ** -0.5 else scale,
        attention_softcap=None if softcap is None else float(softcap),
        logits_softcap=None if final_cap is None else float(final_cap),
        layer_kinds=_layer_kinds(config, family, layers, ropes),
        rope_style=_ROPE_STYLE.get(family, "half"),
        inv_freq=_inv_freq(model, head_dim, model_rope.rotary_dim),
    )


# ============================================================================ the nn programs
# Every program is built through the public builder (`coda_ir.builder.FunctionBuilder`,
# `fb.nn.<op>`: typed constructors, verified, errors located at the line here that built the op)
# and handed on as its printed text, which is also its compile key (`_compiled`) and what
# `representative_rows` reads extents from. Values carry the SSA names the printed program shows.


@dataclass(frozen=True)
class Weight:
    """One weight argument of a decoder program: its SSA name, its Hugging Face name under the
    layer (`self_attn.q_proj.weight`), its shape and its tensor-parallel role."""

    arg: str
    name: str
    shape: tuple
    role: object


def _attention_weights(spec: ModelSpec) -> list[Weight]:
    D, H, KV, hd = spec.hidden, spec.heads, spec.kv_heads, spec.head_dim
    col, row, rep = tp.COLUMN, tp.ROW, tp.REPLICATED
    a = "self_attn."
    ws: list[Weight] = []
    if spec.fused_qkv:
        ws.append(Weight("wqkv", a + "qkv_proj.weight", ((H + 2 * KV) * hd, D), col))
        if spec.qkv_bias:
            ws.append(Weight("bqkv", a + "qkv_proj.bias", ((H + 2 * KV) * hd,), col))
    else:
        for p, rows in (("q", H * hd), ("k", KV * hd), ("v", KV * hd)):
            ws.append(Weight(f"w{p}", f"{a}{p}_proj.weight", (rows, D), col))
        if spec.qkv_bias:
            for p, rows in (("q", H * hd), ("k", KV * hd), ("v", KV * hd)):
                ws.append(Weight(f"b{p}", f"{a}{p}_proj.bias", (rows,), col))
    if spec.qk_norm == "head":
        ws += [Weight("wqn", a + "q_norm.weight", (hd,), rep), Weight("wkn", a + "k_norm.weight", (hd,), rep)]
    elif spec.qk_norm == "full":
        ws += [Weight("wqn", a + "q_norm.weight", (H * hd,), rep), Weight("wkn", a + "k_norm.weight", (KV * hd,), rep)]
    ws.append(Weight("wo", a + "o_proj.weight", (D, H * hd), row))
    if spec.o_bias:
        ws.append(Weight("bo", a + "o_proj.bias", (D,), rep))
    return ws


def _mlp_weights(spec: ModelSpec) -> list[Weight]:
    D, F = spec.hidden, spec.intermediate
    col, row, rep = tp.COLUMN, tp.ROW, tp.REPLICATED
    if spec.fused_gate_up:
        ws = [Weight("wgu", "mlp.gate_up_proj.weight", (2 * F, D), col)]
        ws += [Weight("bgu", "mlp.gate_up_proj.bias", (2 * F,), col)] if spec.mlp_bias else []
    else:
        ws = [Weight("wg", "mlp.gate_proj.weight", (F, D), col), Weight("wu", "mlp.up_proj.weight", (F, D), col)]
        ws += [Weight("bg", "mlp.gate_proj.bias", (F,), col), Weight("bu", "mlp.up_proj.bias", (F,), col)] if spec.mlp_bias else []
    ws.append(Weight("wd", "mlp.down_proj.weight", (D, F), row))
    if spec.mlp_bias:
        ws.append(Weight("bd", "mlp.down_proj.bias", (D,), rep))
    return ws


_NORM_ARGS = ("w_in", "w_attn_post", "w_post", "w_mlp_post")  # the order of ModelSpec.norms


def decoder_weights(spec: ModelSpec) -> list[Weight]:
    """A decoder program's weight arguments in order (after x and the positions)."""
    norm = [Weight(arg, f"{name}.weight", (spec.hidden,), tp.REPLICATED) if name else None
            for arg, name in zip(_NORM_ARGS, spec.norms)]
    return [w for w in (norm[0], *_attention_weights(spec), norm[1], norm[2], *_mlp_weights(spec), norm[3]) if w]


class _Program:
    """One nn program under construction: a `FunctionBuilder` whose arguments are named tensors of
    the spec's element type (`"i32"` vectors for ids / positions / segments / targets), plus the
    spellings of the ops the families share (a norm with the spec's eps / offset, a linear with
    its bias, ...). `p[name]` is an argument; every built value gets the SSA name it is given."""

    def __init__(self, spec: ModelSpec, name: str, args: list[tuple[str, tuple, str | None]]):
        self.spec = spec
        self.fb = FunctionBuilder(name, *[(n, shape, dtype or spec.element) for n, shape, dtype in args])
        self.nn = self.fb.nn
        self.args = dict(zip([n for n, _, _ in args], self.fb.args))

    def __getitem__(self, name: str):
        return self.args[name]

    @staticmethod
    def named(name: str, value):
        value.name_hint = name
        return value

    def rms_norm(self, out: str, x, w):
        return self.named(out, self.nn.rms_norm(x, w, eps=self.spec.eps, offset=self.spec.norm_offset))

    def linear(self, out: str, x, w, bias=None):
        """`out = x @ w.T (+ bias)`: the bias as an `nn.add` of a rank-1 operand (a GEMM epilogue)."""
        if bias is None:
            return self.named(out, self.nn.linear(x, w))
        y = self.named(f"{out}_nb", self.nn.linear(x, w))
        return self.named(out, self.nn.add(y, bias))

    def scale(self, out: str, x, factor: float):
        return self.named(out, self.nn.scale(x, factor=factor))

    def returns(self, *values) -> str:
        """End the function; its printed text (verified first: a program the builder got wrong is
        a located CompileError, not a parse error later)."""
        self.fb.returns(*values)
        self.fb.module  # verifies
        stream = io.StringIO()
        Printer(stream=stream).print_op(self.fb.func)
        return stream.getvalue() + "\n"


def _weight_args(ws: list[Weight]) -> list[tuple[str, tuple, None]]:
    return [(w.arg, w.shape, None) for w in ws]


def _rope(p: _Program, spec: ModelSpec, layer: LayerKind, x, pos):
    """The one place a decoder program rotates q/k (`nn.rope` over the q and k heads of the
    packed [q | k | v] rows): the per-layer RoPE parameters (`LayerKind`) become its properties.
    The model's own frequencies are used where this layer rotates by the model's base
    (`ModelSpec.inv_freq`)."""
    # the layer's own frequencies (a scaled or per-type RoPE), else the model's where this layer
    # rotates by the model's base (ModelSpec.inv_freq); a partial RoPE's rotary_dim and a scaled
    # one's magnitude (LayerKind), written only where they differ from nn.rope's defaults
    freqs = layer.inv_freq
    if freqs is None and spec.inv_freq is not None and layer.theta == spec.theta:
        freqs = spec.inv_freq
    extra = {}
    if layer.rotary_dim is not None:
        extra["rotary_dim"] = layer.rotary_dim
    if layer.rope_scaling != 1.0:
        extra["scaling"] = layer.rope_scaling
    return p.named("r", p.nn.rope(x, pos, head_dim=spec.head_dim, rotary_heads=spec.heads + spec.kv_heads,
                                  theta=layer.theta, style=spec.rope_style, inv_freq=freqs, **extra))


def _attention(p: _Program, spec: ModelSpec, layer: LayerKind, seq_len: int, qkv, segments=None):
    """`nn.attention` with the spec's optional properties where they differ from the default."""
    # a window of at least the sequence sees every earlier key: a full causal layer. A program of
    # run-time rows is written at a representative count R of its bucket (R > hi / 2) and runs
    # sequences up to hi < 2 R: it keeps the window unless it covers 2 R (the attention runtime
    # drops a window that covers the call's sequence)
    window = layer.window if layer.window is not None and layer.window < 2 * seq_len else 0
    return p.named("y", p.nn.attention(qkv, spec.heads, spec.kv_heads, spec.head_dim, seq_len, True,
                                       scale=spec.attention_scale, window=window,
                                       softcap=spec.attention_softcap or 0.0, segments=segments))


def _attention_block(p: _Program, spec: ModelSpec, seq_len: int, h, layer: LayerKind | None = None):
    """The attention half of a decoder layer from the normalized rows `h` to the output
    projection `a` [tokens, hidden] (its weights are `p`'s arguments of `_attention_weights`).
    With `spec`'s heads those of one tensor-parallel shard, it is that shard's part (its heads,
    its columns of wo). The attention reads the batch's `seg` [tokens] i32 (documents, padding
    rows) where `p` has that argument."""
    layer = layer or spec.layer(0)
    args = p.args
    if spec.fused_qkv:
        qkv = p.linear("qkv", h, p["wqkv"], args.get("bqkv"))
    else:
        q, k, v = (p.linear(n, h, p[f"w{n}"], args.get(f"b{n}")) for n in ("q", "k", "v"))
        if spec.qk_norm == "full":  # one RMSNorm over all q heads' columns, one over all k heads'
            q, k = p.rms_norm("qn", q, p["wqn"]), p.rms_norm("kn", k, p["wkn"])
        qkv = p.named("qkv", p.nn.concat(q, k, v, axis=1))
    if spec.qk_norm == "head":
        H, KV, hd = spec.heads, spec.kv_heads, spec.head_dim
        norm = dict(eps=spec.eps, offset=spec.norm_offset)
        qkv = p.named("qhn", p.nn.head_rms_norm(qkv, p["wqn"], head_dim=hd, heads=H, first_head=0, **norm))
        qkv = p.named("khn", p.nn.head_rms_norm(qkv, p["wkn"], head_dim=hd, heads=KV, first_head=H, **norm))
    if layer.rope:
        qkv = _rope(p, spec, layer, qkv, p["pos"])
    y = _attention(p, spec, layer, seq_len, qkv, args.get("seg"))
    return p.linear("a", y, p["wo"], args.get("bo"))


def _mlp_block(p: _Program, spec: ModelSpec, h):
    """The gated MLP from the normalized rows `h` to the down projection `dn` [tokens, hidden]
    (its weights are `p`'s arguments of `_mlp_weights`; with `spec.intermediate` one shard's
    columns, that shard's part: its gate/up rows and down columns)."""
    args = p.args
    approximate = "tanh" if spec.activation == "gelu_tanh" else "none"
    if spec.fused_gate_up:  # [gate | up] columns of one GEMM: the packed form itself
        z = p.linear("z", h, p["wgu"], args.get("bgu"))
        m = p.nn.swiglu(z) if spec.activation == "silu" else p.nn.geglu(z, approximate=approximate)
    else:  # as Hugging Face writes it: nn-fuse-siblings packs the pair
        g = p.linear("g", h, p["wg"], args.get("bg"))
        u = p.linear("u", h, p["wu"], args.get("bu"))
        s = p.named("s", p.nn.silu(g) if spec.activation == "silu" else p.nn.gelu(g, approximate=approximate))
        m = p.nn.mul(s, u)
    return p.linear("dn", p.named("m", m), p["wd"], args.get("bd"))


def _rows_args(spec: ModelSpec, tokens: int, first: str, segments: bool) -> list[tuple[str, tuple, str | None]]:
    return [(first, (tokens, spec.hidden), None), ("pos", (tokens,), "i32"), *([("seg", (tokens,), "i32")] if segments else [])]


def decoder_program(spec: ModelSpec, tokens: int, seq_len: int, layer: int = 0, segments: bool = False,
                    long_rope: bool = False) -> str:
    """Decoder layer `layer` as Hugging Face computes it, attention included: x -> x'. Layers of
    equal `LayerKind`s have equal programs (compiled once). With `segments` it takes the batch's
    `seg` [tokens] i32 after `pos` (a padded or packed batch); `long_rope`: a longrope layer's
    program for calls past its original context (`LayerKind.long_inv_freq`)."""
    kind = spec.layer(layer)
    if long_rope and kind.long_inv_freq is not None:
        kind = replace(kind, inv_freq=kind.long_inv_freq)
    p = _Program(spec, "decoder_layer", _rows_args(spec, tokens, "x", segments) + _weight_args(decoder_weights(spec)))
    pre_attn, post_attn, pre_mlp, post_mlp = spec.norms
    x = p["x"]
    h = p.rms_norm("h", x, p["w_in"]) if pre_attn else x
    a = _attention_block(p, spec, seq_len, h, kind)
    if post_attn:
        a = p.rms_norm("an", a, p["w_attn_post"])
    if spec.residual_scale != 1.0:
        a = p.scale("as", a, spec.residual_scale)
    x1 = p.named("x1", p.nn.add(x, a))
    h1 = p.rms_norm("h1", x1, p["w_post"]) if pre_mlp else x1
    d = _mlp_block(p, spec, h1)
    if post_mlp:
        d = p.rms_norm("dnn", d, p["w_mlp_post"])
    if spec.residual_scale != 1.0:
        d = p.scale("ds", d, spec.residual_scale)
    return p.returns(p.named("x2", p.nn.add(x1, d)))


# ---------------------------------------------------------------- tensor-parallel segments
# Under tensor parallelism (coda_ir/torch/tensor_parallel.py) a decoder layer runs as these
# programs with collectives between them: the residual stream holds this rank's rows of the
# sequence; the attention and MLP segments run on all rows (gathered) over this rank's heads
# and columns and return partial sums of their output projections, whose pieces are folded
# (in rank order) with the residual and the next norm in one row kernel.


def tp_attention_program(spec: ModelSpec, tokens: int, seq_len: int, segments: bool = False) -> str:
    """Normalized rows h [tokens, hidden] -> this shard's output projection (a partial sum)."""
    p = _Program(spec, "tp_attention", _rows_args(spec, tokens, "h", segments) + _weight_args(_attention_weights(spec)))
    return p.returns(_attention_block(p, spec, seq_len, p["h"]))


def tp_mlp_program(spec: ModelSpec, tokens: int) -> str:
    """Normalized rows h [tokens, hidden] -> this shard's down projection (a partial sum)."""
    p = _Program(spec, "tp_mlp", [("h", (tokens, spec.hidden), None)] + _weight_args(_mlp_weights(spec)))
    return p.returns(_mlp_block(p, spec, p["h"]))


def tp_fold_program(spec: ModelSpec, rows: int, pieces: int, *, norm: bool, keep_sum: bool = True) -> str:
    """This rank's rows: x + piece_0 + ... + piece_{pieces-1} (the reduce-scatter's pieces of
    a row-parallel GEMM, folded in rank order) and, with `norm`, the next RMSNorm of that sum
    (its statistics taken here, on whole local rows). Returns the sum (with `keep_sum`) and/or
    the normalized rows. `pieces` = 0: the norm of x alone."""
    if not (keep_sum or norm) or (not norm and not pieces):
        raise ValueError("tp_fold_program: nothing to compute")
    D = spec.hidden
    args = [("x", (rows, D), None)] + [(f"p{r}", (rows, D), None) for r in range(pieces)]
    p = _Program(spec, "tp_fold_norm" if norm else "tp_fold", args + ([("w", (D,), None)] if norm else []))
    total = p["x"]
    for r in range(pieces):
        total = p.named(f"s{r}", p.nn.add(total, p[f"p{r}"]))
    results = [total] if keep_sum else []
    if norm:  # the plain norm of the LLaMA / Qwen3 blocks tensor parallelism runs (no offset)
        results.append(p.named("h", p.nn.rms_norm(total, p["w"], eps=spec.eps)))
    return p.returns(*results)


def embedding_scale(spec: ModelSpec) -> float:
    """The embedding's multiplier as the model applies it: Gemma's sqrt(hidden) rounded to the
    weights' dtype first (its buffer is cast with the model), Granite's as the float it is."""
    if spec.embed_scale_rounded:
        return float(torch.tensor(spec.embed_scale, dtype=torch.float64).to(spec.dtype))
    return spec.embed_scale


def embedding_program(spec: ModelSpec, tokens: int) -> str:
    p = _Program(spec, "embed_tokens", [("ids", (tokens,), "i32"), ("w", (spec.vocab, spec.hidden), None)])
    scale = embedding_scale(spec)
    if scale == 1.0:
        return p.returns(p.named("x", p.nn.embedding(p["ids"], p["w"])))
    return p.returns(p.scale("x", p.named("x0", p.nn.embedding(p["ids"], p["w"])), scale))


VOCAB_ALIGNMENT = 64
"""A loss's LM head runs on a vocabulary padded up to a multiple of this many rows (zero weight
rows, `nn.cross_entropy {classes}` keeping them out of the softmax): an odd vocabulary (Granite's
49155, any tokenizer grown by a pad token) otherwise leaves the logits' rows unaligned, so the
head's GEMMs miss TMA and cuBLAS's aligned kernels and its passes load one element at a time
(bench/RESULTS.md sessions 18 and 21). 64 columns keep bf16 rows 128-byte aligned."""


def padded_vocab(spec: ModelSpec, loss: bool) -> int:
    """The LM head's row count in the programs of a loss (`loss`): the vocabulary rounded up to
    VOCAB_ALIGNMENT; the logits a caller asks for (no loss) keep the vocabulary's width."""
    return -(-spec.vocab // VOCAB_ALIGNMENT) * VOCAB_ALIGNMENT if loss else spec.vocab


def head_program(spec: ModelSpec, tokens: int, *, loss: bool, reduction: str = "mean") -> str:
    """Final RMSNorm, LM head and (with `loss`) the cross-entropy over non-ignored targets, their
    mean or (`reduction="sum"`, for `num_items_in_batch`) their sum. A loss's head weight has
    `padded_vocab` rows, the ones past the vocabulary zero and no class (`classes`)."""
    M, D, V = tokens, spec.hidden, padded_vocab(spec, loss)
    args = [("x", (M, D), None), ("w_norm", (D,), None), ("w_lm", (V, D), None)]
    p = _Program(spec, "lm_head_loss" if loss else "lm_head_logits", args + ([("targets", (M,), "i32")] if loss else []))
    h = p.rms_norm("h", p["x"], p["w_norm"])
    # logits -> (times logits_scale) -> (soft-capped): the last step's result is `logits`
    maps = [lambda x: p.nn.scale(x, factor=spec.logits_scale)] if spec.logits_scale != 1.0 else []
    maps += [lambda x: p.nn.softcap(x, cap=spec.logits_softcap)] if spec.logits_softcap is not None else []
    names = [f"logits{i}" for i in range(len(maps))] + ["logits"]
    logits = p.named(names[0], p.nn.linear(h, p["w_lm"]))
    for step, name in zip(maps, names[1:]):
        logits = p.named(name, step(logits))
    if not loss:
        return p.returns(logits)
    classes = spec.vocab if V != spec.vocab else None
    return p.returns(p.named("loss", p.nn.cross_entropy(logits, p["targets"], ignore_index=IGNORE_INDEX,
                                                        reduction=reduction, classes=classes)))


# ============================================================================ compiled programs

_COMPILED: dict[tuple[str, str | None], CodaFunction] = {}
_COMPILED_LOCK = threading.Lock()


def _compiled(program: str, what: str, pipeline: str | None, progress: bool, remarks: bool) -> CodaFunction:
    """The CodaFunction of `program`, compiled once per process (units with equal programs, e.g.
    every decoder layer of a model, share it)."""
    key = (program, pipeline)
    with _COMPILED_LOCK:
        fn = _COMPILED.get(key)
        if fn is None:
            start = time.perf_counter()
            if progress:
                print(f"coda-ir: compiling {what} ...", file=sys.stderr, flush=True)
            # the cyclic garbage collector paused: a compile allocates ~10^5 IR objects, whose
            # collections rescan the training process's whole heap (torch, transformers): a LLaMA
            # layer's first compile took 0.72 s with it, 0.49 s without (CPU, 2026-11-28)
            collecting = gc.isenabled()
            gc.disable()
            try:
                fn = CodaFunction(program, pipeline=pipeline, remarks=remarks)
                if fn.differentiable:
                    # training needs both: compile them now, inside the progress message, not at
                    # the first backward (the variant a training step uses: donating its saved
                    # tensors, as `CodaFunction._backward` does when the graph is not kept)
                    fn.forward_module
                    fn.backward_module([True] * len(fn.float_args), donate=bool(fn.donated_arguments()),
                                       hand_over=fn.num_saved > 0)
            finally:
                if collecting:
                    gc.enable()
            if progress:
                source = " (read back from the compile cache)" if fn.from_cache else ""
                print(f"coda-ir: compiled {what} in {time.perf_counter() - start:.1f} s{source}", file=sys.stderr,
                      flush=True)
            _COMPILED[key] = fn
        return fn


# ---------------------------------------------------------------- run-time token counts
# A unit's program serves every token count of a bucket: it is written at a representative row
# count R (`#coda.rows<count = R, lo, hi>`, coda.RowsAttr) and its host code reads the call's
# rows, so a new [batch, seq] in a compiled bucket compiles nothing. R is a prime of the bucket
# dividing no other extent of the program: an extent that is a multiple of R is then a row
# extent and nothing else (the attention's log-sum-exp has R * heads entries).

ROW_BUCKET_MIN = 16  # the smallest bucket: every token count up to 16
ROW_COUNT_MIN = 11  # the smallest representative count (a small prime would divide model extents)


def row_bucket(tokens: int) -> tuple[int, int]:
    """`(lo, hi)`: the token counts that share a program with `tokens` (hi the next power of two,
    lo = hi / 2 + 1; the first bucket is 1..ROW_BUCKET_MIN)."""
    hi = max(ROW_BUCKET_MIN, 1 << max(tokens - 1, 0).bit_length())
    return (1 if hi == ROW_BUCKET_MIN else hi // 2 + 1), hi


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % p for p in range(2, int(n ** 0.5) + 1))


_EXTENT = re.compile(r"tensor<((?:\d+x)+)")


def representative_rows(program_at_one_row: str, lo: int, hi: int) -> int | None:
    """The row count to write a bucket's program at: the largest prime in [lo, hi], at least
    ROW_COUNT_MIN, that divides no extent of the program written for one row (its static extents,
    twice each: the packed gate/up GEMM of nn-fuse-siblings, and half each: a RoPE table's head_dim
    / 2 columns, a gated product's F of 2F) -- so that a multiple of it can only be a row extent.
    None where no prime of the bucket qualifies (the unit then compiles per exact shape)."""
    extents = {int(d) for dims in _EXTENT.findall(program_at_one_row) for d in dims.split("x") if d}
    extents |= {2 * e for e in extents} | {e // 2 for e in extents if e % 2 == 0}
    for count in range(hi, max(lo, ROW_COUNT_MIN) - 1, -1):
        if _is_prime(count) and all(e % count for e in extents):
            return count
    return None


def _symbolic(program: str, count: int, lo: int, hi: int) -> str:
    """`program` in a module whose row count is a run-time one (`#coda.rows`)."""
    body = "\n".join("  " + line if line else line for line in program.splitlines())
    return (f"builtin.module attributes {{coda.rows = #coda.rows<count = {count}, lo = {lo}, hi = {hi}>}} {{\n"
            f"{body}\n}}\n")


def _static(value, what: str) -> int:
    if not isinstance(value, int):
        raise ArgumentError(
            f"from_hf: {what} is symbolic ({value}); coda-ir programs have static shapes: "
            "use torch.compile(..., dynamic=False)"
        )
    return value


@dataclass(frozen=True)
class Options:
    pipeline: str | None
    progress: bool
    remarks: bool


class _Unit(torch.nn.Module):
    """A fusion unit: compiled programs (one per shape) over parameters of submodules it owns."""

    def __init__(self, spec: ModelSpec, options: Options, where: str):
        super().__init__()
        self.spec, self.pipeline, self.progress, self.remarks = spec, options.pipeline, options.progress, options.remarks
        self.where = f"from_hf model: {where}"  # how errors name this unit
        self._functions: dict[tuple, CodaFunction] = {}
        self._buckets: dict[tuple, tuple[int | None]] = {}  # (kind, bucket's lo, dtype) -> (its count,)
        self._calls: dict[tuple, CodaFunction | BoundFunction] = {}  # (kind, tokens, seq_len, dtype) -> what runs it

    def _program(self, spec: ModelSpec, kind: str, tokens: int, seq_len: int) -> tuple[str, str]:
        raise NotImplementedError

    def named_weights(self) -> list[tuple[str, torch.Tensor, object]]:
        """`(Hugging Face name, parameter, tensor-parallel role)` of the parameters this unit's
        kernels read, in the program's argument order: exactly `self.parameters()` (FSDP2
        gathers a unit's parameters for its kernels and nothing else). The role is the
        placement the Megatron layout gives the weight (`tensor_parallel.layout_of`)."""
        raise NotImplementedError

    def weights(self) -> list[torch.Tensor]:
        return [t for _, t, _ in self.named_weights()]

    def layout(self) -> tp.TensorParallelLayout | None:
        """The tensor-parallel layout read off the weights' placements now (None: not tensor
        parallel), or an ArgumentError naming a weight placed otherwise than the layout needs."""
        return tp.layout_of(self.where, self.named_weights())

    @torch.compiler.assume_constant_result
    def _prepare(self, kind: str, tokens: int, seq_len: int, dtype: torch.dtype) -> bool:
        """Compile (once) the program this unit runs at this shape: the one of its bucket of token
        counts (`row_bucket`), written for a run-time row count, or where the bucket has no
        usable representative count (`representative_rows`) the one of this exact shape. Under
        `torch.compile` this runs at trace time and counts as a constant, so Dynamo traces only
        the compiled program's custom ops (no graph break)."""
        call = (kind, tokens, seq_len, dtype)
        if call in self._calls:
            return True
        key = self._key(kind, tokens, seq_len, dtype)
        if key not in self._functions:
            spec = replace(self.spec, dtype=dtype)
            if key[1] == "bucket":
                lo, hi, count = key[2]
                program, what = self._program(spec, kind, count, count)
                program = _symbolic(program, count, lo, hi)
                what = re.sub(r"\(\d+ tokens(, sequences of \d+)?", f"(every {lo}..{hi} tokens", what)
            else:
                program, what = self._program(spec, kind, tokens, seq_len)
            self._functions[key] = _compiled(program, what, self.pipeline, self.progress, self.remarks)
        fn = self._functions[key]
        # a program of run-time rows whose attention takes the call's sequence length: bound to it
        self._calls[call] = fn.bind(seq_len) if fn.sizes else fn
        return True

    def _key(self, kind: str, tokens: int, seq_len: int, dtype: torch.dtype) -> tuple:
        """The compile key of a call: `(kind, "bucket", (lo, hi, count), dtype)` for the program of
        the token count's bucket, `(kind, "exact", (tokens, seq_len), dtype)` where the bucket
        has no representative count."""
        lo, hi = row_bucket(tokens)
        found = self._buckets.get((kind, lo, dtype))
        if found is None:
            count = representative_rows(self._program(replace(self.spec, dtype=dtype), kind, 1, 1)[0], lo, hi)
            found = self._buckets[(kind, lo, dtype)] = (count,)
        if found[0] is None:
            return (kind, "exact", (tokens, seq_len), dtype)
        return (kind, "bucket", (lo, hi, found[0]), dtype)

    def _dtype(self, weights: list[torch.Tensor]) -> torch.dtype:
        dtypes = {w.dtype for w in weights}
        if len(dtypes) != 1 or next(iter(dtypes)) not in _MLIR_DTYPES:
            raise ArgumentError(f"{self.where}: the weights must all be one of float32, bfloat16, float16; "
                                f"got {sorted(map(str, dtypes))}")
        return next(iter(dtypes))

    def function(self, kind: str, tokens: int, seq_len: int,
                 weights: list[torch.Tensor] | None = None) -> CodaFunction | BoundFunction:
        """The compiled program this unit runs for `tokens` rows in sequences of `seq_len`, in
        the dtype its weights have *now*: FSDP2's `MixedPrecisionPolicy(param_dtype=...)` runs
        the forward and backward on weights cast from the (sharded) master copies, so a unit
        of a float32 model may run its bfloat16 program. (`weights`: `self.weights()` where the
        caller has them.)"""
        dtype = self._dtype(self.weights() if weights is None else weights)
        self._prepare(kind, _static(tokens, "the token count"), _static(seq_len, "the sequence length"), dtype)
        return self._calls[(kind, tokens, seq_len, dtype)]

    def segment(self, key: tuple, build) -> CodaFunction:
        """A tensor-parallel segment's compiled program, `build() -> (program, what)`, once per key
        (the shard's shapes and dtype; every decoder unit of a model compiles the same programs,
        shared through `_compiled`)."""
        fn = self._functions.get(key)
        if fn is None:
            program, what = build()
            fn = self._functions[key] = _compiled(program, what, self.pipeline, self.progress, self.remarks)
        return fn

    def fold(self, spec: ModelSpec, rows: int, pieces: int, *, norm: bool, keep_sum: bool = True) -> CodaFunction:
        """The tensor-parallel row kernel: residual + the reduce-scatter's pieces (+ the next norm)."""
        what = (f"a tensor-parallel fold of {pieces} pieces" + (" and the norm" if norm else "")
                + ("" if keep_sum else ", the normalized rows only") + f" ({rows} rows, {spec.element})")
        return self.segment(("fold", rows, pieces, norm, keep_sum, spec.dtype),
                            lambda: (tp_fold_program(spec, rows, pieces, norm=norm, keep_sum=keep_sum), what))


class EmbeddingUnit(_Unit):
    """`nn.embedding` over the model's `embed_tokens.weight`."""

    def __init__(self, embed_tokens: torch.nn.Module, spec: ModelSpec, options: Options):
        super().__init__(spec, options, "embed")
        self.embed_tokens = embed_tokens

    def _program(self, spec, kind, tokens, seq_len):
        return embedding_program(spec, tokens), f"the token embedding ({tokens} tokens, {spec.element})"

    def named_weights(self):
        # read whole (every rank embeds every row; under tensor parallelism the first decoder
        # unit keeps its own rows, and every rank gets the whole gradient): plain or replicated
        return [("model.embed_tokens.weight", self.embed_tokens.weight, None)]

    def forward(self, ids: torch.Tensor, seq_len: int, tied_weight: torch.Tensor | None = None) -> torch.Tensor:
        """`tied_weight`: the embedding's alias of a weight the LM head shares (`TiedWeight`); its
        gradient then leaves as the rows it has, which `TiedWeight` adds into the head's."""
        self.layout()  # a vocabulary-sharded embedding is refused by name
        if tied_weight is not None:
            x = _RowGradientEmbedding.apply(ids, tied_weight)
            scale = self._scale(x.dtype)
            if scale != 1.0:  # the program's nn.scale (one rounding of the fp32 product, as torch's)
                x = x * scale
        else:
            x = self.function("embed", ids.shape[0], seq_len)(ids, *map(tp.local, self.weights()))
        padding_idx = getattr(self.embed_tokens, "padding_idx", None)
        if padding_idx is not None and x.requires_grad:
            # torch.nn.Embedding(padding_idx=p) gives row p no gradient: drop the upstream
            # gradient of the rows that look it up before it reaches the embedding backward
            x = _NoGradientRows.apply(x, ids, padding_idx)
        return x

    def _scale(self, dtype: torch.dtype) -> float:
        """`embedding_scale` of the spec in `dtype`, once per dtype (a step's host time otherwise)."""
        scales = self.__dict__.setdefault("_scales", {})
        scale = scales.get(dtype)
        if scale is None:
            scale = scales[dtype] = embedding_scale(replace(self.spec, dtype=dtype))
        return scale


class TiedWeight(torch.autograd.Function):
    """The tied embedding / LM-head weight as two aliases, one per user, so that their gradients
    meet here instead of in autograd's sum of two dense [V, D] tensors (issue 11: at LLaMA-1B a
    0.51 ms add, a 0.16 ms zero fill and PyTorch's dense embedding backward, ~0.85 ms of a step).
    The embedding's gradient arrives as its rows (a sparse COO tensor from
    `_RowGradientEmbedding`); the head's dense gradient takes them in place
    (`library.embedding_grad_into`: sorted runs, fp32, no atomics, no host sync).

    Internal to `CodaCausalLM`: the in-place update relies on the head alias's gradient being a
    tensor nobody else holds -- the head unit's compiled backward returns a fresh one. A
    caller that passed its own gradient tensor through, e.g. `backward(..., grad_tensors=)` of
    `head_alias.clone()`, would see it updated."""

    @staticmethod
    def forward(ctx, weight: torch.Tensor):
        return weight.view_as(weight), weight.view_as(weight)

    @staticmethod
    def backward(ctx, grad_embedding, grad_head):
        from coda_ir.runtime.library import embedding_grad_into

        if grad_embedding is None:
            return grad_head
        if not grad_embedding.is_sparse or torch.is_grad_enabled():
            # some other use of the embedding's alias, or a backward that records a graph
            # (create_graph=True: no in-place update of a recorded gradient): the plain sum
            dense = grad_embedding.to_dense() if grad_embedding.is_sparse else grad_embedding
            return dense if grad_head is None else grad_head + dense
        if grad_head is None:
            grad = torch.zeros(grad_embedding.shape, dtype=grad_embedding.dtype, device=grad_embedding.device)
        elif grad_head.is_contiguous() and grad_head._base is None:
            grad = grad_head  # the head backward's own fresh output: nobody else holds it
        else:
            grad = grad_head.clone(memory_format=torch.contiguous_format)
        rows = grad_embedding._values()
        return embedding_grad_into(grad, rows, grad_embedding._indices()[0])


class _RowGradientEmbedding(torch.autograd.Function):
    """`weight[ids]` (`library.embedding`) whose weight gradient is its rows as an uncoalesced
    sparse COO tensor ([N] ids, [N, D] upstream rows): no dense [V, D] tensor. Only ever applied
    to `TiedWeight`'s alias, which turns it dense."""

    @staticmethod
    def forward(ctx, ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        from coda_ir.runtime.library import embedding

        ctx.save_for_backward(ids)
        ctx.weight_shape = weight.shape
        return embedding(ids, weight)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (ids,) = ctx.saved_tensors
        # the ids were range-checked before the forward returned; an explicit opt-out of the
        # invariant check (it would sync), which PyTorch 2.11 otherwise warns about
        with torch.sparse.check_sparse_tensor_invariants(enable=False):
            rows = torch.sparse_coo_tensor(ids.long().unsqueeze(0), grad.contiguous(), ctx.weight_shape,
                                           check_invariants=False, is_coalesced=False)
        return None, rows


class _NoGradientRows(torch.autograd.Function):
    """Identity forward; the backward zeroes the upstream gradient of the rows whose id is
    `padding_idx` (the mask is made there: a kernel and its host time out of the forward)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, ids: torch.Tensor, padding_idx: int) -> torch.Tensor:
        ctx.save_for_backward(ids)
        ctx.padding_idx = padding_idx
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (ids,) = ctx.saved_tensors
        return grad.masked_fill((ids == ctx.padding_idx)[:, None], 0), None, None


def pack_rows(params: list[torch.nn.Parameter]) -> None:
    """Move `params` (same dtype, device and trailing shape) into one storage, back to back, so
    that the program's concatenation of them costs no copy (`library.concat`). The Parameter
    objects stay the same (optimizers and hooks keep working): only their `.data` moves, once.
    Moving the model afterwards (`.to(...)`) undoes it; the concatenation then copies (correct,
    one weight-sized copy per call)."""
    from coda_ir.runtime.library import adjacent_view

    if adjacent_view([p.detach() for p in params]) is not None:
        return
    first = params[0]
    if any(p.dtype != first.dtype or p.device != first.device or p.shape[1:] != first.shape[1:] for p in params):
        return
    with torch.no_grad():
        packed = torch.cat([p.detach() for p in params], dim=0)
        start = 0
        for p in params:
            p.data = packed[start:start + p.shape[0]]
            start += p.shape[0]


def _refuse_tensor_parallel(where: str, spec: ModelSpec) -> None:
    gaps = spec.tensor_parallel_gaps()
    if gaps:
        raise ArgumentError(f"{where}: tensor parallelism runs LLaMA / Qwen3 blocks; this {spec.family} model's "
                            f"{', '.join(gaps)} are not supported there (run it without a parallelize_module plan)")


def _child(module: torch.nn.Module, parts: list[str]):
    """`module.<parts[0]>.<parts[1]>...`: the submodules' and the parameter's own tables read
    directly (`nn.Module.__getattr__` reaches them only after a failed attribute lookup: a
    decoder unit's ~40 lookups a call cost ~30 us of host time that way); anything else (a
    parameter set to None, a property) by getattr, as before."""
    owner = module
    try:
        for part in parts[:-1]:
            owner = owner._modules[part]
        found = owner._parameters[parts[-1]]
    except (KeyError, AttributeError):
        found = None
    if found is not None:
        return found
    for part in parts:
        module = getattr(module, part)
    return module


class DecoderUnit(_Unit):
    """One decoder layer, attention included, over the Hugging Face layer's own parameters."""

    def __init__(self, layer: torch.nn.Module, spec: ModelSpec, options: Options, index: int = 0):
        super().__init__(spec, options, f"layers.{index}")
        self.layer = layer
        self.index = index
        self.hf_prefix = f"model.layers.{index}."
        self._weight_paths: tuple[ModelSpec, list] | None = None
        self.pack_weights()

    def pack_weights(self) -> None:
        """nn-fuse-siblings makes q/k/v and gate/up one GEMM each over their concatenated
        weights: with the weights back to back in one storage that concatenation is a view.
        Moves them there once (for a tensor-parallel plan's DTensors: their local shards)."""
        attn, mlp = self.layer.self_attn, self.layer.mlp
        groups = []
        if not self.spec.fused_qkv:  # a fused qkv_proj is one weight already
            groups.append([attn.q_proj, attn.k_proj, attn.v_proj])
        if not self.spec.fused_gate_up:
            groups.append([mlp.gate_proj, mlp.up_proj])
        for group in groups:
            for name in ("weight", "bias"):
                tensors = [getattr(m, name) for m in group]
                if all(t is not None for t in tensors):
                    pack_rows([t._local_tensor if tp.is_dtensor(t) else t for t in tensors])

    def _program(self, spec, kind, tokens, seq_len):
        masked = kind.startswith("layer_segments")
        long_rope = kind.endswith("+long_rope")
        layer_kind = spec.layer(self.index)
        return (decoder_program(spec, tokens, seq_len, self.index, segments=masked, long_rope=long_rope),
                f"a decoder layer ({tokens} tokens, sequences of {seq_len}, {spec.element}"
                + ("" if layer_kind == spec.layer(0) else f", layer {self.index}'s kind")
                + (", padded or packed" if masked else "") + (", longrope's long factors" if long_rope else "") + ")")

    def named_weights(self):
        # the parameters are looked up afresh each call (FSDP2 and optimizers may swap them); what
        # they are called is the spec's alone, derived once per spec
        paths = self._weight_paths
        if paths is None or paths[0] is not self.spec:
            paths = self._weight_paths = (self.spec, [(self.hf_prefix + w.name, w.name.split("."), w.role)
                                                      for w in decoder_weights(self.spec)])
        named = []
        for name, parts, role in paths[1]:
            named.append((name, _child(self.layer, parts), role))
        return named

    def forward(self, x: torch.Tensor, positions: torch.Tensor, seq_len: int, pieces: torch.Tensor | None = None,
                segments: torch.Tensor | None = None, rope_length: int | None = None):
        """x -> the next layer's x. Tensor parallel (DTensor weights): `x` is this rank's rows of
        the residual stream (all rows for the first unit) and `pieces` the previous unit's
        unfolded down-projection pieces; returns `(x1, pieces)` for the next unit to fold.
        `segments`: the batch's document id per row (padding -1), for a padded or packed batch
        (the program variant whose attention takes them; `batch_segments`). `rope_length`: the
        step's largest position + 1, which picks a longrope layer's short or long frequencies
        as Hugging Face's rotary embedding does per forward (`LayerKind.long_after`)."""
        named = self.named_weights()
        layout = tp.layout_of(self.where, named)
        if layout is None:
            weights = [t for _, t, _ in named]
            if pieces is not None:
                raise ArgumentError(f"{self.where}: the residual stream reaching this unit is split over tensor-parallel "
                                    "ranks, but its weights are not DTensors: plan every decoder unit")
            long_after = self.spec.layer(self.index).long_after
            variant = "+long_rope" if long_after is not None and rope_length is not None and rope_length > long_after else ""
            if segments is not None:
                return self.function("layer_segments" + variant, x.shape[0], seq_len, weights)(x, positions, segments,
                                                                                              *weights)
            return self.function("layer" + variant, x.shape[0], seq_len, weights)(x, positions, *weights)
        return self._forward_tensor_parallel(layout, x, positions, seq_len, pieces, segments)

    def _forward_tensor_parallel(self, layout, x, positions, seq_len, pieces, segments=None):
        _refuse_tensor_parallel(self.where, self.spec)
        T, H, KV = layout.degree, self.spec.heads, self.spec.kv_heads
        tp.check_heads(f"<{self.where}>", H, KV, T)
        tokens = _static(positions.shape[0], "the token count")
        rows = layout.rows(tokens, self.where)
        # column/row-parallel weights: the local shard; replicated ones: the local copy whose
        # gradient (a partial over this rank's rows or heads) is summed over the ranks
        w = [tp.replicated(t, layout) if role == tp.REPLICATED else tp.local(t) for _, t, role in self.named_weights()]
        w_in, w_post = w[0], w[-4]
        attention_weights, mlp_weights = w[1:-4], w[-3:]
        spec = replace(self.spec, heads=H // T, kv_heads=KV // T, intermediate=mlp_weights[0].shape[0],
                       dtype=self._dtype(w))
        what = f"({tokens} tokens, sequences of {seq_len}, {spec.element}; tensor-parallel shard of {T})"
        masked = segments is not None
        attention = self.segment(("attention", tokens, seq_len, spec, masked),
                                 lambda: (tp_attention_program(spec, tokens, seq_len, segments=masked),
                                          f"the attention segment {what}"))
        mlp = self.segment(("mlp", tokens, spec), lambda: (tp_mlp_program(spec, tokens), f"the MLP segment {what}"))
        if pieces is None:  # the first unit: keep this rank's rows of the embedding
            if x.shape[0] == tokens and T > 1:
                x = tp.scatter_rows(x, layout)
            h = self.fold(spec, rows, 0, norm=True, keep_sum=False)(x, w_in)
        else:
            x, h = self.fold(spec, rows, T, norm=True)(x, *pieces.unbind(0), w_in)
        partial = attention(tp.gather_rows(h, layout), positions, *([segments] if masked else []), *attention_weights)
        x1, h1 = self.fold(spec, rows, T, norm=True)(x, *tp.exchange_pieces(partial, layout).unbind(0), w_post)
        partial = mlp(tp.gather_rows(h1, layout), *mlp_weights)
        return x1, tp.exchange_pieces(partial, layout)


class HeadUnit(_Unit):
    """Final RMSNorm + LM head (+ cross-entropy): the logits of a loss never reach memory
    whole when the pipeline fuses the loss into the LM-head GEMM."""

    def __init__(self, norm: torch.nn.Module, lm_head: torch.nn.Module, spec: ModelSpec, options: Options):
        super().__init__(spec, options, "head")
        self.norm, self.lm_head = norm, lm_head

    def _program(self, spec, kind, tokens, seq_len):
        if kind == "loss":
            return head_program(spec, tokens, loss=True), f"the LM head and loss ({tokens} tokens, {spec.element})"
        if kind == "loss_sum":
            return (head_program(spec, tokens, loss=True, reduction="sum"),
                    f"the LM head and summed loss ({tokens} tokens, {spec.element})")
        return head_program(spec, tokens, loss=False), f"the LM head ({tokens} tokens, {spec.element})"

    def named_weights(self):
        lm_name = "model.embed_tokens.weight" if self.spec.tied else "lm_head.weight"
        return [("model.norm.weight", self.norm.weight, tp.REPLICATED),
                (lm_name, self.lm_head.weight, (tp.COLUMN, tp.REPLICATED))]

    def forward(self, x: torch.Tensor, targets: torch.Tensor | None, seq_len: int,
                pieces: torch.Tensor | None = None, tied_weight: torch.Tensor | None = None,
                reduction: str = "mean") -> torch.Tensor:
        """`tied_weight`: the head's alias of the weight it shares with the embedding (`TiedWeight`).
        `reduction`: the loss is the mean ("mean") or the sum ("sum") of the token losses."""
        kind = "loss" if reduction == "mean" else "loss_sum"
        layout = self.layout()
        if layout is None and pieces is not None:
            raise ArgumentError(f"{self.where}: the residual stream reaching the head is split over tensor-parallel ranks, "
                                "but model.norm.weight is not a DTensor: replicate it on their mesh (SequenceParallel() "
                                "in the plan) and plan the LM head (ColwiseParallel() or replicated)")
        if layout is not None and pieces is None:
            raise ArgumentError(f"{self.where}: the head's weights are DTensors but the decoder units are not tensor "
                                "parallel: plan the decoder units too (coda_ir.torch.parallelize)")
        if layout is None:
            weights = self.weights() if tied_weight is None else [self.norm.weight, tied_weight]
            if targets is None:
                return self.function("logits", x.shape[0], seq_len)(x, *weights)
            norm, lm = weights
            return self.function(kind, x.shape[0], seq_len)(x, norm, self._loss_head(lm), targets)
        return self._forward_tensor_parallel(layout, x, targets, seq_len, pieces, kind)

    def _loss_head(self, lm: torch.Tensor) -> torch.Tensor:
        """The head weight a loss's program takes: zero rows appended up to `padded_vocab` (a copy
        under autograd, whose backward drops the padding rows' gradient), or `lm` itself."""
        rows = padded_vocab(self.spec, loss=True)
        return lm if rows == lm.shape[0] else torch.nn.functional.pad(lm, (0, 0, 0, rows - lm.shape[0]))

    def _forward_tensor_parallel(self, layout, x, targets, seq_len, pieces, kind="loss"):
        from coda_ir.torch.vocab_parallel import CompileOptions, sharded_cross_entropy

        _refuse_tensor_parallel(self.where, self.spec)

        T, rows = layout.degree, x.shape[0]
        norm, lm = self.weights()
        spec = replace(self.spec, dtype=self._dtype([tp.local(norm), tp.local(lm)]))
        if tp.role_of(lm) == tp.REPLICATED:
            # every rank runs the whole head on all rows: the same loss and weight gradients on
            # every rank, and the same gradient of the gathered rows (each takes its own rows)
            x = self.fold(spec, rows, T, norm=False)(x, *pieces.unbind(0))
            x = tp.gather_rows(x, layout, partial_grads=False)
            if targets is None:
                return self.function("logits", x.shape[0], seq_len)(x, tp.local(norm), tp.local(lm))
            return self.function(kind, x.shape[0], seq_len)(x, tp.local(norm), self._loss_head(tp.local(lm)), targets)
        # vocabulary parallel: the norm on this rank's rows, all rows gathered, this rank's
        # vocabulary shard of the logits reduced to per-row partials (one [tokens, 3] exchange)
        h = self.fold(spec, rows, T, norm=True, keep_sum=False)(x, *pieces.unbind(0), tp.replicated(norm, layout))
        h = tp.gather_rows(h, layout)
        if targets is None:
            return tp.gather_columns(torch.matmul(h, tp.local(lm).t()), layout, self.spec.vocab)
        # the shard's loss partials in its LM-head GEMM's epilogue, its logits' gradient in the
        # dgrad GEMM's (docs/VOCAB_PARALLEL.md): the shard's logits are never stored
        return sharded_cross_entropy(h, tp.local(lm), targets, vocab_size=self.spec.vocab, group=layout.group,
                                     ignore_index=IGNORE_INDEX, reduction="mean" if kind == "loss" else "sum",
                                     options=CompileOptions(self.pipeline, self.progress, self.remarks))


def shifted_targets(labels: torch.Tensor) -> torch.Tensor:
    """Hugging Face's causal-LM targets: position s predicts labels[s + 1]; the last position of
    each sequence predicts nothing (ignore index). Flattened to int32 rows."""
    ignore = torch.full_like(labels[:, :1], IGNORE_INDEX)
    return torch.cat([labels[:, 1:], ignore], dim=1).reshape(-1).to(torch.int32)


def without_padding(attention_mask: torch.Tensor, segments: torch.Tensor, ids: torch.Tensor, positions: torch.Tensor,
                    targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """A training step's tokens without the padding nobody sees: `(ids, positions, targets,
    segments)` of the kept tokens, in order, as one packed row whose documents are the batch's
    rows (segment = row index), or None where padding is seen (`segments` holds -1) or there
    is none to drop.

    Where `batch_segments` made padding documents of its own (every padding row's target
    ignored, one run of tokens per row), a padding row reaches neither a token's attention nor
    the loss, and its gradient is zero: dropping it changes no loss and no gradient, and every
    GEMM, norm and attention of the step then runs on the tokens only (a 30%-padded batch:
    30% fewer rows). Each kept token keeps its position (RoPE: Hugging Face's position of it
    in the padded row) and its target (the shifted labels of the padded row: a row's last
    token predicts what the padding after it would, ignored). One device-to-host read of the
    kept count."""
    keep = attention_mask.to(device=ids.device, dtype=torch.bool).reshape(-1)
    seen, count = torch.stack([(segments < 0).any(), keep.sum()]).tolist()
    if seen or count == keep.numel():
        return None
    batch, seq = attention_mask.shape
    index = keep.nonzero().squeeze(1)
    rows = (index // seq).to(torch.int32)
    return ids[index], positions[index], targets.to(ids.device)[index], rows


class TokenCheck:
    """The range check of a step's `input_ids` (in [0, vocab)) and `labels` (in [0, vocab) or
    IGNORE_INDEX), started on the device without waiting: the flags travel to pinned host
    memory behind an event, and `raise_if_bad()` (called when the forward has been enqueued)
    waits only for that event, which sits before the step's kernels in the GPU queue, so the
    GPU never runs dry for it. Until then out-of-range ids are only ever clamped
    (`library.embedding`), never read out of bounds; the forward raises before returning."""

    def __init__(self, input_ids: torch.Tensor, labels: torch.Tensor | None, vocab: int,
                 flags: torch.Tensor | None = None):
        """`flags`: the int32 [2] range flags `library.step_tokens` made (ids, labels), else
        computed here."""
        self.vocab = vocab
        self.tensors = [("input_ids", input_ids)] + ([("labels", labels)] if labels is not None else [])
        if flags is None:
            flags = torch.stack([self._mask(name, t).any() for name, t in self.tensors])
        else:
            flags = flags[: len(self.tensors)]
        self.event = None
        if flags.is_cuda:
            self.flags = torch.empty(flags.shape, dtype=flags.dtype, pin_memory=True)
            self.flags.copy_(flags, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.flags = flags

    def raise_if_bad(self) -> None:
        if self.event is not None:
            self.event.synchronize()
        for (name, tensor), flag in zip(self.tensors, self.flags.tolist()):
            if flag:
                where = [int(i) for i in self._mask(name, tensor).nonzero()[0]]
                value = int(tensor[tuple(where)])
                allowed = f"[0, {self.vocab})" + (f" or the ignore index {IGNORE_INDEX}" if name == "labels" else "")
                raise ArgumentError(f"from_hf model: {name} holds {value} at {where}, expected values in {allowed}", name)

    def _mask(self, name: str, tensor: torch.Tensor) -> torch.Tensor:
        bad = (tensor < 0) | (tensor >= self.vocab)
        return bad & (tensor != IGNORE_INDEX) if name == "labels" else bad


# Hugging Face forward arguments that do not change the loss or the logits: accepted at these
# values (None: not given). Any other value, or any other argument, is an ArgumentError.
_NEUTRAL_KWARGS = {
    "return_dict": (None, True, False),
    "use_cache": (None, False),
    "output_attentions": (None, False),
    "output_hidden_states": (None, False),
    "logits_to_keep": (None, 0),
    "is_causal": (None, True),
    "inputs_embeds": (None,),
    "cache": (None,),
    "past_key_values": (None,),
}


# Accepted with any value: the Hugging Face models of these families ignore them too (a tokenizer
# may hand a Trainer `token_type_ids`).
_IGNORED_KWARGS = ("token_type_ids",)


def _neutral(name: str, value) -> bool:
    return any(value is v or (not isinstance(value, torch.Tensor) and type(value) is type(v) and value == v)
               for v in _NEUTRAL_KWARGS[name])


def _check_kwargs(kwargs: dict) -> None:
    """Every extra keyword argument of `CodaCausalLM.forward` is one that changes nothing."""
    for name, value in kwargs.items():
        if name in _IGNORED_KWARGS:
            continue
        if name not in _NEUTRAL_KWARGS:
            raise ArgumentError(f"from_hf model: forward() got the argument {name!r}, which coda-ir does not implement "
                                "(it takes input_ids, attention_mask, labels, position_ids, num_items_in_batch, "
                                "cu_seq_lens_q/k, max_length_q/k)", name)
        if not _neutral(name, value):
            allowed = " or ".join(repr(v) for v in _NEUTRAL_KWARGS[name])
            shown = "a tensor" if isinstance(value, torch.Tensor) else repr(value)
            raise ArgumentError(f"from_hf model: {name}={shown} is not implemented (training forward only: {name} "
                                f"must be {allowed})", name)


def _integer_tensor(value, name: str, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or value.dtype.is_floating_point or value.dtype.is_complex:
        got = f"a {value.dtype} tensor" if isinstance(value, torch.Tensor) else type(value).__name__
        raise ArgumentError(f"from_hf model: {name} must be {what}, got {got}", name)
    return value


def batch_segments(input_ids: torch.Tensor, attention_mask=None, position_ids=None, cu_seq_lens_q=None,
                   cu_seq_lens_k=None, *, labels: torch.Tensor | None = None, check: bool = True) -> torch.Tensor | None:
    """The document id of every token [batch * seq] (int32; -1: padding), as Hugging Face's
    attention would mask the batch, or None where it masks nothing beyond causality (the fast
    path: the plain decoder program, SDPA's own fused kernel).

    * `attention_mask` [batch, seq] (bool or integer 0/1): padding; a padded key is seen by no
      query (a padding query sees its row's tokens, as Hugging Face's mask, which masks keys
      only). As in Hugging Face, a mask takes precedence: position_ids then only place RoPE.
    * else `cu_seq_lens_q` / `cu_seq_lens_k` (flash-attention's cumulative document lengths over
      the flattened batch): one document per span; with position_ids, they must agree.
    * else `position_ids` [batch or 1, seq]: a new document wherever a position is not its
      predecessor's + 1 (transformers' `find_packed_sequence_indices`, what
      `DataCollatorWithFlattening` produces: positions restarting at 0).

    With `labels` (a training step), padding whose results nobody sees becomes documents of its
    own: where every padding row's target is ignored (`shifted_targets`) and each row's tokens
    are one run, the padding before a row's tokens is document 0, its tokens document 1, the
    padding after them document 2. A token never sees a padding key either way, and a padding
    row reaches neither the loss nor (its gradient being zero) a weight's gradient, so the loss
    and every gradient are Hugging Face's; the batch is then whole documents, which
    flash-attention's varlen kernels run instead of a mask (`runtime.attention.document_layout`,
    read here on CUDA before the step's kernels), and the forward drops that padding from the
    step (`without_padding`). Without labels the padding rows keep
    Hugging Face's own results (the logits of every row are returned).

    `check`: validate the values (one device-to-host copy of a few flags, as Hugging Face's own
    mask preparation makes) and return None when the batch needs no mask; without (under
    `torch.compile`, which cannot branch on data) the segments are returned unchecked."""
    batch, seq = input_ids.shape
    device = input_ids.device
    flags: list[tuple[str, str, torch.Tensor]] = []  # (argument, message, bad flag)
    documents = padding_documents = None  # padding as documents of its own, and whether that holds
    if attention_mask is not None:
        if cu_seq_lens_q is not None or cu_seq_lens_k is not None:
            raise ArgumentError("from_hf model: pass either attention_mask (padding) or cu_seq_lens_q/k (packed "
                                "documents), not both", "attention_mask")
        mask = _integer_tensor(attention_mask, "attention_mask", f"a bool or integer 0/1 tensor [{batch}, {seq}]")
        if tuple(mask.shape) != (batch, seq):
            raise ArgumentError(f"from_hf model: attention_mask must be [{batch}, {seq}] like input_ids (a 2-D padding "
                                f"mask), got {list(mask.shape)}", "attention_mask")
        keep = mask.to(device=device, dtype=torch.bool)
        segments = torch.where(keep, 0, -1).to(torch.int32).reshape(-1)
        needed = ~keep.all()
        if mask.dtype != torch.bool:
            flags.append(("attention_mask", "holds values other than 0 and 1", ((mask != 0) & (mask != 1)).any()))
        flags.append(("attention_mask", "pads a whole row (a row needs at least one token)", (~keep).all(dim=1).any()))
        if labels is not None:
            unseen = ~((~keep).reshape(-1) & (shifted_targets(labels).to(device) != IGNORE_INDEX)).any()
            one_run = ((keep[:, 1:] & ~keep[:, :-1]).sum(dim=1) + keep[:, 0] <= 1).all()
            before = keep.to(torch.int32).cumsum(dim=1) == 0
            documents = torch.where(keep, 1, torch.where(before, 0, 2)).to(torch.int32).reshape(-1)
            padding_documents = unseen & one_run
    elif cu_seq_lens_q is not None or cu_seq_lens_k is not None:
        cu = _integer_tensor(cu_seq_lens_q if cu_seq_lens_q is not None else cu_seq_lens_k, "cu_seq_lens_q",
                             "an integer tensor of cumulative document lengths")
        if cu.dim() != 1 or cu.shape[0] < 2:
            raise ArgumentError(f"from_hf model: cu_seq_lens_q must be 1-D with at least 2 entries, got shape "
                                f"{list(cu.shape)}", "cu_seq_lens_q")
        cu = cu.to(device=device, dtype=torch.int64)
        if cu_seq_lens_q is not None and cu_seq_lens_k is not None:
            cuk = _integer_tensor(cu_seq_lens_k, "cu_seq_lens_k", "an integer tensor of cumulative document lengths")
            if tuple(cuk.shape) != tuple(cu.shape):
                raise ArgumentError("from_hf model: cu_seq_lens_k must equal cu_seq_lens_q (self-attention), got shapes "
                                    f"{list(cuk.shape)} and {list(cu.shape)}", "cu_seq_lens_k")
            flags.append(("cu_seq_lens_k", "differs from cu_seq_lens_q (self-attention needs the same documents)",
                          (cuk.to(device=device, dtype=torch.int64) != cu).any()))
        tokens = batch * seq
        flags.append(("cu_seq_lens_q", f"must start at 0, never decrease and end at the token count {tokens}",
                      (cu[0] != 0) | (cu[-1] != tokens) | (cu.diff() < 0).any()))
        rows = torch.arange(0, tokens + 1, seq, device=device)
        flags.append(("cu_seq_lens_q", f"must have a document boundary at every row start (multiples of {seq}): "
                      "a document cannot span two rows", ~torch.isin(rows, cu).all()))
        starts = torch.zeros(tokens + 1, dtype=torch.bool, device=device)
        starts[cu.clamp(0, tokens)] = True
        starts = starts[:tokens]
        segments = (starts.cumsum(0) - 1).to(torch.int32)
        needed = torch.tensor(cu.shape[0] - 1 > batch, device=device) & ((cu.diff() > 0).sum() > batch)
        if position_ids is not None:
            pos = position_ids.to(device).expand(batch, seq)
            from_positions = torch.ones(batch, seq, dtype=torch.bool, device=device)
            from_positions[:, 1:] = pos.diff(dim=1) != 1
            flags.append(("position_ids", "disagree with cu_seq_lens_q: positions must count up by one inside each "
                          "document and restart at each document start", (from_positions.reshape(-1) != starts).any()))
    elif position_ids is not None:
        pos = position_ids.to(device).expand(batch, seq)
        starts = torch.ones(batch, seq, dtype=torch.bool, device=device)
        starts[:, 1:] = pos.diff(dim=1) != 1
        segments = (starts.cumsum(dim=1) - 1).to(torch.int32).reshape(-1)
        needed = starts[:, 1:].any()
    else:
        return None
    if not check:
        return segments
    extra = [] if padding_documents is None else [padding_documents]
    values = torch.stack([needed, *extra, *(f for _, _, f in flags)]).tolist()
    for (name, message, _), bad in zip(flags, values[1 + len(extra):]):
        if bad:
            raise ArgumentError(f"from_hf model: {name} {message}", name)
    if not values[0]:
        return None
    if extra and values[1]:
        segments = documents
    if device.type == "cuda":
        from coda_ir.runtime.attention import document_layout

        document_layout(segments, batch, seq)  # its one read now, not inside the first layer's attention
    return segments


_WRAPPER_PARTS = ("_checkpoint_wrapped_module", "_orig_mod", "_fsdp_wrapped_module")


def _any_dtensor(tensors) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:
        return False
    return any(isinstance(t, DTensor) for t in tensors)


class CodaCausalLM(torch.nn.Module):
    """A Hugging Face causal LM run through coda-ir (see `from_hf`)."""

    def __init__(self, model, *, pipeline: str | None = "nn-to-coda", progress: bool = True, remarks: bool = False):
        super().__init__()
        spec = spec_of(model)
        options = Options(pipeline, progress, remarks)
        self.spec = spec
        self.config = model.config
        inner = model.model
        self.embed = EmbeddingUnit(inner.embed_tokens, spec, options)
        self.layers = torch.nn.ModuleList(DecoderUnit(layer, spec, options, i) for i, layer in enumerate(inner.layers))
        self.head = HeadUnit(inner.norm, model.lm_head, spec, options)
        self.gradient_checkpointing = False
        # the Hugging Face model itself, outside the module tree (its parameters are the units'
        # already): what a Trainer asks of a PreTrainedModel and this module does not define
        # (`generation_config`, `add_model_tags`, `get_output_embeddings`, ...) is its (`__getattr__`)
        self.__dict__["_hf_model"] = model
        # the Hugging Face name of each module this model holds (by identity: FSDP2 keeps the
        # module objects), so that state dicts can be saved under the Hugging Face names
        hf_modules = {id(m): name for name, m in model.named_modules(remove_duplicate=False)}
        self._hf_module_names = {name: hf_modules[id(m)] for name, m in self.named_modules(remove_duplicate=False)
                                 if id(m) in hf_modules and not isinstance(m, _Unit)}

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            model = self.__dict__.get("_hf_model")
            if model is None or name.startswith("__"):
                raise
            return getattr(model, name)

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict | None = None) -> None:
        """Activation checkpointing per decoder unit (as Hugging Face's method of this name, which
        a Trainer calls with `gradient_checkpointing_kwargs`: only non-reentrant checkpointing is
        implemented, `use_reentrant=True` is an ArgumentError): a unit keeps only its input; its
        forward runs again in the backward (under FSDP2 on the weights the backward has gathered
        already). Non-reentrant `torch.utils.checkpoint`."""
        if (gradient_checkpointing_kwargs or {}).get("use_reentrant", False):
            raise ArgumentError("from_hf model: gradient_checkpointing_kwargs use_reentrant=True is not supported "
                                "(units checkpoint non-reentrantly)", "gradient_checkpointing_kwargs")
        unknown = sorted(set(gradient_checkpointing_kwargs or {}) - {"use_reentrant"})
        if unknown:
            raise ArgumentError(f"from_hf model: gradient_checkpointing_kwargs {unknown} are not supported",
                                "gradient_checkpointing_kwargs")
        self.gradient_checkpointing = True

    def gradient_checkpointing_disable(self) -> None:
        self.gradient_checkpointing = False

    def hf_name(self, name: str) -> str:
        """The Hugging Face name of this model's parameter `name` (e.g. `layers.0.layer.mlp.up_proj.weight`
        -> `model.layers.0.mlp.up_proj.weight`); wrapper prefixes (`_checkpoint_wrapped_module.`,
        `_orig_mod.`) are dropped first."""
        parts = [p for p in name.split(".") if p not in _WRAPPER_PARTS]
        for cut in range(len(parts) - 1, -1, -1):
            hf = self._hf_module_names.get(".".join(parts[:cut]))
            if hf is not None:
                return ".".join(([hf] if hf else []) + parts[cut:])
        raise ArgumentError(f"from_hf model: {name!r} is not a parameter of the Hugging Face model", name)

    def hf_state_dict(self, *, cpu_offload: bool = True) -> dict[str, torch.Tensor]:
        """The full state dict under the Hugging Face model's names, loadable by
        `LlamaForCausalLM.load_state_dict` / `save_pretrained(state_dict=...)`.

        Sharded by FSDP2 (parameters are DTensors): a collective (call it on every rank) that
        gathers full tensors through `torch.distributed.checkpoint.state_dict`; with
        `cpu_offload` (the default) rank 0 gets them on the CPU and the other ranks an empty
        dict. Otherwise: this process's tensors (detached, shared with the model)."""
        if _any_dtensor(self.parameters()):
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            state = get_model_state_dict(self, options=StateDictOptions(full_state_dict=True, cpu_offload=cpu_offload))
        else:
            state = {k: v.detach() for k, v in self.state_dict().items()}
        out = {self.hf_name(k): v for k, v in state.items()}
        if out and self.spec.tied:  # one tensor, both Hugging Face names (as model.state_dict() gives)
            for a, b in (("lm_head.weight", "model.embed_tokens.weight"), ("model.embed_tokens.weight", "lm_head.weight")):
                if a not in out and b in out:
                    out[a] = out[b]
        return out

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, position_ids: torch.Tensor | None = None, *,
                num_items_in_batch=None, cu_seq_lens_q: torch.Tensor | None = None,
                cu_seq_lens_k: torch.Tensor | None = None, max_length_q=None, max_length_k=None, **kwargs):
        """What a Hugging Face `Trainer` passes (see `from_hf`). `max_length_q/k` are kernel hints
        of flash-attention and change nothing here."""
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.dtype not in (torch.int64, torch.int32):
            raise ArgumentError("from_hf model: input_ids must be an integer tensor [batch, seq]")
        _check_kwargs(kwargs)
        batch, seq_len = input_ids.shape
        compiling = torch.compiler.is_compiling()
        if position_ids is None:
            positions = self._default_positions(batch, seq_len, input_ids.device, compiling)
        else:
            if position_ids.dim() != 2 or position_ids.shape[-1] != seq_len or position_ids.shape[0] not in (1, batch):
                raise ArgumentError(f"from_hf model: position_ids must be [batch or 1, {seq_len}], got {list(position_ids.shape)}")
            positions = position_ids.expand(batch, seq_len).reshape(-1).to(torch.int32)
        if labels is not None and (not isinstance(labels, torch.Tensor) or labels.shape != input_ids.shape):
            got = list(labels.shape) if isinstance(labels, torch.Tensor) else type(labels).__name__
            raise ArgumentError(f"from_hf model: labels must have input_ids' shape {list(input_ids.shape)}, got {got}")
        if num_items_in_batch is not None:
            if labels is None:
                raise ArgumentError("from_hf model: num_items_in_batch normalizes a loss: it needs labels",
                                    "num_items_in_batch")
            if not isinstance(num_items_in_batch, (int, float, torch.Tensor)) or isinstance(num_items_in_batch, bool) or (
                    isinstance(num_items_in_batch, torch.Tensor) and num_items_in_batch.numel() != 1):
                raise ArgumentError(f"from_hf model: num_items_in_batch must be a number or a one-element tensor, got "
                                    f"{type(num_items_in_batch).__name__}", "num_items_in_batch")
            if not isinstance(num_items_in_batch, torch.Tensor) and num_items_in_batch <= 0:
                raise ArgumentError(f"from_hf model: num_items_in_batch must be positive, got {num_items_in_batch}",
                                    "num_items_in_batch")
        segments = batch_segments(input_ids, attention_mask, position_ids, cu_seq_lens_q, cu_seq_lens_k,
                                  labels=labels, check=not compiling)
        if compiling:
            ids = input_ids.reshape(-1).to(torch.int32)
            targets = shifted_targets(labels) if labels is not None else None
        else:
            # the int32 ids, the shifted targets and the range flags of both in one kernel
            ids, targets, flags = step_tokens(input_ids, labels, self.spec.vocab, IGNORE_INDEX)
        rope_length = None
        if compiling:
            # a traced graph cannot branch on data: each unit checks its own indices at run time
            return self._run(ids, positions, targets, batch, seq_len, segments, num_items_in_batch)
        if segments is not None and targets is not None and attention_mask is not None:
            kept = without_padding(attention_mask, segments, ids, positions, targets)
            if kept is not None:  # the padding nobody sees, dropped: one packed row of the tokens
                if self._longrope():  # Hugging Face picks the factors from every position, padding's too
                    rope_length = int(positions.max()) + 1
                ids, positions, targets, segments = kept
                batch, seq_len = 1, ids.numel()
        # one check of the step's ids and labels, waited for only once the forward is enqueued
        # (no GPU bubble), instead of a device-to-host sync in each unit that reads them
        check = TokenCheck(input_ids, labels, self.spec.vocab, flags)
        try:
            with indices_checked():
                out = self._run(ids, positions, targets, batch, seq_len, segments, num_items_in_batch, rope_length)
        except Exception:
            check.raise_if_bad()  # bad input explains a failure downstream of it
            raise
        check.raise_if_bad()
        return out

    def _default_positions(self, batch: int, seq_len: int, device: torch.device, compiling: bool) -> torch.Tensor:
        """0..seq_len-1 in each of `batch` rows, flat int32: made once per shape and device (a
        constant every unit only reads; two kernels and their host time a step otherwise)."""
        if compiling:
            return torch.arange(seq_len, device=device, dtype=torch.int32).repeat(batch)
        cache = self.__dict__.setdefault("_positions", {})
        # (one made under inference_mode is an inference tensor, which a training step could not save)
        key = (batch, seq_len, device, torch.is_inference_mode_enabled())
        positions = cache.get(key)
        if positions is None:
            if len(cache) >= 16:
                cache.clear()
            positions = cache[key] = torch.arange(seq_len, device=device, dtype=torch.int32).repeat(batch)
        return positions

    def _longrope(self) -> bool:
        return any(k.long_after is not None for k in self.spec.layer_kinds)

    def _run(self, ids, positions, targets, batch: int, seq_len: int, segments=None, num_items_in_batch=None,
             rope_length: int | None = None):
        """The step on flat rows: `targets` are the shifted labels (`shifted_targets`), or None
        for logits; `rope_length` the largest position + 1 that picks longrope's factors (default:
        of `positions`)."""
        from transformers.modeling_outputs import CausalLMOutputWithPast

        tied = self._tied_weights()
        x = self.embed(ids, seq_len, tied_weight=tied[0] if tied else None)
        checkpointing = self.gradient_checkpointing and torch.is_grad_enabled()
        pieces = None  # tensor parallel: the last down projection's pieces, which the next unit folds
        # longrope (Phi-3.5, Phi-4-mini): Hugging Face rotates a forward whose largest position
        # + 1 exceeds original_max_position_embeddings by the long factors, else the short ones;
        # one device-to-host read of that length per step, only for such models
        kw = {}
        if self._longrope() and positions.numel():
            kw["rope_length"] = rope_length if rope_length is not None else int(positions.max()) + 1
        for layer in self.layers:
            args = (x, positions, seq_len) if pieces is None else (x, positions, seq_len, pieces)
            if segments is not None:
                args = (x, positions, seq_len, pieces, segments)
            if checkpointing:
                out = torch.utils.checkpoint.checkpoint(layer, *args, use_reentrant=False, **kw)
            else:
                out = layer(*args, **kw)
            x, pieces = out if isinstance(out, tuple) else (out, None)
        head_weight = tied[1] if tied else None
        if targets is None:
            logits = self.head(x, None, seq_len, pieces, tied_weight=head_weight)
            return CausalLMOutputWithPast(loss=None, logits=logits.view(batch, seq_len, -1))
        if num_items_in_batch is None:
            loss = self.head(x, targets, seq_len, pieces, tied_weight=head_weight)
        else:
            # the Trainer's gradient-accumulation normalization (transformers' ForCausalLMLoss):
            # the sum of the token losses over the number of items of the whole accumulated batch
            total = self.head(x, targets, seq_len, pieces, tied_weight=head_weight, reduction="sum")
            if isinstance(num_items_in_batch, torch.Tensor):
                num_items_in_batch = num_items_in_batch.to(total.device).reshape(())
            loss = total / num_items_in_batch
        return CausalLMOutputWithPast(loss=loss, logits=None)

    def _tied_weights(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The embedding's and the head's aliases of their shared weight (`TiedWeight`), where
        this step trains one plain tensor through both: else None, and each unit reads the
        parameter itself (autograd sums their dense gradients). Not under `torch.compile` (the
        traced graph keeps the units' custom ops) nor where the weight is a DTensor (tensor
        parallelism); under FSDP2 the root unit's forward sees the unsharded weight, a plain
        tensor, and takes this path (`tests/torch/test_distributed.py`, tied FSDP2)."""
        weight = self.embed.embed_tokens.weight
        if (not self.spec.tied or self.head.lm_head.weight is not weight or not weight.requires_grad
                or not torch.is_grad_enabled() or torch.compiler.is_compiling() or tp.is_dtensor(weight)):
            return None
        return TiedWeight.apply(weight)


def from_hf(model, *, pipeline: str | None = "nn-to-coda", progress: bool = True, remarks: bool = False) -> CodaCausalLM:
    """A `torch.nn.Module` that trains the Hugging Face causal LM `model` of a supported family
    (`FAMILIES`: `LlamaForCausalLM`, `Qwen3ForCausalLM`, `GemmaForCausalLM`, ...) through coda-ir,
    sharing its parameters (no copies).

    `forward(input_ids, attention_mask=None, labels=None, position_ids=None, **kwargs)` takes
    what a Trainer passes and returns a `CausalLMOutputWithPast`: `.loss` (mean cross-entropy
    of the shifted labels, ignore index -100; their sum over `num_items_in_batch` when given)
    when `labels` are given, else `.logits` [batch, seq, vocab]. A padding `attention_mask` and
    packed documents (`position_ids` restarting, or `cu_seq_lens_q/k`) mask the attention as
    Hugging Face does (`batch_segments`); Hugging Face arguments that change nothing are
    accepted, any other is an ArgumentError naming it. Programs compile on first use of a shape (a message on
    stderr unless `progress=False`); under `torch.compile` use `dynamic=False`. `pipeline` is
    the pipeline to lower with after `nn-autodiff` (default "nn-to-coda"; its options switch stages
    off, e.g. "nn-to-coda{fuse=false}");
    `remarks=True` prints the compiler's remarks (why a rewrite did not fire) on stderr.
    An unsupported configuration raises a `CompileError` naming the config field."""
    return CodaCausalLM(model, pipeline=pipeline, progress=progress, remarks=remarks)
