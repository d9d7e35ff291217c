// RUN: coda-opt %s -p coda-legalize,convert-coda-to-tl --split-input-file | filecheck %s
// RUN: not coda-opt %s -p convert-coda-to-tl --split-input-file 2>&1 | filecheck %s --check-prefix=UNPROVED

// convert-coda-to-tl builds each coda.elementwise as a tl.kernel (lowering/tl_epilogue.py): the
// kernel head (program id -> [BM, BN] tile), the region's primitives in epilogue_schedule order,
// each yielded value stored right after the step that makes it. It obeys what coda-legalize
// recorded (tile constraints, coda.gathered, coda.row_exchange) and re-derives none of it:
// without those records it refuses.
// UNPROVED: error: 'coda.elementwise' op convert-coda-to-tl needs the records of coda-legalize: run it first

func.func @act(%x: tensor<37x50xbf16>, %r: tensor<37xf32>) -> (tensor<37x50xbf16>, !coda.partials<rows, 37, sum>, !coda.partials<cols, 50, max>) {
  %y, %s, %c = coda.elementwise [37, 50] ins(%x, %r : tensor<37x50xbf16>, tensor<37xf32>) -> (tensor<37x50xbf16>, !coda.partials<rows, 37, sum>, !coda.partials<cols, 50, max>) {
  ^bb0(%xi: tensor<37x50xbf16>, %ri: tensor<37xf32>):
    %t = coda.load %xi : tensor<37x50xbf16> -> !coda.tile<37x50xf32>
    %u = coda.scale %t, %ri rows : !coda.tile<37x50xf32>, tensor<37xf32>
    %m = coda.map %u : !coda.tile<37x50xf32> -> !coda.tile<37x50xf32> {
    ^bb0(%a: f32):
      %e = math.exp %a : f32
      coda.yield %e : f32
    }
    %p = coda.reduce sumsq %m dim 1 : !coda.tile<37x50xf32> -> !coda.partials<rows, 37, sum>
    %q = coda.reduce max %m dim 0 : !coda.tile<37x50xf32> -> !coda.partials<cols, 50, max>
    coda.yield %m, %p, %q : !coda.tile<37x50xf32>, !coda.partials<rows, 37, sum>, !coda.partials<cols, 50, max>
  }
  func.return %y, %s, %c : tensor<37x50xbf16>, !coda.partials<rows, 37, sum>, !coda.partials<cols, 50, max>
}

