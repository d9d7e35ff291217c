"""`coda_ir.torch.function`: an nn function compiled into differentiable PyTorch custom ops.

Three kinds of `torch.library` custom ops are made per compiled function (names carry a hash of
the differentiated nn module and the pipeline, so two different programs never share an op and
compiling the same program twice reuses the first registration):

* `coda_ir::<f>_<hash>`: runs the compiled `@f` (used when no input needs a gradient);
* `coda_ir::<f>_<hash>_fwd`: runs `@f_fwd` and returns f's results, then those saved tensors
  that are neither an input nor one of f's results (those are saved directly, no copy); its
  autograd formula saves them and runs the backward op;
* `coda_ir::<f>_<hash>_bwd_<mask>`: runs `@f_bwd` specialised to the float inputs whose
  gradient is needed (`mask`, one 0/1 per float argument): unneeded results are dropped from the
  nn-level `@f_bwd` and dead code elimination removes the kernels that only they used (frozen
  weights do not pay for their weight-gradient GEMMs). Variants are compiled once per mask.

Every op has a fake implementation computed from the IR types, so FakeTensor tracing
(`torch.compile`, `aot_eager`) never runs a kernel.

A module with a run-time row count (`#coda.rows`, `coda.RowsAttr`) makes one function for every
row count: its specs' row extents are `Rows(c)` (c times the call's M, read from the first
argument that has one), the argument check takes any M >= 1, the fake implementations size
their results by the inputs' M, and where its attention takes the call's sequence length the
ops take a trailing `seq_len` integer (`__call__(*tensors, seq_len=...)`).
"""

from __future__ import annotations

import hashlib
import keyword
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import FunctionType, ModuleOp, TensorType
from xdsl.ir import BlockArgument, SSAValue

import coda_ir
from coda_ir.dialects.coda import RowsAttr, donate_arguments, own_arguments, symbolic_rows
from coda_ir.runtime.compiled import (ArgumentError, CompiledModule, Rows, check_arguments, check_seq_len,
                                      indices_checked, row_count)
from coda_ir.reference import element_dtype
from coda_ir.runtime import compile_cache
from coda_ir.runtime import config as runtime_config
from coda_ir.remarks import printed_remarks

__all__ = ["function", "CodaFunction", "set_donation"]

AUTODIFF_PASS = "nn-autodiff"
SIBLINGS_PASS = "nn-fuse-siblings"
NAMESPACE = "coda_ir"

def set_donation(enabled: bool) -> bool:
    """Whether eager backward calls that do not keep the graph give `@f_bwd` their saved tensors:
    they hand every saved tensor over (`coda.owned`: the autograd ctx releases them and
    `@f_bwd` drops each after its last reader, so one that only the ctx held is freed there, as
    torch.compile's backward does) and donate the tensors the forward computed only for the
    backward (`SavedTensor("extra")`), so that a kernel may store its output over one it reads
    for the last time (`coda_ir.analysis.in_place`: the LM head's dlogits over the saved logits,
    the SwiGLU backward's dz over the saved z). Returns the previous setting. Off, the saved
    tensors live until the backward returns and every output is a fresh buffer: the A/B of the
    change (same kernels, same arithmetic, so bitwise the same results). The setting is the
    runtime configuration's `donate_saved` (`coda_ir.runtime.config`)."""
    return runtime_config.configure(donate_saved=bool(enabled)).donate_saved


# Set while `CodaFunction.__call__` runs the forward op: that call drops the op's extra outputs,
# so the autograd ctx is their only holder and its backward may donate them. A direct call of
# `fwd_op` returns them to its caller, whose copies must stay intact.
_PRIVATE_EXTRAS = threading.local()


def _no_dispatch_mode() -> bool:
    """No torch dispatch mode is active (a mode sees the pure custom op, never a direct call)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    return _get_current_dispatch_mode() is None


def _plain_eager(tensors: Sequence[object]) -> bool:
    """A call that eager autograd alone sees: no dispatch mode, no functorch transform, plain
    tensors (no FakeTensor, DTensor or other subclass). Such a call needs none of what the custom
    op's dispatch provides and runs the function directly (`CodaFunction._direct_forward`)."""
    return (_no_dispatch_mode() and not torch._C._are_functorch_transforms_active()
            and all(type(t) in (torch.Tensor, torch.nn.Parameter) for t in tensors))


def _keeps_graph() -> bool:
    """Whether the running backward keeps the graph (`retain_graph` / `create_graph`): then the
    saved tensors are read again by a later backward and must not be written over. Unknown
    (no such query in this torch, or no graph task): treated as kept."""
    probe = getattr(torch._C._autograd, "_get_current_graph_task_keep_graph", None)
    if probe is None:
        return True
    try:
        return bool(probe())
    except RuntimeError:
        return True


