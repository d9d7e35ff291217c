"""The reference interpreter of the coda dialect: what a coda program means, on torch tensors.

Every kernel runs as ONE tile that covers the whole matrix, so every partial reduction has a
single tile and is already combined (sum, max or log-sum-exp over the whole row / column):
that is the math the dialect's docstring (coda_ir/dialects/coda.py) defines. Tiling, masking
and the order of partial folds are the lowering's business and are not modelled here. The
lowering tests compare compiled kernels with it; the hand-written programs of
tests/programs/coda are checked against it.

Rounding model (`compute`):
* torch.float64 (ref64): tiles are float64 and stored results stay float64: nothing rounded.
* torch.float32 (ref_T): tiles are fp32, every stored tensor result (kernel output, fold
  result, library step) is rounded once to its element type (bf16 ...), and the next kernel
  reads the rounded value: what a compiled program does, up to fp32 summation order and
  transcendental ulps. Partials results are returned unrounded (compute dtype).

Layouts: a gemm with `interleave h` holds accumulator column c = weight row perm(c)
(`interleave_perm`); N-wide loads, column broadcasts and stores are taken at perm(c);
`interleave_wide h` does the same for 2N-wide tensors. Tiles are kept in the kernel's own
(permuted) column order; `coda.index cols` gives the logical column perm(c); `coda.select` and
dim-0 partials are indexed by logical column.

It is an xDSL `Interpreter` (`@impl` per op, as `xdsl/interpreters/` does): `CodaFunctions`
implements the coda ops; the scalar bodies run on `TorchArithFunctions` / `TorchMathFunctions`
(coda_ir/interpreters/arith.py) and functions on xDSL's own `FuncFunctions`.

    run_coda(module_or_func, inputs, compute=torch.float64, func_name=None) -> list[Tensor]
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    PythonValues,
    ReturnedValues,
    TerminatorValue,
    impl,
    impl_terminator,
    register_impls,
)
from xdsl.interpreters.func import FuncFunctions
from xdsl.ir import Operation, SSAValue

from coda_ir.dialects import coda
from coda_ir.errors import CodaError, internal_error
from coda_ir.interpreters.arith import TorchArithFunctions, TorchMathFunctions
from coda_ir.interpreters.common import InterpreterInputError, check_input_count, element_dtype, load_func
from coda_ir.interpreters.nn import attention_reference, checked_ids

__all__ = ["CodaFunctions", "coda_interpreter", "run_coda", "interleave_perm", "combine"]


def interleave_perm(width: int, h: int) -> torch.Tensor:
    """perm[c] = the natural column held by kernel column c (groups of 2h, c = 2i + j -> i + j*h);
    h = 0: no interleave (identity)."""
    c = torch.arange(width)
    if not h:
        return c
    within = c % (2 * h)
    return (c // (2 * h)) * (2 * h) + within // 2 + (within % 2) * h


def combine(x: torch.Tensor, kind: coda.ReduceKind, dim: int, keepdim: bool = False) -> torch.Tensor:
    """The reduction `kind` of `x` along `dim` (sumsq: the sum of squares)."""
    if kind == coda.ReduceKind.SUM:
        return x.sum(dim, keepdim=keepdim)
    if kind == coda.ReduceKind.SUMSQ:
        return (x * x).sum(dim, keepdim=keepdim)
    if kind == coda.ReduceKind.MAX:
        return x.amax(dim, keepdim=keepdim)
    return torch.logsumexp(x, dim, keepdim=keepdim)


class _Layout:
    """The column permutation of a kernel: which widths are permuted, and how."""

    def __init__(self, kernel: Operation | None):
        self.perms: dict[int, torch.Tensor] = {}
        if isinstance(kernel, coda.GemmOp):
            _, n, _ = kernel.problem_shape()
            if kernel.interleave is not None:
                self.perms[n] = interleave_perm(n, kernel.interleave.value.data)
            if kernel.interleave_wide is not None:
                self.perms[2 * n] = interleave_perm(2 * n, kernel.interleave_wide.value.data)

    def cols(self, width: int) -> torch.Tensor:
        """The logical column of each kernel column of a `width`-wide tile."""
        return self.perms.get(width, torch.arange(width))

    def to_kernel(self, t: torch.Tensor) -> torch.Tensor:
        """A matrix (or column vector, dim -1) in the user's layout -> kernel column order."""
        p = self.perms.get(t.shape[-1])
        return t if p is None else t[..., p]

    def to_user(self, t: torch.Tensor) -> torch.Tensor:
        p = self.perms.get(t.shape[-1])
        if p is None:
            return t
        out = torch.empty_like(t)
        out[..., p] = t
        return out


