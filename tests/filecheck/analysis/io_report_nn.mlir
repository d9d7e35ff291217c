// RUN: coda-opt %s -t 'io-report{pipeline="" constants="%S/Inputs/test_gpu.json"}' | filecheck %s

// The unfused program: each nn op one kernel that reads each input once and writes its
// output once. Hand count (M = 2048, bf16 = 2 B), with the round constants of
// Inputs/test_gpu.json (2 TB/s, 8 TB/s L2, 500 TFLOP/s, 2 us launch):
//   z = linear(x, w):  reads x 2048*128*2 = 524288 + w 512*128*2 = 131072, writes 2048*512*2 = 2097152
//                      L2 -> SM: x once per column of tiles (2), w once per row of tiles (16), z once
//                        = 1048576 + 2097152 + 2097152 = 5242880
//                      GEMM 2*2048*512*128 = 268435456 FLOP; 16x2 = 32 tiles of 128x256, one wave:
//                      2*128*256*128 / (5e14 / 132 SMs) = 2.21 us (compute) + 2 us launch = 4.21 us
//   g = swiglu(z):     reads 2097152, writes 2048*256*2 = 1048576: 1.57 us < the 2 us launch -> 3.57 us
//   h = rms_norm(g):   reads 1048576 + wn 512, writes 1048576
//   y = add(h, b):     reads 1048576 + b 512, writes 1048576
//   total 10093568 B, of which weights 131072 + 512 + 512 = 132096 B.

// CHECK:      // io-report on h100: hbm 2.00 TB/s, l2 8.0 TB/s, bf16 500 TFLOP/s, launch 2.0 us (round test constants)
// CHECK-NEXT: // @mlp
// CHECK-NEXT: // program: nn, one kernel per op (eager)
// CHECK-NEXT: // kernel                 kind         tile                GEMM GF    epi MF   read MB  write MB    HBM MB     L2 MB      AI smem KB regs bound      time us
// CHECK-NEXT: // z                      gemm         128x256x64/w8s3       0.268     0.000     0.655     2.097     2.753     5.243    97.5   144.0  160 compute       4.21
// CHECK-NEXT: // g                      nn.swiglu    -                     0.000     2.621     2.097     1.049     3.146     3.146     0.8     0.0    - launch        3.57
// CHECK-NEXT: // h                      nn.rms_norm  -                     0.000     2.097     1.049     1.049     2.098     2.098     1.0     0.0    - launch        3.05
// CHECK-NEXT: // y                      nn.add       -                     0.000     0.524     1.049     1.049     2.098     2.098     0.2     0.0    - launch        3.05
// CHECK-NEXT: // total: 4 kernels, GEMM 268435456 FLOP, epilogue 5242880 FLOP, HBM 10093568 B unique (9961472 activation, 132096 weight), 10093568 B with re-reads, L2 12583936 B, predicted 13.89 us
// CHECK-NEXT: // compiled: not shown (no pipeline given)
// CHECK-NEXT: // program            kernels     HBM MB     act MB  weight MB    time us
// CHECK-NEXT: // unfused nn               4     10.094      9.961      0.132      13.89

func.func @mlp(%x: tensor<2048x128xbf16>, %w: tensor<512x128xbf16>, %wn: tensor<256xbf16>, %b: tensor<256xbf16>) -> tensor<2048x256xbf16> {
  %z = "nn.linear"(%x, %w) : (tensor<2048x128xbf16>, tensor<512x128xbf16>) -> tensor<2048x512xbf16>
  %g = "nn.swiglu"(%z) : (tensor<2048x512xbf16>) -> tensor<2048x256xbf16>
  %h = "nn.rms_norm"(%g, %wn) <{eps = 1.0e-06 : f32}> : (tensor<2048x256xbf16>, tensor<256xbf16>) -> tensor<2048x256xbf16>
  %y = "nn.add"(%h, %b) : (tensor<2048x256xbf16>, tensor<256xbf16>) -> tensor<2048x256xbf16>
  func.return %y : tensor<2048x256xbf16>
}
