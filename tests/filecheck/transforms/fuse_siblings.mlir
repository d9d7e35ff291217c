// RUN: coda-opt %s -p nn-fuse-siblings | filecheck %s

// q/k/v projections of one input, concatenated: one linear on the concatenated weights.
// CHECK-LABEL: func.func @qkv
// CHECK:      %[[W:.*]] = nn.concat %wq, %wk, %wv {axis = 0 : i64} : tensor<64x48xf32>, tensor<32x48xf32>, tensor<32x48xf32> -> tensor<128x48xf32>
// CHECK-NEXT: %{{.*}} = nn.linear %h, %[[W]] : tensor<10x48xf32>, tensor<128x48xf32> -> tensor<10x128xf32>
// CHECK-NOT:  nn.linear
func.func @qkv(%h: tensor<10x48xf32>, %wq: tensor<64x48xf32>, %wk: tensor<32x48xf32>, %wv: tensor<32x48xf32>) -> tensor<10x128xf32> {
  %q = nn.linear %h, %wq : tensor<10x48xf32>, tensor<64x48xf32> -> tensor<10x64xf32>
  %k = nn.linear %h, %wk : tensor<10x48xf32>, tensor<32x48xf32> -> tensor<10x32xf32>
  %v = nn.linear %h, %wv : tensor<10x48xf32>, tensor<32x48xf32> -> tensor<10x32xf32>
  %qkv = nn.concat %q, %k, %v {axis = 1 : i64} : tensor<10x64xf32>, tensor<10x32xf32>, tensor<10x32xf32> -> tensor<10x128xf32>
  func.return %qkv : tensor<10x128xf32>
}

// silu(gate) * up over two siblings (up first as the mul's lhs): the gated pair of nn.swiglu.
// CHECK-LABEL: func.func @mlp
// CHECK:      %[[W:.*]] = nn.concat %wg, %wu {axis = 0 : i64}
// CHECK-NEXT: %[[Z:.*]] = nn.linear %h, %[[W]] : tensor<10x48xf32>, tensor<80x48xf32> -> tensor<10x80xf32>
// CHECK-NEXT: %{{.*}} = nn.swiglu %[[Z]] : tensor<10x80xf32> -> tensor<10x40xf32>
// CHECK-NOT:  nn.silu
func.func @mlp(%h: tensor<10x48xf32>, %wg: tensor<40x48xf32>, %wu: tensor<40x48xf32>) -> tensor<10x40xf32> {
  %g = nn.linear %h, %wg : tensor<10x48xf32>, tensor<40x48xf32> -> tensor<10x40xf32>
  %u = nn.linear %h, %wu : tensor<10x48xf32>, tensor<40x48xf32> -> tensor<10x40xf32>
  %s = nn.silu %g : tensor<10x40xf32> -> tensor<10x40xf32>
  %m = nn.mul %u, %s : tensor<10x40xf32>, tensor<10x40xf32> -> tensor<10x40xf32>
  func.return %m : tensor<10x40xf32>
}

// gelu(gate) * up -> nn.geglu with the same approximation.
// CHECK-LABEL: func.func @geglu
// CHECK: nn.geglu %{{.*}} {approximate = "tanh"}
func.func @geglu(%h: tensor<10x48xf32>, %wg: tensor<40x48xf32>, %wu: tensor<40x48xf32>) -> tensor<10x40xf32> {
  %g = nn.linear %h, %wg : tensor<10x48xf32>, tensor<40x48xf32> -> tensor<10x40xf32>
  %u = nn.linear %h, %wu : tensor<10x48xf32>, tensor<40x48xf32> -> tensor<10x40xf32>
  %s = nn.gelu %g {approximate = "tanh"} : tensor<10x40xf32> -> tensor<10x40xf32>
  %m = nn.mul %s, %u : tensor<10x40xf32>, tensor<10x40xf32> -> tensor<10x40xf32>
  func.return %m : tensor<10x40xf32>
}

