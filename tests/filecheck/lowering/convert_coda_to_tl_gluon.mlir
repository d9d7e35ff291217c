// RUN: coda-opt %s -p "coda-plan-mainloop{mainloop=gluon},coda-legalize,convert-coda-to-tl" --split-input-file 2>/dev/null | filecheck %s

// A gemm with a #coda.mainloop record gets its Gluon kernel beside its tl kernel
// (lowering/tl_gemm.py, lower_gluon_gemm): a tl.kernel whose body is one tl.mainloop gluon_ws
// carrying the record, its region the epilogue on one row sub-tile of the hand-off buffer, built
// by the epilogue builder in the partition's layout (#tl.layout).

// Column partials: carried across the row sub-tiles (the region's argument %colp1, added to in
// order and yielded; the template stores them once per tile through the carried pointer).
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

// CHECK:       tl.kernel @_columns_k0_gemm(
// CHECK:       tl.kernel @_columns_k0_gemm_ws(%a_desc: !tl.ptr<bf16>, %b_desc: !tl.ptr<bf16>, %ci_ptr: !tl.ptr<bf16>, %y_ptr: !tl.ptr<bf16>, %p_ptr: !tl.ptr<f32>, %M: i32, %N: i32, %K: i32) {
// CHECK-NEXT:    tl.mainloop gluon_ws %a_desc, %b_desc params(%M, %N, %K) carry(%p_ptr) record #coda.mainloop<gluon_ws, bm = 128, bn = 256, bk = 32, stages = 4, handoff = f32, accumulate_first = -1, epilogue_warps = 2, sub_rows = 8, regs = [168, 24, 176]> column_lanes 32 combines ["sum"] :
// CHECK-NEXT:    ^bb0(%acc: tensor<?x?xf32>, %offs_m: tensor<?xi32>, %offs_n: tensor<?xi32>, %mask_m: tensor<?xi1>, %mask_n: tensor<?xi1>, %pid_m: i32, %pid_n: i32, %BM: i32, %BN: i32, %colp1: tensor<?xf32>):
// CHECK:           %t_m = arith.mulf %acc, %t_l : tensor<?x?xf32>
// CHECK:           %p_s = tl.reduce sum %rm axis 0 : tensor<?x?xf32> -> tensor<?xf32>
// CHECK-NEXT:      tl.comment "column partials: carried across the row sub-tiles (in sub-tile order)"
// CHECK-NEXT:      %[[SUM:.*]] = arith.addf %colp1, %p_s : tensor<?xf32>
// CHECK-NEXT:      tl.yield %[[SUM]] : tensor<?xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:  }

// -----

// accumulate_first: the MMA warpgroups add the residual tile before the hand-off; the epilogue
// has no accumulate (its result is the accumulator) and the kernel takes the residual's
// descriptor r_desc.
func.func @residual(%a: tensor<64x128xbf16>, %b: tensor<256x128xbf16>, %c: tensor<64x256xbf16>) -> tensor<64x256xbf16> {
  %y = coda.gemm %a, %b transpose_b ins(%c : tensor<64x256xbf16>) : tensor<64x128xbf16>, tensor<256x128xbf16> -> tensor<64x256xbf16> {
  ^bb0(%acc: !coda.tile<64x256xf32>, %ci: tensor<64x256xbf16>):
    %t = coda.accumulate %acc, %ci : !coda.tile<64x256xf32>, tensor<64x256xbf16>
    coda.yield %t : !coda.tile<64x256xf32>
  }
  func.return %y : tensor<64x256xbf16>
}

