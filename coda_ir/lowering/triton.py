"""`-t triton`: lower coda kernels to one Python module of Triton kernels and host functions.

The emitted module has, in order:

* imports, and a small prelude of `@triton.jit` helpers (`_coda_interleave_rows` from the
  mainloop, `_coda_tanh`, `_coda_pow`, `_coda_round_bf16`) plus two constexpr switches fixed
  when the module is imported: `_CODA_INTERPRETING` (TRITON_INTERPRET was set: round bf16
  stores by integer arithmetic, because the interpreter truncates) and `_CODA_LIBDEVICE`
  (libdevice's tanh/pow are callable: on a GPU, not under the interpreter);
* one `@triton.jit` kernel per coda kernel: `coda.gemm` is the fixed mainloop of
  `mainloop.emit_gemm_kernel` with the epilogue spliced after the K loop; `coda.elementwise`
  is the same epilogue primitives on a tile without a mainloop; `coda.fold` is a row kernel
  that folds partials in a fixed order;
* for each `coda.gemm` that carries a `#coda.mainloop` (coda-plan-mainloop), also its
  warp-specialized Gluon kernel (`lowering/gluon.py`'s templates; the epilogue partition printed
  by `GluonEpilogueEmitter`, this module's emitter with the Gluon hooks), in one block defined
  only where the installed Triton has Gluon;
* one host function per `func.func`, same name, taking torch tensors in argument order: it
  checks the arguments, allocates outputs (partials per tile configuration), launches the
  kernels in program order and returns a tensor or a tuple.

The lowering runs as passes on a copy of the module, then prints (issue 13): the
`convert-coda-to-tl` pass (`transforms/coda_to_tl.py`) names every kernel (recorded on the coda
op as `tl.kernel = @name`) and builds `coda.fold`, `coda.elementwise` (the epilogue builder,
`transforms/tl_epilogue.py`) and `coda.launch_group` kernels as `tl.kernel` IR (the `tl`
dialect, `dialects/triton_lang.py`), which `triton_printer.print_kernel` prints without
deciding anything; `convert-coda-to-host` (`transforms/coda_to_host.py`) builds each
function's host wrapper as a `host.func` (the `host` dialect, `dialects/triton_host.py`),
which `host_printer.print_host_function` prints. `coda.gemm` kernels are still emitted as text
below (`_EpilogueEmitter`, `emit_gemm`); moving their epilogues onto the epilogue builder is
the rest of that issue item.
Options (`TritonOptions`: `epilogue_subtile`, `half_tile_io`) are the target's arguments.

Gemm epilogue code is straight-line and generated primitive by primitive (`_EpilogueEmitter`), in
`epilogue_schedule` order (partial reductions after the last tile use of their input; each
output of a multi-output `coda.map` at its first reader; column partials of such outputs
last), each yielded value stored right after the step that makes it; heavy gemm epilogues can run per column
half of the tile (`emit_sliced_region`, off unless `TritonOptions.epilogue_subtile` is set). The
scalar bodies of `coda.map` / `coda.pair_map` are lowered by the pass layer, as fold bodies are
(`coda_to_tl.lower_tile_body`: tl / arith / math ops on whole tiles), and printed by
`triton_printer.FragmentPrinter`; so are the conversions of loaded and stored elements
(`coda_to_tl.load_conversion` / `store_conversion`). Everything that cannot be lowered raises a
located `CompilerError`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import IO

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    Float32Type,
    ModuleOp,
    TensorType,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.utils.target import Target

from coda_ir.dialects import coda
# the emission order, shared with the elementwise kernels' builder (tests and bench/kernel_table.py
# replace `epilogue_schedule` here to A/B gemm epilogue orders)
from coda_ir.analysis.epilogue_schedule import EpilogueStep, epilogue_schedule
from coda_ir.transforms.plan_in_place import PlanInPlacePass
from coda_ir.lowering.gluon import GLUON_PRELUDE, GLUON_SCOPE, emit_gluon_kernel
from coda_ir.lowering.host_printer import print_host_function
from coda_ir.lowering.mainloop import emit_gemm_kernel, gluon_entry_name, interleave_rows_source
from coda_ir.diagnostics import CompilerError, InternalCompilerBug
from coda_ir.context import make_context
from coda_ir.dialects import triton_host as host
from coda_ir.dialects import triton_lang as tl
# scalar bodies and conversions are built by the pass layer (coda_to_tl) and printed by the
# printer, as in the kernels convert-coda-to-tl builds whole
from coda_ir.lowering.triton_printer import FragmentPrinter, print_expression, print_kernel
from coda_ir.transforms import coda_to_tl
from coda_ir.transforms.coda_to_host import ConvertCodaToHostPass, host_functions
from coda_ir.transforms.coda_to_tl import KERNEL_SCOPE, ConvertCodaToTLPass, KernelNames, kernel_symbol, param_names

from coda_ir.tiling import MIN_BN
from coda_ir.transforms.tl_epilogue import MIN_TILE_COLS
from coda_ir.transforms.tl_gemm import SUBTILE_HEAVY_TILES, SUBTILE_MIN_BN_DEFAULT, check_subtile, epilogue_tile_pressure  # noqa: F401

IND = "    "

# ============================================================================ types


def _loaded(expr: str, elt: Attribute, rank: int) -> str:
    """A loaded rank-`rank` tensor of `elt`s in the epilogue's arithmetic type (the pass layer's
    conversion, `coda_to_tl.load_conversion`, shared with the fold kernels)."""
    return print_expression(coda_to_tl.load_conversion(elt, rank), [expr])


def _stored(expr: str, computed: Attribute, elt: Attribute, rank: int) -> str:
    """A computed rank-`rank` tensor of `computed`s (fp32 / i32) as stored in a tensor of `elt`s:
    rounded once (`coda_to_tl.store_conversion`; bf16 through `_coda_round_bf16`)."""
    return print_expression(coda_to_tl.store_conversion(computed, elt, rank), [expr])


# ============================================================================ prelude

PRELUDE = '''\
import os

import torch
import triton
import triton.language as tl

from coda_ir.lowering import library as _lib
from coda_ir.lowering import runtime as _rt
from coda_ir.lowering.gemm_launch import launch_gemm

try:
    from triton.language.extra import libdevice
except ImportError:  # pragma: no cover - very old Triton
    libdevice = None

# Fixed when this module is imported (the runtime imports it once per mode).
_CODA_INTERPRETING = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"))
_CODA_LIBDEVICE = tl.constexpr(
    not _CODA_INTERPRETING and libdevice is not None and hasattr(libdevice, "tanh") and hasattr(libdevice, "pow")
)


@triton.jit
def _coda_round_bf16(x):
    if _CODA_INTERPRETING:
        # The interpreter truncates fp32 -> bf16; round to nearest even by hand (NaN/inf kept).
        bits = x.to(tl.uint32, bitcast=True)
        bits = bits + 0x7FFF + ((bits >> 16) & 1)
        bits = bits & 0xFFFF0000
        return bits.to(tl.float32, bitcast=True).to(tl.bfloat16)
    else:
        return x.to(tl.bfloat16)


@triton.jit
def _coda_tanh(x):
    if _CODA_LIBDEVICE:
        return libdevice.tanh(x)
    else:
        ax = tl.abs(x)
        e = tl.exp(-2.0 * ax)
        big = (1.0 - e) / (1.0 + e)
        x2 = x * x
        # odd Taylor series for |x| < 0.4 (no cancellation), error < 1e-9
        small = ax * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0 + x2 * (
            62.0 / 2835.0 + x2 * (-1382.0 / 155925.0 + x2 * (21844.0 / 6081075.0)))))))
        r = tl.where(ax < 0.4, small, big)
        return tl.where(x < 0, -r, r)


@triton.jit
def _coda_pow(x, y):
    if _CODA_LIBDEVICE:
        return libdevice.pow(x, y)
    else:
        r = tl.exp2(y * tl.log2(tl.abs(x)))
        yi = tl.floor(y)
        is_int = yi == y
        odd = is_int & ((yi - 2.0 * tl.floor(yi * 0.5)) == 1.0)
        r = tl.where(x < 0, tl.where(is_int, tl.where(odd, -r, r), float("nan")), r)
        return tl.where(y == 0, 1.0, r)
'''


# ============================================================================ epilogues


def _pow2_ratio(width: int, n: int) -> bool:
    r = Fraction(width, n)
    return r.numerator & (r.numerator - 1) == 0 and r.denominator & (r.denominator - 1) == 0


@dataclass
class _Cols:
    """The columns of a W-wide tile at this program's column tile."""

    cols: str  # [TW] global column indices (natural layout of the W-wide tensor)
    mask: str  # [TW] column mask
    mask2: str  # [BM, TW] element mask
    tw: str  # constexpr expression of the tile width


