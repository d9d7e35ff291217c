"""Passes from the `nn` dialect to coda GEMM-epilogue programs (registered in `registry.py`).

| pass | module | what it does |
|---|---|---|
| `nn-to-coda` | `pipeline` | the whole pipeline: the five passes below, in order |
| `nn-plan` | `plan` | the IO model's choices recorded as typed properties on nn ops (RoPE cos/sin tables, QK-norm placement) |
| `coda-defer-norms` | `defer_norms` | reparameterize: RMSNorm / LayerNorm row scales move into the consuming GEMMs' epilogues |
| `convert-nn-to-coda` | `lower_nn` | the baseline: every remaining nn op becomes standalone kernels |
| `coda-fuse` | `fuse` | absorb kernels into their producers' epilogues (networkx dataflow graph, proof-gated) |
| `coda-interleave` | `interleave` | `interleave h` on gemms whose epilogue pairs columns h apart (SwiGLU, GeGLU) |
| `coda-legalize` | `legalize` | prove every epilogue op tile-local (F2 linear layouts); record `coda.constraints` |

Shared helpers: `kernel_builder` (kernel builders), `legality` (the proofs); the base layer `coda_ir.remarks` (optimization
remarks, `remarks-as-errors`).
"""
