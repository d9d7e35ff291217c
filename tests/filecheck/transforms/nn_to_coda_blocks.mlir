// RUN: coda-opt %s --split-input-file -p nn-to-coda 2>&1 | filecheck %s
// The whole pipeline on small Transformer blocks: what fuses, and how many kernels remain.

func.func @llama_block(%x0: tensor<24x64xf32>, %y0: tensor<24x64xf32>, %wo: tensor<64x64xf32>, %wn0: tensor<64xf32>, %wgu: tensor<256x64xf32>, %wd: tensor<64x128xf32>, %wn1: tensor<64xf32>, %wqkv: tensor<128x64xf32>, %pos: tensor<24xi32>) -> (tensor<24x64xf32>, tensor<24x128xf32>) {
  %a = "nn.linear"(%y0, %wo) : (tensor<24x64xf32>, tensor<64x64xf32>) -> tensor<24x64xf32>
  %x1 = "nn.add"(%x0, %a) : (tensor<24x64xf32>, tensor<24x64xf32>) -> tensor<24x64xf32>
  %h1 = "nn.rms_norm"(%x1, %wn0) <{eps = 1.0e-06 : f32}> : (tensor<24x64xf32>, tensor<64xf32>) -> tensor<24x64xf32>
  %z = "nn.linear"(%h1, %wgu) : (tensor<24x64xf32>, tensor<256x64xf32>) -> tensor<24x256xf32>
  %g = "nn.swiglu"(%z) : (tensor<24x256xf32>) -> tensor<24x128xf32>
  %d = "nn.linear"(%g, %wd) : (tensor<24x128xf32>, tensor<64x128xf32>) -> tensor<24x64xf32>
  %x2 = "nn.add"(%x1, %d) : (tensor<24x64xf32>, tensor<24x64xf32>) -> tensor<24x64xf32>
  %h2 = "nn.rms_norm"(%x2, %wn1) <{eps = 1.0e-06 : f32}> : (tensor<24x64xf32>, tensor<64xf32>) -> tensor<24x64xf32>
  %q = "nn.linear"(%h2, %wqkv) : (tensor<24x64xf32>, tensor<128x64xf32>) -> tensor<24x128xf32>
  %r = "nn.rope"(%q, %pos) <{head_dim = 32 : i64, rotary_heads = 3 : i64, theta = 10000.0 : f32, style = "half"}> : (tensor<24x128xf32>, tensor<24xi32>) -> tensor<24x128xf32>
  func.return %x2, %r : tensor<24x64xf32>, tensor<24x128xf32>
}


// LLaMA: 4 GEMM-epilogue kernels + 2 folds (rstd); no other kernel touches a [tokens, hidden] tensor.
// CHECK-LABEL: func.func @llama_block
// CHECK-NOT:   coda.elementwise
// CHECK:       %[[X1:.*]], %[[P1:.*]], %[[H1:.*]] = coda.gemm %y0, %wo transpose_b ins(%x0, %wn0 : {{.*}}) : {{.*}} -> (tensor<24x64xf32>, !coda.partials<rows, 24, sum>, tensor<24x64xf32>)
// CHECK:         coda.accumulate
// CHECK:         coda.reduce sumsq
// CHECK:         coda.scale %{{.*}} cols
// CHECK:       %[[R1:.*]] = coda.fold %[[P1]]
// CHECK-NOT:   coda.elementwise
// CHECK:       %[[G:.*]] = coda.gemm %[[H1]], %wgu transpose_b interleave 128 ins(%[[R1]] : tensor<24xf32>)
// CHECK:         coda.scale %{{.*}} rows
// CHECK:         coda.pair_map stride 1 %{{.*}} : !coda.tile<24x256xf32> -> !coda.tile<24x128xf32>
// CHECK-NOT:   coda.elementwise
// CHECK:       %[[X2:.*]], %[[P2:.*]], %[[H2:.*]] = coda.gemm %[[G]], %wd transpose_b ins(%[[X1]], %wn1 : {{.*}})
// CHECK:         coda.accumulate
// CHECK:         coda.reduce sumsq
// CHECK:       %[[R2:.*]] = coda.fold %[[P2]]
// CHECK-NOT:   coda.elementwise
// CHECK:       %[[Q:.*]] = coda.gemm %[[H2]], %wqkv transpose_b ins(%[[R2]], %pos : {{.*}}) {{.*}} coda.constraints = #coda.tile_constraints<bn_multiple_of = 32
// CHECK:         coda.scale %{{.*}} rows
// CHECK:         coda.pair_map stride 16
// CHECK-NOT:   coda.elementwise
// CHECK:       func.return %[[X2]], %[[Q]]

// -----

