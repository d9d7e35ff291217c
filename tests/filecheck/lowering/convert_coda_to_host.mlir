// RUN: coda-opt %s -p coda-legalize,convert-coda-to-tl,convert-coda-to-host --split-input-file | filecheck %s
// RUN: coda-opt %s -p coda-legalize,convert-coda-to-tl,convert-coda-to-host --split-input-file | coda-opt --split-input-file | filecheck %s
// RUN: coda-opt %s -p coda-legalize,convert-coda-to-tl,convert-coda-to-host --split-input-file --print-op-generic | coda-opt --split-input-file | filecheck %s
// convert-coda-to-host builds the host.func of each function after it, every host decision
// recorded in its ops: the arguments a kernel reads with row-major strides made contiguous,
// fresh outputs (partials [L, tiles] with the tile count of the picked configuration along the
// reduced axis), launch shapes / transposes / bn_multiple_of / a fixed config, the
// inputs-then-outputs argument order, the outputs unpacked after the inputs.

func.func @norm(%x: tensor<37x48xbf16>, %w: tensor<80x48xbf16>, %g: tensor<80xf32>) -> (tensor<37x80xbf16>, tensor<37xf32>) {
  %y, %p = coda.gemm %x, %w transpose_b config #coda.config<bm = 64, bn = 64, bk = 32, warps = 4, stages = 3> ins(%g : tensor<80xf32>) : tensor<37x48xbf16>, tensor<80x48xbf16> -> (tensor<37x80xbf16>, !coda.partials<rows, 37, sum>) {
  ^bb0(%acc: !coda.tile<37x80xf32>, %gv: tensor<80xf32>):
    %t = coda.scale %acc, %gv cols : !coda.tile<37x80xf32>, tensor<80xf32>
    %s = coda.reduce sumsq %t dim 1 : !coda.tile<37x80xf32> -> !coda.partials<rows, 37, sum>
    coda.yield %t, %s : !coda.tile<37x80xf32>, !coda.partials<rows, 37, sum>
  }
  %r = coda.fold %p : !coda.partials<rows, 37, sum> -> tensor<37xf32> {
  ^bb0(%v: f32):
    %q = math.rsqrt %v : f32
    coda.yield %q : f32
  }
  func.return %y, %r : tensor<37x80xbf16>, tensor<37xf32>
}

