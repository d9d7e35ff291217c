// RUN: coda-opt %s --remarks --split-input-file -p 'nn-autodiff{memory-budget-mib=256}' 2>&1 | filecheck %s
// RUN: coda-opt %s --split-input-file -p 'nn-autodiff{memory-budget-mib=4096}' 2>&1 | filecheck %s --check-prefix=STORED
// RUN: not coda-opt %s --split-input-file -p 'nn-autodiff{logits-chunk=10}' 2>&1 | filecheck %s --check-prefix=BAD

// The LLaMA-3.2-1B LM head with its loss (8192 tokens, vocabulary 128256): the stored logits
// would take 2004 MiB, over the default memory budget (256 MiB), so nn-autodiff records the
// chunked backward (16384 vocabulary columns per chunk: an [8192 x 16384] bf16 gradient is the
// budget), the forward saves only the per-row lse (no logits), and the final norm is applied
// (stats_in_producer_epilogue = false) so that the forward's logits are the backward's.

// CHECK:       remark: 'nn.cross_entropy' op logits not stored: the logits [8192x128256] (2004 MiB stored for the backward) exceed the memory budget (256 MiB): the backward recomputes them in 8 chunks of 16384 vocabulary columns
// CHECK-LABEL: func.func @lm_head_fwd
// CHECK:         nn.rms_norm %x, %wn {eps = {{.*}}, stats_in_producer_epilogue = false}
// CHECK:         %loss, %lse_logits = nn.cross_entropy_fwd %logits, %t
// CHECK:         func.return %loss, %x, %wn, %w, %t, %rstd_x, %lse_logits : tensor<f32>, tensor<8192x2048xbf16>, tensor<2048xbf16>, tensor<128256x2048xbf16>, tensor<8192xi32>, tensor<8192xf32>, tensor<8192xf32>
// CHECK-LABEL: func.func @lm_head_bwd
// CHECK:         %h = nn.rms_norm_apply %x, %wn, %rstd_x
// CHECK-NEXT:    %0, %1 = nn.linear_cross_entropy_grad %h, %w, %t, %dloss, %lse_logits {ignore_index = -100 : i64, reduction = "mean", chunk = 16384 : i64}
// CHECK-NEXT:    nn.rms_norm_grad %0, %x, %wn, %rstd_x :

// STORED-LABEL: func.func @lm_head_bwd
// STORED:         nn.cross_entropy_grad %logits
// STORED-NOT:     nn.linear_cross_entropy_grad

// BAD: pass option logits-chunk must be 0 or a positive multiple of 16, got 10
func.func @lm_head(%x: tensor<8192x2048xbf16>, %wn: tensor<2048xbf16>, %w: tensor<128256x2048xbf16>, %t: tensor<8192xi32>) -> tensor<f32> {
  %h = nn.rms_norm %x, %wn {eps = 1.0e-05 : f32} : tensor<8192x2048xbf16>, tensor<2048xbf16> -> tensor<8192x2048xbf16>
  %logits = nn.linear %h, %w : tensor<8192x2048xbf16>, tensor<128256x2048xbf16> -> tensor<8192x128256xbf16>
  %loss = nn.cross_entropy %logits, %t {ignore_index = -100 : i64, reduction = "mean"} : tensor<8192x128256xbf16>, tensor<8192xi32> -> tensor<f32>
  func.return %loss : tensor<f32>
}
