// RUN: coda-opt %s --remarks -p coda-plan-mainloop --split-input-file 2>&1 | filecheck %s
// RUN: coda-opt %s --remarks -p 'coda-plan-mainloop{mainloop=gluon}' --split-input-file 2>&1 | filecheck %s
// RUN: coda-opt %s --remarks -p 'coda-plan-mainloop{mainloop=tl}' --split-input-file 2>&1 | filecheck %s --check-prefix=TL
// coda-plan-mainloop records #coda.vendor_gemm<cublas> on the gemms whose epilogue stores the
// accumulator and nothing else, with 16-bit operands and an output of their type or f32
// (transforms/plan_mainloop.py: the backward's dgrads and weight gradients run cuBLAS on the GPU);
// never with mainloop=tl; never on a gemm with an epilogue, f32 operands, a fixed tile or
// interleaved columns. No remark either way.

// CHECK-NOT: remark
// CHECK-LABEL: func.func @plain
// CHECK:       coda.gemm %a, %b transpose_a : tensor<128x64xbf16>, tensor<128x96xbf16> -> tensor<64x96xbf16> attributes {coda.vendor_gemm = #coda.vendor_gemm<cublas>}
// CHECK:       coda.gemm %a, %b transpose_a : tensor<128x64xbf16>, tensor<128x96xbf16> -> tensor<64x96xf32> attributes {coda.vendor_gemm = #coda.vendor_gemm<cublas>}
// TL-LABEL:    func.func @plain
// TL-NOT:      coda.vendor_gemm =
// TL:          func.return
func.func @plain(%a: tensor<128x64xbf16>, %b: tensor<128x96xbf16>) -> (tensor<64x96xbf16>, tensor<64x96xf32>) {
  %y = coda.gemm %a, %b transpose_a : tensor<128x64xbf16>, tensor<128x96xbf16> -> tensor<64x96xbf16> {
  ^bb0(%acc: !coda.tile<64x96xf32>):
    coda.yield %acc : !coda.tile<64x96xf32>
  }
  %z = coda.gemm %a, %b transpose_a : tensor<128x64xbf16>, tensor<128x96xbf16> -> tensor<64x96xf32> {
  ^bb0(%acc: !coda.tile<64x96xf32>):
    coda.yield %acc : !coda.tile<64x96xf32>
  }
  func.return %y, %z : tensor<64x96xbf16>, tensor<64x96xf32>
}

// -----

// An epilogue (a row scale), f32 operands (the tl kernel's tf32 dots are another precision), a
// fixed tile: the generated mainloop.
// CHECK-LABEL: func.func @not_plain
// CHECK-NOT:   coda.vendor_gemm =
// CHECK:       func.return
func.func @not_plain(%a: tensor<64x128xbf16>, %b: tensor<96x128xbf16>, %s: tensor<64xf32>, %c: tensor<64x128xf32>, %d: tensor<96x128xf32>) -> (tensor<64x96xbf16>, tensor<64x96xf32>, tensor<64x96xbf16>) {
  %y = coda.gemm %a, %b transpose_b ins(%s : tensor<64xf32>) : tensor<64x128xbf16>, tensor<96x128xbf16> -> tensor<64x96xbf16> {
  ^bb0(%acc: !coda.tile<64x96xf32>, %si: tensor<64xf32>):
    %r = coda.broadcast %si rows : tensor<64xf32> -> !coda.tile<64x96xf32>
    %t = coda.map %acc, %r : (!coda.tile<64x96xf32>, !coda.tile<64x96xf32>) -> !coda.tile<64x96xf32> {
    ^bb0(%u: f32, %v: f32):
      %w = arith.mulf %u, %v : f32
      coda.yield %w : f32
    }
    coda.yield %t : !coda.tile<64x96xf32>
  }
  %z = coda.gemm %c, %d transpose_b : tensor<64x128xf32>, tensor<96x128xf32> -> tensor<64x96xf32> {
  ^bb0(%acc: !coda.tile<64x96xf32>):
    coda.yield %acc : !coda.tile<64x96xf32>
  }
  %x = coda.gemm %a, %b transpose_b config #coda.config<bm = 64, bn = 64, bk = 32, warps = 4, stages = 3> : tensor<64x128xbf16>, tensor<96x128xbf16> -> tensor<64x96xbf16> {
  ^bb0(%acc: !coda.tile<64x96xf32>):
    coda.yield %acc : !coda.tile<64x96xf32>
  }
  func.return %y, %z, %x : tensor<64x96xbf16>, tensor<64x96xf32>, tensor<64x96xbf16>
}
