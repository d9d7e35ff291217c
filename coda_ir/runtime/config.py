"""`RuntimeConfig`: everything that configures running compiled modules, in one explicit object.

    autotune            "shared" (default): the first kernel of a GEMM shape and mainloop tunes and
                        the others of its tuning group take its choice; "full": every kernel tunes
                        on its own; "off": the first candidate, no tuning
    autotune_progress   a line on stderr when a launch tunes (long work); False: silent
    cache_dir           generated modules, compiled programs and `autotune.json` (None:
                        ~/.cache/coda-ir, else a temporary directory where that is not writable)
    donate_saved        eager backward calls that do not keep the graph hand their saved tensors to
                        the compiled backward, which frees each after its last reader and may store
                        an output over one computed only for it (`coda_ir.torch.function`; False: the
                        saved tensors live until the backward returns, every output a fresh buffer,
                        bitwise the same results; `set_donation` sets it)
    deferred_tuning     a GEMM of a new bucket of token counts whose tile the IO model inferred
                        (`gemm_launch`: no tuning in the middle of a step) is tuned after a few
                        dozen launches, one such tuning at a time; False: the inferred tile stays
    compile_cache       keep compiled programs in the cache directory and read them back instead
                        of running the passes again (`runtime/compile_cache.py`: a second run of a
                        training script, a bucket of token counts compiled before); False: compile
    launch              `LaunchOptions`: how `launch_gemm` picks its path and tile candidates
    launch_plans        keep one launch plan per launch key and reuse it (False: re-derive every
                        call, for A/B timing of host overhead)

`current()` is the configuration in force: until `configure(...)` sets one, the defaults above
with the environment's overrides (`coda_ir.environment`, read once, the library's one place that
reads it). `using(config)` sets one for a block. The interpreter switch is `interpreter(enabled)`:
Triton reads `TRITON_INTERPRET` itself, so the context sets it (through `coda_ir.environment`)
for the calls inside and restores it after.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from coda_ir import environment, tiling
from coda_ir.errors import ArgumentError

AUTOTUNE_MODES = ("shared", "full", "off")


@dataclass(frozen=True)
class LaunchOptions:
    """How `launch_gemm` picks its path and tile candidates (experiments and tests; the
    defaults are what production runs use).

    `path`: "auto" (TMA where it can run on a GPU, portable under the interpreter), "tma"
    (TMA wherever the operands allow, the interpreter included) or "portable".
    `tma_candidates`: indices into `tiling.TMA_CANDIDATES` to tune over instead of all of them (a
    diagnostic: fewer compiles; also drops the paired-B variants of interleaved kernels), or
    None for the full list.
    `repitch_min_macs`: a 16-bit operand whose rows do not start 16 bytes apart (a row of an odd
    width: Granite's 49155-token vocabulary) is copied into storage of aligned rows before a gemm
    of at least this many multiply-adds (M*N*K) runs, where the TMA path could then run (on a GPU,
    or with `path="tma"`): TMA and cuBLAS's fast kernels need 16-byte row strides, and without them
    the gemm ran on the portable path / cuBLAS's `align1` kernels at 3-5x the time (H200, 2026-11-28:
    the LM head of a Granite step, 21 ms of 49). The copy reads and writes the operand once.
    """

    path: str = "auto"
    tma_candidates: tuple[int, ...] | None = None
    repitch_min_macs: int = 1 << 30

    def __post_init__(self) -> None:
        if self.path not in ("auto", "tma", "portable"):
            raise ValueError(f"launch path must be auto, tma or portable, got {self.path!r}")
        if self.tma_candidates is not None:
            for i in self.tma_candidates:
                if not 0 <= i < len(tiling.TMA_CANDIDATES):
                    raise ValueError(f"TMA candidate index {i} out of range 0..{len(tiling.TMA_CANDIDATES) - 1}")


@dataclass(frozen=True)
class RuntimeConfig:
    """The runtime's configuration (module docstring: each field)."""

    autotune: str = "shared"
    autotune_progress: bool = True
    cache_dir: Path | None = None
    compile_cache: bool = True
    deferred_tuning: bool = True
    donate_saved: bool = True
    launch: LaunchOptions = field(default_factory=LaunchOptions)
    launch_plans: bool = True

    def __post_init__(self) -> None:
        if self.autotune not in AUTOTUNE_MODES:
            raise ArgumentError(f"RuntimeConfig(): argument 'autotune': expected one of {', '.join(AUTOTUNE_MODES)}, "
                                f"got {self.autotune!r}", "autotune")
        if not isinstance(self.launch, LaunchOptions):
            raise ArgumentError(f"RuntimeConfig(): argument 'launch': expected a LaunchOptions, got "
                                f"{type(self.launch).__name__}", "launch")
        if self.cache_dir is not None and not isinstance(self.cache_dir, Path):
            object.__setattr__(self, "cache_dir", Path(self.cache_dir))

    @staticmethod
    def from_environment() -> RuntimeConfig:
        """The defaults with the environment's overrides (`coda_ir.environment` names them)."""
        found = environment.runtime_settings()
        tune = (found["autotune"] if found["autotune"] is not None else "1").strip().lower()
        progress = found["autotune_progress"]
        cache = found.get("compile_cache")
        return RuntimeConfig(
            compile_cache=cache is None or cache.strip() not in ("0", ""),
            autotune="off" if tune in ("0", "") else "full" if tune == "full" else "shared",
            autotune_progress=progress is None or progress.strip() not in ("0", ""),
            cache_dir=Path(found["cache_dir"]) if found["cache_dir"] else None,
        )

    def cache_root(self) -> Path:
        """Where the caches live (not created here: `compiled.cache_dir` probes it)."""
        return self.cache_dir if self.cache_dir is not None else Path.home() / ".cache" / "coda-ir"


