// RUN: coda-opt %s -p nn-fuse-siblings --split-input-file | filecheck %s
// RUN: coda-opt %s -p nn-fuse-siblings,nn-autodiff --split-input-file | filecheck %s --check-prefix=GRAD

// Qwen3's QK-norm: the k-norm reads the q-norm's output over the heads that follow the q heads
// (same head_dim, eps): one grouped head_rms_norm of the projection, weights in head order.
// CHECK-LABEL: func.func @qk
// CHECK:      %khn = nn.head_rms_norm %qkv, %wq, %wk {head_dim = 16 : i64, heads = 3 : i64, eps = 1.000000e-06 : f32, weight_heads = array<i64: 2, 1>} : tensor<10x64xbf16>, tensor<16xbf16>, tensor<16xbf16> -> tensor<10x64xbf16>
// CHECK-NOT:  nn.head_rms_norm
// The backward: one grad op, one dw per weight.
// GRAD-LABEL: func.func @qk_bwd
// GRAD:       %{{.*}}, %{{.*}}, %{{.*}} = nn.head_rms_norm_grad %{{.*}}, %qkv, %wq, %wk {{{.*}}weight_heads = array<i64: 2, 1>}
// GRAD-NOT:   nn.head_rms_norm_grad
// GRAD:       func.return
func.func @qk(%qkv: tensor<10x64xbf16>, %wq: tensor<16xbf16>, %wk: tensor<16xbf16>) -> tensor<10x64xbf16> {
  %qhn = nn.head_rms_norm %qkv, %wq {head_dim = 16 : i64, heads = 2 : i64, eps = 1.0e-06 : f32} : tensor<10x64xbf16>, tensor<16xbf16> -> tensor<10x64xbf16>
  %khn = nn.head_rms_norm %qhn, %wk {head_dim = 16 : i64, heads = 1 : i64, eps = 1.0e-06 : f32, first_head = 2 : i64} : tensor<10x64xbf16>, tensor<16xbf16> -> tensor<10x64xbf16>
  func.return %khn : tensor<10x64xbf16>
}

// -----

// The k-norm first, then the q-norm (heads before it): grouped in head order, from head 1.
// CHECK-LABEL: func.func @kq
// CHECK:      nn.head_rms_norm %x, %wa, %wb {head_dim = 16 : i64, heads = 3 : i64, eps = 1.000000e-06 : f32, first_head = 1 : i64, weight_heads = array<i64: 1, 2>}
func.func @kq(%x: tensor<10x64xf32>, %wa: tensor<16xf32>, %wb: tensor<16xf32>) -> tensor<10x64xf32> {
  %a = nn.head_rms_norm %x, %wb {head_dim = 16 : i64, heads = 2 : i64, eps = 1.0e-06 : f32, first_head = 2 : i64} : tensor<10x64xf32>, tensor<16xf32> -> tensor<10x64xf32>
  %b = nn.head_rms_norm %a, %wa {head_dim = 16 : i64, heads = 1 : i64, eps = 1.0e-06 : f32, first_head = 1 : i64} : tensor<10x64xf32>, tensor<16xf32> -> tensor<10x64xf32>
  func.return %b : tensor<10x64xf32>
}

// -----

// Left apart: heads not adjacent (a gap at head 2), eps differs, the inner norm used twice.
// CHECK-LABEL: func.func @apart
// CHECK-COUNT-6: nn.head_rms_norm %{{[a-z0-9]+}}, %{{[a-z0-9]+}} {
// CHECK-NOT:  weight_heads
func.func @apart(%x: tensor<10x64xf32>, %w: tensor<16xf32>) -> (tensor<10x64xf32>, tensor<10x64xf32>, tensor<10x64xf32>) {
  %a = nn.head_rms_norm %x, %w {head_dim = 16 : i64, heads = 2 : i64, eps = 1.0e-06 : f32} : tensor<10x64xf32>, tensor<16xf32> -> tensor<10x64xf32>
  %b = nn.head_rms_norm %a, %w {head_dim = 16 : i64, heads = 1 : i64, eps = 1.0e-06 : f32, first_head = 3 : i64} : tensor<10x64xf32>, tensor<16xf32> -> tensor<10x64xf32>
  %c = nn.head_rms_norm %x, %w {head_dim = 16 : i64, heads = 2 : i64, eps = 1.0e-06 : f32} : tensor<10x64xf32>, tensor<16xf32> -> tensor<10x64xf32>
  %d = nn.head_rms_norm %c, %w {head_dim = 16 : i64, heads = 1 : i64, eps = 1.0e-05 : f32, first_head = 2 : i64} : tensor<10x64xf32>, tensor<16xf32> -> tensor<10x64xf32>
  %e = nn.head_rms_norm %x, %w {head_dim = 16 : i64, heads = 2 : i64, eps = 1.0e-06 : f32} : tensor<10x64xf32>, tensor<16xf32> -> tensor<10x64xf32>
  %f = nn.head_rms_norm %e, %w {head_dim = 16 : i64, heads = 1 : i64, eps = 1.0e-06 : f32, first_head = 2 : i64} : tensor<10x64xf32>, tensor<16xf32> -> tensor<10x64xf32>
  %g = nn.add %e, %f : tensor<10x64xf32>, tensor<10x64xf32> -> tensor<10x64xf32>
  func.return %b, %d, %g : tensor<10x64xf32>, tensor<10x64xf32>, tensor<10x64xf32>
}
