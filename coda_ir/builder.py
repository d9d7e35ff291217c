"""Build coda kernels and nn graphs from Python, without writing IR text.

It follows xDSL's builder idioms: every op is constructed through its typed `__init__`;
epilogue regions and scalar bodies are filled inside `ImplicitBuilder` blocks, so plain
Python code (operators on `Scalar`s, calls like `exp(x)`) appends `arith` / `math` ops; a
kernel op is inserted into its function when its `with` block ends.

    import coda_ir
    from coda_ir.builder import FunctionBuilder, sigmoid

    fb = FunctionBuilder("gemm_rms_swiglu", h=((M, D), "bf16"), w_gu=((2 * F, D), "bf16"), rstd=((M,), "f32"))
    with fb.gemm(fb.h, fb.w_gu, transpose_b=True, interleave=F) as k:
        z = k.scale(k.acc, fb.rstd, "rows")                        # RMSNorm's rstd[m], deferred past the GEMM
        y = k.pair_map(z, lambda gate, up: gate * sigmoid(gate) * up)  # SwiGLU on adjacent (gate, up) columns
        k.yield_(y)
    fb.returns(k.results[0])
    module = coda_ir.compile(fb.module, pipeline=None)

Values:

* function arguments and kernel results are xDSL `SSAValue`s of tensor type (`fb.args`, or
  `fb.<name>` for an argument by name); a kernel reads them with its primitives, which turn
  them into the kernel's own inputs (`ins`) automatically;
* inside a kernel, tiles and partials are `SSAValue`s of `!coda.tile` / `!coda.partials`;
* inside scalar bodies (map, pair_map, fold), values are `Scalar`s with Python operators.

nn graphs: `fb.nn.<op>(...)` builds any op of the nn dialect with its typed constructor
(`fb.nn.linear(x, w)`, `fb.nn.rms_norm(x, g, eps=1e-6)`, `fb.nn.swiglu(z)`,
`fb.nn.concat(q, k, v, axis=1)`, ...); `dir(fb.nn)` lists the ops, `help(fb.nn.rope)` shows
one's signature and meaning.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

from xdsl.builder import Builder, ImplicitBuilder
from xdsl.dialects import arith, func
from xdsl.dialects import math as xmath
from xdsl.dialects.builtin import (
    FloatAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    TensorType,
    bf16,
    f16,
    f32,
    i1,
    i32,
    i64,
)
from xdsl.dialects.builtin import FileLineColLoc, IntAttr, StringAttr, UnknownLoc
from xdsl.ir import Attribute, Block, BlockArgument, Operation, Region, SSAValue
from xdsl.rewriter import InsertPoint

from coda_ir.dialects import coda
from coda_ir.errors import ArgumentError, CompileError

__all__ = [
    "FunctionBuilder",
    "ModuleBuilder",
    "KernelBuilder",
    "Scalar",
    "element_type",
    "tensor",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "tanh",
    "erf",
    "sin",
    "cos",
    "absf",
    "powf",
    "maximum",
    "minimum",
    "where",
    "sigmoid",
    "silu",
    "relu",
    "gelu",
    "gelu_grad",
    "to_f32",
    "const",
]

def _caller_location() -> FileLineColLoc:
    """Where the user's code called into the builder (the first frame outside this module and
    the standard library's contextlib), as the location of the ops it builds: diagnostics then
    name the Python line, as they name the .mlir line for parsed programs."""
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename in (__file__, contextlib.__file__)):
        frame = frame.f_back
    if frame is None:
        return FileLineColLoc(StringAttr("<python>"), IntAttr(0), IntAttr(0))
    return FileLineColLoc(StringAttr(frame.f_code.co_filename), IntAttr(frame.f_lineno), IntAttr(1))


def _locate(op: Operation, location: FileLineColLoc | None = None) -> Operation:
    if isinstance(op.location, UnknownLoc):
        op.location = location or _caller_location()
    return op


def _misuse(message: str) -> CompileError:
    """A program the builder cannot build (a kernel without yield, a function without return),
    located at the user's line."""
    loc = _caller_location()
    return CompileError([f"{loc.filename.data}:{loc.line.data}:{loc.column.data}: error: {message}"])


