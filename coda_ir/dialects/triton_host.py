"""The `host` dialect: the host side of the Triton lowering, one op per Python statement.

A sibling of the `tl` dialect (`dialects/triton_lang.py`), in its own file because it is a
different level: `tl` ops are Triton's device DSL on pointers and constexpr-sized tiles,
`host` ops are the torch / runtime calls of the generated host function, on torch tensors of
static shape (builtin `tensor<...>` types; a partials buffer is `tensor<L x ? x f32>`, its
tile count fixed when the launch picks its tile configuration). `convert-coda-to-host`
(`lowering/coda_to_host.py`) builds one `host.func` per `func.func` and makes every host
decision there: which arguments are made contiguous, what is allocated (shape, dtype, the
partials' tile count per configuration axis), which donated input an output writes over, the
arguments and configuration of each launch (a fixed tile config checked against the kernel's
recorded `bn_multiple_of`), which library function a library step calls, which buffers are
dropped after which op (`liveness.dead_after`). The printer
(`lowering/host_printer.py`) prints each op as the one statement (or, for values used once
inside a statement, the one expression) it stands for.

Types: `!host.device` (the device of the arguments), `!host.config` (the tile configuration a
launch picked: the argument of its argument lambda), `!host.tuple<[T...]>` (the arguments a
launch returns: its kernel's inputs then outputs; a fold's outputs), `!host.launch_spec<[T...]>`
(a launch group member's launch description; its outputs are `T...`).

A `host.func` is not a symbol: it is the host side of the `func.func` it names (`function`),
which still holds the coda kernels that `lowering/triton.py` emits as text; the printed Python
function takes that name.

Run-time row counts (a module with `#coda.rows`, see `coda.RowsAttr`): the host function of
such a module reads the call's row count M once, from an argument (`host.row_count`: `_M =
x.shape[0]`); a dimension that is `c * M` is dynamic (`?`) in the host types, its extent a
`host.rows` value (`_M * c`) where a buffer is allocated, and `#host.rows<c>` where a launch
takes a size (M, N, K, a fold's L, the extent of `host.tiles`). `host.func`'s `arg_rows` says
which argument dimensions are row extents (the signature check takes any M >= 1 there), and
`seq_len` that it takes the sequence length of its attention calls as a keyword argument
(`#host.seq_len`, a library call's literal).
"""

from __future__ import annotations

import math

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    BoolAttr,
    Float32Type,
    FloatAttr,
    FunctionType,
    IndexType,
    IntAttr,
    IntegerAttr,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    UnitAttr,
    f64,
    i1,
)
from xdsl.ir import Attribute, Block, Dialect, Operation, ParametrizedAttribute, Region, SSAValue, TypeAttribute
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
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
from xdsl.traits import IsTerminator, NoMemoryEffect
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from coda_ir.dialects.coda import MainloopAttr, TileConfigAttr, VendorGemmAttr
from coda_ir.dialects.op_syntax import (
    ATTR,
    SIZE,
    BOOL,
    INT,
    LITERALS,
    STR,
    SYMBOL,
    UNIT,
    WORD,
    Item,
    Keyword,
    Operand,
    Operands,
    Punct,
    SyntaxOp,
    Word,
    parse_function_header,
    print_function_header,
)
from coda_ir.dialects.element_types import TORCH_DTYPE_NAMES, element_name

# ============================================================================ types


@irdl_attr_definition
class DeviceType(ParametrizedAttribute, TypeAttribute):
    """`!host.device`: the torch device every buffer is allocated on."""

    name = "host.device"


@irdl_attr_definition
class ConfigType(ParametrizedAttribute, TypeAttribute):
    """`!host.config`: the tile configuration a launch picked (`_cfg.bm`, `_cfg.bn`)."""

    name = "host.config"


@irdl_attr_definition
class TupleType(ParametrizedAttribute, TypeAttribute):
    """`!host.tuple<[T...]>`: a Python tuple of torch tensors."""

    name = "host.tuple"

    elements: ArrayAttr[Attribute]

    def __init__(self, elements: Sequence[Attribute]):
        super().__init__(ArrayAttr(elements))


@irdl_attr_definition
class LaunchSpecType(ParametrizedAttribute, TypeAttribute):
    """`!host.launch_spec<[T...]>`: one member's share of a launch group; `T...` its outputs."""

    name = "host.launch_spec"

    results: ArrayAttr[Attribute]

    def __init__(self, results: Sequence[Attribute]):
        super().__init__(ArrayAttr(results))


@irdl_attr_definition
class RowsAttr(ParametrizedAttribute):
    """`#host.rows<c>`: an extent of `c` times the call's row count (`_M`, read by the function's
    `host.row_count`)."""

    name = "host.rows"

    per: IntAttr

    def __init__(self, per: int):
        super().__init__(IntAttr(per))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            return (IntAttr(parser.parse_integer(allow_boolean=False, allow_negative=False)),)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.per.data}>")

    def verify(self) -> None:
        if self.per.data < 1:
            raise VerifyException("#host.rows: the multiple of the row count must be >= 1")


@irdl_attr_definition
class SeqLenAttr(ParametrizedAttribute):
    """`#host.seq_len`: the call's sequence length, the host function's `seq_len` argument (a
    literal of an attention library call)."""

    name = "host.seq_len"


Size = IntAttr | RowsAttr
"""An extent a launch takes: static, or a multiple of the call's row count."""


