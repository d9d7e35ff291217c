// RUN: coda-opt %s -p coda-plan-mainloop --split-input-file 2>&1 | filecheck %s
// RUN: coda-opt %s -p 'coda-plan-mainloop{mainloop=tl}' --split-input-file 2>&1 | filecheck %s --check-prefix=TL
// coda-plan-mainloop records #coda.mainloop on the gemms whose epilogue reads or writes tiles
// (transforms/plan_mainloop.py): the hand-off is bf16 only where the value handed over is
// rounded to bf16 before any other use; a leading residual add of a bf16 tile is done by the MMA
// warpgroups (accumulate_first); everything else gets an f32 hand-off (BK 32, 4 stages).

// Remarks (stderr) come first, in program order, then the IR.
// CHECK: plan_mainloop.mlir:{{.*}} remark: 'coda.gemm' op runs the Gluon warp-specialized mainloop on Hopper (128x256x64, 3 stages, bf16 hand-off: the MMA warpgroups add the accumulated tile, whose sum the epilogue rounds to bf16 before any other use)
// CHECK: remark: 'coda.gemm' op runs the Gluon warp-specialized mainloop on Hopper (128x256x64, 3 stages, bf16 hand-off: the epilogue rounds the accumulator to bf16 before any other use)
// CHECK: remark: 'coda.gemm' op runs the Gluon warp-specialized mainloop on Hopper (128x256x32, 4 stages, f32 hand-off: the epilogue uses the accumulator unrounded
// CHECK: remark: 'coda.gemm' op keeps the tl mainloop: N = 100 not a multiple of 8 (TMA needs 16-byte strides)
// CHECK: remark: 'coda.gemm' op runs the Gluon warp-specialized mainloop on Hopper (128x256x32, 4 stages, f32 hand-off: the epilogue uses the accumulator unrounded
// CHECK: remark: 'coda.gemm' op keeps the tl mainloop: its 2N-wide tiles are interleaved with h = 128, not N = 256 (the Gluon epilogue reads and writes them as their two N-wide halves, columns n0 and N + n0)
// CHECK: remark: 'coda.gemm' op keeps the tl mainloop: its coda.index on an interleaved 2N-wide tile (the Gluon epilogue builds only loads, maps, stride-1 pair maps, row sums / maxima and stores on their two N-wide halves)
// CHECK: remark: 'coda.gemm' op keeps the tl mainloop: its columns are interleaved (paired-B loads and half-tile stores are tl-only)
// CHECK-NOT: remark
// CHECK: func.func @residual
// CHECK: coda.gemm %a, %b transpose_b ins(%c : tensor<64x256xbf16>)
// CHECK-SAME: coda.mainloop = #coda.mainloop<gluon_ws, bm = 128, bn = 256, bk = 64, stages = 3, handoff = bf16, accumulate_first = 0, epilogue_warps = 2, sub_rows = 16, regs = [168, 24, 176]>
// CHECK: func.func @rounded
// CHECK: handoff = bf16, accumulate_first = -1
// CHECK: func.func @product
// CHECK: handoff = f32, accumulate_first = -1, epilogue_warps = 2, sub_rows = 8
// CHECK: func.func @narrow
// CHECK-NOT: coda.mainloop =
// CHECK: func.return
// CHECK: func.func @swiglu_grad
// CHECK: coda.gemm %dy, %wd transpose_b interleave_wide 256
// CHECK-SAME: coda.mainloop = #coda.mainloop<gluon_ws, bm = 128, bn = 256, bk = 32, stages = 4, handoff = f32, accumulate_first = -1, epilogue_warps = 2, sub_rows = 8, regs = [168, 24, 176]>
// CHECK: func.func @wide_not_n
// CHECK-NOT: coda.mainloop =
// CHECK: func.func @wide_index
// CHECK-NOT: coda.mainloop =
// CHECK: func.func @gate_up
// CHECK-NOT: coda.mainloop =
// CHECK: func.return

// TL-COUNT-8: remark: 'coda.gemm' op keeps the tl mainloop: mainloop=tl
// TL-NOT: coda.mainloop =

// The residual add first, its sum only rounded: bf16 hand-off, input 0 accumulated by the MMAs.
func.func @residual(%a: tensor<64x128xbf16>, %b: tensor<256x128xbf16>, %c: tensor<64x256xbf16>) -> tensor<64x256xbf16> {
  %y = coda.gemm %a, %b transpose_b ins(%c : tensor<64x256xbf16>) : tensor<64x128xbf16>, tensor<256x128xbf16> -> tensor<64x256xbf16> {
  ^bb0(%acc: !coda.tile<64x256xf32>, %ci: tensor<64x256xbf16>):
    %t = coda.accumulate %acc, %ci : !coda.tile<64x256xf32>, tensor<64x256xbf16>
    coda.yield %t : !coda.tile<64x256xf32>
  }
  func.return %y : tensor<64x256xbf16>
}

