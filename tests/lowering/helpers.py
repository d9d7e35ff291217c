"""Shared helpers of the lowering tests: compile coda text, make inputs, check numerics.

The oracle is the coda interpreter (`coda_ir.interpreters.run_coda`); the bar is
`coda_ir.testing.check_close` (NN_DIALECT.md "Numerics"), the only copy of it.
"""

from __future__ import annotations

import os

import torch
from xdsl.dialects import func

import coda_ir
from coda_ir.dialects import coda
from coda_ir.interpreters import run_coda
from coda_ir.reference import element_dtype as dtype_of
from coda_ir.testing import check_close

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


def fold_partials(p: torch.Tensor, combine: str) -> torch.Tensor:
    """A kernel's [L, tiles] partials combined over the tiles (what the interpreter returns)."""
    p = p.double()
    if combine == "sum":
        return p.sum(1)
    if combine == "max":
        return p.max(1).values
    return torch.logsumexp(p, 1)


def check(text: str, inputs: list[torch.Tensor] | None = None, seed: int = 0, int_high=None, name: str | None = None,
          options=None):
    """Compile `text` (with the Triton lowering's `options`), run it in the interpreter and
    compare every result with the reference."""
    cm = coda_ir.compile(text, pipeline=None, options=options)
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
        ok, err, allowed = check_close(o, r64, rt)
        assert ok, f"result #{i}: max error {err:.3e} > allowed {allowed:.3e}"
    return cm, inputs, outs


def use_gemm_path(monkeypatch, path: str) -> None:
    """Launch GEMMs on `path` ("auto", "tma", "portable") for the rest of the test: the
    runtime configuration's launch options, restored when the test ends."""
    from coda_ir.runtime import gemm_launch

    use_launch_options(monkeypatch, gemm_launch.LaunchOptions(path=path))


def use_launch_options(monkeypatch, options) -> None:
    """Put `options` in force as the runtime configuration's launch options for the rest of the
    test (`RuntimeConfig.launch`; monkeypatch restores the configuration when the test ends)."""
    import dataclasses

    from coda_ir.runtime import config as runtime_config

    monkeypatch.setattr(runtime_config, "_CURRENT", dataclasses.replace(runtime_config.current(), launch=options))