# One registration per op name for the whole process: torch.library refuses to define a name
# twice, and equal names mean equal content (the name carries the content hash).
_OPS: dict[str, object] = {}
_OPS_LOCK = threading.RLock()


@dataclass(frozen=True)
class TensorSpec:
    """Name, shape and dtype of one argument or result, read from the IR."""

    name: str
    shape: tuple[int | Rows, ...]  # Rows(c): c times the call's row count (#coda.rows)
    dtype: torch.dtype

    @property
    def is_float(self) -> bool:
        return self.dtype.is_floating_point

    def signature(self) -> tuple[str, tuple[int | Rows, ...], torch.dtype]:
        return (self.name, self.shape, self.dtype)

    def sized(self, rows: int | None) -> tuple[int, ...]:
        """The shape at a call of `rows` rows."""
        return tuple(d.per * rows if isinstance(d, Rows) else d for d in self.shape)  # type: ignore[operator]


def _spec_of(value_type, name: str, rows: RowsAttr | None = None) -> TensorSpec:
    if not isinstance(value_type, TensorType):
        raise coda_ir.CompileError([f"<torch>: error: '{name}' is not a tensor ({value_type}); coda_ir.torch takes tensors only"])
    shape = tuple(Rows(rows.multiple(d)) if rows is not None and rows.multiple(d) else d for d in value_type.get_shape())
    return TensorSpec(name, shape, element_dtype(value_type))


def _identifier(text: str, fallback: str) -> str:
    """A name that is a valid identifier in op names and schemas."""
    text = re.sub(r"\W", "_", text)
    if not text or text[0].isdigit() or keyword.iskeyword(text) or text in ("self", "out"):
        return fallback
    return text


def _arg_specs(fn: func.FuncOp) -> list[TensorSpec]:
    specs, seen = [], set()
    rows = symbolic_rows(fn)
    for i, arg in enumerate(fn.body.blocks[0].args):
        name = _identifier(arg.name_hint or "", f"arg{i}")
        if name in seen:
            name = f"{name}_{i}"
        seen.add(name)
        specs.append(_spec_of(arg.type, name, rows))
    return specs


def _result_specs(fn: func.FuncOp) -> list[TensorSpec]:
    rows = symbolic_rows(fn)
    return [_spec_of(t, f"result{i}", rows) for i, t in enumerate(fn.function_type.outputs.data)]


def _rows_of(specs: Sequence[TensorSpec], tensors: Sequence[object]) -> int | None:
    """The row count of a call (None: the specs have no row extent)."""
    shapes = [tuple(t.shape) if isinstance(t, torch.Tensor) else () for t in tensors]
    return row_count(shapes, [s.signature() for s in specs])


def _funcs(module: ModuleOp) -> dict[str, func.FuncOp]:
    return {op.sym_name.data: op for op in module.ops if isinstance(op, func.FuncOp)}


def _only_functions(module: ModuleOp, names: Sequence[str]) -> ModuleOp:
    """A clone of `module` holding only the functions `names` (nothing else is compiled)."""
    clone = module.clone()
    for op in list(clone.ops):
        if isinstance(op, func.FuncOp) and op.sym_name.data not in names:
            clone.body.block.erase_op(op)
    return clone


def _autodiff_registered() -> bool:
    from coda_ir.context import coda_passes

    return AUTODIFF_PASS in coda_passes()


def _split_pipeline(pipeline: str | None) -> str | None:
    """The lowering part of `pipeline`: a leading `nn-autodiff` is run separately (we need the
    nn-level `@f_bwd` to build variants), so it is removed here."""
    if not pipeline:
        return pipeline
    stages = [s.strip() for s in re.split(r",(?![^{]*\})", pipeline)]
    return ",".join(s for s in stages if s.split("{")[0].strip() != AUTODIFF_PASS) or None


def _autodiff_stage(pipeline: str | None) -> str:
    """The `nn-autodiff` stage of `pipeline` with its options (e.g. `nn-autodiff{memory-budget-mib=4096}`),
    else the pass with its defaults."""
    stages = [s.strip() for s in re.split(r",(?![^{]*\})", pipeline or "")]
    return next((s for s in stages if s.split("{")[0].strip() == AUTODIFF_PASS), AUTODIFF_PASS)


def _schema(args: Sequence[TensorSpec], n_results: int, sizes: Sequence[str] = ()) -> str:
    params = ", ".join([*(f"Tensor {a.name}" for a in args), *(f"SymInt {s}" for s in sizes)])
    if n_results == 1:
        returns = "Tensor"
    else:
        returns = "(" + ", ".join(["Tensor"] * n_results) + ")"
    return f"({params}) -> {returns}"


