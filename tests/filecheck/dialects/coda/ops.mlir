// RUN: CODA_ROUNDTRIP
// RUN: CODA_GENERIC_ROUNDTRIP

// Every coda op and type in the custom syntax. CHECK pins the custom form after a
// custom -> custom round trip, CHECK-GENERIC the generic form after a generic -> generic one.

// ===== types

func.func @types(%t: !coda.tile<128x64xf32>, %i: !coda.tile<128x64xi32>, %b: !coda.tile<128x64xi1>, %r: !coda.partials<rows, 128, sum>, %c: !coda.partials<cols, 64, max>, %l: !coda.partials<rows, 128, lse>) -> (!coda.tile<128x64xf32>, !coda.partials<rows, 128, lse>) {
  func.return %t, %l : !coda.tile<128x64xf32>, !coda.partials<rows, 128, lse>
}

// CHECK-LABEL: func.func @types(%t: !coda.tile<128x64xf32>, %i: !coda.tile<128x64xi32>, %b: !coda.tile<128x64xi1>, %r: !coda.partials<rows, 128, sum>, %c: !coda.partials<cols, 64, max>, %l: !coda.partials<rows, 128, lse>) -> (!coda.tile<128x64xf32>, !coda.partials<rows, 128, lse>) {
// CHECK-NEXT:    func.return %t, %l : !coda.tile<128x64xf32>, !coda.partials<rows, 128, lse>
// CHECK-NEXT:  }

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "types", function_type = (!coda.tile<128x64xf32>, !coda.tile<128x64xi32>, !coda.tile<128x64xi1>, !coda.partials<rows, 128, sum>, !coda.partials<cols, 64, max>, !coda.partials<rows, 128, lse>) -> (!coda.tile<128x64xf32>, !coda.partials<rows, 128, lse>)}> ({
// CHECK-GENERIC-NEXT:  ^bb0(%t: !coda.tile<128x64xf32>, %i: !coda.tile<128x64xi32>, %b: !coda.tile<128x64xi1>, %r: !coda.partials<rows, 128, sum>, %c: !coda.partials<cols, 64, max>, %l: !coda.partials<rows, 128, lse>):
// CHECK-GENERIC-NEXT:    "func.return"(%t, %l) : (!coda.tile<128x64xf32>, !coda.partials<rows, 128, lse>) -> ()
// CHECK-GENERIC-NEXT:  }) : () -> ()

// -----

// ===== coda.gemm

func.func @gemm_plain(%a: tensor<256x64xbf16>, %b: tensor<64x128xbf16>) -> tensor<256x128xbf16> {
  %d = coda.gemm %a, %b : tensor<256x64xbf16>, tensor<64x128xbf16> -> tensor<256x128xbf16> {
  ^bb0(%acc: !coda.tile<256x128xf32>):
    coda.yield %acc : !coda.tile<256x128xf32>
  }
  func.return %d : tensor<256x128xbf16>
}

// CHECK-LABEL: func.func @gemm_plain(%a: tensor<256x64xbf16>, %b: tensor<64x128xbf16>) -> tensor<256x128xbf16> {
// CHECK-NEXT:    %d = coda.gemm %a, %b : tensor<256x64xbf16>, tensor<64x128xbf16> -> tensor<256x128xbf16> {
// CHECK-NEXT:    ^bb0(%acc: !coda.tile<256x128xf32>):
// CHECK-NEXT:      coda.yield %acc : !coda.tile<256x128xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %d : tensor<256x128xbf16>
// CHECK-NEXT:  }

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "gemm_plain", function_type = (tensor<256x64xbf16>, tensor<64x128xbf16>) -> tensor<256x128xbf16>}> ({
// CHECK-GENERIC-NEXT:  ^bb0(%a: tensor<256x64xbf16>, %b: tensor<64x128xbf16>):
// CHECK-GENERIC-NEXT:    %d = "coda.gemm"(%a, %b) <{operandSegmentSizes = array<i32: 1, 1, 0>}> ({
// CHECK-GENERIC-NEXT:    ^bb0(%acc: !coda.tile<256x128xf32>):
// CHECK-GENERIC-NEXT:      "coda.yield"(%acc) : (!coda.tile<256x128xf32>) -> ()
// CHECK-GENERIC-NEXT:    }) : (tensor<256x64xbf16>, tensor<64x128xbf16>) -> tensor<256x128xbf16>
// CHECK-GENERIC-NEXT:    "func.return"(%d) : (tensor<256x128xbf16>) -> ()
// CHECK-GENERIC-NEXT:  }) : () -> ()

// -----

// a is KxM with transpose_a, b is NxK (an nn.Linear weight) with transpose_b.
func.func @gemm_transposed(%at: tensor<64x256xf16>, %w: tensor<128x64xf16>, %a: tensor<256x64xf16>) -> (tensor<256x128xf32>, tensor<256x128xf16>, tensor<256x128xf16>) {
  %0 = coda.gemm %at, %w transpose_a transpose_b : tensor<64x256xf16>, tensor<128x64xf16> -> tensor<256x128xf32> {
  ^bb0(%acc: !coda.tile<256x128xf32>):
    coda.yield %acc : !coda.tile<256x128xf32>
  }
  %1 = coda.gemm %a, %w transpose_b : tensor<256x64xf16>, tensor<128x64xf16> -> tensor<256x128xf16> {
  ^bb0(%acc: !coda.tile<256x128xf32>):
    coda.yield %acc : !coda.tile<256x128xf32>
  }
  %2 = coda.gemm %at, %w transpose_a transpose_b : tensor<64x256xf16>, tensor<128x64xf16> -> tensor<256x128xf16> {
  ^bb0(%acc: !coda.tile<256x128xf32>):
    coda.yield %acc : !coda.tile<256x128xf32>
  }
  func.return %0, %1, %2 : tensor<256x128xf32>, tensor<256x128xf16>, tensor<256x128xf16>
}

// CHECK-LABEL: func.func @gemm_transposed(%at: tensor<64x256xf16>, %w: tensor<128x64xf16>, %a: tensor<256x64xf16>) -> (tensor<256x128xf32>, tensor<256x128xf16>, tensor<256x128xf16>) {
// CHECK-NEXT:    %0 = coda.gemm %at, %w transpose_a transpose_b : tensor<64x256xf16>, tensor<128x64xf16> -> tensor<256x128xf32> {
// CHECK-NEXT:    ^bb0(%acc: !coda.tile<256x128xf32>):
// CHECK-NEXT:      coda.yield %acc : !coda.tile<256x128xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %1 = coda.gemm %a, %w transpose_b : tensor<256x64xf16>, tensor<128x64xf16> -> tensor<256x128xf16> {
// CHECK-NEXT:    ^bb0(%acc: !coda.tile<256x128xf32>):
// CHECK-NEXT:      coda.yield %acc : !coda.tile<256x128xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %2 = coda.gemm %at, %w transpose_a transpose_b : tensor<64x256xf16>, tensor<128x64xf16> -> tensor<256x128xf16> {
// CHECK-NEXT:    ^bb0(%acc: !coda.tile<256x128xf32>):
// CHECK-NEXT:      coda.yield %acc : !coda.tile<256x128xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %0, %1, %2 : tensor<256x128xf32>, tensor<256x128xf16>, tensor<256x128xf16>
// CHECK-NEXT:  }

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "gemm_transposed", function_type = (tensor<64x256xf16>, tensor<128x64xf16>, tensor<256x64xf16>) -> (tensor<256x128xf32>, tensor<256x128xf16>, tensor<256x128xf16>)}> ({
// CHECK-GENERIC-NEXT:  ^bb0(%at: tensor<64x256xf16>, %w: tensor<128x64xf16>, %a: tensor<256x64xf16>):
// CHECK-GENERIC-NEXT:    %0 = "coda.gemm"(%at, %w) <{transpose_a, transpose_b, operandSegmentSizes = array<i32: 1, 1, 0>}> ({
// CHECK-GENERIC-NEXT:    ^bb0(%acc: !coda.tile<256x128xf32>):
// CHECK-GENERIC-NEXT:      "coda.yield"(%acc) : (!coda.tile<256x128xf32>) -> ()
// CHECK-GENERIC-NEXT:    }) : (tensor<64x256xf16>, tensor<128x64xf16>) -> tensor<256x128xf32>
// CHECK-GENERIC-NEXT:    %1 = "coda.gemm"(%a, %w) <{transpose_b, operandSegmentSizes = array<i32: 1, 1, 0>}> ({
// CHECK-GENERIC-NEXT:    ^bb0(%acc: !coda.tile<256x128xf32>):
// CHECK-GENERIC-NEXT:      "coda.yield"(%acc) : (!coda.tile<256x128xf32>) -> ()
// CHECK-GENERIC-NEXT:    }) : (tensor<256x64xf16>, tensor<128x64xf16>) -> tensor<256x128xf16>
// CHECK-GENERIC-NEXT:    %2 = "coda.gemm"(%at, %w) <{transpose_a, transpose_b, operandSegmentSizes = array<i32: 1, 1, 0>}> ({
// CHECK-GENERIC-NEXT:    ^bb0(%acc: !coda.tile<256x128xf32>):
// CHECK-GENERIC-NEXT:      "coda.yield"(%acc) : (!coda.tile<256x128xf32>) -> ()
// CHECK-GENERIC-NEXT:    }) : (tensor<64x256xf16>, tensor<128x64xf16>) -> tensor<256x128xf16>
// CHECK-GENERIC-NEXT:    "func.return"(%0, %1, %2) : (tensor<256x128xf32>, tensor<256x128xf16>, tensor<256x128xf16>) -> ()
// CHECK-GENERIC-NEXT:  }) : () -> ()

// -----

// A gemm with interleaved columns, a fixed tile config and extra inputs read by every
// broadcast primitive: scale/shift by rows, cols and a scalar, accumulate, load, broadcast,
// index, and several results (tiles in several element types, partials).
func.func @gemm_epilogue(%x: tensor<256x64xbf16>, %w: tensor<512x64xbf16>, %res: tensor<256x512xbf16>, %rstd: tensor<256xf32>, %g: tensor<512xbf16>, %bias: tensor<64xf32>, %alpha: tensor<f32>, %pos: tensor<256xi32>) -> (tensor<256x512xbf16>, tensor<256x512xf32>, !coda.partials<rows, 256, sum>, tensor<256x512xi32>) {
  %d:4 = coda.gemm %x, %w transpose_b interleave 64 config #coda.config<bm = 128, bn = 256, bk = 64, warps = 8, stages = 3> ins(%res, %rstd, %g, %bias, %alpha, %pos : tensor<256x512xbf16>, tensor<256xf32>, tensor<512xbf16>, tensor<64xf32>, tensor<f32>, tensor<256xi32>) : tensor<256x64xbf16>, tensor<512x64xbf16> -> (tensor<256x512xbf16>, tensor<256x512xf32>, !coda.partials<rows, 256, sum>, tensor<256x512xi32>) {
  ^bb0(%acc: !coda.tile<256x512xf32>, %res_: tensor<256x512xbf16>, %rstd_: tensor<256xf32>, %g_: tensor<512xbf16>, %bias_: tensor<64xf32>, %alpha_: tensor<f32>, %pos_: tensor<256xi32>):
    %0 = coda.scale %acc, %rstd_ rows : !coda.tile<256x512xf32>, tensor<256xf32>
    %1 = coda.scale %0, %g_ cols : !coda.tile<256x512xf32>, tensor<512xbf16>
    %2 = coda.scale %1, %alpha_ scalar : !coda.tile<256x512xf32>, tensor<f32>
    %3 = coda.shift %2, %rstd_ rows : !coda.tile<256x512xf32>, tensor<256xf32>
    %4 = coda.shift %3, %bias_ cols : !coda.tile<256x512xf32>, tensor<64xf32>
    %5 = coda.shift %4, %alpha_ scalar : !coda.tile<256x512xf32>, tensor<f32>
    %6 = coda.accumulate %5, %res_ : !coda.tile<256x512xf32>, tensor<256x512xbf16>
    %7 = coda.load %res_ : tensor<256x512xbf16> -> !coda.tile<256x512xf32>
    %8 = coda.broadcast %rstd_ rows : tensor<256xf32> -> !coda.tile<256x512xf32>
    %9 = coda.broadcast %bias_ cols : tensor<64xf32> -> !coda.tile<256x512xf32>
    %10 = coda.broadcast %pos_ rows : tensor<256xi32> -> !coda.tile<256x512xi32>
    %11 = coda.index rows : !coda.tile<256x512xi32>
    %12 = coda.index cols : !coda.tile<256x512xi32>
    %13 = coda.reduce sumsq %6 dim 1 : !coda.tile<256x512xf32> -> !coda.partials<rows, 256, sum>
    coda.yield %6, %7, %13, %12 : !coda.tile<256x512xf32>, !coda.tile<256x512xf32>, !coda.partials<rows, 256, sum>, !coda.tile<256x512xi32>
  }
  func.return %d#0, %d#1, %d#2, %d#3 : tensor<256x512xbf16>, tensor<256x512xf32>, !coda.partials<rows, 256, sum>, tensor<256x512xi32>
}

// CHECK-LABEL: func.func @gemm_epilogue(%x: tensor<256x64xbf16>, %w: tensor<512x64xbf16>, %res: tensor<256x512xbf16>, %rstd: tensor<256xf32>, %g: tensor<512xbf16>, %bias: tensor<64xf32>, %alpha: tensor<f32>, %pos: tensor<256xi32>) -> (tensor<256x512xbf16>, tensor<256x512xf32>, !coda.partials<rows, 256, sum>, tensor<256x512xi32>) {
// CHECK-NEXT:    %d, %d_1, %d_2, %d_3 = coda.gemm %x, %w transpose_b interleave 64 config #coda.config<bm = 128, bn = 256, bk = 64, warps = 8, stages = 3> ins(%res, %rstd, %g, %bias, %alpha, %pos : tensor<256x512xbf16>, tensor<256xf32>, tensor<512xbf16>, tensor<64xf32>, tensor<f32>, tensor<256xi32>) : tensor<256x64xbf16>, tensor<512x64xbf16> -> (tensor<256x512xbf16>, tensor<256x512xf32>, !coda.partials<rows, 256, sum>, tensor<256x512xi32>) {
// CHECK-NEXT:    ^bb0(%acc: !coda.tile<256x512xf32>, %res_: tensor<256x512xbf16>, %rstd_: tensor<256xf32>, %g_: tensor<512xbf16>, %bias_: tensor<64xf32>, %alpha_: tensor<f32>, %pos_: tensor<256xi32>):
// CHECK-NEXT:      %0 = coda.scale %acc, %rstd_ rows : !coda.tile<256x512xf32>, tensor<256xf32>
// CHECK-NEXT:      %1 = coda.scale %0, %g_ cols : !coda.tile<256x512xf32>, tensor<512xbf16>
// CHECK-NEXT:      %2 = coda.scale %1, %alpha_ scalar : !coda.tile<256x512xf32>, tensor<f32>
// CHECK-NEXT:      %3 = coda.shift %2, %rstd_ rows : !coda.tile<256x512xf32>, tensor<256xf32>
// CHECK-NEXT:      %4 = coda.shift %3, %bias_ cols : !coda.tile<256x512xf32>, tensor<64xf32>
// CHECK-NEXT:      %5 = coda.shift %4, %alpha_ scalar : !coda.tile<256x512xf32>, tensor<f32>
// CHECK-NEXT:      %6 = coda.accumulate %5, %res_ : !coda.tile<256x512xf32>, tensor<256x512xbf16>
// CHECK-NEXT:      %7 = coda.load %res_ : tensor<256x512xbf16> -> !coda.tile<256x512xf32>
// CHECK-NEXT:      %8 = coda.broadcast %rstd_ rows : tensor<256xf32> -> !coda.tile<256x512xf32>
// CHECK-NEXT:      %9 = coda.broadcast %bias_ cols : tensor<64xf32> -> !coda.tile<256x512xf32>
// CHECK-NEXT:      %10 = coda.broadcast %pos_ rows : tensor<256xi32> -> !coda.tile<256x512xi32>
// CHECK-NEXT:      %11 = coda.index rows : !coda.tile<256x512xi32>
// CHECK-NEXT:      %12 = coda.index cols : !coda.tile<256x512xi32>
// CHECK-NEXT:      %13 = coda.reduce sumsq %6 dim 1 : !coda.tile<256x512xf32> -> !coda.partials<rows, 256, sum>
// CHECK-NEXT:      coda.yield %6, %7, %13, %12 : !coda.tile<256x512xf32>, !coda.tile<256x512xf32>, !coda.partials<rows, 256, sum>, !coda.tile<256x512xi32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %d, %d_1, %d_2, %d_3 : tensor<256x512xbf16>, tensor<256x512xf32>, !coda.partials<rows, 256, sum>, tensor<256x512xi32>
// CHECK-NEXT:  }

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "gemm_epilogue", function_type = (tensor<256x64xbf16>, tensor<512x64xbf16>, tensor<256x512xbf16>, tensor<256xf32>, tensor<512xbf16>, tensor<64xf32>, tensor<f32>, tensor<256xi32>) -> (tensor<256x512xbf16>, tensor<256x512xf32>, !coda.partials<rows, 256, sum>, tensor<256x512xi32>)}> ({
// CHECK-GENERIC-NEXT:  ^bb0(%x: tensor<256x64xbf16>, %w: tensor<512x64xbf16>, %res: tensor<256x512xbf16>, %rstd: tensor<256xf32>, %g: tensor<512xbf16>, %bias: tensor<64xf32>, %alpha: tensor<f32>, %pos: tensor<256xi32>):
// CHECK-GENERIC-NEXT:    %d, %d_1, %d_2, %d_3 = "coda.gemm"(%x, %w, %res, %rstd, %g, %bias, %alpha, %pos) <{transpose_b, interleave = 64 : i64, config = #coda.config<bm = 128, bn = 256, bk = 64, warps = 8, stages = 3>, operandSegmentSizes = array<i32: 1, 1, 6>}> ({
// CHECK-GENERIC-NEXT:    ^bb0(%acc: !coda.tile<256x512xf32>, %res_: tensor<256x512xbf16>, %rstd_: tensor<256xf32>, %g_: tensor<512xbf16>, %bias_: tensor<64xf32>, %alpha_: tensor<f32>, %pos_: tensor<256xi32>):
// CHECK-GENERIC-NEXT:      %0 = "coda.scale"(%acc, %rstd_) <{axis = #coda<axis rows>}> : (!coda.tile<256x512xf32>, tensor<256xf32>) -> !coda.tile<256x512xf32>
// CHECK-GENERIC-NEXT:      %1 = "coda.scale"(%0, %g_) <{axis = #coda<axis cols>}> : (!coda.tile<256x512xf32>, tensor<512xbf16>) -> !coda.tile<256x512xf32>
// CHECK-GENERIC-NEXT:      %2 = "coda.scale"(%1, %alpha_) <{axis = #coda<axis scalar>}> : (!coda.tile<256x512xf32>, tensor<f32>) -> !coda.tile<256x512xf32>
// CHECK-GENERIC-NEXT:      %3 = "coda.shift"(%2, %rstd_) <{axis = #coda<axis rows>}> : (!coda.tile<256x512xf32>, tensor<256xf32>) -> !coda.tile<256x512xf32>
// CHECK-GENERIC-NEXT:      %4 = "coda.shift"(%3, %bias_) <{axis = #coda<axis cols>}> : (!coda.tile<256x512xf32>, tensor<64xf32>) -> !coda.tile<256x512xf32>
// CHECK-GENERIC-NEXT:      %5 = "coda.shift"(%4, %alpha_) <{axis = #coda<axis scalar>}> : (!coda.tile<256x512xf32>, tensor<f32>) -> !coda.tile<256x512xf32>
// CHECK-GENERIC-NEXT:      %6 = "coda.accumulate"(%5, %res_) : (!coda.tile<256x512xf32>, tensor<256x512xbf16>) -> !coda.tile<256x512xf32>
// CHECK-GENERIC-NEXT:      %7 = "coda.load"(%res_) : (tensor<256x512xbf16>) -> !coda.tile<256x512xf32>
// CHECK-GENERIC-NEXT:      %8 = "coda.broadcast"(%rstd_) <{axis = #coda<axis rows>}> : (tensor<256xf32>) -> !coda.tile<256x512xf32>
// CHECK-GENERIC-NEXT:      %9 = "coda.broadcast"(%bias_) <{axis = #coda<axis cols>}> : (tensor<64xf32>) -> !coda.tile<256x512xf32>
// CHECK-GENERIC-NEXT:      %10 = "coda.broadcast"(%pos_) <{axis = #coda<axis rows>}> : (tensor<256xi32>) -> !coda.tile<256x512xi32>
// CHECK-GENERIC-NEXT:      %11 = "coda.index"() <{axis = #coda<axis rows>}> : () -> !coda.tile<256x512xi32>
// CHECK-GENERIC-NEXT:      %12 = "coda.index"() <{axis = #coda<axis cols>}> : () -> !coda.tile<256x512xi32>
// CHECK-GENERIC-NEXT:      %13 = "coda.reduce"(%6) <{kind = #coda<reduce_kind sumsq>, dim = 1 : i64}> : (!coda.tile<256x512xf32>) -> !coda.partials<rows, 256, sum>
// CHECK-GENERIC-NEXT:      "coda.yield"(%6, %7, %13, %12) : (!coda.tile<256x512xf32>, !coda.tile<256x512xf32>, !coda.partials<rows, 256, sum>, !coda.tile<256x512xi32>) -> ()
// CHECK-GENERIC-NEXT:    }) : (tensor<256x64xbf16>, tensor<512x64xbf16>, tensor<256x512xbf16>, tensor<256xf32>, tensor<512xbf16>, tensor<64xf32>, tensor<f32>, tensor<256xi32>) -> (tensor<256x512xbf16>, tensor<256x512xf32>, !coda.partials<rows, 256, sum>, tensor<256x512xi32>)
// CHECK-GENERIC-NEXT:    "func.return"(%d, %d_1, %d_2, %d_3) : (tensor<256x512xbf16>, tensor<256x512xf32>, !coda.partials<rows, 256, sum>, tensor<256x512xi32>) -> ()
// CHECK-GENERIC-NEXT:  }) : () -> ()

// -----

// interleave_wide: the SwiGLU backward pairs the N-wide dy with the 2N-wide saved z, whose
// [gate | up] halves are N apart; a 1 -> 2 pair_map writes dz in the user's layout.
func.func @gemm_interleave_wide(%dx: tensor<128x256xbf16>, %wd: tensor<256x64xbf16>, %z: tensor<128x128xbf16>) -> tensor<128x128xbf16> {
  %dz = coda.gemm %dx, %wd interleave_wide 64 ins(%z : tensor<128x128xbf16>) : tensor<128x256xbf16>, tensor<256x64xbf16> -> tensor<128x128xbf16> {
  ^bb0(%dy: !coda.tile<128x64xf32>, %z_: tensor<128x128xbf16>):
    %zt = coda.load %z_ : tensor<128x128xbf16> -> !coda.tile<128x128xf32>
    %d = coda.pair_map %dy, %zt : (!coda.tile<128x64xf32>, !coda.tile<128x128xf32>) -> !coda.tile<128x128xf32> {
    ^bb0(%g: f32, %gate: f32, %up: f32):
      %dg = arith.mulf %g, %up : f32
      %du = arith.mulf %g, %gate : f32
      coda.yield %dg, %du : f32, f32
    }
    coda.yield %d : !coda.tile<128x128xf32>
  }
  func.return %dz : tensor<128x128xbf16>
}

// CHECK-LABEL: func.func @gemm_interleave_wide(%dx: tensor<128x256xbf16>, %wd: tensor<256x64xbf16>, %z: tensor<128x128xbf16>) -> tensor<128x128xbf16> {
// CHECK-NEXT:    %dz = coda.gemm %dx, %wd interleave_wide 64 ins(%z : tensor<128x128xbf16>) : tensor<128x256xbf16>, tensor<256x64xbf16> -> tensor<128x128xbf16> {
// CHECK-NEXT:    ^bb0(%dy: !coda.tile<128x64xf32>, %z_: tensor<128x128xbf16>):
// CHECK-NEXT:      %zt = coda.load %z_ : tensor<128x128xbf16> -> !coda.tile<128x128xf32>
// CHECK-NEXT:      %d = coda.pair_map stride 1 %dy, %zt : (!coda.tile<128x64xf32>, !coda.tile<128x128xf32>) -> !coda.tile<128x128xf32> {
// CHECK-NEXT:      ^bb0(%g: f32, %gate: f32, %up: f32):
// CHECK-NEXT:        %dg = arith.mulf %g, %up : f32
// CHECK-NEXT:        %du = arith.mulf %g, %gate : f32
// CHECK-NEXT:        coda.yield %dg, %du : f32, f32
// CHECK-NEXT:      }
// CHECK-NEXT:      coda.yield %d : !coda.tile<128x128xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %dz : tensor<128x128xbf16>
// CHECK-NEXT:  }

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "gemm_interleave_wide", function_type = (tensor<128x256xbf16>, tensor<256x64xbf16>, tensor<128x128xbf16>) -> tensor<128x128xbf16>}> ({
// CHECK-GENERIC-NEXT:  ^bb0(%dx: tensor<128x256xbf16>, %wd: tensor<256x64xbf16>, %z: tensor<128x128xbf16>):
// CHECK-GENERIC-NEXT:    %dz = "coda.gemm"(%dx, %wd, %z) <{interleave_wide = 64 : i64, operandSegmentSizes = array<i32: 1, 1, 1>}> ({
// CHECK-GENERIC-NEXT:    ^bb0(%dy: !coda.tile<128x64xf32>, %z_: tensor<128x128xbf16>):
// CHECK-GENERIC-NEXT:      %zt = "coda.load"(%z_) : (tensor<128x128xbf16>) -> !coda.tile<128x128xf32>
// CHECK-GENERIC-NEXT:      %d = "coda.pair_map"(%dy, %zt) <{stride = 1 : i64}> ({
// CHECK-GENERIC-NEXT:      ^bb0(%g: f32, %gate: f32, %up: f32):
// CHECK-GENERIC-NEXT:        %dg = "arith.mulf"(%g, %up) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
// CHECK-GENERIC-NEXT:        %du = "arith.mulf"(%g, %gate) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
// CHECK-GENERIC-NEXT:        "coda.yield"(%dg, %du) : (f32, f32) -> ()
// CHECK-GENERIC-NEXT:      }) : (!coda.tile<128x64xf32>, !coda.tile<128x128xf32>) -> !coda.tile<128x128xf32>
// CHECK-GENERIC-NEXT:      "coda.yield"(%d) : (!coda.tile<128x128xf32>) -> ()
// CHECK-GENERIC-NEXT:    }) : (tensor<128x256xbf16>, tensor<256x64xbf16>, tensor<128x128xbf16>) -> tensor<128x128xbf16>
// CHECK-GENERIC-NEXT:    "func.return"(%dz) : (tensor<128x128xbf16>) -> ()
// CHECK-GENERIC-NEXT:  }) : () -> ()

// -----

// ===== coda.map and coda.pair_map

func.func @maps(%z: tensor<64x256xbf16>, %pos: tensor<64xi32>, %invf: tensor<32xf32>) -> (tensor<64x128xbf16>, tensor<64x256xf32>, tensor<64x256xbf16>, tensor<64x256xf32>) {
  %r:4 = coda.elementwise [64, 256] ins(%z, %pos, %invf : tensor<64x256xbf16>, tensor<64xi32>, tensor<32xf32>) -> (tensor<64x128xbf16>, tensor<64x256xf32>, tensor<64x256xbf16>, tensor<64x256xf32>) {
  ^bb0(%z_: tensor<64x256xbf16>, %pos_: tensor<64xi32>, %invf_: tensor<32xf32>):
    %x = coda.load %z_ : tensor<64x256xbf16> -> !coda.tile<64x256xf32>
    %p = coda.broadcast %pos_ rows : tensor<64xi32> -> !coda.tile<64x256xi32>
    %f = coda.broadcast %invf_ cols : tensor<32xf32> -> !coda.tile<64x256xf32>
    %silu = coda.map %x : !coda.tile<64x256xf32> -> !coda.tile<64x256xf32> {
    ^bb0(%v: f32):
      %n = arith.negf %v : f32
      %e = math.exp %n : f32
      %one = arith.constant 1.000000e+00 : f32
      %d = arith.addf %one, %e : f32
      %s = arith.divf %v, %d : f32
      coda.yield %s : f32
    }
    %ang = coda.map %p, %f : (!coda.tile<64x256xi32>, !coda.tile<64x256xf32>) -> !coda.tile<64x256xf32> {
    ^bb0(%pi: i32, %fi: f32):
      %pf = arith.sitofp %pi : i32 to f32
      %a = arith.mulf %pf, %fi : f32
      coda.yield %a : f32
    }
    %cos, %sin = coda.map %ang : !coda.tile<64x256xf32> -> (!coda.tile<64x256xf32>, !coda.tile<64x256xf32>) {
    ^bb0(%a: f32):
      %c = math.cos %a : f32
      %s = math.sin %a : f32
      coda.yield %c, %s : f32, f32
    }
    %gated = coda.pair_map %x : !coda.tile<64x256xf32> -> !coda.tile<64x128xf32> {
    ^bb0(%g: f32, %u: f32):
      %m = arith.mulf %g, %u : f32
      coda.yield %m : f32
    }
    %rot = coda.pair_map stride 16 %x, %cos, %sin : (!coda.tile<64x256xf32>, !coda.tile<64x256xf32>, !coda.tile<64x256xf32>) -> !coda.tile<64x256xf32> {
    ^bb0(%x0: f32, %x1: f32, %c0: f32, %c1: f32, %s0: f32, %s1: f32):
      %a = arith.mulf %x0, %c0 : f32
      %b = arith.mulf %x1, %s0 : f32
      %o0 = arith.subf %a, %b : f32
      %c = arith.mulf %x1, %c1 : f32
      %d = arith.mulf %x0, %s1 : f32
      %o1 = arith.addf %c, %d : f32
      coda.yield %o0, %o1 : f32, f32
    }
    %up = coda.pair_map %gated : !coda.tile<64x128xf32> -> !coda.tile<64x256xf32> {
    ^bb0(%v: f32):
      coda.yield %v, %v : f32, f32
    }
    %dg, %du = coda.pair_map %gated, %x : (!coda.tile<64x128xf32>, !coda.tile<64x256xf32>) -> (!coda.tile<64x256xf32>, !coda.tile<64x128xf32>) {
    ^bb0(%dy: f32, %g: f32, %u: f32):
      %dg = arith.mulf %dy, %u : f32
      %du = arith.mulf %dy, %g : f32
      coda.yield %dg, %du, %dg : f32, f32, f32
    }
    coda.yield %gated, %rot, %up, %silu : !coda.tile<64x128xf32>, !coda.tile<64x256xf32>, !coda.tile<64x256xf32>, !coda.tile<64x256xf32>
  }
  func.return %r#0, %r#1, %r#2, %r#3 : tensor<64x128xbf16>, tensor<64x256xf32>, tensor<64x256xbf16>, tensor<64x256xf32>
}

// CHECK-LABEL: func.func @maps(%z: tensor<64x256xbf16>, %pos: tensor<64xi32>, %invf: tensor<32xf32>) -> (tensor<64x128xbf16>, tensor<64x256xf32>, tensor<64x256xbf16>, tensor<64x256xf32>) {
// CHECK-NEXT:    %r, %r_1, %r_2, %r_3 = coda.elementwise [64, 256] ins(%z, %pos, %invf : tensor<64x256xbf16>, tensor<64xi32>, tensor<32xf32>) -> (tensor<64x128xbf16>, tensor<64x256xf32>, tensor<64x256xbf16>, tensor<64x256xf32>) {
// CHECK-NEXT:    ^bb0(%z_: tensor<64x256xbf16>, %pos_: tensor<64xi32>, %invf_: tensor<32xf32>):
// CHECK-NEXT:      %x = coda.load %z_ : tensor<64x256xbf16> -> !coda.tile<64x256xf32>
// CHECK-NEXT:      %p = coda.broadcast %pos_ rows : tensor<64xi32> -> !coda.tile<64x256xi32>
// CHECK-NEXT:      %f = coda.broadcast %invf_ cols : tensor<32xf32> -> !coda.tile<64x256xf32>
// CHECK-NEXT:      %silu = coda.map %x : !coda.tile<64x256xf32> -> !coda.tile<64x256xf32> {
// CHECK-NEXT:      ^bb0(%v: f32):
// CHECK-NEXT:        %n = arith.negf %v : f32
// CHECK-NEXT:        %e = math.exp %n : f32
// CHECK-NEXT:        %one = arith.constant 1.000000e+00 : f32
// CHECK-NEXT:        %d = arith.addf %one, %e : f32
// CHECK-NEXT:        %s = arith.divf %v, %d : f32
// CHECK-NEXT:        coda.yield %s : f32
// CHECK-NEXT:      }
// CHECK-NEXT:      %ang = coda.map %p, %f : (!coda.tile<64x256xi32>, !coda.tile<64x256xf32>) -> !coda.tile<64x256xf32> {
// CHECK-NEXT:      ^bb0(%pi: i32, %fi: f32):
// CHECK-NEXT:        %pf = arith.sitofp %pi : i32 to f32
// CHECK-NEXT:        %a = arith.mulf %pf, %fi : f32
// CHECK-NEXT:        coda.yield %a : f32
// CHECK-NEXT:      }
// CHECK-NEXT:      %cos, %sin = coda.map %ang : !coda.tile<64x256xf32> -> (!coda.tile<64x256xf32>, !coda.tile<64x256xf32>) {
// CHECK-NEXT:      ^bb0(%a_1: f32):
// CHECK-NEXT:        %c = math.cos %a_1 : f32
// CHECK-NEXT:        %s_1 = math.sin %a_1 : f32
// CHECK-NEXT:        coda.yield %c, %s_1 : f32, f32
// CHECK-NEXT:      }
// CHECK-NEXT:      %gated = coda.pair_map stride 1 %x : !coda.tile<64x256xf32> -> !coda.tile<64x128xf32> {
// CHECK-NEXT:      ^bb0(%g: f32, %u: f32):
// CHECK-NEXT:        %m = arith.mulf %g, %u : f32
// CHECK-NEXT:        coda.yield %m : f32
// CHECK-NEXT:      }
// CHECK-NEXT:      %rot = coda.pair_map stride 16 %x, %cos, %sin : (!coda.tile<64x256xf32>, !coda.tile<64x256xf32>, !coda.tile<64x256xf32>) -> !coda.tile<64x256xf32> {
// CHECK-NEXT:      ^bb0(%x0: f32, %x1: f32, %c0: f32, %c1: f32, %s0: f32, %s1: f32):
// CHECK-NEXT:        %a_2 = arith.mulf %x0, %c0 : f32
// CHECK-NEXT:        %b = arith.mulf %x1, %s0 : f32
// CHECK-NEXT:        %o0 = arith.subf %a_2, %b : f32
// CHECK-NEXT:        %c_1 = arith.mulf %x1, %c1 : f32
// CHECK-NEXT:        %d_1 = arith.mulf %x0, %s1 : f32
// CHECK-NEXT:        %o1 = arith.addf %c_1, %d_1 : f32
// CHECK-NEXT:        coda.yield %o0, %o1 : f32, f32
// CHECK-NEXT:      }
// CHECK-NEXT:      %up = coda.pair_map stride 1 %gated : !coda.tile<64x128xf32> -> !coda.tile<64x256xf32> {
// CHECK-NEXT:      ^bb0(%v_1: f32):
// CHECK-NEXT:        coda.yield %v_1, %v_1 : f32, f32
// CHECK-NEXT:      }
// CHECK-NEXT:      %dg, %du = coda.pair_map stride 1 %gated, %x : (!coda.tile<64x128xf32>, !coda.tile<64x256xf32>) -> (!coda.tile<64x256xf32>, !coda.tile<64x128xf32>) {
// CHECK-NEXT:      ^bb0(%dy: f32, %g_1: f32, %u_1: f32):
// CHECK-NEXT:        %dg_1 = arith.mulf %dy, %u_1 : f32
// CHECK-NEXT:        %du_1 = arith.mulf %dy, %g_1 : f32
// CHECK-NEXT:        coda.yield %dg_1, %du_1, %dg_1 : f32, f32, f32
// CHECK-NEXT:      }
// CHECK-NEXT:      coda.yield %gated, %rot, %up, %silu : !coda.tile<64x128xf32>, !coda.tile<64x256xf32>, !coda.tile<64x256xf32>, !coda.tile<64x256xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %r, %r_1, %r_2, %r_3 : tensor<64x128xbf16>, tensor<64x256xf32>, tensor<64x256xbf16>, tensor<64x256xf32>
// CHECK-NEXT:  }

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "maps", function_type = (tensor<64x256xbf16>, tensor<64xi32>, tensor<32xf32>) -> (tensor<64x128xbf16>, tensor<64x256xf32>, tensor<64x256xbf16>, tensor<64x256xf32>)}> ({
// CHECK-GENERIC-NEXT:  ^bb0(%z: tensor<64x256xbf16>, %pos: tensor<64xi32>, %invf: tensor<32xf32>):
// CHECK-GENERIC-NEXT:    %r, %r_1, %r_2, %r_3 = "coda.elementwise"(%z, %pos, %invf) <{shape = [#builtin.int<64>, #builtin.int<256>]}> ({
// CHECK-GENERIC-NEXT:    ^bb0(%z_: tensor<64x256xbf16>, %pos_: tensor<64xi32>, %invf_: tensor<32xf32>):
// CHECK-GENERIC-NEXT:      %x = "coda.load"(%z_) : (tensor<64x256xbf16>) -> !coda.tile<64x256xf32>
// CHECK-GENERIC-NEXT:      %p = "coda.broadcast"(%pos_) <{axis = #coda<axis rows>}> : (tensor<64xi32>) -> !coda.tile<64x256xi32>
// CHECK-GENERIC-NEXT:      %f = "coda.broadcast"(%invf_) <{axis = #coda<axis cols>}> : (tensor<32xf32>) -> !coda.tile<64x256xf32>
// CHECK-GENERIC-NEXT:      %silu = "coda.map"(%x) ({
// CHECK-GENERIC-NEXT:      ^bb0(%v: f32):
// CHECK-GENERIC-NEXT:        %n = "arith.negf"(%v) <{fastmath = #arith.fastmath<none>}> : (f32) -> f32
// CHECK-GENERIC-NEXT:        %e = "math.exp"(%n) <{fastmath = #arith.fastmath<none>}> : (f32) -> f32
// CHECK-GENERIC-NEXT:        %one = "arith.constant"() <{value = 1.000000e+00 : f32}> : () -> f32
// CHECK-GENERIC-NEXT:        %d = "arith.addf"(%one, %e) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
// CHECK-GENERIC-NEXT:        %s = "arith.divf"(%v, %d) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
// CHECK-GENERIC-NEXT:        "coda.yield"(%s) : (f32) -> ()
// CHECK-GENERIC-NEXT:      }) : (!coda.tile<64x256xf32>) -> !coda.tile<64x256xf32>
// CHECK-GENERIC-NEXT:      %ang = "coda.map"(%p, %f) ({
// CHECK-GENERIC-NEXT:      ^bb0(%pi: i32, %fi: f32):
// CHECK-GENERIC-NEXT:        %pf = "arith.sitofp"(%pi) : (i32) -> f32
// CHECK-GENERIC-NEXT:        %a = "arith.mulf"(%pf, %fi) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
// CHECK-GENERIC-NEXT:        "coda.yield"(%a) : (f32) -> ()
// CHECK-GENERIC-NEXT:      }) : (!coda.tile<64x256xi32>, !coda.tile<64x256xf32>) -> !coda.tile<64x256xf32>
// CHECK-GENERIC-NEXT:      %cos, %sin = "coda.map"(%ang) ({
// CHECK-GENERIC-NEXT:      ^bb0(%a_1: f32):
// CHECK-GENERIC-NEXT:        %c = "math.cos"(%a_1) <{fastmath = #arith.fastmath<none>}> : (f32) -> f32
// CHECK-GENERIC-NEXT:        %s_1 = "math.sin"(%a_1) <{fastmath = #arith.fastmath<none>}> : (f32) -> f32
// CHECK-GENERIC-NEXT:        "coda.yield"(%c, %s_1) : (f32, f32) -> ()
// CHECK-GENERIC-NEXT:      }) : (!coda.tile<64x256xf32>) -> (!coda.tile<64x256xf32>, !coda.tile<64x256xf32>)
// CHECK-GENERIC-NEXT:      %gated = "coda.pair_map"(%x) <{stride = 1 : i64}> ({
// CHECK-GENERIC-NEXT:      ^bb0(%g: f32, %u: f32):
// CHECK-GENERIC-NEXT:        %m = "arith.mulf"(%g, %u) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
// CHECK-GENERIC-NEXT:        "coda.yield"(%m) : (f32) -> ()
// CHECK-GENERIC-NEXT:      }) : (!coda.tile<64x256xf32>) -> !coda.tile<64x128xf32>
// CHECK-GENERIC-NEXT:      %rot = "coda.pair_map"(%x, %cos, %sin) <{stride = 16 : i64}> ({
// CHECK-GENERIC-NEXT:      ^bb0(%x0: f32, %x1: f32, %c0: f32, %c1: f32, %s0: f32, %s1: f32):
// CHECK-GENERIC-NEXT:        %a_2 = "arith.mulf"(%x0, %c0) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
// CHECK-GENERIC-NEXT:        %b = "arith.mulf"(%x1, %s0) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
// CHECK-GENERIC-NEXT:        %o0 = "arith.subf"(%a_2, %b) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
// CHECK-GENERIC-NEXT:        %c_1 = "arith.mulf"(%x1, %c1) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
// CHECK-GENERIC-NEXT:        %d_1 = "arith.mulf"(%x0, %s1) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
// CHECK-GENERIC-NEXT:        %o1 = "arith.addf"(%c_1, %d_1) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
// CHECK-GENERIC-NEXT:        "coda.yield"(%o0, %o1) : (f32, f32) -> ()
// CHECK-GENERIC-NEXT:      }) : (!coda.tile<64x256xf32>, !coda.tile<64x256xf32>, !coda.tile<64x256xf32>) -> !coda.tile<64x256xf32>
// CHECK-GENERIC-NEXT:      %up = "coda.pair_map"(%gated) <{stride = 1 : i64}> ({
// CHECK-GENERIC-NEXT:      ^bb0(%v_1: f32):
// CHECK-GENERIC-NEXT:        "coda.yield"(%v_1, %v_1) : (f32, f32) -> ()
// CHECK-GENERIC-NEXT:      }) : (!coda.tile<64x128xf32>) -> !coda.tile<64x256xf32>
// CHECK-GENERIC-NEXT:      %dg, %du = "coda.pair_map"(%gated, %x) <{stride = 1 : i64}> ({
// CHECK-GENERIC-NEXT:      ^bb0(%dy: f32, %g_1: f32, %u_1: f32):
// CHECK-GENERIC-NEXT:        %dg_1 = "arith.mulf"(%dy, %u_1) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
// CHECK-GENERIC-NEXT:        %du_1 = "arith.mulf"(%dy, %g_1) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
// CHECK-GENERIC-NEXT:        "coda.yield"(%dg_1, %du_1, %dg_1) : (f32, f32, f32) -> ()
// CHECK-GENERIC-NEXT:      }) : (!coda.tile<64x128xf32>, !coda.tile<64x256xf32>) -> (!coda.tile<64x256xf32>, !coda.tile<64x128xf32>)
// CHECK-GENERIC-NEXT:      "coda.yield"(%gated, %rot, %up, %silu) : (!coda.tile<64x128xf32>, !coda.tile<64x256xf32>, !coda.tile<64x256xf32>, !coda.tile<64x256xf32>) -> ()
// CHECK-GENERIC-NEXT:    }) : (tensor<64x256xbf16>, tensor<64xi32>, tensor<32xf32>) -> (tensor<64x128xbf16>, tensor<64x256xf32>, tensor<64x256xbf16>, tensor<64x256xf32>)
// CHECK-GENERIC-NEXT:    "func.return"(%r, %r_1, %r_2, %r_3) : (tensor<64x128xbf16>, tensor<64x256xf32>, tensor<64x256xbf16>, tensor<64x256xf32>) -> ()
// CHECK-GENERIC-NEXT:  }) : () -> ()

// -----

// ===== reductions and select

func.func @reductions(%l: tensor<64x512xbf16>, %t: tensor<64xi32>) -> (!coda.partials<rows, 64, sum>, !coda.partials<rows, 64, sum>, !coda.partials<rows, 64, max>, !coda.partials<rows, 64, lse>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, max>, !coda.partials<cols, 512, lse>, !coda.partials<rows, 64, sum>, tensor<64x512xf32>) {
  %r:10 = coda.elementwise [64, 512] config #coda.config<bm = 64, bn = 128, bk = 16, warps = 4, stages = 1> ins(%l, %t : tensor<64x512xbf16>, tensor<64xi32>) -> (!coda.partials<rows, 64, sum>, !coda.partials<rows, 64, sum>, !coda.partials<rows, 64, max>, !coda.partials<rows, 64, lse>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, max>, !coda.partials<cols, 512, lse>, !coda.partials<rows, 64, sum>, tensor<64x512xf32>) {
  ^bb0(%l_: tensor<64x512xbf16>, %t_: tensor<64xi32>):
    %x = coda.load %l_ : tensor<64x512xbf16> -> !coda.tile<64x512xf32>
    %s1 = coda.reduce sum %x dim 1 : !coda.tile<64x512xf32> -> !coda.partials<rows, 64, sum>
    %q1 = coda.reduce sumsq %x dim 1 : !coda.tile<64x512xf32> -> !coda.partials<rows, 64, sum>
    %m1 = coda.reduce max %x dim 1 : !coda.tile<64x512xf32> -> !coda.partials<rows, 64, max>
    %e1 = coda.reduce lse %x dim 1 : !coda.tile<64x512xf32> -> !coda.partials<rows, 64, lse>
    %s0 = coda.reduce sum %x dim 0 : !coda.tile<64x512xf32> -> !coda.partials<cols, 512, sum>
    %q0 = coda.reduce sumsq %x dim 0 : !coda.tile<64x512xf32> -> !coda.partials<cols, 512, sum>
    %m0 = coda.reduce max %x dim 0 : !coda.tile<64x512xf32> -> !coda.partials<cols, 512, max>
    %e0 = coda.reduce lse %x dim 0 : !coda.tile<64x512xf32> -> !coda.partials<cols, 512, lse>
    %sel = coda.select %x, %t_ : !coda.tile<64x512xf32>, tensor<64xi32> -> !coda.partials<rows, 64, sum>
    %seg = coda.segment_reduce sumsq %x width 128 : !coda.tile<64x512xf32>
    %seg2 = coda.segment_reduce sum %seg width 64 : !coda.tile<64x512xf32>
    %seg3 = coda.segment_reduce max %seg2 width 512 : !coda.tile<64x512xf32>
    coda.yield %s1, %q1, %m1, %e1, %s0, %q0, %m0, %e0, %sel, %seg3 : !coda.partials<rows, 64, sum>, !coda.partials<rows, 64, sum>, !coda.partials<rows, 64, max>, !coda.partials<rows, 64, lse>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, max>, !coda.partials<cols, 512, lse>, !coda.partials<rows, 64, sum>, !coda.tile<64x512xf32>
  }
  func.return %r#0, %r#1, %r#2, %r#3, %r#4, %r#5, %r#6, %r#7, %r#8, %r#9 : !coda.partials<rows, 64, sum>, !coda.partials<rows, 64, sum>, !coda.partials<rows, 64, max>, !coda.partials<rows, 64, lse>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, max>, !coda.partials<cols, 512, lse>, !coda.partials<rows, 64, sum>, tensor<64x512xf32>
}

// CHECK-LABEL: func.func @reductions(%l: tensor<64x512xbf16>, %t: tensor<64xi32>) -> (!coda.partials<rows, 64, sum>, !coda.partials<rows, 64, sum>, !coda.partials<rows, 64, max>, !coda.partials<rows, 64, lse>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, max>, !coda.partials<cols, 512, lse>, !coda.partials<rows, 64, sum>, tensor<64x512xf32>) {
// CHECK-NEXT:    %r, %r_1, %r_2, %r_3, %r_4, %r_5, %r_6, %r_7, %r_8, %r_9 = coda.elementwise [64, 512] config #coda.config<bm = 64, bn = 128, bk = 16, warps = 4, stages = 1> ins(%l, %t : tensor<64x512xbf16>, tensor<64xi32>) -> (!coda.partials<rows, 64, sum>, !coda.partials<rows, 64, sum>, !coda.partials<rows, 64, max>, !coda.partials<rows, 64, lse>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, max>, !coda.partials<cols, 512, lse>, !coda.partials<rows, 64, sum>, tensor<64x512xf32>) {
// CHECK-NEXT:    ^bb0(%l_: tensor<64x512xbf16>, %t_: tensor<64xi32>):
// CHECK-NEXT:      %x = coda.load %l_ : tensor<64x512xbf16> -> !coda.tile<64x512xf32>
// CHECK-NEXT:      %s1 = coda.reduce sum %x dim 1 : !coda.tile<64x512xf32> -> !coda.partials<rows, 64, sum>
// CHECK-NEXT:      %q1 = coda.reduce sumsq %x dim 1 : !coda.tile<64x512xf32> -> !coda.partials<rows, 64, sum>
// CHECK-NEXT:      %m1 = coda.reduce max %x dim 1 : !coda.tile<64x512xf32> -> !coda.partials<rows, 64, max>
// CHECK-NEXT:      %e1 = coda.reduce lse %x dim 1 : !coda.tile<64x512xf32> -> !coda.partials<rows, 64, lse>
// CHECK-NEXT:      %s0 = coda.reduce sum %x dim 0 : !coda.tile<64x512xf32> -> !coda.partials<cols, 512, sum>
// CHECK-NEXT:      %q0 = coda.reduce sumsq %x dim 0 : !coda.tile<64x512xf32> -> !coda.partials<cols, 512, sum>
// CHECK-NEXT:      %m0 = coda.reduce max %x dim 0 : !coda.tile<64x512xf32> -> !coda.partials<cols, 512, max>
// CHECK-NEXT:      %e0 = coda.reduce lse %x dim 0 : !coda.tile<64x512xf32> -> !coda.partials<cols, 512, lse>
// CHECK-NEXT:      %sel = coda.select %x, %t_ : !coda.tile<64x512xf32>, tensor<64xi32> -> !coda.partials<rows, 64, sum>
// CHECK-NEXT:      %seg = coda.segment_reduce sumsq %x width 128 : !coda.tile<64x512xf32>
// CHECK-NEXT:      %seg2 = coda.segment_reduce sum %seg width 64 : !coda.tile<64x512xf32>
// CHECK-NEXT:      %seg3 = coda.segment_reduce max %seg2 width 512 : !coda.tile<64x512xf32>
// CHECK-NEXT:      coda.yield %s1, %q1, %m1, %e1, %s0, %q0, %m0, %e0, %sel, %seg3 : !coda.partials<rows, 64, sum>, !coda.partials<rows, 64, sum>, !coda.partials<rows, 64, max>, !coda.partials<rows, 64, lse>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, max>, !coda.partials<cols, 512, lse>, !coda.partials<rows, 64, sum>, !coda.tile<64x512xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %r, %r_1, %r_2, %r_3, %r_4, %r_5, %r_6, %r_7, %r_8, %r_9 : !coda.partials<rows, 64, sum>, !coda.partials<rows, 64, sum>, !coda.partials<rows, 64, max>, !coda.partials<rows, 64, lse>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, max>, !coda.partials<cols, 512, lse>, !coda.partials<rows, 64, sum>, tensor<64x512xf32>
// CHECK-NEXT:  }

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "reductions", function_type = (tensor<64x512xbf16>, tensor<64xi32>) -> (!coda.partials<rows, 64, sum>, !coda.partials<rows, 64, sum>, !coda.partials<rows, 64, max>, !coda.partials<rows, 64, lse>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, max>, !coda.partials<cols, 512, lse>, !coda.partials<rows, 64, sum>, tensor<64x512xf32>)}> ({
// CHECK-GENERIC-NEXT:  ^bb0(%l: tensor<64x512xbf16>, %t: tensor<64xi32>):
// CHECK-GENERIC-NEXT:    %r, %r_1, %r_2, %r_3, %r_4, %r_5, %r_6, %r_7, %r_8, %r_9 = "coda.elementwise"(%l, %t) <{shape = [#builtin.int<64>, #builtin.int<512>], config = #coda.config<bm = 64, bn = 128, bk = 16, warps = 4, stages = 1>}> ({
// CHECK-GENERIC-NEXT:    ^bb0(%l_: tensor<64x512xbf16>, %t_: tensor<64xi32>):
// CHECK-GENERIC-NEXT:      %x = "coda.load"(%l_) : (tensor<64x512xbf16>) -> !coda.tile<64x512xf32>
// CHECK-GENERIC-NEXT:      %s1 = "coda.reduce"(%x) <{kind = #coda<reduce_kind sum>, dim = 1 : i64}> : (!coda.tile<64x512xf32>) -> !coda.partials<rows, 64, sum>
// CHECK-GENERIC-NEXT:      %q1 = "coda.reduce"(%x) <{kind = #coda<reduce_kind sumsq>, dim = 1 : i64}> : (!coda.tile<64x512xf32>) -> !coda.partials<rows, 64, sum>
// CHECK-GENERIC-NEXT:      %m1 = "coda.reduce"(%x) <{kind = #coda<reduce_kind max>, dim = 1 : i64}> : (!coda.tile<64x512xf32>) -> !coda.partials<rows, 64, max>
// CHECK-GENERIC-NEXT:      %e1 = "coda.reduce"(%x) <{kind = #coda<reduce_kind lse>, dim = 1 : i64}> : (!coda.tile<64x512xf32>) -> !coda.partials<rows, 64, lse>
// CHECK-GENERIC-NEXT:      %s0 = "coda.reduce"(%x) <{kind = #coda<reduce_kind sum>, dim = 0 : i64}> : (!coda.tile<64x512xf32>) -> !coda.partials<cols, 512, sum>
// CHECK-GENERIC-NEXT:      %q0 = "coda.reduce"(%x) <{kind = #coda<reduce_kind sumsq>, dim = 0 : i64}> : (!coda.tile<64x512xf32>) -> !coda.partials<cols, 512, sum>
// CHECK-GENERIC-NEXT:      %m0 = "coda.reduce"(%x) <{kind = #coda<reduce_kind max>, dim = 0 : i64}> : (!coda.tile<64x512xf32>) -> !coda.partials<cols, 512, max>
// CHECK-GENERIC-NEXT:      %e0 = "coda.reduce"(%x) <{kind = #coda<reduce_kind lse>, dim = 0 : i64}> : (!coda.tile<64x512xf32>) -> !coda.partials<cols, 512, lse>
// CHECK-GENERIC-NEXT:      %sel = "coda.select"(%x, %t_) : (!coda.tile<64x512xf32>, tensor<64xi32>) -> !coda.partials<rows, 64, sum>
// CHECK-GENERIC-NEXT:      %seg = "coda.segment_reduce"(%x) <{kind = #coda<reduce_kind sumsq>, width = 128 : i64}> : (!coda.tile<64x512xf32>) -> !coda.tile<64x512xf32>
// CHECK-GENERIC-NEXT:      %seg2 = "coda.segment_reduce"(%seg) <{kind = #coda<reduce_kind sum>, width = 64 : i64}> : (!coda.tile<64x512xf32>) -> !coda.tile<64x512xf32>
// CHECK-GENERIC-NEXT:      %seg3 = "coda.segment_reduce"(%seg2) <{kind = #coda<reduce_kind max>, width = 512 : i64}> : (!coda.tile<64x512xf32>) -> !coda.tile<64x512xf32>
// CHECK-GENERIC-NEXT:      "coda.yield"(%s1, %q1, %m1, %e1, %s0, %q0, %m0, %e0, %sel, %seg3) : (!coda.partials<rows, 64, sum>, !coda.partials<rows, 64, sum>, !coda.partials<rows, 64, max>, !coda.partials<rows, 64, lse>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, max>, !coda.partials<cols, 512, lse>, !coda.partials<rows, 64, sum>, !coda.tile<64x512xf32>) -> ()
// CHECK-GENERIC-NEXT:    }) : (tensor<64x512xbf16>, tensor<64xi32>) -> (!coda.partials<rows, 64, sum>, !coda.partials<rows, 64, sum>, !coda.partials<rows, 64, max>, !coda.partials<rows, 64, lse>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, max>, !coda.partials<cols, 512, lse>, !coda.partials<rows, 64, sum>, tensor<64x512xf32>)
// CHECK-GENERIC-NEXT:    "func.return"(%r, %r_1, %r_2, %r_3, %r_4, %r_5, %r_6, %r_7, %r_8, %r_9) : (!coda.partials<rows, 64, sum>, !coda.partials<rows, 64, sum>, !coda.partials<rows, 64, max>, !coda.partials<rows, 64, lse>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, sum>, !coda.partials<cols, 512, max>, !coda.partials<cols, 512, lse>, !coda.partials<rows, 64, sum>, tensor<64x512xf32>) -> ()
// CHECK-GENERIC-NEXT:  }) : () -> ()

// -----

// ===== coda.fold

// Cross-entropy: per row lse - target logit, summed over kept rows; the finalize region
// turns the sum into a mean. A second fold maps sum-of-squares partials to rstd per row.
func.func @folds(%lse: !coda.partials<rows, 64, lse>, %tgt: !coda.partials<rows, 64, sum>, %t: tensor<64xi32>, %ss: !coda.partials<rows, 64, sum>, %count: tensor<f32>) -> (tensor<f32>, tensor<64xf32>, tensor<64xf32>) {
  %loss = coda.fold %lse, %tgt : !coda.partials<rows, 64, lse>, !coda.partials<rows, 64, sum> ins(%t, %count : tensor<64xi32>, tensor<f32>) -> tensor<f32> {
  ^bb0(%l: f32, %x: f32, %ti: i32, %n: f32):
    %ignore = arith.constant -100 : i32
    %keep = arith.cmpi ne, %ti, %ignore : i32
    %d = arith.subf %l, %x : f32
    %zero = arith.constant 0.000000e+00 : f32
    %v = arith.select %keep, %d, %zero : f32
    %m = arith.divf %v, %n : f32
    coda.yield %m : f32
  } finalize {
  ^bb0(%sum: f32):
    %two = arith.constant 2.000000e+00 : f32
    %h = arith.divf %sum, %two : f32
    coda.yield %h : f32
  }
  %rstd, %mean = coda.fold %ss : !coda.partials<rows, 64, sum> -> (tensor<64xf32>, tensor<64xf32>) {
  ^bb0(%s: f32):
    %d = arith.constant 1.280000e+02 : f32
    %eps = arith.constant 9.99999997e-07 : f32
    %ms = arith.divf %s, %d : f32
    %v = arith.addf %ms, %eps : f32
    %r = math.rsqrt %v : f32
    coda.yield %r, %ms : f32, f32
  }
  func.return %loss, %rstd, %mean : tensor<f32>, tensor<64xf32>, tensor<64xf32>
}

// CHECK-LABEL: func.func @folds(%lse: !coda.partials<rows, 64, lse>, %tgt: !coda.partials<rows, 64, sum>, %t: tensor<64xi32>, %ss: !coda.partials<rows, 64, sum>, %count: tensor<f32>) -> (tensor<f32>, tensor<64xf32>, tensor<64xf32>) {
// CHECK-NEXT:    %loss = coda.fold %lse, %tgt : !coda.partials<rows, 64, lse>, !coda.partials<rows, 64, sum> ins(%t, %count : tensor<64xi32>, tensor<f32>) -> tensor<f32> {
// CHECK-NEXT:    ^bb0(%l: f32, %x: f32, %ti: i32, %n: f32):
// CHECK-NEXT:      %ignore = arith.constant -100 : i32
// CHECK-NEXT:      %keep = arith.cmpi ne, %ti, %ignore : i32
// CHECK-NEXT:      %d = arith.subf %l, %x : f32
// CHECK-NEXT:      %zero = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:      %v = arith.select %keep, %d, %zero : f32
// CHECK-NEXT:      %m = arith.divf %v, %n : f32
// CHECK-NEXT:      coda.yield %m : f32
// CHECK-NEXT:    } finalize {
// CHECK-NEXT:    ^bb0(%sum: f32):
// CHECK-NEXT:      %two = arith.constant 2.000000e+00 : f32
// CHECK-NEXT:      %h = arith.divf %sum, %two : f32
// CHECK-NEXT:      coda.yield %h : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    %rstd, %mean = coda.fold %ss : !coda.partials<rows, 64, sum> -> (tensor<64xf32>, tensor<64xf32>) {
// CHECK-NEXT:    ^bb0(%s: f32):
// CHECK-NEXT:      %d = arith.constant 1.280000e+02 : f32
// CHECK-NEXT:      %eps = arith.constant 1.000000e-06 : f32
// CHECK-NEXT:      %ms = arith.divf %s, %d : f32
// CHECK-NEXT:      %v = arith.addf %ms, %eps : f32
// CHECK-NEXT:      %r = math.rsqrt %v : f32
// CHECK-NEXT:      coda.yield %r, %ms : f32, f32
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %loss, %rstd, %mean : tensor<f32>, tensor<64xf32>, tensor<64xf32>
// CHECK-NEXT:  }

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "folds", function_type = (!coda.partials<rows, 64, lse>, !coda.partials<rows, 64, sum>, tensor<64xi32>, !coda.partials<rows, 64, sum>, tensor<f32>) -> (tensor<f32>, tensor<64xf32>, tensor<64xf32>)}> ({
// CHECK-GENERIC-NEXT:  ^bb0(%lse: !coda.partials<rows, 64, lse>, %tgt: !coda.partials<rows, 64, sum>, %t: tensor<64xi32>, %ss: !coda.partials<rows, 64, sum>, %count: tensor<f32>):
// CHECK-GENERIC-NEXT:    %loss = "coda.fold"(%lse, %tgt, %t, %count) <{operandSegmentSizes = array<i32: 2, 2>}> ({
// CHECK-GENERIC-NEXT:    ^bb0(%l: f32, %x: f32, %ti: i32, %n: f32):
// CHECK-GENERIC-NEXT:      %ignore = "arith.constant"() <{value = -100 : i32}> : () -> i32
// CHECK-GENERIC-NEXT:      %keep = "arith.cmpi"(%ti, %ignore) <{predicate = 1 : i64}> : (i32, i32) -> i1
// CHECK-GENERIC-NEXT:      %d = "arith.subf"(%l, %x) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
// CHECK-GENERIC-NEXT:      %zero = "arith.constant"() <{value = 0.000000e+00 : f32}> : () -> f32
// CHECK-GENERIC-NEXT:      %v = "arith.select"(%keep, %d, %zero) : (i1, f32, f32) -> f32
// CHECK-GENERIC-NEXT:      %m = "arith.divf"(%v, %n) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
// CHECK-GENERIC-NEXT:      "coda.yield"(%m) : (f32) -> ()
// CHECK-GENERIC-NEXT:    }, {
// CHECK-GENERIC-NEXT:    ^bb0(%sum: f32):
// CHECK-GENERIC-NEXT:      %two = "arith.constant"() <{value = 2.000000e+00 : f32}> : () -> f32
// CHECK-GENERIC-NEXT:      %h = "arith.divf"(%sum, %two) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
// CHECK-GENERIC-NEXT:      "coda.yield"(%h) : (f32) -> ()
// CHECK-GENERIC-NEXT:    }) : (!coda.partials<rows, 64, lse>, !coda.partials<rows, 64, sum>, tensor<64xi32>, tensor<f32>) -> tensor<f32>
// CHECK-GENERIC-NEXT:    %rstd, %mean = "coda.fold"(%ss) <{operandSegmentSizes = array<i32: 1, 0>}> ({
// CHECK-GENERIC-NEXT:    ^bb0(%s: f32):
// CHECK-GENERIC-NEXT:      %d = "arith.constant"() <{value = 1.280000e+02 : f32}> : () -> f32
// CHECK-GENERIC-NEXT:      %eps = "arith.constant"() <{value = 1.000000e-06 : f32}> : () -> f32
// CHECK-GENERIC-NEXT:      %ms = "arith.divf"(%s, %d) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
// CHECK-GENERIC-NEXT:      %v = "arith.addf"(%ms, %eps) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
// CHECK-GENERIC-NEXT:      %r = "math.rsqrt"(%v) <{fastmath = #arith.fastmath<none>}> : (f32) -> f32
// CHECK-GENERIC-NEXT:      "coda.yield"(%r, %ms) : (f32, f32) -> ()
// CHECK-GENERIC-NEXT:    }, {
// CHECK-GENERIC-NEXT:    }) : (!coda.partials<rows, 64, sum>) -> (tensor<64xf32>, tensor<64xf32>)
// CHECK-GENERIC-NEXT:    "func.return"(%loss, %rstd, %mean) : (tensor<f32>, tensor<64xf32>, tensor<64xf32>) -> ()
// CHECK-GENERIC-NEXT:  }) : () -> ()

// -----

// A fold of plain inputs (no partials), and discardable attributes on kernels.
func.func @fold_inputs(%v: tensor<64xf32>) -> (tensor<64xf32>, tensor<f32>) {
  %a, %b = coda.fold ins(%v : tensor<64xf32>) -> (tensor<64xf32>, tensor<f32>) attributes {tag = "row-kernel"} {
  ^bb0(%x: f32):
    %y = math.exp %x : f32
    coda.yield %y, %x : f32, f32
  }
  func.return %a, %b : tensor<64xf32>, tensor<f32>
}

// CHECK-LABEL: func.func @fold_inputs(%v: tensor<64xf32>) -> (tensor<64xf32>, tensor<f32>) {
// CHECK-NEXT:    %a, %b = coda.fold ins(%v : tensor<64xf32>) -> (tensor<64xf32>, tensor<f32>) attributes {tag = "row-kernel"} {
// CHECK-NEXT:    ^bb0(%x: f32):
// CHECK-NEXT:      %y = math.exp %x : f32
// CHECK-NEXT:      coda.yield %y, %x : f32, f32
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %a, %b : tensor<64xf32>, tensor<f32>
// CHECK-NEXT:  }

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "fold_inputs", function_type = (tensor<64xf32>) -> (tensor<64xf32>, tensor<f32>)}> ({
// CHECK-GENERIC-NEXT:  ^bb0(%v: tensor<64xf32>):
// CHECK-GENERIC-NEXT:    %a, %b = "coda.fold"(%v) <{operandSegmentSizes = array<i32: 0, 1>}> ({
// CHECK-GENERIC-NEXT:    ^bb0(%x: f32):
// CHECK-GENERIC-NEXT:      %y = "math.exp"(%x) <{fastmath = #arith.fastmath<none>}> : (f32) -> f32
// CHECK-GENERIC-NEXT:      "coda.yield"(%y, %x) : (f32, f32) -> ()
// CHECK-GENERIC-NEXT:    }, {
// CHECK-GENERIC-NEXT:    }) {tag = "row-kernel"} : (tensor<64xf32>) -> (tensor<64xf32>, tensor<f32>)
// CHECK-GENERIC-NEXT:    "func.return"(%a, %b) : (tensor<64xf32>, tensor<f32>) -> ()
// CHECK-GENERIC-NEXT:  }) : () -> ()
