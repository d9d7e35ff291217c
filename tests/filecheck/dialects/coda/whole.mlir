// RUN: CODA_ROUNDTRIP
// RUN: CODA_GENERIC_ROUNDTRIP

// `coda.elementwise ... whole rows|cols`: each program covers whole rows (columns) and walks
// their tiles in order, so reductions along that axis complete in the kernel and are stored as
// one float value per row (column) instead of partials.

func.func @colvec(%w: tensor<37x100xbf16>, %g: tensor<100xbf16>, %b: tensor<100xbf16>) -> (tensor<37xf32>, tensor<37xbf16>, tensor<37x100xf32>) {
  %c, %e, %t = coda.elementwise [37, 100] whole rows ins(%w, %g, %b : tensor<37x100xbf16>, tensor<100xbf16>, tensor<100xbf16>) -> (tensor<37xf32>, tensor<37xbf16>, tensor<37x100xf32>) {
  ^bb0(%wt: tensor<37x100xbf16>, %gv: tensor<100xbf16>, %bv: tensor<100xbf16>):
    %x = coda.load %wt : tensor<37x100xbf16> -> !coda.tile<37x100xf32>
    %xg = coda.scale %x, %gv cols : !coda.tile<37x100xf32>, tensor<100xbf16>
    %pc = coda.reduce sum %xg dim 1 : !coda.tile<37x100xf32> -> !coda.partials<rows, 37, sum>
    %pm = coda.reduce lse %x dim 1 : !coda.tile<37x100xf32> -> !coda.partials<rows, 37, lse>
    coda.yield %pc, %pm, %xg : !coda.partials<rows, 37, sum>, !coda.partials<rows, 37, lse>, !coda.tile<37x100xf32>
  }
  func.return %c, %e, %t : tensor<37xf32>, tensor<37xbf16>, tensor<37x100xf32>
}
// CHECK-LABEL: func.func @colvec
// CHECK-NEXT:    %c, %e, %t = coda.elementwise [37, 100] whole rows ins(%w, %g, %b : tensor<37x100xbf16>, tensor<100xbf16>, tensor<100xbf16>) -> (tensor<37xf32>, tensor<37xbf16>, tensor<37x100xf32>) {
// CHECK:           coda.yield %pc, %pm, %xg : !coda.partials<rows, 37, sum>, !coda.partials<rows, 37, lse>, !coda.tile<37x100xf32>

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "colvec"
// CHECK-GENERIC:         "coda.elementwise"(%w, %g, %b) <{shape = [#builtin.int<37>, #builtin.int<100>], whole = #coda<axis rows>}> ({

// -----

func.func @rowvec(%w: tensor<64x48xf32>, %g: tensor<64xf32>) -> tensor<48xf32> {
  %c = coda.elementwise [64, 48] whole cols config #coda.config<bm = 16, bn = 16, bk = 16, warps = 4, stages = 1> ins(%w, %g : tensor<64x48xf32>, tensor<64xf32>) -> tensor<48xf32> {
  ^bb0(%wt: tensor<64x48xf32>, %gv: tensor<64xf32>):
    %x = coda.load %wt : tensor<64x48xf32> -> !coda.tile<64x48xf32>
    %xg = coda.scale %x, %gv rows : !coda.tile<64x48xf32>, tensor<64xf32>
    %p = coda.reduce max %xg dim 0 : !coda.tile<64x48xf32> -> !coda.partials<cols, 48, max>
    coda.yield %p : !coda.partials<cols, 48, max>
  }
  func.return %c : tensor<48xf32>
}
// CHECK-LABEL: func.func @rowvec
// CHECK-NEXT:    %c = coda.elementwise [64, 48] whole cols config #coda.config<bm = 16, bn = 16, bk = 16, warps = 4, stages = 1> ins(%w, %g : tensor<64x48xf32>, tensor<64xf32>) -> tensor<48xf32> {

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "rowvec"
// CHECK-GENERIC:         "coda.elementwise"(%w, %g) <{shape = [#builtin.int<64>, #builtin.int<48>], whole = #coda<axis cols>, config = #coda.config<bm = 16, bn = 16, bk = 16, warps = 4, stages = 1>}> ({