// The gate is also returned: packing would compute it twice, so nothing changes.
// CHECK-LABEL: func.func @gate_escapes
// CHECK: nn.silu
// CHECK: nn.mul
// CHECK-NOT: nn.swiglu
func.func @gate_escapes(%h: tensor<10x48xf32>, %wg: tensor<40x48xf32>, %wu: tensor<40x48xf32>) -> (tensor<10x40xf32>, tensor<10x40xf32>) {
  %g = nn.linear %h, %wg : tensor<10x48xf32>, tensor<40x48xf32> -> tensor<10x40xf32>
  %u = nn.linear %h, %wu : tensor<10x48xf32>, tensor<40x48xf32> -> tensor<10x40xf32>
  %s = nn.silu %g : tensor<10x40xf32> -> tensor<10x40xf32>
  %m = nn.mul %s, %u : tensor<10x40xf32>, tensor<10x40xf32> -> tensor<10x40xf32>
  func.return %m, %g : tensor<10x40xf32>, tensor<10x40xf32>
}

// Linears of different inputs are not siblings.
// CHECK-LABEL: func.func @different_inputs
// CHECK-COUNT-2: nn.linear
// CHECK: nn.concat %q, %k {axis = 1 : i64}
func.func @different_inputs(%a: tensor<10x48xf32>, %b: tensor<10x48xf32>, %wq: tensor<64x48xf32>, %wk: tensor<32x48xf32>) -> tensor<10x96xf32> {
  %q = nn.linear %a, %wq : tensor<10x48xf32>, tensor<64x48xf32> -> tensor<10x64xf32>
  %k = nn.linear %b, %wk : tensor<10x48xf32>, tensor<32x48xf32> -> tensor<10x32xf32>
  %qk = nn.concat %q, %k {axis = 1 : i64} : tensor<10x64xf32>, tensor<10x32xf32> -> tensor<10x96xf32>
  func.return %qk : tensor<10x96xf32>
}

// q/k/v with a bias each (Qwen2): one linear on the concatenated weights, the concatenated
// biases one rank-1 add (a column shift in the packed GEMM's epilogue, fuse_siblings_bias.mlir).
// CHECK-LABEL: func.func @qkv_bias
// CHECK:      %[[W:.*]] = nn.concat %wq, %wk, %wv {axis = 0 : i64} : tensor<64x48xf32>, tensor<32x48xf32>, tensor<32x48xf32> -> tensor<128x48xf32>
// CHECK-NEXT: %[[L:.*]] = nn.linear %h, %[[W]] : tensor<10x48xf32>, tensor<128x48xf32> -> tensor<10x128xf32>
// CHECK-NEXT: %[[B:.*]] = nn.concat %bq, %bk, %bv {axis = 0 : i64} : tensor<64xf32>, tensor<32xf32>, tensor<32xf32> -> tensor<128xf32>
// CHECK-NEXT: %{{.*}} = nn.add %[[L]], %[[B]] : tensor<10x128xf32>, tensor<128xf32> -> tensor<10x128xf32>
// CHECK-NOT:  nn.linear
func.func @qkv_bias(%h: tensor<10x48xf32>, %wq: tensor<64x48xf32>, %wk: tensor<32x48xf32>, %wv: tensor<32x48xf32>,
                    %bq: tensor<64xf32>, %bk: tensor<32xf32>, %bv: tensor<32xf32>) -> tensor<10x128xf32> {
  %q0 = nn.linear %h, %wq : tensor<10x48xf32>, tensor<64x48xf32> -> tensor<10x64xf32>
  %q = nn.add %q0, %bq : tensor<10x64xf32>, tensor<64xf32> -> tensor<10x64xf32>
  %k0 = nn.linear %h, %wk : tensor<10x48xf32>, tensor<32x48xf32> -> tensor<10x32xf32>
  %k = nn.add %k0, %bk : tensor<10x32xf32>, tensor<32xf32> -> tensor<10x32xf32>
  %v0 = nn.linear %h, %wv : tensor<10x48xf32>, tensor<32x48xf32> -> tensor<10x32xf32>
  %v = nn.add %v0, %bv : tensor<10x32xf32>, tensor<32xf32> -> tensor<10x32xf32>
  %qkv = nn.concat %q, %k, %v {axis = 1 : i64} : tensor<10x64xf32>, tensor<10x32xf32>, tensor<10x32xf32> -> tensor<10x128xf32>
  func.return %qkv : tensor<10x128xf32>
}

