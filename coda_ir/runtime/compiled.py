"""Run generated Triton modules: loading, caching, argument checks and small launch helpers.

* Generated modules call `check_arguments`, `device_of`, `launch_elementwise` and
  `launch_fold` from here (GEMM kernels go through `gemm_launch.launch_gemm`).
* `CompiledModule` (returned by `coda_ir.compile`) holds the source. The source is written
  once to a cache directory named by its content hash (`RuntimeConfig.cache_dir`, else
  `~/.cache/coda-ir`) and imported from there with importlib, so Triton can read the kernels'
  source. Whether kernels run compiled (GPU) or interpreted (CPU) is decided per call from
  the tensors' device: `@triton.jit` reads `TRITON_INTERPRET` when a kernel is decorated, so
  the module is imported lazily, once per mode, with the variable set accordingly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import torch

# `@triton.jit` picks interpreter or compiler when a function is decorated, Triton's own
# standard library (tl.sum, tl.cdiv, ...) included, when `triton.language` is first imported.
# On a machine without a GPU kernels can only be interpreted: say so before Triton loads.
from coda_ir.runtime import config as runtime_config  # noqa: E402

if "triton.language" not in sys.modules:
    runtime_config.interpret_by_default(torch.cuda.is_available())

import triton  # noqa: E402,F401  (Triton loads here, after the interpreter default above)

# ============================================================================ used by generated code


from coda_ir.errors import ArgumentError, CodaError, internal_error  # noqa: E402  (ArgumentError: re-exported)
from coda_ir import tiling  # noqa: E402
from coda_ir.tiling import ElementwiseConfig  # noqa: E402
from coda_ir.runtime.gemm_launch import GluonMainloop  # noqa: E402,F401  (generated launches name it)


@dataclass(frozen=True)
class Rows:
    """A signature's extent of `per` times the call's row count (a module with `#coda.rows`):
    any `per * M` with M >= 1, the same M for every argument of the call."""

    per: int = 1

    def __repr__(self) -> str:
        return "M" if self.per == 1 else f"{self.per}M"


def row_count(shapes: Sequence[Sequence[int]], signature: Sequence[tuple[str, tuple, torch.dtype]]) -> int | None:
    """The row count M the first row extent of `shapes` gives (None: the signature has none, or
    that extent is no whole multiple)."""
    for shape, (_, expected, _) in zip(shapes, signature):
        for got, want in zip(shape, expected):
            if isinstance(want, Rows):
                return got // want.per if got % want.per == 0 and got >= want.per else None
    return None


def _resolved(shape: Sequence[object], rows: int | None) -> tuple:
    return tuple(d.per * rows if isinstance(d, Rows) and rows is not None else d for d in shape)


# Calls that passed `check_arguments`: (name, id(signature), (shape, dtype, device) per argument)
# -> (signature, row count). Its outcome depends on nothing else, so a call seen before skips the
# walk over the signature (a training step checks ~30 calls of 10-20 tensors: host time that
# leaves the GPU idle between short kernels). Bounded; the signature is held so its id stays its own.
_PASSED: dict[tuple, tuple[object, int | None]] = {}
_PASSED_LIMIT = 4096


def _call_key(name: str, args: Sequence[object], signature: object) -> tuple | None:
    """The memo key of a call (None: an argument that is not a tensor, or symbolic sizes)."""
    try:
        key = (name, id(signature), tuple([(a.shape, a.dtype, a.device) for a in args]))
        hash(key)
    except (AttributeError, TypeError):  # not a tensor; a SymInt extent (tracing) is unhashable
        return None
    if not all(isinstance(a, torch.Tensor) for a in args):
        return None
    return key


def check_arguments(name: str, args: Sequence[object], signature: Sequence[tuple[str, tuple, torch.dtype]]) -> int | None:
    """Raise `ArgumentError` unless `args` are real (not meta) tensors of the signature's shapes
    and dtypes, all on one device that can run kernels (CPU: Triton's interpreter, or CUDA).
    A `Rows` extent takes any multiple of the call's row count, read from the first of them;
    returns that row count (None: the signature has no row extent). A call of shapes, dtypes
    and devices that passed before returns its row count at once (`_PASSED`)."""
    if torch.compiler.is_compiling():  # Dynamo traces the checks themselves, not a cache of them
        return _check_arguments(name, args, signature)
    key = _call_key(name, args, signature)
    if key is not None:
        seen = _PASSED.get(key)
        if seen is not None and seen[0] is signature:
            return seen[1]
    rows = _check_arguments(name, args, signature)
    if key is not None:
        if len(_PASSED) >= _PASSED_LIMIT:
            _PASSED.clear()
        _PASSED[key] = (signature, rows)
    return rows


def _check_arguments(name: str, args: Sequence[object], signature: Sequence[tuple[str, tuple, torch.dtype]]) -> int | None:
    _check_devices(name, args)
    if len(args) != len(signature):
        expected = ", ".join(f"{n}: {_describe(s, d)}" for n, s, d in signature)
        raise ArgumentError(f"{name}() takes {len(signature)} tensors ({expected}), got {len(args)}")
    device = None
    rows: int | None = None
    dynamic = any(isinstance(d, Rows) for _, shape, _ in signature for d in shape)
    if dynamic:
        first = next((i, a) for i, (a, (_, shape, _)) in enumerate(zip(args, signature)) if any(isinstance(d, Rows) for d in shape))
        if isinstance(first[1], torch.Tensor):
            rows = row_count([tuple(a.shape) if isinstance(a, torch.Tensor) else () for a in args], signature)
            if rows is None or rows < 1:
                pname, shape, dtype = signature[first[0]]
                raise ArgumentError(
                    f"{name}(): argument #{first[0]} '{pname}' must be {_describe(shape, dtype)} with M >= 1 rows, "
                    f"got {_describe(tuple(first[1].shape), first[1].dtype)}", pname)
    for i, (arg, (pname, shape, dtype)) in enumerate(zip(args, signature)):
        if not isinstance(arg, torch.Tensor):
            raise ArgumentError(f"{name}(): argument #{i} '{pname}' must be a torch.Tensor, got {type(arg).__name__}", pname)
        if dynamic:
            shape = _resolved(shape, rows)
        if tuple(arg.shape) != tuple(shape) or arg.dtype != dtype:
            raise ArgumentError(
                f"{name}(): argument #{i} '{pname}' must be {_describe(shape, dtype)}, "
                f"got {_describe(tuple(arg.shape), arg.dtype)}",
                pname,
            )
        if device is None:
            device = arg.device
        elif arg.device != device:
            raise ArgumentError(f"{name}(): argument #{i} '{pname}' is on {arg.device}, the others on {device}", pname)
    return rows


def check_seq_len(name: str, seq_len: object, rows: int | None) -> int:
    """The `seq_len=` of a function whose attention takes the call's sequence length: an int
    >= 1 that divides the row count (the rows are whole sequences)."""
    if isinstance(seq_len, bool) or not isinstance(seq_len, int):
        raise ArgumentError(f"{name}() takes the sequence length as seq_len=<int> (its attention's sequences), "
                            f"got {type(seq_len).__name__}", "seq_len")
    if seq_len < 1 or (rows is not None and rows % seq_len):
        raise ArgumentError(f"{name}(): seq_len = {seq_len} must be >= 1 and divide the {rows} rows", "seq_len")
    return seq_len


class UnknownFunctionError(ArgumentError, AttributeError):
    """`kernel_count` of a function the module does not have: an `ArgumentError`, and still the
    `AttributeError` it used to be."""


def _check_devices(name: str, args: Sequence[object]) -> None:
    for i, arg in enumerate(args):
        if isinstance(arg, torch.Tensor) and arg.device.type not in ("cpu", "cuda"):
            what = "a meta tensor (shape only, no data)" if arg.device.type == "meta" else f"a tensor on {arg.device}"
            raise ArgumentError(f"{name}(): argument #{i} must be a CPU or CUDA tensor with data, got {what}", f"#{i}")


def check_indices(name: str, args: Sequence[object], checks: Sequence[IndexCheck]) -> None:
    """The run-time checks PyTorch makes on integer inputs: a cross-entropy target outside
    `[0, V)` that is not the ignore index raises, never gives a number. (A host check: one
    reduction per checked argument before the kernels launch.)"""
    for check in checks:
        t = args[check.arg]
        assert isinstance(t, torch.Tensor)
        bad = (t < 0) | (t >= check.limit)
        if check.ignore is not None:
            bad &= t != check.ignore
        if bool(bad.any()):
            row = int(bad.nonzero()[0, 0])
            value = int(t[row])
            allowed = f"[0, {check.limit})" + (f" or the ignore index {check.ignore}" if check.ignore is not None else "")
            raise ArgumentError(
                f"{name}(): argument #{check.arg} '{check.arg_name}' holds {value} at row {row}, "
                f"expected {check.what} in {allowed} ({check.op} at {check.location})",
                check.arg_name,
            )


_INDICES = threading.local()


@contextlib.contextmanager
def indices_checked() -> Iterator[None]:
    """Within it, compiled functions skip their host index checks (`check_indices`: each a
    device-to-host sync, which stalls the GPU queue): the caller vouches that every index
    argument is in range, having checked it itself (from_hf checks a step's ids and labels
    once, up front) or because it is a saved copy of one a forward call checked (the backward
    of `coda_ir.torch.function`). Thread-local."""
    before = getattr(_INDICES, "checked", False)
    _INDICES.checked = True
    try:
        yield
    finally:
        _INDICES.checked = before


def indices_are_checked() -> bool:
    return getattr(_INDICES, "checked", False)


@dataclass(frozen=True)
class IndexCheck:
    """Argument `arg` of a function holds indices that must lie in `[0, limit)` (or equal
    `ignore`): recorded by `coda_ir.compile` from the nn program (cross-entropy targets)."""

    arg: int
    arg_name: str
    limit: int
    ignore: int | None
    op: str
    location: str
    what: str = "targets"


def _describe(shape: Sequence[object], dtype: torch.dtype) -> str:
    dims = "x".join(map(str, shape)) if len(shape) else "0-d"
    return f"{dims} {str(dtype).removeprefix('torch.')}"


def device_of(args: Sequence[torch.Tensor]) -> torch.device:
    if args:
        return args[0].device
    return torch.device("cuda") if torch.cuda.is_available() and not interpreting() else torch.device("cpu")


def interpreting() -> bool:
    return runtime_config.interpreting()


cdiv = tiling.cdiv  # the generated host code's tile counts (`_rt.cdiv`)


def elementwise_config(M: int, N: int, bn_multiple_of: int = 1, width_multiple: int = 1) -> ElementwiseConfig:
    """The tile of a coda.elementwise kernel in this process's mode (`coda_ir.tiling`)."""
    return tiling.elementwise_config(M, N, bn_multiple_of, width_multiple=width_multiple, interpreting=interpreting())


def whole_elementwise_config(M: int, N: int, whole: str, bn_multiple_of: int = 1) -> ElementwiseConfig:
    return tiling.whole_elementwise_config(M, N, whole, bn_multiple_of, interpreting=interpreting())


def fixed_gemm_config(bm: int, bn: int, bk: int, warps: int, stages: int):
    """The GemmConfig of a `#coda.config` (no autotuning); the TMA path where it can run."""
    return tiling.config_from_attr({"bm": bm, "bn": bn, "bk": bk, "warps": warps, "stages": stages},
                                   tma=not interpreting())


def launch_elementwise(
    kernel,
    extra_args_for: Callable[[ElementwiseConfig], Sequence[object]],
    *,
    M: int,
    N: int,
    bn_multiple_of: int = 1,
    whole: str | None = None,
    width_multiple: int = 1,
    config: ElementwiseConfig | None = None,
) -> tuple[ElementwiseConfig, Sequence[object]]:
    """Launch a `coda.elementwise` kernel over the tiles of an M x N space (`whole`: "rows"
    or "cols" for one program per row or column block, walking the other axis in order;
    `width_multiple`: its widest tile in column tiles, which sizes its warps)."""
    spec = elementwise_launch(extra_args_for, M=M, N=N, bn_multiple_of=bn_multiple_of, whole=whole,
                              width_multiple=width_multiple, config=config)
    kernel[(spec.programs,)](*spec.args, **spec.constexprs, num_warps=spec.num_warps)
    return spec.config, spec.extra


@dataclass
class LaunchSpec:
    """One kernel's share of a launch: its program count, runtime arguments and constexprs
    (in the kernel's parameter order), warps, and the tensors it returns."""

    programs: int
    args: list[object]
    constexprs: dict[str, int]
    num_warps: int
    results: tuple[object, ...]
    config: ElementwiseConfig | None = None
    extra: list[object] | None = None


def elementwise_launch(
    extra_args_for: Callable[[ElementwiseConfig], Sequence[object]],
    *,
    M: int,
    N: int,
    bn_multiple_of: int = 1,
    whole: str | None = None,
    width_multiple: int = 1,
    config: ElementwiseConfig | None = None,
    n_inputs: int = 0,
) -> LaunchSpec:
    """What launching a `coda.elementwise` kernel takes (`extra`: its inputs then outputs;
    `results`: the outputs, after the inputs given by `extra_args_for`)."""
    if config is None:
        config = (whole_elementwise_config(M, N, whole, bn_multiple_of) if whole
                  else elementwise_config(M, N, bn_multiple_of, width_multiple))
    extra = list(extra_args_for(config))
    if whole == "rows":
        programs = tiling.cdiv(M, config.bm)
    elif whole == "cols":
        programs = tiling.cdiv(N, config.bn)
    else:
        programs = tiling.cdiv(M, config.bm) * tiling.cdiv(N, config.bn)
    return LaunchSpec(
        programs, [*extra, M, N], {"BM": config.bm, "BN": config.bn}, config.num_warps,
        tuple(extra[n_inputs:]), config, extra,
    )


def launch_group(kernel, members: Sequence[LaunchSpec]) -> tuple[LaunchSpec, ...]:
    """Launch a `coda.launch_group` kernel: one grid holding every member's programs, in member
    order; the kernel takes the members' arguments, then the running program-count ends, then
    the members' constexprs (suffixed with the member index). Warps: the most any member asks."""
    args: list[object] = []
    ends: list[int] = []
    constexprs: dict[str, int] = {}
    total = 0
    for i, spec in enumerate(members):
        args += spec.args
        total += spec.programs
        ends.append(total)
        constexprs.update({f"{k}_{i}": v for k, v in spec.constexprs.items()})
    warps = max(spec.num_warps for spec in members)
    kernel[(total,)](*args, *ends, **constexprs, num_warps=warps)
    return tuple(members)


def launch_fold(
    kernel,
    partials: Sequence[torch.Tensor],
    inputs: Sequence[torch.Tensor],
    outputs: Sequence[torch.Tensor],
    *,
    L: int,
    sums: bool,
) -> tuple[torch.Tensor, ...]:
    """Launch a `coda.fold` row kernel: one program per block of rows (see `fold_launch`)."""
    spec = fold_launch(partials, inputs, outputs, L=L, sums=sums)
    kernel[(spec.programs,)](*spec.args, **spec.constexprs, num_warps=spec.num_warps)
    return spec.results


def fold_blocks(L: int, tiles: int) -> tuple[int, int, int]:
    """(rows per program, tile lanes, programs) of a fold over L rows of `tiles` partials each
    (`tiling.fold_config`)."""
    block, lanes = tiling.fold_config(L, tiles)
    return block, lanes, tiling.cdiv(L, block)


def fold_launch(
    partials: Sequence[torch.Tensor],
    inputs: Sequence[torch.Tensor],
    outputs: Sequence[torch.Tensor],
    *,
    L: int,
    sums: bool,
) -> LaunchSpec:
    """What launching a `coda.fold` kernel takes. Rank-0 results (`sums`) add a float64 buffer
    of per-program totals and a zeroed ticket counter (the last program to finish folds them)."""
    tiles = [p.shape[1] for p in partials]
    block, lanes, programs = fold_blocks(L, max(tiles, default=1))
    stage: list[object] = []
    pb = 1
    if sums:
        device = outputs[0].device
        n_sums = sum(1 for o in outputs if o.dim() == 0)
        work = torch.empty(programs * n_sums, dtype=torch.float64, device=device)
        ticket = torch.zeros(1, dtype=torch.int32, device=device)
        stage = [work, ticket, programs]
        pb = tiling.pow2_at_least(programs)
    return LaunchSpec(programs, [*partials, *inputs, *outputs, L, *tiles, *stage],
                      {"BLOCK": block, "BT": lanes, "PB": pb}, 4, tuple(outputs))


# ============================================================================ loading and caching


def cache_dir() -> Path:
    path = runtime_config.current().cache_root()
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.touch()
    except OSError:
        path = Path(tempfile.gettempdir()) / "coda-ir-cache"
        path.mkdir(parents=True, exist_ok=True)
    return path


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:24]


