// RUN: coda-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Verifier rules of the backward ops (nn.py, "backward ops"), one chunk each, in the style of
// verify.mlir: statistics are f32 vectors of one value per row, transpose flags are booleans,
// shapes follow the forward op's.

func.func @rstd_not_f32(%dy: tensor<8x16xbf16>, %x: tensor<8x16xbf16>, %w: tensor<16xbf16>, %r: tensor<8xbf16>) {
  %dx, %dw = "nn.rms_norm_grad"(%dy, %x, %w, %r) : (tensor<8x16xbf16>, tensor<8x16xbf16>, tensor<16xbf16>, tensor<8xbf16>) -> (tensor<8x16xbf16>, tensor<16xbf16>)
  func.return
}
// CHECK: {{.*}}verify_backward.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rms_norm_grad' op rstd must be a rank-1 tensor of f32 (one value per row), got tensor<8xbf16>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @transpose_not_bool(%a: tensor<8x16xf32>, %b: tensor<16x4xf32>) {
  %0 = "nn.gemm"(%a, %b) <{transpose_a = 1 : i64, transpose_b = false}> : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  func.return
}
// CHECK: {{.*}}verify_backward.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.gemm' op property transpose_a must be a boolean (`true` or `false`), got 1 : i64
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @gemm_contraction(%a: tensor<8x16xf32>, %b: tensor<16x4xf32>) {
  %0 = "nn.gemm"(%a, %b) <{transpose_a = true, transpose_b = false}> : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<16x4xf32>
  func.return
}
// CHECK: {{.*}}verify_backward.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.gemm' op the contraction sizes of a 8x16 and b 16x4 differ (transpose_a = True, transpose_b = False)
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @gated_grad_shape(%dy: tensor<8x16xf32>, %z: tensor<8x16xf32>) {
  %0 = "nn.swiglu_grad"(%dy, %z) : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  func.return
}
// CHECK: {{.*}}verify_backward.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.swiglu_grad' op dy must have shape 8x8 (half of z's 16 columns), got 8x16
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @stats_not_f32(%x: tensor<8x16xbf16>) {
  %m, %r = "nn.layer_norm_stats"(%x) <{eps = 1.000000e-05 : f32}> : (tensor<8x16xbf16>) -> (tensor<8xbf16>, tensor<8xf32>)
  func.return
}
// CHECK: {{.*}}verify_backward.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.layer_norm_stats' op mean must be a rank-1 tensor of f32 (one value per row), got tensor<8xbf16>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @rstd_length(%x: tensor<8x16xf32>) {
  %r = "nn.rms_norm_rstd"(%x) <{eps = 1.000000e-05 : f32}> : (tensor<8x16xf32>) -> tensor<16xf32>
  func.return
}
// CHECK: {{.*}}verify_backward.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rms_norm_rstd' op result must have 8 elements (one per row), got tensor<16xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @dw_type(%dy: tensor<8x16xf32>, %x: tensor<8x16xf32>, %w: tensor<16xf32>, %m: tensor<8xf32>, %r: tensor<8xf32>) {
  %dx, %dw, %db = "nn.layer_norm_grad"(%dy, %x, %w, %m, %r) : (tensor<8x16xf32>, tensor<8x16xf32>, tensor<16xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<8x16xf32>, tensor<8xf32>, tensor<16xf32>)
  func.return
}
// CHECK: {{.*}}verify_backward.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.layer_norm_grad' op result #1 (dw) must have type tensor<16xf32>, got tensor<8xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @head_range(%dy: tensor<8x64xf32>, %x: tensor<8x64xf32>, %w: tensor<16xf32>) {
  %dx, %dw = "nn.head_rms_norm_grad"(%dy, %x, %w) <{head_dim = 16 : i64, heads = 2 : i64, eps = 1.000000e-06 : f32, first_head = 3 : i64}> : (tensor<8x64xf32>, tensor<8x64xf32>, tensor<16xf32>) -> (tensor<8x64xf32>, tensor<16xf32>)
  func.return
}
// CHECK: {{.*}}verify_backward.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.head_rms_norm_grad' op heads must be between 0 and 1 (x has 4 heads of 16, starting at head 3), got 2
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @dloss_rank(%l: tensor<8x32xf32>, %t: tensor<8xi32>, %d: tensor<1xf32>) {
  %0 = "nn.cross_entropy_grad"(%l, %t, %d) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<8x32xf32>, tensor<8xi32>, tensor<1xf32>) -> tensor<8x32xf32>
  func.return
}
// CHECK: {{.*}}verify_backward.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.cross_entropy_grad' op dloss must be a 0-d tensor of f32 (tensor<f32>), got tensor<1xf32>
