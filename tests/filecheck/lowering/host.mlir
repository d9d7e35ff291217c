// RUN: coda-opt %s -t triton --split-input-file | filecheck %s
// The host functions as printed from convert-coda-to-host's host.func (lowering/host_printer.py):
// one statement per op; allocations and tile counts printed inside the statement that uses
// them (a launch's lambda of its arguments, a fold's outputs).

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

// CHECK-LABEL: _SIG_norm = (('x', (37, 48), torch.bfloat16), ('w', (80, 48), torch.bfloat16), ('g', (80,), torch.float32))
// CHECK:       def norm(x, w, g):
// CHECK-NEXT:      """Host function for @norm: 2 kernel launch(es)."""
// CHECK-NEXT:      _rt.check_arguments('norm', (x, w, g), _SIG_norm)
// CHECK-NEXT:      _dev = _rt.device_of((x, w, g))
// CHECK-NEXT:      g = g.contiguous()
// CHECK-NEXT:      # _norm_k0_gemm: coda.gemm 37x80x48
// CHECK-NEXT:      _cfg, _e = launch_gemm(_norm_k0_gemm, x, w, lambda _cfg: (g, torch.empty((37, 80), dtype=torch.bfloat16, device=_dev), torch.empty((37, _rt.cdiv(80, _cfg.bn)), dtype=torch.float32, device=_dev)), M=37, N=80, K=48, transpose_a=False, transpose_b=True, interleave=0, bn_multiple_of=1, config=_rt.fixed_gemm_config(64, 64, 32, 4, 3), key='_norm_k0_gemm:{{[0-9a-f]+}}', tuning_group='epilogue-half-tiles=2')
// CHECK-NEXT:      y, p = _e[1:]
// The launch's argument tuple holds every output: dropped right after the launch.
// CHECK-NEXT:      del _e
// CHECK-NEXT:      # _norm_k1_fold: coda.fold over 37 rows
// CHECK-NEXT:      _e = _rt.launch_fold(_norm_k1_fold, (p,), (), (torch.empty((37,), dtype=torch.float32, device=_dev),), L=37, sums=False)
// CHECK-NEXT:      r, = _e
// The dead partials are dropped (and the launch tuple that holds them).
// CHECK-NEXT:      del _e, p
// CHECK-NEXT:      return (y, r)

// -----

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

// A kernel without inputs: its outputs are the argument tuple from index 0.
// CHECK-LABEL: def group(a, w, g):
// CHECK:           _cfg, _e = launch_gemm(_group_k0_gemm, a, w, lambda _cfg: (torch.empty((8, _rt.cdiv(32, _cfg.bn)), dtype=torch.float32, device=_dev),), M=8, N=32, K=16,
// CHECK-NEXT:      p, = _e[0:]
// CHECK-NEXT:      del _e
// CHECK-NEXT:      # _group_g0_launch_group: coda.launch_group, one launch of 2 kernels
// CHECK-NEXT:      #   _group_k1_fold: coda.fold over 8 rows
// CHECK-NEXT:      _g = _rt.fold_launch((p,), (), (torch.empty((8,), dtype=torch.float32, device=_dev),), L=8, sums=False)
// CHECK-NEXT:      #   _group_k2_elementwise: coda.elementwise 32x16 whole rows
// CHECK-NEXT:      _g0 = _rt.elementwise_launch(lambda _cfg: (w, g, torch.empty((32,), dtype=torch.float32, device=_dev)), M=32, N=16, bn_multiple_of=1, whole='rows', n_inputs=2)
// CHECK-NEXT:      _rt.launch_group(_group_g0_launch_group, (_g, _g0))
// CHECK-NEXT:      r, = _g.results
// CHECK-NEXT:      c, = _g0.results
// CHECK-NEXT:      del _g, _g0, p
// CHECK-NEXT:      return (r, c)

// -----

func.func @library(%ids: tensor<10xi32>, %w_emb: tensor<37x48xf32>, %qkv: tensor<10x128xf32>, %dy: tensor<10x48xf32>) -> (tensor<10x64xf32>, tensor<37x48xf32>, tensor<10x96xf32>, tensor<10x32xf32>) {
  %x = "coda.embedding"(%ids, %w_emb) : (tensor<10xi32>, tensor<37x48xf32>) -> tensor<10x48xf32>
  %y, %lse = "coda.attention"(%qkv) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = false}> : (tensor<10x128xf32>) -> (tensor<10x64xf32>, tensor<40xf32>)
  %dw = "coda.embedding_grad"(%dy, %ids) : (tensor<10x48xf32>, tensor<10xi32>) -> tensor<37x48xf32>
  %cat = "coda.concat"(%x, %x) <{axis = 1 : i64}> : (tensor<10x48xf32>, tensor<10x48xf32>) -> tensor<10x96xf32>
  %s = "coda.slice"(%qkv) <{axis = 1 : i64, start = 96 : i64}> : (tensor<10x128xf32>) -> tensor<10x32xf32>
  func.return %y, %dw, %cat, %s : tensor<10x64xf32>, tensor<37x48xf32>, tensor<10x96xf32>, tensor<10x32xf32>
}

