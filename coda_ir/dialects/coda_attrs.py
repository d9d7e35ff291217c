"""The attributes and types of the `coda` dialect, and the decisions passes record with them.

* enums (`Axis`, `ReduceKind`, `Combine`) and their attributes;
* the types of epilogue values: `!coda.tile`, `!coda.partials`;
* the attributes of kernels: `#coda.config` (a fixed tile), `#coda.mainloop` and
  `#coda.vendor_gemm` (coda-plan-mainloop), `#coda.tile_constraints` (coda-legalize) and the
  module's `#coda.rows` (a run-time row count);
* the recorded decisions: the names of the discardable attributes a pass records on a kernel,
  an op or a function argument (`coda.gathered`, `coda.writes_over`, `coda.donated`, ...) and the
  helpers that write and read them. Their verifier, and the helpers that need the ops
  themselves (`is_plain_gemm`, `wants_full_precision`), live with the ops in `coda.py`.

`coda_ir.dialects.coda` re-exports every name here: import them from there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import auto
from typing import ClassVar

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    DictionaryAttr,
    Float16Type,
    Float32Type,
    IntAttr,
    IntegerAttr,
    StringAttr,
    UnitAttr,
    f32,
    i1,
    i32,
    i64,
)
from xdsl.ir import (
    Attribute,
    Operation,
    ParametrizedAttribute,
    SpacedOpaqueSyntaxAttribute,
    TypeAttribute,
)
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException
from xdsl.dialects.utils import EnumAttribute
from xdsl.utils.str_enum import StrEnum

from coda_ir.dialects.tensor_checks import FLOAT_TYPES  # re-exported: coda.FLOAT_TYPES

# ============================================================================ enums


class Axis(StrEnum):
    """What a vector is indexed by when it meets a tile."""

    ROWS = auto()
    COLS = auto()
    SCALAR = auto()


class ReduceKind(StrEnum):
    SUM = auto()
    SUMSQ = auto()
    MAX = auto()
    LSE = auto()


class Combine(StrEnum):
    """How the partials of different tiles fold into one value."""

    SUM = auto()
    MAX = auto()
    LSE = auto()


COMBINE_OF_KIND = {
    ReduceKind.SUM: Combine.SUM,
    ReduceKind.SUMSQ: Combine.SUM,
    ReduceKind.MAX: Combine.MAX,
    ReduceKind.LSE: Combine.LSE,
}


@irdl_attr_definition
class AxisAttr(EnumAttribute[Axis], SpacedOpaqueSyntaxAttribute):
    name = "coda.axis"


@irdl_attr_definition
class ReduceKindAttr(EnumAttribute[ReduceKind], SpacedOpaqueSyntaxAttribute):
    name = "coda.reduce_kind"


# ============================================================================ types


@irdl_attr_definition
class TileType(ParametrizedAttribute, TypeAttribute):
    """`!coda.tile<MxWxT>`: this program instance's part of a logical M x W matrix."""

    name = "coda.tile"

    shape: ArrayAttr[IntAttr]
    element_type: Attribute

    def __init__(self, shape: Sequence[int], element_type: Attribute = f32):
        super().__init__(ArrayAttr(IntAttr(d) for d in shape), element_type)

    def get_shape(self) -> tuple[int, int]:
        rows, cols = (d.data for d in self.shape.data)
        return rows, cols

    @property
    def rows(self) -> int:
        return self.get_shape()[0]

    @property
    def cols(self) -> int:
        return self.get_shape()[1]

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            dims, element_type = parser.parse_ranked_shape()
        return (ArrayAttr(IntAttr(d) for d in dims), element_type)

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_dimension_list(self.get_shape())
            printer.print_string("x")
            printer.print_attribute(self.element_type)

    def verify(self) -> None:
        dims = [d.data for d in self.shape.data]
        if len(dims) != 2:
            raise VerifyException(f"!coda.tile must be rank 2 (rows x columns), got rank {len(dims)}")
        if any(d <= 0 for d in dims):
            raise VerifyException(f"!coda.tile dimensions must be positive, got {dims}")
        elt = self.element_type
        if not (elt == f32 or elt == i32 or elt == i1):
            raise VerifyException(
                f"!coda.tile element type must be f32 (values), i32 (indices) or i1 (predicates), got {elt}"
            )