// CHECK-LABEL: tl.kernel @_act_k0_elementwise(%xi_ptr: !tl.ptr<bf16>, %ri_ptr: !tl.ptr<f32>, %y_ptr: !tl.ptr<bf16>, %s_ptr: !tl.ptr<f32>, %c_ptr: !tl.ptr<f32>, %M: i32, %N: i32, %BM: i32 constexpr, %BN: i32 constexpr) {
// The program's tile: row-major over the column tiles.
// CHECK-NEXT:    %pid = tl.program_id 0 -> i32
// CHECK-NEXT:    %num_pid_n = tl.cdiv %N, %BN : i32, i32 -> i32
// CHECK-NEXT:    %pid_m = arith.divsi %pid, %num_pid_n : i32
// CHECK-NEXT:    %pid_n = arith.remsi %pid, %num_pid_n : i32
// CHECK:         %offs_m = arith.addi
// CHECK:         %offs_n = arith.addi
// CHECK:         %mask_m = tl.cmpi slt %offs_m, %{{.*}} : tensor<?xi32>, tensor<?xi32> -> tensor<?xi1>
// CHECK:         %mask_n = tl.cmpi slt %offs_n, %{{.*}} : tensor<?xi32>, tensor<?xi32> -> tensor<?xi1>
// The bf16 tile, loaded at 64-bit row offsets and widened to fp32.
// CHECK:         tl.comment "coda.load"
// CHECK:         %mask_mn = arith.andi %{{.*}}, %{{.*}} : tensor<?x?xi1>
// CHECK-NEXT:    %rows64 = tl.cast %offs_m : tensor<?xi32> -> tensor<?xi64>
// CHECK:         %[[P:.*]] = tl.addptr %xi_ptr, %{{.*}} : !tl.ptr<bf16>, tensor<?x?xi64> -> tensor<?x?x!tl.ptr<bf16>>
// CHECK:         %[[P2:.*]] = tl.addptr %[[P]], %{{.*}} : tensor<?x?x!tl.ptr<bf16>>, tensor<?x?xi32> -> tensor<?x?x!tl.ptr<bf16>>
// CHECK:         %[[X:.*]] = tl.load %[[P2]] mask %mask_mn other %{{.*}} : tensor<?x?x!tl.ptr<bf16>>, tensor<?x?xi1>, i32 -> tensor<?x?xbf16>
// CHECK-NEXT:    %t_t = tl.cast %[[X]] : tensor<?x?xbf16> -> tensor<?x?xf32>
// The row vector as a [BM, 1] operand.
// CHECK:         %[[R:.*]] = tl.load %{{.*}} mask %mask_m other %{{.*}} -> tensor<?xf32>
// CHECK-NEXT:    %[[R2:.*]] = tl.expand_dims %[[R]] axis 1 : tensor<?xf32> -> tensor<?x?xf32>
// CHECK:         %t_u = arith.mulf %t_t, %[[R2]] : tensor<?x?xf32>
// The map's body on the tile, stored right after (rounded to bf16 to nearest even).
// CHECK:         %t_m = math.exp %t_u : tensor<?x?xf32>
// CHECK-NEXT:    %[[B:.*]] = tl.call @_coda_round_bf16(%t_m) : tensor<?x?xf32> -> tensor<?x?xbf16>
// CHECK:         tl.store %{{.*}}, %[[B]] mask %mask_mn : tensor<?x?x!tl.ptr<bf16>>, tensor<?x?xbf16>, tensor<?x?xi1>
// Row partials (sum of squares): out-of-bounds elements masked to 0, one column per tile.
// CHECK:         %[[SQ:.*]] = arith.mulf %t_m, %t_m : tensor<?x?xf32>
// CHECK:         %rm = tl.where %mask_mn, %[[SQ]], %{{.*}}
// CHECK-NEXT:    %p_p = tl.reduce sum %rm axis 1 : tensor<?x?xf32> -> tensor<?xf32>
// CHECK-NEXT:    tl.comment "store partials [M, tiles_n] at [m, pid_n]"
// CHECK-NEXT:    %[[T:.*]] = tl.cdiv %N, %BN : i32, i32 -> i32
// CHECK:         tl.store %{{.*}}, %p_p mask %mask_m
// Column partials (max): out-of-bounds elements -inf, one row per tile.
// CHECK:         %p_q = tl.reduce max %{{.*}} axis 0 : tensor<?x?xf32> -> tensor<?xf32>
// CHECK-NEXT:    tl.comment "store partials [L, tiles_m] at [n, pid_m]"
// CHECK-NEXT:    %{{.*}} = tl.cdiv %M, %BM : i32, i32 -> i32
// CHECK:         tl.store %{{.*}}, %p_q mask %mask_n
// CHECK-NEXT:  }
// CHECK:       coda.elementwise {{.*}} attributes {tl.kernel = @_act_k0_elementwise}

// -----

// 2 -> 2 with a stride and 1 -> 2, on a tile in natural columns.
func.func @rot(%x: tensor<37x48xf32>) -> (tensor<37x48xf32>, tensor<37x96xf32>) {
  %y, %z = coda.elementwise [37, 48] ins(%x : tensor<37x48xf32>) -> (tensor<37x48xf32>, tensor<37x96xf32>) {
  ^bb0(%xi: tensor<37x48xf32>):
    %t = coda.load %xi : tensor<37x48xf32> -> !coda.tile<37x48xf32>
    %r = coda.pair_map stride 4 %t : (!coda.tile<37x48xf32>) -> !coda.tile<37x48xf32> {
    ^bb0(%x0: f32, %x1: f32):
      %n = arith.negf %x1 : f32
      coda.yield %n, %x0 : f32, f32
    }
    %w2 = coda.pair_map %r : (!coda.tile<37x48xf32>) -> !coda.tile<37x96xf32> {
    ^bb0(%v: f32):
      coda.yield %v, %v : f32, f32
    }
    coda.yield %r, %w2 : !coda.tile<37x48xf32>, !coda.tile<37x96xf32>
  }
  func.return %y, %z : tensor<37x48xf32>, tensor<37x96xf32>
}

