func.func @unfused(%x: tensor<24x64xf32>, %g: tensor<64xf32>, %z: tensor<24x256xf32>, %w: tensor<64x128xf32>) -> (tensor<24x64xf32>, tensor<24x64xf32>) {
  %h = "nn.rms_norm"(%x, %g) <{eps = 1.0e-06 : f32}> : (tensor<24x64xf32>, tensor<64xf32>) -> tensor<24x64xf32>
  %s = "nn.silu"(%h) : (tensor<24x64xf32>) -> tensor<24x64xf32>
  %u = "nn.swiglu"(%z) : (tensor<24x256xf32>) -> tensor<24x128xf32>
  %d = "nn.linear"(%u, %w) : (tensor<24x128xf32>, tensor<64x128xf32>) -> tensor<24x64xf32>
  func.return %s, %d : tensor<24x64xf32>, tensor<24x64xf32>
}
