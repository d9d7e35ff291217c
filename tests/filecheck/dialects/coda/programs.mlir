// The hand-written coda programs of tests/programs/coda parse, verify and round-trip through the
// pretty printer and through the generic printer (generic text re-parsed, printed pretty again).
// The CHECK lines pin the kernels of each program in order; CHECK-NOT lines pin their count.
// Their numerics are pinned by tests/test_reference.py (interpreter vs. float64 references).

// RUN: coda-opt %S/../../../programs/coda/llama_fwd.mlir | coda-opt | filecheck %s --check-prefix=FWD
// RUN: coda-opt %S/../../../programs/coda/llama_fwd.mlir --print-op-generic | coda-opt | filecheck %s --check-prefix=FWD
// RUN: coda-opt %S/../../../programs/coda/llama_bwd.mlir | coda-opt | filecheck %s --check-prefix=BWD
// RUN: coda-opt %S/../../../programs/coda/llama_bwd.mlir --print-op-generic | coda-opt | filecheck %s --check-prefix=BWD
// RUN: coda-opt %S/../../../programs/coda/gpt2_fwd.mlir | coda-opt | filecheck %s --check-prefix=GPT
// RUN: coda-opt %S/../../../programs/coda/gpt2_fwd.mlir --print-op-generic | coda-opt | filecheck %s --check-prefix=GPT
// RUN: coda-opt %S/../../../programs/coda/lm_head_ce.mlir | coda-opt | filecheck %s --check-prefix=LMH
// RUN: coda-opt %S/../../../programs/coda/lm_head_ce.mlir --print-op-generic | coda-opt | filecheck %s --check-prefix=LMH
// RUN: coda-opt %S/../../../programs/coda/llama_bwd.mlir --print-op-generic | coda-opt --print-op-generic | filecheck %s --check-prefix=GENERIC

// ---------------------------------------------------------------- LLaMA forward: F1-F4 + 2 folds
// FWD-LABEL: func.func @llama_fwd(%x0: tensor<67x96xbf16>, %y0: tensor<67x96xbf16>, %wo: tensor<96x96xbf16>, %wn0: tensor<96xbf16>, %wgu: tensor<320x96xbf16>, %wd: tensor<96x160xbf16>, %wn1: tensor<96xbf16>, %wqkv: tensor<160x96xbf16>, %pos: tensor<67xi32>)
// FWD-SAME:    -> (tensor<67x96xbf16>, tensor<67x160xbf16>, tensor<67x96xbf16>, tensor<67x320xbf16>, tensor<67xf32>, tensor<67xf32>)
// F1: residual, h = x * wn0, sum(x^2) partials
// FWD:       %x1, %h1, %ss1 = coda.gemm %y0, %wo transpose_b ins(%x0, %wn0 : tensor<67x96xbf16>, tensor<96xbf16>)
// FWD:         coda.accumulate %acc, %res : !coda.tile<67x96xf32>, tensor<67x96xbf16>
// FWD-NEXT:    coda.scale %x, %g cols : !coda.tile<67x96xf32>, tensor<96xbf16>
// FWD-NEXT:    coda.reduce sumsq %x dim 1 : !coda.tile<67x96xf32> -> !coda.partials<rows, 67, sum>
// FWD-NOT:   coda.gemm
// FWD:       %rstd1 = coda.fold %ss1 : !coda.partials<rows, 67, sum> -> tensor<67xf32>
// FWD:         math.rsqrt
// F2: interleaved gate/up, deferred rstd1, SwiGLU 2 -> 1
// FWD:       %z1, %y1 = coda.gemm %h1, %wgu transpose_b interleave 160 ins(%rstd1 : tensor<67xf32>)
// FWD:         coda.scale %acc, %r rows : !coda.tile<67x320xf32>, tensor<67xf32>
// FWD-NEXT:    coda.pair_map {{(stride 1 )?}}%z : !coda.tile<67x320xf32> -> !coda.tile<67x160xf32>
// FWD-NEXT:    ^bb0(%gate: f32, %up: f32):
// F3
// FWD-NOT:   coda.fold
// FWD:       %x2, %h2, %ss2 = coda.gemm %y1, %wd transpose_b ins(%x1, %wn1 : tensor<67x96xbf16>, tensor<96xbf16>) : tensor<67x160xbf16>, tensor<96x160xbf16>
// FWD-NOT:   coda.gemm
// FWD:       %rstd2 = coda.fold %ss2
// F4: deferred rstd2 + RoPE over pairs (c, c + 16) inside each 32-wide head
// FWD:       %qkv = coda.gemm %h2, %wqkv transpose_b ins(%rstd2, %pos : tensor<67xf32>, tensor<67xi32>)
// FWD:         coda.broadcast %p rows : tensor<67xi32> -> !coda.tile<67x160xi32>
// FWD-NEXT:    coda.index cols : !coda.tile<67x160xi32>
// FWD-NEXT:    coda.pair_map stride 16 %z, %pt, %ct : (!coda.tile<67x160xf32>, !coda.tile<67x160xi32>, !coda.tile<67x160xi32>) -> !coda.tile<67x160xf32>
// FWD:           math.powf %theta, %ex : f32
// FWD:           math.cos
// FWD:           math.sin
// FWD-NOT:   coda.gemm
// FWD-NOT:   coda.fold
// FWD:       func.return %x2, %qkv, %x1, %z1, %rstd1, %rstd2

