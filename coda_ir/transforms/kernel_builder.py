"""Small builders for coda kernels, shared by the nn-to-coda passes.

`Epilogue` appends epilogue primitives to a kernel's single block; `Scalar` appends
`arith` / `math` ops to a scalar body (`coda.map`, `coda.pair_map`, `coda.fold`). Every op
built here gets the location of the `nn` op it implements, so that remarks and errors about
a fused kernel still point at the user's source line.

This is the passes' method-style layer (`S.add(a, b)`, values are plain SSAValues, no
`ImplicitBuilder` needed by the caller) over the ops of the public builder, `coda_ir.builder`.
The composite scalar functions (`sigmoid`, `silu`, `gelu`, `gelu_grad`, `relu`) are written
once, there; `Scalar`'s methods of those names call them, so a kernel built by hand and one
lowered from `nn.silu` hold the same ops in the same order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from xdsl.builder import ImplicitBuilder
from xdsl.dialects import arith
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import (
    FloatAttr,
    IntegerAttr,
    TensorType,
    UnknownLoc,
    f32,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from coda_ir import builder
from coda_ir.dialects import coda
from coda_ir.dialects.coda import Axis, ReduceKind, TileType

ScalarFn = Callable[..., Sequence[SSAValue] | SSAValue]


def stamp(op: Operation, loc: Attribute | None) -> Operation:
    """Give `op` and everything nested in it `loc` where they have none."""
    if loc is None or isinstance(loc, UnknownLoc):
        return op
    for inner in op.walk():
        if isinstance(inner.location, UnknownLoc):
            inner.location = loc
    return op


def shape_of(value: SSAValue) -> tuple[int, ...]:
    ty = value.type
    assert isinstance(ty, TensorType), ty
    return tuple(ty.get_shape())


def elt_of(value: SSAValue) -> Attribute:
    ty = value.type
    assert isinstance(ty, TensorType), ty
    return ty.get_element_type()


class Scalar:
    """Appends scalar `arith`/`math` ops to a block (f32 unless said otherwise)."""

    def __init__(self, block: Block):
        self.block = block

    def _add(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0]

    # constants
    def const(self, value: float) -> SSAValue:
        return self._add(arith.ConstantOp(FloatAttr(float(value), f32)))

    def iconst(self, value: int) -> SSAValue:
        return self._add(arith.ConstantOp(IntegerAttr(int(value), i32)))

    # float arithmetic
    def add(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._add(arith.AddfOp(a, b))

    def sub(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._add(arith.SubfOp(a, b))

    def mul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._add(arith.MulfOp(a, b))

    def div(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._add(arith.DivfOp(a, b))

    def neg(self, a: SSAValue) -> SSAValue:
        return self._add(arith.NegfOp(a))

    def max(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._add(arith.MaximumfOp(a, b))

    def exp(self, a: SSAValue) -> SSAValue:
        return self._add(xmath.ExpOp(a))

    def tanh(self, a: SSAValue) -> SSAValue:
        return self._add(xmath.TanhOp(a))

    def erf(self, a: SSAValue) -> SSAValue:
        return self._add(xmath.ErfOp(a))

    def rsqrt(self, a: SSAValue) -> SSAValue:
        return self._add(xmath.RsqrtOp(a))

    def cos(self, a: SSAValue) -> SSAValue:
        return self._add(xmath.CosOp(a))

    def sin(self, a: SSAValue) -> SSAValue:
        return self._add(xmath.SinOp(a))

    def select(self, cond: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._add(arith.SelectOp(cond, a, b))

    def cmpf(self, pred: str, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._add(arith.CmpfOp(a, b, pred))

    # integer arithmetic (column indices)
    def cmpi(self, pred: str, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._add(arith.CmpiOp(a, b, pred))

    def addi(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._add(arith.AddiOp(a, b))

    def remi(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._add(arith.RemSIOp(a, b))

    def divi(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._add(arith.DivSIOp(a, b))

    def to_f32(self, a: SSAValue) -> SSAValue:
        return self._add(arith.SIToFPOp(a, f32))

    # composite functions (PyTorch semantics, fp32): written once, in coda_ir.builder (the public
    # builder's `silu`, `gelu`, ... append the same ops in the same order)
    def _composite(self, fn: Callable[..., builder.Scalar], *args: SSAValue, **kwargs: object) -> SSAValue:
        with ImplicitBuilder(self.block):
            return fn(*(builder.Scalar(a) for a in args), **kwargs).value

    def sigmoid(self, x: SSAValue) -> SSAValue:
        return self._composite(builder.sigmoid, x)

    def silu(self, x: SSAValue) -> SSAValue:
        return self._composite(builder.silu, x)

    def gelu(self, x: SSAValue, approximate: str) -> SSAValue:
        return self._composite(builder.gelu, x, approximate=approximate)

    def gelu_grad(self, dy: SSAValue, x: SSAValue, approximate: str) -> SSAValue:
        """`dy * gelu'(x)`, as PyTorch's gelu_backward writes it (same association)."""
        return self._composite(builder.gelu_grad, dy, x, approximate=approximate)

    def relu(self, x: SSAValue) -> SSAValue:
        return self._composite(builder.relu, x)


