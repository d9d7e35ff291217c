"""In-place outputs over donated arguments: which kernel results may be stored into a buffer the
caller gave away (an analysis of the IR: `in_place_choices`); the pass `coda-plan-in-place`
records them, `convert-coda-to-host` and the Triton emitter obey the records. The marks and the
record are declared with their accessors in the coda dialect (`coda.DONATED`, `coda.OWNED`,
`coda.WRITES_OVER`); this module only decides.

Why: the backward of the LM head + cross-entropy reads the saved logits [tokens, vocab] once, in
one elementwise kernel that writes dlogits of the same shape and type, and never reads them
again. A fresh dlogits buffer beside the dead logits is a second logits-sized allocation at the
step's peak (2 GiB at 8192 tokens x 128256 vocab in bf16). When the caller donates the logits
(the `coda_ir.torch` backward owns its saved tensors), dlogits can be written over them.

* `coda.donated` (unit, a `func.func` argument attribute): the caller hands this buffer to the
  function; its contents may be overwritten once the function no longer reads them. Set only by
  callers that own the buffer (`coda_ir.torch.function` for the tensors it saved only for the
  backward).
* `coda.owned` (unit, a `func.func` argument attribute): the caller hands its reference over
  (issue 11, peak memory: torch.compile's backward frees each saved tensor at its last use). The
  host function then takes its arguments in one list, which it empties on entry
  (`convert-coda-to-host` records the convention on the `host.func`), and drops each owned
  argument after its last reader (`liveness.dead_after`), so the caching allocator can reuse it
  as soon as no one else holds the tensor. Dropping a reference never changes a tensor's
  contents, so any caller may own any argument; callers that pass tensors positionally are
  unchanged (no argument owned). `coda_ir.torch.function` owns the saved tensors of an eager
  backward that does not keep the graph.
* `coda.writes_over` (on a function-level `coda.elementwise`, an array of i64, one per output):
  -1 = a fresh buffer; k >= 0 = the output is stored into input operand k (a donated argument).

An output may write over input k only when every element is read before it is written: the input
is read through exactly one plain `coda.load` of the whole iteration shape (tile-local: each
program reads exactly the elements it stores), by no gathered op (those read other columns from
memory); each element of the output is computed from the same element of that load by
per-element ops (so its store waits for that element's load, whatever the emitter's store
placement: outputs are stored early, as soon as computed, possibly before other loads); no
other member of the kernel's launch group reads the argument (members run concurrently: another
could read the buffer in the same launch); no later op of the function (nor its return) uses the
argument; and the output is no result of the function (donated buffers are scratch: a result
aliasing an argument would be copied).

Pair halves (the separate SwiGLU / GeGLU backward pass that nn-plan's gated-grad plan chooses:
dz [M, 2F] written over the donated z, bench/RESULTS.md session 10). The kernel iterates over
[M, N] pair indices; z [M, 2N] is read through exactly one `coda.load` in pair halves
(`coda.pair_halves` stride P): the program of tile (rows R, pair indices C) reads z at rows R and
columns first(C) and first(C) + P, first(c) = (c // P) * 2P + c % P. The output is the wide result
of the gathered `coda.pair_map` (or of a map run once per pair half) of the same stride over the
same N pair indices, so the epilogue lowering stores it at exactly those rows and columns, with the
same mask (`EpilogueContext.pair_first` is shared per stride). Safety:
1. Across programs: (c, half) -> first(c) + half * P is injective (c = g * P + o goes to
   g * 2P + o + half * P with 0 <= o < P), so programs read and write disjoint elements, and each
   program writes only elements it read itself.
2. Inside a program the per-element argument does not hold: dz_up(c) = dy * silu(gate(c)) is
   stored at the up column first(c) + P but computed from the gate column only, possibly by a
   thread other than the one that loaded up(c). So the emitter puts a CTA barrier
   (`tl.debug_barrier()`: bar.sync, whose memory accesses requested before it are performed
   relative to all threads of the CTA) before the store of an output written over an input in
   pair halves; and every load of z precedes that barrier in program order, because z's one load
   emits both halves together and the stored value is computed from it (`_depends`), so the load
   is emitted before the value, which is emitted before its store. One program is one CTA (a
   launch group's member too: its branch is uniform per CTA), and the kernel has no `whole` axis
   (no loop over column slices around the barrier).
   Not covered: the form for F <= 128 whose pair_map is warp-local (z loaded whole, pairs
   exchanged in registers, no `coda.pair_halves`): nothing is written over there.
3. Triton's aliasing assumptions: its kernels take plain pointers, with no `noalias` / restrict
   promise, so the compiler keeps program order between a load and a later store through another
   pointer that may alias; the pass reads no z through TMA descriptors or the non-coherent cache
   (a plain `tl.load` in an elementwise kernel). The Triton interpreter runs each program's tile
   ops in order and the programs one after another: 1. suffices there.
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import TensorType
from xdsl.ir import BlockArgument, Operation, SSAValue

from coda_ir.dialects import coda
from coda_ir.dialects.coda import donated_arguments

def _single_tile_local_load(op: coda.ElementwiseOp, position: int) -> SSAValue | None:
    """The one `coda.load` through which input `position` of `op` is read, when it is a plain
    whole-shape load (tile-local: each program reads exactly the elements it stores) and the
    kernel holds no op that reads memory at other coordinates (gathered pairs / segments);
    else None."""
    arg = op.body.blocks[0].args[position]
    uses = list(arg.uses)
    if len(uses) != 1:
        return None
    load = uses[0].operation
    if not isinstance(load, coda.LoadOp) or load.period is not None:
        return None
    if tuple(load.result.type.get_shape()) != tuple(op.iteration_shape()):  # type: ignore[attr-defined]
        return None
    if any(coda.is_gathered(inner) for inner in op.walk()):
        return None
    return load.result


def _depends_elementwise(value: SSAValue, loaded: SSAValue) -> bool:
    """Whether every element of tile `value` is computed from the same element of `loaded`
    through per-element ops only (`coda.map` whose body reads that operand, the tile operand of
    `coda.scale` / `coda.shift` / `coda.accumulate`). Then storing element e of `value` waits
    for the load of element e, whatever the emitter's store placement (early stores) or the
    threads' layouts: a store over the loaded buffer never overtakes the load of that element."""
    seen: set[SSAValue] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if v is loaded:
            return True
        if v in seen:
            continue
        seen.add(v)
        owner = v.owner
        if isinstance(owner, coda.MapOp):
            body_args = owner.body.blocks[0].args
            stack.extend(o for o, a in zip(owner.operands, body_args) if a.uses)
        elif isinstance(owner, (coda.ScaleOp, coda.ShiftOp, coda.AccumulateOp)):
            stack.append(owner.tile)
    return False


