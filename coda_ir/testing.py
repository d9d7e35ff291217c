"""Test helpers: the numerics bar of NN_DIALECT.md and random inputs for a function signature.

The bar. A compiled program is correct when, for every output,

    max|out - ref64| <= 2 * max|ref_T - ref64| + 1e-6 * max|ref64|

where `ref64` is the op-by-op reference in float64 and `ref_T` the op-by-op reference in the
program's element type (`coda_ir.reference.reference_pair`). `check_close` computes exactly this
(in float64); `assert_matches` checks a list of outputs and raises an AssertionError with a
table naming every output, its error, its bound and whether it passed.

Non-finite values: where `ref64` is NaN the output must be NaN too, and where it is +inf or -inf
the output must be that same inf (those positions are then left out of the maxima: a masked
log-sum-exp of nothing is -inf in the kernel and in the reference alike); a NaN or inf in the
output anywhere else fails.

This module is the one home of the bar: the nn tests, the lowering tests (against the coda
interpreter, `coda_ir.interpreters`) and the benchmarks all call `check_close` / `assert_matches`.

Random inputs. `random_inputs(func)` makes one fresh tensor per argument, scaled by the role
the argument plays (found from its uses, then from its name):

| role | values |
|---|---|
| activation (default) | `randn` (std 1) |
| weight of `nn.linear` / `coda.gemm ... transpose_b` (N x K) | `randn / sqrt(K)` |
| `nn.matmul` / `nn.gemm` right operand | `randn / sqrt(K)` |
| norm weight (`rms_norm`, `layer_norm`, `head_rms_norm` w and their `_grad`s; `nn.mul` by a vector) | `1 + 0.1 randn` |
| bias (`layer_norm` b, `nn.add` of a vector; the mean operand of `layer_norm_grad`) | `0.1 randn` |
| positions (`nn.rope` / `nn.rope_grad` pos, i32) | integers in `[0, max_position)` (default 4096) |
| targets (`nn.cross_entropy(_grad)`, i32) | integers in `[0, V)`, about `ignore_fraction` of rows (at least one when M >= 4) set to the op's `ignore_index` |
| rstd operands of `rms_norm_grad` / `layer_norm_grad`, rstd-like f32 vectors named `rstd*` / `r*` | uniform in `[0.5, 2)` |

Public API: `check_close`, `assert_matches`, `check_against_reference`, `random_inputs`,
`argument_roles`, `Mismatch`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import SSAValue

from coda_ir.reference import element_dtype, load_func, program_dtype, reference_pair, run_reference

__all__ = [
    "reference_gradients",
    "random_upstream",
    "check_gradients",
    "check_close",
    "assert_matches",
    "check_against_reference",
    "random_inputs",
    "argument_roles",
    "Mismatch",
    "CheckResult",
]

REL_FLOOR = 1e-6


# ----------------------------------------------------------------------------- the bar


def _as64(t: torch.Tensor) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        t = torch.as_tensor(t)
    return t.detach().to(device="cpu", dtype=torch.float64)


def _max_abs(t: torch.Tensor) -> float:
    return float(t.abs().max()) if t.numel() else 0.0


def loss_slack(ref64: torch.Tensor, element: torch.dtype, rows: int) -> float:
    """NN_DIALECT.md's extra bar for a 0-d result (a loss) of a program in `element`:
    `2 * u * |ref64| / sqrt(rows)` (u: 2^-9 for bf16, 2^-12 for f16, 2^-25 for f32)."""
    u = torch.finfo(element).eps / 4
    r = _as64(ref64)
    # a NaN/inf loss (e.g. a mean over rows all ignored: 0/0) is matched exactly by check_close
    # and gives no slack; max() over it would make the whole bound NaN and fail a right answer
    return 2.0 * u * _max_abs(r[torch.isfinite(r)]) / math.sqrt(max(rows, 1))


def check_close(out: torch.Tensor, ref64: torch.Tensor, ref_T: torch.Tensor, slack: float = 0.0) -> tuple[bool, float, float]:
    """`(ok, error, bound)` with `error = max|out - ref64|` and
    `bound = 2 * max|ref_T - ref64| + 1e-6 * max|ref64| + slack` (`loss_slack` for a loss), all
    computed in float64."""
    o, r, t = _as64(out), _as64(ref64), _as64(ref_T)
    if tuple(o.shape) != tuple(r.shape) or tuple(t.shape) != tuple(r.shape):
        return False, math.inf, math.nan
    ref_nan, ref_inf = torch.isnan(r), torch.isinf(r)
    if bool(ref_nan.any()) or bool(ref_inf.any()):
        if not bool(torch.isnan(o)[ref_nan].all()) or not torch.equal(o[ref_inf], r[ref_inf]):
            return False, math.inf, math.nan
        keep = ~(ref_nan | ref_inf)
        o, r, t = o[keep], r[keep], t[keep]
    t = torch.where(torch.isnan(t), r, t)  # a NaN in ref_T where ref64 is finite: no slack from it
    diff = (o - r).abs()
    error = math.inf if bool((~torch.isfinite(o)).any()) else _max_abs(diff)
    bound = 2.0 * _max_abs(t - r) + REL_FLOOR * _max_abs(r) + slack
    return error <= bound, error, bound


@dataclass
class CheckResult:
    name: str
    shape: tuple[int, ...]
    dtype: str
    ok: bool
    error: float
    bound: float

    @property
    def ratio(self) -> float:
        if self.bound > 0:
            return self.error / self.bound
        return 0.0 if self.error == 0 else math.inf


class Mismatch(AssertionError):
    """Raised by `assert_matches`; `.results` holds one CheckResult per output."""

    def __init__(self, message: str, results: list[CheckResult]):
        super().__init__(message)
        self.results = results


def format_table(results: Sequence[CheckResult]) -> str:
    header = ("output", "shape", "dtype", "max|out-ref64|", "bound", "error/bound", "")
    rows = [header]
    for r in results:
        rows.append(
            (
                r.name,
                "x".join(map(str, r.shape)) or "scalar",
                r.dtype,
                f"{r.error:.3e}",
                f"{r.bound:.3e}",
                f"{r.ratio:.3f}",
                "ok" if r.ok else "FAIL",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


def assert_matches(
    outputs: Sequence[torch.Tensor],
    ref64s: Sequence[torch.Tensor],
    refTs: Sequence[torch.Tensor],
    names: Sequence[str] | None = None,
    *,
    loss: tuple[torch.dtype, int] | None = None,
) -> list[CheckResult]:
    """Check every output against the bar; raise `Mismatch` (an AssertionError) with a table if any
    fails. Returns the per-output results when all pass. `loss = (element type, rows reduced)`
    adds NN_DIALECT.md's slack for 0-d outputs (`loss_slack`)."""
    outputs, ref64s, refTs = list(outputs), list(ref64s), list(refTs)
    if not (len(outputs) == len(ref64s) == len(refTs)):
        raise Mismatch(
            f"{len(outputs)} outputs but {len(ref64s)} float64 and {len(refTs)} low-precision references", []
        )
    names = list(names) if names is not None else [f"#{i}" for i in range(len(outputs))]
    results = []
    for name, out, r64, rt in zip(names, outputs, ref64s, refTs):
        out_t = out if isinstance(out, torch.Tensor) else torch.as_tensor(out)
        slack = loss_slack(r64, *loss) if loss is not None and r64.dim() == 0 else 0.0
        ok, error, bound = check_close(out_t, r64, rt, slack)
        if tuple(out_t.shape) != tuple(r64.shape):
            name = f"{name} (shape {tuple(out_t.shape)} != {tuple(r64.shape)})"
        results.append(CheckResult(name, tuple(r64.shape), str(out_t.dtype).replace("torch.", ""), ok, error, bound))
    if not all(r.ok for r in results):
        failed = ", ".join(r.name for r in results if not r.ok)
        raise Mismatch(
            "outputs outside the bar max|out - ref64| <= 2 * max|ref_T - ref64| + 1e-6 * max|ref64|: "
            f"{failed}\n{format_table(results)}",
            results,
        )
    return results


