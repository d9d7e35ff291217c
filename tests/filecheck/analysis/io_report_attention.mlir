// RUN: coda-opt %s -t 'io-report{pipeline="" doc-len=128 constants="%S/Inputs/test_gpu.json"}' | filecheck %s
// RUN: not coda-opt %s -t 'io-report{pipeline="" attention=flash constants="%S/Inputs/test_gpu.json"}' 2>&1 | filecheck %s --check-prefix=FORCED
// RUN: not coda-opt %s -t 'io-report{pipeline="" attention=nope}' 2>&1 | filecheck %s --check-prefix=UNKNOWN

// io-report prices attention with the attention model (coda_ir/analysis/attention_model.py)
// instead of as an opaque memory pass: the tile column names the schedule, the line under the
// table its occupancy, bytes per level and bound. Round constants (Inputs/test_gpu.json; no
// occupancy fields, so the Hopper defaults: 228 KB smem/SM, 64 warps/SM).

// @causal: 1 x 256 tokens, 2 q heads sharing 1 kv head of 64, causal; the runtime's choice on
// Hopper is cuDNN (128 x 128 tiles). Hand count:
//   tiles per head: q block 0 sees k block 0, q block 1 sees k blocks 0-1 -> 3; x 2 heads = 6
//   FLOPs: 4 d per score of a visited tile = 4 * 64 * 6 * 128 * 128 = 25165824 (0.025 GF)
//   reads: Q 256*2*64*2 = 65536, K and V 256*1*64*2 each -> 131072 B; writes: O 65536 + lse 256*2*4 -> 67584 B
//   L2 -> SM: K and V once per tile (2 * 128 * 64 * 2 = 32768) * 6 + Q once + the writes = 329728 B
//   registers: (O 128*64 + S 128*128) fp32 / 256 threads + 32 = 128; producer warpgroup at 24:
//   128 * 256 + 24 * 128 = 35840 of 65536 -> 1 CTA of 12 warps (registers-bound)
// CHECK:      // @causal
// CHECK:      // attn:o {{ +}}attention    cudnn 128x128         0.025 {{.*}} 0.131     0.068     0.199     0.330 {{.*}} 80.0  128 memory
// CHECK-NEXT: //   attn:o: cudnn 128x128 w8+4ps2 fwd: 1 CTA/SM = 12 warps/SM (registers-bound, 128 regs, 80 KB smem/CTA), 6 tiles
// CHECK:      // total: 1 kernels, GEMM 25165824 FLOP, {{.*}} HBM 198656 B unique (198656 activation, 0 weight), 198656 B with re-reads, L2 329728 B
func.func @causal(%qkv: tensor<256x256xbf16>) -> tensor<256x128xbf16> {
  %o = "nn.attention"(%qkv) <{heads = 2 : i64, kv_heads = 1 : i64, head_dim = 64 : i64, seq_len = 256 : i64, causal = true}> : (tensor<256x256xbf16>) -> tensor<256x128xbf16>
  func.return %o : tensor<256x128xbf16>
}

// @grad: the backward (keys outer, 64 x 128 tiles): q blocks of 64 rows, k blocks of 128:
//   k block 0 is seen by q blocks 0-3, k block 1 by q blocks 2-3 -> 6 tiles per head, 12 in all;
//   FLOPs 10 d per score (recomputed QK^T, dO V^T, P^T dO, dS^T Q, dS K) = 10 * 64 * 12 * 64 * 128 = 62914560
// CHECK:      // @grad
// CHECK:      // attn:d {{ +}}attn_grad    cudnn 64x128          0.063
// CHECK-NEXT: //   attn:d: cudnn 64x128 w8+4ps2 bwd: {{.*}} 12 tiles
func.func @grad(%qkv: tensor<256x256xbf16>, %out: tensor<256x128xbf16>, %lse: tensor<512xf32>, %dout: tensor<256x128xbf16>) -> tensor<256x256xbf16> {
  %d = "nn.attention_grad"(%qkv, %out, %lse, %dout) <{heads = 2 : i64, kv_heads = 1 : i64, head_dim = 64 : i64, seq_len = 256 : i64, causal = true}> : (tensor<256x256xbf16>, tensor<256x128xbf16>, tensor<512xf32>, tensor<256x128xbf16>) -> tensor<256x256xbf16>
  func.return %d : tensor<256x256xbf16>
}

