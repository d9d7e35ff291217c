// RUN: CODA_ROUNDTRIP
// RUN: CODA_GENERIC_ROUNDTRIP

// The backward ops, written in the generic form (NN_DIALECT.md). CHECK pins the pretty form
// after a pretty -> pretty round trip (multi-result ops print `%a, %b = ... -> (T, U)`),
// CHECK-GENERIC the generic form after a generic -> generic round trip.

func.func @gemm(%a: tensor<37x80xbf16>, %at: tensor<80x37xbf16>, %b: tensor<80x48xbf16>, %bt: tensor<48x80xbf16>) -> (tensor<37x48xbf16>, tensor<37x48xbf16>) {
  %nn = "nn.gemm"(%a, %b) <{transpose_a = false, transpose_b = false}> : (tensor<37x80xbf16>, tensor<80x48xbf16>) -> tensor<37x48xbf16>
  %tt = "nn.gemm"(%at, %bt) <{transpose_a = true, transpose_b = true}> : (tensor<80x37xbf16>, tensor<48x80xbf16>) -> tensor<37x48xbf16>
  func.return %nn, %tt : tensor<37x48xbf16>, tensor<37x48xbf16>
}

// CHECK-LABEL: func.func @gemm(
// CHECK-NEXT:    %nn = nn.gemm %a, %b {transpose_a = false, transpose_b = false} : tensor<37x80xbf16>, tensor<80x48xbf16> -> tensor<37x48xbf16>
// CHECK-NEXT:    %tt = nn.gemm %at, %bt {transpose_a = true, transpose_b = true} : tensor<80x37xbf16>, tensor<48x80xbf16> -> tensor<37x48xbf16>
// CHECK-NEXT:    func.return %nn, %tt : tensor<37x48xbf16>, tensor<37x48xbf16>

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "gemm"
// CHECK-GENERIC:         %nn = "nn.gemm"(%a, %b) <{transpose_a = false, transpose_b = false}> : (tensor<37x80xbf16>, tensor<80x48xbf16>) -> tensor<37x48xbf16>
// CHECK-GENERIC-NEXT:    %tt = "nn.gemm"(%at, %bt) <{transpose_a = true, transpose_b = true}> : (tensor<80x37xbf16>, tensor<48x80xbf16>) -> tensor<37x48xbf16>
// CHECK-GENERIC-NEXT:    "func.return"(%nn, %tt) : (tensor<37x48xbf16>, tensor<37x48xbf16>) -> ()

// -----

func.func @pointwise_grads(%dy: tensor<37x48xf16>, %x: tensor<37x48xf16>, %z: tensor<37x96xf16>) -> (tensor<48xf16>, tensor<37x48xf16>, tensor<37x48xf16>, tensor<37x48xf16>, tensor<37x96xf16>, tensor<37x96xf16>) {
  %cs = "nn.column_sum"(%x) : (tensor<37x48xf16>) -> tensor<48xf16>
  %s = "nn.silu_grad"(%dy, %x) : (tensor<37x48xf16>, tensor<37x48xf16>) -> tensor<37x48xf16>
  %r = "nn.relu_grad"(%dy, %x) : (tensor<37x48xf16>, tensor<37x48xf16>) -> tensor<37x48xf16>
  %g = "nn.gelu_grad"(%dy, %x) <{approximate = "tanh"}> : (tensor<37x48xf16>, tensor<37x48xf16>) -> tensor<37x48xf16>
  %sw = "nn.swiglu_grad"(%dy, %z) : (tensor<37x48xf16>, tensor<37x96xf16>) -> tensor<37x96xf16>
  %ge = "nn.geglu_grad"(%dy, %z) <{approximate = "none"}> : (tensor<37x48xf16>, tensor<37x96xf16>) -> tensor<37x96xf16>
  func.return %cs, %s, %r, %g, %sw, %ge : tensor<48xf16>, tensor<37x48xf16>, tensor<37x48xf16>, tensor<37x48xf16>, tensor<37x96xf16>, tensor<37x96xf16>
}

