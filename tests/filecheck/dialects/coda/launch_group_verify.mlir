// RUN: coda-opt %s --split-input-file --verify-diagnostics | filecheck %s
// RUN: not coda-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=EXIT

// Malformed launch groups: located diagnostics (the group op), one per chunk; without
// --verify-diagnostics coda-opt exits non-zero and prints no traceback.
// EXIT-NOT: Traceback

func.func @dependent_members(%x: tensor<8x16xf32>) -> (!coda.partials<rows, 8, sum>, tensor<8xf32>) {
  %p, %r = coda.launch_group -> (!coda.partials<rows, 8, sum>, tensor<8xf32>) {
    %p0 = coda.elementwise [8, 16] ins(%x : tensor<8x16xf32>) -> !coda.partials<rows, 8, sum> {
    ^bb0(%xt: tensor<8x16xf32>):
      %t = coda.load %xt : tensor<8x16xf32> -> !coda.tile<8x16xf32>
      %s = coda.reduce sumsq %t dim 1 : !coda.tile<8x16xf32> -> !coda.partials<rows, 8, sum>
      coda.yield %s : !coda.partials<rows, 8, sum>
    }
    %r0 = coda.fold %p0 : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
    ^bb0(%v: f32):
      coda.yield %v : f32
    }
    coda.yield %p0, %r0 : !coda.partials<rows, 8, sum>, tensor<8xf32>
  }
  func.return %p, %r : !coda.partials<rows, 8, sum>, tensor<8xf32>
}
// CHECK: {{.*}}launch_group_verify.mlir:9:{{[0-9]+}}: error: 'coda.launch_group' op member #1 ('coda.fold') uses a result of member #0 ('coda.elementwise'): kernels sharing a launch run concurrently and must not depend on each other

// -----

func.func @gemm_member(%a: tensor<8x16xf32>, %w: tensor<16x16xf32>, %p: !coda.partials<rows, 8, sum>) -> (tensor<8x16xf32>, tensor<8xf32>) {
  %y, %r = coda.launch_group -> (tensor<8x16xf32>, tensor<8xf32>) {
    %y0 = coda.gemm %a, %w transpose_b : tensor<8x16xf32>, tensor<16x16xf32> -> tensor<8x16xf32> {
    ^bb0(%acc: !coda.tile<8x16xf32>):
      coda.yield %acc : !coda.tile<8x16xf32>
    }
    %r0 = coda.fold %p : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
    ^bb0(%v: f32):
      coda.yield %v : f32
    }
    coda.yield %y0, %r0 : tensor<8x16xf32>, tensor<8xf32>
  }
  func.return %y, %r : tensor<8x16xf32>, tensor<8xf32>
}
// CHECK: {{.*}}launch_group_verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.launch_group' op member #0 is 'coda.gemm': a launch group holds small kernels only (coda.elementwise, coda.fold)

// -----

func.func @one_member(%p: !coda.partials<rows, 8, sum>) -> tensor<8xf32> {
  %r = coda.launch_group -> tensor<8xf32> {
    %r0 = coda.fold %p : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
    ^bb0(%v: f32):
      coda.yield %v : f32
    }
    coda.yield %r0 : tensor<8xf32>
  }
  func.return %r : tensor<8xf32>
}
// CHECK: {{.*}}launch_group_verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.launch_group' op a launch group needs at least two kernels, got 1

// -----

func.func @yield_order(%p: !coda.partials<rows, 8, sum>, %q: !coda.partials<rows, 8, sum>) -> (tensor<8xf32>, tensor<8xf32>) {
  %r, %s = coda.launch_group -> (tensor<8xf32>, tensor<8xf32>) {
    %r0 = coda.fold %p : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
    ^bb0(%v: f32):
      coda.yield %v : f32
    }
    %s0 = coda.fold %q : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
    ^bb0(%v: f32):
      coda.yield %v : f32
    }
    coda.yield %s0, %r0 : tensor<8xf32>, tensor<8xf32>
  }
  func.return %r, %s : tensor<8xf32>, tensor<8xf32>
}
// CHECK: {{.*}}launch_group_verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.launch_group' op the launch group must yield every result of its members, in member order (2 values), yields 2 in another order

// -----

func.func @yield_missing(%p: !coda.partials<rows, 8, sum>, %q: !coda.partials<rows, 8, sum>) -> tensor<8xf32> {
  %r = coda.launch_group -> tensor<8xf32> {
    %r0 = coda.fold %p : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
    ^bb0(%v: f32):
      coda.yield %v : f32
    }
    %s0 = coda.fold %q : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
    ^bb0(%v: f32):
      coda.yield %v : f32
    }
    coda.yield %r0 : tensor<8xf32>
  }
  func.return %r : tensor<8xf32>
}
// CHECK: {{.*}}launch_group_verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.launch_group' op the launch group must yield every result of its members, in member order (2 values), yields 1

// -----

func.func @result_types(%p: !coda.partials<rows, 8, sum>, %q: !coda.partials<rows, 8, sum>) -> (tensor<8xf32>, tensor<8xbf16>) {
  %r, %s = coda.launch_group -> (tensor<8xf32>, tensor<8xbf16>) {
    %r0 = coda.fold %p : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
    ^bb0(%v: f32):
      coda.yield %v : f32
    }
    %s0 = coda.fold %q : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
    ^bb0(%v: f32):
      coda.yield %v : f32
    }
    coda.yield %r0, %s0 : tensor<8xf32>, tensor<8xf32>
  }
  func.return %r, %s : tensor<8xf32>, tensor<8xbf16>
}
// CHECK: {{.*}}launch_group_verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.launch_group' op the launch group's result types must be the types of the values it yields
