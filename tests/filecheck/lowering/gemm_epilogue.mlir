// RUN: coda-opt %s -t triton | filecheck %s
// RUN: coda-opt %s -p "coda-to-triton{epilogue-subtile=256}" -t triton | filecheck %s --check-prefix=SUB
// The module layout, the mainloop splice and the tile-local primitives of a gemm epilogue.

func.func @epi(%a: tensor<37x40xbf16>, %b: tensor<48x40xbf16>, %c: tensor<37x48xbf16>, %v: tensor<48xbf16>,
               %r: tensor<37xf32>, %s: tensor<f32>, %p: tensor<12xf16>) -> (tensor<37x48xbf16>, tensor<37x48xf16>, tensor<37x48xi32>) {
  %x, %y, %j = coda.gemm %a, %b transpose_b ins(%c, %v, %r, %s, %p : tensor<37x48xbf16>, tensor<48xbf16>, tensor<37xf32>, tensor<f32>, tensor<12xf16>)
      : tensor<37x40xbf16>, tensor<48x40xbf16> -> (tensor<37x48xbf16>, tensor<37x48xf16>, tensor<37x48xi32>) {
  ^bb0(%acc: !coda.tile<37x48xf32>, %ci: tensor<37x48xbf16>, %vi: tensor<48xbf16>, %ri: tensor<37xf32>, %si: tensor<f32>, %pi: tensor<12xf16>):
    %l = coda.load %ci : tensor<37x48xbf16> -> !coda.tile<37x48xf32>
    %t0 = coda.accumulate %acc, %ci : !coda.tile<37x48xf32>, tensor<37x48xbf16>
    %t1 = coda.scale %t0, %vi cols : !coda.tile<37x48xf32>, tensor<48xbf16>
    %t2 = coda.scale %t1, %ri rows : !coda.tile<37x48xf32>, tensor<37xf32>
    %t3 = coda.shift %t2, %si scalar : !coda.tile<37x48xf32>, tensor<f32>
    %bc = coda.broadcast %pi cols : tensor<12xf16> -> !coda.tile<37x48xf32>
    %br = coda.broadcast %ri rows : tensor<37xf32> -> !coda.tile<37x48xf32>
    %i = coda.index cols : !coda.tile<37x48xi32>
    coda.yield %t3, %bc, %i : !coda.tile<37x48xf32>, !coda.tile<37x48xf32>, !coda.tile<37x48xi32>
  }
  func.return %x, %y, %j : tensor<37x48xbf16>, tensor<37x48xf16>, tensor<37x48xi32>
}

// CHECK:      import triton.language as tl
// CHECK:      from coda_ir.runtime.gemm_launch import launch_gemm
// CHECK:      _CODA_INTERPRETING = tl.constexpr(
// CHECK:      def _coda_round_bf16(x):
// CHECK:      def _coda_tanh(x):
// CHECK:      def _coda_interleave_rows(cols, H: tl.constexpr):