def write_source(source: str) -> Path:
    """Write `source` to the cache under its content hash (atomically; reused when present)."""
    digest = source_hash(source)
    path = cache_dir() / f"coda_{digest}.py"
    if not path.exists() or path.read_text() != source:
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".py.tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    return path


interpret_mode = runtime_config.interpreter
"""(the runtime's one interpreter switch, `runtime/config.py`; launch helpers read it at call time too)"""


_LOCK = threading.RLock()
_STDLIB_SWAPS: dict[tuple[int, bool], object] = {}
_MISSING = object()
_INTERPRETED_IN_PROCESS = False
"""Set once a call has run under Triton's interpreter: from then on every call of this process
switches modes under `_LOCK` (the interpreter mutates `triton.language` while it runs)."""


@contextlib.contextmanager
def stdlib_mode(interpret: bool) -> Iterator[None]:
    """Make Triton's standard-library jit functions match the mode of this call.

    They were decorated once, in the mode of the first import of `triton.language`; when a call
    needs the other mode (CPU tensors in a GPU process, or the reverse) they are swapped for
    the duration of the call. Callers hold `_LOCK` for the whole call (see `triton_mode`)."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    wrong = JITFunction if interpret else InterpretedFunction
    modules = {id(m): m for m in (tl, tl.core, tl.standard, tl.math, getattr(tl, "random", None)) if m is not None}
    saved: list[tuple[object, str, object]] = []
    with _LOCK:
        for module in modules.values():
            for name, value in list(vars(module).items()):
                if isinstance(value, wrong):
                    key = (id(value), interpret)
                    swapped = _STDLIB_SWAPS.get(key)
                    if swapped is None:
                        swapped = InterpretedFunction(value.fn) if interpret else JITFunction(value.fn)
                        _STDLIB_SWAPS[key] = swapped
                    saved.append((module, name, value))
                    setattr(module, name, swapped)
    try:
        yield
    finally:
        with _LOCK:
            for module, name, value in saved:
                setattr(module, name, value)


def _language_objects() -> list[object]:
    """The modules and classes of `triton.language` whose attributes the interpreter patches."""
    import triton.language as tl

    candidates = (tl, tl.core, tl.math, getattr(tl, "standard", None), tl.tensor, getattr(tl, "condition", None),
                  tl.dtype, getattr(tl.core, "tensor_descriptor_base", None))
    unique = {id(obj): obj for obj in candidates if obj is not None}
    return list(unique.values())


@contextlib.contextmanager
def restored_language() -> Iterator[None]:
    """Undo whatever the interpreter leaves patched in `triton.language`.

    The interpreter swaps `triton.language` builtins for numpy-backed ones while a kernel runs,
    and a device function called from an interpreted kernel (`InterpretedFunction.__call__`,
    e.g. `tl.cdiv`) patches them again without restoring (Triton 3.6 and 3.9): a later GPU
    compile in the same process then fails inside `tl.cdiv`. Snapshot and restore."""
    snapshots = [(obj, dict(vars(obj))) for obj in _language_objects()]
    try:
        yield
    finally:
        for obj, before in snapshots:
            now = dict(vars(obj))
            # names the interpreter adds stay: its rewritten (cached) functions read some of them
            # as globals of triton.language modules (e.g. `interpreter_semantic`)
            for name, value in before.items():
                if now.get(name, _MISSING) is not value:
                    with contextlib.suppress(AttributeError, TypeError):
                        setattr(obj, name, value)


def _range_probe(n):
    # an interpreted kernel's loop over a runtime bound: Python's range() asks the bound's
    # __index__, as the generated whole-row kernels do (`range(0, tl.cdiv(N, BN))`)
    import triton.language as tl

    total = 0
    for i in range(0, tl.cdiv(n, 1)):
        total += i


def _index_of_one_element(t) -> int:
    """An interpreted scalar's index: `.item()` of its numpy data (one element, any rank)."""
    return int(t.handle.data.item())


