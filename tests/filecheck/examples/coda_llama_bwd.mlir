// examples/coda/llama_bwd.mlir (real shapes) parses, verifies, and round-trips through the pretty
// and the generic printers. CHECK pins the sequence of kernels; GEMMS / FOLDS / KERNELS (all) their number (8 / 4 / 13).

// RUN: coda-opt %S/../../../examples/coda/llama_bwd.mlir | coda-opt | filecheck %s
// RUN: coda-opt %S/../../../examples/coda/llama_bwd.mlir --print-op-generic | coda-opt | filecheck %s
// RUN: coda-opt %S/../../../examples/coda/llama_bwd.mlir --print-op-generic | coda-opt --print-op-generic | filecheck %s --check-prefix=GENERIC
// RUN: coda-opt %S/../../../examples/coda/llama_bwd.mlir > %t.pretty && coda-opt %t.pretty > %t.pretty2 && diff %t.pretty %t.pretty2
// RUN: coda-opt %S/../../../examples/coda/llama_bwd.mlir --print-op-generic > %t.generic && coda-opt %t.generic --print-op-generic > %t.generic2 && diff %t.generic %t.generic2
// RUN: coda-opt %t.generic > %t.from_generic && diff %t.pretty %t.from_generic
// RUN: coda-opt %S/../../../examples/coda/llama_bwd.mlir | grep -c '= coda.gemm ' | filecheck %s --check-prefix=GEMMS
// RUN: coda-opt %S/../../../examples/coda/llama_bwd.mlir | grep -cE '= coda[.](gemm|elementwise|fold) ' | filecheck %s --check-prefix=KERNELS
// RUN: coda-opt %S/../../../examples/coda/llama_bwd.mlir | grep -c '= coda.fold ' | filecheck %s --check-prefix=FOLDS

// GEMMS: {{^}}8{{$}}
// KERNELS: {{^}}13{{$}}
// FOLDS: {{^}}4{{$}}

// CHECK-LABEL: func.func @llama_bwd(
// CHECK:       %dz2, %zp2 = coda.elementwise [8192, 6144] ins(%qkv, %dqkv, %pos
// CHECK:       %zdz2 = coda.fold %zp2
// CHECK:       %dxa, %xo2, %dgp1 = coda.gemm %dz2, %wqkv ins(%x2, %rstd2, %zdz2, %wn1, %dx2
// CHECK:       %dwn1 = coda.fold %dgp1
// CHECK:       %dwqkv = coda.gemm %dz2, %xo2 transpose_a
// CHECK:       %dz1, %y1, %zp1 = coda.gemm %dxa, %wd interleave_wide 14336 ins(%z1
// CHECK:       %zdz1 = coda.fold %zp1
// CHECK:       %dwd = coda.gemm %dxa, %y1 transpose_a
// CHECK:       %dx0, %xo1, %dgp0 = coda.gemm %dz1, %wgu ins(%x1, %rstd1, %zdz1, %wn0, %dxa
// CHECK:       %dwn0 = coda.fold %dgp0
// CHECK:       %dwgu = coda.gemm %dz1, %xo1 transpose_a
// CHECK:       %dy0 = coda.gemm %dx0, %wo
// CHECK:       %dwo = coda.gemm %dx0, %y0 transpose_a

// CHECK:       func.return %dx0, %dy0, %dwo, %dwgu, %dwd, %dwqkv, %dwn0, %dwn1
// GENERIC:     "func.func"
// GENERIC:     "coda.gemm"(
