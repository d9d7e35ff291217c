"""The `coda` dialect: GEMM-plus-epilogue programs.

Three kernel ops live at function level (directly, or as members of a `coda.launch_group`):

* `coda.gemm` computes the fp32 accumulator `acc = op(a) @ op(b)` with a fixed mainloop and
  then runs its region, the *epilogue*, on each output tile while it is on chip.
* `coda.elementwise` runs the same kind of region over the tiles of an [M, N] iteration space
  with no GEMM (standalone norms, RoPE backward, anything that fused with nothing). With
  `whole rows` each program instance covers BM whole rows, running the region on its column
  tiles one after the other in a fixed order, so a row reduction (`coda.reduce ... dim 1`)
  completes inside the program: its result is a float tensor of length M (the combined value,
  like a fold's), not partials. `whole cols` is the same over whole columns (`dim 0`, length
  of the tile's width). One kernel then does what a tiled kernel plus a `coda.fold` do: e.g. the
  GEMVs `c = W @ g` of a deferred LayerNorm.
* `coda.fold` is a small row kernel: it folds per-tile partial reductions in a fixed order
  and maps the folded values per row (e.g. sum of squares -> rstd), optionally summing a
  per-row value over all rows (a loss).

`coda.launch_group` groups two or more independent small kernels (`coda.elementwise`,
`coda.fold`) into one GPU launch: its region holds the members and a `coda.yield` of all their
results in order; no member may use another member's result (they run concurrently).
`coda-group-launches` forms these groups.

This module holds those ops, the epilogue primitives and the dialect. The types, attributes and
recorded decisions live in `coda_attrs.py`; the library steps (attention, embedding, concat,
slice: calls, not kernels) in `coda_library.py`, defined once with their nn twins
(`library_steps.py`). All their names are re-exported here: `coda.TileType`, `coda.AttentionOp`.

Inside an epilogue region every value is either a **tile** (`!coda.tile<MxWxT>`: the part of a
logical M x W matrix this program instance holds) or a **partial** (`!coda.partials<...>`:
this tile's contribution to a per-row or per-column reduction). Block arguments are the
accumulator tile (gemm only) followed by the kernel's extra inputs, which keep their tensor
types: the epilogue reads them only through the primitives below, always at the tile's own
coordinates, which is what makes each primitive tile-local by construction. The region's
`coda.yield` names what is written: each yielded tile becomes a tensor result (rounded once to
the result's element type) and each yielded partial a partials result.

Tile column spaces. A gemm's accumulator spans N columns. Pairwise maps change the width: a
2 -> 1 map gives a tile N/2 wide, a 1 -> 2 map a tile 2N wide. A tile W columns wide at the
kernel's column tile `[n0, n0 + BN)` covers columns `[n0 * W / N, (n0 + BN) * W / N)`; loads
and stores of W-wide matrices use those columns. With `interleave = h` on a gemm, accumulator
column `c` holds the product with weight row `perm(c)`, where within each group of `2h`
columns `c = 2i + j` maps to `i + j * h` (pairs that were `h` apart become adjacent); N-wide
tensors are loaded and stored at `perm(c)`, and `coda.index cols` on an N-wide tile gives
`perm(c)`, so epilogues and users see their own layout. With
`interleave_wide = h`, the same permutation applies to the 2N-wide column space instead: 2N-wide
tensors (the wide side of 1 -> 2 pair maps) are loaded and stored at `perm(c)`, c in [0, 2N), so
the adjacent pair (2i, 2i + 1) of a wide tile is stored columns (i, i + h) (e.g. h = N: the
[gate | up] halves of a saved SwiGLU pre-activation, read by the SwiGLU backward whose
accumulator is N wide); the accumulator and N-wide tensors keep the natural order.

Primitives (the epilogue vocabulary of EPILOGUES.md):

| op | meaning |
|---|---|
| `coda.load %C` | the tile of matrix C at this tile's coordinates, in fp32 |
| `coda.load %T cols_period P` | `T[m, c mod P]`: an [M, P] table repeated along the tile's columns |
| `coda.broadcast %v rows/cols` | `v[m]` or `v[n mod len(v)]` as a tile |
| `coda.index rows/cols` | the global row or column index of each element (i32) |
| `coda.scale %t, %v rows/cols/scalar` | `t * v[m]`, `t * v[n]`, `t * s` |
| `coda.shift %t, %v rows/cols/scalar` | `t + v[m]`, `t + v[n]`, `t + s` |
| `coda.accumulate %t, %C` | `t + C[m, n]` |
| `coda.map %t... {body}` | any elementwise function, body of `arith`/`math` ops |
| `coda.pair_map [stride s [period P]] %t... {body}` | functions of column pairs: 2 -> 2, 2 -> 1, 1 -> 2 (and mixes); pairs (c, c + s) in groups of 2s, or with a period in the first 2s columns of each P, the rest adjacent |
| `coda.reduce kind %t dim d` | per-tile partial reduction: sum, sumsq, max, lse |
| `coda.segment_reduce kind %t width w` | reduction over aligned column segments, broadcast back |
| `coda.select %t, %idx` | per row, the element at column `idx[m]` (as a sum partial) |
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    Float16Type,
    Float32Type,
    IntAttr,
    IntegerAttr,
    TensorType,
    UnitAttr,
    f32,
    i1,
    i32,
    i64,
    I64,
)
from xdsl.ir import (
    Attribute,
    Block,
    Dialect,
    Operation,
    Region,
    SSAValue,
)
from xdsl.irdl import (
    AnyAttr,
    IRDLOperation,
    VarConstraint,
    base,
    irdl_op_definition,
    lazy_traits_def,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.irdl.operations import AttrSizedOperandSegments
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import (
    HasParent,
    IsolatedFromAbove,
    IsTerminator,
    Pure,
    RecursiveMemoryEffect,
)
from xdsl.utils.exceptions import VerifyException

from coda_ir.dialects.coda_attrs import (  # re-exported: `coda.X` names them all
    FLOAT_TYPES,
    Axis,
    ReduceKind,
    Combine,
    COMBINE_OF_KIND,
    AxisAttr,
    ReduceKindAttr,
    TileType,
    PartialsType,
    TileConfigAttr,
    MAINLOOP,
    HANDOFF_TYPES,
    MainloopAttr,
    recorded_mainloop,
    VENDOR_GEMM,
    VendorGemmAttr,
    recorded_vendor_gemm,
    CONSTRAINTS,
    GATHERED,
    ROW_EXCHANGE,
    PAIR_HALVES,
    FULL_PRECISION,
    SEPARATE,
    WRITES_OVER,
    DONATED,
    OWNED,
    writes_over,
    record_writes_over,
    donate_arguments,
    own_arguments,
    donated_arguments,
    owned_arguments,
    TileConstraintsAttr,
    ROWS,
    RowsAttr,
    symbolic_rows,
    recorded_bn_multiple_of,
    is_gathered,
    pair_halves_stride,
    is_row_exchanged,
)
from coda_ir.dialects.coda_library import (  # re-exported: `coda.X` names them all
    LibraryStepOp,
    AttentionOp,
    AttentionGradOp,
    EmbeddingOp,
    EmbeddingGradOp,
    ConcatOp,
    SliceOp,
    LIBRARY_STEP_OPS,
)


# ============================================================================ helpers


def tensor_shape(ty: Attribute) -> tuple[int, ...]:
    assert isinstance(ty, TensorType)
    return tuple(ty.get_shape())


def _fmt(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape)) if shape else "scalar"


def _is_float_tensor(ty: Attribute) -> bool:
    return isinstance(ty, TensorType) and isinstance(ty.get_element_type(), FLOAT_TYPES)


def _is_i32_tensor(ty: Attribute) -> bool:
    return isinstance(ty, TensorType) and ty.get_element_type() == i32


def _tile(value: SSAValue, what: str) -> TileType:
    if not isinstance(value.type, TileType):
        raise VerifyException(f"{what} must be a !coda.tile, got {value.type}")
    return value.type


def _float_tile(value: SSAValue, what: str) -> TileType:
    ty = _tile(value, what)
    if ty.element_type != f32:
        raise VerifyException(f"{what} must be an f32 tile, got {ty}")
    return ty


def _kernel_of(op: Operation) -> Operation | None:
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, (GemmOp, ElementwiseOp)):
        parent = parent.parent_op()
    return parent


def _check_kernel_input(op: Operation, value: SSAValue, what: str) -> TensorType:
    """Epilogues read global tensors only through the kernel's own block arguments."""
    from xdsl.ir import BlockArgument

    if not isinstance(value.type, TensorType):
        raise VerifyException(f"{what} must be a tensor input of the kernel, got {value.type}")
    kernel = _kernel_of(op)
    if not (
        isinstance(value, BlockArgument)
        and kernel is not None
        and value.block is kernel.regions[0].blocks[0]
    ):
        raise VerifyException(f"{what} must be a block argument of the enclosing kernel (one of its `ins`)")
    return value.type


