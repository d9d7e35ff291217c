// RUN: CODA_ROUNDTRIP
// RUN: CODA_GENERIC_ROUNDTRIP
// RUN: coda-opt %s --split-input-file --print-op-generic | coda-opt --split-input-file | filecheck %s

// Every host op in its custom syntax (dialects/triton_host.py, formats from dialects/op_syntax.py):
// the host functions convert-coda-to-host builds for tests/filecheck/transforms/convert_coda_to_host.mlir.
// CHECK pins the custom form after custom -> custom and generic -> custom round trips,
// CHECK-GENERIC the generic form after a generic -> generic one.

host.func @norm(%x: tensor<37x48xbf16>, %w: tensor<80x48xbf16>, %g: tensor<80xf32>) -> (tensor<37x80xbf16>, tensor<37xf32>) launches 2 {
  host.check_arguments %x, %w, %g : tensor<37x48xbf16>, tensor<80x48xbf16>, tensor<80xf32>
  %0 = host.device_of %x, %w, %g : tensor<37x48xbf16>, tensor<80x48xbf16>, tensor<80xf32> -> !host.device
  %g_1 = host.contiguous %g : tensor<80xf32> -> tensor<80xf32>
  host.comment "_norm_k0_gemm: coda.gemm 37x80x48"
  %1 = host.launch_gemm @_norm_k0_gemm %x, %w m 37 n 80 k 48 transpose_b interleave 0 bn_multiple_of 1 n_inputs 1 epilogue_half_tiles 2 config #coda.config<bm = 64, bn = 64, bk = 32, warps = 4, stages = 3> : tensor<37x48xbf16>, tensor<80x48xbf16> -> !host.tuple<[tensor<80xf32>, tensor<37x80xbf16>, tensor<37x?xf32>]> {
  ^bb0(%2: !host.config):
    %3 = host.empty %0 : !host.device -> tensor<37x80xbf16>
    %4 = host.tiles %2 field bn extent 80 : !host.config -> index
    %5 = host.empty %0 [%4] : !host.device, index -> tensor<37x?xf32>
    host.yield %g_1, %3, %5 : tensor<80xf32>, tensor<37x80xbf16>, tensor<37x?xf32>
  }
  %y, %p = host.unpack %1 start 1 : !host.tuple<[tensor<80xf32>, tensor<37x80xbf16>, tensor<37x?xf32>]> -> (tensor<37x80xbf16>, tensor<37x?xf32>)
  host.drop %1 : !host.tuple<[tensor<80xf32>, tensor<37x80xbf16>, tensor<37x?xf32>]>
  host.comment "_norm_k1_fold: coda.fold over 37 rows"
  %6 = host.empty %0 : !host.device -> tensor<37xf32>
  %7 = host.launch_fold @_norm_k1_fold partials(%p) inputs() outputs(%6) length 37 sums false : tensor<37x?xf32>, tensor<37xf32> -> !host.tuple<[tensor<37xf32>]>
  %r = host.unpack %7 start 0 : !host.tuple<[tensor<37xf32>]> -> tensor<37xf32>
  host.drop %7, %p : !host.tuple<[tensor<37xf32>]>, tensor<37x?xf32>
  host.return %y, %r : tensor<37x80xbf16>, tensor<37xf32>
}