def _pair_halves_load(op: coda.ElementwiseOp, position: int) -> tuple[SSAValue, int] | None:
    """The one `coda.load` through which input `position` of `op` is read, when it is a load in
    pair halves (`coda.pair_halves` stride P: for each iteration column c the columns first(c)
    and first(c) + P, first(c) = (c // P) * 2P + c % P, of the same rows) of an input [M, 2N]
    (the iteration shape being [M, N]); with its stride P. Else None."""
    arg = op.body.blocks[0].args[position]
    uses = list(arg.uses)
    if len(uses) != 1:
        return None
    load = uses[0].operation
    stride = coda.pair_halves_stride(load)
    if not isinstance(load, coda.LoadOp) or load.period is not None or stride is None:
        return None
    m, n = op.iteration_shape()
    if tuple(load.result.type.get_shape()) != (m, 2 * n) or tuple(arg.type.get_shape()) != (m, 2 * n):  # type: ignore[attr-defined]
        return None
    return load.result, stride


def _stored_in_pair_halves(value: SSAValue, stride: int, pairs: int) -> bool:
    """Whether the emitter stores yielded tile `value` in pair halves at stride `stride` over
    `pairs` pair indices: the wide result of a gathered `coda.pair_map` of that stride, or of a
    `coda.map` run once per pair half at that stride (`coda.pair_halves`)."""
    owner = value.owner
    if isinstance(owner, coda.PairMapOp):
        return (coda.is_gathered(owner) and owner.period is None and owner.stride.value.data == stride
                and owner.pair_count() == pairs
                and owner.is_wide(value))
    return isinstance(owner, coda.MapOp) and coda.pair_halves_stride(owner) == stride


