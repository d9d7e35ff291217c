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
    """PIPELINE with the target machine `gpu` (a shipped constants entry) on its planning passes,
    after `nn-fuse-siblings` as `from_hf` runs it (coda_ir/torch/function.py: sibling linears are
    packed before differentiating, so that the backward has one weight-gradient GEMM for them)."""
    return f"nn-fuse-siblings,nn-autodiff{{gpu={gpu}}},nn-to-coda{{gpu={gpu}}}"


@dataclass(frozen=True)
class Choice:
    """One decision the compile recorded for a unit, read back from the IR: `what` is its kind
    ("stored", "recomputed", "norm statistics", "RoPE", "epilogue", "logits"), `value` the
    tensor or op it is about, `detail` the choice."""

    what: str
    value: str
    detail: str


@dataclass
class UnitCost:
    """One compiled unit (a distinct decoder layer or the head), priced on one GPU."""

    name: str
    count: int  # how many times the step runs it
    fwd: m.ProgramCost
    bwd: m.ProgramCost | None
    saved_bytes: int  # what its forward hands to its backward
    working_bytes: int  # the largest activation working set of one of its backward kernels
    # the generated kernel name of each priced kernel (fwd, then bwd), as a profiler shows it:
    # `_{function}_k{i}_{kind}`, a launch group's `_{function}_g{j}_launch_group` on its first
    # member ("" on the members riding in it), "cuBLAS" for a vendor GEMM, "attention" for the
    # attention library step
    fwd_names: list[str] = field(default_factory=list)
    bwd_names: list[str] = field(default_factory=list)
    choices: list[Choice] = field(default_factory=list)
    fwd_plan: object | None = None  # io_extract.FunctionPlan of the compiled forward (diagrams)
    bwd_plan: object | None = None

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

    def step_units(self) -> list[tuple[str, UnitCost | None, str]]:
        """The step in order, as (unit name, its UnitCost or None for the unpriced embedding,
        direction): the embedding, the decoder layers and the head forward, then back (the
        order the whole-step drawing, `fusion_plan.step_svg`, takes from here)."""
        decoders = [u for u in self.units if u.name != "lm_head_loss"]
        heads = [u for u in self.units if u.name == "lm_head_loss"]
        forward = [("embed_tokens", None, "fwd")] + [(u.name, u, "fwd") for u in decoders + heads]
        backward = [(u.name, u, "bwd") for u in heads + decoders[::-1]] + [("embed_tokens", None, "bwd")]
        return forward + backward

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


def _functions(module) -> dict[str, object]:
    from xdsl.dialects import func

    return {op.sym_name.data: op for op in module.walk() if isinstance(op, func.FuncOp)}


def _value_name(value) -> str:
    return value.name_hint or "?"


def _op_name(op) -> str:
    """A name for an op in a report: its result's (or, unnamed, `d(first operand)`)."""
    if op.results and op.results[0].name_hint:
        return op.results[0].name_hint
    if op.operands and op.operands[0].name_hint:
        return f"d({op.operands[0].name_hint})" if "grad" in op.name else op.operands[0].name_hint
    return "?"


def _autodiff_choices(module, unit: str) -> list[Choice]:
    """Store or recompute, as `nn-autodiff` recorded it: what `@f_fwd` returns after f's results
    (saved for the backward) and `@f_bwd`'s `nn.recomputed` (rebuilt in the backward)."""
    from xdsl.dialects import func
    from xdsl.dialects.builtin import ArrayAttr
    from xdsl.ir import BlockArgument

    from coda_ir.transforms.autodiff import BWD_SUFFIX, FWD_SUFFIX, RECOMPUTED_ATTR

    fns = _functions(module)
    f, fwd, bwd = fns.get(unit), fns.get(unit + FWD_SUFFIX), fns.get(unit + BWD_SUFFIX)
    if f is None or fwd is None:
        return []
    choices = []
    n_results = len(f.function_type.outputs.data)
    ret = fwd.body.blocks[0].last_op
    assert isinstance(ret, func.ReturnOp)
    for v in list(ret.arguments)[n_results:]:
        if isinstance(v, BlockArgument):  # an input (weights, x): resident anyway, not a choice
            continue
        choices.append(Choice("stored", _value_name(v), f"{v.type}"))
    recomputed = bwd.attributes.get(RECOMPUTED_ATTR) if bwd is not None else None
    if isinstance(recomputed, ArrayAttr):
        for name in recomputed.data:
            choices.append(Choice("recomputed", name.data, "rebuilt in the backward from saved values"))
    return choices


