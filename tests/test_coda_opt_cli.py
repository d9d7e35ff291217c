"""`tools/coda-opt` as a user runs it: exit codes, and never a Python traceback for bad input.

ARCHITECTURE.md: every diagnostic names the op and its source location; coda-opt exits
non-zero on any error and never prints a traceback for bad input. Here: status 0 for good
input, 1 for bad input or a bad command line (2 is reserved for internal errors, i.e. bugs),
and stderr is the diagnostic, located, and nothing else.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "coda-opt"

LOCATED = re.compile(r"^(stdin|\S+\.mlir):(\d+):(\d+): error: \S")

# One function (so that no proper prefix of the text is itself a complete program) using nn
# ops, a coda gemm with every kind of region and a fold with a finalize region.
VALID = """\
func.func @block(%x: tensor<16x32xbf16>, %w: tensor<64x32xbf16>, %g: tensor<64xbf16>, %pos: tensor<16xi32>, %nw: tensor<32xbf16>) -> (tensor<16x32xbf16>, tensor<16x64xbf16>, tensor<f32>) {
  %h = "nn.rms_norm"(%x, %nw) <{eps = 1.0e-06 : f32}> : (tensor<16x32xbf16>, tensor<32xbf16>) -> tensor<16x32xbf16>
  %r = nn.rope %h, %pos {head_dim = 16 : i64, rotary_heads = 2 : i64, theta = 1.0e+04 : f32, style = "half"} : tensor<16x32xbf16>, tensor<16xi32> -> tensor<16x32xbf16>
  %y, %s = coda.gemm %x, %w transpose_b interleave 16 config #coda.config<bm = 16, bn = 64, bk = 32, warps = 4, stages = 2> ins(%g : tensor<64xbf16>) : tensor<16x32xbf16>, tensor<64x32xbf16> -> (tensor<16x64xbf16>, !coda.partials<rows, 16, lse>) {
  ^bb0(%acc: !coda.tile<16x64xf32>, %g_: tensor<64xbf16>):
    %0 = coda.scale %acc, %g_ cols : !coda.tile<16x64xf32>, tensor<64xbf16>
    %1 = coda.map %0 : !coda.tile<16x64xf32> -> !coda.tile<16x64xf32> {
    ^bb0(%v: f32):
      %e = math.exp %v : f32
      coda.yield %e : f32
    }
    %2 = coda.pair_map stride 2 %1 : !coda.tile<16x64xf32> -> !coda.tile<16x64xf32> {
    ^bb0(%a: f32, %b: f32):
      coda.yield %b, %a : f32, f32
    }
    %3 = coda.reduce lse %2 dim 1 : !coda.tile<16x64xf32> -> !coda.partials<rows, 16, lse>
    coda.yield %2, %3 : !coda.tile<16x64xf32>, !coda.partials<rows, 16, lse>
  }
  %loss = coda.fold %s : !coda.partials<rows, 16, lse> -> tensor<f32> {
  ^bb0(%l: f32):
    coda.yield %l : f32
  } finalize {
  ^bb0(%t: f32):
    %n = arith.constant 1.600000e+01 : f32
    %m = arith.divf %t, %n : f32
    coda.yield %m : f32
  }
  func.return %r, %y, %loss : tensor<16x32xbf16>, tensor<16x64xbf16>, tensor<f32>
}"""


def run(*args: str | Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def assert_clean_failure(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    assert "internal error" not in result.stderr


def test_valid_input_succeeds_quietly():
    result = run(stdin=VALID)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith("builtin.module {")
    generic = run("--print-op-generic", stdin=VALID)
    assert generic.returncode == 0 and '"coda.gemm"' in generic.stdout
    again = run(stdin=generic.stdout)
    assert again.returncode == 0 and again.stdout == result.stdout


MALFORMED = {
    "syntax": ("func.func @f(%x: tensor<4xf32>) {\n  func.return %x tensor<4xf32>\n}", 2),
    "verifier": (
        'func.func @f(%x: tensor<4x8xf32>) {\n  %0 = "nn.swiglu"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>\n  func.return\n}',
        2,
    ),
    "bad_type_parameter": ('func.func @f() {\n  %0 = "test.op"() : () -> !coda.tile<0x8xf32>\n  func.return\n}', 2),
    "bad_config": (
        "func.func @f(%a: tensor<16x32xf32>, %b: tensor<32x64xf32>) {\n"
        "  %0 = coda.gemm %a, %b config #coda.config<bm = 24, bn = 64, bk = 32, warps = 4, stages = 2> "
        ": tensor<16x32xf32>, tensor<32x64xf32> -> tensor<16x64xf32> {\n"
        "  ^bb0(%acc: !coda.tile<16x64xf32>):\n    coda.yield %acc : !coda.tile<16x64xf32>\n  }\n  func.return\n}",
        2,
    ),
    "arith_on_tiles": (
        "func.func @f(%m: tensor<16x32xf32>) {\n"
        "  %0 = coda.elementwise [16, 32] ins(%m : tensor<16x32xf32>) -> tensor<16x32xf32> {\n"
        "  ^bb0(%m_: tensor<16x32xf32>):\n"
        "    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>\n"
        "    %y = arith.addf %x, %x : !coda.tile<16x32xf32>\n"
        "    coda.yield %y : !coda.tile<16x32xf32>\n  }\n  func.return\n}",
        5,
    ),
    "undefined_value": ("func.func @f() {\n  func.return %nope : tensor<4xf32>\n}", 2),
    "unregistered_op": ('func.func @f() {\n  "nn.attention"() : () -> ()\n  func.return\n}', 2),
    "empty": ("\n// nothing here\n", 3),
    # xDSL 0.74's lexer backtracked exponentially on this (coda_ir/diagnostics.py).
    "unterminated_string": (
        'func.func @f(%x: tensor<4x64xf32>, %p: tensor<4xi32>) {\n'
        '  %0 = nn.rope %x, %p {head_dim = 16 : i64, rotary_heads = 2 : i64, style = "half} : '
        "tensor<4x64xf32>, tensor<4xi32> -> tensor<4x64xf32>\n  func.return\n}",
        2,
    ),
    "garbage": ("\x00\x01 this is not MLIR }}}", 1),
    "missing_property": (
        'func.func @f(%x: tensor<4x64xf32>, %p: tensor<4xi32>) {\n'
        '  %0 = "nn.rope"(%x, %p) : (tensor<4x64xf32>, tensor<4xi32>) -> tensor<4x64xf32>\n  func.return\n}',
        2,
    ),
    # issue 12: these were `<unknown>` or an internal error
    "duplicate_symbol": ("func.func @f() {\n  func.return\n}\nfunc.func @f() {\n  func.return\n}", 4),
    "zero_size_dim": (
        "func.func @f(%x: tensor<0x4xf32>) {\n  %y = nn.relu %x : tensor<0x4xf32> -> tensor<0x4xf32>\n  func.return\n}",
        2,
    ),
    "huge_integer_width": ('func.func @f() {\n  "test.op"() {a = 1 : i9223372036854775808} : () -> ()\n  func.return\n}', 2),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_input_gives_a_located_error_and_status_1(name, tmp_path):
    text, line = MALFORMED[name]
    path = tmp_path / f"{name}.mlir"
    path.write_text(text)
    result = run(path)
    assert_clean_failure(result)
    assert result.stdout == ""
    first = result.stderr.splitlines()[0]
    match = LOCATED.match(first)
    assert match, result.stderr
    assert match.group(1).endswith(f"{name}.mlir") and int(match.group(2)) == line, first


def test_verify_diagnostics_turns_expected_errors_into_success():
    text, _ = MALFORMED["verifier"]
    result = run("--verify-diagnostics", stdin=text)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert result.stdout.startswith("stdin:2:3: error: 'nn.swiglu' op result shape must be 4x4, got 4x8")


USAGE_ERRORS = {
    "unknown_pass": (["-p", "no-such-pass"], "unknown pass 'no-such-pass'"),
    "bad_pipeline": (["-p", "cse{"], "invalid pass pipeline"),
    "bad_pass_option": (["-p", "cse{nope=1}"], "invalid pass pipeline 'cse{nope=1}'"),
    # issue 34: an empty entry was accepted silently (a trailing comma) or reported by xDSL
    "empty_pipeline_entry": (["-p", "nn-to-coda,,cse"], "empty entry #2 at column 12 of 'nn-to-coda,,cse'"),
    "trailing_comma": (["-p", "nn-to-coda,"], "empty entry #2 at column 12 of 'nn-to-coda,'"),
    "unknown_target": (["-t", "cuda"], "argument -t/--target: invalid choice: 'cuda'"),
    # issue 34: the target prints; the lowering's options are coda-to-triton's
    "triton_target_option": (["-t", "triton{epilogue-subtile=256}"],
                             "target 'triton' takes no options (got epilogue-subtile): they are coda-to-triton's"),
    # issue 34: the target machine is a pass option, checked like any other
    "unknown_gpu": (["-p", "nn-to-coda{gpu=b200}"], "nn-to-coda: option gpu: unknown GPU 'b200' (known: a100, h100, h200)"),
    "bad_coda_to_triton_option": (["-p", "nn-to-coda,coda-to-triton{epilogue-subtile=3}", "-t", "triton"],
                                  "coda-to-triton: option epilogue-subtile: epilogue_subtile must be 0 (off) or a power"),
    "unknown_flag": (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    "missing_file": (["does/not/exist.mlir"], "cannot open 'does/not/exist.mlir': No such file or directory"),
    "directory": (["tests"], "cannot open 'tests': Is a directory"),
}


@pytest.mark.parametrize("name", sorted(USAGE_ERRORS))
def test_usage_errors_are_one_line_and_status_1(name):
    args, message = USAGE_ERRORS[name]
    result = run(*args, stdin=VALID)
    assert_clean_failure(result)
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("coda-opt: error: "), result.stderr
    assert message in lines[0]
    assert result.stdout == ""


def test_help_and_version():
    help_ = run("--help")
    assert help_.returncode == 0 and help_.stderr == ""
    assert "Passes (-p" in help_.stdout and "Targets (-t" in help_.stdout
    assert "canonicalize" in help_.stdout
    version = run("--version")
    assert version.returncode == 0
    assert re.fullmatch(r"coda-opt \(coda-ir \d+\.\d+\.\d+, xdsl 0\.74\.0\)\n", version.stdout)


def test_help_lists_every_pass_and_target_whole():
    """Issue 34: --help cut pass descriptions mid-sentence and ran names into them
    ("coda-widen-summed-storesStore"). Every pass and target: its name, then the first
    sentence of its docstring, whole, then its options with their defaults."""
    import dataclasses

    from coda_ir.context import coda_passes
    from coda_ir.targets import TARGETS
    from coda_ir.tools.coda_opt import _summary

    help_ = run("--help").stdout
    listing = help_[help_.index("Passes (-p"):help_.index("Examples:")]
    entries: dict[str, str] = {}
    for line in listing.splitlines():
        match = re.match(r"^  (\S+)  +(\S.*)$", line)
        if match:
            name = match.group(1)
            entries[name] = match.group(2)
        elif line.startswith("   ") and entries:
            entries[name] += " " + line.strip()
    for registry in (coda_passes(), TARGETS):
        for name, factory in registry.items():
            cls = factory()
            summary = _summary(name, cls)
            assert summary and summary[-1] in ".)", (name, summary)  # a whole sentence
            assert entries[name].startswith(summary), (name, entries[name])
            if dataclasses.is_dataclass(cls):
                for f in dataclasses.fields(cls):
                    assert f" {f.name.replace('_', '-')}=" in entries[name], (name, f.name)
    assert "mlir" in entries
    assert not re.search(r"coda-\n", help_)  # no pass name broken at a hyphen


# ============================================================================ fuzzing

LAST_BRACE = VALID.rstrip().rindex("}")


def truncation_is_valid(prefix: str) -> bool:
    """A prefix of VALID that is still a program: the function's header without its body, i.e.
    an external declaration (`func.func @block(...)` or with its result types)."""
    head = prefix.rstrip()
    return head.endswith(")") and "{" not in head and "(" in head and head.count("(") == head.count(")")


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.integers(0, LAST_BRACE - 1))
def test_truncated_input_fails_cleanly(cut):
    """A proper prefix of VALID lacks the function's closing brace: bad input, status 1, one
    located diagnostic (unless it stops right after the header, a valid declaration)."""
    prefix = VALID[:cut]
    result = run(stdin=prefix)
    if truncation_is_valid(prefix):
        assert result.returncode == 0 and result.stderr == "", result.stderr
        return
    assert_clean_failure(result)
    assert LOCATED.match(result.stderr), result.stderr


@settings(max_examples=1, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cuts=st.lists(st.integers(0, LAST_BRACE - 1), min_size=30, max_size=30))
def test_many_truncations_in_one_run(cuts):
    """30 more prefixes as the chunks of one --split-input-file run: each chunk gets its own
    located diagnostic (in place of its output), and one bad chunk never takes the run down."""
    chunks = [VALID[:cut] + "\n" for cut in cuts]
    result = run("--split-input-file", "--verify-diagnostics", stdin="// -----\n".join(chunks))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stdout + result.stderr and "internal error" not in result.stderr
    outputs = result.stdout.split("// -----\n")
    assert len(outputs) == len(chunks)
    for cut, output in zip(cuts, outputs):
        if truncation_is_valid(VALID[:cut]):
            assert output.startswith("builtin.module"), (cut, output)
        else:
            assert LOCATED.match(output), (cut, VALID[:cut][-80:], output)


@settings(max_examples=1, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(
        st.tuples(
            st.integers(0, len(VALID) - 1),
            st.integers(0, 12),
            st.sampled_from(["", "0", "-1", "%", ",", ":", "<", ">", "{", "}", "x", "coda.", "!coda.tile<", "f64"]),
        ),
        min_size=40,
        max_size=40,
    )
)
def test_mutated_inputs_never_crash(edits):
    """40 random edits of VALID (delete a span, insert a token): whatever the result, each chunk
    either prints IR or a located diagnostic, and nothing crashes."""
    chunks = [VALID[:at] + token + VALID[at + span :] + "\n" for at, span, token in edits]
    chunks = [c.replace("// -----", "") for c in chunks]
    result = run("--split-input-file", "--verify-diagnostics", stdin="// -----\n".join(chunks))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stdout + result.stderr and "internal error" not in result.stderr
    outputs = result.stdout.split("// -----\n")
    assert len(outputs) == len(chunks)
    for chunk, output in zip(chunks, outputs):
        assert LOCATED.match(output) or output.startswith("builtin.module"), (chunk, output)


def test_readme_commands_run_as_written_after_setup():
    """Issue 34: README commands called bare `python` / `coda-opt`, which only run with the venv
    activated. Every command of its shell blocks is `bash scripts/...` or a tool that
    `scripts/setup.sh` puts into `.venv/bin` (after optional VAR=value settings), and every
    repository file it names exists."""
    import shlex

    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```(?:sh|bash)\n(.*?)```", readme, re.S)
    blocks += [b for b in re.findall(r"```\n(.*?)```", readme, re.S) if b.startswith("$ ")]
    installed = {".venv/bin/python", ".venv/bin/coda-opt", ".venv/bin/lit", ".venv/bin/filecheck", ".venv/bin/torchrun"}
    commands = []
    for block in blocks:
        for line in block.splitlines():
            line = line.removeprefix("$ ").split(" #")[0].strip()
            if not line or line.startswith("#") or ":" in line.split()[0]:
                continue  # a comment, or an output line of the `$ ` block (bad.mlir:2:3: error: ...)
            words = shlex.split(line)
            while "=" in words[0]:  # TRITON_INTERPRET=1 ...
                words.pop(0)
            commands.append(line)
            if words[0] == "bash":
                assert (ROOT / words[1]).is_file(), line
            else:
                assert words[0] in installed, f"README runs '{words[0]}', not a tool of .venv/bin: {line}"
            for word in words[1:]:
                if re.fullmatch(r"(examples|tests|scripts)/[\w/.-]+", word):
                    assert (ROOT / word).exists(), f"{line}: no {word}"
    assert len(commands) >= 10 and any("coda-opt" in c for c in commands)
