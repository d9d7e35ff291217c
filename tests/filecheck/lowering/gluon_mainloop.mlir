// RUN: coda-opt %s -p "coda-plan-mainloop{mainloop=gluon}" -t triton 2>/dev/null | filecheck %s
// The Gluon kernel of a gemm with a #coda.mainloop (lowering/gluon.py), emitted beside its tl
// kernel: fixed producer / MMA partitions, the epilogue partition printed by the tl kernel's
// epilogue emitter on row sub-tiles of the hand-off buffer, and the launch that names both.

func.func @residual(%a: tensor<64x128xbf16>, %b: tensor<256x128xbf16>, %c: tensor<64x256xbf16>, %w: tensor<256xbf16>)
    -> (tensor<64x256xbf16>, !coda.partials<rows, 64, sum>) {
  %y, %p = coda.gemm %a, %b transpose_b ins(%c, %w : tensor<64x256xbf16>, tensor<256xbf16>) : tensor<64x128xbf16>, tensor<256x128xbf16> -> (tensor<64x256xbf16>, !coda.partials<rows, 64, sum>) {
  ^bb0(%acc: !coda.tile<64x256xf32>, %ci: tensor<64x256xbf16>, %wi: tensor<256xbf16>):
    %t = coda.accumulate %acc, %ci : !coda.tile<64x256xf32>, tensor<64x256xbf16>
    %r = coda.map %t : !coda.tile<64x256xf32> -> !coda.tile<64x256xf32> {
    ^bb0(%v: f32):
      %h = arith.truncf %v : f32 to bf16
      %f = arith.extf %h : bf16 to f32
      coda.yield %f : f32
    }
    %s = coda.reduce sumsq %r dim 1 : !coda.tile<64x256xf32> -> !coda.partials<rows, 64, sum>
    coda.yield %t, %s : !coda.tile<64x256xf32>, !coda.partials<rows, 64, sum>
  }
  func.return %y, %p : tensor<64x256xbf16>, !coda.partials<rows, 64, sum>
}

func.func @columns(%a: tensor<64x128xbf16>, %b: tensor<128x256xbf16>, %c: tensor<64x256xbf16>) -> (tensor<64x256xbf16>, !coda.partials<cols, 256, sum>) {
  %y, %p = coda.gemm %a, %b ins(%c : tensor<64x256xbf16>) : tensor<64x128xbf16>, tensor<128x256xbf16> -> (tensor<64x256xbf16>, !coda.partials<cols, 256, sum>) {
  ^bb0(%acc: !coda.tile<64x256xf32>, %ci: tensor<64x256xbf16>):
    %l = coda.load %ci : tensor<64x256xbf16> -> !coda.tile<64x256xf32>
    %m = coda.map %acc, %l : (!coda.tile<64x256xf32>, !coda.tile<64x256xf32>) -> !coda.tile<64x256xf32> {
    ^bb0(%u: f32, %v: f32):
      %w = arith.mulf %u, %v : f32
      coda.yield %w : f32
    }
    %s = coda.reduce sum %m dim 0 : !coda.tile<64x256xf32> -> !coda.partials<cols, 256, sum>
    coda.yield %m, %s : !coda.tile<64x256xf32>, !coda.partials<cols, 256, sum>
  }
  func.return %y, %p : tensor<64x256xbf16>, !coda.partials<cols, 256, sum>
}

// The tl kernels stay (the interpreter's and every non-Hopper path).
// CHECK:      def _residual_k0_gemm(a_ptr, b_ptr, ci_ptr, wi_ptr, y_ptr, p_ptr, M, N, K,
// CHECK:      def _columns_k0_gemm(a_ptr, b_ptr, ci_ptr, y_ptr, p_ptr, M, N, K,

// The Gluon section is defined only where the installed Triton has Gluon.
// CHECK:      _CODA_GLUON = hasattr(gl, "warp_specialize")
// CHECK:      if _CODA_GLUON:
// CHECK:          def _coda_gl_producer(
// CHECK:          def _coda_gl_mma(
// CHECK:                  acc = warpgroup_mma(a, b_bufs.index(s).permute((1, 0)), acc, is_async=True)

