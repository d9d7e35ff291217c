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
  activation checkpointing wrap; `embed` and `head` are the first and last units;
* each unit reads its tensor-parallel layout off its weights' placements at each call
  (`named_weights()` gives each weight's Megatron role): plain weights run the unit's one
  program; DTensors of a `parallelize_module` plan run its per-shard segments with collectives
  between them (coda_ir/torch/tensor_parallel.py).

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
from coda_ir.torch import tensor_parallel as tp
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
    # the model's own RoPE frequencies (its rotary_emb.inv_freq buffer, fp32 numbers), which the
    # programs use bit for bit: Hugging Face's fp32 formula is 1-2 ulp off theta ** (-2i / hd) in
    # about a third of them, ~1e-4 rad of angle at position 4096 (see _inv_freq). None: from theta.
    inv_freq: tuple[float, ...] | None = None

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


def _inv_freq(model, head_dim: int) -> tuple[float, ...] | None:
    """The frequencies the Hugging Face model rotates by: its `model.rotary_emb.inv_freq`
    buffer, computed at construction by `1 / theta ** (arange(0, hd, 2) / hd)` in fp32 ops
    (`compute_default_rope_parameters`). Those are not the correctly rounded theta ** (-2i / hd)
    that nn.rope's `theta` means (1-2 ulp off in about a third of them, and the bits depend on
    the pow of the device that computed them), so the programs carry them explicitly: in fp32
    the loss then tracks Hugging Face's to ~1e-7 at any position instead of drifting with it.
    (A buffer a `Module.to(bfloat16)` rounded is used as it is: it is what the model computes.)"""
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    buf = getattr(rotary, "inv_freq", None)
    if not isinstance(buf, torch.Tensor) or buf.dim() != 1 or buf.shape[0] != head_dim // 2 or buf.is_meta:
        return None
    values = buf.detach().to(device="cpu", dtype=torch.float32)
    if not bool(torch.isfinite(values).all()) or bool((values < 0).any()):
        return None
    return tuple(float(v) for v in values.tolist())


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
        inv_freq=_inv_freq(model, head_dim),
    )


# ============================================================================ the nn programs


def _f32(value: float) -> str:
    return f"{value:.9e} : f32"


def _t(*shape: int, element: str) -> str:
    return "tensor<" + "x".join(str(s) for s in shape) + f"x{element}>"


