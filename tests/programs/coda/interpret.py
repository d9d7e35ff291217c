"""A whole-matrix interpreter of coda programs, in PyTorch: the dialect's semantics as an oracle.

Every kernel runs as ONE tile that covers the whole matrix (so every partial reduction has a
single tile and folds trivially). That is the math the coda dialect's docstring defines; tiling,
masking and the order of partial folds are the lowering's business and are not modelled here.
It exists so that the hand-written programs of tests/programs/coda can be checked against their
independent references (tests/programs/coda/references.py), and so that a lowering can be
compared with the IR's meaning on small shapes.

Rounding model (`compute`):
* torch.float64: every tile value is float64, stored results stay float64 (no rounding).
* torch.float32: tiles are fp32, every stored tile / fold result is rounded once to its result
  element type (bf16 ...), and the next kernel reads the rounded value: what a compiled program
  does, up to fp32 summation order and transcendental ulps.

Layouts: a gemm with `interleave h` holds accumulator column c = weight row perm(c)
(perm: within groups of 2h, c = 2i + j -> i + j*h); N-wide loads, column broadcasts of length N,
and stores are taken at perm(c). `interleave_wide h` does the same for 2N-wide tensors. Tiles are
kept in the kernel's own (permuted) column order; `coda.index cols` gives the logical column
perm(c); `coda.select` and dim-0 partials are indexed by logical column.

    run_coda(module_or_func, inputs, compute=torch.float64, func_name=None) -> list[Tensor]
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    TensorType,
)
from xdsl.ir import Block, SSAValue

from coda_ir.dialects import coda
from coda_ir.reference import f32_value, load_func, torch_dtype

__all__ = ["run_coda", "interleave_perm"]


def interleave_perm(width: int, h: int) -> torch.Tensor:
    """perm[c] = the natural column held by kernel column c (groups of 2h, c = 2i + j -> i + j*h)."""
    c = torch.arange(width)
    within = c % (2 * h)
    return (c // (2 * h)) * (2 * h) + within // 2 + (within % 2) * h


# ============================================================================ scalar bodies

_CMPI = {
    0: torch.eq, 1: torch.ne, 2: torch.lt, 3: torch.le, 4: torch.gt, 5: torch.ge,
    6: torch.lt, 7: torch.le, 8: torch.gt, 9: torch.ge,
}  # unsigned predicates: values here are non-negative where they are used
_CMPF = {
    1: torch.eq, 2: torch.gt, 3: torch.ge, 4: torch.lt, 5: torch.le, 6: torch.ne,
    8: torch.eq, 9: torch.gt, 10: torch.ge, 11: torch.lt, 12: torch.le, 13: torch.ne,
}

_UNARY_F = {
    "math.exp": torch.exp,
    "math.exp2": torch.exp2,
    "math.expm1": torch.expm1,
    "math.log": torch.log,
    "math.log2": torch.log2,
    "math.log1p": torch.log1p,
    "math.sqrt": torch.sqrt,
    "math.rsqrt": torch.rsqrt,
    "math.tanh": torch.tanh,
    "math.sin": torch.sin,
    "math.cos": torch.cos,
    "math.erf": torch.erf,
    "math.absf": torch.abs,
    "math.floor": torch.floor,
    "math.ceil": torch.ceil,
    "math.atan": torch.atan,
    "arith.negf": torch.neg,
}
_BINARY = {
    "arith.addf": torch.add,
    "arith.subf": torch.sub,
    "arith.mulf": torch.mul,
    "arith.divf": torch.div,
    "arith.maximumf": torch.maximum,
    "arith.minimumf": torch.minimum,
    "arith.maxnumf": torch.fmax,
    "arith.minnumf": torch.fmin,
    "math.powf": torch.pow,
    "math.atan2": torch.atan2,
    "math.copysign": torch.copysign,
    "arith.addi": torch.add,
    "arith.subi": torch.sub,
    "arith.muli": torch.mul,
    "arith.maxsi": torch.maximum,
    "arith.minsi": torch.minimum,
    "arith.andi": torch.bitwise_and,
    "arith.ori": torch.bitwise_or,
    "arith.xori": torch.bitwise_xor,
}


def _scalar_const(op, compute: torch.dtype) -> torch.Tensor:
    attr = op.properties.get("value") or op.attributes.get("value")
    if isinstance(attr, FloatAttr):
        v = f32_value(attr.value.data) if isinstance(attr.type, Float32Type) else attr.value.data
        return torch.tensor(v, dtype=compute)
    assert isinstance(attr, IntegerAttr), attr
    if isinstance(attr.type, IntegerType) and attr.type.width.data == 1:
        return torch.tensor(bool(attr.value.data))
    return torch.tensor(attr.value.data, dtype=torch.int64)


def eval_body(block: Block, args: Sequence[torch.Tensor], compute: torch.dtype) -> list[torch.Tensor]:
    """Evaluate a scalar (arith/math) body elementwise over tensors; returns the yielded values."""
    env: dict[SSAValue, torch.Tensor] = dict(zip(block.args, args))
    for op in block.ops:
        name = op.name
        if isinstance(op, coda.YieldOp):
            return [env[v] for v in op.values]
        ins = [env[v] for v in op.operands]
        if name == "arith.constant":
            out = _scalar_const(op, compute)
        elif name in _UNARY_F:
            out = _UNARY_F[name](ins[0])
        elif name in _BINARY:
            out = _BINARY[name](ins[0], ins[1])
        elif name == "arith.divsi":
            out = torch.div(ins[0], ins[1], rounding_mode="trunc")
        elif name == "arith.remsi":
            out = torch.fmod(ins[0], ins[1])
        elif name in ("arith.divui", "arith.floordivsi"):
            out = torch.div(ins[0], ins[1], rounding_mode="floor")
        elif name == "arith.remui":
            out = torch.remainder(ins[0], ins[1])
        elif name == "arith.cmpi":
            out = _CMPI[op.predicate.value.data](ins[0], ins[1])
        elif name == "arith.cmpf":
            out = _CMPF[op.predicate.value.data](ins[0], ins[1])
        elif name == "arith.select":
            out = torch.where(ins[0], ins[1], ins[2])
        elif name in ("arith.sitofp", "arith.uitofp"):
            out = ins[0].to(compute)
        elif name in ("arith.fptosi", "arith.fptoui"):
            out = torch.trunc(ins[0]).to(torch.int64)
        elif name == "arith.truncf" and op.results[0].type in (BFloat16Type(), Float16Type()):
            # a rounding step (a fused kernel reading a tile as it is stored)
            out = ins[0].to(torch.bfloat16 if isinstance(op.results[0].type, BFloat16Type) else torch.float16).to(compute)
        elif name in ("arith.extf", "arith.truncf", "arith.extsi", "arith.extui", "arith.trunci", "arith.index_cast"):
            out = ins[0]
        elif name == "math.fma":
            out = ins[0] * ins[1] + ins[2]
        else:
            raise NotImplementedError(f"interpreter: no rule for '{name}' in a scalar body")
        env[op.results[0]] = out
    raise ValueError("scalar body without coda.yield")


# ============================================================================ kernels


class _Partials:
    def __init__(self, values: torch.Tensor, combine: str):
        self.values = values
        self.combine = combine


class _Layout:
    """The column permutation of a kernel: which widths are permuted, and how."""

    def __init__(self, op):
        self.perms: dict[int, torch.Tensor] = {}
        if isinstance(op, coda.GemmOp):
            _, n, _ = op.problem_shape()
            if op.interleave is not None:
                self.perms[n] = interleave_perm(n, op.interleave.value.data)
            if op.interleave_wide is not None:
                self.perms[2 * n] = interleave_perm(2 * n, op.interleave_wide.value.data)

    def perm(self, width: int) -> torch.Tensor | None:
        return self.perms.get(width)

    def to_kernel(self, t: torch.Tensor) -> torch.Tensor:
        """A matrix (or column vector, dim -1) in the user's layout -> kernel column order."""
        p = self.perm(t.shape[-1])
        return t if p is None else t[..., p]

    def to_user(self, t: torch.Tensor) -> torch.Tensor:
        p = self.perm(t.shape[-1])
        if p is None:
            return t
        out = torch.empty_like(t)
        out[..., p] = t
        return out


