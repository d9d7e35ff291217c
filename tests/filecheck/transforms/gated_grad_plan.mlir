// RUN: coda-opt %s --remarks --split-input-file -p nn-to-coda 2>&1 | filecheck %s
// RUN: coda-opt %s --remarks --split-input-file -p 'nn-to-coda{gated-grad=epilogue}' 2>&1 | filecheck %s --check-prefix=EPI
// RUN: coda-opt %s --remarks --split-input-file -p 'nn-to-coda{cost-model=false}' 2>&1 | filecheck %s --check-prefix=EPI
// RUN: coda-opt %s --remarks --split-input-file -p 'nn-plan{gated-grad=separate}' 2>&1 | filecheck %s --check-prefix=FORCED
// RUN: not coda-opt %s --remarks --split-input-file -p 'nn-plan{gated-grad=sometimes}' 2>&1 | filecheck %s --check-prefix=BAD
// RUN: coda-opt %s --remarks --split-input-file -t 'io-report{decisions=true}' 2>&1 | filecheck %s --check-prefix=IO

// The down-projection dgrad of the LLaMA backward (what nn-autodiff writes): dy = dout @ Wd,
// the SwiGLU backward dz of the saved z, and the z . dz row sums of the norm backward.
// io_plans.gated_grad_plan: in the GEMM's epilogue, z and dz (2N-wide) live beside the
// accumulator (5 tiles: spills) and everything follows each tile's mainloop at one CTA per SM;
// the plain GEMM storing dy + one pass over dy and z is cheaper at both LLaMA shapes (measured
// on the H100, bench/RESULTS.md session 9: 1.21 vs 1.49 ms at 1B, 1.68 vs 2.04 ms at 8B).
// nn-plan records `in_producer_epilogue = false`, convert-nn-to-coda marks the kernel
// coda.separate, coda-fuse keeps it out of the GEMM and merges the z . dz partials into the
// pass, whose pairs (j, j + F) are read from memory as two [BM, BN] halves (coda.gathered,
// and coda.pair_halves on the ops that use the wide tiles again).

// CHECK: gated_grad_plan.mlir:{{[0-9]+}}:3: remark: 'nn.swiglu_grad' op nn.swiglu_grad not fused into the epilogue of 'nn.matmul' (
// CHECK-SAME: the IO model found a separate pass cheaper (the epilogue holds z and dz beside the accumulator: spills,
// CHECK-SAME: separate (plain GEMM storing dy [16384x8192], then one pass over dy and z) [[S:[0-9.]+]] us vs in the epilogue (tile {{.*}}, 672 registers per thread) [[E:[0-9.]+]] us
// Remarks come first (stderr); the second is @down_dgrad_8b's, F = 14336 (not a power of two).
// CHECK: gated_grad_plan.mlir:{{[0-9]+}}:3: remark: 'nn.swiglu_grad' op nn.swiglu_grad not fused into the epilogue of 'nn.matmul' (
// CHECK-SAME: separate (plain GEMM storing dy [8192x14336], then one pass over dy and z) {{[0-9.]+}} us vs in the epilogue
// CHECK-LABEL: func.func @down_dgrad_1b
// CHECK:       %[[DY:.*]] = coda.gemm %d, %wd : {{.*}} -> tensor<16384x8192xbf16> attributes {coda.origin = "nn.matmul", coda.vendor_gemm = #coda.vendor_gemm<cublas>} {
// CHECK-NEXT:  ^bb0(%[[A:.*]]: !coda.tile<16384x8192xf32>):
// CHECK-NEXT:    coda.yield %[[A]]
// CHECK:       coda.elementwise [16384, 8192] ins(%[[DY]], %z : {{.*}}) -> (tensor<16384x16384xbf16>, !coda.partials<rows, 16384, sum>) attributes {coda.origin = "nn.swiglu_grad+nn.row_dot.partials", coda.separate} {
// CHECK:         %[[Z:.*]] = coda.load %{{.*}} {coda.pair_halves = 8192 : i64}
// CHECK:         %[[DZ:.*]] = coda.pair_map stride 8192 %{{.*}}, %[[Z]] {{.*}} attributes {coda.gathered}
// CHECK:         coda.map %[[DZ]] {{.*}} attributes {coda.pair_halves = 8192 : i64}
// CHECK:         coda.map %[[Z]], {{.*}} attributes {coda.pair_halves = 8192 : i64}
// CHECK:         coda.reduce sum %{{.*}} dim 1 {coda.pair_halves = 8192 : i64}
// CHECK:         coda.yield %[[DZ]], %{{.*}} : !coda.tile<16384x16384xf32>, !coda.partials<rows, 16384, sum>

