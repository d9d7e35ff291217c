"""`coda-opt`: the coda-ir driver, in the manner of `mlir-opt` / `xdsl-opt`.

It parses `.mlir` (a file or stdin), verifies, runs a pass pipeline (`-p`) and prints the
result through a target (`-t`). Bad input never produces a Python traceback: parse and
verification errors are printed as `file:line:col: error: 'op' op message` and the exit
status is 1 (with `--verify-diagnostics` they go to stdout and the exit status is 0, so that
FileCheck tests can pin them).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
import re
import sys
import textwrap
import time
from collections.abc import Callable
from io import StringIO

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import PassPipeline
from xdsl.printer import Printer
from xdsl.utils.arg_spec import parse_pipeline, parse_spec
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError, VerifyException
from xdsl.xdsl_opt_main import xDSLOptMain

from coda_ir.context import coda_passes, universe_dialects
from coda_ir.environment import debug_tracebacks
from coda_ir.targets import TARGETS
from coda_ir.errors import ArgumentError
from coda_ir.remarks import printed_remarks
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
  coda-opt --plan-hf config.json --tokens 8192 --gpu h100   # predict a training step, no GPU needed
"""


_FALLBACK_HELP = {
    "cse": "Common subexpression elimination (xDSL).",
    "dce": "Dead code elimination (xDSL).",
}


def _summary(name: str, cls: type) -> str:
    """The first sentence of a pass's or target's docstring, whole (its first paragraph
    unwrapped, up to the first full stop that ends a sentence)."""
    doc = inspect.cleandoc(cls.__doc__ or "")
    if not doc or doc.startswith(f"{cls.__name__}("):  # dataclasses invent a signature docstring
        return _FALLBACK_HELP.get(name, "")
    paragraph = " ".join(doc.split("\n\n")[0].split())
    match = re.search(r"(?<=[.!?])\s+(?=[A-Z`])", paragraph)
    return paragraph[: match.start()] if match else paragraph


def _options(cls: type) -> str:
    """`name=default ...` of a pass's or target's options (its dataclass fields), spelled as on
    the command line (hyphens)."""
    if not dataclasses.is_dataclass(cls):
        return ""
    shown = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        default = f.default
        if default is dataclasses.MISSING:
            text = "REQUIRED"
        elif isinstance(default, bool):
            text = str(default).lower()
        elif default == "":
            text = '""'
        else:
            text = str(default)
        shown.append(f"{f.name.replace('_', '-')}={text}")
    return " ".join(shown)


def _entry(name: str, factory: Callable[[], type], width: int) -> list[str]:
    try:
        cls = factory()
    except Exception as error:  # a broken optional component must not break --help
        return [f"  {name:<{width}}(unavailable: {error})"]
    indent = " " * (2 + width)
    lines = textwrap.wrap(_summary(name, cls), HELP_WIDTH, initial_indent=f"  {name:<{width}}",
                          subsequent_indent=indent, break_on_hyphens=False) or [f"  {name}"]
    options = _options(cls)
    if options:
        lines += textwrap.wrap(f"options: {options}", HELP_WIDTH, initial_indent=indent,
                               subsequent_indent=indent + "  ", break_on_hyphens=False, break_long_words=False)
    return lines


HELP_WIDTH = 100


