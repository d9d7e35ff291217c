"""Located diagnostics: `file:line:col: error: 'op.name' op message`.

xDSL keeps an op's source location only when the text spells `loc(...)`, so the parser here
records where each op starts. Verification walks the IR itself so that the failing op (and
not only a dump of the whole module) is named in the message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from xdsl.dialects.builtin import FileLineColLoc, IntAttr, ModuleOp, StringAttr, UnknownLoc
from xdsl.ir import Attribute, AttributeInvT, Operation, SSAValue
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.utils.exceptions import DiagnosticException, ParseError, VerifyException
from xdsl.utils.lexer import Span
from xdsl.utils.mlir_lexer import MLIRLexer, MLIRTokenKind

# xDSL 0.74's string-literal regex, '"(?:[^"\\\n\v\f]+|\\(...))*"', nests `+` inside `*`: on an
# unterminated string ('style = "half{...' up to the end of the line) it backtracks
# exponentially in the line's length (24 characters: ~1 s; a typical line: forever). The same
# language with one character per repetition matches in linear time.
MLIRLexer._unescaped_characters_regex = re.compile(r'"(?:[^"\\\n\v\f]|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*"')


class CompilerError(Exception):
    """A located error raised by a pass or the lowering about a specific op."""

    def __init__(self, op: Operation | None, message: str):
        super().__init__(message)
        self.diagnostic = Diagnostic(op, message)

    def __str__(self) -> str:
        return str(self.diagnostic)


class InternalCompilerBug(RuntimeError):
    """A located contradiction inside coda-ir itself, e.g. a decision coda-legalize recorded that
    the lowering cannot honour: a bug of coda-ir, reported as an internal error, never as a
    problem with the input."""

    def __init__(self, op: Operation | None, message: str):
        super().__init__(str(Diagnostic(op, message)))


MAX_INTEGER_WIDTH = 2**24 - 1
"""MLIR's largest integer type width."""


class InputError(Exception):
    """Input that cannot even be read as text (`file:line:col: error: ...`, already formatted)."""


