// GPT-2 block forward (pre-LayerNorm, GELU tanh MLP, biases) with deferred LayerNorm: 4 GEMM-epilogue
// kernels + 2 statistics folds. Shapes: M = 8192 tokens, D = 1024 hidden, F = 4096 MLP, QKV = 3072;
// eps = 1.0e-05; bf16 tensors, f32 statistics and column vectors.
//
// Deferred LayerNorm (EPILOGUES.md): layer_norm(x, g, b) @ W.T = r * ((x * g) @ W.T) - r * mu * c + e
// with r = rsqrt(var + eps), mu = mean(x), c = g @ W.T, e = b @ W.T. The producer GEMM stores h = x * g
// and emits partials of sum(x) and sum(x^2); a fold gives r and r * mu per row; the consumer GEMM's
// epilogue is acc * r[m] - (r * mu)[m] * c[n] + e[n] (+ the linear's own bias).
//
// Inputs (user's layouts):
//   x0 [M, D] residual stream, y0 [M, D] attention output, wo [D, D], bo [D]  attention out-proj
//   g1, b1 [D]  LayerNorm before the MLP;  wfc [F, D], bfc [F]  MLP up;  wproj [D, F], bproj [D]
//   g2, b2 [D]  next layer's LayerNorm;    wqkv [QKV, D], bqkv [QKV]  next layer's QKV projection
//   c1, e1 [F] f32    c1 = g1 @ wfc.T, e1 = b1 @ wfc.T   (GEMVs, computed once per weight update)
//   c2, e2 [QKV] f32  c2 = g2 @ wqkv.T, e2 = b2 @ wqkv.T
// Results:
//   x2 [M, D], qkv [M, QKV]          (= nn gpt2_block results #0, #1)
//   x1 [M, D], u [M, F] (MLP pre-activation, saved for backward)
//   rstd1, rmu1, rstd2, rmu2 [M] f32 (r and r * mu of x1 and x2)
// Kernels:
//   G1  x1 = x0 + (y0 @ wo.T + bo); h1 = x1 * g1; partials sum(x1), sum(x1^2);  fold r1, rmu1
//   G2  u = r1 * (h1 @ wfc.T) - rmu1 * c1 + e1 + bfc; a = gelu_tanh(u)
//   G3  x2 = x1 + (a @ wproj.T + bproj); h2 = x2 * g2; partials;                fold r2, rmu2
//   G4  qkv = r2 * (h2 @ wqkv.T) - rmu2 * c2 + e2 + bqkv
func.func @gpt2_fwd(%x0: tensor<8192x1024xbf16>, %y0: tensor<8192x1024xbf16>, %wo: tensor<1024x1024xbf16>, %bo: tensor<1024xbf16>, %g1: tensor<1024xbf16>, %b1: tensor<1024xbf16>,
                    %wfc: tensor<4096x1024xbf16>, %bfc: tensor<4096xbf16>, %wproj: tensor<1024x4096xbf16>, %bproj: tensor<1024xbf16>, %g2: tensor<1024xbf16>, %b2: tensor<1024xbf16>,
                    %wqkv: tensor<3072x1024xbf16>, %bqkv: tensor<3072xbf16>, %c1: tensor<4096xf32>, %e1: tensor<4096xf32>,
                    %c2: tensor<3072xf32>, %e2: tensor<3072xf32>)
    -> (tensor<8192x1024xbf16>, tensor<8192x3072xbf16>, tensor<8192x1024xbf16>, tensor<8192x4096xbf16>, tensor<8192xf32>, tensor<8192xf32>, tensor<8192xf32>, tensor<8192xf32>) {
  // G1: attention out-proj GEMM + bias + residual; stores x1, h1 = x1 * g1; emits sum(x1), sum(x1^2)
  %x1, %h1, %s1, %ss1 = coda.gemm %y0, %wo transpose_b ins(%x0, %bo, %g1 : tensor<8192x1024xbf16>, tensor<1024xbf16>, tensor<1024xbf16>) : tensor<8192x1024xbf16>, tensor<1024x1024xbf16> -> (tensor<8192x1024xbf16>, tensor<8192x1024xbf16>, !coda.partials<rows, 8192, sum>, !coda.partials<rows, 8192, sum>) {
  ^bb0(%acc: !coda.tile<8192x1024xf32>, %res: tensor<8192x1024xbf16>, %b: tensor<1024xbf16>, %g: tensor<1024xbf16>):
    %ab = coda.shift %acc, %b cols : !coda.tile<8192x1024xf32>, tensor<1024xbf16>
    %x = coda.accumulate %ab, %res : !coda.tile<8192x1024xf32>, tensor<8192x1024xbf16>
    %h = coda.scale %x, %g cols : !coda.tile<8192x1024xf32>, tensor<1024xbf16>
    %s = coda.reduce sum %x dim 1 : !coda.tile<8192x1024xf32> -> !coda.partials<rows, 8192, sum>
    %ss = coda.reduce sumsq %x dim 1 : !coda.tile<8192x1024xf32> -> !coda.partials<rows, 8192, sum>
    coda.yield %x, %h, %s, %ss : !coda.tile<8192x1024xf32>, !coda.tile<8192x1024xf32>, !coda.partials<rows, 8192, sum>, !coda.partials<rows, 8192, sum>
  }
  %r1, %rmu1 = coda.fold %s1, %ss1 : !coda.partials<rows, 8192, sum>, !coda.partials<rows, 8192, sum> -> (tensor<8192xf32>, tensor<8192xf32>) {
  ^bb0(%s: f32, %ss: f32):
    %d = arith.constant 1024.0 : f32
    %eps = arith.constant 1.0e-05 : f32
    %zero = arith.constant 0.0 : f32
    %mu = arith.divf %s, %d : f32
    %ex2 = arith.divf %ss, %d : f32
    %mu2 = arith.mulf %mu, %mu : f32
    %var0 = arith.subf %ex2, %mu2 : f32
    %var = arith.maximumf %var0, %zero : f32
    %ve = arith.addf %var, %eps : f32
    %r = math.rsqrt %ve : f32
    %rmu = arith.mulf %r, %mu : f32
    coda.yield %r, %rmu : f32, f32
  }
  // G2: MLP-up GEMM, deferred LayerNorm 1, bias, GELU (tanh)
  %u, %a = coda.gemm %h1, %wfc transpose_b ins(%r1, %rmu1, %c1, %e1, %bfc : tensor<8192xf32>, tensor<8192xf32>, tensor<4096xf32>, tensor<4096xf32>, tensor<4096xbf16>) : tensor<8192x1024xbf16>, tensor<4096x1024xbf16> -> (tensor<8192x4096xbf16>, tensor<8192x4096xbf16>) {
  ^bb0(%acc: !coda.tile<8192x4096xf32>, %r: tensor<8192xf32>, %rmu: tensor<8192xf32>, %c: tensor<4096xf32>, %e: tensor<4096xf32>, %bias: tensor<4096xbf16>):
    %t = coda.scale %acc, %r rows : !coda.tile<8192x4096xf32>, tensor<8192xf32>
    %rmt = coda.broadcast %rmu rows : tensor<8192xf32> -> !coda.tile<8192x4096xf32>
    %ct = coda.broadcast %c cols : tensor<4096xf32> -> !coda.tile<8192x4096xf32>
    %cen = coda.map %t, %rmt, %ct : (!coda.tile<8192x4096xf32>, !coda.tile<8192x4096xf32>, !coda.tile<8192x4096xf32>) -> !coda.tile<8192x4096xf32> {
    ^bb0(%tv: f32, %rm: f32, %cc: f32):
      %p = arith.mulf %rm, %cc : f32
      %o = arith.subf %tv, %p : f32
      coda.yield %o : f32
    }
    %te = coda.shift %cen, %e cols : !coda.tile<8192x4096xf32>, tensor<4096xf32>
    %pre = coda.shift %te, %bias cols : !coda.tile<8192x4096xf32>, tensor<4096xbf16>
    %act = coda.map %pre : !coda.tile<8192x4096xf32> -> !coda.tile<8192x4096xf32> {
    ^bb0(%v: f32):
      %half = arith.constant 0.5 : f32
      %one = arith.constant 1.0 : f32
      %k0 = arith.constant 0.7978845608028654 : f32
      %k1 = arith.constant 0.044715 : f32
      %v2 = arith.mulf %v, %v : f32
      %v3 = arith.mulf %v2, %v : f32
      %kv3 = arith.mulf %k1, %v3 : f32
      %inner = arith.addf %v, %kv3 : f32
      %arg = arith.mulf %k0, %inner : f32
      %th = math.tanh %arg : f32
      %onep = arith.addf %one, %th : f32
      %hv = arith.mulf %half, %v : f32
      %o = arith.mulf %hv, %onep : f32
      coda.yield %o : f32
    }
    coda.yield %pre, %act : !coda.tile<8192x4096xf32>, !coda.tile<8192x4096xf32>
  }
  // G3: MLP-down GEMM + bias + residual; stores x2, h2 = x2 * g2; emits sum(x2), sum(x2^2)
  %x2, %h2, %s2, %ss2 = coda.gemm %a, %wproj transpose_b ins(%x1, %bproj, %g2 : tensor<8192x1024xbf16>, tensor<1024xbf16>, tensor<1024xbf16>) : tensor<8192x4096xbf16>, tensor<1024x4096xbf16> -> (tensor<8192x1024xbf16>, tensor<8192x1024xbf16>, !coda.partials<rows, 8192, sum>, !coda.partials<rows, 8192, sum>) {
  ^bb0(%acc: !coda.tile<8192x1024xf32>, %res: tensor<8192x1024xbf16>, %b: tensor<1024xbf16>, %g: tensor<1024xbf16>):
    %ab = coda.shift %acc, %b cols : !coda.tile<8192x1024xf32>, tensor<1024xbf16>
    %x = coda.accumulate %ab, %res : !coda.tile<8192x1024xf32>, tensor<8192x1024xbf16>
    %h = coda.scale %x, %g cols : !coda.tile<8192x1024xf32>, tensor<1024xbf16>
    %s = coda.reduce sum %x dim 1 : !coda.tile<8192x1024xf32> -> !coda.partials<rows, 8192, sum>
    %ss = coda.reduce sumsq %x dim 1 : !coda.tile<8192x1024xf32> -> !coda.partials<rows, 8192, sum>
    coda.yield %x, %h, %s, %ss : !coda.tile<8192x1024xf32>, !coda.tile<8192x1024xf32>, !coda.partials<rows, 8192, sum>, !coda.partials<rows, 8192, sum>
  }
  %r2, %rmu2 = coda.fold %s2, %ss2 : !coda.partials<rows, 8192, sum>, !coda.partials<rows, 8192, sum> -> (tensor<8192xf32>, tensor<8192xf32>) {
  ^bb0(%s: f32, %ss: f32):
    %d = arith.constant 1024.0 : f32
    %eps = arith.constant 1.0e-05 : f32
    %zero = arith.constant 0.0 : f32
    %mu = arith.divf %s, %d : f32
    %ex2 = arith.divf %ss, %d : f32
    %mu2 = arith.mulf %mu, %mu : f32
    %var0 = arith.subf %ex2, %mu2 : f32
    %var = arith.maximumf %var0, %zero : f32
    %ve = arith.addf %var, %eps : f32
    %r = math.rsqrt %ve : f32
    %rmu = arith.mulf %r, %mu : f32
    coda.yield %r, %rmu : f32, f32
  }
  // G4: QKV GEMM, deferred LayerNorm 2, bias
  %qkv = coda.gemm %h2, %wqkv transpose_b ins(%r2, %rmu2, %c2, %e2, %bqkv : tensor<8192xf32>, tensor<8192xf32>, tensor<3072xf32>, tensor<3072xf32>, tensor<3072xbf16>) : tensor<8192x1024xbf16>, tensor<3072x1024xbf16> -> tensor<8192x3072xbf16> {
  ^bb0(%acc: !coda.tile<8192x3072xf32>, %r: tensor<8192xf32>, %rmu: tensor<8192xf32>, %c: tensor<3072xf32>, %e: tensor<3072xf32>, %bias: tensor<3072xbf16>):
    %t = coda.scale %acc, %r rows : !coda.tile<8192x3072xf32>, tensor<8192xf32>
    %rmt = coda.broadcast %rmu rows : tensor<8192xf32> -> !coda.tile<8192x3072xf32>
    %ct = coda.broadcast %c cols : tensor<3072xf32> -> !coda.tile<8192x3072xf32>
    %cen = coda.map %t, %rmt, %ct : (!coda.tile<8192x3072xf32>, !coda.tile<8192x3072xf32>, !coda.tile<8192x3072xf32>) -> !coda.tile<8192x3072xf32> {
    ^bb0(%tv: f32, %rm: f32, %cc: f32):
      %p = arith.mulf %rm, %cc : f32
      %o = arith.subf %tv, %p : f32
      coda.yield %o : f32
    }
    %te = coda.shift %cen, %e cols : !coda.tile<8192x3072xf32>, tensor<3072xf32>
    %pre = coda.shift %te, %bias cols : !coda.tile<8192x3072xf32>, tensor<3072xbf16>
    coda.yield %pre : !coda.tile<8192x3072xf32>
  }
  func.return %x2, %qkv, %x1, %u, %r1, %rmu1, %r2, %rmu2 : tensor<8192x1024xbf16>, tensor<8192x3072xbf16>, tensor<8192x1024xbf16>, tensor<8192x4096xbf16>, tensor<8192xf32>, tensor<8192xf32>, tensor<8192xf32>, tensor<8192xf32>
}
