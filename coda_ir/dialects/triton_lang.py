"""The `tl` dialect: Triton kernels at the level of Triton's Python DSL (`triton.language`).

The Triton lowering's kernel IR (issue 13): `convert-coda-to-tl` builds one `tl.kernel` per
coda kernel, making every lowering decision there; `lowering/triton_printer.py` prints it as
Python source and decides nothing. Arithmetic reuses `arith` / `math` on tensors and scalars,
loops and branches reuse `scf.for` / `scf.if`; this dialect adds what Triton has beyond them:
program ids, ranges, pointers, masked loads and stores, reductions, atomics and calls of other
jit functions.

Types: pointers are `!tl.ptr<T>`; tensors are builtin tensors whose dimensions are dynamic
(`tensor<?x?xf32>`): a Triton tile's extent is a constexpr parameter of the kernel (BLOCK, BN),
so only the rank and element type are static. Broadcasting between ranks and between scalars
and tensors is implicit, as in Triton's Python DSL, except where `tl.splat` / `tl.expand_dims`
change a value's rank explicitly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DenseArrayBase,
    FunctionType,
    IntAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    UnitAttr,
    f32,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Dialect, Operation, ParametrizedAttribute, Region, SSAValue, TypeAttribute
from xdsl.parser import AttrParser
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.irdl.operations import AttrSizedOperandSegments
from xdsl.traits import IsolatedFromAbove, IsTerminator, NoMemoryEffect, NoTerminator, SymbolOpInterface
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from coda_ir.dialects.op_syntax import (
    ATTR,
    I64S,
    INT,
    STR,
    SYMBOL,
    UNIT,
    WORD,
    Item,
    Keyword,
    Literal,
    Operand,
    Operands,
    OptOperand,
    Punct,
    SyntaxOp,
    Word,
    parse_function_header,
    print_function_header,
)

# integer arithmetic Triton folds when its operands are constexprs
_CONSTEXPR_ARITH = (arith.AddiOp, arith.SubiOp, arith.MuliOp, arith.DivSIOp, arith.RemSIOp, arith.AndIOp, arith.OrIOp,
                    arith.XOrIOp, arith.MinSIOp, arith.MaxSIOp)

# ============================================================================ types


@irdl_attr_definition
class PointerType(ParametrizedAttribute, TypeAttribute):
    """`!tl.ptr<T>`: a pointer to elements of type T (a kernel's tensor parameter)."""

    name = "tl.ptr"

    pointee: Attribute

    def __init__(self, pointee: Attribute):
        super().__init__(pointee)


@irdl_attr_definition
class LayoutAttr(ParametrizedAttribute):
    """A Gluon distributed layout, stated where Gluon states one (a range's or a conversion's;
    Triton infers every other value's layout from these): `#tl.layout<epilogue>`, the one
    blocked layout of a Gluon epilogue partition (its mainloop op's record fixes it; the printed
    kernel names it EPI_LAYOUT), or `#tl.layout<slice 0>` / `#tl.layout<slice 1>`, its slice along
    dimension 0 (a vector along the columns: column indices) or 1 (along the rows)."""

    name = "tl.layout"

    slice_dim: IntAttr  # -1: the epilogue layout itself

    def __init__(self, slice_dim: int = -1):
        super().__init__(IntAttr(slice_dim))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        parser.parse_punctuation("<")
        if parser.parse_optional_keyword("epilogue") is not None:
            dim = -1
        else:
            parser.parse_keyword("slice")
            dim = parser.parse_integer(allow_boolean=False, allow_negative=False)
        parser.parse_punctuation(">")
        return (IntAttr(dim),)

    def print_parameters(self, printer: Printer) -> None:
        dim = self.slice_dim.data
        printer.print_string("<epilogue>" if dim < 0 else f"<slice {dim}>")

    def verify(self) -> None:
        if self.slice_dim.data not in (-1, 0, 1):
            raise VerifyException("#tl.layout: the epilogue layout or its slice along dimension 0 or 1")


def dynamic_tensor(element: Attribute, rank: int) -> Attribute:
    """The type of a rank-`rank` Triton value of `element`s (rank 0: the scalar itself)."""
    if rank == 0:
        return element
    return TensorType(element, [DYNAMIC_INDEX] * rank)


def rank_of(ty: Attribute) -> int:
    return len(ty.get_shape()) if isinstance(ty, TensorType) else 0


def element_of(ty: Attribute) -> Attribute:
    return ty.get_element_type() if isinstance(ty, TensorType) else ty


def _check_dynamic(ty: Attribute, what: str) -> None:
    if isinstance(ty, TensorType) and any(d != DYNAMIC_INDEX for d in ty.get_shape()):
        raise VerifyException(f"{what}: Triton tensor extents are constexprs, expected dynamic dimensions, got {ty}")


# ============================================================================ kernels


DO_NOT_SPECIALIZE = "tl.do_not_specialize"
"""Kernel attribute (an array of parameter names): integer parameters Triton must not specialize
(`@triton.jit(do_not_specialize=...)`): the run-time row extents of a module with `#coda.rows`,
so that a new token count reuses the compiled kernel whatever its divisibility by 16."""


def unspecialized(kernel: Operation) -> list[str]:
    attr = kernel.attributes.get(DO_NOT_SPECIALIZE)
    return [s.data for s in attr.data] if isinstance(attr, ArrayAttr) else []  # type: ignore[union-attr]


@irdl_op_definition
class KernelOp(IRDLOperation):
    """A `@triton.jit` function. Its block arguments are the parameters, named by `arg_names`;
    the last `constexprs` of them are `tl.constexpr` (integers). A kernel launched on its own
    reads its program id with `tl.program_id`; a member of a launch group takes it as its first
    parameter (`pid`) from the group kernel, which calls it with `tl.call`."""

    name = "tl.kernel"

    sym_name = prop_def(StringAttr)
    function_type = prop_def(FunctionType)
    arg_names = prop_def(ArrayAttr[StringAttr])
    constexprs = prop_def(IntAttr)
    # default values of the last constexpr parameters (typed as the parameters: i1 prints True / False)
    defaults = opt_prop_def(ArrayAttr[IntegerAttr])
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), NoTerminator(), SymbolOpInterface())

    def __init__(self, name: str, params: Sequence[tuple[str, Attribute]], constexprs: int,
                 defaults: Sequence[int | bool] = ()):
        types = [t for _, t in params]
        properties: dict[str, Attribute] = {
            "sym_name": StringAttr(name),
            "function_type": FunctionType.from_lists(types, []),
            "arg_names": ArrayAttr(StringAttr(n) for n, _ in params),
            "constexprs": IntAttr(constexprs),
        }
        if defaults:
            typed = types[len(types) - len(defaults):]
            properties["defaults"] = ArrayAttr(IntegerAttr(int(v), t) for v, t in zip(defaults, typed))
        super().__init__(properties=properties, regions=[Region(Block(arg_types=types))])
        for arg, (pname, _) in zip(self.body.block.args, params):
            arg.name_hint = pname

    def param_names(self) -> list[str]:
        return [s.data for s in self.arg_names.data]

    def default_values(self) -> list[int | bool | None]:
        """Each parameter's default (an i1 one as a bool), None where it has none."""
        args = self.body.block.args
        given = list(self.defaults.data) if self.defaults is not None else []
        out: list[int | bool | None] = [None] * (len(args) - len(given))
        for attr in given:
            value = attr.value.data
            out.append(bool(value) if attr.type == i1 else value)
        return out

    def print(self, printer: Printer) -> None:
        """`tl.kernel @name(%a: T, ..., %BN: i32 constexpr, %X: i1 constexpr = true) { body }`
        (`%x as name: T` when the printed SSA name is not the parameter's name)."""
        args = self.body.block.args
        n = len(args) - self.constexprs.data
        flags = []
        for i, default in enumerate(self.default_values()):
            flag = "" if i < n else "constexpr"
            if default is not None:
                flag += f" = {str(default).lower() if isinstance(default, bool) else default}"
            flags.append(flag)
        print_function_header(printer, self.sym_name, args, self.param_names(), flags)
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False, print_empty_block=False)

    @classmethod
    def parse(cls, parser: Parser) -> KernelOp:
        defaults: list[int | bool | None] = []
        symbol, args, names, constexpr = parse_function_header(parser, "constexpr", defaults)
        count = sum(constexpr)
        if constexpr != [False] * (len(args) - count) + [True] * count:
            parser.raise_error("tl.kernel: the constexpr parameters come last")
        given = [(d, a.type) for d, a in zip(defaults, args) if d is not None]
        if any(isinstance(d, bool) != (t == i1) for d, t in given):
            parser.raise_error("tl.kernel: an i1 parameter's default is true or false, an integer's a number")
        if [d is not None for d in defaults] != [False] * (len(args) - len(given)) + [True] * len(given):
            parser.raise_error("tl.kernel: the parameters with defaults come last")
        attrs = parser.parse_optional_attr_dict_with_keyword()
        region = parser.parse_region(args)
        properties: dict[str, Attribute] = {
            "sym_name": StringAttr(symbol),
            "function_type": FunctionType.from_lists([a.type for a in args], []),
            "arg_names": ArrayAttr(StringAttr(n) for n in names),
            "constexprs": IntAttr(count),
        }
        if given:
            properties["defaults"] = ArrayAttr(IntegerAttr(int(d), t) for d, t in given)  # type: ignore[arg-type]
        op = cls.create(properties=properties, regions=[region])
        if attrs is not None:
            op.attributes |= attrs.data
        return op

    def verify_(self) -> None:
        args = self.body.block.args
        inputs = self.function_type.inputs.data
        if len(args) != len(inputs) or any(a.type != t for a, t in zip(args, inputs)):
            raise VerifyException("tl.kernel: the block arguments must match function_type's inputs")
        if len(self.arg_names.data) != len(args):
            raise VerifyException("tl.kernel: one name per parameter expected")
        names = self.param_names()
        if len(set(names)) != len(names) or not all(n.isidentifier() for n in names):
            raise VerifyException(f"tl.kernel: parameter names must be distinct identifiers, got {names}")
        n = self.constexprs.data
        if n < 0 or n > len(args):
            raise VerifyException("tl.kernel: constexprs out of range")
        for a in args[len(args) - n :]:
            if not isinstance(a.type, IntegerType):
                raise VerifyException("tl.kernel: constexpr parameters are integers")
        if self.defaults is not None:
            given = self.defaults.data
            if len(given) > n:
                raise VerifyException("tl.kernel: only constexpr parameters have defaults")
            for attr, a in zip(given, args[len(args) - len(given) :]):
                if attr.type != a.type:
                    raise VerifyException(f"tl.kernel: a default of type {attr.type} for a parameter of type {a.type}")
        if self.function_type.outputs.data:
            raise VerifyException("tl.kernel: a Triton kernel returns nothing")


