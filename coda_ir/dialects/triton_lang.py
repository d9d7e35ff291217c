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

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    FunctionType,
    IntAttr,
    IntegerType,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    UnitAttr,
    i1,
    i32,
)
from xdsl.ir import Attribute, Block, Dialect, ParametrizedAttribute, Region, SSAValue, TypeAttribute
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
from xdsl.traits import IsolatedFromAbove, NoMemoryEffect, NoTerminator, SymbolOpInterface
from xdsl.utils.exceptions import VerifyException

# ============================================================================ types


@irdl_attr_definition
class PointerType(ParametrizedAttribute, TypeAttribute):
    """`!tl.ptr<T>`: a pointer to elements of type T (a kernel's tensor parameter)."""

    name = "tl.ptr"

    pointee: Attribute

    def __init__(self, pointee: Attribute):
        super().__init__(pointee)


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
    body = region_def("single_block")
    traits = traits_def(IsolatedFromAbove(), NoTerminator(), SymbolOpInterface())

    def __init__(self, name: str, params: Sequence[tuple[str, Attribute]], constexprs: int):
        types = [t for _, t in params]
        super().__init__(
            properties={
                "sym_name": StringAttr(name),
                "function_type": FunctionType.from_lists(types, []),
                "arg_names": ArrayAttr(StringAttr(n) for n, _ in params),
                "constexprs": IntAttr(constexprs),
            },
            regions=[Region(Block(arg_types=types))],
        )
        for arg, (pname, _) in zip(self.body.block.args, params):
            arg.name_hint = pname

    def param_names(self) -> list[str]:
        return [s.data for s in self.arg_names.data]

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
        if self.function_type.outputs.data:
            raise VerifyException("tl.kernel: a Triton kernel returns nothing")


@irdl_op_definition
class CallOp(IRDLOperation):
    """A call of another jit function: a launch group member, or a prelude helper
    (`_coda_round_bf16`, `_coda_tanh`, `_coda_pow`) that the printed module defines."""

    name = "tl.call"

    callee = prop_def(SymbolRefAttr)
    args = var_operand_def()
    res = var_result_def()

    def __init__(self, callee: str, args: Sequence[SSAValue], result_types: Sequence[Attribute] = ()):
        super().__init__(operands=[args], result_types=[result_types], properties={"callee": SymbolRefAttr(callee)})


# ============================================================================ values


@irdl_op_definition
class ProgramIdOp(IRDLOperation):
    """`tl.program_id(axis)`."""

    name = "tl.program_id"

    axis = prop_def(IntAttr)
    result = result_def(i32)
    traits = traits_def(NoMemoryEffect())

    def __init__(self, axis: int = 0):
        super().__init__(result_types=[i32], properties={"axis": IntAttr(axis)})

    def verify_(self) -> None:
        if self.axis.data not in (0, 1, 2):
            raise VerifyException("tl.program_id: axis must be 0, 1 or 2")


@irdl_op_definition
class ArangeOp(IRDLOperation):
    """`tl.arange(start, end)`: `end` a constexpr (a power of two), `start` a literal."""

    name = "tl.arange"

    start = prop_def(IntAttr)
    end = operand_def(i32)
    result = result_def(TensorType)
    traits = traits_def(NoMemoryEffect())

    def __init__(self, end: SSAValue, start: int = 0):
        super().__init__(operands=[end], result_types=[dynamic_tensor(i32, 1)], properties={"start": IntAttr(start)})

    def verify_(self) -> None:
        if self.result.type != dynamic_tensor(i32, 1):
            raise VerifyException("tl.arange: the result is a tensor<?xi32>")


@irdl_op_definition
class FullOp(IRDLOperation):
    """`tl.full(shape, value, dtype)`: a tensor of one value; `shape` are constexpr extents."""

    name = "tl.full"

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
class SplatOp(IRDLOperation):
    """A scalar used as a tensor of the given rank (Triton broadcasts it implicitly)."""

    name = "tl.splat"

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
class ExpandDimsOp(IRDLOperation):
    """`x[:, None]` (axis 1) or `x[None, :]` (axis 0) of a rank-1 tensor."""

    name = "tl.expand_dims"

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
        if rank_of(self.value.type) != 1 or rank_of(self.result.type) != 2:
            raise VerifyException("tl.expand_dims: rank 1 -> rank 2")
        if self.axis.data not in (0, 1):
            raise VerifyException("tl.expand_dims: axis 0 or 1")
        if element_of(self.value.type) != element_of(self.result.type):
            raise VerifyException("tl.expand_dims: the element type is kept")


@irdl_op_definition
class AddPtrOp(IRDLOperation):
    """`ptr + offset`: a pointer (scalar or tensor) advanced by integer offsets."""

    name = "tl.addptr"

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
class CastOp(IRDLOperation):
    """`x.to(dtype)` (`bitcast`: `x.to(dtype, bitcast=True)`)."""

    name = "tl.cast"

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


class _CmpBase(IRDLOperation):
    """A comparison of tensors (or scalars) of one type, elementwise; an i1 of the same rank.
    (`arith.cmpf` / `arith.cmpi` compare scalars only; the predicates are theirs.)"""

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
class WhereOp(IRDLOperation):
    """`tl.where(cond, a, b)` (`arith.select` takes a scalar condition only)."""

    name = "tl.where"

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


REDUCE_KINDS = ("sum", "max", "min")


@irdl_op_definition
class ReduceOp(IRDLOperation):
    """`tl.sum` / `tl.max` / `tl.min` of a tensor over one axis (rank - 1 result)."""

    name = "tl.reduce"

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
class LoadOp(IRDLOperation):
    """`tl.load(ptr, mask=, other=, volatile=)`."""

    name = "tl.load"

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


@irdl_op_definition
class StoreOp(IRDLOperation):
    """`tl.store(ptr, value, mask=)`."""

    name = "tl.store"

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
class AtomicAddOp(IRDLOperation):
    """`tl.atomic_add(ptr, value, sem=, scope=)` on a scalar pointer; returns the old value."""

    name = "tl.atomic_add"

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
class DebugBarrierOp(IRDLOperation):
    """`tl.debug_barrier()`: all threads of the program reach it before any continues."""

    name = "tl.debug_barrier"

    def __init__(self):
        super().__init__()


@irdl_op_definition
class CommentOp(IRDLOperation):
    """A comment line in the printed kernel (why the code below is as it is)."""

    name = "tl.comment"

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
        CallOp,
        ProgramIdOp,
        ArangeOp,
        FullOp,
        SplatOp,
        ExpandDimsOp,
        AddPtrOp,
        CastOp,
        CmpFOp,
        CmpIOp,
        WhereOp,
        ReduceOp,
        LoadOp,
        StoreOp,
        AtomicAddOp,
        DebugBarrierOp,
        CommentOp,
    ],
    [PointerType],
)
