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

Where legality allows both plans, the IO model picks one (option `cost-model`, on by default).
QK-norm into a GEMM's epilogue forces BN to a multiple of head_dim (whole heads per tile);
`io_model.qk_norm_tile_width` prices every BN, and when its cheapest plan does not keep whole
heads (e.g. 256-wide heads at decode-sized M, where narrow tiles fill more SMs) the norm stays
a separate elementwise kernel and a remark gives both predicted costs. With `cost-model=false`
the norm fuses whenever it is legal.

RoPE into a GEMM's epilogue computes angle + libdevice sin/cos per pair in every column tile;
`io_model.rope_table_plan` prices that against cos/sin [M, hd/2] tables computed once by a
small elementwise kernel (`lower_nn.rope_table_kernel`, same angle formula) and read in the
epilogue with `coda.load cols_period hd/2` (`lower_nn.use_rope_table`). A remark states the
choice and both predicted costs. With `cost-model=false` sin/cos stay in the epilogue; option
`rope-table=always|never` forces the choice.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects import arith
from xdsl.dialects.builtin import BFloat16Type, Float16Type, ModuleOp, StringAttr, TensorType, f32
from xdsl.ir import Block, BlockArgument, Operation, OpResult, SSAValue
from xdsl.passes import ModulePass

from coda_ir.dialects import coda
from coda_ir.transforms import remarks
from coda_ir.transforms._build import scalar_body
from coda_ir.transforms.interleave import apply_interleave, interleave_plan
from coda_ir.transforms.legality import describe_failure, prove_kernel
from coda_ir.transforms import lower_nn
from coda_ir.transforms._build import stamp
from coda_ir.transforms.lower_nn import ORIGIN, match_rope

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


