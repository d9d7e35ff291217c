// RUN: coda-opt %s -p coda-plan-in-place --split-input-file | filecheck %s
// coda-plan-in-place records coda.writes_over on a kernel output that may be stored into a
// donated argument (coda_ir/analysis/in_place.py): read through one whole-shape load, computed
// per element from it, no later reader of the argument, the output not returned.

func.func @over(%a: tensor<8x16xf32> {coda.donated}, %b: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %o = coda.elementwise [8, 16] ins(%a, %b : tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32> {
  ^bb0(%at: tensor<8x16xf32>, %bt: tensor<8x16xf32>):
    %x = coda.load %at : tensor<8x16xf32> -> !coda.tile<8x16xf32>
    %y = coda.load %bt : tensor<8x16xf32> -> !coda.tile<8x16xf32>
    %z = coda.map %x, %y : (!coda.tile<8x16xf32>, !coda.tile<8x16xf32>) -> !coda.tile<8x16xf32> {
    ^bb0(%u: f32, %v: f32):
      %w = arith.mulf %u, %v : f32
      coda.yield %w : f32
    }
    coda.yield %z : !coda.tile<8x16xf32>
  }
  %r = coda.elementwise [8, 16] ins(%o : tensor<8x16xf32>) -> tensor<8x16xf32> {
  ^bb0(%ot: tensor<8x16xf32>):
    %x = coda.load %ot : tensor<8x16xf32> -> !coda.tile<8x16xf32>
    coda.yield %x : !coda.tile<8x16xf32>
  }
  func.return %r : tensor<8x16xf32>
}

// The first kernel's output goes over %a (input 0); %b is not donated; the second kernel's
// output is returned, so it gets a fresh buffer (no record).
// CHECK:      %o = coda.elementwise [8, 16] ins(%a, %b : tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32> attributes {coda.writes_over = [0 : i64]}
// CHECK:      %r = coda.elementwise [8, 16] ins(%o : tensor<8x16xf32>) -> tensor<8x16xf32> {

// -----

// A donated argument read again later is not written over.
func.func @read_later(%a: tensor<8x16xf32> {coda.donated}) -> tensor<8x16xf32> {
  %o = coda.elementwise [8, 16] ins(%a : tensor<8x16xf32>) -> tensor<8x16xf32> {
  ^bb0(%at: tensor<8x16xf32>):
    %x = coda.load %at : tensor<8x16xf32> -> !coda.tile<8x16xf32>
    coda.yield %x : !coda.tile<8x16xf32>
  }
  %r = coda.elementwise [8, 16] ins(%o, %a : tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32> {
  ^bb0(%ot: tensor<8x16xf32>, %at: tensor<8x16xf32>):
    %x = coda.load %ot : tensor<8x16xf32> -> !coda.tile<8x16xf32>
    %y = coda.load %at : tensor<8x16xf32> -> !coda.tile<8x16xf32>
    %z = coda.map %x, %y : (!coda.tile<8x16xf32>, !coda.tile<8x16xf32>) -> !coda.tile<8x16xf32> {
    ^bb0(%u: f32, %v: f32):
      %w = arith.addf %u, %v : f32
      coda.yield %w : f32
    }
    coda.yield %z : !coda.tile<8x16xf32>
  }
  func.return %r : tensor<8x16xf32>
}

// CHECK-LABEL: func.func @read_later
// CHECK-NOT:   coda.writes_over
// CHECK:       func.return