// CHECK-LABEL: host.func @norm(%x: tensor<37x48xbf16>, %w: tensor<80x48xbf16>, %g: tensor<80xf32>) -> (tensor<37x80xbf16>, tensor<37xf32>) launches 2 {
// CHECK-NEXT:    host.check_arguments %x, %w, %g : tensor<37x48xbf16>, tensor<80x48xbf16>, tensor<80xf32>
// CHECK-NEXT:    %0 = host.device_of %x, %w, %g : tensor<37x48xbf16>, tensor<80x48xbf16>, tensor<80xf32> -> !host.device
// CHECK-NEXT:    %g_1 = host.contiguous %g : tensor<80xf32> -> tensor<80xf32>
// CHECK-NEXT:    host.comment "_norm_k0_gemm: coda.gemm 37x80x48"
// CHECK-NEXT:    %1 = host.launch_gemm @_norm_k0_gemm %x, %w m 37 n 80 k 48 transpose_b interleave 0 bn_multiple_of 1 n_inputs 1 epilogue_half_tiles 2 config #coda.config<bm = 64, bn = 64, bk = 32, warps = 4, stages = 3> : tensor<37x48xbf16>, tensor<80x48xbf16> -> !host.tuple<[tensor<80xf32>, tensor<37x80xbf16>, tensor<37x?xf32>]> {
// CHECK-NEXT:    ^bb0(%2: !host.config):
// CHECK-NEXT:      %3 = host.empty %0 : !host.device -> tensor<37x80xbf16>
// CHECK-NEXT:      %4 = host.tiles %2 field bn extent 80 : !host.config -> index
// CHECK-NEXT:      %5 = host.empty %0 [%4] : !host.device, index -> tensor<37x?xf32>
// CHECK-NEXT:      host.yield %g_1, %3, %5 : tensor<80xf32>, tensor<37x80xbf16>, tensor<37x?xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %y, %p = host.unpack %1 start 1 : !host.tuple<[tensor<80xf32>, tensor<37x80xbf16>, tensor<37x?xf32>]> -> (tensor<37x80xbf16>, tensor<37x?xf32>)
// CHECK-NEXT:    host.drop %1 : !host.tuple<[tensor<80xf32>, tensor<37x80xbf16>, tensor<37x?xf32>]>
// CHECK-NEXT:    host.comment "_norm_k1_fold: coda.fold over 37 rows"
// CHECK-NEXT:    %6 = host.empty %0 : !host.device -> tensor<37xf32>
// CHECK-NEXT:    %7 = host.launch_fold @_norm_k1_fold partials(%p) inputs() outputs(%6) length 37 sums false : tensor<37x?xf32>, tensor<37xf32> -> !host.tuple<[tensor<37xf32>]>
// CHECK-NEXT:    %r = host.unpack %7 start 0 : !host.tuple<[tensor<37xf32>]> -> tensor<37xf32>
// CHECK-NEXT:    host.drop %7, %p : !host.tuple<[tensor<37xf32>]>, tensor<37x?xf32>
// CHECK-NEXT:    host.return %y, %r : tensor<37x80xbf16>, tensor<37xf32>
// CHECK-NEXT:  }

// CHECK-GENERIC: "host.func"() <{function = @norm, function_type = (tensor<37x48xbf16>, tensor<80x48xbf16>, tensor<80xf32>) -> (tensor<37x80xbf16>, tensor<37xf32>), launches = #builtin.int<2>}> ({
// CHECK-GENERIC: "host.check_arguments"(%x, %w, %g) : (tensor<37x48xbf16>, tensor<80x48xbf16>, tensor<80xf32>) -> ()
// CHECK-GENERIC: %0 = "host.device_of"(%x, %w, %g) : (tensor<37x48xbf16>, tensor<80x48xbf16>, tensor<80xf32>) -> !host.device
// CHECK-GENERIC: %g_1 = "host.contiguous"(%g) : (tensor<80xf32>) -> tensor<80xf32>

// -----

