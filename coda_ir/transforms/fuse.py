"""`coda-fuse`: absorb standalone kernels into the epilogues of the kernels that produce
their inputs.

The function's kernels form a dataflow graph (networkx `DiGraph`, producer -> consumer through
the tensors they pass). A `coda.elementwise` kernel E that loads a tensor t produced by a
kernel P (a gemm, or another elementwise kernel over the same rows) is inlined into P's region:
E's `coda.load %t` becomes the tile P yields for t, `coda.accumulate %x, %t` becomes an
add of that tile, and E's other inputs join P's `ins`. P keeps storing t only when t has users
besides E ("storing extra outputs when a value has other users"); otherwise the [M, N]
round trip disappears. This one rule covers residual adds (accumulate), biases (shift cols),
activations (map), gated activations and RoPE (pair_map), QK-norm (segment_reduce), norm
statistics (reduce -> partials) and the cross-entropy LSE partials + target select.

Two elementwise kernels over the same iteration space that read the same tensor and do not
depend on each other are merged too (sibling fusion: one pass over a tensor instead of two).

Every merge is a proof obligation: the merged kernel must pass `legality.prove_kernel`
(directly, or after `coda-interleave` would interleave its columns). When it does not, the
kernels stay separate and a remark names the op and the reason.

Where legality allows more than one form, the choice was made before lowering (`nn-plan`,
the IO model) and is recorded on the kernels: a QK-norm kernel marked `coda.separate` stays
out of its producing GEMM's epilogue; RoPE that reads cos/sin tables arrives in that form from
`convert-nn-to-coda` (a table kernel and a rotation reading it with `coda.load cols_period`)
and fuses like any other epilogue. This pass re-recognizes no operator.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects import arith
from xdsl.dialects.builtin import BFloat16Type, Float16Type, ModuleOp, StringAttr, TensorType, UnitAttr, f32
from xdsl.ir import Block, BlockArgument, Operation, OpResult, SSAValue
from xdsl.passes import ModulePass

from coda_ir.dialects import coda
from coda_ir import remarks
from coda_ir.transforms.kernel_builder import scalar_body
from coda_ir.transforms.interleave import apply_interleave, interleave_plan
from coda_ir.transforms.legality import describe_failure, prove_kernel
from coda_ir.transforms.lower_nn import ORIGIN

EPILOGUE_KERNELS = (coda.GemmOp, coda.ElementwiseOp)


def _block(kernel: Operation) -> Block:
    return kernel.regions[0].blocks[0]


def _arg_offset(kernel: Operation) -> int:
    return 1 if isinstance(kernel, coda.GemmOp) else 0


def _rows(kernel: Operation) -> int:
    if isinstance(kernel, coda.GemmOp):
        return kernel.problem_shape()[0]
    assert isinstance(kernel, coda.ElementwiseOp)
    return kernel.iteration_shape()[0]


def dataflow_graph(block: Block) -> nx.DiGraph:
    """Kernels (and other ops) of a function body, with an edge per tensor passed."""
    graph = nx.DiGraph()
    for op in block.ops:
        graph.add_node(op)
        for operand in op.operands:
            if isinstance(operand, OpResult) and operand.op.parent_block() is block:
                graph.add_edge(operand.op, op, value=operand)
    return graph


def _only_loaded(e: Operation, arg: BlockArgument) -> bool:
    for use in arg.uses:
        user = use.operation
        if isinstance(user, coda.LoadOp) and user.period is None:  # a periodic read is no tile of P's
            continue
        if isinstance(user, coda.AccumulateOp) and use.index == 1:
            continue
        return False
    return True


MERGED_LOADS_MODES = ("before-stores", "in-order")
"""Where a merged elementwise kernel's second body reads its inputs (`coda-fuse{merged-loads=...}`):
before the op computing the first kernel's first stored result (the default), or where that body
had them (after the whole first body: the order before session 23, kept for A/B runs)."""


def build_merged(p: Operation, e: Operation, loads_before_stores: bool = True) -> tuple[Operation, list[int]] | None:
    """P's region followed by E's body, as a new (detached) kernel of P's kind; with
    `loads_before_stores`, E's loads of kernel inputs moved up (see below).

    Returns the kernel and the indices of P's results it still yields (first, in order; E's
    results follow). None when E reads one of P's results other than through load/accumulate.
    """
    p_results = {r: i for i, r in enumerate(p.results)}
    e_block = _block(e)
    from_p: dict[int, int] = {}
    for j, v in enumerate(e.operands):
        if v in p_results:
            if not _only_loaded(e, e_block.args[j]):
                return None
            from_p[j] = p_results[v]

    region = p.regions[0].clone()
    block = region.blocks[0]
    offset = _arg_offset(p)
    p_yield = block.last_op
    assert isinstance(p_yield, coda.YieldOp)
    p_values = list(p_yield.values)
    inputs = list(p.operands[2:] if isinstance(p, coda.GemmOp) else p.operands)

    p_yield.detach()
    p_yield.erase()
    kept = [i for i, r in enumerate(p.results) if any(use.operation is not e for use in r.uses)]
    rounded: dict[int, SSAValue] = {}

    def stored_value(i: int) -> SSAValue:
        """P's tile i as E reads it. When P still stores it for other readers in a narrower
        type (bf16, f16), E reads it rounded to that type, as they do: otherwise one value
        would be two (e.g. LayerNorm statistics of the unrounded activation centring the
        rounded one in the next kernel, an error of a few bf16 ulps past the bar)."""
        value = p_values[i]
        ty = p.results[i].type  # a tensor, or partials (f32 by construction: never rounded)
        elt = ty.get_element_type() if isinstance(ty, TensorType) and not isinstance(ty, coda.PartialsType) else None
        if i not in kept or not isinstance(elt, (BFloat16Type, Float16Type)):
            return value
        if i not in rounded:
            body = scalar_body([f32], lambda s, x: s._add(arith.ExtFOp(s._add(arith.TruncFOp(x, elt)), f32)))
            op = coda.MapOp([value], [value.type], body)
            block.add_op(op)
            rounded[i] = op.results[0]
        return rounded[i]

    mapping: dict[SSAValue, SSAValue] = {}
    tiles: dict[BlockArgument, SSAValue] = {}
    for j, arg in enumerate(e_block.args):
        v = e.operands[j]
        if j in from_p:
            tiles[arg] = stored_value(from_p[j])
        elif v in inputs:
            mapping[arg] = block.args[offset + inputs.index(v)]
        else:
            inputs.append(v)
            mapping[arg] = block.insert_arg(v.type, len(block.args))

    # loads already present at the top level of P's region, to reuse
    loaded: dict[SSAValue, SSAValue] = {}
    for op in block.ops:
        if isinstance(op, coda.LoadOp) and op.period is None:  # a periodic load is another tile
            loaded.setdefault(op.source, op.result)
    # In a merged elementwise pass E's loads of kernel inputs go before the op computing P's first
    # stored result (one that readers other than E keep): the printer stores each output as soon
    # as it is computed, and a load after a store through another pointer stays behind it (Triton
    # kernels take pointers with no noalias promise), so the two kernels' memory round trips would
    # run one after the other (the SwiGLU backward pass with g rebuilt: 2.1x the time of the pass
    # without, 1.7x with its loads moved so, H200, session 23). No earlier: loads moved to the very
    # top lengthen what is live (Qwen3's QK-norm + RoPE backward pass: +42%). GEMM epilogues keep
    # their order (their loads follow the mainloop either way).
    stored = {p_values[i] for i in kept}
    front = None if isinstance(p, coda.GemmOp) or not loads_before_stores else next(
        (op for op in block.ops if any(r in stored for r in op.results)), None)

    for op in e_block.ops:
        if op is e_block.last_op:
            continue
        if isinstance(op, coda.LoadOp) and op.source in tiles:
            mapping[op.result] = tiles[op.source]  # type: ignore[index]
            continue
        if isinstance(op, coda.LoadOp) and op.period is None and mapping.get(op.source) in loaded:
            mapping[op.result] = loaded[mapping[op.source]]
            continue
        if isinstance(op, coda.AccumulateOp) and op.matrix in tiles:
            src = op.tile.owner
            if isinstance(src, coda.LoadOp) and src.source not in tiles:
                # load(C) + P's tile  ->  accumulate(P's tile, C): a residual add
                new = coda.AccumulateOp(tiles[op.matrix], mapping[src.source])  # type: ignore[index]
                new.location = op.location
                block.add_op(new)
                mapping[op.result] = new.result
                continue
            body = scalar_body([*([op.tile.type.element_type] * 2)], lambda s, x, y: s.add(x, y))  # type: ignore[attr-defined]
            new = coda.MapOp([mapping.get(op.tile, op.tile), tiles[op.matrix]], [op.result.type], body)  # type: ignore[index]
            new.location = op.location
        else:
            new = op.clone(value_mapper=mapping)
        if front is not None and isinstance(new, coda.LoadOp):
            block.insert_op_before(new, front)  # its only operand is a kernel input (a block argument)
        else:
            block.add_op(new)
        for old, fresh in zip(op.results, new.results):
            mapping[old] = fresh

    e_yield = e_block.last_op
    assert isinstance(e_yield, coda.YieldOp)
    e_values = [mapping.get(v, v) for v in e_yield.values]
    block.add_op(coda.YieldOp(*[p_values[i] for i in kept], *e_values))
    _dce(block)
    types = [p.results[i].type for i in kept] + [r.type for r in e.results]

    props = dict(p.properties)
    props.pop("operandSegmentSizes", None)
    if isinstance(p, coda.GemmOp):
        from coda_ir.dialects.coda import operand_segments  # the gemm's operand segments

        props["operandSegmentSizes"] = operand_segments(1, 1, len(inputs))
        operands = [p.a, p.b, *inputs]
    else:
        operands = inputs
    merged = type(p).create(operands=operands, result_types=types, properties=props, regions=[region])
    merged.attributes.update(p.attributes)
    if coda.SEPARATE in e.attributes:  # the plan keeps E out of a GEMM's epilogue: what absorbs E stays out too
        merged.attributes[coda.SEPARATE] = UnitAttr()
    origins = [o.data for o in (p.attributes.get(ORIGIN), e.attributes.get(ORIGIN)) if isinstance(o, StringAttr)]
    if origins:
        merged.attributes[ORIGIN] = StringAttr("+".join(origins))
    merged.location = p.location
    return merged, kept


def _dce(block: Block) -> None:
    """Drop epilogue ops whose results nothing uses (e.g. a load an accumulate replaced)."""
    for op in reversed(list(block.ops)):
        if op is block.last_op or not op.results:
            continue
        if all(not r.uses for r in op.results):
            op.detach()
            op.erase()


def _prove_or_interleave(kernel: Operation, allow_interleave: bool = True) -> tuple[bool, Operation | None, str]:
    """Whether the kernel is legal as is, or after interleaving its columns."""
    proof = prove_kernel(kernel)
    if proof.ok:
        return True, None, ""
    if isinstance(kernel, coda.GemmOp) and allow_interleave:
        plan = interleave_plan(kernel)
        if plan.half is not None:  # what coda-interleave will do when the stride form fails
            trial = kernel.clone()
            apply_interleave(trial, interleave_plan(trial))
            ok = prove_kernel(trial).ok
            trial.erase()
            if ok:
                return True, None, ""
        op, reason = describe_failure(proof)
        if plan.half is None and plan.pair_maps == [] and "stride" in reason:
            reason += f"; interleaving the columns is not possible: {plan.reason}"
        return False, op, reason
    op, reason = describe_failure(proof)
    return False, op, reason


class Fuser:
    def __init__(self, block: Block, remarks_as_errors: bool, siblings: bool, interleave: bool = True,
                 loads_before_stores: bool = True):
        self.block = block
        self.loads_before_stores = loads_before_stores
        self.interleave = interleave
        self.as_error = remarks_as_errors
        self.siblings = siblings
        self.refused: set[tuple[int, int]] = set()
        self._keep: list[Operation] = []  # refused ops stay referenced, so their ids are not reused

    def order(self) -> dict[Operation, int]:
        return {op: i for i, op in enumerate(self.block.ops)}

    def placement(self, p: Operation, e: Operation, kept: list[int],
                  delay_readers: bool = False) -> tuple[Operation, list[Operation]] | None:
        """Where the merged kernel can go: before P, or before E (None: neither keeps the
        program in dataflow order), and the ops to move after it. Placed at E, readers of P's
        kept results that run before E must follow the merged kernel: with `delay_readers` (a
        sibling merge) they move there, with everything before E that reads them, when none of
        them feeds E (a weight-gradient GEMM reading the rebuilt normalized activation, whose
        sibling is the norm backward that loads the same x); otherwise the merge is refused."""
        pos = self.order()
        p_results = set(p.results)
        ok_at_p = True
        for v in e.operands:
            if v in p_results or isinstance(v, BlockArgument):
                continue
            owner = v.owner
            if not isinstance(owner, Operation) or pos.get(owner, -1) >= pos[p]:
                ok_at_p = False
                break
        if ok_at_p:
            return p, []
        early: list[Operation] = []
        for i in kept:
            for use in p.results[i].uses:
                user = use.operation
                while user.parent_block() is not self.block:
                    user = user.parent_op()  # type: ignore[assignment]
                if pos[user] < pos[e]:
                    early.append(user)
        if not early:
            return e, []
        if not delay_readers:
            return None
        graph = dataflow_graph(self.block)
        moved = set(early)
        for user in early:
            moved |= {d for d in nx.descendants(graph, user) if pos.get(d, len(pos)) < pos[e]}
        if any(op is e or nx.has_path(graph, op, e) for op in moved):
            return None
        return e, sorted(moved, key=lambda op: pos[op])

    def try_merge(self, p: Operation, e: Operation, sibling: bool = False) -> bool:
        if (id(p), id(e)) in self.refused:
            return False
        if _rows(p) != _rows(e):
            return False
        if getattr(p, "whole_axis", None) != getattr(e, "whole_axis", None):
            return False  # a whole rows/cols kernel merges only with one that walks the same tiles
        if isinstance(p, coda.GemmOp) and (p.interleave is not None or p.interleave_wide is not None):
            return False
        if isinstance(p, coda.GemmOp) and coda.SEPARATE in e.attributes:
            return False  # the plan (nn-plan) keeps this kernel out of a GEMM's epilogue
        built = build_merged(p, e, self.loads_before_stores)
        if built is None:
            return False
        merged, kept = built
        placed = self.placement(p, e, kept, delay_readers=sibling)
        if placed is None:
            merged.erase()
            return False
        where, delayed = placed
        ok, bad, reason = _prove_or_interleave(merged, self.interleave)
        if not ok:
            self.refused.add((id(p), id(e)))
            self._keep += [p, e]
            target = _origin(p)
            # blame the op of E that the proof rejected (its clone carries E's location)
            blame = _original_of(bad, e) if bad is not None else e
            merged.erase()
            remarks.emit_remark(
                blame, f"not fused into the epilogue of {target}: {reason}; it stays a separate kernel",
                as_error=self.as_error,
            )
            return False
        self.block.insert_op_before(merged, where)
        anchor = merged
        for op in delayed:  # readers of P's results that ran before E, in their order
            op.detach()
            self.block.insert_op_after(op, anchor)
            anchor = op
        n_kept = len(kept)
        for k, i in enumerate(kept):
            p.results[i].replace_all_uses_with(merged.results[k])
        for j, r in enumerate(e.results):
            r.replace_all_uses_with(merged.results[n_kept + j])
        for old in (e, p):
            old.detach()
            old.erase()
        return True

    def step(self) -> bool:
        graph = dataflow_graph(self.block)
        pos = self.order()
        for e in list(self.block.ops):
            if not isinstance(e, coda.ElementwiseOp):
                continue
            producers = [p for p in graph.predecessors(e) if isinstance(p, EPILOGUE_KERNELS)]
            producers.sort(key=lambda p: (isinstance(p, coda.GemmOp), pos[p]), reverse=True)
            for p in producers:
                if self.try_merge(p, e):
                    return True
        if not self.siblings:
            return False
        for e in list(self.block.ops):
            if not isinstance(e, coda.ElementwiseOp):
                continue
            for p in list(self.block.ops):
                if p is e:
                    break
                if not isinstance(p, coda.ElementwiseOp) or p.iteration_shape() != e.iteration_shape():
                    continue
                if not set(p.operands) & set(e.operands):
                    continue
                if nx.has_path(graph, p, e):
                    continue
                if self.try_merge(p, e, sibling=True):
                    return True
        return False

    def run(self) -> None:
        while self.step():
            pass


def _origin(op: Operation) -> str:
    attr = op.attributes.get(ORIGIN)
    name = attr.data if isinstance(attr, StringAttr) else op.name
    from coda_ir.diagnostics import location_of

    return f"'{name.split('+')[0]}' ({location_of(op)})"


def _original_of(clone_op: Operation, e: Operation) -> Operation:
    """E's op matching a clone inside a merged kernel (same name and location), for remarks."""
    for op in _block(e).ops:
        if op.name == clone_op.name and op.location == clone_op.location:
            return op
    return e


@dataclass(frozen=True)
class FusePass(ModulePass):
    """Absorb elementwise kernels into the epilogues of their producers (see module doc)."""

    name = "coda-fuse"

    remarks_as_errors: bool = False
    siblings: bool = True
    interleave: bool = True
    """Count a merge as legal when interleaving the gemm's columns (coda-interleave) makes it so."""
    merged_loads: str = "before-stores"
    """`MERGED_LOADS_MODES`: where a merged elementwise kernel's second body loads its inputs."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.merged_loads not in MERGED_LOADS_MODES:
            from coda_ir.errors import ArgumentError

            raise ArgumentError(f"pass option merged-loads must be before-stores or in-order, got '{self.merged_loads}'",
                                "merged-loads")
        for f in op.walk():
            if isinstance(f, func.FuncOp) and f.body.blocks:
                Fuser(f.body.blocks[0], self.remarks_as_errors, self.siblings, self.interleave,
                      self.merged_loads == "before-stores").run()