def scalar_body(arg_types: Sequence[Attribute], fn: ScalarFn) -> Region:
    """A single-block scalar region: `fn(S, *args)` returns the values to yield."""
    block = Block(arg_types=arg_types)
    s = Scalar(block)
    results = fn(s, *block.args)
    if isinstance(results, SSAValue):
        results = [results]
    block.add_op(coda.YieldOp(*results))
    return Region(block)


class Epilogue:
    """Builds the single block of a coda.gemm / coda.elementwise region."""

    def __init__(self, arg_types: Sequence[Attribute]):
        self.block = Block(arg_types=arg_types)

    @property
    def args(self) -> tuple[SSAValue, ...]:
        return tuple(self.block.args)

    def _add(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0]

    def load(self, tensor: SSAValue) -> SSAValue:
        return self._add(coda.LoadOp(tensor))

    def broadcast(self, vector: SSAValue, axis: Axis, like: SSAValue) -> SSAValue:
        assert isinstance(like.type, TileType)
        return self._add(coda.BroadcastOp(vector, axis, like.type))

    def index(self, axis: Axis, like: SSAValue) -> SSAValue:
        assert isinstance(like.type, TileType)
        return self._add(coda.IndexOp(axis, like.type))

    def scale(self, tile: SSAValue, vector: SSAValue, axis: Axis) -> SSAValue:
        return self._add(coda.ScaleOp(tile, vector, axis))

    def shift(self, tile: SSAValue, vector: SSAValue, axis: Axis) -> SSAValue:
        return self._add(coda.ShiftOp(tile, vector, axis))

    def accumulate(self, tile: SSAValue, matrix: SSAValue) -> SSAValue:
        return self._add(coda.AccumulateOp(tile, matrix))

    def map(self, inputs: Sequence[SSAValue], fn: ScalarFn, n_out: int = 1, out_elt: Attribute = f32) -> list[SSAValue]:
        ty = inputs[0].type
        assert isinstance(ty, TileType)
        body = scalar_body([_elt(v) for v in inputs], fn)
        op = coda.MapOp(inputs, [TileType(ty.get_shape(), out_elt)] * n_out, body)
        self.block.add_op(op)
        return list(op.results)

    def map1(self, inputs: Sequence[SSAValue], fn: ScalarFn) -> SSAValue:
        return self.map(inputs, fn)[0]

    def pair_map(
        self,
        inputs: Sequence[SSAValue],
        out_shapes: Sequence[tuple[int, int]],
        fn: ScalarFn,
        stride: int = 1,
        wide: Sequence[bool] | None = None,
        period: int | None = None,
    ) -> list[SSAValue]:
        """`wide[i]` says whether input i is wide (the body sees both members of a pair);
        `period` pairs (c, c + stride) only in the first 2*stride columns of each period, the
        rest adjacent (`coda.PairMapOp`)."""
        widths = [v.type.cols for v in inputs]  # type: ignore[attr-defined]
        if wide is None:
            top = max([*widths, *(s[1] for s in out_shapes)])
            wide = [w == top for w in widths]
        arg_types: list[Attribute] = []
        for v, is_wide in zip(inputs, wide):
            arg_types += [_elt(v)] * (2 if is_wide else 1)
        body = scalar_body(arg_types, fn)
        props = {"stride": IntegerAttr(stride, i64)} if stride != 1 or period is not None else {}
        if period is not None:
            props["period"] = IntegerAttr(period, i64)
        op = coda.PairMapOp(inputs, [TileType(s, f32) for s in out_shapes], body, **props)
        self.block.add_op(op)
        return list(op.results)

    def reduce(self, kind: ReduceKind, tile: SSAValue, dim: int = 1) -> SSAValue:
        return self._add(coda.ReduceOp(kind, tile, dim))

    def segment_reduce(self, kind: ReduceKind, tile: SSAValue, width: int) -> SSAValue:
        return self._add(coda.SegmentReduceOp(kind, tile, width))

    def select(self, tile: SSAValue, indices: SSAValue) -> SSAValue:
        return self._add(coda.SelectOp(tile, indices))

    def yield_(self, *values: SSAValue) -> Region:
        self.block.add_op(coda.YieldOp(*values))
        return Region(self.block)