@irdl_op_definition
class CallOp(SyntaxOp):
    """A call of another jit function: a launch group member, or a prelude helper
    (`_coda_round_bf16`, `_coda_tanh`, `_coda_pow`) that the printed module defines."""

    name = "tl.call"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Word("callee", SYMBOL), Operands("args", "("))

    callee = prop_def(SymbolRefAttr)
    args = var_operand_def()
    res = var_result_def()

    def __init__(self, callee: str, args: Sequence[SSAValue], result_types: Sequence[Attribute] = ()):
        super().__init__(operands=[args], result_types=[result_types], properties={"callee": SymbolRefAttr(callee)})


# ============================================================================ the gemm mainloop

# The fixed GEMM mainloop's parameters (`lowering/mainloop.py`'s template refers to them by
# these names): after the operands A, B and the epilogue's tensors, the problem sizes and
# strides, then the constexprs, the last of them with their defaults (launch_gemm passes them
# where it picks the TMA path).
GEMM_SIZES = ("M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn")
GEMM_CONSTEXPRS: tuple[tuple[str, Attribute, int | bool | None], ...] = (
    ("BM", i32, None), ("BN", i32, None), ("BK", i32, None), ("GROUP_M", i32, None), ("INTERLEAVE", i32, None),
    ("UPCAST", i1, None), ("USE_TMA", i32, 0), ("A_K_CONTIG", i1, True), ("B_K_CONTIG", i1, True),
    ("NUM_SMS", i32, 1), ("FLATTEN", i1, False), ("WARP_SPECIALIZE", i1, False), ("L2_PREFETCH", i1, False),
    ("B_PAIRED", i1, False),
)
# what the template binds when the epilogue runs (the epilogue region's arguments, in order)
GEMM_FRAME = ("acc", "offs_m", "offs_n", "mask_m", "mask_n", "pid_m", "pid_n")
MAINLOOP_KINDS = ("portable", "gluon_ws")
# what the Gluon epilogue partition binds besides GEMM_FRAME: the sub-tile's rows and the tile's
# columns as constexprs (the region's next arguments; then one per carried column partial)
GLUON_FRAME = ("BM", "BN")


