// RUN: coda-opt --help | filecheck %s --check-prefix=HELP
// RUN: coda-opt --version | filecheck %s --check-prefix=VERSION
// RUN: coda-opt -v | filecheck %s --check-prefix=VERSION

// HELP:      usage: coda-opt
// HELP:      coda-opt: parse, verify, transform and lower coda-ir programs.
// HELP:      Passes (-p, comma separated
// HELP:        canonicalize  {{ +}}Applies all canonicalization patterns.
// HELP:        coda-to-triton  {{ +}}Lower coda kernels to the `tl` kernels and `host` functions
// HELP:        options: epilogue-subtile=0 half-tile-io=true
// HELP:        coda-widen-summed-stores  Store in f32 the kernel outputs
// HELP:        nn-to-coda  {{ +}}The whole pipeline from nn to coda kernels
// HELP:        options: defer-norms=true fuse=true
// HELP:      Targets (-t
// HELP:        mlir
// HELP:        triton  {{ +}}`coda-opt FILE -t triton`: print the `tl` / `host` IR of
// HELP-NOT:    options:
// HELP:      Examples:
// HELP:      -t TARGET, --target TARGET
// HELP-NEXT: output target, options in braces (the targets are
// HELP:      -p PASSES, --passes PASSES
// HELP-NEXT: comma-separated pass pipeline, options in braces (the
// HELP:      --verify-diagnostics
// HELP:      --split-input-file
// HELP:      --print-op-generic
// HELP:      --remarks
// HELP:      --debug-traceback

// VERSION:     {{^}}coda-opt (coda-ir {{[0-9]+\.[0-9]+\.[0-9]+}}, xdsl 0.74.0)
// VERSION-NOT: {{.}}