// CHECK:      func.func @norm
// CHECK:      host.func @norm(%x: tensor<37x48xbf16>, %w: tensor<80x48xbf16>, %g: tensor<80xf32>) -> (tensor<37x80xbf16>, tensor<37xf32>) launches 2 {
// CHECK-NEXT:   host.check_arguments %x, %w, %g : tensor<37x48xbf16>, tensor<80x48xbf16>, tensor<80xf32>
// CHECK-NEXT:   %[[DEV:.*]] = host.device_of %x, %w, %g : tensor<37x48xbf16>, tensor<80x48xbf16>, tensor<80xf32> -> !host.device
// A and B are read with their strides; the epilogue input is read row-major.
// CHECK-NEXT:   %[[G:.*]] = host.contiguous %g : tensor<80xf32> -> tensor<80xf32>
// CHECK-NEXT:   host.comment "_norm_k0_gemm: coda.gemm 37x80x48"
// CHECK-NEXT:   %[[E:.*]] = host.launch_gemm @_norm_k0_gemm %x, %w m 37 n 80 k 48 transpose_b interleave 0 bn_multiple_of 1 n_inputs 1 epilogue_half_tiles 2 config #coda.config<bm = 64, bn = 64, bk = 32, warps = 4, stages = 3> : tensor<37x48xbf16>, tensor<80x48xbf16> -> !host.tuple<[tensor<80xf32>, tensor<37x80xbf16>, tensor<37x?xf32>]> {
// CHECK-NEXT:   ^bb0(%[[CFG:.*]]: !host.config):
// CHECK-NEXT:     %[[Y:.*]] = host.empty %[[DEV]] : !host.device -> tensor<37x80xbf16>
// Row partials: one per column tile of the picked configuration.
// CHECK-NEXT:     %[[T:.*]] = host.tiles %[[CFG]] field bn extent 80 : !host.config -> index
// CHECK-NEXT:     %[[P:.*]] = host.empty %[[DEV]] [%[[T]]] : !host.device, index -> tensor<37x?xf32>
// CHECK-NEXT:     host.yield %[[G]], %[[Y]], %[[P]] : tensor<80xf32>, tensor<37x80xbf16>, tensor<37x?xf32>
// CHECK-NEXT:   }
// CHECK-NEXT:   %y, %p = host.unpack %[[E]] start 1 : !host.tuple<[tensor<80xf32>, tensor<37x80xbf16>, tensor<37x?xf32>]> -> (tensor<37x80xbf16>, tensor<37x?xf32>)
// CHECK-NEXT:   host.drop %[[E]] : !host.tuple<[tensor<80xf32>, tensor<37x80xbf16>, tensor<37x?xf32>]>
// CHECK-NEXT:   host.comment "_norm_k1_fold: coda.fold over 37 rows"
// CHECK-NEXT:   %[[R:.*]] = host.empty %[[DEV]] : !host.device -> tensor<37xf32>
// CHECK-NEXT:   %[[F:.*]] = host.launch_fold @_norm_k1_fold partials(%p) inputs() outputs(%[[R]]) length 37 sums false : tensor<37x?xf32>, tensor<37xf32> -> !host.tuple<[tensor<37xf32>]>
// CHECK-NEXT:   %r = host.unpack %[[F]] start 0 : !host.tuple<[tensor<37xf32>]> -> tensor<37xf32>
// The buffers no later op reads are dropped (liveness.dead_after), with the launch's tuple.
// CHECK-NEXT:   host.drop %[[F]], %p : !host.tuple<[tensor<37xf32>]>, tensor<37x?xf32>
// CHECK-NEXT:   host.return %y, %r : tensor<37x80xbf16>, tensor<37xf32>

// -----

// A launch group: one spec per member (a fold's outputs allocated before it, an elementwise
// member's in its argument lambda), one launch, then each member's outputs.
func.func @group(%a: tensor<8x16xf32>, %w: tensor<32x16xf32>, %g: tensor<16xf32>) -> (tensor<8xf32>, tensor<32xf32>) {
  %p = coda.gemm %a, %w transpose_b : tensor<8x16xf32>, tensor<32x16xf32> -> !coda.partials<rows, 8, sum> {
  ^bb0(%acc: !coda.tile<8x32xf32>):
    %s = coda.reduce sumsq %acc dim 1 : !coda.tile<8x32xf32> -> !coda.partials<rows, 8, sum>
    coda.yield %s : !coda.partials<rows, 8, sum>
  }
  %r, %c = coda.launch_group -> (tensor<8xf32>, tensor<32xf32>) {
    %r0 = coda.fold %p : !coda.partials<rows, 8, sum> -> tensor<8xf32> {
    ^bb0(%x: f32):
      %q = math.rsqrt %x : f32
      coda.yield %q : f32
    }
    %c0 = coda.elementwise [32, 16] whole rows ins(%w, %g : tensor<32x16xf32>, tensor<16xf32>) -> tensor<32xf32> {
    ^bb0(%wt: tensor<32x16xf32>, %gv: tensor<16xf32>):
      %t = coda.load %wt : tensor<32x16xf32> -> !coda.tile<32x16xf32>
      %tg = coda.scale %t, %gv cols : !coda.tile<32x16xf32>, tensor<16xf32>
      %s = coda.reduce sum %tg dim 1 : !coda.tile<32x16xf32> -> !coda.partials<rows, 32, sum>
      coda.yield %s : !coda.partials<rows, 32, sum>
    }
    coda.yield %r0, %c0 : tensor<8xf32>, tensor<32xf32>
  }
  func.return %r, %c : tensor<8xf32>, tensor<32xf32>
}

