"""The shared state of the Triton epilogue lowering and its per-op table.

`tl_epilogue` builds a coda epilogue region as `tl` ops on one [BM, BN] tile; each coda
epilogue op is lowered by one function registered for its class in an `EpilogueLowerings`
table (`@LOWERINGS.impl(coda.LoadOp)` next to the function, as xDSL's interpreters register
`@impl`). The per-op lowerings live in modules by topic (`tl_epilogue_loads`: loads, broadcasts,
indices, scale / shift, accumulate; `tl_epilogue_maps`: maps, pair maps, the region's scalars;
`tl_epilogue_reductions`: reductions, segment reductions, select); `tl_epilogue` merges their
tables and drives them in `epilogue_schedule` order, storing each yielded value.

What every lowering shares is an `EpilogueContext`: the tile (`TileFrame`), the gemm's column
space, the coda value -> tl value map, the `tl` builder, and the helpers that make the tile's
columns, masks, loads and names. A lowering reads and extends that state only through the
context, so that each op's decisions stay in its own function.

This module imports none of the per-op modules (they import it): no import cycles.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, TypeVar

from xdsl.dialects import arith
from xdsl.dialects.builtin import f32, i32, i64
from xdsl.ir import Attribute, Block, BlockArgument, Operation, SSAValue

from coda_ir.analysis.epilogue_schedule import EpilogueStep
from coda_ir.dialects.coda import writes_over
from coda_ir.diagnostics import CompilerError, InternalCompilerBug
from coda_ir.dialects import coda
from coda_ir.dialects import triton_lang as tl
from coda_ir.tiling import MIN_BN
from coda_ir.lowering.tl_build import Builder, TileBody, lower_tile_body


def tile_width(b: Builder, bn: SSAValue, width: int, n: int) -> SSAValue:
    """The constexpr width of a W-wide tile of a kernel with N columns: BN * W / N."""
    r = Fraction(width, n)
    if r == 1:
        return bn
    if r.denominator == 1:
        return b.ibin(arith.MuliOp, bn, b.const(r.numerator, i32))
    if r.numerator == 1:
        return b.ibin(arith.DivSIOp, bn, b.const(r.denominator, i32))
    return b.ibin(arith.DivSIOp, b.ibin(arith.MuliOp, bn, b.const(r.numerator, i32)), b.const(r.denominator, i32))


def _pow2_ratio(width: int, n: int) -> bool:
    r = Fraction(width, n)
    return r.numerator & (r.numerator - 1) == 0 and r.denominator & (r.denominator - 1) == 0




@dataclass
class TileFrame:
    """The tile an epilogue runs on: the values its kernel head defines. `offs_m` / `offs_n`
    are the tile's [BM] rows and [BN] columns, `mask_m` / `mask_n` their bounds, `pid_m` /
    `pid_n` the tile's indices, `bm` / `bn` the constexpr extents, `m` / `n` the matrix's."""

    bm: SSAValue
    bn: SSAValue
    m: SSAValue
    n: SSAValue
    pid_m: SSAValue
    pid_n: SSAValue
    offs_m: SSAValue
    mask_m: SSAValue
    offs_n: SSAValue
    mask_n: SSAValue


@dataclass
class Cols:
    """The columns of a W-wide tile at this program's column tile."""

    cols: SSAValue  # [TW] global column indices
    mask: SSAValue  # [TW] column mask
    mask2: SSAValue  # [BM, TW] element mask
    tw: SSAValue  # the constexpr tile width


@dataclass
class Gathered:
    """A wide tile of a pair_map read or made in halves at the tile's pair indices: element p
    of `a` is the pair's first column `first[p]`, of `b` the second, `stride` further."""

    a: SSAValue
    b: SSAValue
    first: SSAValue
    stride: int
    cols: Cols
    second: SSAValue | None = None
    """The second columns when they are not `first + stride` (a pair_map with a period)."""


