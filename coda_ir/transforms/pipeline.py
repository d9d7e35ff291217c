"""`nn-to-coda`: the whole pipeline from an `nn` program to coda GEMM-epilogue kernels.

    nn-fuse-siblings      sibling linears sharing an input -> one GEMM on concatenated weights
                          (with `fuse`; silu(x Wg) * (x Wu) -> swiglu of the packed GEMM)
    nn-plan               the IO model's choices as typed properties on nn ops (RoPE cos/sin
                          tables, QK-norm placement with `fuse`; where RMSNorm statistics
                          are taken with `defer-norms`)
    coda-defer-norms      reparameterize: norm row scales move into the consuming GEMMs
    convert-nn-to-coda    every remaining nn op -> standalone kernels (the always-correct baseline)
    coda-fuse             absorb kernels into their producers' epilogues (proof-gated)
    coda-interleave       interleave gemm columns so gated pairs are adjacent
    coda-widen-summed-stores  kernel outputs only an embedding gradient sums are stored in f32
    coda-legalize         prove every epilogue op tile-local; record tile constraints
    cse                   xDSL's common subexpression elimination (duplicate loads, column
                          indices, broadcasts left by merging kernels)
    coda-plan-mainloop    gemms whose epilogue reads or writes tiles get the warp-specialized
                          Gluon mainloop on Hopper (`#coda.mainloop`, obeyed by launch_gemm);
                          plain gemms the vendor library (`#coda.vendor_gemm`: cuBLAS on a GPU)
    coda-sink-results     kernels whose outputs are only returned (weight gradients) run as
                          late as their operands allow: lower peak memory
    coda-group-launches   independent small kernels (folds, GEMVs) share one launch

Options (`-p 'nn-to-coda{fuse=false remarks-as-errors=true}'`): `defer-norms`, `fuse`,
`interleave`, `cse`, `sink-results`, `group-launches` (each true by default) switch a stage off (the result is still a correct,
less fused program); `cost-model=false` stops the stages from asking the IO model (norm
statistics placement, QK-norm placement, RoPE cos/sin tables) and fuses whenever it is legal,
with sin/cos computed in the epilogue; `whole-rows-stats=false` leaves a norm whose input no
GEMM produces to `convert-nn-to-coda` (a row kernel, or statistics + fold + apply) instead of
one `whole rows` statistics kernel and the row scale in the consuming GEMMs; `rope-table=always|never` forces the RoPE choice
(`auto`, the default, asks the model); `gated-grad=epilogue|separate` forces where a SwiGLU /
GeGLU backward runs (in the epilogue of the GEMM producing dy, or a separate pass), `norm-grad=epilogue|separate`
the same for an RMSNorm backward (dx and the dw partials; the separate pass reads dy in f32),
`cross-entropy=epilogue|separate` for a cross-entropy forward (its log-sum-exp and target
partials in the logits GEMM's epilogue, or a pass over the stored logits); all default to `auto`,
the IO model's choice; `merged-loads=in-order` leaves a merged elementwise kernel's second body
reading its inputs after the first body's stores (default `before-stores`: coda-fuse moves those
loads up, `fuse.MERGED_LOADS_MODES`; the option is for A/B runs); `mainloop=tl` keeps every gemm on the portable tl
mainloop, `mainloop=gluon` gives the Gluon one to every eligible gemm at any size (`auto`, the
default: `coda-plan-mainloop` decides, eligible gemms large enough to hide the epilogue, and plain
gemms run cuBLAS on a GPU); `vendor-gemms=false` keeps plain gemms on the tl kernel; `remarks-as-errors`
turns every "did not fuse" remark into an error; `gpu=h100` (or h200) is the target machine the IO
model's choices and the Gluon mainloop's size threshold are decided for, `gpu-constants=PATH` a table
of GPU constants to read it from (`transforms/target_machine.py`; `nn-autodiff` takes the same two).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from coda_ir.transforms.defer_norms import DeferNormsPass
from coda_ir.transforms.fuse import FusePass
from coda_ir.transforms.interleave import InterleavePass
from coda_ir.transforms.legalize import LegalizePass
from coda_ir.transforms.lower_nn import ConvertNNToCodaPass
from coda_ir.transforms.target_machine import DEFAULT_GPU


@dataclass(frozen=True)
class NNToCodaPass(ModulePass):
    """The whole pipeline from nn to coda kernels: defer norms, lower, fuse, interleave, legalize,
    then group independent small kernels into shared launches."""

    name = "nn-to-coda"

    defer_norms: bool = True
    fuse: bool = True
    interleave: bool = True
    cse: bool = True
    group_launches: bool = True
    sink_results: bool = True
    cost_model: bool = True
    whole_rows_stats: bool = True
    rope_table: str = "auto"
    gated_grad: str = "auto"
    norm_grad: str = "auto"
    """`auto` asks the IO model; the separate pass reads dy in f32 (what the epilogue form reads
    from the accumulator: rounded to bf16 first, the tiny Qwen3 bf16 whole-model gradients missed
    the float64 bar, bench/RESULTS.md session 10)."""
    cross_entropy: str = "auto"
    """Where a cross-entropy forward whose logits a GEMM produces runs (`auto`: the IO model)."""
    merged_loads: str = "before-stores"
    """coda-fuse's: where a merged elementwise kernel's second body loads its inputs (A/B runs)."""
    mainloop: str = "auto"
    """`coda-plan-mainloop`'s mode: `auto` (the Gluon mainloop where eligible and large enough),
    `gluon` (where eligible, at any size) or `tl`."""
    vendor_gemms: bool = True
    """Plain gemms (the epilogue stores the accumulator alone) run the vendor library on a GPU
    (`#coda.vendor_gemm`); false: the generated tl kernel (as `mainloop=tl` also does)."""
    remarks_as_errors: bool = False
    gpu: str = DEFAULT_GPU
    """The target machine nn-plan and coda-plan-mainloop decide for (`transforms/target_machine.py`)."""
    gpu_constants: str = ""
    """A table of GPU constants to read `gpu` from instead of the shipped one."""

    def stages(self) -> list[ModulePass]:
        from coda_ir.transforms.fuse_siblings import FuseSiblingsPass

        stages: list[ModulePass] = []
        if self.fuse:
            stages.append(FuseSiblingsPass())
        if self.fuse or self.defer_norms:  # the plan chooses among fused forms: only those passes read it
            from coda_ir.transforms.plan import NNPlanPass

            stages.append(NNPlanPass(cost_model=self.cost_model, rope_table=self.rope_table, interleave=self.interleave,
                                     epilogues=self.fuse, norm_stats=self.defer_norms, gated_grad=self.gated_grad,
                                     norm_grad=self.norm_grad, cross_entropy=self.cross_entropy,
                                     gpu=self.gpu, gpu_constants=self.gpu_constants))
        if self.defer_norms:
            stages.append(DeferNormsPass(remarks_as_errors=self.remarks_as_errors, whole_rows_stats=self.whole_rows_stats))
        stages.append(ConvertNNToCodaPass())
        if self.fuse:
            stages.append(FusePass(remarks_as_errors=self.remarks_as_errors, interleave=self.interleave,
                                   merged_loads=self.merged_loads))
        if self.interleave:
            stages.append(InterleavePass())
        from coda_ir.transforms.widen_sums import WidenSummedStoresPass

        stages.append(WidenSummedStoresPass())
        stages.append(LegalizePass(remarks_as_errors=self.remarks_as_errors))
        if self.cse:
            from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination

            stages.append(CommonSubexpressionElimination())
        from coda_ir.transforms.plan_mainloop import PlanMainloopPass

        stages.append(PlanMainloopPass(mainloop=self.mainloop, vendor_gemms=self.vendor_gemms, gpu=self.gpu,
                                       gpu_constants=self.gpu_constants))
        if self.sink_results:
            from coda_ir.transforms.sink_results import SinkResultsPass

            stages.append(SinkResultsPass())
        if self.group_launches:
            from coda_ir.transforms.group_launches import GroupLaunchesPass

            stages.append(GroupLaunchesPass())
        return stages

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from coda_ir.transforms.target_machine import target_gpu

        target_gpu(self.name, self.gpu, self.gpu_constants)  # a bad machine is named as nn-to-coda's option
        for stage in self.stages():
            stage.apply(ctx, op)