// CHECK-LABEL: func.func @pointwise_grads(
// CHECK-NEXT:    %cs = nn.column_sum %x : tensor<37x48xf16> -> tensor<48xf16>
// CHECK-NEXT:    %s = nn.silu_grad %dy, %x : tensor<37x48xf16>, tensor<37x48xf16> -> tensor<37x48xf16>
// CHECK-NEXT:    %r = nn.relu_grad %dy, %x : tensor<37x48xf16>, tensor<37x48xf16> -> tensor<37x48xf16>
// CHECK-NEXT:    %g = nn.gelu_grad %dy, %x {approximate = "tanh"} : tensor<37x48xf16>, tensor<37x48xf16> -> tensor<37x48xf16>
// CHECK-NEXT:    %sw = nn.swiglu_grad %dy, %z : tensor<37x48xf16>, tensor<37x96xf16> -> tensor<37x96xf16>
// CHECK-NEXT:    %ge = nn.geglu_grad %dy, %z {approximate = "none"} : tensor<37x48xf16>, tensor<37x96xf16> -> tensor<37x96xf16>
// CHECK-NEXT:    func.return %cs, %s, %r, %g, %sw, %ge : tensor<48xf16>, tensor<37x48xf16>, tensor<37x48xf16>, tensor<37x48xf16>, tensor<37x96xf16>, tensor<37x96xf16>

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "pointwise_grads"
// CHECK-GENERIC:         %cs = "nn.column_sum"(%x) : (tensor<37x48xf16>) -> tensor<48xf16>
// CHECK-GENERIC-NEXT:    %s = "nn.silu_grad"(%dy, %x) : (tensor<37x48xf16>, tensor<37x48xf16>) -> tensor<37x48xf16>
// CHECK-GENERIC-NEXT:    %r = "nn.relu_grad"(%dy, %x) : (tensor<37x48xf16>, tensor<37x48xf16>) -> tensor<37x48xf16>
// CHECK-GENERIC-NEXT:    %g = "nn.gelu_grad"(%dy, %x) <{approximate = "tanh"}> : (tensor<37x48xf16>, tensor<37x48xf16>) -> tensor<37x48xf16>
// CHECK-GENERIC-NEXT:    %sw = "nn.swiglu_grad"(%dy, %z) : (tensor<37x48xf16>, tensor<37x96xf16>) -> tensor<37x96xf16>
// CHECK-GENERIC-NEXT:    %ge = "nn.geglu_grad"(%dy, %z) <{approximate = "none"}> : (tensor<37x48xf16>, tensor<37x96xf16>) -> tensor<37x96xf16>
// CHECK-GENERIC-NEXT:    "func.return"(%cs, %s, %r, %g, %sw, %ge) : (tensor<48xf16>, tensor<37x48xf16>, tensor<37x48xf16>, tensor<37x48xf16>, tensor<37x96xf16>, tensor<37x96xf16>) -> ()

// -----

func.func @rope_grad(%dy: tensor<37x96xbf16>, %pos: tensor<37xi32>) -> tensor<37x96xbf16> {
  %r = "nn.rope_grad"(%dy, %pos) <{head_dim = 32 : i64, rotary_heads = 2 : i64, theta = 1.000000e+04 : f32, style = "half"}> : (tensor<37x96xbf16>, tensor<37xi32>) -> tensor<37x96xbf16>
  func.return %r : tensor<37x96xbf16>
}

