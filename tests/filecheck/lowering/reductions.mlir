// RUN: coda-opt %s -t triton | filecheck %s
// coda.reduce (dims 1 and 0, every kind), coda.segment_reduce and coda.select: masked-out
// elements never contribute (0 for sums, -inf for max and lse) and partials are stored at
// [m, pid_n] (rows) or [n, pid_m] (cols).

func.func @red(%a: tensor<37x40xbf16>, %w: tensor<128x40xbf16>, %t: tensor<37xi32>)
    -> (!coda.partials<rows, 37, sum>, !coda.partials<rows, 37, sum>, !coda.partials<rows, 37, max>,
        !coda.partials<rows, 37, lse>, !coda.partials<cols, 128, sum>, tensor<37x128xf32>, !coda.partials<rows, 37, sum>) {
  %r:7 = coda.gemm %a, %w transpose_b ins(%t : tensor<37xi32>) : tensor<37x40xbf16>, tensor<128x40xbf16>
      -> (!coda.partials<rows, 37, sum>, !coda.partials<rows, 37, sum>, !coda.partials<rows, 37, max>,
          !coda.partials<rows, 37, lse>, !coda.partials<cols, 128, sum>, tensor<37x128xf32>, !coda.partials<rows, 37, sum>) {
  ^bb0(%acc: !coda.tile<37x128xf32>, %ti: tensor<37xi32>):
    %s = coda.reduce sum %acc dim 1 : !coda.tile<37x128xf32> -> !coda.partials<rows, 37, sum>
    %q = coda.reduce sumsq %acc dim 1 : !coda.tile<37x128xf32> -> !coda.partials<rows, 37, sum>
    %m = coda.reduce max %acc dim 1 : !coda.tile<37x128xf32> -> !coda.partials<rows, 37, max>
    %l = coda.reduce lse %acc dim 1 : !coda.tile<37x128xf32> -> !coda.partials<rows, 37, lse>
    %c = coda.reduce sum %acc dim 0 : !coda.tile<37x128xf32> -> !coda.partials<cols, 128, sum>
    %g = coda.segment_reduce sumsq %acc width 64 : !coda.tile<37x128xf32>
    %x = coda.select %acc, %ti : !coda.tile<37x128xf32>, tensor<37xi32> -> !coda.partials<rows, 37, sum>
    coda.yield %s, %q, %m, %l, %c, %g, %x : !coda.partials<rows, 37, sum>, !coda.partials<rows, 37, sum>, !coda.partials<rows, 37, max>,
        !coda.partials<rows, 37, lse>, !coda.partials<cols, 128, sum>, !coda.tile<37x128xf32>, !coda.partials<rows, 37, sum>
  }
  func.return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5, %r#6 : !coda.partials<rows, 37, sum>, !coda.partials<rows, 37, sum>, !coda.partials<rows, 37, max>,
      !coda.partials<rows, 37, lse>, !coda.partials<cols, 128, sum>, tensor<37x128xf32>, !coda.partials<rows, 37, sum>
}

// CHECK-LABEL: def _red_k0_gemm(
// Reductions whose tile a later tile op still reads come after that op (here the segment_reduce),
// each partial stored as soon as it is computed.
// CHECK:      # ---- epilogue ----
// CHECK-NEXT: mask_mn = mask_m[:, None] & mask_n[None, :]
// CHECK-NEXT: # coda.segment_reduce sumsq width 64
// CHECK-NEXT: seg = tl.reshape(tl.where(mask_mn, acc * acc, 0.0), (BM, BN // 64, 64))
// CHECK-NEXT: t_g = tl.reshape(tl.broadcast_to(tl.sum(seg, axis=2)[:, :, None], (BM, BN // 64, 64)), (BM, BN))
// CHECK-NEXT: rows64 = offs_m.to(tl.int64)
// CHECK-NEXT: tl.store(r_ptr4 + rows64[:, None] * 128 + offs_n[None, :], t_g, mask=mask_mn)
// CHECK-NEXT: # coda.reduce sum dim 1
// CHECK-NEXT: rm = tl.where(mask_mn, acc, 0.0)
// CHECK-NEXT: p_s = tl.sum(rm, axis=1)
// CHECK-NEXT: # store partials [M, tiles_n] at [m, pid_n]
// CHECK-NEXT: tl.store(r_ptr + rows64 * tl.cdiv(N, BN) + pid_n, p_s, mask=mask_m)
// CHECK:      # coda.reduce sumsq dim 1
// CHECK-NEXT: rm0 = tl.where(mask_mn, acc * acc, 0.0)
// CHECK-NEXT: p_q = tl.sum(rm0, axis=1)
// CHECK:      # coda.reduce max dim 1
// CHECK-NEXT: rm1 = tl.where(mask_mn, acc, -float("inf"))
// CHECK-NEXT: p_m = tl.max(rm1, axis=1)
// CHECK:      # coda.reduce lse dim 1
// CHECK-NEXT: rm2 = tl.where(mask_mn, acc, -float("inf"))
// CHECK-NEXT: lse_max = tl.max(rm2, axis=1)
// CHECK-NEXT: lse_ref = tl.where(lse_max == -float("inf"), 0.0, lse_max)
// CHECK-NEXT: p_l = lse_ref + tl.log(tl.sum(tl.exp(rm2 - lse_ref[:, None]), axis=1))
// CHECK:      # coda.reduce sum dim 0
// CHECK:      p_c = tl.sum(rm3, axis=0)
// CHECK-NEXT: # store partials [L, tiles_m] at [n, pid_m]
// CHECK-NEXT: tl.store(r_ptr3 + offs_n.to(tl.int64) * tl.cdiv(M, BM) + pid_m, p_c, mask=mask_n)
// CHECK:      # coda.select
// CHECK-NEXT: sel_idx = tl.load(ti_ptr + offs_m, mask=mask_m, other=-1)
// CHECK-NEXT: p_x = tl.sum(tl.where(mask_mn & (offs_n[None, :] == sel_idx[:, None]), acc, 0.0), axis=1)
// CHECK-NEXT: # store partials [M, tiles_n] at [m, pid_n]
// CHECK-NEXT: tl.store(r_ptr5 + rows64 * tl.cdiv(N, BN) + pid_n, p_x, mask=mask_m)

// Partials are fp32 [L, tiles], allocated per tile configuration; BN holds whole segments.
// CHECK:      def red(a, w, t):
// CHECK:      launch_gemm(_red_k0_gemm, a, w, lambda _cfg: (t, torch.empty((37, _rt.cdiv(128, _cfg.bn)), dtype=torch.float32, device=_dev),
// CHECK-SAME: torch.empty((128, _rt.cdiv(37, _cfg.bm)), dtype=torch.float32, device=_dev)
// CHECK-SAME: bn_multiple_of=64
