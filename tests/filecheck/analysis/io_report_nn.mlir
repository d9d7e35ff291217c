// RUN: coda-opt %s -t 'io-report{pipeline="" constants="%S/Inputs/test_gpu.json"}' | filecheck %s

// The unfused program: each nn op one kernel that reads each input once and writes its
// output once. Hand count (M = 2048, bf16 = 2 B), with the round constants of
// Inputs/test_gpu.json (2 TB/s, 8 TB/s L2, 500 TFLOP/s, 2 us launch):
//   z = linear(x, w):  reads x 2048*128*2 = 524288 + w 512*128*2 = 131072, writes 2048*512*2 = 2097152
//                      GEMM 2*2048*512*128 = 268435456 FLOP. The model's autotuner picks
//                      128x128 (64 tiles, one wave: 2*128*128*128 / (5e14/132) = 1.11 us;
//                      128x256 would need 2.21 us); L2 -> SM: x once per column of tiles (4),
//                      w once per row of tiles (16), z once = 2097152 * 3 = 6291456 B (0.79 us);
//                      HBM 2752512 B / 2e12 = 1.38 us: all under the 2 us launch -> 3.38 us
//   g = swiglu(z):     reads 2097152, writes 2048*256*2 = 1048576: 1.57 us < the 2 us launch -> 3.57 us
//   (the speed of light, the GEMM alone, is 3.38 us)
//   h = rms_norm(g):   reads 1048576 + wn 512, writes 1048576
//   y = add(h, b):     reads 1048576 + b 512, writes 1048576
//   total 10093568 B, of which weights 131072 + 512 + 512 = 132096 B.

// CHECK:      // io-report on h100: hbm 2.00 TB/s, l2 8.0 TB/s, bf16 500 TFLOP/s, launch 2.0 us (round test constants)
// CHECK-NEXT: // @mlp
// CHECK-NEXT: // program: nn, one kernel per op (eager)
// CHECK-NEXT: // kernel                 kind         tile                GEMM GF    epi MF   read MB  write MB    HBM MB     L2 MB      AI smem KB regs bound     epi us   time us
// CHECK-NEXT: // z                      gemm         128x128x64/w8s4       0.268     0.000     0.655     2.097     2.753     6.291    97.5   128.0   96 launch      0.00      3.38
// CHECK-NEXT: // g                      nn.swiglu    -                     0.000     2.621     2.097     1.049     3.146     3.146     0.8     0.0    - launch      0.00      3.57
// CHECK-NEXT: // h                      nn.rms_norm  -                     0.000     2.097     1.049     1.049     2.098     2.098     1.0     0.0    - launch      0.00      3.05
// CHECK-NEXT: // y                      nn.add       -                     0.000     0.524     1.049     1.049     2.098     2.098     0.2     0.0    - launch      0.00      3.05
// CHECK-NEXT: // total: 4 kernels, GEMM 268435456 FLOP, epilogue 5242880 FLOP, HBM 10093568 B unique (9961472 activation, 132096 weight), 10093568 B with re-reads, L2 13632512 B, predicted 13.05 us
// CHECK-NEXT: // compiled: not shown (no pipeline given)
// CHECK-NEXT: // program            kernels     HBM MB     act MB  weight MB    time us
// CHECK-NEXT: // unfused nn               4     10.094      9.961      0.132      13.05
// CHECK-NEXT: // plain GEMMs alone (speed of light): 1 kernels, 3.38 us; unfused nn 3.864x

func.func @mlp(%x: tensor<2048x128xbf16>, %w: tensor<512x128xbf16>, %wn: tensor<256xbf16>, %b: tensor<256xbf16>) -> tensor<2048x256xbf16> {
  %z = "nn.linear"(%x, %w) : (tensor<2048x128xbf16>, tensor<512x128xbf16>) -> tensor<2048x512xbf16>
  %g = "nn.swiglu"(%z) : (tensor<2048x512xbf16>) -> tensor<2048x256xbf16>
  %h = "nn.rms_norm"(%g, %wn) <{eps = 1.0e-06 : f32}> : (tensor<2048x256xbf16>, tensor<256xbf16>) -> tensor<2048x256xbf16>
  %y = "nn.add"(%h, %b) : (tensor<2048x256xbf16>, tensor<256xbf16>) -> tensor<2048x256xbf16>
  func.return %y : tensor<2048x256xbf16>
}