def check_against_reference(
    module_or_func: ModuleOp | func.FuncOp | str | os.PathLike,
    inputs: Sequence[torch.Tensor],
    outputs: Sequence[torch.Tensor] | torch.Tensor,
    *,
    func_name: str | None = None,
    dtype: torch.dtype | None = None,
    loss: tuple[torch.dtype, int] | None = None,
    loss_rows: int | None = None,
) -> list[CheckResult]:
    """Run `reference_pair` on an nn function and `assert_matches` its results against `outputs`
    (a tensor or a sequence, as a compiled host function returns them); names are `#i`.
    `loss = (element type, rows reduced)`: NN_DIALECT.md's slack for a 0-d result (a loss).
    `loss_rows`: shorthand for `loss = (the program's element type, loss_rows)`.
    """
    fn = load_func(module_or_func, func_name)
    ref64, ref_t = reference_pair(fn, inputs, dtype)
    if isinstance(outputs, torch.Tensor):
        outputs = [outputs]
    names = [f"@{fn.sym_name.data} result #{i}" for i in range(len(ref64))]
    if loss is None and loss_rows is not None:
        loss = (dtype or program_dtype(fn), loss_rows)
    return assert_matches(list(outputs), ref64, ref_t, names, loss=loss)


# ----------------------------------------------------------------------------- random inputs