def _verified(module: ModuleOp) -> ModuleOp:
    """Verify a built module; failures are a `CompileError` naming each op and its Python line
    (not xDSL's VerifyException with a dump of the whole module)."""
    from coda_ir.diagnostics import verify_module

    diagnostics = verify_module(module)
    if diagnostics:
        raise CompileError([str(d) for d in diagnostics])
    return module


_DTYPES: dict[str, Attribute] = {"f32": f32, "bf16": bf16, "f16": f16, "i32": i32, "i64": i64, "i1": i1}


def element_type(dtype: str | Attribute) -> Attribute:
    """`"bf16"` (or an xDSL type, or a torch dtype) -> the xDSL element type."""
    if isinstance(dtype, Attribute):
        return dtype
    name = str(dtype).removeprefix("torch.")
    name = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "int32": "i32", "int64": "i64", "bool": "i1"}.get(name, name)
    try:
        return _DTYPES[name]
    except KeyError:
        raise ArgumentError(f"unknown element type {dtype!r} (expected one of {', '.join(_DTYPES)})", "dtype") from None


def tensor(shape: Sequence[int], dtype: str | Attribute = "f32") -> TensorType:
    return TensorType(element_type(dtype), list(shape))


# ============================================================================ scalar bodies


def _value(x: Any, like: Scalar | None = None) -> SSAValue:
    if isinstance(x, Scalar):
        return x.value
    if isinstance(x, SSAValue):
        return x
    if isinstance(x, bool):
        return arith.ConstantOp(IntegerAttr(int(x), i1)).result
    ty = like.value.type if like is not None else (i32 if isinstance(x, int) else f32)
    if isinstance(ty, IntegerType):
        return arith.ConstantOp(IntegerAttr(int(x), ty)).result
    return arith.ConstantOp(FloatAttr(float(x), f32)).result


class Scalar:
    """A scalar SSA value inside a body; Python operators append arith ops (f32 or i32)."""

    __slots__ = ("value",)

    def __init__(self, value: SSAValue):
        self.value = value

    @property
    def type(self) -> Attribute:
        return self.value.type

    @property
    def is_int(self) -> bool:
        return isinstance(self.type, IntegerType)

    def _bin(self, other: Any, fop, iop, swap: bool = False) -> Scalar:
        rhs = _value(other, self)
        lhs = self.value
        if swap:
            lhs, rhs = rhs, lhs
        op = iop(lhs, rhs) if self.is_int else fop(lhs, rhs)
        return Scalar(op.results[0])

    def __add__(self, o):
        return self._bin(o, arith.AddfOp, arith.AddiOp)

    def __radd__(self, o):
        return self._bin(o, arith.AddfOp, arith.AddiOp, True)

    def __sub__(self, o):
        return self._bin(o, arith.SubfOp, arith.SubiOp)

    def __rsub__(self, o):
        return self._bin(o, arith.SubfOp, arith.SubiOp, True)

    def __mul__(self, o):
        return self._bin(o, arith.MulfOp, arith.MuliOp)

    def __rmul__(self, o):
        return self._bin(o, arith.MulfOp, arith.MuliOp, True)

    def __truediv__(self, o):
        return self._bin(o, arith.DivfOp, arith.DivSIOp)

    def __rtruediv__(self, o):
        return self._bin(o, arith.DivfOp, arith.DivSIOp, True)

    def __neg__(self):
        if self.is_int:
            return 0 - self
        return Scalar(arith.NegfOp(self.value).result)

    def _cmp(self, o, fpred: str, ipred: str) -> Scalar:
        rhs = _value(o, self)
        if self.is_int:
            return Scalar(arith.CmpiOp(self.value, rhs, ipred).result)
        return Scalar(arith.CmpfOp(self.value, rhs, fpred).result)

    def __lt__(self, o):
        return self._cmp(o, "olt", "slt")

    def __le__(self, o):
        return self._cmp(o, "ole", "sle")

    def __gt__(self, o):
        return self._cmp(o, "ogt", "sgt")

    def __ge__(self, o):
        return self._cmp(o, "oge", "sge")

    def eq(self, o) -> Scalar:
        return self._cmp(o, "oeq", "eq")

    def ne(self, o) -> Scalar:
        return self._cmp(o, "une", "ne")

    def __and__(self, o):
        return Scalar(arith.AndIOp(self.value, _value(o, self)).result)

    def __or__(self, o):
        return Scalar(arith.OrIOp(self.value, _value(o, self)).result)

    def __repr__(self) -> str:
        return f"Scalar({self.type})"


