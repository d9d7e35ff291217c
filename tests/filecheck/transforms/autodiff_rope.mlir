// RUN: coda-opt %s -p nn-autodiff | filecheck %s

// A partial, scaled RoPE (rotary_dim 6 of 16, scaling 1.5, explicit frequencies): its gradient
// is nn.rope_grad with the same properties (the transpose s R(-a) on the rotated columns, the
// identity on the rest), reading only the positions: nothing of x is saved.
func.func @rope(%x: tensor<4x32xbf16>, %p: tensor<4xi32>) -> tensor<4x32xbf16> {
  %y = "nn.rope"(%x, %p) <{head_dim = 16 : i64, rotary_heads = 2 : i64, theta = 10000.0 : f32, style = "interleaved", rotary_dim = 6 : i64, scaling = 1.5 : f32, inv_freq = array<f32: 1.0, 0.25, 0.0625>}> : (tensor<4x32xbf16>, tensor<4xi32>) -> tensor<4x32xbf16>
  func.return %y : tensor<4x32xbf16>
}
// CHECK-LABEL: func.func @rope_fwd(%x: tensor<4x32xbf16>, %p: tensor<4xi32>) -> (tensor<4x32xbf16>, tensor<4xi32>)
// CHECK-LABEL: func.func @rope_bwd(%p: tensor<4xi32>, %dy: tensor<4x32xbf16>) -> tensor<4x32xbf16>
// CHECK:         nn.rope_grad %dy, %p {{{.*}}style = "interleaved", rotary_dim = 6 : i64, scaling = 1.500000e+00 : f32, inv_freq = array<f32: 1.000000e+00, 2.500000e-01, 6.250000e-02>}
// CHECK-NEXT:    func.return
