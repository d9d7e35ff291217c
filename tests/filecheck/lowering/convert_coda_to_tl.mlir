// RUN: coda-opt %s -p coda-legalize,convert-coda-to-tl --split-input-file | filecheck %s
// convert-coda-to-tl names every kernel (`tl.kernel = @name` on the coda op) and builds the
// tl.kernel of each coda.fold before its function: partials folded over tiles in a fixed order,
// the body as arith/math ops on [BLOCK] tensors, rank-0 results summed in two fixed stages.
// (Elementwise kernels: convert_coda_to_tl_elementwise.mlir.)

func.func @loss(%lse: !coda.partials<rows, 37, lse>, %t: tensor<37xbf16>, %s: tensor<f32>) -> (tensor<37xbf16>, tensor<f32>) {
  %row, %total = coda.fold %lse : !coda.partials<rows, 37, lse> ins(%t, %s : tensor<37xbf16>, tensor<f32>) -> (tensor<37xbf16>, tensor<f32>) {
  ^bb0(%a: f32, %x: f32, %sc: f32):
    %d = arith.subf %a, %x : f32
    %e = arith.mulf %d, %sc : f32
    coda.yield %d, %e : f32, f32
  } finalize {
  ^bb0(%sum: f32):
    %n = arith.constant 37.0 : f32
    %mean = arith.divf %sum, %n : f32
    coda.yield %mean : f32
  }
  func.return %row, %total : tensor<37xbf16>, tensor<f32>
}

// CHECK:      tl.kernel @_loss_k0_fold(%lse_ptr: !tl.ptr<f32>, %t_ptr: !tl.ptr<bf16>, %s_ptr: !tl.ptr<f32>, %row_ptr: !tl.ptr<bf16>, %total_ptr: !tl.ptr<f32>, %L: i32, %T0: i32, %WORK: !tl.ptr<f64>, %TICKET: !tl.ptr<i32>, %NPROG: i32, %BLOCK: i32 constexpr, %BT: i32 constexpr, %PB: i32 constexpr) {
// CHECK:        %pid = tl.program_id 0 -> i32
// CHECK:        %rows = arith.addi %{{.*}}, %{{.*}} : tensor<?xi32>
// CHECK:        %mask = tl.cmpi slt %rows, %{{.*}} : tensor<?xi32>, tensor<?xi32> -> tensor<?xi1>
// The log-sum-exp of the tiles: their maximum, then the sum of exp relative to it.
// CHECK:        %acc = scf.for %t0 = %{{.*}} to %T0 step %BT iter_args(%{{.*}} = %{{.*}}) -> (tensor<?x?xf32>) : i32 {
// CHECK:          %chunk = tl.load
// CHECK:          arith.maximumf
// CHECK:        %folded = tl.reduce max %acc axis 1 : tensor<?x?xf32> -> tensor<?xf32>
// CHECK:        %fref = tl.where
// CHECK:        %fsum = scf.for
// CHECK:          math.exp
// CHECK:          arith.addf
// CHECK:        tl.reduce sum %fsum axis 1
// CHECK:        math.log
// The inputs: bf16 rows widened to fp32, the 0-d input loaded once.
// CHECK:        %[[T:.*]] = tl.load %{{.*}} mask %mask other %{{.*}} -> tensor<?xbf16>
// CHECK-NEXT:   %[[TF:.*]] = tl.cast %[[T]] : tensor<?xbf16> -> tensor<?xf32>
// CHECK-NEXT:   %[[S:.*]] = tl.load %s_ptr : !tl.ptr<f32> -> f32
// The body on [BLOCK] tensors; the bf16 store rounds to nearest even.
// CHECK-NEXT:   %[[D:.*]] = arith.subf %{{.*}}, %[[TF]] : tensor<?xf32>
// CHECK-NEXT:   %[[SS:.*]] = tl.splat %[[S]] : f32 -> tensor<?xf32>
// CHECK-NEXT:   %[[E:.*]] = arith.mulf %[[D]], %[[SS]] : tensor<?xf32>
// CHECK:        %[[R:.*]] = tl.call @_coda_round_bf16(%[[D]]) : tensor<?xf32> -> tensor<?xbf16>
// CHECK-NEXT:   tl.store %{{.*}}, %[[R]] mask %mask
// The rank-0 result: a float64 per-block total, a ticket, the last program adds the totals.
// CHECK:        %[[W:.*]] = tl.where %mask, %[[E]], %{{.*}}
// CHECK-NEXT:   %[[W64:.*]] = tl.cast %[[W]] : tensor<?xf32> -> tensor<?xf64>
// CHECK-NEXT:   %block1 = tl.reduce sum %[[W64]] axis 0 : tensor<?xf64> -> f64
// CHECK:        tl.store %{{.*}}, %block1 : !tl.ptr<f64>, f64
// CHECK-NEXT:   tl.debug_barrier
// CHECK:        %ticket = tl.atomic_add %TICKET, %{{.*}} sem acq_rel scope gpu : !tl.ptr<i32>, i32 -> i32
// CHECK:        scf.if
// CHECK:          tl.load {{.*}} volatile :
// CHECK:          %total1 = tl.cast %{{.*}} : f64 -> f32
// CHECK:          arith.divf %total1, %{{.*}} : f32
// CHECK:          tl.store %total_ptr, %{{.*}} : !tl.ptr<f32>, f32
// CHECK:      func.func @loss
// CHECK:        coda.fold {{.*}} {tl.kernel = @_loss_k0_fold}

