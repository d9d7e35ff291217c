"""`coda-opt`: the coda-ir driver, in the manner of `mlir-opt` / `xdsl-opt`.

It parses `.mlir` (a file or stdin), verifies, runs a pass pipeline (`-p`) and prints the
result through a target (`-t`). Bad input never produces a Python traceback: parse and
verification errors are printed as `file:line:col: error: 'op' op message` and the exit
status is 1 (with `--verify-diagnostics` they go to stdout and the exit status is 0, so that
FileCheck tests can pin them).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from io import StringIO

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import PassPipeline
from xdsl.printer import Printer
from xdsl.utils.arg_spec import parse_pipeline
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError, VerifyException
from xdsl.xdsl_opt_main import xDSLOptMain

from coda_ir.context import coda_passes, universe_dialects
from coda_ir.errors import ArgumentError
from coda_ir.diagnostics import (
    CompilerError,
    Diagnostic,
    InputError,
    LocatingParser,
    decode_source,
    parse_error_text,
    empty_pipeline_entry,
    pipeline_error_text,
    verify_module,
)

DESCRIPTION = """\
coda-opt: parse, verify, transform and lower coda-ir programs.

Input is MLIR text using the `nn` dialect (tensor-level Transformer operators) and/or the
`coda` dialect (GEMM + epilogue kernels), with builtin/func/arith/math.

{listing}
Examples:
  coda-opt examples/llama_block.mlir
  coda-opt examples/llama_block.mlir -p nn-to-coda -t triton > llama_block.py
  coda-opt tests.mlir --split-input-file --verify-diagnostics