host.func @group(%a: tensor<8x16xf32>, %w: tensor<32x16xf32>, %g: tensor<16xf32>) -> (tensor<8xf32>, tensor<32xf32>) launches 2 {
  host.check_arguments %a, %w, %g : tensor<8x16xf32>, tensor<32x16xf32>, tensor<16xf32>
  %0 = host.device_of %a, %w, %g : tensor<8x16xf32>, tensor<32x16xf32>, tensor<16xf32> -> !host.device
  %w_1 = host.contiguous %w : tensor<32x16xf32> -> tensor<32x16xf32>
  %g_1 = host.contiguous %g : tensor<16xf32> -> tensor<16xf32>
  host.comment "_group_k0_gemm: coda.gemm 8x32x16"
  %1 = host.launch_gemm @_group_k0_gemm %a, %w_1 m 8 n 32 k 16 transpose_b interleave 0 bn_multiple_of 1 n_inputs 0 epilogue_half_tiles 0 : tensor<8x16xf32>, tensor<32x16xf32> -> !host.tuple<[tensor<8x?xf32>]> {
  ^bb0(%2: !host.config):
    %3 = host.tiles %2 field bn extent 32 : !host.config -> index
    %4 = host.empty %0 [%3] : !host.device, index -> tensor<8x?xf32>
    host.yield %4 : tensor<8x?xf32>
  }
  %p = host.unpack %1 start 0 : !host.tuple<[tensor<8x?xf32>]> -> tensor<8x?xf32>
  host.drop %1 : !host.tuple<[tensor<8x?xf32>]>
  host.comment "_group_g0_launch_group: coda.launch_group, one launch of 2 kernels"
  host.comment "  _group_k1_fold: coda.fold over 8 rows"
  %5 = host.empty %0 : !host.device -> tensor<8xf32>
  %_g = host.fold_spec partials(%p) inputs() outputs(%5) length 8 sums false : tensor<8x?xf32>, tensor<8xf32> -> !host.launch_spec<[tensor<8xf32>]>
  host.comment "  _group_k2_elementwise: coda.elementwise 32x16 whole rows"
  %_g_1 = host.elementwise_spec m 32 n 16 whole rows bn_multiple_of 1 n_inputs 2 -> !host.launch_spec<[tensor<32xf32>]> {
  ^bb0(%6: !host.config):
    %7 = host.empty %0 : !host.device -> tensor<32xf32>
    host.yield %w_1, %g_1, %7 : tensor<32x16xf32>, tensor<16xf32>, tensor<32xf32>
  }
  host.launch_group @_group_g0_launch_group %_g, %_g_1 : !host.launch_spec<[tensor<8xf32>]>, !host.launch_spec<[tensor<32xf32>]>
  %r = host.results %_g : !host.launch_spec<[tensor<8xf32>]> -> tensor<8xf32>
  %c = host.results %_g_1 : !host.launch_spec<[tensor<32xf32>]> -> tensor<32xf32>
  host.drop %_g, %_g_1, %p : !host.launch_spec<[tensor<8xf32>]>, !host.launch_spec<[tensor<32xf32>]>, tensor<8x?xf32>
  host.return %r, %c : tensor<8xf32>, tensor<32xf32>
}

// CHECK-LABEL: host.func @group(%a: tensor<8x16xf32>, %w: tensor<32x16xf32>, %g: tensor<16xf32>) -> (tensor<8xf32>, tensor<32xf32>) launches 2 {
// CHECK-NEXT:    host.check_arguments %a, %w, %g : tensor<8x16xf32>, tensor<32x16xf32>, tensor<16xf32>
// CHECK-NEXT:    %0 = host.device_of %a, %w, %g : tensor<8x16xf32>, tensor<32x16xf32>, tensor<16xf32> -> !host.device
// CHECK-NEXT:    %w_1 = host.contiguous %w : tensor<32x16xf32> -> tensor<32x16xf32>
// CHECK-NEXT:    %g_1 = host.contiguous %g : tensor<16xf32> -> tensor<16xf32>
// CHECK-NEXT:    host.comment "_group_k0_gemm: coda.gemm 8x32x16"
// CHECK-NEXT:    %1 = host.launch_gemm @_group_k0_gemm %a, %w_1 m 8 n 32 k 16 transpose_b interleave 0 bn_multiple_of 1 n_inputs 0 epilogue_half_tiles 0 : tensor<8x16xf32>, tensor<32x16xf32> -> !host.tuple<[tensor<8x?xf32>]> {
// CHECK-NEXT:    ^bb0(%2: !host.config):
// CHECK-NEXT:      %3 = host.tiles %2 field bn extent 32 : !host.config -> index
// CHECK-NEXT:      %4 = host.empty %0 [%3] : !host.device, index -> tensor<8x?xf32>
// CHECK-NEXT:      host.yield %4 : tensor<8x?xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %p = host.unpack %1 start 0 : !host.tuple<[tensor<8x?xf32>]> -> tensor<8x?xf32>
// CHECK-NEXT:    host.drop %1 : !host.tuple<[tensor<8x?xf32>]>
// CHECK-NEXT:    host.comment "_group_g0_launch_group: coda.launch_group, one launch of 2 kernels"
// CHECK-NEXT:    host.comment "  _group_k1_fold: coda.fold over 8 rows"
// CHECK-NEXT:    %5 = host.empty %0 : !host.device -> tensor<8xf32>
// CHECK-NEXT:    %_g = host.fold_spec partials(%p) inputs() outputs(%5) length 8 sums false : tensor<8x?xf32>, tensor<8xf32> -> !host.launch_spec<[tensor<8xf32>]>
// CHECK-NEXT:    host.comment "  _group_k2_elementwise: coda.elementwise 32x16 whole rows"
// CHECK-NEXT:    %_g_1 = host.elementwise_spec m 32 n 16 whole rows bn_multiple_of 1 n_inputs 2 -> !host.launch_spec<[tensor<32xf32>]> {
// CHECK-NEXT:    ^bb0(%6: !host.config):
// CHECK-NEXT:      %7 = host.empty %0 : !host.device -> tensor<32xf32>
// CHECK-NEXT:      host.yield %w_1, %g_1, %7 : tensor<32x16xf32>, tensor<16xf32>, tensor<32xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    host.launch_group @_group_g0_launch_group %_g, %_g_1 : !host.launch_spec<[tensor<8xf32>]>, !host.launch_spec<[tensor<32xf32>]>
// CHECK-NEXT:    %r = host.results %_g : !host.launch_spec<[tensor<8xf32>]> -> tensor<8xf32>
// CHECK-NEXT:    %c = host.results %_g_1 : !host.launch_spec<[tensor<32xf32>]> -> tensor<32xf32>
// CHECK-NEXT:    host.drop %_g, %_g_1, %p : !host.launch_spec<[tensor<8xf32>]>, !host.launch_spec<[tensor<32xf32>]>, tensor<8x?xf32>
// CHECK-NEXT:    host.return %r, %c : tensor<8xf32>, tensor<32xf32>
// CHECK-NEXT:  }

