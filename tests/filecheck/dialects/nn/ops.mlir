// RUN: CODA_ROUNDTRIP
// RUN: CODA_GENERIC_ROUNDTRIP

// Every nn op, written in the generic form exactly as outside tests write it
// (NN_DIALECT.md). CHECK pins the pretty form after a pretty -> pretty round trip,
// CHECK-GENERIC the generic form after a generic -> generic round trip.

func.func @gemms(%x: tensor<256x128xbf16>, %w: tensor<64x128xbf16>, %a: tensor<32x16xf16>, %b: tensor<16x8xf16>) -> (tensor<256x64xbf16>, tensor<32x8xf16>) {
  %y = "nn.linear"(%x, %w) : (tensor<256x128xbf16>, tensor<64x128xbf16>) -> tensor<256x64xbf16>
  %z = "nn.matmul"(%a, %b) : (tensor<32x16xf16>, tensor<16x8xf16>) -> tensor<32x8xf16>
  func.return %y, %z : tensor<256x64xbf16>, tensor<32x8xf16>
}

// CHECK-LABEL: func.func @gemms(
// CHECK-NEXT:    %y = nn.linear %x, %w : tensor<256x128xbf16>, tensor<64x128xbf16> -> tensor<256x64xbf16>
// CHECK-NEXT:    %z = nn.matmul %a, %b : tensor<32x16xf16>, tensor<16x8xf16> -> tensor<32x8xf16>
// CHECK-NEXT:    func.return %y, %z : tensor<256x64xbf16>, tensor<32x8xf16>

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "gemms"
// CHECK-GENERIC:         %y = "nn.linear"(%x, %w) : (tensor<256x128xbf16>, tensor<64x128xbf16>) -> tensor<256x64xbf16>
// CHECK-GENERIC-NEXT:    %z = "nn.matmul"(%a, %b) : (tensor<32x16xf16>, tensor<16x8xf16>) -> tensor<32x8xf16>
// CHECK-GENERIC-NEXT:    "func.return"(%y, %z) : (tensor<256x64xbf16>, tensor<32x8xf16>) -> ()

// -----

func.func @elementwise(%x: tensor<64x32xf32>, %r: tensor<64x32xf32>, %bias: tensor<32xf32>) -> tensor<64x32xf32> {
  %0 = "nn.add"(%x, %r) : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
  %1 = "nn.add"(%0, %bias) : (tensor<64x32xf32>, tensor<32xf32>) -> tensor<64x32xf32>
  %2 = "nn.mul"(%1, %r) : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
  %3 = "nn.mul"(%2, %bias) : (tensor<64x32xf32>, tensor<32xf32>) -> tensor<64x32xf32>
  %4 = "nn.silu"(%3) : (tensor<64x32xf32>) -> tensor<64x32xf32>
  %5 = "nn.relu"(%4) : (tensor<64x32xf32>) -> tensor<64x32xf32>
  %6 = "nn.gelu"(%5) <{approximate = "none"}> : (tensor<64x32xf32>) -> tensor<64x32xf32>
  %7 = "nn.gelu"(%6) <{approximate = "tanh"}> : (tensor<64x32xf32>) -> tensor<64x32xf32>
  %8 = "nn.gelu"(%7) <{approximate = "none"}> : (tensor<64x32xf32>) -> tensor<64x32xf32>
  func.return %8 : tensor<64x32xf32>
}

// nn.add / nn.mul take a full MxN operand or a rank-1 N operand (broadcast over rows);
// `approximate` is required: verify.mlir checks that leaving it out is an error.
// CHECK-LABEL: func.func @elementwise(
// CHECK-NEXT:    %0 = nn.add %x, %r : tensor<64x32xf32>, tensor<64x32xf32> -> tensor<64x32xf32>
// CHECK-NEXT:    %1 = nn.add %0, %bias : tensor<64x32xf32>, tensor<32xf32> -> tensor<64x32xf32>
// CHECK-NEXT:    %2 = nn.mul %1, %r : tensor<64x32xf32>, tensor<64x32xf32> -> tensor<64x32xf32>
// CHECK-NEXT:    %3 = nn.mul %2, %bias : tensor<64x32xf32>, tensor<32xf32> -> tensor<64x32xf32>
// CHECK-NEXT:    %4 = nn.silu %3 : tensor<64x32xf32> -> tensor<64x32xf32>
// CHECK-NEXT:    %5 = nn.relu %4 : tensor<64x32xf32> -> tensor<64x32xf32>
// CHECK-NEXT:    %6 = nn.gelu %5 {approximate = "none"} : tensor<64x32xf32> -> tensor<64x32xf32>
// CHECK-NEXT:    %7 = nn.gelu %6 {approximate = "tanh"} : tensor<64x32xf32> -> tensor<64x32xf32>
// CHECK-NEXT:    %8 = nn.gelu %7 {approximate = "none"} : tensor<64x32xf32> -> tensor<64x32xf32>
// CHECK-NEXT:    func.return %8 : tensor<64x32xf32>

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "elementwise"
// CHECK-GENERIC:         %0 = "nn.add"(%x, %r) : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
// CHECK-GENERIC-NEXT:    %1 = "nn.add"(%0, %bias) : (tensor<64x32xf32>, tensor<32xf32>) -> tensor<64x32xf32>
// CHECK-GENERIC-NEXT:    %2 = "nn.mul"(%1, %r) : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
// CHECK-GENERIC-NEXT:    %3 = "nn.mul"(%2, %bias) : (tensor<64x32xf32>, tensor<32xf32>) -> tensor<64x32xf32>
// CHECK-GENERIC-NEXT:    %4 = "nn.silu"(%3) : (tensor<64x32xf32>) -> tensor<64x32xf32>
// CHECK-GENERIC-NEXT:    %5 = "nn.relu"(%4) : (tensor<64x32xf32>) -> tensor<64x32xf32>
// CHECK-GENERIC-NEXT:    %6 = "nn.gelu"(%5) <{approximate = "none"}> : (tensor<64x32xf32>) -> tensor<64x32xf32>
// CHECK-GENERIC-NEXT:    %7 = "nn.gelu"(%6) <{approximate = "tanh"}> : (tensor<64x32xf32>) -> tensor<64x32xf32>
// CHECK-GENERIC-NEXT:    %8 = "nn.gelu"(%7) <{approximate = "none"}> : (tensor<64x32xf32>) -> tensor<64x32xf32>

