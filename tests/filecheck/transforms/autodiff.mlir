// RUN: coda-opt %s -p nn-autodiff | filecheck %s
// RUN: coda-opt %s -p 'nn-autodiff{cost-model=false}' | filecheck %s --check-prefix=STORE

// An MLP block: the forward saves the norm's rstd (not the normalized h) and the gated
// pre-activation z, not g: the backward rebuilds h from x and rstd and g from z (the IO model runs
// the SwiGLU backward as a separate pass over z, which the rebuild joins after coda-fuse), runs
// the weight gradients as transposed GEMMs, takes the norm's statistic from z . dz (so its dx
// can ride in the epilogue of dz @ wgu), and sums the residual's two gradients.

func.func @mlp(%x: tensor<64x32xbf16>, %wn: tensor<32xbf16>, %wgu: tensor<128x32xbf16>, %wd: tensor<32x64xbf16>) -> tensor<64x32xbf16> {
  %h = "nn.rms_norm"(%x, %wn) <{eps = 1.0e-06 : f32}> : (tensor<64x32xbf16>, tensor<32xbf16>) -> tensor<64x32xbf16>
  %z = "nn.linear"(%h, %wgu) : (tensor<64x32xbf16>, tensor<128x32xbf16>) -> tensor<64x128xbf16>
  %g = "nn.swiglu"(%z) : (tensor<64x128xbf16>) -> tensor<64x64xbf16>
  %d = "nn.linear"(%g, %wd) : (tensor<64x64xbf16>, tensor<32x64xbf16>) -> tensor<64x32xbf16>
  %y = "nn.add"(%x, %d) : (tensor<64x32xbf16>, tensor<64x32xbf16>) -> tensor<64x32xbf16>
  func.return %y : tensor<64x32xbf16>
}

// CHECK:      func.func @mlp(
// CHECK:      func.func @mlp_fwd(%x: tensor<64x32xbf16>, %wn: tensor<32xbf16>, %wgu: tensor<128x32xbf16>, %wd: tensor<32x64xbf16>) -> (tensor<64x32xbf16>, tensor<64x32xbf16>, tensor<32xbf16>, tensor<128x32xbf16>, tensor<32x64xbf16>, tensor<64xf32>, tensor<64x128xbf16>)
// CHECK:        %h = nn.rms_norm %x, %wn
// CHECK-NEXT:   %rstd_x = nn.rms_norm_rstd %x {eps = 1.000000e-06 : f32} : tensor<64x32xbf16> -> tensor<64xf32>
// CHECK:        func.return %y, %x, %wn, %wgu, %wd, %rstd_x, %z :
// CHECK:      func.func @mlp_bwd(%x: tensor<64x32xbf16>, %wn: tensor<32xbf16>, %wgu: tensor<128x32xbf16>, %wd: tensor<32x64xbf16>, %rstd_x: tensor<64xf32>, %z: tensor<64x128xbf16>, %dy: tensor<64x32xbf16>) -> (tensor<64x32xbf16>, tensor<32xbf16>, tensor<128x32xbf16>, tensor<32x64xbf16>)
// CHECK-NEXT:   %h = nn.rms_norm_apply %x, %wn, %rstd_x
// CHECK-NEXT:   %g = nn.swiglu %z
// CHECK-NEXT:   %[[DG:.*]] = nn.matmul %dy, %wd
// CHECK-NEXT:   %[[DWD:.*]] = nn.gemm %dy, %g {transpose_a = true, transpose_b = false}
// CHECK-NEXT:   %[[DZ:.*]] = nn.swiglu_grad %[[DG]], %z
// CHECK-NEXT:   %[[DH:.*]] = nn.matmul %[[DZ]], %wgu
// CHECK-NEXT:   %[[DWGU:.*]] = nn.gemm %[[DZ]], %h {transpose_a = true, transpose_b = false}
// CHECK-NEXT:   %[[DOT:.*]] = nn.row_dot %z, %[[DZ]] : tensor<64x128xbf16>, tensor<64x128xbf16> -> tensor<64xf32>
// CHECK-NEXT:   %[[DX:.*]], %[[DWN:.*]] = nn.rms_norm_grad %[[DH]], %x, %wn, %rstd_x, %[[DOT]]
// CHECK-NEXT:   %[[SUM:.*]] = nn.add %dy, %[[DX]]
// CHECK-NEXT:   func.return %[[SUM]], %[[DWN]], %[[DWGU]], %[[DWD]]

// STORE:      func.return %y, %x, %wn, %wgu, %wd, %h, %rstd_x, %z, %g :
// STORE:      func.func @mlp_bwd(
// STORE-NOT:  nn.rms_norm_apply
// STORE:      nn.rms_norm_grad

// Cross-entropy saves each row's log-sum-exp (its forward becomes nn.cross_entropy_fwd, whose
// fold computes it anyway) and the backward reads it instead of folding the logits again.
func.func @head(%h: tensor<24x16xbf16>, %w: tensor<40x16xbf16>, %t: tensor<24xi32>) -> tensor<f32> {
  %logits = "nn.linear"(%h, %w) : (tensor<24x16xbf16>, tensor<40x16xbf16>) -> tensor<24x40xbf16>
  %loss = "nn.cross_entropy"(%logits, %t) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<24x40xbf16>, tensor<24xi32>) -> tensor<f32>
  func.return %loss : tensor<f32>
}
// CHECK:      func.func @head_fwd(
// CHECK:        %loss, %lse_logits = nn.cross_entropy_fwd %logits, %t {ignore_index = -100 : i64, reduction = "mean"}
// CHECK:        func.return %loss, %h, %w, %t, %logits, %lse_logits :
// CHECK:      func.func @head_bwd(%h: tensor<24x16xbf16>, %w: tensor<40x16xbf16>, %t: tensor<24xi32>, %logits: tensor<24x40xbf16>, %lse_logits: tensor<24xf32>, %dloss: tensor<f32>)
// CHECK-NEXT:   %0 = nn.cross_entropy_grad %logits, %t, %dloss, %lse_logits