def _check_size(op: Operation, attr: Attribute, what: str) -> None:
    if isinstance(attr, IntAttr):
        if attr.data <= 0:
            raise VerifyException(f"{op.name}: {what} must be positive")
        return
    _parent_func(op).require_rows(f"{op.name}: {what} {attr}")


def is_buffer(ty: Attribute) -> bool:
    """A torch tensor: a builtin tensor of a torch dtype, static but for partials' tile counts."""
    if not isinstance(ty, TensorType):
        return False
    try:
        TORCH_DTYPE_NAMES[element_name(ty.get_element_type())]
    except (TypeError, KeyError):
        return False
    return True


def _check_buffer(ty: Attribute, what: str) -> None:
    if not is_buffer(ty):
        raise VerifyException(f"{what}: expected a tensor of a torch dtype, got {ty}")


def _check_static(ty: Attribute, what: str) -> None:
    """A tensor whose every extent is known: static, or (`?`) a row extent of a function with a
    run-time row count (the verifier of `host.func` checks its arguments' against `arg_rows`)."""
    _check_buffer(ty, what)


# ============================================================================ functions


@irdl_op_definition
class FuncOp(IRDLOperation):
    """The host function of `func.func @function`: its arguments are the torch tensors the
    caller passes, in order; `launches` is how many GPU launches one call makes (a launch
    group and a library step count once).

    `owned` (the indices of the arguments whose reference the caller hands over, from the
    `coda.owned` argument attributes): present, the function takes its arguments in one list,
    which it empties on entry (`def f(_args): a, b = _args; _args.clear()`), so that its locals
    hold the only references the caller gave it and `host.drop` of an owned argument can free
    it (torch.compile's compiled backward takes its saved tensors the same way). Absent, the
    arguments are positional, as the caller passes them, and none is ever dropped."""

    name = "host.func"

    function = prop_def(SymbolRefAttr)
    function_type = prop_def(FunctionType)
    launches = prop_def(IntAttr)
    owned = opt_prop_def(ArrayAttr[IntAttr])
    arg_rows = opt_prop_def(ArrayAttr[ArrayAttr[IntAttr]])
    """With a run-time row count: per argument, per dimension, 0 (static) or c (an extent of c * M)."""
    seq_len = opt_prop_def(UnitAttr)
    """The function takes the sequence length of its attention calls (`seq_len=`, keyword-only)."""
    body = region_def("single_block")

    def __init__(self, function: str, inputs: Sequence[Attribute], outputs: Sequence[Attribute], launches: int,
                 owned: Sequence[int] | None = None, arg_rows: Sequence[Sequence[int]] | None = None,
                 seq_len: bool = False):
        props: dict[str, Attribute] = {
            "function": SymbolRefAttr(function),
            "function_type": FunctionType.from_lists(inputs, outputs),
            "launches": IntAttr(launches),
        }
        if owned is not None:
            props["owned"] = ArrayAttr([IntAttr(i) for i in sorted(owned)])
        if arg_rows is not None:
            props["arg_rows"] = ArrayAttr([ArrayAttr([IntAttr(c) for c in dims]) for dims in arg_rows])
        if seq_len:
            props["seq_len"] = UnitAttr()
        super().__init__(properties=props, regions=[Region(Block(arg_types=inputs))])

    def rows_of(self, index: int) -> list[int]:
        """Argument `index`'s dimensions: 0 (static) or c (c times the row count)."""
        if self.arg_rows is None:
            return [0] * len(self.function_type.inputs.data[index].get_shape())  # type: ignore[attr-defined]
        return [c.data for c in self.arg_rows.data[index].data]

    def row_count(self) -> "RowCountOp | None":
        return next((op for op in self.body.block.ops if isinstance(op, RowCountOp)), None)

    def require_rows(self, what: str) -> None:
        if self.row_count() is None:
            raise VerifyException(f"{what}: a run-time row extent in a function that reads no row count (host.row_count)")

    @property
    def py_name(self) -> str:
        return self.function.root_reference.data

    @property
    def takes_list(self) -> bool:
        return self.owned is not None

    def owned_indices(self) -> set[int]:
        return {i.data for i in self.owned.data} if self.owned is not None else set()

    def print(self, printer: Printer) -> None:
        """`host.func @f(%x: T, ...) -> (T, ...) launches 3 owned [0] { body }` (`%x_1 as x: T`
        when the printed SSA name is not the argument's name, which the Python function takes)."""
        args = self.body.block.args
        print_function_header(printer, self.function, args, [a.name_hint for a in args])
        printer.print_string(" -> (")
        printer.print_list(self.function_type.outputs.data, printer.print_attribute)
        printer.print_string(f") launches {self.launches.data}")
        if self.owned is not None:
            printer.print_string(" owned [" + ", ".join(str(i.data) for i in self.owned.data) + "]")
        if self.arg_rows is not None:
            printer.print_string(" rows [" + ", ".join("[" + ", ".join(str(c.data) for c in dims.data) + "]"
                                                        for dims in self.arg_rows.data) + "]")
        if self.seq_len is not None:
            printer.print_string(" seq_len")
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False)

    @classmethod
    def parse(cls, parser: Parser) -> FuncOp:
        symbol, args, names, _ = parse_function_header(parser)
        parser.parse_punctuation("->")
        outputs = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_type)
        parser.parse_keyword("launches")
        launches = parser.parse_integer(allow_boolean=False, allow_negative=False)
        owned = None
        if parser.parse_optional_keyword("owned") is not None:
            owned = parser.parse_comma_separated_list(parser.Delimiter.SQUARE,
                                                      lambda: parser.parse_integer(allow_boolean=False))
        arg_rows = None
        if parser.parse_optional_keyword("rows") is not None:
            arg_rows = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parser.parse_comma_separated_list(
                parser.Delimiter.SQUARE, lambda: parser.parse_integer(allow_boolean=False)))
        seq_len = parser.parse_optional_keyword("seq_len") is not None
        attrs = parser.parse_optional_attr_dict_with_keyword()
        region = parser.parse_region(args)
        props: dict[str, Attribute] = {
            "function": SymbolRefAttr(symbol),
            "function_type": FunctionType.from_lists([a.type for a in args], outputs),
            "launches": IntAttr(launches),
        }
        if owned is not None:
            props["owned"] = ArrayAttr(IntAttr(i) for i in owned)
        if arg_rows is not None:
            props["arg_rows"] = ArrayAttr(ArrayAttr(IntAttr(c) for c in dims) for dims in arg_rows)
        if seq_len:
            props["seq_len"] = UnitAttr()
        op = cls.create(properties=props, regions=[region])
        for arg, name in zip(op.body.block.args, names):
            if name:
                arg.name_hint = name
        if attrs is not None:
            op.attributes |= attrs.data
        return op

    def verify_(self) -> None:
        name = self.py_name
        if not name.isidentifier():
            raise VerifyException(f"host.func: '{name}' is not a Python identifier")
        args = self.body.block.args
        if [a.type for a in args] != list(self.function_type.inputs.data):
            raise VerifyException("host.func: the block arguments must match function_type's inputs")
        for i, a in enumerate(args):
            _check_static(a.type, f"host.func: argument #{i}")
        if self.arg_rows is not None:
            if len(self.arg_rows.data) != len(args):
                raise VerifyException("host.func: arg_rows has one entry per argument")
            for i, a in enumerate(args):
                dims = self.rows_of(i)
                shape = a.type.get_shape()  # type: ignore[attr-defined]
                if len(dims) != len(shape) or any((c > 0) != (d == DYNAMIC_INDEX) or c < 0 for c, d in zip(dims, shape)):
                    raise VerifyException(f"host.func: argument #{i}: arg_rows {dims} must mark exactly its dynamic "
                                          f"dimensions ({a.type})")
            if any(any(self.rows_of(i)) for i in range(len(args))):
                self.require_rows("host.func: arguments with row extents")
        else:
            for i, a in enumerate(args):
                if any(d == DYNAMIC_INDEX for d in a.type.get_shape()):  # type: ignore[attr-defined]
                    raise VerifyException(f"host.func: argument #{i} has a dynamic extent but the function has no arg_rows")
        counts = [op for op in self.body.block.ops if isinstance(op, RowCountOp)]
        if len(counts) > 1:
            raise VerifyException("host.func: reads the row count once (one host.row_count)")
        last = self.body.block.last_op
        if not isinstance(last, ReturnOp):
            raise VerifyException("host.func: the body ends with host.return")
        if [v.type for v in last.values] != list(self.function_type.outputs.data):
            raise VerifyException("host.func: host.return's types must match function_type's outputs")
        if self.launches.data < 0:
            raise VerifyException("host.func: launches must be >= 0")
        if self.owned is not None:
            indices = [i.data for i in self.owned.data]
            if indices != sorted(set(indices)) or any(not 0 <= i < len(args) for i in indices):
                raise VerifyException("host.func: owned lists distinct argument indices in order")


