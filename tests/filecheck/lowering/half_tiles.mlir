// RUN: coda-opt %s --split-input-file -t triton | filecheck %s
// RUN: coda-opt %s --split-input-file -p "coda-to-triton{half-tile-io=false}" -t triton | filecheck %s --check-prefix=SCATTER
// With the option half-tile-io=false every access keeps the scatter to perm(c):
// SCATTER: _coda_interleave_rows(offs_n,
// SCATTER-NOT: half_cols
// Interleaved tiles in the user's layout: when the tile's columns lie inside one interleave group
// (a constexpr test on BN), N-wide (interleave h) or 2N-wide (interleave_wide h) tensors are read
// and written as two contiguous half tiles h columns apart, not scattered to perm(c).

func.func @il(%a: tensor<37x40xbf16>, %w: tensor<96x40xbf16>, %r: tensor<37x96xbf16>) -> tensor<37x96xbf16> {
  %y = coda.gemm %a, %w transpose_b interleave 48 ins(%r : tensor<37x96xbf16>) : tensor<37x40xbf16>, tensor<96x40xbf16> -> tensor<37x96xbf16> {
  ^bb0(%acc: !coda.tile<37x96xf32>, %ri: tensor<37x96xbf16>):
    %x = coda.accumulate %acc, %ri : !coda.tile<37x96xf32>, tensor<37x96xbf16>
    coda.yield %x : !coda.tile<37x96xf32>
  }
  func.return %y : tensor<37x96xbf16>
}

// 2h = 96: tiles up to 32 wide fit in a group, 96 // BN of them per group.
// CHECK-LABEL: def _il_k0_gemm(
// CHECK:      # coda.accumulate
// CHECK-NEXT: cols_n = _coda_interleave_rows(offs_n, 48)
// CHECK-NEXT: mask_mn = mask_m[:, None] & mask_n[None, :]
// CHECK-NEXT: rows64 = offs_m.to(tl.int64)
// CHECK-NEXT: # half tiles when the tile is inside one interleave group (BN divides 96), else perm(c)
// CHECK-NEXT: if BN <= 32:
// CHECK-NEXT:     half_cols = pid_n // (96 // BN) * 96 + pid_n % (96 // BN) * (BN // 2) + tl.arange(0, BN // 2)
// CHECK-NEXT:     half_mask = mask_m[:, None] & (half_cols < 96)[None, :]
// CHECK-NEXT:     ld_halves = tl.reshape(tl.join(tl.load(ri_ptr + rows64[:, None] * 96 + half_cols[None, :], mask=half_mask, other=0), tl.load(ri_ptr + rows64[:, None] * 96 + half_cols[None, :] + 48, mask=half_mask, other=0)), (BM, BN)).to(tl.float32)
// CHECK-NEXT: else:
// CHECK-NEXT:     ld_halves = tl.load(ri_ptr + rows64[:, None] * 96 + cols_n[None, :], mask=mask_mn, other=0).to(tl.float32)
// CHECK-NEXT: t_x = acc + ld_halves
// CHECK-NEXT: # half tiles when the tile is inside one interleave group (BN divides 96), else perm(c)
// CHECK-NEXT: if BN <= 32:
// CHECK-NEXT:     half_cols0 = pid_n // (96 // BN) * 96 + pid_n % (96 // BN) * (BN // 2) + tl.arange(0, BN // 2)
// CHECK-NEXT:     half_mask0 = mask_m[:, None] & (half_cols0 < 96)[None, :]
// CHECK-NEXT:     st_lo, st_hi = tl.split(tl.reshape(_coda_round_bf16(t_x), (BM, BN // 2, 2)))
// CHECK-NEXT:     tl.store(y_ptr + rows64[:, None] * 96 + half_cols0[None, :], st_lo, mask=half_mask0)
// CHECK-NEXT:     tl.store(y_ptr + rows64[:, None] * 96 + half_cols0[None, :] + 48, st_hi, mask=half_mask0)
// CHECK-NEXT: else:
// CHECK-NEXT:     tl.store(y_ptr + rows64[:, None] * 96 + cols_n[None, :], _coda_round_bf16(t_x), mask=mask_mn)

