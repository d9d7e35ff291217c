// RUN: coda-opt %s -t 'fusion-plan{constants="%S/Inputs/test_gpu.json"}' | filecheck %s
// RUN: coda-opt %s -t 'fusion-plan{format=svg}' | filecheck %s --check-prefix=SVG
// RUN: not coda-opt %s -t 'fusion-plan{format=png}' 2>&1 | filecheck %s --check-prefix=BAD
// RUN: coda-opt %s -t 'fusion-plan{format=text}' | filecheck %s --check-prefix=TEXT
// RUN: coda-opt %S/../../../examples/llama_block.mlir -t 'fusion-plan{format=text}' 2>&1 | filecheck %s --check-prefix=LLAMA

// SVG with Graphviz installed, else the DOT text after a note.
// SVG: {{<svg|// Graphviz 'dot' was not found: printing DOT instead of SVG}}
// BAD: coda-opt: error: fusion-plan format must be dot, svg or text, got 'png'

// The short text summary (issue 34: the main job never said what was fused into what): one
// line per kernel with the nn ops it runs, no GPU costs; no remarks without --remarks.
// TEXT:      // fusion plan: as written (input has no nn ops)
// TEXT-NEXT: @f1: 2 kernels
// TEXT-NEXT:   F1      gemm         nn.linear@a + nn.add@x1 + nn.rms_norm.stats@h1 (partial reduction) + nn.rms_norm.prescale@h1 (aux store x*w)
// TEXT-NEXT:   fold:r  fold         nn.rms_norm.rstd@h1 (fold)
// LLAMA-NOT: remark
// LLAMA:      // fusion plan: compiled by 'nn-to-coda'
// LLAMA-NEXT: @llama_block: 7 kernels in 6 launches
// LLAMA-NEXT:   gemm:x1 {{ +}}gemm         nn.linear + nn.add + nn.rms_norm.stats (partial reduction) + nn.rms_norm.prescale (aux store x*w)
// LLAMA-NEXT:   fold:x1.folded {{ +}}fold         nn.rms_norm.rstd (fold)
// LLAMA-NEXT:   gemm:g {{ +}}gemm         deferred row scale (rstd) + nn.linear + nn.swiglu
// LLAMA:        gemm:r {{ +}}gemm         nn.linear + nn.rope
// LLAMA-NOT: remark

// The fusion plan of a hand-written coda program: one cluster per kernel with the nn ops
// named by `coda.origin` (a "+"-joined string or an array), partials as dashed blue edges
// with their bytes (256 rows x 4 column tiles x 4 B = 4.1 KB), results as double octagons.

// CHECK:      digraph fusion_plan {
// CHECK:        label="fusion plan: as written (input has no nn ops) (h100)";
// CHECK:        subgraph cluster_f0 {
// CHECK-NEXT:     label="@f1: 2 kernels, 1.6 MB moved (1.1 MB activations), predicted 9.6 us";
// CHECK:          subgraph cluster_f0_k0 {
// CHECK-NEXT:       label="F1: gemm 128x128, 7.6 us (compute)";
// CHECK-NEXT:       f0_k0_o0 [label="nn.linear@a", style="filled", fillcolor="white"];
// CHECK-NEXT:       f0_k0_o1 [label="nn.add@x1", style="filled", fillcolor="white"];
// CHECK-NEXT:       f0_k0_o2 [label="nn.rms_norm.stats@h1\n(partial reduction)", style="dashed", color="blue"];
// CHECK-NEXT:       f0_k0_o3 [label="nn.rms_norm.prescale@h1\n(aux store x*w)", style="filled", fillcolor="lightyellow"];
// CHECK:          subgraph cluster_f0_k1 {
// CHECK-NEXT:       label="fold:r: fold, 2.1 us (launch)";
// CHECK-NEXT:       f0_k1_o0 [label="nn.rms_norm.rstd@h1\n(fold)", style="filled", fillcolor="gray90"];
// CHECK:          "f0_in_wo" [shape=ellipse, label="wo bf16[512x512]", color="gray50", fontcolor="gray40"];
// CHECK:          "f0_in_y0" -> f0_k0_o0 [lhead=cluster_f0_k0, label="y0 bf16[256x512]\n262.1 KB"];
// CHECK:          f0_k0_o3 -> f0_k1_o0 [lhead=cluster_f0_k1, style="dashed", color="blue", label="s f32[256x4]\n4.1 KB\npartials", ltail=cluster_f0_k0];
// CHECK:          f0_out2 [shape=doubleoctagon, label="return r f32[256]"];
// CHECK-NEXT:     f0_k1_o0 -> f0_out2 [ltail=cluster_f0_k1, label="1.0 KB"];
// CHECK-NEXT:   }
// CHECK-NEXT: }

func.func @f1(%y0: tensor<256x512xbf16>, %wo: tensor<512x512xbf16>, %x0: tensor<256x512xbf16>, %wn: tensor<512xbf16>)
    -> (tensor<256x512xbf16>, tensor<256x512xbf16>, tensor<256xf32>) {
  %x1, %s, %h = coda.gemm %y0, %wo transpose_b config #coda.config<bm = 128, bn = 128, bk = 64, warps = 8, stages = 4>
      ins(%x0, %wn : tensor<256x512xbf16>, tensor<512xbf16>) : tensor<256x512xbf16>, tensor<512x512xbf16>
      -> (tensor<256x512xbf16>, !coda.partials<rows, 256, sum>, tensor<256x512xbf16>) attributes {coda.name = "F1", coda.origin = "nn.linear@a+nn.add@x1+nn.rms_norm.stats@h1+nn.rms_norm.prescale@h1"} {
  ^bb0(%acc: !coda.tile<256x512xf32>, %c: tensor<256x512xbf16>, %w: tensor<512xbf16>):
    %t = coda.accumulate %acc, %c : !coda.tile<256x512xf32>, tensor<256x512xbf16>
    %p = coda.reduce sumsq %t dim 1 : !coda.tile<256x512xf32> -> !coda.partials<rows, 256, sum>
    %u = coda.scale %t, %w cols : !coda.tile<256x512xf32>, tensor<512xbf16>
    coda.yield %t, %p, %u : !coda.tile<256x512xf32>, !coda.partials<rows, 256, sum>, !coda.tile<256x512xf32>
  }
  %r = coda.fold %s : !coda.partials<rows, 256, sum> -> tensor<256xf32> attributes {coda.origin = ["nn.rms_norm.rstd@h1"]} {
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
