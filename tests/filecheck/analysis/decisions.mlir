// RUN: coda-opt %s -t 'io-report{pipeline="" decisions=true constants="%S/Inputs/test_gpu.json"}' | filecheck %s

// The decision API of the IO model (stats_plan, qk_norm_tile_width, store_or_recompute) on
// the choices nn programs offer, each flipping with the shapes.

// A norm whose input no GEMM produces (first layer): a row kernel computes rstd.
// CHECK-LABEL: // @first_layer
// CHECK:       //   stats_plan(h: M=8192, D=4096, K=None) -> row_kernel (row_kernel {{.*}} us): no GEMM produces x
func.func @first_layer(%x: tensor<8192x4096xbf16>, %w: tensor<4096xbf16>) -> tensor<8192x4096xbf16> {
  %h = "nn.rms_norm"(%x, %w) <{eps = 1.0e-05 : f32}> : (tensor<8192x4096xbf16>, tensor<4096xbf16>) -> tensor<8192x4096xbf16>
  func.return %h : tensor<8192x4096xbf16>
}

// Behind out-proj + residual: the statistics ride in the producer's epilogue (partials + fold).
// CHECK-LABEL: // @after_gemm
// CHECK:       //   stats_plan(h: M=8192, D=4096, K=4096) -> producer_epilogue (producer_epilogue {{.*}} us, row_kernel {{.*}} us): {{.*}} us faster than row_kernel
func.func @after_gemm(%y: tensor<8192x4096xbf16>, %wo: tensor<4096x4096xbf16>, %x0: tensor<8192x4096xbf16>, %w: tensor<4096xbf16>) -> tensor<8192x4096xbf16> {
  %a = "nn.linear"(%y, %wo) : (tensor<8192x4096xbf16>, tensor<4096x4096xbf16>) -> tensor<8192x4096xbf16>
  %x = "nn.add"(%x0, %a) : (tensor<8192x4096xbf16>, tensor<8192x4096xbf16>) -> tensor<8192x4096xbf16>
  %h = "nn.rms_norm"(%x, %w) <{eps = 1.0e-05 : f32}> : (tensor<8192x4096xbf16>, tensor<4096xbf16>) -> tensor<8192x4096xbf16>
  func.return %h : tensor<8192x4096xbf16>
}

// QK-norm with 128-wide heads at M = 8192: 128- or 256-wide tiles hold whole heads and the
// norm stays in the epilogue.
// CHECK-LABEL: // @qk_norm_128
// CHECK:       //   qk_norm_tile_width(n: head_dim=128, heads=32, N=4096, M=8192, K=4096) -> {{128|256}} ({{.*}}): whole heads in tile 128x{{128|256}}x64/w8s{{[0-9]}}
func.func @qk_norm_128(%x: tensor<8192x4096xbf16>, %wq: tensor<4096x4096xbf16>, %g: tensor<128xbf16>) -> tensor<8192x4096xbf16> {
  %q = "nn.linear"(%x, %wq) : (tensor<8192x4096xbf16>, tensor<4096x4096xbf16>) -> tensor<8192x4096xbf16>
  %n = "nn.head_rms_norm"(%q, %g) <{head_dim = 128 : i64, heads = 32 : i64, eps = 1.0e-06 : f32}> : (tensor<8192x4096xbf16>, tensor<128xbf16>) -> tensor<8192x4096xbf16>
  func.return %n : tensor<8192x4096xbf16>
}

// Decode-sized M (one row of tiles): the grid has N / BN CTAs, so narrow tiles win. 64-wide
// heads fit a 64-wide tile whole...
// CHECK-LABEL: // @qk_norm_decode_64
// CHECK:       //   qk_norm_tile_width(n: head_dim=64, heads=64, N=4096, M=64, K=4096) -> 64 ({{.*}}): whole heads in tile 64x64x64/w8s3
func.func @qk_norm_decode_64(%x: tensor<64x4096xbf16>, %wq: tensor<4096x4096xbf16>, %g: tensor<64xbf16>) -> tensor<64x4096xbf16> {
  %q = "nn.linear"(%x, %wq) : (tensor<64x4096xbf16>, tensor<4096x4096xbf16>) -> tensor<64x4096xbf16>
  %n = "nn.head_rms_norm"(%q, %g) <{head_dim = 64 : i64, heads = 64 : i64, eps = 1.0e-06 : f32}> : (tensor<64x4096xbf16>, tensor<64xbf16>) -> tensor<64x4096xbf16>
  func.return %n : tensor<64x4096xbf16>
}

// ... while 256-wide heads would need BN = 256 (a quarter of the CTAs): per-head partials
// from a 64-wide tile and a normalising pass are cheaper.
// CHECK-LABEL: // @qk_norm_decode_256
// CHECK:       //   qk_norm_tile_width(n: head_dim=256, heads=16, N=4096, M=64, K=4096) -> 64 ({{.*}}): per-head partials, tile 64x64x64/w8s3
func.func @qk_norm_decode_256(%x: tensor<64x4096xbf16>, %wq: tensor<4096x4096xbf16>, %g: tensor<256xbf16>) -> tensor<64x4096xbf16> {
  %q = "nn.linear"(%x, %wq) : (tensor<64x4096xbf16>, tensor<4096x4096xbf16>) -> tensor<64x4096xbf16>
  %n = "nn.head_rms_norm"(%q, %g) <{head_dim = 256 : i64, heads = 16 : i64, eps = 1.0e-06 : f32}> : (tensor<64x4096xbf16>, tensor<256xbf16>) -> tensor<64x4096xbf16>
  func.return %n : tensor<64x4096xbf16>
}

// SwiGLU's output, needed by backward (dW of the down projection): recomputing it from the
// saved pre-activation, which the backward kernel reads anyway, beats storing and reloading it.
// CHECK-LABEL: // @gated
// CHECK:       //   store_or_recompute(g: M=8192, N=14336, from the saved pre-activation) -> recompute (store {{.*}} us, recompute {{.*}} us)
func.func @gated(%z: tensor<8192x28672xbf16>) -> tensor<8192x14336xbf16> {
  %g = "nn.swiglu"(%z) : (tensor<8192x28672xbf16>) -> tensor<8192x14336xbf16>
  func.return %g : tensor<8192x14336xbf16>
}
