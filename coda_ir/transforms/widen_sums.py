"""`coda-widen-summed-stores`: a kernel output that only readers wanting it unrounded read is stored in f32.

Two kinds of reader want a kernel output (bf16/f16) unrounded:

* `coda.embedding_grad` sums the rows of `dy` that share an id (in fp32, in a fixed order) and
  rounds the sum once. Rounding each row before the sum throws away accuracy that costs nothing
  to keep: the row is an fp32 tile in the kernel's epilogue anyway. Storing it in f32 makes the
  embedding gradient one rounding of an fp32 sum of unrounded rows, instead of a rounding of a
  sum of rounded rows, whose error grows with the number of repeated ids (the fuzzer's seed 368,
  a 1.7-ulp result from two rows, tests/test_fuzz_numerics.py).
* A kernel whose every `coda.load` of that input is marked `coda.full_precision`: the separate
  RMSNorm-backward pass that nn-plan keeps out of the dgrad's epilogue reads dy so, to compute
  what the epilogue form computes from the fp32 accumulator (rounded to bf16 first, the Qwen3
  bf16 whole-model gradients missed the float64 bar: bench/RESULTS.md, session 10). The IO model
  prices the wider dy (`io_plans.norm_grad_plan`).

The cost is the width of that one tensor (M x D in f32 instead of bf16: 16 MB more per 4096
tokens of a 2048-wide model, written once and read once). Outputs that anything else reads
(another kernel's unmarked load, the function's return) keep their type: every other consumer
is written against the program's element type, and changing its input would change its
numerics contract.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import BFloat16Type, Float16Type, ModuleOp, TensorType, f32
from xdsl.ir import Operation, SSAValue, Use
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from coda_ir.dialects import coda

KERNELS = (coda.ElementwiseOp, coda.GemmOp)


def _region_argument(kernel: Operation, operand_index: int) -> SSAValue | None:
    """The block argument through which `kernel`'s region reads its operand `operand_index`
    (None for a gemm's A and B operands, which the mainloop reads)."""
    offset = 2 if isinstance(kernel, coda.GemmOp) else 0  # a gemm's region args: acc, then its ins
    if operand_index < offset:
        return None
    return kernel.regions[0].blocks[0].args[operand_index - offset + (1 if offset else 0)]


def _wants_unrounded(use: Use) -> bool:
    user = use.operation
    if isinstance(user, coda.EmbeddingGradOp):
        return True
    if not isinstance(user, KERNELS):
        return False
    arg = _region_argument(user, use.index)
    if arg is None:
        return False
    loads = [u.operation for u in arg.uses]
    return bool(loads) and all(coda.wants_full_precision(load) for load in loads)


def widen_unrounded_outputs(module: ModuleOp) -> None:
    for kernel in list(module.walk()):
        if not isinstance(kernel, KERNELS):
            continue
        for value in kernel.results:
            ty = value.type
            if not isinstance(ty, TensorType) or not isinstance(ty.get_element_type(), (BFloat16Type, Float16Type)):
                continue  # partials, f32 already, or integers
            uses = list(value.uses)
            if not uses or not all(_wants_unrounded(u) for u in uses):
                continue
            wide = TensorType(f32, ty.get_shape())
            for use in uses:
                if isinstance(use.operation, KERNELS):
                    arg = _region_argument(use.operation, use.index)
                    assert arg is not None
                    Rewriter.replace_value_with_new_type(arg, wide)
            Rewriter.replace_value_with_new_type(value, wide)


@dataclass(frozen=True)
class WidenSummedStoresPass(ModulePass):
    """Store in f32 the kernel outputs that only `coda.embedding_grad` or full-precision loads
    read (see module doc)."""

    name = "coda-widen-summed-stores"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        widen_unrounded_outputs(op)