@dataclass
class Role:
    kind: str  # activation | weight | norm_weight | bias | positions | targets | ids | rstd
    fan_in: int = 1
    vocab: int = 0
    ignore_index: int = -100


def _name(arg: SSAValue) -> str:
    return (arg.name_hint or "").lower()


def argument_roles(fn: func.FuncOp) -> list[Role]:
    """The role of each argument of `fn` (see the module docstring)."""
    args = list(fn.body.blocks[0].args)
    roles: dict[SSAValue, Role] = {}
    for arg in args:
        for use in arg.uses:
            op, idx = use.operation, use.index
            shape = tuple(arg.type.get_shape()) if isinstance(arg.type, TensorType) else ()
            role = None
            if op.name == "nn.linear" and idx == 1:
                role = Role("weight", fan_in=shape[1])
            elif op.name == "nn.matmul" and idx == 1:
                role = Role("weight", fan_in=shape[0])
            elif (op.name == "nn.rms_norm" and idx == 1) or (op.name == "nn.head_rms_norm" and idx >= 1):
                role = Role("norm_weight")
            elif op.name == "nn.layer_norm" and idx in (1, 2):
                role = Role("norm_weight" if idx == 1 else "bias")
            elif op.name in ("nn.add", "nn.mul") and idx == 1 and len(shape) == 1:
                role = Role("bias" if op.name == "nn.add" else "norm_weight")
            elif op.name == "nn.gemm" and idx == 1:
                role = Role("weight", fan_in=shape[1] if op.transpose_b.value.data else shape[0])
            elif (op.name in ("nn.rms_norm_grad", "nn.layer_norm_grad") and idx == 2) or (
                    op.name == "nn.head_rms_norm_grad" and idx >= 2):
                role = Role("norm_weight")
            elif (op.name, idx) in (("nn.rms_norm_grad", 3), ("nn.layer_norm_grad", 4)):
                role = Role("rstd")
            elif op.name == "nn.layer_norm_grad" and idx == 3:
                role = Role("bias")  # a row mean: small, either sign
            elif op.name in ("nn.rope", "nn.rope_grad") and idx == 1:
                role = Role("positions")
            elif op.name in ("nn.cross_entropy", "nn.cross_entropy_fwd", "nn.cross_entropy_grad") and idx == 1:
                logits = op.operands[0].type
                assert isinstance(logits, TensorType)
                role = Role("targets", vocab=logits.get_shape()[1], ignore_index=op.ignore_index.value.data)
            elif op.name == "nn.embedding" and idx == 0:
                role = Role("ids", vocab=op.operands[1].type.get_shape()[0])
            elif op.name == "nn.embedding_grad" and idx == 1:
                role = Role("ids", vocab=op.results[0].type.get_shape()[0])
            elif op.name == "coda.gemm" and idx == 1:
                role = Role("weight", fan_in=shape[1] if "transpose_b" in op.properties else shape[0])
            if role is not None:
                roles.setdefault(arg, role)
    out = []
    for arg in args:
        if arg in roles:
            out.append(roles[arg])
            continue
        name = _name(arg)
        shape = tuple(arg.type.get_shape()) if isinstance(arg.type, TensorType) else ()
        is_int = isinstance(arg.type, TensorType) and not element_dtype(arg).is_floating_point
        if is_int:
            out.append(Role("targets", vocab=1000) if "target" in name or "label" in name else Role("positions"))
        elif len(shape) == 1 and (name.startswith("rstd") or name in ("r", "rs", "rstd")):
            out.append(Role("rstd"))
        elif len(shape) == 1 and (name.startswith("wn") or name.startswith("g") or name.startswith("ln")):
            out.append(Role("norm_weight"))
        elif len(shape) == 1 and name.startswith("b"):
            out.append(Role("bias"))
        elif len(shape) == 2 and name.startswith("w"):
            out.append(Role("weight", fan_in=shape[1]))
        else:
            out.append(Role("activation"))
    return out


