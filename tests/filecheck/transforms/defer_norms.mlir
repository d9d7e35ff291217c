// RUN: coda-opt %s --remarks --split-input-file -p coda-defer-norms 2>&1 | filecheck %s
// Reparameterize: rms_norm(x, g) @ W.T = r * ((x * g) @ W.T); the row scale moves into the GEMM.
// Remarks go to stderr as they happen, so they come before the IR:
// CHECK: defer_norms.mlir:{{[0-9]+}}:3: remark: 'nn.rms_norm' op row scale not deferred: no GEMM consumes the normalized value (used by nn.silu); it runs as a standalone norm
// CHECK: defer_norms.mlir:{{[0-9]+}}:3: remark: 'nn.layer_norm' op row scale not deferred: no GEMM produces the input to carry the statistics, so one row kernel normalizes it (mean, then the variance of x - mean: more accurate than one-pass statistics when |mean| >> std, and as few launches)
// CHECK-NOT: no GEMM produces the input

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

// No GEMM produces x (a function argument): deferred all the same. ONE `whole rows` kernel
// completes the row sum of squares in the program (no partials, no fold) and writes x * g; the
// GEMM's epilogue turns the sum into rstd and scales its rows. The normalized value is never
// written.
func.func @first_layer(%x: tensor<8x32xf32>, %g: tensor<32xf32>, %w: tensor<64x32xf32>) -> tensor<8x64xf32> {
  %h = "nn.rms_norm"(%x, %g) <{eps = 1.0e-06 : f32}> : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %y = "nn.linear"(%h, %w) : (tensor<8x32xf32>, tensor<64x32xf32>) -> tensor<8x64xf32>
  func.return %y : tensor<8x64xf32>
}
// CHECK-LABEL: func.func @first_layer
// CHECK-NOT:   = nn.rms_norm
// CHECK:       %[[H:.*]], %[[SS:.*]] = coda.elementwise [8, 32] whole rows ins(%x, %g : tensor<8x32xf32>, tensor<32xf32>) -> (tensor<8x32xf32>, tensor<8xf32>) attributes {coda.origin = "nn.rms_norm.stats"}
// CHECK:         %[[T:.*]] = coda.load
// CHECK:         coda.scale %[[T]], %{{.*}} cols
// CHECK:         coda.reduce sumsq %[[T]] dim 1
// CHECK-NOT:   coda.fold
// CHECK:       coda.gemm %[[H]], %w transpose_b ins(%[[SS]] : tensor<8xf32>) : tensor<8x32xf32>, tensor<64x32xf32> -> tensor<8x64xf32> attributes {coda.origin = "nn.linear"}
// rstd from the row broadcast alone (Triton's broadcast reordering computes it once per row):
// CHECK:         %[[B:.*]] = coda.broadcast %{{.*}} rows
// CHECK-NEXT:    %[[RT:.*]] = coda.map %[[B]] : !coda.tile<8x64xf32> -> !coda.tile<8x64xf32>
// CHECK:           arith.constant 3.125000e-02
// CHECK:           math.rsqrt
// CHECK:         coda.map %{{.*}}, %[[RT]]
// CHECK-NEXT:    ^bb{{.*}}
// CHECK-NEXT:      arith.mulf
// CHECK-NOT:   = nn.

// -----

// LayerNorm of an argument, D = 40 (no power-of-two row tile): the same statistics kernel
// completes sum(x) and sum(x^2); the c/e column vectors as for a GEMM-produced input. A saved
// nn.layer_norm_stats (a training forward) maps the completed sums with a fold of no
// partials, not a second pass over x.
func.func @first_layer_ln(%x: tensor<8x40xf32>, %g: tensor<40xf32>, %b: tensor<40xf32>, %w: tensor<24x40xf32>) -> (tensor<8x24xf32>, tensor<8xf32>, tensor<8xf32>) {
  %h = "nn.layer_norm"(%x, %g, %b) <{eps = 1.0e-05 : f32}> : (tensor<8x40xf32>, tensor<40xf32>, tensor<40xf32>) -> tensor<8x40xf32>
  %mu, %r = "nn.layer_norm_stats"(%x) <{eps = 1.0e-05 : f32}> : (tensor<8x40xf32>) -> (tensor<8xf32>, tensor<8xf32>)
  %y = "nn.linear"(%h, %w) : (tensor<8x40xf32>, tensor<24x40xf32>) -> tensor<8x24xf32>
  func.return %y, %mu, %r : tensor<8x24xf32>, tensor<8xf32>, tensor<8xf32>
}
// CHECK-LABEL: func.func @first_layer_ln
// CHECK:       %[[H:.*]], %[[SM:.*]], %[[SS:.*]] = coda.elementwise [8, 40] whole rows ins(%x, %g : {{.*}}) -> (tensor<8x40xf32>, tensor<8xf32>, tensor<8xf32>) attributes {coda.origin = "nn.layer_norm.stats"}
// CHECK:         coda.reduce sum %{{.*}} dim 1
// CHECK:         coda.scale %{{.*}} cols
// CHECK:         coda.reduce sumsq %{{.*}} dim 1
// CHECK:       %[[MU:.*]], %[[R:.*]] = coda.fold ins(%[[SM]], %[[SS]] : tensor<8xf32>, tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) attributes {coda.origin = "nn.layer_norm_stats.fold"}
// CHECK:       %[[C:.*]], %[[E:.*]] = coda.elementwise [24, 40] whole rows ins(%w, %g, %b : {{.*}}) attributes {coda.origin = "nn.layer_norm.colvec"}
// CHECK:       coda.gemm %[[H]], %w transpose_b ins(%[[SM]], %[[SS]], %[[C]], %[[E]] : {{.*}})
// CHECK:         coda.map
// CHECK:           math.rsqrt
// CHECK:           arith.subf
// CHECK:         coda.shift %{{.*}} cols
// CHECK:       func.return %{{.*}}, %[[MU]], %[[R]]

// -----

// LayerNorm of an argument whose row fits one tile (D = 32): its two-pass row kernel stays
// (mean, then the variance of x - mean); the whole-row statistics would be one-pass moments,
// which cancel when |mean| >> std. One launch before the GEMM either way.
func.func @first_layer_ln_two_pass(%x: tensor<8x32xf32>, %g: tensor<32xf32>, %b: tensor<32xf32>, %w: tensor<24x32xf32>) -> tensor<8x24xf32> {
  %h = "nn.layer_norm"(%x, %g, %b) <{eps = 1.0e-05 : f32}> : (tensor<8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %y = "nn.linear"(%h, %w) : (tensor<8x32xf32>, tensor<24x32xf32>) -> tensor<8x24xf32>
  func.return %y : tensor<8x24xf32>
}
// CHECK-LABEL: func.func @first_layer_ln_two_pass
// CHECK-NOT:   coda.elementwise
// CHECK:       = nn.layer_norm
// CHECK:       = nn.linear
