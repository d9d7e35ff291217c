"""The errors of coda-ir's public API: one hierarchy, rooted at `CodaError`.

    CodaError
     +-- CompileError    bad program: every message line names the op and its source location
     |                   (`file:line:col: error: 'nn.rms_norm' op ...`); bad files and nesting
     |                   deeper than the parser can follow are reported here too
     +-- ArgumentError   a bad argument to a public function: a compiled function's tensors
     |                   (count, shape, dtype, device, meta tensors, keyword arguments, target
     |                   ids out of range), `compile`'s `source` / `pipeline` arguments, builder
     |                   calls; the message names the argument, what was expected and what came
     +-- InternalError   a bug of coda-ir itself, never bad input: the message says so and the
                         original exception is chained as `__cause__`

`InternalError` is deliberately a `CodaError` subclass, so that `except coda_ir.CodaError`
catches everything coda-ir raises; tell input errors from bugs with
`isinstance(e, (CompileError, ArgumentError))` or `isinstance(e, InternalError)`.

For compatibility with code written before this hierarchy, `CompileError` is also a
`ValueError` and `ArgumentError` a `TypeError` (what they were), `InternalError` a
`RuntimeError`. This module imports nothing heavy (no torch, triton or xDSL).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["CodaError", "CompileError", "ArgumentError", "InternalError", "internal_error"]


class CodaError(Exception):
    """The base of every error coda-ir's Python API raises."""


class CompileError(CodaError, ValueError):
    """A bad program: each line of the message names the op and its source location.

    `messages` holds those lines (one per diagnostic)."""

    def __init__(self, messages: Sequence[str] | str):
        if isinstance(messages, str):
            messages = [messages]
        self.messages = list(messages)
        super().__init__("\n".join(self.messages))


class ArgumentError(CodaError, TypeError):
    """A bad argument to a public function: the message names the argument, what was expected
    and what was given. `argument` is the argument's name (or `None` when the call as a whole
    is wrong, e.g. the number of tensors)."""

    def __init__(self, message: str, argument: str | None = None):
        super().__init__(message)
        self.argument = argument


class InternalError(CodaError, RuntimeError):
    """A bug of coda-ir itself (not bad input). The original exception is the `__cause__`."""


def internal_error(error: BaseException, doing: str) -> InternalError:
    """Wrap an unexpected exception raised while `doing` something (e.g. "lowering @f")."""
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    wrapped = InternalError(
        f"internal error while {doing}: {type(error).__name__}: {first}\n"
        "(this is a bug in coda-ir, not a problem with the input; please report it)"
    )
    wrapped.__cause__ = error
    return wrapped
