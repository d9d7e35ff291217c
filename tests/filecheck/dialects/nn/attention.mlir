// RUN: CODA_ROUNDTRIP
// RUN: CODA_GENERIC_ROUNDTRIP

// nn.attention and its autodiff variants with the optional properties `scale` (f32), `window`
// (i64), `softcap` (f32) and the optional `segments` operand (tensor<M x i32>, last), written in
// the generic form. A program without them (the first function) reads and prints as before.
// CHECK pins the pretty form after a pretty -> pretty round trip, CHECK-GENERIC the generic form.

func.func @plain(%qkv: tensor<10x128xf32>) -> tensor<10x64xf32> {
  %y = "nn.attention"(%qkv) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true}> : (tensor<10x128xf32>) -> tensor<10x64xf32>
  func.return %y : tensor<10x64xf32>
}

// CHECK-LABEL: func.func @plain(
// CHECK-NEXT:    %y = nn.attention %qkv {heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true} : tensor<10x128xf32> -> tensor<10x64xf32>

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "plain"
// CHECK-GENERIC:         %y = "nn.attention"(%qkv) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true}> : (tensor<10x128xf32>) -> tensor<10x64xf32>

// -----

func.func @gemma(%qkv: tensor<10x128xbf16>, %seg: tensor<10xi32>) -> (tensor<10x64xbf16>, tensor<10x64xbf16>) {
  %y = "nn.attention"(%qkv) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, scale = 6.250000e-02 : f32, window = 3 : i64, softcap = 5.000000e+01 : f32}> : (tensor<10x128xbf16>) -> tensor<10x64xbf16>
  %z = "nn.attention"(%qkv, %seg) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, window = 4 : i64}> : (tensor<10x128xbf16>, tensor<10xi32>) -> tensor<10x64xbf16>
  func.return %y, %z : tensor<10x64xbf16>, tensor<10x64xbf16>
}

// CHECK-LABEL: func.func @gemma(
// CHECK-NEXT:    %y = nn.attention %qkv {heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, scale = 6.250000e-02 : f32, window = 3 : i64, softcap = 5.000000e+01 : f32} : tensor<10x128xbf16> -> tensor<10x64xbf16>
// CHECK-NEXT:    %z = nn.attention %qkv, %seg {heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, window = 4 : i64} : tensor<10x128xbf16>, tensor<10xi32> -> tensor<10x64xbf16>

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "gemma"
// CHECK-GENERIC:         %y = "nn.attention"(%qkv) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, scale = 6.250000e-02 : f32, window = 3 : i64, softcap = 5.000000e+01 : f32}> : (tensor<10x128xbf16>) -> tensor<10x64xbf16>
// CHECK-GENERIC-NEXT:    %z = "nn.attention"(%qkv, %seg) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, window = 4 : i64}> : (tensor<10x128xbf16>, tensor<10xi32>) -> tensor<10x64xbf16>

// -----

func.func @autodiff_ops(%qkv: tensor<10x128xf32>, %seg: tensor<10xi32>, %dy: tensor<10x64xf32>) -> tensor<10x128xf32> {
  %y, %lse = "nn.attention_fwd"(%qkv, %seg) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, softcap = 2.000000e+01 : f32}> : (tensor<10x128xf32>, tensor<10xi32>) -> (tensor<10x64xf32>, tensor<40xf32>)
  %g = "nn.attention_grad"(%qkv, %y, %lse, %dy, %seg) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, softcap = 2.000000e+01 : f32}> : (tensor<10x128xf32>, tensor<10x64xf32>, tensor<40xf32>, tensor<10x64xf32>, tensor<10xi32>) -> tensor<10x128xf32>
  func.return %g : tensor<10x128xf32>
}

// CHECK-LABEL: func.func @autodiff_ops(
// CHECK-NEXT:    %y, %lse = nn.attention_fwd %qkv, %seg {heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, softcap = 2.000000e+01 : f32} : tensor<10x128xf32>, tensor<10xi32> -> (tensor<10x64xf32>, tensor<40xf32>)
// CHECK-NEXT:    %g = nn.attention_grad %qkv, %y, %lse, %dy, %seg {heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, softcap = 2.000000e+01 : f32} : tensor<10x128xf32>, tensor<10x64xf32>, tensor<40xf32>, tensor<10x64xf32>, tensor<10xi32> -> tensor<10x128xf32>

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "autodiff_ops"
// CHECK-GENERIC:         %y, %lse = "nn.attention_fwd"(%qkv, %seg) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, softcap = 2.000000e+01 : f32}> : (tensor<10x128xf32>, tensor<10xi32>) -> (tensor<10x64xf32>, tensor<40xf32>)
// CHECK-GENERIC-NEXT:    %g = "nn.attention_grad"(%qkv, %y, %lse, %dy, %seg) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, softcap = 2.000000e+01 : f32}> : (tensor<10x128xf32>, tensor<10x64xf32>, tensor<40xf32>, tensor<10x64xf32>, tensor<10xi32>) -> tensor<10x128xf32>
