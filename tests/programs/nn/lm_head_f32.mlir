// The LM head with its loss (small: tokens 67, hidden 96, vocabulary 200), f32: final
// RMSNorm, vocabulary projection, cross-entropy (mean over rows whose target is not -100).
//   inputs:  x final residual stream, wn final norm weight, wlm vocabulary projection (V x D),
//            targets (i32, -100 = ignored row)
//   result:  the mean loss, a 0-d f32 tensor
func.func @lm_head(%x: tensor<67x96xf32>, %wn: tensor<96xf32>, %wlm: tensor<200x96xf32>, %targets: tensor<67xi32>) -> tensor<f32> {
  %h = nn.rms_norm %x, %wn {eps = 1.0e-05 : f32} : tensor<67x96xf32>, tensor<96xf32> -> tensor<67x96xf32>
  %logits = nn.linear %h, %wlm : tensor<67x96xf32>, tensor<200x96xf32> -> tensor<67x200xf32>
  %loss = nn.cross_entropy %logits, %targets {ignore_index = -100 : i64, reduction = "mean"} : tensor<67x200xf32>, tensor<67xi32> -> tensor<f32>
  func.return %loss : tensor<f32>
}
