// RUN: coda-opt %s --remarks --split-input-file -p coda-fuse 2>&1 | filecheck %s
// RUN: coda-opt %s --remarks --split-input-file -p coda-defer-norms,convert-nn-to-coda,coda-fuse 2>&1 | filecheck %s --check-prefix=NN

// Remarks are printed on stderr as they happen, before the IR (@first_layer and @qknorm96 below):
// NN: fuse.mlir:{{[0-9]+}}:3: remark: 'nn.rms_norm' op row scale not deferred: no GEMM consumes the normalized value (used by nn.silu)
// NN: fuse.mlir:{{[0-9]+}}:3: remark: 'coda.segment_reduce' op not fused into the epilogue of 'nn.linear' (
// NN-SAME: coda.segment_reduce width 96 (segments of 96 columns) is not tile-local: a segment reaches outside the accumulator tile for every column tile width
// NN-SAME: it stays a separate kernel

// Hand-written coda: an elementwise residual add + gelu reading a gemm's result folds into the
// gemm's epilogue; the [8, 64] intermediate is no longer stored.
func.func @coda_chain(%x: tensor<8x32xbf16>, %w: tensor<64x32xbf16>, %r: tensor<8x64xbf16>, %b: tensor<64xbf16>) -> tensor<8x64xbf16> {
  %y = coda.gemm %x, %w transpose_b : tensor<8x32xbf16>, tensor<64x32xbf16> -> tensor<8x64xbf16> {
  ^bb0(%acc: !coda.tile<8x64xf32>):
    coda.yield %acc : !coda.tile<8x64xf32>
  }
  %z = coda.elementwise [8, 64] ins(%r, %y, %b : tensor<8x64xbf16>, tensor<8x64xbf16>, tensor<64xbf16>) -> tensor<8x64xbf16> {
  ^bb0(%rr: tensor<8x64xbf16>, %yy: tensor<8x64xbf16>, %bb: tensor<64xbf16>):
    %t = coda.load %rr : tensor<8x64xbf16> -> !coda.tile<8x64xf32>
    %s = coda.accumulate %t, %yy : !coda.tile<8x64xf32>, tensor<8x64xbf16>
    %u = coda.shift %s, %bb cols : !coda.tile<8x64xf32>, tensor<64xbf16>
    coda.yield %u : !coda.tile<8x64xf32>
  }
  func.return %z : tensor<8x64xbf16>
}
// CHECK-LABEL: func.func @coda_chain
// CHECK:       %{{.*}} = coda.gemm %x, %w transpose_b ins(%r, %b : tensor<8x64xbf16>, tensor<64xbf16>) : tensor<8x32xbf16>, tensor<64x32xbf16> -> tensor<8x64xbf16>
// CHECK-NEXT:  ^bb0(%[[ACC:.*]]: !coda.tile<8x64xf32>, %[[R:.*]]: tensor<8x64xbf16>, %[[B:.*]]: tensor<64xbf16>):
// CHECK-NEXT:    %[[S:.*]] = coda.accumulate %[[ACC]], %[[R]]
// CHECK-NEXT:    %[[U:.*]] = coda.shift %[[S]], %[[B]] cols
// CHECK-NEXT:    coda.yield %[[U]]
// CHECK-NOT:   coda.elementwise

// -----