def _check_axis_vector(op: Operation, vector: SSAValue, axis: Axis, tile: TileType, what: str) -> None:
    ty = _check_kernel_input(op, vector, what)
    shape = tensor_shape(ty)
    if axis == Axis.SCALAR:
        if shape != ():
            raise VerifyException(f"{what} must be a 0-d tensor for a scalar {op.name}, got {_fmt(shape)}")
    elif axis == Axis.ROWS:
        if shape != (tile.rows,):
            raise VerifyException(
                f"{what} must have shape {tile.rows} (one value per row of the tile), got {_fmt(shape)}"
            )
    else:
        if len(shape) != 1 or shape[0] <= 0 or tile.cols % shape[0]:
            raise VerifyException(
                f"{what} must have shape {tile.cols} (one value per column), or a length that "
                f"divides it (repeated periodically), got {_fmt(shape)}"
            )
    elt = ty.get_element_type()
    if not isinstance(elt, FLOAT_TYPES) and elt != i32:
        raise VerifyException(f"{what} element type must be a float or i32, got {elt}")


ELEMENTWISE_BODY_DIALECTS = ("arith", "math")


def _verify_scalar_body(op: Operation, body: Region, n_args: int, n_yields: int, what: str) -> None:
    block = body.blocks[0]
    if len(block.args) != n_args:
        raise VerifyException(f"{what} body must take {n_args} scalar arguments, got {len(block.args)}")
    for arg in block.args:
        if not (arg.type == f32 or arg.type == i32 or arg.type == i1):
            raise VerifyException(f"{what} body arguments must be f32, i32 or i1 scalars, got {arg.type}")
    for inner in block.ops:
        if isinstance(inner, YieldOp):
            continue
        dialect = inner.name.split(".")[0]
        if dialect not in ELEMENTWISE_BODY_DIALECTS:
            raise VerifyException(
                f"{what} body may only contain arith and math ops (elementwise math), found '{inner.name}'"
            )
        for result in inner.results:
            # a bf16/f16 value only as a rounding step (arith.truncf, extended back to f32): how
            # a fused kernel reads a tile rounded as it is stored
            rounding = inner.name == "arith.truncf" and isinstance(result.type, (BFloat16Type, Float16Type))
            if result.type not in (f32, i32, i1, i64) and not rounding:
                raise VerifyException(f"{what} body values must be scalars, '{inner.name}' gives {result.type}")
    terminator = block.last_op
    if not isinstance(terminator, YieldOp):
        raise VerifyException(f"{what} body must end with coda.yield")
    if len(terminator.values) != n_yields:
        raise VerifyException(f"{what} body must yield {n_yields} values, yields {len(terminator.values)}")


