"""`convert-coda-to-tl`: coda kernels -> `tl.kernel`s (Triton at the level of its Python DSL).

The first half of the Triton lowering (issue 13); `lowering/triton_printer.py` prints the
result and decides nothing. The pass

* names every kernel of every function (`_{function}_k{i}_{kind}`, launch groups
  `_{function}_g{j}_launch_group`, unique in the module) and records the name on the coda op
  as `tl.kernel = @name`: the host lowering launches that symbol;
* builds one `tl.kernel` per `coda.fold`, inserted before its function, with every decision
  made here: the order partials are folded in (lanes of BT tiles, then a fixed tree), the
  two-stage sum of rank-0 results (per-block totals in float64, a ticket, the last program
  adds them in block order), the conversions of loaded and stored elements (bf16 stores
  round to nearest even through `_coda_round_bf16`), and the scalar body as arith / math
  ops on [BLOCK] tensors (`lower_scalar_block`).

* builds the group kernel of each `coda.launch_group`: program id ranges [END_{i-1}, END_i)
  call member i with its program index and its own (suffixed) parameters.

`coda.gemm` and `coda.elementwise` kernels are named here but still emitted by
`lowering/triton.py`'s string emitter (`elementwise_params` names an elementwise member's
parameters as that emitter does, checked when the module is printed); converting them is the
rest of issue 13 item 2. Their scalar bodies and element conversions are already lowered here
(`lower_tile_body`, `load_conversion`, `store_conversion`: `Fragment`s of tl ops the emitter
binds to its values and `triton_printer.FragmentPrinter` prints), so every kernel kind shares one
scalar-body lowering.
"""

from __future__ import annotations

import functools
import keyword
import re
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, math, scf
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    SymbolRefAttr,
    TensorType,
    f32,
    f64,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from coda_ir.dialects import coda
from coda_ir.dialects import triton_lang as tl
from coda_ir.diagnostics import CompilerError

KERNEL_NAME_ATTR = "tl.kernel"
"""The discardable attribute naming a coda kernel's Triton kernel (a symbol reference)."""


# ============================================================================ names


