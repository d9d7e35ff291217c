// RUN: CODA_ROUNDTRIP
// RUN: CODA_GENERIC_ROUNDTRIP

// The custom (pretty) syntax as input: `nn.op %a, %b {props} : T_a, T_b -> T_result`.
// Every property is spelled out: NN_DIALECT.md makes them required (only head_rms_norm's
// `first_head` is optional, default 0, and is not printed when absent).

func.func @properties(%x: tensor<16x128xf32>, %w: tensor<128xf32>, %b: tensor<128xf32>, %pos: tensor<16xi32>, %t: tensor<16xi32>, %hw: tensor<32xf32>) -> (tensor<16x128xf32>, tensor<16x128xf32>, tensor<16x128xf32>, tensor<16x128xf32>, tensor<16x64xf32>, tensor<16x128xf32>, tensor<f32>) {
  %g = nn.gelu %x {approximate = "none"} : tensor<16x128xf32> -> tensor<16x128xf32>
  %r = nn.rms_norm %x, %w {eps = 1.0e-06 : f32} : tensor<16x128xf32>, tensor<128xf32> -> tensor<16x128xf32>
  %l = nn.layer_norm %x, %w, %b {eps = 1.0e-05 : f32} : tensor<16x128xf32>, tensor<128xf32>, tensor<128xf32> -> tensor<16x128xf32>
  %p = nn.rope %x, %pos {head_dim = 32 : i64, rotary_heads = 3 : i64, theta = 1.0e+04 : f32, style = "half"} : tensor<16x128xf32>, tensor<16xi32> -> tensor<16x128xf32>
  %q = nn.geglu %x {approximate = "none"} : tensor<16x128xf32> -> tensor<16x64xf32>
  %h = nn.head_rms_norm %x, %hw {head_dim = 32 : i64, heads = 4 : i64, eps = 1.0e-06 : f32} : tensor<16x128xf32>, tensor<32xf32> -> tensor<16x128xf32>
  %c = nn.cross_entropy %x, %t {ignore_index = -100 : i64, reduction = "mean"} : tensor<16x128xf32>, tensor<16xi32> -> tensor<f32>
  func.return %g, %r, %l, %p, %q, %h, %c : tensor<16x128xf32>, tensor<16x128xf32>, tensor<16x128xf32>, tensor<16x128xf32>, tensor<16x64xf32>, tensor<16x128xf32>, tensor<f32>
}

// CHECK-LABEL: func.func @properties(
// CHECK-NEXT:    %g = nn.gelu %x {approximate = "none"} : tensor<16x128xf32> -> tensor<16x128xf32>
// CHECK-NEXT:    %r = nn.rms_norm %x, %w {eps = 1.000000e-06 : f32} : tensor<16x128xf32>, tensor<128xf32> -> tensor<16x128xf32>
// CHECK-NEXT:    %l = nn.layer_norm %x, %w, %b {eps = 1.000000e-05 : f32} : tensor<16x128xf32>, tensor<128xf32>, tensor<128xf32> -> tensor<16x128xf32>
// CHECK-NEXT:    %p = nn.rope %x, %pos {head_dim = 32 : i64, rotary_heads = 3 : i64, theta = 1.000000e+04 : f32, style = "half"} : tensor<16x128xf32>, tensor<16xi32> -> tensor<16x128xf32>
// CHECK-NEXT:    %q = nn.geglu %x {approximate = "none"} : tensor<16x128xf32> -> tensor<16x64xf32>
// CHECK-NEXT:    %h = nn.head_rms_norm %x, %hw {head_dim = 32 : i64, heads = 4 : i64, eps = 1.000000e-06 : f32} : tensor<16x128xf32>, tensor<32xf32> -> tensor<16x128xf32>
// CHECK-NEXT:    %c = nn.cross_entropy %x, %t {ignore_index = -100 : i64, reduction = "mean"} : tensor<16x128xf32>, tensor<16xi32> -> tensor<f32>

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "properties"
// CHECK-GENERIC:         %g = "nn.gelu"(%x) <{approximate = "none"}> : (tensor<16x128xf32>) -> tensor<16x128xf32>
// CHECK-GENERIC-NEXT:    %r = "nn.rms_norm"(%x, %w) <{eps = 1.000000e-06 : f32}> : (tensor<16x128xf32>, tensor<128xf32>) -> tensor<16x128xf32>
// CHECK-GENERIC-NEXT:    %l = "nn.layer_norm"(%x, %w, %b) <{eps = 1.000000e-05 : f32}> : (tensor<16x128xf32>, tensor<128xf32>, tensor<128xf32>) -> tensor<16x128xf32>
// CHECK-GENERIC-NEXT:    %p = "nn.rope"(%x, %pos) <{head_dim = 32 : i64, rotary_heads = 3 : i64, theta = 1.000000e+04 : f32, style = "half"}> : (tensor<16x128xf32>, tensor<16xi32>) -> tensor<16x128xf32>
// CHECK-GENERIC-NEXT:    %q = "nn.geglu"(%x) <{approximate = "none"}> : (tensor<16x128xf32>) -> tensor<16x64xf32>
// CHECK-GENERIC-NEXT:    %h = "nn.head_rms_norm"(%x, %hw) <{head_dim = 32 : i64, heads = 4 : i64, eps = 1.000000e-06 : f32}> : (tensor<16x128xf32>, tensor<32xf32>) -> tensor<16x128xf32>
// CHECK-GENERIC-NEXT:    %c = "nn.cross_entropy"(%x, %t) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<16x128xf32>, tensor<16xi32>) -> tensor<f32>

// -----

// Explicit properties in the pretty form, in any order; rope with zero rotary heads
// (all columns pass through) and every float element type.
func.func @explicit(%x: tensor<8x64xf16>, %pos: tensor<8xi32>, %w: tensor<64xbf16>, %y: tensor<8x64xbf16>) -> (tensor<8x64xf16>, tensor<8x64xbf16>) {
  %p = nn.rope %x, %pos {style = "interleaved", theta = 5.000000e+05 : f32, rotary_heads = 0 : i64, head_dim = 16 : i64} : tensor<8x64xf16>, tensor<8xi32> -> tensor<8x64xf16>
  %n = nn.rms_norm %y, %w {eps = 0.000000e+00 : f32} : tensor<8x64xbf16>, tensor<64xbf16> -> tensor<8x64xbf16>
  func.return %p, %n : tensor<8x64xf16>, tensor<8x64xbf16>
}

// CHECK-LABEL: func.func @explicit(
// CHECK-NEXT:    %p = nn.rope %x, %pos {style = "interleaved", theta = 5.000000e+05 : f32, rotary_heads = 0 : i64, head_dim = 16 : i64} : tensor<8x64xf16>, tensor<8xi32> -> tensor<8x64xf16>
// CHECK-NEXT:    %n = nn.rms_norm %y, %w {eps = 0.000000e+00 : f32} : tensor<8x64xbf16>, tensor<64xbf16> -> tensor<8x64xbf16>

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "explicit"
// CHECK-GENERIC:         %p = "nn.rope"(%x, %pos) <{style = "interleaved", theta = 5.000000e+05 : f32, rotary_heads = 0 : i64, head_dim = 16 : i64}> : (tensor<8x64xf16>, tensor<8xi32>) -> tensor<8x64xf16>
// CHECK-GENERIC-NEXT:    %n = "nn.rms_norm"(%y, %w) <{eps = 0.000000e+00 : f32}> : (tensor<8x64xbf16>, tensor<64xbf16>) -> tensor<8x64xbf16>