// EPI-NOT:     remark: 'nn.swiglu_grad
// EPI-LABEL:   func.func @down_dgrad_1b
// EPI:         coda.gemm %d, %wd interleave_wide 8192 ins(%z : {{.*}}) {{.*}} attributes {coda.origin = "nn.matmul+nn.swiglu_grad+nn.row_dot.partials"}
// EPI:           coda.pair_map stride 1
// EPI-NOT:     coda.separate
// EPI-NOT:     coda.pair_halves

// FORCED-NOT:  remark
// FORCED:      nn.swiglu_grad %dy, %z {in_producer_epilogue = false}

// The io-report's decisions print the same predictions as the remark.
// IO:  dy [16384x8192], then one pass over dy and z) [[S:[0-9.]+]] us vs in the epilogue (tile {{.*}}) [[E:[0-9.]+]] us
// IO: gated_grad_plan(dz: M=16384, F=8192, K=2048) -> separate (epilogue [[E]] us, separate [[S]] us)
// IO: gated_grad_plan(dz: M=8192, F=14336, K=4096) -> separate

// BAD: pass option gated-grad must be auto, epilogue or separate, got 'sometimes'
func.func @down_dgrad_1b(%d: tensor<16384x2048xbf16>, %wd: tensor<2048x8192xbf16>, %z: tensor<16384x16384xbf16>) -> (tensor<16384x16384xbf16>, tensor<16384xf32>) {
  %dy = "nn.matmul"(%d, %wd) : (tensor<16384x2048xbf16>, tensor<2048x8192xbf16>) -> tensor<16384x8192xbf16>
  %dz = "nn.swiglu_grad"(%dy, %z) : (tensor<16384x8192xbf16>, tensor<16384x16384xbf16>) -> tensor<16384x16384xbf16>
  %s = "nn.row_dot"(%z, %dz) : (tensor<16384x16384xbf16>, tensor<16384x16384xbf16>) -> tensor<16384xf32>
  func.return %dz, %s : tensor<16384x16384xbf16>, tensor<16384xf32>
}

// -----

// 8B: F = 14336 is not a power of two; the same plan, the same pass.
// CHECK-LABEL: func.func @down_dgrad_8b
// CHECK:       coda.elementwise [8192, 14336] {{.*}} coda.separate
// CHECK:         coda.load %{{.*}} {coda.pair_halves = 14336 : i64}
// CHECK:         coda.pair_map stride 14336 {{.*}} attributes {coda.gathered}
// CHECK:         coda.reduce sum %{{.*}} dim 1 {coda.pair_halves = 14336 : i64}
// EPI-LABEL:   func.func @down_dgrad_8b
// EPI:         coda.gemm %d, %wd interleave_wide 14336
func.func @down_dgrad_8b(%d: tensor<8192x4096xbf16>, %wd: tensor<4096x14336xbf16>, %z: tensor<8192x28672xbf16>) -> (tensor<8192x28672xbf16>, tensor<8192xf32>) {
  %dy = "nn.matmul"(%d, %wd) : (tensor<8192x4096xbf16>, tensor<4096x14336xbf16>) -> tensor<8192x14336xbf16>
  %dz = "nn.swiglu_grad"(%dy, %z) : (tensor<8192x14336xbf16>, tensor<8192x28672xbf16>) -> tensor<8192x28672xbf16>
  %s = "nn.row_dot"(%z, %dz) : (tensor<8192x28672xbf16>, tensor<8192x28672xbf16>) -> tensor<8192xf32>
  func.return %dz, %s : tensor<8192x28672xbf16>, tensor<8192xf32>
}
