// RUN: coda-opt %s --remarks -p 'coda-plan-mainloop{mainloop=gluon}' --split-input-file 2>&1 | filecheck %s
// RUN: coda-opt %s --remarks -p 'coda-plan-mainloop{mainloop=tl}' --split-input-file 2>&1 | filecheck %s --check-prefix=TL
// RUN: coda-opt %s --remarks -p coda-plan-mainloop --split-input-file 2>&1 | filecheck %s --check-prefix=AUTO
// coda-plan-mainloop records #coda.mainloop on the gemms whose epilogue reads or writes tiles
// (transforms/plan_mainloop.py; `mainloop=gluon` here: at any size): the hand-off is bf16 only where the value handed over is
// rounded to bf16 before any other use; a leading residual add of a bf16 tile is done by the MMA
// warpgroups (accumulate_first); everything else gets an f32 hand-off (BK 32, 4 stages).

// Remarks (stderr) come first, in program order, then the IR.
// CHECK: plan_mainloop.mlir:{{.*}} remark: 'coda.gemm' op runs the Gluon warp-specialized mainloop on Hopper (128x256x64, 3 stages, bf16 hand-off: the MMA warpgroups add the accumulated tile, whose sum the epilogue rounds to bf16 before any other use)
// CHECK: remark: 'coda.gemm' op runs the Gluon warp-specialized mainloop on Hopper (128x256x64, 3 stages, bf16 hand-off: the epilogue rounds the accumulator to bf16 before any other use)
// CHECK: remark: 'coda.gemm' op runs the Gluon warp-specialized mainloop on Hopper (128x256x32, 4 stages, f32 hand-off: the epilogue uses the accumulator unrounded
// CHECK: remark: 'coda.gemm' op keeps the tl mainloop: N = 100 not a multiple of 8 (TMA needs 16-byte strides)
// CHECK: remark: 'coda.gemm' op keeps the tl mainloop: its row log-sum-exp partials (the 2-warp Gluon epilogue ran the LM head's cross-entropy epilogue at 4x its GEMM on the H100)
// CHECK-COUNT-2: remark: 'coda.gemm' op runs the Gluon warp-specialized mainloop on Hopper (128x256x64, 3 stages, bf16 hand-off: the MMA warpgroups add
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
// CHECK: func.func @logits_lse
// CHECK-NOT: coda.mainloop =
// CHECK: func.return

// TL-COUNT-7: remark: 'coda.gemm' op keeps the tl mainloop: mainloop=tl
// TL-NOT: coda.mainloop =

// `auto` (the default) also keeps gemms too small to hide the epilogue on tl: K < 2048, or fewer
// than 3 tiles of 128x256 per SM of an H100 (396); the large residual gemm gets the record.
// AUTO: remark: 'coda.gemm' op keeps the tl mainloop: K = 128 < 2048: a tile's mainloop is too short to hide the 2-warp epilogue partition
// AUTO-COUNT-2: keeps the tl mainloop: K = 128 < 2048
// AUTO: keeps the tl mainloop: N = 100 not a multiple of 8
// AUTO: keeps the tl mainloop: its row log-sum-exp partials
// AUTO: remark: 'coda.gemm' op runs the Gluon warp-specialized mainloop on Hopper (128x256x64, 3 stages, bf16 hand-off: the MMA warpgroups add
// AUTO: remark: 'coda.gemm' op keeps the tl mainloop: 256 tiles of 128x256, fewer than 3 per SM of an H100
// AUTO-NOT: remark
// AUTO: func.func @residual
// AUTO-NOT: coda.mainloop =
// AUTO: func.func @large
// AUTO: coda.mainloop = #coda.mainloop<gluon_ws, bm = 128, bn = 256, bk = 64, stages = 3, handoff = bf16, accumulate_first = 0
// AUTO: func.func @few_tiles
// AUTO-NOT: coda.mainloop =

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

// Row log-sum-exp partials (the LM head's cross-entropy epilogue): the tl mainloop, by measurement.
func.func @logits_lse(%a: tensor<64x128xbf16>, %b: tensor<256x128xbf16>) -> (tensor<64x256xbf16>, !coda.partials<rows, 64, lse>) {
  %y, %p = coda.gemm %a, %b transpose_b : tensor<64x128xbf16>, tensor<256x128xbf16> -> (tensor<64x256xbf16>, !coda.partials<rows, 64, lse>) {
  ^bb0(%acc: !coda.tile<64x256xf32>):
    %l = coda.reduce lse %acc dim 1 : !coda.tile<64x256xf32> -> !coda.partials<rows, 64, lse>
    coda.yield %acc, %l : !coda.tile<64x256xf32>, !coda.partials<rows, 64, lse>
  }
  func.return %y, %p : tensor<64x256xbf16>, !coda.partials<rows, 64, lse>
}

// -----

// LLaMA-8B's out-projection shape: K = 4096, 1024 tiles (7.8 per SM): large enough for `auto`.
func.func @large(%a: tensor<8192x4096xbf16>, %b: tensor<4096x4096xbf16>, %c: tensor<8192x4096xbf16>) -> tensor<8192x4096xbf16> {
  %y = coda.gemm %a, %b transpose_b ins(%c : tensor<8192x4096xbf16>) : tensor<8192x4096xbf16>, tensor<4096x4096xbf16> -> tensor<8192x4096xbf16> {
  ^bb0(%acc: !coda.tile<8192x4096xf32>, %ci: tensor<8192x4096xbf16>):
    %t = coda.accumulate %acc, %ci : !coda.tile<8192x4096xf32>, tensor<8192x4096xbf16>
    coda.yield %t : !coda.tile<8192x4096xf32>
  }
  func.return %y : tensor<8192x4096xbf16>
}

// -----

// GPT-2 medium's down-projection shape: K = 4096 but N = 1024, 256 tiles (1.9 per SM).
func.func @few_tiles(%a: tensor<8192x4096xbf16>, %b: tensor<1024x4096xbf16>, %c: tensor<8192x1024xbf16>) -> tensor<8192x1024xbf16> {
  %y = coda.gemm %a, %b transpose_b ins(%c : tensor<8192x1024xbf16>) : tensor<8192x4096xbf16>, tensor<1024x4096xbf16> -> tensor<8192x1024xbf16> {
  ^bb0(%acc: !coda.tile<8192x1024xf32>, %ci: tensor<8192x1024xbf16>):
    %t = coda.accumulate %acc, %ci : !coda.tile<8192x1024xf32>, tensor<8192x1024xbf16>
    coda.yield %t : !coda.tile<8192x1024xf32>
  }
  func.return %y : tensor<8192x1024xbf16>
}