def _attention_block(spec: ModelSpec, tokens: int, seq_len: int, h: str) -> tuple[list[str], list[str]]:
    """The attention half of a decoder layer from the normalized rows `h` to the output
    projection `%a` [tokens, hidden]: its weight arguments and body lines. With `spec`'s heads
    those of one tensor-parallel shard, it is that shard's part (its heads, its columns of wo)."""
    e = spec.element
    D, H, KV, hd, M = spec.hidden, spec.heads, spec.kv_heads, spec.head_dim, tokens
    q_cols, kv_cols, qkv_cols = H * hd, KV * hd, (H + 2 * KV) * hd
    X = _t(M, D, element=e)
    Q, KVT, QKV = _t(M, q_cols, element=e), _t(M, kv_cols, element=e), _t(M, qkv_cols, element=e)
    POS = _t(M, element="i32")
    args = [f"%wq: {_t(q_cols, D, element=e)}", f"%wk: {_t(kv_cols, D, element=e)}", f"%wv: {_t(kv_cols, D, element=e)}"]
    if spec.qk_norm:
        args += [f"%wqn: {_t(hd, element=e)}", f"%wkn: {_t(hd, element=e)}"]
    args += [f"%wo: {_t(D, q_cols, element=e)}"]
    eps = _f32(spec.eps)
    body = [
        f'%q = "nn.linear"({h}, %wq) : ({X}, {_t(q_cols, D, element=e)}) -> {Q}',
        f'%k = "nn.linear"({h}, %wk) : ({X}, {_t(kv_cols, D, element=e)}) -> {KVT}',
        f'%v = "nn.linear"({h}, %wv) : ({X}, {_t(kv_cols, D, element=e)}) -> {KVT}',
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
    freqs = "" if spec.inv_freq is None else ", inv_freq = array<f32: " + ", ".join(f"{v:.9e}" for v in spec.inv_freq) + ">"
    body += [
        f'%r = "nn.rope"({pre_rope}, %pos) <{{head_dim = {hd} : i64, rotary_heads = {H + KV} : i64, theta = {_f32(spec.theta)}, style = "half"{freqs}}}> : ({QKV}, {POS}) -> {QKV}',
        f'%y = "nn.attention"(%r) <{{heads = {H} : i64, kv_heads = {KV} : i64, head_dim = {hd} : i64, seq_len = {seq_len} : i64, causal = true}}> : ({QKV}) -> {Q}',
        f'%a = "nn.linear"(%y, %wo) : ({Q}, {_t(D, q_cols, element=e)}) -> {X}',
    ]
    return args, body


def _mlp_block(spec: ModelSpec, tokens: int, h: str) -> tuple[list[str], list[str]]:
    """The gated MLP from the normalized rows `h` to the down projection `%dn` [tokens, hidden]:
    its weight arguments and body lines (with `spec.intermediate` one shard's columns, that
    shard's part: its gate/up rows and down columns)."""
    e = spec.element
    D, F, M = spec.hidden, spec.intermediate, tokens
    X, G = _t(M, D, element=e), _t(M, F, element=e)
    args = [f"%wg: {_t(F, D, element=e)}", f"%wu: {_t(F, D, element=e)}", f"%wd: {_t(D, F, element=e)}"]
    body = [
        f'%g = "nn.linear"({h}, %wg) : ({X}, {_t(F, D, element=e)}) -> {G}',
        f'%u = "nn.linear"({h}, %wu) : ({X}, {_t(F, D, element=e)}) -> {G}',
        f'%s = "nn.silu"(%g) : ({G}) -> {G}',
        f'%m = "nn.mul"(%s, %u) : ({G}, {G}) -> {G}',
        f'%dn = "nn.linear"(%m, %wd) : ({G}, {_t(D, F, element=e)}) -> {X}',
    ]
    return args, body


def decoder_program(spec: ModelSpec, tokens: int, seq_len: int) -> str:
    """One decoder layer as Hugging Face computes it, attention included: x -> x'."""
    e = spec.element
    D, M = spec.hidden, tokens
    X, W_D = _t(M, D, element=e), _t(D, element=e)
    POS = _t(M, element="i32")
    attn_args, attn_body = _attention_block(spec, tokens, seq_len, "%h")
    mlp_args, mlp_body = _mlp_block(spec, tokens, "%h1")
    args = [f"%x: {X}", f"%pos: {POS}", f"%w_in: {W_D}", *attn_args, f"%w_post: {W_D}", *mlp_args]
    eps = _f32(spec.eps)
    body = [
        f'%h = "nn.rms_norm"(%x, %w_in) <{{eps = {eps}}}> : ({X}, {W_D}) -> {X}',
        *attn_body,
        f'%x1 = "nn.add"(%x, %a) : ({X}, {X}) -> {X}',
        f'%h1 = "nn.rms_norm"(%x1, %w_post) <{{eps = {eps}}}> : ({X}, {W_D}) -> {X}',
        *mlp_body,
        f'%x2 = "nn.add"(%x1, %dn) : ({X}, {X}) -> {X}',
        f"func.return %x2 : {X}",
    ]
    return _func("decoder_layer", args, [X], body)


# ---------------------------------------------------------------- tensor-parallel segments
# Under tensor parallelism (coda_ir/torch/tensor_parallel.py) a decoder layer runs as these
# programs with collectives between them: the residual stream holds this rank's rows of the
# sequence; the attention and MLP segments run on all rows (gathered) over this rank's heads
# and columns and return partial sums of their output projections, whose pieces are folded
# (in rank order) with the residual and the next norm in one row kernel.


def tp_attention_program(spec: ModelSpec, tokens: int, seq_len: int) -> str:
    """Normalized rows h [tokens, hidden] -> this shard's output projection (a partial sum)."""
    X, POS = _t(tokens, spec.hidden, element=spec.element), _t(tokens, element="i32")
    args, body = _attention_block(spec, tokens, seq_len, "%h")
    return _func("tp_attention", [f"%h: {X}", f"%pos: {POS}", *args], [X], body + [f"func.return %a : {X}"])


def tp_mlp_program(spec: ModelSpec, tokens: int) -> str:
    """Normalized rows h [tokens, hidden] -> this shard's down projection (a partial sum)."""
    X = _t(tokens, spec.hidden, element=spec.element)
    args, body = _mlp_block(spec, tokens, "%h")
    return _func("tp_mlp", [f"%h: {X}", *args], [X], body + [f"func.return %dn : {X}"])


def tp_fold_program(spec: ModelSpec, rows: int, pieces: int, *, norm: bool, keep_sum: bool = True) -> str:
    """This rank's rows: x + piece_0 + ... + piece_{pieces-1} (the reduce-scatter's pieces of
    a row-parallel GEMM, folded in rank order) and, with `norm`, the next RMSNorm of that sum
    (its statistics taken here, on whole local rows). Returns the sum (with `keep_sum`) and/or
    the normalized rows. `pieces` = 0: the norm of x alone."""
    e, D = spec.element, spec.hidden
    X, W_D = _t(rows, D, element=e), _t(D, element=e)
    args = [f"%x: {X}"] + [f"%p{r}: {X}" for r in range(pieces)] + ([f"%w: {W_D}"] if norm else [])
    body, total = [], "%x"
    for r in range(pieces):
        body.append(f'%s{r} = "nn.add"({total}, %p{r}) : ({X}, {X}) -> {X}')
        total = f"%s{r}"
    results = [total] if keep_sum else []
    if norm:
        body.append(f'%h = "nn.rms_norm"({total}, %w) <{{eps = {_f32(spec.eps)}}}> : ({X}, {W_D}) -> {X}')
        results.append("%h")
    if not results or (not norm and not pieces):
        raise ValueError("tp_fold_program: nothing to compute")
    body.append(f"func.return {', '.join(results)} : {', '.join([X] * len(results))}")
    name = "tp_fold_norm" if norm else "tp_fold"
    return _func(name, args, [X] * len(results), body)


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
                fn.backward_module([True] * len(fn.float_args), donate=bool(fn.donated_arguments()),
                                   hand_over=fn.num_saved > 0)
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

    def __init__(self, spec: ModelSpec, options: Options, where: str):
        super().__init__()
        self.spec, self.pipeline, self.progress, self.remarks = spec, options.pipeline, options.progress, options.remarks
        self.where = f"from_hf model: {where}"  # how errors name this unit
        self._functions: dict[tuple, CodaFunction] = {}

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
        """Compile (once) the program this unit runs at this shape. Under `torch.compile` this
        runs at trace time and counts as a constant, so Dynamo traces only the compiled
        program's custom ops (no graph break)."""
        key = (kind, tokens, seq_len, dtype)
        if key not in self._functions:
            program, what = self._program(replace(self.spec, dtype=dtype), kind, tokens, seq_len)
            self._functions[key] = _compiled(program, what, self.pipeline, self.progress, self.remarks)
        return True

    def _dtype(self, weights: list[torch.Tensor]) -> torch.dtype:
        dtypes = {w.dtype for w in weights}
        if len(dtypes) != 1 or next(iter(dtypes)) not in _MLIR_DTYPES:
            raise ArgumentError(f"{self.where}: the weights must all be one of float32, bfloat16, float16; "
                                f"got {sorted(map(str, dtypes))}")
        return next(iter(dtypes))

    def function(self, kind: str, tokens: int, seq_len: int) -> CodaFunction:
        """The compiled program this unit runs for `tokens` rows in sequences of `seq_len`, in
        the dtype its weights have *now*: FSDP2's `MixedPrecisionPolicy(param_dtype=...)` runs
        the forward and backward on weights cast from the (sharded) master copies, so a unit
        of a float32 model may run its bfloat16 program."""
        dtype = self._dtype(self.weights())
        self._prepare(kind, _static(tokens, "the token count"), _static(seq_len, "the sequence length"), dtype)
        return self._functions[(kind, tokens, seq_len, dtype)]

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
        else:
            x = self.function("embed", ids.shape[0], seq_len)(ids, *map(tp.local, self.weights()))
        padding_idx = getattr(self.embed_tokens, "padding_idx", None)
        if padding_idx is not None and x.requires_grad:
            # torch.nn.Embedding(padding_idx=p) gives row p no gradient: drop the upstream
            # gradient of the rows that look it up before it reaches the embedding backward
            x = _NoGradientRows.apply(x, ids == padding_idx)
        return x


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
        from coda_ir.lowering.library import embedding_grad_into

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
        from coda_ir.lowering.library import embedding

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

    def __init__(self, layer: torch.nn.Module, spec: ModelSpec, options: Options, index: int = 0):
        super().__init__(spec, options, f"layers.{index}")
        self.layer = layer
        self.hf_prefix = f"model.layers.{index}."
        self.pack_weights()

    def pack_weights(self) -> None:
        """nn-fuse-siblings makes q/k/v and gate/up one GEMM each over their concatenated
        weights: with the weights back to back in one storage that concatenation is a view.
        Moves them there once (for a tensor-parallel plan's DTensors: their local shards)."""
        attn, mlp = self.layer.self_attn, self.layer.mlp
        for group in ([attn.q_proj, attn.k_proj, attn.v_proj], [mlp.gate_proj, mlp.up_proj]):
            pack_rows([m.weight._local_tensor if tp.is_dtensor(m.weight) else m.weight for m in group])

    def _program(self, spec, kind, tokens, seq_len):
        return decoder_program(spec, tokens, seq_len), f"a decoder layer ({tokens} tokens, sequences of {seq_len}, {spec.element})"

    def named_weights(self):
        layer, attn, mlp = self.layer, self.layer.self_attn, self.layer.mlp
        col, row, rep = tp.COLUMN, tp.ROW, tp.REPLICATED
        ws = [("input_layernorm", layer.input_layernorm, rep), ("self_attn.q_proj", attn.q_proj, col),
              ("self_attn.k_proj", attn.k_proj, col), ("self_attn.v_proj", attn.v_proj, col)]
        if self.spec.qk_norm:
            ws += [("self_attn.q_norm", attn.q_norm, rep), ("self_attn.k_norm", attn.k_norm, rep)]
        ws += [("self_attn.o_proj", attn.o_proj, row), ("post_attention_layernorm", layer.post_attention_layernorm, rep),
               ("mlp.gate_proj", mlp.gate_proj, col), ("mlp.up_proj", mlp.up_proj, col), ("mlp.down_proj", mlp.down_proj, row)]
        return [(f"{self.hf_prefix}{name}.weight", module.weight, role) for name, module, role in ws]

    def forward(self, x: torch.Tensor, positions: torch.Tensor, seq_len: int, pieces: torch.Tensor | None = None):
        """x -> the next layer's x. Tensor parallel (DTensor weights): `x` is this rank's rows of
        the residual stream (all rows for the first unit) and `pieces` the previous unit's
        unfolded down-projection pieces; returns `(x1, pieces)` for the next unit to fold."""
        layout = self.layout()
        if layout is None:
            if pieces is not None:
                raise ArgumentError(f"{self.where}: the residual stream reaching this unit is split over tensor-parallel "
                                    "ranks, but its weights are not DTensors: plan every decoder unit")
            return self.function("layer", x.shape[0], seq_len)(x, positions, *self.weights())
        return self._forward_tensor_parallel(layout, x, positions, seq_len, pieces)

    def _forward_tensor_parallel(self, layout, x, positions, seq_len, pieces):
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
        attention = self.segment(("attention", tokens, seq_len, spec),
                                 lambda: (tp_attention_program(spec, tokens, seq_len), f"the attention segment {what}"))
        mlp = self.segment(("mlp", tokens, spec), lambda: (tp_mlp_program(spec, tokens), f"the MLP segment {what}"))
        if pieces is None:  # the first unit: keep this rank's rows of the embedding
            if x.shape[0] == tokens and T > 1:
                x = tp.scatter_rows(x, layout)
            h = self.fold(spec, rows, 0, norm=True, keep_sum=False)(x, w_in)
        else:
            x, h = self.fold(spec, rows, T, norm=True)(x, *pieces.unbind(0), w_in)
        partial = attention(tp.gather_rows(h, layout), positions, *attention_weights)
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
        return head_program(spec, tokens, loss=False), f"the LM head ({tokens} tokens, {spec.element})"

    def named_weights(self):
        lm_name = "model.embed_tokens.weight" if self.spec.tied else "lm_head.weight"
        return [("model.norm.weight", self.norm.weight, tp.REPLICATED),
                (lm_name, self.lm_head.weight, (tp.COLUMN, tp.REPLICATED))]

    def forward(self, x: torch.Tensor, targets: torch.Tensor | None, seq_len: int,
                pieces: torch.Tensor | None = None, tied_weight: torch.Tensor | None = None) -> torch.Tensor:
        """`tied_weight`: the head's alias of the weight it shares with the embedding (`TiedWeight`)."""
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
            return self.function("loss", x.shape[0], seq_len)(x, *weights, targets)
        return self._forward_tensor_parallel(layout, x, targets, seq_len, pieces)

    def _forward_tensor_parallel(self, layout, x, targets, seq_len, pieces):
        from coda_ir.torch.vocab_parallel import sharded_cross_entropy

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
            return self.function("loss", x.shape[0], seq_len)(x, tp.local(norm), tp.local(lm), targets)
        # vocabulary parallel: the norm on this rank's rows, all rows gathered, this rank's
        # vocabulary shard of the logits reduced to per-row partials (one [tokens, 3] exchange)
        h = self.fold(spec, rows, T, norm=True, keep_sum=False)(x, *pieces.unbind(0), tp.replicated(norm, layout))
        h = tp.gather_rows(h, layout)
        if targets is None:
            return tp.gather_columns(torch.matmul(h, tp.local(lm).t()), layout, self.spec.vocab)
        return sharded_cross_entropy(h, tp.local(lm), targets, vocab_size=self.spec.vocab, group=layout.group,
                                     ignore_index=IGNORE_INDEX)


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
        self.layers = torch.nn.ModuleList(DecoderUnit(layer, spec, options, i) for i, layer in enumerate(inner.layers))
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

        tied = self._tied_weights()
        x = self.embed(ids, seq_len, tied_weight=tied[0] if tied else None)
        checkpointing = self.gradient_checkpointing and torch.is_grad_enabled()
        pieces = None  # tensor parallel: the last down projection's pieces, which the next unit folds
        for layer in self.layers:
            args = (x, positions, seq_len) if pieces is None else (x, positions, seq_len, pieces)
            if checkpointing:
                out = torch.utils.checkpoint.checkpoint(layer, *args, use_reentrant=False)
            else:
                out = layer(*args)
            x, pieces = out if isinstance(out, tuple) else (out, None)
        head_weight = tied[1] if tied else None
        if labels is None:
            logits = self.head(x, None, seq_len, pieces, tied_weight=head_weight)
            return CausalLMOutputWithPast(loss=None, logits=logits.view(batch, seq_len, -1))
        loss = self.head(x, shifted_targets(labels), seq_len, pieces, tied_weight=head_weight)
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
