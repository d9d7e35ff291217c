"""Located diagnostics: `file:line:col: error: 'op.name' op message`.

xDSL keeps an op's source location only when the text spells `loc(...)`, so the parser here
records where each op starts. Verification walks the IR itself so that the failing op (and
not only a dump of the whole module) is named in the message.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import FileLineColLoc, IntAttr, ModuleOp, StringAttr, UnknownLoc
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import DiagnosticException, VerifyException


class CompilerError(Exception):
    """A located error raised by a pass or the lowering about a specific op."""

    def __init__(self, op: Operation | None, message: str):
        super().__init__(message)
        self.diagnostic = Diagnostic(op, message)

    def __str__(self) -> str:
        return str(self.diagnostic)


class LocatingParser(Parser):
    """A Parser that stamps every parsed op with a FileLineColLoc of where it starts."""

    def __init__(self, *args, line_offset: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self._line_offset = line_offset

    def parse_operation(self) -> Operation:
        start = self._current_token.span
        op = super().parse_operation()
        if isinstance(op.location, UnknownLoc):
            line, column = _line_col(start.input.content, start.start)
            op.location = FileLineColLoc(
                StringAttr(start.input.name), IntAttr(line + self._line_offset), IntAttr(column)
            )
        return op


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
        return f"{location_of(self.op)}: {self.severity}: {subject}{self.message}"


def _clean(error: Exception) -> str:
    cause = error.__cause__ if isinstance(error, DiagnosticException) and error.__cause__ else error
    text = str(cause.args[0]) if cause.args else str(cause)
    text = text.removeprefix("Operation does not verify: ")
    return text.strip().splitlines()[0] if text.strip() else type(cause).__name__


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
        except (VerifyException, DiagnosticException) as error:
            diagnostics.append(Diagnostic(op, _clean(error)))
            failed.add(id(op))
    return diagnostics


def _children(op: Operation):
    for region in op.regions:
        for block in region.blocks:
            yield from block.ops
