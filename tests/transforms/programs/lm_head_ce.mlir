func.func @lm_head_ce(%h: tensor<24x64xf32>, %wlm: tensor<512x64xf32>, %targets: tensor<24xi32>) -> tensor<f32> {
  %logits = "nn.linear"(%h, %wlm) : (tensor<24x64xf32>, tensor<512x64xf32>) -> tensor<24x512xf32>
  %loss = "nn.cross_entropy"(%logits, %targets) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<24x512xf32>, tensor<24xi32>) -> tensor<f32>
  func.return %loss : tensor<f32>
}