# ============================================================================ region ops


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Ends an epilogue (naming what the kernel writes) or a scalar body."""

    name = "coda.yield"
    values = var_operand_def(AnyAttr())
    assembly_format = "attr-dict ($values^ `:` type($values))?"
    traits = lazy_traits_def(
        lambda: (IsTerminator(), HasParent(GemmOp, ElementwiseOp, FoldOp, MapOp, PairMapOp, LaunchGroupOp), Pure())
    )

    def __init__(self, *values: SSAValue):
        super().__init__(operands=[values])


class TileOperation(IRDLOperation):
    """An epilogue primitive: only legal directly inside a gemm or elementwise kernel."""

    traits = lazy_traits_def(lambda: (HasParent(GemmOp, ElementwiseOp), Pure()))


@irdl_op_definition
class LoadOp(TileOperation):
    """The tile of a matrix input at this tile's coordinates, converted to fp32 (i32 stays).

    With `cols_period P` the source is a narrow [M, P] table repeated along the columns of
    a wider logical M x W matrix (P divides W): element (m, c) is `T[m, c mod P]`. Tables of
    per-(row, c mod P) values (RoPE's cos/sin per position and frequency) are then computed
    once per row instead of once per column tile; the read stays at the tile's own rows, so
    the load is tile-local like a plain one.
    """

    name = "coda.load"
    source = operand_def(TensorType)
    cols_period = opt_prop_def(IntegerAttr)
    result = result_def(TileType)

    def __init__(self, source: SSAValue, cols_period: int | None = None, cols: int | None = None):
        shape = tensor_shape(source.type)
        elt = i32 if _is_i32_tensor(source.type) else f32
        props: dict[str, Attribute] = {}
        if cols_period is not None:
            props["cols_period"] = IntegerAttr(cols_period, i64)
            assert cols is not None, "a periodic load names the width of the tile it builds"
            shape = (shape[0], cols)
        super().__init__(operands=[source], result_types=[TileType(shape, elt)], properties=props)

    @property
    def period(self) -> int | None:
        return None if self.cols_period is None else self.cols_period.value.data

    def verify_(self) -> None:
        ty = _check_kernel_input(self, self.source, "loaded value")
        shape = tensor_shape(ty)
        if len(shape) != 2:
            raise VerifyException(f"coda.load reads a matrix, got a tensor of shape {_fmt(shape)}")
        result = self.result.type
        assert isinstance(result, TileType)
        period = self.period
        if period is None:
            if result.get_shape() != shape:
                raise VerifyException(
                    f"result tile must be {_fmt(shape)} like the loaded matrix, got {_fmt(result.get_shape())}"
                )
        else:
            if period <= 0 or result.cols % period:
                raise VerifyException(
                    f"cols_period {period} must be positive and divide the tile's {result.cols} columns"
                )
            if shape != (result.rows, period):
                raise VerifyException(
                    f"a table read with cols_period {period} must be {result.rows}x{period} "
                    f"(the tile's rows x the period), got {_fmt(shape)}"
                )
        expected = i32 if _is_i32_tensor(ty) else f32
        if result.element_type != expected:
            raise VerifyException(f"loading {ty.get_element_type()} gives a {expected} tile, not {result.element_type}")

    @classmethod
    def parse(cls, parser: Parser) -> LoadOp:
        unresolved = parser.parse_unresolved_operand()
        props: dict[str, Attribute] = {}
        if parser.parse_optional_keyword("cols_period") is not None:
            props["cols_period"] = IntegerAttr(parser.parse_integer(allow_boolean=False, allow_negative=False), i64)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        src_type = parser.parse_type()
        parser.parse_punctuation("->")
        result_type = parser.parse_type()
        (source,) = parser.resolve_operands([unresolved], [src_type], parser.pos)
        op = cls.create(operands=[source], result_types=[result_type], properties=props)
        op.attributes |= attrs
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.source)
        if self.period is not None:
            printer.print_string(f" cols_period {self.period}")
        printer.print_op_attributes(self.attributes)
        printer.print_string(" : ")
        printer.print_attribute(self.source.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)


@irdl_op_definition
class BroadcastOp(TileOperation):
    """`v[m]` (rows) or `v[n mod len(v)]` (cols) as a tile of the result's shape."""

    name = "coda.broadcast"
    source = operand_def(TensorType)
    axis = prop_def(AxisAttr)
    result = result_def(TileType)
    assembly_format = "$source $axis attr-dict `:` type($source) `->` type($result)"

    def __init__(self, source: SSAValue, axis: Axis, tile: TileType):
        elt = i32 if _is_i32_tensor(source.type) else f32
        super().__init__(
            operands=[source],
            result_types=[TileType(tile.get_shape(), elt)],
            properties={"axis": AxisAttr(axis)},
        )

    def verify_(self) -> None:
        result = _tile(self.result, "result")
        _check_axis_vector(self, self.source, self.axis.data, result, "broadcast vector")
        expected = i32 if _is_i32_tensor(self.source.type) else f32
        if result.element_type != expected:
            raise VerifyException(f"broadcasting {self.source.type} gives a {expected} tile, not {result.element_type}")


@irdl_op_definition
class IndexOp(TileOperation):
    """The global row or column index of every element of a tile (i32)."""

    name = "coda.index"
    axis = prop_def(AxisAttr)
    result = result_def(TileType)
    assembly_format = "$axis attr-dict `:` type($result)"

    def __init__(self, axis: Axis, tile: TileType):
        super().__init__(result_types=[TileType(tile.get_shape(), i32)], properties={"axis": AxisAttr(axis)})

    def verify_(self) -> None:
        if self.axis.data == Axis.SCALAR:
            raise VerifyException("coda.index takes rows or cols")
        if _tile(self.result, "result").element_type != i32:
            raise VerifyException("coda.index gives an i32 tile")


class _BroadcastArithOp(TileOperation):
    """`t (op) v` with v a kernel input indexed by row, by column, or a scalar."""

    T: ClassVar = VarConstraint("T", base(TileType))
    tile = operand_def(T)
    vector = operand_def(TensorType)
    axis = prop_def(AxisAttr)
    result = result_def(T)
    assembly_format = "$tile `,` $vector $axis attr-dict `:` type($tile) `,` type($vector)"

    def __init__(self, tile: SSAValue, vector: SSAValue, axis: Axis):
        super().__init__(operands=[tile, vector], result_types=[tile.type], properties={"axis": AxisAttr(axis)})

    def verify_(self) -> None:
        tile = _float_tile(self.tile, "scaled tile")
        _check_axis_vector(self, self.vector, self.axis.data, tile, "vector operand")
        if _is_i32_tensor(self.vector.type):
            raise VerifyException("vector operand must be a float tensor")
        if self.result.type != tile:
            raise VerifyException(f"result type must match the tile {tile}")


@irdl_op_definition
class ScaleOp(_BroadcastArithOp):
    name = "coda.scale"


@irdl_op_definition
class ShiftOp(_BroadcastArithOp):
    name = "coda.shift"


@irdl_op_definition
class AccumulateOp(TileOperation):
    """`t + C[m, n]` with C a matrix input read at the tile's coordinates."""

    name = "coda.accumulate"
    T: ClassVar = VarConstraint("T", base(TileType))
    tile = operand_def(T)
    matrix = operand_def(TensorType)
    result = result_def(T)
    assembly_format = "$tile `,` $matrix attr-dict `:` type($tile) `,` type($matrix)"

    def __init__(self, tile: SSAValue, matrix: SSAValue):
        super().__init__(operands=[tile, matrix], result_types=[tile.type])

    def verify_(self) -> None:
        tile = _float_tile(self.tile, "accumulated tile")
        ty = _check_kernel_input(self, self.matrix, "accumulated matrix")
        if not _is_float_tensor(ty) or tensor_shape(ty) != tile.get_shape():
            raise VerifyException(
                f"accumulated matrix must be a float tensor of shape {_fmt(tile.get_shape())} "
                f"(the tile's matrix), got {ty}"
            )
        if self.result.type != tile:
            raise VerifyException(f"result type must match the tile {tile}")


def _parse_rest_of_type_list(parser: Parser) -> list[Attribute]:
    if parser.parse_optional_punctuation(")") is not None:
        return []
    types = [parser.parse_type()]
    while parser.parse_optional_punctuation(",") is not None:
        types.append(parser.parse_type())
    parser.parse_punctuation(")")
    return types


def _parse_type_list(parser: Parser) -> list[Attribute]:
    """`T` or `(T, T, ...)`."""
    if parser.parse_optional_punctuation("(") is not None:
        return _parse_rest_of_type_list(parser)
    return [parser.parse_type()]


def _print_type_list(printer: Printer, types: Sequence[Attribute]) -> None:
    if len(types) == 1:
        printer.print_attribute(types[0])
    else:
        with printer.in_parens():
            printer.print_list(types, printer.print_attribute)


def pair_columns(stride: int, period: int | None, pairs: int) -> tuple[list[int], list[int]]:
    """The (first, second) wide columns of pairs 0..pairs-1 of a `coda.pair_map stride s
    [period P]`: plain, `(g * 2s + j, + s)` for g = p div s, j = p mod s; with a period,
    g = p div P/2, j = p mod P/2: `(g * P + j, + s)` for j < s, `(g * P + 2j, + 1)` otherwise."""
    first, second = [], []
    for p in range(pairs):
        if period is None:
            a = (p // stride) * 2 * stride + p % stride
            first.append(a)
            second.append(a + stride)
            continue
        g, j = divmod(p, period // 2)
        a = g * period + (j if j < stride else 2 * j)
        first.append(a)
        second.append(a + (stride if j < stride else 1))
    return first, second


class _ScalarBodyTileOp(TileOperation):
    """Shared syntax: `coda.map %a, %b : (T, T) -> T { ^bb0(...): ... }`."""

    inputs = var_operand_def(TileType)
    outputs = var_result_def(TileType)
    body = region_def("single_block")
    traits = lazy_traits_def(lambda: (HasParent(GemmOp, ElementwiseOp), RecursiveMemoryEffect()))

    def __init__(self, inputs: Sequence[SSAValue], result_types: Sequence[Attribute], body: Region, **props: Attribute):
        super().__init__(operands=[inputs], result_types=[result_types], regions=[body], properties=props)

    @classmethod
    def parse(cls, parser: Parser) -> _ScalarBodyTileOp:
        props = {}
        if parser.parse_optional_keyword("stride") is not None:
            props["stride"] = IntegerAttr(parser.parse_integer(allow_boolean=False, allow_negative=False), i64)
            if parser.parse_optional_keyword("period") is not None:
                props["period"] = IntegerAttr(parser.parse_integer(allow_boolean=False, allow_negative=False), i64)
        unresolved = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_unresolved_operand)
        parser.parse_punctuation(":")
        types = _parse_type_list(parser)
        parser.parse_punctuation("->")
        result_types = _parse_type_list(parser)
        if len(types) != len(unresolved):
            parser.raise_error(f"expected {len(unresolved)} operand types, got {len(types)}")
        operands = parser.resolve_operands(unresolved, types, parser.pos)
        attrs = parser.parse_optional_attr_dict_with_keyword()
        body = parser.parse_region()
        op = cls.create(operands=operands, result_types=result_types, regions=[body], properties=props)
        if attrs is not None:
            op.attributes |= attrs.data
        return op

    def print(self, printer: Printer) -> None:
        if "stride" in self.properties or "period" in self.properties:  # a period follows its stride
            stride = self.properties.get("stride", IntegerAttr(1, i64))
            assert isinstance(stride, IntegerAttr)
            printer.print_string(f" stride {stride.value.data}")
        if "period" in self.properties:
            period = self.properties["period"]
            assert isinstance(period, IntegerAttr)
            printer.print_string(f" period {period.value.data}")
        printer.print_string(" ")
        printer.print_list(self.inputs, printer.print_operand)
        printer.print_string(" : ")
        _print_type_list(printer, [v.type for v in self.inputs])
        printer.print_string(" -> ")
        _print_type_list(printer, [r.type for r in self.outputs])
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body)


@irdl_op_definition
class MapOp(_ScalarBodyTileOp):
    """An elementwise function of same-shaped tiles; the body sees one scalar per input."""

    name = "coda.map"

    def verify_(self) -> None:
        if not self.inputs:
            raise VerifyException("coda.map needs at least one input tile")
        if not self.outputs:
            raise VerifyException("coda.map must produce at least one tile")
        shape = _tile(self.inputs[0], "input").get_shape()
        for i, value in enumerate([*self.inputs, *self.outputs]):
            if _tile(value, "operand").get_shape() != shape:
                raise VerifyException(
                    f"all tiles of coda.map must have shape {_fmt(shape)}, "
                    f"#{i} has {_fmt(_tile(value, 'operand').get_shape())}"
                )
        _verify_scalar_body(self, self.body, len(self.inputs), len(self.outputs), "coda.map")
        block = self.body.blocks[0]
        for arg, value in zip(block.args, self.inputs):
            assert isinstance(value.type, TileType)
            if arg.type != value.type.element_type:
                raise VerifyException(f"body argument {arg.type} does not match tile element type {value.type.element_type}")
        terminator = block.last_op
        assert isinstance(terminator, YieldOp)
        for yielded, out in zip(terminator.values, self.outputs):
            assert isinstance(out.type, TileType)
            if yielded.type != out.type.element_type:
                raise VerifyException(f"body yields {yielded.type} for a tile of {out.type.element_type}")


@irdl_op_definition
class PairMapOp(_ScalarBodyTileOp):
    """A function of column pairs.

    Pairs are columns `(c, c + stride)` within aligned groups of `2 * stride` columns
    (`stride = 1`: adjacent columns `(2i, 2i + 1)`). Every tile involved is either *wide*
    (2P columns: the body sees both members of each pair, first then second) or *narrow*
    (P columns: one value per pair). Wide in, narrow out is 2 -> 1 (gated activations); wide
    in, wide out is 2 -> 2 (rotations); narrow in, wide out is 1 -> 2 (their backward).

    With `period` (partial half-style RoPE: Phi-4-mini's 96 of 128), the wide columns are
    aligned groups of `period` columns (a head), each holding `period / 2` pairs: pair j < stride
    of a group is its columns `(j, j + stride)` (the first `2 * stride` columns), pair
    j >= stride its adjacent columns `(2j, 2j + 1)` (the rest of the group, in order). Pair p
    is pair `p mod period/2` of group `p div period/2`, so the narrow index is the same as the
    plain form's. `period` is even, greater than `2 * stride` (equal is the plain form, which is
    written without it) and divides the wide width. `pair_columns` gives both columns of every
    pair.
    """

    name = "coda.pair_map"
    stride = prop_def(IntegerAttr, default_value=IntegerAttr(1, i64))
    period = opt_prop_def(IntegerAttr)

    def group(self) -> int:
        """The aligned column group a pair's partner lies in: `period`, else `2 * stride`."""
        return self.period.value.data if self.period is not None else 2 * self.stride.value.data

    def pair_columns(self, pairs: int | None = None) -> tuple[list[int], list[int]]:
        """The (first, second) wide columns of each pair p < pairs (default: all)."""
        return pair_columns(self.stride.value.data, None if self.period is None else self.period.value.data,
                            self.pair_count() if pairs is None else pairs)

    def pair_count(self) -> int:
        widths = [_tile(v, "operand").cols for v in [*self.inputs, *self.outputs]]
        return min(widths) if max(widths) != min(widths) else widths[0] // 2

    def is_wide(self, value: SSAValue) -> bool:
        assert isinstance(value.type, TileType)
        return value.type.cols == 2 * self.pair_count()

    def verify_(self) -> None:
        if not self.inputs or not self.outputs:
            raise VerifyException("coda.pair_map needs input and output tiles")
        tiles = [_tile(v, "operand") for v in [*self.inputs, *self.outputs]]
        rows = {t.rows for t in tiles}
        if len(rows) != 1:
            raise VerifyException("all tiles of coda.pair_map must have the same number of rows")
        widths = sorted({t.cols for t in tiles})
        if len(widths) > 2 or (len(widths) == 2 and widths[1] != 2 * widths[0]):
            raise VerifyException(
                f"coda.pair_map tiles must be P (narrow) or 2P (wide) columns wide, got widths {widths}"
            )
        pairs = self.pair_count()
        if len(widths) == 1 and widths[0] % 2:
            raise VerifyException(f"wide tiles need an even number of columns, got {widths[0]}")
        stride = self.stride.value.data
        if self.period is not None:
            period = self.period.value.data
            if stride <= 0 or period % 2 or period <= 2 * stride or (2 * pairs) % period:
                raise VerifyException(
                    f"period {period} must be even, greater than 2*stride = {2 * stride} (stride positive) and "
                    f"divide the wide width {2 * pairs}"
                )
        elif stride <= 0 or (2 * pairs) % (2 * stride):
            raise VerifyException(
                f"stride {stride} must be positive and 2*stride must divide the wide width {2 * pairs}"
            )
        arity = [2 if self.is_wide(v) else 1 for v in self.inputs]
        yields = sum(2 if self.is_wide(v) else 1 for v in self.outputs)
        _verify_scalar_body(self, self.body, sum(arity), yields, "coda.pair_map")
        block = self.body.blocks[0]
        arg_types = [t.element_type for v, t in zip(self.inputs, tiles) for _ in range(2 if self.is_wide(v) else 1)]
        for arg, expected in zip(block.args, arg_types):
            if arg.type != expected:
                raise VerifyException(f"body argument {arg.type} does not match tile element type {expected}")
        terminator = block.last_op
        assert isinstance(terminator, YieldOp)
        out_tiles = tiles[len(self.inputs) :]
        yield_types = [t.element_type for v, t in zip(self.outputs, out_tiles) for _ in range(2 if self.is_wide(v) else 1)]
        for yielded, expected in zip(terminator.values, yield_types):
            if yielded.type != expected:
                raise VerifyException(f"body yields {yielded.type} for a tile of {expected}")


@irdl_op_definition
class ReduceOp(TileOperation):
    """This tile's partial reduction: over columns (dim 1, one value per row) or rows (dim 0).

    `sumsq` sums squares; `lse` is a numerically safe log-sum-exp. Out-of-bounds elements of
    ragged edge tiles never contribute.
    """

    name = "coda.reduce"
    kind = prop_def(ReduceKindAttr)
    tile = operand_def(TileType)
    dim = prop_def(IntegerAttr[I64])
    result = result_def(PartialsType)
    assembly_format = "$kind $tile `dim` $dim attr-dict `:` type($tile) `->` type($result)"

    def __init__(self, kind: ReduceKind, tile: SSAValue, dim: int):
        ty = tile.type
        assert isinstance(ty, TileType)
        along, length = (Axis.ROWS, ty.rows) if dim == 1 else (Axis.COLS, ty.cols)
        super().__init__(
            operands=[tile],
            result_types=[PartialsType(along, length, COMBINE_OF_KIND[kind])],
            properties={"kind": ReduceKindAttr(kind), "dim": IntegerAttr(dim, i64)},
        )

    def verify_(self) -> None:
        tile = _float_tile(self.tile, "reduced tile")
        dim = self.dim.value.data
        if dim not in (0, 1):
            raise VerifyException(f"dim must be 0 (over rows) or 1 (over columns), got {dim}")
        result = self.result.type
        assert isinstance(result, PartialsType)
        along, length = (Axis.ROWS, tile.rows) if dim == 1 else (Axis.COLS, tile.cols)
        expected = PartialsType(along, length, COMBINE_OF_KIND[self.kind.data])
        if result != expected:
            raise VerifyException(f"result must be {expected}, got {result}")


@irdl_op_definition
class SegmentReduceOp(TileOperation):
    """Reduce each aligned segment of `width` columns and broadcast the result back over it.

    The QK-norm statistic: tile-local only when tiles hold whole segments, which the
    lowering guarantees by choosing BN as a multiple of `width`.
    """

    name = "coda.segment_reduce"
    kind = prop_def(ReduceKindAttr)
    T: ClassVar = VarConstraint("T", base(TileType))
    tile = operand_def(T)
    width = prop_def(IntegerAttr[I64])
    result = result_def(T)
    assembly_format = "$kind $tile `width` $width attr-dict `:` type($tile)"

    def __init__(self, kind: ReduceKind, tile: SSAValue, width: int):
        super().__init__(
            operands=[tile],
            result_types=[tile.type],
            properties={"kind": ReduceKindAttr(kind), "width": IntegerAttr(width, i64)},
        )

    def verify_(self) -> None:
        tile = _float_tile(self.tile, "reduced tile")
        width = self.width.value.data
        if width <= 0 or tile.cols % width:
            raise VerifyException(f"segment width {width} must be positive and divide the tile's {tile.cols} columns")
        if self.kind.data == ReduceKind.LSE:
            raise VerifyException("segment_reduce supports sum, sumsq and max")
        if self.result.type != tile:
            raise VerifyException(f"result type must match the tile {tile}")


@irdl_op_definition
class SelectOp(TileOperation):
    """Per row m, the element at column `idx[m]` when this tile holds it, else 0: a sum
    partial that exactly one tile contributes to (no atomics, deterministic)."""

    name = "coda.select"
    tile = operand_def(TileType)
    indices = operand_def(TensorType)
    result = result_def(PartialsType)
    assembly_format = "$tile `,` $indices attr-dict `:` type($tile) `,` type($indices) `->` type($result)"

    def __init__(self, tile: SSAValue, indices: SSAValue):
        ty = tile.type
        assert isinstance(ty, TileType)
        super().__init__(operands=[tile, indices], result_types=[PartialsType(Axis.ROWS, ty.rows, Combine.SUM)])

    def verify_(self) -> None:
        tile = _float_tile(self.tile, "selected tile")
        ty = _check_kernel_input(self, self.indices, "column indices")
        if not _is_i32_tensor(ty) or tensor_shape(ty) != (tile.rows,):
            raise VerifyException(f"column indices must be a tensor<{tile.rows}xi32> (one per row), got {ty}")
        expected = PartialsType(Axis.ROWS, tile.rows, Combine.SUM)
        if self.result.type != expected:
            raise VerifyException(f"result must be {expected}, got {self.result.type}")


# ============================================================================ kernels


def _verify_kernel_yield(
    kernel: Operation, block: Block, results: Sequence[SSAValue], whole: Axis | None = None
) -> None:
    """Yielded tiles become tensors of their shape, partials become partials buffers; in a
    `whole rows` (`whole cols`) kernel, row (column) partials complete inside the program and
    become a float tensor with one value per row (column)."""
    terminator = block.last_op
    if not isinstance(terminator, YieldOp):
        raise VerifyException(f"{kernel.name} region must end with coda.yield")
    if len(terminator.values) != len(results):
        raise VerifyException(
            f"{kernel.name} has {len(results)} results but its epilogue yields {len(terminator.values)} values"
        )
    for i, (value, result) in enumerate(zip(terminator.values, results)):
        if isinstance(value.type, PartialsType) and whole is not None:
            if value.type.axis != whole:
                raise VerifyException(
                    f"a whole {whole.value} kernel completes {whole.value} reductions only; value #{i} is "
                    f"{value.type} (use a tiled coda.elementwise for it)"
                )
            length = value.type.length.data
            if not _is_float_tensor(result.type) or tensor_shape(result.type) != (length,):
                raise VerifyException(
                    f"result #{i} holds a {whole.value} reduction completed in the program and must be a float "
                    f"tensor of shape {length}, got {result.type}"
                )
        elif isinstance(value.type, PartialsType):
            if result.type != value.type:
                raise VerifyException(f"result #{i} must be {value.type} to hold the yielded partials, got {result.type}")
        elif isinstance(value.type, TileType):
            tile = value.type
            if not _is_float_tensor(result.type) and not (_is_i32_tensor(result.type) and tile.element_type == i32):
                raise VerifyException(f"result #{i} stores a tile and must be a float tensor, got {result.type}")
            if tensor_shape(result.type) != tile.get_shape():
                raise VerifyException(
                    f"result #{i} stores a {_fmt(tile.get_shape())} tile but has shape {_fmt(tensor_shape(result.type))}"
                )
        else:
            raise VerifyException(f"{kernel.name} can only yield tiles and partials, got {value.type}")


def _verify_epilogue_inputs(kernel: Operation, block: Block, inputs: Sequence[SSAValue], offset: int) -> None:
    args = block.args[offset:]
    if len(args) != len(inputs):
        raise VerifyException(
            f"{kernel.name} region must take {offset} tile argument(s) followed by one argument per input "
            f"({len(inputs)}), got {len(block.args)} arguments"
        )
    for i, (arg, value) in enumerate(zip(args, inputs)):
        if arg.type != value.type:
            raise VerifyException(f"region argument #{i + offset} must have the type of input #{i}, {value.type}, got {arg.type}")
        if not isinstance(value.type, TensorType) or any(d < 0 for d in value.type.get_shape()):
            raise VerifyException(f"input #{i} must be a statically shaped tensor, got {value.type}")
    for inner in block.ops:
        if inner is block.last_op:
            continue
        if not isinstance(inner, TileOperation) and inner.name.split(".")[0] not in ELEMENTWISE_BODY_DIALECTS:
            raise VerifyException(f"'{inner.name}' is not an epilogue primitive")
        if inner.name.split(".")[0] in ELEMENTWISE_BODY_DIALECTS and any(
            isinstance(r.type, (TileType, TensorType)) for r in inner.results
        ):
            raise VerifyException(f"'{inner.name}' on tiles must be wrapped in coda.map")


def _verify_tile_rows(block: Block, m: int) -> None:
    """Every tile of a kernel is a slice of the kernel's own M rows: a tile with other rows
    would read (or write) another tile's values."""
    for inner in block.ops:
        for result in inner.results:
            if isinstance(result.type, TileType) and result.type.rows != m:
                raise VerifyException(f"tiles of this kernel must have {m} rows, '{inner.name}' gives {result.type}")


def _parse_ins(parser: Parser) -> list[SSAValue]:
    if parser.parse_optional_keyword("ins") is None:
        return []
    parser.parse_punctuation("(")
    unresolved = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_unresolved_operand)
    parser.parse_punctuation(":")
    types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
    parser.parse_punctuation(")")
    if len(types) != len(unresolved):
        parser.raise_error(f"ins has {len(unresolved)} operands but {len(types)} types")
    return parser.resolve_operands(unresolved, types, parser.pos)


