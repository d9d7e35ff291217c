func.func @norm_matmul(%a: tensor<24x32xf32>, %w0: tensor<64x32xf32>, %g: tensor<64xf32>, %b: tensor<64xf32>, %wm: tensor<64x96xf32>, %wr: tensor<64x48xf32>) -> (tensor<24x96xf32>, tensor<24x48xf32>) {
  %x = "nn.linear"(%a, %w0) : (tensor<24x32xf32>, tensor<64x32xf32>) -> tensor<24x64xf32>
  %h = "nn.layer_norm"(%x, %g, %b) <{eps = 1.0e-05 : f32}> : (tensor<24x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<24x64xf32>
  %y = "nn.matmul"(%h, %wm) : (tensor<24x64xf32>, tensor<64x96xf32>) -> tensor<24x96xf32>
  %r = "nn.rms_norm"(%x, %g) <{eps = 1.0e-06 : f32}> : (tensor<24x64xf32>, tensor<64xf32>) -> tensor<24x64xf32>
  %z = "nn.matmul"(%r, %wr) : (tensor<24x64xf32>, tensor<64x48xf32>) -> tensor<24x48xf32>
  func.return %y, %z : tensor<24x96xf32>, tensor<24x48xf32>
}