def _unary(op_cls) -> Callable[[Any], Scalar]:
    def f(x: Any) -> Scalar:
        return Scalar(op_cls(_value(x)).results[0])

    f.__name__ = op_cls.name.split(".")[1]
    f.__doc__ = f"`{op_cls.name}`"
    return f


exp = _unary(xmath.ExpOp)
log = _unary(xmath.LogOp)
sqrt = _unary(xmath.SqrtOp)
rsqrt = _unary(xmath.RsqrtOp)
tanh = _unary(xmath.TanhOp)
erf = _unary(xmath.ErfOp)
sin = _unary(xmath.SinOp)
cos = _unary(xmath.CosOp)
absf = _unary(xmath.AbsFOp)


def const(value: float | int, dtype: str = "f32") -> Scalar:
    ty = element_type(dtype)
    attr = IntegerAttr(int(value), ty) if isinstance(ty, IntegerType) else FloatAttr(float(value), ty)
    return Scalar(arith.ConstantOp(attr).result)


def powf(x: Any, y: Any) -> Scalar:
    return Scalar(xmath.PowFOp(_value(x), _value(y)).result)


def maximum(x: Any, y: Any) -> Scalar:
    return Scalar(arith.MaximumfOp(_value(x), _value(y)).result)


def minimum(x: Any, y: Any) -> Scalar:
    return Scalar(arith.MinimumfOp(_value(x), _value(y)).result)


def where(cond: Any, x: Any, y: Any) -> Scalar:
    like = x if isinstance(x, Scalar) else y if isinstance(y, Scalar) else None
    return Scalar(arith.SelectOp(_value(cond), _value(x, like), _value(y, like)).result)


def to_f32(x: Scalar) -> Scalar:
    return Scalar(arith.SIToFPOp(x.value, f32).result)


# The composite scalar functions, written once: the passes that lower nn ops to coda kernels
# (`transforms.kernel_builder.Scalar`) call these too, so a kernel built here and one lowered from
# `nn.silu` compute the same ops in the same order (PyTorch's formulas and association, fp32).
# The statement order is the op order: constants shared by name are built first.


def sigmoid(x: Any) -> Scalar:
    """`1 / (1 + exp(-x))`."""
    one = const(1.0)
    return one / (one + exp(-x))


def silu(x: Any) -> Scalar:
    """`x / (1 + exp(-x))` (PyTorch's silu: one division, not `x * sigmoid(x)`)."""
    return x / (const(1.0) + exp(-x))


def relu(x: Any) -> Scalar:
    return where(x > const(0.0), x, const(0.0))


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_KAPPA = 0.044715


def gelu(x: Any, approximate: str = "none") -> Scalar:
    """PyTorch's gelu: `0.5 x (1 + erf(x / sqrt 2))`, or with `approximate="tanh"`
    `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`."""
    half, one = const(0.5), const(1.0)
    if approximate == "tanh":
        # x^3 as (x x) x, PyTorch's association, and the one gelu_grad writes: a kernel computing
        # both (GeGLU's backward) then holds one tanh after CSE (the products are equal bit for
        # bit either way: IEEE multiplication commutes)
        inner = const(_SQRT_2_OVER_PI) * (x + const(_GELU_KAPPA) * ((x * x) * x))
        return (half * x) * (one + tanh(inner))
    return (half * x) * (one + erf(x * const(1.0 / math.sqrt(2.0))))