def _size(value: int | Attribute) -> Attribute:
    return IntAttr(value) if isinstance(value, int) else value


def _parent_func(op: Operation) -> FuncOp:
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, FuncOp):
        parent = parent.parent_op()
    if parent is None:
        raise VerifyException(f"{op.name}: expected inside a host.func")
    return parent


@irdl_op_definition
class CheckArgumentsOp(SyntaxOp):
    """`_rt.check_arguments(name, args, _SIG_name)`: the caller's tensors have the function's
    shapes and dtypes (the signature is the `host.func`'s argument types)."""

    name = "host.check_arguments"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operands("args"),)

    args = var_operand_def()

    def __init__(self, args: Sequence[SSAValue]):
        super().__init__(operands=[args])

    def verify_(self) -> None:
        fn = _parent_func(self)
        if list(self.args) != list(fn.body.block.args):
            raise VerifyException("host.check_arguments: checks exactly the host.func's arguments, in order")


@irdl_op_definition
class DeviceOfOp(SyntaxOp):
    """`_dev = _rt.device_of(args)`: the one device of the arguments (a function without
    arguments, e.g. an empty one, gets the process's default device: `runtime.device_of`)."""

    name = "host.device_of"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operands("args"),)

    args = var_operand_def()
    result = result_def(DeviceType)

    def __init__(self, args: Sequence[SSAValue]):
        super().__init__(operands=[args], result_types=[DeviceType()])


