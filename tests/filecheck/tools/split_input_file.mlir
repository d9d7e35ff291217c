// RUN: not coda-opt %s --split-input-file 2>&1 | filecheck %s
// RUN: coda-opt %s --split-input-file --verify-diagnostics | filecheck %s --check-prefix=DIAG

// --split-input-file: every chunk is parsed and verified on its own, and diagnostics keep the
// line numbers of the whole file. Without --verify-diagnostics the errors go to stderr (all
// of them, before the output of the good chunks) and the exit status is non-zero; with it
// they take the place of their chunk's output and the run succeeds.

func.func @first(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "nn.relu"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----

func.func @second(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "nn.swiglu"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// -----
func.func @third(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  func.return %x : tensor<4x8xf32>
}
// -----

func.func @fourth(%x: tensor<4x8xf32>) {
  %0 = "nn.gelu"(%x) <{approximate = "none"}> : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = nn.relu %x : tensor<4x8xf32> -> tensr<4x8xf32>
  func.return
}

// -----

func.func @fifth(%a: tensor<16x32xf32>, %b: tensor<32x64xf32>) -> tensor<16x64xf32> {
  %0 = coda.gemm %a, %b : tensor<16x32xf32>, tensor<32x64xf32> -> tensor<16x64xf32> {
  ^bb0(%acc: !coda.tile<16x64xf32>):
    %1 = coda.reduce sum %acc dim 2 : !coda.tile<16x64xf32> -> !coda.partials<rows, 16, sum>
    coda.yield %acc : !coda.tile<16x64xf32>
  }
  func.return %0 : tensor<16x64xf32>
}

// CHECK:      {{^.*}}split_input_file.mlir:17:3: error: 'nn.swiglu' op result shape must be 4x4, got 4x8
// CHECK-NEXT: {{^.*}}split_input_file.mlir:29:40: error: {{.*}}
// CHECK-NEXT: {{^}}  %1 = nn.relu %x : tensor<4x8xf32> -> tensr<4x8xf32>
// CHECK-NEXT: {{^ {39}\^+$}}
// CHECK-NEXT: {{^.*}}split_input_file.mlir:38:5: error: 'coda.reduce' op dim must be 0 (over rows) or 1 (over columns), got 2
// CHECK-NEXT: builtin.module {
// CHECK-NEXT:   func.func @first(
// CHECK:      {{^// -{5}$}}
// CHECK-NEXT: {{^// -{5}$}}
// CHECK-NEXT: builtin.module {
// CHECK-NEXT:   func.func @third(
// CHECK:      {{^// -{5}$}}
// CHECK-NEXT: {{^// -{5}$}}
// CHECK-NOT:  {{.}}

// DIAG:      builtin.module {
// DIAG-NEXT:   func.func @first(
// DIAG:      {{^// -{5}$}}
// DIAG-NEXT: {{^.*}}split_input_file.mlir:17:3: error: 'nn.swiglu' op result shape must be 4x4, got 4x8
// DIAG-NEXT: {{^// -{5}$}}
// DIAG-NEXT: builtin.module {
// DIAG-NEXT:   func.func @third(
// DIAG:      {{^// -{5}$}}
// DIAG-NEXT: {{^.*}}split_input_file.mlir:29:40: error:
// DIAG:      {{^// -{5}$}}
// DIAG-NEXT: {{^.*}}split_input_file.mlir:38:5: error: 'coda.reduce' op dim must be 0 (over rows) or 1 (over columns), got 2
// DIAG-NOT:  {{.}}
