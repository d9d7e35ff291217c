// RUN: coda-opt %s --split-input-file -p coda-group-launches | filecheck %s
// RUN: coda-opt %s --split-input-file -p 'coda-group-launches{hoist=false}' | filecheck %s --check-prefix=NOHOIST

// Two GEMMs, each followed by a fold of its partials (the second GEMM reads the first fold, so
// the first fold can move neither up nor down to the second), then a GEMV over function
// arguments only: the GEMV may move up to either fold and joins the nearest.
func.func @hoist(%a: tensor<8x16xf32>, %w: tensor<32x16xf32>, %v: tensor<16x32xf32>, %g: tensor<16xf32>) -> (tensor<8xf32>, tensor<8x32xf32>, tensor<32xf32>, tensor<8xf32>) {
  %y, %p = coda.gemm %a, %w transpose_b : tensor<8x16xf32>, tensor<32x16xf32> -> (tensor<8x32xf32>, !coda.partials<rows, 8, sum>) {
  ^bb0(%acc: !coda.tile<8x32xf32>):
    %s = coda.reduce sumsq %acc dim 1 : !coda.tile<8x32xf32> -> !coda.partials<rows, 8, sum>
    coda.yield %acc, %s : !coda.tile<8x32xf32>, !coda.partials<rows, 8, sum>
  }
  %r = coda.fold %p : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
  ^bb0(%x: f32):
    %q = math.rsqrt %x : f32
    coda.yield %q : f32
  }
  %z, %p2 = coda.gemm %y, %v transpose_b ins(%r : tensor<8xf32>) : tensor<8x32xf32>, tensor<16x32xf32> -> (tensor<8x16xf32>, !coda.partials<rows, 8, sum>) {
  ^bb0(%acc: !coda.tile<8x16xf32>, %rv: tensor<8xf32>):
    %t = coda.scale %acc, %rv rows : !coda.tile<8x16xf32>, tensor<8xf32>
    %s = coda.reduce sum %t dim 1 : !coda.tile<8x16xf32> -> !coda.partials<rows, 8, sum>
    coda.yield %t, %s : !coda.tile<8x16xf32>, !coda.partials<rows, 8, sum>
  }
  %r2 = coda.fold %p2 : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
  ^bb0(%x: f32):
    coda.yield %x : f32
  }
  %c = coda.elementwise [32, 16] whole rows ins(%w, %g : tensor<32x16xf32>, tensor<16xf32>) -> tensor<32xf32> {
  ^bb0(%wt: tensor<32x16xf32>, %gv: tensor<16xf32>):
    %t = coda.load %wt : tensor<32x16xf32> -> !coda.tile<32x16xf32>
    %tg = coda.scale %t, %gv cols : !coda.tile<32x16xf32>, tensor<16xf32>
    %s = coda.reduce sum %tg dim 1 : !coda.tile<32x16xf32> -> !coda.partials<rows, 32, sum>
    coda.yield %s : !coda.partials<rows, 32, sum>
  }
  func.return %r, %y, %c, %r2 : tensor<8xf32>, tensor<8x32xf32>, tensor<32xf32>, tensor<8xf32>
}
// CHECK-LABEL: func.func @hoist
// CHECK:       %y, %p = coda.gemm %a, %w
// CHECK:       %r = coda.fold %p
// CHECK:       %z, %p2 = coda.gemm %y, %v transpose_b ins(%r
// CHECK:       %r2, %c = coda.launch_group -> (tensor<8xf32>, tensor<32xf32>) {
// CHECK-NEXT:    %r2_1 = coda.fold %p2 : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
// CHECK:         %c_1 = coda.elementwise [32, 16] whole rows ins(%w, %g
// CHECK:         coda.yield %r2_1, %c_1 : tensor<8xf32>, tensor<32xf32>
// CHECK-NEXT:  }
// CHECK-NEXT:  func.return %r, %y, %c, %r2

// Without hoisting only adjacent kernels share a launch: the same pair, already adjacent.
// NOHOIST-LABEL: func.func @hoist
// NOHOIST:       %r2, %c = coda.launch_group

// -----

