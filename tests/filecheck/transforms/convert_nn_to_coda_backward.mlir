// RUN: coda-opt %s --split-input-file -p convert-nn-to-coda | filecheck %s
// The baseline lowering of the backward ops: the kernels each op becomes. Statistics are f32
// folds of row partials; parameter gradients are column partials folded over the row tiles.

func.func @gemm(%a: tensor<80x37xbf16>, %b: tensor<48x80xbf16>) -> tensor<37x48xbf16> {
  %g = "nn.gemm"(%a, %b) <{transpose_a = true, transpose_b = true}> : (tensor<80x37xbf16>, tensor<48x80xbf16>) -> tensor<37x48xbf16>
  func.return %g : tensor<37x48xbf16>
}
// CHECK-LABEL: func.func @gemm
// CHECK:       %g = coda.gemm %a, %b transpose_a transpose_b : tensor<80x37xbf16>, tensor<48x80xbf16> -> tensor<37x48xbf16> attributes {coda.origin = "nn.gemm"}
// CHECK-NEXT:  ^bb0(%[[ACC:.*]]: !coda.tile<37x48xf32>):
// CHECK-NEXT:    coda.yield %[[ACC]]

// -----

func.func @column_sum(%x: tensor<37x48xbf16>) -> tensor<48xbf16> {
  %s = "nn.column_sum"(%x) : (tensor<37x48xbf16>) -> tensor<48xbf16>
  func.return %s : tensor<48xbf16>
}
// CHECK-LABEL: func.func @column_sum
// CHECK:       %[[P:.*]] = coda.elementwise [37, 48] ins(%x : tensor<37x48xbf16>) -> !coda.partials<cols, 48, sum> attributes {coda.origin = "nn.column_sum.partials"}
// CHECK:         coda.reduce sum %{{.*}} dim 0
// CHECK:       %{{.*}} = coda.fold %[[P]] : !coda.partials<cols, 48, sum> -> tensor<48xbf16> attributes {coda.origin = "nn.column_sum.sum"}

// -----

func.func @activation_grads(%dy: tensor<37x48xf32>, %x: tensor<37x48xf32>) -> (tensor<37x48xf32>, tensor<37x48xf32>, tensor<37x48xf32>) {
  %s = "nn.silu_grad"(%dy, %x) : (tensor<37x48xf32>, tensor<37x48xf32>) -> tensor<37x48xf32>
  %r = "nn.relu_grad"(%dy, %x) : (tensor<37x48xf32>, tensor<37x48xf32>) -> tensor<37x48xf32>
  %g = "nn.gelu_grad"(%dy, %x) <{approximate = "tanh"}> : (tensor<37x48xf32>, tensor<37x48xf32>) -> tensor<37x48xf32>
  func.return %s, %r, %g : tensor<37x48xf32>, tensor<37x48xf32>, tensor<37x48xf32>
}
// CHECK-LABEL: func.func @activation_grads
// CHECK:       %s = coda.elementwise [37, 48] ins(%dy, %x : {{.*}}) -> tensor<37x48xf32> attributes {coda.origin = "nn.silu_grad"}
// CHECK:         coda.map
// CHECK:           math.exp
// CHECK:       %r = coda.elementwise [37, 48] ins(%dy, %x : {{.*}}) -> tensor<37x48xf32> attributes {coda.origin = "nn.relu_grad"}
// CHECK:           arith.cmpf ogt
// CHECK:       %g = coda.elementwise [37, 48] ins(%dy, %x : {{.*}}) -> tensor<37x48xf32> attributes {coda.origin = "nn.gelu_grad"}
// CHECK:           math.tanh

// -----

// 1 -> 2: the kernel iterates over dy's [M, F] (the columns of the GEMM producing dy), each
// (gate, up) pair of z and dz is F apart.
func.func @swiglu_grad(%dy: tensor<37x64xbf16>, %z: tensor<37x128xbf16>) -> tensor<37x128xbf16> {
  %dz = "nn.swiglu_grad"(%dy, %z) : (tensor<37x64xbf16>, tensor<37x128xbf16>) -> tensor<37x128xbf16>
  func.return %dz : tensor<37x128xbf16>
}
// CHECK-LABEL: func.func @swiglu_grad
// CHECK:       %dz = coda.elementwise [37, 64] ins(%dy, %z : tensor<37x64xbf16>, tensor<37x128xbf16>) -> tensor<37x128xbf16> attributes {coda.origin = "nn.swiglu_grad"}
// CHECK:         %[[D:.*]] = coda.load %{{.*}} : tensor<37x64xbf16> -> !coda.tile<37x64xf32>
// CHECK:         %[[Z:.*]] = coda.load %{{.*}} : tensor<37x128xbf16> -> !coda.tile<37x128xf32>
// CHECK:         coda.pair_map stride 64 %[[D]], %[[Z]] : (!coda.tile<37x64xf32>, !coda.tile<37x128xf32>) -> !coda.tile<37x128xf32>
// CHECK-NEXT:    ^bb0(%{{.*}}: f32, %{{.*}}: f32, %{{.*}}: f32):

