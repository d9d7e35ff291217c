"""Issue 12: bad input to the Python API raises only `coda_ir.CodaError`s, located and named.

Each test reproduces one reported defect: the exact exception class, and a message that names
the op or argument and where it is.
"""

from __future__ import annotations

import inspect
import re
import sys

import pytest
import torch

import coda_ir
from coda_ir import ArgumentError, CodaError, CompileError, InternalError
from coda_ir.builder import FunctionBuilder

CE = """func.func @loss(%logits: tensor<16x32xf32>, %targets: tensor<16xi32>) -> tensor<f32> {
  %l = "nn.cross_entropy"(%logits, %targets) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<16x32xf32>, tensor<16xi32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
"""

RELU = """func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = nn.relu %x : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
"""

RMS = """func.func @f(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %y = "nn.rms_norm"(%x, %w) PROPS : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
"""


def test_hierarchy_and_compatibility():
    assert issubclass(CompileError, CodaError) and issubclass(ArgumentError, CodaError)
    assert issubclass(InternalError, CodaError)
    assert not issubclass(InternalError, (CompileError, ArgumentError))
    # what they were before: existing `except ValueError` / `except TypeError` keep working
    assert issubclass(CompileError, ValueError) and issubclass(ArgumentError, TypeError)
    from coda_ir.runtime.compiled import ArgumentError as RuntimeArgumentError

    assert RuntimeArgumentError is ArgumentError is coda_ir.errors.ArgumentError


# ============================================================================ files and sources


def test_missing_file(tmp_path):
    with pytest.raises(ArgumentError, match=r"argument 'source'.*nope\.mlir.*No such file") as info:
        coda_ir.compile(tmp_path / "nope.mlir")
    assert info.value.argument == "source"
    with pytest.raises(ArgumentError, match=r"argument 'source'.*'model\.mlir' \(no such file\)"):
        coda_ir.compile("model.mlir")


def test_directory(tmp_path):
    with pytest.raises(ArgumentError, match=r"argument 'source'.*Is a directory"):
        coda_ir.compile(str(tmp_path))


def test_non_utf8_file_is_located_by_line_and_column(tmp_path):
    path = tmp_path / "latin1.mlir"
    path.write_bytes(b"// caf\xe9\nfunc.func @f() {\n  func.return\n}\n")
    with pytest.raises(CompileError) as info:
        coda_ir.compile(path)
    assert str(info.value) == f"{path}:1:7: error: invalid UTF-8 byte 0xe9: the input must be UTF-8 text"


def test_source_of_wrong_type():
    with pytest.raises(ArgumentError, match=r"argument 'source': expected an xDSL ModuleOp, \.mlir text or a path, got int"):
        coda_ir.compile(42)


def test_deep_nesting_is_a_compile_error():
    depth = sys.getrecursionlimit() // 2
    text = 'func.func @f() {\n' + '"test.op"() ({\n' * depth + "})\n" * depth + "  func.return\n}\n"
    with pytest.raises(CompileError, match=r"<input>: error: the program nests too deeply"):
        coda_ir.compile(text, pipeline=None)


def test_first_char_placeholder_is_formatted():
    with pytest.raises(CompileError) as info:
        coda_ir.compile('func.func @f() {\n  %0 = "test.op"() : () -> !test.type<#}\n}\n')
    assert "{first_char}" not in str(info.value)
    assert "<input>:2:39: error: Expected suffix identifier after '#'" in str(info.value)


# ============================================================================ pipelines


@pytest.mark.parametrize(
    "pipeline, message",
    [
        ("nn-to-coda{", r"invalid pass pipeline 'nn-to-coda\{'"),
        ("cse{nope=1}", r"invalid pass pipeline 'cse\{nope=1\}'"),
        ("bogus-pass", r"pass\(es\) 'bogus-pass' are not registered \(available: .*nn-to-coda"),
        ("cse,bogus-pass", r"pass\(es\) 'bogus-pass' are not registered"),
        # issue 34: an empty entry names its position (a trailing one was accepted silently)
        ("nn-to-coda,,cse", r"invalid pass pipeline: empty entry #2 at column 12 of 'nn-to-coda,,cse'"),
        ("nn-to-coda,", r"invalid pass pipeline: empty entry #2 at column 12 of 'nn-to-coda,'"),
        (",cse", r"invalid pass pipeline: empty entry #1 at column 1 of ',cse'"),
    ],
)
def test_bad_pipelines(pipeline, message):
    for source in (RELU, CE):
        with pytest.raises(ArgumentError, match=r"compile\(\): argument 'pipeline': " + message) as info:
            coda_ir.compile(source, pipeline=pipeline)
        assert info.value.argument == "pipeline"