// CHECK:      host.func @group(%a: tensor<8x16xf32>, %w: tensor<32x16xf32>, %g: tensor<16xf32>) -> (tensor<8xf32>, tensor<32xf32>) launches 2 {
// CHECK:        host.comment "_group_g0_launch_group: coda.launch_group, one launch of 2 kernels"
// CHECK-NEXT:   host.comment "  _group_k1_fold: coda.fold over 8 rows"
// CHECK-NEXT:   %[[R:.*]] = host.empty %{{.*}} : !host.device -> tensor<8xf32>
// CHECK-NEXT:   %[[S0:.*]] = host.fold_spec partials(%p) inputs() outputs(%[[R]]) length 8 sums false : tensor<8x?xf32>, tensor<8xf32> -> !host.launch_spec<[tensor<8xf32>]>
// CHECK-NEXT:   host.comment "  _group_k2_elementwise: coda.elementwise 32x16 whole rows"
// CHECK-NEXT:   %[[S1:.*]] = host.elementwise_spec m 32 n 16 whole rows bn_multiple_of 1 n_inputs 2 -> !host.launch_spec<[tensor<32xf32>]> {
// CHECK-NEXT:   ^bb0(%{{.*}}: !host.config):
// CHECK-NEXT:     %[[C:.*]] = host.empty %{{.*}} : !host.device -> tensor<32xf32>
// CHECK-NEXT:     host.yield %{{.*}}, %{{.*}}, %[[C]]
// CHECK-NEXT:   }
// CHECK-NEXT:   host.launch_group @_group_g0_launch_group %[[S0]], %[[S1]] : !host.launch_spec<[tensor<8xf32>]>, !host.launch_spec<[tensor<32xf32>]>
// CHECK-NEXT:   %r = host.results %[[S0]] : !host.launch_spec<[tensor<8xf32>]> -> tensor<8xf32>
// CHECK-NEXT:   %c = host.results %[[S1]] : !host.launch_spec<[tensor<32xf32>]> -> tensor<32xf32>
// CHECK-NEXT:   host.drop %[[S0]], %[[S1]], %p
// CHECK-NEXT:   host.return %r, %c

// -----

// Library steps: the `_lib` function and its literal arguments (attention's head counts and
// causality, the embedding gradient's row count and dtype, a concat's axis as a list call, a
// slice's axis, start and size).
func.func @library(%ids: tensor<10xi32>, %w_emb: tensor<37x48xf32>, %qkv: tensor<10x128xf32>, %dy: tensor<10x48xf32>) -> (tensor<10x64xf32>, tensor<40xf32>, tensor<37x48xf32>, tensor<10x96xf32>, tensor<10x32xf32>) {
  %x = "coda.embedding"(%ids, %w_emb) : (tensor<10xi32>, tensor<37x48xf32>) -> tensor<10x48xf32>
  %y, %lse = "coda.attention"(%qkv) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true}> : (tensor<10x128xf32>) -> (tensor<10x64xf32>, tensor<40xf32>)
  %dw = "coda.embedding_grad"(%dy, %ids) : (tensor<10x48xf32>, tensor<10xi32>) -> tensor<37x48xf32>
  %cat = "coda.concat"(%x, %x) <{axis = 1 : i64}> : (tensor<10x48xf32>, tensor<10x48xf32>) -> tensor<10x96xf32>
  %s = "coda.slice"(%qkv) <{axis = 1 : i64, start = 96 : i64}> : (tensor<10x128xf32>) -> tensor<10x32xf32>
  func.return %y, %lse, %dw, %cat, %s : tensor<10x64xf32>, tensor<40xf32>, tensor<37x48xf32>, tensor<10x96xf32>, tensor<10x32xf32>
}

