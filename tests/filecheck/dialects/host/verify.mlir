// RUN: coda-opt %s --split-input-file --verify-diagnostics | filecheck %s
// RUN: not coda-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=EXIT

// Malformed host IR (dialects/triton_host.py): each op's verifier refuses it with a located
// diagnostic; without --verify-diagnostics coda-opt exits non-zero, no traceback.
// EXIT-NOT: Traceback
// EXIT: verify.mlir:{{[0-9]+}}:{{[0-9]+}}: error:

"host.func"() <{function = @f, function_type = (tensor<8x16xf32>) -> (), launches = #builtin.int<1>}> ({
^bb0(%x: tensor<8x16xf32>):
  %dev = "host.device_of"(%x) : (tensor<8x16xf32>) -> !host.device
  %p = "host.empty"(%dev) : (!host.device) -> tensor<8x?xf32>
  "host.return"() : () -> ()
}) : () -> ()
// CHECK: {{.*}}verify.mlir:12:{{[0-9]+}}: error: 'host.empty' op host.empty: 1 dynamic extent(s) in tensor<8x?xf32>, 0 given

// -----

"host.func"() <{function = @f, function_type = (tensor<8x16xf32>, tensor<16x16xf32>) -> (), launches = #builtin.int<1>}> ({
^bb0(%x: tensor<8x16xf32>, %w: tensor<16x16xf32>):
  %dev = "host.device_of"(%x, %w) : (tensor<8x16xf32>, tensor<16x16xf32>) -> !host.device
  %e = "host.launch_gemm"(%x, %w) <{kernel = @k, m = #builtin.int<8>, n = #builtin.int<16>, k = #builtin.int<16>, interleave = #builtin.int<0>, bn_multiple_of = #builtin.int<128>, n_inputs = #builtin.int<0>, epilogue_half_tiles = #builtin.int<2>, config = #coda.config<bm = 64, bn = 64, bk = 32, warps = 4, stages = 3>}> ({
  ^bb0(%cfg: !host.config):
    %t = "host.tiles"(%cfg) <{extent = #builtin.int<16>, field = "bn"}> : (!host.config) -> index
    %p = "host.empty"(%dev, %t) : (!host.device, index) -> tensor<8x?xf32>
    "host.yield"(%p) : (tensor<8x?xf32>) -> ()
  }) : (tensor<8x16xf32>, tensor<16x16xf32>) -> !host.tuple<[tensor<8x?xf32>]>
  "host.return"() : () -> ()
}) : () -> ()
// CHECK: {{.*}}verify.mlir:22:{{[0-9]+}}: error: 'host.launch_gemm' op host.launch_gemm: tile config bn = 64 must be a multiple of 128 for this epilogue

// -----

"host.func"() <{function = @f, function_type = (tensor<8x16xf32>, tensor<16x16xf32>) -> (), launches = #builtin.int<1>}> ({
^bb0(%x: tensor<8x16xf32>, %w: tensor<16x16xf32>):
  %dev = "host.device_of"(%x, %w) : (tensor<8x16xf32>, tensor<16x16xf32>) -> !host.device
  %e = "host.launch_gemm"(%x, %w) <{kernel = @k, m = #builtin.int<8>, n = #builtin.int<16>, k = #builtin.int<16>, interleave = #builtin.int<0>, bn_multiple_of = #builtin.int<1>, n_inputs = #builtin.int<0>, epilogue_half_tiles = #builtin.int<2>}> ({
  ^bb0(%cfg: !host.config):
    %t = "host.tiles"(%cfg) <{extent = #builtin.int<16>, field = "bk"}> : (!host.config) -> index
    %p = "host.empty"(%dev, %t) : (!host.device, index) -> tensor<8x?xf32>
    "host.yield"(%p) : (tensor<8x?xf32>) -> ()
  }) : (tensor<8x16xf32>, tensor<16x16xf32>) -> !host.tuple<[tensor<8x16xf32>]>
  "host.return"() : () -> ()
}) : () -> ()
// CHECK: {{.*}}verify.mlir:39:{{[0-9]+}}: error: 'host.tiles' op host.tiles: field must be one of ('bm', 'bn'), got 'bk'

// -----