def gemm_frame_types() -> list[Attribute]:
    """The types of `GEMM_FRAME`: the fp32 accumulator tile, the tile's rows and columns and
    their masks, the tile's indices."""
    return [dynamic_tensor(f32, 2), dynamic_tensor(i32, 1), dynamic_tensor(i32, 1), dynamic_tensor(i1, 1),
            dynamic_tensor(i1, 1), i32, i32]


@irdl_op_definition
class MainloopOp(SyntaxOp):
    """The fixed GEMM mainloop of a gemm kernel, one templated op: it takes the operands A and B
    and the sizes (and strides, constexprs) its template names, and runs its region, the
    epilogue, on each output tile with the accumulator and the tile's coordinates as the region's
    arguments (`GEMM_FRAME`). The printer fills the template and prints the region at each
    splice point; it decides nothing.

    `portable` (`lowering/mainloop.py`): the pointer-based loop and, chosen at launch, the
    persistent TMA loop, the epilogue spliced into both; `params` are the kernel's parameters
    `GEMM_SIZES` and `GEMM_CONSTEXPRS`; `ieee`: fp32 operands multiplied in IEEE fp32, not tf32.

    `gluon_ws` (`lowering/gluon.py`, the kernel of a gemm with a `#coda.mainloop` record, which
    it carries as `record`): the warp-specialized Gluon kernel; A and B are TMA descriptors,
    `params` are M, N, K (and the accumulated input's descriptor `r_desc` when the record's
    `accumulate_first` >= 0). The region is the epilogue partition's work on one row sub-tile of
    the hand-off buffer: it also takes the constexprs BM (the sub-tile's rows) and BN
    (`GLUON_FRAME`) and, carried from sub-tile to sub-tile in order, one running column partial
    per output in `carried` (initial value by its combine in `combines`: 0 for sum, -inf for
    max), which it yields (`tl.yield`); the template stores them once per tile. The layout of the
    partition's tensors is `#tl.layout<epilogue>`, `column_lanes` lanes of a warp along the
    columns; `transpose_b`: B is read as stored [N, K]."""

    name = "tl.mainloop"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Word("kind", WORD), Operand("a"), Punct(","), Operand("b"),
                                          Operands("params", "(", "params"), Operands("carried", "(", "carry", optional=True),
                                          Keyword("ieee", UNIT), Keyword("transpose_b", UNIT),
                                          Keyword("record", ATTR), Keyword("column_lanes", INT),
                                          Keyword("combines", ATTR))

    kind = prop_def(StringAttr)
    a = operand_def()
    b = operand_def()
    params = var_operand_def()
    carried = var_operand_def()
    ieee = opt_prop_def(UnitAttr)
    transpose_b = opt_prop_def(UnitAttr)
    record = opt_prop_def(Attribute)
    column_lanes = opt_prop_def(IntAttr)
    combines = opt_prop_def(ArrayAttr[StringAttr])
    epilogue = region_def("single_block")
    traits = traits_def(NoTerminator())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, kind: str, a: SSAValue, b: SSAValue, params: Sequence[SSAValue], ieee: bool = False, *,
                 record: Attribute | None = None, column_lanes: int = 0, transpose_b: bool = False,
                 carried: Sequence[tuple[SSAValue, str]] = ()):
        types = gemm_frame_types()
        names = list(GEMM_FRAME)
        properties: dict[str, Attribute] = {"kind": StringAttr(kind)}
        if ieee:
            properties["ieee"] = UnitAttr()
        if kind == "gluon_ws":
            types += [i32, i32, *(dynamic_tensor(f32, 1) for _ in carried)]
            names += [*GLUON_FRAME, *(None for _ in carried)]
            assert record is not None
            properties["record"] = record
            properties["column_lanes"] = IntAttr(column_lanes)
            properties["combines"] = ArrayAttr(StringAttr(c) for _, c in carried)
            if transpose_b:
                properties["transpose_b"] = UnitAttr()
        block = Block(arg_types=types)
        for arg, name in zip(block.args, names):
            arg.name_hint = name
        super().__init__(operands=[a, b, params, [p for p, _ in carried]], properties=properties, regions=[Region(block)])

    def frame(self) -> dict[str, SSAValue]:
        names = [*GEMM_FRAME, *(GLUON_FRAME if self.kind.data == "gluon_ws" else ())]
        return dict(zip(names, self.epilogue.block.args))

    def carried_args(self) -> Sequence[SSAValue]:
        """The region's running column partials (gluon_ws)."""
        return self.epilogue.block.args[len(GEMM_FRAME) + len(GLUON_FRAME):] if self.kind.data == "gluon_ws" else ()

    def template_params(self) -> list[str]:
        """The kernel parameters `params` must be, by name."""
        if self.kind.data == "portable":
            return [*GEMM_SIZES, *(n for n, _, _ in GEMM_CONSTEXPRS)]
        first = self.record.accumulate_first.data if self.record is not None else -1  # type: ignore[attr-defined]
        return ["M", "N", "K", *(["r_desc"] if first >= 0 else [])]

    def verify_(self) -> None:
        kind = self.kind.data
        if kind not in MAINLOOP_KINDS:
            raise VerifyException(f"tl.mainloop: kind must be one of {MAINLOOP_KINDS}")
        kernel = self.parent_op()
        if not isinstance(kernel, KernelOp):
            raise VerifyException("tl.mainloop: the body of a tl.kernel")
        gluon = kind == "gluon_ws"
        for prop in ("record", "column_lanes", "combines", "transpose_b"):
            if not gluon and self.properties.get(prop) is not None:
                raise VerifyException(f"tl.mainloop: {prop} is a gluon_ws property")
        if gluon and (self.record is None or self.column_lanes is None or self.combines is None):
            raise VerifyException("tl.mainloop: a gluon_ws mainloop has its record, column_lanes and combines")
        if gluon and self.ieee is not None:
            raise VerifyException("tl.mainloop: the gluon_ws mainloop multiplies 16-bit operands")
        if gluon and self.record.name != "coda.mainloop":  # type: ignore[union-attr]
            raise VerifyException("tl.mainloop: record is a #coda.mainloop")
        if not gluon and self.carried:
            raise VerifyException("tl.mainloop: only a gluon_ws epilogue carries column partials")
        names = kernel.param_names()
        expected = self.template_params()
        if len(self.params) != len(expected):
            raise VerifyException(f"tl.mainloop: {len(expected)} parameters expected ({', '.join(expected)})")
        args = kernel.body.block.args
        a_name, b_name = ("a_desc", "b_desc") if gluon else ("a_ptr", "b_ptr")
        for value, want in zip([self.a, self.b, *self.params], [a_name, b_name, *expected]):
            if not (isinstance(value.owner, Block) and value.owner is kernel.body.block and names[value.index] == want):
                raise VerifyException(f"tl.mainloop: the template's {want} must be the kernel's parameter {want}")
        for value in self.carried:
            if not (isinstance(value.owner, Block) and value.owner is kernel.body.block
                    and isinstance(value.type, PointerType) and value.type.pointee == f32):
                raise VerifyException("tl.mainloop: a carried column partial is stored through an fp32 pointer parameter")
        if not gluon:
            constexprs = args[len(args) - kernel.constexprs.data :]
            if any(v not in constexprs for v in self.params[len(GEMM_SIZES) :]):
                raise VerifyException("tl.mainloop: the tile parameters are constexprs of the kernel")
            defaults = kernel.default_values()
            for value, (want, ty, default) in zip(self.params[len(GEMM_SIZES) :], GEMM_CONSTEXPRS):
                if value.type != ty or defaults[value.index] != default:
                    raise VerifyException(f"tl.mainloop: {want} is an {ty} constexpr with default {default}")
        types = gemm_frame_types() + ([i32, i32, *(dynamic_tensor(f32, 1) for _ in self.carried)] if gluon else [])
        frame = [*GEMM_FRAME, *(GLUON_FRAME if gluon else ()), *("carried partial" for _ in self.carried)]
        block = self.epilogue.block
        if [a.type for a in block.args] != types:
            raise VerifyException(f"tl.mainloop: the epilogue takes {', '.join(frame)} ({', '.join(map(str, types))})")
        if gluon:
            if len(self.combines.data) != len(self.carried) or any(  # type: ignore[union-attr]
                    c.data not in ("sum", "max") for c in self.combines.data):  # type: ignore[union-attr]
                raise VerifyException("tl.mainloop: one combine (sum or max) per carried column partial")
            term = block.last_op
            if not isinstance(term, YieldOp) or [v.type for v in term.values] != types[len(types) - len(self.carried):]:
                raise VerifyException("tl.mainloop: a gluon_ws epilogue ends in tl.yield of its carried column partials")


