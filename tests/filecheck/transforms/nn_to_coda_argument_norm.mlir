// RUN: coda-opt %s --remarks -p nn-to-coda 2>&1 | filecheck %s
// RUN: coda-opt %s --remarks -p 'nn-to-coda{whole-rows-stats=false}' 2>&1 | filecheck %s --check-prefix=BEFORE
// Issue 9 item 4: an MLP that starts from its input (x is a function argument; D = 96 has no
// power-of-two row tile). The norm is deferred like every other: 3 launches in all, ONE
// `whole rows` statistics kernel (row sums complete in the program, no fold) + 2 GEMMs, the
// row scale in the first GEMM's epilogue; the normalized value is never written.
func.func @mlp(%x: tensor<37x96xbf16>, %g: tensor<96xbf16>, %w1: tensor<64x96xbf16>, %w2: tensor<96x64xbf16>) -> tensor<37x96xbf16> {
  %h = "nn.rms_norm"(%x, %g) <{eps = 1.0e-06 : f32}> : (tensor<37x96xbf16>, tensor<96xbf16>) -> tensor<37x96xbf16>
  %u = "nn.linear"(%h, %w1) : (tensor<37x96xbf16>, tensor<64x96xbf16>) -> tensor<37x64xbf16>
  %s = "nn.silu"(%u) : (tensor<37x64xbf16>) -> tensor<37x64xbf16>
  %y = "nn.linear"(%s, %w2) : (tensor<37x64xbf16>, tensor<96x64xbf16>) -> tensor<37x96xbf16>
  func.return %y : tensor<37x96xbf16>
}
// CHECK-NOT:   remark
// CHECK-LABEL: func.func @mlp
// CHECK:       %[[H:.*]], %[[SS:.*]] = coda.elementwise [37, 96] whole rows ins(%x, %g : tensor<37x96xbf16>, tensor<96xbf16>) -> (tensor<37x96xbf16>, tensor<37xf32>) attributes {coda.origin = "nn.rms_norm.stats"}
// CHECK:         coda.reduce sumsq %{{.*}} dim 1
// CHECK-NOT:   coda.elementwise
// CHECK-NOT:   coda.fold
// CHECK:       %[[S:.*]] = coda.gemm %[[H]], %w1 transpose_b ins(%[[SS]] : tensor<37xf32>) {{.*}} attributes {coda.origin = "nn.linear+nn.silu"}
// CHECK:         coda.broadcast %{{.*}} rows
// CHECK:           math.rsqrt
// CHECK-NOT:   coda.elementwise
// CHECK-NOT:   coda.fold
// CHECK:       %[[Y:.*]] = coda.gemm %[[S]], %w2 transpose_b
// CHECK-NOT:   coda.elementwise
// CHECK-NOT:   coda.fold
// CHECK:       func.return %[[Y]]

// Before (the option off): statistics partials, fold, apply, then the 2 GEMMs (5 launches).
// BEFORE:      remark: 'nn.rms_norm' op row scale not deferred: no GEMM produces the input
// BEFORE:      coda.elementwise [37, 96] ins(%x : tensor<37x96xbf16>) -> !coda.partials<rows, 37, sum> attributes {coda.origin = "nn.rms_norm.stats"}
// BEFORE:      coda.fold {{.*}} attributes {coda.origin = "nn.rms_norm.rstd"}
// BEFORE:      coda.elementwise [37, 96] {{.*}} attributes {coda.origin = "nn.rms_norm.apply"}
// BEFORE:      coda.gemm
// BEFORE:      coda.gemm
