// RUN: coda-opt %s -p nn-to-coda | filecheck %s

// One vocabulary shard's head (docs/VOCAB_PARALLEL.md): the shard's logits GEMM takes the
// row log-sum-exp partials and the target logit (its columns' vocabulary ids: the tile's
// column index + vocab_start, compared with t[m]) in its epilogue; the logits are never stored;
// one fold makes the two f32 row vectors.

// CHECK-LABEL: func.func @shard_partials
// CHECK-NOT:     tensor<24x40xbf16>
// CHECK:         %[[L:.*]], %[[S:.*]] = coda.gemm %h, %w transpose_b ins(%t : tensor<24xi32>) {{.*}} -> (!coda.partials<rows, 24, lse>, !coda.partials<rows, 24, sum>) attributes {coda.origin = "nn.linear+nn.cross_entropy_partials.partials"}
// CHECK:           coda.reduce lse
// CHECK:           %[[C:.*]] = arith.constant 37 : i32
// CHECK:           arith.addi %{{.*}}, %[[C]] : i32
// CHECK:           coda.reduce sum
// CHECK:         coda.fold %[[L]], %[[S]]
// CHECK:         func.return
func.func @shard_partials(%h: tensor<24x32xbf16>, %w: tensor<40x32xbf16>, %t: tensor<24xi32>) -> (tensor<24xf32>, tensor<24xf32>) {
  %l = "nn.linear"(%h, %w) : (tensor<24x32xbf16>, tensor<40x32xbf16>) -> tensor<24x40xbf16>
  %0, %1 = "nn.cross_entropy_partials"(%l, %t) <{ignore_index = -100 : i64, vocab_start = 37 : i64, vocab_size = 100 : i64}> : (tensor<24x40xbf16>, tensor<24xi32>) -> (tensor<24xf32>, tensor<24xf32>)
  func.return %0, %1 : tensor<24xf32>, tensor<24xf32>
}

// The backward over the shard: the dgrad GEMM recomputes the shard's logits and writes their
// gradient from the whole vocabulary's lse, its one-hot at column + vocab_start == t[m]; then
// dw (the shard's rows) and dh (this shard's term).
// CHECK-LABEL: func.func @shard_grad
// CHECK:         %[[D:.*]] = coda.gemm %h, %w transpose_b ins(%lse, %t, %dloss, {{.*}}) : {{.*}} -> tensor<24x40xbf16> attributes {coda.origin = "nn.linear_cross_entropy_grad.dlogits"}
// CHECK:           %[[C:.*]] = arith.constant 37 : i32
// CHECK:           arith.addi %{{.*}}, %[[C]] : i32
// CHECK:           math.exp
// CHECK:         coda.gemm %[[D]], %h transpose_a {{.*}} -> tensor<40x32xbf16> attributes {coda.origin = "nn.linear_cross_entropy_grad.dw"
// CHECK:         coda.gemm %[[D]], %w {{.*}} -> tensor<24x32xbf16> attributes {coda.origin = "nn.linear_cross_entropy_grad.dh"
func.func @shard_grad(%h: tensor<24x32xbf16>, %w: tensor<40x32xbf16>, %t: tensor<24xi32>, %dloss: tensor<f32>, %lse: tensor<24xf32>) -> (tensor<24x32xbf16>, tensor<40x32xbf16>) {
  %dh, %dw = "nn.linear_cross_entropy_grad"(%h, %w, %t, %dloss, %lse) <{ignore_index = -100 : i64, reduction = "mean", chunk = 48 : i64, vocab_start = 37 : i64, vocab_size = 100 : i64}> : (tensor<24x32xbf16>, tensor<40x32xbf16>, tensor<24xi32>, tensor<f32>, tensor<24xf32>) -> (tensor<24x32xbf16>, tensor<40x32xbf16>)
  func.return %dh, %dw : tensor<24x32xbf16>, tensor<40x32xbf16>
}