def _is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


def _refuse_meta(fname: str, specs: Sequence[TensorSpec], args: Sequence[object]) -> None:
    """Meta tensors have no data to run kernels on: refuse them at run time (FakeTensors, which
    tracing uses, are fine)."""
    for i, (spec, arg) in enumerate(zip(specs, args)):
        if isinstance(arg, torch.Tensor) and arg.is_meta and not _is_fake(arg):
            raise ArgumentError(
                f"{fname}(): argument #{i} '{spec.name}' is a meta tensor (no data): expected a tensor on cpu or cuda"
            )


def _unaliased(outputs: Sequence[torch.Tensor], inputs: Sequence[object]) -> tuple[torch.Tensor, ...]:
    """Custom ops may not return an input, or the same tensor twice: a host function that
    returns an argument as is (a saved input, `dx = dy`) gets a copy there."""
    seen = {a.untyped_storage().data_ptr() for a in inputs if isinstance(a, torch.Tensor) and a.numel()}
    result = []
    for out in outputs:
        key = out.untyped_storage().data_ptr()
        if out.numel() and key in seen:
            out = out.clone()
            key = out.untyped_storage().data_ptr()
        seen.add(key)
        result.append(out)
    return tuple(result)


def _as_tuple(value) -> tuple[torch.Tensor, ...]:
    if isinstance(value, torch.Tensor):
        return (value,)
    if value is None:
        return ()
    return tuple(value)


def _define_op(qualname: str, args: Sequence[TensorSpec], results: Sequence[TensorSpec], run, fname: str,
               sizes: Sequence[str] = ()):
    """Register (once per name) a custom op `run(*tensors, *sizes) -> tuple` with a fake
    implementation that makes tensors of `results`' shapes (at the inputs' row count) and dtypes
    on the inputs' device. `sizes`: trailing integer arguments (`seq_len`)."""
    with _OPS_LOCK:
        existing = _OPS.get(qualname)
        if existing is not None:
            return existing
        single = len(results) == 1

        def impl(*inputs):
            tensors = inputs[: len(args)]
            _refuse_meta(fname, args, tensors)
            outs = _unaliased(run(*inputs), tensors)
            return outs[0] if single else outs

        def fake(*inputs):
            tensors = inputs[: len(args)]
            _refuse_meta(fname, args, tensors)
            device = next((t.device for t in tensors if isinstance(t, torch.Tensor)), torch.device("cpu"))
            rows = _rows_of(args, tensors)
            outs = tuple(torch.empty(r.sized(rows), dtype=r.dtype, device=device) for r in results)
            return outs[0] if single else outs

        op = torch.library.custom_op(qualname, impl, mutates_args=(), schema=_schema(args, len(results), sizes))
        op.register_fake(fake)
        _OPS[qualname] = op
        return op


@dataclass(frozen=True)
class SavedTensor:
    """Where one saved tensor of `@f_fwd` comes from: `input` i, f's `result` i, or `extra`
    output i of the forward op (computed by `@f_fwd` only for the backward)."""

    source: str
    index: int


