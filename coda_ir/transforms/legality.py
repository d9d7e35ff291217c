"""Tile-locality proofs for epilogue ops, with F2 linear layouts (`coda_ir.analysis.linear_layout`).

An epilogue op is legal when every value it needs lives in the same CTA as the element it
computes, for the tile configuration the lowering will use: THREAD, WARP and CTA levels are
fine (Triton moves data across lanes and warps of one CTA itself), OUTSIDE is not. Only a few
ops can reach outside a tile:

* `coda.pair_map stride s`: element c pairs with c + s inside aligned groups of 2s columns
  (with `period P`: inside aligned groups of P columns, which a tile must hold whole);
* `coda.segment_reduce width w`: a reduction over aligned segments of w columns.

Every other primitive reads its operands at the element's own coordinates (or produces one
partial per tile), so it is THREAD-local by construction; `coda.load cols_period P` reads
global memory at the element's own row and column mod P (no value of another tile), so it is
too; `coda.reduce` completes inside the
tile at the level `reduction_level` reports (one partial per tile).

The proof is run over the candidate column-tile widths BN the lowering may pick (the
kernel's fixed `config` if it has one). A W-columns-wide tile of a kernel with N columns spans
`BN * W / N` columns of its matrix, and its layout is the accumulator layout (gemm) or a
blocked layout (elementwise) of that extent. The op is legal for BN when the partner / the
segment lies inside the tile (`pair_level_for_stride` / `reduction_level` below OUTSIDE).
The smallest legal BN becomes the constraint `BN % bn_multiple_of == 0` (all candidates are
powers of two, so that is "BN >= it"), recorded as `#coda.tile_constraints`. When no
power-of-two BN holds whole groups (a non-power-of-two head dim, a pair group wider than any
tile), the op is legal only where it can read its pairs / segments straight from memory: in a
standalone elementwise kernel, over plain loads of kernel inputs (`gather_applies`); it is then
marked `coda.gathered`. Anywhere else (a gemm epilogue, computed inputs) one column tile may
cover the whole row (N <= 256 in a gemm, N <= 8192 in an elementwise kernel, tiles in natural
column order): the op exchanges values inside it (`tl.gather`), marked `coda.row_exchange`,
and the kernel's constraint becomes BN % next_pow2(N) == 0. Otherwise it is not tile-local, and
coda-fuse keeps it out of the kernel / coda-legalize splits it off. The lowering reads these
records and re-derives none of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.dialects.builtin import IntegerAttr, TensorType, UnitAttr, i64
from xdsl.ir import BlockArgument, Operation

from coda_ir.analysis import linear_layout as ll
from coda_ir.analysis.linear_layout import Level
from coda_ir.dialects import coda
from coda_ir.dialects.coda import TileType
from coda_ir.tiling import (
    ELEMENTWISE_BNS,
    GEMM_BNS,
    MAX_GEMM_BN,
    MAX_ROW_EXCHANGE_ELEMENTWISE,
    elementwise_config,
    pow2_at_least,
)

CONSTRAINTS = coda.CONSTRAINTS
GATHERED = coda.GATHERED
ROW_EXCHANGE = coda.ROW_EXCHANGE
PAIR_HALVES = coda.PAIR_HALVES


@dataclass
class OpProof:
    op: Operation
    ok: bool
    level: Level
    reason: str
    bn_multiple_of: int = 1
    gathered: bool = False
    row_exchange: bool = False
    halves: tuple[Operation, ...] = ()
    """Ops that handle the gathered pair_map's wide tiles as two halves (`coda.pair_halves`)."""


