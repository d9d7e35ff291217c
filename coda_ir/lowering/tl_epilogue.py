"""The epilogue builder: a coda epilogue region as `tl` ops on one [BM, BN] tile.

Every epilogue of the Triton lowering is built here, in `epilogue_schedule` order, each
yielded value stored right after the step that makes it. `convert-coda-to-tl` builds each
`coda.elementwise` kernel with it (`lower_elementwise`: the kernel head, program id -> tile,
and for `whole rows` / `whole cols` kernels an `scf.for` over the tiles along the walked axis
whose carried values are the running reductions, stored after the loop), and each gemm's
epilogue (`tl_gemm`: the region of the `tl.mainloop` op, on the tile the mainloop hands it).
Every decision is made here (what is loaded from where, masks, the layout of pairs and
segments, which recorded constraint a primitive needs); `lowering/triton_printer.py` prints
the result op by op.

The builder takes the tile it works on as a `TileFrame` (the values a kernel head or a
mainloop defines). The gemm-only features: a gemm's column space (`ColumnSpace`: interleaved
accumulator columns, read and written as two contiguous half tiles where a tile lies inside one
interleave group, a `tl.constexpr_if` on the tile width), sub-tiled epilogues
(`build_sliced_body`: the region once per column slice, each on its own frame), and the Gluon
epilogue partition (`gluon_partition`: ranges and pair maps in explicit Gluon layouts, column
partials carried across row sub-tiles, the accumulate its mainloop applies before the hand-off).

Value names: the builder gives a value a name hint where the printed kernel should name it
(`t_x` for coda value `%x`, `p` for partials, `rm` for masked tiles, ...); the printer writes
every other value used once in place.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction

from xdsl.dialects import arith, math, scf
from xdsl.dialects.builtin import TensorType, f32, i32, i64
from xdsl.ir import Attribute, Block, BlockArgument, Operation, SSAValue

from coda_ir.analysis.epilogue_schedule import EpilogueStep, epilogue_schedule
from coda_ir.dialects.coda import writes_over
from coda_ir.diagnostics import CompilerError, InternalCompilerBug
from coda_ir.dialects import coda
from coda_ir.dialects import triton_lang as tl
from coda_ir.tiling import MIN_BN
from coda_ir.dialects.tl_names import KERNEL_SCOPE, KernelNames
from coda_ir.lowering.tl_build import (
    Builder,
    ScalarLowering,
    TileBody,
    lower_tile_body,
    param_names,
)


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


def pointee(value: SSAValue) -> Attribute:
    """The element type a kernel parameter for `value` points to (partials: fp32)."""
    ty = value.type
    if isinstance(ty, coda.PartialsType):
        return f32
    assert isinstance(ty, TensorType)
    return ty.get_element_type()


def elementwise_params(op: coda.ElementwiseOp) -> tuple[list[tuple[str, Attribute]], int]:
    """The parameters of a `coda.elementwise` kernel (its inputs' and outputs' pointers, `M`,
    `N`, then the constexprs `BM`, `BN`) and how many of them (at the end) are constexprs."""
    names = KernelNames(KERNEL_SCOPE)
    block = op.body.blocks[0]
    ins = param_names(names, block.args, "in")
    outs = param_names(names, op.outputs, "out")
    params = [(p, tl.PointerType(pointee(v))) for p, v in zip(ins, block.args)]
    params += [(p, tl.PointerType(pointee(v))) for p, v in zip(outs, op.outputs)]
    return params + [("M", i32), ("N", i32), ("BM", i32), ("BN", i32)], 2


# ============================================================================ the tile


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
    arguments bound to the builder's tiles; `extents()` (the tile shape a constant result
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
    where the tile lies inside one interleave group (`half_tile_io`, `EpilogueBuilder.halves`).
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
    branch (the builder's block), the user columns of the tile's even columns and the element mask of both halves; the
    odd columns are the same block `half` columns further on."""

    cond: SSAValue
    setup: Callable[[], tuple[SSAValue, SSAValue]]
    half: int
    tw: SSAValue


# ============================================================================ the builder


