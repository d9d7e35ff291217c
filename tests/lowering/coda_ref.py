"""A whole-matrix reference for coda programs, in PyTorch (the oracle of the lowering tests).

`run_coda(func_op, args, dtype)` evaluates a `func.func` of coda kernels op by op on whole
matrices: `dtype=torch.float64` gives ref64 (nothing rounded); `dtype=torch.float32` gives
ref_T (fp32 math, every stored result rounded once to its element type, as the kernels do).
Partials are returned already combined over the whole row/column (sum, max or lse), because
their tile count depends on the tile configuration; `fold_partials` combines a kernel's
[L, tiles] partials the same way.
"""

from __future__ import annotations

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, IntegerType
from xdsl.ir import Block, SSAValue

from coda_ir.dialects import coda
from coda_ir.lowering.triton import torch_dtype

_DT = {
    "torch.float32": torch.float32,
    "torch.bfloat16": torch.bfloat16,
    "torch.float16": torch.float16,
    "torch.int32": torch.int32,
    "torch.int64": torch.int64,
    "torch.bool": torch.bool,
}


def dtype_of(ty) -> torch.dtype:
    return _DT[torch_dtype(ty.get_element_type())]


def perm(n: int, h: int) -> torch.Tensor:
    """Accumulator column c -> weight row / tensor column (the interleave permutation)."""
    c = torch.arange(n)
    if not h:
        return c
    group, within = c // (2 * h), c % (2 * h)
    return group * (2 * h) + within // 2 + (within % 2) * h


def fold_partials(p: torch.Tensor, combine: str) -> torch.Tensor:
    p = p.double()
    if combine == "sum":
        return p.sum(1)
    if combine == "max":
        return p.max(1).values
    return torch.logsumexp(p, 1)


def _combine(x: torch.Tensor, kind: coda.ReduceKind, dim: int) -> torch.Tensor:
    if kind == coda.ReduceKind.SUM:
        return x.sum(dim)
    if kind == coda.ReduceKind.SUMSQ:
        return (x * x).sum(dim)
    if kind == coda.ReduceKind.MAX:
        return x.max(dim).values
    return torch.logsumexp(x, dim)


class _Body:
    """Evaluate arith/math scalar bodies on tensors."""

    def __init__(self, dtype: torch.dtype):
        self.dtype = dtype

    def run(self, block: Block, args: list, env: dict | None = None) -> list:
        env = dict(env or {})
        for a, v in zip(block.args, args):
            env[a] = v
        for op in block.ops:
            if isinstance(op, coda.YieldOp):
                return [env[v] for v in op.values]
            env[op.results[0]] = self.op(op, [env[o] for o in op.operands])
        raise AssertionError("body without yield")

    def op(self, op, xs):
        from xdsl.dialects.arith import CMPF_COMPARISON_OPERATIONS, CMPI_COMPARISON_OPERATIONS

        n = op.name
        t = lambda v: v if isinstance(v, torch.Tensor) else torch.tensor(v, dtype=self.dtype)  # noqa: E731
        if n == "arith.constant":
            attr = op.properties["value"]
            if isinstance(attr, FloatAttr):
                return torch.tensor(attr.value.data, dtype=self.dtype)
            assert isinstance(attr, IntegerAttr)
            if isinstance(attr.type, IntegerType) and attr.type.width.data == 1:
                return torch.tensor(bool(attr.value.data))
            return torch.tensor(attr.value.data, dtype=torch.int64)
        simple = {
            "arith.addf": lambda a, b: a + b,
            "arith.subf": lambda a, b: a - b,
            "arith.mulf": lambda a, b: a * b,
            "arith.divf": lambda a, b: a / b,
            "arith.addi": lambda a, b: a + b,
            "arith.subi": lambda a, b: a - b,
            "arith.muli": lambda a, b: a * b,
            "arith.andi": lambda a, b: a & b,
            "arith.ori": lambda a, b: a | b,
            "arith.xori": lambda a, b: a ^ b,
            "arith.maximumf": torch.maximum,
            "arith.minimumf": torch.minimum,
            "arith.maxnumf": torch.maximum,
            "arith.minnumf": torch.minimum,
            "arith.maxsi": torch.maximum,
            "arith.minsi": torch.minimum,
            "arith.negf": lambda a: -a,
            "arith.select": lambda c, a, b: torch.where(c, t(a), t(b)),
            "math.exp": torch.exp,
            "math.exp2": torch.exp2,
            "math.log": torch.log,
            "math.log2": torch.log2,
            "math.sqrt": torch.sqrt,
            "math.rsqrt": torch.rsqrt,
            "math.absf": torch.abs,
            "math.absi": torch.abs,
            "math.sin": torch.sin,
            "math.cos": torch.cos,
            "math.floor": torch.floor,
            "math.ceil": torch.ceil,
            "math.erf": torch.erf,
            "math.tanh": torch.tanh,
            "math.powf": torch.pow,
            "math.fma": lambda a, b, c: a * b + c,
        }
        if n in simple:
            return simple[n](*[t(x) for x in xs])
        if n == "arith.cmpf":
            p = CMPF_COMPARISON_OPERATIONS[op.properties["predicate"].value.data]
            a, b = t(xs[0]), t(xs[1])
            unordered = torch.isnan(a) | torch.isnan(b)
            base = {"eq": a == b, "gt": a > b, "ge": a >= b, "lt": a < b, "le": a <= b, "ne": a != b}
            if p in ("ord", "uno"):
                return ~unordered if p == "ord" else unordered
            r = base[p[1:]]
            return (r & ~unordered) if p[0] == "o" else (r | unordered)
        if n == "arith.cmpi":
            p = CMPI_COMPARISON_OPERATIONS[op.properties["predicate"].value.data]
            a, b = xs
            return {"eq": a == b, "ne": a != b, "slt": a < b, "sle": a <= b, "sgt": a > b, "sge": a >= b}[p]
        if n in ("arith.sitofp", "arith.uitofp"):
            return t(xs[0]).to(self.dtype)
        if n in ("arith.fptosi", "arith.index_cast", "arith.extsi", "arith.extui", "arith.trunci"):
            return t(xs[0]).to(torch.int64).trunc() if xs[0].is_floating_point() else xs[0].to(torch.int64)
        raise NotImplementedError(n)


