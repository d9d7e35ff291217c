// RUN: coda-opt %s --split-input-file -p coda-defer-norms 2>&1 | filecheck %s
// Reparameterize: rms_norm(x, g) @ W.T = r * ((x * g) @ W.T); the row scale moves into the GEMM.
// Remarks go to stderr as they happen, so they come before the IR:
// CHECK: defer_norms.mlir:{{[0-9]+}}:3: remark: 'nn.rms_norm' op row scale not deferred: no GEMM consumes the normalized value (used by nn.silu); it runs as a standalone norm
// CHECK: defer_norms.mlir:{{[0-9]+}}:3: remark: 'nn.rms_norm' op row scale not deferred: no GEMM produces the input to carry the statistics, so one row kernel normalizes it (cheaper than statistics + fold + pre-scale kernels)

func.func @rms_then_linear(%a: tensor<8x16xf32>, %w0: tensor<32x16xf32>, %g: tensor<32xf32>, %w: tensor<64x32xf32>) -> tensor<8x64xf32> {
  %x = "nn.linear"(%a, %w0) : (tensor<8x16xf32>, tensor<32x16xf32>) -> tensor<8x32xf32>
  %h = "nn.rms_norm"(%x, %g) <{eps = 1.0e-06 : f32}> : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %y = "nn.linear"(%h, %w) : (tensor<8x32xf32>, tensor<64x32xf32>) -> tensor<8x64xf32>
  func.return %y : tensor<8x64xf32>
}
// CHECK-LABEL: func.func @rms_then_linear
// CHECK-NOT:   = nn.rms_norm
// CHECK:       %[[P:.*]] = coda.elementwise [8, 32] ins(%x : tensor<8x32xf32>) -> !coda.partials<rows, 8, sum> attributes {coda.origin = "nn.rms_norm.stats"}
// CHECK:         coda.reduce sumsq
// CHECK:       %[[R:.*]] = coda.fold %[[P]] : !coda.partials<rows, 8, sum> -> tensor<8xf32>
// CHECK:       %[[H:.*]] = coda.elementwise [8, 32] ins(%x, %g : tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32> attributes {coda.origin = "nn.rms_norm.prescale"}
// CHECK:         coda.scale %{{.*}}, %{{.*}} cols
// CHECK:       coda.gemm %[[H]], %w transpose_b ins(%[[R]] : tensor<8xf32>) : tensor<8x32xf32>, tensor<64x32xf32> -> tensor<8x64xf32> attributes {coda.origin = "nn.linear"}
// CHECK-NEXT:  ^bb0(%[[ACC:.*]]: !coda.tile<8x64xf32>, %[[RV:.*]]: tensor<8xf32>):
// CHECK-NEXT:    %[[S:.*]] = coda.scale %[[ACC]], %[[RV]] rows
// CHECK-NEXT:    coda.yield %[[S]]
// CHECK-NOT:   = nn.linear

// -----

