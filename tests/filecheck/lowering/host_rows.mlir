// RUN: coda-opt %s -p nn-autodiff,nn-to-coda -t triton | filecheck %s
// RUN: coda-opt %s -p nn-to-coda,convert-coda-to-tl,convert-coda-to-host | coda-opt | filecheck %s --check-prefix=IR
// A module whose row (token) count is a run-time value (#coda.rows, issue 30): written and planned
// at the representative count 13 (a prime that divides no other extent), its host functions read
// the call's rows M from the first argument with a row extent and take every 13-multiple as a
// multiple of M: allocations, launch sizes (a weight gradient's K), fold lengths, tile counts of
// column partials, the attention's log-sum-exp (M * heads); the attention's seq_len is an
// argument of the call. Static extents (hidden 32, the weights) stay constants.

builtin.module attributes {coda.rows = #coda.rows<count = 13, lo = 9, hi = 16>} {
  func.func @attn(%x: tensor<13x32xf32>, %w: tensor<32xf32>, %wqkv: tensor<32x32xf32>, %wo: tensor<32x16xf32>) -> tensor<13x32xf32> {
    %h = nn.rms_norm %x, %w {eps = 1.0e-05 : f32} : tensor<13x32xf32>, tensor<32xf32> -> tensor<13x32xf32>
    %qkv = nn.linear %h, %wqkv : tensor<13x32xf32>, tensor<32x32xf32> -> tensor<13x32xf32>
    %y = "nn.attention"(%qkv) <{heads = 2 : i64, kv_heads = 1 : i64, head_dim = 8 : i64, seq_len = 13 : i64, causal = true}> : (tensor<13x32xf32>) -> tensor<13x16xf32>
    %o = nn.linear %y, %wo : tensor<13x16xf32>, tensor<32x16xf32> -> tensor<13x32xf32>
    func.return %o : tensor<13x32xf32>
  }
}

// The kernels: Triton must not specialize their run-time row extents (a new token count, divisible
// by 16 or not, reuses the compiled kernel): M of the forward's, K of a weight gradient's, the tile
// count of column partials (one per row tile) of a fold.
// CHECK:       @triton.jit(do_not_specialize=['M'])
// CHECK-NEXT:  def _attn_k0_elementwise(in0_ptr, in1_ptr, out0_ptr, out1_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
// CHECK:       @triton.jit(do_not_specialize=['K'])
// CHECK-NEXT:  def _attn_bwd_k1_gemm(
// CHECK:       @triton.jit(do_not_specialize=['T0'])
// CHECK-NEXT:  def _attn_bwd_k7_fold(part0_ptr, out0_ptr, L, T0,

// The signature: any M >= 1 rows, the weights static; the sequence length a keyword argument.
// CHECK-LABEL: _SIG_attn = (('x', (_rt.Rows(1), 32), torch.float32), ('w', (32,), torch.float32), ('wqkv', (32, 32), torch.float32), ('wo', (32, 16), torch.float32))
// CHECK-NEXT:  _SEQ_LEN_attn = True
// CHECK:       def attn(x, w, wqkv, wo, *, seq_len):
// CHECK:           _rt.check_arguments('attn', (x, w, wqkv, wo), _SIG_attn)
// CHECK-NEXT:      _M = x.shape[0]
// CHECK:           _rt.launch_elementwise({{.*}}torch.empty((_M, 32), dtype=torch.float32, device=_dev), torch.empty((_M,), dtype=torch.float32, device=_dev)), M=_M, N=32,
// CHECK:           # {{.*}}: coda.gemm Mx32x32
// CHECK-NEXT:      launch_gemm({{.*}}torch.empty((_M, 32), dtype=torch.float32, device=_dev)), M=_M, N=32, K=32, {{.*}}row_extents='M',
// CHECK:           _lib.attention_forward({{.*}}, 2, 1, 8, seq_len, True)
// CHECK-NOT:       {{[(, =]13[,)]}}

// The saved log-sum-exp is M * heads long; the backward reads M from x as well.
// CHECK-LABEL: _SIG_attn_bwd = (('x', (_rt.Rows(1), 32), torch.float32),
// CHECK-SAME:  (_rt.Rows(2),), torch.float32)
// CHECK:       def attn_bwd({{.*}}, *, seq_len):
// CHECK:           _M = x.shape[0]
// A weight gradient reduces over the tokens: K is the row count, tuned per bucket.
// CHECK:           # {{.*}}: coda.gemm 32x16xM
// CHECK-NEXT:      launch_gemm({{.*}}torch.empty((32, 16), dtype=torch.float32, device=_dev),), M=32, N=16, K=_M, {{.*}}row_extents='K',
// CHECK:           _lib.attention_backward({{.*}}, 2, 1, 8, seq_len, True)
// A fold over the M rows, then the norm weight's gradient: column partials, one per row tile.
// CHECK:           # {{.*}}: coda.fold over M rows
// CHECK-NEXT:      L=_M, sums=False)
// CHECK:           torch.empty((32, _rt.cdiv(_M, _cfg.bm)), dtype=torch.float32, device=_dev)
// CHECK-NOT:       {{[(, =]13[,)]}}

// The host IR (round-tripped): row extents are dynamic in the host types, marked per argument
// (`rows`), the row count read once, launch sizes #host.rows<c>, the sequence length a literal.
// IR:       host.func @attn(%x: tensor<?x32xf32>, %w: tensor<32xf32>, %wqkv: tensor<32x32xf32>, %wo: tensor<32x16xf32>) -> (tensor<?x32xf32>) launches 4 rows {{\[}}[1, 0], [0], [0, 0], [0, 0]] seq_len {
// IR:         %[[M:.*]] = host.row_count %x dim 0 per 1 : tensor<?x32xf32> -> index
// IR:         host.launch_elementwise @_attn_k0_elementwise m #host.rows<1> n 32 whole rows
// IR:         host.empty %{{.*}} [%[[M]]] : !host.device, index -> tensor<?x32xf32>
// IR:         host.launch_gemm @_attn_k1_gemm %{{.*}}, %wqkv m #host.rows<1> n 32 k 32
// IR:         host.library_call attention_forward(%{{.*}}) literals [2, 1, 8, #host.seq_len, true] : tensor<?x32xf32> -> (tensor<?x16xf32>, tensor<?xf32>)