def random_inputs(
    module_or_func: ModuleOp | func.FuncOp | str | os.PathLike,
    seed: int = 0,
    *,
    func_name: str | None = None,
    dtype: torch.dtype | None = None,
    ignore_fraction: float = 0.1,
    max_position: int = 4096,
    device: str | torch.device = "cpu",
) -> list[torch.Tensor]:
    """Fresh random inputs for every argument of a function, scaled by role (module docstring).

    Float tensors get `dtype` (default: the element type written in the IR); i32 tensors stay i32.
    Values are drawn in float64 from a generator seeded with `seed`, then rounded.
    """
    fn = load_func(module_or_func, func_name)
    gen = torch.Generator().manual_seed(seed)
    result = []
    for arg, role in zip(fn.body.blocks[0].args, argument_roles(fn)):
        ty = arg.type
        if not isinstance(ty, TensorType):
            raise TypeError(f"argument {arg.name_hint or ''} is not a tensor: {ty}")
        shape = tuple(ty.get_shape())
        ir = element_dtype(arg)
        if not ir.is_floating_point:
            if role.kind == "ids":  # token ids: every one valid, repeats likely
                t = torch.randint(0, max(role.vocab, 1), shape, generator=gen, dtype=torch.int64)
            elif role.kind == "targets":
                t = torch.randint(0, max(role.vocab, 1), shape, generator=gen, dtype=torch.int64)
                m = t.numel()
                if m and ignore_fraction > 0:
                    n_ignore = max(1 if m >= 4 else 0, int(round(ignore_fraction * m)))
                    rows = torch.randperm(m, generator=gen)[:n_ignore]
                    t.view(-1)[rows] = role.ignore_index
            else:
                t = torch.randint(0, max_position, shape, generator=gen, dtype=torch.int64)
            result.append(t.to(ir).to(device))
            continue
        x = torch.randn(shape, generator=gen, dtype=torch.float64)
        if role.kind == "weight":
            x = x / math.sqrt(max(role.fan_in, 1))
        elif role.kind == "norm_weight":
            x = 1.0 + 0.1 * x
        elif role.kind == "bias":
            x = 0.1 * x
        elif role.kind == "rstd":
            x = 0.5 + 1.5 * torch.rand(shape, generator=gen, dtype=torch.float64)
        target = dtype if dtype is not None else ir
        result.append(x.to(target).to(device))
    return result


def program_dtype_of(module_or_func, func_name: str | None = None) -> torch.dtype:
    return program_dtype(load_func(module_or_func, func_name))


# ----------------------------------------------------------------------------- gradients


def random_upstream(
    module_or_func: ModuleOp | func.FuncOp | str | os.PathLike,
    seed: int = 0,
    *,
    func_name: str | None = None,
    device: str | torch.device = "cpu",
) -> list[torch.Tensor]:
    """One random upstream gradient per result of the function (`randn` in the result's type;
    a 0-d f32 loss gets a random scale around 1), for checking `@f_bwd`."""
    fn = load_func(module_or_func, func_name)
    gen = torch.Generator().manual_seed(10_000 + seed)
    out = []
    for ty in fn.function_type.outputs.data:
        assert isinstance(ty, TensorType)
        shape = tuple(ty.get_shape())
        dt = element_dtype(ty)
        if not shape:
            t = 0.5 + torch.rand((), generator=gen, dtype=torch.float64)
        else:
            t = torch.randn(shape, generator=gen, dtype=torch.float64)
        out.append(t.to(dt).to(device))
    return out


