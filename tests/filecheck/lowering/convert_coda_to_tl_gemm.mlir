// RUN: coda-opt %s -p coda-legalize,convert-coda-to-tl --split-input-file | filecheck %s
// RUN: coda-opt %s -p "coda-legalize,convert-coda-to-tl{epilogue-subtile=64}" --split-input-file | filecheck %s --check-prefix=SUB
// RUN: coda-opt %s -p "coda-legalize,convert-coda-to-tl{half-tile-io=false}" --split-input-file | filecheck %s --check-prefix=SCATTER
// RUN: not coda-opt %s -p convert-coda-to-tl --split-input-file 2>&1 | filecheck %s --check-prefix=UNPROVED
// RUN: not coda-opt %s -p "coda-legalize,convert-coda-to-tl{epilogue-subtile=3}" --split-input-file 2>&1 | filecheck %s --check-prefix=OPTION

// convert-coda-to-tl builds each coda.gemm as a tl.kernel (lowering/tl_gemm.py): the template's
// parameters (sizes, strides, tile constexprs with their defaults), its body one tl.mainloop whose
// region is the epilogue, built by the epilogue builder on the tile the mainloop hands over.
// UNPROVED: error: 'coda.gemm' op convert-coda-to-tl needs the records of coda-legalize: run it first
// OPTION: coda-opt: error: convert-coda-to-tl: epilogue_subtile must be 0 (off) or a power of two >= 2, got 3

func.func @il(%a: tensor<37x40xbf16>, %w: tensor<96x40xbf16>, %r: tensor<37x96xbf16>) -> tensor<37x96xbf16> {
  %y = coda.gemm %a, %w transpose_b interleave 48 ins(%r : tensor<37x96xbf16>) : tensor<37x40xbf16>, tensor<96x40xbf16> -> tensor<37x96xbf16> {
  ^bb0(%acc: !coda.tile<37x96xf32>, %ri: tensor<37x96xbf16>):
    %x = coda.accumulate %acc, %ri : !coda.tile<37x96xf32>, tensor<37x96xbf16>
    coda.yield %x : !coda.tile<37x96xf32>
  }
  func.return %y : tensor<37x96xbf16>
}

// CHECK-LABEL: tl.kernel @_il_k0_gemm(%a_ptr: !tl.ptr<bf16>, %b_ptr: !tl.ptr<bf16>, %ri_ptr: !tl.ptr<bf16>, %y_ptr: !tl.ptr<bf16>, %M: i32, %N: i32, %K: i32, %stride_am: i32, %stride_ak: i32, %stride_bk: i32, %stride_bn: i32, %BM: i32 constexpr, %BN: i32 constexpr, %BK: i32 constexpr, %GROUP_M: i32 constexpr, %INTERLEAVE: i32 constexpr, %UPCAST: i1 constexpr, %USE_TMA: i32 constexpr = 0, %A_K_CONTIG: i1 constexpr = true, %B_K_CONTIG: i1 constexpr = true, %NUM_SMS: i32 constexpr = 1, %FLATTEN: i1 constexpr = false, %WARP_SPECIALIZE: i1 constexpr = false, %L2_PREFETCH: i1 constexpr = false, %B_PAIRED: i1 constexpr = false) {
// CHECK-NEXT:    tl.mainloop portable %a_ptr, %b_ptr params(%M, %N, %K, %stride_am, %stride_ak, %stride_bk, %stride_bn, %BM, %BN, %BK, %GROUP_M, %INTERLEAVE, %UPCAST, %USE_TMA, %A_K_CONTIG, %B_K_CONTIG, %NUM_SMS, %FLATTEN, %WARP_SPECIALIZE, %L2_PREFETCH, %B_PAIRED) :
// CHECK-NEXT:    ^bb0(%acc: tensor<?x?xf32>, %offs_m: tensor<?xi32>, %offs_n: tensor<?xi32>, %mask_m: tensor<?xi1>, %mask_n: tensor<?xi1>, %pid_m: i32, %pid_n: i32):
// CHECK-NEXT:      tl.comment "---- epilogue ----"
// CHECK-NEXT:      tl.comment "coda.accumulate"
// The accumulator's columns are the tensors' columns perm(c) (interleave 48).
// CHECK:           %cols_n = tl.call @_coda_interleave_rows(%offs_n, %{{.*}}) : tensor<?xi32>, i32 -> tensor<?xi32>
// Where the tile lies inside one interleave group (BN <= 32, a constexpr test), the residual is read
// as two contiguous half tiles 48 columns apart, else by the scatter to perm(c).
// CHECK:           %[[LIMIT:.*]] = arith.constant 32 : i32
// CHECK-NEXT:      %[[INSIDE:.*]] = tl.cmpi sle %BN, %[[LIMIT]] : i32, i32 -> i1
// CHECK-NEXT:      %ld_halves = tl.constexpr_if %[[INSIDE]] : i1 -> tensor<?x?xf32> {
// CHECK:             %half_cols = arith.addi
// CHECK:             %[[LO:.*]] = tl.load %{{.*}} mask %half_mask other
// CHECK:             %[[HI:.*]] = tl.load %{{.*}} mask %half_mask other
// CHECK-NEXT:        %[[J:.*]] = tl.join %[[LO]], %[[HI]]
// CHECK-NEXT:        %[[R:.*]] = tl.reshape %[[J]] [%BM, %BN]
// CHECK-NEXT:        %[[F:.*]] = tl.cast %[[R]] : tensor<?x?xbf16> -> tensor<?x?xf32>
// CHECK-NEXT:        tl.yield %[[F]] : tensor<?x?xf32>
// CHECK-NEXT:      } {
// CHECK:             %[[S:.*]] = tl.load %{{.*}} mask %mask_mn other
// CHECK-NEXT:        %[[SF:.*]] = tl.cast %[[S]] : tensor<?x?xbf16> -> tensor<?x?xf32>
// CHECK-NEXT:        tl.yield %[[SF]] : tensor<?x?xf32>
// CHECK-NEXT:      }
// CHECK-NEXT:      %t_x = arith.addf %acc, %ld_halves : tensor<?x?xf32>
// The store the same way: the two halves of the rounded tile, or the scatter.
// CHECK:           tl.constexpr_if %{{.*}} : i1 {
// CHECK:             %st_lo, %st_hi = tl.split
// CHECK:             tl.store %{{.*}}, %st_lo mask
// CHECK:             tl.store %{{.*}}, %st_hi mask
// CHECK:             tl.yield
// CHECK-NEXT:      } {
// CHECK:             tl.store %{{.*}} mask %mask_mn
// CHECK-NEXT:        tl.yield
// CHECK-NEXT:      }
// CHECK-NEXT:    }
// CHECK-NEXT:  }
// CHECK:       coda.gemm {{.*}} attributes {{{.*}}tl.kernel = @_il_k0_gemm{{.*}}}