// accumulate_first: the MMA warpgroups add the residual tile (TMA-loaded by the epilogue partition).
// CHECK:          def _residual_k0_gemm_ws_mma0(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, a_desc, b_desc, r_desc, ci_ptr, wi_ptr, y_ptr, p_ptr, M, N, K):
// CHECK-NEXT:         _coda_gl_mma(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, M, N, K, 128, 256, 64, 3, True, 8, 0, True)
// CHECK:          def _residual_k0_gemm_ws_epilogue(
// CHECK:              BM: gl.constexpr = 16
// CHECK:              EPI_LAYOUT: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [2, 1], [1, 0])
// CHECK:                  mbarrier.expect(acc_empty, r_desc.block_type.nbytes)
// CHECK-NEXT:             _coda_tma_load(r_desc, [first_m * 128, first_n * 256], acc_empty, c_smem)
// CHECK:                  mbarrier.wait(acc_ready, j & 1)
// CHECK-NEXT:             for sub in gl.static_range(8):
// CHECK:                      acc = c_smem.slice(sub * BM, BM).load(EPI_LAYOUT).to(gl.float32)
// The accumulate is not printed: its result is the handed-over sum.
// CHECK-NOT:                  coda.accumulate
// CHECK:                      tl.store(y_ptr + rows64[:, None] * 256 + offs_n[None, :], _coda_round_bf16(acc), mask=mask_mn)
// Row partials complete per sub-tile.
// CHECK:                      tl.store(p_ptr + rows64 * tl.cdiv(N, BN) + pid_n, p_s, mask=mask_m)
// CHECK:                  _coda_partition_barrier()
// CHECK:                      _coda_tma_load(r_desc, [next_m * 128, next_n * 256], acc_empty, c_smem)
// CHECK:          def _residual_k0_gemm_ws(a_desc, b_desc, r_desc, ci_ptr, wi_ptr, y_ptr, p_ptr, M, N, K, HANDOFF_LAYOUT: gl.constexpr):
// CHECK:              c_smem = gl.allocate_shared_memory(gl.bfloat16, [128, 256], HANDOFF_LAYOUT)
// CHECK:              gl.warp_specialize([(_residual_k0_gemm_ws_mma0, args), (_residual_k0_gemm_ws_mma1, args), (_residual_k0_gemm_ws_producer, args), (_residual_k0_gemm_ws_epilogue, args)], [4, 1, 2], [168, 24, 176])

// f32 hand-off, column partials carried across the sub-tiles in order and stored once a tile.
// CHECK:          def _columns_k0_gemm_ws_epilogue(
// CHECK:              BM: gl.constexpr = 8
// CHECK:                  colp1 = gl.full([BN], 0.0, gl.float32, layout=gl.SliceLayout(0, EPI_LAYOUT))
// CHECK:                  for sub in gl.static_range(16):
// CHECK:                          colp1 = colp1 + p_s
// CHECK:                  mbarrier.arrive(acc_empty)
// CHECK-NEXT:             # column partials [L, tiles_m] at [n, pid_m], summed over the sub-tiles in order
// CHECK-NEXT:             tl.store(p_ptr + offs_n.to(tl.int64) * tl.cdiv(M, 128) + pid_m, colp1, mask=mask_n)
// CHECK:              c_smem = gl.allocate_shared_memory(gl.float32, [128, 256], HANDOFF_LAYOUT)
// CHECK:      else:
// CHECK-NEXT:     _residual_k0_gemm_ws = None
// CHECK-NEXT:     _columns_k0_gemm_ws = None

// The launches pass the record; launch_gemm runs the Gluon kernel where the machine can.
// CHECK:      launch_gemm(_residual_k0_gemm, a, b, {{.*}} mainloop=_rt.GluonMainloop(_residual_k0_gemm_ws, 128, 256, 64, 3, 'bf16', 0), key=
// CHECK:      launch_gemm(_columns_k0_gemm, a, b, {{.*}} mainloop=_rt.GluonMainloop(_columns_k0_gemm_ws, 128, 256, 32, 4, 'f32', -1), key=