@irdl_op_definition
class YieldOp(SyntaxOp):
    """The end of a `tl.constexpr_if` branch (the values it yields are the if's results) or of a
    Gluon mainloop's epilogue (the column partials it carries to the next row sub-tile)."""

    name = "tl.yield"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operands("values"),)

    values = var_operand_def()
    traits = traits_def(IsTerminator())

    def __init__(self, *values: SSAValue):
        super().__init__(operands=[values])

    def verify_(self) -> None:
        if not isinstance(self.parent_op(), (ConstexprIfOp, MainloopOp)):
            raise VerifyException("tl.yield: ends a tl.constexpr_if branch or a tl.mainloop epilogue")


def _is_constexpr(value: SSAValue) -> bool:
    """Whether a scalar is known when Triton traces the kernel: a constant, a constexpr parameter
    of its kernel, or integer arithmetic and comparisons of those."""
    owner = value.owner
    if isinstance(owner, Block):
        parent = owner.parent_op()
        if isinstance(parent, MainloopOp) and parent.kind.data == "gluon_ws":  # BM, BN of the partition
            return value in [parent.frame()[n] for n in GLUON_FRAME]
        if not isinstance(parent, KernelOp) or owner is not parent.body.block:
            return False
        return value.index >= len(owner.args) - parent.constexprs.data  # type: ignore[attr-defined]
    if rank_of(value.type):
        return False
    if isinstance(owner, arith.ConstantOp):
        return True
    if isinstance(owner, (CmpIOp, *_CONSTEXPR_ARITH)):
        return all(_is_constexpr(o) for o in owner.operands)
    return False


@irdl_op_definition
class ConstexprIfOp(SyntaxOp):
    """`if cond:` ... `else:` ... on a condition Triton evaluates when it traces the kernel
    (verified: constants and constexpr parameters only), so only the branch taken is compiled
    and it may rely on the condition (a tile that lies inside one interleave group). Its
    results are the values each branch yields (`tl.yield`), assigned in both branches."""

    name = "tl.constexpr_if"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("cond"),)

    cond = operand_def(i1)
    res = var_result_def()
    then_region = region_def("single_block")
    else_region = region_def()

    def __init__(self, cond: SSAValue, result_types: Sequence[Attribute], then_block: Block, else_block: Block | None):
        super().__init__(operands=[cond], result_types=[result_types],
                         regions=[Region(then_block), Region(else_block) if else_block is not None else Region()])

    def verify_(self) -> None:
        if not _is_constexpr(self.cond):
            raise VerifyException("tl.constexpr_if: the condition must be computed from constants and constexpr "
                                  "parameters only")
        types = [r.type for r in self.res]
        if self.res and not self.else_region.blocks:
            raise VerifyException("tl.constexpr_if: an if with results has an else branch")
        for region in (self.then_region, self.else_region):
            if not region.blocks:
                continue
            term = region.block.last_op
            if not isinstance(term, YieldOp) or [o.type for o in term.operands] != types:
                raise VerifyException("tl.constexpr_if: each branch ends in tl.yield of the results' types")
            if region.block.args:
                raise VerifyException("tl.constexpr_if: the branches take no arguments")


