// RUN: coda-opt %s --split-input-file --verify-diagnostics | filecheck %s
// RUN: not coda-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=EXIT

// Malformed tl IR (dialects/triton_lang.py): each op's verifier refuses it with a located
// diagnostic; without --verify-diagnostics coda-opt exits non-zero, no traceback.
// EXIT-NOT: Traceback
// EXIT: verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error:

tl.kernel @k(%x: tensor<?x?x?xf32>) {
  %p = tl.permute %x dims [0, 1, 1] : tensor<?x?x?xf32> -> tensor<?x?x?xf32>
}
// CHECK: {{.*}}verify.mlir:10:{{[0-9]+}}: error: 'tl.permute' op tl.permute: dims [0, 1, 1] is not a permutation of the operand's axes

// -----

tl.kernel @k(%x: tensor<?xf32>) {
  %a, %b = tl.split %x : tensor<?xf32> -> (tensor<?xf32>, tensor<?xf32>)
}
// CHECK: error: 'tl.split' op tl.split: splits a tensor of rank >= 2 (its last axis)

// -----

tl.kernel @k(%x: tensor<?x?xf32>, %i: tensor<?xi32>) {
  %g = tl.gather %x, %i axis 1 : tensor<?x?xf32>, tensor<?xi32> -> tensor<?xf32>
}
// CHECK: error: 'tl.gather' op tl.gather: the index has the source's rank

// -----

tl.kernel @k(%x: tensor<?x?xf32>, %i: tensor<?x?xi32>) {
  %g = tl.gather %x, %i axis 2 : tensor<?x?xf32>, tensor<?x?xi32> -> tensor<?x?xf32>
}
// CHECK: error: 'tl.gather' op tl.gather: axis out of range

// -----

tl.kernel @k(%x: tensor<?xf32>, %BM: i32 constexpr, %BN: i32 constexpr) {
  %b = tl.broadcast_to %x [%BM, %BN] : tensor<?xf32>, i32, i32 -> tensor<?x?xf32>
}
// CHECK: error: 'tl.broadcast_to' op tl.broadcast_to: a scalar or a tensor of the result's rank

// -----

tl.kernel @k(%x: tensor<?xf32>, %BM: i32 constexpr) {
  %b = tl.broadcast_to %x [%BM] : tensor<?xf32>, i32 -> tensor<4xf32>
}
// CHECK: error: 'tl.broadcast_to' op tl.broadcast_to: Triton tensor extents are constexprs, expected dynamic dimensions, got tensor<4xf32>

// -----

tl.kernel @k(%x: tensor<?x?xf32>) {
  %e = tl.expand_dims %x axis 3 : tensor<?x?xf32> -> tensor<?x?x?xf32>
}
// CHECK: error: 'tl.expand_dims' op tl.expand_dims: axis must be in [0, 2]

// -----

tl.kernel @k(%a: i32, %b: i64) {
  %c = tl.cdiv %a, %b : i32, i64 -> i32
}
// CHECK: error: 'tl.cdiv' op tl.cdiv: both operands and the result have one integer type

// -----

tl.kernel @k(%a: tensor<?xf32>, %b: tensor<?xi32>) {
  %j = tl.join %a, %b : tensor<?xf32>, tensor<?xi32> -> tensor<?x?xf32>
}
// CHECK: error: 'tl.join' op tl.join: both operands have one type

// -----

tl.kernel @k(%x: tensor<?x?xf32>, %BM: i32 constexpr) {
  %r = tl.reshape %x [%BM] : tensor<?x?xf32>, i32 -> tensor<?xi32>
}
// CHECK: error: 'tl.reshape' op tl.reshape: the element type is kept

// -----

tl.kernel @k(%p: tensor<?x!tl.ptr<f32>>, %m: tensor<?xi1>, %o: tensor<?xf32>) {
  %x = tl.load %p mask %m other %o : tensor<?x!tl.ptr<f32>>, tensor<?xi1>, tensor<?xf32> -> tensor<?xf32>
}
// CHECK: error: 'tl.load' op tl.load: `other` is a scalar (Triton casts it to the pointee type)

// -----

tl.kernel @k(%BM: i32 constexpr, %x: i32) {
}
// CHECK: error: tl.kernel: the constexpr parameters come last

// -----

