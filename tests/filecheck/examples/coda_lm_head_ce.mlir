// examples/coda/lm_head_ce.mlir (real shapes) parses, verifies, and round-trips through the pretty
// and the generic printers. CHECK pins the sequence of kernels; GEMMS / FOLDS / KERNELS (all) their number (2 / 2 / 5).

// RUN: coda-opt %S/../../../examples/coda/lm_head_ce.mlir | coda-opt | filecheck %s
// RUN: coda-opt %S/../../../examples/coda/lm_head_ce.mlir --print-op-generic | coda-opt | filecheck %s
// RUN: coda-opt %S/../../../examples/coda/lm_head_ce.mlir --print-op-generic | coda-opt --print-op-generic | filecheck %s --check-prefix=GENERIC
// RUN: coda-opt %S/../../../examples/coda/lm_head_ce.mlir > %t.pretty && coda-opt %t.pretty > %t.pretty2 && diff %t.pretty %t.pretty2
// RUN: coda-opt %S/../../../examples/coda/lm_head_ce.mlir --print-op-generic > %t.generic && coda-opt %t.generic --print-op-generic > %t.generic2 && diff %t.generic %t.generic2
// RUN: coda-opt %t.generic > %t.from_generic && diff %t.pretty %t.from_generic
// RUN: coda-opt %S/../../../examples/coda/lm_head_ce.mlir | grep -c '= coda.gemm ' | filecheck %s --check-prefix=GEMMS
// RUN: coda-opt %S/../../../examples/coda/lm_head_ce.mlir | grep -cE '= coda[.](gemm|elementwise|fold) ' | filecheck %s --check-prefix=KERNELS
// RUN: coda-opt %S/../../../examples/coda/lm_head_ce.mlir | grep -c '= coda.fold ' | filecheck %s --check-prefix=FOLDS

// GEMMS: {{^}}2{{$}}
// KERNELS: {{^}}5{{$}}
// FOLDS: {{^}}2{{$}}

// CHECK-LABEL: func.func @lm_head_ce(
// CHECK:       %h, %ssp = coda.elementwise [8192, 4096] ins(%x, %wn
// CHECK:       %rstd = coda.fold %ssp
// CHECK:       %lsep, %tlp = coda.gemm %h, %wlm transpose_b ins(%rstd, %targets
// CHECK:       %lse, %loss, %count = coda.fold %lsep, %tlp
// CHECK:       %dlogits = coda.gemm %h, %wlm transpose_b ins(%rstd, %lse, %targets, %count, %dloss

// CHECK:       func.return %loss, %dlogits, %h, %rstd, %lse, %count
// GENERIC:     "func.func"
// GENERIC:     "coda.gemm"(
