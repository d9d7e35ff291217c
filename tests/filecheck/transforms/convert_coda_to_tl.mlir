// RUN: coda-opt %s -p convert-coda-to-tl --split-input-file | filecheck %s
// convert-coda-to-tl names every kernel (`tl.kernel = @name` on the coda op) and builds the
// tl.kernel of each coda.fold before its function: partials folded over tiles in a fixed order,
// the body as arith/math ops on [BLOCK] tensors, rank-0 results summed in two fixed stages.

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

// CHECK:      "tl.kernel"() <{sym_name = "_loss_k0_fold", function_type = (!tl.ptr<f32>, !tl.ptr<bf16>, !tl.ptr<f32>, !tl.ptr<bf16>, !tl.ptr<f32>, i32, i32, !tl.ptr<f64>, !tl.ptr<i32>, i32, i32, i32, i32) -> ()
// CHECK-SAME: arg_names = ["lse_ptr", "t_ptr", "s_ptr", "row_ptr", "total_ptr", "L", "T0", "WORK", "TICKET", "NPROG", "BLOCK", "BT", "PB"], constexprs = #builtin.int<3>
// CHECK:        %pid = "tl.program_id"() <{axis = #builtin.int<0>}> : () -> i32
// CHECK:        %rows = arith.addi %{{.*}}, %{{.*}} : tensor<?xi32>
// CHECK:        %mask = "tl.cmpi"(%rows, %{{.*}}) <{predicate = "slt"}> : (tensor<?xi32>, tensor<?xi32>) -> tensor<?xi1>
// The log-sum-exp of the tiles: their maximum, then the sum of exp relative to it.
// CHECK:        %acc = scf.for %t0 = %{{.*}} to %T0 step %BT iter_args(%{{.*}} = %{{.*}}) -> (tensor<?x?xf32>) : i32 {
// CHECK:          %chunk = "tl.load"
// CHECK:          arith.maximumf
// CHECK:        %folded = "tl.reduce"(%acc) <{kind = "max", axis = #builtin.int<1>}> : (tensor<?x?xf32>) -> tensor<?xf32>
// CHECK:        %fref = "tl.where"
// CHECK:        %fsum = scf.for
// CHECK:          math.exp
// CHECK:          arith.addf
// CHECK:        "tl.reduce"(%fsum) <{kind = "sum", axis = #builtin.int<1>}>
// CHECK:        math.log
// The inputs: bf16 rows widened to fp32, the 0-d input loaded once.
// CHECK:        %[[T:.*]] = "tl.load"(%{{.*}}, %mask, %{{.*}}) {{.*}} -> tensor<?xbf16>
// CHECK-NEXT:   %[[TF:.*]] = "tl.cast"(%[[T]]) : (tensor<?xbf16>) -> tensor<?xf32>
// CHECK-NEXT:   %[[S:.*]] = "tl.load"(%s_ptr) {{.*}} -> f32
// The body on [BLOCK] tensors; the bf16 store rounds to nearest even.
// CHECK-NEXT:   %[[D:.*]] = arith.subf %{{.*}}, %[[TF]] : tensor<?xf32>
// CHECK-NEXT:   %[[SS:.*]] = "tl.splat"(%[[S]]) : (f32) -> tensor<?xf32>
// CHECK-NEXT:   %[[E:.*]] = arith.mulf %[[D]], %[[SS]] : tensor<?xf32>
// CHECK:        %[[R:.*]] = "tl.call"(%[[D]]) <{callee = @_coda_round_bf16}> : (tensor<?xf32>) -> tensor<?xbf16>
// CHECK-NEXT:   "tl.store"(%{{.*}}, %[[R]], %mask)
// The rank-0 result: a float64 per-block total, a ticket, the last program adds the totals.
// CHECK:        %[[W:.*]] = "tl.where"(%mask, %[[E]], %{{.*}})
// CHECK-NEXT:   %[[W64:.*]] = "tl.cast"(%[[W]]) : (tensor<?xf32>) -> tensor<?xf64>
// CHECK-NEXT:   %block1 = "tl.reduce"(%[[W64]]) <{kind = "sum", axis = #builtin.int<0>}> : (tensor<?xf64>) -> f64
// CHECK:        "tl.store"(%{{.*}}, %block1) : (!tl.ptr<f64>, f64) -> ()
// CHECK-NEXT:   "tl.debug_barrier"() : () -> ()
// CHECK:        %ticket = "tl.atomic_add"(%TICKET, %{{.*}}) <{sem = "acq_rel", scope = "gpu"}> : (!tl.ptr<i32>, i32) -> i32
// CHECK:        scf.if
// CHECK:          "tl.load"({{.*}}) <{volatile,
// CHECK:          %total1 = "tl.cast"(%{{.*}}) : (f64) -> f32
// CHECK:          arith.divf %total1, %{{.*}} : f32
// CHECK:          "tl.store"(%total_ptr, %{{.*}}) : (!tl.ptr<f32>, f32) -> ()
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