# ============================================================================ values


@irdl_op_definition
class ProgramIdOp(SyntaxOp):
    """`tl.program_id(axis)`."""

    name = "tl.program_id"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Word("axis", INT),)

    axis = prop_def(IntAttr)
    result = result_def(i32)
    traits = traits_def(NoMemoryEffect())

    def __init__(self, axis: int = 0):
        super().__init__(result_types=[i32], properties={"axis": IntAttr(axis)})

    def verify_(self) -> None:
        if self.axis.data not in (0, 1, 2):
            raise VerifyException("tl.program_id: axis must be 0, 1 or 2")


@irdl_op_definition
class ArangeOp(SyntaxOp):
    """`tl.arange(start, end)`: `end` a constexpr (a power of two), `start` a literal; with a
    `layout`, Gluon's `gl.arange(start, end, layout=...)`."""

    name = "tl.arange"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Word("start", INT), Literal("to"), Operand("end"), Keyword("layout", ATTR))

    start = prop_def(IntAttr)
    end = operand_def(i32)
    layout = opt_prop_def(LayoutAttr)
    result = result_def(TensorType)
    traits = traits_def(NoMemoryEffect())

    def __init__(self, end: SSAValue, start: int = 0, layout: LayoutAttr | None = None):
        super().__init__(operands=[end], result_types=[dynamic_tensor(i32, 1)],
                         properties={"start": IntAttr(start), **({"layout": layout} if layout is not None else {})})

    def verify_(self) -> None:
        if self.result.type != dynamic_tensor(i32, 1):
            raise VerifyException("tl.arange: the result is a tensor<?xi32>")
        if self.layout is not None and self.layout.slice_dim.data < 0:
            raise VerifyException("tl.arange: a range's layout is a slice of a 2-D layout")


@irdl_op_definition
class ConvertLayoutOp(SyntaxOp):
    """Gluon's `gl.convert_layout(x, layout)`: the same tensor in `layout`, or (`like`) in the
    layout Triton gave another tensor (`gl.convert_layout(x, y.type.layout)`)."""

    name = "tl.convert_layout"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("value"), OptOperand("like", "like"), Keyword("layout", ATTR))

    value = operand_def(TensorType)
    like = opt_operand_def(TensorType)
    layout = opt_prop_def(LayoutAttr)
    result = result_def(TensorType)
    traits = traits_def(NoMemoryEffect())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, value: SSAValue, layout: LayoutAttr | None = None, like: SSAValue | None = None):
        super().__init__(operands=[value, [like] if like is not None else []], result_types=[value.type],
                         properties={"layout": layout} if layout is not None else {})

    def verify_(self) -> None:
        if (self.layout is None) == (self.like is None):
            raise VerifyException("tl.convert_layout: to a layout or like another tensor, one of them")
        if self.result.type != self.value.type:
            raise VerifyException("tl.convert_layout: the result has the operand's type")
        if self.like is not None and rank_of(self.like.type) != rank_of(self.value.type):
            raise VerifyException("tl.convert_layout: like a tensor of the same rank")
        if self.layout is not None and rank_of(self.value.type) != (2 if self.layout.slice_dim.data < 0 else 1):
            raise VerifyException("tl.convert_layout: the layout's rank is the tensor's")


@irdl_op_definition
class FullOp(SyntaxOp):
    """`tl.full(shape, value, dtype)`: a tensor of one value; `shape` are constexpr extents."""

    name = "tl.full"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operands("shape", "["), Operand("value"))

    shape = var_operand_def(i32)
    value = operand_def()
    result = result_def()
    traits = traits_def(NoMemoryEffect())

    def __init__(self, shape: Sequence[SSAValue], value: SSAValue, element: Attribute):
        super().__init__(operands=[shape, value], result_types=[dynamic_tensor(element, len(shape))])

    def verify_(self) -> None:
        if rank_of(self.result.type) != len(self.shape):
            raise VerifyException("tl.full: the result's rank is the number of extents")
        _check_dynamic(self.result.type, "tl.full")
        if rank_of(self.value.type):
            raise VerifyException("tl.full: the value is a scalar")


@irdl_op_definition
class SplatOp(SyntaxOp):
    """A scalar used as a tensor of the given rank (Triton broadcasts it implicitly)."""

    name = "tl.splat"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("value"),)

    value = operand_def()
    result = result_def(TensorType)
    traits = traits_def(NoMemoryEffect())

    def __init__(self, value: SSAValue, rank: int):
        super().__init__(operands=[value], result_types=[dynamic_tensor(value.type, rank)])

    def verify_(self) -> None:
        if rank_of(self.value.type) != 0 or element_of(self.result.type) != self.value.type:
            raise VerifyException("tl.splat: a scalar to a tensor of its type")
        _check_dynamic(self.result.type, "tl.splat")


@irdl_op_definition
class ExpandDimsOp(SyntaxOp):
    """`x[:, None]` (axis 1 of a rank-1 tensor), `x[None, :]` (axis 0), `x[:, :, None]`, ...: a new
    axis of extent 1 at `axis` (0 <= axis <= rank)."""

    name = "tl.expand_dims"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("value"), Keyword("axis", INT))

    value = operand_def(TensorType)
    axis = prop_def(IntAttr)
    result = result_def(TensorType)
    traits = traits_def(NoMemoryEffect())

    def __init__(self, value: SSAValue, axis: int):
        ty = value.type
        super().__init__(
            operands=[value],
            result_types=[dynamic_tensor(element_of(ty), rank_of(ty) + 1)],
            properties={"axis": IntAttr(axis)},
        )

    def verify_(self) -> None:
        rank = rank_of(self.value.type)
        if rank < 1 or rank_of(self.result.type) != rank + 1:
            raise VerifyException("tl.expand_dims: a tensor to one of rank + 1")
        if not 0 <= self.axis.data <= rank:
            raise VerifyException(f"tl.expand_dims: axis must be in [0, {rank}]")
        if element_of(self.value.type) != element_of(self.result.type):
            raise VerifyException("tl.expand_dims: the element type is kept")