@irdl_attr_definition
class PartialsType(ParametrizedAttribute, TypeAttribute):
    """`!coda.partials<rows, M, sum>`: per-tile partial reductions of a length-M vector.

    `rows`: one partial per row per column tile, `[M, ceil(N / BN)]` (a reduction over
    columns); `cols`: one per column per row tile, `[N, ceil(M / BM)]`. The combine says how
    a fold merges them: sum, max, or log-sum-exp.
    """

    name = "coda.partials"

    along: AxisAttr
    length: IntAttr
    combine: StringAttr

    def __init__(self, along: Axis, length: int, combine: Combine):
        super().__init__(AxisAttr(along), IntAttr(length), StringAttr(combine.value))

    @property
    def combine_kind(self) -> Combine:
        return Combine(self.combine.data)

    @property
    def axis(self) -> Axis:
        return self.along.data

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            along = parser.parse_str_enum(Axis)
            parser.parse_punctuation(",")
            length = parser.parse_integer(allow_boolean=False, allow_negative=False)
            parser.parse_punctuation(",")
            combine = parser.parse_str_enum(Combine)
        return (AxisAttr(along), IntAttr(length), StringAttr(combine.value))

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.along.data.value}, {self.length.data}, {self.combine.data}>")

    def verify(self) -> None:
        if self.along.data == Axis.SCALAR:
            raise VerifyException("!coda.partials are along rows or cols, not scalar")
        if self.length.data <= 0:
            raise VerifyException("!coda.partials length must be positive")
        if self.combine.data not in {c.value for c in Combine}:
            raise VerifyException(f"unknown combine '{self.combine.data}' (expected sum, max or lse)")


@irdl_attr_definition
class TileConfigAttr(ParametrizedAttribute):
    """`#coda.config<bm = 128, bn = 128, bk = 64, warps = 8, stages = 3>`: a fixed tile
    configuration. Without one the runtime autotunes."""

    name = "coda.config"

    bm: IntAttr
    bn: IntAttr
    bk: IntAttr
    warps: IntAttr
    stages: IntAttr

    FIELDS: ClassVar[tuple[str, ...]] = ("bm", "bn", "bk", "warps", "stages")

    def __init__(self, bm: int, bn: int, bk: int, warps: int = 4, stages: int = 3):
        super().__init__(IntAttr(bm), IntAttr(bn), IntAttr(bk), IntAttr(warps), IntAttr(stages))

    def as_dict(self) -> dict[str, int]:
        return {f: getattr(self, f).data for f in self.FIELDS}

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        values: dict[str, int] = {}

        def parse_entry() -> None:
            key = parser.parse_identifier()
            if key not in cls.FIELDS:
                parser.raise_error(f"unknown tile config field '{key}' (expected {', '.join(cls.FIELDS)})")
            parser.parse_punctuation("=")
            values[key] = parser.parse_integer(allow_boolean=False, allow_negative=False)

        parser.parse_comma_separated_list(parser.Delimiter.ANGLE, parse_entry)
        missing = [f for f in cls.FIELDS if f not in values]
        if missing:
            parser.raise_error(f"tile config is missing {', '.join(missing)}")
        return tuple(IntAttr(values[f]) for f in cls.FIELDS)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<" + ", ".join(f"{k} = {v}" for k, v in self.as_dict().items()) + ">")

    def verify(self) -> None:
        for field, value in self.as_dict().items():
            if value <= 0 or value & (value - 1):
                if field != "stages":
                    raise VerifyException(f"tile config {field} must be a positive power of two, got {value}")
        if self.bm.data < 16 or self.bn.data < 16 or self.bk.data < 16:
            raise VerifyException("tile config bm, bn and bk must be at least 16 (tl.dot)")
        if self.stages.data <= 0:
            raise VerifyException("tile config stages must be positive")


MAINLOOP = "coda.mainloop"
"""Kernel attribute (a `MainloopAttr`) that `coda-plan-mainloop` records on a `coda.gemm`: the
warp-specialized Gluon mainloop the kernel runs with on a Hopper GPU. The lowering emits that
kernel beside the portable `tl` one, and `launch_gemm` obeys it wherever the machine can run it."""

