"""`coda.elementwise whole rows|cols` (reductions completed inside the kernel, no fold) through
the Triton interpreter against the coda interpreter (coda_ir.interpreters) in float64: every
combine (sum, max, lse), ragged edges on both axes, a 2 -> 1 pair map (a partial narrower than
the kernel), default and fixed tile configurations, and bitwise determinism."""

from __future__ import annotations

import pytest
import torch

import coda_ir

from .helpers import DEVICE, check, random_inputs, the_func

CONFIG = "config #coda.config<bm = 16, bn = 32, bk = 16, warps = 4, stages = 1>"


def program(config: str) -> str:
    return f"""
func.func @whole(%w: tensor<37x100xbf16>, %g: tensor<100xbf16>, %b: tensor<37xf32>) -> (tensor<37xf32>, tensor<37xbf16>, tensor<37xf32>, tensor<37x100xf32>, tensor<100xf32>, tensor<50xf32>) {{
  %c, %e, %l, %t2 = coda.elementwise [37, 100] whole rows {config} ins(%w, %g : tensor<37x100xbf16>, tensor<100xbf16>) -> (tensor<37xf32>, tensor<37xbf16>, tensor<37xf32>, tensor<37x100xf32>) {{
  ^bb0(%wt: tensor<37x100xbf16>, %gv: tensor<100xbf16>):
    %t = coda.load %wt : tensor<37x100xbf16> -> !coda.tile<37x100xf32>
    %tg = coda.scale %t, %gv cols : !coda.tile<37x100xf32>, tensor<100xbf16>
    %pc = coda.reduce sum %tg dim 1 : !coda.tile<37x100xf32> -> !coda.partials<rows, 37, sum>
    %pe = coda.reduce max %t dim 1 : !coda.tile<37x100xf32> -> !coda.partials<rows, 37, max>
    %pl = coda.reduce lse %tg dim 1 : !coda.tile<37x100xf32> -> !coda.partials<rows, 37, lse>
    coda.yield %pc, %pe, %pl, %tg : !coda.partials<rows, 37, sum>, !coda.partials<rows, 37, max>, !coda.partials<rows, 37, lse>, !coda.tile<37x100xf32>
  }}
  %cs, %pw = coda.elementwise [37, 100] whole cols {config} ins(%w, %b : tensor<37x100xbf16>, tensor<37xf32>) -> (tensor<100xf32>, tensor<50xf32>) {{
  ^bb0(%wt: tensor<37x100xbf16>, %bv: tensor<37xf32>):
    %t = coda.load %wt : tensor<37x100xbf16> -> !coda.tile<37x100xf32>
    %tb = coda.scale %t, %bv rows : !coda.tile<37x100xf32>, tensor<37xf32>
    %pc = coda.reduce sumsq %tb dim 0 : !coda.tile<37x100xf32> -> !coda.partials<cols, 100, sum>
    %h = coda.pair_map %t : !coda.tile<37x100xf32> -> !coda.tile<37x50xf32> {{
    ^bb0(%x: f32, %y: f32):
      %s = arith.mulf %x, %y : f32
      coda.yield %s : f32
    }}
    %ph = coda.reduce lse %h dim 0 : !coda.tile<37x50xf32> -> !coda.partials<cols, 50, lse>
    coda.yield %pc, %ph : !coda.partials<cols, 100, sum>, !coda.partials<cols, 50, lse>
  }}
  func.return %c, %e, %l, %t2, %cs, %pw : tensor<37xf32>, tensor<37xbf16>, tensor<37xf32>, tensor<37x100xf32>, tensor<100xf32>, tensor<50xf32>
}}
"""


@pytest.mark.parametrize("config", ["", CONFIG], ids=["default", "bm16_bn32"])
def test_whole_rows_and_cols_match_reference(config: str):
    check(program(config))


def test_whole_kernels_are_bitwise_deterministic():
    cm = coda_ir.compile(program(CONFIG), pipeline=None)
    inputs = [x.to(DEVICE) for x in random_inputs(the_func(cm), seed=3)]
    first = cm.whole(*inputs)
    second = cm.whole(*inputs)
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    assert cm.kernel_count("whole") == 2
