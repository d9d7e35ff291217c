// RUN: coda-opt %s --split-input-file --verify-diagnostics | filecheck %s

// One chunk per verifier rule of the coda dialect (coda.py, coda_attrs.py, coda_library.py),
// including the attribute and type rules checked while parsing. Every diagnostic is located
// (`file:line:col: error: ...`) and is the only one of its chunk: the CHECK-NEXT after it
// matches the separator coda-opt prints.

// ===== types and attributes (checked while parsing)

func.func @tile_rank() {
  %0 = "test.op"() : () -> !coda.tile<16xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: !coda.tile must be rank 2 (rows x columns), got rank 1
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @tile_zero() {
  %0 = "test.op"() : () -> !coda.tile<0x32xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: !coda.tile dimensions must be positive, got [0, 32]
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @tile_f16() {
  %0 = "test.op"() : () -> !coda.tile<16x32xf16>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: !coda.tile element type must be f32 (values), i32 (indices) or i1 (predicates), got f16
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @partials_scalar() {
  %0 = "test.op"() : () -> !coda.partials<scalar, 16, sum>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: !coda.partials are along rows or cols, not scalar
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @partials_empty() {
  %0 = "test.op"() : () -> !coda.partials<rows, 0, sum>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: !coda.partials length must be positive
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @partials_combine() {
  %0 = "test.op"() : () -> !coda.partials<rows, 16, mean>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: Expected `sum`, `max`, or `lse`.
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

// sumsq is a reduce kind; its partials combine by sum
func.func @partials_kind_sumsq() {
  %0 = "test.op"() : () -> !coda.partials<rows, 16, sumsq>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: Expected `sum`, `max`, or `lse`.
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @config_pow2(%m: tensor<16x32xf32>) {
  %0 = coda.elementwise [16, 32] config #coda.config<bm = 48, bn = 64, bk = 32, warps = 4, stages = 3> ins(%m : tensor<16x32xf32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: tile config bm must be a positive power of two, got 48
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @config_warps(%m: tensor<16x32xf32>) {
  %0 = coda.elementwise [16, 32] config #coda.config<bm = 64, bn = 64, bk = 32, warps = 6, stages = 3> ins(%m : tensor<16x32xf32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: tile config warps must be a positive power of two, got 6
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @config_small(%m: tensor<16x32xf32>) {
  %0 = coda.elementwise [16, 32] config #coda.config<bm = 64, bn = 64, bk = 8, warps = 4, stages = 3> ins(%m : tensor<16x32xf32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: tile config bm, bn and bk must be at least 16 (tl.dot)
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @config_stages(%m: tensor<16x32xf32>) {
  %0 = coda.elementwise [16, 32] config #coda.config<bm = 64, bn = 64, bk = 32, warps = 4, stages = 0> ins(%m : tensor<16x32xf32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: tile config stages must be positive
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @config_field(%m: tensor<16x32xf32>) {
  %0 = coda.elementwise [16, 32] config #coda.config<bm = 64, bn = 64, bk = 32, warps = 4, stages = 3, split_k = 2> ins(%m : tensor<16x32xf32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: unknown tile config field 'split_k' (expected bm, bn, bk, warps, stages)
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @config_missing(%m: tensor<16x32xf32>) {
  %0 = coda.elementwise [16, 32] config #coda.config<bm = 64, bn = 64, bk = 32> ins(%m : tensor<16x32xf32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: tile config is missing warps, stages
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @config_kind(%m: tensor<16x32xf32>) {
  %0 = coda.elementwise [16, 32] config #coda<axis rows> ins(%m : tensor<16x32xf32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: expected a #coda.config<...> tile configuration
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @gemm_config_kind(%a: tensor<16x32xf32>, %b: tensor<32x64xf32>) {
  %0 = coda.gemm %a, %b config #coda<reduce_kind sum> : tensor<16x32xf32>, tensor<32x64xf32> -> tensor<16x64xf32> {
  ^bb0(%acc: !coda.tile<16x64xf32>):
    coda.yield %acc : !coda.tile<16x64xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: expected a #coda.config<...> tile configuration
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== where epilogue ops may appear

// A primitive outside a kernel.
func.func @scale_outside(%x: !coda.tile<16x32xf32>, %v: tensor<16xf32>) {
  %0 = coda.scale %x, %v rows : !coda.tile<16x32xf32>, tensor<16xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.scale' op 'coda.scale' expects parent op to be one of 'coda.gemm', 'coda.elementwise'
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @map_outside(%x: !coda.tile<16x32xf32>) {
  %0 = coda.map %x : !coda.tile<16x32xf32> -> !coda.tile<16x32xf32> {
  ^bb0(%a: f32):
    coda.yield %a : f32
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.map' op 'coda.map' expects parent op to be one of 'coda.gemm', 'coda.elementwise'
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @reduce_outside(%x: !coda.tile<16x32xf32>) {
  %0 = coda.reduce sum %x dim 1 : !coda.tile<16x32xf32> -> !coda.partials<rows, 16, sum>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.reduce' op 'coda.reduce' expects parent op to be one of 'coda.gemm', 'coda.elementwise'
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @yield_outside(%x: !coda.tile<16x32xf32>) {
  coda.yield %x : !coda.tile<16x32xf32>
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.yield' op 'coda.yield' expects parent op to be one of 'coda.gemm', 'coda.elementwise', 'coda.fold', 'coda.map', 'coda.pair_map'
// CHECK-NEXT: {{^// -{5}$}}

// -----

// A primitive inside a scalar body.
func.func @load_in_map(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.map %x : !coda.tile<16x32xf32> -> !coda.tile<16x32xf32> {
    ^bb0(%a: f32):
      %l = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
      coda.yield %a : f32
    }
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.load' op 'coda.load' expects parent op to be one of 'coda.gemm', 'coda.elementwise'
// CHECK-NEXT: {{^// -{5}$}}

// -----

// A func op inside an epilogue.
func.func private @helper(tensor<16x32xf32>) -> tensor<16x32xf32>

func.func @call_in_epilogue(%a: tensor<16x32xf32>, %b: tensor<32x64xf32>, %m: tensor<16x32xf32>) {
  %0 = coda.gemm %a, %b ins(%m : tensor<16x32xf32>) : tensor<16x32xf32>, tensor<32x64xf32> -> tensor<16x64xf32> {
  ^bb0(%acc: !coda.tile<16x64xf32>, %m_: tensor<16x32xf32>):
    %r = func.call @helper(%m_) : (tensor<16x32xf32>) -> tensor<16x32xf32>
    coda.yield %acc : !coda.tile<16x64xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.gemm' op 'func.call' is not an epilogue primitive
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @test_op_in_epilogue(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    "test.op"() : () -> ()
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op 'test.op' is not an epilogue primitive
// CHECK-NEXT: {{^// -{5}$}}

// -----

// coda-plan-in-place's record: one entry per output, each -1 or an input index.
func.func @writes_over_out_of_range(%a: tensor<8x16xf32>) {
  %0 = coda.elementwise [8, 16] ins(%a : tensor<8x16xf32>) -> tensor<8x16xf32> attributes {coda.writes_over = [1 : i64]} {
  ^bb0(%a_: tensor<8x16xf32>):
    %x = coda.load %a_ : tensor<8x16xf32> -> !coda.tile<8x16xf32>
    coda.yield %x : !coda.tile<8x16xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op coda.writes_over needs one entry per output (1), each -1 or an input index below 1
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @writes_over_entries(%a: tensor<8x16xf32>) {
  %0 = coda.elementwise [8, 16] ins(%a : tensor<8x16xf32>) -> tensor<8x16xf32> attributes {coda.writes_over = [0 : i64, -1 : i64]} {
  ^bb0(%a_: tensor<8x16xf32>):
    %x = coda.load %a_ : tensor<8x16xf32> -> !coda.tile<8x16xf32>
    coda.yield %x : !coda.tile<8x16xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op coda.writes_over needs one entry per output (1), each -1 or an input index below 1
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @writes_over_on_gemm(%a: tensor<16x16xbf16>, %b: tensor<16x16xbf16>) {
  %0 = coda.gemm %a, %b : tensor<16x16xbf16>, tensor<16x16xbf16> -> tensor<16x16xbf16> attributes {coda.writes_over = [0 : i64]} {
  ^bb0(%acc: !coda.tile<16x16xf32>):
    coda.yield %acc : !coda.tile<16x16xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.gemm' op coda.writes_over is an array of integers on coda.elementwise kernels
// CHECK-NEXT: {{^// -{5}$}}

// -----

// The vendor library only for a gemm whose epilogue stores the accumulator alone.
func.func @vendor_gemm_with_epilogue(%a: tensor<16x16xbf16>, %b: tensor<16x16xbf16>) {
  %0 = coda.gemm %a, %b : tensor<16x16xbf16>, tensor<16x16xbf16> -> tensor<16x16xbf16> attributes {coda.vendor_gemm = #coda.vendor_gemm<cublas>} {
  ^bb0(%acc: !coda.tile<16x16xf32>):
    %t = coda.map %acc : !coda.tile<16x16xf32> -> !coda.tile<16x16xf32> {
    ^bb0(%v: f32):
      %w = arith.mulf %v, %v : f32
      coda.yield %w : f32
    }
    coda.yield %t : !coda.tile<16x16xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.gemm' op coda.vendor_gemm on a gemm the vendor library cannot run: its epilogue does more than store the accumulator into its one output
// CHECK-NEXT: {{^// -{5}$}}

// -----

// f32 operands stay on the tl kernel (tf32 dots): a hand-written record is rejected.
func.func @vendor_gemm_f32_operands(%a: tensor<16x16xf32>, %b: tensor<16x16xf32>) {
  %0 = coda.gemm %a, %b : tensor<16x16xf32>, tensor<16x16xf32> -> tensor<16x16xf32> attributes {coda.vendor_gemm = #coda.vendor_gemm<cublas>} {
  ^bb0(%acc: !coda.tile<16x16xf32>):
    coda.yield %acc : !coda.tile<16x16xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.gemm' op coda.vendor_gemm on a gemm the vendor library cannot run: its operands are not both bf16 or both f16 (tensor<16x16xf32>, tensor<16x16xf32>)
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @vendor_gemm_unknown_library(%a: tensor<16x16xbf16>, %b: tensor<16x16xbf16>) {
  %0 = coda.gemm %a, %b : tensor<16x16xbf16>, tensor<16x16xbf16> -> tensor<16x16xbf16> attributes {coda.vendor_gemm = #coda.vendor_gemm<rocblas>} {
  ^bb0(%acc: !coda.tile<16x16xf32>):
    coda.yield %acc : !coda.tile<16x16xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: vendor_gemm library must be one of cublas, got 'rocblas'
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

// Elementwise math on tiles outside coda.map, custom syntax (rejected while parsing)...
func.func @arith_on_tiles(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = arith.addf %x, %x : !coda.tile<16x32xf32>
    coda.yield %y : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'arith.addf' op cannot take !coda.tile values: elementwise math on tiles must be wrapped in coda.map
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ... and generic syntax (rejected by the verifier).
func.func @arith_on_tiles_generic(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = "arith.mulf"(%x, %x) <{fastmath = #arith.fastmath<none>}> : (!coda.tile<16x32xf32>, !coda.tile<16x32xf32>) -> !coda.tile<16x32xf32>
    coda.yield %y : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'arith.mulf' op cannot take !coda.tile values: elementwise math on tiles must be wrapped in coda.map
// CHECK-NEXT: {{^// -{5}$}}

// -----

// Math on whole tensors inside an epilogue.
func.func @arith_on_tensors(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = arith.addf %m_, %m_ : tensor<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op 'arith.addf' on tiles must be wrapped in coda.map
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @arith_tensor_constant(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %k = arith.constant dense<1.000000e+00> : tensor<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op 'arith.constant' on tiles must be wrapped in coda.map
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== epilogues read only the kernel's own inputs

func.func @load_foreign(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %n = "test.op"() : () -> tensor<16x32xf32>
    %y = coda.load %n : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.load' op loaded value must be a block argument of the enclosing kernel (one of its `ins`)
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @scale_foreign(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %n = "test.op"() : () -> tensor<16xf32>
    %y = coda.scale %x, %n rows : !coda.tile<16x32xf32>, tensor<16xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.scale' op vector operand must be a block argument of the enclosing kernel (one of its `ins`)
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @accumulate_foreign(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %n = "test.op"() : () -> tensor<16x32xf32>
    %y = coda.accumulate %x, %n : !coda.tile<16x32xf32>, tensor<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.accumulate' op accumulated matrix must be a block argument of the enclosing kernel (one of its `ins`)
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @select_foreign(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %n = "test.op"() : () -> tensor<16xi32>
    %y = coda.select %x, %n : !coda.tile<16x32xf32>, tensor<16xi32> -> !coda.partials<rows, 16, sum>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.select' op column indices must be a block argument of the enclosing kernel (one of its `ins`)
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @region_args(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>

    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op coda.elementwise region must take 0 tile argument(s) followed by one argument per input (5), got 2 arguments
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @region_arg_type(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<16xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>

    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op region argument #2 must have the type of input #2, tensor<32xf32>, got tensor<16xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @dynamic_input(%m: tensor<16x32xf32>, %d: tensor<?xf32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %d : tensor<16x32xf32>, tensor<?xf32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %d_: tensor<?xf32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op input #1 must be a statically shaped tensor, got tensor<?xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== coda.load, coda.broadcast, coda.index

func.func @load_vector(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.load %v_ : tensor<16xf32> -> !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.load' op coda.load reads a matrix, got a tensor of shape 16
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @load_shape(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x16xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.load' op result tile must be 16x32 like the loaded matrix, got 16x16
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @load_element_type(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xi32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.load' op loading f32 gives a f32 tile, not i32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @broadcast_element_type(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.broadcast %t_ rows : tensor<16xi32> -> !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.broadcast' op broadcasting tensor<16xi32> gives a i32 tile, not f32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @broadcast_rows(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.broadcast %c_ rows : tensor<32xf32> -> !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.broadcast' op broadcast vector must have shape 16 (one value per row of the tile), got 32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @broadcast_cols(%m: tensor<16x32xf32>, %p: tensor<12xf32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %p : tensor<16x32xf32>, tensor<12xf32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %p_: tensor<12xf32>):
    %x = coda.broadcast %p_ cols : tensor<12xf32> -> !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.broadcast' op broadcast vector must have shape 32 (one value per column), or a length that divides it (repeated periodically), got 12
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @broadcast_scalar(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.broadcast %v_ scalar : tensor<16xf32> -> !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.broadcast' op broadcast vector must be a 0-d tensor for a scalar coda.broadcast, got 16
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @broadcast_i64(%m: tensor<16x32xf32>, %p: tensor<16xi64>) {
  %0 = coda.elementwise [16, 32] ins(%m, %p : tensor<16x32xf32>, tensor<16xi64>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %p_: tensor<16xi64>):
    %x = coda.broadcast %p_ rows : tensor<16xi64> -> !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.broadcast' op broadcast vector element type must be a float or i32, got i64
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @index_scalar(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %i = coda.index scalar : !coda.tile<16x32xi32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.index' op coda.index takes rows or cols
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @index_float(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %i = coda.index rows : !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.index' op coda.index gives an i32 tile
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== coda.scale, coda.shift, coda.accumulate

func.func @scale_int_tile(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %i = coda.index rows : !coda.tile<16x32xi32>
    %y = coda.scale %i, %v_ rows : !coda.tile<16x32xi32>, tensor<16xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.scale' op scaled tile must be an f32 tile, got !coda.tile<16x32xi32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @scale_int_vector(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.scale %x, %t_ rows : !coda.tile<16x32xf32>, tensor<16xi32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.scale' op vector operand must be a float tensor
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @scale_rows(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.scale %x, %c_ rows : !coda.tile<16x32xf32>, tensor<32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.scale' op vector operand must have shape 16 (one value per row of the tile), got 32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @shift_cols_matrix(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.shift %x, %m_ cols : !coda.tile<16x32xf32>, tensor<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.shift' op vector operand must have shape 32 (one value per column), or a length that divides it (repeated periodically), got 16x32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @shift_scalar(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.shift %x, %c_ scalar : !coda.tile<16x32xf32>, tensor<32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.shift' op vector operand must be a 0-d tensor for a scalar coda.shift, got 32
// CHECK-NEXT: {{^// -{5}$}}

// -----

// The result type is the tile's (generic form, to state another one).
func.func @scale_result_type(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = "coda.scale"(%x, %v_) <{axis = #coda<axis rows>}> : (!coda.tile<16x32xf32>, tensor<16xf32>) -> !coda.tile<16x16xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.scale' op result 'result' at position 0 does not verify: attribute !coda.tile<16x32xf32> expected from variable 'T', but got !coda.tile<16x16xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @accumulate_shape(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.accumulate %x, %c_ : !coda.tile<16x32xf32>, tensor<32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.accumulate' op accumulated matrix must be a float tensor of shape 16x32 (the tile's matrix), got tensor<32xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @accumulate_int(%m: tensor<16x32xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m : tensor<16x32xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xi32>):
    %x = coda.index rows : !coda.tile<16x32xi32>
    %f = coda.map %x : !coda.tile<16x32xi32> -> !coda.tile<16x32xf32> {
    ^bb0(%a: i32):
      %b = arith.sitofp %a : i32 to f32
      coda.yield %b : f32
    }
    %y = coda.accumulate %f, %m_ : !coda.tile<16x32xf32>, tensor<16x32xi32>
    coda.yield %y : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.accumulate' op accumulated matrix must be a float tensor of shape 16x32 (the tile's matrix), got tensor<16x32xi32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @accumulate_int_tile(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %i = coda.index cols : !coda.tile<16x32xi32>
    %y = coda.accumulate %i, %m_ : !coda.tile<16x32xi32>, tensor<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.accumulate' op accumulated tile must be an f32 tile, got !coda.tile<16x32xi32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== coda.map

func.func @map_no_inputs(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = "coda.map"() ({
      %k = arith.constant 1.000000e+00 : f32
      coda.yield %k : f32
    }) : () -> !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.map' op coda.map needs at least one input tile
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @map_no_outputs(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    "coda.map"(%x) ({
    ^bb0(%a: f32):
      coda.yield
    }) : (!coda.tile<16x32xf32>) -> ()
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.map' op coda.map must produce at least one tile
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @map_shapes(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.map %x : !coda.tile<16x32xf32> -> !coda.tile<16x16xf32> {
    ^bb0(%a: f32):
      coda.yield %a : f32
    }
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.map' op all tiles of coda.map must have shape 16x32, #1 has 16x16
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @map_arity(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.map %x, %x : (!coda.tile<16x32xf32>, !coda.tile<16x32xf32>) -> !coda.tile<16x32xf32> {
    ^bb0(%a: f32):
      coda.yield %a : f32
    }
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.map' op coda.map body must take 2 scalar arguments, got 1
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @map_arg_type(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.map %x : !coda.tile<16x32xf32> -> !coda.tile<16x32xf32> {
    ^bb0(%a: i32):
      %b = arith.sitofp %a : i32 to f32
      coda.yield %b : f32
    }
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.map' op body argument i32 does not match tile element type f32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @map_arg_tensor(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.map %x : !coda.tile<16x32xf32> -> !coda.tile<16x32xf32> {
    ^bb0(%a: tensor<f32>):
      %k = arith.constant 1.000000e+00 : f32
      coda.yield %k : f32
    }
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.map' op coda.map body arguments must be f32, i32 or i1 scalars, got tensor<f32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @map_yield_count(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.map %x : !coda.tile<16x32xf32> -> !coda.tile<16x32xf32> {
    ^bb0(%a: f32):
      coda.yield %a, %a : f32, f32
    }
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.map' op coda.map body must yield 1 values, yields 2
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @map_yield_type(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.map %x : !coda.tile<16x32xf32> -> !coda.tile<16x32xf32> {
    ^bb0(%a: f32):
      %b = arith.fptosi %a : f32 to i32
      coda.yield %b : i32
    }
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.map' op body yields i32 for a tile of f32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @map_body_op(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.map %x : !coda.tile<16x32xf32> -> !coda.tile<16x32xf32> {
    ^bb0(%a: f32):
      %b = "test.op"(%a) : (f32) -> f32
      coda.yield %b : f32
    }
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.map' op coda.map body may only contain arith and math ops (elementwise math), found 'test.op'
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @map_body_tensor(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.map %x : !coda.tile<16x32xf32> -> !coda.tile<16x32xf32> {
    ^bb0(%a: f32):
      %k = arith.constant dense<1.000000e+00> : tensor<4xf32>
      coda.yield %a : f32
    }
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.map' op coda.map body values must be scalars, 'arith.constant' gives tensor<4xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @map_empty_body(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.map %x : !coda.tile<16x32xf32> -> !coda.tile<16x32xf32> {
    ^bb0(%a: f32):
    }
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.map' op coda.map body must end with coda.yield
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @map_operand_types(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.map %x, %x : !coda.tile<16x32xf32> -> !coda.tile<16x32xf32> {
    ^bb0(%a: f32, %b: f32):
      coda.yield %a : f32
    }
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: expected 2 operand types, got 1
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== coda.pair_map

func.func @pair_rows(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %h = "test.op"() : () -> !coda.tile<8x16xf32>
    %y = coda.pair_map %x : !coda.tile<16x32xf32> -> !coda.tile<8x16xf32> {
    ^bb0(%a: f32, %b: f32):
      coda.yield %a : f32
    }
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.pair_map' op all tiles of coda.pair_map must have the same number of rows
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @pair_widths(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.pair_map %x : !coda.tile<16x32xf32> -> !coda.tile<16x8xf32> {
    ^bb0(%a: f32, %b: f32):
      coda.yield %a : f32
    }
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.pair_map' op coda.pair_map tiles must be P (narrow) or 2P (wide) columns wide, got widths [8, 32]
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @pair_odd(%m: tensor<16x15xf32>) {
  %0 = coda.elementwise [16, 15] ins(%m : tensor<16x15xf32>) -> tensor<16x15xf32> {
  ^bb0(%m_: tensor<16x15xf32>):
    %x = coda.load %m_ : tensor<16x15xf32> -> !coda.tile<16x15xf32>
    %y = coda.pair_map %x : !coda.tile<16x15xf32> -> !coda.tile<16x15xf32> {
    ^bb0(%a: f32, %b: f32):
      coda.yield %b, %a : f32, f32
    }
    coda.yield %y : !coda.tile<16x15xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.pair_map' op wide tiles need an even number of columns, got 15
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @pair_stride(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.pair_map stride 3 %x : !coda.tile<16x32xf32> -> !coda.tile<16x32xf32> {
    ^bb0(%a: f32, %b: f32):
      coda.yield %b, %a : f32, f32
    }
    coda.yield %y : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.pair_map' op stride 3 must be positive and 2*stride must divide the wide width 32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @pair_stride_zero(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.pair_map stride 0 %x : !coda.tile<16x32xf32> -> !coda.tile<16x32xf32> {
    ^bb0(%a: f32, %b: f32):
      coda.yield %b, %a : f32, f32
    }
    coda.yield %y : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.pair_map' op stride 0 must be positive and 2*stride must divide the wide width 32
// CHECK-NEXT: {{^// -{5}$}}

// A period (partial half-style RoPE): pairs (c, c + stride) in the first 2*stride columns of
// each period, the rest adjacent; the period is even, wider than 2*stride and tiles the wide width.

// -----

func.func @pair_period_width(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.pair_map stride 3 period 12 %x : !coda.tile<16x32xf32> -> !coda.tile<16x32xf32> {
    ^bb0(%a: f32, %b: f32):
      coda.yield %b, %a : f32, f32
    }
    coda.yield %y : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.pair_map' op period 12 must be even, greater than 2*stride = 6 (stride positive) and divide the wide width 32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @pair_period_odd(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.pair_map stride 3 period 15 %x : !coda.tile<16x32xf32> -> !coda.tile<16x32xf32> {
    ^bb0(%a: f32, %b: f32):
      coda.yield %b, %a : f32, f32
    }
    coda.yield %y : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.pair_map' op period 15 must be even, greater than 2*stride = 6 (stride positive) and divide the wide width 32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @pair_period_plain(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.pair_map stride 8 period 16 %x : !coda.tile<16x32xf32> -> !coda.tile<16x32xf32> {
    ^bb0(%a: f32, %b: f32):
      coda.yield %b, %a : f32, f32
    }
    coda.yield %y : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.pair_map' op period 16 must be even, greater than 2*stride = 16 (stride positive) and divide the wide width 32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @pair_period_stride_zero(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.pair_map stride 0 period 16 %x : !coda.tile<16x32xf32> -> !coda.tile<16x32xf32> {
    ^bb0(%a: f32, %b: f32):
      coda.yield %b, %a : f32, f32
    }
    coda.yield %y : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.pair_map' op period 16 must be even, greater than 2*stride = 0 (stride positive) and divide the wide width 32
// CHECK-NEXT: {{^// -{5}$}}

// -----

// 2 -> 1: the body sees both members of a pair.
func.func @pair_arity(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.pair_map %x : !coda.tile<16x32xf32> -> !coda.tile<16x16xf32> {
    ^bb0(%a: f32):
      coda.yield %a : f32
    }
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.pair_map' op coda.pair_map body must take 2 scalar arguments, got 1
// CHECK-NEXT: {{^// -{5}$}}

// -----

// 2 -> 2: the body yields both members of each output pair.
func.func @pair_rotation_yields(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.pair_map %x : !coda.tile<16x32xf32> -> !coda.tile<16x32xf32> {
    ^bb0(%a: f32, %b: f32):
      coda.yield %a : f32
    }
    coda.yield %y : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.pair_map' op coda.pair_map body must yield 2 values, yields 1
// CHECK-NEXT: {{^// -{5}$}}

// -----

// 1 -> 2: a narrow input gives one value per pair.
func.func @pair_expand_args(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %h = coda.pair_map %x : !coda.tile<16x32xf32> -> !coda.tile<16x16xf32> {
    ^bb0(%a: f32, %b: f32):
      coda.yield %a : f32
    }
    %y = coda.pair_map %h : !coda.tile<16x16xf32> -> !coda.tile<16x32xf32> {
    ^bb0(%a: f32, %b: f32):
      coda.yield %a, %b : f32, f32
    }
    coda.yield %y : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.pair_map' op coda.pair_map body must take 1 scalar arguments, got 2
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @pair_arg_type(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %i = coda.index cols : !coda.tile<16x32xi32>
    %y = coda.pair_map %i : !coda.tile<16x32xi32> -> !coda.tile<16x16xf32> {
    ^bb0(%a: f32, %b: f32):
      coda.yield %a : f32
    }
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.pair_map' op body argument f32 does not match tile element type i32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @pair_yield_type(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.pair_map %x : !coda.tile<16x32xf32> -> !coda.tile<16x16xf32> {
    ^bb0(%a: f32, %b: f32):
      %lt = arith.cmpf olt, %a, %b : f32
      coda.yield %lt : i1
    }
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.pair_map' op body yields i1 for a tile of f32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @pair_no_outputs(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    "coda.pair_map"(%x) <{stride = 1 : i64}> ({
    ^bb0(%a: f32, %b: f32):
      coda.yield
    }) : (!coda.tile<16x32xf32>) -> ()
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.pair_map' op coda.pair_map needs input and output tiles
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== coda.reduce, coda.segment_reduce, coda.select

func.func @reduce_dim(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %r = "coda.reduce"(%x) <{kind = #coda<reduce_kind sum>, dim = 2 : i64}> : (!coda.tile<16x32xf32>) -> !coda.partials<rows, 16, sum>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.reduce' op dim must be 0 (over rows) or 1 (over columns), got 2
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @reduce_length(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %r = coda.reduce sum %x dim 0 : !coda.tile<16x32xf32> -> !coda.partials<rows, 16, sum>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.reduce' op result must be !coda.partials<cols, 32, sum>, got !coda.partials<rows, 16, sum>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @reduce_combine(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %r = coda.reduce sumsq %x dim 1 : !coda.tile<16x32xf32> -> !coda.partials<rows, 16, max>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.reduce' op result must be !coda.partials<rows, 16, sum>, got !coda.partials<rows, 16, max>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @reduce_lse(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %r = coda.reduce lse %x dim 1 : !coda.tile<16x32xf32> -> !coda.partials<rows, 16, sum>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.reduce' op result must be !coda.partials<rows, 16, lse>, got !coda.partials<rows, 16, sum>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @reduce_int(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %i = coda.index rows : !coda.tile<16x32xi32>
    %r = coda.reduce max %i dim 1 : !coda.tile<16x32xi32> -> !coda.partials<rows, 16, max>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.reduce' op reduced tile must be an f32 tile, got !coda.tile<16x32xi32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @reduce_kind(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %r = coda.reduce mean %x dim 1 : !coda.tile<16x32xf32> -> !coda.partials<rows, 16, sum>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: Expected `sum`, `sumsq`, `max`, or `lse`.
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @segment_width(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.segment_reduce sum %x width 12 : !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.segment_reduce' op segment width 12 must be positive and divide the tile's 32 columns
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @segment_lse(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %y = coda.segment_reduce lse %x width 16 : !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.segment_reduce' op segment_reduce supports sum, sumsq and max
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @segment_int(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %i = coda.index rows : !coda.tile<16x32xi32>
    %y = coda.segment_reduce sum %i width 16 : !coda.tile<16x32xi32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.segment_reduce' op reduced tile must be an f32 tile, got !coda.tile<16x32xi32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @select_float_indices(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %r = coda.select %x, %v_ : !coda.tile<16x32xf32>, tensor<16xf32> -> !coda.partials<rows, 16, sum>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.select' op column indices must be a tensor<16xi32> (one per row), got tensor<16xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @select_length(%m: tensor<16x32xf32>, %t: tensor<32xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %t : tensor<16x32xf32>, tensor<32xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %t_: tensor<32xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %r = coda.select %x, %t_ : !coda.tile<16x32xf32>, tensor<32xi32> -> !coda.partials<rows, 16, sum>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.select' op column indices must be a tensor<16xi32> (one per row), got tensor<32xi32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @select_combine(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %r = coda.select %x, %t_ : !coda.tile<16x32xf32>, tensor<16xi32> -> !coda.partials<rows, 16, max>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.select' op result must be !coda.partials<rows, 16, sum>, got !coda.partials<rows, 16, max>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @select_int_tile(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %i = coda.index cols : !coda.tile<16x32xi32>
    %r = coda.select %i, %t_ : !coda.tile<16x32xi32>, tensor<16xi32> -> !coda.partials<rows, 16, sum>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.select' op selected tile must be an f32 tile, got !coda.tile<16x32xi32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== what a kernel yields must match its results

func.func @yield_count(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>

    coda.yield %x, %x : !coda.tile<16x32xf32>, !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op coda.elementwise has 1 results but its epilogue yields 2 values
// CHECK-NEXT: {{^// -{5}$}}

// -----

// Partials type mismatch between the yielded value and the result.
func.func @yield_partials_type(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> !coda.partials<rows, 16, max> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %r = coda.reduce sum %x dim 1 : !coda.tile<16x32xf32> -> !coda.partials<rows, 16, sum>
    coda.yield %r : !coda.partials<rows, 16, sum>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op result #0 must be !coda.partials<rows, 16, sum> to hold the yielded partials, got !coda.partials<rows, 16, max>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @yield_partials_into_tensor(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    %r = coda.reduce sum %x dim 1 : !coda.tile<16x32xf32> -> !coda.partials<rows, 16, sum>
    coda.yield %r : !coda.partials<rows, 16, sum>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op result #0 must be !coda.partials<rows, 16, sum> to hold the yielded partials, got tensor<16xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @yield_tile_into_partials(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> !coda.partials<rows, 16, sum> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>

    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op result #0 stores a tile and must be a float tensor, got !coda.partials<rows, 16, sum>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @yield_tile_into_int(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xi32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>

    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op result #0 stores a tile and must be a float tensor, got tensor<16x32xi32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @yield_tile_shape(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<32x16xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>

    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op result #0 stores a 16x32 tile but has shape 32x16
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @yield_tensor(%m: tensor<16x32xf32>, %v: tensor<16xf32>, %c: tensor<32xf32>, %s: tensor<f32>, %t: tensor<16xi32>) {
  %0 = coda.elementwise [16, 32] ins(%m, %v, %c, %s, %t : tensor<16x32xf32>, tensor<16xf32>, tensor<32xf32>, tensor<f32>, tensor<16xi32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>, %v_: tensor<16xf32>, %c_: tensor<32xf32>, %s_: tensor<f32>, %t_: tensor<16xi32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>

    coda.yield %m_ : tensor<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op coda.elementwise can only yield tiles and partials, got tensor<16x32xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @empty_epilogue(%a: tensor<16x32xf32>, %b: tensor<32x64xf32>) {
  %0 = coda.gemm %a, %b : tensor<16x32xf32>, tensor<32x64xf32> -> tensor<16x64xf32> {
  ^bb0(%acc: !coda.tile<16x64xf32>):
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.gemm' op coda.gemm region must end with coda.yield
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @no_region_block(%m: tensor<16x32xf32>) {
  %0 = coda.elementwise [16, 32] ins(%m : tensor<16x32xf32>) -> tensor<16x32xf32> {
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op Region 'body' at position 0 expected a single block, but got 0 blocks
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== coda.gemm

func.func @gemm_int(%a: tensor<16x32xi32>, %b: tensor<32x64xi32>) {
  %0 = coda.gemm %a, %b : tensor<16x32xi32>, tensor<32x64xi32> -> tensor<16x64xf32> {
  ^bb0(%acc: !coda.tile<16x64xf32>):
    coda.yield %acc : !coda.tile<16x64xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.gemm' op a must be a float matrix, got tensor<16x32xi32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @gemm_rank(%a: tensor<16x32xf32>, %b: tensor<32xf32>) {
  %0 = coda.gemm %a, %b : tensor<16x32xf32>, tensor<32xf32> -> tensor<16x64xf32> {
  ^bb0(%acc: !coda.tile<16x64xf32>):
    coda.yield %acc : !coda.tile<16x64xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.gemm' op b must be a float matrix, got tensor<32xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @gemm_k(%a: tensor<16x32xf32>, %b: tensor<48x64xf32>) {
  %0 = coda.gemm %a, %b : tensor<16x32xf32>, tensor<48x64xf32> -> tensor<16x64xf32> {
  ^bb0(%acc: !coda.tile<16x64xf32>):
    coda.yield %acc : !coda.tile<16x64xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.gemm' op contraction mismatch: a (MxK) has K = 32 but b (KxN) has K = 48
// CHECK-NEXT: {{^// -{5}$}}

// -----

// A KxN weight marked transpose_b.
func.func @gemm_k_transpose_b(%a: tensor<16x32xf32>, %b: tensor<32x64xf32>) {
  %0 = coda.gemm %a, %b transpose_b : tensor<16x32xf32>, tensor<32x64xf32> -> tensor<16x32xf32> {
  ^bb0(%acc: !coda.tile<16x32xf32>):
    coda.yield %acc : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.gemm' op contraction mismatch: a (MxK) has K = 32 but b (NxK) has K = 64
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @gemm_k_transpose_a(%a: tensor<16x32xf32>, %b: tensor<32x64xf32>) {
  %0 = coda.gemm %a, %b transpose_a : tensor<16x32xf32>, tensor<32x64xf32> -> tensor<32x64xf32> {
  ^bb0(%acc: !coda.tile<32x64xf32>):
    coda.yield %acc : !coda.tile<32x64xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.gemm' op contraction mismatch: a (KxM) has K = 16 but b (KxN) has K = 32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @gemm_element_types(%a: tensor<16x32xbf16>, %b: tensor<32x64xf16>) {
  %0 = coda.gemm %a, %b : tensor<16x32xbf16>, tensor<32x64xf16> -> tensor<16x64xf32> {
  ^bb0(%acc: !coda.tile<16x64xf32>):
    coda.yield %acc : !coda.tile<16x64xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.gemm' op a and b must have the same element type
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @gemm_accumulator(%a: tensor<16x32xf32>, %b: tensor<32x64xf32>) {
  %0 = coda.gemm %a, %b : tensor<16x32xf32>, tensor<32x64xf32> -> tensor<16x64xf32> {
  ^bb0(%acc: !coda.tile<16x32xf32>):
    coda.yield %acc : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.gemm' op the epilogue's first argument must be the accumulator !coda.tile<16x64xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @gemm_no_accumulator(%a: tensor<16x32xf32>, %b: tensor<32x64xf32>, %m: tensor<16x64xf32>) {
  %0 = coda.gemm %a, %b : tensor<16x32xf32>, tensor<32x64xf32> -> tensor<16x64xf32> {
    %x = "test.op"() : () -> !coda.tile<16x64xf32>
    coda.yield %x : !coda.tile<16x64xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.gemm' op the epilogue's first argument must be the accumulator !coda.tile<16x64xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @gemm_interleave(%a: tensor<16x32xf32>, %b: tensor<48x32xf32>) {
  %0 = coda.gemm %a, %b transpose_b interleave 16 : tensor<16x32xf32>, tensor<48x32xf32> -> tensor<16x48xf32> {
  ^bb0(%acc: !coda.tile<16x48xf32>):
    coda.yield %acc : !coda.tile<16x48xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.gemm' op interleave 16 needs N (48) to be a multiple of 32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @gemm_interleave_zero(%a: tensor<16x32xf32>, %b: tensor<48x32xf32>) {
  %0 = coda.gemm %a, %b transpose_b interleave 0 : tensor<16x32xf32>, tensor<48x32xf32> -> tensor<16x48xf32> {
  ^bb0(%acc: !coda.tile<16x48xf32>):
    coda.yield %acc : !coda.tile<16x48xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.gemm' op interleave 0 needs N (48) to be a multiple of 0
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @gemm_interleave_wide(%a: tensor<16x32xf32>, %b: tensor<32x64xf32>) {
  %0 = coda.gemm %a, %b interleave_wide 48 : tensor<16x32xf32>, tensor<32x64xf32> -> tensor<16x64xf32> {
  ^bb0(%acc: !coda.tile<16x64xf32>):
    coda.yield %acc : !coda.tile<16x64xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.gemm' op interleave_wide 48 needs 2N (128) to be a multiple of 96
// CHECK-NEXT: {{^// -{5}$}}

// -----

// An epilogue reads other rows than the GEMM's M: that would be another tile's values.
func.func @gemm_rows(%a: tensor<64x32xbf16>, %b: tensor<32x128xbf16>, %r: tensor<32x128xbf16>) {
  %0 = coda.gemm %a, %b ins(%r : tensor<32x128xbf16>) : tensor<64x32xbf16>, tensor<32x128xbf16> -> tensor<32x128xbf16> {
  ^bb0(%acc: !coda.tile<64x128xf32>, %r_: tensor<32x128xbf16>):
    %t = coda.load %r_ : tensor<32x128xbf16> -> !coda.tile<32x128xf32>
    coda.yield %t : !coda.tile<32x128xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.gemm' op tiles of this kernel must have 64 rows, 'coda.load' gives !coda.tile<32x128xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @gemm_ins_types(%a: tensor<16x32xf32>, %b: tensor<32x64xf32>, %v: tensor<16xf32>) {
  %0 = coda.gemm %a, %b ins(%v, %v : tensor<16xf32>) : tensor<16x32xf32>, tensor<32x64xf32> -> tensor<16x64xf32> {
  ^bb0(%acc: !coda.tile<16x64xf32>, %v_: tensor<16xf32>, %w_: tensor<16xf32>):
    coda.yield %acc : !coda.tile<16x64xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: ins has 2 operands but 1 types
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @gemm_keyword(%a: tensor<16x32xf32>, %b: tensor<32x64xf32>) {
  %0 = coda.gemm %a, %b transpose_c : tensor<16x32xf32>, tensor<32x64xf32> -> tensor<16x64xf32> {
  ^bb0(%acc: !coda.tile<16x64xf32>):
    coda.yield %acc : !coda.tile<16x64xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: Expected ':'
// CHECK-NEXT: {{^.+$}}
// CHECK-NEXT: {{^ *\^+$}}
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== coda.elementwise

func.func @ew_shape(%m: tensor<16x32xf32>) {
  %0 = coda.elementwise [16, 32, 2] ins(%m : tensor<16x32xf32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op shape must be two positive extents [M, N], got [16, 32, 2]
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @ew_zero(%m: tensor<16x32xf32>) {
  %0 = coda.elementwise [0, 32] ins(%m : tensor<16x32xf32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op shape must be two positive extents [M, N], got [0, 32]
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @ew_rows(%m: tensor<16x32xf32>) {
  %0 = coda.elementwise [8, 32] ins(%m : tensor<16x32xf32>) -> tensor<16x32xf32> {
  ^bb0(%m_: tensor<16x32xf32>):
    %x = coda.load %m_ : tensor<16x32xf32> -> !coda.tile<16x32xf32>
    coda.yield %x : !coda.tile<16x32xf32>
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.elementwise' op tiles of this kernel must have 8 rows, 'coda.load' gives !coda.tile<16x32xf32>
// CHECK-NEXT: {{^// -{5}$}}

// -----

// ===== coda.fold

func.func @fold_lengths(%p: !coda.partials<rows, 16, sum>, %q: !coda.partials<rows, 8, max>, %v: tensor<16xf32>, %n: tensor<f32>, %t: tensor<16xi32>, %w: tensor<16xi64>) {
  %0 = coda.fold %p, %q : !coda.partials<rows, 16, sum>, !coda.partials<rows, 8, max> -> tensor<16xf32> {
  ^bb0(%a: f32, %b: f32):
    coda.yield %a : f32
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.fold' op partials #1 has length 8, expected 16 like the others
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @fold_input_shape(%p: !coda.partials<rows, 16, sum>, %q: !coda.partials<rows, 8, max>, %v: tensor<16xf32>, %n: tensor<f32>, %t: tensor<16xi32>, %w: tensor<16xi64>, %u: tensor<8xf32>) {
  %0 = coda.fold %p : !coda.partials<rows, 16, sum> ins(%u : tensor<8xf32>) -> tensor<16xf32> {
  ^bb0(%a: f32, %b: f32):
    coda.yield %a : f32
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.fold' op input #0 must have shape 16 or be 0-d, got 8
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @fold_result_shape(%p: !coda.partials<rows, 16, sum>, %q: !coda.partials<rows, 8, max>, %v: tensor<16xf32>, %n: tensor<f32>, %t: tensor<16xi32>, %w: tensor<16xi64>) {
  %0 = coda.fold %p : !coda.partials<rows, 16, sum> -> tensor<16x2xf32> {
  ^bb0(%a: f32):
    coda.yield %a : f32
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.fold' op result #0 must have shape 16 (per row) or be 0-d (summed), got 16x2
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @fold_arity(%p: !coda.partials<rows, 16, sum>, %q: !coda.partials<rows, 8, max>, %v: tensor<16xf32>, %n: tensor<f32>, %t: tensor<16xi32>, %w: tensor<16xi64>) {
  %0 = coda.fold %p : !coda.partials<rows, 16, sum> ins(%v, %n : tensor<16xf32>, tensor<f32>) -> tensor<16xf32> {
  ^bb0(%a: f32, %b: f32):
    coda.yield %a : f32
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.fold' op coda.fold body must take 3 scalar arguments, got 2
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @fold_yields(%p: !coda.partials<rows, 16, sum>, %q: !coda.partials<rows, 8, max>, %v: tensor<16xf32>, %n: tensor<f32>, %t: tensor<16xi32>, %w: tensor<16xi64>) {
  %0 = coda.fold %p : !coda.partials<rows, 16, sum> -> tensor<16xf32> {
  ^bb0(%a: f32):
    coda.yield %a, %a : f32, f32
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.fold' op coda.fold body must yield 1 values, yields 2
// CHECK-NEXT: {{^// -{5}$}}

// -----

// Targets are i32: the body sees them as i32.
func.func @fold_arg_type(%p: !coda.partials<rows, 16, sum>, %q: !coda.partials<rows, 8, max>, %v: tensor<16xf32>, %n: tensor<f32>, %t: tensor<16xi32>, %w: tensor<16xi64>) {
  %0 = coda.fold %p : !coda.partials<rows, 16, sum> ins(%t : tensor<16xi32>) -> tensor<16xf32> {
  ^bb0(%a: f32, %b: f32):
    coda.yield %a : f32
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.fold' op body argument #1 must be i32, got f32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @fold_partial_type(%p: !coda.partials<rows, 16, sum>, %q: !coda.partials<rows, 8, max>, %v: tensor<16xf32>, %n: tensor<f32>, %t: tensor<16xi32>, %w: tensor<16xi64>) {
  %0 = coda.fold %p : !coda.partials<rows, 16, sum> -> tensor<16xf32> {
  ^bb0(%a: i32):
    %b = arith.sitofp %a : i32 to f32
    coda.yield %b : f32
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.fold' op body argument #0 must be f32, got i32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @fold_yield_type(%p: !coda.partials<rows, 16, sum>, %q: !coda.partials<rows, 8, max>, %v: tensor<16xf32>, %n: tensor<f32>, %t: tensor<16xi32>, %w: tensor<16xi64>) {
  %0 = coda.fold %p : !coda.partials<rows, 16, sum> -> tensor<16xi32> {
  ^bb0(%a: f32):
    coda.yield %a : f32
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.fold' op body must yield i32 as value #0, got f32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @fold_i64_input(%p: !coda.partials<rows, 16, sum>, %q: !coda.partials<rows, 8, max>, %v: tensor<16xf32>, %n: tensor<f32>, %t: tensor<16xi32>, %w: tensor<16xi64>) {
  %0 = coda.fold %p : !coda.partials<rows, 16, sum> ins(%w : tensor<16xi64>) -> tensor<16xf32> {
  ^bb0(%a: f32, %b: f32):
    coda.yield %a : f32
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.fold' op input #0 must have a float or i32 element type, got tensor<16xi64>
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @fold_finalize_needs_sum(%p: !coda.partials<rows, 16, sum>, %q: !coda.partials<rows, 8, max>, %v: tensor<16xf32>, %n: tensor<f32>, %t: tensor<16xi32>, %w: tensor<16xi64>) {
  %0 = coda.fold %p : !coda.partials<rows, 16, sum> -> tensor<16xf32> {
  ^bb0(%a: f32):
    coda.yield %a : f32
  } finalize {
  ^bb0(%s: f32):
    coda.yield %s : f32
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.fold' op a finalize region needs at least one 0-d (summed) result
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @fold_finalize_arity(%p: !coda.partials<rows, 16, sum>, %q: !coda.partials<rows, 8, max>, %v: tensor<16xf32>, %n: tensor<f32>, %t: tensor<16xi32>, %w: tensor<16xi64>) {
  %0, %1 = coda.fold %p : !coda.partials<rows, 16, sum> -> (tensor<f32>, tensor<16xf32>) {
  ^bb0(%a: f32):
    coda.yield %a, %a : f32, f32
  } finalize {
  ^bb0(%s: f32, %u: f32):
    coda.yield %s : f32
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.fold' op coda.fold finalize body must take 1 scalar arguments, got 2
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @fold_finalize_yields(%p: !coda.partials<rows, 16, sum>, %q: !coda.partials<rows, 8, max>, %v: tensor<16xf32>, %n: tensor<f32>, %t: tensor<16xi32>, %w: tensor<16xi64>) {
  %0 = coda.fold %p : !coda.partials<rows, 16, sum> -> tensor<f32> {
  ^bb0(%a: f32):
    coda.yield %a : f32
  } finalize {
  ^bb0(%s: f32):
    coda.yield %s, %s : f32, f32
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.fold' op coda.fold finalize body must yield 1 values, yields 2
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @fold_finalize_type(%p: !coda.partials<rows, 16, sum>, %q: !coda.partials<rows, 8, max>, %v: tensor<16xf32>, %n: tensor<f32>, %t: tensor<16xi32>, %w: tensor<16xi64>) {
  %0 = coda.fold %p : !coda.partials<rows, 16, sum> -> tensor<f32> {
  ^bb0(%a: f32):
    coda.yield %a : f32
  } finalize {
  ^bb0(%s: f32):
    %i = arith.fptosi %s : f32 to i32
    coda.yield %i : i32
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.fold' op finalize must yield f32 as value #0, got i32
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @fold_finalize_blocks(%p: !coda.partials<rows, 16, sum>, %q: !coda.partials<rows, 8, max>, %v: tensor<16xf32>, %n: tensor<f32>, %t: tensor<16xi32>, %w: tensor<16xi64>) {
  %0 = coda.fold %p : !coda.partials<rows, 16, sum> -> tensor<f32> {
  ^bb0(%a: f32):
    coda.yield %a : f32
  } finalize {
  ^bb0(%s: f32):
    coda.yield %s : f32
  ^bb1(%u: f32):
    coda.yield %u : f32
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.fold' op the finalize region must have a single block
// CHECK-NEXT: {{^// -{5}$}}

// -----

func.func @fold_body_op(%p: !coda.partials<rows, 16, sum>, %q: !coda.partials<rows, 8, max>, %v: tensor<16xf32>, %n: tensor<f32>, %t: tensor<16xi32>, %w: tensor<16xi64>) {
  %0 = coda.fold %p : !coda.partials<rows, 16, sum> -> tensor<16xf32> {
  ^bb0(%a: f32):
    %b = "test.op"(%a) : (f32) -> f32
    coda.yield %b : f32
  }
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.fold' op coda.fold body may only contain arith and math ops (elementwise math), found 'test.op'
// CHECK-NEXT: {{^// -{5}$}}

// -----

// Partials operands must be !coda.partials (generic form).
func.func @fold_partials_operand(%p: tensor<16xf32>) {
  %0 = "coda.fold"(%p) <{operandSegmentSizes = array<i32: 1, 0>}> ({
  ^bb0(%a: f32):
    coda.yield %a : f32
  }, {
  }) : (tensor<16xf32>) -> tensor<16xf32>
  func.return
}
// CHECK: {{.*}}verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error: 'coda.fold' op operand 'partials' at position 0 does not verify: tensor<16xf32> should be of base attribute coda.partials
// CHECK-NOT: error:
