// RUN: not coda-opt %s --split-input-file 2>/dev/null | filecheck %s --check-prefix=ROUND
// RUN: not coda-opt %s --split-input-file 2>&1 | filecheck %s

// `coda.load %T cols_period P`: an [M, P] table repeated along a W-wide tile (P divides W),
// element (m, c) = T[m, c mod P] (the RoPE cos/sin tables). The first chunk is valid and
// round-trips; each other chunk breaks one verifier rule, with a located error and a non-zero
// exit (`not`).

// ROUND-LABEL: func.func @table
// ROUND:       %c = coda.load %t cols_period 8 : tensor<16x8xf32> -> !coda.tile<16x32xf32>
// ROUND:       %p = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
func.func @table(%t0: tensor<16x8xf32>, %m: tensor<16x32xf32>) -> tensor<16x32xf32> {
  %y = coda.elementwise [16, 32] ins(%t0, %m : tensor<16x8xf32>, tensor<16x32xf32>) -> tensor<16x32xf32> {
  ^bb0(%t: tensor<16x8xf32>, %m_: tensor<16x32xf32>):
    %c = coda.load %t cols_period 8 : tensor<16x8xf32> -> !coda.tile<16x32xf32>
    %p = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %s = coda.map %c, %p : (!coda.tile<16x32xf32>, !coda.tile<16x32xf32>) -> !coda.tile<16x32xf32> {
    ^bb0(%a: f32, %b: f32):
      %r = arith.mulf %a, %b : f32
      coda.yield %r : f32
    }
    coda.yield %s : !coda.tile<16x32xf32>
  }
  func.return %y : tensor<16x32xf32>
}

// -----

func.func @period_does_not_divide(%t0: tensor<16x12xf32>) -> tensor<16x32xf32> {
  %y = coda.elementwise [16, 32] ins(%t0 : tensor<16x12xf32>) -> tensor<16x32xf32> {
  ^bb0(%t: tensor<16x12xf32>):
    %c = coda.load %t cols_period 12 : tensor<16x12xf32> -> !coda.tile<16x32xf32>
    coda.yield %c : !coda.tile<16x32xf32>
  }
  func.return %y : tensor<16x32xf32>
}
// CHECK: load_cols_period.mlir:[[# @LINE - 5]]:5: error: 'coda.load' op cols_period 12 must be positive and divide the tile's 32 columns

// -----

func.func @table_width_is_not_the_period(%t0: tensor<16x16xf32>) -> tensor<16x32xf32> {
  %y = coda.elementwise [16, 32] ins(%t0 : tensor<16x16xf32>) -> tensor<16x32xf32> {
  ^bb0(%t: tensor<16x16xf32>):
    %c = coda.load %t cols_period 8 : tensor<16x16xf32> -> !coda.tile<16x32xf32>
    coda.yield %c : !coda.tile<16x32xf32>
  }
  func.return %y : tensor<16x32xf32>
}
// CHECK: load_cols_period.mlir:[[# @LINE - 5]]:5: error: 'coda.load' op a table read with cols_period 8 must be 16x8 (the tile's rows x the period), got 16x16

// -----

func.func @zero_period(%t0: tensor<16x8xf32>) -> tensor<16x32xf32> {
  %y = coda.elementwise [16, 32] ins(%t0 : tensor<16x8xf32>) -> tensor<16x32xf32> {
  ^bb0(%t: tensor<16x8xf32>):
    %c = coda.load %t cols_period 0 : tensor<16x8xf32> -> !coda.tile<16x32xf32>
    coda.yield %c : !coda.tile<16x32xf32>
  }
  func.return %y : tensor<16x32xf32>
}
// CHECK: load_cols_period.mlir:[[# @LINE - 5]]:5: error: 'coda.load' op cols_period 0 must be positive and divide the tile's 32 columns
