func.func @rope96(%x: tensor<24x64xf32>, %w: tensor<576x64xf32>, %pos: tensor<24xi32>) -> tensor<24x576xf32> {
  %q = "nn.linear"(%x, %w) : (tensor<24x64xf32>, tensor<576x64xf32>) -> tensor<24x576xf32>
  %r = "nn.rope"(%q, %pos) <{head_dim = 96 : i64, rotary_heads = 4 : i64, theta = 10000.0 : f32, style = "half"}> : (tensor<24x576xf32>, tensor<24xi32>) -> tensor<24x576xf32>
  func.return %r : tensor<24x576xf32>
}