def describe_passes_and_targets() -> str:
    """The `--help` listing, generated from the pass and target registries: every pass and
    target with the first sentence of its docstring and its options with their defaults."""
    passes = sorted(coda_passes().items())
    width = max(len(n) for n in [*dict(passes), *TARGETS, "mlir"]) + 2
    lines = ["Passes (-p, comma separated, options in braces, e.g. -p 'nn-to-coda{remarks-as-errors=true}'):"]
    for name, factory in passes:
        lines += _entry(name, factory, width)
    lines.append("")
    lines.append("Targets (-t, options in braces, e.g. -t 'io-report{gpu=h200}'):")
    lines.append(f"  {'mlir':<{width}}Print the IR (default; --print-op-generic for the generic form).")
    for name, factory in sorted(TARGETS.items()):
        lines += _entry(name, factory, width)
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
        for name, factory in TARGETS.items():
            self.available_targets[name] = factory
        for name in list(self.available_targets):
            if name not in ("mlir", *TARGETS):
                del self.available_targets[name]

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser):
        super().register_all_arguments(arg_parser)
        arg_parser.formatter_class = argparse.RawDescriptionHelpFormatter
        # Usage errors (unknown target, bad option) are one line and exit status 1, like
        # every other bad-input error, instead of argparse's usage dump and status 2.
        arg_parser.error = _usage_error  # type: ignore[method-assign]
        # xDSL lists the passes and targets as one comma-joined word that argparse wraps at
        # hyphens ("coda-\ninterleave"); the listing above has them, with what they do
        for action in arg_parser._actions:
            if action.dest == "passes":
                action.help = "comma-separated pass pipeline, options in braces (the passes are listed above)"
            elif action.dest == "target":
                action.help = "output target, options in braces (the targets are listed above; default: mlir)"
        arg_parser.add_argument(
            "--remarks",
            action="store_true",
            help="print the passes' remarks on stderr (why a rewrite did not fire, which plan the IO model "
            "chose); off by default, like coda_ir.compile(..., remarks=True)",
        )
        plan = arg_parser.add_argument_group(
            "plan a training step from a Hugging Face config (no input file, no GPU; coda_ir/torch/plan.py)")
        plan.add_argument(
            "--plan-hf",
            metavar="CONFIG.json",
            help="predict the forward + backward step of the causal LM this config.json describes: step time, "
            "tokens/s, the limit (plain GEMMs + attention), weights and activation memory, per GPU whose constants "
            "ship (h100, h200, a100); the model is built on the meta device and its from_hf programs are compiled "
            "and priced by the IO model and the attention model",
        )
        plan.add_argument("--tokens", type=int, default=8192, help="tokens per step (default 8192)")
        plan.add_argument("--seq-len", type=int, default=0,
                          help="tokens per sequence; --tokens must be a multiple (default: min(tokens, 4096))")
        plan.add_argument("--gpu", default="all", help="h100, h200, a100, a comma-separated list, or all (default)")
        plan.add_argument("--report", action="store_true",
                          help="after the summary, the whole model per GPU: each unit (embedding, decoder layers, head) "
                          "forward and backward in step order with its kernels (predicted time, HBM bytes, bound, the "
                          "name a profiler shows), the attention with its schedule and occupancy, the compile's recorded "
                          "choices (stored or recomputed, norm statistics, RoPE tables, logits chunking), totals times "
                          "the layer counts and the predicted peak memory")
        plan.add_argument("--svg", metavar="PATH",
                          help="write one SVG of the whole step (units as boxes with their kernels, each attention "
                          "step drawn as its own diagram with its schedule)")
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
        target = parse_spec(self.args.target)
        if target.name == "triton" and target.parameters:
            # the options moved with the lowering from the target to its pipeline (issue 34)
            raise ValueError(f"target 'triton' takes no options (got {', '.join(target.parameters)}): they are "
                             f"coda-to-triton's, e.g. -p 'coda-to-triton{{epilogue-subtile=256}}' -t triton")
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

    def apply_passes(self, prog: ModuleOp):
        super().apply_passes(prog)
        # `-t triton` prints tl / host IR and runs no pass: when the pipeline stopped at coda
        # kernels (`-p nn-to-coda -t triton`, or none on hand-written coda), the driver lowers
        # them with coda-to-triton's defaults, verified like any other pass.
        if parse_spec(self.args.target).name != "triton":
            return
        from coda_ir.lowering.pipeline import CodaToTritonPass
        from coda_ir.lowering.triton import is_lowered

        if not is_lowered(prog):
            CodaToTritonPass().apply(self.ctx, prog)
            if not self.args.disable_verify:
                diagnostics = verify_module(prog)
                if diagnostics:
                    raise _Diagnostics(diagnostics, after=CodaToTritonPass.name)

    def run(self):  # noqa: C901 - one place that turns every failure into a diagnostic
        if self.args.plan_hf:
            return self.run_plan()
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

    def run_plan(self) -> None:
        """`--plan-hf`: print the predicted training step of a config (coda_ir/torch/plan.py); bad
        input (file, config, GPU, token counts) is one located error line and exit status 1."""
        from coda_ir.errors import CodaError, InternalError
        from coda_ir.torch.plan import check_svg_path, format_plans, format_report, plan_from_config, write_svg

        gpus = None if self.args.gpu.strip().lower() == "all" else [g.strip() for g in self.args.gpu.split(",") if g.strip()]
        try:
            if self.args.svg is not None:
                check_svg_path(self.args.svg)  # before the minutes of compiling, not after
            plans = plan_from_config(self.args.plan_hf, self.args.tokens, self.args.seq_len or None, gpus)
            if self.args.svg is not None:
                write_svg(plans, self.args.svg)
        except InternalError:
            raise
        except CodaError as error:
            for line in str(error).splitlines():
                print(line if ": error: " in line else f"coda-opt: error: {line}", file=sys.stderr)
            sys.exit(1)
        stream = self.prepare_output()
        stream.write(format_plans(plans))
        if self.args.report:
            stream.write(format_report(plans))
        if self.args.svg is not None:
            stream.write(f"wrote {self.args.svg}\n")
        stream.flush()
        if stream is not sys.stdout:
            stream.close()

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
        tool = CodaOptMain(args=argv)
        with printed_remarks(tool.args.remarks):
            tool.run()
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
        if debug_tracebacks() or "--debug-traceback" in sys.argv:
            raise
        print(
            f"coda-opt: internal error: {type(error).__name__}: {error}\n"
            "(this is a bug in coda-ir; rerun with --debug-traceback for details)",
            file=sys.stderr,
        )
        sys.exit(2)


if __name__ == "__main__":
    main()