def test_unknown_pass_on_coda_text_is_not_ignored():
    coda_text = str(coda_ir.compile(RELU).ir)
    with pytest.raises(ArgumentError, match="'bogus-pass' are not registered"):
        coda_ir.compile(coda_text, pipeline="bogus-pass")


def test_pipeline_of_wrong_type():
    with pytest.raises(ArgumentError, match=r"argument 'pipeline': expected a pass pipeline string or None, got list"):
        coda_ir.compile(RELU, pipeline=["nn-to-coda"])


# ============================================================================ properties


def test_missing_eps_is_a_located_error():
    with pytest.raises(CompileError) as info:
        coda_ir.compile(RMS.replace("PROPS ", ""))
    assert str(info.value) == "<input>:2:3: error: 'nn.rms_norm' op property 'eps' expected in operation 'nn.rms_norm'"


@pytest.mark.parametrize("spelled, shown", [("0x7FC00000", "nan"), ("0x7F800000", "inf"), ("-1.0", "-1")])
def test_eps_nan_inf_negative(spelled, shown):
    with pytest.raises(CompileError) as info:
        coda_ir.compile(RMS.replace("PROPS", f"<{{eps = {spelled} : f32}}>"))
    assert str(info.value) == f"<input>:2:3: error: 'nn.rms_norm' op eps must be a non-negative finite number, got {shown}"


def test_ignore_index_out_of_i32_is_located():
    text = CE.replace("ignore_index = -100", "ignore_index = 9999999999")
    with pytest.raises(CompileError, match=r"^<input>:2:3: error: 'nn.cross_entropy' op ignore_index must fit in i32"):
        coda_ir.compile(text)


def test_zero_size_and_huge_dims_are_located():
    with pytest.raises(CompileError, match=r"^<input>:2:3: error: 'nn.relu' op x has a zero-size dimension"):
        coda_ir.compile(RELU.replace("4x8", "0x8"))
    with pytest.raises(CompileError, match=r"^<input>:2:3: error: 'nn.relu' op x has \d+ elements .* more than int64"):
        coda_ir.compile(RELU.replace("4x8", "9223372036854775807x8"))


def test_duplicate_symbols_are_located():
    text = RELU + RELU
    with pytest.raises(CompileError) as info:
        coda_ir.compile(text)
    assert str(info.value) == "<input>:5:1: error: 'func.func' op redefinition of symbol '@f' (first defined at <input>:1:1)"


def test_function_without_terminator_is_located():
    """Issue 34: a body `{ }` with no func.return verified, then the Triton target's host
    function was an internal error."""
    text = "func.func @loss(%logits: tensor<16x32xf32>, %t: tensor<16xi32>) -> tensor<f32> {\n}\n"
    for pipeline in ("nn-to-coda", None):
        with pytest.raises(CompileError) as info:
            coda_ir.compile(text, pipeline=pipeline)
        assert str(info.value) == "<input>:1:1: error: 'func.func' op empty block: expected at least a terminator ('func.return')"


def test_empty_function_compiles_and_runs():
    """Issue 34: an empty function (no arguments, no results) is legal: it compiles (the host
    function has no tensor to take its device from) and returns None."""
    program = coda_ir.compile("func.func @f() {\n  func.return\n}\n")
    assert program.f() is None and program.kernel_count("f") == 0


# ============================================================================ compiled functions


@pytest.fixture(scope="module")
def ce():
    return coda_ir.compile(CE)


def _ce_inputs(targets):
    return torch.randn(16, 32, generator=torch.Generator().manual_seed(0)), torch.tensor(targets, dtype=torch.int32)


def test_keyword_arguments(ce):
    logits, targets = _ce_inputs([0] * 16)
    with pytest.raises(ArgumentError, match=r"loss\(\) takes its tensors by position .* got keyword argument\(s\) 'targets'"):
        ce.loss(logits, targets=targets)


def test_meta_tensors(ce):
    logits, targets = _ce_inputs([0] * 16)
    with pytest.raises(ArgumentError, match=r"loss\(\): argument #0 must be a CPU or CUDA tensor with data, got a meta tensor"):
        ce.loss(logits.to("meta"), targets.to("meta"))
    with pytest.raises(ArgumentError, match=r"argument #1 must be a CPU or CUDA tensor with data, got a meta tensor"):
        ce.loss(logits, targets.to("meta"))