// -----

func.func @geglu_grad(%dy: tensor<37x64xbf16>, %z: tensor<37x128xbf16>) -> tensor<37x128xbf16> {
  %dz = "nn.geglu_grad"(%dy, %z) <{approximate = "none"}> : (tensor<37x64xbf16>, tensor<37x128xbf16>) -> tensor<37x128xbf16>
  func.return %dz : tensor<37x128xbf16>
}
// CHECK-LABEL: func.func @geglu_grad
// CHECK:       coda.elementwise [37, 64] {{.*}} -> tensor<37x128xbf16> attributes {coda.origin = "nn.geglu_grad"}
// CHECK:         coda.pair_map stride 64
// CHECK:           math.erf

// -----

// The RoPE of nn.rope with the angle negated inside the angle map (so match_rope and the
// cos/sin tables of coda-fuse see the same structure).
func.func @rope_grad(%dy: tensor<37x96xbf16>, %pos: tensor<37xi32>) -> tensor<37x96xbf16> {
  %r = "nn.rope_grad"(%dy, %pos) <{head_dim = 32 : i64, rotary_heads = 2 : i64, theta = 10000.0 : f32, style = "half"}> : (tensor<37x96xbf16>, tensor<37xi32>) -> tensor<37x96xbf16>
  func.return %r : tensor<37x96xbf16>
}
// CHECK-LABEL: func.func @rope_grad
// CHECK:       %r = coda.elementwise [37, 96] ins(%dy, %pos : {{.*}}) -> tensor<37x96xbf16> attributes {coda.origin = "nn.rope_grad"}
// CHECK:         coda.index cols : !coda.tile<37x48xi32>
// CHECK:         coda.broadcast %{{.*}} rows : tensor<37xi32> -> !coda.tile<37x48xi32>
// CHECK:         coda.map
// CHECK:           %[[P:.*]] = arith.sitofp
// CHECK:           arith.remsi
// CHECK:           %[[A:.*]] = arith.mulf %[[P]], %{{.*}} : f32
// CHECK-NEXT:      %[[NEG:.*]] = arith.negf %[[A]] : f32
// CHECK-NEXT:      arith.constant 32 : i32
// CHECK-NEXT:      arith.cmpi slt
// CHECK-NEXT:      arith.constant
// CHECK-NEXT:      arith.select %{{.*}}, %[[NEG]]
// CHECK:         coda.pair_map stride 16
// CHECK:           math.cos
// CHECK:           math.sin

// -----

func.func @rms_norm_grad(%dy: tensor<37x80xbf16>, %x: tensor<37x80xbf16>, %w: tensor<80xbf16>) -> (tensor<37x80xbf16>, tensor<80xbf16>) {
  %rstd = "nn.rms_norm_rstd"(%x) <{eps = 1.0e-05 : f32}> : (tensor<37x80xbf16>) -> tensor<37xf32>
  %dx, %dw = "nn.rms_norm_grad"(%dy, %x, %w, %rstd) : (tensor<37x80xbf16>, tensor<37x80xbf16>, tensor<80xbf16>, tensor<37xf32>) -> (tensor<37x80xbf16>, tensor<80xbf16>)
  func.return %dx, %dw : tensor<37x80xbf16>, tensor<80xbf16>
}
// CHECK-LABEL: func.func @rms_norm_grad
// CHECK:       %[[SS:.*]] = coda.elementwise [37, 80] ins(%x : tensor<37x80xbf16>) -> !coda.partials<rows, 37, sum> attributes {coda.origin = "nn.rms_norm_rstd.stats"}
// CHECK:         coda.reduce sumsq
// CHECK:       %[[RSTD:.*]] = coda.fold %[[SS]] : !coda.partials<rows, 37, sum> -> tensor<37xf32> attributes {coda.origin = "nn.rms_norm_rstd.rstd"}
// CHECK:       %[[ROWP:.*]], %[[COLP:.*]] = coda.elementwise [37, 80] ins(%dy, %x, %w, %[[RSTD]] : {{.*}}) -> (!coda.partials<rows, 37, sum>, !coda.partials<cols, 80, sum>) attributes {coda.origin = "nn.rms_norm_grad.stats"}
// CHECK:         coda.reduce sum %{{.*}} dim 1
// CHECK:         coda.reduce sum %{{.*}} dim 0
// CHECK:       %[[C:.*]] = coda.fold %[[ROWP]] : !coda.partials<rows, 37, sum> ins(%[[RSTD]] : tensor<37xf32>) -> tensor<37xf32> attributes {coda.origin = "nn.rms_norm_grad.fold"}
// CHECK:       %dw = coda.fold %[[COLP]] : !coda.partials<cols, 80, sum> -> tensor<80xbf16> attributes {coda.origin = "nn.rms_norm_grad.dw"}
// CHECK:       %dx = coda.elementwise [37, 80] ins(%dy, %x, %w, %[[RSTD]], %[[C]] : {{.*}}) -> tensor<37x80xbf16> attributes {coda.origin = "nn.rms_norm_grad.apply"}
// CHECK:       func.return %dx, %dw

