// RUN: coda-opt %s -t triton --split-input-file | filecheck %s
// RUN: coda-opt %s -p "coda-to-triton{epilogue-subtile=256}" -t triton --split-input-file | filecheck %s --check-prefix=SUB
// coda.pair_map: wide tiles are split into (first, second) of each pair by reshape/permute/split,
// narrow and wide results are rebuilt with reshape / join + permute + reshape.

// 2 -> 1 (SwiGLU) on an interleaved accumulator: narrow tiles are N/2 wide, in natural columns.
func.func @swiglu(%a: tensor<37x40xbf16>, %w: tensor<48x40xbf16>) -> tensor<37x24xbf16> {
  %y = coda.gemm %a, %w transpose_b interleave 24 : tensor<37x40xbf16>, tensor<48x40xbf16> -> tensor<37x24xbf16> {
  ^bb0(%acc: !coda.tile<37x48xf32>):
    %g = coda.pair_map %acc : (!coda.tile<37x48xf32>) -> !coda.tile<37x24xf32> {
    ^bb0(%gate: f32, %up: f32):
      %one = arith.constant 1.0 : f32
      %n = arith.negf %gate : f32
      %e = math.exp %n : f32
      %d = arith.addf %e, %one : f32
      %s = arith.divf %gate, %d : f32
      %r = arith.mulf %s, %up : f32
      coda.yield %r : f32
    }
    coda.yield %g : !coda.tile<37x24xf32>
  }
  func.return %y : tensor<37x24xbf16>
}

// CHECK-LABEL: def _swiglu_k0_gemm(
// CHECK:      # coda.pair_map stride 1
// CHECK-NEXT: pw = tl.permute(tl.reshape(acc, (BM, BN // 2, 2, 1)), (0, 1, 3, 2))
// CHECK-NEXT: pa, pb = tl.split(pw)
// CHECK-NEXT: s = -pa
// CHECK-NEXT: s0 = tl.exp(s)
// CHECK-NEXT: s1 = s0 + 1.0
// CHECK-NEXT: s2 = pa / s1
// CHECK-NEXT: s3 = s2 * pb
// CHECK-NEXT: cols_w24 = pid_n * (BN // 2) + tl.arange(0, BN // 2)
// CHECK-NEXT: mask_w24 = cols_w24 < 24
// CHECK-NEXT: mask_mw24 = mask_m[:, None] & mask_w24[None, :]
// CHECK-NEXT: t_g = tl.reshape(s3, (BM, BN // 2))
// CHECK:      tl.store(y_ptr + rows64[:, None] * 24 + cols_w24[None, :], _coda_round_bf16(t_g), mask=mask_mw24)
// BN (>= 16, a power of two) holds whole pairs and an even narrow width: legality records no constraint.
// CHECK:      launch_gemm(_swiglu_k0_gemm, {{.*}} interleave=24, bn_multiple_of=1,

// -----

// 2 -> 2 with a stride (rotation of pairs 4 apart) and 1 -> 2.
func.func @rot(%a: tensor<37x40xf32>, %w: tensor<40x48xf32>) -> (tensor<37x48xf32>, tensor<37x96xf32>) {
  %y, %z = coda.gemm %a, %w : tensor<37x40xf32>, tensor<40x48xf32> -> (tensor<37x48xf32>, tensor<37x96xf32>) {
  ^bb0(%acc: !coda.tile<37x48xf32>):
    %r = coda.pair_map stride 4 %acc : (!coda.tile<37x48xf32>) -> !coda.tile<37x48xf32> {
    ^bb0(%x0: f32, %x1: f32):
      %n = arith.negf %x1 : f32
      coda.yield %n, %x0 : f32, f32
    }
    %w2 = coda.pair_map %r : (!coda.tile<37x48xf32>) -> !coda.tile<37x96xf32> {
    ^bb0(%v: f32):
      coda.yield %v, %v : f32, f32
    }
    coda.yield %r, %w2 : !coda.tile<37x48xf32>, !coda.tile<37x96xf32>
  }
  func.return %y, %z : tensor<37x48xf32>, tensor<37x96xf32>
}

// CHECK-LABEL: def _rot_k0_gemm(
// CHECK:      acc = tl.dot(a, b, acc, input_precision="ieee")
// Sub-tiled (`-p coda-to-triton{epilogue-subtile=N}`), the 1 -> 2 map makes this epilogue heavy: per column half
// on tiles >= 256 wide, each half holding whole groups of 2 * stride columns.
// SUB-LABEL:  def _rot_k0_gemm(
// SUB:        if BN >= 256:
// SUB:        # coda.pair_map stride 4
// SUB-NEXT:   pw{{[0-9]*}} = tl.permute(tl.reshape(acc_s0, (BM, BN // 2 // 8, 2, 4)), (0, 1, 3, 2))
// SUB:        cols_w96_s0 = (pid_n * 2 + 0) * (BN // 2 * 2) + tl.arange(0, BN // 2 * 2)
// SUB:        else:
// SUB:        # coda.pair_map stride 4
// CHECK:      # coda.pair_map stride 4
// CHECK-NEXT: pw = tl.permute(tl.reshape(acc, (BM, BN // 8, 2, 4)), (0, 1, 3, 2))
// CHECK-NEXT: pa, pb = tl.split(pw)
// CHECK-NEXT: s = -pb
// CHECK-NEXT: t_r = tl.reshape(tl.permute(tl.join(s, pa), (0, 1, 3, 2)), (BM, BN))
// CHECK:      cols_w96 = pid_n * (BN * 2) + tl.arange(0, BN * 2)
// CHECK:      # coda.pair_map stride 1
// CHECK-NEXT: pn = tl.reshape(t_r, (BM, BN * 2 // 2, 1))
// CHECK:      t_w2 = tl.reshape(tl.permute(tl.join(pn, pn), (0, 1, 3, 2)), (BM, BN * 2))
// CHECK:      tl.store(z_ptr + rows64[:, None] * 96 + cols_w96[None, :], t_w2, mask=mask_mw96)
// CHECK:      launch_gemm(_rot_k0_gemm, {{.*}} bn_multiple_of=16,