"host.func"() <{function = @f, function_type = (tensor<8x16xf32>) -> (tensor<8x16xf32>), launches = #builtin.int<1>}> ({
^bb0(%x: tensor<8x16xf32>):
  %dev = "host.device_of"(%x) : (tensor<8x16xf32>) -> !host.device
  %o = "host.empty"(%dev) : (!host.device) -> tensor<8xf32>
  %e = "host.launch_fold"(%o) <{kernel = @k, length = #builtin.int<8>, sums = true, operandSegmentSizes = array<i32: 0, 0, 1>}> : (tensor<8xf32>) -> !host.tuple<[tensor<8xf32>]>
  %r = "host.unpack"(%e) <{start = #builtin.int<0>}> : (!host.tuple<[tensor<8xf32>]>) -> tensor<8x16xf32>
  "host.return"(%r) : (tensor<8x16xf32>) -> ()
}) : () -> ()
// CHECK: {{.*}}verify.mlir:53:{{[0-9]+}}: error: 'host.launch_fold' op host.launch_fold: sums is whether an output is rank 0 (False)
// CHECK: {{.*}}verify.mlir:54:{{[0-9]+}}: error: 'host.unpack' op host.unpack: the results are the tuple's elements from start

// -----

"host.func"() <{function = @f, function_type = (tensor<8xf32>) -> (tensor<8xf32>), launches = #builtin.int<1>}> ({
^bb0(%x: tensor<8xf32>):
  %dev = "host.device_of"(%x) : (tensor<8xf32>) -> !host.device
  %o = "host.empty"(%dev) : (!host.device) -> tensor<8xf32>
  %g = "host.fold_spec"(%o) <{length = #builtin.int<8>, sums = false, operandSegmentSizes = array<i32: 0, 0, 1>}> : (tensor<8xf32>) -> !host.launch_spec<[tensor<8xf32>]>
  %r = "host.results"(%g) : (!host.launch_spec<[tensor<8xf32>]>) -> tensor<8xf32>
  "host.return"(%r) : (tensor<8xf32>) -> ()
}) : () -> ()
// CHECK: {{.*}}verify.mlir:67:{{[0-9]+}}: error: 'host.results' op host.results: the spec is never launched (no host.launch_group uses it)

// -----

"host.func"() <{function = @f, function_type = (tensor<8xf32>, tensor<8xf32>) -> (tensor<8xf32>), launches = #builtin.int<1>}> ({
^bb0(%x: tensor<8xf32>, %y: tensor<8xf32>):
  "host.check_arguments"(%y, %x) : (tensor<8xf32>, tensor<8xf32>) -> ()
  %r = "host.library_call"(%x, %y) <{callee = "matmul", literals = [#builtin.int<0>]}> : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %s = "host.library_call"(%x) <{callee = "slice_copy", literals = ["zero"]}> : (tensor<8xf32>) -> tensor<8xf32>
  "host.return"(%r) : (tensor<8xf32>) -> ()
}) : () -> ()
// CHECK: {{.*}}verify.mlir:76:{{[0-9]+}}: error: 'host.check_arguments' op host.check_arguments: checks exactly the host.func's arguments, in order
// CHECK: {{.*}}verify.mlir:77:{{[0-9]+}}: error: 'host.library_call' op host.library_call: unknown library function 'matmul'
// CHECK: {{.*}}verify.mlir:78:{{[0-9]+}}: error: 'host.library_call' op host.library_call: a literal is an integer, a boolean, a finite f64 or a torch dtype, got "zero"

// -----

"host.func"() <{function = @f, function_type = (tensor<8xf32>) -> (tensor<4xf32>), launches = #builtin.int<0>}> ({
^bb0(%x: tensor<8xf32>):
  "host.return"(%x) : (tensor<8xf32>) -> ()
}) : () -> ()
// CHECK: {{.*}}verify.mlir:87:{{[0-9]+}}: error: 'host.func' op host.func: host.return's types must match function_type's outputs

// -----

"host.func"() <{function = @f, function_type = (tensor<8xf32>) -> (tensor<8xf32>), launches = #builtin.int<1>}> ({
^bb0(%x: tensor<8xf32>):
  %dev = "host.device_of"(%x) : (tensor<8xf32>) -> !host.device
  %o = "host.empty"(%dev) : (!host.device) -> tensor<8xf32>
  %e = "host.launch_fold"(%o) <{kernel = @k, length = #builtin.int<8>, sums = false, operandSegmentSizes = array<i32: 0, 0, 1>}> : (tensor<8xf32>) -> !host.tuple<[tensor<8xf32>]>
  %r = "host.unpack"(%e) <{start = #builtin.int<0>}> : (!host.tuple<[tensor<8xf32>]>) -> tensor<8xf32>
  "host.drop"(%e, %r) : (!host.tuple<[tensor<8xf32>]>, tensor<8xf32>) -> ()
  "host.drop"(%x) : (tensor<8xf32>) -> ()
  "host.return"(%r) : (tensor<8xf32>) -> ()
}) : () -> ()
// CHECK: {{.*}}verify.mlir:[[# @LINE - 4]]:{{[0-9]+}}: error: 'host.drop' op host.drop: a dropped value is read later (by host.return)
// CHECK: {{.*}}verify.mlir:[[# @LINE - 4]]:{{[0-9]+}}: error: 'host.drop' op host.drop: drops an argument the caller did not hand over (not owned)

// -----

"host.func"() <{function = @f, function_type = (tensor<8x16xf32>, tensor<16x16xf32>) -> (), launches = #builtin.int<1>}> ({
^bb0(%x: tensor<8x16xf32>, %w: tensor<16x16xf32>):
  %dev = "host.device_of"(%x, %w) : (tensor<8x16xf32>, tensor<16x16xf32>) -> !host.device
  %e = "host.launch_gemm"(%x, %w) <{kernel = @k, m = #builtin.int<8>, n = #builtin.int<16>, k = #builtin.int<16>, interleave = #builtin.int<0>, bn_multiple_of = #builtin.int<1>, n_inputs = #builtin.int<0>, epilogue_half_tiles = #builtin.int<-1>}> ({
  ^bb0(%cfg: !host.config):
    %y = "host.empty"(%dev) : (!host.device) -> tensor<8x16xf32>
    "host.yield"(%y) : (tensor<8x16xf32>) -> ()
  }) : (tensor<8x16xf32>, tensor<16x16xf32>) -> !host.tuple<[tensor<8x16xf32>]>
  "host.return"() : () -> ()
}) : () -> ()
// CHECK: {{.*}}verify.mlir:[[# @LINE - 7]]:{{[0-9]+}}: error: 'host.launch_gemm' op host.launch_gemm: epilogue_half_tiles must be >= 0

