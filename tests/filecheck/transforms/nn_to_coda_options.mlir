// RUN: coda-opt %s --remarks -p 'nn-to-coda{fuse=false}' 2>&1 | filecheck %s --check-prefix=NOFUSE
// RUN: coda-opt %s --remarks -p 'nn-to-coda{interleave=false}' 2>&1 | filecheck %s --check-prefix=NOIL
// RUN: coda-opt %s --remarks -p 'nn-to-coda{defer-norms=false}' 2>&1 | filecheck %s --check-prefix=NODEFER
// RUN: coda-opt %s --remarks -p convert-nn-to-coda,coda-fuse,coda-interleave,coda-legalize 2>&1 | filecheck %s --check-prefix=NODEFER

// Every stage can be switched off; the program stays correct, only less fused.
func.func @mlp(%a: tensor<8x32xf32>, %w0: tensor<64x32xf32>, %g: tensor<64xf32>, %wgu: tensor<1024x64xf32>) -> tensor<8x512xf32> {
  %x = "nn.linear"(%a, %w0) : (tensor<8x32xf32>, tensor<64x32xf32>) -> tensor<8x64xf32>
  %h = "nn.rms_norm"(%x, %g) <{eps = 1.0e-06 : f32}> : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %z = "nn.linear"(%h, %wgu) : (tensor<8x64xf32>, tensor<1024x64xf32>) -> tensor<8x1024xf32>
  %s = "nn.swiglu"(%z) : (tensor<8x1024xf32>) -> tensor<8x512xf32>
  func.return %s : tensor<8x512xf32>
}

// NOFUSE-LABEL: func.func @mlp
// NOFUSE:       coda.gemm %a, %w0
// NOFUSE:       coda.elementwise {{.*}}"nn.rms_norm.stats"
// NOFUSE:       coda.fold
// NOFUSE:       coda.elementwise {{.*}}"nn.rms_norm.prescale"
// NOFUSE:       coda.gemm {{.*}} %wgu transpose_b ins(
// NOFUSE-NOT:   interleave
// NOFUSE:       coda.elementwise [8, 512] {{.*}}"nn.swiglu"

// Without interleaving, the gate/up pair (j, j + 512) fits no gemm tile: the SwiGLU stays apart.
// NOIL: remark: 'coda.pair_map' op not fused into the epilogue of 'nn.linear'
// NOIL-LABEL: func.func @mlp
// NOIL:       coda.gemm %a, %w0
// NOIL:       coda.fold
// NOIL:       coda.gemm {{.*}} %wgu transpose_b ins(
// NOIL:       coda.elementwise [8, 512] {{.*}}"nn.swiglu"

// Without deferral, the norm is a row kernel between the two gemms; it absorbs nothing else.
// NODEFER-LABEL: func.func @mlp
// NODEFER:       coda.gemm %a, %w0 {{.*}}"nn.linear+nn.rms_norm.row"
// NODEFER:         coda.segment_reduce sumsq %{{.*}} width 64
// NODEFER:       coda.gemm {{.*}} %wgu transpose_b interleave 512
// NODEFER-NOT:   coda.elementwise
