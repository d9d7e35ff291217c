// RUN: coda-opt %s -t triton | filecheck %s
// coda.launch_group: each member is emitted as a jit function taking its program index first;
// one group kernel splits its program ids among the members in order (END0, END1, ...: running
// program counts, runtime values) and passes each member its own constexprs; the host builds
// every member's launch description and launches once.

func.func @group(%a: tensor<8x16xf32>, %w: tensor<32x16xf32>, %g: tensor<16xf32>) -> (tensor<8xf32>, tensor<32xf32>) {
  %p = coda.gemm %a, %w transpose_b : tensor<8x16xf32>, tensor<32x16xf32> -> !coda.partials<rows, 8, sum> {
  ^bb0(%acc: !coda.tile<8x32xf32>):
    %s = coda.reduce sumsq %acc dim 1 : !coda.tile<8x32xf32> -> !coda.partials<rows, 8, sum>
    coda.yield %s : !coda.partials<rows, 8, sum>
  }
  %r, %c = coda.launch_group -> (tensor<8xf32>, tensor<32xf32>) {
    %r0 = coda.fold %p : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
    ^bb0(%x: f32):
      %q = math.rsqrt %x : f32
      coda.yield %q : f32
    }
    %c0 = coda.elementwise [32, 16] whole rows ins(%w, %g : tensor<32x16xf32>, tensor<16xf32>) -> tensor<32xf32> {
    ^bb0(%wt: tensor<32x16xf32>, %gv: tensor<16xf32>):
      %t = coda.load %wt : tensor<32x16xf32> -> !coda.tile<32x16xf32>
      %tg = coda.scale %t, %gv cols : !coda.tile<32x16xf32>, tensor<16xf32>
      %s = coda.reduce sum %tg dim 1 : !coda.tile<32x16xf32> -> !coda.partials<rows, 32, sum>
      coda.yield %s : !coda.partials<rows, 32, sum>
    }
    coda.yield %r0, %c0 : tensor<8xf32>, tensor<32xf32>
  }
  func.return %r, %c : tensor<8xf32>, tensor<32xf32>
}

// CHECK-LABEL: def _group_k1_fold(pid, p_ptr, r0_ptr, L, T0, BLOCK: tl.constexpr, BT: tl.constexpr, PB: tl.constexpr):
// CHECK-NEXT:      rows = pid * BLOCK + tl.arange(0, BLOCK)
// CHECK-LABEL: def _group_k2_elementwise(pid, wt_ptr, gv_ptr, c0_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
// CHECK-NEXT:      offs_m = pid * BM + tl.arange(0, BM)
// CHECK-LABEL: def _group_g0_launch_group(p_ptr_0, r0_ptr_0, L_0, T0_0, wt_ptr_1, gv_ptr_1, c0_ptr_1, M_1, N_1, END0, END1, BLOCK_0: tl.constexpr, BT_0: tl.constexpr, PB_0: tl.constexpr, BM_1: tl.constexpr, BN_1: tl.constexpr):
// CHECK-NEXT:      pid = tl.program_id(0)
// CHECK-NEXT:      if pid < END0:
// CHECK-NEXT:          _group_k1_fold(pid, p_ptr_0, r0_ptr_0, L_0, T0_0, BLOCK_0, BT_0, PB_0)
// CHECK-NEXT:      elif pid < END1:
// CHECK-NEXT:          _group_k2_elementwise(pid - END0, wt_ptr_1, gv_ptr_1, c0_ptr_1, M_1, N_1, BM_1, BN_1)

// CHECK-LABEL: def group(a, w, g):
// CHECK-NEXT:      """Host function for @group: 2 kernel launch(es)."""
// CHECK:           # _group_g0_launch_group: coda.launch_group, one launch of 2 kernels
// CHECK-NEXT:      #   _group_k1_fold: coda.fold over 8 rows
// CHECK-NEXT:      _g = _rt.fold_launch((p,), (), (torch.empty((8,), dtype=torch.float32, device=_dev),), L=8, sums=False)
// CHECK-NEXT:      #   _group_k2_elementwise: coda.elementwise 32x16 whole rows
// CHECK-NEXT:      _g0 = _rt.elementwise_launch(lambda _cfg: (w, g, torch.empty((32,), dtype=torch.float32, device=_dev)), M=32, N=16, bn_multiple_of=1, whole='rows', n_inputs=2)
// CHECK-NEXT:      _rt.launch_group(_group_g0_launch_group, (_g, _g0))
// CHECK-NEXT:      r, = _g.results
// CHECK-NEXT:      c, = _g0.results
// the launch descriptions always go, with the buffers no later op reads (p)
// CHECK-NEXT:      del _g, _g0, p
// CHECK-NEXT:      return (r, c)