HANDOFF_TYPES = ("bf16", "f32")


@irdl_attr_definition
class MainloopAttr(ParametrizedAttribute):
    """`#coda.mainloop<gluon_ws, bm = 128, bn = 256, bk = 64, stages = 3, handoff = bf16,
    accumulate_first = -1, epilogue_warps = 2, sub_rows = 16, regs = [168, 24, 176]>`: a persistent
    warp-specialized Hopper GEMM (lowering/gluon.py). Two cooperative MMA warpgroups (bm / 2 rows
    each of one bm x bn tile), a one-warp TMA producer (a `stages`-deep ring of bk-wide operand
    tiles), and an epilogue partition of `epilogue_warps` warps that runs the epilogue on the
    accumulator handed over through a [bm, bn] shared-memory buffer of `handoff` elements, in
    sub-tiles of `sub_rows` rows, while the MMA warpgroups compute the next tile.
    `accumulate_first` >= 0: the epilogue's first op is `coda.accumulate` of that epilogue input
    (an index into the gemm's `ins`), which the MMA warpgroups apply before the hand-off (the
    input's tile is loaded into the hand-off buffer by TMA). `regs`: registers per thread of the
    MMA, producer and epilogue partitions (`setmaxnreg`)."""

    name = "coda.mainloop"

    kind: StringAttr
    bm: IntAttr
    bn: IntAttr
    bk: IntAttr
    stages: IntAttr
    handoff: StringAttr
    accumulate_first: IntAttr
    epilogue_warps: IntAttr
    sub_rows: IntAttr
    regs: ArrayAttr[IntAttr]

    KINDS: ClassVar[tuple[str, ...]] = ("gluon_ws",)
    INT_FIELDS: ClassVar[tuple[str, ...]] = ("bm", "bn", "bk", "stages", "accumulate_first", "epilogue_warps", "sub_rows")

    def __init__(self, kind: str, bm: int, bn: int, bk: int, stages: int, handoff: str, accumulate_first: int,
                 epilogue_warps: int, sub_rows: int, regs: Sequence[int]):
        super().__init__(StringAttr(kind), IntAttr(bm), IntAttr(bn), IntAttr(bk), IntAttr(stages), StringAttr(handoff),
                         IntAttr(accumulate_first), IntAttr(epilogue_warps), IntAttr(sub_rows),
                         ArrayAttr([IntAttr(r) for r in regs]))

    def as_dict(self) -> dict[str, object]:
        values: dict[str, object] = {"kind": self.kind.data}
        values.update({f: getattr(self, f).data for f in self.INT_FIELDS})
        values["handoff"] = self.handoff.data
        values["regs"] = tuple(r.data for r in self.regs.data)
        return values

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        parser.parse_punctuation("<")
        kind = parser.parse_identifier()
        values: dict[str, object] = {}
        while parser.parse_optional_punctuation(",") is not None:
            key = parser.parse_identifier()
            parser.parse_punctuation("=")
            if key in cls.INT_FIELDS:
                values[key] = parser.parse_integer(allow_boolean=False, allow_negative=key == "accumulate_first")
            elif key == "handoff":
                values[key] = parser.parse_identifier()
            elif key == "regs":
                values[key] = parser.parse_comma_separated_list(
                    parser.Delimiter.SQUARE, lambda: parser.parse_integer(allow_boolean=False, allow_negative=False))
            else:
                parser.raise_error(f"unknown mainloop field '{key}' (expected {', '.join((*cls.INT_FIELDS, 'handoff', 'regs'))})")
        parser.parse_punctuation(">")
        missing = [f for f in (*cls.INT_FIELDS, "handoff", "regs") if f not in values]
        if missing:
            parser.raise_error(f"mainloop is missing {', '.join(missing)}")
        return (StringAttr(kind), *(IntAttr(values[f]) for f in ("bm", "bn", "bk", "stages")),  # type: ignore[arg-type]
                StringAttr(values["handoff"]), IntAttr(values["accumulate_first"]),  # type: ignore[arg-type]
                IntAttr(values["epilogue_warps"]), IntAttr(values["sub_rows"]),  # type: ignore[arg-type]
                ArrayAttr([IntAttr(r) for r in values["regs"]]))  # type: ignore[union-attr]

    def print_parameters(self, printer: Printer) -> None:
        d = self.as_dict()
        printer.print_string(
            f"<{d['kind']}, bm = {d['bm']}, bn = {d['bn']}, bk = {d['bk']}, stages = {d['stages']}, "
            f"handoff = {d['handoff']}, accumulate_first = {d['accumulate_first']}, "
            f"epilogue_warps = {d['epilogue_warps']}, sub_rows = {d['sub_rows']}, "
            f"regs = [{', '.join(map(str, d['regs']))}]>")  # type: ignore[arg-type]

    def verify(self) -> None:
        d = self.as_dict()
        if d["kind"] not in self.KINDS:
            raise VerifyException(f"mainloop kind must be one of {', '.join(self.KINDS)}, got {d['kind']!r}")
        for f in ("bm", "bn", "bk", "sub_rows"):
            v = d[f]
            if not isinstance(v, int) or v < 8 or v & (v - 1):
                raise VerifyException(f"mainloop {f} must be a power of two >= 8, got {v}")
        if d["bm"] != 128 or d["bn"] not in (128, 256) or d["bk"] not in (32, 64):  # the emitter's wgmma shapes
            raise VerifyException("mainloop gluon_ws supports bm = 128, bn = 128 or 256, bk = 32 or 64")
        if not 2 <= d["stages"] <= 8:  # type: ignore[operator]
            raise VerifyException(f"mainloop stages must be 2..8, got {d['stages']}")
        if d["handoff"] not in HANDOFF_TYPES:
            raise VerifyException(f"mainloop handoff must be bf16 or f32, got {d['handoff']!r}")
        if d["sub_rows"] > d["bm"]:  # type: ignore[operator]
            raise VerifyException("mainloop sub_rows must not exceed bm")
        if d["epilogue_warps"] not in (1, 2, 4):
            raise VerifyException(f"mainloop epilogue_warps must be 1, 2 or 4, got {d['epilogue_warps']}")
        if d["accumulate_first"] < -1:  # type: ignore[operator]
            raise VerifyException("mainloop accumulate_first must be an input index or -1")
        regs = d["regs"]
        if len(regs) != 3 or any(r % 8 or not 24 <= r <= 256 for r in regs):  # type: ignore[arg-type,union-attr]
            raise VerifyException(f"mainloop regs must be three multiples of 8 in 24..256 (MMA, producer, epilogue), got {list(regs)}")  # type: ignore[arg-type]
        if d["accumulate_first"] >= 0 and d["handoff"] != "bf16":  # type: ignore[operator]
            raise VerifyException("mainloop accumulate_first loads a bf16 tile into the hand-off buffer: handoff must be bf16")


