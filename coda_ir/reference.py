"""Reference interpreter for `nn` programs, in PyTorch.

It executes a `func.func` of the nn dialect op by op exactly as NN_DIALECT.md defines every op,
and is the oracle of the numerics bar

    max|out - ref64| <= 2 * max|ref_T - ref64| + 1e-6 * max|ref64|

(`coda_ir.testing.check_close`): `ref64` is this interpreter with `compute_dtype=torch.float64`
and `ref_T` the same with the program's element type.

Rounding model (the contract):

* `compute_dtype=torch.float64`: every float input is converted to float64, every op computes in
  float64 and every result stays float64 (no rounding anywhere, the op-by-op "exact" answer).
* any other `compute_dtype` (bf16, f16, f32): every op upcasts its operands to fp32, computes in
  fp32 and rounds its result once to the element type. The element type of a float value is
  `compute_dtype` (so a bf16 program can also be run "at f32"); `compute_dtype=None` keeps the
  element types written in the IR. `nn.cross_entropy` always gives an f32 scalar (its IR type).
* integer tensors (`i32` positions and targets) are used as integers.

Conventions of individual ops (all from NN_DIALECT.md):

* `nn.rope`: `inv_freq[i] = theta ** (-2i / hd)` (in float64, rounded to fp32 when computing in
  fp32), `angle = pos[m] * inv_freq[i]` (fp32 or float64), style "half" rotates `(i, i + hd/2)`,
  "interleaved" rotates `(2i, 2i + 1)`; heads `>= rotary_heads` pass through unchanged.
* `nn.head_rms_norm`: only the first `heads` heads are normalised; the rest pass through.
* `nn.layer_norm`: biased variance, `(x - mean) * rsqrt(var + eps) * w + b`.
* `nn.gelu` / `nn.geglu`: PyTorch `F.gelu` with the same `approximate` ("none" or "tanh").
* `nn.cross_entropy`: `lse(logits[m]) - logits[m, t[m]]` summed over rows with
  `t[m] != ignore_index`; "mean" divides by their count (0/0 = nan, as PyTorch).
* `eps` and `theta` are `f32` attributes: their value is the f32 number (e.g. `1e-5` is used as
  `float(np.float32(1e-5))` even by the float64 reference).

Public API: `run_reference`, `reference_pair`, `load_func`, `program_dtype`, `element_dtype`,
`torch_dtype`, `f32_value`, `rope_inv_freq`.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from coda_ir.dialects.element_types import TORCH_DTYPE_NAMES, element_name
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    Float32Type,
    FloatAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, Operation, SSAValue
from coda_ir.dialects.nn import first_head_of

__all__ = [
    "run_reference",
    "reference_pair",
    "load_func",
    "element_dtype",
    "torch_dtype",
    "program_dtype",
    "f32_value",
    "rope_inv_freq",
]


# ----------------------------------------------------------------------------- IR helpers


def torch_dtype(attr: Attribute) -> torch.dtype:
    """The torch dtype of an xDSL element type."""
    return getattr(torch, TORCH_DTYPE_NAMES[element_name(attr)])


def element_dtype(value_or_type: SSAValue | Attribute) -> torch.dtype:
    ty = value_or_type.type if isinstance(value_or_type, SSAValue) else value_or_type
    assert isinstance(ty, TensorType), ty
    return torch_dtype(ty.get_element_type())


def _is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def f32_value(x: float) -> float:
    """The float32 number nearest to x, as a Python float (f32 attributes hold f32 numbers)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def load_func(source: ModuleOp | func.FuncOp | str | os.PathLike, func_name: str | None = None) -> func.FuncOp:
    """The `func.func` named `func_name` (default: the first one) of a module, MLIR text or file."""
    if isinstance(source, func.FuncOp):
        if func_name is not None and source.sym_name.data != func_name:
            raise ValueError(f"function is @{source.sym_name.data}, not @{func_name}")
        return source
    if isinstance(source, (str, os.PathLike)):
        text = str(source)
        if "func.func" not in text and os.path.exists(text):
            with open(text) as handle:
                text = handle.read()
        from coda_ir.context import make_context
        from xdsl.parser import Parser

        module = Parser(make_context(), text).parse_module()
        module.verify()
        source = module
    funcs = [op for op in source.walk() if isinstance(op, func.FuncOp)]
    if not funcs:
        raise ValueError("no func.func in the module")
    if func_name is None:
        return funcs[0]
    for f in funcs:
        if f.sym_name.data == func_name:
            return f
    raise ValueError(f"no func.func @{func_name} (have {', '.join('@' + f.sym_name.data for f in funcs)})")


