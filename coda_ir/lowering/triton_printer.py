"""Print `tl.kernel`s (coda_ir/dialects/triton_lang.py) as `@triton.jit` Python source.

The printer decides nothing about what a kernel computes: every op prints as the one Triton
expression or statement it stands for (arith / math ops on tensors as Python operators and
`tl.*` functions, `scf.for` as a `range` loop whose carried values are reassigned at the end
of the body, `scf.if` as `if` / `elif`). Its only choices are textual: a value gets a name
(its SSA name hint, made unique) unless it is a constant expression or a pure value used once
in the same block, which is written in place. Both print the same Triton program, since
Triton traces the function into SSA form either way; constants stay Python literals, which
Triton folds in double precision, as the lowering intends.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects import arith
from xdsl.dialects import scf
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, IntegerType
from xdsl.ir import Attribute, Block, Operation, SSAValue

from coda_ir.dialects import triton_lang as tl
from coda_ir.dialects.element_types import TRITON_DTYPE_NAMES, element_name
from coda_ir.diagnostics import InternalCompilerBug
from coda_ir.dialects import coda
from coda_ir.lowering.gluon import TEMPLATE_NAMES as GLUON_TEMPLATE_NAMES, emit_gluon_kernel
from coda_ir.lowering.mainloop import TEMPLATE_NAMES, gemm_body
from coda_ir.dialects.tl_names import KernelNames

IND = "    "

BINARY = {
    "arith.addf": "+", "arith.subf": "-", "arith.mulf": "*", "arith.divf": "/", "arith.addi": "+", "arith.subi": "-",
    "arith.muli": "*", "arith.andi": "&", "arith.ori": "|", "arith.xori": "^", "arith.shli": "<<", "arith.shrsi": ">>",
    "arith.divsi": "//",
    "arith.remsi": "%",  # Triton: srem (C semantics), as arith.remsi; the interpreter uses fmod too
    "arith.remf": "%",  # frem = fmod, as arith.remf
}
CALLS = {
    "arith.maximumf": "tl.maximum", "arith.minimumf": "tl.minimum", "arith.maxnumf": "tl.maximum",
    "arith.minnumf": "tl.minimum", "arith.maxsi": "tl.maximum", "arith.minsi": "tl.minimum",
    "math.exp": "tl.exp", "math.exp2": "tl.exp2", "math.log": "tl.log", "math.log2": "tl.log2",
    "math.sqrt": "tl.sqrt_rn",  # IEEE sqrt, as math.sqrt (tl.sqrt may approximate)
    "math.rsqrt": "tl.rsqrt", "math.absf": "tl.abs", "math.absi": "tl.abs", "math.sin": "tl.sin", "math.cos": "tl.cos",
    "math.floor": "tl.floor", "math.ceil": "tl.ceil", "math.erf": "tl.erf", "math.fma": "tl.fma",
}
CMPF = {
    "oeq": "({a} == {b})", "ogt": "({a} > {b})", "oge": "({a} >= {b})", "olt": "({a} < {b})", "ole": "({a} <= {b})",
    "one": "(({a} != {b}) & ({a} == {a}) & ({b} == {b}))",
    "ord": "(({a} == {a}) & ({b} == {b}))",
    "ueq": "(({a} == {b}) | ({a} != {a}) | ({b} != {b}))",
    "ugt": "(({a} > {b}) | ({a} != {a}) | ({b} != {b}))",
    "uge": "(({a} >= {b}) | ({a} != {a}) | ({b} != {b}))",
    "ult": "(({a} < {b}) | ({a} != {a}) | ({b} != {b}))",
    "ule": "(({a} <= {b}) | ({a} != {a}) | ({b} != {b}))",
    "une": "({a} != {b})",
    "uno": "(({a} != {a}) | ({b} != {b}))",
    "false": "(({a} != {a}) & ({a} == {a}))",
    "true": "(({a} == {a}) | ({a} != {a}))",
}
CMPI = {"eq": "==", "ne": "!=", "slt": "<", "sle": "<=", "sgt": ">", "sge": ">=", "ult": "<", "ule": "<=", "ugt": ">", "uge": ">="}
REDUCE = {"sum": "tl.sum", "max": "tl.max", "min": "tl.min"}
_INTEGER_ARITH = ("arith.addi", "arith.subi", "arith.muli", "arith.divsi", "arith.remsi")

# Python's binding strengths (higher binds tighter), for printing a kernel with only the
# parentheses Python needs: an operand is parenthesized when it binds less tightly than its
# operator (on the right of a left-associative operator, or beside a comparison: also when equal)
COMPARE, BIT_OR, BIT_XOR, BIT_AND, SHIFT, SUM, PRODUCT, UNARY, ATOM = range(5, 14)
STRENGTH = {"|": BIT_OR, "^": BIT_XOR, "&": BIT_AND, "<<": SHIFT, ">>": SHIFT, "+": SUM, "-": SUM, "*": PRODUCT,
            "/": PRODUCT, "//": PRODUCT, "%": PRODUCT}
SIMPLE_CMPF = {"oeq": "==", "ogt": ">", "oge": ">=", "olt": "<", "ole": "<=", "une": "!="}


def dtype(elt: Attribute) -> str:
    try:
        return "tl." + TRITON_DTYPE_NAMES[element_name(elt)]
    except TypeError:
        raise InternalCompilerBug(None, f"no Triton dtype for {elt}") from None


def layout(attr: tl.LayoutAttr) -> str:
    """A Gluon epilogue partition's layout: its own (the template's EPI_LAYOUT) or a slice of it."""
    dim = attr.slice_dim.data
    return "EPI_LAYOUT" if dim < 0 else f"gl.SliceLayout({dim}, EPI_LAYOUT)"


def float_literal(value: float) -> str:
    if math.isnan(value):
        return 'float("nan")'
    if math.isinf(value):
        return 'float("inf")' if value > 0 else '(-float("inf"))'
    text = repr(float(value))
    return f"({text})" if text.startswith("-") else text


def _pure(op: Operation) -> bool:
    if op.dialect_name() in ("arith", "math"):
        return True
    if isinstance(op, tl.CallOp):
        return op.callee.root_reference.data.startswith("_coda_") and bool(op.results)
    return isinstance(op, (tl.ProgramIdOp, tl.ArangeOp, tl.ConvertLayoutOp, tl.FullOp, tl.SplatOp, tl.ExpandDimsOp, tl.AddPtrOp, tl.CastOp,
                           tl.ReduceOp, tl.CmpFOp, tl.CmpIOp, tl.WhereOp, tl.CdivOp, tl.BroadcastToOp, tl.ReshapeOp,
                           tl.PermuteOp, tl.JoinOp, tl.GatherOp))


# ops between a load and the statement it is written into that may change what it reads
_WRITES = (tl.StoreOp, tl.AtomicAddOp, tl.DebugBarrierOp, scf.ForOp, scf.IfOp)


def _writes(op: Operation) -> bool:
    return isinstance(op, _WRITES) or (isinstance(op, tl.CallOp) and not op.results)


def _tuple(items: Sequence[str]) -> str:
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


def _ancestor_in(op: Operation, block: Block) -> Operation | None:
    """`op` or the op of `block` that holds it."""
    while op is not None and op.parent_block() is not block:
        op = op.parent_op()  # type: ignore[assignment]
    return op


def _strip(expr: str) -> str:
    """`(a + b)` -> `a + b` (only when the outer parentheses enclose everything)."""
    if not (expr.startswith("(") and expr.endswith(")")):
        return expr
    depth = 0
    for i, ch in enumerate(expr):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i < len(expr) - 1:
            return expr
    return expr[1:-1]


def _is_call(expr: str) -> bool:
    """`f(...)` / `tl.f(...)` / `x.to(...)`: a dotted name and one argument list spanning the rest."""
    head, paren, _ = expr.partition("(")
    if not paren or not expr.endswith(")") or not all(p.isidentifier() for p in head.split(".")):
        return False
    depth = 0
    for i, ch in enumerate(expr[len(head):]):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0:
            return len(head) + i == len(expr) - 1
    return False


def _atomic(expr: str) -> str:
    """`expr` as the operand of `.to()` or a subscript."""
    if expr.isidentifier() or (expr.startswith("(") and _strip(expr) != expr):
        return expr
    if _is_call(expr):
        return expr
    return f"({expr})"


class BlockPrinter:
    """Prints the ops of a block as Triton statements; values named by `names`."""

    def __init__(self, names: KernelNames, constexprs: Sequence[SSAValue] = (), minimal_parentheses: bool = False):
        self.names = names
        self.exprs: dict[SSAValue, str] = {}
        # `minimal_parentheses`: write only the parentheses Python needs (kernels printed whole);
        # else every binary operation is parenthesized (the fragments of the gemm emitter)
        self.minimal = minimal_parentheses
        self.strength: dict[SSAValue, int] = {}  # of each expression written in place
        self._strength = ATOM
        self.inline: set[SSAValue] = set()
        self.consts: set[SSAValue] = set()
        # constexpr parameters and integer arithmetic of them and constants (a tile width
        # BN // 2): written in place at every use, as Triton evaluates them when it traces
        self.constexprs: set[SSAValue] = set(constexprs)
        self.lines: list[str] = []

    # ------------------------------------------------------------------ analysis
    def analyse(self, block: Block) -> None:
        for op in block.ops:
            for region in op.regions:
                for inner in region.blocks:
                    self.analyse(inner)
            if len(op.results) != 1 or not _pure(op):
                continue
            v = op.results[0]
            # Python constant expressions (a tl.full of constants is a tensor: named like any value)
            if isinstance(op, arith.ConstantOp) or (
                not isinstance(op, tl.FullOp) and op.operands and all(o in self.consts for o in op.operands)
            ):
                self.consts.add(v)
                self.inline.add(v)
            elif op.name in _INTEGER_ARITH and all(o in self.consts or o in self.constexprs for o in op.operands):
                self.constexprs.add(v)
                self.inline.add(v)
            elif isinstance(op, tl.SplatOp):
                self.inline.add(v)
            elif not v.name_hint and v.has_one_use() and v.get_user_of_unique_use().parent_block() is block:
                self.inline.add(v)
        # a load used once is written in place when nothing between it and the statement it is
        # written into can change what it reads
        for op in block.ops:
            if not isinstance(op, tl.LoadOp) or op.result.name_hint or not op.result.has_one_use():
                continue
            anchor = self.anchor(op.result)
            if anchor is None:
                continue
            between = op.next_op
            while between is not None and between is not anchor and not _writes(between):
                between = between.next_op
            if between is anchor:
                self.inline.add(op.result)

    def anchor(self, v: SSAValue) -> Operation | None:
        """The statement of v's block that v is written into (following single uses of values
        written in place), or None when it is not in v's block."""
        owner = v.owner
        assert isinstance(owner, Operation)
        block = owner.parent_block()
        while True:
            if not v.has_one_use():
                return None
            user = v.get_user_of_unique_use()
            if user.parent_block() is not block:
                return None
            if len(user.results) == 1 and user.results[0] in self.inline:
                v = user.results[0]
                continue
            return user

    # ------------------------------------------------------------------ values
    def name(self, v: SSAValue, default: str = "v") -> str:
        if v not in self.exprs:
            self.exprs[v] = self.names(v.name_hint or default)
        return self.exprs[v]

    def get(self, v: SSAValue) -> str:
        try:
            return self.exprs[v]
        except KeyError:
            raise InternalCompilerBug(v.owner if isinstance(v.owner, Operation) else None, "tl value printed before its definition") from None

    def binary(self, op: Operation, symbol: str, strength: int) -> str:
        """`a symbol b`, each operand parenthesized only where Python needs it."""
        lhs, rhs = op.operands[0], op.operands[1]
        if not self.minimal:
            return f"({self.get(lhs)} {symbol} {self.get(rhs)})"
        self._strength = strength
        left = strength + 1 if strength == COMPARE else strength  # comparisons do not chain
        return f"{self.operand(lhs, left)} {symbol} {self.operand(rhs, strength + 1)}"

    def atom(self, v: SSAValue) -> str:
        """v's expression as the operand of `.to()` or a subscript."""
        if self.minimal:
            return self.operand(v, ATOM)
        return _atomic(self.get(v))

    def operand(self, v: SSAValue, strength: int) -> str:
        """v's expression where it must bind at least `strength` tightly."""
        text = self.get(v)
        return f"({text})" if self.strength.get(v, ATOM) < strength else text

    def expr(self, op: Operation) -> str:
        self._strength = ATOM
        name = op.name
        if name in BINARY:
            symbol = BINARY[name]
            return self.binary(op, symbol, STRENGTH[symbol])
        if isinstance(op, tl.CmpIOp):
            return self.binary(op, CMPI[op.predicate.data], COMPARE)
        if isinstance(op, tl.CmpFOp) and self.minimal and op.predicate.data in SIMPLE_CMPF:
            return self.binary(op, SIMPLE_CMPF[op.predicate.data], COMPARE)
        if isinstance(op, tl.AddPtrOp):
            return self.binary(op, "+", SUM)
        if isinstance(op, arith.NegfOp) and self.minimal:
            self._strength = UNARY
            return f"-{self.operand(op.operands[0], UNARY)}"
        a = [self.get(o) for o in op.operands]
        if isinstance(op, arith.ConstantOp):
            attr = op.value
            if isinstance(attr, FloatAttr):
                text = float_literal(attr.value.data)
            else:
                assert isinstance(attr, IntegerAttr)
                if isinstance(attr.type, IntegerType) and attr.type.width.data == 1:
                    return "True" if attr.value.data else "False"
                text = str(attr.value.data)
                text = f"({text})" if text.startswith("-") else text
            if self.minimal and text.startswith("(-"):
                self._strength = UNARY  # a negative literal: -x
                return text[1:-1]
            return text
        if name in CALLS:
            return f"{CALLS[name]}({', '.join(a)})"
        if isinstance(op, arith.NegfOp):
            return f"(-{a[0]})"
        if isinstance(op, tl.WhereOp):
            return f"tl.where({a[0]}, {a[1]}, {a[2]})"
        if isinstance(op, tl.CmpFOp):
            return CMPF[op.predicate.data].format(a=a[0], b=a[1])
        if isinstance(op, tl.ProgramIdOp):
            return f"tl.program_id({op.axis.data})"
        if isinstance(op, tl.ArangeOp) and op.layout is not None:
            return f"gl.arange({op.start.data}, {_strip(a[0])}, layout={layout(op.layout)})"
        if isinstance(op, tl.ArangeOp):
            return f"tl.arange({op.start.data}, {a[0]})"
        if isinstance(op, tl.ConvertLayoutOp):
            to = layout(op.layout) if op.layout is not None else f"{self.atom(op.like)}.type.layout"  # type: ignore[arg-type]
            return f"gl.convert_layout({_strip(a[0])}, {to})"
        if isinstance(op, tl.FullOp):
            shape = a[:-1]
            tup = "()" if not shape else f"({shape[0]},)" if len(shape) == 1 else f"({', '.join(shape)})"
            return f"tl.full({tup}, {_strip(a[-1])}, {dtype(tl.element_of(op.result.type))})"
        if isinstance(op, tl.SplatOp):
            self._strength = self.strength.get(op.value, ATOM)  # written as its scalar
            return a[0]
        if isinstance(op, (arith.ExtSIOp, arith.ExtUIOp)) and tl.rank_of(op.operands[0].type) == 0:
            # a scalar widens implicitly in Triton's binary ops (and a parameter that Triton
            # specializes to the constant 1 has no `.to`)
            self._strength = self.strength.get(op.operands[0], ATOM)
            return a[0]
        if isinstance(op, (arith.ExtSIOp, arith.ExtUIOp)):
            return f"{self.atom(op.operands[0])}.to({dtype(tl.element_of(op.results[0].type))})"
        if isinstance(op, tl.ExpandDimsOp):
            rank = tl.rank_of(op.value.type)
            index = [":"] * rank
            index.insert(op.axis.data, "None")
            return f"{self.atom(op.operands[0])}[{', '.join(index)}]"
        if isinstance(op, tl.CdivOp):
            return f"tl.cdiv({_strip(a[0])}, {_strip(a[1])})"
        if isinstance(op, (tl.BroadcastToOp, tl.ReshapeOp)):
            fn = "tl.broadcast_to" if isinstance(op, tl.BroadcastToOp) else "tl.reshape"
            return f"{fn}({_strip(a[0])}, {_tuple(a[1:])})"
        if isinstance(op, tl.PermuteOp):
            return f"tl.permute({_strip(a[0])}, {_tuple([str(d) for d in op.dims.get_values()])})"
        if isinstance(op, tl.JoinOp):
            return f"tl.join({_strip(a[0])}, {_strip(a[1])})"
        if isinstance(op, tl.GatherOp):
            return f"tl.gather({_strip(a[0])}, {_strip(a[1])}, axis={op.axis.data})"
        if isinstance(op, tl.CastOp):
            extra = ", bitcast=True" if op.bitcast is not None else ""
            return f"{self.atom(op.operands[0])}.to({dtype(tl.element_of(op.result.type))}{extra})"
        if isinstance(op, tl.ReduceOp):
            return f"{REDUCE[op.kind.data]}({_strip(a[0])}, axis={op.axis.data})"
        if isinstance(op, tl.LoadOp):
            args = [_strip(a[0])]
            if op.mask is not None:
                args.append(f"mask={_strip(self.get(op.mask))}")
            if op.other is not None:
                args.append(f"other={_strip(self.get(op.other))}")
            if op.volatile is not None:
                args.append("volatile=True")
            return f"tl.load({', '.join(args)})"
        if isinstance(op, tl.AtomicAddOp):
            return f'tl.atomic_add({a[0]}, {_strip(a[1])}, sem="{op.sem.data}", scope="{op.scope.data}")'
        if isinstance(op, tl.CallOp):
            return f"{op.callee.root_reference.data}({', '.join(_strip(x) for x in a)})"
        raise InternalCompilerBug(op, f"'{name}' cannot be printed as Triton")

    # ------------------------------------------------------------------ statements
    def emit(self, indent: str, text: str) -> None:
        self.lines.append(indent + text)

    def block(self, block: Block, indent: str) -> None:
        for op in block.ops:
            self.statement(op, indent)

    def statements_of(self, block: Block) -> list[Operation]:
        return [op for op in block.ops if not (len(op.results) == 1 and op.results[0] in self.inline)
                and not (isinstance(op, (scf.YieldOp, tl.YieldOp)) and not op.operands)]

    def block_yielding(self, block: Block, indent: str) -> Sequence[SSAValue]:
        """Print a region's statements; return what its terminator (scf or tl yield) yields."""
        yielded: Sequence[SSAValue] = ()
        for inner in block.ops:
            if isinstance(inner, (scf.YieldOp, tl.YieldOp)):
                yielded = inner.operands
            else:
                self.statement(inner, indent)
        return yielded

    def statement(self, op: Operation, indent: str) -> None:
        if len(op.results) == 1 and op.results[0] in self.inline:
            self.exprs[op.results[0]] = self.expr(op)
            self.strength[op.results[0]] = self._strength
            return
        if isinstance(op, tl.StoreOp):
            args = [_strip(self.get(op.ptr)), _strip(self.get(op.value))]
            if op.mask is not None:
                args.append(f"mask={_strip(self.get(op.mask))}")
            self.emit(indent, f"tl.store({', '.join(args)})")
        elif isinstance(op, tl.DebugBarrierOp):
            self.emit(indent, "tl.debug_barrier()")
        elif isinstance(op, tl.CommentOp):
            self.emit(indent, f"# {op.text.data}")
        elif isinstance(op, tl.SplitOp):
            first, second = self.name(op.lhs), self.name(op.rhs)
            self.emit(indent, f"{first}, {second} = tl.split({_strip(self.get(op.value))})")
        elif isinstance(op, tl.CallOp) and not op.results:
            self.emit(indent, f"{op.callee.root_reference.data}({', '.join(_strip(self.get(o)) for o in op.operands)})")
        elif isinstance(op, scf.ForOp):
            self.for_loop(op, indent)
        elif isinstance(op, scf.IfOp):
            self.if_chain(op, indent, "if")
        elif isinstance(op, tl.ConstexprIfOp):
            self.constexpr_if(op, indent)
        elif isinstance(op, tl.MainloopOp):
            self.mainloop(op, indent)
        elif isinstance(op, scf.YieldOp) and not op.operands:
            return  # the end of an `if` branch
        elif isinstance(op, scf.YieldOp):
            raise InternalCompilerBug(op, "a yield with values outside a loop")
        elif len(op.results) == 1:
            text = self.expr(op)
            self.emit(indent, f"{self.name(op.results[0])} = {_strip(text)}")
        else:
            raise InternalCompilerBug(op, f"'{op.name}' cannot be printed as a Triton statement")

    def for_loop(self, op: scf.ForOp, indent: str) -> None:
        body = op.body.block
        iv, carried = body.args[0], body.args[1:]
        names = []
        for init, arg, res in zip(op.iter_args, carried, op.results):
            n = self.name(res, arg.name_hint or "c")
            self.exprs[arg] = n
            names.append(n)
            self.emit(indent, f"{n} = {_strip(self.get(init))}")
        self.carry_in_place(body, names)
        self.exprs[iv] = self.names(iv.name_hint or "i")
        bounds = [_strip(self.get(op.lb)), _strip(self.get(op.ub))]
        step = op.step.owner
        if not (isinstance(step, arith.ConstantOp) and isinstance(step.value, IntegerAttr) and step.value.value.data == 1):
            bounds.append(_strip(self.get(op.step)))
        self.emit(indent, f"for {self.exprs[iv]} in range({', '.join(bounds)}):")
        inner = indent + IND
        yielded = self.block_yielding(body, inner)
        pairs = [(n, _strip(self.get(v))) for n, v in zip(names, yielded)]
        pairs = [(n, v) for n, v in pairs if n != v]
        if pairs:
            self.emit(inner, f"{', '.join(n for n, _ in pairs)} = {', '.join(v for _, v in pairs)}")

    def carry_in_place(self, body: Block, names: Sequence[str], carried: Sequence[SSAValue] | None = None) -> None:
        """A value the loop body yields is assigned to its carried variable where it is made (not
        at the end of the body) when every read of the carried value is written before it.
        `carried`: the body's carried arguments (an scf.for's: all but the induction variable)."""
        term = body.last_op
        if not isinstance(term, (scf.YieldOp, tl.YieldOp)):
            return
        order = {o: i for i, o in enumerate(body.ops)}
        claimed: set[SSAValue] = set()
        for arg, v, name in zip(body.args[1:] if carried is None else carried, term.operands, names):
            owner = v.owner
            if not isinstance(owner, Operation) or owner.parent_block() is not body or len(owner.results) != 1 \
                    or v in claimed or v in self.consts or v in self.constexprs:
                continue
            reads = []
            for use in arg.uses:
                # the statement the read is written into (v's own, once v is one)
                at = _ancestor_in(use.operation, body)
                while at is not None and at is not owner and len(at.results) == 1 and at.results[0] in self.inline:
                    r = at.results[0]
                    at = r.get_user_of_unique_use() if r.has_one_use() else None
                    if at is not None and at.parent_block() is not body:
                        at = None
                reads.append(at)
            if all(r is not None and order[r] <= order[owner] for r in reads):
                claimed.add(v)
                self.inline.discard(v)
                self.exprs[v] = name

    def if_chain(self, op: scf.IfOp, indent: str, keyword: str) -> None:
        if op.results:
            raise InternalCompilerBug(op, "scf.if with results has no Triton statement form here")
        self.emit(indent, f"{keyword} {_strip(self.get(op.cond))}:")
        self.block(op.true_region.block, indent + IND)
        if not op.false_region.blocks:
            return
        rest = op.false_region.block
        stmts = self.statements_of(rest)
        if len(stmts) == 1 and isinstance(stmts[0], scf.IfOp):
            for inner in rest.ops:
                if inner is stmts[0]:
                    self.if_chain(inner, indent, "elif")
                elif not isinstance(inner, scf.YieldOp):
                    self.statement(inner, indent)
            return
        if stmts:
            self.emit(indent, "else:")
            self.block(rest, indent + IND)


    def constexpr_if(self, op: tl.ConstexprIfOp, indent: str) -> None:
        """`if cond:` / `else:`, each branch ending in the assignment of its yielded values to the
        results' names."""
        names = [self.name(r, "v") for r in op.res]
        self.emit(indent, f"if {_strip(self.get(op.cond))}:")
        self.branch(op.then_region.block, names, indent + IND)
        if op.else_region.blocks and (op.res or self.statements_of(op.else_region.block)):
            self.emit(indent, "else:")
            self.branch(op.else_region.block, names, indent + IND)

    def branch(self, block: Block, names: Sequence[str], indent: str) -> None:
        start = len(self.lines)
        yielded = self.block_yielding(block, indent)
        for name, value in zip(names, yielded):
            self.emit(indent, f"{name} = {_strip(self.get(value))}")
        if len(self.lines) == start:
            self.emit(indent, "pass")

    def mainloop(self, op: tl.MainloopOp, indent: str) -> None:
        """The portable mainloop template (`lowering/mainloop.py`) with the epilogue region printed
        once and spliced at each of the template's splice points."""
        if indent != IND or op.kind.data != "portable":
            raise InternalCompilerBug(op, "a portable tl.mainloop is the body of its kernel")
        self.check_template(op, ["a_ptr", "b_ptr"])
        block = op.epilogue.block
        for arg, name in zip(block.args, tl.GEMM_FRAME):
            self.exprs[arg] = name
        self.lines += gemm_body(self.region(block), float32_operands=op.ieee is not None)

    def check_template(self, op: tl.MainloopOp, operands: Sequence[str]) -> None:
        """The template names its parameters itself: they must print as those names."""
        for value, name in zip([op.a, op.b, *op.params], [*operands, *op.template_params()]):
            if self.get(value) != name:
                raise InternalCompilerBug(op, f"the template's {name} is printed as {self.get(value)}")

    def region(self, block: Block) -> list[str]:
        """The lines of an epilogue region at one indentation level (a carried value assigned to
        its variable where it is made, or after the last statement)."""
        outer, self.lines = self.lines, []
        yielded: Sequence[SSAValue] = ()
        for inner in block.ops:
            if isinstance(inner, tl.YieldOp):
                yielded = inner.values
            else:
                self.statement(inner, IND)
        carried = [self.exprs[a] for a in block.args[len(block.args) - len(yielded):]] if yielded else []
        pairs = [(n, _strip(self.get(v))) for n, v in zip(carried, yielded)]
        pairs = [(n, v) for n, v in pairs if n != v]
        if pairs:
            self.emit(IND, f"{', '.join(n for n, _ in pairs)} = {', '.join(v for _, v in pairs)}")
        lines, self.lines = self.lines, outer
        return lines

    def gluon(self, kernel: tl.KernelOp, op: tl.MainloopOp) -> list[str]:
        """The Gluon kernel family of a `tl.mainloop gluon_ws` (`lowering/gluon.py`'s template): its
        epilogue partition runs the region printed here."""
        self.check_template(op, ["a_desc", "b_desc"])
        block = op.epilogue.block
        for name, arg in op.frame().items():
            self.exprs[arg] = name
        carried = list(op.carried_args())
        names = [self.name(a, "colp") for a in carried]
        self.carry_in_place(block, names, carried)
        body = self.region(block)
        fixed = {"a_desc", "b_desc", *op.template_params()}
        tensors = [p for p in kernel.param_names() if p not in fixed]
        record = op.record
        assert isinstance(record, coda.MainloopAttr) and op.column_lanes is not None and op.combines is not None
        stores = [(n, self.get(p), c.data) for n, p, c in zip(names, op.carried, op.combines.data)]
        return emit_gluon_kernel(kernel.sym_name.data, record, op.column_lanes.data, op.transpose_b is not None,
                                 tensors, body, stores, tl.unspecialized(kernel))