def _depends(value: SSAValue, loaded: SSAValue) -> bool:
    """Whether tile `value` is computed from `loaded` (through any chain of tile ops in the
    kernel): the load is then emitted before the value, hence before its store."""
    seen: set[SSAValue] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if v is loaded:
            return True
        if v in seen or not isinstance(v.owner, Operation):
            continue
        seen.add(v)
        stack.extend(v.owner.operands)
    return False


def in_place_choices(fn: func.FuncOp) -> dict[coda.ElementwiseOp, list[int]]:
    """For each function-level `coda.elementwise` of `fn` (launch-group members included) that
    can store an output into a donated argument (conditions: the module docstring), the input
    index each output is written over (-1: a fresh buffer). Each donated argument is written
    over at most once; an argument no kernel can take stays as it is; kernels that already carry
    a `coda.writes_over` record keep it (and their arguments stay theirs)."""
    donated = donated_arguments(fn)
    if not donated or not fn.body.blocks:
        return {}
    block = fn.body.blocks[0]
    ops = list(block.ops)
    position = {op: i for i, op in enumerate(ops)}
    taken: set[int] = set()
    chosen: dict[coda.ElementwiseOp, list[int]] = {}
    for i, top in enumerate(ops):
        group = top if isinstance(top, coda.LaunchGroupOp) else None
        members = group.members() if group is not None else [top]
        # a group member's results leave the group as the group's outputs, in member order
        public = dict(zip([r for m in members for r in m.results], top.results)) if group is not None else {}
        for op in members:
            if not isinstance(op, coda.ElementwiseOp) or coda.WRITES_OVER in op.attributes:
                continue
            choice = _choose(op, i, block, position, donated, taken, members, public)
            if any(c >= 0 for c in choice):
                chosen[op] = choice
    return chosen


def _choose(op: coda.ElementwiseOp, i: int, block, position, donated: set[int], taken: set[int],
            members: list[Operation], public: dict) -> list[int]:
    choice = [-1] * len(op.outputs)
    yielded = op.body.blocks[0].last_op.operands  # type: ignore[union-attr]
    for k, value in enumerate(op.inputs):
        if not (isinstance(value, BlockArgument) and value.block is block and value.index in donated):
            continue
        if value.index in taken or list(op.inputs).count(value) != 1:
            continue
        # no use after this kernel: the buffer holds the output from here on
        if any(position.get(_top(use.operation, block), -1) > i for use in value.uses):
            continue
        # no other member of its launch group reads it: members run concurrently
        if any(use.operation in members and use.operation is not op for use in value.uses):
            continue
        loaded = _single_tile_local_load(op, k)
        if loaded is not None:
            fits = lambda y, loaded=loaded: _depends_elementwise(y, loaded)  # noqa: E731
        else:
            halves = _pair_halves_load(op, k)
            if halves is None or op.whole_axis is not None:
                continue
            loaded, stride = halves
            pairs = op.iteration_shape()[1]
            fits = lambda y, loaded=loaded, stride=stride, pairs=pairs: (  # noqa: E731
                _stored_in_pair_halves(y, stride, pairs) and _depends(y, loaded))
        for j, result in enumerate(op.outputs):
            # a result the function returns is not stored there: the caller donated scratch,
            # and a result aliasing an argument is copied by callers that forbid it (torch ops)
            out = public.get(result, result)
            returned = any(isinstance(use.operation, func.ReturnOp) for use in out.uses)
            if (choice[j] == -1 and not returned and isinstance(result.type, TensorType) and result.type == value.type
                    and fits(yielded[j])):
                choice[j] = k
                taken.add(value.index)
                break
    return choice


def _top(op: Operation, block) -> Operation | None:
    """The op of `block` that holds `op` (itself, or the kernel / group it is nested in)."""
    while op is not None and op.parent_block() is not block:
        op = op.parent_op()  # type: ignore[assignment]
    return op
