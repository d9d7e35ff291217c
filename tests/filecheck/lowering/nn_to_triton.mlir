// RUN: coda-opt %s -p nn-to-coda -t triton | filecheck %s
// The contract of ARCHITECTURE.md: `coda-opt FILE -p nn-to-coda -t triton` prints one Python
// module with one host function per func.func, same name, tensors in argument order, returning
// a tuple when the function returns several results.

func.func @mlp(%x: tensor<37x64xbf16>, %g: tensor<64xbf16>, %wgu: tensor<96x64xbf16>, %wd: tensor<64x48xbf16>) -> (tensor<37x64xbf16>, tensor<37x48xbf16>) {
  %h = nn.rms_norm %x, %g {eps = 1.0e-05 : f32} : tensor<37x64xbf16>, tensor<64xbf16> -> tensor<37x64xbf16>
  %z = nn.linear %h, %wgu : tensor<37x64xbf16>, tensor<96x64xbf16> -> tensor<37x96xbf16>
  %s = nn.swiglu %z : tensor<37x96xbf16> -> tensor<37x48xbf16>
  %d = nn.linear %s, %wd : tensor<37x48xbf16>, tensor<64x48xbf16> -> tensor<37x64xbf16>
  %y = nn.add %x, %d : tensor<37x64xbf16>, tensor<37x64xbf16> -> tensor<37x64xbf16>
  func.return %y, %s : tensor<37x64xbf16>, tensor<37x48xbf16>
}

func.func @act(%x: tensor<16x32xf32>) -> tensor<16x32xf32> {
  %y = nn.relu %x : tensor<16x32xf32> -> tensor<16x32xf32>
  func.return %y : tensor<16x32xf32>
}

// CHECK:     import triton
// CHECK:     @triton.jit
// CHECK:     def _mlp_k{{[0-9]+}}_gemm(a_ptr, b_ptr,
// CHECK:     def _act_k0_elementwise(
// CHECK:     _SIG_mlp = (('x', (37, 64), torch.bfloat16), ('g', (64,), torch.bfloat16), ('wgu', (96, 64), torch.bfloat16), ('wd', (64, 48), torch.bfloat16))
// CHECK:     def mlp(x, g, wgu, wd):
// CHECK:     launch_gemm(
// CHECK:     return ({{[a-z0-9_]+}}, {{[a-z0-9_]+}})
// CHECK:     def act(x):
// CHECK:     _rt.launch_elementwise(_act_k0_elementwise,
// CHECK:     return {{[a-z0-9_]+$}}