_INDEX_COMPAT: list[bool] = []
"""Empty until the first interpreted call checks; then [True] where the interpreter's scalar
`__index__` was replaced (see `interpreter_index_compat`), else [False]."""


def _range_probe_fails() -> bool:
    from triton.runtime.interpreter import InterpretedFunction

    try:
        InterpretedFunction(_range_probe)[(1,)](3)
    except Exception as error:  # the interpreter wraps the TypeError in its InterpreterError
        return "0-dimensional arrays" in repr(error) or "0-dimensional arrays" in repr(error.__cause__)
    return False


def interpreter_index_compat() -> bool:
    """Make `range()` over a runtime scalar work in Triton's interpreter under NumPy >= 2.4.

    Triton's interpreter up to 3.6 converts a scalar to an index with `int()` of its 1-element
    numpy array, which NumPy >= 2.4 refuses ("only 0-dimensional arrays can be converted to
    Python scalars", triton-lang/triton#9171; later Triton squeezes the array first): every
    interpreted kernel with a loop over a runtime bound then fails -- on the lent GPU machine
    (Triton 3.6, NumPy 2.5) any CPU tensor run through a compiled program did. Checked once per
    process, with a probe kernel, under the caller's `_LOCK`: where the probe fails that way, the
    `__index__` the interpreter installs on `tl.tensor` for each kernel run becomes
    `.item()`-based (the same conversion on the one-element arrays it is meant for), and the
    probe must then pass. Returns whether the replacement is in place."""
    if _INDEX_COMPAT:
        return _INDEX_COMPAT[0]
    from triton.runtime import interpreter

    scope = getattr(interpreter, "_LangPatchScope", None)
    fixed = False
    if scope is not None and _range_probe_fails():
        original = scope.set_attr

        def set_attr(self, obj, name, value):
            original(self, obj, name, _index_of_one_element if name == "__index__" else value)

        scope.set_attr = set_attr
        fixed = not _range_probe_fails()
        if not fixed:
            scope.set_attr = original
    _INDEX_COMPAT.append(fixed)
    return fixed


