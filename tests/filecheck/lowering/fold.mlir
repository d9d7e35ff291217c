// RUN: coda-opt %s -t triton | filecheck %s
// coda.fold: partials folded over tiles in a fixed order (sum, max, log-sum-exp), the body mapped
// per row, rank-0 results as per-block totals that the program holding the last ticket adds in
// block order, then the finalize region.

func.func @loss(%l: tensor<37x100xbf16>, %w: tensor<8x100xbf16>, %t: tensor<37xi32>, %s: tensor<f32>) -> (tensor<37xf32>, tensor<f32>) {
  %lse, %mx, %sel = coda.gemm %l, %w transpose_b ins(%t : tensor<37xi32>) : tensor<37x100xbf16>, tensor<8x100xbf16>
      -> (!coda.partials<rows, 37, lse>, !coda.partials<rows, 37, max>, !coda.partials<rows, 37, sum>) {
  ^bb0(%acc: !coda.tile<37x8xf32>, %ti: tensor<37xi32>):
    %p = coda.reduce lse %acc dim 1 : !coda.tile<37x8xf32> -> !coda.partials<rows, 37, lse>
    %q = coda.reduce max %acc dim 1 : !coda.tile<37x8xf32> -> !coda.partials<rows, 37, max>
    %x = coda.select %acc, %ti : !coda.tile<37x8xf32>, tensor<37xi32> -> !coda.partials<rows, 37, sum>
    coda.yield %p, %q, %x : !coda.partials<rows, 37, lse>, !coda.partials<rows, 37, max>, !coda.partials<rows, 37, sum>
  }
  %row, %total = coda.fold %lse, %mx, %sel : !coda.partials<rows, 37, lse>, !coda.partials<rows, 37, max>, !coda.partials<rows, 37, sum>
      ins(%t, %s : tensor<37xi32>, tensor<f32>) -> (tensor<37xf32>, tensor<f32>) {
  ^bb0(%a: f32, %m: f32, %x: f32, %tt: i32, %sc: f32):
    %d = arith.subf %a, %x : f32
    %e = arith.mulf %d, %sc : f32
    coda.yield %d, %e : f32, f32
  } finalize {
  ^bb0(%sum: f32):
    %n = arith.constant 37.0 : f32
    %mean = arith.divf %sum, %n : f32
    coda.yield %mean : f32
  }
  func.return %row, %total : tensor<37xf32>, tensor<f32>
}