def _print_ins(printer: Printer, inputs: Sequence[SSAValue]) -> None:
    if not inputs:
        return
    printer.print_string(" ins(")
    printer.print_list(inputs, printer.print_operand)
    printer.print_string(" : ")
    printer.print_list((v.type for v in inputs), printer.print_attribute)
    printer.print_string(")")


@irdl_op_definition
class GemmOp(IRDLOperation):
    """`acc = op(a) @ op(b)` (fp32) followed by the epilogue region.

    `a` is M x K (K x M with `transpose_a`); `b` is K x N (N x K with `transpose_b`: an
    nn.Linear weight). The region takes `%acc: !coda.tile<MxNxf32>` and one argument per
    input in `ins`.
    """

    name = "coda.gemm"
    a = operand_def(TensorType)
    b = operand_def(TensorType)
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(AnyAttr())
    transpose_a = opt_prop_def(UnitAttr)
    transpose_b = opt_prop_def(UnitAttr)
    interleave = opt_prop_def(IntegerAttr)
    interleave_wide = opt_prop_def(IntegerAttr)
    config = opt_prop_def(TileConfigAttr)
    epilogue = region_def("single_block")
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(IsolatedFromAbove(), RecursiveMemoryEffect())

    def __init__(
        self,
        a: SSAValue,
        b: SSAValue,
        inputs: Sequence[SSAValue],
        result_types: Sequence[Attribute],
        epilogue: Region,
        *,
        transpose_a: bool = False,
        transpose_b: bool = False,
        interleave: int | None = None,
        config: TileConfigAttr | None = None,
        interleave_wide: int | None = None,
    ):
        props: dict[str, Attribute] = {}
        if transpose_a:
            props["transpose_a"] = UnitAttr()
        if transpose_b:
            props["transpose_b"] = UnitAttr()
        if interleave is not None:
            props["interleave"] = IntegerAttr(interleave, i64)
        if interleave_wide is not None:
            props["interleave_wide"] = IntegerAttr(interleave_wide, i64)
        if config is not None:
            props["config"] = config
        super().__init__(operands=[a, b, inputs], result_types=[result_types], regions=[epilogue], properties=props)

    def problem_shape(self) -> tuple[int, int, int]:
        """(M, N, K) of the GEMM."""
        a, b = tensor_shape(self.a.type), tensor_shape(self.b.type)
        m, k = (a[1], a[0]) if self.transpose_a else a
        k2, n = (b[1], b[0]) if self.transpose_b else b
        assert k == k2
        return m, n, k

    def verify_(self) -> None:
        _verify_recorded_decisions(self)
        for name, value in (("a", self.a), ("b", self.b)):
            if not _is_float_tensor(value.type) or len(tensor_shape(value.type)) != 2:
                raise VerifyException(f"{name} must be a float matrix, got {value.type}")
        a, b = tensor_shape(self.a.type), tensor_shape(self.b.type)
        m, k = (a[1], a[0]) if self.transpose_a else a
        k2, n = (b[1], b[0]) if self.transpose_b else b
        if k != k2:
            layout_a = "KxM" if self.transpose_a else "MxK"
            layout_b = "NxK" if self.transpose_b else "KxN"
            raise VerifyException(
                f"contraction mismatch: a ({layout_a}) has K = {k} but b ({layout_b}) has K = {k2}"
            )
        if self.a.type.get_element_type() != self.b.type.get_element_type():  # type: ignore[union-attr]
            raise VerifyException("a and b must have the same element type")
        block = self.epilogue.blocks[0]
        if not block.args or block.args[0].type != TileType((m, n), f32):
            raise VerifyException(f"the epilogue's first argument must be the accumulator !coda.tile<{m}x{n}xf32>")
        if self.interleave is not None:
            half = self.interleave.value.data
            if half <= 0 or n % (2 * half):
                raise VerifyException(f"interleave {half} needs N ({n}) to be a multiple of {2 * half}")
        if self.interleave_wide is not None:
            half = self.interleave_wide.value.data
            if half <= 0 or (2 * n) % (2 * half):
                raise VerifyException(
                    f"interleave_wide {half} needs 2N ({2 * n}) to be a multiple of {2 * half}"
                )
        _verify_epilogue_inputs(self, block, self.inputs, 1)
        _verify_tile_rows(block, m)
        _verify_kernel_yield(self, block, self.outputs)

    @classmethod
    def parse(cls, parser: Parser) -> GemmOp:
        ua = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        ub = parser.parse_unresolved_operand()
        props: dict[str, Attribute] = {}
        while True:
            keyword = parser.parse_optional_keyword_in(
                ("transpose_a", "transpose_b", "interleave", "interleave_wide", "config")
            )
            if keyword is None:
                break
            if keyword in ("transpose_a", "transpose_b"):
                props[keyword] = UnitAttr()
            elif keyword in ("interleave", "interleave_wide"):
                props[keyword] = IntegerAttr(parser.parse_integer(allow_boolean=False, allow_negative=False), i64)
            else:
                config = parser.parse_attribute()
                if not isinstance(config, TileConfigAttr):
                    parser.raise_error("expected a #coda.config<...> tile configuration")
                props[keyword] = config
        inputs = _parse_ins(parser)
        parser.parse_punctuation(":")
        ta = parser.parse_type()
        parser.parse_punctuation(",")
        tb = parser.parse_type()
        parser.parse_punctuation("->")
        result_types = _parse_type_list(parser)
        a, b = parser.resolve_operands([ua, ub], [ta, tb], parser.pos)
        attrs = parser.parse_optional_attr_dict_with_keyword()
        region = parser.parse_region()
        op = cls.create(
            operands=[a, b, *inputs],
            result_types=result_types,
            regions=[region],
            properties={**props, "operandSegmentSizes": operand_segments(1, 1, len(inputs))},
        )
        if attrs is not None:
            op.attributes |= attrs.data
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.a)
        printer.print_string(", ")
        printer.print_operand(self.b)
        if self.transpose_a is not None:
            printer.print_string(" transpose_a")
        if self.transpose_b is not None:
            printer.print_string(" transpose_b")
        if self.interleave is not None:
            printer.print_string(f" interleave {self.interleave.value.data}")
        if self.interleave_wide is not None:
            printer.print_string(f" interleave_wide {self.interleave_wide.value.data}")
        if self.config is not None:
            printer.print_string(" config ")
            printer.print_attribute(self.config)
        _print_ins(printer, self.inputs)
        printer.print_string(" : ")
        printer.print_attribute(self.a.type)
        printer.print_string(", ")
        printer.print_attribute(self.b.type)
        printer.print_string(" -> ")
        _print_type_list(printer, [r.type for r in self.outputs])
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.epilogue)