def _stdlib_is_interpreted() -> bool:
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(getattr(tl.standard, "cdiv", None), InterpretedFunction)


@contextlib.contextmanager
def triton_mode(interpret: bool) -> Iterator[None]:
    """Run one call of generated code in the right Triton mode, thread-safely.

    A process that only ever compiles for the GPU takes no lock and swaps nothing. Once a call
    is interpreted (CPU tensors), calls switch the environment variable, the standard library
    and `triton.language` under one lock held for the whole call, so a GPU compile never sees
    the interpreter's patches, whichever thread runs it."""
    global _INTERPRETED_IN_PROCESS
    if not interpret and not _INTERPRETED_IN_PROCESS and not _stdlib_is_interpreted():
        yield
        return
    with _LOCK:
        if interpret:
            _INTERPRETED_IN_PROCESS = True
        with interpret_mode(interpret), stdlib_mode(interpret):
            if interpret:
                with restored_language():
                    interpreter_index_compat()
                    yield
            else:
                yield


@contextlib.contextmanager
def _quiet_numpy(interpret: bool) -> Iterator[None]:
    """The interpreter evaluates with numpy: log(0) = -inf and exp overflow are intended (masked
    lanes of lse partials), not worth a RuntimeWarning."""
    if not interpret:
        yield
        return
    import numpy as np

    with np.errstate(divide="ignore", over="ignore", invalid="ignore", under="ignore"):
        yield


