"""Custom assembly formats of the `tl` and `host` dialects, declared per op as a `Syntax`.

xDSL's declarative assembly format prints an `IntAttr` property as `#builtin.int<3>`, which its
own parser then refuses; the tl and host ops keep their integers as `IntAttr`, so they get
their format from here instead: an op lists its syntax (operands, properties written as words
or as `keyword value` pairs), and `SyntaxOp` prints and parses

    %r = dialect.op <items> {discardable attributes} : <operand types> -> <result types> <regions>

(`:` / `->` only when there are operands / results; a region with entry block arguments
prints them as `^bb0(...)`). The generic form still parses, as for every op.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    FloatAttr,
    IntAttr,
    IntegerAttr,
    StringAttr,
    SymbolRefAttr,
    UnitAttr,
    f64,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute, Region, SSAValue
from xdsl.irdl import IRDLOperation
from xdsl.irdl.operations import AttrSizedOperandSegments
from xdsl.parser import Parser
from xdsl.printer import Printer

# property kinds: how a property's value is written
INT = "int"  # IntAttr: 3
INTS = "ints"  # ArrayAttr[IntAttr]: [0, 2]
I64S = "i64s"  # DenseArrayBase of i64: [0, 1, 3, 2]
WORD = "word"  # StringAttr that is an identifier: sum
STR = "str"  # StringAttr: "text"
SYMBOL = "symbol"  # SymbolRefAttr: @name
ATTR = "attr"  # any attribute, in its own syntax
UNIT = "unit"  # UnitAttr: the keyword alone
BOOL = "bool"  # i1 IntegerAttr: true / false
LITERALS = "literals"  # ArrayAttr of IntAttr / i1 / f64 FloatAttr / types / attributes: [3, true, 0.25, bf16, #host.seq_len]
SIZE = "size"  # an extent: IntAttr (3) or a run-time one in its own attribute syntax (#host.rows<1>)


@dataclass(frozen=True)
class Operand:
    """One operand: `%x`."""

    name: str


@dataclass(frozen=True)
class Operands:
    """A variadic operand: `%a, %b`; with `delim` "[": `[%a, %b]` (nothing when empty); with "(":
    `(%a, %b)`, after `keyword` when given: `inputs(%a, %b)` (with `optional`, nothing at all when
    empty)."""

    name: str
    delim: str = ""
    keyword: str = ""
    optional: bool = False


@dataclass(frozen=True)
class OptOperand:
    """An optional operand: `keyword %x` when present."""

    name: str
    keyword: str


@dataclass(frozen=True)
class Word:
    """A property written bare (a kind, a predicate, a symbol)."""

    name: str
    kind: str


@dataclass(frozen=True)
class Keyword:
    """A property written `name value` (`name` alone for a unit property), omitted when absent."""

    name: str
    kind: str


@dataclass(frozen=True)
class Punct:
    """Punctuation between items: `,`."""

    text: str


@dataclass(frozen=True)
class Literal:
    """A fixed keyword between items: `to`."""

    text: str


Item = Operand | Operands | OptOperand | Word | Keyword | Punct | Literal


def print_value(printer: Printer, attr: Attribute, kind: str) -> None:
    if kind == INT or (kind == SIZE and isinstance(attr, IntAttr)):
        assert isinstance(attr, IntAttr)
        printer.print_string(str(attr.data))
    elif kind == INTS:
        assert isinstance(attr, ArrayAttr)
        printer.print_string("[" + ", ".join(str(a.data) for a in attr.data) + "]")  # type: ignore[attr-defined]
    elif kind == I64S:
        assert isinstance(attr, DenseArrayBase)
        printer.print_string("[" + ", ".join(str(v) for v in attr.get_values()) + "]")
    elif kind == WORD:
        assert isinstance(attr, StringAttr)
        printer.print_string(attr.data)
    elif kind == STR:
        assert isinstance(attr, StringAttr)
        printer.print_string_literal(attr.data)
    elif kind == SYMBOL:
        printer.print_attribute(attr)
    elif kind == BOOL:
        assert isinstance(attr, IntegerAttr)
        printer.print_string("true" if attr.value.data else "false")
    elif kind == LITERALS:
        assert isinstance(attr, ArrayAttr)
        printer.print_string("[")
        for i, lit in enumerate(attr.data):
            if i:
                printer.print_string(", ")
            if isinstance(lit, IntAttr):
                printer.print_string(str(lit.data))
            elif isinstance(lit, IntegerAttr) and lit.type == i1:
                printer.print_string("true" if lit.value.data else "false")
            elif isinstance(lit, FloatAttr) and lit.type == f64:
                printer.print_string(float_literal(lit.value.data))
            else:
                printer.print_attribute(lit)
        printer.print_string("]")
    else:
        printer.print_attribute(attr)


def float_literal(value: float) -> str:
    """A float as the shortest text that reads back the same, always with a point (so that it
    parses as a float, not an integer): 0.0625, 50.0, 1.0e-05."""
    text = repr(float(value))
    if "." not in text and "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}.0e{exponent}"
    elif "." not in text and "e" not in text:
        text += ".0"
    return text


def parse_value(parser: Parser, kind: str) -> Attribute:
    if kind == INT:
        return IntAttr(parser.parse_integer(allow_boolean=False))
    if kind == SIZE:
        value = parser.parse_optional_integer(allow_boolean=False)
        return IntAttr(value) if value is not None else parser.parse_attribute()
    if kind == INTS:
        return ArrayAttr(IntAttr(i) for i in parser.parse_comma_separated_list(
            parser.Delimiter.SQUARE, lambda: parser.parse_integer(allow_boolean=False)))
    if kind == I64S:
        return DenseArrayBase.from_list(i64, parser.parse_comma_separated_list(
            parser.Delimiter.SQUARE, lambda: parser.parse_integer(allow_boolean=False)))
    if kind == WORD:
        return StringAttr(parser.parse_identifier())
    if kind == STR:
        return StringAttr(parser.parse_str_literal())
    if kind == SYMBOL:
        return SymbolRefAttr(parser.parse_symbol_name())
    if kind == BOOL:
        return IntegerAttr(int(parser.parse_boolean()), i1)
    if kind == LITERALS:
        def literal() -> Attribute:
            if (value := parser.parse_optional_integer(allow_boolean=False)) is not None:
                return IntAttr(value)
            if (flag := parser.parse_optional_boolean()) is not None:
                return IntegerAttr(int(flag), i1)
            if (number := parser.parse_optional_number()) is not None:
                return FloatAttr(float(number), f64)
            return parser.parse_attribute()  # a type (bf16) or an attribute (#host.seq_len)

        return ArrayAttr(parser.parse_comma_separated_list(parser.Delimiter.SQUARE, literal))
    return parser.parse_attribute()


def print_types(printer: Printer, types: Sequence[Attribute], parens: bool) -> None:
    if parens:
        printer.print_string("(")
    printer.print_list(types, printer.print_attribute)
    if parens:
        printer.print_string(")")


def parse_types(parser: Parser) -> list[Attribute]:
    if parser.parse_optional_punctuation("(") is not None:
        if parser.parse_optional_punctuation(")") is not None:
            return []
        types = [parser.parse_type()]
        while parser.parse_optional_punctuation(",") is not None:
            types.append(parser.parse_type())
        parser.parse_punctuation(")")
        return types
    types = [parser.parse_type()]
    while parser.parse_optional_punctuation(",") is not None:
        types.append(parser.parse_type())
    return types


class SyntaxOp(IRDLOperation):
    """Mixin: the op's custom form from its `SYNTAX` items (see the module docstring)."""

    SYNTAX: ClassVar[tuple[Item, ...]] = ()

    def print(self, printer: Printer) -> None:
        for item in self.SYNTAX:
            if isinstance(item, Operand):
                printer.print_string(" ")
                printer.print_operand(getattr(self, item.name))
            elif isinstance(item, Operands):
                values = list(getattr(self, item.name))
                if (item.delim == "[" or item.optional) and not values:
                    continue  # an empty bracket list (or optional keyword list) is omitted
                if item.delim:
                    # `@f(%a)` right after a callee; ` [%a]`, ` inputs(%a)` elsewhere
                    space = " " if item.keyword or item.delim == "[" else ""
                    printer.print_string(f"{space}{item.keyword}{item.delim}")
                    printer.print_list(values, printer.print_operand)
                    printer.print_string("]" if item.delim == "[" else ")")
                elif values:
                    printer.print_string(" ")
                    printer.print_list(values, printer.print_operand)
            elif isinstance(item, Punct):
                printer.print_string(item.text)
            elif isinstance(item, Literal):
                printer.print_string(f" {item.text}")
            elif isinstance(item, OptOperand):
                value = getattr(self, item.name)
                if value is not None:
                    printer.print_string(f" {item.keyword} ")
                    printer.print_operand(value)
            elif isinstance(item, Word):
                printer.print_string(" ")
                print_value(printer, self.properties[item.name], item.kind)
            else:
                attr = self.properties.get(item.name)
                if attr is None:
                    continue
                printer.print_string(f" {item.name}")
                if item.kind != UNIT:
                    printer.print_string(" ")
                    print_value(printer, attr, item.kind)
        printer.print_op_attributes(self.attributes)
        if self.operands:
            printer.print_string(" : ")
            print_types(printer, [o.type for o in self.operands], False)
        if self.results:
            printer.print_string(" -> ")
            print_types(printer, [r.type for r in self.results], len(self.results) != 1)
        for region in self.regions:
            printer.print_string(" ")
            printer.print_region(region, print_entry_block_args=bool(region.blocks and region.block.args))

    @classmethod
    def parse(cls, parser: Parser):
        groups: dict[str, list[Parser.UnresolvedOperand]] = {}
        props: dict[str, Attribute] = {}
        start = parser.pos
        for item in cls.SYNTAX:
            if isinstance(item, Operand):
                groups[item.name] = [parser.parse_unresolved_operand()]
            elif isinstance(item, Operands):
                if item.delim == "[":
                    groups[item.name] = parser.parse_optional_comma_separated_list(
                        parser.Delimiter.SQUARE, parser.parse_unresolved_operand) or []
                elif item.delim:
                    if item.optional and parser.parse_optional_keyword(item.keyword) is None:
                        groups[item.name] = []
                        continue
                    if item.keyword and not item.optional:
                        parser.parse_keyword(item.keyword)
                    groups[item.name] = parser.parse_comma_separated_list(parser.Delimiter.PAREN,
                                                                          parser.parse_unresolved_operand)
                else:
                    group = []
                    first = parser.parse_optional_unresolved_operand()
                    if first is not None:
                        group.append(first)
                        while parser.parse_optional_punctuation(",") is not None:
                            group.append(parser.parse_unresolved_operand())
                    groups[item.name] = group
            elif isinstance(item, OptOperand):
                present = parser.parse_optional_keyword(item.keyword) is not None
                groups[item.name] = [parser.parse_unresolved_operand()] if present else []
            elif isinstance(item, Punct):
                parser.parse_punctuation(item.text)
            elif isinstance(item, Literal):
                parser.parse_keyword(item.text)
            elif isinstance(item, Word):
                props[item.name] = parse_value(parser, item.kind)
            elif parser.parse_optional_keyword(item.name) is not None:
                props[item.name] = UnitAttr() if item.kind == UNIT else parse_value(parser, item.kind)
        attrs = parser.parse_optional_attr_dict()
        # operands (and their types) in the op's definition order
        order = [name for name, _ in cls.get_irdl_definition().operands]
        unresolved = [u for name in order for u in groups.get(name, [])]
        operand_types: list[Attribute] = []
        if unresolved:
            parser.parse_punctuation(":")
            operand_types = parse_types(parser)
        operands = parser.resolve_operands(unresolved, operand_types, start)
        result_types: list[Attribute] = []
        if parser.parse_optional_punctuation("->") is not None:
            result_types = parse_types(parser)
        regions: list[Region] = []
        while (region := parser.parse_optional_region()) is not None:
            regions.append(region)
        if any(isinstance(o, AttrSizedOperandSegments) for o in cls.get_irdl_definition().options):
            props["operandSegmentSizes"] = DenseArrayBase.from_list(i32, [len(groups.get(name, [])) for name in order])
        op = cls.create(operands=list(operands), result_types=result_types, properties=props, regions=regions)
        op.attributes |= attrs
        return op