def gelu_grad(dy: Any, x: Any, approximate: str = "none") -> Scalar:
    """`dy * gelu'(x)`, as PyTorch's gelu_backward writes it (same association)."""
    half, one = const(0.5), const(1.0)
    if approximate == "tanh":
        beta, kappa = const(_SQRT_2_OVER_PI), const(_GELU_KAPPA)
        x_sq = x * x
        t = tanh(beta * (x + kappa * (x_sq * x)))
        left_derivative = half * (one + t)
        right_derivative = (half * x) * (one - t * t)
        inner_derivative = beta * (one + const(3.0 * _GELU_KAPPA) * x_sq)
        return dy * (left_derivative + right_derivative * inner_derivative)
    cdf = half * (one + erf(x * const(1.0 / math.sqrt(2.0))))
    pdf = const(1.0 / math.sqrt(2.0 * math.pi)) * exp((x * x) * const(-0.5))
    return dy * (cdf + x * pdf)


def _scalar_body(arg_types: Sequence[Attribute], fn: Callable[..., Any]) -> tuple[Region, list[Attribute]]:
    """A single-block region running `fn` on Scalars; returns it and the yielded types."""
    block = Block(arg_types=list(arg_types))
    with ImplicitBuilder(block):
        out = fn(*[Scalar(a) for a in block.args])
        if not isinstance(out, (tuple, list)):
            out = [out]
        values = [_value(v) for v in out]
        coda.YieldOp(*values)
    return Region(block), [v.type for v in values]


# ============================================================================ kernels


