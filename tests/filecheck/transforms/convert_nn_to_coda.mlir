// RUN: coda-opt %s --split-input-file -p convert-nn-to-coda | filecheck %s
// The baseline: every nn op becomes standalone kernels, nothing fuses.

func.func @linear_bias_gelu(%x: tensor<8x32xbf16>, %w: tensor<64x32xbf16>, %b: tensor<64xbf16>) -> tensor<8x64xbf16> {
  %y = "nn.linear"(%x, %w) : (tensor<8x32xbf16>, tensor<64x32xbf16>) -> tensor<8x64xbf16>
  %y1 = "nn.add"(%y, %b) : (tensor<8x64xbf16>, tensor<64xbf16>) -> tensor<8x64xbf16>
  %g = "nn.gelu"(%y1) <{approximate = "none"}> : (tensor<8x64xbf16>) -> tensor<8x64xbf16>
  func.return %g : tensor<8x64xbf16>
}
// CHECK-LABEL: func.func @linear_bias_gelu
// CHECK:       %[[Y:.*]] = coda.gemm %x, %w transpose_b : tensor<8x32xbf16>, tensor<64x32xbf16> -> tensor<8x64xbf16> attributes {coda.origin = "nn.linear"}
// CHECK-NEXT:  ^bb0(%[[ACC:.*]]: !coda.tile<8x64xf32>):
// CHECK-NEXT:    coda.yield %[[ACC]]
// CHECK:       %[[Y1:.*]] = coda.elementwise [8, 64] ins(%[[Y]], %b : {{.*}}) -> tensor<8x64xbf16> attributes {coda.origin = "nn.add"}
// CHECK:         coda.shift %{{.*}}, %{{.*}} cols
// CHECK:       coda.elementwise [8, 64] ins(%[[Y1]] : tensor<8x64xbf16>) -> tensor<8x64xbf16> attributes {coda.origin = "nn.gelu"}
// CHECK:         coda.map
// CHECK:           math.erf

// -----

func.func @residual_mul(%a: tensor<8x32xf32>, %b: tensor<8x32xf32>, %c: tensor<32x8xf32>) -> tensor<8x8xf32> {
  %s = "nn.add"(%a, %b) : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
  %p = "nn.mul"(%s, %b) : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<8x32xf32>
  %m = "nn.matmul"(%p, %c) : (tensor<8x32xf32>, tensor<32x8xf32>) -> tensor<8x8xf32>
  func.return %m : tensor<8x8xf32>
}
// CHECK-LABEL: func.func @residual_mul
// CHECK:       coda.elementwise [8, 32] {{.*}}"nn.add"
// CHECK:         %[[T:.*]] = coda.load
// CHECK-NEXT:    coda.accumulate %[[T]], %{{.*}} : !coda.tile<8x32xf32>, tensor<8x32xf32>
// CHECK:       coda.elementwise [8, 32] {{.*}}"nn.mul"
// CHECK:         arith.mulf
// CHECK:       coda.gemm %{{.*}}, %c : tensor<8x32xf32>, tensor<32x8xf32> -> tensor<8x8xf32>

// -----

func.func @rms_norm(%x: tensor<8x32xf32>, %w: tensor<32xf32>) -> tensor<8x32xf32> {
  %h = "nn.rms_norm"(%x, %w) <{eps = 1.0e-06 : f32}> : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  func.return %h : tensor<8x32xf32>
}
// A power-of-two row fits one column tile: one row kernel with a segment reduction over the row.
// CHECK-LABEL: func.func @rms_norm
// CHECK:       coda.elementwise [8, 32] ins(%x, %w : tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32> attributes {coda.origin = "nn.rms_norm.row"}
// CHECK:         coda.segment_reduce sumsq %{{.*}} width 32
// CHECK:         coda.map
// CHECK:           math.rsqrt
// CHECK-NOT:   coda.fold

// -----

func.func @rms_norm_48(%x: tensor<8x48xf32>, %w: tensor<48xf32>) -> tensor<8x48xf32> {
  %h = "nn.rms_norm"(%x, %w) <{eps = 1.0e-06 : f32}> : (tensor<8x48xf32>, tensor<48xf32>) -> tensor<8x48xf32>
  func.return %h : tensor<8x48xf32>
}
// Otherwise: per-tile partials, a fold to rstd, and an apply kernel.
// CHECK-LABEL: func.func @rms_norm_48
// CHECK:       %[[P:.*]] = coda.elementwise [8, 48] ins(%x : tensor<8x48xf32>) -> !coda.partials<rows, 8, sum> attributes {coda.origin = "nn.rms_norm.stats"}
// CHECK:         coda.reduce sumsq %{{.*}} dim 1
// CHECK:       %[[R:.*]] = coda.fold %[[P]] : !coda.partials<rows, 8, sum> -> tensor<8xf32>
// CHECK:         math.rsqrt
// CHECK:       coda.elementwise [8, 48] ins(%x, %[[R]], %w : {{.*}}) -> tensor<8x48xf32> attributes {coda.origin = "nn.rms_norm.apply"}
// CHECK:         coda.scale %{{.*}} rows
// CHECK:         coda.scale %{{.*}} cols

// -----

