func.func @all(%x: tensor<24x32xf32>, %w: tensor<64x32xf32>, %b: tensor<64xf32>, %g: tensor<32xf32>, %pos: tensor<24xi32>, %t: tensor<24xi32>, %wm: tensor<32x64xf32>, %xm: tensor<24x32xf32>) -> (tensor<24x32xf32>, tensor<f32>, tensor<24x64xf32>, tensor<24x32xf32>) {
  %y = "nn.linear"(%x, %w) : (tensor<24x32xf32>, tensor<64x32xf32>) -> tensor<24x64xf32>
  %y1 = "nn.add"(%y, %b) : (tensor<24x64xf32>, tensor<64xf32>) -> tensor<24x64xf32>
  %s = "nn.swiglu"(%y1) : (tensor<24x64xf32>) -> tensor<24x32xf32>
  %n = "nn.rms_norm"(%s, %g) <{eps = 1.0e-06 : f32}> : (tensor<24x32xf32>, tensor<32xf32>) -> tensor<24x32xf32>
  %l = "nn.layer_norm"(%n, %g, %g) <{eps = 1.0e-05 : f32}> : (tensor<24x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<24x32xf32>
  %r = "nn.rope"(%l, %pos) <{head_dim = 16 : i64, rotary_heads = 1 : i64, theta = 10000.0 : f32, style = "half"}> : (tensor<24x32xf32>, tensor<24xi32>) -> tensor<24x32xf32>
  %q = "nn.head_rms_norm"(%r, %g) <{head_dim = 32 : i64, heads = 1 : i64, eps = 1.0e-06 : f32}> : (tensor<24x32xf32>, tensor<32xf32>) -> tensor<24x32xf32>
  %ce = "nn.cross_entropy"(%y1, %t) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<24x64xf32>, tensor<24xi32>) -> tensor<f32>
  %ge0 = "nn.gelu"(%y1) <{approximate = "tanh"}> : (tensor<24x64xf32>) -> tensor<24x64xf32>
  %ge = "nn.softcap"(%ge0) <{cap = 30.0 : f32}> : (tensor<24x64xf32>) -> tensor<24x64xf32>
  %mm = "nn.matmul"(%xm, %wm) : (tensor<24x32xf32>, tensor<32x64xf32>) -> tensor<24x64xf32>
  %gg = "nn.geglu"(%mm) <{approximate = "none"}> : (tensor<24x64xf32>) -> tensor<24x32xf32>
  %re = "nn.relu"(%gg) : (tensor<24x32xf32>) -> tensor<24x32xf32>
  %si = "nn.silu"(%xm) : (tensor<24x32xf32>) -> tensor<24x32xf32>
  %mu = "nn.mul"(%re, %si) : (tensor<24x32xf32>, tensor<24x32xf32>) -> tensor<24x32xf32>
  %mv0 = "nn.mul"(%mu, %g) : (tensor<24x32xf32>, tensor<32xf32>) -> tensor<24x32xf32>
  %mv = "nn.scale"(%mv0) <{factor = 0.25 : f32}> : (tensor<24x32xf32>) -> tensor<24x32xf32>
  func.return %q, %ce, %ge, %mv : tensor<24x32xf32>, tensor<f32>, tensor<24x64xf32>, tensor<24x32xf32>
}
