// RUN: CODA_ROUNDTRIP
// RUN: CODA_GENERIC_ROUNDTRIP
// RUN: coda-opt %s --print-op-generic | coda-opt | filecheck %s

// Every tl op in its custom syntax (dialects/triton_lang.py, formats from dialects/op_syntax.py).
// CHECK pins the custom form after a custom -> custom round trip and after generic -> custom;
// CHECK-GENERIC the generic form after a generic -> generic one.

tl.kernel @every_op(%x_ptr: !tl.ptr<bf16>, %out_ptr: !tl.ptr<f32>, %ticket_ptr: !tl.ptr<i32>, %M: i32, %BM: i32 constexpr, %BN: i32 constexpr) {
  %pid = tl.program_id 0 -> i32
  %rows = tl.arange 0 to %BM : i32 -> tensor<?xi32>
  %tiles = tl.cdiv %M, %BM : i32, i32 -> i32
  %m = tl.splat %M : i32 -> tensor<?xi32>
  %mask = tl.cmpi slt %rows, %m : tensor<?xi32>, tensor<?xi32> -> tensor<?xi1>
  %rows2 = tl.expand_dims %rows axis 1 : tensor<?xi32> -> tensor<?x?xi32>
  %mask2 = tl.expand_dims %mask axis 1 : tensor<?xi1> -> tensor<?x?xi1>
  %ptrs = tl.addptr %x_ptr, %rows2 : !tl.ptr<bf16>, tensor<?x?xi32> -> tensor<?x?x!tl.ptr<bf16>>
  %zero = arith.constant 0 : i32
  %x = tl.load %ptrs mask %mask2 other %zero : tensor<?x?x!tl.ptr<bf16>>, tensor<?x?xi1>, i32 -> tensor<?x?xbf16>
  %xf = tl.cast %x : tensor<?x?xbf16> -> tensor<?x?xf32>
  %bits = tl.cast %xf bitcast : tensor<?x?xf32> -> tensor<?x?xi32>
  %tile = tl.broadcast_to %xf [%BM, %BN] : tensor<?x?xf32>, i32, i32 -> tensor<?x?xf32>
  %two = arith.constant 2 : i32
  %half = arith.divsi %BN, %two : i32
  %grouped = tl.reshape %tile [%BM, %half, %two] : tensor<?x?xf32>, i32, i32, i32 -> tensor<?x?x?xf32>
  %swapped = tl.permute %grouped dims [0, 2, 1] : tensor<?x?x?xf32> -> tensor<?x?x?xf32>
  %perm = tl.permute %swapped dims [0, 2, 1] : tensor<?x?x?xf32> -> tensor<?x?x?xf32>
  %even, %odd = tl.split %perm : tensor<?x?x?xf32> -> (tensor<?x?xf32>, tensor<?x?xf32>)
  %pairs = tl.join %odd, %even : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?x?xf32>
  %index = tl.broadcast_to %rows2 [%BM, %BN] : tensor<?x?xi32>, i32, i32 -> tensor<?x?xi32>
  %gathered = tl.gather %tile, %index axis 1 : tensor<?x?xf32>, tensor<?x?xi32> -> tensor<?x?xf32>
  %ge = tl.cmpf oge %gathered, %tile : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xi1>
  %picked = tl.where %ge, %gathered, %tile : tensor<?x?xi1>, tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>
  %one = arith.constant 1.000000e+00 : f32
  %ones = tl.full [%BM, %BN] %one : i32, i32, f32 -> tensor<?x?xf32>
  %sum = tl.reduce sum %picked axis 1 : tensor<?x?xf32> -> tensor<?xf32>
  %t = tl.call @_coda_tanh(%sum) : tensor<?xf32> -> tensor<?xf32>
  %out = tl.addptr %out_ptr, %rows : !tl.ptr<f32>, tensor<?xi32> -> tensor<?x!tl.ptr<f32>>
  tl.store %out, %t mask %mask : tensor<?x!tl.ptr<f32>>, tensor<?xf32>, tensor<?xi1>
  tl.debug_barrier
  %c1 = arith.constant 1 : i32
  %ticket = tl.atomic_add %ticket_ptr, %c1 sem acq_rel scope gpu : !tl.ptr<i32>, i32 -> i32
  %total = tl.load %out_ptr volatile : !tl.ptr<f32> -> f32
  tl.comment "one line of text"
}