// ---------------------------------------------------------------- LLaMA backward: B1-B8
// BWD-LABEL: func.func @llama_bwd(%dqkv: tensor<67x160xbf16>, %dx2: tensor<67x96xbf16>, %qkv: tensor<67x160xbf16>
// B1: RoPE backward as an elementwise kernel + ZdZ partials
// BWD:       %dz2, %zp2 = coda.elementwise [67, 160] ins(%qkv, %dqkv, %pos : tensor<67x160xbf16>, tensor<67x160xbf16>, tensor<67xi32>)
// BWD:         coda.pair_map stride 16 %dyt, %pt, %ct
// BWD:         coda.reduce sum %ydy dim 1 : !coda.tile<67x160xf32> -> !coda.partials<rows, 67, sum>
// BWD:       %zdz2 = coda.fold %zp2 : !coda.partials<rows, 67, sum> -> tensor<67xf32>
// B2: RMSNorm backward (x2) fused into dz2 @ wqkv, column partials for dwn1
// BWD:       %dxa, %xo2, %dgp1 = coda.gemm %dz2, %wqkv ins(%x2, %rstd2, %zdz2, %wn1, %dx2 : tensor<67x96xbf16>, tensor<67xf32>, tensor<67xf32>, tensor<96xbf16>, tensor<67x96xbf16>) : tensor<67x160xbf16>, tensor<160x96xbf16>
// BWD:         coda.accumulate %dxn, %dres
// BWD:         coda.reduce sum %qn dim 0 : !coda.tile<67x96xf32> -> !coda.partials<cols, 96, sum>
// BWD:       %dwn1 = coda.fold %dgp1 : !coda.partials<cols, 96, sum> -> tensor<96xbf16>
// B3
// BWD:       %dwqkv = coda.gemm %dz2, %xo2 transpose_a : tensor<67x160xbf16>, tensor<67x96xbf16> -> tensor<160x96xbf16>
// B4: SwiGLU backward 1 -> 2 over the saved z1 read through interleave_wide
// BWD:       %dz1, %y1, %zp1 = coda.gemm %dxa, %wd interleave_wide 160 ins(%z1 : tensor<67x320xbf16>) : tensor<67x96xbf16>, tensor<96x160xbf16> -> (tensor<67x320xbf16>, tensor<67x160xbf16>, !coda.partials<rows, 67, sum>)
// BWD:         coda.load %z : tensor<67x320xbf16> -> !coda.tile<67x320xf32>
// BWD-NEXT:    coda.pair_map {{(stride 1 )?}}%acc, %zt : (!coda.tile<67x160xf32>, !coda.tile<67x320xf32>) -> (!coda.tile<67x320xf32>, !coda.tile<67x160xf32>, !coda.tile<67x160xf32>)
// BWD:       %zdz1 = coda.fold %zp1
// B5
// BWD:       %dwd = coda.gemm %dxa, %y1 transpose_a : tensor<67x96xbf16>, tensor<67x160xbf16> -> tensor<96x160xbf16>
// B6
// BWD:       %dx0, %xo1, %dgp0 = coda.gemm %dz1, %wgu ins(%x1, %rstd1, %zdz1, %wn0, %dxa : {{.*}}) : tensor<67x320xbf16>, tensor<320x96xbf16>
// BWD:       %dwn0 = coda.fold %dgp0 : !coda.partials<cols, 96, sum> -> tensor<96xbf16>
// B7, B8
// BWD:       %dwgu = coda.gemm %dz1, %xo1 transpose_a : tensor<67x320xbf16>, tensor<67x96xbf16> -> tensor<320x96xbf16>
// BWD:       %dy0 = coda.gemm %dx0, %wo : tensor<67x96xbf16>, tensor<96x96xbf16> -> tensor<67x96xbf16>
// BWD:       %dwo = coda.gemm %dx0, %y0 transpose_a : tensor<67x96xbf16>, tensor<67x96xbf16> -> tensor<96x96xbf16>
// BWD-NOT:   coda.gemm
// BWD:       func.return %dx0, %dy0, %dwo, %dwgu, %dwd, %dwqkv, %dwn0, %dwn1

