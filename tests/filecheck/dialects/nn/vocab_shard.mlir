// RUN: coda-opt %s --split-input-file --verify-diagnostics | filecheck %s

// The vocabulary-shard forms of the LM head + cross-entropy (docs/VOCAB_PARALLEL.md):
// nn.cross_entropy_partials over the columns [vocab_start, vocab_start + Vs) of the logits, and
// nn.linear_cross_entropy_grad over the rows [vocab_start, vocab_start + V) of the head.

// CHECK-LABEL: func.func @shard
// CHECK:         %0, %1 = nn.cross_entropy_partials %l, %t {ignore_index = -100 : i64, vocab_start = 40 : i64, vocab_size = 100 : i64} : tensor<8x30xbf16>, tensor<8xi32> -> (tensor<8xf32>, tensor<8xf32>)
// CHECK:         %2, %3 = nn.linear_cross_entropy_grad %h, %w, %t, %dloss, %lse {ignore_index = -100 : i64, reduction = "mean", chunk = 32 : i64, vocab_start = 40 : i64, vocab_size = 100 : i64}
func.func @shard(%l: tensor<8x30xbf16>, %t: tensor<8xi32>, %h: tensor<8x16xbf16>, %w: tensor<30x16xbf16>, %dloss: tensor<f32>, %lse: tensor<8xf32>) {
  %0, %1 = "nn.cross_entropy_partials"(%l, %t) <{ignore_index = -100 : i64, vocab_start = 40 : i64, vocab_size = 100 : i64}> : (tensor<8x30xbf16>, tensor<8xi32>) -> (tensor<8xf32>, tensor<8xf32>)
  %2, %3 = "nn.linear_cross_entropy_grad"(%h, %w, %t, %dloss, %lse) <{ignore_index = -100 : i64, reduction = "mean", chunk = 32 : i64, vocab_start = 40 : i64, vocab_size = 100 : i64}> : (tensor<8x16xbf16>, tensor<30x16xbf16>, tensor<8xi32>, tensor<f32>, tensor<8xf32>) -> (tensor<8x16xbf16>, tensor<30x16xbf16>)
  func.return
}

// -----

func.func @shard_past_the_vocabulary(%l: tensor<8x30xbf16>, %t: tensor<8xi32>) {
  %0, %1 = "nn.cross_entropy_partials"(%l, %t) <{ignore_index = -100 : i64, vocab_start = 80 : i64, vocab_size = 100 : i64}> : (tensor<8x30xbf16>, tensor<8xi32>) -> (tensor<8xf32>, tensor<8xf32>)
  func.return
}
// CHECK: {{.*}}: error: 'nn.cross_entropy_partials' op the shard [vocab_start, vocab_start + 30) = [80, 110) must lie in [0, vocab_size) = [0, 100), vocab_size at most 2147483647

// -----

func.func @partials_not_f32(%l: tensor<8x30xbf16>, %t: tensor<8xi32>) {
  %0, %1 = "nn.cross_entropy_partials"(%l, %t) <{ignore_index = -100 : i64, vocab_start = 0 : i64, vocab_size = 100 : i64}> : (tensor<8x30xbf16>, tensor<8xi32>) -> (tensor<8xbf16>, tensor<8xf32>)
  func.return
}
// CHECK: {{.*}}: error: 'nn.cross_entropy_partials' op lse must be a rank-1 tensor of f32 (one value per row), got tensor<8xbf16>

// -----

func.func @partials_need_the_shard(%l: tensor<8x30xbf16>, %t: tensor<8xi32>) {
  %0, %1 = "nn.cross_entropy_partials"(%l, %t) <{ignore_index = -100 : i64, vocab_size = 100 : i64}> : (tensor<8x30xbf16>, tensor<8xi32>) -> (tensor<8xf32>, tensor<8xf32>)
  func.return
}
// CHECK: {{.*}}: error: 'nn.cross_entropy_partials' op{{.*}}vocab_start

// -----

func.func @grad_start_without_size(%h: tensor<8x16xbf16>, %w: tensor<30x16xbf16>, %t: tensor<8xi32>, %dloss: tensor<f32>, %lse: tensor<8xf32>) {
  %2, %3 = "nn.linear_cross_entropy_grad"(%h, %w, %t, %dloss, %lse) <{ignore_index = -100 : i64, reduction = "mean", chunk = 32 : i64, vocab_start = 40 : i64}> : (tensor<8x16xbf16>, tensor<30x16xbf16>, tensor<8xi32>, tensor<f32>, tensor<8xf32>) -> (tensor<8x16xbf16>, tensor<30x16xbf16>)
  func.return
}
// CHECK: {{.*}}: error: 'nn.linear_cross_entropy_grad' op vocab_start and vocab_size must be given together (a vocabulary shard) or not at all