// CHECK-LABEL: tl.kernel @every_op(%x_ptr: !tl.ptr<bf16>, %out_ptr: !tl.ptr<f32>, %ticket_ptr: !tl.ptr<i32>, %M: i32, %BM: i32 constexpr, %BN: i32 constexpr) {
// CHECK-NEXT:    %pid = tl.program_id 0 -> i32
// CHECK-NEXT:    %rows = tl.arange 0 to %BM : i32 -> tensor<?xi32>
// CHECK-NEXT:    %tiles = tl.cdiv %M, %BM : i32, i32 -> i32
// CHECK-NEXT:    %m = tl.splat %M : i32 -> tensor<?xi32>
// CHECK-NEXT:    %mask = tl.cmpi slt %rows, %m : tensor<?xi32>, tensor<?xi32> -> tensor<?xi1>
// CHECK-NEXT:    %rows2 = tl.expand_dims %rows axis 1 : tensor<?xi32> -> tensor<?x?xi32>
// CHECK-NEXT:    %mask2 = tl.expand_dims %mask axis 1 : tensor<?xi1> -> tensor<?x?xi1>
// CHECK-NEXT:    %ptrs = tl.addptr %x_ptr, %rows2 : !tl.ptr<bf16>, tensor<?x?xi32> -> tensor<?x?x!tl.ptr<bf16>>
// CHECK-NEXT:    %zero = arith.constant 0 : i32
// CHECK-NEXT:    %x = tl.load %ptrs mask %mask2 other %zero : tensor<?x?x!tl.ptr<bf16>>, tensor<?x?xi1>, i32 -> tensor<?x?xbf16>
// CHECK-NEXT:    %xf = tl.cast %x : tensor<?x?xbf16> -> tensor<?x?xf32>
// CHECK-NEXT:    %bits = tl.cast %xf bitcast : tensor<?x?xf32> -> tensor<?x?xi32>
// CHECK-NEXT:    %tile = tl.broadcast_to %xf [%BM, %BN] : tensor<?x?xf32>, i32, i32 -> tensor<?x?xf32>
// CHECK-NEXT:    %two = arith.constant 2 : i32
// CHECK-NEXT:    %half = arith.divsi %BN, %two : i32
// CHECK-NEXT:    %grouped = tl.reshape %tile [%BM, %half, %two] : tensor<?x?xf32>, i32, i32, i32 -> tensor<?x?x?xf32>
// CHECK-NEXT:    %swapped = tl.permute %grouped dims [0, 2, 1] : tensor<?x?x?xf32> -> tensor<?x?x?xf32>
// CHECK-NEXT:    %perm = tl.permute %swapped dims [0, 2, 1] : tensor<?x?x?xf32> -> tensor<?x?x?xf32>
// CHECK-NEXT:    %even, %odd = tl.split %perm : tensor<?x?x?xf32> -> (tensor<?x?xf32>, tensor<?x?xf32>)
// CHECK-NEXT:    %pairs = tl.join %odd, %even : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?x?xf32>
// CHECK-NEXT:    %index = tl.broadcast_to %rows2 [%BM, %BN] : tensor<?x?xi32>, i32, i32 -> tensor<?x?xi32>
// CHECK-NEXT:    %gathered = tl.gather %tile, %index axis 1 : tensor<?x?xf32>, tensor<?x?xi32> -> tensor<?x?xf32>
// CHECK-NEXT:    %ge = tl.cmpf oge %gathered, %tile : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xi1>
// CHECK-NEXT:    %picked = tl.where %ge, %gathered, %tile : tensor<?x?xi1>, tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>
// CHECK-NEXT:    %one = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:    %ones = tl.full [%BM, %BN] %one : i32, i32, f32 -> tensor<?x?xf32>
// CHECK-NEXT:    %sum = tl.reduce sum %picked axis 1 : tensor<?x?xf32> -> tensor<?xf32>
// CHECK-NEXT:    %t = tl.call @_coda_tanh(%sum) : tensor<?xf32> -> tensor<?xf32>
// CHECK-NEXT:    %out = tl.addptr %out_ptr, %rows : !tl.ptr<f32>, tensor<?xi32> -> tensor<?x!tl.ptr<f32>>
// CHECK-NEXT:    tl.store %out, %t mask %mask : tensor<?x!tl.ptr<f32>>, tensor<?xf32>, tensor<?xi1>
// CHECK-NEXT:    tl.debug_barrier
// CHECK-NEXT:    %c1 = arith.constant 1 : i32
// CHECK-NEXT:    %ticket = tl.atomic_add %ticket_ptr, %c1 sem acq_rel scope gpu : !tl.ptr<i32>, i32 -> i32
// CHECK-NEXT:    %total = tl.load %out_ptr volatile : !tl.ptr<f32> -> f32
// CHECK-NEXT:    tl.comment "one line of text"
// CHECK-NEXT:  }