def recorded_mainloop(kernel: Operation) -> MainloopAttr | None:
    """The mainloop `coda-plan-mainloop` recorded on a gemm (None: the portable tl mainloop)."""
    attr = kernel.attributes.get(MAINLOOP)
    return attr if isinstance(attr, MainloopAttr) else None


VENDOR_GEMM = "coda.vendor_gemm"
"""Kernel attribute (a `VendorGemmAttr`) that `coda-plan-mainloop` records on a `coda.gemm` whose
epilogue stores the accumulator and nothing else: on a GPU the GEMM runs the vendor library's
kernel into the kernel's output (`launch_gemm`); elsewhere, and where the library cannot (a
PyTorch without `torch.mm(..., out_dtype=)` for a widened output), the tl kernel."""


@irdl_attr_definition
class VendorGemmAttr(ParametrizedAttribute):
    """`#coda.vendor_gemm<cublas>`: the plain GEMM runs the vendor's library (cuBLAS through
    `torch.mm`) on the GPU instead of the generated mainloop."""

    name = "coda.vendor_gemm"

    library: StringAttr

    LIBRARIES: ClassVar[tuple[str, ...]] = ("cublas",)

    def __init__(self, library: str):
        super().__init__(StringAttr(library))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        parser.parse_punctuation("<")
        library = parser.parse_identifier()
        parser.parse_punctuation(">")
        return (StringAttr(library),)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.library.data}>")

    def verify(self) -> None:
        if self.library.data not in self.LIBRARIES:
            raise VerifyException(f"vendor_gemm library must be one of {', '.join(self.LIBRARIES)}, "
                                  f"got {self.library.data!r}")