@dataclass
class KernelProof:
    kernel: Operation
    proofs: list[OpProof] = field(default_factory=list)

    @property
    def failures(self) -> list[OpProof]:
        return [p for p in self.proofs if not p.ok]

    @property
    def ok(self) -> bool:
        return not self.failures and self.combined_ok()

    @property
    def bn_multiple_of(self) -> int:
        return max([1, *(p.bn_multiple_of for p in self.proofs if p.ok)])

    @property
    def gathered(self) -> list[Operation]:
        return [p.op for p in self.proofs if p.ok and p.gathered]

    @property
    def row_exchanged(self) -> list[Operation]:
        return [p.op for p in self.proofs if p.ok and p.row_exchange]

    def combined_ok(self) -> bool:
        if isinstance(self.kernel, coda.GemmOp) and self.bn_multiple_of > MAX_GEMM_BN:
            return False
        return True

    def constraint_attr(self) -> coda.TileConstraintsAttr | None:
        if self.bn_multiple_of == 1:
            return None
        reasons = [p.reason for p in self.proofs if p.ok and p.bn_multiple_of > 1]
        return coda.TileConstraintsAttr(self.bn_multiple_of, reasons)


def record(proof: KernelProof) -> None:
    """Write a proven kernel's decisions on it: `coda.constraints` (when BN is constrained) and
    `coda.gathered` on the ops that read from memory. Earlier records are replaced."""
    assert proof.ok
    kernel = proof.kernel
    attr = proof.constraint_attr()
    if attr is not None:
        kernel.attributes[CONSTRAINTS] = attr
    elif CONSTRAINTS in kernel.attributes:
        del kernel.attributes[CONSTRAINTS]
    marks = {GATHERED: set(proof.gathered), ROW_EXCHANGE: set(proof.row_exchanged)}
    halves = {h: p.op.stride.value.data for p in proof.proofs if p.ok and p.gathered  # type: ignore[attr-defined]
              for h in p.halves}
    for op in kernel.regions[0].walk():
        for name, ops in marks.items():
            if op in ops:
                op.attributes[name] = UnitAttr()
            elif name in op.attributes:
                del op.attributes[name]
        if op in halves:
            op.attributes[PAIR_HALVES] = IntegerAttr(halves[op], i64)
        elif PAIR_HALVES in op.attributes:
            del op.attributes[PAIR_HALVES]


def kernel_columns(kernel: Operation) -> tuple[int, int]:
    if isinstance(kernel, coda.GemmOp):
        m, n, _ = kernel.problem_shape()
        return m, n
    assert isinstance(kernel, coda.ElementwiseOp)
    return kernel.iteration_shape()


def _config(kernel: Operation) -> tuple[int, int | None, int]:
    """(BM, fixed BN or None, warps) the proof assumes."""
    cfg = getattr(kernel, "config", None)
    if cfg is not None:
        d = cfg.as_dict()
        return d["bm"], d["bn"], d["warps"]
    if isinstance(kernel, coda.GemmOp):
        return 128, None, 8
    return 32, None, 4


def tile_layout(kernel: Operation, bm: int, extent: int, warps: int) -> ll.LinearLayout:
    """The layout of a BM x extent tile in this kernel: Hopper accumulator for a gemm, blocked
    otherwise (and whenever the MMA layout does not apply to that shape)."""
    if isinstance(kernel, coda.GemmOp):
        try:
            return ll.accumulator_layout(bm, extent, warps, "hopper")
        except ValueError:
            pass
    return ll.accumulator_layout(bm, extent, warps, "blocked")


def _bn_candidates(kernel: Operation) -> tuple[int, ...]:
    _, fixed, _ = _config(kernel)
    widths = GEMM_BNS if isinstance(kernel, coda.GemmOp) else ELEMENTWISE_BNS
    if fixed is not None:
        # a proof at BN also holds at its multiples (groups stay aligned inside the tile), so
        # the smallest power of two that divides the fixed BN is what the epilogue needs (a
        # sub-tiled epilogue may run on halves of the tile that are still multiples of it)
        return tuple(b for b in widths if b <= fixed) or (fixed,)
    return widths


def _tensor_width(value) -> int | None:
    ty = value.type
    return ty.get_shape()[-1] if isinstance(ty, TensorType) else None


def _plain_load_of_input(kernel: Operation, value, width: int) -> bool:
    """`value` is a `coda.load` (no period) of one of the kernel's own tensor inputs, `width` wide."""
    load = value.owner
    if not isinstance(load, coda.LoadOp) or load.period is not None:
        return False
    source = load.source
    return (isinstance(source, BlockArgument) and source.owner is kernel.regions[0].blocks[0]
            and _tensor_width(source) == width)