// The GEMV comes first; the fold after the GEMM cannot move up, but nothing uses the GEMV before
// the fold, so the GEMV moves down to it.
func.func @sink(%a: tensor<8x16xf32>, %w: tensor<32x16xf32>, %g: tensor<16xf32>) -> (tensor<32xf32>, tensor<8xf32>) {
  %c = coda.elementwise [32, 16] whole rows ins(%w, %g : tensor<32x16xf32>, tensor<16xf32>) -> tensor<32xf32> {
  ^bb0(%wt: tensor<32x16xf32>, %gv: tensor<16xf32>):
    %t = coda.load %wt : tensor<32x16xf32> -> !coda.tile<32x16xf32>
    %tg = coda.scale %t, %gv cols : !coda.tile<32x16xf32>, tensor<16xf32>
    %s = coda.reduce sum %tg dim 1 : !coda.tile<32x16xf32> -> !coda.partials<rows, 32, sum>
    coda.yield %s : !coda.partials<rows, 32, sum>
  }
  %p = coda.gemm %a, %w transpose_b : tensor<8x16xf32>, tensor<32x16xf32> -> !coda.partials<rows, 8, sum> {
  ^bb0(%acc: !coda.tile<8x32xf32>):
    %s = coda.reduce sumsq %acc dim 1 : !coda.tile<8x32xf32> -> !coda.partials<rows, 8, sum>
    coda.yield %s : !coda.partials<rows, 8, sum>
  }
  %r = coda.fold %p : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
  ^bb0(%x: f32):
    coda.yield %x : f32
  }
  func.return %c, %r : tensor<32xf32>, tensor<8xf32>
}
// CHECK-LABEL: func.func @sink
// CHECK-NEXT:  %p = coda.gemm %a, %w
// CHECK:       %c, %r = coda.launch_group -> (tensor<32xf32>, tensor<8xf32>) {
// CHECK-NEXT:    %c_1 = coda.elementwise [32, 16] whole rows
// CHECK:         %r_1 = coda.fold %p
// CHECK:         coda.yield %c_1, %r_1
// NOHOIST-LABEL: func.func @sink
// NOHOIST-NOT:   coda.launch_group

// -----

// Dependent small kernels never share a launch, directly (the fold reads the elementwise
// kernel's partials) or through an op between them (the second elementwise kernel reads the
// GEMM, which reads the first fold; and the GEMM reads the first fold, so it cannot move down).
func.func @dependent(%x: tensor<8x16xf32>, %w: tensor<16x16xf32>) -> (tensor<8xf32>, tensor<8x16xf32>) {
  %p = coda.elementwise [8, 16] ins(%x : tensor<8x16xf32>) -> !coda.partials<rows, 8, sum> {
  ^bb0(%xt: tensor<8x16xf32>):
    %t = coda.load %xt : tensor<8x16xf32> -> !coda.tile<8x16xf32>
    %s = coda.reduce sumsq %t dim 1 : !coda.tile<8x16xf32> -> !coda.partials<rows, 8, sum>
    coda.yield %s : !coda.partials<rows, 8, sum>
  }
  %r = coda.fold %p : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
  ^bb0(%v: f32):
    coda.yield %v : f32
  }
  %y = coda.gemm %x, %w transpose_b ins(%r : tensor<8xf32>) : tensor<8x16xf32>, tensor<16x16xf32> -> tensor<8x16xf32> {
  ^bb0(%acc: !coda.tile<8x16xf32>, %rv: tensor<8xf32>):
    %t = coda.scale %acc, %rv rows : !coda.tile<8x16xf32>, tensor<8xf32>
    coda.yield %t : !coda.tile<8x16xf32>
  }
  %z = coda.elementwise [8, 16] ins(%y : tensor<8x16xf32>) -> tensor<8x16xf32> {
  ^bb0(%yt: tensor<8x16xf32>):
    %t = coda.load %yt : tensor<8x16xf32> -> !coda.tile<8x16xf32>
    coda.yield %t : !coda.tile<8x16xf32>
  }
  func.return %r, %z : tensor<8xf32>, tensor<8x16xf32>
}
// CHECK-LABEL: func.func @dependent
// CHECK-NOT:   coda.launch_group
// CHECK:       func.return