// CHECK-LABEL: tl.kernel @_residual_k0_gemm_ws(%a_desc: !tl.ptr<bf16>, %b_desc: !tl.ptr<bf16>, %r_desc: !tl.ptr<bf16>, %ci_ptr: !tl.ptr<bf16>, %y_ptr: !tl.ptr<bf16>, %M: i32, %N: i32, %K: i32) {
// CHECK-NEXT:    tl.mainloop gluon_ws %a_desc, %b_desc params(%M, %N, %K, %r_desc) transpose_b record #coda.mainloop<gluon_ws, {{.*}}, handoff = bf16, accumulate_first = 0, {{.*}}>
// CHECK-NEXT:    ^bb0(%acc: tensor<?x?xf32>,
// CHECK-NOT:       arith.addf
// CHECK:           tl.call @_coda_round_bf16(%acc)
// CHECK:           tl.yield
// CHECK-NEXT:    }

// -----

// A pair map: the range of its narrow columns in the epilogue layout's column slice, the narrow
// operands converted to the layout of the split wide operand at each use, the result converted
// back to the epilogue layout (one lane a pair's 8-column group here: column_lanes 1).
func.func @rope(%a: tensor<64x128xbf16>, %w: tensor<256x128xbf16>, %cos: tensor<64x8xf32>, %sin: tensor<64x8xf32>) -> tensor<64x256xbf16> {
  %y = coda.gemm %a, %w transpose_b ins(%cos, %sin : tensor<64x8xf32>, tensor<64x8xf32>) : tensor<64x128xbf16>, tensor<256x128xbf16> -> tensor<64x256xbf16> {
  ^bb0(%acc: !coda.tile<64x256xf32>, %c_: tensor<64x8xf32>, %s_: tensor<64x8xf32>):
    %c = coda.load %c_ cols_period 8 : tensor<64x8xf32> -> !coda.tile<64x128xf32>
    %s = coda.load %s_ cols_period 8 : tensor<64x8xf32> -> !coda.tile<64x128xf32>
    %r = coda.pair_map stride 8 %acc, %c, %s : (!coda.tile<64x256xf32>, !coda.tile<64x128xf32>, !coda.tile<64x128xf32>) -> !coda.tile<64x256xf32> {
    ^bb0(%x1: f32, %x2: f32, %co: f32, %si: f32):
      %a1 = arith.mulf %x1, %co : f32
      %a2 = arith.mulf %x2, %si : f32
      %y1 = arith.subf %a1, %a2 : f32
      %b1 = arith.mulf %x2, %co : f32
      %b2 = arith.mulf %x1, %si : f32
      %y2 = arith.addf %b1, %b2 : f32
      coda.yield %y1, %y2 : f32, f32
    }
    coda.yield %r : !coda.tile<64x256xf32>
  }
  func.return %y : tensor<64x256xbf16>
}

// CHECK-LABEL: tl.kernel @_rope_k0_gemm_ws(
// CHECK:           tl.mainloop gluon_ws {{.*}} column_lanes 1 combines [] :
// CHECK:           %[[R:.*]] = tl.arange 0 to %{{.*}} layout #tl.layout<slice 0> : i32 -> tensor<?xi32>
// CHECK:           %cols_w128 = arith.addi %{{.*}}, %[[R]] : tensor<?xi32>
// CHECK:           %pa, %pb = tl.split %pw
// CHECK-NEXT:      %pn = tl.reshape %t_c
// CHECK-NEXT:      %[[S:.*]] = tl.reshape %t_s
// CHECK-NEXT:      %[[C0:.*]] = tl.convert_layout %pn like %pa : tensor<?x?x?xf32>, tensor<?x?x?xf32> -> tensor<?x?x?xf32>
// CHECK-NEXT:      %{{.*}} = arith.mulf %pa, %[[C0]]
// CHECK-NEXT:      %[[C1:.*]] = tl.convert_layout %[[S]] like %pa
// CHECK-NEXT:      %{{.*}} = arith.mulf %pb, %[[C1]]
// CHECK:           %[[C2:.*]] = tl.convert_layout %pn like %pa
// CHECK:           %[[BACK:.*]] = tl.reshape %{{.*}} [%BM, %BN]
// CHECK-NEXT:      %t_r = tl.convert_layout %[[BACK]] layout #tl.layout<epilogue> : tensor<?x?xf32> -> tensor<?x?xf32>
// CHECK:           tl.yield