def operand_segments(*sizes: int) -> Attribute:
    from xdsl.dialects.builtin import DenseArrayBase

    return DenseArrayBase.from_list(i32, sizes)


@irdl_op_definition
class ElementwiseOp(IRDLOperation):
    """The epilogue machinery without a GEMM: the region runs once per tile of an
    M x N iteration space (`shape`) and reads its inputs through the same primitives."""

    name = "coda.elementwise"
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(AnyAttr())
    shape = prop_def(ArrayAttr[IntAttr])
    whole = opt_prop_def(AxisAttr)
    config = opt_prop_def(TileConfigAttr)
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), RecursiveMemoryEffect())

    def __init__(
        self,
        shape: Sequence[int],
        inputs: Sequence[SSAValue],
        result_types: Sequence[Attribute],
        body: Region,
        config: TileConfigAttr | None = None,
        whole: Axis | None = None,
    ):
        props: dict[str, Attribute] = {"shape": ArrayAttr(IntAttr(d) for d in shape)}
        if whole is not None:
            props["whole"] = AxisAttr(whole)
        if config is not None:
            props["config"] = config
        super().__init__(operands=[inputs], result_types=[result_types], regions=[body], properties=props)

    def iteration_shape(self) -> tuple[int, int]:
        m, n = (d.data for d in self.shape.data)
        return m, n

    @property
    def whole_axis(self) -> Axis | None:
        """`rows`: each program covers whole rows (walks the column tiles in order), so row
        reductions complete in the program; `cols`: whole columns; None: one tile per program."""
        return self.whole.data if self.whole is not None else None

    def tile_width_multiple(self) -> int:
        """The widest tile a program of this kernel holds, in column tiles of its iteration
        space (a power of two): 2 where it reads an input in pair halves ([BM, 2 BN] tiles, the
        gated backward), 1 for kernels whose tiles are all at most [BM, BN]. The launch sizes a
        program's warps by it (`tiling.elementwise_config`)."""
        _, n = self.iteration_shape()
        widest = max((v.type.get_shape()[1] for o in self.body.walk() for v in o.results
                      if isinstance(v.type, TileType)), default=n)
        return 1 << (max(1, -(-widest // n)) - 1).bit_length()

    def verify_(self) -> None:
        _verify_recorded_decisions(self)
        dims = [d.data for d in self.shape.data]
        if len(dims) != 2 or any(d <= 0 for d in dims):
            raise VerifyException(f"shape must be two positive extents [M, N], got {dims}")
        if self.whole_axis == Axis.SCALAR:
            raise VerifyException("whole takes rows (programs cover whole rows) or cols (whole columns)")
        block = self.body.blocks[0]
        _verify_epilogue_inputs(self, block, self.inputs, 0)
        m, _ = self.iteration_shape()
        _verify_tile_rows(block, m)
        _verify_kernel_yield(self, block, self.outputs, self.whole_axis)

    @classmethod
    def parse(cls, parser: Parser) -> ElementwiseOp:
        dims = parser.parse_comma_separated_list(
            parser.Delimiter.SQUARE, lambda: parser.parse_integer(allow_boolean=False, allow_negative=False)
        )
        props: dict[str, Attribute] = {"shape": ArrayAttr(IntAttr(d) for d in dims)}
        if parser.parse_optional_keyword("whole") is not None:
            axis = parser.parse_str_enum(Axis)
            if axis == Axis.SCALAR:
                parser.raise_error("expected rows or cols after 'whole'")
            props["whole"] = AxisAttr(axis)
        if parser.parse_optional_keyword("config") is not None:
            config = parser.parse_attribute()
            if not isinstance(config, TileConfigAttr):
                parser.raise_error("expected a #coda.config<...> tile configuration")
            props["config"] = config
        inputs = _parse_ins(parser)
        parser.parse_punctuation("->")
        result_types = _parse_type_list(parser)
        attrs = parser.parse_optional_attr_dict_with_keyword()
        region = parser.parse_region()
        op = cls.create(operands=inputs, result_types=result_types, regions=[region], properties=props)
        if attrs is not None:
            op.attributes |= attrs.data
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" [" + ", ".join(str(d.data) for d in self.shape.data) + "]")
        if self.whole is not None:
            printer.print_string(f" whole {self.whole.data.value}")
        if self.config is not None:
            printer.print_string(" config ")
            printer.print_attribute(self.config)
        _print_ins(printer, self.inputs)
        printer.print_string(" -> ")
        _print_type_list(printer, [r.type for r in self.outputs])
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body)


@irdl_op_definition
class FoldOp(IRDLOperation):
    """A small row kernel: fold partials in a fixed order, then map per row.

    The body takes, per index i of the length-L vectors, one f32 per partials operand (its
    folded value: sum, max or log-sum-exp over tiles), then `v[i]` for each input vector
    and the value of each 0-d input. It yields one value per result: a rank-1 result stores
    it per row; a rank-0 result is its sum over all rows (fixed order). The optional
    `finalize` region maps those sums (one argument per rank-0 result) to the values stored.
    """

    name = "coda.fold"
    partials = var_operand_def(PartialsType)
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    body = region_def("single_block")
    finalize = region_def()
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(IsolatedFromAbove(), RecursiveMemoryEffect())

    def __init__(
        self,
        partials: Sequence[SSAValue],
        inputs: Sequence[SSAValue],
        result_types: Sequence[Attribute],
        body: Region,
        finalize: Region | None = None,
    ):
        super().__init__(
            operands=[partials, inputs],
            result_types=[result_types],
            regions=[body, finalize if finalize is not None else Region()],
        )

    def length(self) -> int:
        if self.partials:
            ty = self.partials[0].type
            assert isinstance(ty, PartialsType)
            return ty.length.data
        for value in self.inputs:
            shape = tensor_shape(value.type)
            if len(shape) == 1:
                return shape[0]
        for result in self.outputs:
            shape = tensor_shape(result.type)
            if len(shape) == 1:
                return shape[0]
        return 1

    def verify_(self) -> None:
        length = self.length()
        for i, value in enumerate(self.partials):
            ty = value.type
            assert isinstance(ty, PartialsType)
            if ty.length.data != length:
                raise VerifyException(f"partials #{i} has length {ty.length.data}, expected {length} like the others")
        for i, value in enumerate(self.inputs):
            shape = tensor_shape(value.type)
            if shape not in ((length,), ()):
                raise VerifyException(f"input #{i} must have shape {length} or be 0-d, got {_fmt(shape)}")
        n_sums = 0
        for i, result in enumerate(self.outputs):
            shape = tensor_shape(result.type)
            if shape == ():
                n_sums += 1
            elif shape != (length,):
                raise VerifyException(f"result #{i} must have shape {length} (per row) or be 0-d (summed), got {_fmt(shape)}")
        _verify_scalar_body(self, self.body, len(self.partials) + len(self.inputs), len(self.outputs), "coda.fold")
        arg_types = [f32] * len(self.partials) + [_fold_scalar(v.type, f"input #{i}") for i, v in enumerate(self.inputs)]
        result_types = [_fold_scalar(r.type, f"result #{i}") for i, r in enumerate(self.outputs)]
        _verify_body_types(self.body, arg_types, result_types, "body")
        if self.finalize.blocks:
            if len(self.finalize.blocks) != 1:
                raise VerifyException("the finalize region must have a single block")
            if n_sums == 0:
                raise VerifyException("a finalize region needs at least one 0-d (summed) result")
            _verify_scalar_body(self, self.finalize, n_sums, n_sums, "coda.fold finalize")
            sums = [t for t, r in zip(result_types, self.outputs) if tensor_shape(r.type) == ()]
            _verify_body_types(self.finalize, sums, sums, "finalize")

    @classmethod
    def parse(cls, parser: Parser) -> FoldOp:
        partial_uses = parser.parse_optional_undelimited_comma_separated_list(
            parser.parse_optional_unresolved_operand, parser.parse_unresolved_operand
        ) or []
        partial_types: list[Attribute] = []
        if partial_uses:
            parser.parse_punctuation(":")
            partial_types = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)
        partials = parser.resolve_operands(partial_uses, partial_types, parser.pos)
        inputs = _parse_ins(parser)
        parser.parse_punctuation("->")
        result_types = _parse_type_list(parser)
        attrs = parser.parse_optional_attr_dict_with_keyword()
        body = parser.parse_region()
        finalize = Region()
        if parser.parse_optional_keyword("finalize") is not None:
            finalize = parser.parse_region()
        op = cls.create(
            operands=[*partials, *inputs],
            result_types=result_types,
            regions=[body, finalize],
            properties={"operandSegmentSizes": operand_segments(len(partials), len(inputs))},
        )
        if attrs is not None:
            op.attributes |= attrs.data
        return op

    def print(self, printer: Printer) -> None:
        if self.partials:
            printer.print_string(" ")
            printer.print_list(self.partials, printer.print_operand)
            printer.print_string(" : ")
            printer.print_list((v.type for v in self.partials), printer.print_attribute)
        _print_ins(printer, self.inputs)
        printer.print_string(" -> ")
        _print_type_list(printer, [r.type for r in self.outputs])
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body)
        if self.finalize.blocks:
            printer.print_string(" finalize ")
            printer.print_region(self.finalize)


