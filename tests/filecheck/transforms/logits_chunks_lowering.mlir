// RUN: coda-opt %s -p 'nn-autodiff{logits-chunk=16},nn-to-coda' 2>&1 | filecheck %s --check-prefix=CHUNKS
// RUN: coda-opt %s -p nn-autodiff 2>&1 | filecheck %s

// Gemma2's soft-capped logits, 40 classes in chunks of 16 (forced): per chunk a slice of w (a
// view), the GEMM recomputing the logits whose epilogue writes their gradient (soft-cap and
// cross-entropy derivatives, the column offset of the chunk added to the tile's column index),
// dw of the chunk, dh accumulated in f32 (the last chunk rounds it to bf16); dw's pieces
// concatenated.

// Under the default budget (its logits take 2 KiB) the backward reads the stored logits: the
// cap's input z alone, differentiated with the cap in one nn.cross_entropy_grad {softcap}.
// CHECK-LABEL: func.func @capped_fwd
// CHECK:         func.return %loss, %x, %wn, %w, %t, %rstd_x, %z, %lse_c :
// CHECK-LABEL: func.func @capped_bwd
// CHECK-NOT:     nn.linear_cross_entropy_grad
// CHECK-NOT:     nn.softcap_grad
// CHECK:         nn.cross_entropy_grad %z, %t, %dloss, %lse_c {{.*}}softcap = 3.000000e+01 : f32
// CHECK-NOT:     nn.softcap_grad

// CHUNKS-LABEL: func.func @capped_fwd
// CHUNKS-NOT:    tensor<24x40xbf16>
// CHUNKS-LABEL: func.func @capped_bwd
// CHUNKS-NOT:    tensor<24x40xbf16>
// CHUNKS:        %[[W0:.*]] = "coda.slice"(%w) <{axis = 0 : i64, start = 0 : i64}> : (tensor<40x16xbf16>) -> tensor<16x16xbf16>
// CHUNKS:        %[[D0:.*]] = coda.gemm %h, %[[W0]] transpose_b ins(%lse_c, %t, %dloss, {{.*}}) : {{.*}} -> tensor<24x16xbf16> attributes {coda.origin = "nn.linear_cross_entropy_grad.dlogits"}
// CHUNKS:          math.tanh
// CHUNKS:          math.exp
// CHUNKS:        %[[DW0:.*]] = coda.gemm %[[D0]], %h transpose_a : {{.*}} -> tensor<16x16xbf16> attributes {coda.origin = "nn.linear_cross_entropy_grad.dw"
// CHUNKS:        %[[DH0:.*]] = coda.gemm %[[D0]], %[[W0]] : {{.*}} -> tensor<24x16xf32> attributes {coda.origin = "nn.linear_cross_entropy_grad.dh"
// CHUNKS:        %[[W1:.*]] = "coda.slice"(%w) <{axis = 0 : i64, start = 16 : i64}>
// CHUNKS:        coda.gemm %h, %[[W1]] transpose_b
// CHUNKS:          %[[C:.*]] = arith.constant 16 : i32
// CHUNKS:          arith.addi %{{.*}}, %[[C]] : i32
// CHUNKS:        %[[DH1:.*]] = coda.gemm %{{.*}}, %[[W1]] ins(%[[DH0]] : tensor<24x16xf32>) : {{.*}} -> tensor<24x16xf32>
// CHUNKS:          coda.accumulate
// CHUNKS:        "coda.slice"(%w) <{axis = 0 : i64, start = 32 : i64}> : (tensor<40x16xbf16>) -> tensor<8x16xbf16>
// CHUNKS:        coda.gemm {{.*}} ins(%[[DH1]]{{.*}}) : tensor<24x8xbf16>, tensor<8x16xbf16> -> (tensor<24x16xbf16>
// CHUNKS:        "coda.concat"(%[[DW0]], %{{.*}}, %{{.*}}) <{axis = 0 : i64}> : (tensor<16x16xbf16>, tensor<16x16xbf16>, tensor<8x16xbf16>) -> tensor<40x16xbf16>
func.func @capped(%x: tensor<24x16xbf16>, %wn: tensor<16xbf16>, %w: tensor<40x16xbf16>, %t: tensor<24xi32>) -> tensor<f32> {
  %h = nn.rms_norm %x, %wn {eps = 1.0e-05 : f32} : tensor<24x16xbf16>, tensor<16xbf16> -> tensor<24x16xbf16>
  %z = nn.linear %h, %w : tensor<24x16xbf16>, tensor<40x16xbf16> -> tensor<24x40xbf16>
  %c = "nn.softcap"(%z) <{cap = 30.0 : f32}> : (tensor<24x40xbf16>) -> tensor<24x40xbf16>
  %loss = "nn.cross_entropy"(%c, %t) <{ignore_index = -100 : i64, reduction = "mean"}> : (tensor<24x40xbf16>, tensor<24xi32>) -> tensor<f32>
  func.return %loss : tensor<f32>
}