class CodaFunction:
    """A compiled nn function callable on torch tensors and differentiable through `@f_bwd`.

    Attributes: `name`, `args` / `results` (TensorSpecs from the IR), `compiled` (the
    CompiledModule of `@f`), `forward_module` (of `@f_fwd`), `nn_module` (the nn module after
    `nn-autodiff`: f, f_fwd, f_bwd), `num_saved`, `differentiable`, `from_cache` (whether the
    compile cache held this program: `coda_ir.runtime.compile_cache`); `backward_module(mask)` is
    the compiled `@f_bwd` variant returning only the gradients of the float arguments selected
    by `mask` (all true: `@f_bwd` itself).
    """

    def __init__(self, source: object, name: str | None = None, *, pipeline: str | None = "nn-to-coda", remarks: bool = False):
        self.remarks = remarks
        with printed_remarks(remarks):
            self._build(source, name, pipeline)

    def _build(self, source: object, name: str | None, pipeline: str | None) -> None:
        module = coda_ir.parse(source)
        funcs = _funcs(module)
        if not funcs:
            raise coda_ir.CompileError(["<torch>: error: the module has no func.func"])
        if name is None:
            # the first function that is not the _fwd / _bwd of another one
            name = next(n for n in funcs if not (n.endswith(("_fwd", "_bwd")) and n[:-4] in funcs))
        if name not in funcs:
            raise coda_ir.CompileError([f"<torch>: error: no func.func @{name} (have {', '.join('@' + n for n in funcs)})"])
        self.name = name
        self.fwd_name, self.bwd_name = f"{name}_fwd", f"{name}_bwd"
        self.pipeline = _split_pipeline(pipeline)

        fn = funcs[name]
        self.rows = symbolic_rows(module)
        self.args = _arg_specs(fn)
        self._signature = [a.signature() for a in self.args]  # one object: check_arguments memoizes by it
        self.results = _result_specs(fn)
        self.float_args = [i for i, a in enumerate(self.args) if a.is_float]

        # The compile cache (runtime/compile_cache.py) keeps what follows: the differentiated nn
        # module and each compiled module. Not for compiles asking for remarks (a hit runs no pass).
        self._cache_key = None
        if not self.remarks and compile_cache.enabled():
            # keyed on the whole pipeline: nn-autodiff's options (what the forward saves, the
            # logits' chunks) change the programs as much as the lowering's do
            self._cache_key = compile_cache.program_key(source if isinstance(source, str) else str(module), name,
                                                        (_autodiff_stage(pipeline), self.pipeline))
        cached = compile_cache.load(self._cache_key, "nn") if self._cache_key else None
        self.from_cache = cached is not None and isinstance(cached.get("module"), str)
        if self.from_cache:
            module = coda_ir.parse(cached["module"], "<compile cache>")
            funcs = _funcs(module)
        # Differentiate unless the module already follows the contract (hand-written f_fwd/f_bwd).
        elif not (self.fwd_name in funcs and self.bwd_name in funcs) and self.float_args and _autodiff_registered():
            module = _only_functions(module, [name])
            # sibling linears are packed first, so that the backward is derived from one GEMM
            coda_ir.lower(module, f"{SIBLINGS_PASS},{_autodiff_stage(pipeline)}", remarks=self.remarks)
            funcs = _funcs(module)
        self.differentiable = self.fwd_name in funcs and self.bwd_name in funcs
        kept = [name, self.fwd_name, self.bwd_name] if self.differentiable else [name]
        self.nn_module = _only_functions(module, kept)
        nn_text = str(self.nn_module)
        if self._cache_key and cached is None:
            compile_cache.store(self._cache_key, "nn", {"module": nn_text})

        digest = hashlib.sha256(f"{nn_text}\n{self.pipeline}".encode()).hexdigest()[:16]
        self.op_name = f"{NAMESPACE}::{_identifier(name, 'f')}_{digest}"
        # One forward is compiled now (errors surface here): @f_fwd where there is a backward
        # (a training step runs it, never @f), else @f. The other when first needed (`compiled`:
        # @f without gradients), and each @f_bwd variant when first needed, so a program whose
        # backward does not lower yet still runs without gradients. (Compiling @f too cost a new
        # bucket of token counts a third of its IR compile: LLaMA-1B layer, 0.38 of 1.1 s on CPU.)
        self._compiled: CompiledModule | None = None
        self._forward_module: CompiledModule | None = None
        self._variants: dict[tuple[tuple[bool, ...], bool, bool], CompiledModule] = {}
        self._aliased: dict[tuple[tuple[bool, ...], bool], list[int]] = {}
        self._lock = threading.RLock()
        self._bound: dict[int, BoundFunction] = {}

        self._takes: dict[tuple[int, str], bool] = {}  # (id of a CompiledModule this holds, function): takes seq_len
        # @f_fwd takes @f's arguments, its attention's sequence length included
        first, first_name = (self.forward_module, self.fwd_name) if self.differentiable else (self.compiled, name)
        self.sizes = ("seq_len",) if self._takes_seq_len(first, first_name) else ()
        self.forward_op = _define_op(
            self.op_name, self.args, self.results,
            lambda *t: _as_tuple(self._call(self.compiled, name, t[: len(self.args)], t[len(self.args):])), name, self.sizes
        )
        if self.differentiable:
            self._prepare_autograd(_funcs(self.nn_module))

    # ------------------------------------------------------------------ run-time sizes

    @staticmethod
    def _takes_seq_len(compiled: CompiledModule, name: str) -> bool:
        """Whether the compiled `name` takes the call's sequence length (`seq_len=`)."""
        return compiled.takes_seq_len(name)

    def _compile(self, part: str, ir, facts=None) -> tuple[CompiledModule, object]:
        """`coda_ir.compile` of the module `ir()` builds, or the compile cache's copy of it (`part`
        names which of this function's modules it is in the cache entry), and `facts(compiled)`
        (JSON: what this class reads from the compiled IR, kept in the entry so that a hit need
        not parse it)."""
        if self._cache_key:
            entry = compile_cache.load(self._cache_key, part)
            if entry is not None:
                try:
                    return CompiledModule.from_entry(entry), entry.get("facts")
                except (KeyError, TypeError):
                    pass  # an entry of another layout: compiled again below, and replaced
        with printed_remarks(self.remarks):
            compiled = coda_ir.compile(ir(), self.pipeline, remarks=self.remarks)
        found = facts(compiled) if facts is not None else None
        if self._cache_key:
            compile_cache.store(self._cache_key, part, {**compiled.to_entry(), "facts": found})
        return compiled, found

    def _call(self, compiled: CompiledModule, name: str, tensors, sizes: Sequence[int]):
        """Run the compiled `name`, with `seq_len=` where it takes it (`sizes`: this function's; a
        backward variant whose attention gradient was dropped takes none)."""
        takes = False
        if sizes:
            key = (id(compiled), name)
            takes = self._takes.get(key)
            if takes is None:
                takes = self._takes[key] = self._takes_seq_len(compiled, name)
        if takes:
            return getattr(compiled, name)(*tensors, seq_len=int(sizes[0]))
        return getattr(compiled, name)(*tensors)

    # ------------------------------------------------------------------ forward with saves

    def _prepare_autograd(self, funcs: dict[str, func.FuncOp]) -> None:
        fwd, bwd = funcs[self.fwd_name], funcs[self.bwd_name]
        n = len(self.results)
        fwd_results = _result_specs(fwd)
        self.num_saved = len(fwd_results) - n
        if self.num_saved < 0 or [r.signature()[1:] for r in fwd_results[:n]] != [r.signature()[1:] for r in self.results]:
            raise coda_ir.CompileError([f"<torch>: error: @{self.fwd_name} must return @{self.name}'s results first, then the saved tensors"])
        bwd_args = _arg_specs(bwd)
        expected_grads = [(r.shape, r.dtype) for r in self.results]
        if len(bwd_args) != self.num_saved + n or [(a.shape, a.dtype) for a in bwd_args[self.num_saved:]] != expected_grads:
            raise coda_ir.CompileError(
                [f"<torch>: error: @{self.bwd_name} must take the {self.num_saved} saved tensors of @{self.fwd_name}, "
                 f"then one gradient per result of @{self.name}"]
            )
        grads = [(self.args[i].shape, self.args[i].dtype) for i in self.float_args]
        if [(r.shape, r.dtype) for r in _result_specs(bwd)] != grads:
            raise coda_ir.CompileError([f"<torch>: error: @{self.bwd_name} must return one gradient per float argument of @{self.name}, in order"])
        self._bwd_args = bwd_args

        # Which saved tensors are inputs or f's results already: save those without a copy.
        returned = list(fwd.body.blocks[0].last_op.operands)
        self.saved: list[SavedTensor] = []
        extra_positions: list[int] = []  # positions in f_fwd's results the op must return
        for j, value in enumerate(returned[n:]):
            if isinstance(value, BlockArgument):
                self.saved.append(SavedTensor("input", value.index))
            elif any(value is r for r in returned[:n]):
                self.saved.append(SavedTensor("result", next(i for i, r in enumerate(returned[:n]) if value is r)))
            else:
                self.saved.append(SavedTensor("extra", len(extra_positions)))
                extra_positions.append(n + j)
        picked = list(range(n)) + extra_positions
        extra_specs = [fwd_results[p] for p in extra_positions]

        def run_fwd(*inputs):
            k = len(self.args)
            outs = _as_tuple(self._call(self.forward_module, self.fwd_name, inputs[:k], inputs[k:]))
            return tuple(outs[p] for p in picked)

        self.fwd_op = _define_op(f"{self.op_name}_fwd", self.args, [*self.results, *extra_specs], run_fwd, self.fwd_name,
                                 self.sizes)
        if not getattr(self.fwd_op, "_coda_autograd", False):
            self.fwd_op.register_autograd(self._backward, setup_context=self._setup_context)
            self.fwd_op._coda_autograd = True
        self._eager_forward = self._direct_forward(run_fwd)

    def _direct_forward(self, run_fwd) -> type[torch.autograd.Function]:
        """The forward of `fwd_op` for plain eager calls (`_plain_eager`): the same run, saved
        tensors and backward, as an autograd.Function called directly. The custom op's dispatch
        (schema defaults, redispatch below autograd, Dynamo's disable wrapper) cost ~0.2 ms of
        host time per call, which in a step of short kernels is GPU idle time; what it serves
        (torch.compile, FakeTensor tracing, dispatch modes) takes `fwd_op` as before. The extra
        outputs are private here: `__call__` drops them."""
        function = self

        def forward(ctx, *inputs):
            outs = _unaliased(run_fwd(*inputs), inputs[: len(function.args)])
            function._setup_context(ctx, inputs, outs)
            ctx.coda_extras_private = True
            return outs

        def backward(ctx, *grads):
            return function._backward(ctx, *grads)

        # named by the function (autograd names its node `<name>Backward`)
        return type(f"{_identifier(self.name, 'f')}_forward", (torch.autograd.Function,),
                    {"forward": staticmethod(forward), "backward": staticmethod(backward)})

    def _setup_context(self, ctx, inputs, output) -> None:
        output = _as_tuple(output)
        n = len(self.results)
        saved = []
        for s in self.saved:
            if s.source == "input":
                saved.append(inputs[s.index])
            elif s.source == "result":
                saved.append(output[s.index])
            else:
                saved.append(output[n + s.index])
        ctx.save_for_backward(*saved)
        ctx.coda_sizes = tuple(inputs[len(self.args):])  # seq_len: the backward's attention takes it too
        ctx.coda_rows = _rows_of(self.args, inputs[: len(self.args)])
        ctx.coda_extras_private = getattr(_PRIVATE_EXTRAS, "active", False)
        # the extra outputs exist only to be saved: no gradient flows into them. Autograd must
        # not materialize their (absent) gradients as zero tensors either: that was a full-size
        # fill of every saved activation in every step (7 per decoder layer, logits-sized for
        # the LM head); a missing gradient of a real result is filled in `_backward`.
        ctx.set_materialize_grads(False)
        if len(output) > n:
            ctx.mark_non_differentiable(*output[n:])

    def _backward(self, ctx, *grads):
        n = len(self.results)
        saved = ctx.saved_tensors
        mask = tuple(bool(ctx.needs_input_grad[i]) for i in self.float_args)
        gradients: list[torch.Tensor | None] = [None] * (len(self.args) + len(self.sizes))
        if not any(mask):
            return tuple(gradients)
        sizes = ctx.coda_sizes
        device = next((t.device for t in (*saved, *grads) if isinstance(t, torch.Tensor)), torch.device("cpu"))
        upstream = []
        for g, spec in zip(grads[:n], self.results):
            # a result the loss does not use has no gradient: the backward takes zeros
            upstream.append(torch.zeros(spec.sized(ctx.coda_rows), dtype=spec.dtype, device=device) if g is None else g)
        # Eager autograd that does not keep the graph: the saved tensors are read by this backward
        # only, so @f_bwd takes them over and drops each at its last reader. Traced backwards
        # (torch.compile, AOT dispatch: fake or functional tensor subclasses, dispatch modes)
        # keep the pure op, whose graph the partitioner can split.
        # (a backward that saved nothing has nothing to hand over: e.g. a sum's)
        hand_over = (runtime_config.current().donate_saved and self.num_saved > 0 and not _keeps_graph() and not torch.compiler.is_compiling()
                     and all(type(t) in (torch.Tensor, torch.nn.Parameter) for t in (*saved, *upstream) if t is not None)
                     and _no_dispatch_mode())
        if hand_over:
            # the extra saved tensors are this ctx's alone (f's caller never sees them) and die
            # with it: @f_bwd may also write over them
            donate = getattr(ctx, "coda_extras_private", False) and bool(self.donated_arguments())
            arguments = [*saved, *upstream]
            del saved, upstream
            # the ctx's own references (autograd's `SavedVariable`s) go now, as AOTAutograd's
            # backward does: from here `arguments` holds the only references this backward has
            clear = getattr(ctx, "maybe_clear_saved_tensors", None)
            if clear is not None:
                clear()
            outs = self._run_handing_over(mask, donate, arguments, sizes)
        else:
            outs = _as_tuple(self._backward_op(mask)(*saved, *upstream, *sizes))
        wanted = [i for i, keep in zip(self.float_args, mask) if keep]
        for i, g in zip(wanted, outs):
            gradients[i] = g
        return tuple(gradients)

    @property
    def compiled(self) -> CompiledModule:
        """The compiled `@f` (compiled on first use where the function is differentiable)."""
        with self._lock:
            if self._compiled is None:
                self._compiled = self._compile("f", lambda: _only_functions(self.nn_module, [self.name]))[0]
            return self._compiled

    @property
    def forward_module(self) -> CompiledModule:
        """The compiled `@f_fwd` (compiled on first use)."""
        if not self.differentiable:
            raise ArgumentError(f"@{self.name} has no @{self.fwd_name}: cannot compute gradients")
        with self._lock:
            if self._forward_module is None:
                self._forward_module = self._compile("fwd", lambda: _only_functions(self.nn_module, [self.fwd_name]))[0]
            return self._forward_module

    # ------------------------------------------------------------------ backward variants

    def donated_arguments(self) -> list[int]:
        """The arguments of `@f_bwd` a donating backward gives away: the saved tensors that
        `@f_fwd` computed only for the backward."""
        return [j for j, s in enumerate(self.saved) if s.source == "extra"]

    def backward_module(self, mask: Sequence[bool], donate: bool = False, hand_over: bool = False) -> CompiledModule:
        """The compiled `@f_bwd` returning only the gradients of the float arguments selected by
        `mask` (one bool per float argument, in order), with the work only the others needed
        removed. With `donate`, its arguments `donated_arguments()` are marked `coda.donated`:
        the compiled function may overwrite them (kernels recorded `coda.writes_over`). With
        `hand_over`, the saved tensors (its first `num_saved` arguments) are marked `coda.owned`:
        the compiled function takes all its arguments in one list, which it empties, and drops
        each saved tensor after its last reader. Compiled once per (mask, donate, hand_over)."""
        if not self.differentiable:
            raise ArgumentError(f"@{self.name} has no @{self.bwd_name}: cannot compute gradients")
        mask = tuple(bool(m) for m in mask)
        if len(mask) != len(self.float_args):
            raise ArgumentError(f"mask has {len(mask)} entries, @{self.name} has {len(self.float_args)} float arguments")
        key = (mask, bool(donate), bool(hand_over))
        with self._lock:
            variant = self._variants.get(key)
            if variant is None:
                part = f"bwd-{''.join('1' if m else '0' for m in mask)}-{int(bool(donate))}-{int(bool(hand_over))}"
                variant, aliased = self._compile(part, lambda: self._backward_variant_ir(mask, bool(donate), bool(hand_over)),
                                                 self._returned_aliases if hand_over else None)
                if hand_over and isinstance(aliased, list):
                    self._aliased[(mask, bool(donate))] = aliased
                self._variants[key] = variant
            return variant

    def _backward_variant_ir(self, mask: tuple[bool, ...], donate: bool = False, hand_over: bool = False) -> ModuleOp:
        from xdsl.transforms.dead_code_elimination import dce

        module = _only_functions(self.nn_module, [self.bwd_name])
        bwd = _funcs(module)[self.bwd_name]
        ret = bwd.body.blocks[0].last_op
        kept: list[SSAValue] = [v for v, keep in zip(ret.operands, mask) if keep]
        new_ret = func.ReturnOp(*kept)
        bwd.body.blocks[0].insert_op_before(new_ret, ret)
        bwd.body.blocks[0].erase_op(ret)
        bwd.function_type = FunctionType.from_lists(list(bwd.function_type.inputs.data), [v.type for v in kept])
        if not all(mask):
            dce(module)  # nn ops are Pure: the kernels only the dropped gradients used disappear
        if donate:
            donate_arguments(bwd, self.donated_arguments())
        if hand_over:
            own_arguments(bwd, range(self.num_saved))
        return module

    def _run_handing_over(self, mask: tuple[bool, ...], donate: bool, arguments: list[torch.Tensor],
                          sizes: Sequence[int] = ()) -> tuple[torch.Tensor, ...]:
        """Run the `hand_over` variant of `@f_bwd` on `arguments` (saved tensors, then upstream
        gradients), which it empties: called directly, not through the custom op, whose
        dispatcher would hold every argument until it returns. What the op adds is kept: a
        gradient that is an argument as is (or another gradient) is copied (`_unaliased`),
        decided from the IR since a dropped argument's memory may hold a new output by then."""
        module = self.backward_module(mask, donate, hand_over=True)
        aliased = self._aliased.get((mask, donate))
        if aliased is None:
            aliased = self._aliased[(mask, donate)] = self._returned_aliases(module)
        # the saved index arguments (ids, targets) are those the forward call checked
        with indices_checked():
            outs = _as_tuple(self._call(module, self.bwd_name, [arguments], sizes))
        return tuple(o.clone() if i in aliased else o for i, o in enumerate(outs))

    def _returned_aliases(self, module: CompiledModule) -> list[int]:
        """The results of the compiled `@f_bwd` that are one of its arguments as is, or another
        result (`_run_handing_over` copies those)."""
        bwd = next(f for f in module.ir.walk() if isinstance(f, func.FuncOp) and f.sym_name.data == self.bwd_name)
        returned = list(bwd.body.blocks[0].last_op.operands)
        return [i for i, v in enumerate(returned) if isinstance(v, BlockArgument) or any(v is w for w in returned[:i])]

    def _backward_op(self, mask: tuple[bool, ...]):
        bits = "".join("1" if m else "0" for m in mask)
        qualname = f"{self.op_name}_bwd_{bits}"
        with _OPS_LOCK:
            op = _OPS.get(qualname)
        if op is not None:
            return op
        wanted = [self.args[i] for i, keep in zip(self.float_args, mask) if keep]
        specs = [TensorSpec(f"d{a.name}", a.shape, a.dtype) for a in wanted]

        def run_bwd(*inputs):
            k = len(self._bwd_args)
            # the saved index arguments (ids, targets) are those the forward call checked
            with indices_checked():
                return _as_tuple(self._call(self.backward_module(mask), self.bwd_name, inputs[:k], inputs[k:]))

        return _define_op(qualname, self._bwd_args, specs, run_bwd, self.bwd_name, self.sizes)

    # ------------------------------------------------------------------ calling

    def check(self, tensors: Sequence[object], seq_len: object = None) -> tuple[int, ...]:
        """Raise ArgumentError for a wrong number, shape, dtype or device of tensors, or for
        meta tensors (no data), or a missing or wrong `seq_len` (where the function takes one:
        an int dividing the row count); never casts. Returns the trailing integer arguments of
        the ops (`(seq_len,)` or `()`)."""
        rows = check_arguments(self.name, tensors, self._signature)
        _refuse_meta(self.name, self.args, tensors)
        if not self.sizes:
            if seq_len is not None:
                raise ArgumentError(f"{self.name}() takes no seq_len (its attention, if any, has a static sequence "
                                    "length)", "seq_len")
            return ()
        if seq_len is None:
            raise ArgumentError(f"{self.name}() takes the sequence length of its attention as seq_len=<int> "
                                "(a run-time row count, #coda.rows)", "seq_len")
        return (check_seq_len(self.name, seq_len, rows),)

    def __call__(self, *tensors: torch.Tensor, seq_len: int | None = None):
        sizes = self.check(tensors, seq_len)
        needs_grad = torch.is_grad_enabled() and any(tensors[i].requires_grad for i in self.float_args)
        if needs_grad:
            if not self.differentiable:
                raise ArgumentError(
                    f"{self.name}(): an input requires grad but @{self.name} has no @{self.bwd_name} "
                    f"(the {AUTODIFF_PASS} pass is not available and the module does not define it)"
                )
            if torch.compiler.is_compiling():  # Dynamo cannot trace the thread-local flag; donation is eager-only
                outs = _as_tuple(self.fwd_op(*tensors, *sizes))[: len(self.results)]
            elif _plain_eager(tensors):
                outs = self._eager_forward.apply(*tensors, *sizes)[: len(self.results)]
            else:
                before = getattr(_PRIVATE_EXTRAS, "active", False)
                _PRIVATE_EXTRAS.active = True  # the extra outputs are dropped right here
                try:
                    outs = _as_tuple(self.fwd_op(*tensors, *sizes))[: len(self.results)]
                finally:
                    _PRIVATE_EXTRAS.active = before
        else:
            outs = _as_tuple(self.forward_op(*tensors, *sizes))
        return outs[0] if len(outs) == 1 else outs

    def bind(self, seq_len: int) -> "BoundFunction":
        """This function with its attention's sequence length fixed (one object per length)."""
        with self._lock:
            bound = self._bound.get(seq_len)
            if bound is None:
                bound = self._bound[seq_len] = BoundFunction(self, seq_len)
            return bound

    def __repr__(self) -> str:
        return f"<coda_ir.torch.function @{self.name} op={self.op_name}>"


