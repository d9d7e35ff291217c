// RUN: not coda-opt %s 2>&1 | filecheck %s
// RUN: not coda-opt %s -p cse,dce 2>&1 | filecheck %s
// RUN: not coda-opt %s --print-op-generic 2>&1 | filecheck %s

// Verifier errors: every failing op is reported, each with its own location and name, no
// IR is printed, no traceback, and the exit status is non-zero (1: see test_coda_opt_cli.py).
// Passes do not run on IR that does not verify.

func.func @block(%x: tensor<4x8xbf16>, %w: tensor<16x4xbf16>) -> tensor<4x16xbf16> {
  %0 = "nn.linear"(%x, %w) : (tensor<4x8xbf16>, tensor<16x4xbf16>) -> tensor<4x16xbf16>
  func.return %0 : tensor<4x16xbf16>
}

func.func @kernel(%a: tensor<16x32xf32>, %b: tensor<32x64xf32>, %v: tensor<48xf32>) -> tensor<16x64xf32> {
  %0 = coda.gemm %a, %b ins(%v : tensor<48xf32>) : tensor<16x32xf32>, tensor<32x64xf32> -> tensor<16x64xf32> {
  ^bb0(%acc: !coda.tile<16x64xf32>, %v_: tensor<48xf32>):
    %1 = coda.scale %acc, %v_ cols : !coda.tile<16x64xf32>, tensor<48xf32>
    coda.yield %1 : !coda.tile<16x64xf32>
  }
  func.return %0 : tensor<16x64xf32>
}

// CHECK:      {{^.*}}verify_error.mlir:10:3: error: 'nn.linear' op x has 8 columns but w (NxK, nn.Linear layout) has 4: expected w of shape Nx8
// CHECK-NEXT: {{^.*}}verify_error.mlir:17:5: error: 'coda.scale' op vector operand must have shape 64 (one value per column), or a length that divides it (repeated periodically), got 48
// CHECK-NOT:  {{.}}