"""


_FALLBACK_HELP = {
    "cse": "Common subexpression elimination (xDSL).",
    "dce": "Dead code elimination (xDSL).",
}


def _first_doc_line(name: str, factory: Callable[[], type]) -> str:
    try:
        cls = factory()
    except Exception as error:  # a broken optional component must not break --help
        return f"(unavailable: {error})"
    doc = (cls.__doc__ or "").strip()
    if not doc or doc.startswith(f"{cls.__name__}("):  # dataclasses invent a signature docstring
        return _FALLBACK_HELP.get(name, "")
    return doc.splitlines()[0]


def describe_passes_and_targets() -> str:
    """The `--help` listing, generated from the pass and target registries."""
    from coda_ir.lowering import targets

    lines = ["Passes (-p, comma separated, options in braces, e.g. -p 'nn-to-coda{remarks-as-errors=true}'):"]
    for name, factory in sorted(coda_passes().items()):
        lines.append(f"  {name:<22}{_first_doc_line(name, factory)}")
    lines.append("")
    lines.append("Targets (-t, options in braces, e.g. -t 'io-report{gpu=h200}'):")
    lines.append(f"  {'mlir':<22}print the IR (default; --print-op-generic for the generic form)")
    for name, factory in sorted(targets.TARGETS.items()):
        lines.append(f"  {name:<22}{_first_doc_line(name, factory)}")
    return "\n".join(lines) + "\n"


class CodaOptMain(xDSLOptMain):
    version_format = "coda-opt (coda-ir 0.1.0, xdsl {xdsl_version})"

    def __init__(self, args: list[str] | None = None):
        super().__init__(description=DESCRIPTION.format(listing=describe_passes_and_targets()), args=args)

    def register_all_dialects(self):
        for name, factory in universe_dialects().items():
            self.ctx.register_dialect(name, factory)  # type: ignore[arg-type]

    def register_all_passes(self):
        for name, factory in coda_passes().items():
            self.register_pass(name, factory)

    def register_all_targets(self):
        super().register_all_targets()
        from coda_ir.lowering import targets

        for name, factory in targets.TARGETS.items():
            self.available_targets[name] = factory
        for name in list(self.available_targets):
            if name not in ("mlir", *targets.TARGETS):
                del self.available_targets[name]

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser):
        super().register_all_arguments(arg_parser)
        arg_parser.formatter_class = argparse.RawDescriptionHelpFormatter
        # Usage errors (unknown target, bad option) are one line and exit status 1, like
        # every other bad-input error, instead of argparse's usage dump and status 2.
        arg_parser.error = _usage_error  # type: ignore[method-assign]
        arg_parser.add_argument(
            "--debug-traceback",
            action="store_true",
            help="on an internal error, show the Python traceback (for coda-ir developers)",
        )

    def parse_chunk(self, chunk, file_extension: str, start_offset: int = 0) -> ModuleOp | None:
        text = chunk.read()
        if isinstance(text, bytes):
            text = decode_source(text, self.get_input_name(), start_offset)
        parser = LocatingParser(self.ctx, text, self.get_input_name(), line_offset=start_offset)
        return parser.parse_module(not self.args.no_implicit_module)

    def get_input_stream(self):
        # coda-opt has one frontend: read any file (`x.mlir`, `x.txt`, a lit `%t`) as MLIR.
        stream, extension = super().get_input_stream()
        return stream, extension if extension in self.available_frontends else "mlir"

    def setup_pipeline(self):
        empty = empty_pipeline_entry(self.args.passes)
        if empty is not None:
            raise ValueError(f"invalid pass pipeline: {empty}")
        if not self.args.passes.strip():
            self.args.passes = ""  # `-p ' '`: no passes, as with the Python API
        unknown = [spec.name for spec in parse_pipeline(self.args.passes) if spec.name not in self.available_passes]
        if unknown:
            raise ValueError(
                f"unknown pass '{unknown[0]}' (available: {', '.join(sorted(self.available_passes))})"
            )
        verify_between = not self.args.disable_verify
        start = time.perf_counter()

        def callback(previous_pass, module, next_pass):
            nonlocal start
            if self.args.time_passes and previous_pass is not None:
                print(f"Pass {previous_pass.name} took {time.perf_counter() - start} seconds")
            if verify_between and previous_pass is not None:
                diagnostics = verify_module(module)
                if diagnostics:
                    raise _Diagnostics(diagnostics, after=previous_pass.name)
            if previous_pass and next_pass and self.args.print_between_passes:
                print(f"IR after {previous_pass.name}:")
                Printer(stream=sys.stdout, print_generic_format=self.args.print_op_generic).print_op(module)
                print("\n\n")
            start = time.perf_counter()

        try:
            self.pipeline = PassPipeline.parse_spec(self.available_passes, self.args.passes, callback)
        except ValueError as error:  # bad pass options, e.g. -p 'cse{nope=1}'
            raise ValueError(f"invalid pass pipeline '{self.args.passes}': {error}") from None

    def run(self):  # noqa: C901 - one place that turns every failure into a diagnostic
        chunks, file_extension = self.prepare_input()
        output = StringIO()
        failed = False
        for i, (chunk, offset) in enumerate(chunks):
            if i > 0:
                output.write("// -----\n")
            try:
                module = self.parse_chunk(chunk, file_extension, offset)
                if module is None:
                    continue
                if not self.args.disable_verify:
                    diagnostics = verify_module(module)
                    if diagnostics:
                        raise _Diagnostics(diagnostics)
                self.apply_passes(module)
                output.write(self.output_resulting_program(module))
            except ParseError as error:
                failed |= self._report(output, [parse_error_text(error, offset)])
            except InputError as error:
                failed |= self._report(output, [str(error)])
            except RecursionError:
                failed |= self._report(
                    output,
                    [f"{self.get_input_name()}: error: the program nests too deeply to process "
                     f"(beyond Python's recursion limit of {sys.getrecursionlimit()})"],
                )
            except _Diagnostics as error:
                failed |= self._report(output, [str(d) for d in error.diagnostics])
            except CompilerError as error:
                failed |= self._report(output, [str(error)])
            except (VerifyException, DiagnosticException) as error:
                failed |= self._report(output, [str(Diagnostic(None, _first_line(error)))])
            finally:
                chunk.close()
        stream = self.prepare_output()
        stream.write(output.getvalue())
        stream.flush()
        if stream is not sys.stdout:
            stream.close()
        if failed:
            sys.exit(1)

    def _report(self, output: StringIO, lines: list[str]) -> bool:
        """Print diagnostics; return whether they make the run fail.

        With --verify-diagnostics (parse errors included, so --parsing-diagnostics is implied)
        they are expected: they go to the output in place of the chunk's IR, so that each
        chunk's diagnostic sits between its `// -----` separators, and the run succeeds.
        """
        if self.args.verify_diagnostics:
            for line in lines:
                output.write(line + "\n")
            return False
        for line in lines:
            print(line, file=sys.stderr)
        return True


class _Diagnostics(Exception):
    def __init__(self, diagnostics: list[Diagnostic], after: str | None = None):
        super().__init__("\n".join(map(str, diagnostics)))
        self.diagnostics = diagnostics
        if after is not None:
            for d in diagnostics:
                d.message += f" (after pass '{after}')"


def _first_line(error: Exception) -> str:
    text = str(error.__cause__ or error)
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__


def _usage_error(message: str) -> None:
    print(f"coda-opt: error: {message} (see coda-opt --help)", file=sys.stderr)
    sys.exit(1)


def main(argv: list[str] | None = None) -> None:
    try:
        CodaOptMain(args=argv).run()
    except SystemExit:
        raise
    except ArgSpecParseError as error:
        print(f"coda-opt: error: invalid pass pipeline: {pipeline_error_text(error)}", file=sys.stderr)
        sys.exit(1)
    except BrokenPipeError:  # `coda-opt ... | head`: the reader left; stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except OSError as error:  # missing input, a directory, an unwritable -o file
        if error.filename is not None and error.strerror:
            print(f"coda-opt: error: cannot open '{error.filename}': {error.strerror}", file=sys.stderr)
        else:
            print(f"coda-opt: error: {error}", file=sys.stderr)
        sys.exit(1)
    except (ValueError, ArgumentError) as error:  # a bad pass option is bad input, not a bug
        print(f"coda-opt: error: {error}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as error:  # an internal bug, not bad input: say so without a traceback
        if os.environ.get("CODA_DEBUG") or "--debug-traceback" in sys.argv:
            raise
        print(
            f"coda-opt: internal error: {type(error).__name__}: {error}\n"
            "(this is a bug in coda-ir; rerun with --debug-traceback for details)",
            file=sys.stderr,
        )
        sys.exit(2)


if __name__ == "__main__":
    main()
