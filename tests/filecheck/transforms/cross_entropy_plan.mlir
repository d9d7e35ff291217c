// RUN: coda-opt %s --remarks --split-input-file -p nn-to-coda 2>&1 | filecheck %s
// RUN: coda-opt %s --remarks --split-input-file -p 'nn-to-coda{cross-entropy=epilogue}' 2>&1 | filecheck %s --check-prefix=EPI
// RUN: coda-opt %s --remarks --split-input-file -p 'nn-to-coda{cost-model=false}' 2>&1 | filecheck %s --check-prefix=EPI
// RUN: coda-opt %s --remarks --split-input-file -p 'nn-plan{cross-entropy=separate}' 2>&1 | filecheck %s --check-prefix=FORCED
// RUN: not coda-opt %s --remarks --split-input-file -p 'nn-plan{cross-entropy=sometimes}' 2>&1 | filecheck %s --check-prefix=BAD
// RUN: coda-opt %s --remarks --split-input-file -t 'io-report{decisions=true}' 2>&1 | filecheck %s --check-prefix=IO

// The LLaMA-3.2-1B LM head with its loss (8192 tokens, vocabulary 128256, K = 2048).
// io_plans.cross_entropy_plan, fitted to the H100 (bench/RESULTS.md session 13): in the logits
// GEMM's epilogue an exp per logit and two row reductions follow each tile's mainloop at one CTA
// per SM (+1.3 ms); the plain GEMM's logits store drains after each tile too, and the separate
// pass over the stored logits (a `whole rows` kernel, one row per program, since session 15)
// streams them at the copy bandwidth (0.70-0.77 ms). So where the logits are stored anyway
// (@lm_head_fwd, nn-autodiff's forward, saves them) the pass is cheaper, and where nothing else
// reads them (@lm_head) the epilogue, which then stores only partials (the 8B LM head: 12.98 vs
// 14.57 ms, session 15). nn-plan records `in_producer_epilogue = false` where the pass wins,
// convert-nn-to-coda makes the pass a coda.separate whole-rows kernel whose row lse and target
// logit complete in the program, coda-fuse keeps it out of the GEMM, and the fold only sums
// the rows' losses.

// CHECK: cross_entropy_plan.mlir:{{[0-9]+}}:3: remark: 'nn.cross_entropy' op nn.cross_entropy in the epilogue of 'nn.linear' (
// CHECK-SAME: the IO model found it cheaper: separate (plain GEMM storing the logits [8192x128256], then one pass over them) {{[0-9.]+}} us vs in the epilogue (tile {{.*}}) {{[0-9.]+}} us
// CHECK: remark: 'nn.cross_entropy_fwd' op nn.cross_entropy_fwd not fused into the epilogue of 'nn.linear' (
// CHECK-SAME: the IO model found a separate pass cheaper (its exps and row reductions follow each tile's mainloop at one CTA per SM):
// CHECK-SAME: separate (plain GEMM storing the logits [8192x128256], then one pass over them) [[S:[0-9.]+]] us vs in the epilogue (tile {{.*}}) [[E:[0-9.]+]] us
// CHECK-LABEL: func.func @lm_head
// CHECK:       coda.gemm %h, %wlm transpose_b ins(%targets : tensor<8192xi32>) : {{.*}} -> (!coda.partials<rows, 8192, lse>, !coda.partials<rows, 8192, sum>) attributes {coda.origin = "nn.linear+nn.cross_entropy.lse"}
// CHECK-NOT:   coda.separate
// CHECK-LABEL: func.func @lm_head_fwd
// CHECK:       %[[LOGITS:.*]] = coda.gemm %h, %wlm transpose_b : {{.*}} -> tensor<8192x128256xbf16> attributes {coda.origin = "nn.linear", coda.vendor_gemm = #coda.vendor_gemm<cublas>} {
// CHECK-NEXT:  ^bb0(%[[A:.*]]: !coda.tile<8192x128256xf32>):
// CHECK-NEXT:    coda.yield %[[A]]
// CHECK:       %[[L:.*]], %[[T:.*]] = coda.elementwise [8192, 128256] whole rows ins(%[[LOGITS]], %targets : {{.*}}) -> (tensor<8192xf32>, tensor<8192xf32>) attributes {coda.separate, coda.origin = "nn.cross_entropy_fwd.lse"} {
// CHECK:         coda.reduce lse
// CHECK:         coda.select
// CHECK:       coda.fold ins(%[[L]], %[[T]], %targets : tensor<8192xf32>, tensor<8192xf32>, tensor<8192xi32>)

// EPI-NOT:     remark: 'nn.cross_entropy
// EPI-LABEL:   func.func @lm_head_fwd
// EPI:         coda.gemm %h, %wlm transpose_b ins(%targets : tensor<8192xi32>) : {{.*}} -> (tensor<8192x128256xbf16>, !coda.partials<rows, 8192, lse>, !coda.partials<rows, 8192, sum>)
// EPI-NOT:     coda.separate

// FORCED-NOT:  remark
// FORCED:      nn.cross_entropy %logits, %targets {ignore_index = -100 : i64, reduction = "mean", in_producer_epilogue = false}
// FORCED:      nn.cross_entropy_fwd %logits, %targets {ignore_index = -100 : i64, reduction = "mean", in_producer_epilogue = false}

// The io-report's decisions print the same predictions as the remark.
// IO: cross_entropy_plan(logits: M=8192, V=128256, K=2048, logits_stored=False) -> epilogue
// IO: cross_entropy_plan(logits: M=8192, V=128256, K=2048, logits_stored=True) -> separate (epilogue [[E:[0-9.]+]] us, separate [[S:[0-9.]+]] us)

// BAD: pass option cross-entropy must be auto, epilogue or separate, got 'sometimes'
func.func @lm_head(%h: tensor<8192x2048xbf16>, %wlm: tensor<128256x2048xbf16>, %targets: tensor<8192xi32>) -> tensor<f32> {
  %logits = nn.linear %h, %wlm : tensor<8192x2048xbf16>, tensor<128256x2048xbf16> -> tensor<8192x128256xbf16>
  %loss = nn.cross_entropy %logits, %targets {ignore_index = -100 : i64, reduction = "mean"} : tensor<8192x128256xbf16>, tensor<8192xi32> -> tensor<f32>
  func.return %loss : tensor<f32>
}

// -----

// What nn-autodiff writes for it: the loss, the per-row lse and the saved logits.
func.func @lm_head_fwd(%h: tensor<8192x2048xbf16>, %wlm: tensor<128256x2048xbf16>, %targets: tensor<8192xi32>) -> (tensor<f32>, tensor<8192xf32>, tensor<8192x128256xbf16>) {
  %logits = nn.linear %h, %wlm : tensor<8192x2048xbf16>, tensor<128256x2048xbf16> -> tensor<8192x128256xbf16>
  %loss, %lse = "nn.cross_entropy_fwd"(%logits, %targets) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<8192x128256xbf16>, tensor<8192xi32>) -> (tensor<f32>, tensor<8192xf32>)
  func.return %loss, %lse, %logits : tensor<f32>, tensor<8192xf32>, tensor<8192x128256xbf16>
}
