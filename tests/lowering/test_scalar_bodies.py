"""One scalar-body lowering (issue 13 item 2): the `coda.map` / `coda.pair_map` bodies of gemm and
elementwise epilogues are lowered by the pass layer (`tl_build.lower_tile_body`, the
`ScalarLowering` that fold bodies use) to tl / arith / math ops on tiles; the epilogue lowering
(`tl_epilogue`) copies them into the kernel, whose ops `triton_printer` prints one by one.

Checked here: what the pass layer decides (constants folded in place, Triton functions of
constants on 0-d tensors, tanh / pow by the prelude helpers, a bf16 rounding step by
`_coda_round_bf16`, a constant result filled to the tile, scalars of the enclosing region
lowered into the body), that the printer writes exactly that, and that such a kernel runs in
the interpreter within the bar of the coda interpreter's float64 result.
"""

from __future__ import annotations

import pytest

import coda_ir
from coda_ir import CompileError
from coda_ir.dialects import coda
from coda_ir.lowering.triton_printer import BlockPrinter
from coda_ir.dialects.tl_names import KernelNames
from coda_ir.lowering.tl_build import lower_tile_body

from .helpers import check

PROGRAM = """
func.func @act(%x: tensor<37x50xbf16>) -> (tensor<37x50xbf16>, tensor<37x50xf32>) {
  %y, %z = coda.elementwise [37, 50] ins(%x : tensor<37x50xbf16>) -> (tensor<37x50xbf16>, tensor<37x50xf32>) {
  ^bb0(%xi: tensor<37x50xbf16>):
    %t = coda.load %xi : tensor<37x50xbf16> -> !coda.tile<37x50xf32>
    %two = arith.constant 2.0 : f32
    %e2 = math.exp %two : f32
    %m:2 = coda.map %t : (!coda.tile<37x50xf32>) -> (!coda.tile<37x50xf32>, !coda.tile<37x50xf32>) {
    ^bb0(%a: f32):
      %half = arith.constant 0.5 : f32
      %three = arith.constant 3.0 : f32
      %c = arith.mulf %half, %three : f32
      %mx = arith.maximumf %half, %three : f32
      %th = math.tanh %a : f32
      %sq = arith.mulf %a, %a : f32
      %p = math.powf %sq, %half : f32
      %r = arith.truncf %th : f32 to bf16
      %rx = arith.extf %r : bf16 to f32
      %s1 = arith.mulf %rx, %c : f32
      %s2 = arith.addf %s1, %mx : f32
      %s3 = arith.addf %s2, %p : f32
      %s4 = arith.mulf %s3, %e2 : f32
      coda.yield %s4, %half : f32, f32
    }
    coda.yield %m#0, %m#1 : !coda.tile<37x50xf32>, !coda.tile<37x50xf32>
  }
  func.return %y, %z : tensor<37x50xbf16>, tensor<37x50xf32>
}
"""


def _map(text: str) -> coda.MapOp:
    return next(op for op in coda_ir.parse(text).walk() if isinstance(op, coda.MapOp))


def test_tile_body_is_the_pass_layers_lowering_printed_as_is():
    op = _map(PROGRAM)
    body = lower_tile_body(op.body.blocks[0], 2)
    for inner in body.block.ops:
        inner.verify()
    # the region's scalars first (span None), then one span per body op; a constant result is filled
    assert list(body.spans)[0] is None and [o.name for o in body.spans[None]] == ["arith.constant", "tl.full", "math.exp"]
    assert [o for o in body.spans if o is not None] == [o for o in op.body.blocks[0].ops if not isinstance(o, coda.YieldOp)]
    assert [len(f) for f in body.fills] == [0, 1]
    # printed as the kernel printer prints the copy of it in a kernel, its arguments bound to names
    printer = BlockPrinter(KernelNames(["x"]), minimal_parentheses=True)
    printer.exprs.update(zip(body.block.args, ["x", "BM", "BN"]))
    printer.analyse(body.block)
    ops = [o for span in body.spans.values() for o in span] + [o for f in body.fills for o in f]
    for inner in ops:
        printer.statement(inner, "")
    assert printer.lines == [
        "s = tl.exp(tl.full((), 2.0, tl.float32))",  # a Triton function of constants: a 0-d tensor
        "s0 = tl.maximum(tl.full((), 0.5, tl.float32), tl.full((), 3.0, tl.float32))",
        "s1 = _coda_tanh(x)",
        "s2 = x * x",
        "s3 = _coda_pow(s2, 0.5)",
        "s4 = _coda_round_bf16(s1)",  # a bf16 rounding step rounds to nearest even, as a store
        "s5 = s4.to(tl.float32)",
        "s6 = s5 * (0.5 * 3.0)",  # constants fold in place (Python, double precision)
        "s7 = s6 + s0",
        "s8 = s7 + s3",
        "s9 = s8 * s",
    ]
    assert [printer.get(r) for r in body.results] == ["s9", "tl.full((BM, BN), 0.5, tl.float32)"]


def test_epilogue_bodies_run_within_the_bar():
    cm, _, _ = check(PROGRAM, seed=4)
    kernel = cm.source[cm.source.index("def _act_k0_elementwise"):]
    assert "s4 = _coda_round_bf16(s1)" in kernel and "t_m0 = tl.full((BM, BN), 0.5, tl.float32)" in kernel
    # the loaded bf16 tile widened and the stored result rounded by the same pass-layer conversions as folds
    assert "other=0).to(tl.float32)" in kernel and "_coda_round_bf16(t_m)" in kernel


def test_region_scalar_without_lowering_is_located():
    text = PROGRAM.replace("%e2 = math.exp %two : f32", "%e2 = math.exp %two : f32\n    %bad = math.atan %two : f32")
    with pytest.raises(CompileError, match=r"<input>:8:5: error: 'math.atan' op 'math.atan' has no Triton lowering in coda bodies"):
        coda_ir.compile(text, pipeline=None)