class EpilogueBuilder:
    """Build the ops of an epilogue region on the tile `frame` into `b`'s block.

    `params`: the region's tensor arguments -> their pointer parameters; `n`: the kernel's
    column count (a W-wide tile spans BN * W / N columns)."""

    def __init__(self, kernel: Operation, b: Builder, frame: TileFrame, n: int, params: dict[SSAValue, SSAValue],
                 columns: ColumnSpace | None = None, gluon_partition: bool = False):
        self.kernel = kernel
        self.b = b
        self.frame = frame
        self.whole_frame = frame  # the whole tile's (`frame` is a column slice's in `build_sliced_body`)
        self.n = n
        self.params = params
        # a gemm's column space (elementwise kernels: the plain one)
        self.columns = columns if columns is not None else ColumnSpace()
        self.h = self.columns.interleave
        self.hw = self.columns.interleave_wide
        # sub-tiled gemm epilogues (`build_sliced_body`): the slice being built (None: the whole
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
        `parts` (`build_sliced_body`) pid_n * parts + j, written where it is used."""
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
        """Name `v` `hint` in the printed kernel: a value this builder made and has not named yet
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

    # -------------------------------------------------------------- loads
    def load_matrix(self, op: Operation, matrix: SSAValue) -> SSAValue:
        ty = matrix.type
        assert isinstance(ty, TensorType)
        _, width = ty.get_shape()
        c = self.cols(op, width)
        self.row_offsets()
        ptr, elt = self.ptr(op, matrix), ty.get_element_type()
        hv = self.halves(op, width)
        if hv is None:
            return self.load(self.matrix_ptr(ptr, width, c.cols), c.mask2, 0, elt)

        def halves(b: Builder) -> list[SSAValue]:
            # the scatter's gather is as uncoalesced as its store: read the two contiguous halves and
            # interleave them in registers (join puts half 0 at even, half 1 at odd columns)
            ucol, umask = hv.setup()
            lo = b.value(tl.LoadOp(self.matrix_ptr(ptr, width, ucol), umask, self.i32(0)))
            hi_ptr = b.value(tl.AddPtrOp(self.matrix_ptr(ptr, width, ucol), self.i32(hv.half)))
            hi = b.value(tl.LoadOp(hi_ptr, umask, self.i32(0)))
            return [b.compute_cast(b.value(tl.ReshapeOp(b.value(tl.JoinOp(lo, hi)), [self.frame.bm, hv.tw])))]

        def scatter(b: Builder) -> list[SSAValue]:
            return [self.load(self.matrix_ptr(ptr, width, c.cols), c.mask2, 0, elt)]

        (value,) = self.if_constexpr(hv.cond, halves, scatter, [tl.dynamic_tensor(f32, 2)], "ld_halves")
        return value

    def load_periodic(self, op: coda.LoadOp) -> SSAValue:
        """`T[m, c mod P]` for the tile's W-wide columns c, from an [M, P] table: a masked
        gather of the [BM, P] rows, contiguous runs of P per row, that stays in L2 across the
        column tiles of a row band. When the tile is exactly P wide (BN/2 == P for RoPE's pair
        tile) the indices are one plain [BM, P] block."""
        ty = op.result.type
        assert isinstance(ty, coda.TileType) and op.period is not None
        period = op.period
        c = self.cols(op, ty.cols)
        self.row_offsets()
        b = self.b
        idx = c.cols if period == ty.cols else b.ibin(arith.RemSIOp, c.cols, self.i32(period))
        elt = op.source.type.get_element_type()  # type: ignore[attr-defined]
        return self.load(self.matrix_ptr(self.ptr(op, op.source), period, idx), c.mask2, 0, elt)

    def load_vector(self, op: Operation, vector: SSAValue, axis: coda.Axis, width: int) -> SSAValue:
        """The vector as a [BM, 1] (rows), [1, TW] (cols) or scalar operand."""
        ty = vector.type
        assert isinstance(ty, TensorType)
        elt = ty.get_element_type()
        p = self.ptr(op, vector)
        b = self.b
        if axis == coda.Axis.SCALAR:
            return b.compute_cast(b.value(tl.LoadOp(p)))
        if axis == coda.Axis.ROWS:
            return b.value(tl.ExpandDimsOp(self.row_vector(("vector", p), lambda: self.load(
                b.value(tl.AddPtrOp(p, self.frame.offs_m)), self.frame.mask_m, 0, elt), "rv"), 1))
        c = self.cols(op, width)
        (length,) = ty.get_shape()
        idx = c.cols if length == width else b.ibin(arith.RemSIOp, c.cols, self.i32(length))
        return b.value(tl.ExpandDimsOp(self.load(b.value(tl.AddPtrOp(p, idx)), c.mask, 0, elt), 0))

    def row_vector(self, key: tuple[str, SSAValue], load: Callable[[], SSAValue], hint: str) -> SSAValue:
        """A [BM] row vector read through `key`: made where it is used on a whole tile; loaded
        once, before the first column slice, when sub-tiled (`build_sliced_body`)."""
        if self.row_vectors is None:
            return load()
        if key not in self.row_vectors:
            self.row_vectors[key] = self.name(load(), hint)
        return self.row_vectors[key]

    # -------------------------------------------------------------- primitives
    def build_op(self, op: Operation) -> None:
        b = self.b
        if isinstance(op, coda.LoadOp) and op.period is not None:
            self.comment(f"{op.name} cols_period {op.period}")
            self.assign(op.result, self.load_periodic(op))
        elif isinstance(op, (coda.LoadOp, coda.MapOp, coda.ReduceOp)) and coda.pair_halves_stride(op) is not None:
            self.build_halves(op)
        elif isinstance(op, coda.LoadOp):
            if op.result.uses and all(
                self.gathers_pairs(u.operation) and u.operation.is_wide(op.result) for u in op.result.uses  # type: ignore[attr-defined]
            ):
                return  # read by its pair_maps as two gathers (build_gathered_pair_map)
            self.comment(op.name)
            self.assign(op.result, self.load_matrix(op, op.source))
        elif isinstance(op, coda.BroadcastOp):
            ty = op.result.type
            assert isinstance(ty, coda.TileType)
            shape = self.tile_shape(op, ty)
            vec = self.load_vector(op, op.source, op.axis.data, ty.cols)
            self.comment(f"{op.name} {op.axis.data.value}")
            self.assign(op.result, b.value(tl.BroadcastToOp(vec, shape)))
        elif isinstance(op, coda.IndexOp):
            ty = op.result.type
            assert isinstance(ty, coda.TileType)
            shape = self.tile_shape(op, ty)
            c = self.cols(op, ty.cols)
            if op.axis.data == coda.Axis.ROWS:
                src = b.value(tl.ExpandDimsOp(self.frame.offs_m, 1))
            else:
                src = b.value(tl.ExpandDimsOp(c.cols, 0))
            self.comment(f"{op.name} {op.axis.data.value}")
            self.assign(op.result, b.value(tl.BroadcastToOp(b.value(tl.CastOp(src, i32)), shape)))
        elif isinstance(op, (coda.ScaleOp, coda.ShiftOp)):
            ty = op.tile.type
            assert isinstance(ty, coda.TileType)
            vec = self.load_vector(op, op.vector, op.axis.data, ty.cols)
            self.comment(f"{op.name} {op.axis.data.value}")
            cls = arith.MulfOp if isinstance(op, coda.ScaleOp) else arith.AddfOp
            self.assign(op.result, b.fbin(cls, self.get(op, op.tile), vec))
        elif isinstance(op, coda.AccumulateOp):
            self.comment(op.name)
            self.assign(op.result, b.fbin(arith.AddfOp, self.get(op, op.tile), self.load_matrix(op, op.matrix)))
        elif isinstance(op, coda.MapOp):
            self.build_map(op)
        elif isinstance(op, coda.PairMapOp):
            self.build_pair_map(op)
        elif isinstance(op, coda.ReduceOp):
            self.build_reduce(op)
        elif isinstance(op, coda.SegmentReduceOp):
            self.build_segment_reduce(op)
        elif isinstance(op, coda.SelectOp):
            self.build_select(op)
        elif op.name.split(".")[0] in ("arith", "math"):
            # a scalar of the region (a function of constants): lowered into each body that uses
            # it (`tl_build.ScalarLowering`); lowered here only to report an op that has none
            ScalarLowering(Builder(Block()), set()).lower_outside(op.results[0], {}, op)
        else:
            raise CompilerError(op, "is not an epilogue primitive with a Triton lowering")

    def body_clone(self, op: Operation, args: Sequence[SSAValue], rank: int,
                   extents: Callable[[], Sequence[SSAValue]]) -> _BodyClone:
        """The op's scalar body lowered on rank-`rank` tiles (`tl_build.lower_tile_body`), bound
        to `args`; `extents()`: the tile shape constant results fill."""
        return _BodyClone(lower_tile_body(op.body.blocks[0], rank), args, extents, self.b)  # type: ignore[attr-defined]

    def build_map(self, op: coda.MapOp, step: EpilogueStep | None = None) -> None:
        """The map's outputs: all of them, or those of one step of a split map (`epilogue_schedule`)."""
        args = [self.get(op, v) for v in op.inputs]
        ty = op.outputs[0].type
        assert isinstance(ty, coda.TileType)

        def extents() -> list[SSAValue]:
            return [self.frame.bm, self.cols(op, ty.cols).tw]

        if step is None or step.body is None:
            self.comment(op.name)
            indices: Sequence[int] = range(len(op.outputs))
            body = self.body_clone(op, args, 2, extents)
            body.ops(None)
        else:
            self.comment(f"{op.name} results {', '.join(map(str, step.results))}")
            indices = step.results
            if op not in self.body_clones:
                self.body_clones[op] = self.body_clone(op, args, 2, extents)
            body = self.body_clones[op]
            body.ops(step.body)
        for i in indices:
            self.assign(op.outputs[i], body.result(i))

    # -------------------------------------------------------------- pairs
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
        """A recorded `coda.gathered` / `coda.pair_halves` this builder cannot honour is a bug, not
        bad input: coda-legalize records them only in standalone elementwise kernels."""
        if self.columns.in_gemm:
            raise InternalCompilerBug(op, f"is marked {record} in a gemm epilogue (only elementwise kernels read "
                                          "from memory)")
        if self.whole is not None:
            raise InternalCompilerBug(op, f"is marked {record} in a whole-row epilogue")

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

    def build_halves(self, op: Operation) -> None:
        """An op coda-legalize marked `coda.pair_halves`: it handles a gathered pair_map's wide
        tiles as their two halves at the tile's pair-index columns (load both from memory, map
        each, reduce both into one row partial)."""
        self.check_gatherable(op, "coda.pair_halves")
        stride = coda.pair_halves_stride(op)
        assert stride is not None
        b = self.b
        if isinstance(op, coda.LoadOp):
            ty = op.result.type
            assert isinstance(ty, coda.TileType)
            first, c = self.pair_first(op, stride, ty.cols // 2)
            ptr = self.ptr(op, op.source)
            self.row_offsets()
            elt = op.source.type.get_element_type()  # type: ignore[attr-defined]
            self.comment(f"{op.name}, pair halves (columns first, first + {stride})")
            a = self.assign(op.result, self.pair_load(ptr, ty.cols, first, 0, c, elt), "pa")
            second = self.name(self.pair_load(ptr, ty.cols, first, stride, c, elt), "pb")
            self.gathered[op.result] = Gathered(a, second, first, stride, c)
        elif isinstance(op, coda.MapOp):
            self.comment(f"{op.name}, once per pair half")
            halves = [self.gathered[v] for v in op.inputs]
            c = halves[0].cols
            outs: list[list[SSAValue]] = []
            for k in range(2):
                body = self.body_clone(op, [h.a if k == 0 else h.b for h in halves], 2, lambda: [self.frame.bm, c.tw])
                body.ops(None)
                outs.append([body.result(j) for j in range(len(op.outputs))])
            for j, result in enumerate(op.outputs):
                a = self.assign(result, outs[0][j], "pw")
                second = self.name(outs[1][j], "pw")
                self.gathered[result] = Gathered(a, second, halves[0].first, stride, c)
        else:
            assert isinstance(op, coda.ReduceOp)
            g = self.gathered[op.tile]
            kind = op.kind.data
            self.comment(f"{op.name} {kind.value} dim 1 over both pair halves")
            if kind == coda.ReduceKind.MAX:
                neg_inf = b.const(float("-inf"), f32)
                lo = b.value(tl.ReduceOp("max", b.where(g.cols.mask2, g.a, neg_inf), 1))
                hi = b.value(tl.ReduceOp("max", b.where(g.cols.mask2, g.b, neg_inf), 1))
                self.assign(op.result, b.fbin(arith.MaximumfOp, lo, hi), "p")
            else:
                def sq(x: SSAValue) -> SSAValue:
                    return b.fbin(arith.MulfOp, x, x) if kind == coda.ReduceKind.SUMSQ else x

                lo = b.value(tl.ReduceOp("sum", b.where(g.cols.mask2, sq(g.a), b.const(0.0, f32)), 1))
                hi = b.value(tl.ReduceOp("sum", b.where(g.cols.mask2, sq(g.b), b.const(0.0, f32)), 1))
                self.assign(op.result, b.fbin(arith.AddfOp, lo, hi), "p")

    def period_columns(self, p: SSAValue, stride: int, period: int) -> tuple[SSAValue, SSAValue]:
        """The (first, second) columns of pair indices p of a pair_map with a period
        (`coda.pair_columns`): g = p // (P/2), j = p % (P/2); (g P + j, + s) for j < s, else
        (g P + 2j, + 1). Relative to a tile when p is (its tiles start at whole periods)."""
        b = self.b
        half = period // 2
        base = b.ibin(arith.MuliOp, b.ibin(arith.DivSIOp, p, self.i32(half)), self.i32(period))
        j = b.ibin(arith.RemSIOp, p, self.i32(half))
        rotated = b.cmpi("slt", j, self.i32(stride))
        first = b.ibin(arith.AddiOp, base, b.where(rotated, j, b.ibin(arith.MuliOp, j, self.i32(2))), "pfirst")
        second = b.where(rotated, b.ibin(arith.AddiOp, first, self.i32(stride)), b.ibin(arith.AddiOp, first, self.i32(1)),
                         "psecond")
        return first, second

    def period_pair_columns(self, op: coda.PairMapOp, pairs: int) -> tuple[SSAValue, SSAValue, Cols]:
        """The tile's pair indices' (first, second) columns of a pair_map with a period, built once."""
        stride, period = op.stride.value.data, op.group()
        if (stride, period) not in self.period_pairs:
            c = self.cols(op, pairs)
            self.period_pairs[(stride, period)] = (*self.period_columns(c.cols, stride, period), c)
        return self.period_pairs[(stride, period)]

    def build_period_pair_map(self, op: coda.PairMapOp) -> None:
        """A pair_map with a period on tiles in the wide columns' natural order, exchanged by
        `tl.gather` inside the tile: each narrow position p reads columns (first(p), second(p))
        of the wide tiles (`period_columns`, tile-relative); each wide column k reads pair
        back(k) = (k // P) P/2 + (k % P % s if k % P < 2s else k % P // 2) of the narrow
        results, the second element when k % P // s == 1 (k % P < 2s) or k is odd (else). The
        tile holds whole periods (BN constraint), or the whole row (`coda.row_exchange`);
        indices are clamped into the tile (lanes past N are masked on store)."""
        stride, period, pairs = op.stride.value.data, op.group(), op.pair_count()
        if self.regathers(op):
            self.cover_row(op)
        else:
            self.need_bn(op, Fraction(period * self.n, 2 * pairs))  # whole periods in a tile
        narrow, wide = self.cols(op, pairs), self.cols(op, 2 * pairs)
        b = self.b
        bm = self.frame.bm
        self.comment(f"{op.name} stride {stride} period {period}, pairs exchanged in the tile")

        def spread(index: SSAValue, limit: SSAValue, width: SSAValue, hint: str) -> SSAValue:
            clamped = b.ibin(arith.MinSIOp, index, b.ibin(arith.SubiOp, limit, self.i32(1)))
            return b.value(tl.BroadcastToOp(b.value(tl.ExpandDimsOp(clamped, 0)), [bm, width]), hint)

        first, second = self.period_columns(self.column_arange(narrow.tw), stride, period)
        first, second = spread(first, wide.tw, narrow.tw, "pfirst"), spread(second, wide.tw, narrow.tw, "psecond")
        args: list[SSAValue] = []
        for value in op.inputs:
            src = self.get(op, value)
            if op.is_wide(value):
                args += [b.value(tl.GatherOp(src, first, 1), "pa"), b.value(tl.GatherOp(src, second, 1), "pb")]
            else:
                args.append(src)
        body = self.body_clone(op, args, 2, lambda: [bm, narrow.tw])
        body.ops(None)
        back = upper = None
        i = 0
        for result in op.outputs:
            count = 2 if op.is_wide(result) else 1
            values = [body.result(j) for j in range(i, i + count)]
            i += count
            if count == 1:
                self.assign(result, values[0])
                continue
            if back is None:
                k = self.column_arange(wide.tw)
                r = b.ibin(arith.RemSIOp, k, self.i32(period))
                grouped = b.cmpi("slt", r, self.i32(2 * stride))
                j = b.where(grouped, b.ibin(arith.RemSIOp, r, self.i32(stride)), b.ibin(arith.DivSIOp, r, self.i32(2)))
                pair = b.ibin(arith.AddiOp, b.ibin(arith.MuliOp, b.ibin(arith.DivSIOp, k, self.i32(period)),
                                                    self.i32(period // 2)), j)
                back = spread(pair, narrow.tw, wide.tw, "pback")
                which = b.where(grouped, b.ibin(arith.DivSIOp, r, self.i32(stride)), b.ibin(arith.RemSIOp, r, self.i32(2)))
                upper = b.value(tl.ExpandDimsOp(b.cmpi("ne", which, self.i32(0)), 0), "pupper")
            a, second_v = (self.name(v, "pw") for v in values)
            self.assign(result, b.where(upper, b.value(tl.GatherOp(second_v, back, 1)), b.value(tl.GatherOp(a, back, 1))))

    def build_gathered_pair_map(self, op: coda.PairMapOp) -> None:
        stride, pairs = op.stride.value.data, op.pair_count()
        self.row_offsets()
        self.comment(f"{op.name} stride {stride}{'' if op.period is None else f' period {op.group()}'}, "
                     "pairs gathered from memory")
        if op.period is not None:
            first, second_cols, c = self.period_pair_columns(op, pairs)
            self.build_gathered_pairs(op, first, second_cols, c)
            return
        first, c = self.pair_first(op, stride, pairs)  # the tile's pair indices p; each is (first, first + stride)
        self.build_gathered_pairs(op, first, None, c)

    def build_gathered_pairs(self, op: coda.PairMapOp, first: SSAValue, second_cols: SSAValue | None, c: Cols) -> None:
        stride, pairs = op.stride.value.data, op.pair_count()
        args: list[SSAValue] = []
        for value in op.inputs:
            if op.is_wide(value) and value in self.gathered:  # loaded in halves (coda.pair_halves)
                args += [self.gathered[value].a, self.gathered[value].b]
            elif op.is_wide(value):
                load = value.owner
                assert isinstance(load, coda.LoadOp)
                ptr = self.ptr(op, load.source)
                elt = load.source.type.get_element_type()  # type: ignore[attr-defined]
                a = self.name(self.pair_load(ptr, 2 * pairs, first, 0, c, elt), "pa")
                if second_cols is not None:
                    second = self.name(self.pair_load(ptr, 2 * pairs, second_cols, 0, c, elt), "pb")
                else:
                    second = self.name(self.pair_load(ptr, 2 * pairs, first, stride, c, elt), "pb")
                args += [a, second]
            else:
                args.append(self.get(op, value))
        body = self.body_clone(op, args, 2, lambda: [self.frame.bm, c.tw])
        body.ops(None)
        i = 0
        for result in op.outputs:
            count = 2 if op.is_wide(result) else 1
            values = [body.result(j) for j in range(i, i + count)]
            i += count
            if count == 2:
                a, second = (self.assign(result, v, "pw") for v in values)
                self.gathered[result] = Gathered(a, second, first, stride, c, second_cols)
            else:
                self.assign(result, values[0])

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

    def clamped_index(self, cols: SSAValue, divisor: int, scale: int, modulo: int, offset: int, limit: SSAValue,
                      width: SSAValue, hint: str | None) -> SSAValue:
        """broadcast_to(minimum((cols // divisor) * scale + cols % modulo (+ offset), limit - 1)[None, :], (BM, width))."""
        b = self.b
        index = b.ibin(arith.AddiOp, b.ibin(arith.MuliOp, b.ibin(arith.DivSIOp, cols, self.i32(divisor)), self.i32(scale)),
                       b.ibin(arith.RemSIOp, cols, self.i32(modulo)))
        if offset:
            index = b.ibin(arith.AddiOp, index, self.i32(offset))
        clamped = b.ibin(arith.MinSIOp, index, b.ibin(arith.SubiOp, limit, self.i32(1)))
        return b.value(tl.BroadcastToOp(b.value(tl.ExpandDimsOp(clamped, 0)), [self.frame.bm, width]), hint)

    def build_regathered_pair_map(self, op: coda.PairMapOp) -> None:
        """A pair_map on tiles that cover the whole row, the partners exchanged by `tl.gather`
        along the columns: each narrow position p reads (first(p), first(p) + stride) of the
        wide tiles, first(p) = (p // stride) * 2 stride + p % stride; each wide column c reads
        pair p(c) of the narrow results, the first or the second element by c's half of its
        group. Indices are clamped into the tile (lanes past N are masked on store)."""
        stride, pairs = op.stride.value.data, op.pair_count()
        self.cover_row(op)
        narrow, wide = self.cols(op, pairs), self.cols(op, 2 * pairs)
        b = self.b
        self.comment(f"{op.name} stride {stride}, pairs exchanged in a whole-row tile")
        first = self.clamped_index(narrow.cols, stride, 2 * stride, stride, 0, wide.tw, narrow.tw, "pfirst")
        second = self.clamped_index(narrow.cols, stride, 2 * stride, stride, stride, wide.tw, narrow.tw, "psecond")
        args: list[SSAValue] = []
        for value in op.inputs:
            src = self.get(op, value)
            if op.is_wide(value):
                args += [b.value(tl.GatherOp(src, first, 1), "pa"), b.value(tl.GatherOp(src, second, 1), "pb")]
            else:
                args.append(src)
        body = self.body_clone(op, args, 2, lambda: [self.frame.bm, narrow.tw])
        body.ops(None)
        back = upper = None
        i = 0
        for result in op.outputs:
            count = 2 if op.is_wide(result) else 1
            values = [body.result(j) for j in range(i, i + count)]
            i += count
            if count == 1:
                self.assign(result, values[0])
                continue
            if back is None:  # wide column c <- pair (c // 2s) * s + c % s, second when c % 2s >= s
                back = self.clamped_index(wide.cols, 2 * stride, stride, stride, 0, narrow.tw, wide.tw, "pback")
                upper_cols = b.cmpi("sge", b.ibin(arith.RemSIOp, wide.cols, self.i32(2 * stride)), self.i32(stride))
                upper = b.value(tl.ExpandDimsOp(upper_cols, 0), "pupper")
            a, second = (self.name(v, "pw") for v in values)
            self.assign(result, b.where(upper, b.value(tl.GatherOp(second, back, 1)), b.value(tl.GatherOp(a, back, 1))))

    def build_pair_map(self, op: coda.PairMapOp) -> None:
        if self.gathers_pairs(op):
            self.build_gathered_pair_map(op)
            return
        if op.period is not None:
            self.build_period_pair_map(op)
            return
        stride = op.stride.value.data
        pairs = op.pair_count()
        if self.regathers(op):
            self.build_regathered_pair_map(op)
            return
        wide_cols = self.cols(op, 2 * pairs)
        # groups of 2*stride columns must not straddle tiles: BN * W / N % (2 s) == 0
        self.need_bn(op, Fraction(2 * stride * self.n, 2 * pairs))
        b = self.b
        bm, s = self.frame.bm, self.i32(stride)
        groups = b.ibin(arith.DivSIOp, wide_cols.tw, self.i32(2 * stride))
        self.comment(f"{op.name} stride {stride}")
        args: list[SSAValue] = []
        like: SSAValue | None = None  # the first split wide operand (the narrow ones take its layout)
        narrows: list[SSAValue] = []
        for value in op.inputs:
            src = self.get(op, value)
            if op.is_wide(value):
                reshaped = b.value(tl.ReshapeOp(src, [bm, groups, self.i32(2), s]))
                grouped = b.value(tl.PermuteOp(reshaped, (0, 1, 3, 2)), "pw")
                split = b.add(tl.SplitOp(grouped))
                split.results[0].name_hint, split.results[1].name_hint = "pa", "pb"
                args += list(split.results)
                if like is None:
                    like = split.results[0]
            else:
                narrows.append(b.value(tl.ReshapeOp(src, [bm, groups, s]), "pn"))
                args.append(narrows[-1])
        body = self.body_clone(op, args, 3, lambda: [bm, groups, s])
        body.ops(None)
        i = 0
        for result in op.outputs:
            ty = result.type
            assert isinstance(ty, coda.TileType)
            shape = self.tile_shape(op, ty)
            if op.is_wide(result):
                a, second = body.result(i), body.result(i + 1)
                i += 2
                joined = b.value(tl.PermuteOp(b.value(tl.JoinOp(a, second)), (0, 1, 3, 2)))
                self.assign(result, self.relayout(b.value(tl.ReshapeOp(joined, shape))))
            else:
                a = body.result(i)
                i += 1
                self.assign(result, self.relayout(b.value(tl.ReshapeOp(a, shape))))
        if self.gluon_partition and like is not None:
            self.narrows_like(b, narrows, like)

    def relayout(self, v: SSAValue) -> SSAValue:
        """A tile a pair map made by reshaping its pairs back: in the Gluon partition, converted to
        the epilogue layout (the reshape's own layout is Triton's to infer)."""
        if not self.gluon_partition:
            return v
        return self.b.value(tl.ConvertLayoutOp(v, tl.LayoutAttr()))

    def narrows_like(self, b: Builder, narrows: Sequence[SSAValue], like: SSAValue) -> None:
        """In the Gluon partition, a pair map's narrow operands take the layout of its split wide
        ones (`gl.convert_layout(n, like.type.layout)`; free: the epilogue layout keeps each pair
        in one thread, `plan_mainloop.epilogue_column_lanes`), converted at each use, as the
        kernels measured on the H100 were written."""
        for narrow in narrows:
            for use in list(narrow.uses):
                user = use.operation
                convert = tl.ConvertLayoutOp(narrow, like=like)
                b.block.insert_op_before(convert, user)
                user.operands[use.index] = convert.result

    # -------------------------------------------------------------- reductions
    def masked(self, op: Operation, x: SSAValue, ty: coda.TileType, kind: coda.ReduceKind) -> SSAValue:
        """The tile with its out-of-bounds elements neutral for `kind` (sumsq: squared)."""
        c = self.cols(op, ty.cols)
        b = self.b
        if kind == coda.ReduceKind.SUM:
            return b.where(c.mask2, x, b.const(0.0, f32))
        if kind == coda.ReduceKind.SUMSQ:
            return b.where(c.mask2, b.fbin(arith.MulfOp, x, x), b.const(0.0, f32))
        return b.where(c.mask2, x, b.const(float("-inf"), f32))

    def build_reduce(self, op: coda.ReduceOp) -> None:
        ty = op.tile.type
        assert isinstance(ty, coda.TileType)
        kind = op.kind.data
        dim = op.dim.value.data
        x = self.get(op, op.tile)
        b = self.b
        self.comment(f"{op.name} {kind.value} dim {dim}")
        masked = self.name(self.masked(op, x, ty, kind), "rm")
        if kind in (coda.ReduceKind.SUM, coda.ReduceKind.SUMSQ):
            self.assign(op.result, b.value(tl.ReduceOp("sum", masked, dim)), "p")
        elif kind == coda.ReduceKind.MAX:
            self.assign(op.result, b.value(tl.ReduceOp("max", masked, dim)), "p")
        else:
            mx = b.value(tl.ReduceOp("max", masked, dim), "lse_max")
            neg_inf = b.const(float("-inf"), f32)
            safe = b.where(b.cmpf("oeq", mx, neg_inf), b.const(0.0, f32), mx, "lse_ref")
            spread = b.value(tl.ExpandDimsOp(safe, 1 if dim == 1 else 0))
            # exp(-inf) = 0: masked elements do not contribute; an all-masked partial is -inf
            total = b.value(tl.ReduceOp("sum", b.unary(math.ExpOp, b.fbin(arith.SubfOp, masked, spread)), dim))
            self.assign(op.result, b.fbin(arith.AddfOp, safe, b.unary(math.LogOp, total)), "p")

    def build_segment_reduce(self, op: coda.SegmentReduceOp) -> None:
        ty = op.tile.type
        assert isinstance(ty, coda.TileType)
        kind = op.kind.data
        w = op.width.value.data
        group = self.perm_half(ty.cols)
        if group and w % (2 * group):
            raise CompilerError(
                op,
                f"segment width {w} is not a multiple of the interleave group {2 * group}: segments "
                "would mix interleaved columns",
            )
        c = self.cols(op, ty.cols)
        if self.gathers_segments(op):
            self.build_gathered_segment_reduce(op, c)
            return
        if self.regathers(op):
            self.build_regathered_segment_reduce(op)
            return
        self.need_bn(op, Fraction(w * self.n, ty.cols))
        x = self.get(op, op.tile)
        b = self.b
        self.comment(f"{op.name} {kind.value} width {w}")
        bm, segments = self.frame.bm, b.ibin(arith.DivSIOp, c.tw, self.i32(w))
        seg = b.value(tl.ReshapeOp(self.masked(op, x, ty, kind), [bm, segments, self.i32(w)]), "seg")
        reduced = b.value(tl.ReduceOp("max" if kind == coda.ReduceKind.MAX else "sum", seg, 2))
        spread = b.value(tl.BroadcastToOp(b.value(tl.ExpandDimsOp(reduced, 2)), [bm, b.ibin(arith.DivSIOp, c.tw, self.i32(w)),
                                                                                  self.i32(w)]))
        self.assign(op.result, b.value(tl.ReshapeOp(spread, [bm, c.tw])))

    def segment_loop(self, kind: coda.ReduceKind, c: Cols, w: int, fetch: Callable[[Builder, SSAValue, SSAValue], SSAValue],
                     square: bool) -> SSAValue:
        """for k in range(0, w): acc = acc (+ or max) fetch(k), the segment's k-th value at each
        column (segstart: the column's segment start); the accumulated tile."""
        b = self.b
        start = b.ibin(arith.MuliOp, b.ibin(arith.DivSIOp, c.cols, self.i32(w)), self.i32(w), "segstart")
        shape = [self.frame.bm, c.tw]
        init = b.const(float("-inf") if kind == coda.ReduceKind.MAX else 0.0, f32)
        acc0 = b.value(tl.FullOp(shape, init, f32))
        body = Block(arg_types=[i32, acc0.type])
        body.args[0].name_hint, body.args[1].name_hint = "segk", "segacc"
        inner = Builder(body)
        v = fetch(inner, start, body.args[0])
        v.name_hint = "segv"
        if kind == coda.ReduceKind.MAX:
            nxt = inner.fbin(arith.MaximumfOp, body.args[1], v)
        else:
            nxt = inner.fbin(arith.AddfOp, body.args[1], inner.fbin(arith.MulfOp, v, v) if square else v)
        inner.add(scf.YieldOp(nxt))
        loop = b.add(scf.ForOp(self.i32(0), self.i32(w), self.i32(1), [acc0], [body]))
        loop.results[0].name_hint = "segacc"
        return loop.results[0]

    def build_regathered_segment_reduce(self, op: coda.SegmentReduceOp) -> None:
        """A segment reduction on a tile covering the whole row, for a width no power-of-two
        tile holds whole: each column accumulates its segment's w values, fetched from the
        (masked) tile by `tl.gather` in the segment's order."""
        ty = op.tile.type
        assert isinstance(ty, coda.TileType)
        kind, w = op.kind.data, op.width.value.data
        self.cover_row(op)
        c = self.cols(op, ty.cols)
        x = self.name(self.masked(op, self.get(op, op.tile), ty, kind), "segx")
        self.comment(f"{op.name} {kind.value} width {w}, segments gathered in a whole-row tile")

        def fetch(inner: Builder, start: SSAValue, k: SSAValue) -> SSAValue:
            clamped = inner.ibin(arith.MinSIOp, inner.ibin(arith.AddiOp, start, k), inner.ibin(arith.SubiOp, c.tw, self.i32(1)))
            index = inner.value(tl.BroadcastToOp(inner.value(tl.ExpandDimsOp(clamped, 0)), [self.frame.bm, c.tw]))
            return inner.value(tl.GatherOp(x, index, 1))

        # masked() squared the values already for sumsq
        self.assign(op.result, self.segment_loop(kind, c, w, fetch, square=False))

    def gathers_segments(self, op: coda.SegmentReduceOp) -> bool:
        """Whether a segment reduction reads its segments straight from memory: the ones
        coda-legalize marked `coda.gathered` (a segment width no power-of-two column tile holds
        whole, e.g. a head_dim of 48 or 80, over a plain load of a kernel input). Each column
        then sums its own segment from memory (w loads per tile, L1/L2 resident): slower than
        the in-register reduction, but any width compiles."""
        if not coda.is_gathered(op):
            return False
        self.check_gatherable(op)
        return True

    def build_gathered_segment_reduce(self, op: coda.SegmentReduceOp, c: Cols) -> None:
        ty = op.tile.type
        assert isinstance(ty, coda.TileType)
        kind, w = op.kind.data, op.width.value.data
        load = op.tile.owner
        assert isinstance(load, coda.LoadOp)
        ptr = self.ptr(op, load.source)
        self.row_offsets()
        elt = load.source.type.get_element_type()  # type: ignore[attr-defined]
        self.comment(f"{op.name} {kind.value} width {w}, segments gathered from memory")
        other = float("-inf") if kind == coda.ReduceKind.MAX else 0

        def fetch(inner: Builder, start: SSAValue, k: SSAValue) -> SSAValue:
            with self.building_into(inner):
                return self.load(self.matrix_ptr(ptr, ty.cols, inner.ibin(arith.AddiOp, start, k)), c.mask2, other, elt)

        self.assign(op.result, self.segment_loop(kind, c, w, fetch, square=kind == coda.ReduceKind.SUMSQ))

    def written_over(self, source: SSAValue) -> bool:
        """Whether an output of this kernel is stored into the input `source` (`coda.writes_over`):
        then only the tile's own load of an element is ordered before its store, not a second
        read of it from memory."""
        over = writes_over(self.kernel) or []
        return isinstance(source, BlockArgument) and source.index in over

    def build_select(self, op: coda.SelectOp) -> None:
        ty = op.tile.type
        assert isinstance(ty, coda.TileType)
        c = self.cols(op, ty.cols)
        x = self.get(op, op.tile)
        b = self.b
        self.comment(op.name)
        ptr = self.ptr(op, op.indices)
        idx = self.row_vector(("indices", ptr), lambda: b.value(tl.LoadOp(b.value(tl.AddPtrOp(ptr, self.frame.offs_m)),
                                                             self.frame.mask_m, self.i32(-1))), "sel_idx")
        if self.row_vectors is None:
            idx = self.name(idx, "sel_idx")
        load = op.tile.owner
        if (isinstance(load, coda.LoadOp) and load.period is None and ty.cols == self.n and not self.h
                and self.slice is None and not self.written_over(load.source)):
            # the tile is the plain load of an N-wide matrix at the kernel's own columns: read the one
            # element at idx[m] instead of comparing every column with it and reducing the tile (the
            # compare, select and row sum over each [BM, BN] tile cost the LLaMA-1B LM head's
            # whole-rows cross-entropy pass 0.37 ms of its 1.16 on the H100); the same value, since
            # the tile is that element widened to f32 and the sum adds only zeros to it
            f = self.frame
            first = b.ibin(arith.MuliOp, f.pid_n, f.bn)
            inside = b.ibin(arith.AndIOp, b.cmpi("sge", idx, first),
                            b.cmpi("slt", idx, b.ibin(arith.AddiOp, first, f.bn)))
            hit = b.ibin(arith.AndIOp, f.mask_m, b.ibin(arith.AndIOp, inside, b.cmpi("slt", idx, f.n)), "sel_hit")
            ptr_m = self.ptr(op, load.source)
            row = b.value(tl.AddPtrOp(ptr_m, b.ibin(arith.MuliOp, self.row_offsets(), b.const(ty.cols, i64))))
            elt = load.source.type.get_element_type()  # type: ignore[attr-defined]
            self.assign(op.result, self.load(b.value(tl.AddPtrOp(row, idx)), hit, 0, elt), "p")
            return
        hit = b.ibin(arith.AndIOp, c.mask2, b.cmpi("eq", b.value(tl.ExpandDimsOp(c.cols, 0)), b.value(tl.ExpandDimsOp(idx, 1))))
        self.assign(op.result, b.value(tl.ReduceOp("sum", b.where(hit, x, b.const(0.0, f32)), 1)), "p")

    # -------------------------------------------------------------- stores
    def build_store(self, op: Operation, value: SSAValue, index: int, result: SSAValue, ptr: SSAValue) -> None:
        """Store one yielded value (output `index` of the kernel) as soon as it is final."""
        x = self.get(op, value)
        rty = result.type
        b, f = self.b, self.frame
        if isinstance(value.type, coda.PartialsType):
            pty = value.type
            src = value.owner
            assert isinstance(src, Operation)
            if self.whole is not None:
                self.combine_running(index, pty, x, src)
                return
            if pty.axis == coda.Axis.ROWS:
                if self.row_partials is not None:
                    # a column slice's partial: combined with the other slices' after the last one
                    self.row_partials.setdefault(index, (pty, ptr, []))[2].append(x)
                    return
                self.comment("store partials [M, tiles_n] at [m, pid_n]")
                tiles = b.value(arith.ExtSIOp(b.value(tl.CdivOp(f.n, f.bn)), i64))
                at = b.value(tl.AddPtrOp(ptr, b.ibin(arith.MuliOp, self.row_offsets(), tiles)))
                b.add(tl.StoreOp(b.value(tl.AddPtrOp(at, f.pid_n)), x, f.mask_m))
            elif self.gluon_partition:
                tile = src.operands[0].type
                assert isinstance(tile, coda.TileType)
                self.carry_column_partials(index, pty, x, self.cols(op, tile.cols))
            else:
                tile = src.operands[0].type
                assert isinstance(tile, coda.TileType)
                c = self.cols(op, tile.cols)
                self.comment("store partials [L, tiles_m] at [n, pid_m]")
                tiles = b.value(arith.ExtSIOp(b.value(tl.CdivOp(f.m, f.bm)), i64))
                at = b.value(tl.AddPtrOp(ptr, b.ibin(arith.MuliOp, b.value(tl.CastOp(c.cols, i64)), tiles)))
                b.add(tl.StoreOp(b.value(tl.AddPtrOp(at, f.pid_m)), x, c.mask))
        elif value in self.gathered:
            # a wide pair_map result gathered from memory: each pair's two columns
            g = self.gathered[value]
            assert isinstance(value.type, coda.TileType) and isinstance(rty, TensorType)
            self.row_offsets()
            elt = rty.get_element_type()
            over = writes_over(self.kernel)
            if over is not None and over[index] >= 0:
                # stored over the input it reads in pair halves: each half's store waits for every
                # thread's loads of this program (analysis/in_place.py's pair-halves rule, point 2)
                b.add(tl.DebugBarrierOp())
            for half, offset in ((g.a, 0), (g.b, g.stride)):
                base = b.value(tl.AddPtrOp(ptr, b.ibin(arith.MuliOp, self.rows2(), b.const(value.type.cols, i64))))
                if offset and g.second is not None:
                    cols = g.second
                else:
                    cols = g.first if not offset else b.ibin(arith.AddiOp, g.first, self.i32(offset))
                at = b.value(tl.AddPtrOp(base, b.value(tl.ExpandDimsOp(cols, 0))))
                b.add(tl.StoreOp(at, b.store_cast(half, elt), g.cols.mask2))
        else:
            ty = value.type
            assert isinstance(ty, coda.TileType) and isinstance(rty, TensorType)
            c = self.cols(op, ty.cols)
            self.row_offsets()
            elt = rty.get_element_type()
            hv = self.halves(op, ty.cols)

            def scatter(inner: Builder) -> list[SSAValue]:
                stored = inner.store_cast(x, elt)
                inner.add(tl.StoreOp(self.matrix_ptr(ptr, ty.cols, c.cols), stored, c.mask2))
                return []

            if hv is None:
                scatter(b)
                return

            def halves(inner: Builder) -> list[SSAValue]:
                # interleaved columns -> the user's layout: the even columns (first half, e.g. gate)
                # and the odd ones (second half, up) each as one contiguous block, not a scatter whose
                # adjacent lanes write h columns apart
                ucol, umask = hv.setup()
                shape = [self.frame.bm, inner.ibin(arith.DivSIOp, hv.tw, self.i32(2)), self.i32(2)]
                split = inner.add(tl.SplitOp(inner.value(tl.ReshapeOp(inner.store_cast(x, elt), shape))))
                split.results[0].name_hint, split.results[1].name_hint = "st_lo", "st_hi"
                inner.add(tl.StoreOp(self.matrix_ptr(ptr, ty.cols, ucol), split.results[0], umask))
                hi = inner.value(tl.AddPtrOp(self.matrix_ptr(ptr, ty.cols, ucol), self.i32(hv.half)))
                inner.add(tl.StoreOp(hi, split.results[1], umask))
                return []

            self.if_constexpr(hv.cond, halves, scatter)

    def carry_column_partials(self, index: int, pty: coda.PartialsType, x: SSAValue, c: Cols) -> None:
        """The Gluon partition: this row sub-tile's column partials added to (max: combined with)
        the running ones of output `index`, in sub-tile order; the template stores them once per
        tile."""
        if c.cols is not self.frame.offs_n:
            raise InternalCompilerBug(self.kernel, "column partials of a tile that is not N wide in a Gluon epilogue "
                                                   "(coda-plan-mainloop admits N-wide ones only)")
        if index not in self.carried:
            raise InternalCompilerBug(self.kernel, f"output #{index}'s column partials are not carried by the Gluon "
                                                   "epilogue's region")
        b = self.b
        self.comment("column partials: carried across the row sub-tiles (in sub-tile order)")
        if pty.combine_kind == coda.Combine.MAX:
            self.carried[index] = b.fbin(arith.MaximumfOp, self.carried[index], x)
        elif pty.combine_kind == coda.Combine.SUM:
            self.carried[index] = b.fbin(arith.AddfOp, self.carried[index], x)
        else:
            raise InternalCompilerBug(self.kernel, f"{pty.combine_kind.value} column partials in a Gluon epilogue")

    def combine_running(self, index: int, pty: coda.PartialsType, x: SSAValue, src: Operation) -> None:
        """Whole rows/cols: combine this tile's partial into the program's running value, in
        tile order (the loop order), as a fold would combine the stored partials."""
        assert self.running is not None
        if index not in self.completed:
            width = src.operands[0].type.cols if pty.axis == coda.Axis.COLS else 0  # type: ignore[attr-defined]
            self.completed[index] = (pty, self.running(index, x.type, f"whole{index}"), width)
        _, acc, width = self.completed[index]
        combine = pty.combine_kind
        b = self.b
        self.comment(f"combine with the previous tiles' {pty.axis.value} partials ({combine.value})")
        if combine == coda.Combine.SUM:
            acc = b.fbin(arith.AddfOp, acc, x)
        elif combine == coda.Combine.MAX:
            acc = b.fbin(arith.MaximumfOp, acc, x)
        else:
            mx = b.fbin(arith.MaximumfOp, acc, x, "wc_max")
            ref = b.where(b.cmpf("oeq", mx, b.const(float("-inf"), f32)), b.const(0.0, f32), mx, "wc_ref")
            spread = b.fbin(arith.AddfOp, b.unary(math.ExpOp, b.fbin(arith.SubfOp, acc, ref)),
                            b.unary(math.ExpOp, b.fbin(arith.SubfOp, x, ref)))
            acc = b.fbin(arith.AddfOp, ref, b.unary(math.LogOp, spread))
        self.completed[index] = (pty, acc, width)

    def build_body(self, block: Block, args: Sequence[SSAValue], outputs: Sequence[tuple[SSAValue, SSAValue]]) -> None:
        """The region's ops in `epilogue_schedule` order; each yielded value is stored right after
        the step that makes it."""
        for arg, value in zip(block.args, args):
            self.values[arg] = value
        term = block.last_op
        if not isinstance(term, coda.YieldOp):
            raise CompilerError(self.kernel, "epilogue region must end in coda.yield")
        stores: dict[SSAValue, list[int]] = {}
        for i, value in enumerate(term.values):
            stores.setdefault(value, []).append(i)
        if len(term.values) != len(outputs):
            raise CompilerError(term, f"yields {len(term.values)} values for {len(outputs)} kernel results")

        def store(value: SSAValue) -> None:
            for i in stores.pop(value, []):
                result, ptr = outputs[i]
                self.build_store(term, value, i, result, ptr)

        for arg in block.args:
            store(arg)
        for step in epilogue_schedule(block):
            if step.op in self.prebound:  # computed before the epilogue (the Gluon mainloop's accumulate_first)
                for result in step.op.results:
                    self.values[result] = self.prebound[step.op]
            elif isinstance(step.op, coda.MapOp) and coda.pair_halves_stride(step.op) is None:
                self.build_map(step.op, step)
            else:
                self.build_op(step.op)
            for i in step.results:
                store(step.op.results[i])
        for value in list(stores):  # defined outside the region (not expected), stored at the end
            store(value)


    # -------------------------------------------------------------- column slices
    def build_sliced_body(self, block: Block, args: Sequence[SSAValue], outputs: Sequence[tuple[SSAValue, SSAValue]],
                          parts: int = 2) -> None:
        """The whole region once per column slice of the accumulator (args[0]), `parts` of them,
        each on its own frame: columns [j BN / parts, (j + 1) BN / parts) of the tile.

        Elementwise work, tile stores and cols partials are per column, so each slice gives the
        same values as the whole tile; row vectors are loaded once, before the first slice, and
        row partials of the slices are combined in slice order (sum: p0 + p1, max, log-sum-exp)
        and stored once per tile.
        """
        b, f = self.b, self.frame
        self.row_vectors = {}
        self.row_partials = {}
        self.comment(f"sub-tiled epilogue: {parts} column slices of BN // {parts}")
        width = b.ibin(arith.DivSIOp, f.bn, self.i32(parts))
        grouped = b.value(tl.PermuteOp(b.value(tl.ReshapeOp(args[0], [f.bm, self.i32(parts), width])), (0, 2, 1)))
        assert parts == 2, "tl.split halves the last axis"
        split = b.add(tl.SplitOp(grouped))
        accs = list(split.results)
        for j, part in enumerate(accs):
            part.name_hint = f"acc_s{j}"
        for j in range(parts):
            self.comment(f"-- column slice {j} of {parts}")
            start = b.ibin(arith.MuliOp, f.pid_n, f.bn)
            if j:
                start = b.ibin(arith.AddiOp, start, b.ibin(arith.MuliOp, self.i32(j), b.ibin(arith.DivSIOp, f.bn, self.i32(parts))))
            slice_bn = b.ibin(arith.DivSIOp, f.bn, self.i32(parts))
            offs_n = b.ibin(arith.AddiOp, start, b.value(tl.ArangeOp(slice_bn)), f"offs_n_s{j}")
            mask_n = b.cmpi("slt", offs_n, f.n, f"mask_n_s{j}")
            self.frame = TileFrame(f.bm, slice_bn, f.m, f.n, f.pid_m, f.pid_n, f.offs_m, f.mask_m, offs_n, mask_n)
            self.slice = (j, parts)
            self.values.clear()
            self.col_cache.clear()
            self.body_clones.clear()
            self.build_body(block, [accs[j], *args[1:]], outputs)
        self.frame, self.slice = f, None
        if self.row_partials:
            self.comment("-- row partials of the slices, combined in slice order")
        for index in sorted(self.row_partials):
            pty, ptr, xs = self.row_partials[index]
            combine = pty.combine_kind
            acc = xs[0]
            for x in xs[1:]:
                if combine == coda.Combine.SUM:
                    acc = b.fbin(arith.AddfOp, acc, x, "pc")
                elif combine == coda.Combine.MAX:
                    acc = b.fbin(arith.MaximumfOp, acc, x, "pc")
                else:
                    mx = b.fbin(arith.MaximumfOp, acc, x, "pc_max")
                    ref = b.where(b.cmpf("oeq", mx, b.const(float("-inf"), f32)), b.const(0.0, f32), mx, "pc_ref")
                    spread = b.fbin(arith.AddfOp, b.unary(math.ExpOp, b.fbin(arith.SubfOp, acc, ref)),
                                    b.unary(math.ExpOp, b.fbin(arith.SubfOp, x, ref)))
                    acc = b.fbin(arith.AddfOp, ref, b.unary(math.LogOp, spread), "pc")
            self.comment("store partials [M, tiles_n] at [m, pid_n]")
            tiles = b.value(arith.ExtSIOp(b.value(tl.CdivOp(f.n, f.bn)), i64))
            at = b.value(tl.AddPtrOp(ptr, b.ibin(arith.MuliOp, self.row_offsets(), tiles)))
            b.add(tl.StoreOp(b.value(tl.AddPtrOp(at, f.pid_n)), acc, f.mask_m))
        self.row_vectors = self.row_partials = None


# ============================================================================ coda.elementwise


def lower_elementwise(op: coda.ElementwiseOp, name: str, member: bool) -> tl.KernelOp:
    """The kernel of a `coda.elementwise`: each program one [BM, BN] tile (program id -> tile
    row-major over the column tiles), the region built on it; `whole rows` (`whole cols`): each
    program one block of BM rows (BN columns), the region in an `scf.for` over the column (row)
    tiles in order, reductions along them running values carried by the loop and stored after
    it. A member of a launch group takes its program index as its first parameter."""
    params, constexprs = elementwise_params(op)
    all_params = [("pid", i32), *params] if member else params
    kernel = tl.KernelOp(name, all_params, constexprs)
    arg = {n: a for (n, _), a in zip(all_params, kernel.body.block.args)}
    block = op.body.blocks[0]
    n_in = len(block.args)
    pointers = [arg[p] for p, _ in params[: n_in + len(op.outputs)]]
    b = Builder(kernel.body.block)
    M, N, BM, BN = arg["M"], arg["N"], arg["BM"], arg["BN"]
    pid = arg["pid"] if member else b.value(tl.ProgramIdOp(0), "pid")
    _, n = op.iteration_shape()
    outputs = list(zip(op.outputs, pointers[n_in:]))

    def tile_of(into: Builder, pid_: SSAValue, extent: SSAValue, size: SSAValue, axis: str) -> tuple[SSAValue, SSAValue]:
        offs = into.ibin(arith.AddiOp, into.ibin(arith.MuliOp, pid_, size), into.value(tl.ArangeOp(size)), f"offs_{axis}")
        return offs, into.cmpi("slt", offs, extent, f"mask_{axis}")

    whole = op.whole_axis
    if whole is None:
        num_pid_n = b.value(tl.CdivOp(N, BN), "num_pid_n")
        pid_m = b.ibin(arith.DivSIOp, pid, num_pid_n, "pid_m")
        pid_n = b.ibin(arith.RemSIOp, pid, num_pid_n, "pid_n")
        offs_m = b.ibin(arith.AddiOp, b.ibin(arith.MuliOp, pid_m, BM), b.value(tl.ArangeOp(BM)), "offs_m")
        offs_n = b.ibin(arith.AddiOp, b.ibin(arith.MuliOp, pid_n, BN), b.value(tl.ArangeOp(BN)), "offs_n")
        mask_m = b.cmpi("slt", offs_m, M, "mask_m")
        mask_n = b.cmpi("slt", offs_n, N, "mask_n")
        frame = TileFrame(BM, BN, M, N, pid_m, pid_n, offs_m, mask_m, offs_n, mask_n)
        builder = EpilogueBuilder(op, b, frame, n, dict(zip(block.args, pointers)))
        builder.build_body(block, pointers[:n_in], outputs)
        return kernel

    # whole rows (cols): this program's BM rows (BN columns), the region once per tile along
    # them in order; completed reductions are running values carried by the loop
    rows = whole == coda.Axis.ROWS
    if not member:
        pid.name_hint = "pid_m" if rows else "pid_n"
    fixed_offs, fixed_mask = tile_of(b, pid, M if rows else N, BM if rows else BN, "m" if rows else "n")
    loop_extent, loop_size = (N, BN) if rows else (M, BM)
    body = Block(arg_types=[i32])
    body.args[0].name_hint = "pid_n" if rows else "pid_m"
    inner = Builder(body)
    offs, mask = tile_of(inner, body.args[0], loop_extent, loop_size, "n" if rows else "m")
    if rows:
        frame = TileFrame(BM, BN, M, N, pid, body.args[0], fixed_offs, fixed_mask, offs, mask)
    else:
        frame = TileFrame(BM, BN, M, N, body.args[0], pid, offs, mask, fixed_offs, fixed_mask)
    inits: list[tuple[int, coda.PartialsType]] = []  # the carried values' outputs, in output order

    def running(index: int, ty: Attribute, hint: str) -> SSAValue:
        """A new carried value of the loop (its initial value is made before the loop)."""
        position = sum(1 for i, _ in inits if i < index)
        carried = body.insert_arg(ty, 1 + position)
        carried.name_hint = hint
        pty = op.body.blocks[0].last_op.operands[index].type  # type: ignore[union-attr]
        inits.insert(position, (index, pty))
        return carried

    builder = EpilogueBuilder(op, inner, frame, n, dict(zip(block.args, pointers)))
    builder.whole = whole
    builder.running = running
    builder.build_body(block, pointers[:n_in], outputs)
    order = [index for index, _ in inits]
    inner.add(scf.YieldOp(*[builder.completed[i][1] for i in order]))
    init_values = []
    for index, pty in inits:
        width = builder.completed[index][2]
        shape = [BM] if rows else [tile_width(b, BN, width, n)]
        value = b.const(0.0 if pty.combine_kind == coda.Combine.SUM else float("-inf"), f32)
        init_values.append(b.value(tl.FullOp(shape, value, f32)))
    b.add(tl.CommentOp(f"whole {whole.value}: the {'column' if rows else 'row'} tiles in order"))
    ub = b.value(tl.CdivOp(loop_extent, loop_size))
    loop = b.add(scf.ForOp(b.const(0, i32), ub, b.const(1, i32), init_values, [body]))
    for result, (index, _) in zip(loop.results, inits):
        result.name_hint = f"whole{index}"
    final = dict(zip(order, loop.results))
    for index in sorted(final):
        result = op.outputs[index]
        rty = result.type
        assert isinstance(rty, TensorType)
        stored = b.store_cast(final[index], rty.get_element_type())
        ptr = pointers[n_in + index]
        if rows:
            b.add(tl.StoreOp(b.value(tl.AddPtrOp(ptr, fixed_offs)), stored, fixed_mask))
        else:
            width = builder.completed[index][2]
            tw = tile_width(b, BN, width, n)
            cols = b.ibin(arith.AddiOp, b.ibin(arith.MuliOp, pid, tw), b.value(tl.ArangeOp(tw)), f"cols{index}")
            b.add(tl.StoreOp(b.value(tl.AddPtrOp(ptr, cols)), stored, b.cmpi("slt", cols, b.const(width, i32))))
    return kernel
