"""The one place coda-ir reads (or writes) the process environment (issue 34).

Every setting is otherwise explicit: pass options for the compiler (`gpu=...` on the planning
passes), one `coda_ir.runtime.config.RuntimeConfig` for the runtime, arguments of the Python API
(`coda_ir.compile(..., remarks=True)`). The environment only supplies the runtime's *defaults*,
read once when the runtime first asks (`runtime_settings`), and two switches other programs own:

    CODA_CACHE_DIR          RuntimeConfig.cache_dir: generated modules and the autotune cache
                            (default ~/.cache/coda-ir)
    CODA_AUTOTUNE           RuntimeConfig.autotune: 1 (default) shared, full, 0 off
    CODA_AUTOTUNE_PROGRESS  RuntimeConfig.autotune_progress: 0 silences the tuning lines
    CODA_COMPILE_CACHE      RuntimeConfig.compile_cache: 0 compiles every program (no reads or writes
                            of compiled programs in the cache directory)
    TRITON_INTERPRET        Triton's own switch between its interpreter and the compiler: read and
                            set here only (`triton_interprets`, `set_triton_interpret`), because
                            Triton reads it itself when a kernel is decorated or launched
    CODA_DEBUG              coda-opt shows the traceback of an internal error (`debug_tracebacks`)

Tests and tools may read their own variables (`CODA_TEST_DEVICE`, ...); the library does not.
(The generated Triton modules' prelude reads `TRITON_INTERPRET` once when the runtime imports
them, inside the interpreter switch: generated code, text in `lowering/triton.py`.)
"""

from __future__ import annotations

import os

TRITON_INTERPRET = "TRITON_INTERPRET"


def runtime_settings() -> dict[str, str | None]:
    """The runtime's environment defaults, by RuntimeConfig field (None: not set)."""
    return {
        "cache_dir": os.environ.get("CODA_CACHE_DIR") or None,
        "autotune": os.environ.get("CODA_AUTOTUNE"),
        "autotune_progress": os.environ.get("CODA_AUTOTUNE_PROGRESS"),
        "compile_cache": os.environ.get("CODA_COMPILE_CACHE"),
    }


def triton_interprets() -> bool:
    """Whether Triton runs kernels in its interpreter now (`TRITON_INTERPRET` set, not 0)."""
    return os.environ.get(TRITON_INTERPRET, "0") not in ("", "0")


def triton_interpret_value() -> str | None:
    """`TRITON_INTERPRET` as it is (None: unset), to restore it after a switch."""
    return os.environ.get(TRITON_INTERPRET)


def set_triton_interpret(value: str | None) -> None:
    """Set `TRITON_INTERPRET` to `value` ("1", "0"), or unset it (None)."""
    if value is None:
        os.environ.pop(TRITON_INTERPRET, None)
    else:
        os.environ[TRITON_INTERPRET] = value


def debug_tracebacks() -> bool:
    """`CODA_DEBUG`: coda-opt re-raises internal errors with their traceback."""
    return bool(os.environ.get("CODA_DEBUG"))