@irdl_op_definition
class RowCountOp(SyntaxOp):
    """`_M = x.shape[dim] // per` (`per` 1: `_M = x.shape[dim]`): the call's row count, read once
    from an argument whose dimension `dim` is `per` times it (its signature check has made it a
    whole multiple)."""

    name = "host.row_count"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("value"), Keyword("dim", INT), Keyword("per", INT))

    value = operand_def()
    dim = prop_def(IntAttr)
    per = prop_def(IntAttr)
    result = result_def(IndexType)
    traits = traits_def(NoMemoryEffect())

    def __init__(self, value: SSAValue, dim: int, per: int):
        super().__init__(operands=[value], result_types=[IndexType()], properties={"dim": IntAttr(dim), "per": IntAttr(per)})

    def verify_(self) -> None:
        fn = _parent_func(self)
        args = list(fn.body.block.args)
        if self.value not in args:
            raise VerifyException("host.row_count: reads an argument of the host.func")
        dims = fn.rows_of(args.index(self.value))
        if not 0 <= self.dim.data < len(dims) or dims[self.dim.data] != self.per.data:
            raise VerifyException(f"host.row_count: dimension {self.dim.data} of the argument is not {self.per.data} "
                                  f"times the row count (arg_rows {dims})")


@irdl_op_definition
class RowsOp(SyntaxOp):
    """`_M * per`: an extent of `per` times the row count (a dynamic extent of `host.empty`)."""

    name = "host.rows"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("rows"), Keyword("per", INT))

    rows = operand_def(IndexType)
    per = prop_def(IntAttr)
    result = result_def(IndexType)
    traits = traits_def(NoMemoryEffect())

    def __init__(self, rows: SSAValue, per: int):
        super().__init__(operands=[rows], result_types=[IndexType()], properties={"per": IntAttr(per)})

    def verify_(self) -> None:
        if not isinstance(self.rows.owner, RowCountOp):
            raise VerifyException("host.rows: scales the function's host.row_count")
        if self.per.data < 2:
            raise VerifyException("host.rows: per >= 2 (the row count itself is host.row_count's value)")


@irdl_op_definition
class ContiguousOp(SyntaxOp):
    """`x = x.contiguous()`: kernels read this tensor with row-major strides (the name is
    rebound: the non-contiguous view is not used after)."""

    name = "host.contiguous"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("value"),)

    value = operand_def()
    result = result_def()
    traits = traits_def(NoMemoryEffect())

    def __init__(self, value: SSAValue):
        super().__init__(operands=[value], result_types=[value.type])

    def verify_(self) -> None:
        _check_static(self.value.type, "host.contiguous")
        if self.result.type != self.value.type:
            raise VerifyException("host.contiguous: the result has the operand's type")


# ============================================================================ buffers


@irdl_op_definition
class EmptyOp(SyntaxOp):
    """`torch.empty(shape, dtype=..., device=_dev)`; each dynamic extent (the tile count of a
    partials buffer) is an operand."""

    name = "host.empty"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("device"), Operands("extents", "["))

    device = operand_def(DeviceType)
    extents = var_operand_def(IndexType)
    result = result_def()
    traits = traits_def(NoMemoryEffect())

    def __init__(self, device: SSAValue, ty: Attribute, extents: Sequence[SSAValue] = ()):
        super().__init__(operands=[device, extents], result_types=[ty])

    def verify_(self) -> None:
        _check_buffer(self.result.type, "host.empty")
        ty = self.result.type
        assert isinstance(ty, TensorType)
        dynamic = sum(1 for d in ty.get_shape() if d == DYNAMIC_INDEX)
        if dynamic != len(self.extents):
            raise VerifyException(f"host.empty: {dynamic} dynamic extent(s) in {ty}, {len(self.extents)} given")


TILE_FIELDS = ("bm", "bn")


@irdl_op_definition
class TilesOp(SyntaxOp):
    """`_rt.cdiv(extent, _cfg.bm | _cfg.bn)`: how many tiles of the picked configuration
    cover `extent` rows (`bm`) or columns (`bn`) -- a partials buffer's tile count."""

    name = "host.tiles"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("config"), Keyword("field", WORD), Keyword("extent", SIZE))

    config = operand_def(ConfigType)
    extent = prop_def(Size)
    field = prop_def(StringAttr)
    result = result_def(IndexType)
    traits = traits_def(NoMemoryEffect())

    def __init__(self, config: SSAValue, extent: int | Attribute, field: str):
        super().__init__(operands=[config], result_types=[IndexType()],
                         properties={"extent": _size(extent), "field": StringAttr(field)})

    def verify_(self) -> None:
        if self.field.data not in TILE_FIELDS:
            raise VerifyException(f"host.tiles: field must be one of {TILE_FIELDS}, got {self.field.data!r}")
        _check_size(self, self.extent, "the extent")


@irdl_op_definition
class YieldOp(SyntaxOp):
    """The tuple a launch's argument lambda returns: the kernel's inputs, then its outputs."""

    name = "host.yield"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operands("values"),)

    values = var_operand_def()
    traits = traits_def(IsTerminator())

    def __init__(self, values: Sequence[SSAValue]):
        super().__init__(operands=[values])


# ============================================================================ launches


def args_region() -> Region:
    return Region(Block(arg_types=[ConfigType()]))


class ArgsLambdaLaunch(SyntaxOp):
    """A launch whose kernel arguments depend on the tile configuration it picks: `args` is the
    lambda `_cfg -> (inputs..., outputs...)`; outputs are the values after the first
    `n_inputs`."""

    args = region_def("single_block")

    def yielded(self) -> list[SSAValue]:
        last = self.args.block.last_op
        return list(last.values) if isinstance(last, YieldOp) else []

    def verify_args(self, n_inputs: int, bn_multiple_of: int, config: TileConfigAttr | None, result_types) -> None:
        block = self.args.block
        if len(block.args) != 1 or not isinstance(block.args[0].type, ConfigType):
            raise VerifyException(f"{self.name}: the argument region takes one !host.config")
        if not isinstance(block.last_op, YieldOp):
            raise VerifyException(f"{self.name}: the argument region ends with host.yield")
        values = self.yielded()
        for v in values:
            _check_buffer(v.type, f"{self.name}: kernel argument")
        if not 0 <= n_inputs <= len(values):
            raise VerifyException(f"{self.name}: n_inputs out of range")
        if list(result_types) != [v.type for v in values]:
            raise VerifyException(f"{self.name}: the result holds the yielded arguments' types")
        if bn_multiple_of < 1:
            raise VerifyException(f"{self.name}: bn_multiple_of must be >= 1")
        if config is not None and config.bn.data % bn_multiple_of:
            raise VerifyException(
                f"{self.name}: tile config bn = {config.bn.data} must be a multiple of {bn_multiple_of} for this epilogue"
            )