// CHECK-LABEL: def library(ids, w_emb, qkv, dy):
// CHECK-NEXT:      """Host function for @library: 5 kernel launch(es)."""
// CHECK-NEXT:      _rt.check_arguments('library', (ids, w_emb, qkv, dy), _SIG_library)
// CHECK-NEXT:      _dev = _rt.device_of((ids, w_emb, qkv, dy))
// CHECK-NEXT:      # coda.embedding
// CHECK-NEXT:      x = _lib.embedding(ids, w_emb)
// CHECK-NEXT:      # coda.attention
// CHECK-NEXT:      y, lse = _lib.attention_forward(qkv, 4, 2, 16, 5, False)
// CHECK-NEXT:      del lse
// CHECK-NEXT:      # coda.embedding_grad
// CHECK-NEXT:      dw = _lib.embedding_grad(dy, ids, 37, torch.float32)
// CHECK-NEXT:      # coda.concat
// CHECK-NEXT:      cat = _lib.concat([x, x], 1)
// CHECK-NEXT:      del x
// CHECK-NEXT:      # coda.slice
// CHECK-NEXT:      s = _lib.slice_copy(qkv, 1, 96, 32)
// CHECK-NEXT:      return (y, dw, cat, s)

// -----

// A value named like a kernel the function launches does not shadow it (nor the module's names).
func.func @shadow(%_shadow_k0_elementwise: tensor<8x16xf32>, %torch: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %o = coda.elementwise [8, 16] ins(%_shadow_k0_elementwise, %torch : tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32> {
  ^bb0(%at: tensor<8x16xf32>, %bt: tensor<8x16xf32>):
    %x = coda.load %at : tensor<8x16xf32> -> !coda.tile<8x16xf32>
    %y = coda.load %bt : tensor<8x16xf32> -> !coda.tile<8x16xf32>
    %z = coda.map %x, %y : (!coda.tile<8x16xf32>, !coda.tile<8x16xf32>) -> !coda.tile<8x16xf32> {
    ^bb0(%u: f32, %v: f32):
      %w = arith.addf %u, %v : f32
      coda.yield %w : f32
    }
    coda.yield %z : !coda.tile<8x16xf32>
  }
  func.return %o : tensor<8x16xf32>
}

// CHECK-LABEL: def shadow(_shadow_k0_elementwise0, torch0):
// CHECK:           _cfg, _e = _rt.launch_elementwise(_shadow_k0_elementwise, lambda _cfg: (_shadow_k0_elementwise0, torch0, torch.empty((8, 16), dtype=torch.float32, device=_dev)), M=8, N=16, bn_multiple_of=1)
// CHECK-NEXT:      o, = _e[2:]
// CHECK-NEXT:      return o

// -----

// A function owning arguments (coda.owned) takes them in one list, which it empties on entry:
// its locals are then the only references the caller gave, and `del` frees an argument no one
// else holds (a backward's saved tensor) after its last reader.
func.func @owned(%a: tensor<8x16xf32> {coda.owned}, %b: tensor<16x16xf32>) -> tensor<8x16xf32> {
  %x = coda.gemm %a, %b transpose_b : tensor<8x16xf32>, tensor<16x16xf32> -> tensor<8x16xf32> {
  ^bb0(%acc: !coda.tile<8x16xf32>):
    coda.yield %acc : !coda.tile<8x16xf32>
  }
  %y = coda.gemm %x, %b transpose_b : tensor<8x16xf32>, tensor<16x16xf32> -> tensor<8x16xf32> {
  ^bb0(%acc: !coda.tile<8x16xf32>):
    coda.yield %acc : !coda.tile<8x16xf32>
  }
  func.return %y : tensor<8x16xf32>
}

// CHECK-LABEL: _SIG_owned = (('a', (8, 16), torch.float32), ('b', (16, 16), torch.float32))
// CHECK-NEXT:  _OWNED_owned = (0,)
// CHECK:       def owned(_args):
// CHECK-NEXT:      """Host function for @owned: 2 kernel launch(es); takes its arguments in a list, which it empties (owns arguments [0])."""
// CHECK-NEXT:      a, b = _args
// CHECK-NEXT:      _args.clear()
// CHECK-NEXT:      _rt.check_arguments('owned', (a, b), _SIG_owned)
// CHECK:           _cfg, _e = launch_gemm(_owned_k0_gemm, a, b,
// CHECK-NEXT:      x, = _e[0:]
// CHECK-NEXT:      del _e, a
// CHECK:           _cfg, _e = launch_gemm(_owned_k1_gemm, x, b,
// CHECK-NEXT:      y, = _e[0:]
// CHECK-NEXT:      del _e, x
// CHECK-NEXT:      return y

// -----

// Attention's optional properties and segments: the `_segments` variant takes the segments
// second; the scale and softcap literals print as Python floats.
func.func @attention_ext(%qkv: tensor<10x128xf32>, %seg: tensor<10xi32>) -> (tensor<10x64xf32>, tensor<10x64xf32>) {
  %y, %lse = "coda.attention"(%qkv, %seg) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, window = 3 : i64}> : (tensor<10x128xf32>, tensor<10xi32>) -> (tensor<10x64xf32>, tensor<40xf32>)
  %z, %lz = "coda.attention"(%qkv) <{heads = 4 : i64, kv_heads = 2 : i64, head_dim = 16 : i64, seq_len = 5 : i64, causal = true, scale = 6.250000e-02 : f32, softcap = 5.000000e+01 : f32}> : (tensor<10x128xf32>) -> (tensor<10x64xf32>, tensor<40xf32>)
  func.return %y, %z : tensor<10x64xf32>, tensor<10x64xf32>
}

// CHECK-LABEL: def attention_ext(qkv, seg):
// CHECK:           y, lse = _lib.attention_forward_segments(qkv, seg, 4, 2, 16, 5, True, 0.25, 3, 0.0)
// CHECK:           z, lz = _lib.attention_forward(qkv, 4, 2, 16, 5, True, 0.0625, 0, 50.0)