@irdl_op_definition
class AddPtrOp(SyntaxOp):
    """`ptr + offset`: a pointer (scalar or tensor) advanced by integer offsets."""

    name = "tl.addptr"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("ptr"), Punct(","), Operand("offset"))

    ptr = operand_def()
    offset = operand_def()
    result = result_def()
    traits = traits_def(NoMemoryEffect())

    def __init__(self, ptr: SSAValue, offset: SSAValue):
        rank = max(rank_of(ptr.type), rank_of(offset.type))
        super().__init__(operands=[ptr, offset], result_types=[dynamic_tensor(element_of(ptr.type), rank)])

    def verify_(self) -> None:
        if not isinstance(element_of(self.ptr.type), PointerType):
            raise VerifyException("tl.addptr: the base must be a pointer")
        if not isinstance(element_of(self.offset.type), IntegerType):
            raise VerifyException("tl.addptr: the offset must be an integer")
        if element_of(self.result.type) != element_of(self.ptr.type):
            raise VerifyException("tl.addptr: the result has the base's pointer type")
        if rank_of(self.result.type) != max(rank_of(self.ptr.type), rank_of(self.offset.type)):
            raise VerifyException("tl.addptr: the result has the larger rank of base and offset")


@irdl_op_definition
class CastOp(SyntaxOp):
    """`x.to(dtype)` (`bitcast`: `x.to(dtype, bitcast=True)`)."""

    name = "tl.cast"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("value"), Keyword("bitcast", UNIT))

    value = operand_def()
    bitcast = opt_prop_def(UnitAttr)
    result = result_def()
    traits = traits_def(NoMemoryEffect())

    def __init__(self, value: SSAValue, element: Attribute, bitcast: bool = False):
        super().__init__(
            operands=[value],
            result_types=[dynamic_tensor(element, rank_of(value.type))],
            properties={"bitcast": UnitAttr()} if bitcast else {},
        )

    def verify_(self) -> None:
        if rank_of(self.value.type) != rank_of(self.result.type):
            raise VerifyException("tl.cast: the rank is kept")


CMPF_PREDICATES = ("false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult", "ule", "une",
                   "uno", "true")
CMPI_PREDICATES = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge")


class _CmpBase(SyntaxOp):
    """A comparison of tensors (or scalars) of one type, elementwise; an i1 of the same rank.
    (`arith.cmpf` / `arith.cmpi` compare scalars only; the predicates are theirs.)"""

    SYNTAX: ClassVar[tuple[Item, ...]] = (Word("predicate", WORD), Operand("lhs"), Punct(","), Operand("rhs"))

    predicate = prop_def(StringAttr)
    lhs = operand_def()
    rhs = operand_def()
    result = result_def()
    traits = traits_def(NoMemoryEffect())
    PREDICATES: ClassVar[tuple[str, ...]] = ()

    def __init__(self, predicate: str, lhs: SSAValue, rhs: SSAValue):
        super().__init__(
            operands=[lhs, rhs],
            result_types=[dynamic_tensor(i1, rank_of(lhs.type))],
            properties={"predicate": StringAttr(predicate)},
        )

    def verify_(self) -> None:
        if self.predicate.data not in self.PREDICATES:
            raise VerifyException(f"{self.name}: unknown predicate {self.predicate.data!r}")
        if self.lhs.type != self.rhs.type:
            raise VerifyException(f"{self.name}: both operands have one type")
        if self.result.type != dynamic_tensor(i1, rank_of(self.lhs.type)):
            raise VerifyException(f"{self.name}: the result is i1 of the operands' rank")


@irdl_op_definition
class CmpFOp(_CmpBase):
    name = "tl.cmpf"
    PREDICATES: ClassVar[tuple[str, ...]] = CMPF_PREDICATES


@irdl_op_definition
class CmpIOp(_CmpBase):
    name = "tl.cmpi"
    PREDICATES: ClassVar[tuple[str, ...]] = CMPI_PREDICATES


@irdl_op_definition
class WhereOp(SyntaxOp):
    """`tl.where(cond, a, b)` (`arith.select` takes a scalar condition only)."""

    name = "tl.where"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("cond"), Punct(","), Operand("lhs"), Punct(","), Operand("rhs"))

    cond = operand_def()
    lhs = operand_def()
    rhs = operand_def()
    result = result_def()
    traits = traits_def(NoMemoryEffect())

    def __init__(self, cond: SSAValue, lhs: SSAValue, rhs: SSAValue):
        super().__init__(operands=[cond, lhs, rhs], result_types=[lhs.type])

    def verify_(self) -> None:
        if element_of(self.cond.type) != i1:
            raise VerifyException("tl.where: the condition is boolean")
        if not (self.lhs.type == self.rhs.type == self.result.type):
            raise VerifyException("tl.where: both values and the result have one type")
        if rank_of(self.cond.type) != rank_of(self.lhs.type):
            raise VerifyException("tl.where: the condition has the values' rank")


@irdl_op_definition
class CdivOp(SyntaxOp):
    """`tl.cdiv(a, b)`: the number of b-wide tiles covering a (integer scalars)."""

    name = "tl.cdiv"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("lhs"), Punct(","), Operand("rhs"))

    lhs = operand_def(IntegerType)
    rhs = operand_def(IntegerType)
    result = result_def(IntegerType)
    traits = traits_def(NoMemoryEffect())

    def __init__(self, lhs: SSAValue, rhs: SSAValue):
        super().__init__(operands=[lhs, rhs], result_types=[lhs.type])

    def verify_(self) -> None:
        if not (self.lhs.type == self.rhs.type == self.result.type):
            raise VerifyException("tl.cdiv: both operands and the result have one integer type")


class _ShapedOp(SyntaxOp):
    """An op whose result has the extents `shape` (constexpr scalars): its rank is their number."""

    shape = var_operand_def(i32)

    def check_shape(self, result: Attribute) -> None:
        if rank_of(result) != len(self.shape) or not self.shape:
            raise VerifyException(f"{self.name}: the result's rank is the number of extents (at least one)")
        _check_dynamic(result, self.name)