def print_function_header(printer: Printer, symbol: SymbolRefAttr | StringAttr, args: Sequence[SSAValue],
                          names: Sequence[str | None], flags: Sequence[str] = ()) -> None:
    """` @name(%a: T, %b as B: T flag, ...)`: the arguments with their types; `as NAME` when the
    printed SSA name is not the parameter's name `names[i]`; `flags[i]` after the type."""
    printer.print_string(" ")
    printer.print_attribute(symbol if isinstance(symbol, SymbolRefAttr) else SymbolRefAttr(symbol))
    printer.print_string("(")
    for i, arg in enumerate(args):
        if i:
            printer.print_string(", ")
        printed = printer.print_ssa_value(arg)
        if names[i] and printed != names[i]:
            printer.print_string(f" as {names[i]}")
        printer.print_string(": ")
        printer.print_attribute(arg.type)
        if i < len(flags) and flags[i]:
            printer.print_string(f" {flags[i]}")
    printer.print_string(")")


def parse_function_header(parser: Parser, flag: str | None = None,
                          defaults: list[int | bool | None] | None = None) -> tuple[str, list[Parser.Argument], list[str], list[bool]]:
    """The inverse of `print_function_header`: (symbol, arguments, parameter names, flag per argument).
    With `defaults` (a list to fill), a flagged argument may have a default value after it
    (`%x: i32 constexpr = 0`, `= true`): one entry per argument, None where there is none."""
    symbol = parser.parse_symbol_name().data
    args: list[Parser.Argument] = []
    names: list[str] = []
    flags: list[bool] = []

    def one() -> None:
        arg = parser.parse_argument(expect_type=False)
        name = arg.name.text[1:]
        if name[0].isdigit():
            name = ""  # an unnamed value
        if parser.parse_optional_keyword("as") is not None:
            name = parser.parse_identifier()
        parser.parse_punctuation(":")
        args.append(arg.resolve(parser.parse_type()))
        names.append(name)
        flags.append(flag is not None and parser.parse_optional_keyword(flag) is not None)
        if defaults is not None:
            value = None
            if flags[-1] and parser.parse_optional_punctuation("=") is not None:
                value = parser.parse_optional_boolean()
                if value is None:
                    value = parser.parse_integer(allow_boolean=False)
            defaults.append(value)

    parser.parse_comma_separated_list(parser.Delimiter.PAREN, one)
    return symbol, args, names, flags