def run_coda(fn: func.FuncOp, args: list[torch.Tensor], dtype: torch.dtype = torch.float64) -> list[torch.Tensor]:
    exact = dtype == torch.float64
    env: dict[SSAValue, object] = {}
    block = fn.body.blocks[0]
    for a, v in zip(block.args, args):
        env[a] = v
    body = _Body(dtype)

    def f(x: torch.Tensor) -> torch.Tensor:
        return x.to(dtype) if x.is_floating_point() else x

    def out(x: torch.Tensor, ty) -> torch.Tensor:
        """Round a stored result once (ref_T); ref64 keeps float64."""
        if isinstance(ty, coda.PartialsType):
            return x
        if exact and x.is_floating_point():
            return x
        return x.to(dtype_of(ty))

    ops: list = []
    for op in block.ops:  # a launch group runs its members, then names their results
        if isinstance(op, coda.LaunchGroupOp):
            ops += [*op.members(), op]
        else:
            ops.append(op)
    for op in ops:
        if isinstance(op, func.ReturnOp):
            return [env[v] for v in op.arguments]
        if isinstance(op, coda.LaunchGroupOp):
            env.update(zip(op.outputs, [env[v] for v in op.body.blocks[0].last_op.operands]))
            continue
        if isinstance(op, coda.GemmOp):
            a, b = f(env[op.a]), f(env[op.b])
            a = a.T if op.transpose_a else a
            b = b.T if op.transpose_b else b
            m, n, _ = op.problem_shape()
            h = op.interleave.value.data if op.interleave is not None else 0
            hw = op.interleave_wide.value.data if op.interleave_wide is not None else 0
            acc = (a @ b)[:, perm(n, h)]
            results = _epilogue(op.epilogue.blocks[0], [acc, *[env[v] for v in op.inputs]], n, h, body, f, hw)
        elif isinstance(op, coda.ElementwiseOp):
            m, n = op.iteration_shape()
            results = _epilogue(op.body.blocks[0], [env[v] for v in op.inputs], n, 0, body, f)
        elif isinstance(op, coda.FoldOp):
            vals = [env[v] for v in op.partials] + [f(env[v]) for v in op.inputs]
            ys = body.run(op.body.blocks[0], vals)
            results = []
            sums = []
            for r, y in zip(op.outputs, ys):
                if r.type.get_shape():
                    results.append(y * torch.ones(op.length(), dtype=dtype) if y.dim() == 0 else y)
                else:
                    results.append(None)
                    sums.append(y.sum() if y.dim() else y * op.length())
            if op.finalize.blocks:
                sums = body.run(op.finalize.blocks[0], sums)
            it = iter(sums)
            results = [next(it) if x is None else x for x in results]
        else:
            raise NotImplementedError(op.name)
        for r, x in zip(op.results, results):
            env[r] = out(x, r.type)
    raise AssertionError("no func.return")


