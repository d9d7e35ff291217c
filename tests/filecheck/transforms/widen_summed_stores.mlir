// RUN: coda-opt %s --split-input-file -p coda-widen-summed-stores | filecheck %s

// A gemm output that only the embedding gradient reads is stored in f32; the gradient keeps
// the table's bf16 (one rounding of an fp32 sum of unrounded rows).
// CHECK-LABEL: func.func @only_summed
// CHECK:       %[[DY:.*]] = coda.gemm {{.*}} -> tensor<6x8xf32>
// CHECK:       "coda.embedding_grad"(%[[DY]], %{{.*}}) : (tensor<6x8xf32>, tensor<6xi32>) -> tensor<5x8xbf16>
func.func @only_summed(%a: tensor<6x4xbf16>, %w: tensor<8x4xbf16>, %ids: tensor<6xi32>) -> tensor<5x8xbf16> {
  %dy = coda.gemm %a, %w transpose_b : tensor<6x4xbf16>, tensor<8x4xbf16> -> tensor<6x8xbf16> {
  ^bb0(%acc: !coda.tile<6x8xf32>):
    coda.yield %acc : !coda.tile<6x8xf32>
  }
  %g = "coda.embedding_grad"(%dy, %ids) : (tensor<6x8xbf16>, tensor<6xi32>) -> tensor<5x8xbf16>
  func.return %g : tensor<5x8xbf16>
}

// -----

// Returned as well: the caller sees the program's element type, so nothing changes.
// CHECK-LABEL: func.func @also_returned
// CHECK:       coda.gemm {{.*}} -> tensor<6x8xbf16>
// CHECK:       "coda.embedding_grad"(%{{.*}}, %{{.*}}) : (tensor<6x8xbf16>, tensor<6xi32>) -> tensor<5x8xbf16>
func.func @also_returned(%a: tensor<6x4xbf16>, %w: tensor<8x4xbf16>, %ids: tensor<6xi32>) -> (tensor<5x8xbf16>, tensor<6x8xbf16>) {
  %dy = coda.gemm %a, %w transpose_b : tensor<6x4xbf16>, tensor<8x4xbf16> -> tensor<6x8xbf16> {
  ^bb0(%acc: !coda.tile<6x8xf32>):
    coda.yield %acc : !coda.tile<6x8xf32>
  }
  %g = "coda.embedding_grad"(%dy, %ids) : (tensor<6x8xbf16>, tensor<6xi32>) -> tensor<5x8xbf16>
  func.return %g, %dy : tensor<5x8xbf16>, tensor<6x8xbf16>
}

// -----

// A function argument's type is the caller's: unchanged.
// CHECK-LABEL: func.func @argument
// CHECK:       "coda.embedding_grad"(%{{.*}}, %{{.*}}) : (tensor<6x8xbf16>, tensor<6xi32>) -> tensor<5x8xbf16>
func.func @argument(%dy: tensor<6x8xbf16>, %ids: tensor<6xi32>) -> tensor<5x8xbf16> {
  %g = "coda.embedding_grad"(%dy, %ids) : (tensor<6x8xbf16>, tensor<6xi32>) -> tensor<5x8xbf16>
  func.return %g : tensor<5x8xbf16>
}

// -----

// A gemm output whose only reader loads it with coda.full_precision (the separate RMSNorm-backward
// pass reading dy) is stored in f32, and the reader's region argument follows.
// CHECK-LABEL: func.func @full_precision_reader
// CHECK:       %[[DY:.*]] = coda.gemm {{.*}} -> tensor<6x8xf32>
// CHECK:       coda.elementwise [6, 8] ins(%[[DY]] : tensor<6x8xf32>)
// CHECK-NEXT:  ^bb0(%[[ARG:.*]]: tensor<6x8xf32>):
// CHECK-NEXT:    coda.load %[[ARG]] {coda.full_precision} : tensor<6x8xf32> -> !coda.tile<6x8xf32>
func.func @full_precision_reader(%a: tensor<6x4xbf16>, %w: tensor<8x4xbf16>) -> tensor<6x8xbf16> {
  %dy = coda.gemm %a, %w transpose_b : tensor<6x4xbf16>, tensor<8x4xbf16> -> tensor<6x8xbf16> {
  ^bb0(%acc: !coda.tile<6x8xf32>):
    coda.yield %acc : !coda.tile<6x8xf32>
  }
  %dx = coda.elementwise [6, 8] ins(%dy : tensor<6x8xbf16>) -> tensor<6x8xbf16> {
  ^bb0(%t: tensor<6x8xbf16>):
    %l = coda.load %t {coda.full_precision} : tensor<6x8xbf16> -> !coda.tile<6x8xf32>
    coda.yield %l : !coda.tile<6x8xf32>
  }
  func.return %dx : tensor<6x8xbf16>
}

// -----

// A second reader that does not ask (an unmarked load): the output keeps its type for both.
// CHECK-LABEL: func.func @one_reader_does_not_ask
// CHECK:       coda.gemm {{.*}} -> tensor<6x8xbf16>
// CHECK:       coda.elementwise [6, 8] ins(%{{.*}} : tensor<6x8xbf16>)
// CHECK-NEXT:  ^bb0(%{{.*}}: tensor<6x8xbf16>):
// CHECK-NEXT:    coda.load %{{.*}} {coda.full_precision} : tensor<6x8xbf16>
// CHECK:       coda.elementwise [6, 8] ins(%{{.*}} : tensor<6x8xbf16>)
func.func @one_reader_does_not_ask(%a: tensor<6x4xbf16>, %w: tensor<8x4xbf16>) -> (tensor<6x8xbf16>, tensor<6x8xbf16>) {
  %dy = coda.gemm %a, %w transpose_b : tensor<6x4xbf16>, tensor<8x4xbf16> -> tensor<6x8xbf16> {
  ^bb0(%acc: !coda.tile<6x8xf32>):
    coda.yield %acc : !coda.tile<6x8xf32>
  }
  %dx = coda.elementwise [6, 8] ins(%dy : tensor<6x8xbf16>) -> tensor<6x8xbf16> {
  ^bb0(%t: tensor<6x8xbf16>):
    %l = coda.load %t {coda.full_precision} : tensor<6x8xbf16> -> !coda.tile<6x8xf32>
    coda.yield %l : !coda.tile<6x8xf32>
  }
  %dz = coda.elementwise [6, 8] ins(%dy : tensor<6x8xbf16>) -> tensor<6x8xbf16> {
  ^bb0(%t: tensor<6x8xbf16>):
    %l = coda.load %t : tensor<6x8xbf16> -> !coda.tile<6x8xf32>
    coda.yield %l : !coda.tile<6x8xf32>
  }
  func.return %dx, %dz : tensor<6x8xbf16>, tensor<6x8xbf16>
}