// -----

// Scalar bodies: expansions (log10 by log2, tanh by the prelude's _coda_tanh), a constant
// expression kept scalar, a math function of constants on 0-d tensors.
func.func @body(%p: !coda.partials<rows, 8, sum>) -> tensor<8xf32> {
  %r = coda.fold %p : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
  ^bb0(%x: f32):
    %a = math.log10 %x : f32
    %b = math.tanh %a : f32
    %c2 = arith.constant 2.0 : f32
    %c3 = arith.constant 3.0 : f32
    %k = arith.mulf %c2, %c3 : f32
    %ek = math.exp %k : f32
    %y = arith.mulf %b, %ek : f32
    coda.yield %y : f32
  }
  func.return %r : tensor<8xf32>
}

// CHECK-LABEL: tl.kernel @_body_k0_fold(
// CHECK:        %[[L2:.*]] = math.log2 %folded : tensor<?xf32>
// CHECK-NEXT:   %[[C:.*]] = arith.constant 3.010300e-01 : f32
// CHECK-NEXT:   %[[CS:.*]] = tl.splat %[[C]]
// CHECK-NEXT:   %[[LG:.*]] = arith.mulf %[[L2]], %[[CS]] : tensor<?xf32>
// CHECK-NEXT:   %[[TH:.*]] = tl.call @_coda_tanh(%[[LG]]) : tensor<?xf32> -> tensor<?xf32>
// CHECK:        %[[K:.*]] = arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK-NEXT:   %[[K0:.*]] = tl.full %[[K]] : f32 -> f32
// CHECK-NEXT:   %[[EK:.*]] = math.exp %[[K0]] : f32

// -----

