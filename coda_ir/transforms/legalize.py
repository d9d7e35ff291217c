"""`coda-legalize`: prove every epilogue op tile-local and record what the proof relied on.

For every `coda.gemm` / `coda.elementwise` kernel, `legality.prove_kernel` checks each op
against the F2 linear layout of the tile (Hopper MMA accumulator for gemms, blocked layout for
elementwise kernels) over the column-tile widths the lowering may choose. The tile constraints
the proofs need are written on the kernel as the discardable attribute `coda.constraints`
(format in `legality.CONSTRAINTS`), e.g.

    coda.constraints = {bn_multiple_of = 128 : i64, reasons = ["coda.pair_map stride 64 ..."]}

so that the lowering picks a BN that keeps the proof valid. `coda-fuse` only builds kernels
that pass this proof, so in the `nn-to-coda` pipeline this pass never refuses; on hand-written
coda IR an unprovable op is reported (a remark, or an error with `remarks-as-errors`).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from coda_ir.dialects import coda
from coda_ir.transforms import remarks
from coda_ir.transforms.legality import CONSTRAINTS, describe_failure, prove_kernel


@dataclass(frozen=True)
class LegalizePass(ModulePass):
    """Prove epilogue ops tile-local; annotate kernels with `coda.constraints`."""

    name = "coda-legalize"

    remarks_as_errors: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for kernel in list(op.walk()):
            if not isinstance(kernel, (coda.GemmOp, coda.ElementwiseOp)):
                continue
            proof = prove_kernel(kernel)
            if not proof.ok:
                bad, reason = describe_failure(proof)
                remarks.emit_remark(bad, f"cannot be proven tile-local: {reason}", as_error=self.remarks_as_errors)
                continue
            attr = proof.constraint_attr()
            if attr is not None:
                kernel.attributes[CONSTRAINTS] = attr
            elif CONSTRAINTS in kernel.attributes:
                del kernel.attributes[CONSTRAINTS]
