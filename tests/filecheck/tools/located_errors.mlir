// Issue 12: errors that used to be unlocated (`<unknown>`), garbled or a byte offset are
// `file:line:col: error: ...`; coda-opt exits non-zero and prints no traceback.

// RUN: coda-opt %s --split-input-file --verify-diagnostics | filecheck %s

// RUN: not coda-opt %S/Inputs/latin1.mlir 2>&1 | filecheck %s --check-prefix=UTF8
// UTF8:     {{^}}{{.*}}latin1.mlir:1:7: error: invalid UTF-8 byte 0xe9: the input must be UTF-8 text
// UTF8-NOT: {{.}}

// RUN: %python -c "print('func.func @f() {' + '\"test.op\"() ({' * 2000 + '})' * 2000 + ' func.return }')" > %t.deep.mlir
// RUN: not coda-opt %t.deep.mlir 2>&1 | filecheck %s --check-prefix=DEEP
// DEEP:     {{^}}{{.*}}deep.mlir: error: the program nests too deeply to process
// DEEP-NOT: Traceback

// RUN: not coda-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=EXIT
// EXIT-NOT: Traceback
// EXIT:     located_errors.mlir:{{[0-9]+}}:1: error: 'func.func' op redefinition of symbol '@f'

func.func @f() {
  func.return
}
func.func @f() {
  func.return
}
// CHECK: located_errors.mlir:[[# @LINE - 3]]:1: error: 'func.func' op redefinition of symbol '@f' (first defined at {{.*}}located_errors.mlir:[[# @LINE - 6]]:1)
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @g() {
  %0 = "test.op"() : () -> !test.type<#}
}
// CHECK: located_errors.mlir:[[# @LINE - 2]]:39: error: Expected suffix identifier after '#'
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @h(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %y = nn.rms_norm %x, %w : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
// CHECK: located_errors.mlir:[[# @LINE - 3]]:3: error: 'nn.rms_norm' op property 'eps' expected in operation 'nn.rms_norm'
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @ce(%l: tensor<4x16xf32>, %t: tensor<4xi32>) -> tensor<f32> {
  %0 = "nn.cross_entropy"(%l, %t) <{ignore_index = -4294967296 : i64, reduction = "mean"}> : (tensor<4x16xf32>, tensor<4xi32>) -> tensor<f32>
  func.return %0 : tensor<f32>
}
// CHECK: located_errors.mlir:[[# @LINE - 3]]:3: error: 'nn.cross_entropy' op ignore_index must fit in i32 like the targets ([-2147483648, 2147483647]), got -4294967296
// CHECK-NOT: error:
