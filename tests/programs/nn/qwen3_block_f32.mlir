// The non-attention part of one Qwen3 block (small: tokens 67, hidden 96, ffn 160,
// 3 q heads + 1 kv heads of 32 -> packed QKV 160), f32. From the attention output
// projection of layer l to the QKV projection of layer l+1 (NN_DIALECT.md), so every RMSNorm sits
// between a producing GEMM and a consuming GEMM.
//   inputs:  x0 residual stream, y0 attention output, wo out-proj, wn0 post-attention norm weight,
//            wgu gate/up weight [gate rows | up rows] (2F x D), wd down-proj, wn1 next layer's
//            input norm weight, wqkv next layer's packed [q | k | v] projection, wqk the QK-norm weight, pos positions
//   results: x2 (residual stream after the MLP), the next layer's qkv with RoPE on q and k heads
func.func @qwen3_block(%x0: tensor<67x96xf32>, %y0: tensor<67x96xf32>, %wo: tensor<96x96xf32>, %wn0: tensor<96xf32>, %wgu: tensor<320x96xf32>,
                       %wd: tensor<96x160xf32>, %wn1: tensor<96xf32>, %wqkv: tensor<160x96xf32>, %wqk: tensor<32xf32>, %pos: tensor<67xi32>)
    -> (tensor<67x96xf32>, tensor<67x160xf32>) {
  %a = nn.linear %y0, %wo : tensor<67x96xf32>, tensor<96x96xf32> -> tensor<67x96xf32>
  %x1 = nn.add %x0, %a : tensor<67x96xf32>, tensor<67x96xf32> -> tensor<67x96xf32>
  %h1 = nn.rms_norm %x1, %wn0 {eps = 1.0e-06 : f32} : tensor<67x96xf32>, tensor<96xf32> -> tensor<67x96xf32>
  %z = nn.linear %h1, %wgu : tensor<67x96xf32>, tensor<320x96xf32> -> tensor<67x320xf32>
  %g = nn.swiglu %z : tensor<67x320xf32> -> tensor<67x160xf32>
  %dn = nn.linear %g, %wd : tensor<67x160xf32>, tensor<96x160xf32> -> tensor<67x96xf32>
  %x2 = nn.add %x1, %dn : tensor<67x96xf32>, tensor<67x96xf32> -> tensor<67x96xf32>
  %h2 = nn.rms_norm %x2, %wn1 {eps = 1.0e-06 : f32} : tensor<67x96xf32>, tensor<96xf32> -> tensor<67x96xf32>
  %q = nn.linear %h2, %wqkv : tensor<67x96xf32>, tensor<160x96xf32> -> tensor<67x160xf32>
  // QK-norm: RMSNorm over each of the 4 q and k heads (shared weight), v heads pass
  %qn = nn.head_rms_norm %q, %wqk {head_dim = 32 : i64, heads = 4 : i64, eps = 1.0e-06 : f32} : tensor<67x160xf32>, tensor<32xf32> -> tensor<67x160xf32>
  %r = nn.rope %qn, %pos {head_dim = 32 : i64, rotary_heads = 4 : i64, theta = 1000000.0 : f32, style = "half"} : tensor<67x160xf32>, tensor<67xi32> -> tensor<67x160xf32>
  func.return %x2, %r : tensor<67x96xf32>, tensor<67x160xf32>
}
