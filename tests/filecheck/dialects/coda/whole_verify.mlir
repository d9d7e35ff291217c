// RUN: coda-opt %s --split-input-file --verify-diagnostics | filecheck %s
// RUN: not coda-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=EXIT

// Verifier rules of `coda.elementwise whole rows|cols`: located diagnostics, one per chunk;
// without --verify-diagnostics coda-opt exits non-zero and prints no traceback.
// EXIT-NOT: Traceback

func.func @whole_scalar(%w: tensor<8x16xf32>) -> tensor<8xf32> {
  %c = coda.elementwise [8, 16] whole scalar ins(%w : tensor<8x16xf32>) -> tensor<8xf32> {
  ^bb0(%wt: tensor<8x16xf32>):
    %x = coda.load %wt : tensor<8x16xf32> -> !coda.tile<8x16xf32>
    %p = coda.reduce sum %x dim 1 : !coda.tile<8x16xf32> -> !coda.partials<rows, 8, sum>
    coda.yield %p : !coda.partials<rows, 8, sum>
  }
  func.return %c : tensor<8xf32>
}
// CHECK: {{.*}}whole_verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: expected rows or cols after 'whole'

// -----

func.func @whole_rows_cols_partials(%w: tensor<8x16xf32>) -> tensor<16xf32> {
  %c = coda.elementwise [8, 16] whole rows ins(%w : tensor<8x16xf32>) -> tensor<16xf32> {
  ^bb0(%wt: tensor<8x16xf32>):
    %x = coda.load %wt : tensor<8x16xf32> -> !coda.tile<8x16xf32>
    %p = coda.reduce sum %x dim 0 : !coda.tile<8x16xf32> -> !coda.partials<cols, 16, sum>
    coda.yield %p : !coda.partials<cols, 16, sum>
  }
  func.return %c : tensor<16xf32>
}
// CHECK: {{.*}}whole_verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op a whole rows kernel completes rows reductions only; value #0 is !coda.partials<cols, 16, sum> (use a tiled coda.elementwise for it)

// -----

func.func @whole_result_partials(%w: tensor<8x16xf32>) -> !coda.partials<rows, 8, sum> {
  %c = coda.elementwise [8, 16] whole rows ins(%w : tensor<8x16xf32>) -> !coda.partials<rows, 8, sum> {
  ^bb0(%wt: tensor<8x16xf32>):
    %x = coda.load %wt : tensor<8x16xf32> -> !coda.tile<8x16xf32>
    %p = coda.reduce sum %x dim 1 : !coda.tile<8x16xf32> -> !coda.partials<rows, 8, sum>
    coda.yield %p : !coda.partials<rows, 8, sum>
  }
  func.return %c : !coda.partials<rows, 8, sum>
}
// CHECK: {{.*}}whole_verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op result #0 holds a rows reduction completed in the program and must be a float tensor of shape 8, got !coda.partials<rows, 8, sum>

// -----

func.func @whole_result_shape(%w: tensor<8x16xf32>) -> tensor<16xf32> {
  %c = coda.elementwise [8, 16] whole rows ins(%w : tensor<8x16xf32>) -> tensor<16xf32> {
  ^bb0(%wt: tensor<8x16xf32>):
    %x = coda.load %wt : tensor<8x16xf32> -> !coda.tile<8x16xf32>
    %p = coda.reduce sum %x dim 1 : !coda.tile<8x16xf32> -> !coda.partials<rows, 8, sum>
    coda.yield %p : !coda.partials<rows, 8, sum>
  }
  func.return %c : tensor<16xf32>
}
// CHECK: {{.*}}whole_verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op result #0 holds a rows reduction completed in the program and must be a float tensor of shape 8, got tensor<16xf32>