@dataclass
class _Halves:
    """A tile in an interleaved column space as two contiguous half tiles of the user's layout.

    Valid only under `cond` (a constexpr test on the tile width); `setup` (emitted inside that
    branch) defines `ucol`, the user columns of the tile's even columns, and `umask`, the element
    mask of both halves; the odd columns are the same block `half` columns further on.
    """

    cond: str
    setup: list[str]
    ucol: str
    umask: str
    half: int
    tw: str


class _BodyPrint:
    """One printing of a scalar body the pass layer lowered (`coda_to_tl.TileBody`) into an
    epilogue's text: its arguments bound to the emitter's tiles, its values named by the
    emitter's fresh names; `extents()` (the tile shape a constant result fills) is asked only
    when a constant result is printed."""

    def __init__(self, body: coda_to_tl.TileBody, args: Sequence[str], extents: Callable[[], Sequence[str]],
                 emitter: _EpilogueEmitter):
        self.body = body
        self.rank = len(body.block.args) - len(args)
        self.printer = FragmentPrinter(body, [*args, *[""] * self.rank], emitter.fresh)
        self.extents = extents
        self.emitter = emitter
        self.started = False
        self.bound = False

    def ops(self, ops: Sequence[Operation] | None) -> None:
        """Print the lowering of the body ops `ops` (None: all), the values the body uses from
        the region around it with the first."""
        spans = self.body.spans
        seq: list[Operation] = []
        if not self.started:
            seq += spans.get(None, [])
            self.started = True
        for op in ops if ops is not None else [o for o in spans if o is not None]:
            seq += spans.get(op, [])
        for line in self.printer.print_ops(seq):
            self.emitter.emit(line)

    def result(self, i: int) -> str:
        """The expression of yielded value `i` (after the ops that make it were printed)."""
        fill = self.body.fills[i]
        if fill and not self.bound:
            args = self.body.block.args[len(self.body.block.args) - self.rank :]
            self.printer.exprs.update(zip(args, self.extents()))
            self.bound = True
        for line in self.printer.print_ops(fill):
            self.emitter.emit(line)
        return self.printer.value(self.body.results[i])


