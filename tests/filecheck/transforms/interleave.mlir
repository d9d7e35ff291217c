// RUN: coda-opt %s --split-input-file -p coda-interleave | filecheck %s

// SwiGLU fused into its producer: gate column j pairs with up column j + 128, never in one
// tile. Interleaving the gemm's columns by 128 makes the pair adjacent (stride 1); the weight
// stays in the user's [gate | up] layout (the lowering permutes the B-tile loads).
func.func @swiglu(%x: tensor<8x64xbf16>, %w: tensor<256x64xbf16>, %r: tensor<8xf32>) -> tensor<8x128xbf16> {
  %g = coda.gemm %x, %w transpose_b ins(%r : tensor<8xf32>) : tensor<8x64xbf16>, tensor<256x64xbf16> -> tensor<8x128xbf16> {
  ^bb0(%acc: !coda.tile<8x256xf32>, %rr: tensor<8xf32>):
    %s = coda.scale %acc, %rr rows : !coda.tile<8x256xf32>, tensor<8xf32>
    %o = coda.pair_map stride 128 %s : !coda.tile<8x256xf32> -> !coda.tile<8x128xf32> {
    ^bb0(%a: f32, %b: f32):
      %m = arith.mulf %a, %b : f32
      coda.yield %m : f32
    }
    coda.yield %o : !coda.tile<8x128xf32>
  }
  func.return %g : tensor<8x128xbf16>
}
// CHECK-LABEL: func.func @swiglu
// CHECK:       coda.gemm %x, %w transpose_b interleave 128 ins(%r : tensor<8xf32>)
// CHECK:         coda.scale %{{.*}} rows
// CHECK:         coda.pair_map stride 1 %{{.*}} : !coda.tile<8x256xf32> -> !coda.tile<8x128xf32>

// -----

// A column vector (bias) on the permuted columns is read at the user's column perm(c), like
// every N-wide access, so a biased gate/up projection interleaves too.
func.func @with_bias(%x: tensor<8x64xbf16>, %w: tensor<256x64xbf16>, %b: tensor<256xbf16>) -> tensor<8x128xbf16> {
  %g = coda.gemm %x, %w transpose_b ins(%b : tensor<256xbf16>) : tensor<8x64xbf16>, tensor<256x64xbf16> -> tensor<8x128xbf16> {
  ^bb0(%acc: !coda.tile<8x256xf32>, %bb: tensor<256xbf16>):
    %s = coda.shift %acc, %bb cols : !coda.tile<8x256xf32>, tensor<256xbf16>
    %o = coda.pair_map stride 128 %s : !coda.tile<8x256xf32> -> !coda.tile<8x128xf32> {
    ^bb0(%a: f32, %b2: f32):
      %m = arith.mulf %a, %b2 : f32
      coda.yield %m : f32
    }
    coda.yield %o : !coda.tile<8x128xf32>
  }
  func.return %g : tensor<8x128xbf16>
}
// CHECK-LABEL: func.func @with_bias
// CHECK:       coda.gemm %x, %w transpose_b interleave 128 ins(
// CHECK:         coda.shift %{{.*}} cols
// CHECK:         coda.pair_map stride 1

// -----

// Not interleaved: a rotation whose pairs (c, c + 32) already fit a tile (BN % 64 == 0) keeps
// the stride form; only gated pairs, or pairs no tile holds, are interleaved.
func.func @rope(%x: tensor<8x64xf32>, %w: tensor<128x64xf32>) -> tensor<8x128xf32> {
  %q = coda.gemm %x, %w transpose_b : tensor<8x64xf32>, tensor<128x64xf32> -> tensor<8x128xf32> {
  ^bb0(%acc: !coda.tile<8x128xf32>):
    %c = coda.index cols : !coda.tile<8x128xi32>
    %a = coda.map %c : !coda.tile<8x128xi32> -> !coda.tile<8x128xf32> {
    ^bb0(%i: i32):
      %f = arith.sitofp %i : i32 to f32
      coda.yield %f : f32
    }
    %o = coda.pair_map stride 32 %acc, %a : (!coda.tile<8x128xf32>, !coda.tile<8x128xf32>) -> !coda.tile<8x128xf32> {
    ^bb0(%x1: f32, %x2: f32, %a1: f32, %a2: f32):
      %y1 = arith.mulf %x1, %a1 : f32
      coda.yield %y1, %x2 : f32, f32
    }
    coda.yield %o : !coda.tile<8x128xf32>
  }
  func.return %q : tensor<8x128xf32>
}
// CHECK-LABEL: func.func @rope
// CHECK:       coda.gemm %x, %w transpose_b :
// CHECK:         coda.pair_map stride 32

// -----

// Not interleaved: another pair_map pairs the same columns differently (stride 1).
func.func @two_pairings(%x: tensor<8x64xf32>, %w: tensor<256x64xf32>) -> tensor<8x128xf32> {
  %g = coda.gemm %x, %w transpose_b : tensor<8x64xf32>, tensor<256x64xf32> -> tensor<8x128xf32> {
  ^bb0(%acc: !coda.tile<8x256xf32>):
    %r = coda.pair_map %acc : !coda.tile<8x256xf32> -> !coda.tile<8x256xf32> {
    ^bb0(%a: f32, %b: f32):
      coda.yield %b, %a : f32, f32
    }
    %o = coda.pair_map stride 128 %r : !coda.tile<8x256xf32> -> !coda.tile<8x128xf32> {
    ^bb0(%a: f32, %b: f32):
      %m = arith.mulf %a, %b : f32
      coda.yield %m : f32
    }
    coda.yield %o : !coda.tile<8x128xf32>
  }
  func.return %g : tensor<8x128xf32>
}
// CHECK-LABEL: func.func @two_pairings
// CHECK:       coda.gemm %x, %w transpose_b :
// CHECK:         coda.pair_map stride 1
// CHECK:         coda.pair_map stride 128
