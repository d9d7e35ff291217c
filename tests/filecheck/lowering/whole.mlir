// RUN: coda-opt %s -t triton | filecheck %s
// coda.elementwise whole rows / whole cols: one program per block of rows (columns) walks the
// column (row) tiles in order; reductions along the walked axis are running values combined in
// that fixed order (no partials buffer, no fold), carried by the loop (each assigned where it
// is combined) and stored once after the loop.

func.func @colvec(%w: tensor<37x100xbf16>, %g: tensor<100xbf16>) -> (tensor<37xf32>, tensor<37xbf16>, tensor<100xf32>) {
  %c, %l = coda.elementwise [37, 100] whole rows ins(%w, %g : tensor<37x100xbf16>, tensor<100xbf16>) -> (tensor<37xf32>, tensor<37xbf16>) {
  ^bb0(%wt: tensor<37x100xbf16>, %gv: tensor<100xbf16>):
    %x = coda.load %wt : tensor<37x100xbf16> -> !coda.tile<37x100xf32>
    %xg = coda.scale %x, %gv cols : !coda.tile<37x100xf32>, tensor<100xbf16>
    %pc = coda.reduce sum %xg dim 1 : !coda.tile<37x100xf32> -> !coda.partials<rows, 37, sum>
    %pl = coda.reduce lse %x dim 1 : !coda.tile<37x100xf32> -> !coda.partials<rows, 37, lse>
    coda.yield %pc, %pl : !coda.partials<rows, 37, sum>, !coda.partials<rows, 37, lse>
  }
  %r = coda.elementwise [37, 100] whole cols ins(%w : tensor<37x100xbf16>) -> tensor<100xf32> {
  ^bb0(%wt: tensor<37x100xbf16>):
    %x = coda.load %wt : tensor<37x100xbf16> -> !coda.tile<37x100xf32>
    %p = coda.reduce max %x dim 0 : !coda.tile<37x100xf32> -> !coda.partials<cols, 100, max>
    coda.yield %p : !coda.partials<cols, 100, max>
  }
  func.return %c, %l, %r : tensor<37xf32>, tensor<37xbf16>, tensor<100xf32>
}

// CHECK-LABEL: def _colvec_k0_elementwise(wt_ptr, gv_ptr, c_ptr, l_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
// CHECK-NEXT:      pid_m = tl.program_id(0)
// CHECK-NEXT:      offs_m = pid_m * BM + tl.arange(0, BM)
// CHECK-NEXT:      mask_m = offs_m < M
// CHECK-NEXT:      # whole rows: the column tiles in order
// CHECK-NEXT:      whole0 = tl.full((BM,), 0.0, tl.float32)
// CHECK-NEXT:      whole1 = tl.full((BM,), -float("inf"), tl.float32)
// CHECK-NEXT:      for pid_n in range(0, tl.cdiv(N, BN)):
// CHECK-NEXT:          offs_n = pid_n * BN + tl.arange(0, BN)
// CHECK-NEXT:          mask_n = offs_n < N
// CHECK:               p_pc = tl.sum(rm, axis=1)
// CHECK-NEXT:          # combine with the previous tiles' rows partials (sum)
// CHECK-NEXT:          whole0 = whole0 + p_pc
// CHECK:               # combine with the previous tiles' rows partials (lse)
// CHECK-NEXT:          wc_max = tl.maximum(whole1, p_pl)
// CHECK-NEXT:          wc_ref = tl.where(wc_max == -float("inf"), 0.0, wc_max)
// CHECK-NEXT:          whole1 = wc_ref + tl.log(tl.exp(whole1 - wc_ref) + tl.exp(p_pl - wc_ref))
// CHECK-NEXT:      tl.store(c_ptr + offs_m, whole0, mask=mask_m)
// CHECK-NEXT:      tl.store(l_ptr + offs_m, _coda_round_bf16(whole1), mask=mask_m)

// CHECK-LABEL: def _colvec_k1_elementwise(wt_ptr, r_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
// CHECK-NEXT:      pid_n = tl.program_id(0)
// CHECK-NEXT:      offs_n = pid_n * BN + tl.arange(0, BN)
// CHECK-NEXT:      mask_n = offs_n < N
// CHECK-NEXT:      # whole cols: the row tiles in order
// CHECK-NEXT:      whole0 = tl.full((BN,), -float("inf"), tl.float32)
// CHECK-NEXT:      for pid_m in range(0, tl.cdiv(M, BM)):
// CHECK:               whole0 = tl.maximum(whole0, p_p)
// CHECK-NEXT:      cols0 = pid_n * BN + tl.arange(0, BN)
// CHECK-NEXT:      tl.store(r_ptr + cols0, whole0, mask=cols0 < 100)

// CHECK-LABEL: def colvec(w, g):
// CHECK:         _cfg, _e = _rt.launch_elementwise(_colvec_k0_elementwise, {{.*}}, M=37, N=100, bn_multiple_of=1, whole='rows')
// CHECK:         _cfg, _e = _rt.launch_elementwise(_colvec_k1_elementwise, {{.*}}, M=37, N=100, bn_multiple_of=1, whole='cols')