// CHECK-GENERIC-LABEL: "tl.kernel"() <{sym_name = "every_op", function_type = (!tl.ptr<bf16>, !tl.ptr<f32>, !tl.ptr<i32>, i32, i32, i32) -> (), arg_names = ["x_ptr", "out_ptr", "ticket_ptr", "M", "BM", "BN"], constexprs = #builtin.int<2>}> ({
// CHECK-GENERIC:         "tl.program_id"() <{axis = #builtin.int<0>}> : () -> i32
// CHECK-GENERIC:         "tl.load"(%ptrs, %mask2, %zero) <{operandSegmentSizes = array<i32: 1, 1, 1>}>
// CHECK-GENERIC:         "tl.permute"(%grouped) <{dims = array<i64: 0, 2, 1>}>
// CHECK-GENERIC:         "tl.split"(%perm) : (tensor<?x?x?xf32>) -> (tensor<?x?xf32>, tensor<?x?xf32>)
// CHECK-GENERIC:         "tl.gather"(%tile, %index) <{axis = #builtin.int<1>}>
// CHECK-GENERIC:         "tl.load"(%out_ptr) <{volatile, operandSegmentSizes = array<i32: 1, 0, 0>}> : (!tl.ptr<f32>) -> f32

// -----

// A launch group member takes its program index first; a call of a member returns nothing. A
// parameter whose printed SSA name is not its name keeps it with `as` (xDSL reads `%a_ptr_0`
// as the name hint `a_ptr`).
tl.kernel @member(%pid: i32, %a_ptr: !tl.ptr<f32>, %L: i32, %BLOCK: i32 constexpr) {
}
tl.kernel @group(%a_ptr_0: !tl.ptr<f32>, %L_0: i32, %END0: i32, %BLOCK_0: i32 constexpr) {
  %pid = tl.program_id 0 -> i32
  %in = tl.cmpi slt %pid, %END0 : i32, i32 -> i1
  scf.if %in {
    tl.call @member(%pid, %a_ptr_0, %L_0, %BLOCK_0) : i32, !tl.ptr<f32>, i32, i32
  }
}
tl.kernel @renamed(%a_ptr as a_ptr: !tl.ptr<f32>, %L as length: i32) {
}

// CHECK-LABEL: tl.kernel @member(%pid: i32, %a_ptr: !tl.ptr<f32>, %L: i32, %BLOCK: i32 constexpr) {
// CHECK-NEXT:  }
// CHECK-LABEL: tl.kernel @group(%a_ptr as a_ptr_0: !tl.ptr<f32>, %L as L_0: i32, %END0: i32, %BLOCK as BLOCK_0: i32 constexpr) {
// CHECK:         scf.if %in {
// CHECK-NEXT:      tl.call @member(%pid, %a_ptr, %L, %BLOCK) : i32, !tl.ptr<f32>, i32, i32
// CHECK-NEXT:    }
// CHECK-LABEL: tl.kernel @renamed(%a_ptr: !tl.ptr<f32>, %L as length: i32) {

// CHECK-GENERIC-LABEL: "tl.kernel"() <{sym_name = "renamed", function_type = (!tl.ptr<f32>, i32) -> (), arg_names = ["a_ptr", "length"], constexprs = #builtin.int<0>}>

// -----