def recorded_vendor_gemm(kernel: Operation) -> VendorGemmAttr | None:
    """The vendor library `coda-plan-mainloop` gave a plain gemm (None: the generated mainloop)."""
    attr = kernel.attributes.get(VENDOR_GEMM)
    return attr if isinstance(attr, VendorGemmAttr) else None


CONSTRAINTS = "coda.constraints"
"""Kernel attribute (a `TileConstraintsAttr`) that `coda-legalize` records: what the tile-locality
proofs of the kernel's epilogue need from the column tile. The lowering obeys it."""

GATHERED = "coda.gathered"
"""Unit attribute `coda-legalize` puts on a `coda.pair_map` / `coda.segment_reduce` of a
standalone elementwise kernel whose pair group or segment no power-of-two column tile holds:
the op reads its pairs / segments straight from memory, which any width allows. The lowering
emits the gathered form for exactly these ops."""


ROW_EXCHANGE = "coda.row_exchange"
"""Unit attribute `coda-legalize` puts on a `coda.pair_map` / `coda.segment_reduce` whose pair
group or segment no power-of-two column tile holds and which cannot read its groups from memory
(computed values, a gemm epilogue): its kernel's column tile covers the whole row (recorded as
`bn_multiple_of` >= N) and the op exchanges values inside it (`tl.gather`)."""

PAIR_HALVES = "coda.pair_halves"
"""Integer attribute (the pair stride s) `coda-legalize` puts on the ops of a standalone
elementwise kernel that handle a `coda.gathered` pair_map's wide (2 x pairs) tiles as their two
halves, each at the tile's pair-index columns p: the first at column
(p // s) * 2s + p % s, the second s further. A `coda.load` of a kernel input reads both halves,
a `coda.map` runs once per half, a `coda.reduce` over the columns (dim 1) combines both halves'
partials of each row. So a gathered pair_map's wide results may be read again (SwiGLU backward's
`z . dz` row partials) and its wide inputs read by other ops, and any pair stride compiles."""

FULL_PRECISION = "coda.full_precision"
"""Unit attribute on a `coda.load` of a kernel input: the reader wants that input unrounded
(`convert-nn-to-coda` marks dy of an RMSNorm backward that nn-plan keeps out of the GEMM
producing dy: that pass would otherwise read dy rounded to bf16, where the epilogue form reads
the fp32 accumulator). `coda-widen-summed-stores` stores a kernel output in f32 when every
reader of it asks so; an output anything else reads (another load, the function's return)
keeps its type, and the mark changes nothing else (a load yields an fp32 tile either way)."""

SEPARATE = "coda.separate"
"""Unit attribute on a `coda.elementwise` kernel: the plan (`nn-plan`, the IO model) keeps it out
of its producing GEMM's epilogue although fusing it would be legal (e.g. a QK-norm whose
cheapest tile width does not hold whole heads). coda-fuse obeys it."""


WRITES_OVER = "coda.writes_over"
"""Kernel attribute (an array of integers, one per output: the input it is stored over, or -1
for a fresh buffer) that `coda-plan-in-place` records on a `coda.elementwise` kernel; the host
lowering obeys it (and checks that the input is a donated argument of the output's type)."""

DONATED = "coda.donated"
"""Unit argument attribute of a `func.func`: the caller hands this buffer to the function, which
may store a kernel output over it (`coda-plan-in-place` decides where)."""

OWNED = "coda.owned"
"""Unit argument attribute of a `func.func`: the caller hands its reference over, so the host
function holds the only one and drops it after its last reader (the memory model counts it)."""


def writes_over(kernel: Operation) -> list[int] | None:
    """The recorded `coda.writes_over` of a kernel (None when none is recorded)."""
    attr = kernel.attributes.get(WRITES_OVER)
    if not isinstance(attr, ArrayAttr):
        return None
    return [a.value.data for a in attr.data]  # type: ignore[attr-defined]


