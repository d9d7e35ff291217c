// RUN: not coda-opt %s -t triton --split-input-file 2>&1 | filecheck %s
// What the Triton lowering refuses, with the op and its location.

func.func @seg(%a: tensor<37x40xf32>, %w: tensor<40x288xf32>) -> tensor<37x288xf32> {
  %y = coda.gemm %a, %w : tensor<37x40xf32>, tensor<40x288xf32> -> tensor<37x288xf32> {
  ^bb0(%acc: !coda.tile<37x288xf32>):
    %s = coda.segment_reduce sum %acc width 6 : !coda.tile<37x288xf32>
    coda.yield %s : !coda.tile<37x288xf32>
  }
  func.return %y : tensor<37x288xf32>
}

// CHECK: errors.mlir:7:5: error: 'coda.segment_reduce' op needs one column tile covering all 288 columns

// -----

func.func @nn(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = nn.relu %x : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK: errors.mlir:18:3: error: 'nn.relu' op has no Triton lowering at function level