def reference_gradients(
    module_or_func: ModuleOp | func.FuncOp | str | os.PathLike,
    inputs: Sequence[torch.Tensor],
    upstream: Sequence[torch.Tensor],
    *,
    func_name: str | None = None,
    dtype: torch.dtype | None = None,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """`(grad64, grad_T)`: the gradients of every floating-point argument (in order) of the
    function's results against `upstream`, by PyTorch autograd through the op-by-op reference:
    in float64, and in the program's element type (`dtype`), where every op rounds its result
    and, through the reference's casts, every gradient flowing into a value once (the
    NN_DIALECT.md bar's `ref_T` for gradients)."""
    fn = load_func(module_or_func, func_name)
    low = dtype if dtype is not None else program_dtype(fn)
    grads: list[list[torch.Tensor]] = []
    for compute, cast in ((torch.float64, torch.float64), (low, None)):
        leaves = []
        for x in inputs:
            if x.is_floating_point():
                leaf = x.detach().to(cast if cast is not None else x.dtype).clone().requires_grad_(True)
            else:
                leaf = x
            leaves.append(leaf)
        outs = run_reference(fn, leaves, compute)
        ups = [u.to(torch.float64) if compute == torch.float64 else u.to(o.dtype) for u, o in zip(upstream, outs)]
        pairs = [(o, u) for o, u in zip(outs, ups) if o.requires_grad]
        wrt = [leaf for leaf in leaves if leaf.is_floating_point()]
        got = torch.autograd.grad([o for o, _ in pairs], wrt, [u for _, u in pairs], allow_unused=True)
        grads.append([g if g is not None else torch.zeros_like(w) for g, w in zip(got, wrt)])
    return grads[0], grads[1]


def check_gradients(
    program,
    source: ModuleOp | func.FuncOp | str | os.PathLike,
    inputs: Sequence[torch.Tensor],
    *,
    func_name: str | None = None,
    seed: int = 0,
    upstream: Sequence[torch.Tensor] | None = None,
    loss: tuple[torch.dtype, int] | None = None,
    loss_rows: int | None = None,
) -> list[CheckResult]:
    """Run a compiled `@f_fwd` and `@f_bwd` (`program`: a `CompiledModule` of an
    `nn-autodiff` pipeline) and check f's results and every gradient against the reference
    (float64 autograd, and autograd in the element type) under the NN_DIALECT.md bar.
    `loss = (element type, rows reduced)` adds that bar's slack for a 0-d result (a loss);
    without it a 0-d result gets none (stricter than NN_DIALECT.md).
    `loss_rows`: shorthand for `loss = (the program's element type, loss_rows)`.
    """
    fn = load_func(source, func_name)
    name = fn.sym_name.data
    n_results = len(fn.function_type.outputs.data)
    ups = list(upstream) if upstream is not None else random_upstream(fn, seed, device=inputs[0].device)
    fwd_out = getattr(program, f"{name}_fwd")(*inputs)
    fwd_out = list(fwd_out) if isinstance(fwd_out, (tuple, list)) else [fwd_out]
    results, saved = fwd_out[:n_results], fwd_out[n_results:]
    bwd_out = getattr(program, f"{name}_bwd")(*saved, *ups)
    bwd_out = list(bwd_out) if isinstance(bwd_out, (tuple, list)) else [bwd_out]
    ref64, ref_t = reference_pair(fn, inputs)
    g64, g_t = reference_gradients(fn, inputs, ups)
    args = [a for a in fn.body.blocks[0].args]
    float_args = [a for a, x in zip(args, inputs) if x.is_floating_point()]
    names = [f"@{name} result #{i}" for i in range(n_results)]
    names += [f"d{_name(a) or f'arg{a.index}'}" for a in float_args]
    if loss is None and loss_rows is not None:
        loss = (program_dtype(fn), loss_rows)
    return assert_matches([*results, *bwd_out], [*ref64, *g64], [*ref_t, *g_t], names, loss=loss)
