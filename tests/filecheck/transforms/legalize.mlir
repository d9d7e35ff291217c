// RUN: coda-opt %s --remarks --split-input-file -p coda-legalize 2>&1 | filecheck %s
// RUN: not coda-opt %s --remarks --split-input-file -p 'coda-legalize{remarks-as-errors=true}' 2>&1 | filecheck %s --check-prefix=ERR

// The proofs run on the F2 linear layout of the accumulator tile over the column-tile widths
// the lowering may pick; the smallest BN that keeps every op tile-local becomes a constraint.
// Remarks come first (stderr):
// CHECK: legalize.mlir:{{[0-9]+}}:5: remark: 'coda.pair_map' op cannot be proven tile-local: coda.pair_map stride 512 (pairs c, c + 512 in groups of 1024) is not tile-local: the partner lies outside the accumulator tile for every column tile width (BN=16: outside, BN=32: outside, BN=64: outside, BN=128: outside, BN=256: outside), it cannot read its groups from memory here (only in a standalone elementwise kernel, from a plain load of a kernel input), and 1024 columns are too many for one tile to exchange them in; split off into a separate kernel
// ERR: legalize.mlir:{{[0-9]+}}:5: error: 'coda.pair_map' op cannot be proven tile-local: coda.pair_map stride 512

// RoPE "half" with head_dim 128 pairs (i, i + 64) inside each head: tile-local when BN is a
// multiple of 128 (whole heads per tile).
func.func @rope_half(%x: tensor<8x64xf32>, %w: tensor<512x64xf32>, %a: tensor<8x512xf32>) -> tensor<8x512xf32> {
  %q = coda.gemm %x, %w transpose_b ins(%a : tensor<8x512xf32>) : tensor<8x64xf32>, tensor<512x64xf32> -> tensor<8x512xf32> {
  ^bb0(%acc: !coda.tile<8x512xf32>, %aa: tensor<8x512xf32>):
    %t = coda.load %aa : tensor<8x512xf32> -> !coda.tile<8x512xf32>
    %o = coda.pair_map stride 64 %acc, %t : (!coda.tile<8x512xf32>, !coda.tile<8x512xf32>) -> !coda.tile<8x512xf32> {
    ^bb0(%x1: f32, %x2: f32, %a1: f32, %a2: f32):
      %c = math.cos %a1 : f32
      %s = math.sin %a1 : f32
      %p = arith.mulf %x1, %c : f32
      %q2 = arith.mulf %x2, %s : f32
      %y1 = arith.subf %p, %q2 : f32
      %r = arith.mulf %x2, %c : f32
      %u = arith.mulf %x1, %s : f32
      %y2 = arith.addf %r, %u : f32
      coda.yield %y1, %y2 : f32, f32
    }
    coda.yield %o : !coda.tile<8x512xf32>
  }
  func.return %q : tensor<8x512xf32>
}
// CHECK-LABEL: func.func @rope_half
// CHECK:       coda.gemm {{.*}} attributes {coda.constraints = #coda.tile_constraints<bn_multiple_of = 128, reasons = ["coda.pair_map stride 64 (pairs c, c + 64 in groups of 128): thread-local when BN % 128 == 0"]>}

// -----

// QK-norm: a per-head sum of squares over segments of 64 columns needs BN % 64 == 0.
func.func @qk_norm(%x: tensor<8x64xf32>, %w: tensor<256x64xf32>) -> (tensor<8x256xf32>, !coda.partials<rows, 8, sum>) {
  %q, %p = coda.gemm %x, %w transpose_b : tensor<8x64xf32>, tensor<256x64xf32> -> (tensor<8x256xf32>, !coda.partials<rows, 8, sum>) {
  ^bb0(%acc: !coda.tile<8x256xf32>):
    %s = coda.segment_reduce sumsq %acc width 64 : !coda.tile<8x256xf32>
    %r = coda.reduce sum %acc dim 1 : !coda.tile<8x256xf32> -> !coda.partials<rows, 8, sum>
    coda.yield %s, %r : !coda.tile<8x256xf32>, !coda.partials<rows, 8, sum>
  }
  func.return %q, %p : tensor<8x256xf32>, !coda.partials<rows, 8, sum>
}
// CHECK-LABEL: func.func @qk_norm
// CHECK:       coda.gemm {{.*}} attributes {coda.constraints = #coda.tile_constraints<bn_multiple_of = 64, reasons = ["coda.segment_reduce width 64 (segments of 64 columns): {{.*}}-local when BN % 64 == 0"]>}

// -----

// Refused: pairs 512 apart (a gated activation whose columns were not interleaved). The op and
// what depends on it are split off into an elementwise kernel over the stored accumulator.
func.func @split_pair(%x: tensor<8x64xf32>, %w: tensor<1024x64xf32>) -> tensor<8x512xf32> {
  %g = coda.gemm %x, %w transpose_b : tensor<8x64xf32>, tensor<1024x64xf32> -> tensor<8x512xf32> {
  ^bb0(%acc: !coda.tile<8x1024xf32>):
    %o = coda.pair_map stride 512 %acc : !coda.tile<8x1024xf32> -> !coda.tile<8x512xf32> {
    ^bb0(%a: f32, %b: f32):
      %m = arith.mulf %a, %b : f32
      coda.yield %m : f32
    }
    coda.yield %o : !coda.tile<8x512xf32>
  }
  func.return %g : tensor<8x512xf32>
}
// CHECK-LABEL: func.func @split_pair
// CHECK:       %[[ACC:.*]] = coda.gemm %x, %w transpose_b : tensor<8x64xf32>, tensor<1024x64xf32> -> tensor<8x1024xf32> {
// CHECK-NEXT:  ^bb0(%[[A:.*]]: !coda.tile<8x1024xf32>):
// CHECK-NEXT:    coda.yield %[[A]]
// A 1024-wide tile would hold the pair groups, but it is wider than the kernel's own tile (128):
// the split kernel reads each pair's two halves from memory instead (no constraint).
// CHECK:       %[[G:.*]] = coda.elementwise [8, 1024] ins(%[[ACC]] : tensor<8x1024xf32>) -> tensor<8x512xf32> {
// CHECK:         coda.load
// CHECK:         coda.pair_map stride 512 {{.*}} attributes {coda.gathered}
// CHECK:       func.return %[[G]]