def _layout(op: Operation) -> _Layout:
    """The layout of the kernel whose epilogue holds `op` (tile primitives live directly in it)."""
    return _Layout(op.parent_op())


def _tile_shape(value: SSAValue) -> tuple[int, int]:
    ty = value.type
    assert isinstance(ty, coda.TileType)
    return ty.get_shape()


@register_impls
class CodaFunctions(InterpreterFunctions):
    """The coda ops on torch tensors; `compute` is torch.float64 (ref64) or torch.float32 (ref_T)."""

    def __init__(self, compute: torch.dtype = torch.float64):
        self.compute = compute
        self.exact = compute == torch.float64

    # ------------------------------------------------------------------ values

    def load(self, t: torch.Tensor) -> torch.Tensor:
        """A stored tensor as a kernel reads it: floats in the compute dtype, integers as int64."""
        return t.to(self.compute) if t.dtype.is_floating_point else t.to(torch.int64)

    def store(self, t: torch.Tensor, result: SSAValue) -> torch.Tensor:
        """A value written to a tensor result: rounded once to its element type (ref_T), kept
        in float64 (ref64)."""
        dtype = element_dtype(result.type)
        if not dtype.is_floating_point:
            return t.to(dtype)
        return t.to(torch.float64) if self.exact else t.to(dtype)

    # ------------------------------------------------------------------ regions

    @impl_terminator(coda.YieldOp)
    def run_yield(self, interpreter: Interpreter, op: coda.YieldOp, args: PythonValues) -> tuple[TerminatorValue, PythonValues]:
        return ReturnedValues(args), ()

    def _finish(self, kernel: Operation, region_block, ys: PythonValues) -> PythonValues:
        """The kernel results from the values its region yields: tiles are stored in the user's
        layout; partials results stay combined values; a reduction completed in the program
        (`whole rows|cols`) is stored like a fold result."""
        layout = _Layout(kernel)
        yielded = region_block.last_op.operands
        out = []
        for value, y, result in zip(yielded, ys, kernel.results):
            if isinstance(result.type, coda.PartialsType):
                out.append(y)
            elif isinstance(value.type, coda.PartialsType):
                out.append(self.store(y, result))
            else:
                m, w = result.type.get_shape()
                out.append(self.store(layout.to_user(y.expand(m, w)), result))
        return tuple(out)

    # ------------------------------------------------------------------ kernels

    @impl(coda.GemmOp)
    def run_gemm(self, interpreter: Interpreter, op: coda.GemmOp, args: PythonValues) -> PythonValues:
        a, b = self.load(args[0]), self.load(args[1])
        if op.transpose_a is not None:
            a = a.T
        if op.transpose_b is not None:
            b = b.T
        acc = _Layout(op).to_kernel(a @ b)
        ys = interpreter.run_ssacfg_region(op.epilogue, (acc, *args[2:]), "coda.gemm")
        return self._finish(op, op.epilogue.blocks[0], ys)

    @impl(coda.ElementwiseOp)
    def run_elementwise(self, interpreter: Interpreter, op: coda.ElementwiseOp, args: PythonValues) -> PythonValues:
        ys = interpreter.run_ssacfg_region(op.body, args, "coda.elementwise")
        return self._finish(op, op.body.blocks[0], ys)

    @impl(coda.FoldOp)
    def run_fold(self, interpreter: Interpreter, op: coda.FoldOp, args: PythonValues) -> PythonValues:
        n_partials = len(op.partials)
        # partials are combined values already (one tile); inputs are read like any stored tensor
        body_args = [*args[:n_partials], *(self.load(t) for t in args[n_partials:])]
        ys = interpreter.run_ssacfg_region(op.body, tuple(body_args), "coda.fold")
        length = op.length()
        stored: list = [None] * len(op.outputs)
        sums: list[tuple[int, torch.Tensor]] = []
        for i, (y, r) in enumerate(zip(ys, op.outputs)):
            y = y.expand(length) if y.dim() == 0 else y
            if r.type.get_shape():
                stored[i] = y
            else:  # a 0-d result: the sum of the per-row values over all rows
                sums.append((i, y.sum()))
        if op.finalize.blocks and sums:
            finals = interpreter.run_ssacfg_region(op.finalize, tuple(s for _, s in sums), "coda.fold finalize")
            sums = [(i, f) for (i, _), f in zip(sums, finals)]
        for i, s in sums:
            stored[i] = s
        return tuple(self.store(t, r) for t, r in zip(stored, op.outputs))

    @impl(coda.LaunchGroupOp)
    def run_launch_group(self, interpreter: Interpreter, op: coda.LaunchGroupOp, args: PythonValues) -> PythonValues:
        # members are independent (the verifier checks it): running them in order is their meaning
        return interpreter.run_ssacfg_region(op.body, (), "coda.launch_group")

    # ------------------------------------------------------------------ epilogue primitives

    @impl(coda.LoadOp)
    def run_load(self, interpreter: Interpreter, op: coda.LoadOp, args: PythonValues) -> PythonValues:
        layout = _layout(op)
        src = self.load(args[0])
        if op.period is not None:
            # an [M, P] table repeated along the tile's columns (the user's columns, permuted
            # like any access of this width)
            _, w = _tile_shape(op.result)
            return (src[:, layout.cols(w) % op.period],)
        return (layout.to_kernel(src),)

    def _vector_tile(self, v: torch.Tensor, axis: coda.Axis, m: int, w: int, layout: _Layout) -> torch.Tensor:
        v = self.load(v)
        if axis == coda.Axis.SCALAR:
            return v.reshape(()).expand(m, w)
        if axis == coda.Axis.ROWS:
            return v[:, None].expand(m, w)
        return v[layout.cols(w) % v.shape[0]][None, :].expand(m, w)

    @impl(coda.BroadcastOp)
    def run_broadcast(self, interpreter: Interpreter, op: coda.BroadcastOp, args: PythonValues) -> PythonValues:
        m, w = _tile_shape(op.result)
        return (self._vector_tile(args[0], op.axis.data, m, w, _layout(op)),)

    @impl(coda.IndexOp)
    def run_index(self, interpreter: Interpreter, op: coda.IndexOp, args: PythonValues) -> PythonValues:
        m, w = _tile_shape(op.result)
        if op.axis.data == coda.Axis.ROWS:
            return (torch.arange(m)[:, None].expand(m, w),)
        return (_layout(op).cols(w)[None, :].expand(m, w),)

    @impl(coda.ScaleOp)
    def run_scale(self, interpreter: Interpreter, op: coda.ScaleOp, args: PythonValues) -> PythonValues:
        t = args[0]
        return (t * self._vector_tile(args[1], op.axis.data, *t.shape, _layout(op)),)

    @impl(coda.ShiftOp)
    def run_shift(self, interpreter: Interpreter, op: coda.ShiftOp, args: PythonValues) -> PythonValues:
        t = args[0]
        return (t + self._vector_tile(args[1], op.axis.data, *t.shape, _layout(op)),)

    @impl(coda.AccumulateOp)
    def run_accumulate(self, interpreter: Interpreter, op: coda.AccumulateOp, args: PythonValues) -> PythonValues:
        return (args[0] + _layout(op).to_kernel(self.load(args[1])),)

    @impl(coda.MapOp)
    def run_map(self, interpreter: Interpreter, op: coda.MapOp, args: PythonValues) -> PythonValues:
        ys = interpreter.run_ssacfg_region(op.body, args, "coda.map")
        # a body may yield a constant: broadcast it to the result tile
        return tuple(y.expand(_tile_shape(r)) for y, r in zip(ys, op.outputs))

    @impl(coda.PairMapOp)
    def run_pair_map(self, interpreter: Interpreter, op: coda.PairMapOp, args: PythonValues) -> PythonValues:
        pairs = op.pair_count()
        first_cols, second_cols = op.pair_columns()

        def split(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            """A wide tile -> (first, second) element of each pair, each [M, pairs]."""
            return t[:, torch.tensor(first_cols, device=t.device)], t[:, torch.tensor(second_cols, device=t.device)]

        def join(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
            out = first.new_empty(first.shape[0], 2 * pairs)
            out[:, torch.tensor(first_cols, device=out.device)] = first
            out[:, torch.tensor(second_cols, device=out.device)] = second
            return out

        body_args: list[torch.Tensor] = []
        for v, t in zip(op.inputs, args):
            if op.is_wide(v):
                body_args.extend(split(t))
            else:
                body_args.append(t)
        ys = interpreter.run_ssacfg_region(op.body, tuple(body_args), "coda.pair_map")
        m = _tile_shape(op.outputs[0])[0]
        outs, k = [], 0
        for r in op.outputs:
            if op.is_wide(r):
                outs.append(join(ys[k].expand(m, pairs), ys[k + 1].expand(m, pairs)))
                k += 2
            else:
                outs.append(ys[k].expand(m, pairs))
                k += 1
        return tuple(outs)

    @impl(coda.ReduceOp)
    def run_reduce(self, interpreter: Interpreter, op: coda.ReduceOp, args: PythonValues) -> PythonValues:
        dim = op.dim.value.data
        r = combine(args[0], op.kind.data, dim)
        if dim == 0:  # per-column partials are indexed by logical column
            r = _layout(op).to_user(r)
        return (r,)

    @impl(coda.SegmentReduceOp)
    def run_segment_reduce(self, interpreter: Interpreter, op: coda.SegmentReduceOp, args: PythonValues) -> PythonValues:
        t = args[0]
        m, w = t.shape
        width = op.width.value.data
        seg = combine(t.reshape(m, w // width, width), op.kind.data, -1, keepdim=True)
        return (seg.expand(m, w // width, width).reshape(m, w),)

    @impl(coda.SelectOp)
    def run_select(self, interpreter: Interpreter, op: coda.SelectOp, args: PythonValues) -> PythonValues:
        t = _layout(op).to_user(args[0])
        idx = args[1].to(torch.int64)
        w = t.shape[1]
        ok = (idx >= 0) & (idx < w)  # a row whose index is outside the tile contributes 0
        picked = t.gather(1, torch.where(ok, idx, 0)[:, None])[:, 0]
        return (torch.where(ok, picked, torch.zeros((), dtype=t.dtype)),)

    # ------------------------------------------------------------------ library steps
    # The semantics of the nn ops they implement (coda_ir/interpreters/nn.py), in the compute dtype,
    # each result rounded once when stored.

    @impl(coda.EmbeddingOp)
    def run_embedding(self, interpreter: Interpreter, op: coda.EmbeddingOp, args: PythonValues) -> PythonValues:
        w = self.load(args[1])
        return (self.store(w[checked_ids(args[0], w.shape[0], op)], op.result),)

    @impl(coda.EmbeddingGradOp)
    def run_embedding_grad(self, interpreter: Interpreter, op: coda.EmbeddingGradOp, args: PythonValues) -> PythonValues:
        dy = self.load(args[0])
        v = op.result.type.get_shape()[0]
        dw = torch.zeros((v, dy.shape[1]), dtype=dy.dtype).index_add_(0, checked_ids(args[1], v, op), dy)
        return (self.store(dw, op.result),)

    @impl(coda.ConcatOp)
    def run_concat(self, interpreter: Interpreter, op: coda.ConcatOp, args: PythonValues) -> PythonValues:
        return (self.store(torch.cat([self.load(t) for t in args], dim=op.axis.value.data), op.result),)

    @impl(coda.SliceOp)
    def run_slice(self, interpreter: Interpreter, op: coda.SliceOp, args: PythonValues) -> PythonValues:
        axis = op.axis.value.data
        size = op.result.type.get_shape()[axis]
        return (self.store(self.load(args[0]).narrow(axis, op.start.value.data, size), op.result),)

    @impl(coda.AttentionOp)
    def run_attention(self, interpreter: Interpreter, op: coda.AttentionOp, args: PythonValues) -> PythonValues:
        out, lse = attention_reference(self.load(args[0]), op, *[self.load(t) for t in args[1:]])
        return (self.store(out, op.out), self.store(lse, op.lse))

    @impl(coda.AttentionGradOp)
    def run_attention_grad(self, interpreter: Interpreter, op: coda.AttentionGradOp, args: PythonValues) -> PythonValues:
        # recomputed from qkv, as nn.attention_grad means it (the saved out and lse are what a
        # kernel reads instead)
        qkv = self.load(args[0]).detach().requires_grad_(True)
        with torch.enable_grad():
            out, _ = attention_reference(qkv, op, *[self.load(t) for t in args[4:]])
            (grad,) = torch.autograd.grad(out, qkv, self.load(args[3]))
        return (self.store(grad, op.result),)


def coda_interpreter(module: ModuleOp, compute: torch.dtype = torch.float64) -> Interpreter:
    """An xDSL `Interpreter` of `module` with the coda, arith, math (on tensors) and func impls."""
    interpreter = Interpreter(module)
    interpreter.register_implementations(FuncFunctions())
    interpreter.register_implementations(TorchArithFunctions(compute))
    interpreter.register_implementations(TorchMathFunctions())
    interpreter.register_implementations(CodaFunctions(compute))
    return interpreter


def run_coda(
    module_or_func: ModuleOp | func.FuncOp | str | os.PathLike,
    inputs: Sequence[torch.Tensor],
    compute: torch.dtype = torch.float64,
    *,
    func_name: str | None = None,
) -> list[torch.Tensor]:
    """Run a coda function (a `func.func` of kernels, launch groups and library steps) on
    whole-matrix tiles and return its results: tensors (float64 with `compute=torch.float64`,
    else their element types) and, for partials results, the combined per-row / per-column
    values (a partials argument takes them too)."""
    fn = load_func(module_or_func, func_name)
    check_input_count(fn, inputs)
    block = fn.body.blocks[0]
    args = []
    for arg, value in zip(block.args, inputs):
        ty = arg.type
        # a partials argument is passed as its combined values (one per row / column), the way
        # the interpreter represents partials everywhere
        shape = (ty.length.data,) if isinstance(ty, coda.PartialsType) else tuple(ty.get_shape())
        if tuple(value.shape) != shape:
            raise InterpreterInputError(f"input {arg.name_hint}: shape {tuple(value.shape)}, expected {shape}", arg.name_hint)
        args.append(value.to(torch.float64) if compute == torch.float64 and value.dtype.is_floating_point else value)
    module = fn.parent_op()
    if not isinstance(module, ModuleOp):
        module = ModuleOp([])  # a detached function: only symbol look-ups need the module
    try:
        return list(coda_interpreter(module, compute).call_op(fn, tuple(args)))
    except CodaError:
        raise  # bad input (ids / targets out of range), located
    except Exception as error:  # an op the interpreter cannot run is a bug of coda-ir, not of the input
        raise internal_error(error, f"interpreting @{fn.sym_name.data}") from error