// GENERIC:   "coda.elementwise"(%qkv, %dqkv, %pos) <{shape = [#builtin.int<67>, #builtin.int<160>]}>
// GENERIC:   "coda.pair_map"(%dyt, %pt, %ct) <{stride = 16 : i64}>
// GENERIC:   "coda.gemm"(%dxa, %wd, %z1) <{interleave_wide = 160 : i64, operandSegmentSizes = array<i32: 1, 1, 1>}>
// GENERIC:   "coda.gemm"(%dz1, %xo1) <{transpose_a, operandSegmentSizes = array<i32: 1, 1, 0>}>

// ---------------------------------------------------------------- GPT-2 forward, deferred LayerNorm
// GPT-LABEL: func.func @gpt2_fwd(
// GPT-SAME:    %c1: tensor<384xf32>, %e1: tensor<384xf32>, %c2: tensor<288xf32>, %e2: tensor<288xf32>)
// GPT:       %x1, %h1, %s1, %ss1 = coda.gemm %y0, %wo transpose_b ins(%x0, %bo, %g1 : tensor<67x96xbf16>, tensor<96xbf16>, tensor<96xbf16>)
// GPT:         coda.shift %acc, %b cols
// GPT:         coda.reduce sum %x dim 1
// GPT:         coda.reduce sumsq %x dim 1
// GPT:       %r1, %rmu1 = coda.fold %s1, %ss1 : !coda.partials<rows, 67, sum>, !coda.partials<rows, 67, sum> -> (tensor<67xf32>, tensor<67xf32>)
// GPT:         arith.maximumf
// GPT:       %u, %a = coda.gemm %h1, %wfc transpose_b ins(%r1, %rmu1, %c1, %e1, %bfc : tensor<67xf32>, tensor<67xf32>, tensor<384xf32>, tensor<384xf32>, tensor<384xbf16>)
// GPT:         coda.scale %acc, %r rows
// GPT:         coda.broadcast %rmu rows : tensor<67xf32> -> !coda.tile<67x384xf32>
// GPT:         coda.broadcast %c cols : tensor<384xf32> -> !coda.tile<67x384xf32>
// GPT:         coda.shift %cen, %e cols
// GPT:         coda.shift %te, %bias cols
// GPT:         math.tanh
// GPT:       %x2, %h2, %s2, %ss2 = coda.gemm %a, %wproj transpose_b ins(%x1, %bproj, %g2
// GPT:       %r2, %rmu2 = coda.fold %s2, %ss2
// GPT:       %qkv = coda.gemm %h2, %wqkv transpose_b ins(%r2, %rmu2, %c2, %e2, %bqkv
// GPT-NOT:   coda.gemm
// GPT:       func.return %x2, %qkv, %x1, %u, %r1, %rmu1, %r2, %rmu2

// ---------------------------------------------------------------- LM head + cross-entropy
// LMH-LABEL: func.func @lm_head_ce(%x: tensor<67x96xbf16>, %wn: tensor<96xbf16>, %wlm: tensor<200x96xbf16>, %targets: tensor<67xi32>, %dloss: tensor<f32>)
// LMH:       %h, %ssp = coda.elementwise [67, 96] ins(%x, %wn : tensor<67x96xbf16>, tensor<96xbf16>)
// LMH:       %rstd = coda.fold %ssp
// LMH:       %lsep, %tlp = coda.gemm %h, %wlm transpose_b ins(%rstd, %targets : tensor<67xf32>, tensor<67xi32>) : tensor<67x96xbf16>, tensor<200x96xbf16> -> (!coda.partials<rows, 67, lse>, !coda.partials<rows, 67, sum>)
// LMH:         coda.reduce lse %z dim 1 : !coda.tile<67x200xf32> -> !coda.partials<rows, 67, lse>
// LMH-NEXT:    coda.select %z, %t : !coda.tile<67x200xf32>, tensor<67xi32> -> !coda.partials<rows, 67, sum>
// LMH:       %lse, %loss, %count = coda.fold %lsep, %tlp : !coda.partials<rows, 67, lse>, !coda.partials<rows, 67, sum> ins(%targets : tensor<67xi32>) -> (tensor<67xf32>, tensor<f32>, tensor<f32>)
// LMH:         arith.cmpi ne, %t, %ign : i32
// LMH:       } finalize {
// LMH:         arith.divf %total, %n : f32
// LMH:       %dlogits = coda.gemm %h, %wlm transpose_b ins(%rstd, %lse, %targets, %count, %dloss
// LMH:         coda.broadcast %cn scalar : tensor<f32> -> !coda.tile<67x200xf32>
// LMH:       func.return %loss, %dlogits, %h, %rstd, %lse, %count
