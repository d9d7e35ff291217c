// RUN: coda-opt %s --remarks --split-input-file -p nn-to-coda 2>&1 | filecheck %s
// RUN: coda-opt %s --remarks --split-input-file -p 'nn-to-coda{norm-grad=auto}' 2>&1 | filecheck %s
// RUN: coda-opt %s --remarks --split-input-file -p 'nn-to-coda{norm-grad=epilogue}' 2>&1 | filecheck %s --check-prefix=EPI
// RUN: coda-opt %s --remarks --split-input-file -p 'nn-to-coda{cost-model=false}' 2>&1 | filecheck %s --check-prefix=EPI
// RUN: coda-opt %s --remarks --split-input-file -p 'nn-to-coda{norm-grad=separate}' 2>&1 | filecheck %s --check-prefix=SEP
// RUN: coda-opt %s --remarks --split-input-file -p 'nn-plan{norm-grad=separate}' 2>&1 | filecheck %s --check-prefix=FORCED
// RUN: not coda-opt %s --remarks --split-input-file -p 'nn-plan{norm-grad=sometimes}' 2>&1 | filecheck %s --check-prefix=BAD
// RUN: coda-opt %s --remarks --split-input-file -t 'io-report{decisions=true}' 2>&1 | filecheck %s --check-prefix=IO

// The QKV dgrad of the LLaMA-1B backward (what nn-autodiff writes): dy = dqkv @ Wqkv (K 3072),
// the RMSNorm backward with its row statistic hdh given (dx elementwise in dy, dw column
// partials), the residual gradient added to dx, and the norm's output h rebuilt from the same x,
// w and rstd for the QKV weight gradient. io_plans.norm_grad_plan (the default, `auto`): in the
// GEMM's epilogue the x and dres loads, the spills (128x256: 416 registers) and the column
// reduction follow every tile's mainloop at one CTA per SM, and h stays a pass of its own; the
// plain GEMM storing dy in f32 + one pass over dy, x and dres that also writes h is cheaper.
// nn-plan records `in_producer_epilogue = false`, convert-nn-to-coda marks the kernel
// coda.separate and its load of dy coda.full_precision (the epilogue form reads the fp32
// accumulator: the pass must read what it would), coda-widen-summed-stores stores dy in f32,
// coda-fuse keeps the pass out of the GEMM, merges the residual add into it and the h kernel
// beside it (sibling merge: the dW GEMM reading h moves after the pass).

// CHECK: norm_grad_plan.mlir:{{[0-9]+}}:3: remark: 'nn.rms_norm_grad' op nn.rms_norm_grad not fused into the epilogue of 'nn.matmul' (
// CHECK-SAME: the IO model found a separate pass cheaper (the epilogue's x and dres loads, spills and dw column reduction
// CHECK-SAME: separate (plain GEMM storing dy [16384x2048] in f32, then one pass over dy, x and dres writing the rebuilt norm output too) [[S:[0-9.]+]] us vs in the epilogue (tile 128x256x64/w8s3, 416 registers per thread) [[E:[0-9.]+]] us
// Remarks come first (stderr); the second is @qkv_dgrad_8b's: no h to write, the epilogue is cheaper by the f32 bytes.
// CHECK: norm_grad_plan.mlir:{{[0-9]+}}:3: remark: 'nn.rms_norm_grad' op nn.rms_norm_grad in the epilogue of 'nn.matmul' (
// CHECK-SAME: the IO model found it cheaper: separate (plain GEMM storing dy [8192x4096] in f32, then one pass over dy, x) {{[0-9.]+}} us vs in the epilogue
// CHECK-LABEL: func.func @qkv_dgrad_1b
// CHECK:       %[[DY:.*]] = coda.gemm %d, %w : {{.*}} -> tensor<16384x2048xf32> attributes {coda.origin = "nn.matmul", coda.vendor_gemm = #coda.vendor_gemm<cublas>} {
// CHECK-NEXT:  ^bb0(%[[A:.*]]: !coda.tile<16384x2048xf32>):
// CHECK-NEXT:    coda.yield %[[A]]
// CHECK:       %h, %[[P:.*]], %s = coda.elementwise [16384, 2048] ins(%x, %rstd, %wn, %[[DY]], %hdh, %dres : {{.*}}tensor<16384x2048xf32>{{.*}}) -> ({{.*}}) attributes {coda.origin = "nn.rms_norm_apply.apply+nn.rms_norm_grad.apply+nn.add", coda.separate} {
// CHECK-NEXT:  ^bb0(%{{.*}}: tensor<16384x2048xbf16>, %{{.*}}, %{{.*}}, %[[DYARG:[0-9]+]]: tensor<16384x2048xf32>,
// CHECK:         coda.load %[[DYARG]] {coda.full_precision} : tensor<16384x2048xf32>
// CHECK:       coda.gemm %d, %h transpose_a {{.*}}coda.origin = "nn.gemm"
// CHECK:       coda.fold %[[P]] {{.*}}coda.origin = "nn.rms_norm_grad.dw"