// -----

// The accumulator rounded before any other use (stored in bf16, truncf in a map): bf16 hand-off.
func.func @rounded(%a: tensor<64x128xbf16>, %b: tensor<256x128xbf16>, %c: tensor<64x256xbf16>) -> (tensor<64x256xbf16>, tensor<64x256xbf16>) {
  %y, %z = coda.gemm %a, %b transpose_b ins(%c : tensor<64x256xbf16>) : tensor<64x128xbf16>, tensor<256x128xbf16> -> (tensor<64x256xbf16>, tensor<64x256xbf16>) {
  ^bb0(%acc: !coda.tile<64x256xf32>, %ci: tensor<64x256xbf16>):
    %r = coda.map %acc : !coda.tile<64x256xf32> -> !coda.tile<64x256xf32> {
    ^bb0(%v: f32):
      %h = arith.truncf %v : f32 to bf16
      %f = arith.extf %h : bf16 to f32
      coda.yield %f : f32
    }
    %t = coda.accumulate %r, %ci : !coda.tile<64x256xf32>, tensor<64x256xbf16>
    coda.yield %acc, %t : !coda.tile<64x256xf32>, !coda.tile<64x256xf32>
  }
  func.return %y, %z : tensor<64x256xbf16>, tensor<64x256xbf16>
}

// -----

