// The non-attention part of one GPT-2 block (small: tokens 67, hidden 96, MLP 384, packed
// QKV 288), f32, pre-LayerNorm: from the attention output projection of layer l to the QKV
// projection of layer l+1, like the LLaMA block.
//   inputs:  x0 residual stream, y0 attention output, wo/bo out-proj, g1/b1 LayerNorm before the
//            MLP, wfc/bfc MLP up, wproj/bproj MLP down, g2/b2 next layer's LayerNorm, wqkv/bqkv
//            next layer's packed [q | k | v] projection
//   results: x2 (residual stream after the MLP), next layer's qkv (with bias)
func.func @gpt2_block(%x0: tensor<67x96xf32>, %y0: tensor<67x96xf32>, %wo: tensor<96x96xf32>, %bo: tensor<96xf32>, %g1: tensor<96xf32>, %b1: tensor<96xf32>,
                      %wfc: tensor<384x96xf32>, %bfc: tensor<384xf32>, %wproj: tensor<96x384xf32>, %bproj: tensor<96xf32>,
                      %g2: tensor<96xf32>, %b2: tensor<96xf32>, %wqkv: tensor<288x96xf32>, %bqkv: tensor<288xf32>)
    -> (tensor<67x96xf32>, tensor<67x288xf32>) {
  %a0 = nn.linear %y0, %wo : tensor<67x96xf32>, tensor<96x96xf32> -> tensor<67x96xf32>
  %a = nn.add %a0, %bo : tensor<67x96xf32>, tensor<96xf32> -> tensor<67x96xf32>
  %x1 = nn.add %x0, %a : tensor<67x96xf32>, tensor<67x96xf32> -> tensor<67x96xf32>
  %h1 = nn.layer_norm %x1, %g1, %b1 {eps = 1.0e-05 : f32} : tensor<67x96xf32>, tensor<96xf32>, tensor<96xf32> -> tensor<67x96xf32>
  %u0 = nn.linear %h1, %wfc : tensor<67x96xf32>, tensor<384x96xf32> -> tensor<67x384xf32>
  %u = nn.add %u0, %bfc : tensor<67x384xf32>, tensor<384xf32> -> tensor<67x384xf32>
  %act = nn.gelu %u {approximate = "tanh"} : tensor<67x384xf32> -> tensor<67x384xf32>
  %p0 = nn.linear %act, %wproj : tensor<67x384xf32>, tensor<96x384xf32> -> tensor<67x96xf32>
  %p = nn.add %p0, %bproj : tensor<67x96xf32>, tensor<96xf32> -> tensor<67x96xf32>
  %x2 = nn.add %x1, %p : tensor<67x96xf32>, tensor<67x96xf32> -> tensor<67x96xf32>
  %h2 = nn.layer_norm %x2, %g2, %b2 {eps = 1.0e-05 : f32} : tensor<67x96xf32>, tensor<96xf32>, tensor<96xf32> -> tensor<67x96xf32>
  %q0 = nn.linear %h2, %wqkv : tensor<67x96xf32>, tensor<288x96xf32> -> tensor<67x288xf32>
  %qkv = nn.add %q0, %bqkv : tensor<67x288xf32>, tensor<288xf32> -> tensor<67x288xf32>
  func.return %x2, %qkv : tensor<67x96xf32>, tensor<67x288xf32>
}
