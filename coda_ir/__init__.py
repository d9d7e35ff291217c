"""coda-ir: fuse the memory-bound operators of Transformer blocks into GEMM epilogues.

The public Python API:

* `coda_ir.compile(source, pipeline="nn-to-coda") -> CompiledModule`: `source` is an xDSL
  `ModuleOp`, `.mlir` text, or a path to a `.mlir` file. The result has `.source` (the
  emitted Triton module), `.<function>(*tensors)` (runs it: CPU tensors through the Triton
  interpreter, CUDA tensors on the GPU) and `.kernel_count(name)`.
* `coda_ir.builder`: build coda kernels and nn graphs from Python (`FunctionBuilder`).
* `coda_ir.CompileError`: raised for bad input, naming the op and its source location;
  `coda_ir.ArgumentError`: a compiled function called with wrong tensors (count, shape, dtype).

Heavy dependencies (torch, triton) are imported on first use so that `coda-opt` stays quick.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from xdsl.dialects.builtin import ModuleOp

    from coda_ir.builder import FunctionBuilder, KernelBuilder
    from coda_ir.lowering.runtime import CompiledModule

__all__ = ["compile", "lower", "parse", "CompiledModule", "CompileError", "ArgumentError", "FunctionBuilder", "KernelBuilder", "builder"]


class CompileError(ValueError):
    """Bad input to `coda_ir.compile`: every line names the op and its source location."""

    def __init__(self, messages: list[str]):
        super().__init__("\n".join(messages))
        self.messages = messages


def _looks_like_path(text: str) -> bool:
    return "\n" not in text and "{" not in text and len(text) < 4096 and os.path.exists(text)


def parse(source: object, name: str = "<input>") -> ModuleOp:
    """An xDSL ModuleOp from a ModuleOp (cloned), `.mlir` text, or a path, verified."""
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.utils.exceptions import ParseError

    from coda_ir.tools.coda_opt import _parse_error_text, make_context
    from coda_ir.tools.diagnostics import LocatingParser, verify_module

    if isinstance(source, ModuleOp):
        module = source.clone()
    else:
        if isinstance(source, os.PathLike) or (isinstance(source, str) and _looks_like_path(source)):
            name = os.fspath(source)  # type: ignore[arg-type]
            with open(name) as f:
                text = f.read()
        elif isinstance(source, str):
            text = source
        else:
            raise TypeError(f"coda_ir.compile takes a ModuleOp, .mlir text or a path, got {type(source).__name__}")
        try:
            module = LocatingParser(make_context(), text, name).parse_module()
        except ParseError as error:
            raise CompileError([_parse_error_text(error, 0)]) from None
    diagnostics = verify_module(module)
    if diagnostics:
        raise CompileError([str(d) for d in diagnostics])
    return module


def _has_nn_ops(module: ModuleOp) -> bool:
    return any(op.name.startswith("nn.") for op in module.walk())


def lower(module: ModuleOp, pipeline: str | None = "nn-to-coda") -> ModuleOp:
    """Run `pipeline` (comma-separated pass names, options in braces) in place, verifying after."""
    from xdsl.passes import PassPipeline

    from coda_ir.tools.coda_opt import coda_passes, make_context
    from coda_ir.tools.diagnostics import CompilerError, verify_module

    if not pipeline:
        return module
    available = coda_passes()
    names = [p.split("{")[0].strip() for p in pipeline.split(",")]
    if not _has_nn_ops(module) and names == ["nn-to-coda"]:
        return module  # already coda: the default pipeline has nothing to do
    if any(n not in available for n in names):
        missing = [n for n in names if n not in available]
        if _has_nn_ops(module):
            raise CompileError([f"<pipeline>: error: pass(es) {', '.join(missing)} are not registered; "
                                "cannot lower nn ops without them"])
        return module
    try:
        PassPipeline.parse_spec(available, pipeline).apply(make_context(), module)
    except CompilerError as error:
        raise CompileError([str(error)]) from None
    diagnostics = verify_module(module)
    if diagnostics:
        raise CompileError([f"{d} (after pipeline '{pipeline}')" for d in diagnostics])
    return module


def compile(source: object, pipeline: str | None = "nn-to-coda") -> CompiledModule:  # noqa: A001
    """Parse, verify, run `pipeline`, emit Triton; returns a `CompiledModule`."""
    from coda_ir.lowering.runtime import CompiledModule
    from coda_ir.lowering.triton import emit_module, kernel_counts
    from coda_ir.tools.diagnostics import CompilerError

    module = lower(parse(source), pipeline)
    leftover = [op for op in module.walk() if op.name.startswith("nn.")]
    if leftover:
        from coda_ir.tools.diagnostics import Diagnostic

        raise CompileError(
            [str(Diagnostic(op, "nn op left after the pipeline: only coda kernels can be lowered to Triton")) for op in leftover[:5]]
        )
    try:
        source_text = emit_module(module)
    except CompilerError as error:
        raise CompileError([str(error)]) from None
    return CompiledModule(source_text, kernel_counts(module), module)


def __getattr__(name: str):
    if name in ("CompiledModule", "ArgumentError"):
        from coda_ir.lowering import runtime

        return getattr(runtime, name)
    if name in ("FunctionBuilder", "KernelBuilder"):
        from coda_ir import builder

        return getattr(builder, name)
    if name == "builder":
        import importlib

        return importlib.import_module("coda_ir.builder")
    raise AttributeError(f"module 'coda_ir' has no attribute '{name}'")
