// RUN: not coda-opt %s -p convert-coda-to-tl,convert-coda-to-host --split-input-file 2>&1 | filecheck %s
// What convert-coda-to-host refuses, located at the coda op: a fixed tile config whose bn
// breaks the column multiple coda-legalize recorded on the kernel; an argument torch cannot
// pass; an op with no host lowering. (`coda.legalized`: the records below stand for
// coda-legalize's, which convert-coda-to-tl needs to build elementwise kernels.)
// CHECK-NOT: Traceback

builtin.module attributes {coda.legalized} {
  func.func @config(%x: tensor<8x256xf32>) -> tensor<8x256xf32> {
    %o = coda.elementwise [8, 256] config #coda.config<bm = 16, bn = 64, bk = 32, warps = 4, stages = 3> ins(%x : tensor<8x256xf32>) -> tensor<8x256xf32> attributes {coda.constraints = #coda.tile_constraints<bn_multiple_of = 128, reasons = ["a pair stride of 64"]>} {
    ^bb0(%xt: tensor<8x256xf32>):
      %t = coda.load %xt : tensor<8x256xf32> -> !coda.tile<8x256xf32>
      coda.yield %t : !coda.tile<8x256xf32>
    }
    func.return %o : tensor<8x256xf32>
  }
}
// CHECK: convert_coda_to_host_errors.mlir:10:5: error: 'coda.elementwise' op tile config bn = 64 must be a multiple of 128 for this epilogue (pair groups and segments must not straddle column tiles)

// -----

func.func @partials_argument(%p: !coda.partials<rows, 8, sum>) -> tensor<8xf32> {
  %r = coda.fold %p : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
  ^bb0(%v: f32):
    coda.yield %v : f32
  }
  func.return %r : tensor<8xf32>
}
// CHECK: convert_coda_to_host_errors.mlir:22:1: error: 'func.func' op argument #0 must be a tensor to be passed from torch, got !coda.partials<rows, 8, sum>

// -----

func.func @nn_left(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %y = "nn.add"(%x, %x) : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  func.return %y : tensor<8x16xf32>
}
// CHECK: convert_coda_to_host_errors.mlir:34:3: error: 'nn.add' op has no Triton lowering at function level (only coda.gemm, coda.elementwise, coda.fold, coda.launch_group and func.return; run the nn-to-coda pipeline first for nn ops)

// -----

// A coda.writes_over record over an argument the caller did not donate is a compiler bug
// (coda_ir.analysis.in_place only records donated ones), reported as one.
builtin.module attributes {coda.legalized} {
  func.func @over(%a: tensor<8x16xf32>, %b: tensor<8x16xf32>) -> tensor<8x16xf32> {
    %o = coda.elementwise [8, 16] ins(%a, %b : tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32> attributes {coda.writes_over = [1 : i64]} {
    ^bb0(%at: tensor<8x16xf32>, %bt: tensor<8x16xf32>):
      %x = coda.load %at : tensor<8x16xf32> -> !coda.tile<8x16xf32>
      coda.yield %x : !coda.tile<8x16xf32>
    }
    func.return %o : tensor<8x16xf32>
  }
}
// CHECK: internal error: InternalCompilerBug: {{.*}}convert_coda_to_host_errors.mlir:45:5: error: 'coda.elementwise' op records coda.writes_over output #0 over input #1, which is no donated argument of its type
