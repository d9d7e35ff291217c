// RUN: coda-opt %s --remarks --split-input-file -p 'nn-to-coda{rope-table=never}' 2>&1 | filecheck %s
// RUN: coda-opt %s --split-input-file -p 'nn-to-coda{rope-table=never}' | coda-opt --split-input-file | filecheck %s --check-prefix=ROUND

// Phi-4-mini's partial rotation: head_dim 128, rotary_dim 96, style "half". Pairs (i, i + 48)
// for i < 48 rotate by frequency i; columns 96..127 of each head pass through. rotary_dim does
// not divide head_dim, so the pair map carries a period: pairs (c, c + 48) in the first 96
// columns of each 128, the other 32 paired adjacently (angle 0). In the QKV GEMM's epilogue,
// a column tile holding whole heads (BN % 128 == 0) exchanges the pairs inside the tile; the
// GEMM's columns are not interleaved.

// The remark of the last function (stderr comes first): located at its nn.rope.
// CHECK:       rope_partial_half.mlir:{{[0-9]+}}:3: remark: 'coda.pair_map' op not fused into the epilogue of 'nn.linear'
// CHECK-SAME:  coda.pair_map stride 12 period 40 (pairs c, c + 12 in the first 24 columns of each 40, the rest adjacent) is not tile-local
// CHECK-SAME:  interleaving the columns is not possible: a pair_map with a period (40: pairs (c, c + 12) in the first columns of each, the rest adjacent) is never interleaved; it stays a separate kernel

// CHECK-LABEL: func.func @phi4_qkv_rope
// CHECK:       coda.gemm %h, %wqkv transpose_b ins(%pos
// CHECK-NOT:   interleave
// CHECK-SAME:  coda.origin = "nn.linear+nn.rope"
// CHECK-SAME:  bn_multiple_of = 128, reasons = ["coda.pair_map stride 48 period 128 (pairs c, c + 48 in the first 96 columns of each 128, the rest adjacent): {{[a-z]+}}-local when BN % 128 == 0"]
// CHECK:       coda.pair_map stride 48 period 128 %{{.*}}, %{{.*}} : (!coda.tile<16x384xf32>, !coda.tile<16x192xf32>) -> !coda.tile<16x384xf32> {
// CHECK-NOT:   coda.elementwise
// ROUND-LABEL: func.func @phi4_qkv_rope
// ROUND:       coda.pair_map stride 48 period 128
func.func @phi4_qkv_rope(%h: tensor<16x64xbf16>, %wqkv: tensor<384x64xbf16>, %pos: tensor<16xi32>) -> tensor<16x384xbf16> {
  %qkv = nn.linear %h, %wqkv : tensor<16x64xbf16>, tensor<384x64xbf16> -> tensor<16x384xbf16>
  %r = nn.rope %qkv, %pos {head_dim = 128 : i64, rotary_heads = 2 : i64, theta = 1.0e+04 : f32, style = "half", rotary_dim = 96 : i64} : tensor<16x384xbf16>, tensor<16xi32> -> tensor<16x384xbf16>
  func.return %r : tensor<16x384xbf16>
}

// -----

// Its gradient (the attention's dq/dk, produced by no GEMM): rotate by the negated angle in an
// elementwise pass whose column tiles hold whole heads.
// CHECK-LABEL: func.func @phi4_rope_grad
// CHECK:       coda.elementwise [16, 384]
// CHECK-SAME:  coda.origin = "nn.rope_grad"
// CHECK-SAME:  bn_multiple_of = 128
// CHECK:       coda.pair_map stride 48 period 128 %{{.*}}, %{{.*}} : (!coda.tile<16x384xf32>, !coda.tile<16x192xf32>) -> !coda.tile<16x384xf32> {
func.func @phi4_rope_grad(%dy: tensor<16x384xbf16>, %pos: tensor<16xi32>) -> tensor<16x384xbf16> {
  %dx = nn.rope_grad %dy, %pos {head_dim = 128 : i64, rotary_heads = 2 : i64, theta = 1.0e+04 : f32, style = "half", rotary_dim = 96 : i64} : tensor<16x384xbf16>, tensor<16xi32> -> tensor<16x384xbf16>
  func.return %dx : tensor<16x384xbf16>
}

// -----

// head_dim 40 (rotary_dim 24): no power-of-two column tile holds whole heads and 8 heads (320
// columns) are more than one GEMM tile covers, so the rotation cannot join the GEMM: a located
// remark, and a separate elementwise kernel reading its pairs from memory (never a wrong number).
// CHECK-LABEL: func.func @odd_head_unfused
// CHECK:       coda.gemm %h, %w transpose_b
// CHECK-SAME:  coda.origin = "nn.linear"
// CHECK:       coda.elementwise [16, 320]
// CHECK-SAME:  coda.origin = "nn.rope"
// CHECK:       coda.pair_map stride 12 period 40 {{.*}} attributes {coda.gathered}
func.func @odd_head_unfused(%h: tensor<16x32xf32>, %w: tensor<320x32xf32>, %pos: tensor<16xi32>) -> tensor<16x320xf32> {
  %q = nn.linear %h, %w : tensor<16x32xf32>, tensor<320x32xf32> -> tensor<16x320xf32>
  %r = nn.rope %q, %pos {head_dim = 40 : i64, rotary_heads = 6 : i64, theta = 1.0e+04 : f32, style = "half", rotary_dim = 24 : i64} : tensor<16x320xf32>, tensor<16xi32> -> tensor<16x320xf32>
  func.return %r : tensor<16x320xf32>
}