def decode_source(data: bytes, name: str, line_offset: int = 0) -> str:
    """`data` as UTF-8 text; an invalid byte is an `InputError` at its line and column."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1 + line_offset
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        raise InputError(
            f"{name}:{line}:{column}: error: invalid UTF-8 byte 0x{data[error.start]:02x}: "
            "the input must be UTF-8 text"
        ) from None


class LocatingParser(Parser):
    """A Parser that stamps every parsed op with a FileLineColLoc of where it starts, and
    locates the errors that xDSL's parser reports without a useful position (attribute
    verification failures, undefined values, empty input)."""

    def __init__(self, *args, line_offset: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self._line_offset = line_offset
        self._first_uses: dict[str, Span] = {}

    def parse_operation(self) -> Operation:
        start = self._current_token.span
        try:
            op = super().parse_operation()
        except VerifyException as error:
            # Some custom syntaxes check type constraints while parsing (e.g. `arith.addf` on
            # a !coda.tile): report that at the op, as a parse error, not unlocated.
            text = start.input.content[start.start :]
            name = re.match(r'\s*(?:[%\w#:,\s]*=\s*)?"?([\w.$-]+)', text)
            subject = f"'{name.group(1)}' op " if name else ""
            end = max(self.pos, start.end)
            content = start.input.content
            while end > start.start and content[end - 1].isspace():
                end -= 1
            message = _first_line(error)
            if name and name.group(1).split(".")[0] in _SCALAR_DIALECTS and "!coda.tile" in content[start.start : end]:
                message = _TILE_MATH
            self.raise_error(subject + message, start.start, end)
        if isinstance(op.location, UnknownLoc):
            line, column = _line_col(start.input.content, start.start)
            op.location = FileLineColLoc(
                StringAttr(start.input.name), IntAttr(line + self._line_offset), IntAttr(column)
            )
        return op

    def parse_module(self, allow_implicit_module: bool = True) -> ModuleOp:
        if self._current_token.kind == MLIRTokenKind.EOF:
            self.raise_error("empty input: expected at least one operation")
        start = self._current_token.span
        try:
            module = super().parse_module(allow_implicit_module)
        except ParseError as error:
            # xDSL reports undefined values at the end of the input; point at the first use.
            undefined = [self._first_uses[n] for n in self.forward_ssa_references if n in self._first_uses]
            if not error.msg.startswith("values used but not defined") or not undefined:
                raise
            use = min(undefined, key=lambda span: span.start)
            raise ParseError(use, f"use of undefined value '{use.text}'") from None
        if isinstance(module.location, UnknownLoc):  # the implicit module: where the input starts
            line, column = _line_col(start.input.content, start.start)
            module.location = FileLineColLoc(StringAttr(start.input.name), IntAttr(line + self._line_offset), IntAttr(column))
        return module

    def resolve_operand(self, operand: UnresolvedOperand, type: AttributeInvT) -> SSAValue[AttributeInvT]:
        if operand.operand_name not in self.ssa_values:
            self._first_uses.setdefault(operand.operand_name, operand.span)
        return super().resolve_operand(operand, type)

    def _parse_optional_integer_or_float_type(self):
        # `i9223372036854775808`: xDSL builds the type and then computes 2**width (memory
        # exhaustion), or cannot even read the width. MLIR caps widths at 2^24 - 1.
        token = self._current_token
        if token.kind == MLIRTokenKind.BARE_IDENT:
            match = self._builtin_integer_type_regex.match(token.text)
            if match is not None:
                digits = match.group(1)
                if len(digits) > 8 or int(digits) > MAX_INTEGER_WIDTH:
                    self.raise_error(
                        f"integer type width {digits if len(digits) <= 30 else digits[:30] + '...'} is out of range "
                        f"(at most {MAX_INTEGER_WIDTH} bits)",
                        token.span.start,
                        token.span.end,
                    )
        return super()._parse_optional_integer_or_float_type()

    def _parse_extended_type_or_attribute(self, attr_or_dialect_name: str, is_type: bool) -> Attribute:
        # A dialect type/attribute whose parameters do not verify (`!coda.tile<0x4xf32>`,
        # `#coda.config<bm = 48, ...>`) raises VerifyException while it is being built;
        # report it as a parse error at the attribute, not as an unlocated error.
        start = self._current_token.span.start
        try:
            return super()._parse_extended_type_or_attribute(attr_or_dialect_name, is_type)  # type: ignore[call-overload]
        except VerifyException as error:
            content = self.lexer.input.content
            spelled = ("!" if is_type else "#") + attr_or_dialect_name
            begin = start - len(spelled) if content[max(start - len(spelled), 0) : start] == spelled else start
            end = max(self.pos, begin)
            while end > begin and content[end - 1].isspace():
                end -= 1
            self.raise_error(_first_line(error), begin, end)


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


_SCALAR_DIALECTS = ("arith", "math")
_TILE_MATH = "cannot take !coda.tile values: elementwise math on tiles must be wrapped in coda.map"


def _touches_tiles(op: Operation) -> bool:
    types = [v.type for v in (*op.operands, *op.results)]
    return any(getattr(t, "name", None) == "coda.tile" for t in types)


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column


def location_of(op: Operation | None) -> str:
    """`file:line:col` of the op, or of its nearest located ancestor."""
    while op is not None:
        loc = op.location
        if isinstance(loc, FileLineColLoc):
            return f"{loc.filename.data}:{loc.line.data}:{loc.column.data}"
        op = op.parent_op()
    return "<unknown>"


@dataclass
class Diagnostic:
    op: Operation | None
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        subject = f"'{self.op.name}' op " if self.op is not None else ""
        origin = _origin_op_name(self.op)
        if origin is not None:
            # A kernel lowered from an nn op sits at that op's line: name the op the user wrote there.
            subject = f"'{origin}' op (lowered to '{self.op.name}') "  # type: ignore[union-attr]
        return f"{location_of(self.op)}: {self.severity}: {subject}{self.message}"


def _origin_op_name(op: Operation | None) -> str | None:
    """The nn op a coda kernel was lowered from (its `coda.origin`, e.g. "nn.cross_entropy.lse"
    -> "nn.cross_entropy"; a fused kernel's origin names its ops joined by "+", the first being
    the op at the kernel's location: "nn.linear+nn.add+nn.rms_norm.stats" -> "nn.linear"); used
    only to name the op in messages."""
    if op is None or not op.name.startswith("coda."):
        return None
    origin = op.attributes.get("coda.origin")
    if not isinstance(origin, StringAttr) or not origin.data.startswith("nn."):
        return None
    return ".".join(origin.data.split("+")[0].split(".")[:2])


def _clean(error: Exception) -> str:
    """The verifier's message on one line. xDSL's own (IRDL) messages put the detail on a
    second line after a colon ("operand 'x' at position 0 does not verify:\nf32 should be
    ..."): keep both parts."""
    text = str(error.args[0]) if error.args else str(error)
    text = text.removeprefix("Operation does not verify: ")
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    if lines[0].endswith(":") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]


def verify_module(module: ModuleOp) -> list[Diagnostic]:
    """Verify every op on its own (innermost first) and report each failure with its op."""
    diagnostics: list[Diagnostic] = []
    failed: set[int] = set()
    for op in module.walk(region_first=True):
        if any(id(inner) in failed for inner in _children(op)):
            failed.add(id(op))
            continue
        try:
            op.verify(verify_nested_ops=False)
            _verify_no_empty_block(op)
        except (VerifyException, DiagnosticException) as error:
            message = _clean(error)
            if op.name.split(".")[0] in _SCALAR_DIALECTS and _touches_tiles(op):
                message = _TILE_MATH
            diagnostics.append(_redefinition(op, message) or Diagnostic(op, message))
            failed.add(id(op))
    return diagnostics


def _verify_no_empty_block(op: Operation) -> None:
    """xDSL checks that a block's last op is a terminator, but not that an empty block has one
    (MLIR: "empty block: expect at least a terminator"); a function `{ }` with no `func.return`
    verified and then broke the lowering (issue 34)."""
    from xdsl.traits import NoTerminator

    if op.has_trait(NoTerminator):
        return
    for region in op.regions:
        for block in region.blocks:
            if block.first_op is None:
                terminator = " ('func.return')" if op.name == "func.func" else ""
                raise VerifyException(f"empty block: expected at least a terminator{terminator}")


def _children(op: Operation):
    for region in op.regions:
        for block in region.blocks:
            yield from block.ops


def _redefinition(table: Operation, message: str) -> Diagnostic | None:
    """xDSL reports a duplicate symbol at the symbol table (the module); point at the second
    definition instead, and say where the first one is."""
    match = re.match(r'Redefinition of symbol "(.+)"', message)
    if match is None:
        return None
    name = match.group(1)
    defs = [
        op
        for region in table.regions
        for block in region.blocks
        for op in block.ops
        if isinstance(getattr(op, "sym_name", None), StringAttr) and op.sym_name.data == name  # type: ignore[union-attr]
    ]
    if len(defs) < 2:
        return None
    return Diagnostic(defs[1], f"redefinition of symbol '@{name}' (first defined at {location_of(defs[0])})")


def parse_error_text(error: ParseError, line_offset: int) -> str:
    """`file:line:col: error: message`, then the source line with carets under the span."""
    span = error.span
    loc = span.get_location()
    context = span.print_with_context(None).splitlines()[1:]
    if not context or not context[0].strip():  # the span is on an empty line (end of input)
        context = []
    message = error.msg
    if "{first_char}" in message:  # xDSL's lexer leaves this placeholder unformatted
        message = message.replace("{first_char}", f"'{span.text[:1]}'")
    if message.startswith(" in "):  # xDSL's bare context messages, e.g. " in block definition"
        message = f"unexpected '{span.text}'{message}"
    lines = [f"{loc.file}:{loc.line + line_offset}:{loc.col}: error: {message}", *context]
    return "\n".join(line for line in lines if line.strip())


def empty_pipeline_entry(pipeline: str) -> str | None:
    """The error for an empty entry of a pass pipeline (`nn-to-coda,,cse`, a trailing comma),
    naming its position; None when every entry names a pass. xDSL accepts a trailing comma
    silently (issue 34)."""
    if not pipeline.strip():
        return None  # no pipeline at all
    depth, quote, start, entry = 0, False, 0, 1
    for i, ch in enumerate(pipeline + ","):
        if ch == '"':
            quote = not quote
        elif quote:
            continue
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth <= 0:
            if not pipeline[start:i].strip():
                return f"empty entry #{entry} at column {start + 1} of '{pipeline}': expected a pass name between commas"
            start, entry = i + 1, entry + 1
    return None


def pipeline_error_text(error: BaseException) -> str:
    """One line from xDSL's multi-line pipeline error (header, `pass-pipeline:1:COL`, the spec,
    a caret line, the message)."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    if len(lines) >= 4 and lines[1].startswith("pass-pipeline:"):
        column = lines[1].rsplit(":", 1)[-1]
        return f"{lines[-1].strip()} at column {column} of '{lines[2].strip()}'"
    return " ".join(line.strip() for line in lines)