// CHECK:      host.func @library({{.*}}) launches 5 {
// No kernel reads an argument row-major here: nothing is made contiguous.
// CHECK-NOT:    host.contiguous
// CHECK:        host.comment "coda.embedding"
// CHECK-NEXT:   %x = host.library_call embedding(%ids, %w_emb) literals [] : tensor<10xi32>, tensor<37x48xf32> -> tensor<10x48xf32>
// CHECK-NEXT:   host.comment "coda.attention"
// CHECK-NEXT:   %y, %lse = host.library_call attention_forward(%qkv) literals [4, 2, 16, 5, true] : tensor<10x128xf32> -> (tensor<10x64xf32>, tensor<40xf32>)
// CHECK:        %dw = host.library_call embedding_grad(%dy, %ids) literals [37, f32]
// CHECK:        %cat = host.library_call concat(%x, %x) literals [1] list_operands
// CHECK-NEXT:   host.drop %x : tensor<10x48xf32>
// CHECK:        %s = host.library_call slice_copy(%qkv) literals [1, 96, 32]
// CHECK-NEXT:   host.return %y, %lse, %dw, %cat, %s

// -----

// An output recorded to write over a donated argument of its type (coda.writes_over, planned
// by coda_ir.analysis.in_place) is that argument's buffer: no allocation.
func.func @inplace(%a: tensor<8x16xf32> {coda.donated}, %b: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  %o, %o2 = coda.elementwise [8, 16] ins(%a, %b : tensor<8x16xf32>, tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) attributes {coda.writes_over = [0 : i64, -1 : i64]} {
  ^bb0(%at: tensor<8x16xf32>, %bt: tensor<8x16xf32>):
    %x = coda.load %at : tensor<8x16xf32> -> !coda.tile<8x16xf32>
    %y = coda.load %bt : tensor<8x16xf32> -> !coda.tile<8x16xf32>
    %z = coda.map %x, %y : (!coda.tile<8x16xf32>, !coda.tile<8x16xf32>) -> !coda.tile<8x16xf32> {
    ^bb0(%u: f32, %v: f32):
      %w = arith.addf %u, %v : f32
      coda.yield %w : f32
    }
    coda.yield %z, %z : !coda.tile<8x16xf32>, !coda.tile<8x16xf32>
  }
  func.return %o, %o2 : tensor<8x16xf32>, tensor<8x16xf32>
}

// CHECK:      host.func @inplace(
// CHECK:        %[[A:.*]] = host.contiguous %a
// CHECK:        host.launch_elementwise @_inplace_k0_elementwise m 8 n 16 bn_multiple_of 1 n_inputs 2 -> {{.*}} {
// CHECK-NEXT:   ^bb0(%{{.*}}: !host.config):
// CHECK-NEXT:     %[[O2:.*]] = host.empty %{{.*}} : !host.device -> tensor<8x16xf32>
// CHECK-NEXT:     host.yield %[[A]], %{{.*}}, %[[A]], %[[O2]]

// -----

// Arguments the caller hands over (coda.owned, analysis/in_place.py): the host.func records them
// (`owned`: it takes its arguments in a list it empties) and drops each after its last reader,
// like its own buffers: %a after the gemm that reads it last, %u (read by no kernel) on entry.
// %b is returned, %c not owned: neither is dropped.
func.func @owned(%a: tensor<8x16xf32> {coda.owned}, %b: tensor<16x16xf32> {coda.owned}, %c: tensor<16x16xf32>, %u: tensor<8x16xf32> {coda.owned}) -> (tensor<8x16xf32>, tensor<16x16xf32>) {
  %x = coda.gemm %a, %b transpose_b : tensor<8x16xf32>, tensor<16x16xf32> -> tensor<8x16xf32> {
  ^bb0(%acc: !coda.tile<8x16xf32>):
    coda.yield %acc : !coda.tile<8x16xf32>
  }
  %y = coda.gemm %x, %c transpose_b : tensor<8x16xf32>, tensor<16x16xf32> -> tensor<8x16xf32> {
  ^bb0(%acc: !coda.tile<8x16xf32>):
    coda.yield %acc : !coda.tile<8x16xf32>
  }
  func.return %y, %b : tensor<8x16xf32>, tensor<16x16xf32>
}