// One kernel: a_ptr, b_ptr, then the epilogue's inputs and outputs, then the mainloop's parameters.
// CHECK:      @triton.jit
// CHECK-NEXT: def _epi_k0_gemm(a_ptr, b_ptr, ci_ptr, vi_ptr, ri_ptr, si_ptr, pi_ptr, x_ptr, y_ptr, j_ptr, M, N, K,
// CHECK:      for k0 in range(0, K, BK):
// CHECK:      acc = tl.dot(a, b, acc)
// CHECK:      # ---- epilogue ----
// Each result is stored right after the op that makes it.
// CHECK-NEXT: # coda.load
// With `-p coda-to-triton{epilogue-subtile=256}`, a heavy epilogue (here: a loaded tile beside acc) runs per
// column half on tiles >= 256 wide, the whole tile otherwise.
// SUB:      # ---- epilogue ----
// SUB-NEXT: if BN >= 256:
// SUB-NEXT: # sub-tiled epilogue: 2 column slices of BN // 2
// SUB-NEXT: acc_s0, acc_s1 = tl.split(tl.permute(tl.reshape(acc, (BM, 2, BN // 2)), (0, 2, 1)))
// SUB-NEXT: # -- column slice 0 of 2
// SUB-NEXT: offs_n_s0 = pid_n * BN + tl.arange(0, BN // 2)
// SUB-NEXT: mask_n_s0 = offs_n_s0 < N
// SUB:      t_t0{{[0-9]*}} = acc_s0 + tl.load(ci_ptr + rows64[:, None] * 48 + offs_n_s0[None, :], mask=mask_mn_s0, other=0).to(tl.float32)
// SUB:      # -- column slice 1 of 2
// SUB-NEXT: offs_n_s1 = pid_n * BN + 1 * (BN // 2) + tl.arange(0, BN // 2)
// SUB:      t_t0{{[0-9]*}} = acc_s1 + tl.load(ci_ptr + rows64[:, None] * 48 + offs_n_s1[None, :], mask=mask_mn_s1, other=0).to(tl.float32)
// SUB:      t_i{{[0-9]*}} = tl.broadcast_to(offs_n_s1[None, :].to(tl.int32), (BM, BN // 2))
// SUB-NEXT: tl.store(j_ptr + rows64[:, None] * 48 + offs_n_s1[None, :], t_i{{[0-9]*}}.to(tl.int32), mask=mask_mn_s1)
// SUB-NEXT: else:
// SUB-NEXT: # coda.load
// CHECK:      mask_mn = mask_m[:, None] & mask_n[None, :]
// CHECK:      rows64 = offs_m.to(tl.int64)
// CHECK-NEXT: t_l = tl.load(ci_ptr + rows64[:, None] * 48 + offs_n[None, :], mask=mask_mn, other=0).to(tl.float32)
// CHECK:      # coda.accumulate
// CHECK-NEXT: t_t0 = acc + tl.load(ci_ptr + rows64[:, None] * 48 + offs_n[None, :], mask=mask_mn, other=0).to(tl.float32)
// CHECK:      # coda.scale cols
// CHECK-NEXT: t_t1 = t_t0 * tl.load(vi_ptr + offs_n, mask=mask_n, other=0).to(tl.float32)[None, :]
// CHECK:      # coda.scale rows
// CHECK-NEXT: t_t2 = t_t1 * tl.load(ri_ptr + offs_m, mask=mask_m, other=0)[:, None]
// CHECK:      # coda.shift scalar
// CHECK-NEXT: t_t3 = t_t2 + tl.load(si_ptr)
// Stores round once to the result element type.
// CHECK-NEXT: tl.store(x_ptr + rows64[:, None] * 48 + offs_n[None, :], _coda_round_bf16(t_t3), mask=mask_mn)
// CHECK:      # coda.broadcast cols
// CHECK-NEXT: t_bc = tl.broadcast_to(tl.load(pi_ptr + offs_n % 12, mask=mask_n, other=0).to(tl.float32)[None, :], (BM, BN))
// CHECK-NEXT: tl.store(y_ptr + rows64[:, None] * 48 + offs_n[None, :], t_bc.to(tl.float16), mask=mask_mn)
// CHECK:      # coda.broadcast rows
// CHECK-NEXT: t_br = tl.broadcast_to(tl.load(ri_ptr + offs_m, mask=mask_m, other=0)[:, None], (BM, BN))
// CHECK:      # coda.index cols
// CHECK-NEXT: t_i = tl.broadcast_to(offs_n[None, :].to(tl.int32), (BM, BN))
// CHECK-NEXT: tl.store(j_ptr + rows64[:, None] * 48 + offs_n[None, :], t_i.to(tl.int32), mask=mask_mn)

// The host function: same name, tensors in argument order, checks, allocation, one launch.
// CHECK:      def epi(a, b, c, v, r, s, p):
// CHECK-NEXT: """Host function for @epi: 1 kernel launch(es)."""
// CHECK-NEXT: _rt.check_arguments('epi', (a, b, c, v, r, s, p), _SIG_epi)
// CHECK:      _cfg, _e = launch_gemm(_epi_k0_gemm, a, b, lambda _cfg: (c, v, r, s, p, torch.empty((37, 48), dtype=torch.bfloat16, device=_dev), torch.empty((37, 48), dtype=torch.float16, device=_dev), torch.empty((37, 48), dtype=torch.int32, device=_dev)), M=37, N=48, K=40, transpose_a=False, transpose_b=True, interleave=0, bn_multiple_of=1, key='_epi_k0_gemm:{{[0-9a-f]+}}', tuning_group='epilogue-half-tiles=8')
// CHECK-NEXT: x, y, j = _e[5:]
// CHECK-NEXT: return (x, y, j)
