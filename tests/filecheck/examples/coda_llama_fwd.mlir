// examples/coda/llama_fwd.mlir (real shapes) parses, verifies, and round-trips through the pretty
// and the generic printers. CHECK pins the sequence of kernels; GEMMS / FOLDS / KERNELS (all) their number (4 / 2 / 6).

// RUN: coda-opt %S/../../../examples/coda/llama_fwd.mlir | coda-opt | filecheck %s
// RUN: coda-opt %S/../../../examples/coda/llama_fwd.mlir --print-op-generic | coda-opt | filecheck %s
// RUN: coda-opt %S/../../../examples/coda/llama_fwd.mlir --print-op-generic | coda-opt --print-op-generic | filecheck %s --check-prefix=GENERIC
// RUN: coda-opt %S/../../../examples/coda/llama_fwd.mlir > %t.pretty && coda-opt %t.pretty > %t.pretty2 && diff %t.pretty %t.pretty2
// RUN: coda-opt %S/../../../examples/coda/llama_fwd.mlir --print-op-generic > %t.generic && coda-opt %t.generic --print-op-generic > %t.generic2 && diff %t.generic %t.generic2
// RUN: coda-opt %t.generic > %t.from_generic && diff %t.pretty %t.from_generic
// RUN: coda-opt %S/../../../examples/coda/llama_fwd.mlir | grep -c '= coda.gemm ' | filecheck %s --check-prefix=GEMMS
// RUN: coda-opt %S/../../../examples/coda/llama_fwd.mlir | grep -cE '= coda[.](gemm|elementwise|fold) ' | filecheck %s --check-prefix=KERNELS
// RUN: coda-opt %S/../../../examples/coda/llama_fwd.mlir | grep -c '= coda.fold ' | filecheck %s --check-prefix=FOLDS

// GEMMS: {{^}}4{{$}}
// KERNELS: {{^}}6{{$}}
// FOLDS: {{^}}2{{$}}

// CHECK-LABEL: func.func @llama_fwd(
// CHECK:       %x1, %h1, %ss1 = coda.gemm %y0, %wo transpose_b ins(%x0, %wn0
// CHECK:       %rstd1 = coda.fold %ss1
// CHECK:       %z1, %y1 = coda.gemm %h1, %wgu transpose_b interleave 14336 ins(%rstd1
// CHECK:       %x2, %h2, %ss2 = coda.gemm %y1, %wd transpose_b ins(%x1, %wn1
// CHECK:       %rstd2 = coda.fold %ss2
// CHECK:       %qkv = coda.gemm %h2, %wqkv transpose_b ins(%rstd2, %pos

// CHECK:       func.return %x2, %qkv, %x1, %z1, %rstd1, %rstd2
// GENERIC:     "func.func"
// GENERIC:     "coda.gemm"(
