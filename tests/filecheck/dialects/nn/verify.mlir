// RUN: coda-opt %s --split-input-file --verify-diagnostics | filecheck %s

// One chunk per verifier rule of nn.py (and the IRDL rules the contract relies on). Every
// diagnostic is located (`file:line:col: error: 'op' op ...`) and is the only one of its
// chunk: the CHECK-NEXT after it matches the chunk separator that coda-opt prints.

// ===== operand checks

func.func @x_rank(%x: tensor<8xf32>, %w: tensor<4x8xf32>) {
  %0 = "nn.linear"(%x, %w) : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.linear' op x must be rank 2, got tensor<8xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @w_rank(%x: tensor<2x8xf32>, %w: tensor<4x8x1xf32>) {
  %0 = "nn.linear"(%x, %w) : (tensor<2x8xf32>, tensor<4x8x1xf32>) -> tensor<2x4xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.linear' op w must be rank 2, got tensor<4x8x1xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @dynamic(%x: tensor<?x8xf32>, %w: tensor<4x8xf32>) {
  %0 = "nn.linear"(%x, %w) : (tensor<?x8xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.linear' op x must have a static shape, got tensor<?x8xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @f64(%x: tensor<2x8xf64>, %w: tensor<4x8xf64>) {
  %0 = "nn.linear"(%x, %w) : (tensor<2x8xf64>, tensor<4x8xf64>) -> tensor<2x4xf64>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.linear' op x must have element type f32, bf16 or f16, got tensor<2x8xf64>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @int(%x: tensor<2x8xi32>) {
  %0 = "nn.relu"(%x) : (tensor<2x8xi32>) -> tensor<2x8xi32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.relu' op x must have element type f32, bf16 or f16, got tensor<2x8xi32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @not_a_tensor(%x: f32) {
  %0 = "nn.silu"(%x) : (f32) -> f32
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.silu' op operand 'x' at position 0 does not verify: f32 should be of base attribute tensor
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @mixed_types(%x: tensor<2x8xbf16>, %w: tensor<4x8xf32>) {
  %0 = "nn.linear"(%x, %w) : (tensor<2x8xbf16>, tensor<4x8xf32>) -> tensor<2x4xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.linear' op w element type f32 does not match x element type bf16
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== result checks

func.func @result_shape(%x: tensor<2x8xf32>, %w: tensor<4x8xf32>) {
  %0 = "nn.linear"(%x, %w) : (tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.linear' op result shape must be 2x4, got 2x8
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @result_element_type(%x: tensor<2x8xbf16>) {
  %0 = "nn.silu"(%x) : (tensor<2x8xbf16>) -> tensor<2x8xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.silu' op result element type f32 does not match operand element type bf16
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @result_dynamic(%x: tensor<2x8xf32>) {
  %0 = "nn.gelu"(%x) <{approximate = "none"}> : (tensor<2x8xf32>) -> tensor<?x8xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.gelu' op result must have a static shape, got tensor<?x8xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @result_int(%x: tensor<2x8xf32>) {
  %0 = "nn.relu"(%x) : (tensor<2x8xf32>) -> tensor<2x8xi32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.relu' op result must have element type f32, bf16 or f16, got tensor<2x8xi32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @two_results(%x: tensor<2x8xf32>) {
  %0, %1 = "nn.relu"(%x) : (tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>)
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.relu' op Expected 1 result, but got 2
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @missing_operand(%x: tensor<2x8xf32>) {
  %0 = "nn.linear"(%x) : (tensor<2x8xf32>) -> tensor<2x4xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.linear' op Expected 2 operands, but got 1
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== nn.linear / nn.matmul

func.func @linear_k(%x: tensor<2x8xf32>, %w: tensor<4x6xf32>) {
  %0 = "nn.linear"(%x, %w) : (tensor<2x8xf32>, tensor<4x6xf32>) -> tensor<2x4xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.linear' op x has 8 columns but w (NxK, nn.Linear layout) has 6: expected w of shape Nx8
// CHECK-NEXT: {{^// -{5}$}}

// -----

// A KxN weight given to nn.linear (which wants nn.Linear's NxK layout).
func.func @linear_transposed_weight(%x: tensor<2x8xf32>, %w: tensor<8x4xf32>) {
  %0 = "nn.linear"(%x, %w) : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.linear' op x has 8 columns but w (NxK, nn.Linear layout) has 4: expected w of shape Nx8
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @matmul_k(%a: tensor<2x8xf16>, %b: tensor<4x8xf16>) {
  %0 = "nn.matmul"(%a, %b) : (tensor<2x8xf16>, tensor<4x8xf16>) -> tensor<2x8xf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.matmul' op a has 8 columns but b has 4 rows: expected b of shape 8xN
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @matmul_result(%a: tensor<2x8xf16>, %b: tensor<8x4xf16>) {
  %0 = "nn.matmul"(%a, %b) : (tensor<2x8xf16>, tensor<8x4xf16>) -> tensor<4x2xf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.matmul' op result shape must be 2x4, got 4x2
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== nn.add / nn.mul

func.func @add_rhs(%a: tensor<2x8xf32>, %b: tensor<2x4xf32>) {
  %0 = "nn.add"(%a, %b) : (tensor<2x8xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.add' op rhs must have shape 2x8 (elementwise) or 8 (broadcast over rows), got 2x4
// CHECK-NEXT: {{^// -{5}$}}

// -----

// A rank-1 operand broadcasts over rows only: a per-row (column) vector is rejected.
func.func @add_row_vector(%a: tensor<2x8xf32>, %b: tensor<2xf32>) {
  %0 = "nn.add"(%a, %b) : (tensor<2x8xf32>, tensor<2xf32>) -> tensor<2x8xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.add' op rhs must have shape 2x8 (elementwise) or 8 (broadcast over rows), got 2
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @add_lhs_rank1(%a: tensor<8xf32>, %b: tensor<2x8xf32>) {
  %0 = "nn.add"(%a, %b) : (tensor<8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.add' op a rank-1 lhs needs an rhs of the same shape 8, got 2x8
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @mul_scalar(%a: tensor<2x8xf32>, %b: tensor<f32>) {
  %0 = "nn.mul"(%a, %b) : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.mul' op rhs must have shape 2x8 (elementwise) or 8 (broadcast over rows), got scalar
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @mul_types(%a: tensor<2x8xf16>, %b: tensor<8xbf16>) {
  %0 = "nn.mul"(%a, %b) : (tensor<2x8xf16>, tensor<8xbf16>) -> tensor<2x8xf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.mul' op rhs element type bf16 does not match lhs element type f16
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== nn.gelu / nn.geglu

func.func @gelu_approximate(%x: tensor<2x8xf32>) {
  %0 = "nn.gelu"(%x) <{approximate = "x"}> : (tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.gelu' op approximate must be one of "none", "tanh", got "x"
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @gelu_approximate_type(%x: tensor<2x8xf32>) {
  %0 = "nn.gelu"(%x) <{approximate = 1 : i64}> : (tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.gelu' op 1 : i64 should be of base attribute string
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @geglu_approximate(%z: tensor<2x8xf32>) {
  %0 = "nn.geglu"(%z) <{approximate = "erf"}> : (tensor<2x8xf32>) -> tensor<2x4xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.geglu' op approximate must be one of "none", "tanh", got "erf"
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @swiglu_odd(%z: tensor<2x7xf32>) {
  %0 = "nn.swiglu"(%z) : (tensor<2x7xf32>) -> tensor<2x3xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.swiglu' op z must have an even number of columns (gate half then up half), got 7
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @swiglu_result(%z: tensor<2x8xbf16>) {
  %0 = "nn.swiglu"(%z) : (tensor<2x8xbf16>) -> tensor<2x8xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.swiglu' op result shape must be 2x4, got 2x8
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @geglu_rank(%z: tensor<8xbf16>) {
  %0 = "nn.geglu"(%z) <{approximate = "none"}> : (tensor<8xbf16>) -> tensor<4xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.geglu' op z must be rank 2, got tensor<8xbf16>
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== nn.rms_norm / nn.layer_norm

func.func @rms_weight(%x: tensor<2x8xbf16>, %w: tensor<4xbf16>) {
  %0 = "nn.rms_norm"(%x, %w) <{eps = 1.0e-06 : f32}> : (tensor<2x8xbf16>, tensor<4xbf16>) -> tensor<2x8xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rms_norm' op w must have shape 8 (one weight per feature), got 4
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @rms_weight_rank(%x: tensor<2x8xbf16>, %w: tensor<1x8xbf16>) {
  %0 = "nn.rms_norm"(%x, %w) <{eps = 1.0e-06 : f32}> : (tensor<2x8xbf16>, tensor<1x8xbf16>) -> tensor<2x8xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rms_norm' op w must be rank 1, got tensor<1x8xbf16>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @rms_eps(%x: tensor<2x8xbf16>, %w: tensor<8xbf16>) {
  %0 = "nn.rms_norm"(%x, %w) <{eps = -1.0e-06 : f32}> : (tensor<2x8xbf16>, tensor<8xbf16>) -> tensor<2x8xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rms_norm' op eps must be a non-negative finite number, got -1e-06
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @rms_eps_type(%x: tensor<2x8xbf16>, %w: tensor<8xbf16>) {
  %0 = "nn.rms_norm"(%x, %w) <{eps = 1 : i64}> : (tensor<2x8xbf16>, tensor<8xbf16>) -> tensor<2x8xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rms_norm' op 1 : i64 should be of base attribute float
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @rms_weight_type(%x: tensor<2x8xbf16>, %w: tensor<8xf32>) {
  %0 = "nn.rms_norm"(%x, %w) <{eps = 1.000000e-06 : f32}> : (tensor<2x8xbf16>, tensor<8xf32>) -> tensor<2x8xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rms_norm' op w element type f32 does not match x element type bf16
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @layer_norm_bias(%x: tensor<2x8xf32>, %w: tensor<8xf32>, %b: tensor<6xf32>) {
  %0 = "nn.layer_norm"(%x, %w, %b) <{eps = 1.0e-05 : f32}> : (tensor<2x8xf32>, tensor<8xf32>, tensor<6xf32>) -> tensor<2x8xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.layer_norm' op b must have shape 8 (one per feature), got 6
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @layer_norm_weight(%x: tensor<2x8xf32>, %w: tensor<2xf32>, %b: tensor<8xf32>) {
  %0 = "nn.layer_norm"(%x, %w, %b) <{eps = 1.0e-05 : f32}> : (tensor<2x8xf32>, tensor<2xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.layer_norm' op w must have shape 8 (one per feature), got 2
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @layer_norm_eps(%x: tensor<2x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) {
  %0 = "nn.layer_norm"(%x, %w, %b) <{eps = -1.0 : f32}> : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.layer_norm' op eps must be a non-negative finite number
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @layer_norm_types(%x: tensor<2x8xf16>, %w: tensor<8xf16>, %b: tensor<8xf32>) {
  %0 = "nn.layer_norm"(%x, %w, %b) <{eps = 1.000000e-05 : f32}> : (tensor<2x8xf16>, tensor<8xf16>, tensor<8xf32>) -> tensor<2x8xf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.layer_norm' op b element type f32 does not match x element type f16
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== nn.rope

func.func @rope_style(%x: tensor<4x128xbf16>, %pos: tensor<4xi32>) {
  %0 = "nn.rope"(%x, %pos) <{head_dim = 64 : i64, rotary_heads = 2 : i64, theta = 1.0e+04 : f32, style = "foo"}> : (tensor<4x128xbf16>, tensor<4xi32>) -> tensor<4x128xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rope' op style must be one of "half", "interleaved", got "foo"
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @rope_odd_head_dim(%x: tensor<4x126xbf16>, %pos: tensor<4xi32>) {
  %0 = "nn.rope"(%x, %pos) <{head_dim = 63 : i64, rotary_heads = 2 : i64, theta = 1.000000e+04 : f32, style = "half"}> : (tensor<4x126xbf16>, tensor<4xi32>) -> tensor<4x126xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rope' op head_dim must be even (rotation pairs), got 63
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @rope_zero_head_dim(%x: tensor<4x128xbf16>, %pos: tensor<4xi32>) {
  %0 = "nn.rope"(%x, %pos) <{head_dim = 0 : i64, rotary_heads = 2 : i64, theta = 1.000000e+04 : f32, style = "half"}> : (tensor<4x128xbf16>, tensor<4xi32>) -> tensor<4x128xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rope' op head_dim must be positive, got 0
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @rope_columns(%x: tensor<4x96xbf16>, %pos: tensor<4xi32>) {
  %0 = "nn.rope"(%x, %pos) <{head_dim = 64 : i64, rotary_heads = 1 : i64, theta = 1.000000e+04 : f32, style = "half"}> : (tensor<4x96xbf16>, tensor<4xi32>) -> tensor<4x96xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rope' op x has 96 columns, not a multiple of head_dim 64
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @rope_too_many_heads(%x: tensor<4x128xbf16>, %pos: tensor<4xi32>) {
  %0 = "nn.rope"(%x, %pos) <{head_dim = 64 : i64, rotary_heads = 3 : i64, theta = 1.000000e+04 : f32, style = "half"}> : (tensor<4x128xbf16>, tensor<4xi32>) -> tensor<4x128xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rope' op rotary_heads must be between 0 and 2 (x has 2 heads of 64), got 3
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @rope_negative_heads(%x: tensor<4x128xbf16>, %pos: tensor<4xi32>) {
  %0 = "nn.rope"(%x, %pos) <{head_dim = 64 : i64, rotary_heads = -1 : i64, theta = 1.000000e+04 : f32, style = "half"}> : (tensor<4x128xbf16>, tensor<4xi32>) -> tensor<4x128xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rope' op rotary_heads must be between 0 and 2 (x has 2 heads of 64), got -1
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @rope_theta(%x: tensor<4x128xbf16>, %pos: tensor<4xi32>) {
  %0 = "nn.rope"(%x, %pos) <{head_dim = 64 : i64, rotary_heads = 2 : i64, theta = 0.0 : f32, style = "half"}> : (tensor<4x128xbf16>, tensor<4xi32>) -> tensor<4x128xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rope' op theta must be a positive finite number
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @rope_pos_type(%x: tensor<4x128xbf16>, %pos: tensor<4xi64>) {
  %0 = "nn.rope"(%x, %pos) <{head_dim = 64 : i64, rotary_heads = 2 : i64, theta = 1.000000e+04 : f32, style = "half"}> : (tensor<4x128xbf16>, tensor<4xi64>) -> tensor<4x128xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rope' op pos must have element type i32, got tensor<4xi64>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @rope_pos_float(%x: tensor<4x128xbf16>, %pos: tensor<4xf32>) {
  %0 = "nn.rope"(%x, %pos) <{head_dim = 64 : i64, rotary_heads = 2 : i64, theta = 1.000000e+04 : f32, style = "half"}> : (tensor<4x128xbf16>, tensor<4xf32>) -> tensor<4x128xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rope' op pos must have element type i32, got tensor<4xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @rope_pos_rank(%x: tensor<4x128xbf16>, %pos: tensor<4x1xi32>) {
  %0 = "nn.rope"(%x, %pos) <{head_dim = 64 : i64, rotary_heads = 2 : i64, theta = 1.000000e+04 : f32, style = "half"}> : (tensor<4x128xbf16>, tensor<4x1xi32>) -> tensor<4x128xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rope' op pos must be a rank-1 tensor of i32, got tensor<4x1xi32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @rope_pos_length(%x: tensor<4x128xbf16>, %pos: tensor<8xi32>) {
  %0 = "nn.rope"(%x, %pos) <{head_dim = 64 : i64, rotary_heads = 2 : i64, theta = 1.000000e+04 : f32, style = "half"}> : (tensor<4x128xbf16>, tensor<8xi32>) -> tensor<4x128xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rope' op pos must have 4 elements (one per row), got tensor<8xi32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @rope_missing_property(%x: tensor<4x128xbf16>, %pos: tensor<4xi32>) {
  %0 = "nn.rope"(%x, %pos) <{head_dim = 64 : i64, theta = 1.000000e+04 : f32, style = "half"}> : (tensor<4x128xbf16>, tensor<4xi32>) -> tensor<4x128xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rope' op property 'rotary_heads' expected in operation 'nn.rope'
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @rope_unknown_property(%x: tensor<4x128xbf16>, %pos: tensor<4xi32>) {
  %0 = "nn.rope"(%x, %pos) <{head_dim = 64 : i64, rotary_heads = 2 : i64, base = 1.0 : f32, theta = 1.000000e+04 : f32, style = "half"}> : (tensor<4x128xbf16>, tensor<4xi32>) -> tensor<4x128xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rope' op property 'base' is not defined by the operation 'nn.rope'.
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== nn.head_rms_norm

func.func @head_norm_columns(%x: tensor<4x100xf32>, %w: tensor<64xf32>) {
  %0 = "nn.head_rms_norm"(%x, %w) <{head_dim = 64 : i64, heads = 1 : i64, eps = 1.0e-06 : f32}> : (tensor<4x100xf32>, tensor<64xf32>) -> tensor<4x100xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.head_rms_norm' op x has 100 columns, not a multiple of head_dim 64
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @head_norm_weight(%x: tensor<4x128xf32>, %w: tensor<128xf32>) {
  %0 = "nn.head_rms_norm"(%x, %w) <{head_dim = 64 : i64, heads = 2 : i64, eps = 1.0e-06 : f32}> : (tensor<4x128xf32>, tensor<128xf32>) -> tensor<4x128xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.head_rms_norm' op w must have shape 64 (head_dim), got 128
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @head_norm_heads(%x: tensor<4x128xf32>, %w: tensor<64xf32>) {
  %0 = "nn.head_rms_norm"(%x, %w) <{head_dim = 64 : i64, heads = 4 : i64, eps = 1.0e-06 : f32}> : (tensor<4x128xf32>, tensor<64xf32>) -> tensor<4x128xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.head_rms_norm' op heads must be between 0 and 2 (x has 2 heads of 64), got 4
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @head_norm_two_weights_no_groups(%x: tensor<4x128xf32>, %w: tensor<64xf32>) {
  %0 = "nn.head_rms_norm"(%x, %w, %w) <{head_dim = 64 : i64, heads = 2 : i64, eps = 1.0e-06 : f32}> : (tensor<4x128xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<4x128xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.head_rms_norm' op expected one weight without weight_heads, got 2
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @head_norm_groups_count(%x: tensor<4x128xf32>, %w: tensor<64xf32>) {
  %0 = "nn.head_rms_norm"(%x, %w, %w) <{head_dim = 64 : i64, heads = 2 : i64, eps = 1.0e-06 : f32, weight_heads = array<i64: 2>}> : (tensor<4x128xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<4x128xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.head_rms_norm' op weight_heads has 1 entries for 2 weights
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @head_norm_groups_sum(%x: tensor<4x192xf32>, %w: tensor<64xf32>) {
  %0 = "nn.head_rms_norm"(%x, %w, %w) <{head_dim = 64 : i64, heads = 2 : i64, eps = 1.0e-06 : f32, weight_heads = array<i64: 2, 1>}> : (tensor<4x192xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<4x192xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.head_rms_norm' op weight_heads must be positive head counts summing to heads (2), got [2, 1]
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @head_norm_group_weight(%x: tensor<4x128xf32>, %w: tensor<64xf32>, %v: tensor<32xf32>) {
  %0 = "nn.head_rms_norm"(%x, %w, %v) <{head_dim = 64 : i64, heads = 2 : i64, eps = 1.0e-06 : f32, weight_heads = array<i64: 1, 1>}> : (tensor<4x128xf32>, tensor<64xf32>, tensor<32xf32>) -> tensor<4x128xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.head_rms_norm' op w#1 must have shape 64 (head_dim), got 32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @head_norm_head_dim(%x: tensor<4x128xf32>, %w: tensor<64xf32>) {
  %0 = "nn.head_rms_norm"(%x, %w) <{head_dim = -64 : i64, heads = 2 : i64, eps = 1.0e-06 : f32}> : (tensor<4x128xf32>, tensor<64xf32>) -> tensor<4x128xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.head_rms_norm' op head_dim must be positive, got -64
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @head_norm_eps(%x: tensor<4x128xf32>, %w: tensor<64xf32>) {
  %0 = "nn.head_rms_norm"(%x, %w) <{head_dim = 64 : i64, heads = 2 : i64, eps = -1.0e-06 : f32}> : (tensor<4x128xf32>, tensor<64xf32>) -> tensor<4x128xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.head_rms_norm' op eps must be a non-negative finite number
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @head_norm_result(%x: tensor<4x128xf32>, %w: tensor<64xf32>) {
  %0 = "nn.head_rms_norm"(%x, %w) <{head_dim = 64 : i64, heads = 2 : i64, eps = 1.000000e-06 : f32}> : (tensor<4x128xf32>, tensor<64xf32>) -> tensor<4x64xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.head_rms_norm' op result shape must be 4x128, got 4x64
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @ce_classes(%l: tensor<4x16xbf16>, %t: tensor<4xi32>) {
  %0 = "nn.cross_entropy"(%l, %t) <{ignore_index = -100 : i64, reduction = "mean", classes = 17 : i64}> : (tensor<4x16xbf16>, tensor<4xi32>) -> tensor<f32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.cross_entropy' op classes must be between 1 and the logits' width 16, got 17
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== nn.cross_entropy

func.func @ce_reduction(%l: tensor<4x16xbf16>, %t: tensor<4xi32>) {
  %0 = "nn.cross_entropy"(%l, %t) <{ignore_index = -100 : i64, reduction = "none"}> : (tensor<4x16xbf16>, tensor<4xi32>) -> tensor<f32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.cross_entropy' op reduction must be one of "mean", "sum", got "none"
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @ce_result_rank(%l: tensor<4x16xbf16>, %t: tensor<4xi32>) {
  %0 = "nn.cross_entropy"(%l, %t) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<4x16xbf16>, tensor<4xi32>) -> tensor<4xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.cross_entropy' op result must be a 0-d tensor of f32 (tensor<f32>), got tensor<4xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @ce_result_type(%l: tensor<4x16xbf16>, %t: tensor<4xi32>) {
  %0 = "nn.cross_entropy"(%l, %t) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<4x16xbf16>, tensor<4xi32>) -> tensor<bf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.cross_entropy' op result must be a 0-d tensor of f32 (tensor<f32>), got tensor<bf16>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @ce_targets_length(%l: tensor<4x16xbf16>, %t: tensor<16xi32>) {
  %0 = "nn.cross_entropy"(%l, %t) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<4x16xbf16>, tensor<16xi32>) -> tensor<f32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.cross_entropy' op targets must have 4 elements (one per row), got tensor<16xi32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @ce_targets_type(%l: tensor<4x16xbf16>, %t: tensor<4xf32>) {
  %0 = "nn.cross_entropy"(%l, %t) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<4x16xbf16>, tensor<4xf32>) -> tensor<f32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.cross_entropy' op targets must have element type i32, got tensor<4xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @ce_logits_type(%l: tensor<4x16xi32>, %t: tensor<4xi32>) {
  %0 = "nn.cross_entropy"(%l, %t) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<4x16xi32>, tensor<4xi32>) -> tensor<f32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.cross_entropy' op logits must have element type f32, bf16 or f16, got tensor<4x16xi32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @ce_ignore_index_type(%l: tensor<4x16xf32>, %t: tensor<4xi32>) {
  %0 = "nn.cross_entropy"(%l, %t) <{ignore_index = "none", reduction = "mean"}> : (tensor<4x16xf32>, tensor<4xi32>) -> tensor<f32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.cross_entropy' op "none" should be of base attribute integer
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== located in nested code

// The diagnostic names the op and its own line even when the op sits deep in a function.
func.func @nested(%x: tensor<2x8xf32>, %w: tensor<4x8xf32>, %v: tensor<3xf32>) -> tensor<2x4xf32> {
  %0 = "nn.linear"(%x, %w) : (tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<2x4xf32>
  %1 = "nn.silu"(%0) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %2 = "nn.add"(%1, %v) : (tensor<2x4xf32>, tensor<3xf32>) -> tensor<2x4xf32>
  func.return %2 : tensor<2x4xf32>
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.add' op rhs must have shape 2x4 (elementwise) or 4 (broadcast over rows), got 3
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @eps_must_be_f32(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %y = "nn.rms_norm"(%x, %w) <{eps = 1.0e-06 : f64}> : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rms_norm' op property eps must be an f32 float (e.g. `eps = 1.0e-06 : f32`), got f64
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @head_dim_must_be_i64(%x: tensor<4x8xf32>, %p: tensor<4xi32>) -> tensor<4x8xf32> {
  %y = "nn.rope"(%x, %p) <{head_dim = 4 : i32, rotary_heads = 2 : i64, theta = 1.0e+04 : f32, style = "half"}> : (tensor<4x8xf32>, tensor<4xi32>) -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rope' op property head_dim must be an i64 integer (e.g. `head_dim = 4 : i64`), got i32
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== required properties, NaN / infinite values, sizes (issue 12)

func.func @missing_eps(%x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  %0 = "nn.rms_norm"(%x, %w) : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rms_norm' op property 'eps' expected
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @missing_eps_pretty(%x: tensor<2x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) {
  %0 = nn.layer_norm %x, %w, %b : tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<2x8xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.layer_norm' op property 'eps' expected
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @missing_approximate(%x: tensor<2x8xf32>) {
  %0 = "nn.gelu"(%x) : (tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.gelu' op property 'approximate' expected
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @missing_theta(%x: tensor<4x128xbf16>, %pos: tensor<4xi32>) {
  %0 = "nn.rope"(%x, %pos) <{head_dim = 64 : i64, rotary_heads = 2 : i64, style = "half"}> : (tensor<4x128xbf16>, tensor<4xi32>) -> tensor<4x128xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rope' op property 'theta' expected
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @missing_style(%x: tensor<4x128xbf16>, %pos: tensor<4xi32>) {
  %0 = "nn.rope"(%x, %pos) <{head_dim = 64 : i64, rotary_heads = 2 : i64, theta = 1.0e+04 : f32}> : (tensor<4x128xbf16>, tensor<4xi32>) -> tensor<4x128xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rope' op property 'style' expected
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @missing_reduction(%l: tensor<4x16xf32>, %t: tensor<4xi32>) {
  %0 = "nn.cross_entropy"(%l, %t) <{ignore_index = -100 : i64}> : (tensor<4x16xf32>, tensor<4xi32>) -> tensor<f32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.cross_entropy' op property 'reduction' expected
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @missing_ignore_index(%l: tensor<4x16xf32>, %t: tensor<4xi32>) {
  %0 = "nn.cross_entropy"(%l, %t) <{reduction = "sum"}> : (tensor<4x16xf32>, tensor<4xi32>) -> tensor<f32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.cross_entropy' op property 'ignore_index' expected
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @eps_nan(%x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  %0 = "nn.rms_norm"(%x, %w) <{eps = 0x7FC00000 : f32}> : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rms_norm' op eps must be a non-negative finite number, got nan
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @eps_inf(%x: tensor<4x128xf32>, %w: tensor<64xf32>) {
  %0 = "nn.head_rms_norm"(%x, %w) <{head_dim = 64 : i64, heads = 2 : i64, eps = 0x7F800000 : f32}> : (tensor<4x128xf32>, tensor<64xf32>) -> tensor<4x128xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.head_rms_norm' op eps must be a non-negative finite number, got inf
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @theta_nan(%x: tensor<4x128xbf16>, %pos: tensor<4xi32>) {
  %0 = "nn.rope"(%x, %pos) <{head_dim = 64 : i64, rotary_heads = 2 : i64, theta = 0x7FC00000 : f32, style = "half"}> : (tensor<4x128xbf16>, tensor<4xi32>) -> tensor<4x128xbf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.rope' op theta must be a positive finite number, got nan
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @ignore_index_range(%l: tensor<4x16xf32>, %t: tensor<4xi32>) {
  %0 = "nn.cross_entropy"(%l, %t) <{ignore_index = 4294967296 : i64, reduction = "mean"}> : (tensor<4x16xf32>, tensor<4xi32>) -> tensor<f32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.cross_entropy' op ignore_index must fit in i32 like the targets ([-2147483648, 2147483647]), got 4294967296
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @zero_dim(%x: tensor<0x8xf32>) {
  %0 = "nn.relu"(%x) : (tensor<0x8xf32>) -> tensor<0x8xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.relu' op x has a zero-size dimension (tensor<0x8xf32>): every dimension must be at least 1
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @zero_targets(%l: tensor<4x16xf32>, %t: tensor<0xi32>) {
  %0 = "nn.cross_entropy"(%l, %t) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<4x16xf32>, tensor<0xi32>) -> tensor<f32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.cross_entropy' op targets has a zero-size dimension (tensor<0xi32>): every dimension must be at least 1
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @dims_beyond_int64(%x: tensor<99999999999999999999x8xf32>) {
  %0 = "nn.silu"(%x) : (tensor<99999999999999999999x8xf32>) -> tensor<99999999999999999999x8xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.silu' op x has 799999999999999999992 elements (99999999999999999999x8), more than int64 can index (9223372036854775807)
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== custom syntax

func.func @pretty_type_count(%x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  %0 = nn.add %x, %w : tensor<2x8xf32> -> tensor<2x8xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: expected 2 operand types, got 1
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NOT: error:

