// RUN: coda-opt %s --split-input-file --verify-diagnostics | filecheck %s

// The verifier rules of nn.attention's optional properties and segments operand (the same
// check_attention_options serves nn.attention_fwd / nn.attention_grad and the coda twins). One
// located diagnostic per chunk; the CHECK-NEXT matches the chunk separator coda-opt prints.

func.func @scale_negative(%qkv: tensor<10x128xf32>) {
  %y = "nn.attention"(%qkv) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, scale = -1.000000e+00 : f32}> : (tensor<10x128xf32>) -> tensor<10x64xf32>
  func.return
}
// CHECK: {{.*}}attention_verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.attention' op scale must be a positive finite number, got -1
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @scale_f64(%qkv: tensor<10x128xf32>) {
  %y = "nn.attention"(%qkv) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, scale = 2.500000e-01 : f64}> : (tensor<10x128xf32>) -> tensor<10x64xf32>
  func.return
}
// CHECK: {{.*}}attention_verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.attention' op property scale must be an f32 float (e.g. `scale = 1.0e-06 : f32`), got f64
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @window_negative(%qkv: tensor<10x128xf32>) {
  %y = "nn.attention"(%qkv) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, window = -2 : i64}> : (tensor<10x128xf32>) -> tensor<10x64xf32>
  func.return
}
// CHECK: {{.*}}attention_verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.attention' op window must be non-negative (0: no sliding window), got -2
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @window_i32(%qkv: tensor<10x128xf32>) {
  %y = "nn.attention"(%qkv) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, window = 2 : i32}> : (tensor<10x128xf32>) -> tensor<10x64xf32>
  func.return
}
// CHECK: {{.*}}attention_verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.attention' op property window must be an i64 integer (e.g. `window = 4 : i64`), got i32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @window_not_causal(%qkv: tensor<10x128xf32>) {
  %y = "nn.attention"(%qkv) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = false, window = 2 : i64}> : (tensor<10x128xf32>) -> tensor<10x64xf32>
  func.return
}
// CHECK: {{.*}}attention_verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.attention' op window = 2 needs causal = true (a sliding window narrows the causal mask)
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @softcap_negative(%qkv: tensor<10x128xf32>) {
  %y = "nn.attention"(%qkv) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, softcap = -3.000000e+00 : f32}> : (tensor<10x128xf32>) -> tensor<10x64xf32>
  func.return
}
// CHECK: {{.*}}attention_verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.attention' op softcap must be a non-negative finite number (0: none), got -3
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @segments_i64(%qkv: tensor<10x128xf32>, %seg: tensor<10xi64>) {
  %y = "nn.attention"(%qkv, %seg) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true}> : (tensor<10x128xf32>, tensor<10xi64>) -> tensor<10x64xf32>
  func.return
}
// CHECK: {{.*}}attention_verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.attention' op segments must have element type i32, got tensor<10xi64>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @segments_length(%qkv: tensor<10x128xf32>, %seg: tensor<5xi32>) {
  %y = "nn.attention"(%qkv, %seg) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true}> : (tensor<10x128xf32>, tensor<5xi32>) -> tensor<10x64xf32>
  func.return
}
// CHECK: {{.*}}attention_verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.attention' op segments must have 10 elements (one per row), got tensor<5xi32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @two_segments(%qkv: tensor<10x128xf32>, %seg: tensor<10xi32>) {
  %y = "nn.attention"(%qkv, %seg, %seg) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true}> : (tensor<10x128xf32>, tensor<10xi32>, tensor<10xi32>) -> tensor<10x64xf32>
  func.return
}
// CHECK: {{.*}}attention_verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.attention' op takes at most one segments operand, got 2
// CHECK-NEXT: {{^// -{5}$}}


// -----

func.func @grad_segments(%qkv: tensor<10x128xf32>, %y: tensor<10x64xf32>, %lse: tensor<40xf32>, %seg: tensor<10xf32>) {
  %g = "nn.attention_grad"(%qkv, %y, %lse, %y, %seg) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true}> : (tensor<10x128xf32>, tensor<10x64xf32>, tensor<40xf32>, tensor<10x64xf32>, tensor<10xf32>) -> tensor<10x128xf32>
  func.return
}
// CHECK: {{.*}}attention_verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'nn.attention_grad' op segments must have element type i32, got tensor<10xf32>