// CHECK-LABEL: func.func @rope_grad(
// CHECK-NEXT:    %r = nn.rope_grad %dy, %pos {head_dim = 32 : i64, rotary_heads = 2 : i64, theta = 1.000000e+04 : f32, style = "half"} : tensor<37x96xbf16>, tensor<37xi32> -> tensor<37x96xbf16>
// CHECK-NEXT:    func.return %r : tensor<37x96xbf16>

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "rope_grad"
// CHECK-GENERIC:         %r = "nn.rope_grad"(%dy, %pos) <{head_dim = 32 : i64, rotary_heads = 2 : i64, theta = 1.000000e+04 : f32, style = "half"}> : (tensor<37x96xbf16>, tensor<37xi32>) -> tensor<37x96xbf16>
// CHECK-GENERIC-NEXT:    "func.return"(%r) : (tensor<37x96xbf16>) -> ()

// -----

func.func @norm_grads(%dy: tensor<37x80xbf16>, %x: tensor<37x80xbf16>, %w: tensor<80xbf16>, %wh: tensor<16xbf16>) -> (tensor<37x80xbf16>, tensor<80xbf16>, tensor<37x80xbf16>, tensor<80xbf16>, tensor<80xbf16>, tensor<37x80xbf16>, tensor<16xbf16>) {
  %rstd = "nn.rms_norm_rstd"(%x) <{eps = 1.000000e-05 : f32}> : (tensor<37x80xbf16>) -> tensor<37xf32>
  %dx, %dw = "nn.rms_norm_grad"(%dy, %x, %w, %rstd) : (tensor<37x80xbf16>, tensor<37x80xbf16>, tensor<80xbf16>, tensor<37xf32>) -> (tensor<37x80xbf16>, tensor<80xbf16>)
  %mean, %lrstd = "nn.layer_norm_stats"(%x) <{eps = 1.000000e-05 : f32}> : (tensor<37x80xbf16>) -> (tensor<37xf32>, tensor<37xf32>)
  %ldx, %ldw, %ldb = "nn.layer_norm_grad"(%dy, %x, %w, %mean, %lrstd) : (tensor<37x80xbf16>, tensor<37x80xbf16>, tensor<80xbf16>, tensor<37xf32>, tensor<37xf32>) -> (tensor<37x80xbf16>, tensor<80xbf16>, tensor<80xbf16>)
  %hdx, %hdw = "nn.head_rms_norm_grad"(%dy, %x, %wh) <{head_dim = 16 : i64, heads = 2 : i64, eps = 1.000000e-06 : f32, first_head = 1 : i64}> : (tensor<37x80xbf16>, tensor<37x80xbf16>, tensor<16xbf16>) -> (tensor<37x80xbf16>, tensor<16xbf16>)
  func.return %dx, %dw, %ldx, %ldw, %ldb, %hdx, %hdw : tensor<37x80xbf16>, tensor<80xbf16>, tensor<37x80xbf16>, tensor<80xbf16>, tensor<80xbf16>, tensor<37x80xbf16>, tensor<16xbf16>
}