@irdl_op_definition
class LaunchGemmOp(ArgsLambdaLaunch):
    """`_cfg, _e = launch_gemm(kernel, a, b, lambda _cfg: (...), M=, N=, K=, ...)`: a
    `coda.gemm` kernel, autotuned under `key` (the printer appends the hash of the kernel's
    printed source) unless `config` fixes its tiles. `epilogue_half_tiles` is the tuning
    group convert-coda-to-host decided: kernels of one GEMM shape and mainloop share a tuning
    only within a group (twice the [M, N] matrices the epilogue reads or writes besides the
    accumulator)."""

    name = "host.launch_gemm"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Word("kernel", SYMBOL), Operand("a"), Punct(","), Operand("b"), Keyword("m", SIZE), Keyword("n", SIZE),
        Keyword("k", SIZE), Keyword("transpose_a", UNIT), Keyword("transpose_b", UNIT), Keyword("interleave", INT),
        Keyword("bn_multiple_of", INT), Keyword("n_inputs", INT), Keyword("epilogue_half_tiles", INT),
        Keyword("config", ATTR), Keyword("mainloop", ATTR), Keyword("vendor", ATTR),
    )

    kernel = prop_def(SymbolRefAttr)
    a = operand_def()
    b = operand_def()
    m = prop_def(Size)
    n = prop_def(Size)
    k = prop_def(Size)
    transpose_a = opt_prop_def(UnitAttr)
    transpose_b = opt_prop_def(UnitAttr)
    interleave = prop_def(IntAttr)
    bn_multiple_of = prop_def(IntAttr)
    n_inputs = prop_def(IntAttr)
    config = opt_prop_def(TileConfigAttr)
    epilogue_half_tiles = prop_def(IntAttr)
    mainloop = opt_prop_def(MainloopAttr)
    """The gemm's `#coda.mainloop` (coda-plan-mainloop): launch its Gluon kernel where the machine can."""
    vendor = opt_prop_def(VendorGemmAttr)
    """The gemm's `#coda.vendor_gemm` (coda-plan-mainloop): on a GPU, the library's GEMM into the one output."""
    args = region_def("single_block")
    result = result_def(TupleType)

    def __init__(self, kernel: str, a: SSAValue, b: SSAValue, shape: tuple[int | Attribute, ...], *, transpose_a: bool,
                 transpose_b: bool, interleave: int, bn_multiple_of: int, n_inputs: int,
                 config: TileConfigAttr | None, epilogue_half_tiles: int, result_type: TupleType, args: Region,
                 mainloop: MainloopAttr | None = None, vendor: VendorGemmAttr | None = None):
        props: dict[str, Attribute] = {
            "kernel": SymbolRefAttr(kernel), "m": _size(shape[0]), "n": _size(shape[1]), "k": _size(shape[2]),
            "interleave": IntAttr(interleave), "bn_multiple_of": IntAttr(bn_multiple_of), "n_inputs": IntAttr(n_inputs),
            "epilogue_half_tiles": IntAttr(epilogue_half_tiles),
        }
        if transpose_a:
            props["transpose_a"] = UnitAttr()
        if transpose_b:
            props["transpose_b"] = UnitAttr()
        if config is not None:
            props["config"] = config
        if mainloop is not None:
            props["mainloop"] = mainloop
        if vendor is not None:
            props["vendor"] = vendor
        super().__init__(operands=[a, b], result_types=[result_type], properties=props, regions=[args])

    def verify_(self) -> None:
        _check_static(self.a.type, "host.launch_gemm: a")
        _check_static(self.b.type, "host.launch_gemm: b")
        for what, size in (("M", self.m), ("N", self.n), ("K", self.k)):
            _check_size(self, size, what)
        if self.interleave.data < 0:
            raise VerifyException("host.launch_gemm: interleave must be >= 0")
        if self.epilogue_half_tiles.data < 0:
            raise VerifyException("host.launch_gemm: epilogue_half_tiles must be >= 0")
        if self.mainloop is not None and self.mainloop.accumulate_first.data >= self.n_inputs.data:
            raise VerifyException("host.launch_gemm: the mainloop's accumulate_first is not an input of the kernel")
        if self.vendor is not None:
            if self.mainloop is not None or self.config is not None or self.interleave.data:
                raise VerifyException("host.launch_gemm: a vendor gemm has no mainloop record, fixed tile or interleave")
            outs = self.result.type.elements.data
            if self.n_inputs.data != 0 or len(outs) != 1:
                raise VerifyException("host.launch_gemm: a vendor gemm's arguments are its one output")
            operand = self.a.type.get_element_type()  # type: ignore[union-attr]
            out = outs[0]
            if not isinstance(out, TensorType) or out.get_element_type() not in (operand, Float32Type()):
                raise VerifyException("host.launch_gemm: a vendor gemm's output is of its operands' element type or f32")
        self.verify_args(self.n_inputs.data, self.bn_multiple_of.data, self.config, self.result.type.elements.data)


