// RUN: coda-opt %s -p coda-defer-norms | filecheck %s
// RUN: coda-opt %s -p nn-plan | filecheck %s --check-prefix=PLAN

// coda-defer-norms obeys nn-plan's record: an nn.rms_norm marked
// `stats_in_producer_epilogue = false` keeps its own kernel (its GEMMs stay plain), the unmarked
// one has its row scale moved into the consuming GEMM.
func.func @planned(%a: tensor<8x16xf32>, %w0: tensor<32x16xf32>, %g: tensor<32xf32>, %w: tensor<64x32xf32>) -> (tensor<8x64xf32>, tensor<8x64xf32>) {
  %x = "nn.linear"(%a, %w0) : (tensor<8x16xf32>, tensor<32x16xf32>) -> tensor<8x32xf32>
  %h = "nn.rms_norm"(%x, %g) <{eps = 1.0e-06 : f32, stats_in_producer_epilogue = false}> : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %y = "nn.linear"(%h, %w) : (tensor<8x32xf32>, tensor<64x32xf32>) -> tensor<8x64xf32>
  %h2 = "nn.rms_norm"(%x, %g) <{eps = 1.0e-05 : f32}> : (tensor<8x32xf32>, tensor<32xf32>) -> tensor<8x32xf32>
  %y2 = "nn.linear"(%h2, %w) : (tensor<8x32xf32>, tensor<64x32xf32>) -> tensor<8x64xf32>
  func.return %y, %y2 : tensor<8x64xf32>, tensor<8x64xf32>
}
// CHECK-LABEL: func.func @planned
// CHECK:       %h = nn.rms_norm %x, %g {eps = 1.000000e-06 : f32, stats_in_producer_epilogue = false}
// CHECK-NEXT:  %y = nn.linear %h, %w
// CHECK:       coda.fold {{.*}} attributes {coda.origin = "nn.rms_norm.rstd"}
// CHECK:       %y2 = coda.gemm {{.*}} ins(%{{.*}} : tensor<8xf32>)
// CHECK-NOT:   nn.rms_norm

// At this shape the IO model prefers statistics in the producer's epilogue: nn-plan records
// nothing (absent = the default construction) and says nothing.
// PLAN-LABEL: func.func @planned
// PLAN:       %h2 = nn.rms_norm %x, %g {eps = 1.000000e-05 : f32} :
