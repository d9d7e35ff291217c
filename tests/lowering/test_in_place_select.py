"""A `coda.select` of a plain load may read x[m, idx[m]] from memory (`tl_epilogue_reductions.lower_select`,
the gather form), which is not tile-local in the sense of `coda_ir.analysis.in_place`: where an
output is written over the selected input (`coda.writes_over`), the map's store over %x can come
before the gather (`epilogue_schedule` emits the select after the last tile op using its tile;
on a GPU the threads of a CTA are not ordered without a barrier either way). There the lowering
keeps the compare form, which reads only the tile's own load. (Found in review: the gather read
2x instead of x.)"""

from __future__ import annotations

import torch

import coda_ir
from coda_ir.dialects.coda import WRITES_OVER, writes_over

from .helpers import fold_partials

TEXT = """
func.func @f(%x: tensor<37x203xbf16> {coda.donated}, %t: tensor<37xi32>) -> (tensor<37x203xbf16>, !coda.partials<rows, 37, sum>) {
  %y, %p = coda.elementwise [37, 203] ins(%x, %t : tensor<37x203xbf16>, tensor<37xi32>) -> (tensor<37x203xbf16>, !coda.partials<rows, 37, sum>) {
  ^bb0(%xi: tensor<37x203xbf16>, %ti: tensor<37xi32>):
    %v = coda.load %xi : tensor<37x203xbf16> -> !coda.tile<37x203xf32>
    %p = coda.select %v, %ti : !coda.tile<37x203xf32>, tensor<37xi32> -> !coda.partials<rows, 37, sum>
    %d = coda.map %v : (!coda.tile<37x203xf32>) -> !coda.tile<37x203xf32> {
    ^bb0(%u: f32):
      %w = arith.addf %u, %u : f32
      coda.yield %w : f32
    }
    coda.yield %d, %p : !coda.tile<37x203xf32>, !coda.partials<rows, 37, sum>
  }
  %r = coda.elementwise [37, 203] ins(%y : tensor<37x203xbf16>) -> tensor<37x203xbf16> {
  ^bb0(%yi: tensor<37x203xbf16>):
    %z = coda.load %yi : tensor<37x203xbf16> -> !coda.tile<37x203xf32>
    coda.yield %z : !coda.tile<37x203xf32>
  }
  func.return %r, %p : tensor<37x203xbf16>, !coda.partials<rows, 37, sum>
}
"""


def test_select_of_an_input_written_over_reads_the_old_element():
    cm = coda_ir.compile(TEXT, pipeline=None)
    # the map's output goes over the donated %x (the rule holds as written: one whole-shape
    # load, the output computed per element from it, nothing marked coda.gathered)
    assert [writes_over(op) for op in cm.ir.walk() if WRITES_OVER in op.attributes] == [[0, -1]]
    g = torch.Generator().manual_seed(3)
    x = torch.randn(37, 203, generator=g).to(torch.bfloat16)
    t = torch.randint(0, 203, (37,), generator=g, dtype=torch.int32)
    r, p = cm.f(x.clone(), t)
    assert torch.equal(r, (x.float() * 2).to(torch.bfloat16))
    expected = x.double()[torch.arange(37), t.long()]
    assert torch.equal(fold_partials(p, "sum"), expected)  # the old element, not 2x
    assert "sel_hit" not in cm.source  # the compare form, not the gather
