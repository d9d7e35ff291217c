// RUN: CODA_ROUNDTRIP
// RUN: CODA_GENERIC_ROUNDTRIP

// coda.launch_group: independent small kernels sharing one launch; it yields every member's
// results in member order.

func.func @group(%p: !coda.partials<rows, 8, sum>, %w: tensor<32x16xf32>, %g: tensor<16xf32>) -> (tensor<8xf32>, tensor<32xf32>) {
  %r, %c = coda.launch_group -> (tensor<8xf32>, tensor<32xf32>) {
    %r0 = coda.fold %p : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
    ^bb0(%x: f32):
      %q = math.rsqrt %x : f32
      coda.yield %q : f32
    }
    %c0 = coda.elementwise [32, 16] whole rows ins(%w, %g : tensor<32x16xf32>, tensor<16xf32>) -> tensor<32xf32> {
    ^bb0(%wt: tensor<32x16xf32>, %gv: tensor<16xf32>):
      %t = coda.load %wt : tensor<32x16xf32> -> !coda.tile<32x16xf32>
      %tg = coda.scale %t, %gv cols : !coda.tile<32x16xf32>, tensor<16xf32>
      %s = coda.reduce sum %tg dim 1 : !coda.tile<32x16xf32> -> !coda.partials<rows, 32, sum>
      coda.yield %s : !coda.partials<rows, 32, sum>
    }
    coda.yield %r0, %c0 : tensor<8xf32>, tensor<32xf32>
  }
  func.return %r, %c : tensor<8xf32>, tensor<32xf32>
}
// CHECK-LABEL: func.func @group
// CHECK-NEXT:    %r, %c = coda.launch_group -> (tensor<8xf32>, tensor<32xf32>) {
// CHECK-NEXT:      %r0 = coda.fold %p : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
// CHECK:           %c0 = coda.elementwise [32, 16] whole rows ins(%w, %g : tensor<32x16xf32>, tensor<16xf32>) -> tensor<32xf32> {
// CHECK:           coda.yield %r0, %c0 : tensor<8xf32>, tensor<32xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %r, %c : tensor<8xf32>, tensor<32xf32>

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "group"
// CHECK-GENERIC:         %r, %c = "coda.launch_group"() ({
// CHECK-GENERIC:           "coda.yield"(%r0, %c0) : (tensor<8xf32>, tensor<32xf32>) -> ()
// CHECK-GENERIC-NEXT:    }) : () -> (tensor<8xf32>, tensor<32xf32>)