class KernelBuilder:
    """The epilogue of one `coda.gemm` or the body of one `coda.elementwise`.

    Use it as a context manager (`with fb.gemm(a, b) as k:`); `k.acc` is the accumulator tile.
    Function-level tensors passed to primitives become the kernel's inputs. `k.yield_(...)`
    names what the kernel writes; after the `with` block `k.results` are the function-level
    results (tensors for tiles, partials for partials).
    """

    def __init__(self, fb: FunctionBuilder, kind: str, shape: tuple[int, int], make_op: Callable[..., Operation], out_dtype: Attribute):
        self.fb = fb
        self.kind = kind
        self.shape = shape
        self._make_op = make_op
        self.out_dtype = out_dtype
        self.block = Block(arg_types=[coda.TileType(shape, f32)] if kind == "gemm" else [])
        self.inputs: list[SSAValue] = []
        self._local: dict[SSAValue, SSAValue] = {}
        self._yield: tuple[list[SSAValue], list[Attribute]] | None = None
        self._implicit: ImplicitBuilder | None = None
        self.op: Operation | None = None
        self._location = _caller_location()  # the line that opened the kernel

    # -------------------------------------------------------------- context
    def __enter__(self) -> KernelBuilder:
        self._implicit = ImplicitBuilder(self.block)
        self._implicit.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        assert self._implicit is not None
        self._implicit.__exit__(exc_type, exc, tb)
        if exc_type is not None:
            return
        if self._yield is None:
            loc = self._location
            raise CompileError(
                [f"{loc.filename.data}:{loc.line.data}:{loc.column.data}: error: the {self.kind} kernel never called yield_(...)"]
            )
        values, result_types = self._yield
        with ImplicitBuilder(self.block):
            coda.YieldOp(*values)
        self.op = _locate(self._make_op(self.inputs, result_types, Region(self.block)), self._location)
        self.fb._insert(self.op)

    @property
    def acc(self) -> SSAValue:
        if self.kind != "gemm":
            raise AttributeError("only gemm kernels have an accumulator")
        return self.block.args[0]

    @property
    def results(self) -> list[SSAValue]:
        if self.op is None:
            raise _misuse("kernel results exist once its `with` block has ended")
        return list(self.op.results)

    def input(self, value: SSAValue) -> SSAValue:
        """The kernel-local view of a function-level tensor (added to `ins` on first use)."""
        if value in self._local:
            return self._local[value]
        if isinstance(value, BlockArgument) and value.block is self.block:
            return value
        if not isinstance(value.type, TensorType):
            raise ArgumentError(f"kernel inputs must be tensors, got {value.type}", "value")
        arg = self.block.insert_arg(value.type, len(self.block.args))
        if value.name_hint:
            arg.name_hint = value.name_hint
        self.inputs.append(value)
        self._local[value] = arg
        return arg

    def _tile(self, width: int | None = None, elt: Attribute = f32) -> coda.TileType:
        return coda.TileType((self.shape[0], width or self.shape[1]), elt)

    # -------------------------------------------------------------- primitives
    def load(self, matrix: SSAValue) -> SSAValue:
        return coda.LoadOp(self.input(matrix)).result

    def broadcast(self, vector: SSAValue, axis: str, width: int | None = None) -> SSAValue:
        return coda.BroadcastOp(self.input(vector), coda.Axis(axis), self._tile(width)).result

    def index(self, axis: str, width: int | None = None) -> SSAValue:
        return coda.IndexOp(coda.Axis(axis), self._tile(width)).result

    def scale(self, tile: SSAValue, vector: SSAValue, axis: str = "rows") -> SSAValue:
        return coda.ScaleOp(tile, self.input(vector), coda.Axis(axis)).result

    def shift(self, tile: SSAValue, vector: SSAValue, axis: str = "cols") -> SSAValue:
        return coda.ShiftOp(tile, self.input(vector), coda.Axis(axis)).result

    def accumulate(self, tile: SSAValue, matrix: SSAValue) -> SSAValue:
        return coda.AccumulateOp(tile, self.input(matrix)).result

    def map(self, *tiles: SSAValue, fn: Callable[..., Any] | None = None) -> SSAValue | list[SSAValue]:
        """`coda.map`: `fn` gets one Scalar per tile and returns one value per result tile."""
        if fn is None and tiles and callable(tiles[-1]) and not isinstance(tiles[-1], SSAValue):
            *tiles, fn = tiles  # type: ignore[assignment]
        assert fn is not None
        arg_types = [t.type.element_type for t in tiles]  # type: ignore[union-attr]
        body, yielded = _scalar_body(arg_types, fn)
        shape = tiles[0].type.get_shape()  # type: ignore[union-attr]
        op = coda.MapOp(list(tiles), [coda.TileType(shape, t) for t in yielded], body)
        return op.outputs[0] if len(op.outputs) == 1 else list(op.outputs)

    def pair_map(
        self,
        *tiles: SSAValue,
        fn: Callable[..., Any] | None = None,
        out: Sequence[str] | None = None,
        narrow_inputs: Sequence[bool] | None = None,
        stride: int = 1,
    ) -> SSAValue | list[SSAValue]:
        """`coda.pair_map`: `fn` gets (first, second) per wide input and one Scalar per narrow
        input, and returns two values per wide output, one per narrow output. `out` lists
        "wide"/"narrow" per output (default: one narrow output if `fn` returns one value, one
        wide if it returns two); inputs are wide unless flagged in `narrow_inputs`."""
        if fn is None and tiles and callable(tiles[-1]) and not isinstance(tiles[-1], SSAValue):
            *tiles, fn = tiles  # type: ignore[assignment]
        assert fn is not None
        narrow_inputs = list(narrow_inputs or [False] * len(tiles))
        widths = [t.type.cols for t in tiles]  # type: ignore[union-attr]
        pairs = {w if n else w // 2 for w, n in zip(widths, narrow_inputs)}
        if len(pairs) != 1:
            raise _misuse(f"pair_map inputs disagree on the number of pairs: widths {widths}")
        (p,) = pairs
        arg_types: list[Attribute] = []
        for n in narrow_inputs:
            arg_types += [f32] if n else [f32, f32]
        body, yielded = _scalar_body(arg_types, fn)
        if out is None:
            out = ["narrow"] if len(yielded) == 1 else ["wide"] if len(yielded) == 2 else ["narrow"] * len(yielded)
        rows = self.shape[0]
        result_types = [coda.TileType((rows, p if o == "narrow" else 2 * p), f32) for o in out]
        op = coda.PairMapOp(list(tiles), result_types, body, stride=IntegerAttr(stride, i64))
        return op.outputs[0] if len(op.outputs) == 1 else list(op.outputs)

    def reduce(self, kind: str, tile: SSAValue, dim: int = 1) -> SSAValue:
        return coda.ReduceOp(coda.ReduceKind(kind), tile, dim).result

    def segment_reduce(self, kind: str, tile: SSAValue, width: int) -> SSAValue:
        return coda.SegmentReduceOp(coda.ReduceKind(kind), tile, width).result

    def select(self, tile: SSAValue, indices: SSAValue) -> SSAValue:
        return coda.SelectOp(tile, self.input(indices)).result

    def yield_(self, *values: SSAValue, dtypes: Sequence[str | Attribute | None] | None = None) -> None:
        """Name what the kernel writes. Tiles become tensors of `dtypes[i]` (default: the
        kernel's operand type for f32 tiles, i32 for index tiles); partials stay partials."""
        dtypes = list(dtypes or [None] * len(values))
        result_types: list[Attribute] = []
        for v, dt in zip(values, dtypes):
            ty = v.type
            if isinstance(ty, coda.PartialsType):
                result_types.append(ty)
            elif isinstance(ty, coda.TileType):
                elt = element_type(dt) if dt is not None else (i32 if ty.element_type == i32 else self.out_dtype)
                result_types.append(TensorType(elt, list(ty.get_shape())))
            else:
                raise ArgumentError(f"kernels yield tiles and partials, got {ty}", "values")
        self._yield = (list(values), result_types)


class _Annotation:
    """A postponed (string) annotation that `inspect` prints as written, without quotes."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _nn_ops() -> dict[str, type[Operation]]:
    from coda_ir.dialects.nn import NN

    return {op.name.split(".", 1)[1]: op for op in NN.operations}


def _is_operand(annotation: object) -> bool:
    return "SSAValue" in str(annotation)


def _is_operand_list(annotation: object) -> bool:
    return "Sequence[SSAValue]" in str(annotation)


class _NN:
    """`fb.nn.<op>(...)`: append any nn-dialect op through its typed constructor; `dir(fb.nn)`
    lists them, `help(fb.nn.<op>)` shows the op's signature and meaning. Operands are tensor
    values (an op taking a list, `concat`, also takes them as separate arguments:
    `fb.nn.concat(a, b, axis=1)` or `fb.nn.concat([a, b], axis=1)`); properties are keywords or
    positional after them, with the constructor's defaults. An op with one result returns it,
    one with several returns a tuple."""

    def __init__(self, fb: FunctionBuilder):
        self._fb = fb

    def __dir__(self) -> list[str]:
        return sorted(_nn_ops())

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("__"):  # copy / pickle / help probe dunders: not ops
            raise AttributeError(name)
        ops = _nn_ops()
        if name not in ops:
            raise AttributeError(f"no nn op '{name}' (ops: {', '.join(sorted(ops))})")
        return _nn_builder(self._fb, name, ops[name])


def _nn_builder(fb: FunctionBuilder, name: str, cls: type[Operation]) -> Callable[..., Any]:
    import inspect

    signature = inspect.signature(cls.__init__)
    params = list(signature.parameters.values())[1:]  # without self
    # nn.py's annotations are strings (postponed): shown as written, not quoted
    shown = [p.replace(annotation=_Annotation(p.annotation)) if isinstance(p.annotation, str) else p for p in params]
    signature = signature.replace(parameters=shown, return_annotation=inspect.Signature.empty)
    takes_list = bool(params) and _is_operand_list(params[0].annotation)

    def build(*args: Any, **kwargs: Any) -> Any:
        location = _caller_location()
        where = f"{location.filename.data}:{location.line.data}: nn.{name}"
        if takes_list and args and isinstance(args[0], SSAValue):  # concat(a, b, axis=1)
            n = 0
            while n < len(args) and isinstance(args[n], SSAValue):
                n += 1
            args = (list(args[:n]), *args[n:])
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as error:  # wrong number of operands, unknown keyword
            raise ArgumentError(f"{where}: {error}; expected nn.{name}{signature}") from None
        index = 0
        for param in params:
            if not _is_operand(param.annotation) or param.name not in bound.arguments:
                continue
            value = bound.arguments[param.name]
            values = value if _is_operand_list(param.annotation) and isinstance(value, (list, tuple)) else [value]
            if _is_operand_list(param.annotation) and not values:
                raise ArgumentError(f"{where}: '{param.name}' needs at least one tensor value", param.name)
            for v in values:
                if v is None and "None" in str(param.annotation):  # an optional operand left out
                    continue
                if not (isinstance(v, SSAValue) and isinstance(v.type, TensorType)):
                    got = f"a value of type {v.type}" if isinstance(v, SSAValue) else type(v).__name__
                    raise ArgumentError(
                        f"{where}: operand #{index} must be a tensor value ('{param.name}': a function "
                        f"argument or an op's result), got {got}",
                        f"#{index}",
                    )
                index += 1
        if takes_list:
            bound.arguments[params[0].name] = list(bound.arguments[params[0].name])
        try:
            op = cls(*bound.args, **bound.kwargs)
        except TypeError as error:
            raise ArgumentError(f"{where}: {error}") from None
        except (ValueError, IndexError, AssertionError) as error:  # shapes the constructor cannot read
            operands = [a for a in op_operands(bound)]
            raise ArgumentError(
                f"{where}: operands of unexpected rank or type ({', '.join(str(a.type) for a in operands)}): "
                f"{error or type(error).__name__}"
            ) from None
        fb._insert(_locate(op, location))
        return op.results[0] if len(op.results) == 1 else tuple(op.results)

    def op_operands(bound) -> list[SSAValue]:
        found: list[SSAValue] = []
        for value in bound.arguments.values():
            for v in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(v, SSAValue):
                    found.append(v)
        return found

    build.__name__ = build.__qualname__ = name
    build.__signature__ = signature  # type: ignore[attr-defined]
    from coda_ir.dialects.nn import NNOperation

    # the op's own docstring, else its family's (`_ActivationGradOp`'s for silu_grad, ...)
    meaning = next((inspect.cleandoc(c.__doc__) for c in cls.__mro__ if c.__doc__ and c is not NNOperation
                    and issubclass(c, NNOperation)), "")
    build.__doc__ = f"nn.{name}{signature}" + (f"\n\n{meaning}" if meaning else "")
    return build


class FunctionBuilder:
    """Builds one `func.func`: arguments, kernels (or nn ops) and its return."""

    def __init__(self, name: str, *args: tuple[str, Sequence[int], str], **kwargs: tuple[Sequence[int], str]):
        specs = [(n, tuple(s), d) for n, s, d in args] + [(n, tuple(s), d) for n, (s, d) in kwargs.items()]
        self.name = name
        self.block = Block(arg_types=[tensor(s, d) for _, s, d in specs])
        self._names = [n for n, _, _ in specs]
        for arg, n in zip(self.block.args, self._names):
            arg.name_hint = n
        self._builder = Builder(InsertPoint.at_end(self.block))
        self.func: func.FuncOp | None = None
        self.nn = _NN(self)
        self._location = _caller_location()

    def __getattr__(self, name: str) -> SSAValue:
        names = self.__dict__.get("_names", [])
        if name in names:
            return self.block.args[names.index(name)]
        raise AttributeError(f"FunctionBuilder has no attribute or argument '{name}'")

    @property
    def args(self) -> list[SSAValue]:
        return list(self.block.args)

    def _insert(self, op: Operation) -> None:
        if self.func is not None:
            raise _misuse(f"@{self.name} already returned")
        self._builder.insert(op)

    def gemm(
        self,
        a: SSAValue,
        b: SSAValue,
        *,
        transpose_a: bool = False,
        transpose_b: bool = False,
        interleave: int | None = None,
        config: coda.TileConfigAttr | None = None,
    ) -> KernelBuilder:
        """A `coda.gemm` of `op(a) @ op(b)`; `b` is N x K with `transpose_b` (nn.Linear weight)."""
        sa, sb = a.type.get_shape(), b.type.get_shape()  # type: ignore[union-attr]
        m = sa[1] if transpose_a else sa[0]
        n = sb[0] if transpose_b else sb[1]

        def make(inputs, result_types, region):
            return coda.GemmOp(
                a, b, inputs, result_types, region,
                transpose_a=transpose_a, transpose_b=transpose_b, interleave=interleave, config=config,
            )

        return KernelBuilder(self, "gemm", (m, n), make, a.type.get_element_type())  # type: ignore[union-attr]

    def elementwise(self, shape: Sequence[int], out_dtype: str | Attribute = "f32") -> KernelBuilder:
        """A `coda.elementwise` kernel over an M x N space (no GEMM)."""
        m, n = shape

        def make(inputs, result_types, region):
            return coda.ElementwiseOp((m, n), inputs, result_types, region)

        return KernelBuilder(self, "elementwise", (m, n), make, element_type(out_dtype))

    def fold(
        self,
        partials: Sequence[SSAValue],
        fn: Callable[..., Any],
        *,
        ins: Sequence[SSAValue] = (),
        out: Sequence[str] = ("rows",),
        dtypes: Sequence[str] | None = None,
        finalize: Callable[..., Any] | None = None,
    ) -> SSAValue | list[SSAValue]:
        """A `coda.fold`: `fn` gets the folded value of each partials operand, then each input
        (per row, or the 0-d value) as Scalars and returns one value per result; `out` says per
        result "rows" (a vector) or "sum" (a 0-d sum over rows, mapped by `finalize`)."""
        length = None
        for p in partials:
            length = p.type.length.data  # type: ignore[union-attr]
        for v in ins:
            shape = v.type.get_shape()  # type: ignore[union-attr]
            if shape and length is None:
                length = shape[0]
        if length is None:
            raise _misuse("fold needs partials or a vector input to know its length")
        arg_types = [f32] * len(partials)
        for v in ins:
            elt = v.type.get_element_type()  # type: ignore[union-attr]
            arg_types.append(elt if isinstance(elt, IntegerType) else f32)
        body, _ = _scalar_body(arg_types, fn)
        dtypes = list(dtypes or ["f32"] * len(out))
        result_types = [tensor((length,) if o == "rows" else (), d) for o, d in zip(out, dtypes)]
        fin = None
        if finalize is not None:
            fin, _ = _scalar_body([f32] * sum(1 for o in out if o != "rows"), finalize)
        op = coda.FoldOp(list(partials), list(ins), result_types, body, fin)
        self._insert(op)
        return op.results[0] if len(op.results) == 1 else list(op.results)

    def returns(self, *values: SSAValue) -> func.FuncOp:
        """End the function with `func.return values` and build the `func.func`."""
        location = _caller_location()
        self._insert(_locate(func.ReturnOp(*values), location))
        fn_type = ([a.type for a in self.block.args], [v.type for v in values])
        self.func = _locate(func.FuncOp(self.name, fn_type, Region(self.block)), self._location)  # type: ignore[assignment]
        return self.func  # type: ignore[return-value]

    @property
    def module(self) -> ModuleOp:
        """A module holding this function (verified)."""
        if self.func is None:
            raise _misuse(f"@{self.name} has no return yet: call returns(...)")
        if self.func.parent is None:
            module = ModuleOp([self.func])
        else:
            module = self.func.parent_op()  # type: ignore[assignment]
        return _verified(module)  # type: ignore[arg-type]


class ModuleBuilder:
    """Several functions in one module: `mb.function(name, ...)` returns a FunctionBuilder."""

    def __init__(self) -> None:
        self.functions: list[FunctionBuilder] = []

    def function(self, name: str, *args: tuple[str, Sequence[int], str], **kwargs: tuple[Sequence[int], str]) -> FunctionBuilder:
        fb = FunctionBuilder(name, *args, **kwargs)
        self.functions.append(fb)
        return fb

    @property
    def module(self) -> ModuleOp:
        fns = []
        for fb in self.functions:
            if fb.func is None:
                raise _misuse(f"@{fb.name} has no return yet")
            fns.append(fb.func)
        module = ModuleOp(fns)
        return _verified(module)
