// -o writes the result to a file and nothing to stdout; any file name is read as MLIR.

// RUN: coda-opt %s -o %t.mlir | filecheck %s --check-prefix=STDOUT --allow-empty
// RUN: filecheck %s --input-file %t.mlir
// RUN: coda-opt %S/Inputs/relu.txt | filecheck %s --check-prefix=TXT

// STDOUT-NOT: {{.}}

// CHECK:      func.func @add(%a: tensor<2x4xf32>, %b: tensor<4xf32>) -> tensor<2x4xf32> {
// CHECK-NEXT:   %0 = nn.add %a, %b : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>

// TXT:      func.func @relu(%x: tensor<2x4xbf16>) -> tensor<2x4xbf16> {
// TXT-NEXT:   %0 = nn.relu %x : tensor<2x4xbf16> -> tensor<2x4xbf16>

func.func @add(%a: tensor<2x4xf32>, %b: tensor<4xf32>) -> tensor<2x4xf32> {
  %0 = "nn.add"(%a, %b) : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  func.return %0 : tensor<2x4xf32>
}
