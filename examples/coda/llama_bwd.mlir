// LLaMA block backward as 3 GEMM-epilogue kernels + 1 elementwise kernel + 5 plain GEMMs + 4 folds
// (EPILOGUES.md "Backward rewrites", coda_digest B1-B8). Same shapes as llama_fwd: M = 8192, D = 4096,
// F = 14336, hd = 128, QKV = 6144 (40 rotary heads), theta = 500000.0, bf16.
//
// Inputs: the upstream gradients, then what llama_fwd saved, then the weights (user's layouts):
//   dqkv [M, QKV]  gradient of llama_fwd's qkv      dx2  [M, D]  gradient of llama_fwd's x2
//   qkv  [M, QKV]  llama_fwd's qkv (post-RoPE)      x1, x2 [M, D]  llama_fwd's x1, x2
//   z1   [M, 2F]   llama_fwd's z1 ([gate | up])     rstd1, rstd2 [M] f32   llama_fwd's rstds
//   y0   [M, D]    attention output                  pos  [M] i32
//   wo [D, D], wgu [2F, D] ([gate | up] rows), wd [D, F], wqkv [QKV, D], wn0 [D], wn1 [D]
// Results (gradients of the nn llama_block's loss w.r.t. its inputs, all bf16):
//   dx0 [M, D], dy0 [M, D], dwo [D, D], dwgu [2F, D] ([gate | up] rows), dwd [D, F],
//   dwqkv [QKV, D], dwn0 [D], dwn1 [D]
// Kernels (s = (1/D) sum_k z_k dz_k is the ZdZ trick: the norm backward needs no pass over q):
//   B1  elementwise [M, QKV]: dz2 = R(-angle) dqkv (pair_map stride hd/2);
//       partials sum(qkv * dqkv) (= sum(z * dz2): R is orthogonal); fold zdz2 = that / D
//   B2  dxa = dx2 + rstd2 * (q * wn1 - n * zdz2), q = dz2 @ wqkv, n = x2 * rstd2;
//       xo2 = n * wn1; column partials of sum_rows(q * n); fold dwn1
//   B3  dwqkv = dz2.T @ xo2
//   B4  dy = dxa @ wd; interleave_wide F: the 2F-wide z1 / dz1 are read and written at perm(c), so
//       the 1 -> 2 pair_map sees (gate i, up i) adjacent: dgate = dy * up * s (1 + gate (1 - s)),
//       dup = dy * silu(gate), s = sigmoid(gate); y1 = silu(gate) * up recomputed (for dwd);
//       partials sum(gate * dgate + up * dup); fold zdz1 = that / D
//   B5  dwd = dxa.T @ y1
//   B6  dx0 = dxa + rstd1 * (q * wn0 - n * zdz1), q = dz1 @ wgu, n = x1 * rstd1; xo1 = n * wn0;
//       column partials; fold dwn0
//   B7  dwgu = dz1.T @ xo1
//   B8  dy0 = dx0 @ wo;  dwo = dx0.T @ y0
func.func @llama_bwd(%dqkv: tensor<8192x6144xbf16>, %dx2: tensor<8192x4096xbf16>, %qkv: tensor<8192x6144xbf16>, %x1: tensor<8192x4096xbf16>, %x2: tensor<8192x4096xbf16>, %z1: tensor<8192x28672xbf16>,
                     %rstd1: tensor<8192xf32>, %rstd2: tensor<8192xf32>, %y0: tensor<8192x4096xbf16>, %pos: tensor<8192xi32>, %wo: tensor<4096x4096xbf16>,
                     %wgu: tensor<28672x4096xbf16>, %wd: tensor<4096x14336xbf16>, %wqkv: tensor<6144x4096xbf16>, %wn0: tensor<4096xbf16>, %wn1: tensor<4096xbf16>)
    -> (tensor<8192x4096xbf16>, tensor<8192x4096xbf16>, tensor<4096x4096xbf16>, tensor<28672x4096xbf16>, tensor<4096x14336xbf16>, tensor<6144x4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>) {
  // B1: RoPE backward (rotate by -angle) and the ZdZ partials of the QKV projection
  %dz2, %zp2 = coda.elementwise [8192, 6144] ins(%qkv, %dqkv, %pos : tensor<8192x6144xbf16>, tensor<8192x6144xbf16>, tensor<8192xi32>) -> (tensor<8192x6144xbf16>, !coda.partials<rows, 8192, sum>) {
  ^bb0(%y: tensor<8192x6144xbf16>, %dy: tensor<8192x6144xbf16>, %p: tensor<8192xi32>):
    %yt = coda.load %y : tensor<8192x6144xbf16> -> !coda.tile<8192x6144xf32>
    %dyt = coda.load %dy : tensor<8192x6144xbf16> -> !coda.tile<8192x6144xf32>
    %pt = coda.broadcast %p rows : tensor<8192xi32> -> !coda.tile<8192x6144xi32>
    %ct = coda.index cols : !coda.tile<8192x6144xi32>
    %dz = coda.pair_map stride 64 %dyt, %pt, %ct : (!coda.tile<8192x6144xf32>, !coda.tile<8192x6144xi32>, !coda.tile<8192x6144xi32>) -> !coda.tile<8192x6144xf32> {
    ^bb0(%ra: f32, %rb: f32, %pa: i32, %pb: i32, %ca: i32, %cb: i32):
      %hd = arith.constant 128 : i32
      %nrot = arith.constant 5120 : i32
      %m2 = arith.constant -2 : i32
      %hdf = arith.constant 128.0 : f32
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
      %o1 = arith.addf %t1, %t2 : f32
      %t3 = arith.mulf %rb, %cos : f32
      %t4 = arith.mulf %ra, %sin : f32
      %o2 = arith.subf %t3, %t4 : f32
      coda.yield %o1, %o2 : f32, f32
    }
    %ydy = coda.map %yt, %dyt : (!coda.tile<8192x6144xf32>, !coda.tile<8192x6144xf32>) -> !coda.tile<8192x6144xf32> {
    ^bb0(%a: f32, %b: f32):
      %o = arith.mulf %a, %b : f32
      coda.yield %o : f32
    }
    %zp = coda.reduce sum %ydy dim 1 : !coda.tile<8192x6144xf32> -> !coda.partials<rows, 8192, sum>
    coda.yield %dz, %zp : !coda.tile<8192x6144xf32>, !coda.partials<rows, 8192, sum>
  }
  %zdz2 = coda.fold %zp2 : !coda.partials<rows, 8192, sum> -> tensor<8192xf32> {
  ^bb0(%zdz: f32):
    %d = arith.constant 4096.0 : f32
    %s = arith.divf %zdz, %d : f32
    coda.yield %s : f32
  }
  // B2: QKV-projection backward + RMSNorm backward (x2) + the residual gradient dx2
  %dxa, %xo2, %dgp1 = coda.gemm %dz2, %wqkv ins(%x2, %rstd2, %zdz2, %wn1, %dx2 : tensor<8192x4096xbf16>, tensor<8192xf32>, tensor<8192xf32>, tensor<4096xbf16>, tensor<8192x4096xbf16>) : tensor<8192x6144xbf16>, tensor<6144x4096xbf16> -> (tensor<8192x4096xbf16>, tensor<8192x4096xbf16>, !coda.partials<cols, 4096, sum>) {
  ^bb0(%acc: !coda.tile<8192x4096xf32>, %x: tensor<8192x4096xbf16>, %r: tensor<8192xf32>, %s: tensor<8192xf32>, %g: tensor<4096xbf16>, %dres: tensor<8192x4096xbf16>):
    %xt = coda.load %x : tensor<8192x4096xbf16> -> !coda.tile<8192x4096xf32>
    %n = coda.scale %xt, %r rows : !coda.tile<8192x4096xf32>, tensor<8192xf32>
    %qg = coda.scale %acc, %g cols : !coda.tile<8192x4096xf32>, tensor<4096xbf16>
    %ns = coda.scale %n, %s rows : !coda.tile<8192x4096xf32>, tensor<8192xf32>
    %diff = coda.map %qg, %ns : (!coda.tile<8192x4096xf32>, !coda.tile<8192x4096xf32>) -> !coda.tile<8192x4096xf32> {
    ^bb0(%a: f32, %b: f32):
      %o = arith.subf %a, %b : f32
      coda.yield %o : f32
    }
    %dxn = coda.scale %diff, %r rows : !coda.tile<8192x4096xf32>, tensor<8192xf32>
    %dx = coda.accumulate %dxn, %dres : !coda.tile<8192x4096xf32>, tensor<8192x4096xbf16>
    %xo = coda.scale %n, %g cols : !coda.tile<8192x4096xf32>, tensor<4096xbf16>
    %qn = coda.map %acc, %n : (!coda.tile<8192x4096xf32>, !coda.tile<8192x4096xf32>) -> !coda.tile<8192x4096xf32> {
    ^bb0(%a: f32, %b: f32):
      %o = arith.mulf %a, %b : f32
      coda.yield %o : f32
    }
    %dg = coda.reduce sum %qn dim 0 : !coda.tile<8192x4096xf32> -> !coda.partials<cols, 4096, sum>
    coda.yield %dx, %xo, %dg : !coda.tile<8192x4096xf32>, !coda.tile<8192x4096xf32>, !coda.partials<cols, 4096, sum>
  }
  %dwn1 = coda.fold %dgp1 : !coda.partials<cols, 4096, sum> -> tensor<4096xbf16> {
  ^bb0(%dg: f32):
    coda.yield %dg : f32
  }
  // B3: QKV weight gradient
  %dwqkv = coda.gemm %dz2, %xo2 transpose_a : tensor<8192x6144xbf16>, tensor<8192x4096xbf16> -> tensor<6144x4096xbf16> {
  ^bb0(%acc: !coda.tile<6144x4096xf32>):
    coda.yield %acc : !coda.tile<6144x4096xf32>
  }
  // B4: down-proj backward + SwiGLU backward (1 -> 2 over the saved z1) + y1 recompute + ZdZ partials
  %dz1, %y1, %zp1 = coda.gemm %dxa, %wd interleave_wide 14336 ins(%z1 : tensor<8192x28672xbf16>) : tensor<8192x4096xbf16>, tensor<4096x14336xbf16> -> (tensor<8192x28672xbf16>, tensor<8192x14336xbf16>, !coda.partials<rows, 8192, sum>) {
  ^bb0(%acc: !coda.tile<8192x14336xf32>, %z: tensor<8192x28672xbf16>):
    %zt = coda.load %z : tensor<8192x28672xbf16> -> !coda.tile<8192x28672xf32>
    %dz, %y, %t = coda.pair_map %acc, %zt : (!coda.tile<8192x14336xf32>, !coda.tile<8192x28672xf32>) -> (!coda.tile<8192x28672xf32>, !coda.tile<8192x14336xf32>, !coda.tile<8192x14336xf32>) {
    ^bb0(%dy: f32, %gate: f32, %up: f32):
      %one = arith.constant 1.0 : f32
      %ng = arith.negf %gate : f32
      %e = math.exp %ng : f32
      %den = arith.addf %one, %e : f32
      %sg = arith.divf %one, %den : f32
      %silu = arith.mulf %gate, %sg : f32
      %du = arith.mulf %dy, %silu : f32
      %oms = arith.subf %one, %sg : f32
      %gs = arith.mulf %gate, %oms : f32
      %fac = arith.addf %one, %gs : f32
      %dyu = arith.mulf %dy, %up : f32
      %dys = arith.mulf %dyu, %sg : f32
      %dg = arith.mulf %dys, %fac : f32
      %yv = arith.mulf %silu, %up : f32
      %zg = arith.mulf %gate, %dg : f32
      %zu = arith.mulf %up, %du : f32
      %zz = arith.addf %zg, %zu : f32
      coda.yield %dg, %du, %yv, %zz : f32, f32, f32, f32
    }
    %zp = coda.reduce sum %t dim 1 : !coda.tile<8192x14336xf32> -> !coda.partials<rows, 8192, sum>
    coda.yield %dz, %y, %zp : !coda.tile<8192x28672xf32>, !coda.tile<8192x14336xf32>, !coda.partials<rows, 8192, sum>
  }
  %zdz1 = coda.fold %zp1 : !coda.partials<rows, 8192, sum> -> tensor<8192xf32> {
  ^bb0(%zdz: f32):
    %d = arith.constant 4096.0 : f32
    %s = arith.divf %zdz, %d : f32
    coda.yield %s : f32
  }
  // B5: down-proj weight gradient
  %dwd = coda.gemm %dxa, %y1 transpose_a : tensor<8192x4096xbf16>, tensor<8192x14336xbf16> -> tensor<4096x14336xbf16> {
  ^bb0(%acc: !coda.tile<4096x14336xf32>):
    coda.yield %acc : !coda.tile<4096x14336xf32>
  }
  // B6: gate/up backward + RMSNorm backward (x1) + the residual gradient dxa
  %dx0, %xo1, %dgp0 = coda.gemm %dz1, %wgu ins(%x1, %rstd1, %zdz1, %wn0, %dxa : tensor<8192x4096xbf16>, tensor<8192xf32>, tensor<8192xf32>, tensor<4096xbf16>, tensor<8192x4096xbf16>) : tensor<8192x28672xbf16>, tensor<28672x4096xbf16> -> (tensor<8192x4096xbf16>, tensor<8192x4096xbf16>, !coda.partials<cols, 4096, sum>) {
  ^bb0(%acc: !coda.tile<8192x4096xf32>, %x: tensor<8192x4096xbf16>, %r: tensor<8192xf32>, %s: tensor<8192xf32>, %g: tensor<4096xbf16>, %dres: tensor<8192x4096xbf16>):
    %xt = coda.load %x : tensor<8192x4096xbf16> -> !coda.tile<8192x4096xf32>
    %n = coda.scale %xt, %r rows : !coda.tile<8192x4096xf32>, tensor<8192xf32>
    %qg = coda.scale %acc, %g cols : !coda.tile<8192x4096xf32>, tensor<4096xbf16>
    %ns = coda.scale %n, %s rows : !coda.tile<8192x4096xf32>, tensor<8192xf32>
    %diff = coda.map %qg, %ns : (!coda.tile<8192x4096xf32>, !coda.tile<8192x4096xf32>) -> !coda.tile<8192x4096xf32> {
    ^bb0(%a: f32, %b: f32):
      %o = arith.subf %a, %b : f32
      coda.yield %o : f32
    }
    %dxn = coda.scale %diff, %r rows : !coda.tile<8192x4096xf32>, tensor<8192xf32>
    %dx = coda.accumulate %dxn, %dres : !coda.tile<8192x4096xf32>, tensor<8192x4096xbf16>
    %xo = coda.scale %n, %g cols : !coda.tile<8192x4096xf32>, tensor<4096xbf16>
    %qn = coda.map %acc, %n : (!coda.tile<8192x4096xf32>, !coda.tile<8192x4096xf32>) -> !coda.tile<8192x4096xf32> {
    ^bb0(%a: f32, %b: f32):
      %o = arith.mulf %a, %b : f32
      coda.yield %o : f32
    }
    %dg = coda.reduce sum %qn dim 0 : !coda.tile<8192x4096xf32> -> !coda.partials<cols, 4096, sum>
    coda.yield %dx, %xo, %dg : !coda.tile<8192x4096xf32>, !coda.tile<8192x4096xf32>, !coda.partials<cols, 4096, sum>
  }
  %dwn0 = coda.fold %dgp0 : !coda.partials<cols, 4096, sum> -> tensor<4096xbf16> {
  ^bb0(%dg: f32):
    coda.yield %dg : f32
  }
  // B7: gate/up weight gradient (rows in the user's [gate | up] layout)
  %dwgu = coda.gemm %dz1, %xo1 transpose_a : tensor<8192x28672xbf16>, tensor<8192x4096xbf16> -> tensor<28672x4096xbf16> {
  ^bb0(%acc: !coda.tile<28672x4096xf32>):
    coda.yield %acc : !coda.tile<28672x4096xf32>
  }
  // B8: out-proj input and weight gradients
  %dy0 = coda.gemm %dx0, %wo : tensor<8192x4096xbf16>, tensor<4096x4096xbf16> -> tensor<8192x4096xbf16> {
  ^bb0(%acc: !coda.tile<8192x4096xf32>):
    coda.yield %acc : !coda.tile<8192x4096xf32>
  }
  %dwo = coda.gemm %dx0, %y0 transpose_a : tensor<8192x4096xbf16>, tensor<8192x4096xbf16> -> tensor<4096x4096xbf16> {
  ^bb0(%acc: !coda.tile<4096x4096xf32>):
    coda.yield %acc : !coda.tile<4096x4096xf32>
  }
  func.return %dx0, %dy0, %dwo, %dwgu, %dwd, %dwqkv, %dwn0, %dwn1 : tensor<8192x4096xbf16>, tensor<8192x4096xbf16>, tensor<4096x4096xbf16>, tensor<28672x4096xbf16>, tensor<4096x14336xbf16>, tensor<6144x4096xbf16>, tensor<4096xbf16>, tensor<4096xbf16>
}
