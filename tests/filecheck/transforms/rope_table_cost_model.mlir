// RUN: coda-opt %s --remarks --split-input-file -p nn-to-coda 2>&1 | filecheck %s
// RUN: coda-opt %s --remarks --split-input-file -p 'nn-to-coda{cost-model=false}' 2>&1 | filecheck %s --check-prefix=OFF

// RoPE in a GEMM's epilogue: io_plans.rope_table_plan compares libdevice sin/cos per pair in
// every tile (exposed after the mainloop) with cos/sin [M, hd/2] tables computed once by a
// small kernel. The LLaMA-3 8B QKV (8192x6144x4096, 48 heads of 128, 40 rotary) recomputes the
// same [BM, 64] coefficients in each of its column tiles: the table wins. A single head
// (N = head_dim = 128) has one column tile per row band: nothing to share, the extra launch
// loses. With cost-model=false both keep sin/cos in the epilogue, and no remark is printed.

// Remarks first (stderr), one per function, with both predicted costs.
// CHECK:       rope_table_cost_model.mlir:{{[0-9]+}}:3: remark: 'nn.rope' op RoPE in the epilogue of 'nn.linear' (
// CHECK-SAME:  reads cos/sin tables: the IO model found them cheaper: table (cos/sin [8192x64] computed once, one more kernel) [[T:[0-9.]+]] us vs in-epilogue sin/cos [[E:[0-9.]+]] us
// CHECK:       rope_table_cost_model.mlir:{{[0-9]+}}:3: remark: 'nn.rope' op RoPE in the epilogue of 'nn.linear' (
// CHECK-SAME:  computes sin/cos per pair: the IO model found it cheaper: table (cos/sin [8192x64] computed once, one more kernel) {{[0-9.]+}} us vs in-epilogue sin/cos {{[0-9.]+}} us
// and the two RoPE passes' (the last two functions):
// CHECK:       remark: 'nn.rope_grad' op RoPE pass reads cos/sin tables: the IO model found them cheaper: table (cos/sin [8192x64] computed once, one more kernel) {{[0-9.]+}} us vs in-pass sin/cos {{[0-9.]+}} us
// CHECK:       remark: 'nn.rope_grad' op RoPE pass computes sin/cos per pair: the IO model found it cheaper
// OFF-NOT:     remark

// CHECK-LABEL: func.func @qkv_8b
// CHECK:       %[[C:.*]], %[[S:.*]] = coda.elementwise [8192, 64] ins(%pos : tensor<8192xi32>) -> (tensor<8192x64xf32>, tensor<8192x64xf32>) attributes {coda.origin = "nn.rope.table"}
// CHECK:         math.cos
// CHECK:         math.sin
// CHECK:       coda.gemm %x, %w transpose_b ins(%[[C]], %[[S]] : tensor<8192x64xf32>, tensor<8192x64xf32>)
// CHECK:         coda.load %{{.*}} cols_period 64 : tensor<8192x64xf32> -> !coda.tile<8192x3072xf32>
// CHECK:         coda.load %{{.*}} cols_period 64 : tensor<8192x64xf32> -> !coda.tile<8192x3072xf32>
// CHECK:         arith.cmpi slt, %{{.*}}, %{{.*}} : i32
// CHECK:         coda.pair_map stride 64
// CHECK-NOT:     math.cos
// CHECK:       func.return
// OFF-LABEL:   func.func @qkv_8b
// OFF-NOT:     coda.elementwise
// OFF:         coda.gemm %x, %w transpose_b ins(%pos : tensor<8192xi32>)
// OFF:           math.cos
func.func @qkv_8b(%x: tensor<8192x4096xbf16>, %w: tensor<6144x4096xbf16>, %pos: tensor<8192xi32>) -> tensor<8192x6144xbf16> {
  %q = "nn.linear"(%x, %w) : (tensor<8192x4096xbf16>, tensor<6144x4096xbf16>) -> tensor<8192x6144xbf16>
  %r = "nn.rope"(%q, %pos) <{head_dim = 128 : i64, rotary_heads = 40 : i64, theta = 500000.0 : f32, style = "half"}> : (tensor<8192x6144xbf16>, tensor<8192xi32>) -> tensor<8192x6144xbf16>
  func.return %r : tensor<8192x6144xbf16>
}