// The accumulator used unrounded (a product with a loaded tile): f32 hand-off, 4 stages of BK 32;
// column partials: 8-row sub-tiles.
func.func @product(%a: tensor<64x128xbf16>, %b: tensor<128x256xbf16>, %c: tensor<64x256xbf16>) -> (tensor<64x256xbf16>, !coda.partials<cols, 256, sum>) {
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

// -----

// Not given it, with the reason: widths TMA cannot describe, a plain epilogue (no remark).
func.func @narrow(%a: tensor<64x128xbf16>, %b: tensor<100x128xbf16>, %c: tensor<64x100xbf16>) -> (tensor<64x100xbf16>, tensor<64x64xbf16>) {
  %y = coda.gemm %a, %b transpose_b ins(%c : tensor<64x100xbf16>) : tensor<64x128xbf16>, tensor<100x128xbf16> -> tensor<64x100xbf16> {
  ^bb0(%acc: !coda.tile<64x100xf32>, %ci: tensor<64x100xbf16>):
    %t = coda.accumulate %acc, %ci : !coda.tile<64x100xf32>, tensor<64x100xbf16>
    coda.yield %t : !coda.tile<64x100xf32>
  }
  %z = coda.gemm %a, %a transpose_b : tensor<64x128xbf16>, tensor<64x128xbf16> -> tensor<64x64xbf16> {
  ^bb0(%acc: !coda.tile<64x64xf32>):
    coda.yield %acc : !coda.tile<64x64xf32>
  }
  func.return %y, %z : tensor<64x100xbf16>, tensor<64x64xbf16>
}

// -----

// interleave_wide = N (the SwiGLU backward in the down-projection dgrad's epilogue: z and dz
// 2N wide, their [gate | up] halves at columns c and N + c): the mainloop is the plain one and the
// Gluon epilogue holds the 2N-wide tiles as their two halves; f32 hand-off (the accumulator is
// used unrounded), 8-row sub-tiles (z's halves are two loaded tiles).
func.func @swiglu_grad(%dy: tensor<64x128xbf16>, %wd: tensor<256x128xbf16>, %z: tensor<64x512xbf16>) -> (tensor<64x512xbf16>, !coda.partials<rows, 64, sum>) {
  %dz, %p = coda.gemm %dy, %wd transpose_b interleave_wide 256 ins(%z : tensor<64x512xbf16>) : tensor<64x128xbf16>, tensor<256x128xbf16> -> (tensor<64x512xbf16>, !coda.partials<rows, 64, sum>) {
  ^bb0(%acc: !coda.tile<64x256xf32>, %zi: tensor<64x512xbf16>):
    %zt = coda.load %zi : tensor<64x512xbf16> -> !coda.tile<64x512xf32>
    %d = coda.pair_map stride 1 %acc, %zt : (!coda.tile<64x256xf32>, !coda.tile<64x512xf32>) -> !coda.tile<64x512xf32> {
    ^bb0(%g: f32, %gate: f32, %up: f32):
      %a = arith.mulf %g, %up : f32
      %b = arith.mulf %g, %gate : f32
      coda.yield %a, %b : f32, f32
    }
    %zd = coda.map %zt, %d : (!coda.tile<64x512xf32>, !coda.tile<64x512xf32>) -> !coda.tile<64x512xf32> {
    ^bb0(%u: f32, %w: f32):
      %m = arith.mulf %u, %w : f32
      coda.yield %m : f32
    }
    %s = coda.reduce sum %zd dim 1 : !coda.tile<64x512xf32> -> !coda.partials<rows, 64, sum>
    coda.yield %d, %s : !coda.tile<64x512xf32>, !coda.partials<rows, 64, sum>
  }
  func.return %dz, %p : tensor<64x512xbf16>, !coda.partials<rows, 64, sum>
}

// -----

// interleave_wide h != N: the halves of a tile are no longer the blocks at n0 and N + n0.
func.func @wide_not_n(%dy: tensor<64x128xbf16>, %wd: tensor<256x128xbf16>, %z: tensor<64x512xbf16>) -> tensor<64x512xbf16> {
  %dz = coda.gemm %dy, %wd transpose_b interleave_wide 128 ins(%z : tensor<64x512xbf16>) : tensor<64x128xbf16>, tensor<256x128xbf16> -> tensor<64x512xbf16> {
  ^bb0(%acc: !coda.tile<64x256xf32>, %zi: tensor<64x512xbf16>):
    %zt = coda.load %zi : tensor<64x512xbf16> -> !coda.tile<64x512xf32>
    %d = coda.pair_map stride 1 %acc, %zt : (!coda.tile<64x256xf32>, !coda.tile<64x512xf32>) -> !coda.tile<64x512xf32> {
    ^bb0(%g: f32, %gate: f32, %up: f32):
      %a = arith.mulf %g, %up : f32
      %b = arith.mulf %g, %gate : f32
      coda.yield %a, %b : f32, f32
    }
    coda.yield %d : !coda.tile<64x512xf32>
  }
  func.return %dz : tensor<64x512xbf16>
}

// -----

// An op on a 2N-wide tile the halves do not support (its column index: the halves hold no
// interleaved column order).
func.func @wide_index(%dy: tensor<64x128xbf16>, %wd: tensor<256x128xbf16>, %z: tensor<64x512xbf16>) -> tensor<64x512xbf16> {
  %dz = coda.gemm %dy, %wd transpose_b interleave_wide 256 ins(%z : tensor<64x512xbf16>) : tensor<64x128xbf16>, tensor<256x128xbf16> -> tensor<64x512xbf16> {
  ^bb0(%acc: !coda.tile<64x256xf32>, %zi: tensor<64x512xbf16>):
    %zt = coda.load %zi : tensor<64x512xbf16> -> !coda.tile<64x512xf32>
    %i = coda.index cols : !coda.tile<64x512xi32>
    %d = coda.pair_map stride 1 %acc, %zt : (!coda.tile<64x256xf32>, !coda.tile<64x512xf32>) -> !coda.tile<64x512xf32> {
    ^bb0(%g: f32, %gate: f32, %up: f32):
      %a = arith.mulf %g, %up : f32
      %b = arith.mulf %g, %gate : f32
      coda.yield %a, %b : f32, f32
    }
    %e = coda.map %d, %i : (!coda.tile<64x512xf32>, !coda.tile<64x512xi32>) -> !coda.tile<64x512xf32> {
    ^bb0(%v: f32, %c: i32):
      %f = arith.sitofp %c : i32 to f32
      %r = arith.addf %v, %f : f32
      coda.yield %r : f32
    }
    coda.yield %e : !coda.tile<64x512xf32>
  }
  func.return %dz : tensor<64x512xbf16>
}

// -----

// interleave (the gate/up GEMM: accumulator columns paired by the B loads) stays tl.
func.func @gate_up(%h: tensor<64x128xbf16>, %w: tensor<512x128xbf16>, %c: tensor<64x256xbf16>) -> tensor<64x256xbf16> {
  %g = coda.gemm %h, %w transpose_b interleave 256 ins(%c : tensor<64x256xbf16>) : tensor<64x128xbf16>, tensor<512x128xbf16> -> tensor<64x256xbf16> {
  ^bb0(%acc: !coda.tile<64x512xf32>, %ci: tensor<64x256xbf16>):
    %o = coda.pair_map stride 1 %acc : (!coda.tile<64x512xf32>) -> !coda.tile<64x256xf32> {
    ^bb0(%a: f32, %b: f32):
      %m = arith.mulf %a, %b : f32
      coda.yield %m : f32
    }
    %r = coda.accumulate %o, %ci : !coda.tile<64x256xf32>, tensor<64x256xbf16>
    coda.yield %r : !coda.tile<64x256xf32>
  }
  func.return %g : tensor<64x256xbf16>
}