def row_exchange_applies(kernel: Operation, op: Operation) -> bool:
    """Whether one column tile can cover the kernel's whole row for `op` to exchange values in
    (`tl.gather`): at most the widest gemm tile (a gemm) or MAX_ROW_EXCHANGE_ELEMENTWISE, and
    none of the op's tiles in an interleaved (permuted) column order."""
    _, n = kernel_columns(kernel)
    _, fixed, _ = _config(kernel)
    limit = MAX_GEMM_BN if isinstance(kernel, coda.GemmOp) else MAX_ROW_EXCHANGE_ELEMENTWISE
    if pow2_at_least(n) > (fixed if fixed is not None else limit):
        return False
    h = getattr(kernel, "interleave", None)
    hw = getattr(kernel, "interleave_wide", None)
    permuted = {n} if h is not None else set()
    if hw is not None:
        permuted.add(2 * n)
    return not any(isinstance(v.type, TileType) and v.type.cols in permuted for v in [*op.operands, *op.results])


HALF_REDUCTIONS = (coda.ReduceKind.SUM, coda.ReduceKind.SUMSQ, coda.ReduceKind.MAX)


def pair_halves(kernel: Operation, op: coda.PairMapOp) -> tuple[Operation, ...] | None:
    """The ops that can handle a gathered pair_map's wide (2 x pairs) tiles as two halves at the
    tile's pair-index columns (`coda.pair_halves`), or None when some use of them cannot.

    Starting from the pair_map's wide operands and results, every user of a wide value must be:
    a store (`coda.yield`: each half stored at its own columns); this pair_map or another of the
    same stride and pair count (it reads the same halves); a `coda.map` (elementwise: run once
    per half; its other tile operands join, so they must be wide values of this set or plain
    loads of kernel inputs); or a `coda.reduce` over the columns (sum, sum of squares, max: each
    half reduced, the two combined per row). A wide operand must be a plain load of a kernel
    input (both halves read from memory) or a value of the set. Any other use (broadcasts,
    column vectors, column partials, other pairings) would need the wide tile in column order."""
    pairs, stride = op.pair_count(), op.stride.value.data
    wide = 2 * pairs
    block = kernel.regions[0].blocks[0]
    members: list[Operation] = []
    values: set = set()
    work = [v for v in [*op.inputs, *op.outputs] if op.is_wide(v)]
    while work:
        v = work.pop()
        if v in values:
            continue
        values.add(v)
        owner = v.owner
        if isinstance(owner, coda.LoadOp):
            if not _plain_load_of_input(kernel, v, wide):
                return None
            if not all(isinstance(u.operation, coda.PairMapOp) for u in v.uses):
                members.append(owner)  # read by other ops too: loaded once, in halves (else inside the pair_maps)
        elif isinstance(owner, coda.MapOp):
            if owner.parent_block() is not block:
                return None
            members.append(owner)
            work += [*owner.inputs, *owner.outputs]
        elif isinstance(owner, coda.PairMapOp) and owner is not op:
            # a wide result of another pair_map of the same pairing (SwiGLU's backward beside the
            # rebuild of its forward, merged into one pass over z): computed in halves there too
            if not (owner.stride.value.data == stride and owner.pair_count() == pairs
                    and owner.parent_block() is block):
                return None
            work += [w for w in [*owner.inputs, *owner.outputs] if owner.is_wide(w)]
        elif owner is not op:
            return None
        for use in v.uses:
            user = use.operation
            if isinstance(user, coda.YieldOp) and user.parent_op() is kernel:
                continue
            if isinstance(user, coda.PairMapOp) and user.stride.value.data == stride and user.pair_count() == pairs \
                    and user.group() == op.group() and user.is_wide(v):
                continue
            if isinstance(user, coda.MapOp) and user.parent_block() is block:
                work += [*user.inputs, *user.outputs]
                continue
            if isinstance(user, coda.ReduceOp) and user.dim.value.data == 1 and user.kind.data in HALF_REDUCTIONS:
                members.append(user)
                continue
            return None
    if members and op.period is not None:
        return None  # `coda.pair_halves` records a plain stride: a period's pairs are read inside the pair_map only
    order = {o: i for i, o in enumerate(block.ops)}
    return tuple(sorted(set(members), key=lambda o: order.get(o, -1)))  # program order