_LOCK = threading.Lock()
_CURRENT: RuntimeConfig | None = None


def current() -> RuntimeConfig:
    """The configuration in force (first call: `RuntimeConfig.from_environment()`)."""
    global _CURRENT
    if _CURRENT is None:
        with _LOCK:
            if _CURRENT is None:
                _CURRENT = RuntimeConfig.from_environment()
    return _CURRENT


def configure(config: RuntimeConfig | None = None, **fields) -> RuntimeConfig:
    """Put `config` in force (or the current one with `fields` replaced); returns the previous
    one, to restore it with `configure(previous)`."""
    global _CURRENT
    if config is not None and fields:
        raise TypeError("pass a RuntimeConfig or keyword fields, not both")
    before = current()
    _CURRENT = config if config is not None else dataclasses.replace(before, **fields)
    return before


@contextlib.contextmanager
def using(config: RuntimeConfig | None = None, **fields) -> Iterator[RuntimeConfig]:
    """`configure` for the duration of a block."""
    before = configure(config, **fields)
    try:
        yield current()
    finally:
        configure(before)


def interpreting() -> bool:
    """Whether kernels launched now run in Triton's interpreter."""
    return environment.triton_interprets()


@contextlib.contextmanager
def interpreter(enabled: bool) -> Iterator[None]:
    """Run the block's launches in Triton's interpreter (True) or compiled (False); the one
    switch between them (the runtime's callers hold `compiled._LOCK` around it)."""
    before = environment.triton_interpret_value()
    environment.set_triton_interpret("1" if enabled else "0")
    try:
        yield
    finally:
        environment.set_triton_interpret(before)


def interpret_by_default(cuda_available: bool) -> None:
    """Before Triton loads on a machine without a GPU: kernels can only be interpreted, and
    `@triton.jit` picks interpreter or compiler when Triton's own library is first imported."""
    if environment.triton_interpret_value() is None and not cuda_available:
        environment.set_triton_interpret("1")