// CHECK-GENERIC: "host.func"() <{function = @group, function_type = (tensor<8x16xf32>, tensor<32x16xf32>, tensor<16xf32>) -> (tensor<8xf32>, tensor<32xf32>), launches = #builtin.int<2>}> ({
// CHECK-GENERIC: "host.check_arguments"(%a, %w, %g) : (tensor<8x16xf32>, tensor<32x16xf32>, tensor<16xf32>) -> ()
// CHECK-GENERIC: %0 = "host.device_of"(%a, %w, %g) : (tensor<8x16xf32>, tensor<32x16xf32>, tensor<16xf32>) -> !host.device
// CHECK-GENERIC: %w_1 = "host.contiguous"(%w) : (tensor<32x16xf32>) -> tensor<32x16xf32>

// -----

host.func @library(%ids: tensor<10xi32>, %w_emb: tensor<37x48xf32>, %qkv: tensor<10x128xf32>, %dy: tensor<10x48xf32>) -> (tensor<10x64xf32>, tensor<40xf32>, tensor<37x48xf32>, tensor<10x96xf32>, tensor<10x32xf32>) launches 5 {
  host.check_arguments %ids, %w_emb, %qkv, %dy : tensor<10xi32>, tensor<37x48xf32>, tensor<10x128xf32>, tensor<10x48xf32>
  %0 = host.device_of %ids, %w_emb, %qkv, %dy : tensor<10xi32>, tensor<37x48xf32>, tensor<10x128xf32>, tensor<10x48xf32> -> !host.device
  host.comment "coda.embedding"
  %x = host.library_call embedding(%ids, %w_emb) literals [] : tensor<10xi32>, tensor<37x48xf32> -> tensor<10x48xf32>
  host.comment "coda.attention"
  %y, %lse = host.library_call attention_forward(%qkv) literals [4, 2, 16, 5, true] : tensor<10x128xf32> -> (tensor<10x64xf32>, tensor<40xf32>)
  host.comment "coda.embedding_grad"
  %dw = host.library_call embedding_grad(%dy, %ids) literals [37, f32] : tensor<10x48xf32>, tensor<10xi32> -> tensor<37x48xf32>
  host.comment "coda.concat"
  %cat = host.library_call concat(%x, %x) literals [1] list_operands : tensor<10x48xf32>, tensor<10x48xf32> -> tensor<10x96xf32>
  host.drop %x : tensor<10x48xf32>
  host.comment "coda.slice"
  %s = host.library_call slice_copy(%qkv) literals [1, 96, 32] : tensor<10x128xf32> -> tensor<10x32xf32>
  host.return %y, %lse, %dw, %cat, %s : tensor<10x64xf32>, tensor<40xf32>, tensor<37x48xf32>, tensor<10x96xf32>, tensor<10x32xf32>
}