def program_dtype(fn: func.FuncOp) -> torch.dtype:
    """The program's float element type: that of its first float argument (else float32)."""
    for arg in fn.body.blocks[0].args:
        if isinstance(arg.type, TensorType):
            dt = element_dtype(arg)
            if _is_float(dt):
                return dt
    return torch.float32


def _prop(op: Operation, name: str):
    attr = op.properties.get(name)
    if attr is None and name == "first_head":
        return 0  # optional (NN_DIALECT.md): absent means the first head
    if attr is None:
        # irdl default values live on the op definition; reading the accessor applies them
        attr = getattr(op, name)
    if isinstance(attr, IntegerAttr):
        return attr.value.data
    if isinstance(attr, FloatAttr):
        return f32_value(attr.value.data) if isinstance(attr.type, Float32Type) else attr.value.data
    if isinstance(attr, StringAttr):
        return attr.data
    raise TypeError(f"unsupported property {name} = {attr}")


# ----------------------------------------------------------------------------- the ops



class _Ctx:
    def __init__(self, compute_dtype: torch.dtype | None):
        self.exact = compute_dtype == torch.float64
        self.override = compute_dtype
        self.internal = torch.float64 if self.exact else torch.float32

    def up(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.internal) if _is_float(t.dtype) else t

    def result_dtype(self, op: Operation, index: int = 0) -> torch.dtype:
        ir = element_dtype(op.results[index])
        if self.exact:
            return torch.float64
        if (self.override is not None and _is_float(ir) and op.name not in F32_RESULT_OPS
                and (op.name, index) not in F32_RESULTS):
            return self.override
        return ir


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w


def _rope(ctx: _Ctx, x: torch.Tensor, pos: torch.Tensor, hd: int, heads: int, theta: float, style: str,
          sign: float = 1.0) -> torch.Tensor:
    m, n = x.shape
    half = hd // 2
    i = torch.arange(half, dtype=torch.float64, device=x.device)
    inv_freq = (theta ** (-2.0 * i / hd)).to(ctx.internal)  # float64, then rounded to fp32
    angle = pos.to(ctx.internal)[:, None] * inv_freq[None, :]  # [M, hd/2]
    cos, sin = torch.cos(angle), sign * torch.sin(angle)  # sign -1: the transpose (nn.rope_grad)
    out = x.clone()
    rot = x[:, : heads * hd].reshape(m, heads, hd)
    if style == "half":
        a, b = rot[..., :half], rot[..., half:]
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]
    c, s = cos[:, None, :], sin[:, None, :]
    oa = a * c - b * s
    ob = b * c + a * s
    if style == "half":
        rotated = torch.cat([oa, ob], dim=-1)
    else:
        rotated = torch.stack([oa, ob], dim=-1).reshape(m, heads, hd)
    out[:, : heads * hd] = rotated.reshape(m, heads * hd)
    return out


def _head_rms_norm(x: torch.Tensor, w: torch.Tensor, hd: int, heads: int, eps: float, first: int = 0) -> torch.Tensor:
    m, _ = x.shape
    out = x.clone()
    lo, hi = first * hd, (first + heads) * hd
    part = x[:, lo:hi].reshape(m, heads, hd)
    out[:, lo:hi] = _rms_norm(part, w, eps).reshape(m, heads * hd)
    return out