tl.kernel @k(%M: i32, %BN: i32 constexpr) {
  %c = arith.constant 32 : i32
  %runtime = tl.cmpi slt %M, %c : i32, i32 -> i1
  tl.constexpr_if %runtime : i1 {
    tl.yield
  } {
    tl.yield
  }
}
// CHECK: error: 'tl.constexpr_if' op tl.constexpr_if: the condition must be computed from constants and constexpr parameters only

// -----

tl.kernel @k(%x: tensor<?xf32>, %BN: i32 constexpr) {
  %c = arith.constant 32 : i32
  %narrow = tl.cmpi sle %BN, %c : i32, i32 -> i1
  %v = tl.constexpr_if %narrow : i1 -> tensor<?xf32> {
    tl.yield %x : tensor<?xf32>
  } {
    tl.yield
  }
}
// CHECK: error: 'tl.constexpr_if' op tl.constexpr_if: each branch ends in tl.yield of the results' types

// -----

tl.kernel @k(%x: tensor<?xf32>) {
  tl.yield %x : tensor<?xf32>
}
// CHECK: error: 'tl.yield' op tl.yield: ends a tl.constexpr_if branch or a tl.mainloop epilogue

// -----

"tl.kernel"() <{sym_name = "k", function_type = (i32) -> (), arg_names = ["BM"], constexprs = #builtin.int<1>, defaults = [true]}> ({
^bb0(%BM: i32):
}) : () -> ()
// CHECK: error: 'tl.kernel' op tl.kernel: a default of type i1 for a parameter of type i32

// -----

tl.kernel @k(%a_ptr: !tl.ptr<f32>, %b_ptr: !tl.ptr<f32>, %M: i32) {
  tl.mainloop portable %a_ptr, %b_ptr params(%M) : !tl.ptr<f32>, !tl.ptr<f32>, i32 {
  ^bb0(%acc: tensor<?x?xf32>, %offs_m: tensor<?xi32>, %offs_n: tensor<?xi32>, %mask_m: tensor<?xi1>, %mask_n: tensor<?xi1>, %pid_m: i32, %pid_n: i32):
  }
}
// CHECK: error: 'tl.mainloop' op tl.mainloop: 21 parameters expected (M, N, K, stride_am, stride_ak, stride_bk, stride_bn, BM, BN, BK, GROUP_M, INTERLEAVE, UPCAST, USE_TMA, A_K_CONTIG, B_K_CONTIG, NUM_SMS, FLATTEN, WARP_SPECIALIZE, L2_PREFETCH, B_PAIRED)

// -----

tl.kernel @k(%x: tensor<?x?xf32>) {
  %y = tl.convert_layout %x like %x layout #tl.layout<epilogue> : tensor<?x?xf32>, tensor<?x?xf32> -> tensor<?x?xf32>
}
// CHECK: error: 'tl.convert_layout' op tl.convert_layout: to a layout or like another tensor, one of them

// -----

tl.kernel @k(%BN: i32 constexpr) {
  %r = tl.arange 0 to %BN layout #tl.layout<epilogue> : i32 -> tensor<?xi32>
}
// CHECK: error: 'tl.arange' op tl.arange: a range's layout is a slice of a 2-D layout

// -----

tl.kernel @k(%a_desc: !tl.ptr<bf16>, %b_desc: !tl.ptr<bf16>, %p_ptr: !tl.ptr<f32>, %M: i32, %N: i32, %K: i32) {
  tl.mainloop gluon_ws %a_desc, %b_desc params(%M, %N, %K) carry(%p_ptr) record #coda.mainloop<gluon_ws, bm = 128, bn = 256, bk = 32, stages = 4, handoff = f32, accumulate_first = -1, epilogue_warps = 2, sub_rows = 8, regs = [168, 24, 176]> column_lanes 32 combines ["sum"] : !tl.ptr<bf16>, !tl.ptr<bf16>, i32, i32, i32, !tl.ptr<f32> {
  ^bb0(%acc: tensor<?x?xf32>, %offs_m: tensor<?xi32>, %offs_n: tensor<?xi32>, %mask_m: tensor<?xi1>, %mask_n: tensor<?xi1>, %pid_m: i32, %pid_n: i32, %BM: i32, %BN: i32, %colp: tensor<?xf32>):
    tl.yield
  }
}
// CHECK: error: 'tl.mainloop' op tl.mainloop: a gluon_ws epilogue ends in tl.yield of its carried column partials
