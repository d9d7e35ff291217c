// Parse errors that xDSL alone would report without a useful location: each is located at
// the offending text, with the source line and a caret, and nothing else.

// RUN: not coda-opt %S/Inputs/comment_only.mlir 2>&1 | filecheck %s --check-prefix=EMPTY
// EMPTY:     {{^.*}}comment_only.mlir:3:1: error: empty input: expected at least one operation
// EMPTY-NOT: {{.}}

// RUN: not coda-opt %s 2>&1 | filecheck %s
// CHECK:      {{^.*}}parse_errors.mlir:16:15: error: use of undefined value '%y'
// CHECK-NEXT: {{^}}  func.return %y : tensor<2x4xf32>
// CHECK-NEXT: {{^ {14}\^\^$}}
// CHECK-NOT:  {{.}}

func.func @undefined(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %0 = "nn.relu"(%x) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  func.return %y : tensor<2x4xf32>
}