// EPI-NOT:     remark: 'nn.rms_norm_grad
// EPI-LABEL:   func.func @qkv_dgrad_1b
// EPI:         %h = coda.elementwise [16384, 2048] ins(%x, %rstd, %wn : {{.*}}coda.origin = "nn.rms_norm_apply.apply"
// EPI:         coda.gemm %d, %w ins(%x, %wn, %rstd, %hdh, %dres : {{.*}}) {{.*}} -> ({{.*}}tensor<16384x2048xbf16>) attributes {coda.origin = "nn.matmul+nn.rms_norm_grad.apply+nn.add"{{.*}}}
// EPI-NOT:     coda.separate
// EPI-NOT:     coda.full_precision

// SEP-NOT:     remark: 'nn.rms_norm_grad
// SEP-LABEL:   func.func @qkv_dgrad_1b
// SEP:         coda.gemm %d, %w : {{.*}} -> tensor<16384x2048xf32> attributes {coda.origin = "nn.matmul", coda.vendor_gemm = #coda.vendor_gemm<cublas>}

// FORCED-NOT:  remark: 'nn.rms_norm_grad
// FORCED:      nn.rms_norm_grad %dy, %x, %wn, %rstd, %hdh {in_producer_epilogue = false}

// The io-report's decisions print the same predictions as the remark.
// IO: norm_grad_plan(dx: M=16384, D=2048, K=3072, residual=True, rebuilt_h=True) -> separate (epilogue [[E:[0-9.]+]] us, separate [[S:[0-9.]+]] us)
// IO: norm_grad_plan(dx: M=8192, D=4096, K=6144, residual=False, rebuilt_h=False) -> epilogue

// BAD: pass option norm-grad must be auto, epilogue or separate, got 'sometimes'
func.func @qkv_dgrad_1b(%d: tensor<16384x3072xbf16>, %w: tensor<3072x2048xbf16>, %x: tensor<16384x2048xbf16>, %wn: tensor<2048xbf16>, %rstd: tensor<16384xf32>, %hdh: tensor<16384xf32>, %dres: tensor<16384x2048xbf16>) -> (tensor<16384x2048xbf16>, tensor<2048xbf16>, tensor<3072x2048xbf16>) {
  %h = nn.rms_norm_apply %x, %wn, %rstd : tensor<16384x2048xbf16>, tensor<2048xbf16>, tensor<16384xf32> -> tensor<16384x2048xbf16>
  %dy = nn.matmul %d, %w : tensor<16384x3072xbf16>, tensor<3072x2048xbf16> -> tensor<16384x2048xbf16>
  %dwq = nn.gemm %d, %h {transpose_a = true, transpose_b = false} : tensor<16384x3072xbf16>, tensor<16384x2048xbf16> -> tensor<3072x2048xbf16>
  %dx, %dw = nn.rms_norm_grad %dy, %x, %wn, %rstd, %hdh : tensor<16384x2048xbf16>, tensor<16384x2048xbf16>, tensor<2048xbf16>, tensor<16384xf32>, tensor<16384xf32> -> (tensor<16384x2048xbf16>, tensor<2048xbf16>)
  %s = nn.add %dres, %dx : tensor<16384x2048xbf16>, tensor<16384x2048xbf16> -> tensor<16384x2048xbf16>
  func.return %s, %dw, %dwq : tensor<16384x2048xbf16>, tensor<2048xbf16>, tensor<3072x2048xbf16>
}

// -----

// 8B, no residual add and no rebuilt h: the epilogue loads x only, the pass would read dy (f32)
// and x and write nothing beside dx: the epilogue stays (by the f32 bytes). Forced separate, dy
// is stored in f32 all the same.
// CHECK-LABEL: func.func @qkv_dgrad_8b
// CHECK:       coda.gemm %d, %w ins(%x, %wn, %rstd, %hdh : {{.*}} attributes {coda.origin = "nn.matmul+nn.rms_norm_grad.apply"{{.*}}}
// EPI-LABEL:   func.func @qkv_dgrad_8b
// EPI:         coda.gemm %d, %w ins(%x, %wn, %rstd, %hdh : {{.*}} attributes {coda.origin = "nn.matmul+nn.rms_norm_grad.apply"{{.*}}}
// SEP-LABEL:   func.func @qkv_dgrad_8b
// SEP:         %[[DY:.*]] = coda.gemm %d, %w : {{.*}} -> tensor<8192x4096xf32>
// SEP:         coda.elementwise [8192, 4096] ins(%[[DY]], %x, {{.*}} attributes {coda.separate, coda.origin = "nn.rms_norm_grad.apply"}
func.func @qkv_dgrad_8b(%d: tensor<8192x6144xbf16>, %w: tensor<6144x4096xbf16>, %x: tensor<8192x4096xbf16>, %wn: tensor<4096xbf16>, %rstd: tensor<8192xf32>, %hdh: tensor<8192xf32>) -> (tensor<8192x4096xbf16>, tensor<4096xbf16>) {
  %dy = nn.matmul %d, %w : tensor<8192x6144xbf16>, tensor<6144x4096xbf16> -> tensor<8192x4096xbf16>
  %dx, %dw = nn.rms_norm_grad %dy, %x, %wn, %rstd, %hdh : tensor<8192x4096xbf16>, tensor<8192x4096xbf16>, tensor<4096xbf16>, tensor<8192xf32>, tensor<8192xf32> -> (tensor<8192x4096xbf16>, tensor<4096xbf16>)
  func.return %dx, %dw : tensor<8192x4096xbf16>, tensor<4096xbf16>
}