// half-tile-io=false: the scatter only.
// SCATTER-LABEL: tl.kernel @_il_k0_gemm(
// SCATTER-NOT:   tl.constexpr_if
// SCATTER:       tl.load %{{.*}} mask %mask_mn other
// SCATTER-NOT:   tl.constexpr_if
// SCATTER:       coda.gemm

// -----

// A heavy epilogue (the loaded tile beside the accumulator and the product: 3 tiles at once) with
// epilogue-subtile=64: on tiles at least 64 wide, once per column half (each on its own columns,
// row vectors loaded once, the halves' row partials added in order), the whole tile otherwise.
func.func @heavy(%a: tensor<37x40xf32>, %w: tensor<40x64xf32>, %x: tensor<37x64xf32>, %r: tensor<37xf32>) -> (tensor<37x64xf32>, !coda.partials<rows, 37, sum>) {
  %y, %p = coda.gemm %a, %w ins(%x, %r : tensor<37x64xf32>, tensor<37xf32>) : tensor<37x40xf32>, tensor<40x64xf32> -> (tensor<37x64xf32>, !coda.partials<rows, 37, sum>) {
  ^bb0(%acc: !coda.tile<37x64xf32>, %xi: tensor<37x64xf32>, %ri: tensor<37xf32>):
    %t = coda.load %xi : tensor<37x64xf32> -> !coda.tile<37x64xf32>
    %s = coda.scale %t, %ri rows : !coda.tile<37x64xf32>, tensor<37xf32>
    %m = coda.map %acc, %s : (!coda.tile<37x64xf32>, !coda.tile<37x64xf32>) -> !coda.tile<37x64xf32> {
    ^bb0(%u: f32, %v: f32):
      %w2 = arith.mulf %u, %v : f32
      coda.yield %w2 : f32
    }
    %q = coda.reduce sum %m dim 1 : !coda.tile<37x64xf32> -> !coda.partials<rows, 37, sum>
    coda.yield %m, %q : !coda.tile<37x64xf32>, !coda.partials<rows, 37, sum>
  }
  func.return %y, %p : tensor<37x64xf32>, !coda.partials<rows, 37, sum>
}

// fp32 operands: the mainloop multiplies in IEEE fp32.
// CHECK-LABEL: tl.kernel @_heavy_k0_gemm(
// CHECK:         tl.mainloop portable {{.*}} ieee :
// CHECK-NOT:     tl.constexpr_if
// CHECK:         tl.comment "coda.reduce sum dim 1"

// SUB-LABEL: tl.kernel @_heavy_k0_gemm(
// SUB:         tl.comment "---- epilogue ----"
// SUB-NEXT:    %[[T:.*]] = arith.constant 64 : i32
// SUB-NEXT:    %[[WIDE:.*]] = tl.cmpi sge %BN, %[[T]] : i32, i32 -> i1
// SUB-NEXT:    tl.constexpr_if %[[WIDE]] : i1 {
// SUB-NEXT:      tl.comment "sub-tiled epilogue: 2 column slices of BN // 2"
// SUB:           %acc_s0, %acc_s1 = tl.split
// SUB:           tl.comment "-- column slice 0 of 2"
// SUB:           %offs_n_s0 = arith.addi
// SUB:           %mask_n_s0 = tl.cmpi slt %offs_n_s0
// The row vector, loaded once for both slices.
// SUB:           %rv = tl.load
// SUB:           tl.comment "-- column slice 1 of 2"
// SUB-NOT:       tl.comment "store partials
// SUB:           tl.comment "-- row partials of the slices, combined in slice order"
// SUB-NEXT:      %pc = arith.addf %{{.*}}, %{{.*}} : tensor<?xf32>
// SUB-NEXT:      tl.comment "store partials [M, tiles_n] at [m, pid_n]"
// SUB:           tl.store %{{.*}}, %pc mask %mask_m
// SUB-NEXT:      tl.yield
// SUB-NEXT:    } {
// SUB-NEXT:      tl.comment "coda.load"
// SUB:           tl.yield
// SUB-NEXT:    }