// -----

// CHECK-LABEL: func.func @single_head
// CHECK-NOT:   coda.elementwise
// CHECK:       coda.gemm %x, %w transpose_b ins(%pos : tensor<8192xi32>)
// CHECK-NOT:     cols_period
// CHECK:         math.cos
// CHECK:         math.sin
// OFF-LABEL:   func.func @single_head
// OFF-NOT:     coda.elementwise
// OFF:           math.cos
func.func @single_head(%x: tensor<8192x4096xbf16>, %w: tensor<128x4096xbf16>, %pos: tensor<8192xi32>) -> tensor<8192x128xbf16> {
  %q = "nn.linear"(%x, %w) : (tensor<8192x4096xbf16>, tensor<128x4096xbf16>) -> tensor<8192x128xbf16>
  %r = "nn.rope"(%q, %pos) <{head_dim = 128 : i64, rotary_heads = 1 : i64, theta = 500000.0 : f32, style = "half"}> : (tensor<8192x128xbf16>, tensor<8192xi32>) -> tensor<8192x128xbf16>
  func.return %r : tensor<8192x128xbf16>
}

// -----

// RoPE in an elementwise pass (no GEMM produces its input: the backward's rotation of the
// attention gradient): io_plans.rope_pass_plan. About half the pass's angle and sin/cos arithmetic
// adds to its memory time (it does not all hide under it: bench/RESULTS.md session 11), so at the
// LLaMA-3 8B shape one [8192, 64] table kernel and a pass that only rotates win; at a tiny shape
// the extra launch loses. `rope-table=never` (and cost-model=false) keep sin/cos in the pass.
// RUN: coda-opt %s --remarks --split-input-file -p 'nn-to-coda{rope-table=never}' 2>&1 | filecheck %s --check-prefix=NEVER
// CHECK-LABEL: func.func @rope_grad_8b
// CHECK:       %[[C:.*]], %[[S:.*]] = coda.elementwise [8192, 64] ins(%pos : tensor<8192xi32>) {{.*}} attributes {coda.origin = "nn.rope_grad.table"}
// CHECK:       coda.elementwise [8192, 6144] ins(%dr, %[[C]], %[[S]] :
// CHECK-NOT:     math.cos
// CHECK:       func.return
// CHECK-LABEL: func.func @rope_grad_tiny
// CHECK-NOT:   nn.rope_grad.table
// CHECK:         math.cos
// OFF-LABEL:   func.func @rope_grad_8b
// OFF-NOT:     nn.rope_grad.table
// OFF:           math.cos
// NEVER-LABEL: func.func @rope_grad_8b
// NEVER-NOT:   nn.rope_grad.table
// NEVER:         math.cos
func.func @rope_grad_8b(%dr: tensor<8192x6144xbf16>, %pos: tensor<8192xi32>) -> tensor<8192x6144xbf16> {
  %dq = "nn.rope_grad"(%dr, %pos) <{head_dim = 128 : i64, rotary_heads = 40 : i64, theta = 500000.0 : f32, style = "half"}> : (tensor<8192x6144xbf16>, tensor<8192xi32>) -> tensor<8192x6144xbf16>
  func.return %dq : tensor<8192x6144xbf16>
}

// -----

func.func @rope_grad_tiny(%dr: tensor<14x96xbf16>, %pos: tensor<14xi32>) -> tensor<14x96xbf16> {
  %dq = "nn.rope_grad"(%dr, %pos) <{head_dim = 16 : i64, rotary_heads = 6 : i64, theta = 10000.0 : f32, style = "half"}> : (tensor<14x96xbf16>, tensor<14xi32>) -> tensor<14x96xbf16>
  func.return %dq : tensor<14x96xbf16>
}
