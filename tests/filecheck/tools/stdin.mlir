// Input from stdin (no file argument): parsed like a file, diagnostics name it `stdin`.

// RUN: coda-opt < %s | filecheck %s
// RUN: cat %s | coda-opt --print-op-generic | coda-opt | filecheck %s
// RUN: not coda-opt < %S/Inputs/bad_rope.mlir 2>&1 | filecheck %s --check-prefix=ERR
// RUN: not coda-opt < %S/Inputs/comment_only.mlir 2>&1 | filecheck %s --check-prefix=EMPTY

func.func @silu(%x: tensor<4x8xf16>) -> tensor<4x8xf16> {
  %0 = "nn.silu"(%x) : (tensor<4x8xf16>) -> tensor<4x8xf16>
  func.return %0 : tensor<4x8xf16>
}

// CHECK:      func.func @silu(%x: tensor<4x8xf16>) -> tensor<4x8xf16> {
// CHECK-NEXT:   %0 = nn.silu %x : tensor<4x8xf16> -> tensor<4x8xf16>
// CHECK-NEXT:   func.return %0 : tensor<4x8xf16>

// ERR:     {{^}}stdin:4:3: error: 'nn.rope' op style must be one of "half", "interleaved", got "neox"
// ERR-NOT: {{.}}

// EMPTY:     {{^}}stdin:3:1: error: empty input: expected at least one operation
// EMPTY-NOT: {{.}}
