"""Shared helpers of the lowering tests: compile coda text, make inputs, check numerics."""

from __future__ import annotations

import os

import torch
from xdsl.dialects import func

import coda_ir
from coda_ir.dialects import coda

from .coda_ref import dtype_of, fold_partials, run_coda

# CODA_TEST_DEVICE=cuda runs the same checks on the GPU (compiled kernels instead of the interpreter).
DEVICE = os.environ.get("CODA_TEST_DEVICE", "cpu")

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def the_func(cm: coda_ir.CompiledModule, name: str | None = None) -> func.FuncOp:
    fns = [op for op in cm.ir.walk() if isinstance(op, func.FuncOp)]
    if name is None:
        assert len(fns) == 1
        return fns[0]
    return next(f for f in fns if f.sym_name.data == name)


def random_inputs(fn: func.FuncOp, seed: int = 0, int_high: dict[int, tuple[int, int]] | None = None) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, arg in enumerate(fn.body.blocks[0].args):
        ty = arg.type
        dt = dtype_of(ty)
        shape = tuple(ty.get_shape())
        if dt.is_floating_point:
            out.append(torch.randn(shape, generator=g).to(dt))
        else:
            lo, hi = (int_high or {}).get(i, (0, 8))
            out.append(torch.randint(lo, hi, shape, generator=g).to(dt))
    return out


def bar(out: torch.Tensor, ref64: torch.Tensor, ref_t: torch.Tensor) -> tuple[float, float]:
    """(error, allowed) of the numerics bar: max|out - ref64| <= 2 max|ref_T - ref64| + 1e-6 max|ref64|."""
    out, ref64, ref_t = out.double(), ref64.double(), ref_t.double()
    finite = torch.isfinite(ref64)
    assert torch.equal(finite, torch.isfinite(out)), "non-finite values differ"
    assert torch.equal(out[~finite], ref64[~finite]) or not (~finite).any(), "non-finite values differ"
    if not finite.any():
        return 0.0, 0.0
    err = (out - ref64)[finite].abs().max().item()
    allowed = 2 * (ref_t - ref64)[finite].abs().max().item() + 1e-6 * ref64[finite].abs().max().item()
    return err, allowed


def check(text: str, inputs: list[torch.Tensor] | None = None, seed: int = 0, int_high=None, name: str | None = None):
    """Compile `text`, run it in the interpreter and compare every result with the reference."""
    cm = coda_ir.compile(text, pipeline=None)
    fn = the_func(cm, name)
    if inputs is None:
        inputs = random_inputs(fn, seed, int_high)
    outs = getattr(cm, fn.sym_name.data)(*[x.to(DEVICE) for x in inputs])
    if not isinstance(outs, tuple):
        outs = (outs,)
    outs = tuple(o.cpu() for o in outs)
    ref64 = run_coda(fn, inputs, torch.float64)
    ref_t = run_coda(fn, inputs, torch.float32)
    types = list(fn.function_type.outputs.data)
    assert len(outs) == len(types)
    for i, (o, r64, rt, ty) in enumerate(zip(outs, ref64, ref_t, types)):
        if isinstance(ty, coda.PartialsType):
            assert o.dtype == torch.float32 and o.shape[0] == ty.length.data
            o = fold_partials(o, ty.combine.data)
        else:
            assert o.dtype == dtype_of(ty), (o.dtype, ty)
            assert tuple(o.shape) == tuple(ty.get_shape())
        if not o.is_floating_point():
            assert torch.equal(o.long(), r64.long()), f"result #{i} differs"
            continue
        err, allowed = bar(o, r64, rt)
        assert err <= allowed, f"result #{i}: max error {err:.3e} > allowed {allowed:.3e}"
    return cm, inputs, outs