// CHECK:      host.func @owned(%a: tensor<8x16xf32>, %b: tensor<16x16xf32>, %c: tensor<16x16xf32>, %u: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<16x16xf32>) launches 2 owned [0, 1, 3] {
// CHECK-NEXT:   host.check_arguments %a, %b, %c, %u
// CHECK-NEXT:   %{{.*}} = host.device_of %a, %b, %c, %u
// CHECK-NEXT:   host.drop %u : tensor<8x16xf32>
// CHECK-NEXT:   host.comment
// CHECK-NEXT:   %[[E0:.*]] = host.launch_gemm @_owned_k0_gemm %a, %b
// CHECK:        %x = host.unpack %[[E0]]
// CHECK-NEXT:   host.drop %[[E0]], %a : !host.tuple<[tensor<8x16xf32>]>, tensor<8x16xf32>
// CHECK:        %[[E1:.*]] = host.launch_gemm @_owned_k1_gemm %x, %c
// CHECK:        %y = host.unpack %[[E1]]
// CHECK-NEXT:   host.drop %[[E1]], %x : !host.tuple<[tensor<8x16xf32>]>, tensor<8x16xf32>
// CHECK-NEXT:   host.return %y, %b

// -----

// Attention with its optional properties and segments: the segments are the call's second
// tensor (the `_segments` variant of the library function), then the literals: head counts,
// causality, the effective scale (the property's f32 value, or 1 / sqrt(head_dim) = 0.25 when
// absent), the window and the softcap as f64 floats. Without segments but with a property, the
// plain callee takes the same three extra literals.
func.func @attention_ext(%qkv: tensor<10x128xf32>, %seg: tensor<10xi32>, %dy: tensor<10x64xf32>) -> (tensor<10x64xf32>, tensor<10x64xf32>, tensor<10x128xf32>) {
  %y, %lse = "coda.attention"(%qkv, %seg) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, window = 3 : i64}> : (tensor<10x128xf32>, tensor<10xi32>) -> (tensor<10x64xf32>, tensor<40xf32>)
  %z, %lz = "coda.attention"(%qkv) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, scale = 6.250000e-02 : f32, softcap = 5.000000e+01 : f32}> : (tensor<10x128xf32>) -> (tensor<10x64xf32>, tensor<40xf32>)
  %g = "coda.attention_grad"(%qkv, %y, %lse, %dy, %seg) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, window = 3 : i64}> : (tensor<10x128xf32>, tensor<10x64xf32>, tensor<40xf32>, tensor<10x64xf32>, tensor<10xi32>) -> tensor<10x128xf32>
  func.return %y, %z, %g : tensor<10x64xf32>, tensor<10x64xf32>, tensor<10x128xf32>
}

// CHECK:        host.comment "coda.attention"
// CHECK-NEXT:   %y, %lse = host.library_call attention_forward_segments(%qkv, %seg) literals [4, 2, 16, 5, true, 0.25, 3, 0.0] : tensor<10x128xf32>, tensor<10xi32> -> (tensor<10x64xf32>, tensor<40xf32>)
// CHECK:        %z, %lz = host.library_call attention_forward(%qkv) literals [4, 2, 16, 5, true, 0.0625, 0, 50.0] : tensor<10x128xf32> -> (tensor<10x64xf32>, tensor<40xf32>)
// CHECK:        host.comment "coda.attention_grad"
// CHECK-NEXT:   %g = host.library_call attention_backward_segments(%qkv, %y, %lse, %dy, %seg) literals [4, 2, 16, 5, true, 0.25, 3, 0.0] : tensor<10x128xf32>, tensor<10x64xf32>, tensor<40xf32>, tensor<10x64xf32>, tensor<10xi32> -> tensor<10x128xf32>
