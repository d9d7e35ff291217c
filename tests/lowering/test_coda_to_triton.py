"""`coda-to-triton` lowers, the `triton` target prints (issue 34: a target runs no pass).

The pipeline (coda-legalize where it has not run, coda-plan-in-place, convert-coda-to-tl,
convert-coda-to-host) is the only place the Triton lowering runs: `coda_ir.compile` runs it and
then prints, `coda-opt -t triton` appends it when `-p` did not. The printer reads the lowered
module and leaves it as it was; given coda kernels that were never lowered it says so, located.
"""

from __future__ import annotations

import pytest

import coda_ir
from coda_ir.diagnostics import CompilerError
from coda_ir.errors import ArgumentError
from coda_ir.lowering.pipeline import CodaToTritonPass, TritonOptions, lower_to_triton
from coda_ir.lowering.triton import TritonTarget, is_lowered, print_module
from coda_ir.context import make_context

# a hand-written coda program: not legalized, so the pipeline runs coda-legalize first
SCALE = """\
func.func @scale(%x: tensor<37x50xf32>, %g: tensor<50xf32>) -> tensor<37x50xf32> {
  %y = coda.elementwise [37, 50] ins(%x, %g : tensor<37x50xf32>, tensor<50xf32>) -> tensor<37x50xf32> {
  ^bb0(%xt: tensor<37x50xf32>, %gv: tensor<50xf32>):
    %t = coda.load %xt : tensor<37x50xf32> -> !coda.tile<37x50xf32>
    %s = coda.scale %t, %gv cols : !coda.tile<37x50xf32>, tensor<50xf32>
    coda.yield %s : !coda.tile<37x50xf32>
  }
  func.return %y : tensor<37x50xf32>
}
"""


def test_the_target_prints_without_changing_the_module():
    lowered = lower_to_triton(coda_ir.parse(SCALE))
    before = str(lowered)
    from io import StringIO

    out = StringIO()
    TritonTarget().emit(make_context(), lowered, out)
    assert str(lowered) == before
    assert out.getvalue() == print_module(lowered)
    assert "def scale(" in out.getvalue() and "@triton.jit" in out.getvalue()


def test_the_target_refuses_coda_that_was_not_lowered():
    module = coda_ir.parse(SCALE, "scale.mlir")
    before = str(module)
    assert not is_lowered(module)
    with pytest.raises(CompilerError, match=r"scale\.mlir:1:1: error: 'func\.func' op the triton target prints "
                                            r"tl / host IR: lower this function first \(-p coda-to-triton"):
        print_module(module)
    assert str(module) == before  # refused without running anything on it


def test_compile_is_the_pipeline_then_the_printer():
    """`compile` prints what the registered pipeline built; running `coda-to-triton` as the
    pipeline itself prints the same module."""
    expected = print_module(lower_to_triton(coda_ir.parse(SCALE)))
    assert coda_ir.compile(SCALE).source == expected
    assert coda_ir.compile(SCALE, pipeline="coda-to-triton").source == expected


def test_compile_keeps_the_coda_program_with_its_records():
    """`CompiledModule.ir` is the coda program the conversions started from: legalized (its
    records), without the `tl` / `host` ops only the printer reads."""
    ir = coda_ir.compile(SCALE).ir
    assert "coda.legalized" in ir.attributes
    assert not any(op.name.startswith(("tl.", "host.")) for op in ir.walk())


def test_options_are_the_pipelines():
    module = coda_ir.parse(SCALE)
    coda_ir.lower(module, "coda-to-triton{epilogue-subtile=256 half-tile-io=false}")
    assert is_lowered(module)
    assert CodaToTritonPass.of(TritonOptions(epilogue_subtile=64)) == CodaToTritonPass(epilogue_subtile=64)
    with pytest.raises(ArgumentError, match="coda-to-triton: option epilogue-subtile: .* got 3"):
        CodaToTritonPass(epilogue_subtile=3).apply(make_context(), coda_ir.parse(SCALE))
