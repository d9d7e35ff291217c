// RUN: coda-opt %s --remarks --split-input-file -p nn-plan,convert-nn-to-coda,coda-fuse 2>&1 | filecheck %s
// RUN: coda-opt %s --remarks --split-input-file -p 'nn-plan{cost-model=false},convert-nn-to-coda,coda-fuse' 2>&1 | filecheck %s --check-prefix=OFF

// QK-norm placement is a cost-model choice of nn-plan (coda-fuse obeys its record): the norm in the QKV GEMM's epilogue
// needs whole heads per tile (BN a multiple of head_dim); io_plans.qk_norm_tile_width prices
// every BN and the pass fuses only when its cheapest plan keeps whole heads. The two
// functions differ only in M (head_dim 256, N = K = 4096, bf16): at M = 8192 a 128x256 tile
// holding one whole head is cheapest, so the norm fuses; at decode size (M = 64) a 256-wide
// tile leaves 16 CTAs for the whole GEMM, 64-wide tiles with per-head partials fill more SMs,
// so the norm stays a separate elementwise kernel. With cost-model=false both fuse.

// Remarks come first (stderr): exactly one, for @qk_norm_decode (its head_rms_norm, line 44).
// CHECK:       qk_norm_cost_model.mlir:44:3: remark: 'nn.head_rms_norm' op QK-norm not fused into the epilogue of 'nn.linear' (
// CHECK-SAME:  the IO model found the unfused plan cheaper: unfused (per-head partials + a norm kernel, BN=64) {{[0-9.]+}} us vs fused (whole heads in the tile, BN=256) {{[0-9.]+}} us; it stays a separate kernel
// CHECK-NOT:   remark
// OFF-NOT:     remark

// CHECK-LABEL: func.func @qk_norm_prefill
// CHECK:       coda.gemm {{.*}} -> tensor<8192x4096xbf16> attributes {coda.origin = "nn.linear+nn.head_rms_norm"}
// CHECK:         coda.segment_reduce sumsq %{{.*}} width 256
// CHECK-NOT:   coda.elementwise
// CHECK:       func.return
// OFF-LABEL:   func.func @qk_norm_prefill
// OFF:         coda.gemm {{.*}} attributes {coda.origin = "nn.linear+nn.head_rms_norm"}
// OFF-NOT:     coda.elementwise
func.func @qk_norm_prefill(%x: tensor<8192x4096xbf16>, %wq: tensor<4096x4096xbf16>, %g: tensor<256xbf16>) -> tensor<8192x4096xbf16> {
  %q = "nn.linear"(%x, %wq) : (tensor<8192x4096xbf16>, tensor<4096x4096xbf16>) -> tensor<8192x4096xbf16>
  %n = "nn.head_rms_norm"(%q, %g) <{head_dim = 256 : i64, heads = 16 : i64, eps = 1.0e-06 : f32}> : (tensor<8192x4096xbf16>, tensor<256xbf16>) -> tensor<8192x4096xbf16>
  func.return %n : tensor<8192x4096xbf16>
}

// -----

// CHECK-LABEL: func.func @qk_norm_decode
// CHECK:       %[[Q:.*]] = coda.gemm {{.*}} -> tensor<64x4096xbf16> attributes {coda.origin = "nn.linear"}
// CHECK-NOT:     coda.segment_reduce
// CHECK:       coda.elementwise [64, 4096] ins(%[[Q]], %g : {{.*}}) -> tensor<64x4096xbf16> attributes {coda.origin = "nn.head_rms_norm", coda.separate}
// CHECK:         coda.segment_reduce sumsq %{{.*}} width 256
// OFF-LABEL:   func.func @qk_norm_decode
// OFF:         coda.gemm {{.*}} attributes {coda.origin = "nn.linear+nn.head_rms_norm"}
// OFF-NOT:     coda.elementwise
func.func @qk_norm_decode(%x: tensor<64x4096xbf16>, %wq: tensor<4096x4096xbf16>, %g: tensor<256xbf16>) -> tensor<64x4096xbf16> {
  %q = "nn.linear"(%x, %wq) : (tensor<64x4096xbf16>, tensor<4096x4096xbf16>) -> tensor<64x4096xbf16>
  %n = "nn.head_rms_norm"(%q, %g) <{head_dim = 256 : i64, heads = 16 : i64, eps = 1.0e-06 : f32}> : (tensor<64x4096xbf16>, tensor<256xbf16>) -> tensor<64x4096xbf16>
  func.return %n : tensor<64x4096xbf16>
}

// The whole pipeline passes the option through: with the model, the M=64 function keeps the norm
// as its own kernel (with the remark); without it, both functions fuse it into the QKV epilogue.
// RUN: coda-opt %s --remarks --split-input-file -p nn-to-coda 2>&1 | filecheck %s --check-prefix=PIPE
// RUN: coda-opt %s --remarks --split-input-file -p 'nn-to-coda{cost-model=false}' 2>&1 | filecheck %s --check-prefix=PIPE-OFF
// PIPE:         remark: 'nn.head_rms_norm' op QK-norm not fused
// PIPE-LABEL:   func.func @qk_norm_decode
// PIPE:           coda.elementwise
// PIPE-OFF-NOT: remark: 'nn.head_rms_norm' op QK-norm not fused
// PIPE-OFF-LABEL: func.func @qk_norm_prefill
// PIPE-OFF:       coda.segment_reduce sumsq
// PIPE-OFF-LABEL: func.func @qk_norm_decode
// PIPE-OFF:       coda.segment_reduce sumsq
