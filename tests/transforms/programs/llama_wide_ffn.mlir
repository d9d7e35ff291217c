func.func @llama_wide_ffn(%x0: tensor<24x64xf32>, %y0: tensor<24x64xf32>, %wo: tensor<64x64xf32>, %wn0: tensor<64xf32>, %wgu: tensor<2048x64xf32>, %wd: tensor<64x1024xf32>, %wn1: tensor<64xf32>, %wqkv: tensor<128x64xf32>, %pos: tensor<24xi32>) -> (tensor<24x64xf32>, tensor<24x128xf32>) {
  %a = "nn.linear"(%y0, %wo) : (tensor<24x64xf32>, tensor<64x64xf32>) -> tensor<24x64xf32>
  %x1 = "nn.add"(%x0, %a) : (tensor<24x64xf32>, tensor<24x64xf32>) -> tensor<24x64xf32>
  %h1 = "nn.rms_norm"(%x1, %wn0) <{eps = 1.0e-06 : f32}> : (tensor<24x64xf32>, tensor<64xf32>) -> tensor<24x64xf32>
  %z = "nn.linear"(%h1, %wgu) : (tensor<24x64xf32>, tensor<2048x64xf32>) -> tensor<24x2048xf32>
  %g = "nn.swiglu"(%z) : (tensor<24x2048xf32>) -> tensor<24x1024xf32>
  %d = "nn.linear"(%g, %wd) : (tensor<24x1024xf32>, tensor<64x1024xf32>) -> tensor<24x64xf32>
  %x2 = "nn.add"(%x1, %d) : (tensor<24x64xf32>, tensor<24x64xf32>) -> tensor<24x64xf32>
  %h2 = "nn.rms_norm"(%x2, %wn1) <{eps = 1.0e-06 : f32}> : (tensor<24x64xf32>, tensor<64xf32>) -> tensor<24x64xf32>
  %q = "nn.linear"(%h2, %wqkv) : (tensor<24x64xf32>, tensor<128x64xf32>) -> tensor<24x128xf32>
  %r = "nn.rope"(%q, %pos) <{head_dim = 16 : i64, rotary_heads = 6 : i64, theta = 10000.0 : f32, style = "half"}> : (tensor<24x128xf32>, tensor<24xi32>) -> tensor<24x128xf32>
  func.return %x2, %r : tensor<24x64xf32>, tensor<24x128xf32>
}