class _BodyClone:
    """One lowering of a scalar body (`tl_build.lower_tile_body`) copied into the kernel: its
    arguments bound to the context's tiles; `extents()` (the tile shape a constant result
    fills) is asked only when a constant result is needed, so that what it builds comes where
    it is first needed."""

    def __init__(self, body: TileBody, args: Sequence[SSAValue], extents: Callable[[], Sequence[SSAValue]],
                 b: Builder):
        self.body = body
        self.rank = len(body.block.args) - len(args)
        self.mapping: dict[SSAValue, SSAValue] = dict(zip(body.block.args, args))
        self.extents = extents
        self.b = b
        self.started = False
        self.bound = False

    def _copy(self, ops: Sequence[Operation]) -> None:
        for op in ops:
            self.b.add(op.clone(value_mapper=self.mapping))

    def ops(self, ops: Sequence[Operation] | None) -> None:
        """Copy the lowering of the body ops `ops` (None: all), with the values the body uses from
        the region around it before the first."""
        spans = self.body.spans
        seq: list[Operation] = []
        if not self.started:
            seq += spans.get(None, [])
            self.started = True
        for op in ops if ops is not None else [o for o in spans if o is not None]:
            seq += spans.get(op, [])
        self._copy(seq)

    def result(self, i: int) -> SSAValue:
        """Yielded value `i` (after the ops that make it were copied)."""
        fill = self.body.fills[i]
        if fill and not self.bound:
            extents = self.body.block.args[len(self.body.block.args) - self.rank :]
            self.mapping.update(zip(extents, self.extents()))
            self.bound = True
        self._copy(fill)
        value = self.body.results[i]
        return self.mapping.get(value, value)


@dataclass(frozen=True)
class ColumnSpace:
    """How a gemm's accumulator columns map to its tensors' columns: `interleave` h (N-wide
    tensors are read and written at perm(c), `coda.gemm`'s interleave), `interleave_wide` h (the
    same for 2N-wide ones), and whether such tiles are accessed as two contiguous half tiles
    where the tile lies inside one interleave group (`half_tile_io`, `EpilogueContext.halves`).
    An elementwise kernel's columns are the plain ones."""

    interleave: int = 0
    interleave_wide: int = 0
    half_tile_io: bool = True
    in_gemm: bool = False


# tl.dot needs N >= 16, so whole column tiles are at least 16 wide (2N-wide tiles 32). When the
# largest power of two dividing 2h is below this, no tile fits inside one interleave group and
# the half-tile branch would be dead code: it is not built (a narrower sub-tiled slice then
# keeps the scatter, which stores the same values).
MIN_TILE_COLS = 16


@dataclass
class Halves:
    """A tile in an interleaved column space as two contiguous half tiles of the user's layout,
    valid where `cond` holds (a constexpr test on the tile width TW): `setup()` builds, in that
    branch (the context's block), the user columns of the tile's even columns and the element mask of both halves; the
    odd columns are the same block `half` columns further on."""

    cond: SSAValue
    setup: Callable[[], tuple[SSAValue, SSAValue]]
    half: int
    tw: SSAValue


# ============================================================================ the per-op table


EpilogueLowering = Callable[["EpilogueContext", Any, EpilogueStep], None]
"""The lowering of one coda epilogue op: builds its `tl` ops into the context's block and binds
its results (`EpilogueContext.assign`); the step says which results of a split map to build."""

LoweringT = TypeVar("LoweringT", bound=EpilogueLowering)


class EpilogueLowerings:
    """A table from coda epilogue op classes to their lowerings, filled by `@table.impl(OpClass)`
    next to each lowering (xDSL's interpreters' `@impl`). A table made from others merges them;
    an op class registered twice is an error when the table is built, not a silent override."""

    def __init__(self, *merged: EpilogueLowerings):
        self.by_op: dict[type[Operation], EpilogueLowering] = {}
        for table in merged:
            for op_type, lowering in table.by_op.items():
                self._register(op_type, lowering)

    def _register(self, op_type: type[Operation], lowering: EpilogueLowering) -> None:
        if op_type in self.by_op:
            raise ValueError(f"two Triton epilogue lowerings for {op_type.__name__}")
        self.by_op[op_type] = lowering

    def impl(self, *op_types: type[Operation]) -> Callable[[LoweringT], LoweringT]:
        """Register the decorated function as the lowering of `op_types`."""

        def register(lowering: LoweringT) -> LoweringT:
            for op_type in op_types:
                self._register(op_type, lowering)
            return lowering

        return register

    def lower(self, ctx: EpilogueContext, step: EpilogueStep) -> None:
        """Lower the op of `step` by its registered lowering. The verifier admits only epilogue
        primitives and scalar ops in a region, so an op without an entry is a bug of coda-ir."""
        lowering = self.by_op.get(type(step.op))
        if lowering is None:
            raise InternalCompilerBug(step.op, f"'{step.op.name}' has no lowering in the Triton epilogue table "
                                               "(tl_epilogue.EPILOGUE_LOWERINGS)")
        lowering(ctx, step.op, step)


