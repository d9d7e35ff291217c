// RUN: not coda-opt %s 2>&1 | filecheck %s

// A syntax error: `file:line:col: error: message`, the source line, a caret under the
// offending token, nothing else (no traceback), exit status 1 (`not` needs non-zero; the
// pytest CLI tests pin the exact status).

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = nn.add %x, %w : tensor<4x8xf32> tensor<8xf32> -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// CHECK:      {{^.*}}syntax_error.mlir:8:40: error: Expected '->'
// CHECK-NEXT: {{^}}  %0 = nn.add %x, %w : tensor<4x8xf32> tensor<8xf32> -> tensor<4x8xf32>
// CHECK-NEXT: {{^                                       \^+$}}
// CHECK-NOT: {{.}}
