// Command-line mistakes are one line on stderr (`coda-opt: error: ...`), never a usage dump or
// a traceback, and exit non-zero (1: see test_coda_opt_cli.py).

// RUN: not coda-opt %s -p no-such-pass 2>&1 | filecheck %s --check-prefix=PASS
// PASS:     {{^}}coda-opt: error: unknown pass 'no-such-pass' (available: {{.*}}canonicalize, {{.*}}cse, dce{{.*}})
// PASS-NOT: {{.}}

// RUN: not coda-opt %s -p 'cse,no-such-pass' 2>&1 | filecheck %s --check-prefix=PASS2
// PASS2:     {{^}}coda-opt: error: unknown pass 'no-such-pass' {{.*$}}
// PASS2-NOT: {{.}}

// RUN: not coda-opt %s -p 'cse{' 2>&1 | filecheck %s --check-prefix=PIPELINE
// PIPELINE:     {{^}}coda-opt: error: invalid pass pipeline: Expected argument name here at column 5 of 'cse{'
// PIPELINE-NOT: {{.}}

// RUN: not coda-opt %s -p 'cse{nope=1}' 2>&1 | filecheck %s --check-prefix=OPTION
// OPTION:     {{^}}coda-opt: error: invalid pass pipeline 'cse{nope=1}': {{.*}}"nope"{{.*$}}
// OPTION-NOT: {{.}}

// RUN: not coda-opt %s -t no-such-target 2>&1 | filecheck %s --check-prefix=TARGET
// TARGET:     {{^}}coda-opt: error: argument -t/--target: invalid choice: 'no-such-target' (choose from mlir{{.*}}) (see coda-opt --help)
// TARGET-NOT: {{.}}

// RUN: not coda-opt %s --no-such-flag 2>&1 | filecheck %s --check-prefix=FLAG
// FLAG:     {{^}}coda-opt: error: unrecognized arguments: --no-such-flag (see coda-opt --help)
// FLAG-NOT: {{.}}

// RUN: not coda-opt %s.missing 2>&1 | filecheck %s --check-prefix=MISSING
// MISSING:     {{^}}coda-opt: error: cannot open '{{.*}}cli_errors.mlir.missing': No such file or directory
// MISSING-NOT: {{.}}

// RUN: not coda-opt %S 2>&1 | filecheck %s --check-prefix=DIR
// DIR:     {{^}}coda-opt: error: cannot open '{{.*}}tools': Is a directory
// DIR-NOT: {{.}}

// RUN: not coda-opt %s -o %S/Inputs/no-such-dir/out.mlir 2>&1 | filecheck %s --check-prefix=OUT
// OUT:     {{^}}coda-opt: error: cannot open '{{.*}}no-such-dir/out.mlir': No such file or directory
// OUT-NOT: {{.}}

func.func @ok() {
  func.return
}