// A gemm kernel: the template's parameters, the last constexprs with defaults (i1 ones print as
// true / false), its body one tl.mainloop whose region is the epilogue on the tile it hands over;
// a tl.constexpr_if on constexprs only, each branch ending in tl.yield of its results.
tl.kernel @gemm(%a_ptr: !tl.ptr<f32>, %b_ptr: !tl.ptr<f32>, %y_ptr: !tl.ptr<f32>, %M: i32, %N: i32, %K: i32, %stride_am: i32, %stride_ak: i32, %stride_bk: i32, %stride_bn: i32, %BM: i32 constexpr, %BN: i32 constexpr, %BK: i32 constexpr, %GROUP_M: i32 constexpr, %INTERLEAVE: i32 constexpr, %UPCAST: i1 constexpr, %USE_TMA: i32 constexpr = 0, %A_K_CONTIG: i1 constexpr = true, %B_K_CONTIG: i1 constexpr = true, %NUM_SMS: i32 constexpr = 1, %FLATTEN: i1 constexpr = false, %WARP_SPECIALIZE: i1 constexpr = false, %L2_PREFETCH: i1 constexpr = false, %B_PAIRED: i1 constexpr = false) {
  tl.mainloop portable %a_ptr, %b_ptr params(%M, %N, %K, %stride_am, %stride_ak, %stride_bk, %stride_bn, %BM, %BN, %BK, %GROUP_M, %INTERLEAVE, %UPCAST, %USE_TMA, %A_K_CONTIG, %B_K_CONTIG, %NUM_SMS, %FLATTEN, %WARP_SPECIALIZE, %L2_PREFETCH, %B_PAIRED) ieee : !tl.ptr<f32>, !tl.ptr<f32>, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i1, i32, i1, i1, i32, i1, i1, i1, i1 {
  ^bb0(%acc: tensor<?x?xf32>, %offs_m: tensor<?xi32>, %offs_n: tensor<?xi32>, %mask_m: tensor<?xi1>, %mask_n: tensor<?xi1>, %pid_m: i32, %pid_n: i32):
    %c32 = arith.constant 32 : i32
    %narrow = tl.cmpi sle %BN, %c32 : i32, i32 -> i1
    %v = tl.constexpr_if %narrow : i1 -> tensor<?x?xf32> {
      tl.yield %acc : tensor<?x?xf32>
    } {
      %twice = arith.addf %acc, %acc : tensor<?x?xf32>
      tl.yield %twice : tensor<?x?xf32>
    }
    %ptrs = tl.addptr %y_ptr, %offs_n : !tl.ptr<f32>, tensor<?xi32> -> tensor<?x!tl.ptr<f32>>
    %row = tl.reduce sum %v axis 0 : tensor<?x?xf32> -> tensor<?xf32>
    tl.store %ptrs, %row mask %mask_n : tensor<?x!tl.ptr<f32>>, tensor<?xf32>, tensor<?xi1>
  }
}

// CHECK-LABEL: tl.kernel @gemm({{.*}}, %UPCAST: i1 constexpr, %USE_TMA: i32 constexpr = 0, %A_K_CONTIG: i1 constexpr = true, %B_K_CONTIG: i1 constexpr = true, %NUM_SMS: i32 constexpr = 1, %FLATTEN: i1 constexpr = false, %WARP_SPECIALIZE: i1 constexpr = false, %L2_PREFETCH: i1 constexpr = false, %B_PAIRED: i1 constexpr = false) {
// CHECK-NEXT:    tl.mainloop portable %a_ptr, %b_ptr params(%M, {{.*}}, %B_PAIRED) ieee : !tl.ptr<f32>, !tl.ptr<f32>, {{.*}} {
// CHECK-NEXT:    ^bb0(%acc: tensor<?x?xf32>, %offs_m: tensor<?xi32>, %offs_n: tensor<?xi32>, %mask_m: tensor<?xi1>, %mask_n: tensor<?xi1>, %pid_m: i32, %pid_n: i32):
// CHECK:           %v = tl.constexpr_if %narrow : i1 -> tensor<?x?xf32> {
// CHECK-NEXT:        tl.yield %acc : tensor<?x?xf32>
// CHECK-NEXT:      } {
// CHECK-NEXT:        %twice = arith.addf %acc, %acc : tensor<?x?xf32>
// CHECK-NEXT:        tl.yield %twice : tensor<?x?xf32>
// CHECK-NEXT:      }

