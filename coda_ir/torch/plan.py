"""Predict a training step from a Hugging Face config alone, before renting a GPU.

`plan_from_config(path, tokens, seq_len, gpus)` reads a `config.json`, builds the model on the
meta device (no weights, no memory: `transformers.AutoConfig.for_model` and
`AutoModelForCausalLM.from_config` under `torch.device("meta")`), reads its `ModelSpec`
(coda_ir.torch.hf: the same check `from_hf` makes, so an unsupported field is named), builds the
programs `from_hf` runs (each distinct decoder layer, the LM head with its loss), compiles them
for each GPU (`nn-autodiff,nn-to-coda` with the planning passes' `gpu` option: the decisions are
that machine's) and prices the compiled forward and backward with the IO model, the
attention between them with the attention model (coda_ir/analysis/attention_model.py).

Per GPU (`gpu_constants.json`: h100, h200, a100) it reports
* the step time (forward + backward of every layer and the head; the embedding's gather and
  scatter are not priced: library steps, a few MB), tokens per second;
* the limit (PERFORMANCE.md): the step's GEMMs as plain GEMMs (forward, dX and dW) plus its
  attention (forward and backward), and the step's ratio to it;
* memory: the bf16 weights and their gradients (no optimizer state), and the activation peak:
  what every layer's forward saves for its backward plus the most one backward kernel allocates
  (an estimate: PyTorch's allocator rounds and caches on top of it, and the head's saved logits
  are priced as the compiled head program keeps them).

`coda-opt --plan-hf CONFIG.json --tokens N [--seq-len S] [--gpu NAME|all]` prints it
(coda_ir/tools/coda_opt.py). Bad input (a missing or malformed file, an unsupported config, an
unknown GPU) raises a `CodaError` that names the file (and line) or the field.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from coda_ir.analysis import io_model as m
from coda_ir.errors import ArgumentError, CodaError, CompileError

PIPELINE = "nn-autodiff,nn-to-coda"


def pipeline_for(gpu: str) -> str:
    """PIPELINE with the target machine `gpu` (a shipped constants entry) on its planning passes."""
    return f"nn-autodiff{{gpu={gpu}}},nn-to-coda{{gpu={gpu}}}"


@dataclass
class UnitCost:
    """One compiled unit (a distinct decoder layer or the head), priced on one GPU."""

    name: str
    count: int  # how many times the step runs it
    fwd: m.ProgramCost
    bwd: m.ProgramCost | None
    saved_bytes: int  # what its forward hands to its backward
    working_bytes: int  # the largest activation working set of one of its backward kernels

    @property
    def time_s(self) -> float:
        return self.fwd.time_s + (self.bwd.time_s if self.bwd else 0.0)

    def kernels(self) -> list[m.KernelCost]:
        return [*self.fwd.kernels, *(self.bwd.kernels if self.bwd else ())]


@dataclass
class StepPlan:
    model: str
    gpu: m.GPU
    tokens: int
    seq_len: int
    params: int
    param_bytes: int
    units: list[UnitCost] = field(default_factory=list)

    @property
    def step_s(self) -> float:
        return sum(u.count * u.time_s for u in self.units)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.step_s if self.step_s else 0.0

    def _sum(self, pick) -> float:
        return sum(u.count * sum(pick(k) for k in u.kernels()) for u in self.units)

    @property
    def attention_s(self) -> float:
        return self._sum(lambda k: k.time_s if k.kernel.attention is not None else 0.0)

    @property
    def gemm_limit_s(self) -> float:
        """The step's GEMMs as plain GEMMs (operands in, output out, the model's tile)."""
        from coda_ir.analysis.report_targets import plain_gemms

        total = 0.0
        for u in self.units:
            for cost in (u.fwd, u.bwd):
                plain = plain_gemms(cost, self.gpu) if cost is not None else None
                total += u.count * (plain.time_s if plain is not None else 0.0)
        return total

    @property
    def limit_s(self) -> float:
        return self.gemm_limit_s + self.attention_s

    @property
    def activation_peak_bytes(self) -> int:
        return sum(u.count * u.saved_bytes for u in self.units) + max((u.working_bytes for u in self.units), default=0)

    @property
    def peak_bytes(self) -> int:
        return 2 * self.param_bytes + self.activation_peak_bytes

    def attention_summaries(self) -> list[str]:
        from coda_ir.analysis import attention_model

        seen, lines = set(), []
        for u in self.units:
            for k in u.kernels():
                if k.kernel.attention is not None:
                    line = attention_model.attention_summary(k.kernel, self.gpu)
                    if line not in seen:
                        seen.add(line)
                        lines.append(line)
        return lines


# ---------------------------------------------------------------- reading the config


def read_config(path: str | Path) -> dict:
    """The JSON object of a config file, or a CompileError located at the file (and line)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise CompileError(f"{path}: error: cannot read the config: {error.strerror or error}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise CompileError(f"{path}:{error.lineno}:{error.colno}: error: not valid JSON: {error.msg}") from None
    if not isinstance(data, dict):
        raise CompileError(f"{path}: error: a Hugging Face config is a JSON object, got {type(data).__name__}")
    if not isinstance(data.get("model_type"), str):
        raise CompileError(f"{path}: error: the config has no \"model_type\" (e.g. \"llama\", \"qwen3\")")
    return data


def meta_model(data: dict, where: str = "<config>"):
    """The causal LM of a config dict on the meta device, in bf16 (no weights are allocated)."""
    import torch
    import transformers

    fields = {k: v for k, v in data.items() if k not in ("model_type", "architectures", "transformers_version", "torch_dtype", "dtype")}
    try:
        config = transformers.AutoConfig.for_model(data["model_type"], **fields)
    except (ValueError, KeyError, TypeError) as error:
        raise CompileError(f"{where}: error: transformers cannot build a config of model_type "
                           f"{data['model_type']!r}: {str(error).splitlines()[0]}") from None
    try:
        with torch.device("meta"):
            return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise CompileError(f"{where}: error: transformers cannot build a causal LM from this config "
                           f"(model_type {data['model_type']!r}): {str(error).splitlines()[0]}") from None


# ---------------------------------------------------------------- pricing


def _saved_bytes(fwd_plan, bwd_plan) -> int:
    """Bytes the forward keeps for the backward: the outputs of `_fwd` after its result (the
    nn-autodiff contract: `@f_fwd` returns f's results, then what `@f_bwd` needs)."""
    if bwd_plan is None:
        return 0
    # weights handed through are the resident model, not new memory
    weights = {t.name for t in fwd_plan.inputs if t.role == "weight" or (len(t.shape) >= 1 and t.name.startswith("w"))}
    return sum(t.nbytes for t in fwd_plan.outputs[1:] if t.name not in weights)


def _working_bytes(plan) -> int:
    """The most activation bytes one backward kernel allocates (its writes: what it reads is
    saved already or written by an earlier kernel)."""
    if plan is None:
        return 0
    return max((sum(t.nbytes for t in k.writes if t.role == "activation") for k in plan.kernels), default=0)


def _unit(name: str, count: int, program: str, gpus: list[m.GPU]) -> dict[str, UnitCost]:
    import coda_ir
    from coda_ir.analysis.io_extract import extract_module

    out = {}
    for gpu in gpus:
        # the planning passes decide for this machine (their `gpu` option: RoPE tables, norm
        # statistics, store or recompute, the Gluon mainloop's SM-count threshold)
        module = coda_ir.lower(coda_ir.parse(program, name=f"<{name}>"), pipeline_for(gpu.name))
        plans = {p.name: p for p in extract_module(module, gpu)}
        fwd = next(p for n, p in plans.items() if n.endswith("_fwd"))
        bwd = next((p for n, p in plans.items() if n.endswith("_bwd")), None)
        out[gpu.name] = UnitCost(name, count, m.program_cost(fwd.kernels, gpu),
                                 m.program_cost(bwd.kernels, gpu) if bwd is not None else None,
                                 _saved_bytes(fwd, bwd), _working_bytes(bwd))
    return out


def plan_from_config(path: str | Path, tokens: int, seq_len: int | None = None,
                     gpus: list[str] | None = None) -> list[StepPlan]:
    """One `StepPlan` per GPU (default: every GPU whose constants ship) for a training step of
    `tokens` tokens in sequences of `seq_len` (default: min(tokens, 4096))."""
    from coda_ir.torch import hf

    if not isinstance(tokens, int) or tokens <= 0:
        raise ArgumentError(f"--tokens must be a positive number of tokens, got {tokens}", "tokens")
    seq_len = seq_len or min(tokens, 4096)
    if seq_len <= 0 or tokens % seq_len:
        raise ArgumentError(f"--tokens ({tokens}) must be a multiple of --seq-len ({seq_len})", "seq_len")
    table = m.load_gpu_table()
    names = gpus or sorted(table)
    unknown = [g for g in names if g.lower() not in table]
    if unknown:
        raise ArgumentError(f"unknown GPU '{unknown[0]}' (constants ship for: {', '.join(sorted(table))})", "gpu")
    chosen = [table[g.lower()] for g in names]
    data = read_config(path)
    where = str(path)
    model = meta_model(data, where)
    try:
        spec = hf.spec_of(model)
    except CodaError as error:
        raise CompileError([line.replace("<from_hf>", where) for line in str(error).splitlines()]) from None
    params = sum(p.numel() for p in model.parameters())
    # layers with equal programs are compiled (and priced) once
    programs = Counter(hf.decoder_program(spec, tokens, seq_len, layer=i) for i in range(spec.layers))
    priced: list[dict[str, UnitCost]] = []
    for i, (program, count) in enumerate(programs.items()):
        priced.append(_unit(f"decoder_layer{'' if len(programs) == 1 else i}", count, program, chosen))
    priced.append(_unit("lm_head_loss", 1, hf.head_program(spec, tokens, loss=True), chosen))
    plans = []
    for gpu in chosen:
        plan = StepPlan(f"{data['model_type']} ({spec.layers} layers, hidden {spec.hidden}, {spec.heads}/{spec.kv_heads} "
                        f"heads of {spec.head_dim}, vocab {spec.vocab})", gpu, tokens, seq_len, params, params * 2)
        plan.units = [p[gpu.name] for p in priced]
        plans.append(plan)
    return plans


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def format_plans(plans: list[StepPlan]) -> str:
    if not plans:
        return ""
    p0 = plans[0]
    lines = [
        f"plan: {p0.model}",
        f"  step: {p0.tokens} tokens ({p0.tokens // p0.seq_len} x {p0.seq_len}), forward + backward, bf16, "
        f"{p0.params / 1e9:.2f} B parameters; priced by the IO model (compiled '{pipeline_for('GPU')}' per GPU) and the attention model",
        f"  {'gpu':<6} {'step ms':>9} {'tokens/s':>10} {'limit ms':>9} {'GEMMs ms':>9} {'attn ms':>8} {'step/limit':>10} "
        f"{'weights+grads':>14} {'activations':>12} {'peak':>10}",
    ]
    for p in plans:
        lines.append(
            f"  {p.gpu.name:<6} {p.step_s * 1e3:>9.3f} {p.tokens_per_s:>10.0f} {p.limit_s * 1e3:>9.3f} "
            f"{p.gemm_limit_s * 1e3:>9.3f} {p.attention_s * 1e3:>8.3f} {p.step_s / p.limit_s if p.limit_s else math.nan:>9.3f}x "
            f"{_gib(2 * p.param_bytes):>14} {_gib(p.activation_peak_bytes):>12} {_gib(p.peak_bytes):>10}")
    for p in plans:
        for u in p.units:
            attn = sum(k.time_s for k in u.kernels() if k.kernel.attention is not None)
            launches = u.fwd.launches + (u.bwd.launches if u.bwd else 0)
            lines.append(f"  {p.gpu.name} {u.name} x{u.count}: forward {u.fwd.time_s * 1e3:.3f} ms, backward "
                         f"{(u.bwd.time_s if u.bwd else 0.0) * 1e3:.3f} ms ({launches} launches; attention "
                         f"{attn * 1e3:.3f} ms), saves {u.saved_bytes / 2**20:.0f} MiB")
    for p in plans:
        for line in p.attention_summaries():
            lines.append(f"  {p.gpu.name} attention: {line}")
    lines.append("  limit = the step's GEMMs as plain GEMMs + its attention (PERFORMANCE.md); the model is a lower "
                 "bound (no latency); weights+grads in bf16, no optimizer state; the embedding's gather is not priced")
    return "\n".join(lines) + "\n"