_MODULES: dict[tuple[str, bool], ModuleType] = {}


def load_module(source: str, interpret: bool, digest: str | None = None) -> ModuleType:
    """Import generated source (cached by content hash and mode); `digest` is `source_hash(source)`
    where the caller already has it."""
    key = (digest or source_hash(source), interpret)
    with _LOCK:
        module = _MODULES.get(key)
        if module is not None:
            return module
        path = write_source(source)
        mod_name = f"coda_generated_{key[0]}_{'interp' if interpret else 'gpu'}"
        spec = importlib.util.spec_from_file_location(mod_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        with interpret_mode(interpret):
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[mod_name]
                raise
        _MODULES[key] = module
        return module


def _wants_interpreter(args: Sequence[object]) -> bool:
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return arg.device.type == "cpu"
    return not torch.cuda.is_available()


class CompiledModule:
    """The result of `coda_ir.compile`: `.source`, `.<function>(*tensors)`, `.kernel_count(name)`.

    Calling a function with CPU tensors runs its kernels through the Triton interpreter; with
    CUDA tensors they are compiled for the GPU.
    """

    def __init__(
        self,
        source: str,
        kernel_counts: dict[str, int],
        ir: object | None = None,
        index_checks: dict[str, list[IndexCheck]] | None = None,
        seq_len_functions: Sequence[str] = (),
        ir_text: str | None = None,
    ):
        self.source = source
        self._kernel_counts = dict(kernel_counts)
        # the source's hash, taken once: hashing a block's module costs ~0.15 ms, which every call
        # would otherwise pay on the host before its first launch (a string, so the object still copies)
        self._source_digest = source_hash(source)
        self._ir = ir
        self._ir_text = ir_text  # a cached compile's IR, printed: parsed when `ir` is first read
        self.index_checks = dict(index_checks or {})  # per function: integer inputs checked before launch
        self._seq_len_functions = frozenset(seq_len_functions)

    @property
    def ir(self) -> object | None:
        """The coda-level xDSL ModuleOp that was lowered (for inspection; a module read from the
        compile cache parses its printed IR here, on first use)."""
        if self._ir is None and self._ir_text is not None:
            import coda_ir

            self._ir = coda_ir.parse(self._ir_text, "<compile cache>")
        return self._ir

    def takes_seq_len(self, name: str) -> bool:
        """Whether the compiled `name` takes its attention's sequence length (`seq_len=`)."""
        return name in self._seq_len_functions

    def to_entry(self) -> dict:
        """This module as the compile cache stores it (JSON: sources, counts, checks, printed IR)."""
        return {"source": self.source, "kernel_counts": self._kernel_counts,
                "index_checks": {name: [dataclasses.asdict(c) for c in checks] for name, checks in self.index_checks.items()},
                "seq_len_functions": sorted(self._seq_len_functions),
                "ir": self._ir_text if self._ir is None else (str(self._ir) if self._ir is not None else None)}

    @classmethod
    def from_entry(cls, entry: dict) -> "CompiledModule":
        """The inverse of `to_entry` (its IR parsed only when read)."""
        return cls(entry["source"], entry["kernel_counts"], None,
                   {name: [IndexCheck(**c) for c in checks] for name, checks in entry["index_checks"].items()},
                   entry["seq_len_functions"], entry["ir"])

    @property
    def functions(self) -> list[str]:
        return list(self._kernel_counts)

    @property
    def path(self) -> Path:
        """Where the generated source lives in the cache."""
        return write_source(self.source)

    def kernel_count(self, name: str) -> int:
        """The number of GPU kernel launches one call of `name` makes."""
        try:
            return self._kernel_counts[name]
        except (KeyError, TypeError):
            raise UnknownFunctionError(
                f"kernel_count(): argument 'name': expected one of the functions ({', '.join(self._kernel_counts)}), got {name!r}",
                "name",
            ) from None

    def module(self, interpret: bool) -> ModuleType:
        return load_module(self.source, interpret, digest=self._source_digest)

    def __getattr__(self, name: str):
        if name.startswith("__") or name not in self.__dict__.get("_kernel_counts", {}):
            raise AttributeError(
                f"compiled module has no function '{name}' "
                f"(functions: {', '.join(self.__dict__.get('_kernel_counts', {}))})"
            )

        def call(*args, **kwargs):
            sizes = {"seq_len": kwargs.pop("seq_len")} if "seq_len" in kwargs else {}
            if kwargs:
                raise ArgumentError(
                    f"{name}() takes its tensors by position (in the function's argument order), "
                    f"got keyword argument(s) {', '.join(map(repr, kwargs))}",
                    next(iter(kwargs)),
                )
            # a function owning its arguments (`coda.owned`) takes them in one list, which it empties
            listed = len(args) == 1 and isinstance(args[0], list)
            tensors = args[0] if listed else args
            _check_devices(name, tensors)  # before loading: a meta tensor must not reach Triton's driver lookup
            interpret = _wants_interpreter(tensors)
            entry = entries.get(interpret)
            if entry is None:
                try:
                    module = self.module(interpret)
                except CodaError:
                    raise
                except Exception as error:
                    raise internal_error(error, f"loading the generated module for @{name}") from error
                entry = entries[interpret] = (getattr(module, name), getattr(module, f"_OWNED_{name}", None),
                                              getattr(module, f"_SIG_{name}"), getattr(module, f"_SEQ_LEN_{name}", False))
            host, owned, signature, takes_seq_len = entry
            if owned is not None and not listed:
                raise ArgumentError(
                    f"{name}() owns its argument(s) {', '.join(map(str, owned))} (coda.owned): pass all its tensors "
                    f"in one list, which it empties (got {len(args)} positional argument(s))"
                )
            if owned is None:
                tensors = args  # positional, as before (a list is no tensor: check_arguments says so)
            rows = check_arguments(name, tensors, signature)
            if not takes_seq_len and sizes:
                raise ArgumentError(f"{name}() takes its tensors by position (in the function's argument order), "
                                    "got keyword argument(s) 'seq_len' (its attention has a static sequence length)",
                                    "seq_len")
            if takes_seq_len:
                if "seq_len" not in sizes:
                    raise ArgumentError(f"{name}() takes the sequence length of its attention as seq_len=<int> "
                                        "(its module's row count is a run-time one, #coda.rows)", "seq_len")
                check_seq_len(name, sizes["seq_len"], rows)
            if not indices_are_checked():
                check_indices(name, tensors, self.index_checks.get(name, ()))
            try:
                with triton_mode(interpret), _quiet_numpy(interpret):
                    return host(tensors, **sizes) if owned is not None else host(*tensors, **sizes)
            except CodaError:
                raise
            except torch.cuda.OutOfMemoryError:
                raise  # a resource limit, not bad input and not a bug
            except Exception as error:
                raise internal_error(error, f"running @{name}") from error

        entries: dict[bool, tuple] = {}  # interpreted or not -> the loaded host function and its facts
        call.__name__ = name
        call.__doc__ = f"Run @{name} ({self._kernel_counts[name]} kernel launches)."
        self.__dict__[name] = call  # found as an attribute from now on: built once per function
        return call

    def __dir__(self):
        return [*super().__dir__(), *self._kernel_counts]

    def __repr__(self) -> str:
        return f"<CompiledModule functions={self.functions}>"
