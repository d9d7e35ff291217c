"""The Triton backend: coda -> `tl` / `host` IR -> Triton source (MLIR's Conversion/XToY split).

* conversions: `coda_to_tl` (convert-coda-to-tl, with its helpers `tl_build`, `tl_epilogue`
  (the epilogue driver; its per-op lowerings in `tl_epilogue_loads`, `tl_epilogue_maps`,
  `tl_epilogue_reductions`, sharing `tl_epilogue_context`), `tl_gemm`) and `coda_to_host` (convert-coda-to-host);
* printers: `triton_printer` (tl.kernel -> `@triton.jit` source), `host_printer` (host.func ->
  Python host functions);
* the fixed mainloop templates the printer fills: `mainloop` (Triton), `gluon` (Gluon);
* the `coda-to-triton` pipeline (`pipeline.py`: coda-legalize where needed, coda-plan-in-place,
  the two conversions; `TritonOptions`) and the `triton` target (`triton.py`), which only prints
  what the pipeline built.

Running the emitted module is the runtime's (`coda_ir.runtime`).
"""