def _elt(value: SSAValue) -> Attribute:
    ty = value.type
    assert isinstance(ty, TileType)
    return ty.element_type


def result_type_for(value: SSAValue, elt: Attribute) -> Attribute:
    """The tensor type a kernel result storing tile `value` gets (partials keep theirs)."""
    ty = value.type
    if isinstance(ty, TileType):
        return TensorType(elt if ty.element_type == f32 else ty.element_type, list(ty.get_shape()))
    return ty


def elementwise(
    shape: Sequence[int],
    inputs: Sequence[SSAValue],
    build: Callable[..., Sequence[SSAValue]],
    elts: Sequence[Attribute | None],
    whole: coda.Axis | None = None,
) -> coda.ElementwiseOp:
    """A coda.elementwise kernel; `build(E, *ins)` returns what to yield; `elts[i]` is the
    element type of the tensor result storing yielded tile i (None for partials). With
    `whole`, partials along that axis complete in the kernel: their results are vectors of
    `elts[i]` (f32 when None)."""
    e = Epilogue([v.type for v in inputs])
    values = list(build(e, *e.args))
    region = e.yield_(*values)
    types = [result_type_for(v, elt if elt is not None else f32) for v, elt in zip(values, elts)]
    if whole is not None:  # completed reductions: f32 vectors, or rounded once to a given type
        types = [
            TensorType(elt if elt is not None else f32, [t.length.data])
            if isinstance(t, coda.PartialsType) and t.axis == whole
            else t
            for t, elt in zip(types, elts)
        ]
    return coda.ElementwiseOp(shape, inputs, types, region, whole=whole)


def gemm(
    a: SSAValue,
    b: SSAValue,
    inputs: Sequence[SSAValue],
    build: Callable[..., Sequence[SSAValue]],
    elts: Sequence[Attribute | None],
    *,
    transpose_b: bool,
    transpose_a: bool = False,
) -> coda.GemmOp:
    """`op(a) @ op(b)` with the epilogue `build(E, acc, *ins)`; `a` is K x M with `transpose_a`
    (the weight gradient `dy.T @ x` of a backward), `b` is N x K with `transpose_b`."""
    ashape, bshape = shape_of(a), shape_of(b)
    m = ashape[1] if transpose_a else ashape[0]
    n = bshape[0] if transpose_b else bshape[1]
    e = Epilogue([TileType((m, n), f32), *(v.type for v in inputs)])
    values = list(build(e, *e.args))
    region = e.yield_(*values)
    types = [result_type_for(v, elt if elt is not None else f32) for v, elt in zip(values, elts)]
    return coda.GemmOp(a, b, inputs, types, region, transpose_a=transpose_a, transpose_b=transpose_b)


def fold(
    partials: Sequence[SSAValue],
    inputs: Sequence[SSAValue],
    result_types: Sequence[Attribute],
    body: ScalarFn,
    finalize: ScalarFn | None = None,
) -> coda.FoldOp:
    arg_types: list[Attribute] = [f32] * len(partials)
    for v in inputs:
        arg_types.append(elt_scalar(v))
    n_sums = sum(1 for t in result_types if isinstance(t, TensorType) and not t.get_shape())
    fin = scalar_body([f32] * n_sums, finalize) if finalize is not None else None
    return coda.FoldOp(partials, inputs, result_types, scalar_body(arg_types, body), fin)


def elt_scalar(value: SSAValue) -> Attribute:
    elt = elt_of(value)
    return i32 if elt == i32 else f32


__all__ = [
    "Epilogue",
    "Scalar",
    "scalar_body",
    "elementwise",
    "gemm",
    "fold",
    "stamp",
    "shape_of",
    "elt_of",
    "i1",
]