def _tile_shape(value: SSAValue) -> tuple[int, int]:
    ty = value.type
    assert isinstance(ty, coda.TileType)
    return ty.get_shape()


class _Machine:
    def __init__(self, compute: torch.dtype):
        self.compute = compute
        self.exact = compute == torch.float64

    # -- values at function level are stored tensors (float64 in exact mode, else their dtype)
    def load_value(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.compute) if t.dtype.is_floating_point else t.to(torch.int64)

    def store(self, t: torch.Tensor, result: SSAValue) -> torch.Tensor:
        ty = result.type
        assert isinstance(ty, TensorType)
        dtype = torch_dtype(ty.get_element_type())
        if not dtype.is_floating_point:
            return t.to(dtype)
        return t.to(torch.float64) if self.exact else t.to(dtype)

    # -- epilogue regions
    def run_region(self, kernel, block: Block, args: list, layout: _Layout) -> list:
        env: dict[SSAValue, object] = dict(zip(block.args, args))
        for op in block.ops:
            if isinstance(op, coda.YieldOp):
                return [env[v] for v in op.values]
            env.update(zip(op.results, self.tile_op(op, env, layout)))
        raise ValueError("epilogue without coda.yield")

    def tile_op(self, op, env, layout: _Layout) -> list:
        c = self.compute
        if isinstance(op, coda.LoadOp) and op.period is not None:
            # an [M, P] table repeated along the tile's columns (the user's columns, permuted
            # like any access of this width)
            src = self.load_value(env[op.source])
            _, w = _tile_shape(op.result)
            cols = torch.arange(w)
            p = layout.perm(w)
            if p is not None:
                cols = cols[p]
            return [src[:, cols % op.period]]
        if isinstance(op, coda.LoadOp):
            src = self.load_value(env[op.source])
            return [layout.to_kernel(src)]
        if isinstance(op, coda.BroadcastOp):
            m, w = _tile_shape(op.result)
            return [self.vector_tile(env[op.source], op.axis.data, m, w, layout)]
        if isinstance(op, coda.IndexOp):
            m, w = _tile_shape(op.result)
            if op.axis.data == coda.Axis.ROWS:
                return [torch.arange(m)[:, None].expand(m, w)]
            cols = torch.arange(w)
            p = layout.perm(w)
            if p is not None:
                cols = p
            return [cols[None, :].expand(m, w)]
        if isinstance(op, (coda.ScaleOp, coda.ShiftOp)):
            t = env[op.tile]
            m, w = t.shape
            v = self.vector_tile(env[op.vector], op.axis.data, m, w, layout)
            return [t * v if isinstance(op, coda.ScaleOp) else t + v]
        if isinstance(op, coda.AccumulateOp):
            return [env[op.tile] + layout.to_kernel(self.load_value(env[op.matrix]))]
        if isinstance(op, coda.MapOp):
            ins = [env[v] for v in op.inputs]
            return eval_body(op.body.blocks[0], ins, c)
        if isinstance(op, coda.PairMapOp):
            return self.pair_map(op, env)
        if isinstance(op, coda.ReduceOp):
            t = env[op.tile]
            kind = op.kind.data
            dim = op.dim.value.data
            if kind == coda.ReduceKind.SUM:
                r = t.sum(dim)
            elif kind == coda.ReduceKind.SUMSQ:
                r = (t * t).sum(dim)
            elif kind == coda.ReduceKind.MAX:
                r = t.amax(dim)
            else:
                r = torch.logsumexp(t, dim)
            if dim == 0:
                r = layout.to_user(r)
            return [_Partials(r, coda.COMBINE_OF_KIND[kind].value)]
        if isinstance(op, coda.SegmentReduceOp):
            t = env[op.tile]
            m, w = t.shape
            width = op.width.value.data
            seg = t.reshape(m, w // width, width)
            kind = op.kind.data
            if kind == coda.ReduceKind.SUM:
                r = seg.sum(-1, keepdim=True)
            elif kind == coda.ReduceKind.SUMSQ:
                r = (seg * seg).sum(-1, keepdim=True)
            else:
                r = seg.amax(-1, keepdim=True)
            return [r.expand(m, w // width, width).reshape(m, w)]
        if isinstance(op, coda.SelectOp):
            t = layout.to_user(env[op.tile])
            idx = env[op.indices].to(torch.int64)
            m, w = t.shape
            ok = (idx >= 0) & (idx < w)
            picked = t.gather(1, torch.where(ok, idx, 0)[:, None])[:, 0]
            return [_Partials(torch.where(ok, picked, torch.zeros((), dtype=t.dtype)), "sum")]
        if op.name.split(".")[0] in ("arith", "math"):
            raise NotImplementedError(f"'{op.name}' directly in an epilogue (not on tiles) is not interpreted")
        raise NotImplementedError(f"interpreter: no rule for '{op.name}'")

    def vector_tile(self, v: torch.Tensor, axis, m: int, w: int, layout: _Layout) -> torch.Tensor:
        v = self.load_value(v)
        if axis == coda.Axis.SCALAR:
            return v.reshape(()).expand(m, w)
        if axis == coda.Axis.ROWS:
            return v[:, None].expand(m, w)
        cols = torch.arange(w)
        p = layout.perm(w)
        if p is not None:
            cols = p
        return v[cols % v.shape[0]][None, :].expand(m, w)

    def pair_map(self, op, env) -> list:
        stride = op.stride.value.data
        pairs = op.pair_count()

        def split(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            m, w = t.shape
            g = t.reshape(m, w // (2 * stride), 2, stride)
            return g[:, :, 0, :].reshape(m, pairs), g[:, :, 1, :].reshape(m, pairs)

        def join(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
            m = first.shape[0]
            a = first.reshape(m, pairs // stride, 1, stride)
            b = second.reshape(m, pairs // stride, 1, stride)
            return torch.cat([a, b], dim=2).reshape(m, 2 * pairs)

        args = []
        for v in op.inputs:
            t = env[v]
            if op.is_wide(v):
                args.extend(split(t))
            else:
                args.append(t)
        ys = eval_body(op.body.blocks[0], args, self.compute)
        m = _tile_shape(op.outputs[0])[0]
        outs, k = [], 0
        for r in op.outputs:
            if op.is_wide(r):
                outs.append(join(ys[k].expand(m, pairs), ys[k + 1].expand(m, pairs)))
                k += 2
            else:
                outs.append(ys[k].expand(m, pairs))
                k += 1
        return outs

    # -- kernels
    def gemm(self, op, env) -> list:
        a = self.load_value(env[op.a])
        b = self.load_value(env[op.b])
        if op.transpose_a is not None:
            a = a.T
        if op.transpose_b is not None:
            b = b.T
        layout = _Layout(op)
        acc = layout.to_kernel(a @ b)
        ins = [env[v] for v in op.inputs]
        ys = self.run_region(op, op.epilogue.blocks[0], [acc, *ins], layout)
        return self.finish(ys, op.outputs, layout)

    def elementwise(self, op, env) -> list:
        layout = _Layout(op)
        ins = [env[v] for v in op.inputs]
        ys = self.run_region(op, op.body.blocks[0], ins, layout)
        return self.finish(ys, op.outputs, layout)

    def finish(self, ys: list, results, layout: _Layout) -> list:
        out = []
        for y, r in zip(ys, results):
            if isinstance(y, _Partials):
                out.append(y)
            else:
                m, w = _tile_shape_of(r)
                out.append(self.store(layout.to_user(y.expand(m, w)), r))
        return out

    def fold(self, op, env) -> list:
        length = op.length()
        args = []
        for p in op.partials:
            args.append(env[p].values)
        for v in op.inputs:
            t = self.load_value(env[v])
            args.append(t)
        ys = eval_body(op.body.blocks[0], args, self.compute)
        stored: list = [None] * len(op.outputs)
        sums = []
        for i, (y, r) in enumerate(zip(ys, op.outputs)):
            ty = r.type
            assert isinstance(ty, TensorType)
            y = y.expand(length) if y.dim() == 0 else y
            if ty.get_shape():
                stored[i] = y
            else:
                sums.append((i, y.sum()))
        if op.finalize.blocks and sums:
            finals = eval_body(op.finalize.blocks[0], [s for _, s in sums], self.compute)
            sums = [(i, f) for (i, _), f in zip(sums, finals)]
        for i, s in sums:
            stored[i] = s
        return [self.store(t, r) for t, r in zip(stored, op.outputs)]


def _tile_shape_of(result: SSAValue) -> tuple[int, int]:
    ty = result.type
    assert isinstance(ty, TensorType)
    m, w = ty.get_shape()
    return m, w


def run_coda(
    module_or_func: ModuleOp | func.FuncOp | str | os.PathLike,
    inputs: Sequence[torch.Tensor],
    compute: torch.dtype = torch.float64,
    *,
    func_name: str | None = None,
) -> list[torch.Tensor]:
    """Run a coda function (gemm / elementwise / fold kernels) on whole-matrix tiles."""
    fn = load_func(module_or_func, func_name)
    machine = _Machine(compute)
    block = fn.body.blocks[0]
    if len(inputs) != len(block.args):
        raise ValueError(f"@{fn.sym_name.data} takes {len(block.args)} inputs, got {len(inputs)}")
    env: dict[SSAValue, object] = {}
    for arg, value in zip(block.args, inputs):
        ty = arg.type
        assert isinstance(ty, TensorType)
        if tuple(value.shape) != tuple(ty.get_shape()):
            raise ValueError(f"input {arg.name_hint}: shape {tuple(value.shape)}, expected {tuple(ty.get_shape())}")
        env[arg] = value.to(torch.float64) if machine.exact and value.dtype.is_floating_point else value
    ops: list = []
    for op in block.ops:  # a launch group runs its members, then names their results
        if isinstance(op, coda.LaunchGroupOp):
            ops += [*op.members(), op]
        else:
            ops.append(op)
    for op in ops:
        if isinstance(op, func.ReturnOp):
            return [env[v] for v in op.arguments]  # type: ignore[misc]
        if isinstance(op, coda.LaunchGroupOp):
            env.update(zip(op.outputs, [env[v] for v in op.body.blocks[0].last_op.operands]))
            continue
        if isinstance(op, coda.GemmOp):
            results = machine.gemm(op, env)
        elif isinstance(op, coda.ElementwiseOp):
            results = machine.elementwise(op, env)
        elif isinstance(op, coda.FoldOp):
            results = machine.fold(op, env)
        else:
            raise NotImplementedError(f"interpreter: '{op.name}' at function level")
        env.update(zip(op.results, results))
    raise ValueError("function without func.return")