// -----

"host.func"() <{function = @f, function_type = (tensor<8x16xbf16>, tensor<16x16xbf16>, tensor<8xf32>) -> (), launches = #builtin.int<1>}> ({
^bb0(%x: tensor<8x16xbf16>, %w: tensor<16x16xbf16>, %s: tensor<8xf32>):
  %dev = "host.device_of"(%x, %w) : (tensor<8x16xbf16>, tensor<16x16xbf16>) -> !host.device
  %e = "host.launch_gemm"(%x, %w) <{kernel = @k, m = #builtin.int<8>, n = #builtin.int<16>, k = #builtin.int<16>, interleave = #builtin.int<0>, bn_multiple_of = #builtin.int<1>, n_inputs = #builtin.int<1>, epilogue_half_tiles = #builtin.int<2>, vendor = #coda.vendor_gemm<cublas>}> ({
  ^bb0(%cfg: !host.config):
    %y = "host.empty"(%dev) : (!host.device) -> tensor<8x16xbf16>
    "host.yield"(%s, %y) : (tensor<8xf32>, tensor<8x16xbf16>) -> ()
  }) : (tensor<8x16xbf16>, tensor<16x16xbf16>) -> !host.tuple<[tensor<8xf32>, tensor<8x16xbf16>]>
  "host.return"() : () -> ()
}) : () -> ()
// CHECK: {{.*}}verify.mlir:[[# @LINE - 7]]:{{[0-9]+}}: error: 'host.launch_gemm' op host.launch_gemm: a vendor gemm's arguments are its one output

// -----

"host.func"() <{function = @f, function_type = (tensor<8x16xbf16>, tensor<16x16xbf16>) -> (), launches = #builtin.int<1>}> ({
^bb0(%x: tensor<8x16xbf16>, %w: tensor<16x16xbf16>):
  %dev = "host.device_of"(%x, %w) : (tensor<8x16xbf16>, tensor<16x16xbf16>) -> !host.device
  %e = "host.launch_gemm"(%x, %w) <{kernel = @k, m = #builtin.int<8>, n = #builtin.int<16>, k = #builtin.int<16>, interleave = #builtin.int<0>, bn_multiple_of = #builtin.int<1>, n_inputs = #builtin.int<0>, epilogue_half_tiles = #builtin.int<2>, vendor = #coda.vendor_gemm<cublas>}> ({
  ^bb0(%cfg: !host.config):
    %y = "host.empty"(%dev) : (!host.device) -> tensor<8x16xf16>
    "host.yield"(%y) : (tensor<8x16xf16>) -> ()
  }) : (tensor<8x16xbf16>, tensor<16x16xbf16>) -> !host.tuple<[tensor<8x16xf16>]>
  "host.return"() : () -> ()
}) : () -> ()
// CHECK: {{.*}}verify.mlir:[[# @LINE - 7]]:{{[0-9]+}}: error: 'host.launch_gemm' op host.launch_gemm: a vendor gemm's output is of its operands' element type or f32
