// RUN: coda-opt --help | filecheck %s --check-prefix=HELP
// RUN: coda-opt --version | filecheck %s --check-prefix=VERSION
// RUN: coda-opt -v | filecheck %s --check-prefix=VERSION

// HELP:      usage: coda-opt
// HELP:      coda-opt: parse, verify, transform and lower coda-ir programs.
// HELP:      Passes (-p, comma separated
// HELP:        canonicalize
// HELP:        nn-to-coda
// HELP:      Targets (-t
// HELP:        mlir
// HELP:        triton
// HELP:      -t TARGET, --target TARGET
// HELP-NEXT: Target to use for output. Available targets are:
// HELP-NEXT: mlir
// HELP:      -p PASSES, --passes PASSES
// HELP-NEXT: Delimited list of passes. Available passes are:
// HELP:      canonicalize
// HELP:      --verify-diagnostics
// HELP:      --split-input-file
// HELP:      --print-op-generic
// HELP:      --debug-traceback

// VERSION:     {{^}}coda-opt (coda-ir {{[0-9]+\.[0-9]+\.[0-9]+}}, xdsl 0.74.0)
// VERSION-NOT: {{.}}
