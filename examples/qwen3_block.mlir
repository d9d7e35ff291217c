// The non-attention part of one Qwen3 block (Qwen3-8B: tokens 8192, hidden 4096, ffn 12288,
// 32 q heads + 8 kv heads of 128 -> packed QKV 6144), bf16. From the attention output
// projection of layer l to the QKV projection of layer l+1 (NN_DIALECT.md), so every RMSNorm sits
// between a producing GEMM and a consuming GEMM.
//   inputs:  x0 residual stream, y0 attention output, wo out-proj, wn0 post-attention norm weight,
//            wgu gate/up weight [gate rows | up rows] (2F x D), wd down-proj, wn1 next layer's
//            input norm weight, wqkv next layer's packed [q | k | v] projection, wqk the QK-norm weight, pos positions
//   results: x2 (residual stream after the MLP), the next layer's qkv with RoPE on q and k heads
func.func @qwen3_block(%x0: tensor<8192x4096xbf16>, %y0: tensor<8192x4096xbf16>, %wo: tensor<4096x4096xbf16>, %wn0: tensor<4096xbf16>, %wgu: tensor<24576x4096xbf16>,
                       %wd: tensor<4096x12288xbf16>, %wn1: tensor<4096xbf16>, %wqkv: tensor<6144x4096xbf16>, %wqk: tensor<128xbf16>, %pos: tensor<8192xi32>)
    -> (tensor<8192x4096xbf16>, tensor<8192x6144xbf16>) {
  %a = nn.linear %y0, %wo : tensor<8192x4096xbf16>, tensor<4096x4096xbf16> -> tensor<8192x4096xbf16>
  %x1 = nn.add %x0, %a : tensor<8192x4096xbf16>, tensor<8192x4096xbf16> -> tensor<8192x4096xbf16>
  %h1 = nn.rms_norm %x1, %wn0 {eps = 1.0e-06 : f32} : tensor<8192x4096xbf16>, tensor<4096xbf16> -> tensor<8192x4096xbf16>
  %z = nn.linear %h1, %wgu : tensor<8192x4096xbf16>, tensor<24576x4096xbf16> -> tensor<8192x24576xbf16>
  %g = nn.swiglu %z : tensor<8192x24576xbf16> -> tensor<8192x12288xbf16>
  %dn = nn.linear %g, %wd : tensor<8192x12288xbf16>, tensor<4096x12288xbf16> -> tensor<8192x4096xbf16>
  %x2 = nn.add %x1, %dn : tensor<8192x4096xbf16>, tensor<8192x4096xbf16> -> tensor<8192x4096xbf16>
  %h2 = nn.rms_norm %x2, %wn1 {eps = 1.0e-06 : f32} : tensor<8192x4096xbf16>, tensor<4096xbf16> -> tensor<8192x4096xbf16>
  %q = nn.linear %h2, %wqkv : tensor<8192x4096xbf16>, tensor<6144x4096xbf16> -> tensor<8192x6144xbf16>
  // QK-norm: RMSNorm over each of the 40 q and k heads (shared weight), v heads pass
  %qn = nn.head_rms_norm %q, %wqk {head_dim = 128 : i64, heads = 40 : i64, eps = 1.0e-06 : f32} : tensor<8192x6144xbf16>, tensor<128xbf16> -> tensor<8192x6144xbf16>
  %r = nn.rope %qn, %pos {head_dim = 128 : i64, rotary_heads = 40 : i64, theta = 1000000.0 : f32, style = "half"} : tensor<8192x6144xbf16>, tensor<8192xi32> -> tensor<8192x6144xbf16>
  func.return %x2, %r : tensor<8192x4096xbf16>, tensor<8192x6144xbf16>
}