_ELEMENTWISE_SYNTAX: tuple[Item, ...] = (
    Keyword("m", SIZE), Keyword("n", SIZE), Keyword("whole", WORD), Keyword("bn_multiple_of", INT),
    Keyword("width_multiple", INT), Keyword("n_inputs", INT), Keyword("config", ATTR),
)
_FOLD_SYNTAX: tuple[Item, ...] = (
    Operands("partials", "(", "partials"), Operands("inputs", "(", "inputs"), Operands("outputs", "(", "outputs"),
    Keyword("length", SIZE), Keyword("sums", BOOL),
)


class _ElementwiseLaunchBase(ArgsLambdaLaunch):
    m = prop_def(Size)
    n = prop_def(Size)
    bn_multiple_of = prop_def(IntAttr)
    n_inputs = prop_def(IntAttr)
    whole = opt_prop_def(StringAttr)
    width_multiple = opt_prop_def(IntAttr)
    """The kernel's widest tile in column tiles (`coda.ElementwiseOp.tile_width_multiple`), when
    above 1: the launch sizes a program's warps by it."""
    config = opt_prop_def(TileConfigAttr)
    args = region_def("single_block")

    @staticmethod
    def properties_of(shape: tuple[int | Attribute, ...], bn_multiple_of: int, n_inputs: int, whole: str | None,
                      config: TileConfigAttr | None, width_multiple: int = 1) -> dict[str, Attribute]:
        props: dict[str, Attribute] = {"m": _size(shape[0]), "n": _size(shape[1]),
                                       "bn_multiple_of": IntAttr(bn_multiple_of), "n_inputs": IntAttr(n_inputs)}
        if width_multiple != 1:
            props["width_multiple"] = IntAttr(width_multiple)
        if whole is not None:
            props["whole"] = StringAttr(whole)
        if config is not None:
            props["config"] = config
        return props

    def verify_elementwise(self, result_types) -> None:
        _check_size(self, self.m, "M")
        _check_size(self, self.n, "N")
        if self.whole is not None and self.whole.data not in ("rows", "cols"):
            raise VerifyException(f"{self.name}: whole is 'rows' or 'cols'")
        if self.width_multiple is not None:
            w = self.width_multiple.data
            if w < 2 or w & (w - 1):
                raise VerifyException(f"{self.name}: width_multiple is a power of two above 1 (absent: 1), got {w}")
            if self.whole is not None:
                raise VerifyException(f"{self.name}: a whole-rows / whole-cols kernel takes no width_multiple")
        self.verify_args(self.n_inputs.data, self.bn_multiple_of.data, self.config, result_types)


@irdl_op_definition
class LaunchElementwiseOp(_ElementwiseLaunchBase):
    """`_cfg, _e = _rt.launch_elementwise(kernel, lambda _cfg: (...), M=, N=, ...)`."""

    name = "host.launch_elementwise"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Word("kernel", SYMBOL), *_ELEMENTWISE_SYNTAX)

    kernel = prop_def(SymbolRefAttr)
    result = result_def(TupleType)

    def __init__(self, kernel: str, shape: tuple[int | Attribute, ...], *, bn_multiple_of: int, n_inputs: int, whole: str | None,
                 config: TileConfigAttr | None, result_type: TupleType, args: Region, width_multiple: int = 1):
        props = {"kernel": SymbolRefAttr(kernel),
                 **self.properties_of(shape, bn_multiple_of, n_inputs, whole, config, width_multiple)}
        super().__init__(result_types=[result_type], properties=props, regions=[args])

    def verify_(self) -> None:
        self.verify_elementwise(self.result.type.elements.data)


@irdl_op_definition
class ElementwiseSpecOp(_ElementwiseLaunchBase):
    """`_g = _rt.elementwise_launch(lambda _cfg: (...), M=, N=, ..., n_inputs=)`: an
    elementwise member of a launch group (launched by `host.launch_group`)."""

    name = "host.elementwise_spec"
    SYNTAX: ClassVar[tuple[Item, ...]] = (*_ELEMENTWISE_SYNTAX,)

    result = result_def(LaunchSpecType)

    def __init__(self, shape: tuple[int | Attribute, ...], *, bn_multiple_of: int, n_inputs: int, whole: str | None,
                 config: TileConfigAttr | None, result_type: LaunchSpecType, args: Region, width_multiple: int = 1):
        props = self.properties_of(shape, bn_multiple_of, n_inputs, whole, config, width_multiple)
        super().__init__(result_types=[result_type], properties=props, regions=[args])

    def verify_(self) -> None:
        values = self.yielded()
        self.verify_elementwise([v.type for v in values])
        if list(self.result.type.results.data) != [v.type for v in values[self.n_inputs.data:]]:
            raise VerifyException("host.elementwise_spec: the spec's results are the yielded outputs")