// Bias, activation and residual all land in the producer's epilogue; the pre-activation is
// stored as an extra output because it is also returned.
func.func @mlp(%x: tensor<8x32xf32>, %w: tensor<64x32xf32>, %b: tensor<64xf32>, %res: tensor<8x64xf32>) -> (tensor<8x64xf32>, tensor<8x64xf32>) {
  %y = "nn.linear"(%x, %w) : (tensor<8x32xf32>, tensor<64x32xf32>) -> tensor<8x64xf32>
  %y1 = "nn.add"(%y, %b) : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %g = "nn.gelu"(%y1) <{approximate = "tanh"}> : (tensor<8x64xf32>) -> tensor<8x64xf32>
  %o = "nn.add"(%res, %g) : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  func.return %o, %y1 : tensor<8x64xf32>, tensor<8x64xf32>
}
// NN-LABEL: func.func @mlp
// NN:       %[[PRE:.*]], %[[OUT:.*]] = coda.gemm %x, %w transpose_b ins(%b, %res : {{.*}}) : {{.*}} -> (tensor<8x64xf32>, tensor<8x64xf32>) attributes {coda.origin = "nn.linear+nn.add+nn.gelu+nn.add"}
// NN:         %[[B:.*]] = coda.shift %{{.*}} cols
// NN:         %[[G:.*]] = coda.map %[[B]]
// NN:           math.tanh
// NN:         %[[O:.*]] = coda.accumulate %[[G]], %{{.*}}
// NN:         coda.yield %[[B]], %[[O]]
// NN-NOT:   coda.elementwise
// NN:       func.return %[[OUT]], %[[PRE]]

// -----

// A norm with no producing GEMM is one row kernel; the activation after it joins it.
func.func @first_layer(%x: tensor<8x32xf32>, %g: tensor<32xf32>, %w: tensor<64x32xf32>) -> tensor<8x64xf32> {
  %h = "nn.rms_norm"(%x, %g) <{eps = 1.0e-06 : f32}> : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %s = "nn.silu"(%h) : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %y = "nn.linear"(%s, %w) : (tensor<8x32xf32>, tensor<64x32xf32>) -> tensor<8x64xf32>
  func.return %y : tensor<8x64xf32>
}
// NN-LABEL: func.func @first_layer
// NN:       coda.elementwise [8, 32] ins(%x, %g : {{.*}}) -> tensor<8x32xf32> attributes {coda.origin = "nn.rms_norm.row+nn.silu"}
// NN:         coda.segment_reduce sumsq
// NN:       coda.gemm
// NN-NOT:   coda.elementwise

// Sibling fusion: two kernels that read the same x and do not depend on each other become
// one kernel with two outputs (one pass over x instead of two).
func.func @siblings(%x: tensor<8x48xf32>) -> (tensor<8x48xf32>, tensor<8x48xf32>) {
  %a = "nn.silu"(%x) : (tensor<8x48xf32>) -> tensor<8x48xf32>
  %b = "nn.relu"(%x) : (tensor<8x48xf32>) -> tensor<8x48xf32>
  func.return %a, %b : tensor<8x48xf32>, tensor<8x48xf32>
}
// NN-LABEL: func.func @siblings
// NN:       %[[A:.*]], %[[B:.*]] = coda.elementwise [8, 48] ins(%x : tensor<8x48xf32>) -> (tensor<8x48xf32>, tensor<8x48xf32>) attributes {coda.origin = "nn.silu+nn.relu"}
// NN-NEXT:  ^bb0(%[[X:.*]]: tensor<8x48xf32>):
// NN-NEXT:    %[[T:.*]] = coda.load %[[X]]
// NN-NOT:     coda.load
// NN:       func.return %[[A]], %[[B]]

// -----

// Sibling fusion past a reader: %b (the first sibling's result) is read by a GEMM that runs
// before the second sibling and does not feed it (the backward's weight gradient reading the
// rebuilt normalized activation, before the norm backward that loads the same x). The GEMM moves
// after the merged kernel; a reader that feeds the second sibling could not move (no merge then).
func.func @sibling_past_a_reader(%x: tensor<8x48xf32>, %d: tensor<8x16xf32>, %y: tensor<8x48xf32>) -> (tensor<16x48xf32>, tensor<8x48xf32>) {
  %b = "nn.relu"(%x) : (tensor<8x48xf32>) -> tensor<8x48xf32>
  %dw = "nn.gemm"(%d, %b) <{transpose_a = true, transpose_b = false}> : (tensor<8x16xf32>, tensor<8x48xf32>) -> tensor<16x48xf32>
  %a = "nn.silu"(%y) : (tensor<8x48xf32>) -> tensor<8x48xf32>
  %c = "nn.mul"(%x, %a) : (tensor<8x48xf32>, tensor<8x48xf32>) -> tensor<8x48xf32>
  func.return %dw, %c : tensor<16x48xf32>, tensor<8x48xf32>
}
// NN-LABEL: func.func @sibling_past_a_reader
// NN:       %[[B:.*]], %[[C:.*]] = coda.elementwise [8, 48] ins(%x, %y : {{.*}}) -> (tensor<8x48xf32>, tensor<8x48xf32>) attributes {coda.origin = "nn.relu+nn.silu+nn.mul"}
// NN:       %[[DW:.*]] = coda.gemm %d, %[[B]] transpose_a
// NN:       func.return %[[DW]], %[[C]]

