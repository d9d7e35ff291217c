"""`coda-legalize`: prove every epilogue op tile-local and record what the proof relied on.

For every `coda.gemm` / `coda.elementwise` kernel, `legality.prove_kernel` checks each op
against the F2 linear layout of the tile (Hopper MMA accumulator for gemms, blocked layout for
elementwise kernels) over the column-tile widths the lowering may choose. The tile constraints
the proofs need are recorded on the kernel as the typed attribute `coda.constraints`, e.g.

    coda.constraints = #coda.tile_constraints<bn_multiple_of = 128, reasons = ["coda.pair_map stride 64 ..."]>

and ops that read their pairs / segments from memory (widths no power-of-two tile holds) are
marked `coda.gathered`; the lowering obeys both and re-derives neither. `coda-fuse` only builds kernels
that pass this proof, so in the `nn-to-coda` pipeline this pass never refuses. On other input
(hand-written coda, a pipeline without `coda-interleave`) an unprovable op in a gemm epilogue
is split off: the op and everything that depends on it move to a new `coda.elementwise`
kernel, the gemm stores the tiles they need (fp32), and a remark says why (an error with
`remarks-as-errors`).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType, UnitAttr, f32
from xdsl.ir import Block, BlockArgument, Operation, Region, SSAValue
from xdsl.passes import ModulePass

from coda_ir.dialects import coda
from coda_ir import remarks
from coda_ir.diagnostics import CompilerError
from coda_ir.transforms.legality import describe_failure, kernel_columns, prove_kernel, record
from coda_ir.transforms.lower_nn import ORIGIN


def split_at(kernel: coda.GemmOp, bad: Operation) -> tuple[Operation, Operation]:
    """Move `bad` and every epilogue op that depends on it out of `kernel` into a new
    coda.elementwise kernel over the gemm's M x N space; returns (new gemm, new elementwise)."""
    block = kernel.epilogue.blocks[0]
    top = bad
    while top.parent_block() is not block:
        top = top.parent_op()  # type: ignore[assignment]
    moved: list[Operation] = []
    tainted: set[SSAValue] = set()
    for op in block.ops:
        if op is block.last_op:
            continue
        if op is top or any(v in tainted for v in op.operands):
            moved.append(op)
            tainted.update(op.results)
    moved_set = set(moved)
    # values the moved ops need from the part that stays
    crossing: list[SSAValue] = []
    for op in moved:
        for v in op.operands:
            if v in tainted or v in crossing:
                continue
            if isinstance(v, BlockArgument) and isinstance(v.type, TensorType):
                continue  # a kernel input: the elementwise kernel takes it too
            crossing.append(v)
    yield_op = block.last_op
    assert isinstance(yield_op, coda.YieldOp)
    m, n = kernel_columns(kernel)

    # the gemm: its own yields that stay, then the crossing tiles stored in fp32
    stay_yields = [(i, v) for i, v in enumerate(yield_op.values) if v not in tainted]
    move_yields = [(i, v) for i, v in enumerate(yield_op.values) if v in tainted]
    region = kernel.epilogue.clone()
    mapping = dict(zip(kernel.epilogue.blocks[0].args, region.blocks[0].args))
    old_ops = list(block.ops)
    new_ops = list(region.blocks[0].ops)
    for old, new in zip(old_ops, new_ops):
        mapping.update(zip(old.results, new.results))
    nblock = region.blocks[0]
    nyield = nblock.last_op
    assert nyield is not None
    nyield.detach()
    nyield.erase()
    for old, new in reversed(list(zip(old_ops, new_ops))):
        if old in moved_set:
            new.detach()
            new.erase()
    nblock.add_op(coda.YieldOp(*[mapping[v] for _, v in stay_yields], *[mapping[v] for v in crossing]))
    types = [kernel.results[i].type for i, _ in stay_yields]
    types += [TensorType(f32, list(v.type.get_shape())) for v in crossing]  # type: ignore[attr-defined]
    props = dict(kernel.properties)
    from coda_ir.dialects.coda import operand_segments

    props["operandSegmentSizes"] = operand_segments(1, 1, len(kernel.inputs))
    gemm = coda.GemmOp.create(operands=list(kernel.operands), result_types=types, properties=props, regions=[region])
    gemm.attributes.update(kernel.attributes)
    gemm.location = kernel.location
    stored = list(gemm.results[len(stay_yields):])

    # the elementwise kernel: loads of the stored tiles, the kernel inputs it reads, the moved ops
    ins: list[SSAValue] = list(stored)
    arg_of: dict[SSAValue, int] = {}
    for op in moved:
        for v in op.operands:
            if isinstance(v, BlockArgument) and isinstance(v.type, TensorType) and v not in arg_of:
                arg_of[v] = len(ins)
                ins.append(kernel.operands[2 + v.index - 1])
    eblock = Block(arg_types=[v.type for v in ins])
    emap: dict[SSAValue, SSAValue] = {}
    for k, v in enumerate(crossing):
        load = coda.LoadOp(eblock.args[k])
        load.location = kernel.location
        eblock.add_op(load)
        emap[v] = load.result
    for v, k in arg_of.items():
        emap[v] = eblock.args[k]
    for op in moved:
        new = op.clone(value_mapper=emap)
        eblock.add_op(new)
        emap.update(zip(op.results, new.results))
    eblock.add_op(coda.YieldOp(*[emap[v] for _, v in move_yields]))
    etypes = [kernel.results[i].type for i, _ in move_yields]
    elementwise = coda.ElementwiseOp((m, n), ins, etypes, Region(eblock))
    origin = kernel.attributes.get(ORIGIN)
    if isinstance(origin, StringAttr):
        elementwise.attributes[ORIGIN] = StringAttr(origin.data + ".split")
    elementwise.location = bad.location

    parent = kernel.parent_block()
    assert parent is not None
    parent.insert_op_before(gemm, kernel)
    parent.insert_op_after(elementwise, gemm)
    for k, (i, _) in enumerate(stay_yields):
        kernel.results[i].replace_all_uses_with(gemm.results[k])
    for k, (i, _) in enumerate(move_yields):
        kernel.results[i].replace_all_uses_with(elementwise.results[k])
    kernel.detach()
    kernel.erase()
    return gemm, elementwise