// Pairs 4 apart: the wide tile as [BM, groups, 2, 4] (permuted so that the pair is the last
// axis), split into first and second, rebuilt by join; 1 -> 2 writes a 96-wide tile.
// CHECK-LABEL: tl.kernel @_rot_k0_elementwise(
// CHECK:         %[[G:.*]] = arith.divsi %BN, %{{.*}} : i32
// CHECK:         tl.comment "coda.pair_map stride 4"
// CHECK:         %[[R4:.*]] = tl.reshape %t_t [%BM, %[[G]], %{{.*}}, %{{.*}}] : tensor<?x?xf32>, i32, i32, i32, i32 -> tensor<?x?x?x?xf32>
// CHECK-NEXT:    %pw = tl.permute %[[R4]] dims [0, 1, 3, 2] : tensor<?x?x?x?xf32> -> tensor<?x?x?x?xf32>
// CHECK-NEXT:    %pa, %pb = tl.split %pw : tensor<?x?x?x?xf32> -> (tensor<?x?x?xf32>, tensor<?x?x?xf32>)
// CHECK-NEXT:    %[[NEG:.*]] = arith.negf %pb : tensor<?x?x?xf32>
// CHECK-NEXT:    %[[J:.*]] = tl.join %[[NEG]], %pa : tensor<?x?x?xf32>, tensor<?x?x?xf32> -> tensor<?x?x?x?xf32>
// CHECK-NEXT:    %[[JP:.*]] = tl.permute %[[J]] dims [0, 1, 3, 2]
// CHECK-NEXT:    %t_r = tl.reshape %[[JP]] [%BM, %BN] : tensor<?x?x?x?xf32>, i32, i32 -> tensor<?x?xf32>
// The 96-wide tile is BN * 2 columns wide.
// CHECK:         %[[W:.*]] = arith.muli %BN, %{{.*}} : i32
// CHECK:         %cols_w96 = arith.addi
// CHECK:         %mask_w96 = tl.cmpi slt %cols_w96,
// CHECK:         %mask_mw96 = arith.andi
// CHECK:         tl.comment "coda.pair_map stride 1"
// CHECK:         %pn = tl.reshape %t_r [%BM, %{{.*}}, %{{.*}}] : tensor<?x?xf32>, i32, i32, i32 -> tensor<?x?x?xf32>
// CHECK-NEXT:    %[[J2:.*]] = tl.join %pn, %pn
// CHECK:         %t_w2 = tl.reshape %{{.*}} [%BM, %[[W]]]
// CHECK:         tl.store %{{.*}}, %t_w2 mask %mask_mw96

// -----

// SwiGLU with F = 96 over a plain load: no power-of-two tile holds a pair group, the pairs are
// read from memory at the tile's pair indices (`coda.gathered`).
func.func @swiglu96(%z: tensor<37x192xbf16>) -> tensor<37x96xbf16> {
  %h = coda.elementwise [37, 96] ins(%z : tensor<37x192xbf16>) -> tensor<37x96xbf16> {
  ^bb0(%zi: tensor<37x192xbf16>):
    %t = coda.load %zi : tensor<37x192xbf16> -> !coda.tile<37x192xf32>
    %g = coda.pair_map stride 96 %t : (!coda.tile<37x192xf32>) -> !coda.tile<37x96xf32> {
    ^bb0(%gate: f32, %up: f32):
      %r = arith.mulf %gate, %up : f32
      coda.yield %r : f32
    }
    coda.yield %g : !coda.tile<37x96xf32>
  }
  func.return %h : tensor<37x96xbf16>
}

