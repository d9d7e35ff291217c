// RUN: coda-opt %s -t triton | filecheck %s
// coda.load cols_period P: the RoPE table form. The [M, 8] cos/sin tables (fp32) are read at
// (row, pair column mod 8) for the 32-wide pair tile of a 64-wide accumulator: one masked
// gather per table, contiguous runs of 8 columns per row, the same rows as the tile.

func.func @rope_table(%a: tensor<37x40xbf16>, %w: tensor<64x40xbf16>, %cos: tensor<37x8xf32>, %sin: tensor<37x8xf32>) -> tensor<37x64xbf16> {
  %y = coda.gemm %a, %w transpose_b ins(%cos, %sin : tensor<37x8xf32>, tensor<37x8xf32>) : tensor<37x40xbf16>, tensor<64x40xbf16> -> tensor<37x64xbf16> {
  ^bb0(%acc: !coda.tile<37x64xf32>, %c_: tensor<37x8xf32>, %s_: tensor<37x8xf32>):
    %c = coda.load %c_ cols_period 8 : tensor<37x8xf32> -> !coda.tile<37x32xf32>
    %s = coda.load %s_ cols_period 8 : tensor<37x8xf32> -> !coda.tile<37x32xf32>
    %r = coda.pair_map stride 8 %acc, %c, %s : (!coda.tile<37x64xf32>, !coda.tile<37x32xf32>, !coda.tile<37x32xf32>) -> !coda.tile<37x64xf32> {
    ^bb0(%x1: f32, %x2: f32, %co: f32, %si: f32):
      %a1 = arith.mulf %x1, %co : f32
      %a2 = arith.mulf %x2, %si : f32
      %y1 = arith.subf %a1, %a2 : f32
      %b1 = arith.mulf %x2, %co : f32
      %b2 = arith.mulf %x1, %si : f32
      %y2 = arith.addf %b1, %b2 : f32
      coda.yield %y1, %y2 : f32, f32
    }
    coda.yield %r : !coda.tile<37x64xf32>
  }
  func.return %y : tensor<37x64xbf16>
}

// CHECK-LABEL: def _rope_table_k0_gemm(
// CHECK:      # coda.load cols_period 8
// CHECK-NEXT: cols_w32 = pid_n * (BN // 2) + tl.arange(0, BN // 2)
// CHECK-NEXT: mask_w32 = cols_w32 < 32
// CHECK-NEXT: mask_mw32 = mask_m[:, None] & mask_w32[None, :]
// CHECK-NEXT: rows64 = offs_m.to(tl.int64)
// CHECK-NEXT: t_c = tl.load(c__ptr + rows64[:, None] * 8 + (cols_w32 % 8)[None, :], mask=mask_mw32, other=0)
// CHECK-NEXT: # coda.load cols_period 8
// CHECK-NEXT: t_s = tl.load(s__ptr + rows64[:, None] * 8 + (cols_w32 % 8)[None, :], mask=mask_mw32, other=0)
// CHECK:      # coda.pair_map stride 8
// CHECK:      pn = tl.reshape(t_c, (BM, BN // 16, 8))
// CHECK-NEXT: pn0 = tl.reshape(t_s, (BM, BN // 16, 8))