def _fold_scalar(ty: Attribute, what: str) -> Attribute:
    """The scalar a fold body sees for one element of a tensor: f32 for floats, i32 for i32."""
    if _is_i32_tensor(ty):
        return i32
    if _is_float_tensor(ty):
        return f32
    raise VerifyException(f"{what} must have a float or i32 element type, got {ty}")


def _verify_body_types(body: Region, arg_types: Sequence[Attribute], yield_types: Sequence[Attribute], what: str) -> None:
    block = body.blocks[0]
    for i, (arg, expected) in enumerate(zip(block.args, arg_types)):
        if arg.type != expected:
            raise VerifyException(f"{what} argument #{i} must be {expected}, got {arg.type}")
    terminator = block.last_op
    assert isinstance(terminator, YieldOp)
    for i, (value, expected) in enumerate(zip(terminator.values, yield_types)):
        if value.type != expected:
            raise VerifyException(f"{what} must yield {expected} as value #{i}, got {value.type}")


SMALL_KERNEL_OPS = (ElementwiseOp, FoldOp)


@irdl_op_definition
class LaunchGroupOp(IRDLOperation):
    """Independent small kernels sharing one launch.

    The region holds two or more `coda.elementwise` / `coda.fold` kernels and a `coda.yield` of
    all their results, in member order; the group's results are those values. They run as one
    GPU launch: the program-id range is split among the members, in order, each member keeping
    its own grid and tile constants. Members run concurrently, so no member may use another
    member's result (the verifier checks it; SSA dominance takes care of everything outside).
    """

    name = "coda.launch_group"
    outputs = var_result_def(AnyAttr())
    body = region_def("single_block")
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(self, result_types: Sequence[Attribute], body: Region):
        super().__init__(result_types=[result_types], regions=[body])

    def members(self) -> list[Operation]:
        return [op for op in self.body.blocks[0].ops if not isinstance(op, YieldOp)]

    def verify_(self) -> None:
        block = self.body.blocks[0]
        members = self.members()
        for i, member in enumerate(members):
            if not isinstance(member, SMALL_KERNEL_OPS):
                raise VerifyException(
                    f"member #{i} is '{member.name}': a launch group holds small kernels only "
                    "(coda.elementwise, coda.fold)"
                )
        if len(members) < 2:
            raise VerifyException(f"a launch group needs at least two kernels, got {len(members)}")
        index = {m: i for i, m in enumerate(members)}
        for j, member in enumerate(members):
            for operand in member.operands:
                owner = operand.owner
                if isinstance(owner, Operation) and owner in index:
                    i = index[owner]
                    raise VerifyException(
                        f"member #{j} ('{member.name}') uses a result of member #{i} ('{owner.name}'): "
                        "kernels sharing a launch run concurrently and must not depend on each other"
                    )
        terminator = block.last_op
        if not isinstance(terminator, YieldOp):
            raise VerifyException("a launch group must end with coda.yield")
        expected = [r for m in members for r in m.results]
        if list(terminator.values) != expected:
            raise VerifyException(
                f"the launch group must yield every result of its members, in member order "
                f"({len(expected)} values), yields {len(terminator.values)}"
                + ("" if len(terminator.values) != len(expected) else " in another order")
            )
        if [r.type for r in self.outputs] != [v.type for v in expected]:
            raise VerifyException("the launch group's result types must be the types of the values it yields")

    @classmethod
    def parse(cls, parser: Parser) -> LaunchGroupOp:
        result_types: list[Attribute] = []
        if parser.parse_optional_punctuation("->") is not None:
            result_types = _parse_type_list(parser)
        attrs = parser.parse_optional_attr_dict_with_keyword()
        region = parser.parse_region()
        op = cls.create(result_types=result_types, regions=[region])
        if attrs is not None:
            op.attributes |= attrs.data
        return op

    def print(self, printer: Printer) -> None:
        if self.outputs:
            printer.print_string(" -> ")
            _print_type_list(printer, [r.type for r in self.outputs])
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body)