@irdl_op_definition
class BroadcastToOp(_ShapedOp):
    """`tl.broadcast_to(x, shape)`: a scalar or a tensor with extents of 1 (from `tl.expand_dims`)
    repeated to `shape`; the rank is kept or grows from a scalar."""

    name = "tl.broadcast_to"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("value"), Operands("shape", "["))

    value = operand_def()
    result = result_def(TensorType)
    traits = traits_def(NoMemoryEffect())

    def __init__(self, value: SSAValue, shape: Sequence[SSAValue]):
        super().__init__(operands=[value, shape], result_types=[dynamic_tensor(element_of(value.type), len(shape))])

    def verify_(self) -> None:
        self.check_shape(self.result.type)
        if rank_of(self.value.type) not in (0, len(self.shape)):
            raise VerifyException("tl.broadcast_to: a scalar or a tensor of the result's rank")
        if element_of(self.value.type) != element_of(self.result.type):
            raise VerifyException("tl.broadcast_to: the element type is kept")


@irdl_op_definition
class ReshapeOp(_ShapedOp):
    """`tl.reshape(x, shape)`: the same elements in row-major order with the extents `shape`."""

    name = "tl.reshape"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("value"), Operands("shape", "["))

    value = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(NoMemoryEffect())

    def __init__(self, value: SSAValue, shape: Sequence[SSAValue]):
        super().__init__(operands=[value, shape], result_types=[dynamic_tensor(element_of(value.type), len(shape))])

    def verify_(self) -> None:
        self.check_shape(self.result.type)
        if element_of(self.value.type) != element_of(self.result.type):
            raise VerifyException("tl.reshape: the element type is kept")


@irdl_op_definition
class PermuteOp(SyntaxOp):
    """`tl.permute(x, dims)`: result axis i is operand axis dims[i]."""

    name = "tl.permute"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("value"), Keyword("dims", I64S))

    value = operand_def(TensorType)
    dims = prop_def(DenseArrayBase.constr(i64))
    result = result_def(TensorType)
    traits = traits_def(NoMemoryEffect())

    def __init__(self, value: SSAValue, dims: Sequence[int]):
        super().__init__(operands=[value], result_types=[value.type],
                         properties={"dims": DenseArrayBase.from_list(i64, list(dims))})

    def verify_(self) -> None:
        dims = list(self.dims.get_values())
        if sorted(dims) != list(range(rank_of(self.value.type))):
            raise VerifyException(f"tl.permute: dims {dims} is not a permutation of the operand's axes")
        if self.result.type != self.value.type:
            raise VerifyException("tl.permute: the result has the operand's type")


@irdl_op_definition
class SplitOp(SyntaxOp):
    """`a, b = tl.split(x)`: the two halves of x's last axis (of extent 2), rank - 1 each."""

    name = "tl.split"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("value"),)

    value = operand_def(TensorType)
    lhs = result_def(TensorType)
    rhs = result_def(TensorType)
    traits = traits_def(NoMemoryEffect())

    def __init__(self, value: SSAValue):
        ty = dynamic_tensor(element_of(value.type), rank_of(value.type) - 1)
        super().__init__(operands=[value], result_types=[ty, ty])

    def verify_(self) -> None:
        rank = rank_of(self.value.type)
        if rank < 2:
            raise VerifyException("tl.split: splits a tensor of rank >= 2 (its last axis)")
        expected = dynamic_tensor(element_of(self.value.type), rank - 1)
        if self.lhs.type != expected or self.rhs.type != expected:
            raise VerifyException("tl.split: both halves drop the last axis and keep the element type")


@irdl_op_definition
class JoinOp(SyntaxOp):
    """`tl.join(a, b)`: a and b stacked along a new last axis of extent 2 (the inverse of split)."""

    name = "tl.join"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("lhs"), Punct(","), Operand("rhs"))

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(NoMemoryEffect())

    def __init__(self, lhs: SSAValue, rhs: SSAValue):
        ty = lhs.type
        super().__init__(operands=[lhs, rhs], result_types=[dynamic_tensor(element_of(ty), rank_of(ty) + 1)])

    def verify_(self) -> None:
        if self.lhs.type != self.rhs.type:
            raise VerifyException("tl.join: both operands have one type")
        if self.result.type != dynamic_tensor(element_of(self.lhs.type), rank_of(self.lhs.type) + 1):
            raise VerifyException("tl.join: the result has one more axis and the operands' element type")


@irdl_op_definition
class GatherOp(SyntaxOp):
    """`tl.gather(src, index, axis)`: result[..., i, ...] = src[..., index[..., i, ...], ...]
    along `axis`; the result has the index's shape and src's element type."""

    name = "tl.gather"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("src"), Punct(","), Operand("index"), Keyword("axis", INT))

    src = operand_def(TensorType)
    index = operand_def(TensorType)
    axis = prop_def(IntAttr)
    result = result_def(TensorType)
    traits = traits_def(NoMemoryEffect())

    def __init__(self, src: SSAValue, index: SSAValue, axis: int):
        super().__init__(operands=[src, index], properties={"axis": IntAttr(axis)},
                         result_types=[dynamic_tensor(element_of(src.type), rank_of(index.type))])

    def verify_(self) -> None:
        rank = rank_of(self.src.type)
        if rank_of(self.index.type) != rank:
            raise VerifyException("tl.gather: the index has the source's rank")
        if not isinstance(element_of(self.index.type), IntegerType):
            raise VerifyException("tl.gather: the index is an integer tensor")
        if not 0 <= self.axis.data < rank:
            raise VerifyException("tl.gather: axis out of range")
        if self.result.type != dynamic_tensor(element_of(self.src.type), rank):
            raise VerifyException("tl.gather: the result has the index's shape and the source's element type")


REDUCE_KINDS = ("sum", "max", "min")


@irdl_op_definition
class ReduceOp(SyntaxOp):
    """`tl.sum` / `tl.max` / `tl.min` of a tensor over one axis (rank - 1 result)."""

    name = "tl.reduce"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Word("kind", WORD), Operand("value"), Keyword("axis", INT))

    kind = prop_def(StringAttr)
    axis = prop_def(IntAttr)
    value = operand_def(TensorType)
    result = result_def()
    traits = traits_def(NoMemoryEffect())

    def __init__(self, kind: str, value: SSAValue, axis: int):
        ty = value.type
        super().__init__(
            operands=[value],
            result_types=[dynamic_tensor(element_of(ty), rank_of(ty) - 1)],
            properties={"kind": StringAttr(kind), "axis": IntAttr(axis)},
        )

    def verify_(self) -> None:
        if self.kind.data not in REDUCE_KINDS:
            raise VerifyException(f"tl.reduce: kind must be one of {REDUCE_KINDS}")
        rank = rank_of(self.value.type)
        if not 0 <= self.axis.data < rank:
            raise VerifyException("tl.reduce: axis out of range")
        if rank_of(self.result.type) != rank - 1 or element_of(self.result.type) != element_of(self.value.type):
            raise VerifyException("tl.reduce: the result drops the reduced axis and keeps the element type")