# ============================================================================ the context


class EpilogueContext:
    """What the lowerings of one epilogue region share: build its ops on the tile `frame` into
    `b`'s block.

    `params`: the region's tensor arguments -> their pointer parameters; `n`: the kernel's
    column count (a W-wide tile spans BN * W / N columns).

    Its methods are the helpers more than one topic's lowerings (or the driver's stores) use; a
    helper of one topic lives in that topic's module. `row_partials`, `carried`, `prebound`,
    `running` and `completed` are the driver's (`tl_epilogue`: stores and the schedule), set by
    the kernel that builds the epilogue."""

    def __init__(self, kernel: Operation, b: Builder, frame: TileFrame, n: int, params: dict[SSAValue, SSAValue],
                 columns: ColumnSpace | None = None, gluon_partition: bool = False):
        self.kernel = kernel
        self.b = b
        self.frame = frame
        self.whole_frame = frame  # the whole tile's (`frame` is a column slice's in `build_sliced_epilogue`)
        self.n = n
        self.params = params
        # a gemm's column space (elementwise kernels: the plain one)
        self.columns = columns if columns is not None else ColumnSpace()
        self.h = self.columns.interleave
        self.hw = self.columns.interleave_wide
        # sub-tiled gemm epilogues (`build_sliced_epilogue`): the slice being built (None: the whole
        # tile), row vectors loaded once for all slices, and the slices' row partials per output
        # index (combined in slice order after the last slice)
        self.slice: tuple[int, int] | None = None
        self.row_vectors: dict[tuple[str, SSAValue], SSAValue] | None = None
        self.row_partials: dict[int, tuple[coda.PartialsType, SSAValue, list[SSAValue]]] | None = None
        # the Gluon epilogue partition (`tl_gemm.lower_gluon_gemm`): ranges and pair maps in
        # explicit layouts (`#tl.layout`), column partials carried from row sub-tile to row
        # sub-tile (output index -> running value; the region's arguments to begin with), ops a
        # mainloop computed before the epilogue (op -> the value of its one result)
        self.gluon_partition = gluon_partition
        self.carried: dict[int, SSAValue] = {}
        self.prebound: dict[Operation, SSAValue] = {}
        self.values: dict[SSAValue, SSAValue] = {}  # coda value -> its tl value
        self.col_cache: dict[int, Cols] = {}
        self.body_clones: dict[Operation, _BodyClone] = {}  # maps made in several steps
        # what coda-legalize recorded for this kernel; the kernel's BN obeys it
        self.bn_multiple_of = coda.recorded_bn_multiple_of(kernel)
        self.rows64: SSAValue | None = None
        # `whole rows / cols`: partials along the walked axis combine into running values
        # (output index -> (partials type, running value, the partial's width)); `running`
        # adds a carried value to the loop the region is built in
        self.whole: coda.Axis | None = None
        self.running: Callable[[int, Attribute, str], SSAValue] | None = None
        self.completed: dict[int, tuple[coda.PartialsType, SSAValue, int]] = {}
        self.gathered: dict[SSAValue, Gathered] = {}
        self.pair_firsts: dict[int, tuple[SSAValue, Cols]] = {}  # stride -> first columns, pair columns
        self.period_pairs: dict[tuple[int, int], tuple[SSAValue, SSAValue, Cols]] = {}  # (stride, period) -> first, second, pair columns
        self.renamed: set[SSAValue] = set()

    # -------------------------------------------------------------- helpers
    @contextmanager
    def building_into(self, b: Builder) -> Iterator[None]:
        """Build into `b` (a loop body) for the duration of the block."""
        saved, self.b = self.b, b
        try:
            yield
        finally:
            self.b = saved

    def comment(self, text: str) -> None:
        self.b.add(tl.CommentOp(text))

    def i32(self, value: int) -> SSAValue:
        return self.b.const(value, i32)

    def need_bn(self, op: Operation, multiple: Fraction | int) -> None:
        """The built code of `op` is right only when BN is a multiple of `multiple`: check that
        the constraint coda-legalize recorded on the kernel implies it (every BN is a power of
        two >= MIN_BN, so small powers of two always hold). The lowering never widens it."""
        multiple = Fraction(multiple)
        if multiple.denominator != 1:
            multiple = Fraction(multiple.numerator)
        value = int(multiple)
        if value <= MIN_BN and not value & (value - 1):
            return
        if value & (value - 1) or self.bn_multiple_of % value:
            raise InternalCompilerBug(
                op,
                f"needs the column tile to be a multiple of {value}, but coda-legalize recorded "
                f"bn_multiple_of = {self.bn_multiple_of} on its kernel: the legality proof and the "
                "lowering disagree",
            )

    def row_offsets(self) -> SSAValue:
        """The tile's rows as 64-bit offsets (row * width may exceed 2^31), made once."""
        if self.rows64 is None:
            self.rows64 = self.b.value(tl.CastOp(self.frame.offs_m, i64), "rows64")
        return self.rows64

    def rows2(self) -> SSAValue:
        return self.b.value(tl.ExpandDimsOp(self.row_offsets(), 1))

    def element_mask(self, mask_cols: SSAValue, hint: str) -> SSAValue:
        """mask_m[:, None] & mask_cols[None, :]."""
        b = self.b
        return b.ibin(arith.AndIOp, b.value(tl.ExpandDimsOp(self.frame.mask_m, 1)), b.value(tl.ExpandDimsOp(mask_cols, 0)),
                      hint)

    def cols(self, op: Operation, width: int) -> Cols:
        if width in self.col_cache:
            return self.col_cache[width]
        n = self.n
        if not _pow2_ratio(width, n):
            raise CompilerError(
                op, f"a tile {width} columns wide cannot be laid out on a kernel with {n} columns (ratio must be a power of two)"
            )
        r = Fraction(width, n)
        if r.denominator > 1:
            self.need_bn(op, r.denominator)
        b, f = self.b, self.frame
        tag = "" if self.slice is None else f"_s{self.slice[0]}"  # a column slice's columns
        if width == n:
            cols = f.offs_n
            if self.h:  # accumulator column c holds the tensors' column perm(c)
                cols = b.value(tl.CallOp("_coda_interleave_rows", [f.offs_n, self.i32(self.h)], [f.offs_n.type]),
                               f"cols_n{tag}")
            c = Cols(cols, f.mask_n, self.element_mask(f.mask_n, f"mask_mn{tag}"), f.bn)
        else:
            tw = tile_width(b, f.bn, width, n)
            cols = b.ibin(arith.AddiOp, b.ibin(arith.MuliOp, self.pid_n(), tw), self.column_arange(tw),
                          f"cols_w{width}{tag}")
            mask = b.cmpi("slt", cols, self.i32(width), f"mask_w{width}{tag}")
            c = Cols(cols, mask, self.element_mask(mask, f"mask_mw{width}{tag}"), tw)
            if width == 2 * n and self.hw:
                # interleave_wide: 2N-wide tensors are read and written at perm(c)
                c.cols = b.value(tl.CallOp("_coda_interleave_rows", [cols, self.i32(self.hw)], [cols.type]),
                                 f"perm_w{width}{tag}")
        self.col_cache[width] = c
        return c

    def column_arange(self, tw: SSAValue) -> SSAValue:
        """`[0, tw)` as a column index vector (in the Gluon partition: in the epilogue layout's
        column slice)."""
        return self.b.value(tl.ArangeOp(tw, layout=tl.LayoutAttr(0) if self.gluon_partition else None))

    def pid_n(self) -> SSAValue:
        """The index of the column tile being built: the frame's, or in a column slice j of
        `parts` (`tl_epilogue.build_sliced_epilogue`) pid_n * parts + j, written where it is used."""
        if self.slice is None:
            return self.frame.pid_n
        j, parts = self.slice
        b = self.b
        return b.ibin(arith.AddiOp, b.ibin(arith.MuliOp, self.whole_frame.pid_n, self.i32(parts)), self.i32(j))

    def perm_half(self, width: int) -> int:
        """h when W-wide tensors are read and written at perm(c) (interleave h), else 0."""
        if self.h and width == self.n:
            return self.h
        if self.hw and width == 2 * self.n:
            return self.hw
        return 0

    def halves(self, op: Operation, width: int) -> Halves | None:
        """The two contiguous halves of a `width`-wide tile in an interleaved column space, or None.

        perm sends column c = g + 2i + j of the interleave group starting at g (2h columns) to
        g + i + j h. The tile's TW columns start at c0 = pid_n TW; when TW divides 2h (the
        constexpr `cond`; TW is a power of two) the tile lies inside one group, so its even
        columns land on the contiguous block g + (c0 - g) / 2 + [0, TW / 2) and its odd columns on
        the same block h further. The user columns are built as (tile's group) * 2h + (tile within
        the group) * TW / 2 + arange, not through perm, so Triton's axis analysis sees a
        contiguous, TW/2-aligned run and vectorizes the accesses. The verifier makes W a multiple
        of 2h, so perm maps each group onto itself and `ucol < W` is exactly the scatter's
        `c < W`: ragged rows are masked by mask_m, and columns past W only occur in a sub-tiled
        column slice.

        Otherwise the scatter stays: a tile wider than 2h holds several groups whose halves are
        runs of only h columns (no longer one block each), and a tile that straddles a group edge
        (2h not a multiple of TW, e.g. h = 12 with 32-wide tiles) has halves that wrap to the next
        group. Neither happens at LLaMA shapes (h = F >> BN). Half-tile stores: the LLaMA gate/up
        GEMM took 3.0x the plain GEMM's time on an H100 with the scatter, 1.24x with the split by
        hand (`half_tile_io=False` keeps the scatter everywhere, to A/B it; the values are
        bitwise the same).
        """
        half = self.perm_half(width)
        if not half or not self.columns.half_tile_io:
            return None
        group = 2 * half
        largest = group & -group  # the widest power-of-two tile inside one group
        if largest < MIN_TILE_COLS:
            return None
        c = self.cols(op, width)
        tw = c.tw

        def setup() -> tuple[SSAValue, SSAValue]:
            b = self.b  # the branch's
            tiles = b.ibin(arith.DivSIOp, self.i32(group), tw)  # tiles per group
            pid_n = self.pid_n()
            start = b.ibin(arith.AddiOp, b.ibin(arith.MuliOp, b.ibin(arith.DivSIOp, pid_n, tiles), self.i32(group)),
                           b.ibin(arith.MuliOp, b.ibin(arith.RemSIOp, self.pid_n(), tiles), b.ibin(arith.DivSIOp, tw, self.i32(2))))
            ucol = b.ibin(arith.AddiOp, start, b.value(tl.ArangeOp(b.ibin(arith.DivSIOp, tw, self.i32(2)))), "half_cols")
            inside = b.value(tl.ExpandDimsOp(b.cmpi("slt", ucol, self.i32(width)), 0))
            umask = b.ibin(arith.AndIOp, b.value(tl.ExpandDimsOp(self.frame.mask_m, 1)), inside, "half_mask")
            return ucol, umask

        self.comment(f"half tiles when the tile is inside one interleave group ({self.width_text(width)} divides "
                     f"{group}), else perm(c)")
        # `tw <= largest`, not `group % tw == 0`: the same test for a power-of-two tw
        return Halves(self.b.cmpi("sle", tw, self.i32(largest)), setup, half, tw)

    def width_text(self, width: int) -> str:
        """The constexpr width of a W-wide tile as the kernel writes it (for comments)."""
        bn = "BN" if self.slice is None else f"(BN // {self.slice[1]})"
        r = Fraction(width, self.n)
        if r == 1:
            return bn
        if r.denominator == 1:
            return f"({bn} * {r.numerator})"
        if r.numerator == 1:
            return f"({bn} // {r.denominator})"
        return f"({bn} * {r.numerator} // {r.denominator})"

    def if_constexpr(self, cond: SSAValue, then: Callable[[Builder], Sequence[SSAValue]],
                     otherwise: Callable[[Builder], Sequence[SSAValue]], result_types: Sequence[Attribute] = (),
                     hint: str | None = None) -> Sequence[SSAValue]:
        """`tl.constexpr_if cond`: each branch built by its function into its own block (which it
        may yield values from, of `result_types`)."""
        blocks = []
        for make in (then, otherwise):
            block = Block()
            inner = Builder(block)
            with self.building_into(inner):
                yielded = make(inner)
            block.add_op(tl.YieldOp(*yielded))
            blocks.append(block)
        op = self.b.add(tl.ConstexprIfOp(cond, result_types, blocks[0], blocks[1]))
        if hint is not None:
            for r in op.results:
                r.name_hint = hint
        return op.results

    def tile_shape(self, op: Operation, ty: Attribute) -> list[SSAValue]:
        assert isinstance(ty, coda.TileType)
        return [self.frame.bm, self.cols(op, ty.cols).tw]

    def ptr(self, op: Operation, value: SSAValue) -> SSAValue:
        if value not in self.params:
            raise CompilerError(op, "reads a tensor that is not an input of its kernel")
        return self.params[value]

    def hint_for(self, value: SSAValue, prefix: str = "t") -> str:
        hint = value.name_hint
        if hint and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", hint):
            return f"{prefix}_{hint}"
        return prefix

    def name(self, v: SSAValue, hint: str) -> SSAValue:
        """Name `v` `hint` in the printed kernel: a value this epilogue made and has not named yet
        (a body's result, an expression) takes the name; one already named keeps its own."""
        if v not in self.renamed and isinstance(v.owner, Operation) and v.owner.parent_block() is self.b.block \
                and (v.name_hint is None or v.name_hint == "s") and not isinstance(v.owner, arith.ConstantOp):
            v.name_hint = hint
            self.renamed.add(v)
        return v

    def assign(self, value: SSAValue, v: SSAValue, prefix: str = "t") -> SSAValue:
        """`v` is the tl value of coda value `value`, named after it."""
        v = self.name(v, self.hint_for(value, prefix))
        self.values[value] = v
        return v

    def get(self, op: Operation, value: SSAValue) -> SSAValue:
        if value in self.values:
            return self.values[value]
        raise CompilerError(op, "uses a value that has no Triton lowering here")

    def load(self, ptr: SSAValue, mask: SSAValue | None, other: float | int | None, element: Attribute) -> SSAValue:
        """A masked load (`other` 0: the integer literal, which Triton casts to the pointee),
        widened to the arithmetic type."""
        b = self.b
        other_value = None
        if other is not None:
            other_value = b.const(other, i32) if isinstance(other, int) else b.const(other, f32)
        loaded = b.value(tl.LoadOp(ptr, mask, other_value))
        assert tl.element_of(loaded.type) == element
        return b.compute_cast(loaded)

    def matrix_ptr(self, ptr: SSAValue, width: int, cols: SSAValue) -> SSAValue:
        """ptr + rows64[:, None] * width + cols[None, :] (cols: [TW] indices)."""
        b = self.b
        base = b.value(tl.AddPtrOp(ptr, b.ibin(arith.MuliOp, self.rows2(), b.const(width, i64))))
        return b.value(tl.AddPtrOp(base, b.value(tl.ExpandDimsOp(cols, 0))))

    def row_vector(self, key: tuple[str, SSAValue], load: Callable[[], SSAValue], hint: str) -> SSAValue:
        """A [BM] row vector read through `key`: made where it is used on a whole tile; loaded
        once, before the first column slice, when sub-tiled (`tl_epilogue.build_sliced_epilogue`)."""
        if self.row_vectors is None:
            return load()
        if key not in self.row_vectors:
            self.row_vectors[key] = self.name(load(), hint)
        return self.row_vectors[key]

    # -------------------------------------------------------------- shared by several ops' lowerings
    def body_clone(self, op: Operation, args: Sequence[SSAValue], rank: int,
                   extents: Callable[[], Sequence[SSAValue]]) -> _BodyClone:
        """The op's scalar body lowered on rank-`rank` tiles (`tl_build.lower_tile_body`), bound
        to `args`; `extents()`: the tile shape constant results fill."""
        return _BodyClone(lower_tile_body(op.body.blocks[0], rank), args, extents, self.b)  # type: ignore[attr-defined]

    def gathers_pairs(self, op: Operation) -> bool:
        """Whether `op` is a pair_map that reads its pairs straight from memory: the ones
        coda-legalize marked `coda.gathered` (a pair group no power-of-two column tile holds,
        e.g. SwiGLU with F = 96, or 14336, in a standalone elementwise kernel over plain loads).
        Each pair's two elements are gathered at their own columns (contiguous runs of
        `stride`), so any width compiles; the tile holds pair indices instead of whole groups."""
        if not isinstance(op, coda.PairMapOp) or not coda.is_gathered(op):
            return False
        self.check_gatherable(op)
        return True

    def check_gatherable(self, op: Operation, record: str = "coda.gathered") -> None:
        """A recorded `coda.gathered` / `coda.pair_halves` this lowering cannot honour is a bug, not
        bad input: coda-legalize records them only in standalone elementwise kernels."""
        if self.columns.in_gemm:
            raise InternalCompilerBug(op, f"is marked {record} in a gemm epilogue (only elementwise kernels read "
                                          "from memory)")
        if self.whole is not None:
            raise InternalCompilerBug(op, f"is marked {record} in a whole-row epilogue")

    def regathers(self, op: Operation) -> bool:
        """Whether `op` exchanges its pairs / segments inside one tile covering the whole row:
        the ops coda-legalize marked `coda.row_exchange` (groups no power-of-two tile holds,
        over computed values or in a gemm epilogue, e.g. SwiGLU's F = 48 after a fused
        producer, a head_dim of 40 in the backward). Their kernel's recorded BN constraint
        covers the whole row."""
        return coda.is_row_exchanged(op)

    def cover_row(self, op: Operation) -> None:
        """One column tile covers all N columns: BN a power of two >= N, which the recorded
        constraint must imply (need_bn checks it)."""
        self.need_bn(op, 1 << max(self.n - 1, 0).bit_length())

    def pair_first(self, op: Operation, stride: int, pairs: int) -> tuple[SSAValue, Cols]:
        """The first column of each pair of the tile's pair indices p (the second is `stride`
        further), and the pair-index columns: built once per stride."""
        if stride not in self.pair_firsts:
            c = self.cols(op, pairs)
            b = self.b
            group = b.ibin(arith.MuliOp, b.ibin(arith.DivSIOp, c.cols, self.i32(stride)), self.i32(2 * stride))
            first = b.ibin(arith.AddiOp, group, b.ibin(arith.RemSIOp, c.cols, self.i32(stride)), "pfirst")
            self.pair_firsts[stride] = (first, c)
        return self.pair_firsts[stride]

    def pair_load(self, ptr: SSAValue, width: int, first: SSAValue, offset: int, c: Cols, element: Attribute) -> SSAValue:
        """The pair elements at columns first (+ offset) of a width-wide matrix, at the tile's rows."""
        b = self.b
        base = b.value(tl.AddPtrOp(ptr, b.ibin(arith.MuliOp, self.rows2(), b.const(width, i64))))
        cols = first if not offset else b.ibin(arith.AddiOp, first, self.i32(offset))
        return self.load(b.value(tl.AddPtrOp(base, b.value(tl.ExpandDimsOp(cols, 0)))), c.mask2, 0, element)

    def written_over(self, source: SSAValue) -> bool:
        """Whether an output of this kernel is stored into the input `source` (`coda.writes_over`):
        then only the tile's own load of an element is ordered before its store, not a second
        read of it from memory."""
        over = writes_over(self.kernel) or []
        return isinstance(source, BlockArgument) and source.index in over
