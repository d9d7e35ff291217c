// RUN: CODA_ROUNDTRIP
// RUN: CODA_GENERIC_ROUNDTRIP

// NN_DIALECT.md's example, the non-attention part of a LLaMA block (attention output
// projection of layer l to the packed QKV projection of layer l+1), with concrete shapes:
// M = 64 tokens, D = 128, F = 256, head_dim 32 with 4 q heads and 2 k/v heads (Q = 256,
// rotary on the 4 + 2 q and k heads), written in the generic form outside tests use.

func.func @llama_block(%x0: tensor<64x128xbf16>, %y0: tensor<64x128xbf16>, %wo: tensor<128x128xbf16>, %wn0: tensor<128xbf16>, %wgu: tensor<512x128xbf16>, %wd: tensor<128x256xbf16>, %wn1: tensor<128xbf16>, %wqkv: tensor<256x128xbf16>, %pos: tensor<64xi32>) -> (tensor<64x128xbf16>, tensor<64x256xbf16>) {
  %a = "nn.linear"(%y0, %wo) : (tensor<64x128xbf16>, tensor<128x128xbf16>) -> tensor<64x128xbf16>
  %x1 = "nn.add"(%x0, %a) : (tensor<64x128xbf16>, tensor<64x128xbf16>) -> tensor<64x128xbf16>
  %h1 = "nn.rms_norm"(%x1, %wn0) <{eps = 1.0e-05 : f32}> : (tensor<64x128xbf16>, tensor<128xbf16>) -> tensor<64x128xbf16>
  %z = "nn.linear"(%h1, %wgu) : (tensor<64x128xbf16>, tensor<512x128xbf16>) -> tensor<64x512xbf16>
  %g = "nn.swiglu"(%z) : (tensor<64x512xbf16>) -> tensor<64x256xbf16>
  %d = "nn.linear"(%g, %wd) : (tensor<64x256xbf16>, tensor<128x256xbf16>) -> tensor<64x128xbf16>
  %x2 = "nn.add"(%x1, %d) : (tensor<64x128xbf16>, tensor<64x128xbf16>) -> tensor<64x128xbf16>
  %h2 = "nn.rms_norm"(%x2, %wn1) <{eps = 1.0e-05 : f32}> : (tensor<64x128xbf16>, tensor<128xbf16>) -> tensor<64x128xbf16>
  %q = "nn.linear"(%h2, %wqkv) : (tensor<64x128xbf16>, tensor<256x128xbf16>) -> tensor<64x256xbf16>
  %r = "nn.rope"(%q, %pos) <{head_dim = 32 : i64, rotary_heads = 6 : i64, theta = 5.0e+05 : f32, style = "half"}> : (tensor<64x256xbf16>, tensor<64xi32>) -> tensor<64x256xbf16>
  func.return %x2, %r : tensor<64x128xbf16>, tensor<64x256xbf16>
}

// CHECK-LABEL: func.func @llama_block(%x0: tensor<64x128xbf16>, %y0: tensor<64x128xbf16>, %wo: tensor<128x128xbf16>, %wn0: tensor<128xbf16>, %wgu: tensor<512x128xbf16>, %wd: tensor<128x256xbf16>, %wn1: tensor<128xbf16>, %wqkv: tensor<256x128xbf16>, %pos: tensor<64xi32>) -> (tensor<64x128xbf16>, tensor<64x256xbf16>) {
// CHECK-NEXT:    %a = nn.linear %y0, %wo : tensor<64x128xbf16>, tensor<128x128xbf16> -> tensor<64x128xbf16>
// CHECK-NEXT:    %x1 = nn.add %x0, %a : tensor<64x128xbf16>, tensor<64x128xbf16> -> tensor<64x128xbf16>
// CHECK-NEXT:    %h1 = nn.rms_norm %x1, %wn0 {eps = 1.000000e-05 : f32} : tensor<64x128xbf16>, tensor<128xbf16> -> tensor<64x128xbf16>
// CHECK-NEXT:    %z = nn.linear %h1, %wgu : tensor<64x128xbf16>, tensor<512x128xbf16> -> tensor<64x512xbf16>
// CHECK-NEXT:    %g = nn.swiglu %z : tensor<64x512xbf16> -> tensor<64x256xbf16>
// CHECK-NEXT:    %d = nn.linear %g, %wd : tensor<64x256xbf16>, tensor<128x256xbf16> -> tensor<64x128xbf16>
// CHECK-NEXT:    %x2 = nn.add %x1, %d : tensor<64x128xbf16>, tensor<64x128xbf16> -> tensor<64x128xbf16>
// CHECK-NEXT:    %h2 = nn.rms_norm %x2, %wn1 {eps = 1.000000e-05 : f32} : tensor<64x128xbf16>, tensor<128xbf16> -> tensor<64x128xbf16>
// CHECK-NEXT:    %q = nn.linear %h2, %wqkv : tensor<64x128xbf16>, tensor<256x128xbf16> -> tensor<64x256xbf16>
// CHECK-NEXT:    %r = nn.rope %q, %pos {head_dim = 32 : i64, rotary_heads = 6 : i64, theta = 5.000000e+05 : f32, style = "half"} : tensor<64x256xbf16>, tensor<64xi32> -> tensor<64x256xbf16>
// CHECK-NEXT:    func.return %x2, %r : tensor<64x128xbf16>, tensor<64x256xbf16>
// CHECK-NEXT:  }