// The tile holds pair indices p; each pair's elements are at first(p) and first(p) + 96.
// CHECK-LABEL: tl.kernel @_swiglu96_k0_elementwise(
// CHECK:         tl.comment "coda.pair_map stride 96, pairs gathered from memory"
// CHECK:         %pfirst = arith.addi %{{.*}}, %{{.*}} : tensor<?xi32>
// CHECK:         %[[F0:.*]] = tl.expand_dims %pfirst axis 0
// CHECK-NEXT:    %[[A0:.*]] = tl.addptr %{{.*}}, %[[F0]]
// CHECK:         %[[A:.*]] = tl.load %[[A0]] mask %mask_mn
// CHECK-NEXT:    %pa = tl.cast %[[A]] : tensor<?x?xbf16> -> tensor<?x?xf32>
// CHECK:         %[[F1:.*]] = arith.addi %pfirst, %{{.*}} : tensor<?xi32>
// CHECK:         %[[B:.*]] = tl.load %{{.*}} mask %mask_mn
// CHECK-NEXT:    %pb = tl.cast %[[B]] : tensor<?x?xbf16> -> tensor<?x?xf32>
// CHECK-NEXT:    %t_g = arith.mulf %pa, %pb : tensor<?x?xf32>
// CHECK:       coda.pair_map stride 96 {{.*}} attributes {coda.gathered}

// -----

// Segments of 6 columns: over a plain load, read from memory (`coda.gathered`, an scf.for over
// the segment); over a computed tile covering the whole row, exchanged by tl.gather
// (`coda.row_exchange`).
func.func @seg(%x: tensor<37x288xf32>, %v: tensor<37x48xf32>) -> (tensor<37x288xf32>, tensor<37x48xf32>) {
  %y = coda.elementwise [37, 288] ins(%x : tensor<37x288xf32>) -> tensor<37x288xf32> {
  ^bb0(%xi: tensor<37x288xf32>):
    %t = coda.load %xi : tensor<37x288xf32> -> !coda.tile<37x288xf32>
    %s = coda.segment_reduce sumsq %t width 6 : !coda.tile<37x288xf32>
    coda.yield %s : !coda.tile<37x288xf32>
  }
  %w = coda.elementwise [37, 48] ins(%v : tensor<37x48xf32>) -> tensor<37x48xf32> {
  ^bb0(%vi: tensor<37x48xf32>):
    %t = coda.load %vi : tensor<37x48xf32> -> !coda.tile<37x48xf32>
    %e = coda.map %t : !coda.tile<37x48xf32> -> !coda.tile<37x48xf32> {
    ^bb0(%a: f32):
      %x2 = arith.mulf %a, %a : f32
      coda.yield %x2 : f32
    }
    %s = coda.segment_reduce max %e width 6 : !coda.tile<37x48xf32>
    coda.yield %s : !coda.tile<37x48xf32>
  }
  func.return %y, %w : tensor<37x288xf32>, tensor<37x48xf32>
}

