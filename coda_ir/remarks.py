"""Optimization remarks: why a rewrite did not fire.

`emit_remark(op, message)` prints `file:line:col: remark: 'op.name' op message` on stderr
(the location is the op's, or its nearest located ancestor's, like every coda-ir diagnostic).
With `as_error=True`, or while the module-level switch `REMARKS_AS_ERRORS` is on, it raises a
`CompilerError` instead: the `remarks-as-errors` option of the passes, for users who want a
build to fail when something they expected to fuse did not.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

from xdsl.ir import Operation

from coda_ir.diagnostics import CompilerError, Diagnostic

REMARKS_AS_ERRORS = False
"""Module-level switch: every remark raises a CompilerError while it is on."""

PRINT_REMARKS = True
"""Module-level switch: remarks go to stderr while it is on (they are recorded either way)."""

EMITTED: list[str] = []
"""Every remark printed in this process, in order (tests and the Python API read it)."""


def emit_remark(op: Operation | None, message: str, *, as_error: bool = False, informational: bool = False) -> None:
    """`informational`: the remark reports a choice between two complete plans (nothing the
    user asked for was lost), so `remarks-as-errors` does not turn it into an error."""
    if not informational and (as_error or REMARKS_AS_ERRORS):
        raise CompilerError(op, message)
    text = str(Diagnostic(op, message, severity="remark"))
    EMITTED.append(text)
    if PRINT_REMARKS:
        print(text, file=sys.stderr)


@contextmanager
def remarks_as_errors(enabled: bool = True):
    global REMARKS_AS_ERRORS
    previous = REMARKS_AS_ERRORS
    REMARKS_AS_ERRORS = enabled or previous
    try:
        yield
    finally:
        REMARKS_AS_ERRORS = previous


@contextmanager
def printed_remarks(enabled: bool):
    """Print remarks on stderr while inside (`enabled`) or only record them in `EMITTED`: a
    library that compiles on a user's behalf (`coda_ir.torch.from_hf`) keeps the user's stderr
    for what they asked to see."""
    global PRINT_REMARKS
    previous = PRINT_REMARKS
    PRINT_REMARKS = enabled
    try:
        yield
    finally:
        PRINT_REMARKS = previous