// -----

func.func @wide(%a: tensor<37x40xbf16>, %w: tensor<48x40xbf16>, %z: tensor<37x96xbf16>) -> tensor<37x96xbf16> {
  %d = coda.gemm %a, %w transpose_b interleave_wide 48 ins(%z : tensor<37x96xbf16>) : tensor<37x40xbf16>, tensor<48x40xbf16> -> tensor<37x96xbf16> {
  ^bb0(%acc: !coda.tile<37x48xf32>, %zi: tensor<37x96xbf16>):
    %zt = coda.load %zi : tensor<37x96xbf16> -> !coda.tile<37x96xf32>
    %dz = coda.pair_map %acc, %zt : (!coda.tile<37x48xf32>, !coda.tile<37x96xf32>) -> !coda.tile<37x96xf32> {
    ^bb0(%dy: f32, %gate: f32, %up: f32):
      %dg = arith.mulf %dy, %up : f32
      %du = arith.mulf %dy, %gate : f32
      coda.yield %dg, %du : f32, f32
    }
    coda.yield %dz : !coda.tile<37x96xf32>
  }
  func.return %d : tensor<37x96xbf16>
}

// The 2N-wide tile is 2 BN columns of [gate | up]: halves BN wide, 48 columns apart.
// CHECK-LABEL: def _wide_k0_gemm(
// CHECK:      # coda.load
// CHECK-NEXT: cols_w96 = pid_n * (BN * 2) + tl.arange(0, BN * 2)
// CHECK:      perm_w96 = _coda_interleave_rows(cols_w96, 48)
// CHECK:      if BN * 2 <= 32:
// CHECK-NEXT:     half_cols = pid_n // (96 // (BN * 2)) * 96 + pid_n % (96 // (BN * 2)) * (BN * 2 // 2) + tl.arange(0, BN * 2 // 2)
// CHECK-NEXT:     half_mask = mask_m[:, None] & (half_cols < 96)[None, :]
// CHECK-NEXT:     ld_halves = tl.reshape(tl.join(tl.load(zi_ptr + rows64[:, None] * 96 + half_cols[None, :], mask=half_mask, other=0), tl.load(zi_ptr + rows64[:, None] * 96 + half_cols[None, :] + 48, mask=half_mask, other=0)), (BM, BN * 2)).to(tl.float32)
// CHECK:      t_dz = tl.reshape(tl.permute(tl.join(
// CHECK:      if BN * 2 <= 32:
// CHECK:          st_lo, st_hi = tl.split(tl.reshape(_coda_round_bf16(t_dz), (BM, BN * 2 // 2, 2)))
// CHECK-NEXT:     tl.store(d_ptr + rows64[:, None] * 96 + half_cols0[None, :], st_lo, mask=half_mask0)
// CHECK-NEXT:     tl.store(d_ptr + rows64[:, None] * 96 + half_cols0[None, :] + 48, st_hi, mask=half_mask0)
// CHECK-NEXT: else:
// CHECK-NEXT:     tl.store(d_ptr + rows64[:, None] * 96 + perm_w96[None, :], _coda_round_bf16(t_dz), mask=mask_mw96)

// -----

func.func @odd(%a: tensor<37x40xbf16>, %w: tensor<48x40xbf16>) -> tensor<37x48xbf16> {
  %y = coda.gemm %a, %w transpose_b interleave 12 : tensor<37x40xbf16>, tensor<48x40xbf16> -> tensor<37x48xbf16> {
  ^bb0(%acc: !coda.tile<37x48xf32>):
    coda.yield %acc : !coda.tile<37x48xf32>
  }
  func.return %y : tensor<37x48xbf16>
}

// 2h = 24 holds no tile of 16 or more columns: the scatter alone, no dead branch.
// CHECK-LABEL: def _odd_k0_gemm(
// CHECK-NOT:  half_cols
// CHECK:      tl.store(y_ptr + rows64[:, None] * 48 + cols_n[None, :], _coda_round_bf16(acc), mask=mask_mn)
// CHECK-NOT:  half_cols
// CHECK:      def odd(
