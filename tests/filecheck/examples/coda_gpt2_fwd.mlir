// examples/coda/gpt2_fwd.mlir (real shapes) parses, verifies, and round-trips through the pretty
// and the generic printers. CHECK pins the sequence of kernels; GEMMS / FOLDS / KERNELS (all) their number (4 / 2 / 6).

// RUN: coda-opt %S/../../../examples/coda/gpt2_fwd.mlir | coda-opt | filecheck %s
// RUN: coda-opt %S/../../../examples/coda/gpt2_fwd.mlir --print-op-generic | coda-opt | filecheck %s
// RUN: coda-opt %S/../../../examples/coda/gpt2_fwd.mlir --print-op-generic | coda-opt --print-op-generic | filecheck %s --check-prefix=GENERIC
// RUN: coda-opt %S/../../../examples/coda/gpt2_fwd.mlir > %t.pretty && coda-opt %t.pretty > %t.pretty2 && diff %t.pretty %t.pretty2
// RUN: coda-opt %S/../../../examples/coda/gpt2_fwd.mlir --print-op-generic > %t.generic && coda-opt %t.generic --print-op-generic > %t.generic2 && diff %t.generic %t.generic2
// RUN: coda-opt %t.generic > %t.from_generic && diff %t.pretty %t.from_generic
// RUN: coda-opt %S/../../../examples/coda/gpt2_fwd.mlir | grep -c '= coda.gemm ' | filecheck %s --check-prefix=GEMMS
// RUN: coda-opt %S/../../../examples/coda/gpt2_fwd.mlir | grep -cE '= coda[.](gemm|elementwise|fold) ' | filecheck %s --check-prefix=KERNELS
// RUN: coda-opt %S/../../../examples/coda/gpt2_fwd.mlir | grep -c '= coda.fold ' | filecheck %s --check-prefix=FOLDS

// GEMMS: {{^}}4{{$}}
// KERNELS: {{^}}6{{$}}
// FOLDS: {{^}}2{{$}}

// CHECK-LABEL: func.func @gpt2_fwd(
// CHECK:       %x1, %h1, %s1, %ss1 = coda.gemm %y0, %wo transpose_b ins(%x0, %bo, %g1
// CHECK:       %r1, %rmu1 = coda.fold %s1, %ss1
// CHECK:       %u, %a = coda.gemm %h1, %wfc transpose_b ins(%r1, %rmu1, %c1, %e1, %bfc
// CHECK:       %x2, %h2, %s2, %ss2 = coda.gemm %a, %wproj transpose_b ins(%x1, %bproj, %g2
// CHECK:       %r2, %rmu2 = coda.fold %s2, %ss2
// CHECK:       %qkv = coda.gemm %h2, %wqkv transpose_b ins(%r2, %rmu2, %c2, %e2, %bqkv

// CHECK:       func.return %x2, %qkv, %x1, %u, %r1, %rmu1, %r2, %rmu2
// GENERIC:     "func.func"
// GENERIC:     "coda.gemm"(