// -----

func.func @layer_norm_grad(%dy: tensor<37x80xf32>, %x: tensor<37x80xf32>, %w: tensor<80xf32>) -> (tensor<37x80xf32>, tensor<80xf32>, tensor<80xf32>) {
  %mean, %rstd = "nn.layer_norm_stats"(%x) <{eps = 1.0e-05 : f32}> : (tensor<37x80xf32>) -> (tensor<37xf32>, tensor<37xf32>)
  %dx, %dw, %db = "nn.layer_norm_grad"(%dy, %x, %w, %mean, %rstd) : (tensor<37x80xf32>, tensor<37x80xf32>, tensor<80xf32>, tensor<37xf32>, tensor<37xf32>) -> (tensor<37x80xf32>, tensor<80xf32>, tensor<80xf32>)
  func.return %dx, %dw, %db : tensor<37x80xf32>, tensor<80xf32>, tensor<80xf32>
}
// CHECK-LABEL: func.func @layer_norm_grad
// CHECK:       coda.elementwise [37, 80] ins(%x : tensor<37x80xf32>) -> (!coda.partials<rows, 37, sum>, !coda.partials<rows, 37, sum>) attributes {coda.origin = "nn.layer_norm_stats.stats"}
// CHECK:       %mean, %rstd = coda.fold {{.*}} -> (tensor<37xf32>, tensor<37xf32>) attributes {coda.origin = "nn.layer_norm_stats.fold"}
// CHECK:       coda.elementwise [37, 80] ins(%dy, %x, %w, %mean, %rstd : {{.*}}) -> (!coda.partials<rows, 37, sum>, !coda.partials<rows, 37, sum>, !coda.partials<cols, 80, sum>, !coda.partials<cols, 80, sum>) attributes {coda.origin = "nn.layer_norm_grad.stats"}
// CHECK:       coda.fold {{.*}} -> (tensor<37xf32>, tensor<37xf32>) attributes {coda.origin = "nn.layer_norm_grad.fold"}
// CHECK:       %dw, %db = coda.fold {{.*}} : !coda.partials<cols, 80, sum>, !coda.partials<cols, 80, sum> -> (tensor<80xf32>, tensor<80xf32>) attributes {coda.origin = "nn.layer_norm_grad.dw"}
// CHECK:       %dx = coda.elementwise [37, 80] ins(%dy, %x, %w, %mean, %rstd, {{.*}}) -> tensor<37x80xf32> attributes {coda.origin = "nn.layer_norm_grad.apply"}

// -----

// Statistics per head by segment_reduce; dw: column partials -> f32 [N] -> summed over the
// heads by a `whole cols` kernel over [N, head_dim].
func.func @head_rms_norm_grad(%dy: tensor<37x96xbf16>, %x: tensor<37x96xbf16>, %w: tensor<16xbf16>) -> (tensor<37x96xbf16>, tensor<16xbf16>) {
  %dx, %dw = "nn.head_rms_norm_grad"(%dy, %x, %w) <{head_dim = 16 : i64, heads = 2 : i64, eps = 1.0e-06 : f32, first_head = 1 : i64}> : (tensor<37x96xbf16>, tensor<37x96xbf16>, tensor<16xbf16>) -> (tensor<37x96xbf16>, tensor<16xbf16>)
  func.return %dx, %dw : tensor<37x96xbf16>, tensor<16xbf16>
}
// CHECK-LABEL: func.func @head_rms_norm_grad
// CHECK:       %dx, %[[P:.*]] = coda.elementwise [37, 96] ins(%dy, %x, %w : {{.*}}) -> (tensor<37x96xbf16>, !coda.partials<cols, 96, sum>) attributes {coda.origin = "nn.head_rms_norm_grad"}
// CHECK:         coda.segment_reduce sumsq %{{.*}} width 16
// CHECK:         coda.segment_reduce sum %{{.*}} width 16
// CHECK:           arith.constant 48 : i32
// CHECK:           arith.cmpi slt
// CHECK:           arith.constant 16 : i32
// CHECK:           arith.cmpi sge
// CHECK:         coda.reduce sum %{{.*}} dim 0
// CHECK:       %[[COLS:.*]] = coda.fold %[[P]] : !coda.partials<cols, 96, sum> -> tensor<96xf32> attributes {coda.origin = "nn.head_rms_norm_grad.dw_cols"}
// CHECK:       %dw = coda.elementwise [96, 16] whole cols ins(%[[COLS]] : tensor<96xf32>) -> tensor<16xbf16> attributes {coda.origin = "nn.head_rms_norm_grad.dw_heads"}
// CHECK:         coda.broadcast %{{.*}} rows : tensor<96xf32> -> !coda.tile<96x16xf32>
// CHECK:         coda.reduce sum %{{.*}} dim 0 : !coda.tile<96x16xf32> -> !coda.partials<cols, 16, sum>

