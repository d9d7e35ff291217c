// LM head with cross-entropy: final RMSNorm (no producer GEMM, so a row kernel), vocabulary GEMM
// with online log-sum-exp partials and the selected target logit (the [M, V] logits are never
// written), ONE fold kernel that gives the per-row lse and, in its finalize region, the mean loss
// over non-ignored rows; then the training gradient of the logits by recomputing the GEMM.
// Shapes: M = 67 tokens, D = 96 hidden, V = 200 vocabulary; eps = 1.0e-05; ignore_index = -100.
//
// Inputs:
//   x [M, D] bf16  final residual stream     wn [D] bf16  final RMSNorm weight
//   wlm [V, D] bf16  vocabulary projection   targets [M] i32 (-100 = ignored row)
//   dloss 0-d f32  upstream gradient of the loss (1.0 for a plain backward)
// Results:
//   loss  0-d f32   mean over rows with targets != -100 of lse(logits[m]) - logits[m, targets[m]]
//                   (= nn lm_head's result; nan when every row is ignored, as PyTorch)
//   dlogits [M, V] bf16  dloss * (softmax(logits) - onehot(targets)) / count, 0 on ignored rows
//   h [M, D] bf16  x * wn (the deferred-norm GEMM operand)     rstd [M] f32
//   lse [M] f32   logsumexp of each row of logits = rstd * (h @ wlm.T)
//   count 0-d f32  the number of non-ignored rows
// Kernels:
//   K1  elementwise [M, D]: h = x * wn, partials sum(x^2);  fold rstd
//   K2  logits = rstd * (h @ wlm.T) (registers only): lse partials (dim 1), select(logits, targets)
//   K3  fold: lse per row; sums of (lse - target logit) and 1 over kept rows; finalize -> mean, count
//   K4  dlogits = recompute logits; (exp(logits - lse[m]) - [col == target]) * dloss / count, or 0
func.func @lm_head_ce(%x: tensor<67x96xbf16>, %wn: tensor<96xbf16>, %wlm: tensor<200x96xbf16>, %targets: tensor<67xi32>, %dloss: tensor<f32>)
    -> (tensor<f32>, tensor<67x200xbf16>, tensor<67x96xbf16>, tensor<67xf32>, tensor<67xf32>, tensor<f32>) {
  // K1: the final RMSNorm's statistics and h = x * wn (first norm: no producer GEMM)
  %h, %ssp = coda.elementwise [67, 96] ins(%x, %wn : tensor<67x96xbf16>, tensor<96xbf16>) -> (tensor<67x96xbf16>, !coda.partials<rows, 67, sum>) {
  ^bb0(%xx: tensor<67x96xbf16>, %g: tensor<96xbf16>):
    %xv = coda.load %xx : tensor<67x96xbf16> -> !coda.tile<67x96xf32>
    %hv = coda.scale %xv, %g cols : !coda.tile<67x96xf32>, tensor<96xbf16>
    %ss = coda.reduce sumsq %xv dim 1 : !coda.tile<67x96xf32> -> !coda.partials<rows, 67, sum>
    coda.yield %hv, %ss : !coda.tile<67x96xf32>, !coda.partials<rows, 67, sum>
  }
  %rstd = coda.fold %ssp : !coda.partials<rows, 67, sum> -> tensor<67xf32> {
  ^bb0(%ss: f32):
    %d = arith.constant 96.0 : f32
    %eps = arith.constant 1.0e-05 : f32
    %ms = arith.divf %ss, %d : f32
    %v = arith.addf %ms, %eps : f32
    %r = math.rsqrt %v : f32
    coda.yield %r : f32
  }
  // K2: vocabulary GEMM, deferred rstd, online LSE partials and the target logit
  %lsep, %tlp = coda.gemm %h, %wlm transpose_b ins(%rstd, %targets : tensor<67xf32>, tensor<67xi32>) : tensor<67x96xbf16>, tensor<200x96xbf16> -> (!coda.partials<rows, 67, lse>, !coda.partials<rows, 67, sum>) {
  ^bb0(%acc: !coda.tile<67x200xf32>, %r: tensor<67xf32>, %t: tensor<67xi32>):
    %z = coda.scale %acc, %r rows : !coda.tile<67x200xf32>, tensor<67xf32>
    %l = coda.reduce lse %z dim 1 : !coda.tile<67x200xf32> -> !coda.partials<rows, 67, lse>
    %tl = coda.select %z, %t : !coda.tile<67x200xf32>, tensor<67xi32> -> !coda.partials<rows, 67, sum>
    coda.yield %l, %tl : !coda.partials<rows, 67, lse>, !coda.partials<rows, 67, sum>
  }
  // K3: one fold kernel: per-row lse, loss and count summed over rows, finalize -> mean loss, count
  %lse, %loss, %count = coda.fold %lsep, %tlp : !coda.partials<rows, 67, lse>, !coda.partials<rows, 67, sum> ins(%targets : tensor<67xi32>) -> (tensor<67xf32>, tensor<f32>, tensor<f32>) {
  ^bb0(%l: f32, %tl: f32, %t: i32):
    %ign = arith.constant -100 : i32
    %zero = arith.constant 0.0 : f32
    %one = arith.constant 1.0 : f32
    %keep = arith.cmpi ne, %t, %ign : i32
    %nll = arith.subf %l, %tl : f32
    %row = arith.select %keep, %nll, %zero : f32
    %cnt = arith.select %keep, %one, %zero : f32
    coda.yield %l, %row, %cnt : f32, f32, f32
  } finalize {
  ^bb0(%total: f32, %n: f32):
    %mean = arith.divf %total, %n : f32
    coda.yield %mean, %n : f32, f32
  }
  // K4: dlogits by recomputing the logits tile: softmax - onehot, scaled by dloss / count
  %dlogits = coda.gemm %h, %wlm transpose_b ins(%rstd, %lse, %targets, %count, %dloss : tensor<67xf32>, tensor<67xf32>, tensor<67xi32>, tensor<f32>, tensor<f32>) : tensor<67x96xbf16>, tensor<200x96xbf16> -> tensor<67x200xbf16> {
  ^bb0(%acc: !coda.tile<67x200xf32>, %r: tensor<67xf32>, %ls: tensor<67xf32>, %t: tensor<67xi32>, %cn: tensor<f32>, %dl: tensor<f32>):
    %z = coda.scale %acc, %r rows : !coda.tile<67x200xf32>, tensor<67xf32>
    %lt = coda.broadcast %ls rows : tensor<67xf32> -> !coda.tile<67x200xf32>
    %tt = coda.broadcast %t rows : tensor<67xi32> -> !coda.tile<67x200xi32>
    %ct = coda.index cols : !coda.tile<67x200xi32>
    %nt = coda.broadcast %cn scalar : tensor<f32> -> !coda.tile<67x200xf32>
    %dt = coda.broadcast %dl scalar : tensor<f32> -> !coda.tile<67x200xf32>
    %g = coda.map %z, %lt, %tt, %ct, %nt, %dt : (!coda.tile<67x200xf32>, !coda.tile<67x200xf32>, !coda.tile<67x200xi32>, !coda.tile<67x200xi32>, !coda.tile<67x200xf32>, !coda.tile<67x200xf32>) -> !coda.tile<67x200xf32> {
    ^bb0(%zv: f32, %lv: f32, %tv: i32, %cv: i32, %nv: f32, %dv: f32):
      %ign = arith.constant -100 : i32
      %zero = arith.constant 0.0 : f32
      %one = arith.constant 1.0 : f32
      %sh = arith.subf %zv, %lv : f32
      %p = math.exp %sh : f32
      %hit = arith.cmpi eq, %cv, %tv : i32
      %oh = arith.select %hit, %one, %zero : f32
      %gr = arith.subf %p, %oh : f32
      %sc = arith.divf %dv, %nv : f32
      %gs = arith.mulf %gr, %sc : f32
      %keep = arith.cmpi ne, %tv, %ign : i32
      %o = arith.select %keep, %gs, %zero : f32
      coda.yield %o : f32
    }
    coda.yield %g : !coda.tile<67x200xf32>
  }
  func.return %loss, %dlogits, %h, %rstd, %lse, %count : tensor<f32>, tensor<67x200xbf16>, tensor<67x96xbf16>, tensor<67xf32>, tensor<67xf32>, tensor<f32>
}