// LayerNorm: acc * r - (r * mu) * c + e with c = g @ W.T and e = b @ W.T from one GEMV kernel
// (`whole rows`: each program walks whole rows of W, so both reductions complete without a fold).
func.func @ln_then_linear(%a: tensor<8x16xf32>, %w0: tensor<32x16xf32>, %g: tensor<32xf32>, %b: tensor<32xf32>, %w: tensor<64x32xf32>) -> tensor<8x64xf32> {
  %x = "nn.linear"(%a, %w0) : (tensor<8x16xf32>, tensor<32x16xf32>) -> tensor<8x32xf32>
  %h = "nn.layer_norm"(%x, %g, %b) <{eps = 1.0e-05 : f32}> : (tensor<8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %y = "nn.linear"(%h, %w) : (tensor<8x32xf32>, tensor<64x32xf32>) -> tensor<8x64xf32>
  func.return %y : tensor<8x64xf32>
}
// CHECK-LABEL: func.func @ln_then_linear
// CHECK:       coda.elementwise [8, 32] ins(%x : tensor<8x32xf32>) -> (!coda.partials<rows, 8, sum>, !coda.partials<rows, 8, sum>)
// CHECK:       %[[R:.*]], %{{.*}}, %[[RMU:.*]] = coda.fold {{.*}} -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) attributes {coda.origin = "nn.layer_norm.rstd"}
// CHECK:       %[[H:.*]] = coda.elementwise [8, 32] ins(%x, %g : {{.*}}"nn.layer_norm.prescale"
// CHECK:       %[[C:.*]], %[[E:.*]] = coda.elementwise [64, 32] whole rows ins(%w, %g, %b : tensor<64x32xf32>, tensor<32xf32>, tensor<32xf32>) -> (tensor<64xf32>, tensor<64xf32>) attributes {coda.origin = "nn.layer_norm.colvec"}
// CHECK:         coda.reduce sum %{{.*}} dim 1
// CHECK:         coda.reduce sum %{{.*}} dim 1
// CHECK-NOT:   coda.fold
// CHECK:       coda.gemm %[[H]], %w transpose_b ins(%[[R]], %[[RMU]], %[[C]], %[[E]] : {{.*}})
// CHECK:         coda.scale %{{.*}} rows
// CHECK:         coda.broadcast %{{.*}} rows
// CHECK:         coda.broadcast %{{.*}} cols
// CHECK:         coda.map
// CHECK:           arith.mulf
// CHECK:           arith.subf
// CHECK:         coda.shift %{{.*}} cols

// -----

// Refusal: no GEMM consumes the normalized value, so there is nothing to defer into.
func.func @norm_then_silu(%x: tensor<8x32xf32>, %g: tensor<32xf32>) -> tensor<8x32xf32> {
  %h = "nn.rms_norm"(%x, %g) <{eps = 1.0e-06 : f32}> : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %s = "nn.silu"(%h) : (tensor<8x32xf32>) -> tensor<8x32xf32>
  func.return %s : tensor<8x32xf32>
}
// CHECK-LABEL: func.func @norm_then_silu
// CHECK:       = nn.rms_norm

// -----

// A norm with a GEMM user and another user: deferred for the GEMM, kept for the other.
func.func @shared(%a: tensor<8x16xf32>, %w0: tensor<32x16xf32>, %g: tensor<32xf32>, %w: tensor<64x32xf32>) -> (tensor<8x64xf32>, tensor<8x32xf32>) {
  %x = "nn.linear"(%a, %w0) : (tensor<8x16xf32>, tensor<32x16xf32>) -> tensor<8x32xf32>
  %h = "nn.rms_norm"(%x, %g) <{eps = 1.0e-06 : f32}> : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %y = "nn.linear"(%h, %w) : (tensor<8x32xf32>, tensor<64x32xf32>) -> tensor<8x64xf32>
  func.return %y, %h : tensor<8x64xf32>, tensor<8x32xf32>
}
// CHECK-LABEL: func.func @shared
// CHECK:       %[[H:.*]] = nn.rms_norm
// CHECK:       coda.gemm
// CHECK:         coda.scale %{{.*}} rows
// CHECK:       func.return %{{.*}}, %[[H]]

// -----

// No GEMM produces x (a function argument): one row kernel beats statistics + fold + pre-scale.
func.func @first_layer(%x: tensor<8x32xf32>, %g: tensor<32xf32>, %w: tensor<64x32xf32>) -> tensor<8x64xf32> {
  %h = "nn.rms_norm"(%x, %g) <{eps = 1.0e-06 : f32}> : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %y = "nn.linear"(%h, %w) : (tensor<8x32xf32>, tensor<64x32xf32>) -> tensor<8x64xf32>
  func.return %y : tensor<8x64xf32>
}
// CHECK-LABEL: func.func @first_layer
// CHECK:       = nn.rms_norm
// CHECK:       = nn.linear
