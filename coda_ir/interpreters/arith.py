"""`arith` and `math` on torch tensors: the scalar bodies of coda kernels, run elementwise.

xDSL's own `ArithFunctions` / `MathFunctions` interpret one Python scalar at a time (ints wrap
to their bit width, `select` branches on a Python bool); a coda body is a function of one element
that the coda interpreter applies to whole tiles at once, so these implementations take torch
tensors (or 0-d tensors for constants) and keep the same op semantics:

* float values live in the interpreter's compute dtype (float64 for ref64, float32 for ref_T);
  an `f32` constant is the f32 number its attribute holds (`f32_value`), also in float64;
* integers are int64 tensors (i32 values in coda bodies are indices, far from wrapping); `i1`
  values are bool tensors;
* `arith.cmpf` follows MLIR's ordered / unordered predicates (NaN compares false unless
  unordered); `maxnumf` / `minnumf` ignore a NaN operand, `maximumf` / `minimumf` propagate it;
* width casts (`extf`, `extsi`, `trunci`, `index_cast`, ...) are the identity: a body computes
  in fp32 and its results are rounded once when stored, like the kernels; `truncf` to bf16 or
  f16 is such a rounding step inside a body (coda-fuse writes it where a fused consumer reads a
  tile its producer stores rounded), rounded to nearest even like a store.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from xdsl.dialects import arith, math
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, FloatAttr, IntegerAttr, IntegerType
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues, impl, register_impls

from coda_ir.interpreters.common import f32_value

__all__ = ["TorchArithFunctions", "TorchMathFunctions"]

# MLIR's predicate numbering (xdsl.dialects.arith.CMPF_COMPARISON_OPERATIONS / CMPI_...)
_CMPF_BASE: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "eq": torch.eq, "gt": torch.gt, "ge": torch.ge, "lt": torch.lt, "le": torch.le, "ne": torch.ne,
}
_CMPI: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    # unsigned predicates: the values compared in coda bodies are non-negative indices
    "eq": torch.eq, "ne": torch.ne,
    "slt": torch.lt, "sle": torch.le, "sgt": torch.gt, "sge": torch.ge,
    "ult": torch.lt, "ule": torch.le, "ugt": torch.gt, "uge": torch.ge,
}


def _elementwise(fn: Callable[..., torch.Tensor]):
    """An @impl body applying `fn` to all operands (one result)."""

    def run(self, interpreter: Interpreter, op, args: PythonValues) -> PythonValues:
        return (fn(*args),)

    return run


def _identity(self, interpreter: Interpreter, op, args: PythonValues) -> PythonValues:
    return (args[0],)


@register_impls
class TorchArithFunctions(InterpreterFunctions):
    """`arith` ops on torch tensors; `compute` is the dtype of float values."""

    def __init__(self, compute: torch.dtype = torch.float64):
        self.compute = compute

    @impl(arith.ConstantOp)
    def run_constant(self, interpreter: Interpreter, op: arith.ConstantOp, args: PythonValues) -> PythonValues:
        attr = op.value
        if isinstance(attr, FloatAttr):
            v = f32_value(attr.value.data) if isinstance(attr.type, Float32Type) else attr.value.data
            return (torch.tensor(v, dtype=self.compute),)
        if not isinstance(attr, IntegerAttr):
            raise NotImplementedError(f"arith.constant of {attr} in a coda body")
        if isinstance(attr.type, IntegerType) and attr.type.width.data == 1:
            return (torch.tensor(bool(attr.value.data)),)
        return (torch.tensor(attr.value.data, dtype=torch.int64),)

    run_addf = impl(arith.AddfOp)(_elementwise(torch.add))
    run_subf = impl(arith.SubfOp)(_elementwise(torch.sub))
    run_mulf = impl(arith.MulfOp)(_elementwise(torch.mul))
    run_divf = impl(arith.DivfOp)(_elementwise(torch.div))
    run_negf = impl(arith.NegfOp)(_elementwise(torch.neg))
    run_maximumf = impl(arith.MaximumfOp)(_elementwise(torch.maximum))
    run_minimumf = impl(arith.MinimumfOp)(_elementwise(torch.minimum))
    run_maxnumf = impl(arith.MaxnumfOp)(_elementwise(torch.fmax))
    run_minnumf = impl(arith.MinnumfOp)(_elementwise(torch.fmin))
    run_addi = impl(arith.AddiOp)(_elementwise(torch.add))
    run_subi = impl(arith.SubiOp)(_elementwise(torch.sub))
    run_muli = impl(arith.MuliOp)(_elementwise(torch.mul))
    run_maxsi = impl(arith.MaxSIOp)(_elementwise(torch.maximum))
    run_minsi = impl(arith.MinSIOp)(_elementwise(torch.minimum))
    run_andi = impl(arith.AndIOp)(_elementwise(torch.bitwise_and))
    run_ori = impl(arith.OrIOp)(_elementwise(torch.bitwise_or))
    run_xori = impl(arith.XOrIOp)(_elementwise(torch.bitwise_xor))
    run_divsi = impl(arith.DivSIOp)(_elementwise(lambda a, b: torch.div(a, b, rounding_mode="trunc")))
    run_remsi = impl(arith.RemSIOp)(_elementwise(torch.fmod))
    run_divui = impl(arith.DivUIOp)(_elementwise(lambda a, b: torch.div(a, b, rounding_mode="floor")))
    run_floordivsi = impl(arith.FloorDivSIOp)(_elementwise(lambda a, b: torch.div(a, b, rounding_mode="floor")))
    run_remui = impl(arith.RemUIOp)(_elementwise(torch.remainder))
    run_select = impl(arith.SelectOp)(_elementwise(torch.where))
    run_extf = impl(arith.ExtFOp)(_identity)

    @impl(arith.TruncFOp)
    def run_truncf(self, interpreter: Interpreter, op: arith.TruncFOp, args: PythonValues) -> PythonValues:
        target = {BFloat16Type(): torch.bfloat16, Float16Type(): torch.float16}.get(op.result.type)
        value = args[0]
        return (value if target is None else value.to(target).to(value.dtype),)

    run_extsi = impl(arith.ExtSIOp)(_identity)
    run_extui = impl(arith.ExtUIOp)(_identity)
    run_trunci = impl(arith.TruncIOp)(_identity)
    run_index_cast = impl(arith.IndexCastOp)(_identity)

    @impl(arith.SIToFPOp)
    def run_sitofp(self, interpreter: Interpreter, op, args: PythonValues) -> PythonValues:
        return (args[0].to(self.compute),)

    @impl(arith.UIToFPOp)
    def run_uitofp(self, interpreter: Interpreter, op, args: PythonValues) -> PythonValues:
        return (args[0].to(self.compute),)

    @impl(arith.FPToSIOp)
    def run_fptosi(self, interpreter: Interpreter, op, args: PythonValues) -> PythonValues:
        return (torch.trunc(args[0]).to(torch.int64),)

    @impl(arith.FPToUIOp)
    def run_fptoui(self, interpreter: Interpreter, op, args: PythonValues) -> PythonValues:
        return (torch.trunc(args[0]).to(torch.int64),)

    @impl(arith.CmpfOp)
    def run_cmpf(self, interpreter: Interpreter, op: arith.CmpfOp, args: PythonValues) -> PythonValues:
        pred = arith.CMPF_COMPARISON_OPERATIONS[op.predicate.value.data]
        a, b = args
        unordered = torch.isnan(a) | torch.isnan(b)
        if pred in ("false", "true"):
            return (torch.full(torch.broadcast_shapes(a.shape, b.shape), pred == "true"),)
        if pred in ("ord", "uno"):
            return (~unordered if pred == "ord" else unordered,)
        base = _CMPF_BASE[pred[1:]](a, b)
        return ((base & ~unordered) if pred[0] == "o" else (base | unordered),)

    @impl(arith.CmpiOp)
    def run_cmpi(self, interpreter: Interpreter, op: arith.CmpiOp, args: PythonValues) -> PythonValues:
        return (_CMPI[arith.CMPI_COMPARISON_OPERATIONS[op.predicate.value.data]](*args),)


@register_impls
class TorchMathFunctions(InterpreterFunctions):
    """`math` ops on torch tensors."""

    run_exp = impl(math.ExpOp)(_elementwise(torch.exp))
    run_exp2 = impl(math.Exp2Op)(_elementwise(torch.exp2))
    run_expm1 = impl(math.ExpM1Op)(_elementwise(torch.expm1))
    run_log = impl(math.LogOp)(_elementwise(torch.log))
    run_log2 = impl(math.Log2Op)(_elementwise(torch.log2))
    run_log1p = impl(math.Log1pOp)(_elementwise(torch.log1p))
    run_sqrt = impl(math.SqrtOp)(_elementwise(torch.sqrt))
    run_rsqrt = impl(math.RsqrtOp)(_elementwise(torch.rsqrt))
    run_tanh = impl(math.TanhOp)(_elementwise(torch.tanh))
    run_sin = impl(math.SinOp)(_elementwise(torch.sin))
    run_cos = impl(math.CosOp)(_elementwise(torch.cos))
    run_erf = impl(math.ErfOp)(_elementwise(torch.erf))
    run_absf = impl(math.AbsFOp)(_elementwise(torch.abs))
    run_absi = impl(math.AbsIOp)(_elementwise(torch.abs))
    run_floor = impl(math.FloorOp)(_elementwise(torch.floor))
    run_ceil = impl(math.CeilOp)(_elementwise(torch.ceil))
    run_atan = impl(math.AtanOp)(_elementwise(torch.atan))
    run_atan2 = impl(math.Atan2Op)(_elementwise(torch.atan2))
    run_copysign = impl(math.CopySignOp)(_elementwise(torch.copysign))
    run_powf = impl(math.PowFOp)(_elementwise(torch.pow))
    run_fma = impl(math.FmaOp)(_elementwise(lambda a, b, c: a * b + c))