func.func @layer_norm(%x: tensor<8x32xf32>, %w: tensor<32xf32>, %b: tensor<32xf32>, %y: tensor<8x48xf32>, %w2: tensor<48xf32>, %b2: tensor<48xf32>) -> (tensor<8x32xf32>, tensor<8x48xf32>) {
  %h = "nn.layer_norm"(%x, %w, %b) <{eps = 1.0e-05 : f32}> : (tensor<8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %h2 = "nn.layer_norm"(%y, %w2, %b2) <{eps = 1.0e-05 : f32}> : (tensor<8x48xf32>, tensor<48xf32>, tensor<48xf32>) -> tensor<8x48xf32>
  func.return %h, %h2 : tensor<8x32xf32>, tensor<8x48xf32>
}
// CHECK-LABEL: func.func @layer_norm
// CHECK:       coda.elementwise [8, 32] ins(%x, %w, %b : {{.*}}"nn.layer_norm.row"
// CHECK:         coda.segment_reduce sum %{{.*}} width 32
// CHECK:         coda.segment_reduce sumsq %{{.*}} width 32
// CHECK:       coda.elementwise [8, 48] ins(%y : tensor<8x48xf32>) -> (!coda.partials<rows, 8, sum>, !coda.partials<rows, 8, sum>)
// CHECK:         coda.reduce sum
// CHECK:         coda.reduce sumsq
// CHECK:       coda.fold {{.*}} -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>)
// CHECK:       coda.elementwise [8, 48] {{.*}}"nn.layer_norm.apply"
// CHECK:         coda.shift %{{.*}} rows
// CHECK:         coda.scale %{{.*}} rows
// CHECK:         coda.scale %{{.*}} cols
// CHECK:         coda.shift %{{.*}} cols

// -----

func.func @gated(%z: tensor<8x64xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
  %s = "nn.swiglu"(%z) : (tensor<8x64xf32>) -> tensor<8x32xf32>
  %g = "nn.geglu"(%z) <{approximate = "tanh"}> : (tensor<8x64xf32>) -> tensor<8x32xf32>
  func.return %s, %g : tensor<8x32xf32>, tensor<8x32xf32>
}
// The standalone gated kernel iterates over the F output columns and reads the 2F-wide z tile:
// the pair (j, j + F) is tile-local only when a tile holds whole groups of 2F columns.
// CHECK-LABEL: func.func @gated
// CHECK:       coda.elementwise [8, 32] ins(%z : tensor<8x64xf32>) -> tensor<8x32xf32> attributes {coda.origin = "nn.swiglu"}
// CHECK:         %[[Z:.*]] = coda.load %{{.*}} : tensor<8x64xf32> -> !coda.tile<8x64xf32>
// CHECK:         coda.pair_map stride 32 %[[Z]] : !coda.tile<8x64xf32> -> !coda.tile<8x32xf32>
// CHECK:       coda.elementwise [8, 32] {{.*}}"nn.geglu"
// CHECK:         coda.pair_map stride 32
// CHECK:           math.tanh

// -----

func.func @rope_qknorm(%x: tensor<8x64xf32>, %pos: tensor<8xi32>, %w: tensor<16xf32>) -> tensor<8x64xf32> {
  %n = "nn.head_rms_norm"(%x, %w) <{head_dim = 16 : i64, heads = 3 : i64, eps = 1.0e-06 : f32}> : (tensor<8x64xf32>, tensor<16xf32>) -> tensor<8x64xf32>
  %r = "nn.rope"(%n, %pos) <{head_dim = 16 : i64, rotary_heads = 3 : i64, theta = 10000.0 : f32, style = "interleaved"}> : (tensor<8x64xf32>, tensor<8xi32>) -> tensor<8x64xf32>
  func.return %r : tensor<8x64xf32>
}
// CHECK-LABEL: func.func @rope_qknorm
// CHECK:       coda.elementwise [8, 64] {{.*}}"nn.head_rms_norm"
// CHECK:         coda.segment_reduce sumsq %{{.*}} width 16
// CHECK:         coda.broadcast %{{.*}} cols : tensor<16xf32> -> !coda.tile<8x64xf32>
// CHECK:       coda.elementwise [8, 64] {{.*}}"nn.rope"
// Angles live on the 32-column tile of pairs (one per rotated pair), the rotation is 2 -> 2:
// CHECK:         coda.index cols : !coda.tile<8x32xi32>
// CHECK:         coda.broadcast %{{.*}} rows : tensor<8xi32> -> !coda.tile<8x32xi32>
// CHECK:         coda.pair_map stride 1 %{{.*}}, %{{.*}} : (!coda.tile<8x64xf32>, !coda.tile<8x32xf32>) -> !coda.tile<8x64xf32>
// CHECK:           math.cos
// CHECK:           math.sin

// -----

func.func @ce(%logits: tensor<8x128xf32>, %t: tensor<8xi32>) -> tensor<f32> {
  %l = "nn.cross_entropy"(%logits, %t) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<8x128xf32>, tensor<8xi32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
// CHECK-LABEL: func.func @ce
// CHECK:       %[[L:.*]], %[[S:.*]] = coda.elementwise [8, 128] ins(%logits, %t : {{.*}}) -> (!coda.partials<rows, 8, lse>, !coda.partials<rows, 8, sum>)
// CHECK:         coda.reduce lse %{{.*}} dim 1
// CHECK:         coda.select %{{.*}}, %{{.*}} : !coda.tile<8x128xf32>, tensor<8xi32> -> !coda.partials<rows, 8, sum>
// CHECK:       %[[LOSS:.*]], %{{.*}} = coda.fold %[[L]], %[[S]] : {{.*}} ins(%t : tensor<8xi32>) -> (tensor<f32>, tensor<f32>)
// CHECK:         arith.cmpi ne, %{{.*}}, %{{.*}}
// CHECK:       } finalize {
// CHECK:         arith.divf
// CHECK:       func.return %[[LOSS]] : tensor<f32>
