// RUN: coda-opt %s -t io-report | filecheck %s
// RUN: coda-opt %s -t 'io-report{gpu=h200}' | filecheck %s --check-prefix=H200

// The LLaMA-3-8B block forward (M = 8192, D = 4096, F = 14336, QKV 6144, bf16), unfused
// (each nn op one kernel) and compiled by nn-to-coda. Bytes do not depend on the GPU
// constants; times do, so only their presence is checked. Hand count of the unfused
// program (tests/analysis/test_io_model.py): activations 40.5 E + 32 KB (positions) =
// 2717941760 B (E = 8192*4096*2); weights wo + wgu + wd + wqkv = 436207616 B + two norm
// weights of 8 KB = 436224000 B; total 3154165760 B. GEMM FLOPs 2*8192*(4096*4096 +
// 28672*4096 + 4096*14336 + 6144*4096) = 3573412790272.
// The compiled forward moves at most 0.45x the unfused activation bytes (17.5 E: 0.433x).

// CHECK:      // @llama_block
// CHECK-NEXT: // program: nn, one kernel per op (eager)
// CHECK:      // a                      gemm         128x256x64/w8s3     274.878
// CHECK:      // r                      nn.rope
// CHECK-NEXT: // total: 10 kernels, GEMM 3573412790272 FLOP, {{.*}}, HBM 3154165760 B unique (2717941760 activation, 436224000 weight)
// CHECK:      // compiled by 'nn-to-coda'
// CHECK:      // compiled/unfused: activation bytes 0.4{{[0-4][0-9]*}}x
// The compiled block is predicted within 5% of its plain GEMMs (PERFORMANCE.md's bar).
// CHECK-NEXT: // plain GEMMs alone (speed of light): 4 kernels, {{.*}} us; unfused nn 1.{{[0-9]+}}x, compiled coda 1.0{{[0-4][0-9]}}x

// H200:      // io-report on h200
// H200:      // compiled/unfused: activation bytes 0.4{{[0-4][0-9]*}}x

func.func @llama_block(%x0: tensor<8192x4096xbf16>, %y0: tensor<8192x4096xbf16>, %wo: tensor<4096x4096xbf16>,
                       %wn0: tensor<4096xbf16>, %wgu: tensor<28672x4096xbf16>, %wd: tensor<4096x14336xbf16>,
                       %wn1: tensor<4096xbf16>, %wqkv: tensor<6144x4096xbf16>, %pos: tensor<8192xi32>)
    -> (tensor<8192x4096xbf16>, tensor<8192x6144xbf16>) {
  %a = "nn.linear"(%y0, %wo) : (tensor<8192x4096xbf16>, tensor<4096x4096xbf16>) -> tensor<8192x4096xbf16>
  %x1 = "nn.add"(%x0, %a) : (tensor<8192x4096xbf16>, tensor<8192x4096xbf16>) -> tensor<8192x4096xbf16>
  %h1 = "nn.rms_norm"(%x1, %wn0) <{eps = 1.0e-05 : f32}> : (tensor<8192x4096xbf16>, tensor<4096xbf16>) -> tensor<8192x4096xbf16>
  %z = "nn.linear"(%h1, %wgu) : (tensor<8192x4096xbf16>, tensor<28672x4096xbf16>) -> tensor<8192x28672xbf16>
  %g = "nn.swiglu"(%z) : (tensor<8192x28672xbf16>) -> tensor<8192x14336xbf16>
  %d = "nn.linear"(%g, %wd) : (tensor<8192x14336xbf16>, tensor<4096x14336xbf16>) -> tensor<8192x4096xbf16>
  %x2 = "nn.add"(%x1, %d) : (tensor<8192x4096xbf16>, tensor<8192x4096xbf16>) -> tensor<8192x4096xbf16>
  %h2 = "nn.rms_norm"(%x2, %wn1) <{eps = 1.0e-05 : f32}> : (tensor<8192x4096xbf16>, tensor<4096xbf16>) -> tensor<8192x4096xbf16>
  %q = "nn.linear"(%h2, %wqkv) : (tensor<8192x4096xbf16>, tensor<6144x4096xbf16>) -> tensor<8192x6144xbf16>
  %r = "nn.rope"(%q, %pos) <{head_dim = 128 : i64, rotary_heads = 40 : i64, theta = 500000.0 : f32, style = "half"}> : (tensor<8192x6144xbf16>, tensor<8192xi32>) -> tensor<8192x6144xbf16>
  func.return %x2, %r : tensor<8192x4096xbf16>, tensor<8192x6144xbf16>
}
