// examples/qwen3_block.mlir parses, verifies, and round-trips through the pretty and the generic
// printers (each printed form re-parses to the same text). CHECK pins every op of the block;
// GENERIC pins the generic (contract) form of the ops with properties.

// RUN: coda-opt %S/../../../examples/qwen3_block.mlir | coda-opt | filecheck %s
// RUN: coda-opt %S/../../../examples/qwen3_block.mlir --print-op-generic | coda-opt | filecheck %s
// RUN: coda-opt %S/../../../examples/qwen3_block.mlir --print-op-generic | coda-opt --print-op-generic | filecheck %s --check-prefix=GENERIC
// RUN: coda-opt %S/../../../examples/qwen3_block.mlir > %t.pretty && coda-opt %t.pretty > %t.pretty2 && diff %t.pretty %t.pretty2
// RUN: coda-opt %S/../../../examples/qwen3_block.mlir --print-op-generic > %t.generic && coda-opt %t.generic --print-op-generic > %t.generic2 && diff %t.generic %t.generic2
// RUN: coda-opt %t.generic > %t.from_generic && diff %t.pretty %t.from_generic

// CHECK-LABEL: func.func @qwen3_block(%x0: tensor<8192x4096xbf16>, %y0: tensor<8192x4096xbf16>, %wo: tensor<4096x4096xbf16>, %wn0: tensor<4096xbf16>, %wgu: tensor<24576x4096xbf16>, %wd: tensor<4096x12288xbf16>, %wn1: tensor<4096xbf16>, %wqkv: tensor<6144x4096xbf16>, %wqk: tensor<128xbf16>, %pos: tensor<8192xi32>) -> (tensor<8192x4096xbf16>, tensor<8192x6144xbf16>) {
// CHECK-NEXT:  %a = nn.linear %y0, %wo : tensor<8192x4096xbf16>, tensor<4096x4096xbf16> -> tensor<8192x4096xbf16>
// CHECK-NEXT:  %x1 = nn.add %x0, %a : tensor<8192x4096xbf16>, tensor<8192x4096xbf16> -> tensor<8192x4096xbf16>
// CHECK-NEXT:  %h1 = nn.rms_norm %x1, %wn0 {eps = 1.000000e-06 : f32} : tensor<8192x4096xbf16>, tensor<4096xbf16> -> tensor<8192x4096xbf16>
// CHECK-NEXT:  %z = nn.linear %h1, %wgu : tensor<8192x4096xbf16>, tensor<24576x4096xbf16> -> tensor<8192x24576xbf16>
// CHECK-NEXT:  %g = nn.swiglu %z : tensor<8192x24576xbf16> -> tensor<8192x12288xbf16>
// CHECK-NEXT:  %dn = nn.linear %g, %wd : tensor<8192x12288xbf16>, tensor<4096x12288xbf16> -> tensor<8192x4096xbf16>
// CHECK-NEXT:  %x2 = nn.add %x1, %dn : tensor<8192x4096xbf16>, tensor<8192x4096xbf16> -> tensor<8192x4096xbf16>
// CHECK-NEXT:  %h2 = nn.rms_norm %x2, %wn1 {eps = 1.000000e-06 : f32} : tensor<8192x4096xbf16>, tensor<4096xbf16> -> tensor<8192x4096xbf16>
// CHECK-NEXT:  %q = nn.linear %h2, %wqkv : tensor<8192x4096xbf16>, tensor<6144x4096xbf16> -> tensor<8192x6144xbf16>
// CHECK-NEXT:  %qn = nn.head_rms_norm %q, %wqk {head_dim = 128 : i64, heads = 40 : i64, eps = 1.000000e-06 : f32} : tensor<8192x6144xbf16>, tensor<128xbf16> -> tensor<8192x6144xbf16>
// CHECK-NEXT:  %r = nn.rope %qn, %pos {head_dim = 128 : i64, rotary_heads = 40 : i64, theta = 1.000000e+06 : f32, style = "half"} : tensor<8192x6144xbf16>, tensor<8192xi32> -> tensor<8192x6144xbf16>
// CHECK-NEXT:  func.return %x2, %r : tensor<8192x4096xbf16>, tensor<8192x6144xbf16>

// GENERIC:     %h1 = "nn.rms_norm"(%x1, %wn0) <{eps = 1.000000e-06 : f32}> : (tensor<8192x4096xbf16>, tensor<4096xbf16>) -> tensor<8192x4096xbf16>
// GENERIC:     %h2 = "nn.rms_norm"(%x2, %wn1) <{eps = 1.000000e-06 : f32}> : (tensor<8192x4096xbf16>, tensor<4096xbf16>) -> tensor<8192x4096xbf16>
// GENERIC:     %qn = "nn.head_rms_norm"(%q, %wqk) <{head_dim = 128 : i64, heads = 40 : i64, eps = 1.000000e-06 : f32}> : (tensor<8192x6144xbf16>, tensor<128xbf16>) -> tensor<8192x6144xbf16>
// GENERIC:     %r = "nn.rope"(%qn, %pos) <{head_dim = 128 : i64, rotary_heads = 40 : i64, theta = 1.000000e+06 : f32, style = "half"}> : (tensor<8192x6144xbf16>, tensor<8192xi32>) -> tensor<8192x6144xbf16>
