"""`coda_ir.torch.from_hf`: train a Hugging Face LLaMA / Qwen3 causal LM through coda-ir.

`from_hf(model)` reads `model.config`, writes one nn program per *fusion unit* (the token
embedding, each decoder layer with its attention, the final norm + LM head + cross-entropy),
compiles each with `coda_ir.torch.function` (custom ops with autograd through the derived
`@f_bwd`) and returns a `torch.nn.Module` that runs them over the model's own parameters:

* no copies of the weights: every unit holds the Hugging Face submodules it reads, so
  `module.parameters()` *are* `model.parameters()`, gradients land in them, and any optimizer
  built on `model.parameters()` works unchanged;
* the programs are written as Hugging Face computes (separate q/k/v and gate/up linears,
  `silu(gate) * up`); the `nn-fuse-siblings` step of the pipeline derives the packed QKV GEMM and
  the gated pair that the GEMM epilogues fuse;
* one program per distinct shape: every decoder layer of a model has the same program, so a
  shape compiles once for all layers (progress is printed to stderr unless `progress=False`);
* `layers` is a `ModuleList` of the decoder units, the modules that FSDP2's `fully_shard` and
  activation checkpointing wrap; `embed` and `head` are the first and last units.

A configuration this bridge does not implement (a RoPE scaling type, biases, sliding windows,
attention dropout, another activation) is a `CompileError` naming the config field; it never
runs something different from the Hugging Face model.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, replace

import torch
import torch.utils.checkpoint

from coda_ir.errors import ArgumentError, CompileError
from coda_ir.lowering.runtime import indices_checked
from coda_ir.torch.function import CodaFunction

__all__ = ["from_hf", "CodaCausalLM", "ModelSpec"]

IGNORE_INDEX = -100
_MLIR_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}

# ============================================================================ the model's shape


@dataclass(frozen=True)
class ModelSpec:
    """What the programs depend on, read from a Hugging Face config (and the weights' dtype)."""

    family: str  # "llama" or "qwen3"
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    eps: float
    theta: float
    qk_norm: bool
    tied: bool
    dtype: torch.dtype

    @property
    def element(self) -> str:
        return _MLIR_DTYPES[self.dtype]


def _unsupported(field: str, value: object, why: str) -> CompileError:
    return CompileError([f"<from_hf>: error: config.{field} = {value!r} is not supported: {why}"])


def _rope_theta(config) -> float:
    """RoPE base and a check that the rope type is the default one (both config layouts:
    transformers >= 5 `rope_parameters`, older `rope_theta` + `rope_scaling`)."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and params:
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type not in (None, "default"):
            raise _unsupported("rope_parameters['rope_type']", rope_type, "only the default RoPE (no scaling) is implemented")
        extra = sorted(set(params) - {"rope_type", "type", "rope_theta"})
        if extra:
            raise _unsupported(f"rope_parameters['{extra[0]}']", params[extra[0]], "only the default RoPE (no scaling) is implemented")
        if "rope_theta" in params:
            return float(params["rope_theta"])
    scaling = getattr(config, "rope_scaling", None)
    if scaling:
        rope_type = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else scaling
        if rope_type not in (None, "default"):
            raise _unsupported("rope_scaling", scaling, "only the default RoPE (no scaling) is implemented")
    theta = getattr(config, "rope_theta", None)
    if theta is None:
        raise _unsupported("rope_theta", None, "the RoPE base is missing")
    return float(theta)


def spec_of(model) -> ModelSpec:
    """The ModelSpec of a `LlamaForCausalLM` / `Qwen3ForCausalLM`, or a CompileError naming the
    first config field (or model property) this bridge does not implement."""
    config = getattr(model, "config", None)
    family = getattr(config, "model_type", None)
    if family not in ("llama", "qwen3"):
        raise CompileError([f"<from_hf>: error: {type(model).__name__} (config.model_type = {family!r}) is not supported: "
                            "from_hf takes a LlamaForCausalLM or a Qwen3ForCausalLM"])
    if not hasattr(model, "lm_head") or not hasattr(getattr(model, "model", None), "layers"):
        raise CompileError([f"<from_hf>: error: {type(model).__name__} has no .model.layers / .lm_head: pass the ...ForCausalLM model"])
    act = getattr(config, "hidden_act", "silu")
    if act != "silu":
        raise _unsupported("hidden_act", act, "the MLP must be silu(gate) * up")
    for field in ("attention_bias", "mlp_bias"):
        if getattr(config, field, False):
            raise _unsupported(field, True, "linear layers with a bias are not implemented")
    if float(getattr(config, "attention_dropout", 0.0) or 0.0) != 0.0:
        raise _unsupported("attention_dropout", config.attention_dropout, "attention dropout is not implemented")
    if getattr(config, "pretraining_tp", 1) not in (None, 1):
        raise _unsupported("pretraining_tp", config.pretraining_tp, "tensor-parallel pretraining slices are not implemented")
    if getattr(config, "use_sliding_window", False):
        raise _unsupported("use_sliding_window", True, "sliding-window attention is not implemented")
    layer_types = getattr(config, "layer_types", None)
    if layer_types and any(t != "full_attention" for t in layer_types):
        bad = next(t for t in layer_types if t != "full_attention")
        raise _unsupported("layer_types", bad, "only full (causal) attention layers are implemented")
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    hidden = int(config.hidden_size)
    head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
    if heads % kv_heads:
        raise _unsupported("num_key_value_heads", kv_heads, f"must divide num_attention_heads = {heads}")
    dtypes = {p.dtype for p in model.parameters()}
    if len(dtypes) != 1 or next(iter(dtypes)) not in _MLIR_DTYPES:
        raise ArgumentError(f"from_hf: the model's parameters must all be one of float32, bfloat16, float16; got {sorted(map(str, dtypes))}")
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    return ModelSpec(
        family=family,
        hidden=hidden,
        layers=int(config.num_hidden_layers),
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=int(config.intermediate_size),
        vocab=int(config.vocab_size),
        eps=float(config.rms_norm_eps),
        theta=_rope_theta(config),
        qk_norm=family == "qwen3",
        tied=tied,
        dtype=next(iter(dtypes)),
    )


# ============================================================================ the nn programs


def _f32(value: float) -> str:
    return f"{value:.9e} : f32"


def _t(*shape: int, element: str) -> str:
    return "tensor<" + "x".join(str(s) for s in shape) + f"x{element}>"


def decoder_program(spec: ModelSpec, tokens: int, seq_len: int) -> str:
    """One decoder layer as Hugging Face computes it, attention included: x -> x'."""
    e = spec.element
    D, F, H, KV, hd, M = spec.hidden, spec.intermediate, spec.heads, spec.kv_heads, spec.head_dim, tokens
    q_cols, kv_cols, qkv_cols = H * hd, KV * hd, (H + 2 * KV) * hd
    X, W_D = _t(M, D, element=e), _t(D, element=e)
    Q, KVT, QKV = _t(M, q_cols, element=e), _t(M, kv_cols, element=e), _t(M, qkv_cols, element=e)
    G = _t(M, F, element=e)
    POS = _t(M, element="i32")
    args = [f"%x: {X}", f"%pos: {POS}", f"%w_in: {W_D}", f"%wq: {_t(q_cols, D, element=e)}",
            f"%wk: {_t(kv_cols, D, element=e)}", f"%wv: {_t(kv_cols, D, element=e)}"]
    if spec.qk_norm:
        args += [f"%wqn: {_t(hd, element=e)}", f"%wkn: {_t(hd, element=e)}"]
    args += [f"%wo: {_t(D, q_cols, element=e)}", f"%w_post: {W_D}", f"%wg: {_t(F, D, element=e)}",
             f"%wu: {_t(F, D, element=e)}", f"%wd: {_t(D, F, element=e)}"]
    eps = _f32(spec.eps)
    body = [
        f'%h = "nn.rms_norm"(%x, %w_in) <{{eps = {eps}}}> : ({X}, {W_D}) -> {X}',
        f'%q = "nn.linear"(%h, %wq) : ({X}, {_t(q_cols, D, element=e)}) -> {Q}',
        f'%k = "nn.linear"(%h, %wk) : ({X}, {_t(kv_cols, D, element=e)}) -> {KVT}',
        f'%v = "nn.linear"(%h, %wv) : ({X}, {_t(kv_cols, D, element=e)}) -> {KVT}',
        f'%qkv = "nn.concat"(%q, %k, %v) <{{axis = 1 : i64}}> : ({Q}, {KVT}, {KVT}) -> {QKV}',
    ]
    pre_rope = "%qkv"
    if spec.qk_norm:
        W_HD = _t(hd, element=e)
        body += [
            f'%qn = "nn.head_rms_norm"(%qkv, %wqn) <{{head_dim = {hd} : i64, heads = {H} : i64, eps = {eps}, first_head = 0 : i64}}> : ({QKV}, {W_HD}) -> {QKV}',
            f'%kn = "nn.head_rms_norm"(%qn, %wkn) <{{head_dim = {hd} : i64, heads = {KV} : i64, eps = {eps}, first_head = {H} : i64}}> : ({QKV}, {W_HD}) -> {QKV}',
        ]
        pre_rope = "%kn"
    body += [
        f'%r = "nn.rope"({pre_rope}, %pos) <{{head_dim = {hd} : i64, rotary_heads = {H + KV} : i64, theta = {_f32(spec.theta)}, style = "half"}}> : ({QKV}, {POS}) -> {QKV}',
        f'%y = "nn.attention"(%r) <{{heads = {H} : i64, kv_heads = {KV} : i64, head_dim = {hd} : i64, seq_len = {seq_len} : i64, causal = true}}> : ({QKV}) -> {Q}',
        f'%a = "nn.linear"(%y, %wo) : ({Q}, {_t(D, q_cols, element=e)}) -> {X}',
        f'%x1 = "nn.add"(%x, %a) : ({X}, {X}) -> {X}',
        f'%h1 = "nn.rms_norm"(%x1, %w_post) <{{eps = {eps}}}> : ({X}, {W_D}) -> {X}',
        f'%g = "nn.linear"(%h1, %wg) : ({X}, {_t(F, D, element=e)}) -> {G}',
        f'%u = "nn.linear"(%h1, %wu) : ({X}, {_t(F, D, element=e)}) -> {G}',
        f'%s = "nn.silu"(%g) : ({G}) -> {G}',
        f'%m = "nn.mul"(%s, %u) : ({G}, {G}) -> {G}',
        f'%dn = "nn.linear"(%m, %wd) : ({G}, {_t(D, F, element=e)}) -> {X}',
        f'%x2 = "nn.add"(%x1, %dn) : ({X}, {X}) -> {X}',
        f"func.return %x2 : {X}",
    ]
    return _func("decoder_layer", args, [X], body)


def embedding_program(spec: ModelSpec, tokens: int) -> str:
    e, M, D, V = spec.element, tokens, spec.hidden, spec.vocab
    X, W = _t(M, D, element=e), _t(V, D, element=e)
    IDS = _t(M, element="i32")
    body = [f'%x = "nn.embedding"(%ids, %w) : ({IDS}, {W}) -> {X}', f"func.return %x : {X}"]
    return _func("embed_tokens", [f"%ids: {IDS}", f"%w: {W}"], [X], body)


def head_program(spec: ModelSpec, tokens: int, *, loss: bool) -> str:
    """Final RMSNorm, LM head and (with `loss`) mean cross-entropy over non-ignored targets."""
    e, M, D, V = spec.element, tokens, spec.hidden, spec.vocab
    X, W_D, W_LM, L = _t(M, D, element=e), _t(D, element=e), _t(V, D, element=e), _t(M, V, element=e)
    args = [f"%x: {X}", f"%w_norm: {W_D}", f"%w_lm: {W_LM}"]
    body = [
        f'%h = "nn.rms_norm"(%x, %w_norm) <{{eps = {_f32(spec.eps)}}}> : ({X}, {W_D}) -> {X}',
        f'%logits = "nn.linear"(%h, %w_lm) : ({X}, {W_LM}) -> {L}',
    ]
    if not loss:
        return _func("lm_head_logits", args, [L], body + [f"func.return %logits : {L}"])
    T, S = _t(M, element="i32"), "tensor<f32>"
    body += [
        f'%loss = "nn.cross_entropy"(%logits, %targets) <{{ignore_index = {IGNORE_INDEX} : i64, reduction = "mean"}}> : ({L}, {T}) -> {S}',
        f"func.return %loss : {S}",
    ]
    return _func("lm_head_loss", args + [f"%targets: {T}"], [S], body)


def _func(name: str, args: list[str], results: list[str], body: list[str]) -> str:
    header = f"func.func @{name}({', '.join(args)}) -> ({', '.join(results)}) {{"
    return "\n".join([header, *("  " + line for line in body), "}", ""])


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
            fn = CodaFunction(program, pipeline=pipeline, remarks=remarks)
            if fn.differentiable:
                # training needs both: compile them now, inside the progress message, not at
                # the first backward (the variant a training step uses: donating its saved
                # tensors, as `CodaFunction._backward` does when the graph is not kept)
                fn.forward_module
                fn.backward_module([True] * len(fn.float_args), donate=bool(fn.donated_arguments()), hand_over=True)
            if progress:
                print(f"coda-ir: compiled {what} in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
            _COMPILED[key] = fn
        return fn


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

    def __init__(self, spec: ModelSpec, options: Options):
        super().__init__()
        self.spec, self.pipeline, self.progress, self.remarks = spec, options.pipeline, options.progress, options.remarks
        self._functions: dict[tuple[str, int, int], CodaFunction] = {}

    def _program(self, spec: ModelSpec, kind: str, tokens: int, seq_len: int) -> tuple[str, str]:
        raise NotImplementedError

    def weights(self) -> list[torch.Tensor]:
        """The parameters this unit's kernels read, in the program's argument order: exactly
        `self.parameters()` (FSDP2 gathers a unit's parameters for its kernels and nothing else)."""
        raise NotImplementedError

    @torch.compiler.assume_constant_result
    def _prepare(self, kind: str, tokens: int, seq_len: int, dtype: torch.dtype) -> bool:
        """Compile (once) the program this unit runs at this shape. Under `torch.compile` this
        runs at trace time and counts as a constant, so Dynamo traces only the compiled
        program's custom ops (no graph break)."""
        key = (kind, tokens, seq_len, dtype)
        if key not in self._functions:
            program, what = self._program(replace(self.spec, dtype=dtype), kind, tokens, seq_len)
            self._functions[key] = _compiled(program, what, self.pipeline, self.progress, self.remarks)
        return True

    def function(self, kind: str, tokens: int, seq_len: int) -> CodaFunction:
        """The compiled program this unit runs for `tokens` rows in sequences of `seq_len`, in
        the dtype its weights have *now*: FSDP2's `MixedPrecisionPolicy(param_dtype=...)` runs
        the forward and backward on weights cast from the (sharded) master copies, so a unit
        of a float32 model may run its bfloat16 program."""
        weights = self.weights()
        dtypes = {w.dtype for w in weights}
        if len(dtypes) != 1 or next(iter(dtypes)) not in _MLIR_DTYPES:
            raise ArgumentError(f"from_hf model: {type(self).__name__}'s weights must all be one of float32, "
                                f"bfloat16, float16; got {sorted(map(str, dtypes))}")
        _refuse_dtensors(self, weights)
        dtype = next(iter(dtypes))
        self._prepare(kind, _static(tokens, "the token count"), _static(seq_len, "the sequence length"), dtype)
        return self._functions[(kind, tokens, seq_len, dtype)]


def _refuse_dtensors(unit: torch.nn.Module, weights: list[torch.Tensor]) -> None:
    """A weight that is still a DTensor when the kernels run: a tensor-parallel plan
    (`parallelize_module`) or a sharding that no FSDP2 hook gathers. coda-ir's kernels read
    whole (local, unsharded) weights; say so instead of failing inside DTensor dispatch."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch built without distributed
        return
    for w in weights:
        if isinstance(w, DTensor):
            raise ArgumentError(
                f"from_hf model: a weight of {type(unit).__name__} is a DTensor with placements "
                f"{tuple(w.placements)} on mesh {w.device_mesh.mesh.tolist()} when its kernels run: "
                "coda-ir's units read whole weights. FSDP2 (`fully_shard` on the units and the model, "
                "any mesh, HSDP included) gathers them; tensor parallelism through DTensor plans "
                "(parallelize_module) is not supported (use coda_ir.torch.vocab_parallel_cross_entropy "
                "for a vocabulary-parallel LM-head loss)")


class EmbeddingUnit(_Unit):
    """`nn.embedding` over the model's `embed_tokens.weight`."""

    def __init__(self, embed_tokens: torch.nn.Module, spec: ModelSpec, options: Options):
        super().__init__(spec, options)
        self.embed_tokens = embed_tokens

    def _program(self, spec, kind, tokens, seq_len):
        return embedding_program(spec, tokens), f"the token embedding ({tokens} tokens, {spec.element})"

    def weights(self):
        return [self.embed_tokens.weight]

    def forward(self, ids: torch.Tensor, seq_len: int) -> torch.Tensor:
        x = self.function("embed", ids.shape[0], seq_len)(ids, *self.weights())
        padding_idx = getattr(self.embed_tokens, "padding_idx", None)
        if padding_idx is not None and x.requires_grad:
            # torch.nn.Embedding(padding_idx=p) gives row p no gradient: drop the upstream
            # gradient of the rows that look it up before it reaches the embedding backward
            x = _NoGradientRows.apply(x, ids == padding_idx)
        return x


class _NoGradientRows(torch.autograd.Function):
    """Identity forward; the backward zeroes the upstream gradient of the masked rows."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(rows)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (rows,) = ctx.saved_tensors
        return grad.masked_fill(rows[:, None], 0), None


def pack_rows(params: list[torch.nn.Parameter]) -> None:
    """Move `params` (same dtype, device and trailing shape) into one storage, back to back, so
    that the program's concatenation of them costs no copy (`library.concat`). The Parameter
    objects stay the same (optimizers and hooks keep working): only their `.data` moves, once.
    Moving the model afterwards (`.to(...)`) undoes it; the concatenation then copies (correct,
    one weight-sized copy per call)."""
    from coda_ir.lowering.library import adjacent_view

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


class DecoderUnit(_Unit):
    """One decoder layer, attention included, over the Hugging Face layer's own parameters."""

    def __init__(self, layer: torch.nn.Module, spec: ModelSpec, options: Options):
        super().__init__(spec, options)
        self.layer = layer
        attn, mlp = layer.self_attn, layer.mlp
        # nn-fuse-siblings makes q/k/v and gate/up one GEMM each over their concatenated
        # weights: with the weights back to back in one storage that concatenation is a view
        pack_rows([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight])
        pack_rows([mlp.gate_proj.weight, mlp.up_proj.weight])

    def _program(self, spec, kind, tokens, seq_len):
        return decoder_program(spec, tokens, seq_len), f"a decoder layer ({tokens} tokens, sequences of {seq_len}, {spec.element})"

    def weights(self) -> list[torch.Tensor]:
        layer, attn, mlp = self.layer, self.layer.self_attn, self.layer.mlp
        ws = [layer.input_layernorm.weight, attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]
        if self.spec.qk_norm:
            ws += [attn.q_norm.weight, attn.k_norm.weight]
        return ws + [attn.o_proj.weight, layer.post_attention_layernorm.weight, mlp.gate_proj.weight,
                     mlp.up_proj.weight, mlp.down_proj.weight]

    def forward(self, x: torch.Tensor, positions: torch.Tensor, seq_len: int) -> torch.Tensor:
        return self.function("layer", x.shape[0], seq_len)(x, positions, *self.weights())


class HeadUnit(_Unit):
    """Final RMSNorm + LM head (+ cross-entropy): the logits of a loss never reach memory
    whole when the pipeline fuses the loss into the LM-head GEMM."""

    def __init__(self, norm: torch.nn.Module, lm_head: torch.nn.Module, spec: ModelSpec, options: Options):
        super().__init__(spec, options)
        self.norm, self.lm_head = norm, lm_head

    def _program(self, spec, kind, tokens, seq_len):
        if kind == "loss":
            return head_program(spec, tokens, loss=True), f"the LM head and loss ({tokens} tokens, {spec.element})"
        return head_program(spec, tokens, loss=False), f"the LM head ({tokens} tokens, {spec.element})"

    def weights(self):
        return [self.norm.weight, self.lm_head.weight]

    def forward(self, x: torch.Tensor, targets: torch.Tensor | None, seq_len: int) -> torch.Tensor:
        if targets is None:
            return self.function("logits", x.shape[0], seq_len)(x, *self.weights())
        return self.function("loss", x.shape[0], seq_len)(x, *self.weights(), targets)


def shifted_targets(labels: torch.Tensor) -> torch.Tensor:
    """Hugging Face's causal-LM targets: position s predicts labels[s + 1]; the last position of
    each sequence predicts nothing (ignore index). Flattened to int32 rows."""
    ignore = torch.full_like(labels[:, :1], IGNORE_INDEX)
    return torch.cat([labels[:, 1:], ignore], dim=1).reshape(-1).to(torch.int32)


class TokenCheck:
    """The range check of a step's `input_ids` (in [0, vocab)) and `labels` (in [0, vocab) or
    IGNORE_INDEX), started on the device without waiting: the flags travel to pinned host
    memory behind an event, and `raise_if_bad()` (called when the forward has been enqueued)
    waits only for that event, which sits before the step's kernels in the GPU queue, so the
    GPU never runs dry for it. Until then out-of-range ids are only ever clamped
    (`library.embedding`), never read out of bounds; the forward raises before returning."""

    def __init__(self, input_ids: torch.Tensor, labels: torch.Tensor | None, vocab: int):
        self.vocab = vocab
        self.tensors = [("input_ids", input_ids)] + ([("labels", labels)] if labels is not None else [])
        self.masks = [(input_ids < 0) | (input_ids >= vocab)]
        if labels is not None:
            self.masks.append(((labels < 0) | (labels >= vocab)) & (labels != IGNORE_INDEX))
        flags = torch.stack([m.any() for m in self.masks])
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
        for (name, tensor), mask, flag in zip(self.tensors, self.masks, self.flags.tolist()):
            if flag:
                where = [int(i) for i in mask.nonzero()[0]]
                value = int(tensor[tuple(where)])
                allowed = f"[0, {self.vocab})" + (f" or the ignore index {IGNORE_INDEX}" if name == "labels" else "")
                raise ArgumentError(f"from_hf model: {name} holds {value} at {where}, expected values in {allowed}", name)


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
        self.layers = torch.nn.ModuleList(DecoderUnit(layer, spec, options) for layer in inner.layers)
        self.head = HeadUnit(inner.norm, model.lm_head, spec, options)
        self.gradient_checkpointing = False
        # the Hugging Face name of each module this model holds (by identity: FSDP2 keeps the
        # module objects), so that state dicts can be saved under the Hugging Face names
        hf_modules = {id(m): name for name, m in model.named_modules(remove_duplicate=False)}
        self._hf_module_names = {name: hf_modules[id(m)] for name, m in self.named_modules(remove_duplicate=False)
                                 if id(m) in hf_modules and not isinstance(m, _Unit)}

    def gradient_checkpointing_enable(self) -> None:
        """Activation checkpointing per decoder unit (as Hugging Face's method of this name): a
        unit keeps only its input; its forward runs again in the backward (under FSDP2 on the
        weights the backward has gathered already). Non-reentrant `torch.utils.checkpoint`."""
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

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None, position_ids: torch.Tensor | None = None):
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.dtype not in (torch.int64, torch.int32):
            raise ArgumentError("from_hf model: input_ids must be an integer tensor [batch, seq]")
        batch, seq_len = input_ids.shape
        ids = input_ids.reshape(-1).to(torch.int32)
        if position_ids is None:
            positions = torch.arange(seq_len, device=input_ids.device, dtype=torch.int32).repeat(batch)
        else:
            if position_ids.dim() != 2 or position_ids.shape[-1] != seq_len or position_ids.shape[0] not in (1, batch):
                raise ArgumentError(f"from_hf model: position_ids must be [batch or 1, {seq_len}], got {list(position_ids.shape)}")
            positions = position_ids.expand(batch, seq_len).reshape(-1).to(torch.int32)
        if labels is not None and (not isinstance(labels, torch.Tensor) or labels.shape != input_ids.shape):
            got = list(labels.shape) if isinstance(labels, torch.Tensor) else type(labels).__name__
            raise ArgumentError(f"from_hf model: labels must have input_ids' shape {list(input_ids.shape)}, got {got}")
        if torch.compiler.is_compiling():
            # a traced graph cannot branch on data: each unit checks its own indices at run time
            return self._run(ids, positions, labels, batch, seq_len)
        # one check of the step's ids and labels, waited for only once the forward is enqueued
        # (no GPU bubble), instead of a device-to-host sync in each unit that reads them
        check = TokenCheck(input_ids, labels, self.spec.vocab)
        try:
            with indices_checked():
                out = self._run(ids, positions, labels, batch, seq_len)
        except Exception:
            check.raise_if_bad()  # bad input explains a failure downstream of it
            raise
        check.raise_if_bad()
        return out

    def _run(self, ids, positions, labels, batch: int, seq_len: int):
        from transformers.modeling_outputs import CausalLMOutputWithPast

        x = self.embed(ids, seq_len)
        checkpointing = self.gradient_checkpointing and torch.is_grad_enabled()
        for layer in self.layers:
            if checkpointing:
                x = torch.utils.checkpoint.checkpoint(layer, x, positions, seq_len, use_reentrant=False)
            else:
                x = layer(x, positions, seq_len)
        if labels is None:
            logits = self.head(x, None, seq_len)
            return CausalLMOutputWithPast(loss=None, logits=logits.view(batch, seq_len, -1))
        loss = self.head(x, shifted_targets(labels), seq_len)
        return CausalLMOutputWithPast(loss=loss, logits=None)


def from_hf(model, *, pipeline: str | None = "nn-to-coda", progress: bool = True, remarks: bool = False) -> CodaCausalLM:
    """A `torch.nn.Module` that trains the Hugging Face `LlamaForCausalLM` / `Qwen3ForCausalLM`
    `model` through coda-ir, sharing its parameters (no copies).

    `forward(input_ids, labels=None, position_ids=None)` returns a `CausalLMOutputWithPast`:
    `.loss` (mean cross-entropy of the shifted labels, ignore index -100) when `labels` are given,
    else `.logits` [batch, seq, vocab]. Programs compile on first use of a shape (a message on
    stderr unless `progress=False`); under `torch.compile` use `dynamic=False`. `pipeline` is
    the pipeline to lower with after `nn-autodiff` (default "nn-to-coda"; its options switch stages
    off, e.g. "nn-to-coda{fuse=false}");
    `remarks=True` prints the compiler's remarks (why a rewrite did not fire) on stderr.
    An unsupported configuration raises a `CompileError` naming the config field."""
    return CodaCausalLM(model, pipeline=pipeline, progress=progress, remarks=remarks)