// -----

func.func @norms(%x: tensor<256x128xbf16>, %w: tensor<128xbf16>, %b: tensor<128xbf16>, %q: tensor<256x512xf16>, %wq: tensor<64xf16>) -> (tensor<256x128xbf16>, tensor<256x128xbf16>, tensor<256x512xf16>) {
  %h = "nn.rms_norm"(%x, %w) <{eps = 1.0e-06 : f32}> : (tensor<256x128xbf16>, tensor<128xbf16>) -> tensor<256x128xbf16>
  %l = "nn.layer_norm"(%h, %w, %b) <{eps = 1.0e-05 : f32}> : (tensor<256x128xbf16>, tensor<128xbf16>, tensor<128xbf16>) -> tensor<256x128xbf16>
  %k = "nn.head_rms_norm"(%q, %wq) <{head_dim = 64 : i64, heads = 6 : i64, eps = 1.000000e-05 : f32}> : (tensor<256x512xf16>, tensor<64xf16>) -> tensor<256x512xf16>
  func.return %h, %l, %k : tensor<256x128xbf16>, tensor<256x128xbf16>, tensor<256x512xf16>
}

// CHECK-LABEL: func.func @norms(
// CHECK-NEXT:    %h = nn.rms_norm %x, %w {eps = 1.000000e-06 : f32} : tensor<256x128xbf16>, tensor<128xbf16> -> tensor<256x128xbf16>
// CHECK-NEXT:    %l = nn.layer_norm %h, %w, %b {eps = 1.000000e-05 : f32} : tensor<256x128xbf16>, tensor<128xbf16>, tensor<128xbf16> -> tensor<256x128xbf16>
// CHECK-NEXT:    %k = nn.head_rms_norm %q, %wq {head_dim = 64 : i64, heads = 6 : i64, eps = 1.000000e-05 : f32} : tensor<256x512xf16>, tensor<64xf16> -> tensor<256x512xf16>

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "norms"
// CHECK-GENERIC:         %h = "nn.rms_norm"(%x, %w) <{eps = 1.000000e-06 : f32}> : (tensor<256x128xbf16>, tensor<128xbf16>) -> tensor<256x128xbf16>
// CHECK-GENERIC-NEXT:    %l = "nn.layer_norm"(%h, %w, %b) <{eps = 1.000000e-05 : f32}> : (tensor<256x128xbf16>, tensor<128xbf16>, tensor<128xbf16>) -> tensor<256x128xbf16>
// CHECK-GENERIC-NEXT:    %k = "nn.head_rms_norm"(%q, %wq) <{head_dim = 64 : i64, heads = 6 : i64, eps = 1.000000e-05 : f32}> : (tensor<256x512xf16>, tensor<64xf16>) -> tensor<256x512xf16>

// -----

func.func @gated(%z: tensor<128x512xbf16>) -> (tensor<128x256xbf16>, tensor<128x256xbf16>, tensor<128x256xbf16>) {
  %s = "nn.swiglu"(%z) : (tensor<128x512xbf16>) -> tensor<128x256xbf16>
  %g = "nn.geglu"(%z) <{approximate = "tanh"}> : (tensor<128x512xbf16>) -> tensor<128x256xbf16>
  %n = "nn.geglu"(%z) <{approximate = "none"}> : (tensor<128x512xbf16>) -> tensor<128x256xbf16>
  func.return %s, %g, %n : tensor<128x256xbf16>, tensor<128x256xbf16>, tensor<128x256xbf16>
}

