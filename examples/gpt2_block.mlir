// The non-attention part of one GPT-2 block (GPT-2 medium: tokens 8192, hidden 1024, MLP 4096, packed
// QKV 3072), bf16, pre-LayerNorm: from the attention output projection of layer l to the QKV
// projection of layer l+1, like the LLaMA block.
//   inputs:  x0 residual stream, y0 attention output, wo/bo out-proj, g1/b1 LayerNorm before the
//            MLP, wfc/bfc MLP up, wproj/bproj MLP down, g2/b2 next layer's LayerNorm, wqkv/bqkv
//            next layer's packed [q | k | v] projection
//   results: x2 (residual stream after the MLP), next layer's qkv (with bias)
func.func @gpt2_block(%x0: tensor<8192x1024xbf16>, %y0: tensor<8192x1024xbf16>, %wo: tensor<1024x1024xbf16>, %bo: tensor<1024xbf16>, %g1: tensor<1024xbf16>, %b1: tensor<1024xbf16>,
                      %wfc: tensor<4096x1024xbf16>, %bfc: tensor<4096xbf16>, %wproj: tensor<1024x4096xbf16>, %bproj: tensor<1024xbf16>,
                      %g2: tensor<1024xbf16>, %b2: tensor<1024xbf16>, %wqkv: tensor<3072x1024xbf16>, %bqkv: tensor<3072xbf16>)
    -> (tensor<8192x1024xbf16>, tensor<8192x3072xbf16>) {
  %a0 = nn.linear %y0, %wo : tensor<8192x1024xbf16>, tensor<1024x1024xbf16> -> tensor<8192x1024xbf16>
  %a = nn.add %a0, %bo : tensor<8192x1024xbf16>, tensor<1024xbf16> -> tensor<8192x1024xbf16>
  %x1 = nn.add %x0, %a : tensor<8192x1024xbf16>, tensor<8192x1024xbf16> -> tensor<8192x1024xbf16>
  %h1 = nn.layer_norm %x1, %g1, %b1 {eps = 1.0e-05 : f32} : tensor<8192x1024xbf16>, tensor<1024xbf16>, tensor<1024xbf16> -> tensor<8192x1024xbf16>
  %u0 = nn.linear %h1, %wfc : tensor<8192x1024xbf16>, tensor<4096x1024xbf16> -> tensor<8192x4096xbf16>
  %u = nn.add %u0, %bfc : tensor<8192x4096xbf16>, tensor<4096xbf16> -> tensor<8192x4096xbf16>
  %act = nn.gelu %u {approximate = "tanh"} : tensor<8192x4096xbf16> -> tensor<8192x4096xbf16>
  %p0 = nn.linear %act, %wproj : tensor<8192x4096xbf16>, tensor<1024x4096xbf16> -> tensor<8192x1024xbf16>
  %p = nn.add %p0, %bproj : tensor<8192x1024xbf16>, tensor<1024xbf16> -> tensor<8192x1024xbf16>
  %x2 = nn.add %x1, %p : tensor<8192x1024xbf16>, tensor<8192x1024xbf16> -> tensor<8192x1024xbf16>
  %h2 = nn.layer_norm %x2, %g2, %b2 {eps = 1.0e-05 : f32} : tensor<8192x1024xbf16>, tensor<1024xbf16>, tensor<1024xbf16> -> tensor<8192x1024xbf16>
  %q0 = nn.linear %h2, %wqkv : tensor<8192x1024xbf16>, tensor<3072x1024xbf16> -> tensor<8192x3072xbf16>
  %qkv = nn.add %q0, %bqkv : tensor<8192x3072xbf16>, tensor<3072xbf16> -> tensor<8192x3072xbf16>
  func.return %x2, %qkv : tensor<8192x1024xbf16>, tensor<8192x3072xbf16>
}