class _EpilogueEmitter:
    """Emit the body of a gemm epilogue region as straight-line Triton (elementwise kernels:
    `transforms/tl_epilogue.EpilogueBuilder`, the same primitives as tl ops)."""

    def __init__(
        self, kernel: Operation, n: int, interleave: int, params: dict[SSAValue, str], fresh, interleave_wide: int = 0,
        options: TritonOptions | None = None,
    ):
        self.kernel = kernel
        self.options = options if options is not None else TritonOptions()
        self.n = n
        self.h = interleave
        self.hw = interleave_wide  # the permutation of the 2N-wide column space
        self.params = params  # block argument (tensor) -> pointer parameter name
        self.fresh = fresh
        self.lines: list[str] = []
        self.names: dict[SSAValue, str] = {}
        self.col_cache: dict[int, _Cols] = {}
        # split maps (`EpilogueStep`s): a body printed step by step
        self.body_prints: dict[Operation, _BodyPrint] = {}
        # what coda-legalize recorded for this kernel; the emitted kernel's BN obeys it
        self.bn_multiple_of = coda.recorded_bn_multiple_of(kernel)
        self.rows64 = False
        # The column tile being emitted: the whole [BM, BN] tile, or one column slice of it
        # (`begin_slice`). Names of the slice's column offsets, mask, width and tile index.
        self.bn = "BN"
        self.offs_n = "offs_n"
        self.mask_n = "mask_n"
        self.pid_n = "pid_n"
        self.tag = ""  # suffix of the slice's column locals (cols_n, mask_mn, ...)
        # sub-tiled epilogues: row vectors loaded once for all slices, and the slices' row
        # partials per output index (combined in slice order after the last slice)
        self.vec_cache: dict[str, str] | None = None
        self.row_partials: dict[int, tuple[coda.PartialsType, str, list[str]]] | None = None
        # ops whose (single) result a mainloop computed before the epilogue: op -> its name
        self.prebound: dict[Operation, str] = {}

    # -------------------------------------------------------------- helpers
    def emit(self, text: str) -> None:
        self.lines.append(IND + text)

    def need_bn(self, op: Operation, multiple: Fraction | int) -> None:
        """The emitted code of `op` is right only when BN is a multiple of `multiple`: check that
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

    def row_offsets(self) -> str:
        if not self.rows64:
            self.emit("rows64 = offs_m.to(tl.int64)")
            self.rows64 = True
        return "rows64"

    def cols(self, op: Operation, width: int) -> _Cols:
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
        bn, t = self.bn, self.tag
        if width == n:
            tw = bn
            if self.h:
                self.emit(f"cols_n{t} = _coda_interleave_rows({self.offs_n}, {self.h})")
                cols = f"cols_n{t}"
            else:
                cols = self.offs_n
            mask = self.mask_n
            mask2 = f"mask_mn{t}"
            self.emit(f"{mask2} = mask_m[:, None] & {mask}[None, :]")
        else:
            tw = f"({bn} * {r.numerator})" if r.denominator == 1 else f"({bn} // {r.denominator})"
            if r.numerator != 1 and r.denominator != 1:
                tw = f"({bn} * {r.numerator} // {r.denominator})"
            tag = f"w{width}{t}"
            cols, mask, mask2 = f"cols_{tag}", f"mask_{tag}", f"mask_m{tag}"
            self.emit(f"{cols} = {self.pid_n} * {tw} + {self.column_arange(tw)}")
            self.emit(f"{mask} = {cols} < {width}")
            self.emit(f"{mask2} = mask_m[:, None] & {mask}[None, :]")
            if width == 2 * n and self.hw:
                # interleave_wide: 2N-wide tensors are read and written at perm(c)
                self.emit(f"{cols} = _coda_interleave_rows({cols}, {self.hw})")
        c = _Cols(cols, mask, mask2, tw)
        self.col_cache[width] = c
        return c

    def column_arange(self, tw: str) -> str:
        """`[0, tw)` as a column index vector (hook: the Gluon epilogue gives it a layout)."""
        return f"tl.arange(0, {tw})"

    def pair_operand(self, narrow: str, like: str) -> str:
        """A narrow pair-map operand beside the split wide ones (hook: the Gluon epilogue gives it
        their layout)."""
        return narrow

    def relayout(self, expr: str) -> str:
        """A tile made by reshaping pairs back (hook: the Gluon epilogue converts it to its layout)."""
        return expr

    def perm_half(self, width: int) -> int:
        """h when W-wide tensors are read and written at perm(c) (interleave h), else 0."""
        if self.h and width == self.n:
            return self.h
        if self.hw and width == 2 * self.n:
            return self.hw
        return 0

    def split_halves(self, op: Operation, width: int) -> _Halves | None:
        """The two contiguous halves of a `width`-wide tile in an interleaved column space, or None.

        perm sends column c = g + 2i + j of the interleave group starting at g (2h columns) to
        g + i + j h. The tile's TW columns start at c0 = pid_n TW; when TW divides 2h (the
        constexpr `cond`; TW is a power of two) the tile lies inside one group, so its even
        columns land on the contiguous block g + (c0 - g) / 2 + [0, TW / 2) and its odd columns on
        the same block h further. `ucol` is written as (tile's group) * 2h + (tile within the
        group) * TW / 2 + arange, not through perm, so Triton's axis analysis sees a contiguous,
        TW/2-aligned run and vectorizes the accesses. The verifier makes W a multiple of 2h, so
        perm maps each group onto itself and `ucol < W` is exactly the scatter's `c < W`: ragged
        rows are masked by mask_m, and columns past W only occur in a sub-tiled column slice.

        Otherwise the emitter keeps the scatter: a tile wider than 2h holds several groups whose
        halves are runs of only h columns (no longer one block each), and a tile that straddles
        a group edge (2h not a multiple of TW, e.g. h = 12 with 32-wide tiles) has halves that
        wrap to the next group. Neither happens at LLaMA shapes (h = F >> BN).
        """
        half = self.perm_half(width)
        if not half or not self.options.half_tile_io:
            return None
        group = 2 * half
        largest = group & -group  # the widest power-of-two tile inside one group
        if largest < MIN_TILE_COLS:
            return None
        c = self.cols(op, width)
        tw = c.tw
        tiles = f"({group} // {tw})"  # tiles per group
        ucol, umask = self.fresh("half_cols"), self.fresh("half_mask")
        setup = [
            f"{ucol} = ({self.pid_n} // {tiles}) * {group} + ({self.pid_n} % {tiles}) * ({tw} // 2) "
            f"+ tl.arange(0, {tw} // 2)",
            f"{umask} = mask_m[:, None] & ({ucol} < {width})[None, :]",
        ]
        # `tw <= largest`, not `group % tw == 0`: the same test for a power-of-two tw, and it keeps
        # the constexpr on the left (Triton's constexpr has no __rmod__)
        self.emit(f"# half tiles when the tile is inside one interleave group ({tw} divides {group}), else perm(c)")
        return _Halves(f"{tw} <= {largest}", setup, ucol, umask, half, tw)

    def tile_shape(self, op: Operation, ty: Attribute) -> str:
        assert isinstance(ty, coda.TileType)
        return f"(BM, {self.cols(op, ty.cols).tw})"

    def ptr(self, op: Operation, value: SSAValue) -> str:
        if value not in self.params:
            raise CompilerError(op, "reads a tensor that is not an input of its kernel")
        return self.params[value]

    def name_for(self, value: SSAValue, prefix: str = "t") -> str:
        hint = value.name_hint
        if hint and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", hint):
            return self.fresh(f"{prefix}_{hint}")
        return self.fresh(prefix)

    def load_matrix(self, op: Operation, matrix: SSAValue) -> str:
        ty = matrix.type
        assert isinstance(ty, TensorType)
        _, width = ty.get_shape()
        c = self.cols(op, width)
        rows = self.row_offsets()
        p = self.ptr(op, matrix)
        elt = ty.get_element_type()
        expr = _loaded(f"tl.load({p} + {rows}[:, None] * {width} + {c.cols}[None, :], mask={c.mask2}, other=0)", elt, 2)
        hv = self.split_halves(op, width)
        if hv is None:
            return expr
        # the scatter's gather is as uncoalesced as its store: read the two contiguous halves and
        # interleave them in registers (join puts half 0 at even, half 1 at odd columns)
        var = self.fresh("ld_halves")
        base = f"{p} + {rows}[:, None] * {width} + {hv.ucol}[None, :]"
        lo = f"tl.load({base}, mask={hv.umask}, other=0)"
        hi = f"tl.load({base} + {hv.half}, mask={hv.umask}, other=0)"
        self.emit(f"if {hv.cond}:")
        for line in hv.setup:
            self.emit(f"    {line}")
        self.emit(f"    {var} = {_loaded(f'tl.reshape(tl.join({lo}, {hi}), (BM, {hv.tw}))', elt, 2)}")
        self.emit("else:")
        self.emit(f"    {var} = {expr}")
        return var

    def load_periodic(self, op: coda.LoadOp) -> str:
        """`T[m, c mod P]` for the tile's W-wide columns c, from an [M, P] table.

        The tile's columns (the user's columns under an interleave of this width) are
        reduced mod P: a masked gather of the [BM, P] rows, contiguous runs of P per row, that
        stays in L2 across the column tiles of a row band. When the tile is exactly P wide
        (BN/2 == P for RoPE's pair tile) the indices are one plain [BM, P] block."""
        ty = op.result.type
        assert isinstance(ty, coda.TileType) and op.period is not None
        period = op.period
        c = self.cols(op, ty.cols)
        rows = self.row_offsets()
        p = self.ptr(op, op.source)
        elt = op.source.type.get_element_type()  # type: ignore[attr-defined]
        idx = c.cols if period == ty.cols else f"({c.cols} % {period})"
        return _loaded(f"tl.load({p} + {rows}[:, None] * {period} + {idx}[None, :], mask={c.mask2}, other=0)", elt, 2)

    def load_vector(self, op: Operation, vector: SSAValue, axis: coda.Axis, width: int) -> str:
        """The vector as a [BM, 1] (rows), [1, TW] (cols) or scalar operand."""
        ty = vector.type
        assert isinstance(ty, TensorType)
        elt = ty.get_element_type()
        p = self.ptr(op, vector)
        if axis == coda.Axis.SCALAR:
            return _loaded(f"tl.load({p})", elt, 0)
        if axis == coda.Axis.ROWS:
            return f"{self.row_vector(_loaded(f'tl.load({p} + offs_m, mask=mask_m, other=0)', elt, 1))}[:, None]"
        c = self.cols(op, width)
        (length,) = ty.get_shape()
        idx = c.cols if length == width else f"{c.cols} % {length}"
        return _loaded(f"tl.load({p} + {idx}, mask={c.mask}, other=0)", elt, 1) + "[None, :]"

    def row_vector(self, expr: str, prefix: str = "rv") -> str:
        """A [BM] row vector: inline on a whole tile; loaded once, before the first slice, when sub-tiled."""
        if self.vec_cache is None:
            return expr
        if expr not in self.vec_cache:
            var = self.fresh(prefix)
            self.emit(f"{var} = {expr}")
            self.vec_cache[expr] = var
        return self.vec_cache[expr]

    def assign(self, value: SSAValue, expr: str, prefix: str = "t") -> str:
        var = self.name_for(value, prefix)
        self.emit(f"{var} = {expr}")
        self.names[value] = var
        return var

    def get(self, op: Operation, value: SSAValue) -> str:
        if value in self.names:
            return self.names[value]
        raise CompilerError(op, "uses a value that has no Triton lowering here")

    # -------------------------------------------------------------- primitives
    def emit_op(self, op: Operation) -> None:
        if isinstance(op, coda.LoadOp) and op.period is not None:
            self.emit(f"# {op.name} cols_period {op.period}")
            self.assign(op.result, self.load_periodic(op))
        elif isinstance(op, (coda.LoadOp, coda.MapOp, coda.ReduceOp)) and coda.pair_halves_stride(op) is not None:
            self.not_in_gemm(op, "coda.pair_halves")
        elif isinstance(op, coda.LoadOp):
            self.emit(f"# {op.name}")
            self.assign(op.result, self.load_matrix(op, op.source))
        elif isinstance(op, coda.BroadcastOp):
            ty = op.result.type
            assert isinstance(ty, coda.TileType)
            shape = self.tile_shape(op, ty)
            vec = self.load_vector(op, op.source, op.axis.data, ty.cols)
            self.emit(f"# {op.name} {op.axis.data.value}")
            self.assign(op.result, f"tl.broadcast_to({vec}, {shape})")
        elif isinstance(op, coda.IndexOp):
            ty = op.result.type
            assert isinstance(ty, coda.TileType)
            shape = self.tile_shape(op, ty)
            c = self.cols(op, ty.cols)
            src = "offs_m[:, None]" if op.axis.data == coda.Axis.ROWS else f"{c.cols}[None, :]"
            self.emit(f"# {op.name} {op.axis.data.value}")
            self.assign(op.result, f"tl.broadcast_to(({src}).to(tl.int32), {shape})")
        elif isinstance(op, (coda.ScaleOp, coda.ShiftOp)):
            ty = op.tile.type
            assert isinstance(ty, coda.TileType)
            vec = self.load_vector(op, op.vector, op.axis.data, ty.cols)
            sym = "*" if isinstance(op, coda.ScaleOp) else "+"
            self.emit(f"# {op.name} {op.axis.data.value}")
            self.assign(op.result, f"{self.get(op, op.tile)} {sym} {vec}")
        elif isinstance(op, coda.AccumulateOp):
            self.emit(f"# {op.name}")
            self.assign(op.result, f"{self.get(op, op.tile)} + {self.load_matrix(op, op.matrix)}")
        elif isinstance(op, coda.MapOp):
            self.emit_map(op)
        elif isinstance(op, coda.PairMapOp):
            self.emit_pair_map(op)
        elif isinstance(op, coda.ReduceOp):
            self.emit_reduce(op)
        elif isinstance(op, coda.SegmentReduceOp):
            self.emit_segment_reduce(op)
        elif isinstance(op, coda.SelectOp):
            self.emit_select(op)
        elif op.name.split(".")[0] in ("arith", "math"):
            # a scalar of the region (a function of constants): lowered into each body that uses
            # it (`coda_to_tl.ScalarLowering`); lowered here only to report an op that has none
            coda_to_tl.ScalarLowering(coda_to_tl.Builder(Block()), set()).lower_outside(op.results[0], {}, op)
        else:
            raise CompilerError(op, "is not an epilogue primitive with a Triton lowering")

    def body_print(self, op: Operation, args: Sequence[str], rank: int, extents: Callable[[], Sequence[str]]) -> _BodyPrint:
        """A printing of the op's scalar body, lowered by the pass layer (`coda_to_tl.lower_tile_body`)
        on rank-`rank` tiles, bound to `args`; `extents()`: the tile shape constant results fill."""
        return _BodyPrint(coda_to_tl.lower_tile_body(op.body.blocks[0], rank), args, extents, self)  # type: ignore[attr-defined]

    def emit_map(self, op: coda.MapOp, step: EpilogueStep | None = None) -> None:
        """The map's outputs: all of them, or those of one step of a split map (`epilogue_schedule`)."""
        args = [self.get(op, v) for v in op.inputs]
        ty = op.outputs[0].type
        assert isinstance(ty, coda.TileType)

        def extents() -> list[str]:
            return ["BM", self.cols(op, ty.cols).tw]

        if step is None or step.body is None:
            self.emit(f"# {op.name}")
            indices: Sequence[int] = range(len(op.outputs))
            body = self.body_print(op, args, 2, extents)
            body.ops(None)
        else:
            self.emit(f"# {op.name} results {', '.join(map(str, step.results))}")
            indices = step.results
            if op not in self.body_prints:
                self.body_prints[op] = self.body_print(op, args, 2, extents)
            body = self.body_prints[op]
            body.ops(step.body)
        for i in indices:
            self.assign(op.outputs[i], body.result(i))

    def not_in_gemm(self, op: Operation, record: str) -> None:
        """coda-legalize records `coda.gathered` / `coda.pair_halves` only in standalone
        elementwise kernels (`transforms/tl_epilogue.py` builds them): one here is a bug."""
        raise InternalCompilerBug(op, f"is marked {record} in a gemm epilogue (only elementwise kernels read from memory)")

    def regathers(self, op: Operation) -> bool:
        """Whether `op` exchanges its pairs / segments inside one tile covering the whole row
        (`emit_regathered_pair_map`, `emit_regathered_segment_reduce`): the ops coda-legalize
        marked `coda.row_exchange` (groups no power-of-two tile holds, over computed values or
        in a gemm epilogue, e.g. SwiGLU's F = 48 after a fused producer, a head_dim of 40 in
        the backward). Their kernel's recorded BN constraint covers the whole row."""
        return coda.is_row_exchanged(op)

    def cover_row(self, op: Operation) -> None:
        """One column tile covers all N columns: BN a power of two >= N, which the recorded
        constraint must imply (need_bn checks it)."""
        self.need_bn(op, 1 << max(self.n - 1, 0).bit_length())

    def emit_regathered_pair_map(self, op: coda.PairMapOp) -> None:
        """A pair_map on tiles that cover the whole row, the partners exchanged by `tl.gather`
        along the columns: each narrow position p reads (first(p), first(p) + stride) of the
        wide tiles, first(p) = (p // stride) * 2 stride + p % stride; each wide column c reads
        pair p(c) of the narrow results, the first or the second element by c's half of its
        group. Indices are clamped into the tile (lanes past N are masked on store)."""
        stride, pairs = op.stride.value.data, op.pair_count()
        self.cover_row(op)
        narrow, wide = self.cols(op, pairs), self.cols(op, 2 * pairs)
        self.emit(f"# {op.name} stride {stride}, pairs exchanged in a whole-row tile")
        first, second = self.fresh("pfirst"), self.fresh("psecond")
        self.emit(f"{first} = tl.broadcast_to(tl.minimum(({narrow.cols} // {stride}) * {2 * stride} + "
                  f"{narrow.cols} % {stride}, {wide.tw} - 1)[None, :], (BM, {narrow.tw}))")
        self.emit(f"{second} = tl.broadcast_to(tl.minimum(({narrow.cols} // {stride}) * {2 * stride} + "
                  f"{narrow.cols} % {stride} + {stride}, {wide.tw} - 1)[None, :], (BM, {narrow.tw}))")
        args: list[str] = []
        for value in op.inputs:
            src = self.get(op, value)
            if op.is_wide(value):
                a, b = self.fresh("pa"), self.fresh("pb")
                self.emit(f"{a} = tl.gather({src}, {first}, axis=1)")
                self.emit(f"{b} = tl.gather({src}, {second}, axis=1)")
                args += [a, b]
            else:
                args.append(src)
        body = self.body_print(op, args, 2, lambda: ["BM", narrow.tw])
        body.ops(None)
        back = upper = None
        i = 0
        for result in op.outputs:
            count = 2 if op.is_wide(result) else 1
            exprs = [body.result(j) for j in range(i, i + count)]
            i += count
            if count == 1:
                self.assign(result, exprs[0])
                continue
            if back is None:  # wide column c <- pair (c // 2s) * s + c % s, second when c % 2s >= s
                back, upper = self.fresh("pback"), self.fresh("pupper")
                self.emit(f"{back} = tl.broadcast_to(tl.minimum(({wide.cols} // {2 * stride}) * {stride} + "
                          f"{wide.cols} % {stride}, {narrow.tw} - 1)[None, :], (BM, {wide.tw}))")
                self.emit(f"{upper} = (({wide.cols} % {2 * stride}) >= {stride})[None, :]")
            a, b = (self._named(e, "pw") for e in exprs)
            self.assign(result, f"tl.where({upper}, tl.gather({b}, {back}, axis=1), tl.gather({a}, {back}, axis=1))")

    def _named(self, expr: str, prefix: str) -> str:
        name = self.fresh(prefix)
        self.emit(f"{name} = {expr}")
        return name

    def emit_pair_map(self, op: coda.PairMapOp) -> None:
        if coda.is_gathered(op):
            self.not_in_gemm(op, "coda.gathered")
        stride = op.stride.value.data
        pairs = op.pair_count()
        wide_width = 2 * pairs
        if self.regathers(op):
            self.emit_regathered_pair_map(op)
            return
        wide_cols = self.cols(op, wide_width)
        # groups of 2*stride columns must not straddle tiles: BN * W / N % (2 s) == 0
        self.need_bn(op, Fraction(2 * stride * self.n, wide_width))
        if self.h and stride != 1 and any(
            isinstance(v.type, coda.TileType) and v.type.cols == self.n for v in [*op.inputs, *op.outputs]
        ):
            pass  # pairs live in the interleaved accumulator column space, as the dialect defines
        groups = f"({wide_cols.tw} // {2 * stride})"
        self.emit(f"# {op.name} stride {stride}")
        args: list[str] = []
        like: str | None = None  # the first split operand: the narrow ones take its layout (`pair_operand`)
        narrows: set[str] = set()
        for value in op.inputs:
            src = self.get(op, value)
            if op.is_wide(value):
                grouped = self.fresh("pw")
                self.emit(
                    f"{grouped} = tl.permute(tl.reshape({src}, (BM, {groups}, 2, {stride})), (0, 1, 3, 2))"
                )
                first, second = self.fresh("pa"), self.fresh("pb")
                self.emit(f"{first}, {second} = tl.split({grouped})")
                like = like or first
                args += [first, second]
            else:
                narrow = self.fresh("pn")
                self.emit(f"{narrow} = tl.reshape({src}, (BM, {groups}, {stride}))")
                narrows.add(narrow)
                args.append(narrow)
        if like is not None:
            args = [self.pair_operand(a, like) if a in narrows else a for a in args]
        body = self.body_print(op, args, 3, lambda: ["BM", groups, str(stride)])
        body.ops(None)
        i = 0
        for result in op.outputs:
            ty = result.type
            assert isinstance(ty, coda.TileType)
            shape = self.tile_shape(op, ty)
            if op.is_wide(result):
                a, b = body.result(i), body.result(i + 1)
                i += 2
                self.assign(result, self.relayout(f"tl.reshape(tl.permute(tl.join({a}, {b}), (0, 1, 3, 2)), {shape})"))
            else:
                a = body.result(i)
                i += 1
                self.assign(result, self.relayout(f"tl.reshape({a}, {shape})"))

    def _masked(self, op: Operation, x: str, ty: coda.TileType, kind: coda.ReduceKind) -> str:
        c = self.cols(op, ty.cols)
        if kind == coda.ReduceKind.SUM:
            return f"tl.where({c.mask2}, {x}, 0.0)"
        if kind == coda.ReduceKind.SUMSQ:
            return f"tl.where({c.mask2}, {x} * {x}, 0.0)"
        return f'tl.where({c.mask2}, {x}, -float("inf"))'

    def emit_reduce(self, op: coda.ReduceOp) -> None:
        ty = op.tile.type
        assert isinstance(ty, coda.TileType)
        kind = op.kind.data
        dim = op.dim.value.data
        x = self.get(op, op.tile)
        self.emit(f"# {op.name} {kind.value} dim {dim}")
        masked = self.fresh("rm")
        self.emit(f"{masked} = {self._masked(op, x, ty, kind)}")
        if kind in (coda.ReduceKind.SUM, coda.ReduceKind.SUMSQ):
            self.assign(op.result, f"tl.sum({masked}, axis={dim})", "p")
        elif kind == coda.ReduceKind.MAX:
            self.assign(op.result, f"tl.max({masked}, axis={dim})", "p")
        else:
            mx = self.fresh("lse_max")
            self.emit(f"{mx} = tl.max({masked}, axis={dim})")
            safe = self.fresh("lse_ref")
            self.emit(f'{safe} = tl.where({mx} == -float("inf"), 0.0, {mx})')
            bcast = f"{safe}[:, None]" if dim == 1 else f"{safe}[None, :]"
            # exp(-inf) = 0: masked elements do not contribute; an all-masked partial is -inf
            self.assign(op.result, f"{safe} + tl.log(tl.sum(tl.exp({masked} - {bcast}), axis={dim}))", "p")

    def emit_segment_reduce(self, op: coda.SegmentReduceOp) -> None:
        ty = op.tile.type
        assert isinstance(ty, coda.TileType)
        kind = op.kind.data
        w = op.width.value.data
        group = self.h if ty.cols == self.n else self.hw if ty.cols == 2 * self.n else 0
        if group and w % (2 * group):
            raise CompilerError(
                op,
                f"segment width {w} is not a multiple of the interleave group {2 * group}: segments "
                "would mix interleaved columns",
            )
        c = self.cols(op, ty.cols)
        if coda.is_gathered(op):
            self.not_in_gemm(op, "coda.gathered")
        if self.regathers(op):
            self.emit_regathered_segment_reduce(op)
            return
        self.need_bn(op, Fraction(w * self.n, ty.cols))
        x = self.get(op, op.tile)
        self.emit(f"# {op.name} {kind.value} width {w}")
        seg = self.fresh("seg")
        self.emit(f"{seg} = tl.reshape({self._masked(op, x, ty, kind)}, (BM, {c.tw} // {w}, {w}))")
        red = "tl.max" if kind == coda.ReduceKind.MAX else "tl.sum"
        self.assign(
            op.result,
            f"tl.reshape(tl.broadcast_to({red}({seg}, axis=2)[:, :, None], (BM, {c.tw} // {w}, {w})), (BM, {c.tw}))",
        )

    def emit_regathered_segment_reduce(self, op: coda.SegmentReduceOp) -> None:
        """A segment reduction on a tile covering the whole row, for a width no power-of-two
        tile holds whole: each column accumulates its segment's w values, fetched from the
        (masked) tile by `tl.gather` in the segment's order."""
        ty = op.tile.type
        assert isinstance(ty, coda.TileType)
        kind, w = op.kind.data, op.width.value.data
        self.cover_row(op)
        c = self.cols(op, ty.cols)
        x = self._named(self._masked(op, self.get(op, op.tile), ty, kind), "segx")
        start, acc, k, v = self.fresh("segstart"), self.fresh("segacc"), self.fresh("segk"), self.fresh("segv")
        self.emit(f"# {op.name} {kind.value} width {w}, segments gathered in a whole-row tile")
        self.emit(f"{start} = ({c.cols} // {w}) * {w}")
        if kind == coda.ReduceKind.MAX:
            self.emit(f'{acc} = tl.full((BM, {c.tw}), -float("inf"), tl.float32)')
        else:
            self.emit(f"{acc} = tl.zeros((BM, {c.tw}), dtype=tl.float32)")
        self.emit(f"for {k} in range(0, {w}):")
        self.emit(f"    {v} = tl.gather({x}, tl.broadcast_to(tl.minimum({start} + {k}, {c.tw} - 1)[None, :], "
                  f"(BM, {c.tw})), axis=1)")
        if kind == coda.ReduceKind.MAX:
            self.emit(f"    {acc} = tl.maximum({acc}, {v})")
        else:  # _masked squared the values already for sumsq
            self.emit(f"    {acc} += {v}")
        self.assign(op.result, acc)

    def emit_select(self, op: coda.SelectOp) -> None:
        ty = op.tile.type
        assert isinstance(ty, coda.TileType)
        c = self.cols(op, ty.cols)
        x = self.get(op, op.tile)
        self.emit(f"# {op.name}")
        load = f"tl.load({self.ptr(op, op.indices)} + offs_m, mask=mask_m, other=-1)"
        if self.vec_cache is None:
            idx = self.fresh("sel_idx")
            self.emit(f"{idx} = {load}")
        else:
            idx = self.row_vector(load, "sel_idx")
        hit = f"{c.mask2} & ({c.cols}[None, :] == {idx}[:, None])"
        self.assign(op.result, f"tl.sum(tl.where({hit}, {x}, 0.0), axis=1)", "p")

    # -------------------------------------------------------------- stores
    def emit_store(self, op: Operation, value: SSAValue, index: int, result: SSAValue, ptr: str) -> None:
        """Store one yielded value (output `index` of the kernel) as soon as it is final."""
        x = self.get(op, value)
        rty = result.type
        if isinstance(value.type, coda.PartialsType):
            pty = value.type
            src = value.owner
            assert isinstance(src, Operation)
            if pty.axis == coda.Axis.ROWS:
                if self.row_partials is not None:
                    # a slice's partial: combined with the other slices' after the last one
                    self.row_partials.setdefault(index, (pty, ptr, []))[2].append(x)
                    return
                self.emit_row_partials_store(ptr, x)
            else:
                tile = src.operands[0].type
                assert isinstance(tile, coda.TileType)
                c = self.cols(op, tile.cols)
                self.emit_column_partials_store(index, pty, ptr, x, c)
        else:
            ty = value.type
            assert isinstance(ty, coda.TileType) and isinstance(rty, TensorType)
            c = self.cols(op, ty.cols)
            rows = self.row_offsets()
            val = _stored(x, ty.element_type, rty.get_element_type(), 2)
            scatter = f"tl.store({ptr} + {rows}[:, None] * {ty.cols} + {c.cols}[None, :], {val}, mask={c.mask2})"
            hv = self.split_halves(op, ty.cols)
            if hv is None:
                self.emit(scatter)
                return
            # interleaved columns -> the user's layout: the even columns (first half, e.g. gate)
            # and the odd ones (second half, up) each as one contiguous block, not a scatter whose
            # adjacent lanes write h columns apart
            lo, hi = self.fresh("st_lo"), self.fresh("st_hi")
            base = f"{ptr} + {rows}[:, None] * {ty.cols} + {hv.ucol}[None, :]"
            self.emit(f"if {hv.cond}:")
            for line in hv.setup:
                self.emit(f"    {line}")
            self.emit(f"    {lo}, {hi} = tl.split(tl.reshape({val}, (BM, {hv.tw} // 2, 2)))")
            self.emit(f"    tl.store({base}, {lo}, mask={hv.umask})")
            self.emit(f"    tl.store({base} + {hv.half}, {hi}, mask={hv.umask})")
            self.emit("else:")
            self.emit(f"    {scatter}")

    def emit_column_partials_store(self, index: int, pty: coda.PartialsType, ptr: str, x: str, c: _Cols) -> None:
        """This tile's column partials of output `index` (hook: the Gluon epilogue carries them
        across its row sub-tiles and stores them once per tile)."""
        self.emit("# store partials [L, tiles_m] at [n, pid_m]")
        self.emit(f"tl.store({ptr} + {c.cols}.to(tl.int64) * tl.cdiv(M, BM) + pid_m, {x}, mask={c.mask})")

    def emit_row_partials_store(self, ptr: str, x: str) -> None:
        self.emit("# store partials [M, tiles_n] at [m, pid_n]")
        rows = self.row_offsets()
        self.emit(f"tl.store({ptr} + {rows} * tl.cdiv(N, BN) + pid_n, {x}, mask=mask_m)")

    def emit_body(self, block: Block, args: Sequence[str], outputs: Sequence[tuple[SSAValue, str]]) -> None:
        """The region's ops in `epilogue_schedule` order; each yielded value is stored right after
        the step that makes it."""
        for arg, name in zip(block.args, args):
            self.names[arg] = name
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
                self.emit_store(term, value, i, result, ptr)

        for arg in block.args:
            store(arg)
        for step in epilogue_schedule(block):
            if step.op in self.prebound:  # computed before the epilogue (the Gluon mainloop's accumulate_first)
                for result in step.op.results:
                    self.names[result] = self.prebound[step.op]
            elif isinstance(step.op, coda.MapOp) and coda.pair_halves_stride(step.op) is None:
                self.emit_map(step.op, step)
            else:
                self.emit_op(step.op)
            for i in step.results:
                store(step.op.results[i])
        for value in list(stores):  # defined outside the region (not expected), stored at the end
            store(value)

    def emit_region(self, block: Block, args: Sequence[str], outputs: Sequence[tuple[SSAValue, str]]) -> list[str]:
        self.emit_body(block, args, outputs)
        return self.lines

    # -------------------------------------------------------------- column slices
    def begin_slice(self, j: int, parts: int) -> None:
        """Emit the next slices's ops on columns [j BN / parts, (j + 1) BN / parts) of the tile."""
        w = f"BN // {parts}"
        self.bn = f"({w})"
        self.tag = f"_s{j}"
        self.offs_n = f"offs_n_s{j}"
        self.mask_n = f"mask_n_s{j}"
        self.pid_n = f"(pid_n * {parts} + {j})"
        self.names.clear()
        self.col_cache.clear()
        self.body_prints.clear()
        start = "pid_n * BN" if j == 0 else f"pid_n * BN + {j} * ({w})"
        self.emit(f"# -- column slice {j} of {parts}")
        self.emit(f"{self.offs_n} = {start} + tl.arange(0, {w})")
        self.emit(f"{self.mask_n} = {self.offs_n} < N")

    def emit_sliced_region(self, block: Block, args: Sequence[str], outputs: Sequence[tuple[SSAValue, str]]) -> list[str]:
        """The whole region once per column half of the accumulator (args[0] is `acc`).

        Elementwise work, tile stores and cols partials are per column, so each half gives the
        same values as the whole tile; row partials of the halves are combined in slice order
        (sum: p0 + p1, max, log-sum-exp) and stored once per tile.
        """
        parts = 2
        self.vec_cache = {}
        self.row_partials = {}
        accs = [self.fresh(f"acc_s{j}") for j in range(parts)]
        self.emit(f"# sub-tiled epilogue: {parts} column slices of BN // {parts}")
        self.emit(
            f"{', '.join(accs)} = tl.split(tl.permute(tl.reshape({args[0]}, (BM, {parts}, BN // {parts})), (0, 2, 1)))"
        )
        for j in range(parts):
            self.begin_slice(j, parts)
            self.emit_body(block, [accs[j], *args[1:]], outputs)
        if self.row_partials:
            self.emit("# -- row partials of the slices, combined in slice order")
        for index in sorted(self.row_partials):
            pty, ptr, xs = self.row_partials[index]
            combine = pty.combine_kind
            acc = xs[0]
            for x in xs[1:]:
                var = self.fresh("pc")
                if combine == coda.Combine.SUM:
                    self.emit(f"{var} = {acc} + {x}")
                elif combine == coda.Combine.MAX:
                    self.emit(f"{var} = tl.maximum({acc}, {x})")
                else:
                    mx, ref = self.fresh("pc_max"), self.fresh("pc_ref")
                    self.emit(f"{mx} = tl.maximum({acc}, {x})")
                    self.emit(f'{ref} = tl.where({mx} == -float("inf"), 0.0, {mx})')
                    self.emit(f"{var} = {ref} + tl.log(tl.exp({acc} - {ref}) + tl.exp({x} - {ref}))")
                acc = var
            self.emit_row_partials_store(ptr, acc)
        return self.lines


# The option defaults and the sub-tiling rule live with the gemm kernels' builder
# (`transforms/tl_gemm.py`); the half-tile rule with the epilogue builder's column space.


@dataclass(frozen=True)
class TritonOptions:
    """Options of the Triton lowering (the `triton` target's and the lowering passes' options;
    `coda_ir.compile(..., options=...)`). The defaults are what production uses; the others
    exist to A/B code shapes on a GPU (the values computed are the same either way).

    `epilogue_subtile`: run heavy gemm epilogues per column half of tiles at least this wide (a
    power of two >= 2), or 0: never. `half_tile_io`: N-wide loads and stores of interleaved
    kernels as two contiguous half tiles (True) or one scatter (False).
    """

    epilogue_subtile: int = SUBTILE_MIN_BN_DEFAULT
    half_tile_io: bool = True

    def __post_init__(self) -> None:
        check_subtile(self.epilogue_subtile)


# ============================================================================ kernels


_Names = KernelNames  # (convert-coda-to-tl's, shared until every kernel kind is converted)


@dataclass
class KernelInfo:
    """What the host side needs to launch one kernel."""

    op: Operation
    name: str
    kind: str  # gemm | elementwise | fold | launch_group
    bn_multiple_of: int = 1
    source: list[str] = field(default_factory=list)
    params: list[str] = field(default_factory=list)  # runtime parameters, then constexprs (no annotation)
    constexprs: int = 0  # how many of `params` (at the end) are tl.constexpr


_param_names = param_names


class GluonEpilogueEmitter(_EpilogueEmitter):
    """The epilogue emitter with the Gluon partition's hooks: column index vectors in the epilogue
    layout, the narrow operands of a pair map given its split operands' layout and its results
    converted back to the epilogue layout (both free: the layout keeps each pair in one thread,
    `epilogue_column_lanes`), column partials carried across sub-tiles."""

    def __init__(self, op: coda.GemmOp, n: int, params: dict[SSAValue, str], fresh, options: TritonOptions):
        super().__init__(op, n, 0, params, fresh, 0, options)
        self.carried: dict[int, tuple[str, str, coda.Combine]] = {}  # output index -> (variable, pointer, combine)

    def column_arange(self, tw: str) -> str:
        return f"gl.arange(0, {tw}, layout=gl.SliceLayout(0, EPI_LAYOUT))"

    def relayout(self, expr: str) -> str:
        return f"gl.convert_layout({expr}, EPI_LAYOUT)"

    def pair_operand(self, narrow: str, like: str) -> str:
        return f"gl.convert_layout({narrow}, {like}.type.layout)"

    def emit_column_partials_store(self, index: int, pty: coda.PartialsType, ptr: str, x: str, c: _Cols) -> None:
        if c.cols != "offs_n":
            raise InternalCompilerBug(self.kernel, "column partials of a tile that is not N wide in a Gluon epilogue "
                                                   "(coda-plan-mainloop admits N-wide ones only)")
        if index not in self.carried:
            self.carried[index] = (self.fresh(f"colp{index}"), ptr, pty.combine_kind)
        var, _, combine = self.carried[index]
        self.emit("# column partials: carried across the row sub-tiles (in sub-tile order)")
        if combine == coda.Combine.MAX:
            self.emit(f"{var} = tl.maximum({var}, {x})")
        elif combine == coda.Combine.SUM:
            self.emit(f"{var} = {var} + {x}")
        else:
            raise InternalCompilerBug(self.kernel, f"{combine.value} column partials in a Gluon epilogue")


def emit_gluon_gemm(op: coda.GemmOp, name: str, options: TritonOptions | None = None) -> list[str]:
    """The Gluon kernel of a gemm with a `coda.mainloop` record (see `emit_gluon_kernel`)."""
    options = options if options is not None else TritonOptions()
    ml = coda.recorded_mainloop(op)
    if ml is None:
        raise InternalCompilerBug(op, "emit_gluon_gemm on a gemm without a coda.mainloop record")
    names = KernelNames([*KERNEL_SCOPE, *GLUON_SCOPE])
    block = op.epilogue.blocks[0]
    in_params = param_names(names, block.args[1:], "in")
    out_params = param_names(names, op.outputs, "out")
    _, n, _ = op.problem_shape()
    em = GluonEpilogueEmitter(op, n, dict(zip(block.args[1:], in_params)), names, options)
    first = ml.accumulate_first.data
    if first >= 0:
        uses = list(block.args[0].uses)
        if len(uses) != 1 or not isinstance(uses[0].operation, coda.AccumulateOp) \
                or uses[0].operation.matrix is not block.args[1 + first]:
            raise InternalCompilerBug(op, f"coda.mainloop accumulate_first = {first}, but the accumulator's only use "
                                          "is not coda.accumulate of that input")
        em.prebound[uses[0].operation] = "acc"
    em.emit_region(block, ["acc", *in_params], list(zip(op.outputs, out_params)))
    return emit_gluon_kernel(op, name, in_params, out_params, em.lines, [em.carried[i] for i in sorted(em.carried)])


# ============================================================================ host functions


def count_kernels(fn: func.FuncOp) -> int:
    """GPU kernel launches one call of the function makes (a `coda.launch_group` is one)."""
    return coda.launch_count(fn)


# ============================================================================ module


def function_ops(module: ModuleOp) -> list[func.FuncOp]:
    return [op for op in module.walk() if isinstance(op, func.FuncOp) and op.body.blocks]


def emit_module(module: ModuleOp, options: TritonOptions | None = None) -> str:
    """The Triton source of a whole module (see the module docstring for its layout)."""
    options = options if options is not None else TritonOptions()
    from coda_ir.transforms.legalize import ensure_legalized

    ensure_legalized(module)  # the emitters below read the tile constraints it records
    # only acts on arguments the caller donated; its `coda.writes_over` records stay on the
    # caller's module (coda_ir.torch reads them from `CompiledModule.ir`)
    PlanInPlacePass().apply(make_context(), module)
    # The passes of the lowering run on a copy: the caller's module stays the coda program.
    module = module.clone()
    ctx = make_context()
    ConvertCodaToTLPass(options.epilogue_subtile, options.half_tile_io).apply(ctx, module)
    ConvertCodaToHostPass().apply(ctx, module)
    tl_kernels = coda_to_tl.tl_kernels(module)
    out: list[str] = [
        '"""Generated by coda-ir (coda -> Triton). Host functions: '
        + ", ".join(f.sym_name.data for f in function_ops(module))
        + '."""',
        PRELUDE,
        "",
        *interleave_rows_source(),
    ]
    sources: dict[str, list[str]] = {}
    gluon_kernels: list[str] = []  # the Gluon entry points (gemms with a coda.mainloop record)
    gluon_source: list[str] = []
    for fn in function_ops(module):
        infos: dict[Operation, KernelInfo] = {}
        for k in coda.kernels(fn):
            name = kernel_symbol(k)
            member = isinstance(k.parent_op(), coda.LaunchGroupOp)
            if isinstance(k, coda.GemmOp):
                if member:
                    raise CompilerError(k, "a coda.gemm cannot be a member of a coda.launch_group")
                info = printed_kernel_info(k, tl_kernels[name], "gemm", False)
                if coda.recorded_mainloop(k) is not None:
                    gluon_source += emit_gluon_gemm(k, name, options)
                    gluon_kernels.append(gluon_entry_name(name))
            else:
                assert isinstance(k, (coda.ElementwiseOp, coda.FoldOp))
                kind = "elementwise" if isinstance(k, coda.ElementwiseOp) else "fold"
                info = printed_kernel_info(k, tl_kernels[name], kind, member)
            infos[k] = info
            out += ["", ""] + info.source
        groups = [g for g in fn.walk() if isinstance(g, coda.LaunchGroupOp)]
        for g in groups:
            kernel = tl_kernels[kernel_symbol(g)]
            for i, m in enumerate(g.members()):  # the group kernel calls each member as emitted
                mine = [p[: -len(f"_{i}")] for p in kernel.param_names() if p.endswith(f"_{i}")]
                if mine != infos[m].params:
                    raise InternalCompilerBug(m, f"launch group member parameters {mine} != the kernel's {infos[m].params}")
            info = printed_kernel_info(g, kernel, "launch_group", False)
            infos[g] = info
            out += ["", ""] + info.source
        sources.update({info.name: info.source for info in infos.values()})
    if gluon_kernels:
        # defined where the installed Triton has Gluon (else None: launch_gemm runs the tl kernel)
        out += ["", "", GLUON_PRELUDE.rstrip("\n"), *gluon_source, "else:", *[f"{IND}{g} = None" for g in gluon_kernels]]
    for hfn in host_functions(module):
        out += ["", ""] + print_host_function(hfn, sources)
    for op in module.ops:
        if not isinstance(op, (func.FuncOp, tl.KernelOp, host.FuncOp)):
            raise CompilerError(op, "only func.func ops can be lowered at module level")
    return "\n".join(out) + "\n"


def printed_kernel_info(op: Operation, kernel: tl.KernelOp, kind: str, member: bool) -> KernelInfo:
    """The launch description of a kernel built by convert-coda-to-tl, with its printed source
    (a launch group member's leading `pid` is the group kernel's, not a launch argument)."""
    params = kernel.param_names()[1 if member else 0 :]
    return KernelInfo(op, kernel.sym_name.data, kind, coda.recorded_bn_multiple_of(op) if kind != "fold" else 1,
                      print_kernel(kernel), params, kernel.constexprs.data)


def kernel_counts(module: ModuleOp) -> dict[str, int]:
    return {fn.sym_name.data: count_kernels(fn) for fn in function_ops(module)}


@dataclass(frozen=True)
class TritonTarget(Target):
    """`coda-opt FILE -t triton`: print one Python module of Triton kernels and host functions.

    Its arguments are `TritonOptions`' fields: `-t 'triton{epilogue_subtile=256 half_tile_io=false}'`.
    """

    name = "triton"

    epilogue_subtile: int = SUBTILE_MIN_BN_DEFAULT
    half_tile_io: bool = True

    def options(self) -> TritonOptions:
        return TritonOptions(self.epilogue_subtile, self.half_tile_io)

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        output.write(emit_module(module, self.options()))