def _plan_choices(module, unit: str, kept_norms: set[int] | None = None) -> list[Choice]:
    """The IO model's choices `nn-plan` recorded as typed properties on the nn ops of `@f_fwd`
    and `@f_bwd` (`nn.PLAN_PROPERTIES`, `chunk` of `nn.linear_cross_entropy_grad`); `kept_norms`:
    the ids of the norms `coda-defer-norms` left in place (None: not known)."""
    from coda_ir.dialects import nn
    from coda_ir.transforms.autodiff import BWD_SUFFIX, FWD_SUFFIX

    fns = _functions(module)
    choices: list[Choice] = []
    for suffix in (FWD_SUFFIX, BWD_SUFFIX):
        fn = fns.get(unit + suffix)
        if fn is None:
            continue
        for op in fn.walk():
            name = _op_name(op)
            if isinstance(op, nn.RMSNormOp):
                plan = nn.planned(op, "stats_in_producer_epilogue")
                if plan is False:
                    detail = "a row kernel over whole rows (stats_in_producer_epilogue = false)"
                elif kept_norms is not None and id(op) not in kept_norms:
                    detail = ("deferred: statistics before the consuming GEMMs (partials in the producer's epilogue, "
                              "or a whole-rows kernel), rstd a row scale in their epilogues")
                else:
                    detail = "a row kernel (no deferral here)"
                choices.append(Choice("norm statistics", name, detail))
            elif isinstance(op, (nn.RoPEOp, nn.RoPEGradOp)):
                plan = nn.planned(op, "cos_sin_table")
                detail = {True: "cos/sin from [M, hd/2] tables (one small kernel)",
                          False: "sin/cos per pair in the epilogue"}.get(plan, "sin/cos per pair (no plan recorded)")
                choices.append(Choice("RoPE", op.name if name == "?" else f"{op.name} {name}", detail))
            elif isinstance(op, (nn.HeadRMSNormOp, nn.SwiGLUGradOp, nn.GeGLUGradOp, nn.RMSNormGradOp,
                                 nn.CrossEntropyOp, nn.CrossEntropyFwdOp)):
                plan = nn.planned(op, "in_producer_epilogue")
                if plan is None and not isinstance(op, nn.HeadRMSNormOp):
                    continue
                detail = ("in the producing GEMM's epilogue where legal (no plan recorded)" if plan is None else
                          "in the producing GEMM's epilogue" if plan else "a separate pass after a plain GEMM")
                choices.append(Choice("epilogue", op.name if name == "?" else f"{op.name} {name}", detail))
            if isinstance(op, nn.LinearCrossEntropyGradOp):
                chunk = op.properties["chunk"].value.data  # type: ignore[attr-defined]
                vocab = op.operands[1].type.get_shape()[0]  # type: ignore[attr-defined]
                choices.append(Choice("logits", "h @ w.T", f"recomputed in the backward in {-(-vocab // chunk)} chunks of "
                                                      f"{chunk} vocabulary columns (not stored)"))
            elif isinstance(op, nn.CrossEntropyGradOp):
                logits = op.operands[0].name_hint or name
                choices.append(Choice("logits", logits, "stored by the forward for the backward (no chunking)"))
    return choices


def _generated_names(fn, plan) -> list[str]:
    """The profiler's name of each kernel of `plan` (io_extract of `fn`), in its order."""
    from coda_ir.analysis.io_extract import VENDOR_NOTE
    from coda_ir.dialects import coda
    from coda_ir.lowering.coda_to_tl import group_base_name, kernel_base_name

    index = {id(k): kernel_base_name(fn, i, k) for i, k in enumerate(coda.kernels(fn))}
    groups = [g for g in fn.walk() if isinstance(g, coda.LaunchGroupOp)]
    first = {id(next(iter(g.members()))): group_base_name(fn, j) for j, g in enumerate(groups)}
    names = []
    for kernel, op in zip(plan.kernels, plan.kernel_ops):
        if kernel.attention is not None:
            names.append("attention")
        elif VENDOR_NOTE in kernel.notes:
            names.append("cuBLAS")
        elif id(op) in first:
            names.append(first[id(op)])
        elif kernel.shares_launch:
            names.append("")
        else:
            names.append(index.get(id(op), ""))
    return names