def _halves_level(kernel: Operation, op: coda.PairMapOp, halves: tuple[Operation, ...]) -> Level:
    """The F2 proof of the halves form: the narrow [BM, BN] tile layout times one register bit
    for the half. A pair's two elements sit in one thread (THREAD), and a row reduction over the
    wide columns completes where the narrow tile's row reduction does (the half bit adds a
    register step)."""
    m, n = kernel_columns(kernel)
    bm, fixed, warps = _config(kernel)
    lay = tile_layout(kernel, bm, fixed or 64, warps) * ll.LinearLayout.identity_1d(2, "register", "half")
    level = ll.pair_level(lay, {"half": 1})
    if any(isinstance(h, coda.ReduceOp) for h in halves):
        level = max(level, ll.reduction_level(lay, "dim1"), ll.reduction_level(lay, "half"))
    return level


def gather_applies(kernel: Operation, op: Operation) -> bool:
    """Whether `op` can read its pairs / segments straight from memory (the lowering's gathered
    form): a standalone elementwise kernel that walks no whole rows, its grouped operand a plain
    load of a kernel input, and (pair_map) every wide value handled in halves (`pair_halves`)."""
    if not isinstance(kernel, coda.ElementwiseOp) or kernel.whole is not None:
        return False
    if op.parent_block() is not kernel.regions[0].blocks[0]:
        return False
    if isinstance(op, coda.PairMapOp):
        return pair_halves(kernel, op) is not None
    if isinstance(op, coda.SegmentReduceOp):
        tile = op.tile.type
        assert isinstance(tile, TileType)
        return _plain_load_of_input(kernel, op.tile, tile.cols)
    return False


def _prove_grouped(kernel: Operation, op: Operation, width: int, group_what: str, query, what: str = "the partner lies") -> OpProof:
    """Shared search over BN for pair_map / segment_reduce: `query(layout, extent)` -> Level."""
    m, n = kernel_columns(kernel)
    bm, _, warps = _config(kernel)
    tried: list[str] = []
    gathers = gather_applies(kernel, op)
    # a standalone kernel reads pairs from memory (two [BM, BN] loads, as fast as one wide tile)
    # rather than widen its column tile past the runtime's own choice (a 2F-wide tile of SwiGLU's
    # backward at F = 8192: whole rows, few programs); gathered segments cost w loads per column,
    # so a segment reduction keeps the widest tile that holds its segments
    widest = elementwise_config(m, n).bn if gathers and isinstance(op, coda.PairMapOp) else None
    for bn in _bn_candidates(kernel):
        if (bn * width) % n:
            continue
        extent = bn * width // n
        if extent < 1 or extent & (extent - 1):
            continue
        if widest is not None and bn > widest:
            tried.append(f"BN={bn}: wider than the kernel's tile ({widest})")
            break
        level = query(tile_layout(kernel, bm, extent, warps), extent)
        tried.append(f"BN={bn}: {level.name.lower()}")
        if level <= Level.CTA:
            return OpProof(
                op, True, level,
                f"{op.name} {group_what}: {level.name.lower()}-local when BN % {bn} == 0",
                bn_multiple_of=bn,
            )
    if gathers:
        halves = pair_halves(kernel, op) if isinstance(op, coda.PairMapOp) else None
        if halves:
            level = _halves_level(kernel, op, halves)  # type: ignore[arg-type]
            return OpProof(
                op, level <= Level.CTA, level,
                f"{op.name} {group_what}: pairs read from memory (gathered), the wide tiles handled in halves "
                f"({len(halves)} ops): {level.name.lower()}-local",
                gathered=True, halves=halves,
            )
        return OpProof(
            op, True, Level.CTA,
            f"{op.name} {group_what}: no power-of-two tile holds whole groups; read from memory (gathered)",
            gathered=True,
        )
    if row_exchange_applies(kernel, op):
        cover = pow2_at_least(n)
        return OpProof(
            op, True, Level.CTA,
            f"{op.name} {group_what}: no power-of-two tile holds whole groups; exchanged inside one "
            f"column tile covering all {n} columns (BN % {cover} == 0)",
            bn_multiple_of=cover, row_exchange=True,
        )
    where = "the accumulator tile" if isinstance(kernel, coda.GemmOp) else "the tile"
    return OpProof(
        op, False, Level.OUTSIDE,
        f"{op.name} {group_what} is not tile-local: {what} outside {where} for every "
        f"column tile width ({', '.join(tried) or 'no power-of-two BN holds whole groups'}), it "
        f"cannot read its groups from memory here (only in a standalone elementwise kernel, from a "
        f"plain load of a kernel input), and {n} columns are too many for one tile to exchange them in",
    )