def _epilogue(block: Block, args: list, n: int, h: int, body: _Body, f, hw: int = 0) -> list:
    env: dict = dict(zip(block.args, args))

    def colidx(width: int) -> torch.Tensor:
        if width == n:
            return perm(n, h)
        if width == 2 * n:
            return perm(2 * n, hw)
        return torch.arange(width)

    for op in block.ops:
        if isinstance(op, coda.YieldOp):
            res = []
            for v in op.values:
                x = env[v]
                if isinstance(v.type, coda.TileType):
                    y = torch.empty_like(x)
                    y[:, colidx(v.type.cols)] = x
                    x = y
                elif isinstance(v.type, coda.PartialsType) and v.type.axis == coda.Axis.COLS:
                    tile = v.owner.operands[0].type
                    y = torch.empty_like(x)
                    y[colidx(tile.cols)] = x
                    x = y
                res.append(x)
            return res
        if isinstance(op, coda.LoadOp) and op.period is not None:
            c = f(env[op.source])  # an [M, P] table repeated along the tile's columns
            env[op.result] = c[:, colidx(op.result.type.cols) % op.period]
        elif isinstance(op, coda.LoadOp):
            c = f(env[op.source])
            env[op.result] = c[:, colidx(c.shape[1])]
        elif isinstance(op, coda.AccumulateOp):
            c = f(env[op.matrix])
            env[op.result] = env[op.tile] + c[:, colidx(c.shape[1])]
        elif isinstance(op, (coda.BroadcastOp, coda.ScaleOp, coda.ShiftOp)):
            vec = f(env[op.source if isinstance(op, coda.BroadcastOp) else op.vector])
            ty = op.result.type
            rows, width = ty.get_shape()
            axis = op.axis.data
            if axis == coda.Axis.SCALAR:
                v = vec.reshape(1, 1)
            elif axis == coda.Axis.ROWS:
                v = vec.reshape(-1, 1)
            else:
                v = vec[colidx(width) % vec.shape[0]].reshape(1, -1)
            if isinstance(op, coda.BroadcastOp):
                env[op.result] = v.expand(rows, width).clone()
            elif isinstance(op, coda.ScaleOp):
                env[op.result] = env[op.tile] * v
            else:
                env[op.result] = env[op.tile] + v
        elif isinstance(op, coda.IndexOp):
            rows, width = op.result.type.get_shape()
            if op.axis.data == coda.Axis.ROWS:
                env[op.result] = torch.arange(rows).reshape(-1, 1).expand(rows, width).to(torch.int64)
            else:
                env[op.result] = colidx(width).reshape(1, -1).expand(rows, width).to(torch.int64)
        elif isinstance(op, coda.MapOp):
            ys = body.run(op.body.blocks[0], [env[v] for v in op.inputs], env)
            for r, y in zip(op.outputs, ys):
                env[r] = y.expand(r.type.get_shape()) if y.dim() < 2 else y
        elif isinstance(op, coda.PairMapOp):
            s = op.stride.value.data
            args = []
            for v in op.inputs:
                x = env[v]
                rows, width = x.shape
                if op.is_wide(v):
                    g = x.reshape(rows, width // (2 * s), 2, s)
                    args += [g[:, :, 0, :], g[:, :, 1, :]]
                else:
                    args.append(x.reshape(rows, width // s, s))
            ys = body.run(op.body.blocks[0], args, env)
            i = 0
            for r in op.outputs:
                rows, width = r.type.get_shape()
                if op.is_wide(r):
                    a_, b_ = ys[i], ys[i + 1]
                    i += 2
                    env[r] = torch.stack([a_.expand(rows, width // (2 * s), s), b_.expand(rows, width // (2 * s), s)], 2).reshape(rows, width)
                else:
                    env[r] = ys[i].expand(rows, width // s, s).reshape(rows, width)
                    i += 1
        elif isinstance(op, coda.ReduceOp):
            env[op.result] = _combine(env[op.tile], op.kind.data, op.dim.value.data)
        elif isinstance(op, coda.SegmentReduceOp):
            x = env[op.tile]
            w = op.width.value.data
            rows, width = x.shape
            seg = _combine(x.reshape(rows, width // w, w), op.kind.data, 2)
            env[op.result] = seg[:, :, None].expand(rows, width // w, w).reshape(rows, width)
        elif isinstance(op, coda.SelectOp):
            x = env[op.tile]
            idx = env[op.indices].to(torch.int64)
            cols = colidx(x.shape[1])
            hit = cols[None, :] == idx[:, None]
            env[op.result] = torch.where(hit, x, torch.zeros((), dtype=x.dtype)).sum(1)
        else:
            env[op.results[0]] = body.op(op, [env[o] for o in op.operands])
    raise AssertionError("epilogue without yield")
