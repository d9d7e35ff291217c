// RUN: coda-opt %s -t 'io-report{constants="%S/Inputs/test_gpu.json"}' | filecheck %s

// A coda program (what nn-to-coda emits for out-proj + residual + RMSNorm statistics):
// report rows for a GEMM with a pinned config and for the fold. Hand count (bf16 = 2 B):
//   F1: M = 256, N = 512, K = 512, tile 128x128x64, 8 warps, 4 stages
//     reads  y0 256*512*2 = 262144, wo 512*512*2 = 524288, x0 262144, wn 1024    = 1049600
//     writes x1 262144, partials s 256 * (512/128) * 4 = 4096, h 262144          =  528384
//     L2 -> SM: y0 once per column of tiles (4) + wo once per row of tiles (2) + the rest
//       = 1048576 + 1048576 + 262144 + 1024 + 528384 = 2888704
//     GEMM 2*256*512*512 = 134217728 FLOP; epilogue accumulate 1 + sumsq 2 + scale 1 per
//     element = 524288 FLOP; 8 tiles, one wave: 2*128*128*512 / (5e14/132) = 4.43 us, plus the
//     exposed residual load 262144 B / 2e12 + 1 wave * 1 us = 1.13 us, plus the 2 us launch
//     shared memory 4 * (128 + 128) * 64 * 2 = 128 KB; registers: x1 and h stored, 1.5 tiles
//       of 128*128 / 256 threads = 96 + 32 = 128 per thread
//   fold: reads the 4096 B of partials, writes rstd 256*4 = 1024 B. 256 rows are one program
//     (256 rows per program), which gets 1/132 of the bandwidth: 5120 B / (2e12 / 132) =
//     0.34 us, under the 2 us launch: 2.34 us
//   The pinned 128x128 tile leaves SMs idle at this size: the same GEMM plain, at the tile
//   the model's autotuner picks, is predicted at 3.11 us.

// CHECK:      // @f1
// CHECK-NEXT: // program: coda
// CHECK-NEXT: // kernel                 kind         tile                GEMM GF    epi MF   read MB  write MB    HBM MB     L2 MB      AI smem KB regs bound     epi us   time us
// CHECK-NEXT: // F1                     gemm         128x128x64/w8s4       0.134     0.524     1.050     0.528     1.578     2.889    85.4   128.0  128 compute     1.13      7.56
// CHECK-NEXT: // fold:r                 fold         -                     0.000     0.002     0.004     0.001     0.005     0.005     0.3     0.0    - launch      0.00      2.08
// CHECK-NEXT: // total: 2 kernels, GEMM 134217728 FLOP, epilogue 525824 FLOP, HBM 1583104 B unique (1057792 activation, 525312 weight), 1583104 B with re-reads, L2 2893824 B, predicted 9.64 us
// CHECK-NEXT: // program            kernels     HBM MB     act MB  weight MB    time us
// CHECK-NEXT: // this program             2      1.583      1.058      0.525       9.64
// CHECK-NEXT: // plain GEMMs alone (speed of light): 1 kernels, 3.11 us; this program 3.104x

func.func @f1(%y0: tensor<256x512xbf16>, %wo: tensor<512x512xbf16>, %x0: tensor<256x512xbf16>, %wn: tensor<512xbf16>)
    -> (tensor<256x512xbf16>, tensor<256x512xbf16>, tensor<256xf32>) {
  %x1, %s, %h = coda.gemm %y0, %wo transpose_b config #coda.config<bm = 128, bn = 128, bk = 64, warps = 8, stages = 4>
      ins(%x0, %wn : tensor<256x512xbf16>, tensor<512xbf16>) : tensor<256x512xbf16>, tensor<512x512xbf16>
      -> (tensor<256x512xbf16>, !coda.partials<rows, 256, sum>, tensor<256x512xbf16>) attributes {coda.name = "F1"} {
  ^bb0(%acc: !coda.tile<256x512xf32>, %c: tensor<256x512xbf16>, %w: tensor<512xbf16>):
    %t = coda.accumulate %acc, %c : !coda.tile<256x512xf32>, tensor<256x512xbf16>
    %p = coda.reduce sumsq %t dim 1 : !coda.tile<256x512xf32> -> !coda.partials<rows, 256, sum>
    %u = coda.scale %t, %w cols : !coda.tile<256x512xf32>, tensor<512xbf16>
    coda.yield %t, %p, %u : !coda.tile<256x512xf32>, !coda.partials<rows, 256, sum>, !coda.tile<256x512xf32>
  }
  %r = coda.fold %s : !coda.partials<rows, 256, sum> -> tensor<256xf32> {
  ^bb0(%v: f32):
    %k = arith.constant 0.001953125 : f32
    %e = arith.constant 1.0e-06 : f32
    %a = arith.mulf %v, %k : f32
    %b = arith.addf %a, %e : f32
    %c = math.rsqrt %b : f32
    coda.yield %c : f32
  }
  func.return %x1, %h, %r : tensor<256x512xbf16>, tensor<256x512xbf16>, tensor<256xf32>
}
