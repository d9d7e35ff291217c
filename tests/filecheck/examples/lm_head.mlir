// examples/lm_head.mlir parses, verifies, and round-trips through the pretty and the generic
// printers (each printed form re-parses to the same text). CHECK pins every op of the block;
// GENERIC pins the generic (contract) form of the ops with properties.

// RUN: coda-opt %S/../../../examples/lm_head.mlir | coda-opt | filecheck %s
// RUN: coda-opt %S/../../../examples/lm_head.mlir --print-op-generic | coda-opt | filecheck %s
// RUN: coda-opt %S/../../../examples/lm_head.mlir --print-op-generic | coda-opt --print-op-generic | filecheck %s --check-prefix=GENERIC
// RUN: coda-opt %S/../../../examples/lm_head.mlir > %t.pretty && coda-opt %t.pretty > %t.pretty2 && diff %t.pretty %t.pretty2
// RUN: coda-opt %S/../../../examples/lm_head.mlir --print-op-generic > %t.generic && coda-opt %t.generic --print-op-generic > %t.generic2 && diff %t.generic %t.generic2
// RUN: coda-opt %t.generic > %t.from_generic && diff %t.pretty %t.from_generic

// CHECK-LABEL: func.func @lm_head(%x: tensor<8192x4096xbf16>, %wn: tensor<4096xbf16>, %wlm: tensor<128256x4096xbf16>, %targets: tensor<8192xi32>) -> tensor<f32> {
// CHECK-NEXT:  %h = nn.rms_norm %x, %wn {eps = 1.000000e-05 : f32} : tensor<8192x4096xbf16>, tensor<4096xbf16> -> tensor<8192x4096xbf16>
// CHECK-NEXT:  %logits = nn.linear %h, %wlm : tensor<8192x4096xbf16>, tensor<128256x4096xbf16> -> tensor<8192x128256xbf16>
// CHECK-NEXT:  %loss = nn.cross_entropy %logits, %targets {ignore_index = -100 : i64, reduction = "mean"} : tensor<8192x128256xbf16>, tensor<8192xi32> -> tensor<f32>
// CHECK-NEXT:  func.return %loss : tensor<f32>

// GENERIC:     %h = "nn.rms_norm"(%x, %wn) <{eps = 1.000000e-05 : f32}> : (tensor<8192x4096xbf16>, tensor<4096xbf16>) -> tensor<8192x4096xbf16>
// GENERIC:     %loss = "nn.cross_entropy"(%logits, %targets) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<8192x128256xbf16>, tensor<8192xi32>) -> tensor<f32>
