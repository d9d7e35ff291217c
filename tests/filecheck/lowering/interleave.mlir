// RUN: coda-opt %s -t triton | filecheck %s
// RUN: coda-opt %s -p "coda-to-triton{epilogue-subtile=256}" -t triton | filecheck %s --check-prefix=SUB
// With `interleave h`, N-wide tensors are read and written at _coda_interleave_rows(offs_n, h)
// so users see their own column layout; vectors and indices follow the same columns.

func.func @il(%a: tensor<37x40xbf16>, %w: tensor<48x40xbf16>, %r: tensor<37x48xbf16>, %g: tensor<48xbf16>) -> tensor<37x48xbf16> {
  %y = coda.gemm %a, %w transpose_b interleave 12 ins(%r, %g : tensor<37x48xbf16>, tensor<48xbf16>) : tensor<37x40xbf16>, tensor<48x40xbf16> -> tensor<37x48xbf16> {
  ^bb0(%acc: !coda.tile<37x48xf32>, %ri: tensor<37x48xbf16>, %gi: tensor<48xbf16>):
    %x = coda.accumulate %acc, %ri : !coda.tile<37x48xf32>, tensor<37x48xbf16>
    %h = coda.scale %x, %gi cols : !coda.tile<37x48xf32>, tensor<48xbf16>
    coda.yield %h : !coda.tile<37x48xf32>
  }
  func.return %y : tensor<37x48xbf16>
}

// CHECK-LABEL: def _il_k0_gemm(
// Sub-tiled (`-p coda-to-triton{epilogue-subtile=N}`), each column half's columns are permuted the same way.
// SUB:        # coda.accumulate
// SUB-NEXT:   cols_n_s0 = _coda_interleave_rows(offs_n_s0, 12)
// SUB:        cols_n_s1 = _coda_interleave_rows(offs_n_s1, 12)
// SUB:        else:
// SUB-NEXT:   # coda.accumulate
// SUB-NEXT:   cols_n = _coda_interleave_rows(offs_n, 12)
// CHECK:      # coda.accumulate
// CHECK-NEXT: cols_n = _coda_interleave_rows(offs_n, 12)
// CHECK-NEXT: mask_mn = mask_m[:, None] & mask_n[None, :]
// CHECK-NEXT: rows64 = offs_m.to(tl.int64)
// CHECK-NEXT: t_x = acc + tl.load(ri_ptr + rows64[:, None] * 48 + cols_n[None, :], mask=mask_mn, other=0).to(tl.float32)
// CHECK:      t_h = t_x * tl.load(gi_ptr + cols_n, mask=mask_n, other=0).to(tl.float32)[None, :]
// CHECK-NEXT: tl.store(y_ptr + rows64[:, None] * 48 + cols_n[None, :], _coda_round_bf16(t_h), mask=mask_mn)
// CHECK:      launch_gemm(_il_k0_gemm, {{.*}} interleave=12,
