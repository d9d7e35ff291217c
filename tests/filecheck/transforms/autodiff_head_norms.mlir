// RUN: coda-opt %s -p nn-autodiff | filecheck %s

// Qwen3's QK-norm: the k-norm reads the q-norm's output, whose k-head columns are the
// projection's own (the q-norm passes them through bit for bit). The k-norm's backward reads x
// only in its heads, so both backward norms read the saved projection %qkv: the forward saves
// no q-normed copy (an [M, (H + 2 KV) hd] tensor per layer).

// CHECK-LABEL: func.func @qk_fwd
// CHECK:         func.return %r, %qkv, %wq, %wk, %pos :
// CHECK-LABEL: func.func @qk_bwd(%qkv: tensor<16x64xbf16>, %wq: tensor<16xbf16>, %wk: tensor<16xbf16>, %pos: tensor<16xi32>, %dr: tensor<16x64xbf16>)
// CHECK:         %{{.*}}, %{{.*}} = nn.head_rms_norm_grad %{{.*}}, %qkv, %wk {{.*}}first_head = 2
// CHECK:         %{{.*}}, %{{.*}} = nn.head_rms_norm_grad %{{.*}}, %qkv, %wq {{.*}}first_head = 0
func.func @qk(%qkv: tensor<16x64xbf16>, %wq: tensor<16xbf16>, %wk: tensor<16xbf16>, %pos: tensor<16xi32>) -> tensor<16x64xbf16> {
  %qhn = "nn.head_rms_norm"(%qkv, %wq) <{head_dim = 16 : i64, heads = 2 : i64, eps = 1.0e-06 : f32, first_head = 0 : i64}> : (tensor<16x64xbf16>, tensor<16xbf16>) -> tensor<16x64xbf16>
  %khn = "nn.head_rms_norm"(%qhn, %wk) <{head_dim = 16 : i64, heads = 1 : i64, eps = 1.0e-06 : f32, first_head = 2 : i64}> : (tensor<16x64xbf16>, tensor<16xbf16>) -> tensor<16x64xbf16>
  %r = "nn.rope"(%khn, %pos) <{head_dim = 16 : i64, rotary_heads = 3 : i64, theta = 10000.0 : f32, style = "half"}> : (tensor<16x64xbf16>, tensor<16xi32>) -> tensor<16x64xbf16>
  func.return %r : tensor<16x64xbf16>
}