def compile_unit(program: str, name: str, gpu: m.GPU):
    """(compiled module, choices): `program` through `pipeline_for(gpu)`, with the decisions its
    passes recorded read from the IR as they are made (after nn-autodiff; after nn-plan and
    coda-defer-norms, whose nn ops later passes replace)."""
    import coda_ir
    from coda_ir.context import make_context
    from coda_ir.diagnostics import CompilerError, verify_module
    from coda_ir.errors import InternalError
    from coda_ir.remarks import printed_remarks
    from coda_ir.transforms.defer_norms import DeferNormsPass
    from coda_ir.transforms.pipeline import NNToCodaPass
    from coda_ir.transforms.plan import NNPlanPass
    from coda_ir.dialects import nn

    # the part before nn-to-coda, as from_hf runs it (its stages are applied one by one below)
    module = coda_ir.lower(coda_ir.parse(program, name=f"<{name}>"), f"nn-fuse-siblings,nn-autodiff{{gpu={gpu.name}}}")
    unit = next(n for n in _functions(module) if not n.endswith(("_fwd", "_bwd")))
    choices = _autodiff_choices(module, unit)
    planned: list = []
    norms: list = []
    ctx = make_context()
    try:
        with printed_remarks(False):
            for stage in NNToCodaPass(gpu=gpu.name).stages():
                stage.apply(ctx, module)
                if isinstance(stage, NNPlanPass):
                    norms = [op for op in module.walk() if isinstance(op, nn.RMSNormOp)]
                    planned = [module.clone()]  # the plan as recorded, before later passes consume the ops
                if isinstance(stage, DeferNormsPass):
                    kept = {id(op) for op in module.walk() if isinstance(op, nn.RMSNormOp)}
                    planned.append({i for i, op in enumerate(norms) if id(op) in kept})
    except CompilerError as error:
        raise CompileError([str(error)]) from None
    if verify_module(module):
        raise InternalError(f"internal error: '{pipeline_for(gpu.name)}' produced invalid IR for {name}")
    if planned:
        snapshot = planned[0]
        kept_indices = planned[1] if len(planned) > 1 else None
        snap_norms = [op for op in snapshot.walk() if isinstance(op, nn.RMSNormOp)]
        kept = {id(snap_norms[i]) for i in kept_indices} if kept_indices is not None else None
        choices += _plan_choices(snapshot, unit, kept)
    return module, choices


def _unit(name: str, count: int, program: str, gpus: list[m.GPU]) -> dict[str, UnitCost]:
    from coda_ir.analysis.io_extract import extract_function

    out = {}
    for gpu in gpus:
        # the planning passes decide for this machine (their `gpu` option: RoPE tables, norm
        # statistics, store or recompute, the Gluon mainloop's SM-count threshold)
        module, choices = compile_unit(program, name, gpu)
        fns = {n: f for n, f in _functions(module).items() if f.body.blocks}
        fwd_fn = next(f for n, f in fns.items() if n.endswith("_fwd"))
        bwd_fn = next((f for n, f in fns.items() if n.endswith("_bwd")), None)
        fwd = extract_function(fwd_fn, gpu)
        bwd = extract_function(bwd_fn, gpu) if bwd_fn is not None else None
        out[gpu.name] = UnitCost(name, count, m.program_cost(fwd.kernels, gpu),
                                 m.program_cost(bwd.kernels, gpu) if bwd is not None else None,
                                 _saved_bytes(fwd, bwd), _working_bytes(bwd),
                                 fwd_names=_generated_names(fwd_fn, fwd),
                                 bwd_names=_generated_names(bwd_fn, bwd) if bwd is not None else [],
                                 choices=choices, fwd_plan=fwd, bwd_plan=bwd)
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


# ---------------------------------------------------------------- the whole-model report


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f}"


def _kernel_rows(u: UnitCost, direction: str, total_s: float) -> list[str]:
    from coda_ir.analysis import attention_model

    cost = u.fwd if direction == "fwd" else u.bwd
    names = u.fwd_names if direction == "fwd" else u.bwd_names
    if cost is None:
        return []
    rows = []
    for i, (c, gen) in enumerate(zip(cost.kernels, names)):
        k = c.kernel
        tile = attention_model.schedule_label(k, c) if k.attention is not None else (
            "cuBLAS" if gen == "cuBLAS" else (c.tile.describe() if c.tile else "-"))
        gen = gen or "(in the launch above)"
        share = u.count * c.time_s / total_s * 100 if total_s else 0.0
        rows.append(f"      {i:>2} {k.name[:22]:<22} {gen[:38]:<38} {k.kind[:11]:<11} {tile[:17]:<17} "
                    f"{_mb(c.hbm_unique):>9} {c.bound:<8} {c.time_s * 1e6:>9.1f} {u.count * c.time_s * 1e3:>9.3f} {share:>5.1f}%")
    return rows


