"""coda-ir: fuse the memory-bound operators of Transformer blocks into GEMM epilogues.

The public Python API:

* `coda_ir.compile(source, pipeline="nn-to-coda") -> CompiledModule`: `source` is an xDSL
  `ModuleOp`, `.mlir` text, or a path to a `.mlir` file. The result has `.source` (the
  emitted Triton module), `.<function>(*tensors)` (runs it: CPU tensors through the Triton
  interpreter, CUDA tensors on the GPU) and `.kernel_count(name)`.
* `coda_ir.builder`: build coda kernels and nn graphs from Python (`FunctionBuilder`).
* Errors (`coda_ir.errors`): everything raised for bad input is a `coda_ir.CodaError`:
  `CompileError` for programs (each line names the op and its source location),
  `ArgumentError` for arguments (a compiled function's tensors, `compile`'s source or pipeline,
  builder calls); `InternalError` (also a `CodaError`) is a bug of coda-ir, never bad input.

Heavy dependencies (torch, triton) are imported on first use so that `coda-opt` stays quick.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from coda_ir.errors import ArgumentError, CodaError, CompileError, InternalError, internal_error

__version__ = "0.1.0"

if TYPE_CHECKING:
    from xdsl.dialects.builtin import ModuleOp

    from coda_ir.builder import FunctionBuilder, KernelBuilder
    from coda_ir.runtime.compiled import CompiledModule

__all__ = [
    "compile",
    "lower",
    "parse",
    "CompiledModule",
    "CodaError",
    "CompileError",
    "ArgumentError",
    "InternalError",
    "FunctionBuilder",
    "KernelBuilder",
    "builder",
]


def _looks_like_path(text: str) -> bool:
    return "\n" not in text and "{" not in text and len(text) < 4096 and os.path.exists(text)


def _names_a_file(text: str) -> bool:
    """A one-line string that can only be meant as a path (`model.mlir`, `dir/x.mlir`)."""
    stripped = text.strip()
    return "\n" not in stripped and stripped.endswith(".mlir") and not any(c in stripped for c in "{}()%@\"")


def _read_source(name: str) -> str:
    try:
        with open(name, "rb") as f:
            data = f.read()
    except OSError as error:
        raise ArgumentError(
            f"compile(): argument 'source': expected .mlir text or a readable .mlir file, "
            f"got '{name}' ({error.strerror or error})",
            "source",
        ) from None
    return _decode(data, name)


def _decode(data: bytes, name: str) -> str:
    from coda_ir.diagnostics import InputError, decode_source

    try:
        return decode_source(data, name)
    except InputError as error:
        raise CompileError([str(error)]) from None


def _too_deep(name: str, doing: str) -> CompileError:
    return CompileError(
        [f"{name}: error: the program nests too deeply to {doing} (regions or attributes nested "
         f"beyond Python's recursion limit of {sys.getrecursionlimit()})"]
    )


def parse(source: object, name: str = "<input>") -> ModuleOp:
    """An xDSL ModuleOp from a ModuleOp (cloned), `.mlir` text (str or UTF-8 bytes), or a path,
    verified. Raises `CompileError` for a bad program, `ArgumentError` for a bad `source`."""
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.utils.exceptions import ParseError

    from coda_ir.context import make_context
    from coda_ir.diagnostics import parse_error_text
    from coda_ir.diagnostics import LocatingParser, verify_module

    if isinstance(source, ModuleOp):
        try:
            module = source.clone()
        except RecursionError:
            raise _too_deep(name, "copy") from None
    else:
        if isinstance(source, os.PathLike) or (isinstance(source, str) and _looks_like_path(source)):
            name = os.fspath(source)  # type: ignore[arg-type]
            if isinstance(name, bytes):
                name = name.decode(errors="replace")
            text = _read_source(name)
        elif isinstance(source, str):
            if _names_a_file(source):
                raise ArgumentError(
                    f"compile(): argument 'source': expected .mlir text or an existing file, got '{source.strip()}' "
                    "(no such file)",
                    "source",
                )
            text = source
        elif isinstance(source, (bytes, bytearray)):
            text = _decode(bytes(source), name)
        else:
            raise ArgumentError(
                f"compile(): argument 'source': expected an xDSL ModuleOp, .mlir text or a path, "
                f"got {type(source).__name__}",
                "source",
            )
        try:
            module = LocatingParser(make_context(), text, name).parse_module()
        except ParseError as error:
            raise CompileError([parse_error_text(error, 0)]) from None
        except RecursionError:
            raise _too_deep(name, "parse") from None
        except Exception as error:
            raise internal_error(error, f"parsing {name}") from error
    try:
        diagnostics = verify_module(module)
    except RecursionError:
        raise _too_deep(name, "verify") from None
    except Exception as error:
        raise internal_error(error, f"verifying {name}") from error
    if diagnostics:
        raise CompileError([str(d) for d in diagnostics])
    return module


def _has_nn_ops(module: ModuleOp) -> bool:
    return any(op.name.startswith("nn.") for op in module.walk())


def _pipeline_names(pipeline: str) -> list[str]:
    """The pass names of a pipeline spec; `ArgumentError` when it does not parse."""
    from xdsl.utils.arg_spec import parse_pipeline
    from xdsl.utils.exceptions import ArgSpecParseError

    from coda_ir.diagnostics import empty_pipeline_entry, pipeline_error_text

    empty = empty_pipeline_entry(pipeline)
    if empty is not None:
        raise ArgumentError(f"compile(): argument 'pipeline': invalid pass pipeline: {empty}", "pipeline")
    try:
        return [spec.name for spec in parse_pipeline(pipeline)]
    except (ArgSpecParseError, ValueError) as error:
        raise ArgumentError(
            f"compile(): argument 'pipeline': invalid pass pipeline '{pipeline}': {pipeline_error_text(error)}",
            "pipeline",
        ) from None


def lower(module: ModuleOp, pipeline: str | None = "nn-to-coda", *, remarks: bool = False) -> ModuleOp:
    """Run `pipeline` (comma-separated pass names, options in braces) in place, verifying after.

    `remarks=True` prints the passes' remarks (why a rewrite did not fire, which plan the IO
    model chose) on stderr; they are recorded in `coda_ir.remarks.EMITTED` either way.

    Raises `ArgumentError` for a bad pipeline (syntax, unknown pass, bad option), `CompileError`
    when a pass rejects the program, `InternalError` when a pass fails on its own."""
    from xdsl.passes import PassPipeline

    from coda_ir.context import coda_passes, make_context
    from coda_ir.diagnostics import CompilerError, verify_module

    if pipeline is not None and not isinstance(pipeline, str):
        raise ArgumentError(
            f"compile(): argument 'pipeline': expected a pass pipeline string or None, got {type(pipeline).__name__}",
            "pipeline",
        )
    if not pipeline or not pipeline.strip():
        return module
    available = coda_passes()
    names = _pipeline_names(pipeline)
    missing = [n for n in names if n not in available]
    if missing:
        raise ArgumentError(
            f"compile(): argument 'pipeline': pass(es) {', '.join(repr(n) for n in missing)} are not registered "
            f"(available: {', '.join(sorted(available))})",
            "pipeline",
        )
    if not _has_nn_ops(module) and names == ["nn-to-coda"]:
        return module  # already coda: the default pipeline has nothing to do
    try:
        parsed = PassPipeline.parse_spec(available, pipeline)
    except Exception as error:  # bad pass options, e.g. 'cse{nope=1}'
        raise ArgumentError(
            f"compile(): argument 'pipeline': invalid pass pipeline '{pipeline}': {str(error).strip().splitlines()[-1]}",
            "pipeline",
        ) from None
    from coda_ir.remarks import printed_remarks

    try:
        with printed_remarks(remarks):
            parsed.apply(make_context(), module)
        diagnostics = verify_module(module)
    except CompilerError as error:
        raise CompileError([str(error)]) from None
    except RecursionError:
        raise _too_deep("<input>", "transform") from None
    except CodaError:
        raise
    except Exception as error:
        raise internal_error(error, f"running pipeline '{pipeline}'") from error
    if diagnostics:  # the input verified, so a pass produced invalid IR: a bug of coda-ir
        raise InternalError(
            "\n".join(
                [f"internal error: pipeline '{pipeline}' produced invalid IR (this is a bug in coda-ir, not a problem with the input):"]
                + [str(d) for d in diagnostics[:10]]
            )
        )
    return module


def index_checks(module: ModuleOp) -> dict[str, list]:
    """Per function, the integer arguments whose values PyTorch would range-check at run time
    (cross-entropy targets, embedding ids): `CompiledModule` checks them before launching kernels."""
    from xdsl.dialects import func
    from xdsl.ir import BlockArgument

    from coda_ir.dialects import nn
    from coda_ir.runtime.compiled import IndexCheck
    from coda_ir.diagnostics import location_of

    checks: dict[str, list] = {}
    for fn in module.walk():
        if not isinstance(fn, func.FuncOp) or not fn.body.blocks:
            continue
        entry = fn.body.blocks[0]
        found: dict[int, IndexCheck] = {}
        for op in fn.walk():
            if isinstance(op, (nn.EmbeddingOp, nn.EmbeddingGradOp)):
                ids = op.ids
                if isinstance(ids, BlockArgument) and ids.block is entry:
                    rows = (op.w if isinstance(op, nn.EmbeddingOp) else op.result).type.get_shape()[0]  # type: ignore[union-attr]
                    found.setdefault(ids.index, IndexCheck(ids.index, ids.name_hint or f"arg{ids.index}", rows, None,
                                                           f"'{op.name}'", location_of(op), what="ids"))
                continue
            shard = nn.vocab_shard_of(op) if isinstance(op, (nn.CrossEntropyPartialsOp, nn.LinearCrossEntropyGradOp)) else None
            if not isinstance(op, (nn.CrossEntropyOp, nn.CrossEntropyFwdOp, nn.CrossEntropyGradOp)) and shard is None:
                continue
            t = op.targets
            if not (isinstance(t, BlockArgument) and t.block is entry):
                continue
            # a vocabulary shard's targets are ids in the whole vocabulary
            limit = shard[1] if shard is not None else op.logits.type.get_shape()[1]  # type: ignore[union-attr]
            if shard is None:  # padding columns past `classes` are no target's
                limit = nn.padded_classes(op, limit) or limit
            ignore = op.properties["ignore_index"].value.data  # type: ignore[union-attr]
            name = t.name_hint or f"arg{t.index}"
            found.setdefault(t.index, IndexCheck(t.index, name, limit, ignore, f"'{op.name}'", location_of(op)))
        if found:
            checks[fn.sym_name.data] = list(found.values())
    return checks


def compile(source: object, pipeline: str | None = "nn-to-coda", *, options=None, remarks: bool = False,  # noqa: A001
            name: str = "<input>") -> CompiledModule:
    """Parse, verify, run `pipeline`, emit Triton; returns a `CompiledModule`.

    `options`: a `coda_ir.lowering.pipeline.TritonOptions` (the Triton lowering's options, the
    same as `coda-opt -p 'coda-to-triton{...}'`'s), default: the production defaults.

    `remarks=True` prints the compiler's remarks on stderr (`coda-opt --remarks` does the same);
    off by default, they are recorded in `coda_ir.remarks.EMITTED` either way.

    `name`: the file name that diagnostics and remarks give for `source` text (a path names
    itself), e.g. the file the text was read or generated from.

    Every error is a `CodaError`: `CompileError` (bad program, located), `ArgumentError` (bad
    `source` or `pipeline`), `InternalError` (a bug of coda-ir)."""
    from coda_ir.runtime.compiled import CompiledModule
    from coda_ir.lowering.pipeline import lower_to_triton
    from coda_ir.lowering.triton import kernel_counts, lowered_functions, print_module, seq_len_functions
    from coda_ir.diagnostics import CompilerError

    if not isinstance(name, str):
        raise ArgumentError(f"compile(): argument 'name': expected a file name (str), got {type(name).__name__}", "name")
    module = parse(source, name)
    checks = index_checks(module)
    module = lower(module, pipeline, remarks=remarks)
    for name in list(checks):  # nn-autodiff's forward takes the same arguments
        checks.setdefault(f"{name}_fwd", checks[name])
    leftover = [op for op in module.walk() if op.name.startswith("nn.")]
    if leftover:
        from coda_ir.diagnostics import Diagnostic

        raise CompileError(
            [str(Diagnostic(op, "nn op left after the pipeline: only coda kernels can be lowered to Triton")) for op in leftover[:5]]
        )
    from coda_ir.remarks import printed_remarks

    try:
        if lowered_functions(module):  # the pipeline ended with coda-to-triton itself
            lowered = module
        else:
            with printed_remarks(remarks):  # coda-to-triton legalizes hand-written coda (remarks on splits)
                lowered = lower_to_triton(module, options)  # `module` keeps the coda program (+ records)
        source_text = print_module(lowered)
        counts = kernel_counts(lowered)
        seq_lens = seq_len_functions(lowered)
    except CompilerError as error:
        raise CompileError([str(error)]) from None
    except RecursionError:
        raise _too_deep("<input>", "emit") from None
    except CodaError:
        raise
    except Exception as error:
        raise internal_error(error, "emitting Triton") from error
    return CompiledModule(source_text, counts, module, checks, seq_lens)


def __getattr__(name: str):
    if name == "CompiledModule":
        from coda_ir.runtime import compiled

        return getattr(compiled, name)
    if name in ("FunctionBuilder", "KernelBuilder"):
        from coda_ir import builder

        return getattr(builder, name)
    if name == "builder":
        import importlib

        return importlib.import_module("coda_ir.builder")
    raise AttributeError(f"module 'coda_ir' has no attribute '{name}'")
