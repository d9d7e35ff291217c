"""The reference interpreter of the nn dialect, in PyTorch: what an nn program means.

It executes a `func.func` of the nn dialect op by op exactly as NN_DIALECT.md defines every op,
and is the oracle of the numerics bar

    max|out - ref64| <= 2 * max|ref_T - ref64| + 1e-6 * max|ref64|

(`coda_ir.testing.check_close`): `ref64` is this interpreter with `compute_dtype=torch.float64`
and `ref_T` the same with the program's element type. Its public face is `coda_ir.reference`
(`run_reference`, `reference_pair`).

Rounding model (the contract):

* `compute_dtype=torch.float64`: every float input is converted to float64, every op computes in
  float64 and every result stays float64 (no rounding anywhere, the op-by-op "exact" answer).
* any other `compute_dtype` (bf16, f16, f32): every op upcasts its operands to fp32, computes in
  fp32 and rounds its result once to the element type. The element type of a float value is
  `compute_dtype` (so a bf16 program can also be run "at f32"); `compute_dtype=None` keeps the
  element types written in the IR. Results that are f32 by definition (a loss, row statistics,
  the attention log-sum-exp: `nn.cross_entropy`, `nn.cross_entropy_fwd`, `nn.rms_norm_rstd`,
  `nn.layer_norm_stats`, `nn.row_dot`, `nn.attention_fwd`'s second result) keep their IR type
  (f32), whatever `compute_dtype` is.
* integer tensors (`i32` positions and targets) are used as integers.

Conventions of individual ops (all from NN_DIALECT.md):

* `nn.rope`: `inv_freq[i] = theta ** (-2i / rd)` (in float64, rounded to fp32 when computing in
  fp32; `rd` the optional `rotary_dim`, default hd) or the op's explicit `inv_freq`, `angle =
  pos[m] * inv_freq[i]` (fp32 or float64), style "half" rotates `(i, i + rd/2)`, "interleaved"
  rotates `(2i, 2i + 1)` among each head's first rd columns, cos and sin times the optional
  `scaling`; a head's columns `>= rd` and heads `>= rotary_heads` pass through unchanged.
* `nn.head_rms_norm`: only the first `heads` heads are normalised; the rest pass through.
* `nn.layer_norm`: biased variance, `(x - mean) * rsqrt(var + eps) * w + b`.
* `nn.gelu` / `nn.geglu`: PyTorch `F.gelu` with the same `approximate` ("none" or "tanh").
* `nn.cross_entropy`: `lse(logits[m]) - logits[m, t[m]]` summed over rows with
  `t[m] != ignore_index`; "mean" divides by their count (0/0 = nan, as PyTorch).
* `nn.attention` (and `_fwd` / `_grad`): optional `scale` (default `1 / sqrt(hd)`), `softcap`
  (`c * tanh(s / c)` after scaling), `window` (`i - j < window`) and `segments` operand
  (`attention_visible`); a query row that sees no key has output 0 and log-sum-exp -inf.
* `eps` and `theta` are `f32` attributes: their value is the f32 number (e.g. `1e-5` is used as
  `float(np.float32(1e-5))` even by the float64 reference).

It is an xDSL `Interpreter` (`@impl` per op, as `xdsl/interpreters/` and the coda interpreter,
coda_ir/interpreters/coda.py): `NnFunctions` implements the nn ops, functions (`func.return`,
`func.call`) run on xDSL's own `FuncFunctions`, shared with the coda interpreter. (nn programs
hold no `arith` / `math`: those are the scalar bodies of coda kernels.) Autograd flows through
it: inputs that require grad keep their graph, also through the roundings.

Errors: a bad input (count, shape, dtype, a target or id out of range) is an
`InterpreterInputError` (an `ArgumentError`) that names the op and its source location where an
op refuses it; an op without a rule is a located `CompileError`; anything else is an
`InternalError`.

    run_nn(module_or_func, inputs, compute_dtype=None, func_name=None, trace=None) -> list[Tensor]
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from xdsl.dialects import func
from xdsl.dialects.builtin import Float32Type, FloatAttr, IntegerAttr, ModuleOp, StringAttr, TensorType
from xdsl.interpreter import Interpreter, InterpreterFunctions, PythonValues, impl, register_impls
from xdsl.interpreters.func import FuncFunctions
from xdsl.ir import Operation, SSAValue
from xdsl.traits import SymbolTable

from coda_ir.diagnostics import Diagnostic, location_of
from coda_ir.dialects import nn
from coda_ir.errors import CodaError, CompileError, internal_error
from coda_ir.interpreters.common import (
    InterpreterInputError,
    check_input_count,
    element_dtype,
    f32_value,
    load_func,
)

__all__ = [
    "NnFunctions",
    "nn_interpreter",
    "run_nn",
    "program_dtype",
    "rope_inv_freq",
    "checked_ids",
    "attention_reference",
    "attention_visible",
]


# ----------------------------------------------------------------------------- IR helpers


def program_dtype(fn: func.FuncOp) -> torch.dtype:
    """The program's float element type: that of its first float argument (else float32)."""
    for arg in fn.body.blocks[0].args:
        if isinstance(arg.type, TensorType):
            dt = element_dtype(arg)
            if dt.is_floating_point:
                return dt
    return torch.float32