@dataclass(frozen=True)
class LegalizePass(ModulePass):
    """Prove epilogue ops tile-local; record tile constraints (`coda.constraints`) and gathered ops."""

    name = "coda-legalize"

    remarks_as_errors: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        work = [k for k in op.walk() if isinstance(k, (coda.GemmOp, coda.ElementwiseOp))]
        while work:
            kernel = work.pop(0)
            proof = prove_kernel(kernel)
            if proof.ok:
                record(proof)
                continue
            bad, reason = describe_failure(proof)
            if isinstance(kernel, coda.GemmOp) and bad is not kernel:
                remarks.emit_remark(
                    bad, f"cannot be proven tile-local: {reason}; split off into a separate kernel",
                    as_error=self.remarks_as_errors,
                )
                work[:0] = split_at(kernel, bad)
                continue
            # nothing left to split off: no correct lowering of this kernel exists
            raise CompilerError(bad, f"cannot be proven tile-local: {reason}")
        op.attributes[LEGALIZED] = UnitAttr()


LEGALIZED = "coda.legalized"
"""Unit attribute on a module whose kernels coda-legalize proved and annotated; the Triton
pipeline (`coda-to-triton`) legalizes a module without it (hand-written coda) before converting."""


def ensure_legalized(module: ModuleOp) -> None:
    """Run coda-legalize on a module that has not been through it (the lowering reads only what
    it records)."""
    if LEGALIZED not in module.attributes:
        LegalizePass().apply(Context(), module)
