"""The shared building blocks of the `tl` lowering (issue 13): fresh Python names, a builder of
tl / arith / math ops that follows Triton's implicit broadcasting, and the one lowering of coda
scalar bodies (`ScalarLowering`) to ops on Triton values, used by every kernel kind: fold
kernels (`coda_to_tl.lower_fold`) and every epilogue of gemm and elementwise kernels
(`tl_epilogue`, whose `coda.map` / `coda.pair_map` bodies `lower_tile_body` lowers for
`tl_epilogue_maps`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.dialects import arith, math, scf
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    f32,
    i32,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue

from coda_ir.dialects import coda
from coda_ir.dialects import triton_lang as tl
from coda_ir.diagnostics import CompilerError
from coda_ir.dialects.tl_names import KernelNames

# ============================================================================ names


def param_names(names: KernelNames, values: Sequence[SSAValue], default: str) -> list[str]:
    """`{hint}_ptr` per tensor value (its SSA name, else `{default}{i}`), made unique."""
    out = []
    for i, v in enumerate(values):
        hint = v.name_hint if v.name_hint and re.fullmatch(r"[A-Za-z_]\w*", v.name_hint) else f"{default}{i}"
        out.append(names(f"{hint}_ptr"))
    return out


# ============================================================================ building


def is_float(elt: Attribute) -> bool:
    return isinstance(elt, (Float32Type, BFloat16Type, Float16Type, Float64Type))


class Builder:
    """Appends ops to a block; `splat` / `binary` make operand ranks agree as Triton's implicit
    broadcasting does."""

    def __init__(self, block: Block):
        self.block = block

    def add(self, op: Operation, hint: str | None = None) -> Operation:
        self.block.add_op(op)
        if hint is not None and len(op.results) == 1:
            op.results[0].name_hint = hint
        return op

    def value(self, op: Operation, hint: str | None = None) -> SSAValue:
        return self.add(op, hint).results[0]

    def const(self, value: float | int | bool, ty: Attribute) -> SSAValue:
        if isinstance(ty, IntegerType):
            attr = IntegerAttr(int(value), ty)
        else:
            attr = FloatAttr(float(value), ty)
        return self.value(arith.ConstantOp(attr))

    def splat(self, v: SSAValue, rank: int) -> SSAValue:
        if tl.rank_of(v.type) >= rank:
            return v
        assert tl.rank_of(v.type) == 0
        return self.value(tl.SplatOp(v, rank))

    def ranked(self, values: Sequence[SSAValue]) -> list[SSAValue]:
        rank = max(tl.rank_of(v.type) for v in values)
        return [self.splat(v, rank) for v in values]

    def like(self, cls: type[Operation], operands: Sequence[SSAValue], element: Attribute | None = None,
             hint: str | None = None, properties: dict | None = None) -> SSAValue:
        """An elementwise op (arith / math) on operands brought to one rank."""
        ops = self.ranked(operands)
        elt = element if element is not None else tl.element_of(ops[0].type)
        rank = tl.rank_of(ops[0].type)
        op = cls.create(operands=ops, result_types=[tl.dynamic_tensor(elt, rank)], properties=dict(properties or {}))
        return self.value(op, hint)

    def cmpi(self, pred: str, a: SSAValue, b: SSAValue, hint: str | None = None) -> SSAValue:
        a, b = self.ranked([a, b])
        return self.value(tl.CmpIOp(pred, a, b), hint)

    def cmpf(self, pred: str, a: SSAValue, b: SSAValue, hint: str | None = None) -> SSAValue:
        a, b = self.ranked([a, b])
        return self.value(tl.CmpFOp(pred, a, b), hint)

    def fbin(self, cls: type[Operation], a: SSAValue, b: SSAValue, hint: str | None = None) -> SSAValue:
        return self.like(cls, [a, b], None, hint, {"fastmath": arith.FastMathFlagsAttr("none")})

    def ibin(self, cls: type[Operation], a: SSAValue, b: SSAValue, hint: str | None = None) -> SSAValue:
        props = {"overflowFlags": arith.IntegerOverflowAttr("none")} if cls in (arith.AddiOp, arith.SubiOp, arith.MuliOp) else {}
        return self.like(cls, [a, b], None, hint, props)

    def where(self, c: SSAValue, a: SSAValue, b: SSAValue, hint: str | None = None) -> SSAValue:
        c, a, b = self.ranked([c, a, b])
        return self.value(tl.WhereOp(c, a, b), hint)

    def unary(self, cls: type[Operation], a: SSAValue, hint: str | None = None) -> SSAValue:
        return self.value(cls.create(operands=[a], result_types=[a.type], properties={"fastmath": arith.FastMathFlagsAttr("none")}), hint)

    def store_cast(self, v: SSAValue, elt: Attribute) -> SSAValue:
        """Round an fp32 (or i32) value once to the stored element type (bf16: to nearest even,
        the same under the interpreter, whose casts truncate)."""
        if isinstance(elt, Float32Type):
            return v
        if isinstance(elt, BFloat16Type):
            return self.value(tl.CallOp("_coda_round_bf16", [v], [tl.dynamic_tensor(elt, tl.rank_of(v.type))]))
        return self.value(tl.CastOp(v, elt))

    def compute_cast(self, v: SSAValue) -> SSAValue:
        """A loaded value in the kernels' arithmetic type: every float type in fp32 (bf16 / f16
        widened, f64 narrowed), integers and booleans as loaded."""
        elt = tl.element_of(v.type)
        if is_float(elt) and not isinstance(elt, Float32Type):
            return self.value(tl.CastOp(v, f32))
        return v


# ============================================================================ scalar bodies

# math ops Triton has as functions of tensors (the printer's one-to-one table)
_TENSOR_MATH = (
    math.ExpOp, math.Exp2Op, math.LogOp, math.Log2Op, math.SqrtOp, math.RsqrtOp, math.AbsFOp, math.AbsIOp,
    math.SinOp, math.CosOp, math.FloorOp, math.CeilOp, math.ErfOp, math.FmaOp,
)
_MIN_MAX = (arith.MaximumfOp, arith.MinimumfOp, arith.MaxnumfOp, arith.MinnumfOp, arith.MaxSIOp, arith.MinSIOp)
_BINARY = (
    arith.AddfOp, arith.SubfOp, arith.MulfOp, arith.DivfOp, arith.AddiOp, arith.SubiOp, arith.MuliOp, arith.AndIOp,
    arith.OrIOp, arith.XOrIOp, arith.ShLIOp, arith.ShRSIOp, arith.DivSIOp, arith.RemSIOp, *_MIN_MAX,
)
_EXPANDED = (math.Log10Op, math.Log1pOp, math.ExpM1Op, math.TanOp, math.TruncOp, math.SinhOp, math.CoshOp)
# Triton functions (tensors in, tensors out): of constants only, they take 0-d tensors
_FUNCTIONS = (*_TENSOR_MATH, *_MIN_MAX, math.TanhOp, math.PowFOp, *_EXPANDED)
_CASTS = (
    arith.SIToFPOp, arith.UIToFPOp, arith.FPToSIOp, arith.FPToUIOp, arith.ExtFOp, arith.TruncFOp, arith.ExtSIOp,
    arith.ExtUIOp, arith.TruncIOp, arith.IndexCastOp,
)


def _defined_in(value: SSAValue, block: Block) -> bool:
    owner = value.owner
    return owner is block if isinstance(owner, Block) else owner.parent_block() is block


@dataclass
class ScalarLowering:
    """Lower the arith / math ops of a coda scalar body to the same ops on Triton values: the
    one scalar-body lowering of the Triton backend (fold bodies, and `coda.map` /
    `coda.pair_map` bodies of gemm and elementwise epilogues through `lower_tile_body`).

    A value computed from constants only stays a scalar constant expression (Python folds it
    in double precision when the kernel is traced, as it always did); a Triton function of
    constants (math, min / max) takes them as 0-d tensors (`tl.full((), c, dtype)`: Triton's
    functions take tensors). Expansions: log10, log1p, expm1, tan, trunc, sinh, cosh by exp /
    log / sin / cos, tanh and powf by the prelude's `_coda_tanh` / `_coda_pow`, a non-constant
    truncf by the rounding store conversion.

    A body may use scalars of the region around it (a `coda.map` is not isolated from above):
    those are arith / math ops of constants, lowered before the body's first op. `hint` names
    the value of each body op (not constants); `spans`, when given, records the ops each body op
    (None: the values used from outside) lowered to.
    """

    b: Builder
    consts: set[SSAValue]
    hint: str | None = None
    spans: dict[Operation | None, list[Operation]] | None = None

    def full0(self, v: SSAValue) -> SSAValue:
        return self.b.value(tl.FullOp([], v, v.type))

    def _lower_recorded(self, op: Operation | None, lower) -> SSAValue:
        before = self.b.block.last_op
        result = lower()
        if self.hint is not None and result not in self.consts and result.name_hint is None:
            result.name_hint = self.hint
        if self.spans is not None:
            added = []
            cur = before.next_op if before is not None else self.b.block.first_op
            while cur is not None:
                added.append(cur)
                cur = cur.next_op
            self.spans.setdefault(op, []).extend(added)
        return result

    def lower_outside(self, value: SSAValue, env: dict[SSAValue, SSAValue], user: Operation) -> None:
        """Lower a scalar of the enclosing region (and what it is computed from) into `env`."""
        if value in env:
            return
        owner = value.owner
        if not isinstance(owner, Operation) or owner.dialect_name() not in ("arith", "math") or len(owner.results) != 1:
            raise CompilerError(user, "uses a value that has no Triton lowering here")
        for o in owner.operands:
            self.lower_outside(o, env, owner)
        operands = [env[o] for o in owner.operands]
        env[value] = self._lower_recorded(None, lambda: self.lower_op(owner, operands))

    def lower_block(self, block: Block, args: Sequence[SSAValue]) -> list[SSAValue]:
        env: dict[SSAValue, SSAValue] = dict(zip(block.args, args))
        for op in block.ops:
            for o in op.operands:
                if not _defined_in(o, block):
                    self.lower_outside(o, env, op)
        for op in block.ops:
            if isinstance(op, coda.YieldOp):
                return [env[v] for v in op.values]
            try:
                operands = [env[o] for o in op.operands]
            except KeyError:
                raise CompilerError(op, "value used before it is defined") from None
            env[op.results[0]] = self._lower_recorded(op, lambda: self.lower_op(op, operands))  # noqa: B023
        return []

    def lower_op(self, op: Operation, operands: list[SSAValue]) -> SSAValue:
        b = self.b
        const = all(o in self.consts for o in operands)
        if isinstance(op, arith.ConstantOp):
            attr = op.value
            if not isinstance(attr, (FloatAttr, IntegerAttr)):
                raise CompilerError(op, "only scalar float and integer constants can be lowered to Triton")
            v = b.value(arith.ConstantOp(attr))
            self.consts.add(v)
            return v
        if const and operands and isinstance(op, _FUNCTIONS):
            operands = [self.full0(o) for o in operands]
            const = False
        elt = op.results[0].type
        result: SSAValue
        if isinstance(op, _BINARY):
            result = b.like(type(op), operands, None, None, dict(op.properties))
        elif isinstance(op, _TENSOR_MATH):
            result = b.like(type(op), operands, None, None, dict(op.properties))
            const = False
        elif isinstance(op, math.TanhOp):
            result = b.value(tl.CallOp("_coda_tanh", operands, [operands[0].type]))
        elif isinstance(op, math.PowFOp):
            ops = b.ranked(operands)
            result = b.value(tl.CallOp("_coda_pow", ops, [ops[0].type]))
        elif isinstance(op, arith.NegfOp):
            result = b.like(arith.NegfOp, operands, None, None, dict(op.properties))
        elif isinstance(op, _EXPANDED):
            result = self.expand(op, operands[0])
        elif isinstance(op, arith.SelectOp):
            result = b.where(*operands)
            const = False
        elif isinstance(op, arith.CmpfOp):
            result = b.cmpf(arith.CMPF_COMPARISON_OPERATIONS[op.predicate.value.data], *operands)
        elif isinstance(op, arith.CmpiOp):
            result = b.cmpi(arith.CMPI_COMPARISON_OPERATIONS[op.predicate.value.data], *operands)
        elif isinstance(op, arith.TruncFOp) and not const:
            # round to nearest even exactly as a store does (the interpreter's cast truncates)
            result = b.store_cast(operands[0], elt)
        elif isinstance(op, _CASTS):
            if const:
                value = operands[0].owner.value.value.data  # type: ignore[union-attr]
                if isinstance(op, (arith.SIToFPOp, arith.UIToFPOp)):
                    value = float(value)
                elif isinstance(op, (arith.FPToSIOp, arith.FPToUIOp)):
                    value = int(value)
                result = b.const(value, elt)
            else:
                result = b.value(tl.CastOp(operands[0], elt))
        else:
            raise CompilerError(op, f"'{op.name}' has no Triton lowering in coda bodies")
        if const:
            self.consts.add(result)
        return result

    def expand(self, op: Operation, a: SSAValue) -> SSAValue:
        b = self.b
        ty = tl.element_of(a.type)
        if isinstance(op, math.Log10Op):
            return b.fbin(arith.MulfOp, b.unary(math.Log2Op, a), b.const(0.30102999566398120, ty))
        if isinstance(op, math.Log1pOp):
            return b.unary(math.LogOp, b.fbin(arith.AddfOp, b.const(1.0, ty), a))
        if isinstance(op, math.ExpM1Op):
            return b.fbin(arith.SubfOp, b.unary(math.ExpOp, a), b.const(1.0, ty))
        if isinstance(op, math.TanOp):
            return b.fbin(arith.DivfOp, b.unary(math.SinOp, a), b.unary(math.CosOp, a))
        if isinstance(op, math.TruncOp):
            return b.where(b.cmpf("olt", a, b.const(0.0, ty)), b.unary(math.CeilOp, a), b.unary(math.FloorOp, a))
        neg = b.value(arith.NegfOp(a))
        combine = arith.SubfOp if isinstance(op, math.SinhOp) else arith.AddfOp
        return b.fbin(arith.MulfOp, b.fbin(combine, b.unary(math.ExpOp, a), b.unary(math.ExpOp, neg)), b.const(0.5, ty))


# ============================================================================ epilogue bodies


@dataclass
class TileBody:
    """A `coda.map` / `coda.pair_map` body on whole tiles (`lower_tile_body`): the block takes
    the body's arguments as rank-`rank` tiles, then the tile's `rank` extents (i32), and yields
    (`scf.yield`) one tile per yielded value, a constant filled to the extents. `spans[op]`: the
    ops that lower body op `op` (`spans[None]`: scalars used from the region around the body);
    `fills[i]`: those that make result i a tile (empty unless it is a constant). The epilogue
    builder copies them into a kernel, a map made in several steps (`EpilogueStep`) the spans of
    each step's body ops and the fills of its results."""

    block: Block
    spans: dict[Operation | None, list[Operation]]
    fills: list[list[Operation]]

    @property
    def results(self) -> Sequence[SSAValue]:
        term = self.block.last_op
        assert isinstance(term, scf.YieldOp)
        return term.operands


def lower_tile_body(body: Block, rank: int) -> TileBody:
    """Lower a scalar body to tl / arith / math ops on rank-`rank` tiles (`ScalarLowering`, the
    same as fold bodies); each body op's value is named `s` in the printed kernel."""
    n = len(body.args)
    block = Block(arg_types=[*(tl.dynamic_tensor(a.type, rank) for a in body.args), *([i32] * rank)])
    b = Builder(block)
    spans: dict[Operation | None, list[Operation]] = {}
    lowering = ScalarLowering(b, set(), hint="s", spans=spans)
    yielded = lowering.lower_block(body, block.args[:n])
    extents = block.args[n:]
    results: list[SSAValue] = []
    fills: list[list[Operation]] = []
    for y in yielded:
        if y in lowering.consts:
            fill = tl.FullOp(extents, y, y.type)
            b.add(fill)
            fills.append([fill])
            y = fill.result
        else:
            fills.append([])
        results.append(y)
    block.add_op(scf.YieldOp(*results))
    return TileBody(block, spans, fills)