func.func @gpt2_block(%x0: tensor<24x64xf32>, %y0: tensor<24x64xf32>, %wo: tensor<64x64xf32>, %bo: tensor<64xf32>, %g1: tensor<64xf32>, %b1: tensor<64xf32>, %wfc: tensor<256x64xf32>, %bfc: tensor<256xf32>, %wproj: tensor<64x256xf32>, %bproj: tensor<64xf32>, %g2: tensor<64xf32>, %b2: tensor<64xf32>, %wqkv: tensor<192x64xf32>, %bqkv: tensor<192xf32>) -> (tensor<24x64xf32>, tensor<24x192xf32>) {
  %a = "nn.linear"(%y0, %wo) : (tensor<24x64xf32>, tensor<64x64xf32>) -> tensor<24x64xf32>
  %a1 = "nn.add"(%a, %bo) : (tensor<24x64xf32>, tensor<64xf32>) -> tensor<24x64xf32>
  %x1 = "nn.add"(%x0, %a1) : (tensor<24x64xf32>, tensor<24x64xf32>) -> tensor<24x64xf32>
  %h1 = "nn.layer_norm"(%x1, %g1, %b1) <{eps = 1.0e-05 : f32}> : (tensor<24x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<24x64xf32>
  %f = "nn.linear"(%h1, %wfc) : (tensor<24x64xf32>, tensor<256x64xf32>) -> tensor<24x256xf32>
  %f1 = "nn.add"(%f, %bfc) : (tensor<24x256xf32>, tensor<256xf32>) -> tensor<24x256xf32>
  %g = "nn.gelu"(%f1) <{approximate = "tanh"}> : (tensor<24x256xf32>) -> tensor<24x256xf32>
  %d = "nn.linear"(%g, %wproj) : (tensor<24x256xf32>, tensor<64x256xf32>) -> tensor<24x64xf32>
  %d1 = "nn.add"(%d, %bproj) : (tensor<24x64xf32>, tensor<64xf32>) -> tensor<24x64xf32>
  %x2 = "nn.add"(%x1, %d1) : (tensor<24x64xf32>, tensor<24x64xf32>) -> tensor<24x64xf32>
  %h2 = "nn.layer_norm"(%x2, %g2, %b2) <{eps = 1.0e-05 : f32}> : (tensor<24x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<24x64xf32>
  %q = "nn.linear"(%h2, %wqkv) : (tensor<24x64xf32>, tensor<192x64xf32>) -> tensor<24x192xf32>
  %q1 = "nn.add"(%q, %bqkv) : (tensor<24x192xf32>, tensor<192xf32>) -> tensor<24x192xf32>
  func.return %x2, %q1 : tensor<24x64xf32>, tensor<24x192xf32>
}


// GPT-2: the same 4 GEMM-epilogue kernels + 2 LayerNorm folds, with biases, GELU and the
// deferred LayerNorm (acc * r - (r * mu) * c + e) in epilogues. c = g @ W.T and e = b @ W.T
// are per-weight GEMVs (one `whole rows` elementwise kernel over W [N, D] each, no fold): they
// read weights, not activations, so each shares a launch with a LayerNorm fold (6 launches).
// CHECK-LABEL: func.func @gpt2_block
// CHECK:       %[[X1:.*]], %[[S1:.*]], %[[Q1:.*]], %[[H1:.*]] = coda.gemm %y0, %wo transpose_b ins(%bo, %x0, %g1 : {{.*}})
// CHECK:         coda.shift %{{.*}} cols
// CHECK:         coda.accumulate
// CHECK:         coda.reduce sum
// CHECK:         coda.reduce sumsq
// CHECK:       %[[R1:.*]], %{{.*}}, %[[RMU1:.*]], %[[C1:.*]], %[[E1:.*]] = coda.launch_group
// CHECK-NEXT:    coda.fold %[[S1]], %[[Q1]]
// CHECK:         coda.elementwise [256, 64] whole rows ins(%wfc, %g1, %b1 : {{.*}}"nn.layer_norm.colvec"
// CHECK:       %[[G:.*]] = coda.gemm %[[H1]], %wfc transpose_b ins(%[[R1]], %[[RMU1]], %[[C1]], %[[E1]], %bfc : {{.*}}) {{.*}} -> tensor<24x256xf32>
// CHECK:         coda.scale %{{.*}} rows
// CHECK:         coda.map
// CHECK:         coda.shift %{{.*}} cols
// CHECK:         coda.shift %{{.*}} cols
// CHECK:         coda.map
// CHECK:           math.tanh
// CHECK-NOT:   coda.elementwise [24
// CHECK:       %[[X2:.*]], %{{.*}}, %{{.*}}, %[[H2:.*]] = coda.gemm %[[G]], %wproj transpose_b ins(%bproj, %[[X1]], %g2 : {{.*}})
// CHECK:       coda.launch_group
// CHECK-NEXT:    coda.fold
// CHECK:         coda.elementwise [192, 64] whole rows ins(%wqkv, %g2, %b2
// CHECK:       %[[QKV:.*]] = coda.gemm %[[H2]], %wqkv transpose_b {{.*}} -> tensor<24x192xf32>
// CHECK-NOT:   coda.elementwise
// CHECK:       func.return %[[X2]], %[[QKV]]

// -----

func.func @qwen3_block(%x0: tensor<24x64xf32>, %y0: tensor<24x64xf32>, %wo: tensor<64x64xf32>, %wn0: tensor<64xf32>, %wgu: tensor<256x64xf32>, %wd: tensor<64x128xf32>, %wn1: tensor<64xf32>, %wqkv: tensor<128x64xf32>, %wqk: tensor<16xf32>, %pos: tensor<24xi32>) -> (tensor<24x64xf32>, tensor<24x128xf32>) {
  %a = "nn.linear"(%y0, %wo) : (tensor<24x64xf32>, tensor<64x64xf32>) -> tensor<24x64xf32>
  %x1 = "nn.add"(%x0, %a) : (tensor<24x64xf32>, tensor<24x64xf32>) -> tensor<24x64xf32>
  %h1 = "nn.rms_norm"(%x1, %wn0) <{eps = 1.0e-06 : f32}> : (tensor<24x64xf32>, tensor<64xf32>) -> tensor<24x64xf32>
  %z = "nn.linear"(%h1, %wgu) : (tensor<24x64xf32>, tensor<256x64xf32>) -> tensor<24x256xf32>
  %g = "nn.swiglu"(%z) : (tensor<24x256xf32>) -> tensor<24x128xf32>
  %d = "nn.linear"(%g, %wd) : (tensor<24x128xf32>, tensor<64x128xf32>) -> tensor<24x64xf32>
  %x2 = "nn.add"(%x1, %d) : (tensor<24x64xf32>, tensor<24x64xf32>) -> tensor<24x64xf32>
  %h2 = "nn.rms_norm"(%x2, %wn1) <{eps = 1.0e-06 : f32}> : (tensor<24x64xf32>, tensor<64xf32>) -> tensor<24x64xf32>
  %q = "nn.linear"(%h2, %wqkv) : (tensor<24x64xf32>, tensor<128x64xf32>) -> tensor<24x128xf32>
  %qn = "nn.head_rms_norm"(%q, %wqk) <{head_dim = 16 : i64, heads = 6 : i64, eps = 1.0e-06 : f32}> : (tensor<24x128xf32>, tensor<16xf32>) -> tensor<24x128xf32>
  %r = "nn.rope"(%qn, %pos) <{head_dim = 16 : i64, rotary_heads = 6 : i64, theta = 1000000.0 : f32, style = "half"}> : (tensor<24x128xf32>, tensor<24xi32>) -> tensor<24x128xf32>
  func.return %x2, %r : tensor<24x64xf32>, tensor<24x128xf32>
}


// Qwen3: QK-norm (segment_reduce over each 16-column head) and RoPE in the QKV epilogue.
// CHECK-LABEL: func.func @qwen3_block
// CHECK-COUNT-2: coda.gemm
// CHECK:       coda.fold
// CHECK-NOT:   coda.elementwise
// CHECK:       coda.gemm %{{.*}}, %wqkv transpose_b ins(%{{.*}}, %wqk, %pos : {{.*}}) {{.*}}coda.constraints = #coda.tile_constraints<bn_multiple_of = 16
// CHECK:         coda.scale %{{.*}} rows
// CHECK:         coda.segment_reduce sumsq %{{.*}} width 16
// CHECK:         coda.broadcast %{{.*}} cols : tensor<16xf32>
// CHECK:         coda.pair_map stride 8
// CHECK-NOT:   coda.elementwise
// CHECK:       func.return

// -----

func.func @lm_head_ce(%h: tensor<24x64xf32>, %wlm: tensor<512x64xf32>, %targets: tensor<24xi32>) -> tensor<f32> {
  %logits = "nn.linear"(%h, %wlm) : (tensor<24x64xf32>, tensor<512x64xf32>) -> tensor<24x512xf32>
  %loss = "nn.cross_entropy"(%logits, %targets) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<24x512xf32>, tensor<24xi32>) -> tensor<f32>
  func.return %loss : tensor<f32>
}

// LM head + cross-entropy: one GEMM-epilogue kernel (LSE partials + target select, no logits
// stored) and one fold with the mean.
// CHECK-LABEL: func.func @lm_head_ce
// CHECK-NEXT:  %[[L:.*]], %[[S:.*]] = coda.gemm %h, %wlm transpose_b ins(%targets : tensor<24xi32>) : {{.*}} -> (!coda.partials<rows, 24, lse>, !coda.partials<rows, 24, sum>)
// CHECK:         coda.reduce lse
// CHECK:         coda.select
// CHECK:       %[[LOSS:.*]], %{{.*}} = coda.fold %[[L]], %[[S]]
// CHECK-NOT:   coda.gemm
// CHECK-NOT:   coda.elementwise
// CHECK:       func.return %[[LOSS]] : tensor<f32>
