// RUN: coda-opt %s --remarks -t triton --split-input-file 2>&1 | filecheck %s
// RUN: coda-opt %s --remarks -p coda-legalize --split-input-file 2>&1 | filecheck %s --check-prefix=IR

// Segments of 6 columns: no power-of-two column tile holds whole segments. The Triton target
// legalizes hand-written coda first (coda-legalize) and the lowering emits exactly what it
// recorded. 48 columns fit one gemm column tile: the segments are exchanged inside it
// (`coda.row_exchange`, `tl.gather`), BN % 64 == 0 recorded.
func.func @seg48(%a: tensor<37x40xf32>, %w: tensor<40x48xf32>) -> tensor<37x48xf32> {
  %y = coda.gemm %a, %w : tensor<37x40xf32>, tensor<40x48xf32> -> tensor<37x48xf32> {
  ^bb0(%acc: !coda.tile<37x48xf32>):
    %s = coda.segment_reduce sum %acc width 6 : !coda.tile<37x48xf32>
    coda.yield %s : !coda.tile<37x48xf32>
  }
  func.return %y : tensor<37x48xf32>
}

// Remarks come first (stderr): the split of @seg288 below.
// IR: remark: 'coda.segment_reduce' op cannot be proven tile-local: coda.segment_reduce width 6 (segments of 6 columns) is not tile-local
// IR-SAME: split off into a separate kernel
// IR:       builtin.module attributes {coda.legalized}
// IR-LABEL: func.func @seg48
// IR:       coda.gemm %a, %w {{.*}} attributes {coda.constraints = #coda.tile_constraints<bn_multiple_of = 64,
// IR:         coda.segment_reduce sum %{{.*}} width 6 {coda.row_exchange}
// IR-NOT:   coda.elementwise

// CHECK:     def _seg48_k0_gemm(
// CHECK:     # coda.segment_reduce sum width 6, segments gathered in a whole-row tile
// CHECK:     tl.gather(
// CHECK-NOT: def _seg48_k1

// -----

// 288 columns are more than a gemm tile holds: the reduction is split off (the gemm stores its
// tile, fp32) into a standalone elementwise kernel that sums each column's segment from memory
// (`coda.gathered`).
func.func @seg288(%a: tensor<37x40xf32>, %w: tensor<40x288xf32>) -> tensor<37x288xf32> {
  %y = coda.gemm %a, %w : tensor<37x40xf32>, tensor<40x288xf32> -> tensor<37x288xf32> {
  ^bb0(%acc: !coda.tile<37x288xf32>):
    %s = coda.segment_reduce sum %acc width 6 : !coda.tile<37x288xf32>
    coda.yield %s : !coda.tile<37x288xf32>
  }
  func.return %y : tensor<37x288xf32>
}

// IR:       builtin.module attributes {coda.legalized}
// IR-LABEL: func.func @seg288
// IR:       coda.gemm %a, %w
// IR:       coda.elementwise [37, 288]
// IR:         coda.segment_reduce sum %{{.*}} width 6 {coda.gathered}

// CHECK: def _seg288_k0_gemm(
// CHECK: def _seg288_k1_elementwise(
// CHECK: # coda.segment_reduce sum width 6, segments gathered from memory