def prove_op(kernel: Operation, op: Operation) -> OpProof | None:
    """The proof for one epilogue op (None: elementwise by construction)."""
    _, n = kernel_columns(kernel)
    if isinstance(op, coda.PairMapOp):
        stride = op.stride.value.data
        wide = max(v.type.cols for v in [*op.inputs, *op.outputs])  # type: ignore[attr-defined]
        interleave = getattr(kernel, "interleave", None)
        if op.period is not None:
            period = op.period.value.data
            what = (f"stride {stride} period {period} (pairs c, c + {stride} in the first {2 * stride} columns of "
                    f"each {period}, the rest adjacent)")
            hw = getattr(kernel, "interleave_wide", None)
            permuted = ({n} if interleave is not None else set()) | ({2 * n} if hw is not None else set())
            if any(isinstance(v.type, TileType) and v.type.cols in permuted for v in [*op.inputs, *op.outputs]):
                return OpProof(op, False, Level.OUTSIDE, f"coda.pair_map {what} reads its columns in their natural "
                                                         "order, and this gemm's columns are interleaved")

            def query_period(layout, extent):
                # exchanged inside the tile (`tl.gather`): the tile must hold whole periods
                return Level.OUTSIDE if extent % period else ll.reduction_level(layout, 1, segment=period)

            return _prove_grouped(kernel, op, wide, what, query_period)
        if stride == 1:
            bm, fixed, warps = _config(kernel)
            lay = tile_layout(kernel, bm, fixed or 64, warps)
            level = ll.pair_level(lay, {"dim1": 1})
            why = " (interleaved columns)" if interleave is not None else ""
            return OpProof(op, level <= Level.CTA, level, f"coda.pair_map stride 1{why}: {level.name.lower()}-local")

        def query(layout, extent):
            return ll.pair_level_for_stride(layout, 1, stride)

        return _prove_grouped(kernel, op, wide, f"stride {stride} (pairs c, c + {stride} in groups of {2 * stride})", query)
    if isinstance(op, coda.SegmentReduceOp):
        width = op.width.value.data
        tile = op.tile.type
        assert isinstance(tile, TileType)

        def query(layout, extent):
            return ll.reduction_level(layout, 1, segment=width)

        return _prove_grouped(
            kernel, op, tile.cols, f"width {width} (segments of {width} columns)", query, "a segment reaches"
        )
    if isinstance(op, coda.ReduceOp):
        bm, fixed, warps = _config(kernel)
        lay = tile_layout(kernel, bm, fixed or 64, warps)
        level = ll.reduction_level(lay, op.dim.value.data)
        return OpProof(op, True, level, f"coda.reduce dim {op.dim.value.data}: one partial per tile, {level.name.lower()}")
    return None


def prove_kernel(kernel: Operation) -> KernelProof:
    proof = KernelProof(kernel)
    for op in kernel.regions[0].blocks[0].ops:
        p = prove_op(kernel, op)
        if p is not None:
            proof.proofs.append(p)
    return proof


def describe_failure(proof: KernelProof) -> tuple[Operation, str]:
    """The op to blame and the message for a kernel that cannot be proven."""
    if proof.failures:
        f = proof.failures[0]
        return f.op, f.reason
    _, n = kernel_columns(proof.kernel)
    return proof.kernel, (
        f"the epilogue needs BN % {proof.bn_multiple_of} == 0"
        f", which no gemm tile (BN <= {MAX_GEMM_BN}) of N = {n} satisfies"
    )