# names a value of a kernel must not take: the modules and builtins printed kernels refer to
RESERVED = ("tl", "triton", "libdevice", "torch", "os", "float", "range", "int", "min", "max")


class KernelPrinter(BlockPrinter):
    def __init__(self, kernel: tl.KernelOp):
        args = kernel.body.block.args
        reserved = [*RESERVED, *kernel.param_names()]
        constexprs = list(args[len(args) - kernel.constexprs.data :])
        self.gluon_mainloop: tl.MainloopOp | None = None
        for op in kernel.body.block.ops:
            if isinstance(op, tl.MainloopOp) and op.kind.data == "gluon_ws":
                self.gluon_mainloop = op
                reserved += sorted(GLUON_TEMPLATE_NAMES)  # the partitions' locals
                constexprs += [op.frame()[n] for n in tl.GLUON_FRAME]  # the partition's BM, BN
            elif isinstance(op, tl.MainloopOp):
                reserved += sorted(TEMPLATE_NAMES)  # the template's locals
        super().__init__(KernelNames(reserved), constexprs, minimal_parentheses=True)
        self.kernel = kernel

    def print(self) -> list[str]:
        k = self.kernel
        body = k.body.block
        params = k.param_names()
        n_rt = len(params) - k.constexprs.data
        for arg, name in zip(body.args, params):
            self.exprs[arg] = name
        if self.gluon_mainloop is not None:
            if len(body.ops) != 1:
                raise InternalCompilerBug(self.gluon_mainloop, "a gluon_ws tl.mainloop is its kernel's only op")
            self.analyse(body)
            return self.gluon(k, self.gluon_mainloop)
        heads = [*params[:n_rt]]
        for p, default in zip(params[n_rt:], k.default_values()[n_rt:]):
            heads.append(f"{p}: tl.constexpr" + ("" if default is None else f" = {default}"))
        fixed = tl.unspecialized(k)
        self.emit("", f"@triton.jit(do_not_specialize={fixed!r})" if fixed else "@triton.jit")
        self.emit("", f"def {k.sym_name.data}({', '.join(heads)}):")
        self.analyse(body)
        start = len(self.lines)
        self.block(body, IND)
        if len(self.lines) == start:
            self.emit(IND, "pass")
        return self.lines


def print_kernel(kernel: tl.KernelOp) -> list[str]:
    """The `@triton.jit` source lines of one `tl.kernel`."""
    return KernelPrinter(kernel).print()
