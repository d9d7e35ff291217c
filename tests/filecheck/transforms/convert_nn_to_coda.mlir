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

// -----

// Partial, scaled RoPE (Phi-4-mini / GLM4's partial_rotary_factor, yarn / longrope's
// attention_scaling): of each 16-column head the first rotary_dim = 8 rotate, pairs (i, i + 4)
// (stride rd/2, groups of 8: two a head), with rd/2 = 4 frequencies theta^(-2j/8); pair j >= 4 of
// a head (its columns 8..15) and heads past rotary_heads get angle 0 and magnitude 1. The
// magnitude is a second narrow operand of the rotation, multiplying cos and sin.
func.func @rope_partial_scaled(%x: tensor<5x48xbf16>, %pos: tensor<5xi32>) -> tensor<5x48xbf16> {
  %r = "nn.rope"(%x, %pos) <{head_dim = 16 : i64, rotary_heads = 2 : i64, theta = 10000.0 : f32, style = "half", rotary_dim = 8 : i64, scaling = 1.25 : f32}> : (tensor<5x48xbf16>, tensor<5xi32>) -> tensor<5x48xbf16>
  func.return %r : tensor<5x48xbf16>
}
// CHECK-LABEL: func.func @rope_partial_scaled
// CHECK:       coda.elementwise [5, 48] {{.*}} attributes {coda.origin = "nn.rope"}
// CHECK:         %[[IDX:.*]] = coda.index cols : !coda.tile<5x24xi32>
// CHECK:         %[[ANG:.*]] = coda.map %[[IDX]], %{{.*}} : {{.*}} -> !coda.tile<5x24xf32>
// CHECK:           arith.constant 1.000000e-03 : f32
// CHECK:           %[[A:.*]] = arith.mulf
// CHECK-NEXT:      arith.constant 8 : i32
// CHECK-NEXT:      arith.remsi
// CHECK-NEXT:      arith.constant 4 : i32
// CHECK-NEXT:      arith.cmpi slt
// CHECK-NEXT:      arith.constant 0.000000e+00 : f32
// CHECK-NEXT:      %[[PART:.*]] = arith.select %{{.*}}, %[[A]]
// CHECK-NEXT:      arith.constant 16 : i32
// CHECK-NEXT:      arith.cmpi slt
// CHECK-NEXT:      arith.constant 0.000000e+00 : f32
// CHECK-NEXT:      arith.select %{{.*}}, %[[PART]]
// CHECK:         %[[MAG:.*]] = coda.map %[[IDX]] : !coda.tile<5x24xi32> -> !coda.tile<5x24xf32>
// CHECK:           arith.constant 1.250000e+00 : f32
// CHECK:           arith.constant 1.000000e+00 : f32
// CHECK:         coda.pair_map stride 4 %{{.*}}, %[[ANG]], %[[MAG]]
// CHECK:           %[[C:.*]] = math.cos
// CHECK-NEXT:      %[[S:.*]] = math.sin
// CHECK-NEXT:      arith.mulf %[[C]], %{{.*}} : f32
// CHECK-NEXT:      arith.mulf %[[S]], %{{.*}} : f32

// -----

func.func @rope_interleaved_12_of_16(%x: tensor<5x32xf32>, %pos: tensor<5xi32>) -> tensor<5x32xf32> {
  %r = "nn.rope"(%x, %pos) <{head_dim = 16 : i64, rotary_heads = 2 : i64, theta = 10000.0 : f32, style = "interleaved", rotary_dim = 12 : i64}> : (tensor<5x32xf32>, tensor<5xi32>) -> tensor<5x32xf32>
  func.return %r : tensor<5x32xf32>
}
// Interleaved pairs (2i, 2i + 1) take any even rotary_dim (GLM4): stride 1, pair j of a head
// rotates when j < 6.
// CHECK-LABEL: func.func @rope_interleaved_12_of_16
// CHECK:         arith.constant 6 : i32
// CHECK:         coda.pair_map stride 1