def _rms_norm_grad(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, r: torch.Tensor,
                   hdh: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """dx, dw of `x * r * w` for rows (r: one value per row, broadcast over the last dim);
    `hdh`: the row statistic `sum_j dy_j h_j` when given (nn.rms_norm_grad's optional operand)."""
    n = x * r.unsqueeze(-1)
    q = dy * w
    s = (q * n).mean(dim=-1, keepdim=True) if hdh is None else hdh.unsqueeze(-1) / x.shape[-1]
    dx = r.unsqueeze(-1) * (q - n * s)
    return dx, (dy * n).reshape(-1, w.shape[0]).sum(dim=0)


def _head_rms_norm_grad(dy, x, w, hd: int, heads: int, eps: float, first: int):
    m, _ = x.shape
    lo, hi = first * hd, (first + heads) * hd
    part = x[:, lo:hi].reshape(m, heads, hd)
    r = torch.rsqrt(part.pow(2).mean(dim=-1) + eps)
    dpart, dw = _rms_norm_grad(dy[:, lo:hi].reshape(m, heads, hd), part, w, r)
    dx = dy.clone()
    dx[:, lo:hi] = dpart.reshape(m, heads * hd)
    return dx, dw


def _gelu_grad(dy: torch.Tensor, x: torch.Tensor, approximate: str) -> torch.Tensor:
    return torch.ops.aten.gelu_backward(dy, x, approximate=approximate)


def _kept_targets(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(targets as int64, rows whose target is kept); a kept target outside [0, V) is an error."""
    v = logits.shape[1]
    t = targets.to(torch.int64)
    keep = t != ignore_index
    bad = keep & ((t < 0) | (t >= v))
    if bool(bad.any()):
        raise ValueError(f"cross_entropy target out of range [0, {v}) at rows {bad.nonzero().flatten().tolist()[:8]}")
    return t, keep


def _cross_entropy_grad(logits, targets, dloss, ignore_index: int, reduction: str) -> torch.Tensor:
    t, keep = _kept_targets(logits, targets, ignore_index)
    p = torch.softmax(logits, dim=-1)
    onehot = torch.zeros_like(p).scatter_(1, torch.where(keep, t, 0)[:, None], 1.0)
    scale = dloss.to(p.dtype)
    if reduction == "mean":
        scale = scale / keep.sum().to(p.dtype)
    return torch.where(keep[:, None], (p - onehot) * scale, torch.zeros((), dtype=p.dtype))


def _cross_entropy(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int, reduction: str) -> torch.Tensor:
    t, keep = _kept_targets(logits, targets, ignore_index)
    lse = torch.logsumexp(logits, dim=-1)
    picked = logits.gather(1, torch.where(keep, t, 0)[:, None])[:, 0]
    losses = torch.where(keep, lse - picked, torch.zeros((), dtype=logits.dtype))
    total = losses.sum()
    if reduction == "sum":
        return total
    return total / keep.sum().to(logits.dtype)


def _eval(ctx: _Ctx, op: Operation, args: list[torch.Tensor]) -> torch.Tensor:
    a = [ctx.up(t) for t in args]
    name = op.name
    if name == "nn.linear":
        return a[0] @ a[1].T
    if name == "nn.matmul":
        return a[0] @ a[1]
    if name == "nn.add":
        return a[0] + a[1]
    if name == "nn.mul":
        return a[0] * a[1]
    if name == "nn.silu":
        return a[0] * torch.sigmoid(a[0])
    if name == "nn.relu":
        # torch.relu, not clamp_min: the same values, but autograd's derivative at 0 is 0 (as
        # nn.relu_grad and PyTorch's ReLU), where clamp_min's is 1
        return torch.relu(a[0])
    if name == "nn.gelu":
        return F.gelu(a[0], approximate=_prop(op, "approximate"))
    if name == "nn.rms_norm":
        return _rms_norm(a[0], a[1], _prop(op, "eps"))
    if name == "nn.layer_norm":
        x = a[0]
        mean = x.mean(dim=-1, keepdim=True)
        var = (x - mean).pow(2).mean(dim=-1, keepdim=True)
        return (x - mean) * torch.rsqrt(var + _prop(op, "eps")) * a[1] + a[2]
    if name in ("nn.swiglu", "nn.geglu"):
        z = a[0]
        f = z.shape[1] // 2
        gate, up = z[:, :f], z[:, f:]
        act = gate * torch.sigmoid(gate) if name == "nn.swiglu" else F.gelu(gate, approximate=_prop(op, "approximate"))
        return act * up
    if name == "nn.rope":
        return _rope(
            ctx, a[0], args[1], _prop(op, "head_dim"), _prop(op, "rotary_heads"), _prop(op, "theta"), _prop(op, "style")
        )
    if name == "nn.head_rms_norm":
        return _head_rms_norm(a[0], a[1], _prop(op, "head_dim"), _prop(op, "heads"), _prop(op, "eps"), first_head_of(op))
    if name == "nn.cross_entropy":
        return _cross_entropy(a[0], args[1], _prop(op, "ignore_index"), _prop(op, "reduction"))
    if name == "nn.cross_entropy_fwd":
        loss = _cross_entropy(a[0], args[1], _prop(op, "ignore_index"), _prop(op, "reduction"))
        return loss, torch.logsumexp(a[0], dim=-1)
    # backward ops (nn-autodiff); multi-result ops return tuples
    if name == "nn.gemm":
        lhs = a[0].T if _prop(op, "transpose_a") else a[0]
        rhs = a[1].T if _prop(op, "transpose_b") else a[1]
        return lhs @ rhs
    if name == "nn.column_sum":
        return (a[0] * a[1] if len(a) > 1 else a[0]).sum(dim=0)
    if name == "nn.silu_grad":
        sg = torch.sigmoid(a[1])
        return a[0] * sg * (1 + a[1] * (1 - sg))
    if name == "nn.relu_grad":
        return torch.where(a[1] > 0, a[0], torch.zeros((), dtype=a[0].dtype))
    if name == "nn.gelu_grad":
        return _gelu_grad(a[0], a[1], _prop(op, "approximate"))
    if name in ("nn.swiglu_grad", "nn.geglu_grad"):
        dy, z = a
        f = z.shape[1] // 2
        gate, up = z[:, :f], z[:, f:]
        if name == "nn.swiglu_grad":
            sg = torch.sigmoid(gate)
            return torch.cat([dy * up * sg * (1 + gate * (1 - sg)), dy * gate * sg], dim=1)
        approx = _prop(op, "approximate")
        return torch.cat([_gelu_grad(dy * up, gate, approx), dy * F.gelu(gate, approximate=approx)], dim=1)
    if name == "nn.rope_grad":
        return _rope(ctx, a[0], args[1], _prop(op, "head_dim"), _prop(op, "rotary_heads"), _prop(op, "theta"),
                     _prop(op, "style"), sign=-1.0)
    if name == "nn.rms_norm_rstd":
        return torch.rsqrt(a[0].pow(2).mean(dim=-1) + _prop(op, "eps"))
    if name == "nn.rms_norm_grad":
        return _rms_norm_grad(a[0], a[1], a[2], a[3], a[4] if len(a) > 4 else None)
    if name == "nn.row_dot":
        return (a[0] * a[1]).sum(dim=-1)
    if name == "nn.layer_norm_stats":
        x = a[0]
        mean = x.mean(dim=-1)
        var = (x - mean[:, None]).pow(2).mean(dim=-1)
        return mean, torch.rsqrt(var + _prop(op, "eps"))
    if name == "nn.layer_norm_grad":
        dy, x, w, mean, r = a
        n = (x - mean[:, None]) * r[:, None]
        q = dy * w
        dx = r[:, None] * (q - q.mean(dim=-1, keepdim=True) - n * (q * n).mean(dim=-1, keepdim=True))
        return dx, (dy * n).sum(dim=0), dy.sum(dim=0)
    if name == "nn.head_rms_norm_grad":
        return _head_rms_norm_grad(a[0], a[1], a[2], _prop(op, "head_dim"), _prop(op, "heads"), _prop(op, "eps"),
                                   first_head_of(op))
    if name == "nn.zeros":
        return torch.zeros(tuple(op.results[0].type.get_shape()), dtype=ctx.internal)  # type: ignore[attr-defined]
    if name == "nn.rms_norm_apply":
        return a[0] * a[2][:, None] * a[1]
    if name == "nn.layer_norm_apply":
        return (a[0] - a[3][:, None]) * a[4][:, None] * a[1] + a[2]
    if name == "nn.cross_entropy_grad":
        # the semantics: from the logits (a saved lse operand is what a kernel reads instead of
        # folding the logits again; the reference does not need it)
        return _cross_entropy_grad(a[0], args[1], a[2], _prop(op, "ignore_index"), _prop(op, "reduction"))
    # whole-model ops
    if name == "nn.embedding":
        return a[1][checked_ids(args[0], a[1].shape[0], name)]
    if name == "nn.embedding_grad":
        v = op.results[0].type.get_shape()[0]  # type: ignore[attr-defined]
        ids = checked_ids(args[1], v, name)
        return torch.zeros((v, a[0].shape[1]), dtype=a[0].dtype).index_add_(0, ids, a[0])
    if name in ("nn.attention", "nn.attention_fwd"):
        out, lse = attention_reference(a[0], op)
        return out if name == "nn.attention" else (out, lse)
    if name == "nn.attention_grad":
        # the semantics of the gradient: recomputed from qkv (the saved output and log-sum-exp
        # are what a kernel reads; the reference does not need them)
        qkv = a[0].detach().requires_grad_(True)
        with torch.enable_grad():
            out, _ = attention_reference(qkv, op)
            (grad,) = torch.autograd.grad(out, qkv, a[3])
        return grad
    if name == "nn.concat":
        return torch.cat(a, dim=_prop(op, "axis"))
    if name == "nn.slice":
        axis, start = _prop(op, "axis"), _prop(op, "start")
        size = op.results[0].type.get_shape()[axis]  # type: ignore[attr-defined]
        return a[0].narrow(axis, start, size)
    raise NotImplementedError(f"the reference interpreter has no rule for '{name}'")


def checked_ids(ids: torch.Tensor, rows: int, name: str) -> torch.Tensor:
    ids = ids.long()
    bad = (ids < 0) | (ids >= rows)
    if bool(bad.any()):
        from coda_ir.errors import ArgumentError

        first = int(bad.nonzero()[0, 0])
        raise ArgumentError(f"{name}: id {int(ids[first])} at row {first} is outside [0, {rows})", "ids")
    return ids


def attention_reference(qkv: torch.Tensor, op: Operation) -> tuple[torch.Tensor, torch.Tensor]:
    """(output [M, H*hd], log-sum-exp flat [B*H*S] in (sequence, head, row) order)."""
    from coda_ir.dialects.nn import attention_config

    heads, kv_heads, hd, seq, causal = attention_config(op)
    m = qkv.shape[0]
    b = m // seq
    p = qkv.reshape(b, seq, heads + 2 * kv_heads, hd)
    group = heads // kv_heads
    q = p[:, :, :heads].transpose(1, 2)
    k = p[:, :, heads : heads + kv_heads].transpose(1, 2).repeat_interleave(group, 1)
    v = p[:, :, heads + kv_heads :].transpose(1, 2).repeat_interleave(group, 1)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    if causal:
        scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.softmax(scores, dim=-1) @ v
    return out.transpose(1, 2).reshape(m, heads * hd), lse.reshape(-1)


NN_OPS = (
    "nn.linear",
    "nn.matmul",
    "nn.add",
    "nn.mul",
    "nn.silu",
    "nn.relu",
    "nn.gelu",
    "nn.rms_norm",
    "nn.layer_norm",
    "nn.swiglu",
    "nn.geglu",
    "nn.rope",
    "nn.head_rms_norm",
    "nn.cross_entropy",
    "nn.cross_entropy_fwd",
    "nn.gemm",
    "nn.column_sum",
    "nn.silu_grad",
    "nn.relu_grad",
    "nn.gelu_grad",
    "nn.swiglu_grad",
    "nn.geglu_grad",
    "nn.rope_grad",
    "nn.rms_norm_rstd",
    "nn.rms_norm_grad",
    "nn.layer_norm_stats",
    "nn.layer_norm_grad",
    "nn.head_rms_norm_grad",
    "nn.cross_entropy_grad",
    "nn.rms_norm_apply",
    "nn.layer_norm_apply",
    "nn.zeros",
    "nn.row_dot",
    "nn.embedding",
    "nn.embedding_grad",
    "nn.attention",
    "nn.attention_fwd",
    "nn.attention_grad",
    "nn.concat",
    "nn.slice",
)

F32_RESULT_OPS = ("nn.cross_entropy", "nn.cross_entropy_fwd", "nn.rms_norm_rstd", "nn.layer_norm_stats", "nn.row_dot")
F32_RESULTS = {("nn.attention_fwd", 1)}  # the attention log-sum-exp
"""Ops whose results are f32 by definition (a loss, row statistics): never rounded to the program's type."""


def _convert_input(ctx: _Ctx, arg: SSAValue, value: torch.Tensor, index: int) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"input #{index} must be a torch.Tensor, got {type(value).__name__}")
    ty = arg.type
    assert isinstance(ty, TensorType)
    shape = tuple(ty.get_shape())
    if tuple(value.shape) != shape:
        raise ValueError(f"input #{index} has shape {tuple(value.shape)}, the function expects {shape}")
    ir = element_dtype(arg)
    if _is_float(ir):
        if not _is_float(value.dtype):
            raise TypeError(f"input #{index} must be a float tensor, got {value.dtype}")
        if ctx.exact:
            return value.to(torch.float64)
        return value.to(ctx.override if ctx.override is not None else ir)
    if _is_float(value.dtype):
        raise TypeError(f"input #{index} must be an integer tensor ({ir}), got {value.dtype}")
    return value.to(torch.int64)


def run_reference(
    module_or_func: ModuleOp | func.FuncOp | str | os.PathLike,
    inputs: Sequence[torch.Tensor],
    compute_dtype: torch.dtype | None = None,
    *,
    func_name: str | None = None,
    trace: Callable[[Operation, torch.Tensor], None] | None = None,
) -> list[torch.Tensor]:
    """Run an nn function op by op and return its results (on the inputs' device).

    `module_or_func`: an xDSL ModuleOp (its first func.func, or `func_name`), a FuncOp, MLIR
    text or a path. `inputs`: one tensor per argument, in order. `compute_dtype`: see the module
    docstring (float64 = exact reference; bf16/f16/f32 = fp32 compute, one rounding per op;
    None = the IR's element types). `trace(op, result)` is called after every op.
    Autograd flows through the float64 reference (inputs that require grad keep their graph).
    """
    fn = load_func(module_or_func, func_name)
    ctx = _Ctx(compute_dtype)
    block = fn.body.blocks[0]
    if len(inputs) != len(block.args):
        raise ValueError(f"@{fn.sym_name.data} takes {len(block.args)} inputs, got {len(inputs)}")
    env: dict[SSAValue, torch.Tensor] = {}
    for i, (arg, value) in enumerate(zip(block.args, inputs)):
        env[arg] = _convert_input(ctx, arg, value, i)
    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            return [env[v] for v in op.arguments]
        if op.name not in NN_OPS:
            raise NotImplementedError(f"the reference interpreter runs nn ops only, found '{op.name}'")
        args = [env[v] for v in op.operands]
        value = _eval(ctx, op, args)
        outs = value if isinstance(value, tuple) else (value,)
        for i, (result, out) in enumerate(zip(op.results, outs)):
            out = out.to(ctx.result_dtype(op, i))
            env[result] = out
            if trace is not None:
                trace(op, out)
    raise ValueError(f"@{fn.sym_name.data} has no func.return")


def reference_pair(
    module_or_func: ModuleOp | func.FuncOp | str | os.PathLike,
    inputs: Sequence[torch.Tensor],
    dtype: torch.dtype | None = None,
    *,
    func_name: str | None = None,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """`(ref64, ref_T)`: the float64 reference and the reference in the program's element type
    (`dtype`, default: the type of the function's first float argument)."""
    fn = load_func(module_or_func, func_name)
    ref64 = run_reference(fn, inputs, torch.float64)
    ref_t = run_reference(fn, inputs, dtype if dtype is not None else program_dtype(fn))
    return ref64, ref_t


def rope_inv_freq(head_dim: int, theta: float, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """`theta ** (-2i / hd)` for i in [0, hd/2), computed in float64 and rounded to `dtype`."""
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    return (f32_value(theta) ** (-2.0 * i / head_dim)).to(dtype)