def test_cross_entropy_target_out_of_range_raises(ce):
    good = [i % 32 for i in range(16)]
    good[3] = -100  # the ignore index is allowed
    logits, targets = _ce_inputs(good)
    loss = ce.loss(logits, targets)
    keep = targets != -100
    ref = torch.nn.functional.cross_entropy(logits[keep], targets[keep].long())
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-5)
    for bad_value, row in ((32, 5), (-1, 0), (1000, 15)):
        bad = list(good)
        bad[row] = bad_value
        with pytest.raises(ArgumentError) as info:
            ce.loss(*_ce_inputs(bad))
        message = str(info.value)
        assert f"argument #1 'targets' holds {bad_value} at row {row}" in message
        assert "[0, 32) or the ignore index -100" in message and "'nn.cross_entropy' at <input>:2:3" in message
        assert info.value.argument == "targets"


# ============================================================================ builder


def test_builder_verify_error_is_located_without_ir_dump():
    fb = FunctionBuilder("f", x=((4, 8), "f32"), w=((6, 4), "f32"))
    line = inspect.currentframe().f_lineno + 1
    y = fb.nn.linear(fb.x, fb.w)
    fb.returns(y)
    with pytest.raises(CompileError) as info:
        fb.module
    message = str(info.value)
    assert message == (
        f"{__file__}:{line}:1: error: 'nn.linear' op x has 8 columns but w (NxK, nn.Linear layout) has 4: "
        "expected w of shape Nx8"
    )
    assert "builtin.module" not in message and "^^^" not in message and "\n" not in message


def test_builder_bad_operands_and_keywords():
    fb = FunctionBuilder("f", x=((4, 8), "f32"))
    with pytest.raises(ArgumentError, match=r"test_errors\.py:\d+: nn\.rms_norm: operand #1 must be a tensor value.*got int"):
        fb.nn.rms_norm(fb.x, 3)
    with pytest.raises(ArgumentError, match=r"nn\.rms_norm: .*unexpected keyword argument 'epsilon'"):
        fb.nn.rms_norm(fb.x, fb.x, epsilon=1e-5)
    with pytest.raises(ArgumentError, match="unknown element type 'f8'"):
        FunctionBuilder("g", x=((4, 8), "f8"))


def test_builder_optional_properties_and_operands_from_hf_uses():
    """from_hf writes nn.attention with its optional properties and `segments` operand, and nn.rope
    with the model's `inv_freq`, through fb.nn: they reach the op, and a bad one is a CompileError
    at the Python line that built it."""
    fb = FunctionBuilder("f", qkv=((6, 32), "f32"), pos=((6,), "i32"))
    y = fb.nn.attention(fb.qkv, 2, 1, 8, 3, True, window=2, scale=0.25, softcap=5.0, segments=fb.pos)
    assert {"scale", "window", "softcap"} <= set(y.owner.properties) and y.owner.operands[1] is fb.pos
    line = inspect.currentframe().f_lineno + 1
    fb.nn.rope(fb.qkv, fb.pos, head_dim=8, rotary_heads=3, inv_freq=[1.0, 0.5, 0.25])
    fb.returns(y)
    with pytest.raises(CompileError, match=re.escape(f"{__file__}:{line}:1: error: 'nn.rope' op inv_freq must hold "
                                                     "head_dim / 2 = 4 frequencies, got 3")):
        fb.module


def test_builder_kernel_without_yield_is_located():
    fb = FunctionBuilder("f", x=((16, 16), "f32"))
    line = inspect.currentframe().f_lineno + 2
    with pytest.raises(CompileError, match=re.escape(f"{__file__}:{line}:1: error: the elementwise kernel never called yield_")):
        with fb.elementwise((16, 16)):
            pass


# ============================================================================ internal errors


def test_a_bug_is_an_internal_error(monkeypatch):
    import coda_ir.lowering.triton as triton_emitter

    def broken(module):
        raise KeyError("oops")

    monkeypatch.setattr(triton_emitter, "print_module", broken)
    with pytest.raises(InternalError, match=r"(?s)internal error while emitting Triton: KeyError.*bug in coda-ir") as info:
        coda_ir.compile(RELU)
    assert isinstance(info.value.__cause__, KeyError)
    assert not isinstance(info.value, (CompileError, ArgumentError))


def test_kernel_count_of_unknown_function():
    cm = coda_ir.compile(RELU)
    with pytest.raises(ArgumentError, match=r"kernel_count\(\): argument 'name': expected one of the functions \(f\), got 'g'"):
        cm.kernel_count("g")