# ============================================================================ recorded decisions on the ops
# The helpers of coda_attrs.py's recorded decisions that need the op classes, and their verifier.


def is_plain_gemm(op: "GemmOp") -> bool:
    """A gemm whose epilogue stores the accumulator into its one [M, N] output and does nothing
    else: no epilogue inputs, no interleaved columns, no fixed tile."""
    if op.inputs or len(op.outputs) != 1 or op.interleave is not None or op.interleave_wide is not None:
        return False
    if op.config is not None:
        return False
    block = op.epilogue.blocks[0]
    ops = list(block.ops)
    return (len(ops) == 1 and isinstance(ops[0], YieldOp) and len(ops[0].operands) == 1
            and ops[0].operands[0] is block.args[0])


def vendor_gemm_obstacle(op: "GemmOp") -> str | None:
    """Why a gemm cannot run the vendor library (None: it can): it must be plain, with 16-bit
    operands of one type and an output of that type or f32. (An f32 GEMM stays on the tl kernel,
    whose dots are tf32: cuBLAS under PyTorch's defaults would compute it in another precision.)"""
    if not is_plain_gemm(op):
        return "its epilogue does more than store the accumulator into its one output"
    elt = op.a.type.get_element_type()  # type: ignore[union-attr]
    if not isinstance(elt, (BFloat16Type, Float16Type)) or op.b.type.get_element_type() != elt:  # type: ignore[union-attr]
        return f"its operands are not both bf16 or both f16 ({op.a.type}, {op.b.type})"
    out = op.outputs[0].type
    if not isinstance(out, TensorType) or out.get_element_type() not in (elt, Float32Type()):
        return f"its output is {out}, neither its operands' element type nor f32"
    return None