class BoundFunction:
    """A `CodaFunction` of a run-time row count called with one sequence length:
    `bound(*tensors)` is `function(*tensors, seq_len=bound.seq_len)`; other attributes are the
    function's."""

    def __init__(self, function: CodaFunction, seq_len: int):
        self.function, self.seq_len = function, seq_len

    def __call__(self, *tensors: torch.Tensor):
        return self.function(*tensors, seq_len=self.seq_len)

    def __getattr__(self, name: str):
        if name == "function":  # not set yet (copying)
            raise AttributeError(name)
        return getattr(self.function, name)

    def __repr__(self) -> str:
        return f"<{self.function!r} seq_len={self.seq_len}>"


def function(source: object, name: str | None = None, *, pipeline: str | None = "nn-to-coda", remarks: bool = False) -> CodaFunction:
    """Compile the nn function `name` (default: the first) of `source` (MLIR text, a path or an
    xDSL ModuleOp) into a callable on torch tensors, differentiable through `@f_bwd`.

    When the module does not define `@<name>_fwd` and `@<name>_bwd` itself, the `nn-autodiff`
    pass makes them; `pipeline` is the lowering that follows (a leading `nn-autodiff` is
    accepted and ignored). Returns a `CodaFunction`: call it with tensors of the argument types
    (a tensor, or a tuple when the function has several results). `remarks=True` prints the
    compiler's remarks on stderr; by default they are only recorded (coda_ir.remarks.EMITTED)."""
    return CodaFunction(source, name, pipeline=pipeline, remarks=remarks)
