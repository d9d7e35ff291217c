// RUN: not coda-opt %s -t triton --split-input-file 2>&1 | filecheck %s
// What the Triton lowering refuses, with the op and its location.

func.func @nn(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = nn.relu %x : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK: errors.mlir:5:3: error: 'nn.relu' op has no Triton lowering at function level

// -----

// Segments of 6 columns over a computed tile of a standalone kernel 8400 columns wide: no
// power-of-two tile holds them, there is no stored input to read them from, and the row is wider
// than one tile may cover to exchange them in, so legality (run by the target on hand-written
// coda) refuses the kernel instead of the lowering guessing.
func.func @seg_of_computed(%x: tensor<3x8400xf32>) -> tensor<3x8400xf32> {
  %y = coda.elementwise [3, 8400] ins(%x : tensor<3x8400xf32>) -> tensor<3x8400xf32> {
  ^bb0(%xx: tensor<3x8400xf32>):
    %t = coda.load %xx : tensor<3x8400xf32> -> !coda.tile<3x8400xf32>
    %e = coda.map %t : !coda.tile<3x8400xf32> -> !coda.tile<3x8400xf32> {
    ^bb0(%v: f32):
      %r = math.exp %v : f32
      coda.yield %r : f32
    }
    %s = coda.segment_reduce sum %e width 6 : !coda.tile<3x8400xf32>
    coda.yield %s : !coda.tile<3x8400xf32>
  }
  func.return %y : tensor<3x8400xf32>
}

// CHECK: errors.mlir:26:5: error: 'coda.segment_reduce' op cannot be proven tile-local: coda.segment_reduce width 6 (segments of 6 columns) is not tile-local: a segment reaches outside the tile
// CHECK-SAME: and 8400 columns are too many for one tile to exchange them in