def record_writes_over(kernel: Operation, over: Sequence[int]) -> None:
    """Record, per output of `kernel`, the input it is stored over (-1: a fresh buffer)."""
    kernel.attributes[WRITES_OVER] = ArrayAttr([IntegerAttr(k, i64) for k in over])


def donate_arguments(fn: func.FuncOp, indices: Iterable[int]) -> None:
    """Mark arguments `indices` of `fn` as donated (`coda.donated`)."""
    _mark_arguments(fn, indices, DONATED)


def own_arguments(fn: func.FuncOp, indices: Iterable[int]) -> None:
    """Mark arguments `indices` of `fn` as handed over (`coda.owned`)."""
    _mark_arguments(fn, indices, OWNED)


def donated_arguments(fn: func.FuncOp) -> set[int]:
    """The arguments the caller donated (`coda.donated`)."""
    return _marked_arguments(fn, DONATED)


def owned_arguments(fn: func.FuncOp) -> set[int]:
    """The arguments whose reference the caller hands over (`coda.owned`)."""
    return _marked_arguments(fn, OWNED)


def _mark_arguments(fn: func.FuncOp, indices: Iterable[int], key: str) -> None:
    n = len(fn.body.blocks[0].args)
    marked = set(indices)
    if any(not 0 <= i < n for i in marked):
        raise ValueError(f"@{fn.sym_name.data} has {n} arguments; cannot mark {sorted(marked)} {key}")
    old = list(fn.arg_attrs.data) if fn.arg_attrs is not None else [DictionaryAttr({}) for _ in range(n)]
    new: list[Attribute] = []
    for i, attrs in enumerate(old):
        entries = dict(attrs.data)  # type: ignore[attr-defined]
        if i in marked:
            entries[key] = UnitAttr()
        new.append(DictionaryAttr(entries))
    fn.arg_attrs = ArrayAttr(new)


def _marked_arguments(fn: func.FuncOp, key: str) -> set[int]:
    if fn.arg_attrs is None:
        return set()
    return {i for i, attrs in enumerate(fn.arg_attrs.data) if key in attrs.data}  # type: ignore[attr-defined]