// CHECK-LABEL: host.func @library(%ids: tensor<10xi32>, %w_emb: tensor<37x48xf32>, %qkv: tensor<10x128xf32>, %dy: tensor<10x48xf32>) -> (tensor<10x64xf32>, tensor<40xf32>, tensor<37x48xf32>, tensor<10x96xf32>, tensor<10x32xf32>) launches 5 {
// CHECK-NEXT:    host.check_arguments %ids, %w_emb, %qkv, %dy : tensor<10xi32>, tensor<37x48xf32>, tensor<10x128xf32>, tensor<10x48xf32>
// CHECK-NEXT:    %0 = host.device_of %ids, %w_emb, %qkv, %dy : tensor<10xi32>, tensor<37x48xf32>, tensor<10x128xf32>, tensor<10x48xf32> -> !host.device
// CHECK-NEXT:    host.comment "coda.embedding"
// CHECK-NEXT:    %x = host.library_call embedding(%ids, %w_emb) literals [] : tensor<10xi32>, tensor<37x48xf32> -> tensor<10x48xf32>
// CHECK-NEXT:    host.comment "coda.attention"
// CHECK-NEXT:    %y, %lse = host.library_call attention_forward(%qkv) literals [4, 2, 16, 5, true] : tensor<10x128xf32> -> (tensor<10x64xf32>, tensor<40xf32>)
// CHECK-NEXT:    host.comment "coda.embedding_grad"
// CHECK-NEXT:    %dw = host.library_call embedding_grad(%dy, %ids) literals [37, f32] : tensor<10x48xf32>, tensor<10xi32> -> tensor<37x48xf32>
// CHECK-NEXT:    host.comment "coda.concat"
// CHECK-NEXT:    %cat = host.library_call concat(%x, %x) literals [1] list_operands : tensor<10x48xf32>, tensor<10x48xf32> -> tensor<10x96xf32>
// CHECK-NEXT:    host.drop %x : tensor<10x48xf32>
// CHECK-NEXT:    host.comment "coda.slice"
// CHECK-NEXT:    %s = host.library_call slice_copy(%qkv) literals [1, 96, 32] : tensor<10x128xf32> -> tensor<10x32xf32>
// CHECK-NEXT:    host.return %y, %lse, %dw, %cat, %s : tensor<10x64xf32>, tensor<40xf32>, tensor<37x48xf32>, tensor<10x96xf32>, tensor<10x32xf32>
// CHECK-NEXT:  }

// CHECK-GENERIC: "host.func"() <{function = @library, function_type = (tensor<10xi32>, tensor<37x48xf32>, tensor<10x128xf32>, tensor<10x48xf32>) -> (tensor<10x64xf32>, tensor<40xf32>, tensor<37x48xf32>, tensor<10x96xf32>, tensor<10x32xf32>), launches = #builtin.int<5>}> ({
// CHECK-GENERIC: "host.check_arguments"(%ids, %w_emb, %qkv, %dy) : (tensor<10xi32>, tensor<37x48xf32>, tensor<10x128xf32>, tensor<10x48xf32>) -> ()
// CHECK-GENERIC: %0 = "host.device_of"(%ids, %w_emb, %qkv, %dy) : (tensor<10xi32>, tensor<37x48xf32>, tensor<10x128xf32>, tensor<10x48xf32>) -> !host.device
// CHECK-GENERIC: "host.comment"() <{text = "coda.embedding"}> : () -> ()

// -----

host.func @inplace(%a: tensor<8x16xf32>, %b: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) launches 1 {
  host.check_arguments %a, %b : tensor<8x16xf32>, tensor<8x16xf32>
  %0 = host.device_of %a, %b : tensor<8x16xf32>, tensor<8x16xf32> -> !host.device
  %a_1 = host.contiguous %a : tensor<8x16xf32> -> tensor<8x16xf32>
  %b_1 = host.contiguous %b : tensor<8x16xf32> -> tensor<8x16xf32>
  host.comment "_inplace_k0_elementwise: coda.elementwise 8x16"
  %1 = host.launch_elementwise @_inplace_k0_elementwise m 8 n 16 bn_multiple_of 1 n_inputs 2 -> !host.tuple<[tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>]> {
  ^bb0(%2: !host.config):
    %3 = host.empty %0 : !host.device -> tensor<8x16xf32>
    host.yield %a_1, %b_1, %a_1, %3 : tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>
  }
  %o, %o2 = host.unpack %1 start 2 : !host.tuple<[tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>]> -> (tensor<8x16xf32>, tensor<8x16xf32>)
  host.return %o, %o2 : tensor<8x16xf32>, tensor<8x16xf32>
}