// Only some siblings with a bias: a zero bias for the others would be a new tensor, left apart.
// CHECK-LABEL: func.func @qkv_some_bias
// CHECK-COUNT-3: nn.linear
func.func @qkv_some_bias(%h: tensor<10x48xf32>, %wq: tensor<64x48xf32>, %wk: tensor<32x48xf32>, %wv: tensor<32x48xf32>,
                         %bq: tensor<64xf32>) -> tensor<10x128xf32> {
  %q0 = nn.linear %h, %wq : tensor<10x48xf32>, tensor<64x48xf32> -> tensor<10x64xf32>
  %q = nn.add %q0, %bq : tensor<10x64xf32>, tensor<64xf32> -> tensor<10x64xf32>
  %k = nn.linear %h, %wk : tensor<10x48xf32>, tensor<32x48xf32> -> tensor<10x32xf32>
  %v = nn.linear %h, %wv : tensor<10x48xf32>, tensor<32x48xf32> -> tensor<10x32xf32>
  %qkv = nn.concat %q, %k, %v {axis = 1 : i64} : tensor<10x64xf32>, tensor<10x32xf32>, tensor<10x32xf32> -> tensor<10x128xf32>
  func.return %qkv : tensor<10x128xf32>
}

// gelu(gate + bg) * (up + bu): the gated pair of the packed GEMM with the concatenated biases.
// CHECK-LABEL: func.func @geglu_bias
// CHECK:      %[[W:.*]] = nn.concat %wg, %wu {axis = 0 : i64}
// CHECK-NEXT: %[[L:.*]] = nn.linear %h, %[[W]] : tensor<10x48xf32>, tensor<80x48xf32> -> tensor<10x80xf32>
// CHECK-NEXT: %[[B:.*]] = nn.concat %bg, %bu {axis = 0 : i64} : tensor<40xf32>, tensor<40xf32> -> tensor<80xf32>
// CHECK-NEXT: %[[Z:.*]] = nn.add %[[L]], %[[B]]
// CHECK-NEXT: %{{.*}} = nn.geglu %[[Z]] {approximate = "tanh"} : tensor<10x80xf32> -> tensor<10x40xf32>
func.func @geglu_bias(%h: tensor<10x48xf32>, %wg: tensor<40x48xf32>, %wu: tensor<40x48xf32>, %bg: tensor<40xf32>,
                      %bu: tensor<40xf32>) -> tensor<10x40xf32> {
  %g0 = nn.linear %h, %wg : tensor<10x48xf32>, tensor<40x48xf32> -> tensor<10x40xf32>
  %g = nn.add %g0, %bg : tensor<10x40xf32>, tensor<40xf32> -> tensor<10x40xf32>
  %u0 = nn.linear %h, %wu : tensor<10x48xf32>, tensor<40x48xf32> -> tensor<10x40xf32>
  %u = nn.add %u0, %bu : tensor<10x40xf32>, tensor<40xf32> -> tensor<10x40xf32>
  %s = nn.gelu %g {approximate = "tanh"} : tensor<10x40xf32> -> tensor<10x40xf32>
  %m = nn.mul %s, %u : tensor<10x40xf32>, tensor<10x40xf32> -> tensor<10x40xf32>
  func.return %m : tensor<10x40xf32>
}