// -----

func.func @cross_entropy_grad(%logits: tensor<37x80xbf16>, %t: tensor<37xi32>, %dloss: tensor<f32>) -> tensor<37x80xbf16> {
  %d = "nn.cross_entropy_grad"(%logits, %t, %dloss) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<37x80xbf16>, tensor<37xi32>, tensor<f32>) -> tensor<37x80xbf16>
  func.return %d : tensor<37x80xbf16>
}
// CHECK-LABEL: func.func @cross_entropy_grad
// CHECK:       %[[L:.*]] = coda.elementwise [37, 80] ins(%logits : tensor<37x80xbf16>) -> !coda.partials<rows, 37, lse> attributes {coda.origin = "nn.cross_entropy_grad.lse"}
// CHECK:       %[[LSE:.*]], %[[N:.*]] = coda.fold %[[L]] : !coda.partials<rows, 37, lse> ins(%t : tensor<37xi32>) -> (tensor<37xf32>, tensor<f32>) attributes {coda.origin = "nn.cross_entropy_grad.fold"}
// CHECK:       coda.elementwise [37, 80] ins(%logits, %[[LSE]], %t, %dloss, %[[N]] : {{.*}}) -> tensor<37x80xbf16> attributes {coda.origin = "nn.cross_entropy_grad.apply"}
// CHECK:         coda.index cols : !coda.tile<37x80xi32>
// CHECK:         coda.broadcast %{{.*}} rows : tensor<37xi32> -> !coda.tile<37x80xi32>
// CHECK:         coda.broadcast %{{.*}} scalar : tensor<f32> -> !coda.tile<37x80xf32>
// CHECK:           arith.divf
// CHECK:           math.exp

// -----

// With the forward's saved lse (nn-autodiff saves it from nn.cross_entropy_fwd) the backward
// never folds the logits again: a fold of the kept-row count, then the apply kernel.
func.func @cross_entropy_fwd_and_grad(%logits: tensor<37x80xbf16>, %t: tensor<37xi32>, %dloss: tensor<f32>) -> (tensor<f32>, tensor<37x80xbf16>) {
  %loss, %lse = "nn.cross_entropy_fwd"(%logits, %t) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<37x80xbf16>, tensor<37xi32>) -> (tensor<f32>, tensor<37xf32>)
  %d = "nn.cross_entropy_grad"(%logits, %t, %dloss, %lse) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<37x80xbf16>, tensor<37xi32>, tensor<f32>, tensor<37xf32>) -> tensor<37x80xbf16>
  func.return %loss, %d : tensor<f32>, tensor<37x80xbf16>
}
// CHECK-LABEL: func.func @cross_entropy_fwd_and_grad
// CHECK:       %[[P:.*]], %[[S:.*]] = coda.elementwise [37, 80] ins(%logits, %t : tensor<37x80xbf16>, tensor<37xi32>) -> (!coda.partials<rows, 37, lse>, !coda.partials<rows, 37, sum>) attributes {coda.origin = "nn.cross_entropy_fwd.lse"}
// CHECK:       %[[LOSS:.*]], %{{.*}}, %[[LSE:.*]] = coda.fold %[[P]], %[[S]] : {{.*}} ins(%t : tensor<37xi32>) -> (tensor<f32>, tensor<f32>, tensor<37xf32>) attributes {coda.origin = "nn.cross_entropy_fwd.loss"}
// CHECK:       %[[N:.*]] = coda.fold ins(%t : tensor<37xi32>) -> tensor<f32> attributes {coda.origin = "nn.cross_entropy_grad.count"}
// CHECK-NOT:   nn.cross_entropy_grad.lse
// CHECK:       coda.elementwise [37, 80] ins(%logits, %[[LSE]], %t, %dloss, %[[N]] : {{.*}}) -> tensor<37x80xbf16> attributes {coda.origin = "nn.cross_entropy_grad.apply"}
// CHECK:       func.return %[[LOSS]], %{{.*}} : tensor<f32>, tensor<37x80xbf16>