// CHECK-LABEL: func.func @norm_grads(
// CHECK-NEXT:    %rstd = nn.rms_norm_rstd %x {eps = 1.000000e-05 : f32} : tensor<37x80xbf16> -> tensor<37xf32>
// CHECK-NEXT:    %dx, %dw = nn.rms_norm_grad %dy, %x, %w, %rstd : tensor<37x80xbf16>, tensor<37x80xbf16>, tensor<80xbf16>, tensor<37xf32> -> (tensor<37x80xbf16>, tensor<80xbf16>)
// CHECK-NEXT:    %mean, %lrstd = nn.layer_norm_stats %x {eps = 1.000000e-05 : f32} : tensor<37x80xbf16> -> (tensor<37xf32>, tensor<37xf32>)
// CHECK-NEXT:    %ldx, %ldw, %ldb = nn.layer_norm_grad %dy, %x, %w, %mean, %lrstd : tensor<37x80xbf16>, tensor<37x80xbf16>, tensor<80xbf16>, tensor<37xf32>, tensor<37xf32> -> (tensor<37x80xbf16>, tensor<80xbf16>, tensor<80xbf16>)
// CHECK-NEXT:    %hdx, %hdw = nn.head_rms_norm_grad %dy, %x, %wh {head_dim = 16 : i64, heads = 2 : i64, eps = 1.000000e-06 : f32, first_head = 1 : i64} : tensor<37x80xbf16>, tensor<37x80xbf16>, tensor<16xbf16> -> (tensor<37x80xbf16>, tensor<16xbf16>)
// CHECK-NEXT:    func.return %dx, %dw, %ldx, %ldw, %ldb, %hdx, %hdw : tensor<37x80xbf16>, tensor<80xbf16>, tensor<37x80xbf16>, tensor<80xbf16>, tensor<80xbf16>, tensor<37x80xbf16>, tensor<16xbf16>

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "norm_grads"
// CHECK-GENERIC:         %rstd = "nn.rms_norm_rstd"(%x) <{eps = 1.000000e-05 : f32}> : (tensor<37x80xbf16>) -> tensor<37xf32>
// CHECK-GENERIC-NEXT:    %dx, %dw = "nn.rms_norm_grad"(%dy, %x, %w, %rstd) : (tensor<37x80xbf16>, tensor<37x80xbf16>, tensor<80xbf16>, tensor<37xf32>) -> (tensor<37x80xbf16>, tensor<80xbf16>)
// CHECK-GENERIC-NEXT:    %mean, %lrstd = "nn.layer_norm_stats"(%x) <{eps = 1.000000e-05 : f32}> : (tensor<37x80xbf16>) -> (tensor<37xf32>, tensor<37xf32>)
// CHECK-GENERIC-NEXT:    %ldx, %ldw, %ldb = "nn.layer_norm_grad"(%dy, %x, %w, %mean, %lrstd) : (tensor<37x80xbf16>, tensor<37x80xbf16>, tensor<80xbf16>, tensor<37xf32>, tensor<37xf32>) -> (tensor<37x80xbf16>, tensor<80xbf16>, tensor<80xbf16>)
// CHECK-GENERIC-NEXT:    %hdx, %hdw = "nn.head_rms_norm_grad"(%dy, %x, %wh) <{head_dim = 16 : i64, heads = 2 : i64, eps = 1.000000e-06 : f32, first_head = 1 : i64}> : (tensor<37x80xbf16>, tensor<37x80xbf16>, tensor<16xbf16>) -> (tensor<37x80xbf16>, tensor<16xbf16>)
// CHECK-GENERIC-NEXT:    "func.return"(%dx, %dw, %ldx, %ldw, %ldb, %hdx, %hdw) : (tensor<37x80xbf16>, tensor<80xbf16>, tensor<37x80xbf16>, tensor<80xbf16>, tensor<80xbf16>, tensor<37x80xbf16>, tensor<16xbf16>) -> ()

// -----

func.func @loss_grad(%logits: tensor<37x80xbf16>, %t: tensor<37xi32>, %dloss: tensor<f32>) -> tensor<37x80xbf16> {
  %d = "nn.cross_entropy_grad"(%logits, %t, %dloss) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<37x80xbf16>, tensor<37xi32>, tensor<f32>) -> tensor<37x80xbf16>
  func.return %d : tensor<37x80xbf16>
}

// CHECK-LABEL: func.func @loss_grad(
// CHECK-NEXT:    %d = nn.cross_entropy_grad %logits, %t, %dloss {ignore_index = -100 : i64, reduction = "mean"} : tensor<37x80xbf16>, tensor<37xi32>, tensor<f32> -> tensor<37x80xbf16>
// CHECK-NEXT:    func.return %d : tensor<37x80xbf16>

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "loss_grad"
// CHECK-GENERIC:         %d = "nn.cross_entropy_grad"(%logits, %t, %dloss) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<37x80xbf16>, tensor<37xi32>, tensor<f32>) -> tensor<37x80xbf16>
// CHECK-GENERIC-NEXT:    "func.return"(%d) : (tensor<37x80xbf16>) -> ()