// CHECK-GENERIC-LABEL: "tl.kernel"() <{sym_name = "gemm",
// CHECK-GENERIC-SAME:    defaults = [0 : i32, true, true, 1 : i32, false, false, false, false]
// CHECK-GENERIC:         "tl.mainloop"(%a_ptr, %b_ptr, %M,
// CHECK-GENERIC-SAME:    <{kind = "portable", ieee, operandSegmentSizes = array<i32: 1, 1, 21, 0>}>
// CHECK-GENERIC:         "tl.constexpr_if"(%narrow) ({

// -----

// A Gluon gemm kernel: tl.mainloop gluon_ws with its #coda.mainloop record; the region takes the
// sub-tile's BM and the tile's BN and the carried column partials, which it yields; layouts are
// stated on ranges and conversions only (#tl.layout).
tl.kernel @gluon_ws(%a_desc: !tl.ptr<bf16>, %b_desc: !tl.ptr<bf16>, %x_ptr: !tl.ptr<f32>, %p_ptr: !tl.ptr<f32>, %M: i32, %N: i32, %K: i32) {
  tl.mainloop gluon_ws %a_desc, %b_desc params(%M, %N, %K) carry(%p_ptr) transpose_b record #coda.mainloop<gluon_ws, bm = 128, bn = 256, bk = 32, stages = 4, handoff = f32, accumulate_first = -1, epilogue_warps = 2, sub_rows = 8, regs = [168, 24, 176]> column_lanes 32 combines ["max"] : !tl.ptr<bf16>, !tl.ptr<bf16>, i32, i32, i32, !tl.ptr<f32> {
  ^bb0(%acc: tensor<?x?xf32>, %offs_m: tensor<?xi32>, %offs_n: tensor<?xi32>, %mask_m: tensor<?xi1>, %mask_n: tensor<?xi1>, %pid_m: i32, %pid_n: i32, %BM: i32, %BN: i32, %colp: tensor<?xf32>):
    %cols = tl.arange 0 to %BN layout #tl.layout<slice 0> : i32 -> tensor<?xi32>
    %back = tl.convert_layout %acc layout #tl.layout<epilogue> : tensor<?x?xf32> -> tensor<?x?xf32>
    %same = tl.convert_layout %back like %acc : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>
    %col = tl.reduce max %same axis 0 : tensor<?x?xf32> -> tensor<?xf32>
    %run = arith.maximumf %colp, %col : tensor<?xf32>
    tl.yield %run : tensor<?xf32>
  }
}

// CHECK-LABEL: tl.kernel @gluon_ws(
// CHECK-NEXT:    tl.mainloop gluon_ws %a_desc, %b_desc params(%M, %N, %K) carry(%p_ptr) transpose_b record #coda.mainloop<gluon_ws, bm = 128, bn = 256, bk = 32, stages = 4, handoff = f32, accumulate_first = -1, epilogue_warps = 2, sub_rows = 8, regs = [168, 24, 176]> column_lanes 32 combines ["max"] : !tl.ptr<bf16>, !tl.ptr<bf16>, i32, i32, i32, !tl.ptr<f32> {
// CHECK-NEXT:    ^bb0(%acc: tensor<?x?xf32>, {{.*}}, %BM: i32, %BN: i32, %colp: tensor<?xf32>):
// CHECK-NEXT:      %cols = tl.arange 0 to %BN layout #tl.layout<slice 0> : i32 -> tensor<?xi32>
// CHECK-NEXT:      %back = tl.convert_layout %acc layout #tl.layout<epilogue> : tensor<?x?xf32> -> tensor<?x?xf32>
// CHECK-NEXT:      %same = tl.convert_layout %back like %acc : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>
// CHECK:           tl.yield %run : tensor<?xf32>

// CHECK-GENERIC-LABEL: "tl.kernel"() <{sym_name = "gluon_ws",
// CHECK-GENERIC:         "tl.arange"(%BN) <{start = #builtin.int<0>, layout = #tl.layout<slice 0>}>
