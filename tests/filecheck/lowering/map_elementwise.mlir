// RUN: coda-opt %s -t triton | filecheck %s
// coda.map bodies become Triton expressions on whole tiles; coda.elementwise is a tile loop
// without a mainloop.

func.func @act(%x: tensor<37x50xf16>, %v: tensor<50xf32>) -> (tensor<37x50xf16>, tensor<37x50xf32>) {
  %y, %z = coda.elementwise [37, 50] ins(%x, %v : tensor<37x50xf16>, tensor<50xf32>) -> (tensor<37x50xf16>, tensor<37x50xf32>) {
  ^bb0(%xi: tensor<37x50xf16>, %vi: tensor<50xf32>):
    %t = coda.load %xi : tensor<37x50xf16> -> !coda.tile<37x50xf32>
    %u = coda.shift %t, %vi cols : !coda.tile<37x50xf32>, tensor<50xf32>
    %m:2 = coda.map %u : (!coda.tile<37x50xf32>) -> (!coda.tile<37x50xf32>, !coda.tile<37x50xf32>) {
    ^bb0(%a: f32):
      %half = arith.constant 0.5 : f32
      %one = arith.constant 1.0 : f32
      %ninf = arith.constant 0xFF800000 : f32
      %c = arith.constant 0.70710678 : f32
      %s = arith.mulf %a, %c : f32
      %e = math.erf %s : f32
      %e1 = arith.addf %e, %one : f32
      %h = arith.mulf %a, %half : f32
      %g = arith.mulf %h, %e1 : f32
      %th = math.tanh %a : f32
      %p = math.powf %a, %half : f32
      %r = math.rsqrt %a : f32
      %q = math.sqrt %a : f32
      %mx = arith.maximumf %th, %p : f32
      %pos = arith.cmpf ogt, %a, %one : f32
      %sel = arith.select %pos, %mx, %ninf : f32
      %w = arith.addf %r, %q : f32
      %w2 = arith.addf %w, %sel : f32
      coda.yield %g, %one : f32, f32
    }
    coda.yield %m#0, %m#1 : !coda.tile<37x50xf32>, !coda.tile<37x50xf32>
  }
  func.return %y, %z : tensor<37x50xf16>, tensor<37x50xf32>
}

// CHECK-LABEL: def _act_k0_elementwise(xi_ptr, vi_ptr, y_ptr, z_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
// CHECK-NEXT: pid = tl.program_id(0)
// CHECK-NEXT: num_pid_n = tl.cdiv(N, BN)
// CHECK-NEXT: pid_m = pid // num_pid_n
// CHECK-NEXT: pid_n = pid % num_pid_n
// CHECK-NEXT: offs_m = pid_m * BM + tl.arange(0, BM)
// CHECK-NEXT: offs_n = pid_n * BN + tl.arange(0, BN)
// CHECK-NEXT: mask_m = offs_m < M
// CHECK-NEXT: mask_n = offs_n < N
// CHECK:      t_t = tl.load(xi_ptr + rows64[:, None] * 50 + offs_n[None, :], mask=mask_mn, other=0).to(tl.float32)
// CHECK:      t_u = t_t + tl.load(vi_ptr + offs_n, mask=mask_n, other=0)[None, :]
// CHECK:      # coda.map
// CHECK-NEXT: s = t_u * {{0.707106[0-9]+}}
// CHECK-NEXT: s0 = tl.erf(s)
// CHECK-NEXT: s1 = s0 + 1.0
// CHECK-NEXT: s2 = t_u * 0.5
// CHECK-NEXT: t_m = s2 * s1
// CHECK-NEXT: s3 = _coda_tanh(t_u)
// CHECK-NEXT: s4 = _coda_pow(t_u, 0.5)
// CHECK-NEXT: s5 = tl.rsqrt(t_u)
// CHECK-NEXT: s6 = tl.sqrt_rn(t_u)
// CHECK-NEXT: s7 = tl.maximum(s3, s4)
// CHECK-NEXT: s8 = t_u > 1.0
// CHECK-NEXT: s9 = tl.where(s8, s7, -float("inf"))
// CHECK-NEXT: s10 = s5 + s6
// CHECK-NEXT: s11 = s10 + s9
// A constant result is materialised as a full tile.
// CHECK-NEXT: t_m0 = tl.full((BM, BN), 1.0, tl.float32)
// CHECK-NEXT: tl.store(y_ptr + rows64[:, None] * 50 + offs_n[None, :], t_m.to(tl.float16), mask=mask_mn)
// CHECK-NEXT: tl.store(z_ptr + rows64[:, None] * 50 + offs_n[None, :], t_m0, mask=mask_mn)

// CHECK:      def act(x, v):
// CHECK:      _cfg, _e = _rt.launch_elementwise(_act_k0_elementwise, lambda _cfg: (x, v, torch.empty((37, 50), dtype=torch.float16, device=_dev), torch.empty((37, 50), dtype=torch.float32, device=_dev)), M=37, N=50, bn_multiple_of=1)
// CHECK-NEXT: y, z = _e[2:]
// CHECK-NEXT: return (y, z)
