// LLaMA block forward as 4 GEMM-epilogue kernels + 2 rstd folds (EPILOGUES.md, coda_digest F1-F4).
// Shapes: M = 67 tokens, D = 96 hidden, F = 160 ffn, 3 q + 1 kv heads of hd = 32
// (QKV = 160 columns, RoPE on the first 4 heads = 128 columns), eps = 1.0e-05,
// theta = 500000.0, bf16 tensors, f32 rstd vectors.
//
// Inputs (all in the user's layout; nothing is pre-permuted):
//   x0   [M, D]   residual stream            y0   [M, D]   attention output
//   wo   [D, D]   out-proj (nn.Linear)       wn0  [D]      post-attention RMSNorm weight
//   wgu  [2F, D]  [gate rows | up rows]      wd   [D, F]   down-proj
//   wn1  [D]      next input RMSNorm weight  wqkv [QKV, D] next layer's packed [q | k | v]
//   pos  [M] i32  positions
// Results:
//   x2   [M, D]   residual stream after the MLP          (= nn llama_block result #0)
//   qkv  [M, QKV] next layer's q, k (RoPE, style half), v (= nn llama_block result #1)
//   x1   [M, D]   residual stream after attention        (saved for backward)
//   z1   [M, 2F]  rstd1 * h1 @ wgu.T, the SwiGLU pre-activation in the user's [gate | up] layout
//   rstd1, rstd2 [M] f32  rsqrt(mean(x^2) + eps) of x1 and x2
// Kernels:
//   F1  x1 = x0 + y0 @ wo.T; h1 = x1 * wn0; partials sum(x1^2)        (deferred RMSNorm producer)
//   fold rstd1
//   F2  z1 = rstd1 * (h1 @ wgu.T); y1 = silu(gate) * up               (interleave F: the mainloop
//       reads weight row perm(c), so accumulator columns (2i, 2i+1) are (gate i, up i), and the
//       2 -> 1 pair_map is tile-local; z1 is stored at perm(c), i.e. in the user's layout)
//   F3  x2 = x1 + y1 @ wd.T; h2 = x2 * wn1; partials sum(x2^2)
//   fold rstd2
//   F4  qkv = rope(rstd2 * (h2 @ wqkv.T))   (pair_map stride hd/2: pairs (c, c + hd/2) in a head;
//       angle = pos[m] * theta^(-2i/hd), i = c mod hd, from coda.index cols; v heads: angle 0)
func.func @llama_fwd(%x0: tensor<67x96xbf16>, %y0: tensor<67x96xbf16>, %wo: tensor<96x96xbf16>, %wn0: tensor<96xbf16>, %wgu: tensor<320x96xbf16>,
                     %wd: tensor<96x160xbf16>, %wn1: tensor<96xbf16>, %wqkv: tensor<160x96xbf16>, %pos: tensor<67xi32>)
    -> (tensor<67x96xbf16>, tensor<67x160xbf16>, tensor<67x96xbf16>, tensor<67x320xbf16>, tensor<67xf32>, tensor<67xf32>) {
  // F1: out-proj GEMM + residual, stores x1 and h1 = x1 * wn0, emits sum(x1^2) partials
  %x1, %h1, %ss1 = coda.gemm %y0, %wo transpose_b ins(%x0, %wn0 : tensor<67x96xbf16>, tensor<96xbf16>) : tensor<67x96xbf16>, tensor<96x96xbf16> -> (tensor<67x96xbf16>, tensor<67x96xbf16>, !coda.partials<rows, 67, sum>) {
  ^bb0(%acc: !coda.tile<67x96xf32>, %res: tensor<67x96xbf16>, %g: tensor<96xbf16>):
    %x = coda.accumulate %acc, %res : !coda.tile<67x96xf32>, tensor<67x96xbf16>
    %h = coda.scale %x, %g cols : !coda.tile<67x96xf32>, tensor<96xbf16>
    %ss = coda.reduce sumsq %x dim 1 : !coda.tile<67x96xf32> -> !coda.partials<rows, 67, sum>
    coda.yield %x, %h, %ss : !coda.tile<67x96xf32>, !coda.tile<67x96xf32>, !coda.partials<rows, 67, sum>
  }
  %rstd1 = coda.fold %ss1 : !coda.partials<rows, 67, sum> -> tensor<67xf32> {
  ^bb0(%ss: f32):
    %d = arith.constant 96.0 : f32
    %eps = arith.constant 1.0e-05 : f32
    %ms = arith.divf %ss, %d : f32
    %v = arith.addf %ms, %eps : f32
    %r = math.rsqrt %v : f32
    coda.yield %r : f32
  }
  // F2: gate/up GEMM, deferred rstd1, SwiGLU over adjacent (gate, up) accumulator columns
  %z1, %y1 = coda.gemm %h1, %wgu transpose_b interleave 160 ins(%rstd1 : tensor<67xf32>) : tensor<67x96xbf16>, tensor<320x96xbf16> -> (tensor<67x320xbf16>, tensor<67x160xbf16>) {
  ^bb0(%acc: !coda.tile<67x320xf32>, %r: tensor<67xf32>):
    %z = coda.scale %acc, %r rows : !coda.tile<67x320xf32>, tensor<67xf32>
    %y = coda.pair_map %z : !coda.tile<67x320xf32> -> !coda.tile<67x160xf32> {
    ^bb0(%gate: f32, %up: f32):
      %one = arith.constant 1.0 : f32
      %ng = arith.negf %gate : f32
      %e = math.exp %ng : f32
      %den = arith.addf %one, %e : f32
      %silu = arith.divf %gate, %den : f32
      %o = arith.mulf %silu, %up : f32
      coda.yield %o : f32
    }
    coda.yield %z, %y : !coda.tile<67x320xf32>, !coda.tile<67x160xf32>
  }
  // F3: down-proj GEMM + residual, stores x2 and h2 = x2 * wn1, emits sum(x2^2) partials
  %x2, %h2, %ss2 = coda.gemm %y1, %wd transpose_b ins(%x1, %wn1 : tensor<67x96xbf16>, tensor<96xbf16>) : tensor<67x160xbf16>, tensor<96x160xbf16> -> (tensor<67x96xbf16>, tensor<67x96xbf16>, !coda.partials<rows, 67, sum>) {
  ^bb0(%acc: !coda.tile<67x96xf32>, %res: tensor<67x96xbf16>, %g: tensor<96xbf16>):
    %x = coda.accumulate %acc, %res : !coda.tile<67x96xf32>, tensor<67x96xbf16>
    %h = coda.scale %x, %g cols : !coda.tile<67x96xf32>, tensor<96xbf16>
    %ss = coda.reduce sumsq %x dim 1 : !coda.tile<67x96xf32> -> !coda.partials<rows, 67, sum>
    coda.yield %x, %h, %ss : !coda.tile<67x96xf32>, !coda.tile<67x96xf32>, !coda.partials<rows, 67, sum>
  }
  %rstd2 = coda.fold %ss2 : !coda.partials<rows, 67, sum> -> tensor<67xf32> {
  ^bb0(%ss: f32):
    %d = arith.constant 96.0 : f32
    %eps = arith.constant 1.0e-05 : f32
    %ms = arith.divf %ss, %d : f32
    %v = arith.addf %ms, %eps : f32
    %r = math.rsqrt %v : f32
    coda.yield %r : f32
  }
  // F4: QKV GEMM, deferred rstd2, RoPE (half style) on the q and k heads
  %qkv = coda.gemm %h2, %wqkv transpose_b ins(%rstd2, %pos : tensor<67xf32>, tensor<67xi32>) : tensor<67x96xbf16>, tensor<160x96xbf16> -> tensor<67x160xbf16> {
  ^bb0(%acc: !coda.tile<67x160xf32>, %r: tensor<67xf32>, %p: tensor<67xi32>):
    %z = coda.scale %acc, %r rows : !coda.tile<67x160xf32>, tensor<67xf32>
    %pt = coda.broadcast %p rows : tensor<67xi32> -> !coda.tile<67x160xi32>
    %ct = coda.index cols : !coda.tile<67x160xi32>
    %o = coda.pair_map stride 16 %z, %pt, %ct : (!coda.tile<67x160xf32>, !coda.tile<67x160xi32>, !coda.tile<67x160xi32>) -> !coda.tile<67x160xf32> {
    ^bb0(%ra: f32, %rb: f32, %pa: i32, %pb: i32, %ca: i32, %cb: i32):
      %hd = arith.constant 32 : i32
      %nrot = arith.constant 128 : i32
      %m2 = arith.constant -2 : i32
      %hdf = arith.constant 32.0 : f32
      %theta = arith.constant 500000.0 : f32
      %zero = arith.constant 0.0 : f32
      %i = arith.remsi %ca, %hd : i32
      %mi = arith.muli %i, %m2 : i32
      %mif = arith.sitofp %mi : i32 to f32
      %ex = arith.divf %mif, %hdf : f32
      %inv = math.powf %theta, %ex : f32
      %pf = arith.sitofp %pa : i32 to f32
      %a0 = arith.mulf %pf, %inv : f32
      %isrot = arith.cmpi slt, %ca, %nrot : i32
      %a = arith.select %isrot, %a0, %zero : f32
      %cos = math.cos %a : f32
      %sin = math.sin %a : f32
      %t1 = arith.mulf %ra, %cos : f32
      %t2 = arith.mulf %rb, %sin : f32
      %o1 = arith.subf %t1, %t2 : f32
      %t3 = arith.mulf %rb, %cos : f32
      %t4 = arith.mulf %ra, %sin : f32
      %o2 = arith.addf %t3, %t4 : f32
      coda.yield %o1, %o2 : f32, f32
    }
    coda.yield %o : !coda.tile<67x160xf32>
  }
  func.return %x2, %qkv, %x1, %z1, %rstd1, %rstd2 : tensor<67x96xbf16>, tensor<67x160xbf16>, tensor<67x96xbf16>, tensor<67x320xbf16>, tensor<67xf32>, tensor<67xf32>
}