// CHECK-LABEL: host.func @inplace(%a: tensor<8x16xf32>, %b: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) launches 1 {
// CHECK-NEXT:    host.check_arguments %a, %b : tensor<8x16xf32>, tensor<8x16xf32>
// CHECK-NEXT:    %0 = host.device_of %a, %b : tensor<8x16xf32>, tensor<8x16xf32> -> !host.device
// CHECK-NEXT:    %a_1 = host.contiguous %a : tensor<8x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT:    %b_1 = host.contiguous %b : tensor<8x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT:    host.comment "_inplace_k0_elementwise: coda.elementwise 8x16"
// CHECK-NEXT:    %1 = host.launch_elementwise @_inplace_k0_elementwise m 8 n 16 bn_multiple_of 1 n_inputs 2 -> !host.tuple<[tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>]> {
// CHECK-NEXT:    ^bb0(%2: !host.config):
// CHECK-NEXT:      %3 = host.empty %0 : !host.device -> tensor<8x16xf32>
// CHECK-NEXT:      host.yield %a_1, %b_1, %a_1, %3 : tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %o, %o2 = host.unpack %1 start 2 : !host.tuple<[tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>, tensor<8x16xf32>]> -> (tensor<8x16xf32>, tensor<8x16xf32>)
// CHECK-NEXT:    host.return %o, %o2 : tensor<8x16xf32>, tensor<8x16xf32>
// CHECK-NEXT:  }

// CHECK-GENERIC: "host.func"() <{function = @inplace, function_type = (tensor<8x16xf32>, tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>), launches = #builtin.int<1>}> ({
// CHECK-GENERIC: "host.check_arguments"(%a, %b) : (tensor<8x16xf32>, tensor<8x16xf32>) -> ()
// CHECK-GENERIC: %0 = "host.device_of"(%a, %b) : (tensor<8x16xf32>, tensor<8x16xf32>) -> !host.device
// CHECK-GENERIC: %a_1 = "host.contiguous"(%a) : (tensor<8x16xf32>) -> tensor<8x16xf32>

// -----

host.func @owned(%a: tensor<8x16xf32>, %b: tensor<16x16xf32>, %c: tensor<16x16xf32>, %u: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<16x16xf32>) launches 2 owned [0, 1, 3] {
  host.check_arguments %a, %b, %c, %u : tensor<8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<8x16xf32>
  %0 = host.device_of %a, %b, %c, %u : tensor<8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<8x16xf32> -> !host.device
  host.drop %u : tensor<8x16xf32>
  host.comment "_owned_k0_gemm: coda.gemm 8x16x16"
  %1 = host.launch_gemm @_owned_k0_gemm %a, %b m 8 n 16 k 16 transpose_b interleave 0 bn_multiple_of 1 n_inputs 0 epilogue_half_tiles 2 : tensor<8x16xf32>, tensor<16x16xf32> -> !host.tuple<[tensor<8x16xf32>]> {
  ^bb0(%2: !host.config):
    %3 = host.empty %0 : !host.device -> tensor<8x16xf32>
    host.yield %3 : tensor<8x16xf32>
  }
  %x = host.unpack %1 start 0 : !host.tuple<[tensor<8x16xf32>]> -> tensor<8x16xf32>
  host.drop %1, %a : !host.tuple<[tensor<8x16xf32>]>, tensor<8x16xf32>
  host.comment "_owned_k1_gemm: coda.gemm 8x16x16"
  %4 = host.launch_gemm @_owned_k1_gemm %x, %c m 8 n 16 k 16 transpose_b interleave 0 bn_multiple_of 1 n_inputs 0 epilogue_half_tiles 2 : tensor<8x16xf32>, tensor<16x16xf32> -> !host.tuple<[tensor<8x16xf32>]> {
  ^bb0(%5: !host.config):
    %6 = host.empty %0 : !host.device -> tensor<8x16xf32>
    host.yield %6 : tensor<8x16xf32>
  }
  %y = host.unpack %4 start 0 : !host.tuple<[tensor<8x16xf32>]> -> tensor<8x16xf32>
  host.drop %4, %x : !host.tuple<[tensor<8x16xf32>]>, tensor<8x16xf32>
  host.return %y, %b : tensor<8x16xf32>, tensor<16x16xf32>
}

