"""coda-legalize records the tile decisions (`#coda.tile_constraints`, `coda.gathered`); the
Triton lowering obeys them and re-derives nothing. Programs that legality accepts compile and are
right in every pipeline; a record the lowering cannot honour is an internal error, not a guess."""

from __future__ import annotations

import pytest
import torch

import coda_ir
from coda_ir.testing import assert_matches

SWIGLU_48 = """
func.func @sw(%x: tensor<37x40xf32>, %w: tensor<96x40xf32>) -> tensor<37x48xf32> {
  %z = "nn.linear"(%x, %w) : (tensor<37x40xf32>, tensor<96x40xf32>) -> tensor<37x96xf32>
  %g = "nn.swiglu"(%z) : (tensor<37x96xf32>) -> tensor<37x48xf32>
  func.return %g : tensor<37x48xf32>
}
"""

HEAD_NORM_48 = """
func.func @hn(%x: tensor<37x40xf32>, %w: tensor<192x40xf32>, %g: tensor<48xf32>) -> tensor<37x192xf32> {
  %q = "nn.linear"(%x, %w) : (tensor<37x40xf32>, tensor<192x40xf32>) -> tensor<37x192xf32>
  %n = "nn.head_rms_norm"(%q, %g) <{head_dim = 48 : i64, heads = 3 : i64, eps = 1.0e-06 : f32}> : (tensor<37x192xf32>, tensor<48xf32>) -> tensor<37x192xf32>
  func.return %n : tensor<37x192xf32>
}
"""

PIPELINES = ["nn-to-coda", "nn-to-coda{interleave=false}", "nn-to-coda{fuse=false}", "nn-to-coda{defer-norms=false}",
             "convert-nn-to-coda"]


def _reference_swiglu(x, w):
    z = x @ w.T
    f = z.shape[1] // 2
    return torch.nn.functional.silu(z[:, :f]) * z[:, f:]


def _reference_head_norm(x, w, g, hd=48, heads=3):
    q = x @ w.T
    out = q.clone()
    h = q[:, : heads * hd].reshape(q.shape[0], heads, hd)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * g
    out[:, : heads * hd] = h.reshape(q.shape[0], heads * hd)
    return out


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_swiglu_width_48_compiles_and_is_right_in_every_pipeline(pipeline):
    # `nn-to-coda{interleave=false}` used to fuse the pair into the gemm on a legality that
    # the lowering then refused ("multiple of 96, not a power of two").
    x, w = torch.randn(37, 40), torch.randn(96, 40) / 6
    out = coda_ir.compile(SWIGLU_48, pipeline=pipeline).sw(x, w)
    assert_matches([out], [_reference_swiglu(x.double(), w.double())], [_reference_swiglu(x, w)], ["sw"])


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_head_norm_width_48_compiles_and_is_right_in_every_pipeline(pipeline):
    x, w, g = torch.randn(37, 40), torch.randn(192, 40) / 6, torch.rand(48) + 0.5
    out = coda_ir.compile(HEAD_NORM_48, pipeline=pipeline).hn(x, w, g)
    assert_matches([out], [_reference_head_norm(x.double(), w.double(), g.double())], [_reference_head_norm(x, w, g)], ["hn"])


SEG6 = """
func.func @seg(%a: tensor<37x40xf32>, %w: tensor<40x48xf32>) -> tensor<37x48xf32> {
  %y = coda.gemm %a, %w : tensor<37x40xf32>, tensor<40x48xf32> -> tensor<37x48xf32> {
  ^bb0(%acc: !coda.tile<37x48xf32>):
    %s = coda.segment_reduce sum %acc width 6 : !coda.tile<37x48xf32>
    coda.yield %s : !coda.tile<37x48xf32>
  }
  func.return %y : tensor<37x48xf32>
}
"""


@pytest.mark.parametrize("n, launches, form", [(48, 1, "coda.row_exchange"), (288, 2, "coda.gathered")])
def test_hand_written_segment_of_6_is_right(n, launches, form):
    # no pipeline: the Triton target legalizes hand-written coda before reading the records.
    # 48 columns: exchanged inside one gemm tile; 288: split off, the segments read from memory
    source = SEG6.replace("48", str(n))
    a, w = torch.randn(37, 40), torch.randn(40, n)
    compiled = coda_ir.compile(source, pipeline=None)
    assert compiled.kernel_count("seg") == launches and form in str(compiled.ir)

    def ref(a, w):
        return (a @ w).reshape(37, n // 6, 6).sum(-1, keepdim=True).expand(37, n // 6, 6).reshape(37, n)

    assert_matches([compiled.seg(a, w)], [ref(a.double(), w.double())], [ref(a, w)], ["seg"])


ROPE_LIKE = """
builtin.module attributes {coda.legalized} {
  func.func @pairs(%x: tensor<8x64xf32>, %w: tensor<256x64xf32>) -> tensor<8x128xf32> {
    %g = coda.gemm %x, %w transpose_b : tensor<8x64xf32>, tensor<256x64xf32> -> tensor<8x128xf32> attributes {coda.constraints = #coda.tile_constraints<bn_multiple_of = 16, reasons = []>} {
    ^bb0(%acc: !coda.tile<8x256xf32>):
      %o = coda.pair_map stride 64 %acc : !coda.tile<8x256xf32> -> !coda.tile<8x128xf32> {
      ^bb0(%a: f32, %b: f32):
        %m = arith.mulf %a, %b : f32
        coda.yield %m : f32
      }
      coda.yield %o : !coda.tile<8x128xf32>
    }
    func.return %g : tensor<8x128xf32>
  }
}
"""


def test_a_record_the_lowering_cannot_honour_is_an_internal_error():
    # pairs 64 apart need BN % 128 == 0; a (wrong) record of 16 must not be widened silently
    with pytest.raises(coda_ir.InternalError, match="coda-legalize recorded bn_multiple_of = 16"):
        coda_ir.compile(ROPE_LIKE, pipeline=None)


def test_recorded_decisions_are_verified():
    head = "-> tensor<37x48xf32> {\n  ^bb0"
    bad_type = SEG6.replace(head, "-> tensor<37x48xf32> attributes {coda.constraints = 3 : i64} {\n  ^bb0")
    with pytest.raises(coda_ir.CompileError, match="coda.constraints must be a #coda.tile_constraints"):
        coda_ir.compile(bad_type, pipeline=None)
    gathered_in_gemm = SEG6.replace("width 6 :", "width 6 {coda.gathered} :")
    with pytest.raises(coda_ir.CompileError, match="only in a coda.elementwise kernel"):
        coda_ir.compile(gathered_in_gemm, pipeline=None)
    not_pow2 = SEG6.replace(head, "-> tensor<37x48xf32> attributes {coda.constraints = #coda.tile_constraints<bn_multiple_of = 48>} {\n  ^bb0")
    with pytest.raises(coda_ir.CompileError, match="positive power of two"):
        coda_ir.compile(not_pow2, pipeline=None)