class _FoldLaunchBase(SyntaxOp):
    partials = var_operand_def()
    inputs = var_operand_def()
    outputs = var_operand_def()
    length = prop_def(Size)
    sums = prop_def(BoolAttr)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    @staticmethod
    def properties_of(length: int | Attribute, sums: bool) -> dict[str, Attribute]:
        return {"length": _size(length), "sums": IntegerAttr(int(sums), i1)}

    def verify_fold(self) -> None:
        _check_size(self, self.length, "L")
        length = self.length.data if isinstance(self.length, IntAttr) else DYNAMIC_INDEX
        for p in self.partials:
            ty = p.type
            _check_buffer(ty, f"{self.name}: partials")
            assert isinstance(ty, TensorType)
            if len(ty.get_shape()) != 2 or ty.get_shape()[0] != length:
                raise VerifyException(f"{self.name}: partials are [L, tiles] buffers, got {ty}")
        for v in [*self.inputs, *self.outputs]:
            _check_static(v.type, self.name)
        sums = any(not v.type.get_shape() for v in self.outputs)  # type: ignore[union-attr]
        if bool(self.sums.value.data) != sums:
            raise VerifyException(f"{self.name}: sums is whether an output is rank 0 ({sums})")


@irdl_op_definition
class LaunchFoldOp(_FoldLaunchBase):
    """`_e = _rt.launch_fold(kernel, (partials), (inputs), (outputs), L=, sums=)`."""

    name = "host.launch_fold"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Word("kernel", SYMBOL), *_FOLD_SYNTAX)

    kernel = prop_def(SymbolRefAttr)
    result = result_def(TupleType)

    def __init__(self, kernel: str, partials: Sequence[SSAValue], inputs: Sequence[SSAValue],
                 outputs: Sequence[SSAValue], length: int | Attribute, sums: bool):
        props = {"kernel": SymbolRefAttr(kernel), **self.properties_of(length, sums)}
        super().__init__(operands=[partials, inputs, outputs], properties=props,
                         result_types=[TupleType([o.type for o in outputs])])

    def verify_(self) -> None:
        self.verify_fold()
        if list(self.result.type.elements.data) != [o.type for o in self.outputs]:
            raise VerifyException("host.launch_fold: the result holds the outputs")


@irdl_op_definition
class FoldSpecOp(_FoldLaunchBase):
    """`_g = _rt.fold_launch((partials), (inputs), (outputs), L=, sums=)`: a fold member of a
    launch group."""

    name = "host.fold_spec"
    SYNTAX: ClassVar[tuple[Item, ...]] = (*_FOLD_SYNTAX,)

    result = result_def(LaunchSpecType)

    def __init__(self, partials: Sequence[SSAValue], inputs: Sequence[SSAValue], outputs: Sequence[SSAValue],
                 length: int | Attribute, sums: bool):
        super().__init__(operands=[partials, inputs, outputs], properties=self.properties_of(length, sums),
                         result_types=[LaunchSpecType([o.type for o in outputs])])

    def verify_(self) -> None:
        self.verify_fold()
        if list(self.result.type.results.data) != [o.type for o in self.outputs]:
            raise VerifyException("host.fold_spec: the spec's results are the outputs")


@irdl_op_definition
class LaunchGroupOp(SyntaxOp):
    """`_rt.launch_group(kernel, (specs))`: one launch running every member's programs."""

    name = "host.launch_group"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Word("kernel", SYMBOL), Operands("specs"))

    kernel = prop_def(SymbolRefAttr)
    specs = var_operand_def(LaunchSpecType)

    def __init__(self, kernel: str, specs: Sequence[SSAValue]):
        super().__init__(operands=[specs], properties={"kernel": SymbolRefAttr(kernel)})

    def verify_(self) -> None:
        if len(self.specs) < 2:
            raise VerifyException("host.launch_group: a group launches at least two members")
        for s in self.specs:
            if not isinstance(s.owner, (ElementwiseSpecOp, FoldSpecOp)):
                raise VerifyException("host.launch_group: members are host.elementwise_spec / host.fold_spec values")


@irdl_op_definition
class UnpackOp(SyntaxOp):
    """`a, b = _e[start:]` (`a, = _e` from 0): a launch's outputs."""

    name = "host.unpack"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("tuple"), Keyword("start", INT))

    tuple = operand_def(TupleType)
    start = prop_def(IntAttr)
    res = var_result_def()

    def __init__(self, value: SSAValue, start: int):
        ty = value.type
        assert isinstance(ty, TupleType)
        super().__init__(operands=[value], result_types=[list(ty.elements.data[start:])], properties={"start": IntAttr(start)})

    def verify_(self) -> None:
        elements = list(self.tuple.type.elements.data)
        if not 0 <= self.start.data <= len(elements):
            raise VerifyException("host.unpack: start out of range")
        if [r.type for r in self.res] != elements[self.start.data:]:
            raise VerifyException("host.unpack: the results are the tuple's elements from start")
        if not self.res:
            raise VerifyException("host.unpack: unpacks at least one value")


@irdl_op_definition
class ResultsOp(SyntaxOp):
    """`a, b = _g.results`: a launch group member's outputs (after `host.launch_group`)."""

    name = "host.results"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("spec"),)

    spec = operand_def(LaunchSpecType)
    res = var_result_def()

    def __init__(self, spec: SSAValue):
        ty = spec.type
        assert isinstance(ty, LaunchSpecType)
        super().__init__(operands=[spec], result_types=[list(ty.results.data)])

    def verify_(self) -> None:
        if [r.type for r in self.res] != list(self.spec.type.results.data):
            raise VerifyException("host.results: the results are the spec's outputs")
        if not self.res:
            raise VerifyException("host.results: unpacks at least one value")
        launched = any(isinstance(u.operation, LaunchGroupOp) for u in self.spec.uses)
        if not launched:
            raise VerifyException("host.results: the spec is never launched (no host.launch_group uses it)")