// CHECK-LABEL: host.func @owned(%a: tensor<8x16xf32>, %b: tensor<16x16xf32>, %c: tensor<16x16xf32>, %u: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<16x16xf32>) launches 2 owned [0, 1, 3] {
// CHECK-NEXT:    host.check_arguments %a, %b, %c, %u : tensor<8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<8x16xf32>
// CHECK-NEXT:    %0 = host.device_of %a, %b, %c, %u : tensor<8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<8x16xf32> -> !host.device
// CHECK-NEXT:    host.drop %u : tensor<8x16xf32>
// CHECK-NEXT:    host.comment "_owned_k0_gemm: coda.gemm 8x16x16"
// CHECK-NEXT:    %1 = host.launch_gemm @_owned_k0_gemm %a, %b m 8 n 16 k 16 transpose_b interleave 0 bn_multiple_of 1 n_inputs 0 epilogue_half_tiles 2 : tensor<8x16xf32>, tensor<16x16xf32> -> !host.tuple<[tensor<8x16xf32>]> {
// CHECK-NEXT:    ^bb0(%2: !host.config):
// CHECK-NEXT:      %3 = host.empty %0 : !host.device -> tensor<8x16xf32>
// CHECK-NEXT:      host.yield %3 : tensor<8x16xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %x = host.unpack %1 start 0 : !host.tuple<[tensor<8x16xf32>]> -> tensor<8x16xf32>
// CHECK-NEXT:    host.drop %1, %a : !host.tuple<[tensor<8x16xf32>]>, tensor<8x16xf32>
// CHECK-NEXT:    host.comment "_owned_k1_gemm: coda.gemm 8x16x16"
// CHECK-NEXT:    %4 = host.launch_gemm @_owned_k1_gemm %x, %c m 8 n 16 k 16 transpose_b interleave 0 bn_multiple_of 1 n_inputs 0 epilogue_half_tiles 2 : tensor<8x16xf32>, tensor<16x16xf32> -> !host.tuple<[tensor<8x16xf32>]> {
// CHECK-NEXT:    ^bb0(%5: !host.config):
// CHECK-NEXT:      %6 = host.empty %0 : !host.device -> tensor<8x16xf32>
// CHECK-NEXT:      host.yield %6 : tensor<8x16xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %y = host.unpack %4 start 0 : !host.tuple<[tensor<8x16xf32>]> -> tensor<8x16xf32>
// CHECK-NEXT:    host.drop %4, %x : !host.tuple<[tensor<8x16xf32>]>, tensor<8x16xf32>
// CHECK-NEXT:    host.return %y, %b : tensor<8x16xf32>, tensor<16x16xf32>
// CHECK-NEXT:  }

// CHECK-GENERIC: "host.func"() <{function = @owned, function_type = (tensor<8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<16x16xf32>), launches = #builtin.int<2>, owned = [#builtin.int<0>, #builtin.int<1>, #builtin.int<3>]}> ({
// CHECK-GENERIC: "host.check_arguments"(%a, %b, %c, %u) : (tensor<8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<8x16xf32>) -> ()
// CHECK-GENERIC: %0 = "host.device_of"(%a, %b, %c, %u) : (tensor<8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<8x16xf32>) -> !host.device
// CHECK-GENERIC: "host.drop"(%u) : (tensor<8x16xf32>) -> ()

// -----

// Float literals (attention's scale and softcap, f64): printed as the shortest text that reads
// back the same, always with a point.
host.func @attention_ext(%qkv: tensor<10x128xf32>, %seg: tensor<10xi32>) -> (tensor<10x64xf32>, tensor<40xf32>) launches 1 {
  %y, %lse = host.library_call attention_forward_segments(%qkv, %seg) literals [4, 2, 16, 5, true, 0.0625, 3, 5.0e+01] : tensor<10x128xf32>, tensor<10xi32> -> (tensor<10x64xf32>, tensor<40xf32>)
  host.return %y, %lse : tensor<10x64xf32>, tensor<40xf32>
}

// CHECK-LABEL: host.func @attention_ext(
// CHECK-NEXT:    %y, %lse = host.library_call attention_forward_segments(%qkv, %seg) literals [4, 2, 16, 5, true, 0.0625, 3, 50.0] : tensor<10x128xf32>, tensor<10xi32> -> (tensor<10x64xf32>, tensor<40xf32>)
// CHECK-GENERIC-LABEL: "host.func"() <{function = @attention_ext
// CHECK-GENERIC:         callee = "attention_forward_segments", literals = [#builtin.int<4>, #builtin.int<2>, #builtin.int<16>, #builtin.int<5>, true, 6.250000e-02 : f64, #builtin.int<3>, 5.000000e+01 : f64]