def format_report(plans: list[StepPlan]) -> str:
    """The whole model, per GPU: each unit kind in step order (the embedding, the decoder layers,
    the head, forward then backward) with its kernels (predicted time, HBM bytes, bound, the
    name the profiler shows), the attention between them with its schedule and occupancy, the
    choices the compile recorded (stored or recomputed, where each norm's statistics are taken,
    RoPE tables, epilogue placement, logits chunking), and totals times the layer counts."""
    from coda_ir.analysis import attention_model

    lines: list[str] = []
    for p in plans:
        total = p.step_s
        lines.append(f"report: {p.model} on {p.gpu.name}, {p.tokens} tokens ({p.tokens // p.seq_len} x {p.seq_len}), "
                     f"forward + backward, compiled '{pipeline_for(p.gpu.name)}'")
        header = (f"      {'#':>2} {'kernel':<22} {'generated (profiler name)':<38} {'kind':<11} {'tile/schedule':<17} "
                  f"{'HBM MB':>9} {'bound':<8} {'us':>9} {'step ms':>9} {'share':>6}")
        for name, u, direction in p.step_units():
            if u is None:
                what = "gather of the token rows" if direction == "fwd" else "scatter-add of the row gradients"
                lines.append(f"  {name} {direction} x1: a library {what}: not priced (a few MB)")
                continue
            cost = u.fwd if direction == "fwd" else u.bwd
            if cost is None:
                continue
            lines.append(f"  {name} {direction} x{u.count}: {cost.time_s * 1e3:.3f} ms each, {u.count * cost.time_s * 1e3:.3f} ms "
                         f"per step ({u.count * cost.time_s / total * 100 if total else 0:.1f}%), {cost.launches} launches, "
                         f"HBM {cost.hbm_unique / 1e6:.1f} MB each")
            if direction == "fwd":
                lines.append("    choices (recorded by the compile):")
                for what in ("stored", "recomputed"):
                    picked = [c for c in u.choices if c.what == what]
                    if picked:
                        body = ", ".join(f"{c.value} {c.detail}" if what == "stored" else c.value for c in picked)
                        lines.append(f"      {what}: {body}")
                for c in u.choices:
                    if c.what not in ("stored", "recomputed"):
                        lines.append(f"      {c.what}: {c.value}: {c.detail}")
                lines.append(f"      saves {u.saved_bytes / 2**20:.1f} MiB for the backward; its backward's largest allocation "
                             f"{u.working_bytes / 2**20:.1f} MiB")
            lines.append(header)
            lines += _kernel_rows(u, direction, total)
            for c in cost.kernels:
                if c.kernel.attention is not None:
                    lines.append(f"      attention {c.kernel.name}: {attention_model.attention_summary(c.kernel, p.gpu)}")
        fwd = sum(u.count * u.fwd.time_s for u in p.units)
        bwd = sum(u.count * u.bwd.time_s for u in p.units if u.bwd is not None)
        hbm = sum(u.count * (u.fwd.hbm_unique + (u.bwd.hbm_unique if u.bwd else 0)) for u in p.units)
        launches = sum(u.count * (u.fwd.launches + (u.bwd.launches if u.bwd else 0)) for u in p.units)
        lines.append(f"  total: forward {fwd * 1e3:.3f} ms + backward {bwd * 1e3:.3f} ms = step {total * 1e3:.3f} ms "
                     f"({p.tokens_per_s:.0f} tokens/s), attention {p.attention_s * 1e3:.3f} ms, limit {p.limit_s * 1e3:.3f} ms "
                     f"({total / p.limit_s if p.limit_s else math.nan:.3f}x); HBM {hbm / 1e9:.2f} GB in {launches} launches")
        lines.append(f"  peak memory: {_gib(p.peak_bytes)} = weights+grads {_gib(2 * p.param_bytes)} + activations "
                     f"{_gib(p.activation_peak_bytes)} (saved {_gib(sum(u.count * u.saved_bytes for u in p.units))} + the "
                     f"largest backward allocation {_gib(max((u.working_bytes for u in p.units), default=0))})")
    return "\n".join(lines) + "\n"


def check_svg_path(path: str | Path) -> None:
    """An ArgumentError unless `path` can be written: not empty, not a directory, its folder existing."""
    import os

    if not str(path).strip():
        raise ArgumentError("--svg needs a file path", "svg")
    path = Path(path)
    if path.is_dir():
        raise ArgumentError(f"--svg: '{path}' is a directory, not a file to write", "svg")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise ArgumentError(f"--svg: cannot write '{path}': the folder '{folder}' does not exist", "svg")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ArgumentError(f"--svg: cannot write '{path}': permission denied", "svg")


def write_svg(plans: list[StepPlan], path: str | Path) -> None:
    """`--svg PATH`: the whole step of each plan's GPU as one SVG (analysis/fusion_plan.step_svg);
    an unwritable path is an ArgumentError naming it."""
    from coda_ir.analysis import fusion_plan

    check_svg_path(path)
    svg = fusion_plan.step_svg(plans)
    path = Path(path)
    try:
        path.write_text(svg)
    except OSError as error:
        raise ArgumentError(f"--svg: cannot write '{path}': {error.strerror or error}", "svg") from None
