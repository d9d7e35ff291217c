// Used by stdin.mlir: a verifier error on line 4.

func.func @rope(%x: tensor<4x128xbf16>, %pos: tensor<4xi32>) -> tensor<4x128xbf16> {
  %0 = "nn.rope"(%x, %pos) <{head_dim = 64 : i64, rotary_heads = 2 : i64, theta = 1.0e+04 : f32, style = "neox"}> : (tensor<4x128xbf16>, tensor<4xi32>) -> tensor<4x128xbf16>
  func.return %0 : tensor<4x128xbf16>
}
