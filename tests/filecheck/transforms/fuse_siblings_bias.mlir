// RUN: coda-opt %s -p nn-to-coda | filecheck %s

// Qwen2's q/k/v with biases, then RoPE: after nn-fuse-siblings one GEMM whose epilogue adds the
// concatenated bias (a column shift) and rotates q and k; no standalone bias or RoPE kernel.
// CHECK-LABEL: func.func @qkv_bias_rope
// CHECK:      coda.gemm %h, %wq_wk_wv transpose_b ins(%bq_bk_bv, %pos
// CHECK-SAME: coda.origin = "nn.linear+nn.add+nn.rope"
// CHECK:     coda.shift %{{.*}} cols
// CHECK:     coda.pair_map
// CHECK-NOT: coda.gemm
func.func @qkv_bias_rope(%h: tensor<16x64xbf16>, %wq: tensor<64x64xbf16>, %wk: tensor<32x64xbf16>, %wv: tensor<32x64xbf16>,
                         %bq: tensor<64xbf16>, %bk: tensor<32xbf16>, %bv: tensor<32xbf16>, %pos: tensor<16xi32>) -> tensor<16x128xbf16> {
  %q0 = nn.linear %h, %wq : tensor<16x64xbf16>, tensor<64x64xbf16> -> tensor<16x64xbf16>
  %q = nn.add %q0, %bq : tensor<16x64xbf16>, tensor<64xbf16> -> tensor<16x64xbf16>
  %k0 = nn.linear %h, %wk : tensor<16x64xbf16>, tensor<32x64xbf16> -> tensor<16x32xbf16>
  %k = nn.add %k0, %bk : tensor<16x32xbf16>, tensor<32xbf16> -> tensor<16x32xbf16>
  %v0 = nn.linear %h, %wv : tensor<16x64xbf16>, tensor<32x64xbf16> -> tensor<16x32xbf16>
  %v = nn.add %v0, %bv : tensor<16x32xbf16>, tensor<32xbf16> -> tensor<16x32xbf16>
  %qkv = nn.concat %q, %k, %v {axis = 1 : i64} : tensor<16x64xbf16>, tensor<16x32xbf16>, tensor<16x32xbf16> -> tensor<16x128xbf16>
  %r = nn.rope %qkv, %pos {head_dim = 16 : i64, rotary_heads = 6 : i64, theta = 1.0e+04 : f32, style = "half"} : tensor<16x128xbf16>, tensor<16xi32> -> tensor<16x128xbf16>
  func.return %r : tensor<16x128xbf16>
}

// Granite's residual multiplier: nn.scale of the output projection is a map in its epilogue,
// with the residual add (one kernel).
// CHECK-LABEL: func.func @scaled_residual
// CHECK:      coda.gemm %y, %wo transpose_b ins(%x
// CHECK-SAME: coda.origin = "nn.linear+nn.scale+nn.add"
// CHECK:     arith.mulf
// CHECK:     coda.accumulate
// CHECK-NOT: coda.gemm
func.func @scaled_residual(%x: tensor<16x64xbf16>, %y: tensor<16x64xbf16>, %wo: tensor<64x64xbf16>) -> tensor<16x64xbf16> {
  %a = nn.linear %y, %wo : tensor<16x64xbf16>, tensor<64x64xbf16> -> tensor<16x64xbf16>
  %s = nn.scale %a {factor = 2.2e-01 : f32} : tensor<16x64xbf16> -> tensor<16x64xbf16>
  %x1 = nn.add %x, %s : tensor<16x64xbf16>, tensor<16x64xbf16> -> tensor<16x64xbf16>
  func.return %x1 : tensor<16x64xbf16>
}