def rope_inv_freq(head_dim: int, theta: float, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """`theta ** (-2i / hd)` for i in [0, hd/2), computed in float64 and rounded to `dtype`."""
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    return (f32_value(theta) ** (-2.0 * i / head_dim)).to(dtype)


def prop(op: Operation, name: str):
    """A property as a Python value: an int, a string, or a float (an `f32` one is the f32
    number it holds); irdl defaults apply to absent properties, an absent `first_head` is 0."""
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


def _where(op: Operation) -> str:
    return f"'{op.name}' at {location_of(op)}"


# ----------------------------------------------------------------------------- op semantics
# Functions of tensors already in the compute dtype (float64 or fp32); the impls round results.


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w


def _rope(x: torch.Tensor, pos: torch.Tensor, hd: int, heads: int, theta: float, style: str,
          sign: float = 1.0, freqs: tuple[float, ...] | None = None, rotary_dim: int | None = None,
          scaling: float = 1.0) -> torch.Tensor:
    m, _ = x.shape
    rd = hd if rotary_dim is None else rotary_dim  # the first rd columns of each head rotate
    half = rd // 2
    i = torch.arange(half, dtype=torch.float64, device=x.device)
    if freqs is not None:  # the op's explicit `inv_freq` (f32 numbers): exact in both compute dtypes
        inv_freq = torch.tensor(freqs, dtype=torch.float64, device=x.device).to(x.dtype)
    else:
        inv_freq = (theta ** (-2.0 * i / rd)).to(x.dtype)  # float64, then rounded to fp32
    angle = pos.to(x.dtype)[:, None] * inv_freq[None, :]  # [M, rd/2]
    # sign -1: the transpose (nn.rope_grad); `scaling` multiplies cos and sin (Hugging Face's
    # attention_scaling), so the rotated columns are scaling * R(a) x in both directions
    cos, sin = scaling * torch.cos(angle), sign * scaling * torch.sin(angle)
    out = x.clone()
    rot = x[:, : heads * hd].reshape(m, heads, hd)[..., :rd]
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
        rotated = torch.stack([oa, ob], dim=-1).reshape(m, heads, rd)
    head_view = out[:, : heads * hd].reshape(m, heads, hd).clone()
    head_view[..., :rd] = rotated
    out[:, : heads * hd] = head_view.reshape(m, heads * hd)
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


def _head_rms_norm_grad(dy, x, groups, hd: int, eps: float):
    """dx and one dw per (weight, first head, heads) group (the heads of each group normalized
    with its weight; other columns pass dy)."""
    m, _ = x.shape
    dx = dy.clone()
    dws = []
    for w, first, heads in groups:
        lo, hi = first * hd, (first + heads) * hd
        part = x[:, lo:hi].reshape(m, heads, hd)
        r = torch.rsqrt(part.pow(2).mean(dim=-1) + eps)
        dpart, dw = _rms_norm_grad(dy[:, lo:hi].reshape(m, heads, hd), part, w, r)
        dx[:, lo:hi] = dpart.reshape(m, heads * hd)
        dws.append(dw)
    return dx, *dws


def _gelu_grad(dy: torch.Tensor, x: torch.Tensor, approximate: str) -> torch.Tensor:
    return torch.ops.aten.gelu_backward(dy, x, approximate=approximate)


def _gate_up(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gate half (first) and the up half of a gated activation's input."""
    f = z.shape[1] // 2
    return z[:, :f], z[:, f:]


def _classes(op: Operation, logits: torch.Tensor) -> int | None:
    """The cross-entropy's `classes` where its logits have padding columns past them, else None."""
    return nn.padded_classes(op, logits.shape[1])


def _cross_entropy_logits_grad(op: Operation, logits, targets, dloss, lse=None, start: int = 0, vocab: int | None = None):
    classes = _classes(op, logits) if vocab is None else None
    if classes is not None:  # padding columns: in no softmax, gradient 0
        grad = _cross_entropy_logits_grad(op, logits[:, :classes], targets, dloss, lse, start, classes)
        return torch.nn.functional.pad(grad, (0, logits.shape[1] - classes))
    return _cross_entropy_logits_grad_of_classes(op, logits, targets, dloss, lse, start, vocab)


def _cross_entropy_logits_grad_of_classes(op: Operation, logits, targets, dloss, lse=None, start: int = 0,
                                          vocab: int | None = None):
    """d loss / d logits of `op`'s cross-entropy (ignore_index rows 0, "mean" over the kept rows),
    unrounded: shared by nn.cross_entropy_grad and nn.linear_cross_entropy_grad. On a vocabulary
    shard (`lse` the whole vocabulary's log-sum-exp per row, the logits its columns `[start,
    start + V)` of `vocab`) the softmax comes from `lse` and the one-hot sits where the shard
    holds the target."""
    t, keep = _kept_targets(op, logits, targets, prop(op, "ignore_index"), vocab)
    local = t - start
    mine = keep & (local >= 0) & (local < logits.shape[1])
    p = torch.softmax(logits, dim=-1) if lse is None else torch.exp(logits - lse[:, None])
    onehot = torch.zeros_like(p).scatter_(1, torch.where(mine, local, 0)[:, None], mine[:, None].to(p.dtype))
    scale = dloss.to(p.dtype)
    if prop(op, "reduction") == "mean":
        scale = scale / keep.sum().to(p.dtype)
    return torch.where(keep[:, None], (p - onehot) * scale, torch.zeros((), dtype=p.dtype))


def _kept_targets(op: Operation, logits: torch.Tensor, targets: torch.Tensor,
                  ignore_index: int, vocab: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(targets as int64, rows whose target is kept); a kept target outside [0, V) is an error
    (V: `vocab`, default the logits' columns)."""
    v = logits.shape[1] if vocab is None else vocab
    t = targets.to(torch.int64)
    keep = t != ignore_index
    bad = keep & ((t < 0) | (t >= v))
    if bool(bad.any()):
        rows = bad.nonzero().flatten().tolist()
        raise InterpreterInputError(
            f"{_where(op)}: target {int(t[rows[0]])} at row {rows[0]} is out of range [0, {v}) and not the "
            f"ignore index {ignore_index} (rows {rows[:8]})",
            "targets",
        )
    return t, keep


def _cross_entropy(op: Operation, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    reduction = prop(op, "reduction")
    logits = logits[:, :_classes(op, logits) or logits.shape[1]]  # padding columns are no class
    t, keep = _kept_targets(op, logits, targets, prop(op, "ignore_index"))
    lse = torch.logsumexp(logits, dim=-1)
    picked = logits.gather(1, torch.where(keep, t, 0)[:, None])[:, 0]
    losses = torch.where(keep, lse - picked, torch.zeros((), dtype=logits.dtype))
    total = losses.sum()
    if reduction == "sum":
        return total
    return total / keep.sum().to(logits.dtype)


def checked_ids(ids: torch.Tensor, rows: int, op: Operation) -> torch.Tensor:
    """`ids` as int64 indices into `rows` rows; an id outside [0, rows) is an error that names
    `op` (an embedding or its gradient, nn or coda) and its location."""
    ids = ids.long()
    bad = (ids < 0) | (ids >= rows)
    if bool(bad.any()):
        first = int(bad.nonzero()[0, 0])
        raise InterpreterInputError(
            f"{op.name}: id {int(ids[first])} at row {first} is outside [0, {rows}) ({_where(op)})", "ids"
        )
    return ids


def attention_visible(b: int, seq: int, causal: bool, window: int, segments: torch.Tensor | None,
                      device: torch.device | None = None) -> torch.Tensor | None:
    """Which key rows each query row sees, [B, 1, S, S] bool (None: all of them), as
    `nn.attention` defines it: causal (`j <= i`), the sliding window (`i - j < window`), and with
    `segments` [B*S] (i32 document ids, negative = padding) a key of the query's own document
    that is not padding; a padding query sees every non-padding key."""
    i = torch.arange(seq, device=device)
    rel = i[:, None] - i[None, :]  # query row - key row
    visible = None
    if causal:
        visible = rel >= 0
    if window:
        inside = rel < window
        visible = inside if visible is None else visible & inside
    if visible is not None:
        visible = visible.expand(b, 1, seq, seq)
    if segments is not None:
        seg = segments.reshape(b, seq).to(device=device, dtype=torch.int64)
        sq, sk = seg[:, None, :, None], seg[:, None, None, :]
        same = (sk >= 0) & ((sq == sk) | (sq < 0))
        visible = same if visible is None else visible & same
    return visible


def attention_reference(qkv: torch.Tensor, op: Operation,
                        segments: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(output [M, H*hd], log-sum-exp flat [B*H*S] in (sequence, head, row) order) of the
    attention op `op` (nn or coda: the same properties) over a packed qkv, with its optional
    properties (`scale`, `window`, `softcap`) and `segments` operand. A query row that sees no
    key gets output 0 and log-sum-exp -inf, and passes no gradient."""
    heads, kv_heads, hd, seq, causal = nn.attention_config(op)
    options = nn.attention_options(op)
    m = qkv.shape[0]
    b = m // seq
    p = qkv.reshape(b, seq, heads + 2 * kv_heads, hd)
    group = heads // kv_heads
    q = p[:, :, :heads].transpose(1, 2)
    k = p[:, :, heads : heads + kv_heads].transpose(1, 2).repeat_interleave(group, 1)
    v = p[:, :, heads + kv_heads :].transpose(1, 2).repeat_interleave(group, 1)
    if options.scale is None:
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
    else:
        scores = (q @ k.transpose(-1, -2)) * options.scale
    if options.softcap:
        scores = torch.tanh(scores / options.softcap) * options.softcap
    visible = attention_visible(b, seq, causal, options.window, segments, qkv.device)
    if visible is None:
        lse = torch.logsumexp(scores, dim=-1)
        out = torch.softmax(scores, dim=-1) @ v
    else:
        seen = visible.any(-1, keepdim=True)
        # a row that sees nothing gets finite scores (then zero weights): no nan, no gradient
        scores = scores.masked_fill(~visible, float("-inf")).masked_fill(~seen, 0.0)
        lse = torch.logsumexp(scores, dim=-1).masked_fill(~seen[..., 0], float("-inf"))
        out = (torch.softmax(scores, dim=-1) * seen) @ v
    return out.transpose(1, 2).reshape(m, heads * hd), lse.reshape(-1)


# ----------------------------------------------------------------------------- the interpreter


@register_impls
class NnFunctions(InterpreterFunctions):
    """The nn ops on torch tensors. `compute_dtype`: torch.float64 (ref64), a float type every
    float value is rounded to (ref_T), or None (the IR's element types); see the module
    docstring. Every impl upcasts its operands (`up`) and rounds its results (`rounded`)."""

    def __init__(self, compute_dtype: torch.dtype | None = None):
        self.exact = compute_dtype == torch.float64
        self.override = compute_dtype
        self.internal = torch.float64 if self.exact else torch.float32

    # ------------------------------------------------------------------ values

    def up(self, args: PythonValues) -> list[torch.Tensor]:
        """The operands as an op computes with them: floats in float64 or fp32, integers as they are."""
        return [t.to(self.internal) if t.dtype.is_floating_point else t for t in args]

    def result_dtype(self, result: SSAValue, f32: bool = False) -> torch.dtype:
        """The dtype a result is rounded to; `f32`: an f32 result by definition (a loss, a row
        statistic), which `compute_dtype` does not change."""
        ir = element_dtype(result)
        if self.exact:
            return torch.float64
        if self.override is not None and ir.is_floating_point and not f32:
            return self.override
        return ir

    def rounded(self, op: Operation, *values: torch.Tensor, f32: Sequence[int] = ()) -> PythonValues:
        """The op's results: each value rounded once (`f32`: the indices of f32-by-definition results)."""
        return tuple(v.to(self.result_dtype(r, i in f32)) for i, (v, r) in enumerate(zip(values, op.results)))

    def convert_input(self, arg: SSAValue, value: object, index: int) -> torch.Tensor:
        """A function input as the program holds it (checked against the argument's type)."""
        if not isinstance(value, torch.Tensor):
            raise InterpreterInputError(f"input #{index} must be a torch.Tensor, got {type(value).__name__}", f"#{index}")
        ty = arg.type
        assert isinstance(ty, TensorType)
        shape = tuple(ty.get_shape())
        if tuple(value.shape) != shape:
            raise InterpreterInputError(
                f"input #{index} has shape {tuple(value.shape)}, the function expects {shape}", f"#{index}"
            )
        ir = element_dtype(arg)
        if ir.is_floating_point:
            if not value.dtype.is_floating_point:
                raise InterpreterInputError(f"input #{index} must be a float tensor, got {value.dtype}", f"#{index}")
            if self.exact:
                return value.to(torch.float64)
            return value.to(self.override if self.override is not None else ir)
        if value.dtype.is_floating_point:
            raise InterpreterInputError(f"input #{index} must be an integer tensor ({ir}), got {value.dtype}", f"#{index}")
        return value.to(torch.int64)

    # ------------------------------------------------------------------ forward ops

    @impl(nn.LinearOp)
    def run_linear(self, interpreter: Interpreter, op: nn.LinearOp, args: PythonValues) -> PythonValues:
        x, w = self.up(args)
        return self.rounded(op, x @ w.T)

    @impl(nn.MatmulOp)
    def run_matmul(self, interpreter: Interpreter, op: nn.MatmulOp, args: PythonValues) -> PythonValues:
        a, b = self.up(args)
        return self.rounded(op, a @ b)

    @impl(nn.AddOp)
    def run_add(self, interpreter: Interpreter, op: nn.AddOp, args: PythonValues) -> PythonValues:
        a, b = self.up(args)
        return self.rounded(op, a + b)

    @impl(nn.MulOp)
    def run_mul(self, interpreter: Interpreter, op: nn.MulOp, args: PythonValues) -> PythonValues:
        a, b = self.up(args)
        return self.rounded(op, a * b)

    @impl(nn.SiluOp)
    def run_silu(self, interpreter: Interpreter, op: nn.SiluOp, args: PythonValues) -> PythonValues:
        (x,) = self.up(args)
        return self.rounded(op, x * torch.sigmoid(x))

    @impl(nn.ReluOp)
    def run_relu(self, interpreter: Interpreter, op: nn.ReluOp, args: PythonValues) -> PythonValues:
        (x,) = self.up(args)
        # torch.relu, not clamp_min: the same values, but autograd's derivative at 0 is 0 (as
        # nn.relu_grad and PyTorch's ReLU), where clamp_min's is 1
        return self.rounded(op, torch.relu(x))

    @impl(nn.GeluOp)
    def run_gelu(self, interpreter: Interpreter, op: nn.GeluOp, args: PythonValues) -> PythonValues:
        (x,) = self.up(args)
        return self.rounded(op, F.gelu(x, approximate=prop(op, "approximate")))

    @impl(nn.ScaleOp)
    def run_scale(self, interpreter: Interpreter, op: nn.ScaleOp, args: PythonValues) -> PythonValues:
        (x,) = self.up(args)
        return self.rounded(op, x * prop(op, "factor"))

    @impl(nn.SoftcapOp)
    def run_softcap(self, interpreter: Interpreter, op: nn.SoftcapOp, args: PythonValues) -> PythonValues:
        (x,) = self.up(args)
        cap = prop(op, "cap")
        return self.rounded(op, cap * torch.tanh(x / cap))

    @impl(nn.SoftcapGradOp)
    def run_softcap_grad(self, interpreter: Interpreter, op: nn.SoftcapGradOp, args: PythonValues) -> PythonValues:
        dy, x = self.up(args)
        return self.rounded(op, dy * (1 - torch.tanh(x / prop(op, "cap")).pow(2)))

    @impl(nn.RMSNormOp)
    def run_rms_norm(self, interpreter: Interpreter, op: nn.RMSNormOp, args: PythonValues) -> PythonValues:
        x, w = self.up(args)
        return self.rounded(op, _rms_norm(x, w + nn.norm_offset(op), prop(op, "eps")))

    @impl(nn.LayerNormOp)
    def run_layer_norm(self, interpreter: Interpreter, op: nn.LayerNormOp, args: PythonValues) -> PythonValues:
        x, w, b = self.up(args)
        mean = x.mean(dim=-1, keepdim=True)
        var = (x - mean).pow(2).mean(dim=-1, keepdim=True)
        return self.rounded(op, (x - mean) * torch.rsqrt(var + prop(op, "eps")) * w + b)

    @impl(nn.SwiGLUOp)
    def run_swiglu(self, interpreter: Interpreter, op: nn.SwiGLUOp, args: PythonValues) -> PythonValues:
        gate, up = _gate_up(*self.up(args))
        return self.rounded(op, gate * torch.sigmoid(gate) * up)

    @impl(nn.GeGLUOp)
    def run_geglu(self, interpreter: Interpreter, op: nn.GeGLUOp, args: PythonValues) -> PythonValues:
        gate, up = _gate_up(*self.up(args))
        return self.rounded(op, F.gelu(gate, approximate=prop(op, "approximate")) * up)

    @impl(nn.RoPEOp)
    def run_rope(self, interpreter: Interpreter, op: nn.RoPEOp, args: PythonValues) -> PythonValues:
        x, pos = self.up(args)
        return self.rounded(op, _rope(x, pos, prop(op, "head_dim"), prop(op, "rotary_heads"), prop(op, "theta"),
                                      prop(op, "style"), freqs=nn.inv_freq_of(op),
                                      rotary_dim=nn.rotary_dim_of(op), scaling=nn.rope_scaling_of(op)))

    @impl(nn.HeadRMSNormOp)
    def run_head_rms_norm(self, interpreter: Interpreter, op: nn.HeadRMSNormOp, args: PythonValues) -> PythonValues:
        x, *weights = self.up(args)
        out = x
        for w, (_, first, heads) in zip(weights, nn.head_weight_groups(op)):  # disjoint heads: one after another
            out = _head_rms_norm(out, w + nn.norm_offset(op), prop(op, "head_dim"), heads, prop(op, "eps"), first)
        return self.rounded(op, out)

    @impl(nn.CrossEntropyOp)
    def run_cross_entropy(self, interpreter: Interpreter, op: nn.CrossEntropyOp, args: PythonValues) -> PythonValues:
        logits, targets = self.up(args)
        return self.rounded(op, _cross_entropy(op, logits, targets), f32=(0,))

    @impl(nn.CrossEntropyFwdOp)
    def run_cross_entropy_fwd(self, interpreter: Interpreter, op: nn.CrossEntropyFwdOp, args: PythonValues) -> PythonValues:
        logits, targets = self.up(args)
        lse = torch.logsumexp(logits[:, :_classes(op, logits) or logits.shape[1]], dim=-1)
        return self.rounded(op, _cross_entropy(op, logits, targets), lse, f32=(0, 1))

    @impl(nn.CrossEntropyPartialsOp)
    def run_cross_entropy_partials(self, interpreter: Interpreter, op: nn.CrossEntropyPartialsOp,
                                   args: PythonValues) -> PythonValues:
        logits, targets = self.up(args)
        start, size = prop(op, "vocab_start"), prop(op, "vocab_size")
        t, keep = _kept_targets(op, logits, targets, prop(op, "ignore_index"), size)
        local = t - start
        mine = keep & (local >= 0) & (local < logits.shape[1])
        picked = logits.gather(1, torch.where(mine, local, 0)[:, None])[:, 0]
        target = torch.where(mine, picked, torch.zeros((), dtype=logits.dtype))
        return self.rounded(op, torch.logsumexp(logits, dim=-1), target, f32=(0, 1))

    # ------------------------------------------------------------------ backward ops (nn-autodiff)

    @impl(nn.GemmOp)
    def run_gemm(self, interpreter: Interpreter, op: nn.GemmOp, args: PythonValues) -> PythonValues:
        a, b = self.up(args)
        lhs = a.T if prop(op, "transpose_a") else a
        rhs = b.T if prop(op, "transpose_b") else b
        return self.rounded(op, lhs @ rhs)

    @impl(nn.ColumnSumOp)
    def run_column_sum(self, interpreter: Interpreter, op: nn.ColumnSumOp, args: PythonValues) -> PythonValues:
        a = self.up(args)
        return self.rounded(op, (a[0] * a[1] if len(a) > 1 else a[0]).sum(dim=0))

    @impl(nn.SiluGradOp)
    def run_silu_grad(self, interpreter: Interpreter, op: nn.SiluGradOp, args: PythonValues) -> PythonValues:
        dy, x = self.up(args)
        sg = torch.sigmoid(x)
        return self.rounded(op, dy * sg * (1 + x * (1 - sg)))

    @impl(nn.ReluGradOp)
    def run_relu_grad(self, interpreter: Interpreter, op: nn.ReluGradOp, args: PythonValues) -> PythonValues:
        dy, x = self.up(args)
        return self.rounded(op, torch.where(x > 0, dy, torch.zeros((), dtype=dy.dtype)))

    @impl(nn.GeluGradOp)
    def run_gelu_grad(self, interpreter: Interpreter, op: nn.GeluGradOp, args: PythonValues) -> PythonValues:
        dy, x = self.up(args)
        return self.rounded(op, _gelu_grad(dy, x, prop(op, "approximate")))

    @impl(nn.SwiGLUGradOp)
    def run_swiglu_grad(self, interpreter: Interpreter, op: nn.SwiGLUGradOp, args: PythonValues) -> PythonValues:
        dy, z = self.up(args)
        gate, up = _gate_up(z)
        sg = torch.sigmoid(gate)
        return self.rounded(op, torch.cat([dy * up * sg * (1 + gate * (1 - sg)), dy * gate * sg], dim=1))

    @impl(nn.GeGLUGradOp)
    def run_geglu_grad(self, interpreter: Interpreter, op: nn.GeGLUGradOp, args: PythonValues) -> PythonValues:
        dy, z = self.up(args)
        gate, up = _gate_up(z)
        approx = prop(op, "approximate")
        return self.rounded(op, torch.cat([_gelu_grad(dy * up, gate, approx), dy * F.gelu(gate, approximate=approx)], dim=1))

    @impl(nn.RoPEGradOp)
    def run_rope_grad(self, interpreter: Interpreter, op: nn.RoPEGradOp, args: PythonValues) -> PythonValues:
        dy, pos = self.up(args)
        return self.rounded(op, _rope(dy, pos, prop(op, "head_dim"), prop(op, "rotary_heads"), prop(op, "theta"),
                                      prop(op, "style"), sign=-1.0, freqs=nn.inv_freq_of(op),
                                      rotary_dim=nn.rotary_dim_of(op), scaling=nn.rope_scaling_of(op)))

    @impl(nn.RMSNormRstdOp)
    def run_rms_norm_rstd(self, interpreter: Interpreter, op: nn.RMSNormRstdOp, args: PythonValues) -> PythonValues:
        (x,) = self.up(args)
        return self.rounded(op, torch.rsqrt(x.pow(2).mean(dim=-1) + prop(op, "eps")), f32=(0,))

    @impl(nn.RMSNormGradOp)
    def run_rms_norm_grad(self, interpreter: Interpreter, op: nn.RMSNormGradOp, args: PythonValues) -> PythonValues:
        a = self.up(args)
        # dw = sum_rows(dy * n) does not read w; dx reads the applied weight w + offset
        return self.rounded(op, *_rms_norm_grad(a[0], a[1], a[2] + nn.norm_offset(op), a[3], a[4] if len(a) > 4 else None))

    @impl(nn.RowDotOp)
    def run_row_dot(self, interpreter: Interpreter, op: nn.RowDotOp, args: PythonValues) -> PythonValues:
        a, b = self.up(args)
        return self.rounded(op, (a * b).sum(dim=-1), f32=(0,))

    @impl(nn.LayerNormStatsOp)
    def run_layer_norm_stats(self, interpreter: Interpreter, op: nn.LayerNormStatsOp, args: PythonValues) -> PythonValues:
        (x,) = self.up(args)
        mean = x.mean(dim=-1)
        var = (x - mean[:, None]).pow(2).mean(dim=-1)
        return self.rounded(op, mean, torch.rsqrt(var + prop(op, "eps")), f32=(0, 1))

    @impl(nn.LayerNormGradOp)
    def run_layer_norm_grad(self, interpreter: Interpreter, op: nn.LayerNormGradOp, args: PythonValues) -> PythonValues:
        dy, x, w, mean, r = self.up(args)
        n = (x - mean[:, None]) * r[:, None]
        q = dy * w
        dx = r[:, None] * (q - q.mean(dim=-1, keepdim=True) - n * (q * n).mean(dim=-1, keepdim=True))
        return self.rounded(op, dx, (dy * n).sum(dim=0), dy.sum(dim=0))

    @impl(nn.HeadRMSNormGradOp)
    def run_head_rms_norm_grad(self, interpreter: Interpreter, op: nn.HeadRMSNormGradOp, args: PythonValues) -> PythonValues:
        dy, x, *weights = self.up(args)
        # dw = sum(dy * n) does not read w; dx reads the applied weight w + offset
        groups = [(w + nn.norm_offset(op), first, heads) for w, (_, first, heads) in zip(weights, nn.head_weight_groups(op))]
        return self.rounded(op, *_head_rms_norm_grad(dy, x, groups, prop(op, "head_dim"), prop(op, "eps")))

    @impl(nn.ZerosOp)
    def run_zeros(self, interpreter: Interpreter, op: nn.ZerosOp, args: PythonValues) -> PythonValues:
        return self.rounded(op, torch.zeros(tuple(op.results[0].type.get_shape()), dtype=self.internal))  # type: ignore[attr-defined]

    @impl(nn.RMSNormApplyOp)
    def run_rms_norm_apply(self, interpreter: Interpreter, op: nn.RMSNormApplyOp, args: PythonValues) -> PythonValues:
        x, w, r = self.up(args)
        return self.rounded(op, x * r[:, None] * (w + nn.norm_offset(op)))

    @impl(nn.LayerNormApplyOp)
    def run_layer_norm_apply(self, interpreter: Interpreter, op: nn.LayerNormApplyOp, args: PythonValues) -> PythonValues:
        x, w, b, mean, r = self.up(args)
        return self.rounded(op, (x - mean[:, None]) * r[:, None] * w + b)

    @impl(nn.CrossEntropyGradOp)
    def run_cross_entropy_grad(self, interpreter: Interpreter, op: nn.CrossEntropyGradOp, args: PythonValues) -> PythonValues:
        # the semantics: from the logits (a saved lse operand is what a kernel reads instead of
        # folding the logits again; the reference does not need it)
        logits, targets, dloss = self.up(args)[:3]
        cap = op.cap()
        if cap is None:
            return self.rounded(op, _cross_entropy_logits_grad(op, logits, targets, dloss))
        t = torch.tanh(logits / cap)  # the operand is the soft-cap's input
        return self.rounded(op, _cross_entropy_logits_grad(op, cap * t, targets, dloss) * (1 - t * t))

    @impl(nn.LinearCrossEntropyGradOp)
    def run_linear_cross_entropy_grad(self, interpreter: Interpreter, op: nn.LinearCrossEntropyGradOp,
                                      args: PythonValues) -> PythonValues:
        # the semantics, whole (the chunking is how a kernel schedules it: the sums per element
        # are the same); like nn.cross_entropy_grad, from the logits, not the saved lse
        h, w, targets, dloss, lse = self.up(args)[:5]
        z = (h @ w.T) * op.scale_factor()
        cap = op.cap()
        logits = z if cap is None else cap * torch.tanh(z / cap)
        shard = nn.vocab_shard_of(op)
        if shard is None:
            dl = _cross_entropy_logits_grad(op, logits, targets, dloss)
        else:  # one vocabulary shard: the softmax from the whole vocabulary's lse (an operand)
            dl = _cross_entropy_logits_grad(op, logits, targets, dloss, lse.to(logits.dtype), *shard)
        if cap is not None:
            dl = dl * (1 - torch.tanh(z / cap).pow(2))
        dz = dl * op.scale_factor()
        return self.rounded(op, dz @ w, dz.T @ h)

    # ------------------------------------------------------------------ whole-model ops

    @impl(nn.EmbeddingOp)
    def run_embedding(self, interpreter: Interpreter, op: nn.EmbeddingOp, args: PythonValues) -> PythonValues:
        ids, w = self.up(args)
        return self.rounded(op, w[checked_ids(ids, w.shape[0], op)])

    @impl(nn.EmbeddingGradOp)
    def run_embedding_grad(self, interpreter: Interpreter, op: nn.EmbeddingGradOp, args: PythonValues) -> PythonValues:
        dy, ids = self.up(args)
        v = op.results[0].type.get_shape()[0]  # type: ignore[attr-defined]
        return self.rounded(op, torch.zeros((v, dy.shape[1]), dtype=dy.dtype).index_add_(0, checked_ids(ids, v, op), dy))

    @impl(nn.AttentionOp)
    def run_attention(self, interpreter: Interpreter, op: nn.AttentionOp, args: PythonValues) -> PythonValues:
        qkv, *segments = self.up(args)
        out, _ = attention_reference(qkv, op, *segments)
        return self.rounded(op, out)

    @impl(nn.AttentionFwdOp)
    def run_attention_fwd(self, interpreter: Interpreter, op: nn.AttentionFwdOp, args: PythonValues) -> PythonValues:
        qkv, *segments = self.up(args)
        return self.rounded(op, *attention_reference(qkv, op, *segments), f32=(1,))

    @impl(nn.AttentionGradOp)
    def run_attention_grad(self, interpreter: Interpreter, op: nn.AttentionGradOp, args: PythonValues) -> PythonValues:
        # the semantics of the gradient: recomputed from qkv (the saved output and log-sum-exp
        # are what a kernel reads; the reference does not need them)
        a = self.up(args)
        qkv = a[0].detach().requires_grad_(True)
        with torch.enable_grad():
            out, _ = attention_reference(qkv, op, *a[4:])
            (grad,) = torch.autograd.grad(out, qkv, a[3])
        return self.rounded(op, grad)

    @impl(nn.ConcatOp)
    def run_concat(self, interpreter: Interpreter, op: nn.ConcatOp, args: PythonValues) -> PythonValues:
        return self.rounded(op, torch.cat(self.up(args), dim=prop(op, "axis")))

    @impl(nn.SliceOp)
    def run_slice(self, interpreter: Interpreter, op: nn.SliceOp, args: PythonValues) -> PythonValues:
        (x,) = self.up(args)
        axis = prop(op, "axis")
        size = op.results[0].type.get_shape()[axis]  # type: ignore[attr-defined]
        return self.rounded(op, x.narrow(axis, prop(op, "start"), size))


@dataclass
class _Trace(Interpreter.Listener):
    """Calls `fn(op, result)` for every result of every op interpreted."""

    fn: Callable[[Operation, torch.Tensor], None]

    def did_interpret_op(self, op: Operation, results: PythonValues) -> None:
        for result in results:
            self.fn(op, result)


@dataclass
class _Current(Interpreter.Listener):
    """The op being interpreted (named by the error a failing op raises)."""

    op: Operation | None = None

    def will_interpret_op(self, op: Operation, args: PythonValues) -> None:
        self.op = op


def nn_interpreter(
    module: ModuleOp, compute_dtype: torch.dtype | None = None, listeners: Sequence[Interpreter.Listener] = ()
) -> Interpreter:
    """An xDSL `Interpreter` of `module` with the nn and func impls."""
    interpreter = Interpreter(module, listeners=tuple(listeners))
    interpreter.register_implementations(FuncFunctions())
    interpreter.register_implementations(NnFunctions(compute_dtype))
    return interpreter


def _check_ops(fn: func.FuncOp, module: ModuleOp) -> None:
    """Every op `fn` runs (through calls too) has a rule: nn ops, `func.return`, `func.call`."""
    seen: set[func.FuncOp] = set()
    todo = [fn]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        for op in f.body.walk():
            if isinstance(op, func.CallOp):
                callee = SymbolTable.lookup_symbol(module, op.callee)
                if isinstance(callee, func.FuncOp):
                    todo.append(callee)
                    continue
            if not op.name.startswith("nn.") and not isinstance(op, (func.ReturnOp, func.CallOp)):
                raise CompileError(str(Diagnostic(
                    op, "is not an nn op: the nn reference interpreter runs nn ops (and func.return, func.call) only"
                )))


def run_nn(
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
    Autograd flows through it (inputs that require grad keep their graph)."""
    fn = load_func(module_or_func, func_name)
    check_input_count(fn, inputs)
    module = fn.parent_op()
    if not isinstance(module, ModuleOp):
        module = ModuleOp([])  # a detached function: only symbol look-ups need the module
    _check_ops(fn, module)
    functions = NnFunctions(compute_dtype)
    args = tuple(functions.convert_input(a, v, i) for i, (a, v) in enumerate(zip(fn.body.blocks[0].args, inputs)))
    current = _Current()
    listeners: list[Interpreter.Listener] = [current] + ([_Trace(trace)] if trace is not None else [])
    interpreter = nn_interpreter(module, compute_dtype, listeners)
    try:
        return list(interpreter.call_op(fn, args))
    except CodaError:
        raise
    except Exception as error:
        doing = f"interpreting {_where(current.op)}" if current.op is not None else f"interpreting @{fn.sym_name.data}"
        raise internal_error(error, doing) from error
