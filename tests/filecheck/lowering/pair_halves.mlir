// RUN: coda-opt %s --split-input-file -p 'nn-to-coda{gated-grad=separate}' -t triton 2>&1 | filecheck %s

// The SwiGLU backward as its own pass (nn-plan's `in_producer_epilogue = false`, forced here)
// with the z . dz row partials: the pair (j, j + F) is read from memory as two [BM, BN] tiles at
// the tile's pair-index columns (`coda.gathered`), and the ops coda-legalize marked
// `coda.pair_halves` (the load of z, the rounding of dz and the product z * dz, the row sum)
// work on those two halves: z loaded once, each map emitted per half, the row partial the sum
// of both halves' sums. F = 96: no power-of-two tile holds a pair group.

// CHECK-LABEL: def _down_dgrad_k1_elementwise(
// CHECK:         t{{.*}} = tl.load(in0_ptr + rows64[:, None] * 96 + offs_n[None, :], mask=mask_mn, other=0)
// CHECK:         [[FIRST:pfirst[0-9]*]] = offs_n // 96 * 192 + offs_n % 96
// CHECK:         # coda.load, pair halves (columns first, first + 96)
// CHECK-NEXT:    [[ZA:pa[0-9]*]] = tl.load(in1_ptr + rows64[:, None] * 192 + [[FIRST]][None, :], mask=mask_mn, other=0)
// CHECK-NEXT:    [[ZB:pb[0-9]*]] = tl.load(in1_ptr + rows64[:, None] * 192 + ([[FIRST]] + 96)[None, :], mask=mask_mn, other=0)
// CHECK:         # coda.pair_map stride 96, pairs gathered from memory
// CHECK:         tl.exp(
// CHECK:         tl.store(dz_ptr + rows64[:, None] * 192 + [[FIRST]][None, :], _coda_round_bf16([[DA:pw[0-9]*]]), mask=mask_mn)
// CHECK-NEXT:    tl.store(dz_ptr + rows64[:, None] * 192 + ([[FIRST]] + 96)[None, :], _coda_round_bf16([[DB:pw[0-9]*]]), mask=mask_mn)
// CHECK:         # coda.map, once per pair half
// CHECK:         # coda.map, once per pair half
// CHECK-NEXT:    [[PA:pw[0-9]+]] = [[ZA]] * {{.*}}
// CHECK-NEXT:    [[PB:pw[0-9]+]] = [[ZB]] * {{.*}}
// CHECK:         # coda.reduce sum dim 1 over both pair halves
// CHECK-NEXT:    [[P:p[0-9]*]] = tl.sum(tl.where(mask_mn, {{.*}}, 0.0), axis=1) + tl.sum(tl.where(mask_mn, {{.*}}, 0.0), axis=1)
// CHECK:         tl.store(s_ptr + rows64 * tl.cdiv(N, BN) + pid_n, [[P]], mask=mask_m)
// Its programs hold [BM, 2 BN] tiles of z and dz: the launch records that width, which sizes
// a program's warps on the GPU (tiling.elementwise_config).
// CHECK:         _rt.launch_elementwise(_down_dgrad_k1_elementwise, {{.*}}, M=37, N=96, bn_multiple_of=1, width_multiple=2)
func.func @down_dgrad(%d: tensor<37x40xbf16>, %wd: tensor<40x96xbf16>, %z: tensor<37x192xbf16>) -> (tensor<37x192xbf16>, tensor<37xf32>) {
  %dy = "nn.matmul"(%d, %wd) : (tensor<37x40xbf16>, tensor<40x96xbf16>) -> tensor<37x96xbf16>
  %dz = "nn.swiglu_grad"(%dy, %z) : (tensor<37x96xbf16>, tensor<37x192xbf16>) -> tensor<37x192xbf16>
  %s = "nn.row_dot"(%z, %dz) : (tensor<37x192xbf16>, tensor<37x192xbf16>) -> tensor<37xf32>
  func.return %dz, %s : tensor<37x192xbf16>, tensor<37xf32>
}

// -----

// F = 256, a power of two: a 512-wide tile would hold the pairs, wider than the kernel's own
// tile (128), so the pass reads the halves from memory too (no tile constraint recorded).
// CHECK-LABEL: def _down_dgrad_pow2_k1_elementwise(
// CHECK:         offs_n // 256 * 512 + offs_n % 256
// CHECK:         # coda.load, pair halves (columns first, first + 256)
// CHECK:         # coda.reduce sum dim 1 over both pair halves
func.func @down_dgrad_pow2(%d: tensor<37x40xbf16>, %wd: tensor<40x256xbf16>, %z: tensor<37x512xbf16>) -> (tensor<37x512xbf16>, tensor<37xf32>) {
  %dy = "nn.matmul"(%d, %wd) : (tensor<37x40xbf16>, tensor<40x256xbf16>) -> tensor<37x256xbf16>
  %dz = "nn.swiglu_grad"(%dy, %z) : (tensor<37x256xbf16>, tensor<37x512xbf16>) -> tensor<37x512xbf16>
  %s = "nn.row_dot"(%z, %dz) : (tensor<37x512xbf16>, tensor<37x512xbf16>) -> tensor<37xf32>
  func.return %dz, %s : tensor<37x512xbf16>, tensor<37xf32>
}