// -----

// LM head + cross-entropy: the LSE partials and the target logit are taken in the epilogue,
// the [M, V] logits are never written.
func.func @lm_head(%h: tensor<8x32xf32>, %w: tensor<256x32xf32>, %t: tensor<8xi32>) -> tensor<f32> {
  %logits = "nn.linear"(%h, %w) : (tensor<8x32xf32>, tensor<256x32xf32>) -> tensor<8x256xf32>
  %l = "nn.cross_entropy"(%logits, %t) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<8x256xf32>, tensor<8xi32>) -> tensor<f32>
  func.return %l : tensor<f32>
}
// NN-LABEL: func.func @lm_head
// NN:       %[[L:.*]], %[[S:.*]] = coda.gemm %h, %w transpose_b ins(%t : tensor<8xi32>) : tensor<8x32xf32>, tensor<256x32xf32> -> (!coda.partials<rows, 8, lse>, !coda.partials<rows, 8, sum>)
// NN:         coda.reduce lse
// NN:         coda.select
// NN:       coda.fold %[[L]], %[[S]]
// NN-NOT:   coda.elementwise

// -----

// RoPE with head_dim 96 pairs columns 48 apart in groups of 96: no power-of-two column tile
// holds whole groups, but interleaving the gemm's columns by 48 makes the pairs adjacent.
func.func @rope96(%x: tensor<8x64xf32>, %w: tensor<576x64xf32>, %pos: tensor<8xi32>) -> tensor<8x576xf32> {
  %q = "nn.linear"(%x, %w) : (tensor<8x64xf32>, tensor<576x64xf32>) -> tensor<8x576xf32>
  %r = "nn.rope"(%q, %pos) <{head_dim = 96 : i64, rotary_heads = 4 : i64, theta = 10000.0 : f32, style = "half"}> : (tensor<8x576xf32>, tensor<8xi32>) -> tensor<8x576xf32>
  func.return %r : tensor<8x576xf32>
}
// NN-LABEL: func.func @rope96
// NN:       coda.gemm %x, %w transpose_b ins(%pos : tensor<8xi32>) {{.*}}"nn.linear+nn.rope"
// NN:         coda.pair_map stride 48
// NN-NOT:   coda.elementwise

// -----

// Refusal: QK-norm with head_dim 96 reduces segments of 96 columns; no power-of-two column
// tile holds whole heads (and no interleave helps a reduction), so it stays a separate kernel.
func.func @qknorm96(%x: tensor<8x64xf32>, %w: tensor<576x64xf32>, %g: tensor<96xf32>) -> tensor<8x576xf32> {
  %q = "nn.linear"(%x, %w) : (tensor<8x64xf32>, tensor<576x64xf32>) -> tensor<8x576xf32>
  %n = "nn.head_rms_norm"(%q, %g) <{head_dim = 96 : i64, heads = 4 : i64, eps = 1.0e-06 : f32}> : (tensor<8x576xf32>, tensor<96xf32>) -> tensor<8x576xf32>
  func.return %n : tensor<8x576xf32>
}
// NN-LABEL: func.func @qknorm96
// NN:       coda.gemm %x, %w
// NN:       coda.elementwise [8, 576] {{.*}}"nn.head_rms_norm"