class KernelNames:
    """Fresh Python identifiers: `base`, else `base0`, `base1`, ... (never a keyword or a
    reserved name)."""

    def __init__(self, reserved: Sequence[str] = ()):
        self.used: set[str] = set(reserved)

    def __call__(self, base: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", base) or "v"
        if base[0].isdigit():
            base = "v" + base
        if base not in self.used and not keyword.iskeyword(base):
            self.used.add(base)
            return base
        i = 0
        while f"{base}{i}" in self.used:
            i += 1
        self.used.add(f"{base}{i}")
        return f"{base}{i}"


# Names a kernel's parameters must not take: the locals and constexprs of the mainloop and the
# kernel bodies, and the modules a kernel refers to.
KERNEL_SCOPE = (
    "acc a b a_ptr b_ptr a_ptrs b_ptrs b_cols offs_m offs_n offs_k mask_m mask_n pid pid_m pid_n M N K BM BN BK "
    "GROUP_M INTERLEAVE UPCAST num_pid_m num_pid_n group_size first_m rows_in_group k0 k_mask stride_am stride_ak "
    "stride_bk stride_bn rows64 cols_n mask_mn tl triton torch libdevice it rows mask L ITERS BLOCK t "
    "lanes t0 BT PB WORK TICKET NPROG ticket blocks "
    "USE_TMA A_K_CONTIG B_K_CONTIG NUM_SMS FLATTEN WARP_SPECIALIZE start_pid num_tiles k_tiles tile_id off_m off_n "
    "off_k ki b_row acc_lo acc_hi b_lo b_hi min max range float int"
).split()


def param_names(names: KernelNames, values: Sequence[SSAValue], default: str) -> list[str]:
    """`{hint}_ptr` per tensor value (its SSA name, else `{default}{i}`), made unique."""
    out = []
    for i, v in enumerate(values):
        hint = v.name_hint if v.name_hint and re.fullmatch(r"[A-Za-z_]\w*", v.name_hint) else f"{default}{i}"
        out.append(names(f"{hint}_ptr"))
    return out


def kernel_symbol(op: Operation) -> str:
    """The Triton kernel name `convert-coda-to-tl` recorded on a coda kernel or launch group."""
    ref = op.attributes.get(KERNEL_NAME_ATTR)
    if not isinstance(ref, SymbolRefAttr):
        raise CompilerError(op, "internal: no Triton kernel name recorded (run convert-coda-to-tl first)")
    return ref.root_reference.data


def tl_kernels(module: ModuleOp) -> dict[str, tl.KernelOp]:
    return {op.sym_name.data: op for op in module.ops if isinstance(op, tl.KernelOp)}


# ============================================================================ building


def _is_float(elt: Attribute) -> bool:
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
        if _is_float(elt) and not isinstance(elt, Float32Type):
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
class Fragment:
    """Straight-line tl / arith / math ops on values that `lowering/triton.py`'s emitter of gemm
    and elementwise kernels holds as text (until those kernels are `tl.kernel`s too): the
    block's arguments stand for the emitter's values, its `scf.yield` lists the results. The
    emitter prints it with `triton_printer.FragmentPrinter`, which decides nothing."""

    block: Block

    @property
    def results(self) -> Sequence[SSAValue]:
        term = self.block.last_op
        assert isinstance(term, scf.YieldOp)
        return term.operands


@dataclass
class TileBody(Fragment):
    """A `coda.map` / `coda.pair_map` body on whole tiles (`lower_tile_body`): the block takes
    the body's arguments as rank-`rank` tiles, then the tile's `rank` extents (i32), and yields
    one tile per yielded value, a constant filled to the extents. `spans[op]`: the ops that
    lower body op `op` (`spans[None]`: scalars used from the region around the body);
    `fills[i]`: those that make result i a tile (empty unless it is a constant). An emitter
    that makes a map's results in several steps (`EpilogueStep`) prints the spans of each
    step's body ops and the fills of its results."""

    spans: dict[Operation | None, list[Operation]]
    fills: list[list[Operation]]


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


@functools.cache
def load_conversion(element: Attribute, rank: int) -> Fragment:
    """A loaded [rank] tensor of `element`s in the kernels' arithmetic type (`Builder.compute_cast`)."""
    block = Block(arg_types=[tl.dynamic_tensor(element, rank)])
    block.add_op(scf.YieldOp(Builder(block).compute_cast(block.args[0])))
    return Fragment(block)


@functools.cache
def store_conversion(computed: Attribute, element: Attribute, rank: int) -> Fragment:
    """A computed [rank] tensor (fp32 or i32) as stored in a tensor of `element`s (`Builder.store_cast`)."""
    block = Block(arg_types=[tl.dynamic_tensor(computed, rank)])
    block.add_op(scf.YieldOp(Builder(block).store_cast(block.args[0], element)))
    return Fragment(block)


# ============================================================================ coda.fold


def _elt(value: SSAValue) -> Attribute:
    ty = value.type
    assert isinstance(ty, TensorType)
    return ty.get_element_type()


def lower_fold(op: coda.FoldOp, name: str, member: bool) -> tl.KernelOp:
    """A row-parallel kernel: each program folds the partials of BLOCK rows, reading [BLOCK, BT]
    tiles along the (contiguous) tile axis and combining lanes by a fixed tree, so the result
    never depends on the launch. Rank-0 results (sums over rows) are reduced in two fixed
    stages: every program stores its per-block total (float64), takes a ticket (an integer
    atomic, the only atomic), and the program with the last ticket adds the per-block totals in
    block order and runs the finalize body."""
    names = KernelNames(KERNEL_SCOPE)
    p_names = param_names(names, op.partials, "part")
    in_names = param_names(names, op.inputs, "in")
    out_names = param_names(names, op.outputs, "out")
    t_names = [names(f"T{i}") for i in range(len(op.partials))]
    sums = [i for i, r in enumerate(op.outputs) if not r.type.get_shape()]  # type: ignore[union-attr]
    params: list[tuple[str, Attribute]] = [("pid", i32)] if member else []
    params += [(p, tl.PointerType(f32)) for p in p_names]
    params += [(p, tl.PointerType(_elt(v))) for p, v in zip(in_names, op.inputs)]
    params += [(p, tl.PointerType(_elt(v))) for p, v in zip(out_names, op.outputs)]
    params += [("L", i32), *[(t, i32) for t in t_names]]
    if sums:
        params += [("WORK", tl.PointerType(f64)), ("TICKET", tl.PointerType(i32)), ("NPROG", i32)]
    params += [("BLOCK", i32), ("BT", i32), ("PB", i32)]
    kernel = tl.KernelOp(name, params, 3)
    arg = {n: a for (n, _), a in zip(params, kernel.body.block.args)}
    b = Builder(kernel.body.block)
    pid = arg["pid"] if member else b.value(tl.ProgramIdOp(0), "pid")
    BLOCK, BT = arg["BLOCK"], arg["BT"]
    rows = b.ibin(arith.AddiOp, b.ibin(arith.MuliOp, pid, BLOCK), b.value(tl.ArangeOp(BLOCK)), "rows")
    mask = b.cmpi("slt", rows, arg["L"], "mask")
    rows64 = b.value(tl.CastOp(rows, i64), "rows64")
    lanes = b.value(tl.ArangeOp(BT), "lanes")
    zero_i = b.const(0, i32)
    neg_inf = b.const(float("-inf"), f32)
    zero_f = b.const(0.0, f32)
    mask_rows = b.value(tl.ExpandDimsOp(mask, 1), "mask_rows") if op.partials else mask
    args: list[SSAValue] = []
    for value, p, t in zip(op.partials, p_names, t_names):
        pty = value.type
        assert isinstance(pty, coda.PartialsType)
        combine = pty.combine_kind
        T = arg[t]
        b.add(tl.CommentOp(f"fold partials ({combine.value}) over tiles: lanes of BT tiles, then a fixed tree"))
        # the row's tiles are contiguous: row r's partials start at r * T (64-bit: L * T may
        # exceed 2^31); a scalar i32 parameter widens implicitly (arith.extsi)
        T64 = b.value(arith.ExtSIOp(T, i64))
        base = b.value(tl.AddPtrOp(arg[p], b.ibin(arith.MuliOp, b.value(tl.ExpandDimsOp(rows64, 1)), T64)), f"{p[:-4]}_rows")

        def fold_loop(init: SSAValue, other: SSAValue, step, hint: str) -> SSAValue:
            """for t0 in range(0, T, BT): acc = step(acc, [BLOCK, BT] chunk of tiles t0 + lanes)."""
            body = Block(arg_types=[i32, init.type])
            body.args[0].name_hint = "t0"
            body.args[1].name_hint = hint
            inner = Builder(body)
            cols = inner.value(tl.ExpandDimsOp(inner.ibin(arith.AddiOp, body.args[0], lanes), 0), "tiles")
            m = inner.ibin(arith.AndIOp, mask_rows, inner.cmpi("slt", cols, T))  # noqa: B023
            chunk = inner.value(tl.LoadOp(inner.value(tl.AddPtrOp(base, cols)), m, other), "chunk")  # noqa: B023
            inner.add(scf.YieldOp(step(inner, body.args[1], chunk)))
            loop = b.add(scf.ForOp(zero_i, T, BT, [init], [body]))  # noqa: B023
            loop.results[0].name_hint = hint
            return loop.results[0]

        if combine == coda.Combine.SUM:
            acc = fold_loop(b.value(tl.FullOp([BLOCK, BT], zero_f, f32)), zero_f,
                            lambda k, a, x: k.fbin(arith.AddfOp, a, x), "acc")
            folded = b.value(tl.ReduceOp("sum", acc, 1), "folded")
        else:
            acc = fold_loop(b.value(tl.FullOp([BLOCK, BT], neg_inf, f32)), neg_inf,
                            lambda k, a, x: k.fbin(arith.MaximumfOp, a, x), "acc")
            folded = b.value(tl.ReduceOp("max", acc, 1), "folded")
            if combine == coda.Combine.LSE:
                # log-sum-exp relative to the row maximum (0 where a row has no finite partial)
                ref = b.where(b.cmpf("oeq", folded, neg_inf), zero_f, folded, "fref")
                ref2 = b.value(tl.ExpandDimsOp(ref, 1), "fref_rows")
                fsum = fold_loop(b.value(tl.FullOp([BLOCK, BT], zero_f, f32)), neg_inf,
                                 lambda k, a, x: k.fbin(arith.AddfOp, a, k.unary(math.ExpOp, k.fbin(arith.SubfOp, x, ref2))),  # noqa: B023
                                 "fsum")
                folded = b.fbin(arith.AddfOp, ref, b.unary(math.LogOp, b.value(tl.ReduceOp("sum", fsum, 1))), "folded")
        args.append(folded)
    for value, p in zip(op.inputs, in_names):
        ty = value.type
        assert isinstance(ty, TensorType)
        elt = ty.get_element_type()
        if ty.get_shape():
            v = b.value(tl.LoadOp(b.value(tl.AddPtrOp(arg[p], rows)), mask, b.const(0 if not _is_float(elt) else 0.0, elt)), "v")
        else:
            v = b.value(tl.LoadOp(arg[p]), "v")
        args.append(b.compute_cast(v))
    scalars = ScalarLowering(b, set())
    yielded = scalars.lower_block(op.body.blocks[0], args)
    per_block: list[SSAValue] = []
    for i, (result, y, ptr) in enumerate(zip(op.outputs, yielded, out_names)):
        elt = _elt(result)
        if y in scalars.consts:
            y = b.value(tl.FullOp([BLOCK], y, f32 if _is_float(elt) else i32))
        if i in sums:
            zero = b.const(0.0 if _is_float(tl.element_of(y.type)) else 0, tl.element_of(y.type))
            total = b.value(tl.CastOp(b.where(mask, y, zero), f64))
            per_block.append(b.value(tl.ReduceOp("sum", total, 0), f"block{i}"))
        else:
            b.add(tl.StoreOp(b.value(tl.AddPtrOp(arg[ptr], rows)), b.store_cast(y, elt), mask))
    if not sums:
        return kernel
    S = len(sums)
    b.add(tl.CommentOp("rank-0 results: per-block totals, then the last program adds them in block order"))
    for j, total in enumerate(per_block):
        slot = b.ibin(arith.AddiOp, b.ibin(arith.MuliOp, pid, b.const(S, i32)), b.const(j, i32))
        b.add(tl.StoreOp(b.value(tl.AddPtrOp(arg["WORK"], slot)), total))
    b.add(tl.DebugBarrierOp())
    ticket = b.value(tl.AtomicAddOp(arg["TICKET"], b.const(1, i32)), "ticket")
    last = b.cmpi("eq", ticket, b.ibin(arith.SubiOp, arg["NPROG"], b.const(1, i32)))
    then = Block()
    inner = Builder(then)
    blocks = inner.value(tl.ArangeOp(arg["PB"]), "blocks")
    totals: list[SSAValue] = []
    for j, i in enumerate(sums):
        slot = inner.ibin(arith.AddiOp, inner.ibin(arith.MuliOp, blocks, inner.const(S, i32)), inner.const(j, i32))
        loaded = inner.value(tl.LoadOp(inner.value(tl.AddPtrOp(arg["WORK"], slot)), inner.cmpi("slt", blocks, arg["NPROG"]),
                                       inner.const(0.0, f64), volatile=True))
        acc_ty = f32 if _is_float(_elt(op.outputs[i])) else i32
        totals.append(inner.value(tl.CastOp(inner.value(tl.ReduceOp("sum", loaded, 0)), acc_ty), f"total{i}"))
    if op.finalize.blocks:
        totals = ScalarLowering(inner, set()).lower_block(op.finalize.blocks[0], totals)
    for i, t in zip(sums, totals):
        inner.add(tl.StoreOp(arg[out_names[i]], inner.store_cast(t, _elt(op.outputs[i]))))
    inner.add(scf.YieldOp())
    b.add(scf.IfOp(last, [], [then]))
    return kernel


# ============================================================================ coda.launch_group


def _pointee(value: SSAValue) -> Attribute:
    ty = value.type
    if isinstance(ty, coda.PartialsType):
        return f32
    assert isinstance(ty, TensorType)
    return ty.get_element_type()


def elementwise_params(op: coda.ElementwiseOp) -> tuple[list[tuple[str, Attribute]], int]:
    """The parameters of a `coda.elementwise` kernel (named as `lowering/triton.py`'s
    `emit_elementwise` names them) and how many of them (at the end) are constexprs."""
    names = KernelNames(KERNEL_SCOPE)
    block = op.body.blocks[0]
    ins = param_names(names, block.args, "in")
    outs = param_names(names, op.outputs, "out")
    params = [(p, tl.PointerType(_pointee(v))) for p, v in zip(ins, block.args)]
    params += [(p, tl.PointerType(_pointee(v))) for p, v in zip(outs, op.outputs)]
    return params + [("M", i32), ("N", i32), ("BM", i32), ("BN", i32)], 2


def lower_launch_group(op: coda.LaunchGroupOp, name: str, members: Sequence[tuple[str, list[tuple[str, Attribute]], int]]) -> tl.KernelOp:
    """One kernel for the group: the program ids [0, END0) run member 0's body (a jit function
    taking its program index first), [END0, END1) member 1's, and so on; each member keeps its
    own parameters and constexprs, suffixed with its index. `members`: (kernel name, its
    parameters without the leading pid, how many are constexprs)."""
    runtime: list[tuple[str, Attribute]] = []
    constexprs: list[tuple[str, Attribute]] = []
    calls: list[list[str]] = []
    for i, (_, params, n_const) in enumerate(members):
        mine = [(f"{p}_{i}", t) for p, t in params]
        runtime += mine[: len(mine) - n_const]
        constexprs += mine[len(mine) - n_const :]
        calls.append([p for p, _ in mine])
    ends = [(f"END{i}", i32) for i in range(len(members))]
    all_params = [*runtime, *ends, *constexprs]
    kernel = tl.KernelOp(name, all_params, len(constexprs))
    arg = {n: a for (n, _), a in zip(all_params, kernel.body.block.args)}
    b = Builder(kernel.body.block)
    pid = b.value(tl.ProgramIdOp(0), "pid")

    def branch(i: int, into: Builder) -> None:
        """if pid < END_i: member i (else: the members after it)."""
        then, rest = Block(), Block()
        inner = Builder(then)
        start = pid if i == 0 else inner.ibin(arith.SubiOp, pid, arg[f"END{i - 1}"])
        inner.add(tl.CallOp(members[i][0], [start, *[arg[p] for p in calls[i]]]))
        inner.add(scf.YieldOp())
        cond = into.cmpi("slt", pid, arg[f"END{i}"])
        if i + 1 < len(members):
            branch(i + 1, Builder(rest))
        rest.add_op(scf.YieldOp())
        into.add(scf.IfOp(cond, [], [then], [rest] if i + 1 < len(members) else None))

    branch(0, b)
    return kernel


# ============================================================================ the pass


@dataclass(frozen=True)
class ConvertCodaToTLPass(ModulePass):
    """Name every coda kernel's Triton kernel and build the `tl.kernel`s of `coda.fold`s."""

    name = "convert-coda-to-tl"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        functions = [f for f in op.walk() if isinstance(f, func.FuncOp) and f.body.blocks]
        kernel_names = KernelNames(f.sym_name.data for f in functions)
        for fn in functions:
            built: list[tl.KernelOp] = []
            for i, k in enumerate(coda.kernels(fn)):
                kind = k.name.split(".")[1]
                name = kernel_names(f"_{fn.sym_name.data}_k{i}_{kind}")
                k.attributes[KERNEL_NAME_ATTR] = SymbolRefAttr(name)
                if isinstance(k, coda.FoldOp):
                    built.append(lower_fold(k, name, isinstance(k.parent_op(), coda.LaunchGroupOp)))
            folds = {k.sym_name.data: k for k in built}
            groups = [g for g in fn.walk() if isinstance(g, coda.LaunchGroupOp)]
            for j, g in enumerate(groups):
                name = kernel_names(f"_{fn.sym_name.data}_g{j}_launch_group")
                g.attributes[KERNEL_NAME_ATTR] = SymbolRefAttr(name)
                members = []
                for m in g.members():
                    mname = kernel_symbol(m)
                    if isinstance(m, coda.FoldOp):
                        params = [(n, a.type) for n, a in zip(folds[mname].param_names(), folds[mname].body.block.args)]
                        members.append((mname, params[1:], folds[mname].constexprs.data))
                    elif isinstance(m, coda.ElementwiseOp):
                        members.append((mname, *elementwise_params(m)))
                    else:
                        raise CompilerError(m, f"a {m.name} cannot be a member of a coda.launch_group")
                built.append(lower_launch_group(g, name, members))
            anchor = fn
            while anchor.parent_op() is not op:
                anchor = anchor.parent_op()  # type: ignore[assignment]
            for kernel in built:
                Rewriter.insert_op(kernel, InsertPoint.before(anchor))
