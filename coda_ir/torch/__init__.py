"""PyTorch integration: compiled nn functions as differentiable `torch.library` custom ops.

* `coda_ir.torch.function(source, name=None, *, pipeline="nn-to-coda")`: a callable on torch
  tensors whose forward runs the compiled `@f` (or `@f_fwd` when a gradient is needed) and whose
  backward runs the compiled `@f_bwd` (the `nn-autodiff` contract of NN_DIALECT.md). Both are
  custom ops with fake implementations, so `torch.compile(fullgraph=True)` traces them without
  graph breaks, and non-reentrant activation checkpointing recomputes them.
* `coda_ir.torch.from_hf(model)`: a Hugging Face `LlamaForCausalLM` / `Qwen3ForCausalLM` as a
  module of compiled fusion units over the model's own parameters (coda_ir/torch/hf.py); it
  trains under FSDP2 (`fully_shard` on `model.layers` and the model).
* `coda_ir.torch.parallelize(model, mesh)`: tensor parallelism (Megatron layout, sequence
  parallel) of a `from_hf` model through DTensor plans (`tensor_parallel_plan`), which the units
  read off their weights' placements (coda_ir/torch/tensor_parallel.py).
* `coda_ir.torch.vocab_parallel_cross_entropy(hidden, weight_shard, targets, vocab_size=...)`:
  the LM-head cross-entropy with the vocabulary split over a process group, without gathering
  the logits (coda_ir/torch/vocab_parallel.py).
"""

from __future__ import annotations

from coda_ir.torch.function import CodaFunction, function
from coda_ir.torch.hf import CodaCausalLM, from_hf
from coda_ir.torch.tensor_parallel import ReplicateParameters, parallelize, tensor_parallel_plan
from coda_ir.torch.vocab_parallel import shard_rows, vocab_parallel_cross_entropy

__all__ = ["function", "CodaFunction", "from_hf", "CodaCausalLM", "parallelize", "tensor_parallel_plan",
           "ReplicateParameters", "vocab_parallel_cross_entropy", "shard_rows"]