// CHECK-GENERIC-LABEL: "func.func"() <{sym_name = "llama_block", function_type = (tensor<64x128xbf16>, tensor<64x128xbf16>, tensor<128x128xbf16>, tensor<128xbf16>, tensor<512x128xbf16>, tensor<128x256xbf16>, tensor<128xbf16>, tensor<256x128xbf16>, tensor<64xi32>) -> (tensor<64x128xbf16>, tensor<64x256xbf16>)}> ({
// CHECK-GENERIC-NEXT:  ^bb0(%x0: tensor<64x128xbf16>, %y0: tensor<64x128xbf16>, %wo: tensor<128x128xbf16>, %wn0: tensor<128xbf16>, %wgu: tensor<512x128xbf16>, %wd: tensor<128x256xbf16>, %wn1: tensor<128xbf16>, %wqkv: tensor<256x128xbf16>, %pos: tensor<64xi32>):
// CHECK-GENERIC-NEXT:    %a = "nn.linear"(%y0, %wo) : (tensor<64x128xbf16>, tensor<128x128xbf16>) -> tensor<64x128xbf16>
// CHECK-GENERIC-NEXT:    %x1 = "nn.add"(%x0, %a) : (tensor<64x128xbf16>, tensor<64x128xbf16>) -> tensor<64x128xbf16>
// CHECK-GENERIC-NEXT:    %h1 = "nn.rms_norm"(%x1, %wn0) <{eps = 1.000000e-05 : f32}> : (tensor<64x128xbf16>, tensor<128xbf16>) -> tensor<64x128xbf16>
// CHECK-GENERIC-NEXT:    %z = "nn.linear"(%h1, %wgu) : (tensor<64x128xbf16>, tensor<512x128xbf16>) -> tensor<64x512xbf16>
// CHECK-GENERIC-NEXT:    %g = "nn.swiglu"(%z) : (tensor<64x512xbf16>) -> tensor<64x256xbf16>
// CHECK-GENERIC-NEXT:    %d = "nn.linear"(%g, %wd) : (tensor<64x256xbf16>, tensor<128x256xbf16>) -> tensor<64x128xbf16>
// CHECK-GENERIC-NEXT:    %x2 = "nn.add"(%x1, %d) : (tensor<64x128xbf16>, tensor<64x128xbf16>) -> tensor<64x128xbf16>
// CHECK-GENERIC-NEXT:    %h2 = "nn.rms_norm"(%x2, %wn1) <{eps = 1.000000e-05 : f32}> : (tensor<64x128xbf16>, tensor<128xbf16>) -> tensor<64x128xbf16>
// CHECK-GENERIC-NEXT:    %q = "nn.linear"(%h2, %wqkv) : (tensor<64x128xbf16>, tensor<256x128xbf16>) -> tensor<64x256xbf16>
// CHECK-GENERIC-NEXT:    %r = "nn.rope"(%q, %pos) <{head_dim = 32 : i64, rotary_heads = 6 : i64, theta = 5.000000e+05 : f32, style = "half"}> : (tensor<64x256xbf16>, tensor<64xi32>) -> tensor<64x256xbf16>
// CHECK-GENERIC-NEXT:    "func.return"(%x2, %r) : (tensor<64x128xbf16>, tensor<64x256xbf16>) -> ()
// CHECK-GENERIC-NEXT:  }) : () -> ()