LIBRARY_FUNCTIONS = ("attention_forward", "attention_backward", "attention_forward_segments",
                     "attention_backward_segments", "embedding", "embedding_grad", "concat", "slice_copy")


@irdl_op_definition
class LibraryCallOp(SyntaxOp):
    """`outs = _lib.callee(tensors..., literals...)` (`list_operands`: the tensors as one list
    argument); literals are integers (`#builtin.int`), booleans (i1), f64 floats (attention's
    scale and softcap), dtypes (a type) or, with run-time rows, `#host.seq_len` (the call's
    sequence length)."""

    name = "host.library_call"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Word("callee", WORD), Operands("tensors", "("), Keyword("literals", LITERALS), Keyword("list_operands", UNIT))

    callee = prop_def(StringAttr)
    tensors = var_operand_def()
    literals = prop_def(ArrayAttr[Attribute])
    list_operands = opt_prop_def(UnitAttr)
    res = var_result_def()

    def __init__(self, callee: str, tensors: Sequence[SSAValue], literals: Sequence[Attribute],
                 result_types: Sequence[Attribute], list_operands: bool = False):
        props: dict[str, Attribute] = {"callee": StringAttr(callee), "literals": ArrayAttr(literals)}
        if list_operands:
            props["list_operands"] = UnitAttr()
        super().__init__(operands=[tensors], result_types=[result_types], properties=props)

    def verify_(self) -> None:
        if self.callee.data not in LIBRARY_FUNCTIONS:
            raise VerifyException(f"host.library_call: unknown library function {self.callee.data!r} "
                                  f"(one of {', '.join(LIBRARY_FUNCTIONS)})")
        for v in [*self.tensors, *self.res]:
            _check_static(v.type, "host.library_call")
        if not self.res:
            raise VerifyException("host.library_call: returns at least one tensor")
        for lit in self.literals.data:
            if isinstance(lit, IntAttr) or (isinstance(lit, IntegerAttr) and lit.type == i1):
                continue
            if isinstance(lit, FloatAttr) and lit.type == f64 and math.isfinite(lit.value.data):
                continue
            if isinstance(lit, SeqLenAttr):
                if _parent_func(self).seq_len is None:
                    raise VerifyException("host.library_call: #host.seq_len in a function that takes no seq_len")
                continue
            if isinstance(lit, TypeAttribute):
                try:
                    TORCH_DTYPE_NAMES[element_name(lit)]
                    continue
                except (TypeError, KeyError):
                    pass
            raise VerifyException(f"host.library_call: a literal is an integer, a boolean, a finite f64 or a torch dtype, got {lit}")


@irdl_op_definition
class DropOp(SyntaxOp):
    """`del a, b`: the host function's last references to buffers no later op reads (the
    decision is `convert-coda-to-host`'s, from `liveness.dead_after`), so the caching
    allocator reuses them for the next kernels' outputs; with them the last launch's argument
    tuple, or a launch group's specs, which would hold them too."""

    name = "host.drop"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operands("values"),)

    values = var_operand_def()

    def __init__(self, values: Sequence[SSAValue]):
        super().__init__(operands=[values])

    def verify_(self) -> None:
        if not self.values:
            raise VerifyException("host.drop: drops at least one value")
        fn = _parent_func(self)
        args = list(fn.body.block.args)
        owned = fn.owned_indices()
        for v in self.values:
            base = v.owner.value if isinstance(v.owner, ContiguousOp) else v
            if base in args and args.index(base) not in owned:
                raise VerifyException("host.drop: drops an argument the caller did not hand over (not owned)")
            if not isinstance(v.type, (TupleType, LaunchSpecType)):
                _check_buffer(v.type, "host.drop")
        later = self.next_op
        while later is not None:
            used = [v for v in self.values if any(u.operation is later or later.is_ancestor(u.operation) for u in v.uses)]
            if used:
                raise VerifyException(f"host.drop: a dropped value is read later (by {later.name})")
            later = later.next_op


@irdl_op_definition
class CommentOp(SyntaxOp):
    """A comment line in the host function (which kernel the next launch runs)."""

    name = "host.comment"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Word("text", STR),)

    text = prop_def(StringAttr)

    def __init__(self, text: str):
        super().__init__(properties={"text": StringAttr(text)})

    def verify_(self) -> None:
        if "\n" in self.text.data:
            raise VerifyException("host.comment: one line")


@irdl_op_definition
class ReturnOp(SyntaxOp):
    """`return None` / `return x` / `return (a, b)`."""

    name = "host.return"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operands("values"),)

    values = var_operand_def()
    traits = traits_def(IsTerminator())

    def __init__(self, values: Sequence[SSAValue]):
        super().__init__(operands=[values])

    def verify_(self) -> None:
        for v in self.values:
            _check_buffer(v.type, "host.return")  # a function may return partials


HOST = Dialect(
    "host",
    [
        FuncOp,
        CheckArgumentsOp,
        DeviceOfOp,
        RowCountOp,
        RowsOp,
        ContiguousOp,
        EmptyOp,
        TilesOp,
        YieldOp,
        LaunchGemmOp,
        LaunchElementwiseOp,
        ElementwiseSpecOp,
        LaunchFoldOp,
        FoldSpecOp,
        LaunchGroupOp,
        UnpackOp,
        ResultsOp,
        LibraryCallOp,
        DropOp,
        CommentOp,
        ReturnOp,
    ],
    [DeviceType, ConfigType, TupleType, LaunchSpecType, RowsAttr, SeqLenAttr],
)