// A launch group: one kernel whose program id ranges call the members (a fold and an elementwise
// kernel, both built here and taking their program index first) with their suffixed parameters.
func.func @group(%a: tensor<8x16xf32>, %w: tensor<32x16xf32>) -> (tensor<8xf32>, tensor<32xf32>) {
  %p = coda.elementwise [8, 16] ins(%a : tensor<8x16xf32>) -> !coda.partials<rows, 8, sum> {
  ^bb0(%at: tensor<8x16xf32>):
    %t = coda.load %at : tensor<8x16xf32> -> !coda.tile<8x16xf32>
    %s = coda.reduce sumsq %t dim 1 : !coda.tile<8x16xf32> -> !coda.partials<rows, 8, sum>
    coda.yield %s : !coda.partials<rows, 8, sum>
  }
  %r, %c = coda.launch_group -> (tensor<8xf32>, tensor<32xf32>) {
    %r0 = coda.fold %p : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
    ^bb0(%x: f32):
      %q = math.rsqrt %x : f32
      coda.yield %q : f32
    }
    %c0 = coda.elementwise [32, 16] whole rows ins(%w : tensor<32x16xf32>) -> tensor<32xf32> {
    ^bb0(%wt: tensor<32x16xf32>):
      %t = coda.load %wt : tensor<32x16xf32> -> !coda.tile<32x16xf32>
      %s = coda.reduce sum %t dim 1 : !coda.tile<32x16xf32> -> !coda.partials<rows, 32, sum>
      coda.yield %s : !coda.partials<rows, 32, sum>
    }
    coda.yield %r0, %c0 : tensor<8xf32>, tensor<32xf32>
  }
  func.return %r, %c : tensor<8xf32>, tensor<32xf32>
}

// CHECK-LABEL: tl.kernel @_group_k0_elementwise(%at_ptr: !tl.ptr<f32>, %p_ptr: !tl.ptr<f32>, %M: i32, %N: i32, %BM: i32 constexpr, %BN: i32 constexpr) {
// CHECK-NEXT:    %pid = tl.program_id 0 -> i32
// CHECK-LABEL: tl.kernel @_group_k1_fold(%pid: i32, %p_ptr: !tl.ptr<f32>, %r0_ptr: !tl.ptr<f32>, %L: i32, %T0: i32, %BLOCK: i32 constexpr, %BT: i32 constexpr, %PB: i32 constexpr) {
// CHECK-NOT:   tl.program_id
// CHECK:       math.rsqrt
// CHECK-LABEL: tl.kernel @_group_k2_elementwise(%pid: i32, %wt_ptr: !tl.ptr<f32>, %c0_ptr: !tl.ptr<f32>, %M: i32, %N: i32, %BM: i32 constexpr, %BN: i32 constexpr) {
// CHECK-NOT:   tl.program_id
// CHECK:       scf.for %pid_n =
// The group kernel's parameters are the members' with their index (xDSL drops a `_0` suffix
// from an SSA name hint, so the name is kept with `as`).
// CHECK-LABEL: tl.kernel @_group_g0_launch_group(%p_ptr as p_ptr_0: !tl.ptr<f32>, %r0_ptr as r0_ptr_0: !tl.ptr<f32>, %L as L_0: i32, %T0 as T0_0: i32, %wt_ptr as wt_ptr_1: !tl.ptr<f32>, %c0_ptr as c0_ptr_1: !tl.ptr<f32>, %M as M_1: i32, %N as N_1: i32, %END0: i32, %END1: i32, %BLOCK as BLOCK_0: i32 constexpr, %BT as BT_0: i32 constexpr, %PB as PB_0: i32 constexpr, %BM as BM_1: i32 constexpr, %BN as BN_1: i32 constexpr) {
// CHECK:         %[[PID:.*]] = tl.program_id 0 -> i32
// CHECK-NEXT:    %[[C0:.*]] = tl.cmpi slt %[[PID]], %{{.*}} : i32, i32 -> i1
// CHECK-NEXT:    scf.if %[[C0]] {
// CHECK-NEXT:      tl.call @_group_k1_fold(%[[PID]], {{.*}})
// CHECK-NEXT:    } else {
// CHECK-NEXT:      %[[C1:.*]] = tl.cmpi slt %[[PID]], %{{.*}} : i32, i32 -> i1
// CHECK-NEXT:      scf.if %[[C1]] {
// CHECK-NEXT:        %[[START:.*]] = arith.subi %[[PID]], %{{.*}} : i32
// CHECK-NEXT:        tl.call @_group_k2_elementwise(%[[START]], {{.*}})
// CHECK:       coda.elementwise {{.*}} attributes {tl.kernel = @_group_k0_elementwise}
// CHECK:       coda.launch_group {{.*}} attributes {tl.kernel = @_group_g0_launch_group}