// CHECK-LABEL: "tl.kernel"() <{sym_name = "_body_k0_fold"
// CHECK:        %[[L2:.*]] = math.log2 %folded : tensor<?xf32>
// CHECK-NEXT:   %[[C:.*]] = arith.constant 3.010300e-01 : f32
// CHECK-NEXT:   %[[CS:.*]] = "tl.splat"(%[[C]])
// CHECK-NEXT:   %[[LG:.*]] = arith.mulf %[[L2]], %[[CS]] : tensor<?xf32>
// CHECK-NEXT:   %[[TH:.*]] = "tl.call"(%[[LG]]) <{callee = @_coda_tanh}> : (tensor<?xf32>) -> tensor<?xf32>
// CHECK:        %[[K:.*]] = arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK-NEXT:   %[[K0:.*]] = "tl.full"(%[[K]]) : (f32) -> f32
// CHECK-NEXT:   %[[EK:.*]] = math.exp %[[K0]] : f32

// -----

// A launch group: one kernel whose program id ranges call the members (a fold, built here, and
// an elementwise kernel, still printed by the string emitter) with their suffixed parameters.
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

// CHECK-LABEL: "tl.kernel"() <{sym_name = "_group_k1_fold"
// CHECK-SAME:  arg_names = ["pid", "p_ptr", "r0_ptr", "L", "T0", "BLOCK", "BT", "PB"]
// CHECK-NOT:   tl.program_id
// CHECK:       math.rsqrt
// CHECK-LABEL: "tl.kernel"() <{sym_name = "_group_g0_launch_group"
// CHECK-SAME:  arg_names = ["p_ptr_0", "r0_ptr_0", "L_0", "T0_0", "wt_ptr_1", "c0_ptr_1", "M_1", "N_1", "END0", "END1", "BLOCK_0", "BT_0", "PB_0", "BM_1", "BN_1"], constexprs = #builtin.int<5>
// CHECK:         %[[PID:.*]] = "tl.program_id"() <{axis = #builtin.int<0>}> : () -> i32
// CHECK-NEXT:    %[[C0:.*]] = "tl.cmpi"(%[[PID]], %{{.*}}) <{predicate = "slt"}> : (i32, i32) -> i1
// CHECK-NEXT:    scf.if %[[C0]] {
// CHECK-NEXT:      "tl.call"(%[[PID]], {{.*}}) <{callee = @_group_k1_fold}>
// CHECK-NEXT:    } else {
// CHECK-NEXT:      %[[C1:.*]] = "tl.cmpi"(%[[PID]], %{{.*}}) <{predicate = "slt"}> : (i32, i32) -> i1
// CHECK-NEXT:      scf.if %[[C1]] {
// CHECK-NEXT:        %[[START:.*]] = arith.subi %[[PID]], %{{.*}} : i32
// CHECK-NEXT:        "tl.call"(%[[START]], {{.*}}) <{callee = @_group_k2_elementwise}>
// CHECK:       coda.elementwise {{.*}} attributes {tl.kernel = @_group_k0_elementwise}
// CHECK:       coda.launch_group {{.*}} attributes {tl.kernel = @_group_g0_launch_group}
