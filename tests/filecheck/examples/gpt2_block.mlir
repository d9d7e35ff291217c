// examples/gpt2_block.mlir parses, verifies, and round-trips through the pretty and the generic
// printers (each printed form re-parses to the same text). CHECK pins every op of the block;
// GENERIC pins the generic (contract) form of the ops with properties.

// RUN: coda-opt %S/../../../examples/gpt2_block.mlir | coda-opt | filecheck %s
// RUN: coda-opt %S/../../../examples/gpt2_block.mlir --print-op-generic | coda-opt | filecheck %s
// RUN: coda-opt %S/../../../examples/gpt2_block.mlir --print-op-generic | coda-opt --print-op-generic | filecheck %s --check-prefix=GENERIC
// RUN: coda-opt %S/../../../examples/gpt2_block.mlir > %t.pretty && coda-opt %t.pretty > %t.pretty2 && diff %t.pretty %t.pretty2
// RUN: coda-opt %S/../../../examples/gpt2_block.mlir --print-op-generic > %t.generic && coda-opt %t.generic --print-op-generic > %t.generic2 && diff %t.generic %t.generic2
// RUN: coda-opt %t.generic > %t.from_generic && diff %t.pretty %t.from_generic

// CHECK-LABEL: func.func @gpt2_block(%x0: tensor<8192x1024xbf16>, %y0: tensor<8192x1024xbf16>, %wo: tensor<1024x1024xbf16>, %bo: tensor<1024xbf16>, %g1: tensor<1024xbf16>, %b1: tensor<1024xbf16>, %wfc: tensor<4096x1024xbf16>, %bfc: tensor<4096xbf16>, %wproj: tensor<1024x4096xbf16>, %bproj: tensor<1024xbf16>, %g2: tensor<1024xbf16>, %b2: tensor<1024xbf16>, %wqkv: tensor<3072x1024xbf16>, %bqkv: tensor<3072xbf16>) -> (tensor<8192x1024xbf16>, tensor<8192x3072xbf16>) {
// CHECK-NEXT:  %a0 = nn.linear %y0, %wo : tensor<8192x1024xbf16>, tensor<1024x1024xbf16> -> tensor<8192x1024xbf16>
// CHECK-NEXT:  %a = nn.add %a0, %bo : tensor<8192x1024xbf16>, tensor<1024xbf16> -> tensor<8192x1024xbf16>
// CHECK-NEXT:  %x1 = nn.add %x0, %a : tensor<8192x1024xbf16>, tensor<8192x1024xbf16> -> tensor<8192x1024xbf16>
// CHECK-NEXT:  %h1 = nn.layer_norm %x1, %g1, %b1 {eps = 1.000000e-05 : f32} : tensor<8192x1024xbf16>, tensor<1024xbf16>, tensor<1024xbf16> -> tensor<8192x1024xbf16>
// CHECK-NEXT:  %u0 = nn.linear %h1, %wfc : tensor<8192x1024xbf16>, tensor<4096x1024xbf16> -> tensor<8192x4096xbf16>
// CHECK-NEXT:  %u = nn.add %u0, %bfc : tensor<8192x4096xbf16>, tensor<4096xbf16> -> tensor<8192x4096xbf16>
// CHECK-NEXT:  %act = nn.gelu %u {approximate = "tanh"} : tensor<8192x4096xbf16> -> tensor<8192x4096xbf16>
// CHECK-NEXT:  %p0 = nn.linear %act, %wproj : tensor<8192x4096xbf16>, tensor<1024x4096xbf16> -> tensor<8192x1024xbf16>
// CHECK-NEXT:  %p = nn.add %p0, %bproj : tensor<8192x1024xbf16>, tensor<1024xbf16> -> tensor<8192x1024xbf16>
// CHECK-NEXT:  %x2 = nn.add %x1, %p : tensor<8192x1024xbf16>, tensor<8192x1024xbf16> -> tensor<8192x1024xbf16>
// CHECK-NEXT:  %h2 = nn.layer_norm %x2, %g2, %b2 {eps = 1.000000e-05 : f32} : tensor<8192x1024xbf16>, tensor<1024xbf16>, tensor<1024xbf16> -> tensor<8192x1024xbf16>
// CHECK-NEXT:  %q0 = nn.linear %h2, %wqkv : tensor<8192x1024xbf16>, tensor<3072x1024xbf16> -> tensor<8192x3072xbf16>
// CHECK-NEXT:  %qkv = nn.add %q0, %bqkv : tensor<8192x3072xbf16>, tensor<3072xbf16> -> tensor<8192x3072xbf16>
// CHECK-NEXT:  func.return %x2, %qkv : tensor<8192x1024xbf16>, tensor<8192x3072xbf16>

// GENERIC:     %h1 = "nn.layer_norm"(%x1, %g1, %b1) <{eps = 1.000000e-05 : f32}> : (tensor<8192x1024xbf16>, tensor<1024xbf16>, tensor<1024xbf16>) -> tensor<8192x1024xbf16>
// GENERIC:     %act = "nn.gelu"(%u) <{approximate = "tanh"}> : (tensor<8192x4096xbf16>) -> tensor<8192x4096xbf16>
// GENERIC:     %h2 = "nn.layer_norm"(%x2, %g2, %b2) <{eps = 1.000000e-05 : f32}> : (tensor<8192x1024xbf16>, tensor<1024xbf16>, tensor<1024xbf16>) -> tensor<8192x1024xbf16>