# ============================================================================ memory


@irdl_op_definition
class LoadOp(SyntaxOp):
    """`tl.load(ptr, mask=, other=, volatile=)`."""

    name = "tl.load"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("ptr"), OptOperand("mask", "mask"), OptOperand("other", "other"),
                                          Keyword("volatile", UNIT))

    ptr = operand_def()
    mask = opt_operand_def()
    other = opt_operand_def()
    volatile = opt_prop_def(UnitAttr)
    result = result_def()
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, ptr: SSAValue, mask: SSAValue | None = None, other: SSAValue | None = None, volatile: bool = False):
        pty = element_of(ptr.type)
        assert isinstance(pty, PointerType)
        super().__init__(
            operands=[ptr, [mask] if mask is not None else [], [other] if other is not None else []],
            result_types=[dynamic_tensor(pty.pointee, rank_of(ptr.type))],
            properties={"volatile": UnitAttr()} if volatile else {},
        )

    def verify_(self) -> None:
        pty = element_of(self.ptr.type)
        if not isinstance(pty, PointerType):
            raise VerifyException("tl.load: loads through a pointer")
        if element_of(self.result.type) != pty.pointee or rank_of(self.result.type) != rank_of(self.ptr.type):
            raise VerifyException("tl.load: the result has the pointer's shape and pointee type")
        if self.mask is not None and element_of(self.mask.type) != i1:
            raise VerifyException("tl.load: the mask is boolean")
        if self.other is not None and self.mask is None:
            raise VerifyException("tl.load: `other` needs a mask")
        if self.other is not None and rank_of(self.other.type):
            raise VerifyException("tl.load: `other` is a scalar (Triton casts it to the pointee type)")


@irdl_op_definition
class StoreOp(SyntaxOp):
    """`tl.store(ptr, value, mask=)`."""

    name = "tl.store"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("ptr"), Punct(","), Operand("value"), OptOperand("mask", "mask"))

    ptr = operand_def()
    value = operand_def()
    mask = opt_operand_def()

    def __init__(self, ptr: SSAValue, value: SSAValue, mask: SSAValue | None = None):
        super().__init__(operands=[ptr, value, [mask] if mask is not None else []])

    def verify_(self) -> None:
        pty = element_of(self.ptr.type)
        if not isinstance(pty, PointerType):
            raise VerifyException("tl.store: stores through a pointer")
        if element_of(self.value.type) != pty.pointee:
            raise VerifyException(f"tl.store: storing {element_of(self.value.type)} through a pointer to {pty.pointee}")
        if rank_of(self.value.type) > rank_of(self.ptr.type):
            raise VerifyException("tl.store: the value's rank exceeds the pointer's")
        if self.mask is not None and element_of(self.mask.type) != i1:
            raise VerifyException("tl.store: the mask is boolean")


@irdl_op_definition
class AtomicAddOp(SyntaxOp):
    """`tl.atomic_add(ptr, value, sem=, scope=)` on a scalar pointer; returns the old value."""

    name = "tl.atomic_add"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Operand("ptr"), Punct(","), Operand("value"), Keyword("sem", WORD),
                                          Keyword("scope", WORD))

    ptr = operand_def()
    value = operand_def()
    sem = prop_def(StringAttr)
    scope = prop_def(StringAttr)
    result = result_def()

    def __init__(self, ptr: SSAValue, value: SSAValue, sem: str = "acq_rel", scope: str = "gpu"):
        pty = ptr.type
        assert isinstance(pty, PointerType)
        super().__init__(
            operands=[ptr, value], result_types=[pty.pointee], properties={"sem": StringAttr(sem), "scope": StringAttr(scope)}
        )

    def verify_(self) -> None:
        if not isinstance(self.ptr.type, PointerType) or self.value.type != self.ptr.type.pointee:
            raise VerifyException("tl.atomic_add: a scalar of the pointee type through a scalar pointer")
        if self.sem.data not in ("relaxed", "acquire", "release", "acq_rel"):
            raise VerifyException("tl.atomic_add: unknown memory semantics")
        if self.scope.data not in ("gpu", "cta", "sys"):
            raise VerifyException("tl.atomic_add: unknown scope")


@irdl_op_definition
class DebugBarrierOp(SyntaxOp):
    """`tl.debug_barrier()`: all threads of the program reach it before any continues."""

    name = "tl.debug_barrier"
    SYNTAX: ClassVar[tuple[Item, ...]] = ()

    def __init__(self):
        super().__init__()


@irdl_op_definition
class CommentOp(SyntaxOp):
    """A comment line in the printed kernel (why the code below is as it is)."""

    name = "tl.comment"
    SYNTAX: ClassVar[tuple[Item, ...]] = (Word("text", STR),)

    text = prop_def(StringAttr)

    def __init__(self, text: str):
        super().__init__(properties={"text": StringAttr(text)})

    def verify_(self) -> None:
        if "\n" in self.text.data:
            raise VerifyException("tl.comment: one line")


TL = Dialect(
    "tl",
    [
        KernelOp,
        MainloopOp,
        ConstexprIfOp,
        YieldOp,
        CallOp,
        ProgramIdOp,
        ArangeOp,
        ConvertLayoutOp,
        FullOp,
        SplatOp,
        ExpandDimsOp,
        AddPtrOp,
        CastOp,
        CmpFOp,
        CmpIOp,
        WhereOp,
        CdivOp,
        BroadcastToOp,
        ReshapeOp,
        PermuteOp,
        SplitOp,
        JoinOp,
        GatherOp,
        ReduceOp,
        LoadOp,
        StoreOp,
        AtomicAddOp,
        DebugBarrierOp,
        CommentOp,
    ],
    [PointerType, LayoutAttr],
)
