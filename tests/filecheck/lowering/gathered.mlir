// RUN: coda-opt %s -t triton 2>&1 | filecheck %s
// RUN: coda-opt %s -p coda-legalize 2>&1 | filecheck %s --check-prefix=IR

// A segment of 6 columns: no power-of-two column tile holds whole segments, so the reduction
// cannot stay in the gemm's epilogue. The Triton target legalizes hand-written coda first
// (coda-legalize): the gemm stores its tile (fp32), a standalone elementwise kernel reads it
// and sums each column's segment from memory (`coda.gathered`), and the lowering emits the
// gathered form for exactly the op legality marked.
func.func @seg(%a: tensor<37x40xf32>, %w: tensor<40x48xf32>) -> tensor<37x48xf32> {
  %y = coda.gemm %a, %w : tensor<37x40xf32>, tensor<40x48xf32> -> tensor<37x48xf32> {
  ^bb0(%acc: !coda.tile<37x48xf32>):
    %s = coda.segment_reduce sum %acc width 6 : !coda.tile<37x48xf32>
    coda.yield %s : !coda.tile<37x48xf32>
  }
  func.return %y : tensor<37x48xf32>
}

// IR: remark: 'coda.segment_reduce' op cannot be proven tile-local: coda.segment_reduce width 6 (segments of 6 columns) is not tile-local
// IR-SAME: split off into a separate kernel
// IR:       builtin.module attributes {coda.legalized}
// IR-LABEL: func.func @seg
// IR:       coda.gemm %a, %w
// IR:       coda.elementwise [37, 48]
// IR:         coda.segment_reduce sum %{{.*}} width 6 {coda.gathered}

// CHECK: def _seg_k0_gemm(
// CHECK: def _seg_k1_elementwise(
// CHECK: # coda.segment_reduce sum width 6, segments gathered from memory