def wants_full_precision(load: Operation) -> bool:
    """Whether `load` (a coda.load) asks for its input unrounded (`FULL_PRECISION`)."""
    return isinstance(load, LoadOp) and isinstance(load.attributes.get(FULL_PRECISION), UnitAttr)


def _verify_recorded_decisions(kernel: Operation) -> None:
    """The decisions coda-legalize records on a kernel have their declared types and places."""
    constraints = kernel.attributes.get(CONSTRAINTS)
    if constraints is not None and not isinstance(constraints, TileConstraintsAttr):
        raise VerifyException(f"{CONSTRAINTS} must be a #coda.tile_constraints<...>, got {constraints}")
    mainloop = kernel.attributes.get(MAINLOOP)
    if mainloop is not None:
        if not (isinstance(mainloop, MainloopAttr) and isinstance(kernel, GemmOp)):
            raise VerifyException(f"{MAINLOOP} is a #coda.mainloop<...> of coda.gemm kernels, got {mainloop}")
        first = mainloop.accumulate_first.data
        if first >= len(kernel.inputs):
            raise VerifyException(f"{MAINLOOP} accumulate_first {first} is not an input of the gemm")
    vendor = kernel.attributes.get(VENDOR_GEMM)
    if vendor is not None:
        if not (isinstance(vendor, VendorGemmAttr) and isinstance(kernel, GemmOp)):
            raise VerifyException(f"{VENDOR_GEMM} is a #coda.vendor_gemm<...> of coda.gemm kernels, got {vendor}")
        why_not = vendor_gemm_obstacle(kernel)
        if why_not is not None:
            raise VerifyException(f"{VENDOR_GEMM} on a gemm the vendor library cannot run: {why_not}")
        if mainloop is not None:
            raise VerifyException(f"a gemm has either {MAINLOOP} or {VENDOR_GEMM}, not both")
    separate = kernel.attributes.get(SEPARATE)
    if separate is not None and not (isinstance(separate, UnitAttr) and isinstance(kernel, ElementwiseOp)):
        raise VerifyException(f"{SEPARATE} is a unit attribute of coda.elementwise kernels")
    over = kernel.attributes.get(WRITES_OVER)
    if over is not None:
        if not (isinstance(kernel, ElementwiseOp) and isinstance(over, ArrayAttr)
                and all(isinstance(a, IntegerAttr) for a in over.data)):
            raise VerifyException(f"{WRITES_OVER} is an array of integers on coda.elementwise kernels")
        outputs, inputs = len(kernel.results), len(kernel.operands)
        if len(over.data) != outputs or any(not -1 <= a.value.data < inputs for a in over.data):  # type: ignore[attr-defined]
            raise VerifyException(
                f"{WRITES_OVER} needs one entry per output ({outputs}), each -1 or an input index below {inputs}")
    for region in kernel.regions:
        for op in region.walk():
            for name in (GATHERED, ROW_EXCHANGE):
                mark = op.attributes.get(name)
                if mark is None:
                    continue
                if not isinstance(mark, UnitAttr):
                    raise VerifyException(f"{name} on '{op.name}' must be a unit attribute")
                if not isinstance(op, (PairMapOp, SegmentReduceOp)):
                    raise VerifyException(f"{name} only marks coda.pair_map or coda.segment_reduce, not '{op.name}'")
            halves = op.attributes.get(PAIR_HALVES)
            if halves is not None:
                if not (isinstance(halves, IntegerAttr) and halves.value.data > 0):
                    raise VerifyException(f"{PAIR_HALVES} on '{op.name}' must be a positive integer (the pair stride)")
                if not isinstance(op, (LoadOp, MapOp, ReduceOp)) or not isinstance(kernel, ElementwiseOp):
                    raise VerifyException(
                        f"{PAIR_HALVES} marks coda.load, coda.map or coda.reduce of a coda.elementwise kernel, "
                        f"not '{op.name}' in '{kernel.name}'")
                if isinstance(op, ReduceOp) and (op.dim.value.data != 1 or op.kind.data not in (
                        ReduceKind.SUM, ReduceKind.SUMSQ, ReduceKind.MAX)):
                    raise VerifyException(f"{PAIR_HALVES} on coda.reduce needs dim 1 and sum, sumsq or max")
            mark = op.attributes.get(FULL_PRECISION)
            if mark is not None and not (isinstance(mark, UnitAttr) and isinstance(op, LoadOp)):
                raise VerifyException(f"{FULL_PRECISION} is a unit attribute of coda.load, not of '{op.name}'")
            if GATHERED in op.attributes and not isinstance(kernel, ElementwiseOp):
                raise VerifyException(f"{GATHERED} ops read from memory: only in a coda.elementwise kernel, not '{kernel.name}'")


KERNEL_OPS = (GemmOp, ElementwiseOp, FoldOp)


def kernels(op: Operation) -> Iterator[Operation]:
    """The kernels of a function (or module), in program order (members of launch groups included)."""
    for inner in op.walk():
        if isinstance(inner, KERNEL_OPS):
            yield inner


def launch_count(op: Operation) -> int:
    """GPU launches one call makes: one per kernel, a `coda.launch_group` counting once, and one
    per library step (attention, embedding, copies: at least one launch each)."""
    return sum(
        1
        for inner in op.walk()
        if isinstance(inner, (LaunchGroupOp, LibraryStepOp))
        or (isinstance(inner, KERNEL_OPS) and not isinstance(inner.parent_op(), LaunchGroupOp))
    )


CODA = Dialect(
    "coda",
    [
        GemmOp,
        ElementwiseOp,
        FoldOp,
        LaunchGroupOp,
        YieldOp,
        LoadOp,
        BroadcastOp,
        IndexOp,
        ScaleOp,
        ShiftOp,
        AccumulateOp,
        MapOp,
        PairMapOp,
        ReduceOp,
        SegmentReduceOp,
        SelectOp,
        *LIBRARY_STEP_OPS,
    ],
    [TileType, PartialsType, TileConfigAttr, TileConstraintsAttr, MainloopAttr, VendorGemmAttr, AxisAttr, ReduceKindAttr,
     RowsAttr],
)