// CHECK-LABEL: func.func @gated(
// CHECK-NEXT:    %s = nn.swiglu %z : tensor<128x512xbf16> -> tensor<128x256xbf16>
// CHECK-NEXT:    %g = nn.geglu %z {approximate = "tanh"} : tensor<128x512xbf16> -> tensor<128x256xbf16>
// CHECK-NEXT:    %n = nn.geglu %z {approximate = "none"} : tensor<128x512xbf16> -> tensor<128x256xbf16>

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "gated"
// CHECK-GENERIC:         %s = "nn.swiglu"(%z) : (tensor<128x512xbf16>) -> tensor<128x256xbf16>
// CHECK-GENERIC-NEXT:    %g = "nn.geglu"(%z) <{approximate = "tanh"}> : (tensor<128x512xbf16>) -> tensor<128x256xbf16>
// CHECK-GENERIC-NEXT:    %n = "nn.geglu"(%z) <{approximate = "none"}> : (tensor<128x512xbf16>) -> tensor<128x256xbf16>

// -----

// Packed QKV of 8 q heads, 2 k heads and 2 v heads of 64: rotary_heads = 8 + 2.
func.func @rope(%qkv: tensor<256x768xbf16>, %pos: tensor<256xi32>) -> (tensor<256x768xbf16>, tensor<256x768xbf16>) {
  %h = "nn.rope"(%qkv, %pos) <{head_dim = 64 : i64, rotary_heads = 10 : i64, theta = 1.000000e+04 : f32, style = "half"}> : (tensor<256x768xbf16>, tensor<256xi32>) -> tensor<256x768xbf16>
  %i = "nn.rope"(%qkv, %pos) <{head_dim = 64 : i64, rotary_heads = 12 : i64, theta = 5.000000e+05 : f32, style = "interleaved"}> : (tensor<256x768xbf16>, tensor<256xi32>) -> tensor<256x768xbf16>
  func.return %h, %i : tensor<256x768xbf16>, tensor<256x768xbf16>
}

// CHECK-LABEL: func.func @rope(
// CHECK-NEXT:    %h = nn.rope %qkv, %pos {head_dim = 64 : i64, rotary_heads = 10 : i64, theta = 1.000000e+04 : f32, style = "half"} : tensor<256x768xbf16>, tensor<256xi32> -> tensor<256x768xbf16>
// CHECK-NEXT:    %i = nn.rope %qkv, %pos {head_dim = 64 : i64, rotary_heads = 12 : i64, theta = 5.000000e+05 : f32, style = "interleaved"} : tensor<256x768xbf16>, tensor<256xi32> -> tensor<256x768xbf16>

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "rope"
// CHECK-GENERIC:         %h = "nn.rope"(%qkv, %pos) <{head_dim = 64 : i64, rotary_heads = 10 : i64, theta = 1.000000e+04 : f32, style = "half"}> : (tensor<256x768xbf16>, tensor<256xi32>) -> tensor<256x768xbf16>
// CHECK-GENERIC-NEXT:    %i = "nn.rope"(%qkv, %pos) <{head_dim = 64 : i64, rotary_heads = 12 : i64, theta = 5.000000e+05 : f32, style = "interleaved"}> : (tensor<256x768xbf16>, tensor<256xi32>) -> tensor<256x768xbf16>

// -----

func.func @loss(%logits: tensor<64x32000xbf16>, %t: tensor<64xi32>) -> (tensor<f32>, tensor<f32>) {
  %m = "nn.cross_entropy"(%logits, %t) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<64x32000xbf16>, tensor<64xi32>) -> tensor<f32>
  %s = "nn.cross_entropy"(%logits, %t) <{ignore_index = 0 : i64, reduction = "sum"}> : (tensor<64x32000xbf16>, tensor<64xi32>) -> tensor<f32>
  func.return %m, %s : tensor<f32>, tensor<f32>
}

// CHECK-LABEL: func.func @loss(
// CHECK-NEXT:    %m = nn.cross_entropy %logits, %t {ignore_index = -100 : i64, reduction = "mean"} : tensor<64x32000xbf16>, tensor<64xi32> -> tensor<f32>
// CHECK-NEXT:    %s = nn.cross_entropy %logits, %t {ignore_index = 0 : i64, reduction = "sum"} : tensor<64x32000xbf16>, tensor<64xi32> -> tensor<f32>
// CHECK-NEXT:    func.return %m, %s : tensor<f32>, tensor<f32>

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "loss"
// CHECK-GENERIC:         %m = "nn.cross_entropy"(%logits, %t) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<64x32000xbf16>, tensor<64xi32>) -> tensor<f32>
// CHECK-GENERIC-NEXT:    %s = "nn.cross_entropy"(%logits, %t) <{ignore_index = 0 : i64, reduction = "sum"}> : (tensor<64x32000xbf16>, tensor<64xi32>) -> tensor<f32>
// CHECK-GENERIC-NEXT:    "func.return"(%m, %s) : (tensor<f32>, tensor<f32>) -> ()