// @window_softcap: a window and a softcap run FlexAttention (the runtime's choice), which skips
// the empty 128 x 128 blocks of its BlockMask: with window 128 q block i sees k blocks i-1..i ->
// 1 + 2 + 2 + 2 = 7 mask blocks per head = 14 tiles of 128 x 64, 28 for 2 heads; the softcap's
// tanh doubles the SFU work, which bounds this kernel ("softmax").
// CHECK:      // @window_softcap
// CHECK:      // attn:o {{ +}}attention    flex 128x64 {{.*}} softmax
// CHECK-NEXT: //   attn:o: flex 128x64 w4s3 fwd: {{.*}} 28 tiles
func.func @window_softcap(%qkv: tensor<512x256xbf16>) -> tensor<512x128xbf16> {
  %o = "nn.attention"(%qkv) <{heads = 2 : i64, kv_heads = 1 : i64, head_dim = 64 : i64, seq_len = 512 : i64, causal = true, window = 128 : i64, softcap = 50.0 : f32}> : (tensor<512x256xbf16>) -> tensor<512x128xbf16>
  func.return %o : tensor<512x128xbf16>
}

// @documents: segments run FlexAttention; doc-len=128 prices them as 4 documents of 128 rows:
// each q block sees only its own k block -> 4 mask blocks = 8 tiles per head, 16 in all.
// CHECK:      // @documents
// CHECK:      // attn:o {{ +}}attention    flex 128x64
// CHECK-NEXT: //   attn:o: flex 128x64 w4s3 fwd: {{.*}} 16 tiles
func.func @documents(%qkv: tensor<512x256xbf16>, %seg: tensor<512xi32>) -> tensor<512x128xbf16> {
  %o = "nn.attention"(%qkv, %seg) <{heads = 2 : i64, kv_heads = 1 : i64, head_dim = 64 : i64, seq_len = 512 : i64, causal = true}> : (tensor<512x256xbf16>, tensor<512xi32>) -> tensor<512x128xbf16>
  func.return %o : tensor<512x128xbf16>
}

// @projected: a program with GEMMs and attention is held against the GEMMs alone and against
// its limit, the GEMMs plus the attention (PERFORMANCE.md), which for this program is itself.
// CHECK:      // @projected
// CHECK:      // plain GEMMs alone (speed of light): 1 kernels, [[GEMM:[0-9.]+]] us;
// CHECK-NEXT: // plain GEMMs + attention (the limit): {{[0-9.]+}} us; unfused nn 1.000x
func.func @projected(%x: tensor<256x64xbf16>, %w: tensor<256x64xbf16>) -> tensor<256x128xbf16> {
  %qkv = nn.linear %x, %w : tensor<256x64xbf16>, tensor<256x64xbf16> -> tensor<256x256xbf16>
  %o = "nn.attention"(%qkv) <{heads = 2 : i64, kv_heads = 1 : i64, head_dim = 64 : i64, seq_len = 256 : i64, causal = true}> : (tensor<256x256xbf16>) -> tensor<256x128xbf16>
  func.return %o : tensor<256x128xbf16>
}

// Forcing a backend that cannot run a mask is an error that says which backends can.
// FORCED: coda-opt: error: attention backend 'flash' cannot run softcap, window (backends that can: flex)
// UNKNOWN: coda-opt: error: io-report attention must be one of cudnn, flash, flex, varlen, materialized (or absent: the runtime's choice), got 'nope'
