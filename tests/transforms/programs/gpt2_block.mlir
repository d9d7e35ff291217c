func.func @gpt2_block(%x0: tensor<24x64xf32>, %y0: tensor<24x64xf32>, %wo: tensor<64x64xf32>, %bo: tensor<64xf32>, %g1: tensor<64xf32>, %b1: tensor<64xf32>, %wfc: tensor<256x64xf32>, %bfc: tensor<256xf32>, %wproj: tensor<64x256xf32>, %bproj: tensor<64xf32>, %g2: tensor<64xf32>, %b2: tensor<64xf32>, %wqkv: tensor<192x64xf32>, %bqkv: tensor<192xf32>) -> (tensor<24x64xf32>, tensor<24x192xf32>) {
  %a = "nn.linear"(%y0, %wo) : (tensor<24x64xf32>, tensor<64x64xf32>) -> tensor<24x64xf32>
  %a1 = "nn.add"(%a, %bo) : (tensor<24x64xf32>, tensor<64xf32>) -> tensor<24x64xf32>
  %x1 = "nn.add"(%x0, %a1) : (tensor<24x64xf32>, tensor<24x64xf32>) -> tensor<24x64xf32>
  %h1 = "nn.layer_norm"(%x1, %g1, %b1) <{eps = 1.0e-05 : f32}> : (tensor<24x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<24x64xf32>
  %f = "nn.linear"(%h1, %wfc) : (tensor<24x64xf32>, tensor<256x64xf32>) -> tensor<24x256xf32>
  %f1 = "nn.add"(%f, %bfc) : (tensor<24x256xf32>, tensor<256xf32>) -> tensor<24x256xf32>
  %g = "nn.gelu"(%f1) <{approximate = "tanh"}> : (tensor<24x256xf32>) -> tensor<24x256xf32>
  %d = "nn.linear"(%g, %wproj) : (tensor<24x256xf32>, tensor<64x256xf32>) -> tensor<24x64xf32>
  %d1 = "nn.add"(%d, %bproj) : (tensor<24x64xf32>, tensor<64xf32>) -> tensor<24x64xf32>
  %x2 = "nn.add"(%x1, %d1) : (tensor<24x64xf32>, tensor<24x64xf32>) -> tensor<24x64xf32>
  %h2 = "nn.layer_norm"(%x2, %g2, %b2) <{eps = 1.0e-05 : f32}> : (tensor<24x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<24x64xf32>
  %q = "nn.linear"(%h2, %wqkv) : (tensor<24x64xf32>, tensor<192x64xf32>) -> tensor<24x192xf32>
  %q1 = "nn.add"(%q, %bqkv) : (tensor<24x192xf32>, tensor<192xf32>) -> tensor<24x192xf32>
  func.return %x2, %q1 : tensor<24x64xf32>, tensor<24x192xf32>
}