def build_merged(p: Operation, e: Operation) -> tuple[Operation, list[int]] | None:
    """P's region followed by E's body, as a new (detached) kernel of P's kind.

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
        from coda_ir.dialects.coda import _segments  # the gemm's operand segments

        props["operandSegmentSizes"] = _segments(1, 1, len(inputs))
        operands = [p.a, p.b, *inputs]
    else:
        operands = inputs
    merged = type(p).create(operands=operands, result_types=types, properties=props, regions=[region])
    merged.attributes.update(p.attributes)
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


HEAD_NORM_ORIGIN = "nn.head_rms_norm"
_DTYPES = {"bf16": "bf16", "f16": "f16", "f32": "f32"}


def head_norm_width(e: Operation) -> int | None:
    """head_dim of the QK-norm an elementwise kernel carries (the width of its segment
    reduction), or None when the kernel does not come from an `nn.head_rms_norm`."""
    origin = e.attributes.get(ORIGIN)
    if not isinstance(origin, StringAttr) or HEAD_NORM_ORIGIN not in origin.data.split("+"):
        return None
    for op in e.walk():
        if isinstance(op, coda.SegmentReduceOp):
            return op.width.value.data
    return None


def qk_norm_decision(p: Operation, e: Operation):
    """The IO model's choice of tile width for QK-norm E in gemm P's epilogue
    (`io_model.qk_norm_tile_width`), or None when it does not apply or the model is missing."""
    if not isinstance(p, coda.GemmOp) or not isinstance(e, coda.ElementwiseOp):
        return None
    hd = head_norm_width(e)
    if hd is None:
        return None
    try:
        from coda_ir.analysis import io_model
    except ImportError:  # the model is optional
        return None
    m, n, k = p.problem_shape()
    elt = p.results[0].type.get_element_type()  # type: ignore[attr-defined]
    dtype = _DTYPES.get(str(elt), "bf16")
    try:
        return io_model.qk_norm_tile_width(hd, n, M=m, K=k, heads=max(1, n // hd), dtype=dtype)
    except Exception:  # a model that cannot price this shape does not block the rewrite
        return None


def prefers_unfused(decision, head_dim: int) -> tuple[bool, str]:
    """(whether the cheapest plan splits heads across tiles, the remark text's cost comparison)."""
    choice = int(decision.choice)
    if choice % head_dim == 0:
        return False, ""
    fused = [k for k in decision.costs if int(k.split("=")[1]) % head_dim == 0]
    best = decision.costs[f"bn={choice}"]
    text = f"unfused (per-head partials + a norm kernel, BN={choice}) {best.time_s * 1e6:.1f} us"
    if fused:
        alt = min(fused, key=lambda k: decision.costs[k].time_s)
        text += f" vs fused (whole heads in the tile, BN={alt.split('=')[1]}) {decision.costs[alt].time_s * 1e6:.1f} us"
    else:
        text += " (no tile width holds whole heads)"
    return True, text


class Fuser:
    def __init__(self, block: Block, remarks_as_errors: bool, siblings: bool, interleave: bool = True,
                 cost_model: bool = True, rope_table: str = "auto"):
        if rope_table not in ("auto", "always", "never"):
            raise ValueError(f"rope-table must be auto, always or never, got '{rope_table}'")
        self.rope_mode = rope_table
        self.block = block
        self.cost_model = cost_model
        self.cost_reported: set[int] = set()
        self.interleave = interleave
        self.as_error = remarks_as_errors
        self.siblings = siblings
        self.refused: set[tuple[int, int]] = set()
        self._keep: list[Operation] = []  # refused ops stay referenced, so their ids are not reused

    def order(self) -> dict[Operation, int]:
        return {op: i for i, op in enumerate(self.block.ops)}

    def placement(self, p: Operation, e: Operation, kept: list[int]) -> Operation | None:
        """Where the merged kernel can go: before P, or before E (None: neither keeps the
        program in dataflow order)."""
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
            return p
        for i in kept:
            for use in p.results[i].uses:
                user = use.operation
                while user.parent_block() is not self.block:
                    user = user.parent_op()  # type: ignore[assignment]
                if pos[user] < pos[e]:
                    return None
        return e

    def try_merge(self, p: Operation, e: Operation) -> bool:
        if (id(p), id(e)) in self.refused:
            return False
        if _rows(p) != _rows(e):
            return False
        if getattr(p, "whole_axis", None) != getattr(e, "whole_axis", None):
            return False  # a whole rows/cols kernel merges only with one that walks the same tiles
        if isinstance(p, coda.GemmOp) and (p.interleave is not None or p.interleave_wide is not None):
            return False
        built = build_merged(p, e)
        if built is None:
            return False
        merged, kept = built
        where = self.placement(p, e, kept)
        if where is None:
            merged.erase()
            return False
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
        if self.cost_model:
            decision = qk_norm_decision(p, e)
            hd = head_norm_width(e)
            unfused, costs = prefers_unfused(decision, hd) if decision is not None and hd else (False, "")
            if unfused:
                merged.erase()
                self.refused.add((id(p), id(e)))
                self._keep += [p, e]
                if id(p) not in self.cost_reported:
                    self.cost_reported.add(id(p))
                    remarks.emit_remark(
                        e, f"QK-norm not fused into the epilogue of {_origin(p)}: the IO model found the unfused "
                        f"plan cheaper: {costs}; it stays a separate kernel",
                    )
                return False
        if isinstance(p, coda.GemmOp) and self.rope_mode != "never" and (self.cost_model or self.rope_mode == "always"):
            swapped = self.rope_table(p, e, merged)
            if swapped is not None:
                merged, kept, where, e = swapped
        self.block.insert_op_before(merged, where)
        n_kept = len(kept)
        for k, i in enumerate(kept):
            p.results[i].replace_all_uses_with(merged.results[k])
        for j, r in enumerate(e.results):
            r.replace_all_uses_with(merged.results[n_kept + j])
        for old in (e, p):
            old.detach()
            old.erase()
        return True

    def rope_table(self, p: coda.GemmOp, e: Operation, merged: Operation):
        """RoPE into gemm P's epilogue: ask the IO model (`io_model.rope_table_plan`) whether the
        rotation reads cos/sin from [M, hd/2] tables computed once by a small kernel, rather
        than computing sin/cos per pair in every tile. On "table", E is replaced by its table
        form (`lower_nn.use_rope_table`) and the table kernel goes before the earliest of
        P and E (it reads only the positions); returns the new (merged, kept, where, E)."""
        assert isinstance(e, coda.ElementwiseOp)
        matches = [m for m in (match_rope(op) for op in _block(e).ops) if m is not None]
        if len(matches) != 1 or not isinstance(matches[0].pos, BlockArgument):
            return None
        match = matches[0]
        m, n, k = p.problem_shape()
        elt = p.results[0].type.get_element_type()  # type: ignore[attr-defined]
        if self.rope_mode == "always":  # forced (tests, experiments): no model, no remark
            choice, text = "table", ""
        else:
            try:
                from coda_ir.analysis import io_model

                decision = io_model.rope_table_plan(m, n, 2 * match.half, K=k, dtype=_DTYPES.get(str(elt), "bf16"))
            except ImportError:  # the model is optional
                return None
            costs = decision.costs
            choice = decision.choice
            text = (f"table (cos/sin [{m}x{match.half}] computed once, one more kernel) "
                    f"{costs['table'].time_s * 1e6:.1f} us vs in-epilogue sin/cos {costs['epilogue'].time_s * 1e6:.1f} us")
        if choice != "table":
            remarks.emit_remark(e, f"RoPE in the epilogue of {_origin(p)} computes sin/cos per pair: the IO model "
                                f"found it cheaper: {text}", informational=True)
            return None
        pos = e.operands[match.pos.index]  # type: ignore[attr-defined]
        table = lower_nn.rope_table_kernel(pos, m, match)
        table.attributes[ORIGIN] = StringAttr("nn.rope.table")
        stamp(table, e.location)
        pos_ok_at_p = isinstance(pos, BlockArgument) or self.order().get(pos.owner, -1) < self.order()[p]  # type: ignore[arg-type]
        self.block.insert_op_before(table, p if pos_ok_at_p else e)
        e2 = lower_nn.use_rope_table(e, match, table.results[0], table.results[1])
        self.block.insert_op_before(e2, e)
        for old, fresh in zip(e.results, e2.results):
            old.replace_all_uses_with(fresh)
        e.detach()
        e.erase()
        merged.erase()
        built = build_merged(p, e2)
        assert built is not None, "the table form reads P's results like the angle form did"
        merged2, kept = built
        where = self.placement(p, e2, kept)
        assert where is not None, "the table kernel precedes P or E, so the placement is unchanged"
        ok, _, reason = _prove_or_interleave(merged2, self.interleave)
        assert ok, f"a periodic load is tile-local, so the table form proves like the angle form: {reason}"
        if text:
            remarks.emit_remark(e2, f"RoPE in the epilogue of {_origin(p)} reads cos/sin tables: the IO model found "
                                f"them cheaper: {text}", informational=True)
        return merged2, kept, where, e2

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
                if self.try_merge(p, e):
                    return True
        return False

    def run(self) -> None:
        while self.step():
            pass


def _origin(op: Operation) -> str:
    attr = op.attributes.get(ORIGIN)
    name = attr.data if isinstance(attr, StringAttr) else op.name
    from coda_ir.tools.diagnostics import location_of

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
    cost_model: bool = True
    """Ask the IO model (`io_model.qk_norm_tile_width`) whether QK-norm in the GEMM's epilogue
    (whole heads per tile) beats a separate norm kernel, and (`io_model.rope_table_plan`)
    whether RoPE in a GEMM's epilogue reads cos/sin tables; off: fuse whenever it is legal and
    compute sin/cos in the epilogue."""
    rope_table: str = "auto"
    """RoPE fused into a GEMM: "auto" (the IO model decides, when `cost_model`), "always" (cos/sin
    tables), "never" (sin/cos per pair in the epilogue)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for f in op.walk():
            if isinstance(f, func.FuncOp) and f.body.blocks:
                Fuser(f.body.blocks[0], self.remarks_as_errors, self.siblings, self.interleave, self.cost_model,
                      self.rope_table).run()
