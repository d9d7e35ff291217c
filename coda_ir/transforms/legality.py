"""Tile-locality proofs for epilogue ops, with F2 linear layouts (`coda_ir.analysis.linear_layout`).

An epilogue op is legal when every value it needs lives in the same CTA as the element it
computes, for the tile configuration the lowering will use: THREAD, WARP and CTA levels are
fine (Triton moves data across lanes and warps of one CTA itself), OUTSIDE is not. Only a few
ops can reach outside a tile:

* `coda.pair_map stride s`: element c pairs with c + s inside aligned groups of 2s columns;
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
powers of two, so that is "BN >= it"). When no power-of-two BN works (a non-power-of-two head
dim, a pair group wider than any tile) but one column tile may cover the whole row (any
elementwise kernel; a gemm with N <= 256), the constraint is `bn_covers_n`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, StringAttr, UnitAttr, i64
from xdsl.ir import Operation

from coda_ir.analysis import linear_layout as ll
from coda_ir.analysis.linear_layout import Level
from coda_ir.dialects import coda
from coda_ir.dialects.coda import TileType

CONSTRAINTS = "coda.constraints"
"""Discardable attribute on a kernel: the tile constraints its epilogue's proofs relied on.

`{bn_multiple_of = 128 : i64, reasons = ["..."]}`: the kernel's column tile BN must be a
multiple of 128; or `{bn_covers_n, reasons = [...]}`: one column tile must cover all N
columns (BN >= N). `reasons` says which op needed it and at which level the exchange happens.
"""

GEMM_BNS = (16, 32, 64, 128, 256)
ELEMENTWISE_BNS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
MAX_GEMM_BN = 256
MAX_COVER_ELEMENTWISE = 1 << 17


@dataclass
class OpProof:
    op: Operation
    ok: bool
    level: Level
    reason: str
    bn_multiple_of: int = 1
    covers_n: bool = False


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
    def covers_n(self) -> bool:
        return any(p.covers_n for p in self.proofs if p.ok)

    def combined_ok(self) -> bool:
        if isinstance(self.kernel, coda.GemmOp):
            _, n, _ = self.kernel.problem_shape()
            if self.covers_n and n > MAX_GEMM_BN:
                return False
            if self.bn_multiple_of > MAX_GEMM_BN:
                return False
        return True

    def constraint_attr(self) -> DictionaryAttr | None:
        entries: dict[str, object] = {}
        if self.covers_n:
            entries["bn_covers_n"] = UnitAttr()
        elif self.bn_multiple_of > 1:
            entries["bn_multiple_of"] = IntegerAttr(self.bn_multiple_of, i64)
        else:
            return None
        reasons = [p.reason for p in self.proofs if p.ok and (p.covers_n or p.bn_multiple_of > 1)]
        entries["reasons"] = ArrayAttr([StringAttr(r) for r in reasons])
        return DictionaryAttr(entries)  # type: ignore[arg-type]


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


def _next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _bn_candidates(kernel: Operation) -> tuple[int, ...]:
    _, fixed, _ = _config(kernel)
    if fixed is not None:
        return (fixed,)
    return GEMM_BNS if isinstance(kernel, coda.GemmOp) else ELEMENTWISE_BNS


def _covers_allowed(kernel: Operation, n: int) -> bool:
    _, fixed, _ = _config(kernel)
    if fixed is not None:
        return fixed >= n
    limit = MAX_GEMM_BN if isinstance(kernel, coda.GemmOp) else MAX_COVER_ELEMENTWISE
    return n <= limit


def _prove_grouped(kernel: Operation, op: Operation, width: int, group_what: str, query, what: str = "the partner lies") -> OpProof:
    """Shared search over BN for pair_map / segment_reduce: `query(layout, extent)` -> Level."""
    m, n = kernel_columns(kernel)
    bm, _, warps = _config(kernel)
    tried: list[str] = []
    for bn in _bn_candidates(kernel):
        if (bn * width) % n:
            continue
        extent = bn * width // n
        if extent < 1 or extent & (extent - 1):
            continue
        level = query(tile_layout(kernel, bm, extent, warps), extent)
        tried.append(f"BN={bn}: {level.name.lower()}")
        if level <= Level.CTA:
            return OpProof(
                op, True, level,
                f"{op.name} {group_what}: {level.name.lower()}-local when BN % {bn} == 0",
                bn_multiple_of=bn,
            )
    if _covers_allowed(kernel, n):
        return OpProof(
            op, True, Level.CTA,
            f"{op.name} {group_what}: CTA-local when one column tile covers all {n} columns",
            covers_n=True,
        )
    where = "the accumulator tile" if isinstance(kernel, coda.GemmOp) else "the tile"
    return OpProof(
        op, False, Level.OUTSIDE,
        f"{op.name} {group_what} is not tile-local: {what} outside {where} for every "
        f"column tile width ({', '.join(tried) or 'no power-of-two BN holds whole groups'}) and "
        f"{n} columns are too many for one tile",
    )


def prove_op(kernel: Operation, op: Operation) -> OpProof | None:
    """The proof for one epilogue op (None: elementwise by construction)."""
    _, n = kernel_columns(kernel)
    if isinstance(op, coda.PairMapOp):
        stride = op.stride.value.data
        wide = max(v.type.cols for v in [*op.inputs, *op.outputs])  # type: ignore[attr-defined]
        interleave = getattr(kernel, "interleave", None)
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
        + (" and one column tile covering all columns" if proof.covers_n else "")
        + f", which no gemm tile (BN <= {MAX_GEMM_BN}) of N = {n} satisfies"
    )