@irdl_attr_definition
class TileConstraintsAttr(ParametrizedAttribute):
    """`#coda.tile_constraints<bn_multiple_of = 128, reasons = ["..."]>`: the kernel's column tile
    BN must be a multiple of `bn_multiple_of` (a power of two: Triton tiles are powers of two)
    for its epilogue's proofs to hold; `reasons` says which op needed what."""

    name = "coda.tile_constraints"

    bn_multiple_of: IntAttr
    reasons: ArrayAttr[StringAttr]

    def __init__(self, bn_multiple_of: int, reasons: Sequence[str] = ()):
        super().__init__(IntAttr(bn_multiple_of), ArrayAttr([StringAttr(r) for r in reasons]))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        values: dict[str, Attribute] = {}

        def parse_entry() -> None:
            key = parser.parse_identifier()
            parser.parse_punctuation("=")
            if key == "bn_multiple_of":
                values[key] = IntAttr(parser.parse_integer(allow_boolean=False, allow_negative=False))
            elif key == "reasons":
                values[key] = ArrayAttr(
                    StringAttr(t) for t in parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_str_literal)
                )
            else:
                parser.raise_error(f"unknown tile constraint '{key}' (expected bn_multiple_of, reasons)")

        parser.parse_comma_separated_list(parser.Delimiter.ANGLE, parse_entry)
        if "bn_multiple_of" not in values:
            parser.raise_error("tile constraints need bn_multiple_of")
        return (values["bn_multiple_of"], values.get("reasons", ArrayAttr([])))

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<bn_multiple_of = {self.bn_multiple_of.data}, reasons = [")
        for i, reason in enumerate(self.reasons.data):
            if i:
                printer.print_string(", ")
            printer.print_string_literal(reason.data)
        printer.print_string("]>")

    def verify(self) -> None:
        value = self.bn_multiple_of.data
        if value <= 0 or value & (value - 1):
            raise VerifyException(f"bn_multiple_of must be a positive power of two, got {value}")


ROWS = "coda.rows"
"""Module attribute (a `RowsAttr`): the module's row (token) count is a run-time value."""


@irdl_attr_definition
class RowsAttr(ParametrizedAttribute):
    """`#coda.rows<count = 4093, lo = 2049, hi = 4096>` on a `builtin.module`: the row (token)
    count of every function in the module is a run-time value, not the one its types show.

    The module is written, verified and planned at the representative row count `count`: every
    tensor extent that is a positive multiple `c * count` stands for `c * M`, with M the rows of
    the call (an attention's flat log-sum-exp has M * heads entries), and an attention whose
    `seq_len` is `count` (all rows one sequence) takes its sequence length at run time. Every
    other extent is static. Whoever writes such a module picks a `count` that divides no other
    extent (from_hf: a prime that divides no dimension of the model; convert-coda-to-host checks
    the functions' arguments).

    Every decision the pipeline makes from the row count (the IO model's plans: RoPE tables,
    norm statistics, where a backward runs, the mainloop) is recorded for the bucket of row
    counts `[lo, hi]`, which holds `count`; none of them changes what is computed, so a call with
    any M >= 1 is correct, and one inside the bucket runs the plan made for it. The generated
    host functions read M from their arguments (`convert-coda-to-host`)."""

    name = "coda.rows"

    count: IntAttr
    lo: IntAttr
    hi: IntAttr

    def __init__(self, count: int, lo: int, hi: int):
        super().__init__(IntAttr(count), IntAttr(lo), IntAttr(hi))

    def multiple(self, extent: int) -> int | None:
        """`c` where `extent` is `c * count` (a run-time extent of c * M), else None (static)."""
        count = self.count.data
        return extent // count if extent > 0 and extent % count == 0 else None

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        values: dict[str, int] = {}

        def parse_entry() -> None:
            key = parser.parse_identifier()
            if key not in ("count", "lo", "hi") or key in values:
                parser.raise_error(f"expected count, lo, hi once each, got '{key}'")
            parser.parse_punctuation("=")
            values[key] = parser.parse_integer(allow_boolean=False, allow_negative=False)

        parser.parse_comma_separated_list(parser.Delimiter.ANGLE, parse_entry)
        if len(values) != 3:
            parser.raise_error("#coda.rows needs count, lo and hi")
        return (IntAttr(values["count"]), IntAttr(values["lo"]), IntAttr(values["hi"]))

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<count = {self.count.data}, lo = {self.lo.data}, hi = {self.hi.data}>")

    def verify(self) -> None:
        if not 1 <= self.lo.data <= self.count.data <= self.hi.data:
            raise VerifyException(f"#coda.rows: expected 1 <= lo <= count <= hi, got count = {self.count.data}, "
                                  f"lo = {self.lo.data}, hi = {self.hi.data}")


def symbolic_rows(op: Operation) -> RowsAttr | None:
    """The `#coda.rows` of the module holding `op` (or of `op`, a module): None where the
    module's row count is the static one of its types."""
    while op is not None and op.parent_op() is not None:
        op = op.parent_op()
    attr = op.attributes.get(ROWS) if op is not None else None
    return attr if isinstance(attr, RowsAttr) else None


def recorded_bn_multiple_of(kernel: Operation) -> int:
    """The `bn_multiple_of` coda-legalize recorded on a kernel (1 when BN is unconstrained)."""
    attr = kernel.attributes.get(CONSTRAINTS)
    return attr.bn_multiple_of.data if isinstance(attr, TileConstraintsAttr) else 1


def is_gathered(op: Operation) -> bool:
    """Whether coda-legalize marked `op` to read its pairs / segments from memory."""
    return isinstance(op.attributes.get(GATHERED), UnitAttr)


def pair_halves_stride(op: Operation) -> int | None:
    """The pair stride of a `coda.pair_halves` op (None: the op handles whole tiles)."""
    attr = op.attributes.get(PAIR_HALVES)
    return attr.value.data if isinstance(attr, IntegerAttr) else None


def is_row_exchanged(op: Operation) -> bool:
    """Whether coda-legalize marked `op` to exchange its pairs / segments inside a whole-row tile."""
    return isinstance(op.attributes.get(ROW_EXCHANGE), UnitAttr)