// The kernel is built by convert-coda-to-tl (tests/filecheck/transforms/convert_coda_to_tl.mlir)
// and printed op by op; a pure value used once in its block is written in place.
// CHECK-LABEL: def _loss_k1_fold(lse_ptr, mx_ptr, sel_ptr, t_ptr, s_ptr, row_ptr, total_ptr, L, T0, T1, T2, WORK, TICKET, NPROG, BLOCK: tl.constexpr, BT: tl.constexpr, PB: tl.constexpr):
// CHECK-NEXT: pid = tl.program_id(0)
// CHECK-NEXT: rows = pid * BLOCK + tl.arange(0, BLOCK)
// CHECK-NEXT: mask = rows < L
// CHECK-NEXT: rows64 = rows.to(tl.int64)
// CHECK-NEXT: lanes = tl.arange(0, BT)
// CHECK-NEXT: mask_rows = mask[:, None]
// CHECK-NEXT: # fold partials (lse) over tiles: lanes of BT tiles, then a fixed tree
// CHECK-NEXT: lse_rows = lse_ptr + rows64[:, None] * T0
// CHECK-NEXT: acc = tl.full((BLOCK, BT), -float("inf"), tl.float32)
// CHECK-NEXT: for t0 in range(0, T0, BT):
// CHECK-NEXT:     tiles = (t0 + lanes)[None, :]
// CHECK-NEXT:     chunk = tl.load(lse_rows + tiles, mask=mask_rows & (tiles < T0), other=-float("inf"))
// CHECK-NEXT:     acc = tl.maximum(acc, chunk)
// CHECK-NEXT: folded = tl.max(acc, axis=1)
// CHECK-NEXT: fref = tl.where(folded == -float("inf"), 0.0, folded)
// CHECK-NEXT: fref_rows = fref[:, None]
// CHECK-NEXT: fsum = tl.full((BLOCK, BT), 0.0, tl.float32)
// CHECK-NEXT: for [[T:t0[0-9]*]] in range(0, T0, BT):
// CHECK-NEXT:     [[TILES:tiles[0-9]*]] = ([[T]] + lanes)[None, :]
// CHECK-NEXT:     [[CHUNK:chunk[0-9]*]] = tl.load(lse_rows + [[TILES]], mask=mask_rows & ([[TILES]] < T0), other=-float("inf"))
// CHECK-NEXT:     fsum = fsum + tl.exp([[CHUNK]] - fref_rows)
// CHECK-NEXT: [[LSE:folded[0-9]*]] = fref + tl.log(tl.sum(fsum, axis=1))
// CHECK-NEXT: # fold partials (max) over tiles: lanes of BT tiles, then a fixed tree
// CHECK:      [[MAX:folded[0-9]*]] = tl.max(acc0, axis=1)
// CHECK-NEXT: # fold partials (sum) over tiles: lanes of BT tiles, then a fixed tree
// CHECK-NEXT: sel_rows = sel_ptr + rows64[:, None] * T2
// CHECK-NEXT: acc1 = tl.full((BLOCK, BT), 0.0, tl.float32)
// CHECK-NEXT: for [[T2:t0[0-9]*]] in range(0, T2, BT):
// CHECK-NEXT:     [[TILES2:tiles[0-9]*]] = ([[T2]] + lanes)[None, :]
// CHECK-NEXT:     [[CHUNK2:chunk[0-9]*]] = tl.load(sel_rows + [[TILES2]], mask=mask_rows & ([[TILES2]] < T2), other=0.0)
// CHECK-NEXT:     acc1 = acc1 + [[CHUNK2]]
// CHECK-NEXT: [[SUM:folded[0-9]*]] = tl.sum(acc1, axis=1)
// CHECK-NEXT: [[TV:v[0-9]*]] = tl.load(t_ptr + rows, mask=mask, other=0)
// CHECK-NEXT: [[SC:v[0-9]*]] = tl.load(s_ptr)
// CHECK-NEXT: [[D:v[0-9]*]] = [[LSE]] - [[SUM]]
// CHECK-NEXT: tl.store(row_ptr + rows, [[D]], mask=mask)
// CHECK-NEXT: block1 = tl.sum(tl.where(mask, [[D]] * [[SC]], 0.0).to(tl.float64), axis=0)
// CHECK-NEXT: # rank-0 results: per-block totals, then the last program adds them in block order
// CHECK-NEXT: tl.store(WORK + (pid * 1 + 0), block1)
// CHECK-NEXT: tl.debug_barrier()
// CHECK-NEXT: ticket = tl.atomic_add(TICKET, 1, sem="acq_rel", scope="gpu")
// CHECK-NEXT: if ticket == NPROG - 1:
// CHECK-NEXT:     blocks = tl.arange(0, PB)
// CHECK-NEXT:     [[W:v[0-9]*]] = tl.load(WORK + (blocks * 1 + 0), mask=blocks < NPROG, other=0.0, volatile=True)
// CHECK-NEXT:     total1 = tl.sum([[W]], axis=0).to(tl.float32)
// CHECK-NEXT:     tl.store(total_ptr, total1 / 37.0)

// CHECK:      def loss(l, w, t, s):
// CHECK:      _e = _rt.launch_fold(_loss_k1_fold, (lse, mx, sel), (t, s), (torch.empty((37,), dtype=torch.float32, device=_dev), torch.empty((), dtype=torch.float32, device=_dev)), L=37, sums=True)
// CHECK-NEXT: row, total = _e
// the fold's inputs die here: the host drops them (coda_ir.analysis.liveness)
// CHECK-NEXT: del _e, lse, mx, sel
// CHECK-NEXT: return (row, total)
