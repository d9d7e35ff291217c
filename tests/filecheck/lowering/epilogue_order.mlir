// RUN: coda-opt %s -t triton | filecheck %s
// epilogue_schedule on the RMSNorm backward + residual gradient epilogue (the derived LLaMA
// block's QKV / gate-up dgrad): the 2-output map makes dn (the residual gradient's input) at
// the accumulate that reads it, which is stored; only then is wg = acc * (x rstd) computed (one
// scalar op, x rstd kept from the first step) and reduced over the rows into the weight
// gradient's column partials (issue 11, bench/RESULTS.md 2026-11-25 session 9).

func.func @norm_bwd(%dy: tensor<37x96xbf16>, %w: tensor<70x96xbf16>, %x: tensor<37x70xbf16>, %g: tensor<70xbf16>,
    %rstd: tensor<37xf32>, %dot: tensor<37xf32>, %dres: tensor<37x70xbf16>) -> (!coda.partials<cols, 70, sum>, tensor<37x70xbf16>) {
  %r:2 = coda.gemm %dy, %w transpose_b ins(%x, %g, %rstd, %dot, %dres : tensor<37x70xbf16>, tensor<70xbf16>, tensor<37xf32>, tensor<37xf32>, tensor<37x70xbf16>)
      : tensor<37x96xbf16>, tensor<70x96xbf16> -> (!coda.partials<cols, 70, sum>, tensor<37x70xbf16>) {
  ^bb0(%acc: !coda.tile<37x70xf32>, %xt: tensor<37x70xbf16>, %gt: tensor<70xbf16>, %rt: tensor<37xf32>, %dt: tensor<37xf32>, %rest: tensor<37x70xbf16>):
    %xl = coda.load %xt : tensor<37x70xbf16> -> !coda.tile<37x70xf32>
    %gb = coda.broadcast %gt cols : tensor<70xbf16> -> !coda.tile<37x70xf32>
    %rb = coda.broadcast %rt rows : tensor<37xf32> -> !coda.tile<37x70xf32>
    %db = coda.broadcast %dt rows : tensor<37xf32> -> !coda.tile<37x70xf32>
    %dn, %wg = coda.map %acc, %xl, %gb, %rb, %db : (!coda.tile<37x70xf32>, !coda.tile<37x70xf32>, !coda.tile<37x70xf32>, !coda.tile<37x70xf32>, !coda.tile<37x70xf32>) -> (!coda.tile<37x70xf32>, !coda.tile<37x70xf32>) {
    ^bb0(%e0: f32, %xv: f32, %gv: f32, %rv: f32, %dv: f32):
      %ag = arith.mulf %e0, %gv : f32
      %xh = arith.mulf %xv, %rv : f32
      %k = arith.constant 0.015625 : f32
      %dk = arith.mulf %dv, %k : f32
      %c = arith.mulf %xh, %dk : f32
      %s = arith.subf %ag, %c : f32
      %d = arith.mulf %rv, %s : f32
      %wv = arith.mulf %e0, %xh : f32
      coda.yield %d, %wv : f32, f32
    }
    %dw = coda.reduce sum %wg dim 0 : !coda.tile<37x70xf32> -> !coda.partials<cols, 70, sum>
    %dx = coda.accumulate %dn, %rest : !coda.tile<37x70xf32>, tensor<37x70xbf16>
    coda.yield %dw, %dx : !coda.partials<cols, 70, sum>, !coda.tile<37x70xf32>
  }
  func.return %r#0, %r#1 : !coda.partials<cols, 70, sum>, tensor<37x70xbf16>
}

// CHECK-LABEL: def _norm_bwd_k0_gemm(
// CHECK:      # ---- epilogue ----
// CHECK:      # coda.broadcast rows
// CHECK:      # coda.broadcast rows
// CHECK-NEXT: t_db = tl.broadcast_to(
// CHECK-NEXT: # coda.map results 0
// CHECK-NEXT: s = acc * t_gb
// CHECK-NEXT: s0 = t_xl * t_rb
// CHECK-NEXT: s1 = t_db * 0.015625
// CHECK-NEXT: s2 = s0 * s1
// CHECK-NEXT: s3 = s - s2
// CHECK-NEXT: t_dn = t_rb * s3
// CHECK-NEXT: # coda.accumulate
// CHECK-NEXT: t_dx = t_dn + tl.load(rest_ptr + rows64[:, None] * 70 + offs_n[None, :], mask=mask_mn, other=0).to(tl.float32)
// CHECK-NEXT: tl.store(r_ptr0 + rows64[:, None] * 70 + offs_n[None, :], _coda_round_bf16(t_dx), mask=mask_mn)
// CHECK-NEXT: # coda.map results 1
// CHECK-NEXT: t_wg = acc * s0
// CHECK-NEXT: # coda.reduce sum dim 0
// CHECK-NEXT: rm = tl.where(mask_mn, t_wg, 0.0)
// CHECK-NEXT: p_dw = tl.sum(rm, axis=0)
// CHECK-NEXT: # store partials [L, tiles_m] at [n, pid_m]
// CHECK-NEXT: tl.store(r_ptr + offs_n.to(tl.int64) * tl.cdiv(M, BM) + pid_m, p_dw, mask=mask_n)
// CHECK-NEXT: else:
