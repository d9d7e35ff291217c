"""Running the Triton modules the backend (`coda_ir.lowering`) emits.

* `compiled`: `CompiledModule`, loading and caching generated modules, argument checks, the
  elementwise / fold launch helpers generated code calls, the interpreter switch;
* `gemm_launch`: GEMM launches (tl mainloop, Gluon, cuBLAS), launch plans, autotuning and its cache;
* `library`: the host steps that are not GEMM epilogues (concat, slice, embedding, ...);
* `attention`: the kernels `nn.attention` runs.
* `config`: `RuntimeConfig` (autotuning, cache directory, launch options and plans) and the one
  interpreter switch; its environment defaults are read in `coda_ir/environment.py`.
"""
