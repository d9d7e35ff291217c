// The LM head with its loss (LLaMA-3-8B LM head: tokens 8192, hidden 4096, vocabulary 128256), bf16: final
// RMSNorm, vocabulary projection, cross-entropy (mean over rows whose target is not -100).
//   inputs:  x final residual stream, wn final norm weight, wlm vocabulary projection (V x D),
//            targets (i32, -100 = ignored row)
//   result:  the mean loss, a 0-d f32 tensor
func.func @lm_head(%x: tensor<8192x4096xbf16>, %wn: tensor<4096xbf16>, %wlm: tensor<128256x4096xbf16>, %targets: tensor<8192xi32>) -> tensor<f32> {
  %h = nn.rms_norm %x, %wn {eps = 1.0e-05 : f32} : tensor<8192x4096xbf16>, tensor<4096xbf16> -> tensor<8192x4096xbf16>
  %logits = nn.linear %h, %wlm : tensor<8192x4096xbf16>, tensor<128256x4096xbf16> -> tensor<8192x128256xbf16>
  %loss = nn.cross_entropy %logits, %targets {ignore_index = -100 : i64, reduction = "mean"} : tensor<8192x128256xbf16>, tensor<8192xi32> -> tensor<f32>
  func.return %loss : tensor<f32>
}