// Gathered from memory: an scf.for over the segment's 6 columns, the running sum carried.
// CHECK-LABEL: tl.kernel @_seg_k0_elementwise(
// CHECK:         tl.comment "coda.segment_reduce sumsq width 6, segments gathered from memory"
// CHECK:         %segstart = arith.muli
// CHECK-NEXT:    %{{.*}} = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:    %[[Z:.*]] = tl.full [%BM, %BN] %{{.*}} : i32, i32, f32 -> tensor<?x?xf32>
// CHECK:         %segacc = scf.for %segk = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %[[Z]]) -> (tensor<?x?xf32>) : i32 {
// CHECK:           %segv = tl.load %{{.*}} mask %mask_mn
// CHECK-NEXT:      %[[SQ:.*]] = arith.mulf %segv, %segv
// CHECK-NEXT:      %[[NEXT:.*]] = arith.addf %[[ACC]], %[[SQ]]
// CHECK-NEXT:      scf.yield %[[NEXT]] : tensor<?x?xf32>
// CHECK:         tl.store %{{.*}}, %segacc mask %mask_mn
// Over a computed tile covering the whole row: the segment's values fetched by tl.gather.
// CHECK-LABEL: tl.kernel @_seg_k1_elementwise(
// CHECK:         %segx = tl.where %mask_mn, %t_e, %{{.*}}
// CHECK:         %segacc = scf.for %segk = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (tensor<?x?xf32>) : i32 {
// CHECK:           %[[IDX:.*]] = tl.broadcast_to %{{.*}} [%BM, %BN] : tensor<?x?xi32>, i32, i32 -> tensor<?x?xi32>
// CHECK-NEXT:      %segv = tl.gather %segx, %[[IDX]] axis 1 : tensor<?x?xf32>, tensor<?x?xi32> -> tensor<?x?xf32>
// CHECK-NEXT:      %[[NEXT:.*]] = arith.maximumf %[[ACC]], %segv

// -----

// whole rows: the column tiles in an scf.for whose carried values are the running reductions.
func.func @rows(%w: tensor<37x100xbf16>) -> (tensor<37xf32>, tensor<37xbf16>) {
  %c, %l = coda.elementwise [37, 100] whole rows ins(%w : tensor<37x100xbf16>) -> (tensor<37xf32>, tensor<37xbf16>) {
  ^bb0(%wt: tensor<37x100xbf16>):
    %x = coda.load %wt : tensor<37x100xbf16> -> !coda.tile<37x100xf32>
    %pc = coda.reduce sum %x dim 1 : !coda.tile<37x100xf32> -> !coda.partials<rows, 37, sum>
    %pl = coda.reduce lse %x dim 1 : !coda.tile<37x100xf32> -> !coda.partials<rows, 37, lse>
    coda.yield %pc, %pl : !coda.partials<rows, 37, sum>, !coda.partials<rows, 37, lse>
  }
  func.return %c, %l : tensor<37xf32>, tensor<37xbf16>
}

// CHECK-LABEL: tl.kernel @_rows_k0_elementwise(
// CHECK-NEXT:    %pid_m = tl.program_id 0 -> i32
// CHECK:         %[[S0:.*]] = tl.full [%BM] %{{.*}} : i32, f32 -> tensor<?xf32>
// CHECK:         %[[L0:.*]] = tl.full [%BM] %{{.*}} : i32, f32 -> tensor<?xf32>
// CHECK-NEXT:    tl.comment "whole rows: the column tiles in order"
// CHECK-NEXT:    %[[TILES:.*]] = tl.cdiv %N, %BN : i32, i32 -> i32
// CHECK:         %whole0, %whole1 = scf.for %pid_n = %{{.*}} to %[[TILES]] step %{{.*}} iter_args(%[[S:.*]] = %[[S0]], %[[L:.*]] = %[[L0]]) -> (tensor<?xf32>, tensor<?xf32>) : i32 {
// CHECK:           %offs_n = arith.addi
// CHECK:           %p_pc = tl.reduce sum
// CHECK-NEXT:      tl.comment "combine with the previous tiles' rows partials (sum)"
// CHECK-NEXT:      %[[S1:.*]] = arith.addf %[[S]], %p_pc : tensor<?xf32>
// CHECK:           %wc_max = arith.maximumf %[[L]], %p_pl
// CHECK:           %[[L1:.*]] = arith.addf %wc_ref, %{{.*}} : tensor<?xf32>
// CHECK-NEXT:      scf.yield %[[S1]], %[[L1]] : tensor<?xf32>, tensor<?xf32>
// CHECK-NEXT:    }
// CHECK:         tl.store %{{.*}}, %whole0 mask %mask_m
// CHECK:         %[[R:.*]] = tl.call @_coda_round_bf16(%whole1)
// CHECK:         tl.store %{{.*}}, %[[R]] mask %mask_m
