"""Opaque attention for generated host code: `nn.attention` runs PyTorch's own SDPA kernels.

Attention is never fused into a GEMM epilogue (NN_DIALECT.md): the compiler fuses everything
around it and calls these two functions, which generated modules import. The forward returns
the attention output and the per-(sequence, head, row) log-sum-exp that the backward needs, so
the backward never recomputes the forward.

Layout: `qkv` is `[M, (H + 2 KV) * hd]` with `M = B * S` rows (B sequences of S consecutive
rows); q, k and v are strided views `[B, heads, S, hd]` of it (no copies). The output is
`[M, H * hd]`; the log-sum-exp is a flat fp32 vector of `B * H * S` in the backend's own order
(only `attention_backward` reads it).

Backend: on CUDA the one SDPA itself picks (`torch._fused_sdp_choice`, with GQA enabled), so
coda-ir runs the same attention kernel as a Hugging Face model (on the H100: cuDNN, which takes
GQA k/v and the strided packed views directly, bench/RESULTS.md 2026-11-23). cuDNN and flash
are called through their aten ops; any other choice (fp32, odd head dims, CPU) runs an exact
fp32 math path. By default the cuDNN and flash backward passes are not bitwise reproducible (their
dq accumulation): the one exception to coda-ir's determinism, and the same kernels the baselines
use. Under `torch.use_deterministic_algorithms(True)` SDPA's choice leaves cuDNN out and flash (the
varlen kernels too) runs its deterministic backward; `backend` follows that choice, so every
gradient repeats bitwise (bench/check_determinism.py; README "Reproducible steps").

Extensions (the optional properties and operand of `nn.attention`): `scale` rides along to the
same SDPA kernels. A sliding `window`, a `softcap` or `segments` (documents and padding rows,
coda_ir/dialects/nn.py) change the mask or the scores. On CUDA, whole documents (no padding id,
each document one run of its row) and windows run flash-attention's varlen kernels from the
documents' cumulative lengths (`document_layout`, `varlen_forward` / `varlen_backward`: no mask,
and a backward from the forward's log-sum-exp; bench/RESULTS.md session 19: a padded LLaMA-1B
step 1.53x -> 1.20x its limit). The rest (a softcap, padding rows) runs PyTorch's FlexAttention
(`torch.nn.attention.flex_attention`, compiled once per process, a `BlockMask` built from the
mask and a `score_mod` for the softcap; `flex_forward` / `flex_backward`); its backward recomputes
the forward under autograd (the public API saves no state across the two calls), so a masked
step costs one more attention forward than a plain one; except a softcap without documents or
padding rows, whose backward runs from Flex's log-sum-exp with the scores materialized
(`materialized_backward`: cuBLAS GEMMs, one Inductor-fused pass, no forward rerun). On the CPU they run the fp32 math path
with the mask (`math_forward` / `math_backward`). A query row that sees no key (left padding
before the first token) gets output 0 and log-sum-exp -inf, and passes no gradient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from coda_ir.errors import InternalError

MATH, FLASH, CUDNN = 0, 1, 3


def _views(qkv: torch.Tensor, heads: int, kv_heads: int, head_dim: int, seq_len: int):
    m, width = qkv.shape
    b = m // seq_len
    packed = qkv.view(b, seq_len, heads + 2 * kv_heads, head_dim)
    q = packed[:, :, :heads].transpose(1, 2)
    k = packed[:, :, heads : heads + kv_heads].transpose(1, 2)
    v = packed[:, :, heads + kv_heads :].transpose(1, 2)
    return q, k, v


def backend(qkv: torch.Tensor, heads: int, kv_heads: int, head_dim: int, seq_len: int, causal: bool,
            scale: float | None = None) -> int:
    """The SDPA backend these shapes run on (torch.nn.attention.SDPBackend values)."""
    if qkv.device.type != "cuda":
        return MATH
    q, k, v = _views(qkv, heads, kv_heads, head_dim, seq_len)
    choice = int(torch._fused_sdp_choice(q, k, v, None, 0.0, causal, scale=scale, enable_gqa=True))
    return choice if choice in (FLASH, CUDNN) else MATH


def _flat_rows(out: torch.Tensor) -> torch.Tensor:
    """[B, H, S, hd] -> [B * S, H * hd]."""
    b, h, s, d = out.shape
    return out.transpose(1, 2).reshape(b * s, h * d)


def visible_keys(b: int, seq: int, causal: bool, window: int, segments: torch.Tensor | None,
                 device: torch.device) -> torch.Tensor | None:
    """[B, 1, S, S] bool: which key rows each query row sees (None: all), as nn.attention
    defines it: causal (`j <= i`), the sliding window (`i - j < window`), and with `segments`
    a non-padding key (id >= 0) of the query's own document, or any non-padding key for a
    padding query (id < 0). (The reference interpreter's `attention_visible` is written
    separately; both are tested against a row-by-row definition.)"""
    i = torch.arange(seq, device=device)
    rel = i[:, None] - i[None, :]
    visible = rel >= 0 if causal else None
    if window:
        visible = rel < window if visible is None else visible & (rel < window)
    if visible is not None:
        visible = visible.expand(b, 1, seq, seq)
    if segments is not None:
        seg = segments.view(b, seq)
        sq, sk = seg[:, None, :, None], seg[:, None, None, :]
        same = (sk >= 0) & ((sq == sk) | (sq < 0))
        visible = same if visible is None else visible & same
    return visible


def _scores(qf, kf, scale: float, softcap: float):
    """Scaled (and soft-capped) scores and, with a softcap, tanh of them (for the backward)."""
    scores = (qf @ kf.transpose(-1, -2)) * scale
    if not softcap:
        return scores, None
    t = torch.tanh(scores / softcap)
    return t * softcap, t


def math_forward(q, k, v, causal: bool, scale: float | None = None, window: int = 0, softcap: float = 0.0,
                 segments: torch.Tensor | None = None):
    """The exact fp32 path: (out [B, H, S, hd] in q's dtype, lse [B, H, S] fp32)."""
    group = q.shape[1] // k.shape[1]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    qf, kf, vf = q.float(), k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1)
    scores, _ = _scores(qf, kf, scale, softcap)
    b, s = q.shape[0], q.shape[2]
    visible = visible_keys(b, s, causal, window, segments, q.device)
    if visible is None:
        lse = torch.logsumexp(scores, dim=-1)
        return (torch.exp(scores - lse[..., None]) @ vf).to(q.dtype), lse
    scores = scores.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    # a row that sees no key: lse -inf; its weights exp(-inf - inf) are 0, its output 0
    p = torch.exp(scores - _finite_or_inf(lse)[..., None])
    return (p @ vf).to(q.dtype), lse


def _finite_or_inf(lse: torch.Tensor) -> torch.Tensor:
    """The log-sum-exp to subtract: +inf for a row that sees no key (so its weights are 0, not nan)."""
    return lse.masked_fill(lse == float("-inf"), float("inf"))


def math_backward(dout, q, k, v, out, lse, causal: bool, scale: float | None = None, window: int = 0,
                  softcap: float = 0.0, segments: torch.Tensor | None = None):
    """(dq, dk, dv) of the exact fp32 path from the forward's output and log-sum-exp."""
    group = q.shape[1] // k.shape[1]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    qf, kf, vf = q.float(), k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1)
    do, of = dout.float(), out.float()
    scores, t = _scores(qf, kf, scale, softcap)
    b, s = q.shape[0], q.shape[2]
    visible = visible_keys(b, s, causal, window, segments, q.device)
    if visible is not None:
        scores = scores.masked_fill(~visible, float("-inf"))
    p = torch.exp(scores - _finite_or_inf(lse)[..., None])
    dv = p.transpose(-1, -2) @ do
    dp = do @ vf.transpose(-1, -2)
    ds = p * (dp - (do * of).sum(-1, keepdim=True))
    if t is not None:  # d(c tanh(x / c)) / dx = 1 - tanh^2
        ds = ds * (1 - t * t)
    dq = (ds @ kf) * scale
    dk = (ds.transpose(-1, -2) @ qf) * scale
    b, h, s, d = dk.shape
    dk = dk.view(b, h // group, group, s, d).sum(2)
    dv = dv.view(b, h // group, group, s, d).sum(2)
    return dq, dk, dv


# ------------------------------------------------------------------ documents by sequence lengths (CUDA)
# A batch whose every row lies in a document (no padding id), each document one contiguous run
# of its row, is a set of variable-length sequences: flash-attention's varlen kernels run it
# from the documents' cumulative lengths (no mask, no block skipping to compute, and a backward
# that takes the forward's log-sum-exp instead of recomputing the forward as FlexAttention's
# public API does). A sliding window rides along (flash's left window); a softcap does not (no
# score_mod in flash), so a soft-capped attention stays on FlexAttention.


@dataclass(frozen=True)
class DocumentLayout:
    """The documents of a segments tensor as flash-attention's varlen kernels take them:
    `cu` [documents + 1] int32 cumulative lengths over the flattened rows, `longest` the
    longest document. Only for segments whose every row lies in a document (id >= 0) and whose
    ids never decrease along a row (each document one contiguous run)."""

    cu: torch.Tensor
    longest: int


_LAYOUTS: list = []  # the last few [(segments, its version, b, seq), DocumentLayout | None]
_LAYOUTS_KEPT = 4  # a step's forward and (checkpointed) backward see the same one or two tensors


def document_layout(segments: torch.Tensor, b: int, seq: int) -> DocumentLayout | None:
    """The varlen layout of `segments` [b * seq], or None where a row holds padding (id < 0) or
    a document id that returns after another (its rows not one run): those keep the mask.
    One device-to-host read of three numbers per segments tensor (kept with the tensor itself,
    so every layer of a step reads it once; `from_hf` asks for it before the step's kernels)."""
    key = (segments, segments._version, b, seq)
    for entry in _LAYOUTS:
        if entry[0][0] is segments and entry[0][1:] == key[1:]:
            return entry[1]
    seg = segments.view(b, seq)
    starts = torch.ones(b, seq, dtype=torch.bool, device=segments.device)
    starts[:, 1:] = seg[:, 1:] != seg[:, :-1]
    starts = starts.reshape(-1)
    run = starts.to(torch.int64).cumsum(0) - 1  # each row's document, counted over the batch
    lengths = torch.zeros(b * seq, dtype=torch.int64, device=segments.device).scatter_add_(
        0, run, torch.ones_like(run))  # integer adds: exact in any order
    ordered = (seg >= 0).all() & (seg[:, 1:] >= seg[:, :-1]).all()
    usable, documents, longest = torch.stack([ordered.to(torch.int64), starts.sum(), lengths.max()]).tolist()
    layout = None
    if usable:
        cu = torch.zeros(b * seq + 1, dtype=torch.int32, device=segments.device)
        cu[1:] = lengths.cumsum(0)
        layout = DocumentLayout(cu[: documents + 1], int(longest))
    _LAYOUTS.insert(0, (key, layout))
    del _LAYOUTS[_LAYOUTS_KEPT:]
    return layout


def _varlen_kernels_take(qkv: torch.Tensor, head_dim: int, softcap: float) -> bool:
    """flash-attention's varlen kernels run this attention: CUDA (sm80+), 16-bit, a head_dim
    they are built for, no softcap (flash takes no score_mod)."""
    return (qkv.device.type == "cuda" and not softcap and qkv.dtype in (torch.bfloat16, torch.float16)
            and head_dim % 8 == 0 and head_dim <= 256 and torch.backends.cuda.flash_sdp_enabled()
            and torch.cuda.get_device_capability(qkv.device)[0] >= 8
            and hasattr(torch.ops.aten, "_flash_attention_forward"))


def varlen_layout(qkv: torch.Tensor, head_dim: int, seq_len: int, window: int, softcap: float,
                  segments: torch.Tensor | None) -> DocumentLayout | None:
    """The layout the varlen kernels run this masked attention with, or None (FlexAttention).
    Without segments (a sliding window over whole rows) every row is one document."""
    if not _varlen_kernels_take(qkv, head_dim, softcap):
        return None
    m = qkv.shape[0]
    if segments is None:
        cu = torch.arange(0, m + 1, seq_len, dtype=torch.int32, device=qkv.device)
        return DocumentLayout(cu, seq_len)
    return document_layout(segments, m // seq_len, seq_len)


def _flash_window(window: int, causal: bool) -> tuple[int, int]:
    """nn.attention's window (query i sees keys j with i - j < window) as flash's (left, right)
    key reach; -1 is unbounded."""
    return (window - 1 if window else -1), (0 if causal else -1)


def _row_views(qkv: torch.Tensor, heads: int, kv_heads: int, head_dim: int):
    """q, k, v as [M, heads, hd] strided views of the packed rows (what varlen kernels take)."""
    packed = qkv.view(qkv.shape[0], heads + 2 * kv_heads, head_dim)
    return packed[:, :heads], packed[:, heads : heads + kv_heads], packed[:, heads + kv_heads :]


def varlen_forward(qkv, heads: int, kv_heads: int, head_dim: int, causal: bool, scale, window: int,
                   layout: DocumentLayout):
    """(out [M, H * hd], lse flat fp32 [H * M]) by flash-attention's varlen forward."""
    q, k, v = _row_views(qkv, heads, kv_heads, head_dim)
    left, right = _flash_window(window, causal)
    out, lse = torch.ops.aten._flash_attention_forward(
        q, k, v, layout.cu, layout.cu, layout.longest, layout.longest, 0.0, causal, False, scale=scale,
        window_size_left=left, window_size_right=right)[:2]
    if lse.numel() != heads * qkv.shape[0]:
        raise InternalError(f"flash-attention's varlen forward returned a log-sum-exp of shape {list(lse.shape)}, "
                            f"not [{heads}, {qkv.shape[0]}] (this PyTorch's flash kernels pad it per document)")
    return out.reshape(qkv.shape[0], heads * head_dim), lse.reshape(-1).float()


def varlen_backward(qkv, out, lse, dout, heads: int, kv_heads: int, head_dim: int, causal: bool, scale,
                    window: int, layout: DocumentLayout) -> torch.Tensor:
    """d(qkv) by flash-attention's varlen backward from the forward's output and log-sum-exp."""
    m = qkv.shape[0]
    q, k, v = _row_views(qkv, heads, kv_heads, head_dim)
    o, do = out.view(m, heads, head_dim), dout.reshape(m, heads, head_dim).contiguous()
    left, right = _flash_window(window, causal)
    state = torch.zeros(2, dtype=torch.int64, device=qkv.device)
    empty = torch.empty(0, dtype=torch.int64, device=qkv.device)
    dq, dk, dv = torch.ops.aten._flash_attention_backward(
        do, q, k, v, o, lse.view(heads, m), layout.cu, layout.cu, layout.longest, layout.longest, 0.0, causal,
        state, empty, scale=scale, window_size_left=left, window_size_right=right)
    return torch.cat([dq.reshape(m, -1), dk.reshape(m, -1), dv.reshape(m, -1)], dim=1).to(qkv.dtype)


# ----------------------------------------------------------------------------- FlexAttention (CUDA)

_FLEX = None


FLEX_SPECIALIZATIONS = 512
"""How many FlexAttention specializations (shapes, masks, score mods) one process may compile.
Dynamo's default (`recompile_limit`, 8) is per code object and, with `fullgraph=True`, a hard
failure past it: a process that had run eight attention shapes through Flex (buckets of token
counts, window and softcap variants of a model's layers, a benchmark's cases) failed its ninth
(`FailOnRecompileLimitHit`, bench/RESULTS.md session 19). Each shape compiles once, as every
coda-ir kernel does."""


def _flex():
    """FlexAttention compiled once per process (uncompiled it is a slow reference path), with
    room for FLEX_SPECIALIZATIONS shapes."""
    global _FLEX
    if _FLEX is None:
        from torch.nn.attention.flex_attention import flex_attention

        compiled = torch.compile(flex_attention, dynamic=False, fullgraph=True)

        def call(*args, **kwargs):
            import torch._dynamo.config as dynamo_config

            with dynamo_config.patch(recompile_limit=FLEX_SPECIALIZATIONS,
                                     accumulated_recompile_limit=8 * FLEX_SPECIALIZATIONS):
                return compiled(*args, **kwargs)

        _FLEX = call
    return _FLEX


_BLOCK_MASK: list = []  # [(segments, its version, b, seq, causal, window, device), BlockMask]


def flex_block_mask(b: int, seq: int, causal: bool, window: int, segments: torch.Tensor | None, device):
    """The BlockMask of nn.attention's mask (causal, window, documents and padding rows). Every
    layer of a step masks with the same segments tensor: the last mask is kept (with the tensor
    itself, so that its identity cannot pass to a new one) and reused while it is unchanged."""
    key = (segments, None if segments is None else segments._version, b, seq, causal, window, str(device))
    if _BLOCK_MASK and len(_BLOCK_MASK[0]) == len(key) and all(
            a is c if i == 0 else a == c for i, (a, c) in enumerate(zip(_BLOCK_MASK[0], key))):
        return _BLOCK_MASK[1]
    mask = _make_block_mask(b, seq, causal, window, segments, device)
    _BLOCK_MASK[:] = [key, mask]
    return mask


def _make_block_mask(b: int, seq: int, causal: bool, window: int, segments: torch.Tensor | None, device):
    from torch.nn.attention.flex_attention import create_block_mask

    seg = segments.view(b, seq) if segments is not None else None

    def mask_mod(bi, hi, qi, ki):
        ok = qi >= 0
        if causal:
            ok = ok & (ki <= qi)
        if window:
            ok = ok & (qi - ki < window)
        if seg is not None:
            sq, sk = seg[bi, qi], seg[bi, ki]
            ok = ok & (sk >= 0) & ((sq == sk) | (sq < 0))
        return ok

    return create_block_mask(mask_mod, b if seg is not None else None, None, seq, seq, device=device)


def _flex_call(q, k, v, causal, scale, window, softcap, segments, lse: bool):
    block_mask = flex_block_mask(q.shape[0], q.shape[2], causal, window, segments, q.device)
    score_mod = None
    if softcap:
        def score_mod(score, bi, hi, qi, ki):
            return softcap * torch.tanh(score / softcap)
    if not lse:
        return _flex()(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale, enable_gqa=True)
    try:
        from torch.nn.attention.flex_attention import AuxRequest
    except ImportError:  # PyTorch before `return_aux`: the (out, lse) pair
        return _flex()(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale, enable_gqa=True,
                       return_lse=True)
    out, aux = _flex()(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale, enable_gqa=True,
                       return_aux=AuxRequest(lse=True))
    return out, aux.lse


def flex_forward(q, k, v, causal: bool, scale, window: int, softcap: float, segments):
    """(out [B, H, S, hd], lse [B, H, S] fp32: natural log, -inf for a row that sees no key) by
    FlexAttention."""
    return _flex_call(q, k, v, causal, scale, window, softcap, segments, lse=True)


def flex_backward(do, q, k, v, causal: bool, scale, window: int, softcap: float, segments):
    """(dq, dk, dv) by FlexAttention's own backward, the forward recomputed under autograd."""
    with torch.enable_grad():
        q, k, v = (t.detach().requires_grad_(True) for t in (q, k, v))
        out = _flex_call(q, k, v, causal, scale, window, softcap, segments, lse=False)
        return torch.autograd.grad(out, (q, k, v), do)


# ------------------------------------------------------------------ soft-capped scores, materialized (CUDA)
# FlexAttention runs a soft-capped attention (Gemma2) with its generic tiled kernels, which at
# head_dim 256 pick small blocks (32 x 32 in the backward), and its public backward reruns the
# forward: 1.1 + 1.1 + 4.3 ms a Gemma2-2B layer (bench/RESULTS.md sessions 19 and 21). Its forward
# stays (1.1 ms; the scores materialized took 3.7: session 21); the backward runs from the
# forward's log-sum-exp with the scores materialized: GEMMs of PyTorch's own (cuBLAS, bf16
# operands, fp32 scores) and one fused pass (Inductor) for the cap, the mask and the softmax
# gradient, as torch.compile runs Hugging Face's eager attention. Row blocks bound the transient
# memory (`attention_model.MATERIALIZED_SCORE_BYTES`); under a causal mask a block's keys end at its
# last row.

_MATERIALIZED_PASSES: dict = {}


def _materialized_pass(name: str, fn):
    """`fn` compiled by Inductor once per process on CUDA (a fused elementwise + row-reduction
    pass over the scores), plain on the CPU (tests)."""
    def call(*args):
        if args[0].device.type != "cuda":
            return fn(*args)
        compiled = _MATERIALIZED_PASSES.get(name)
        if compiled is None:
            compiled = _MATERIALIZED_PASSES[name] = torch.compile(fn, dynamic=False, fullgraph=True)
        import torch._dynamo.config as dynamo_config

        with dynamo_config.patch(recompile_limit=FLEX_SPECIALIZATIONS,
                                 accumulated_recompile_limit=8 * FLEX_SPECIALIZATIONS):
            return compiled(*args)
    return call


def _capped_masked(s: torch.Tensor, rows: torch.Tensor, scale: float, softcap: float, causal: bool, window: int):
    """(x, t): the scaled, capped and masked scores (-inf where hidden) and tanh of the scaled
    scores over the cap (for the backward), from raw fp32 scores [g, R, S] of the query rows
    `rows` ([R, 1] int64 positions)."""
    t = torch.tanh(s * (scale / softcap))
    x = t * softcap
    if causal or window:
        j = torch.arange(s.shape[-1], device=s.device)[None, :]
        seen = (j <= rows) if causal else torch.ones_like(j, dtype=torch.bool) & (rows >= 0)
        if window:
            seen = seen & (rows - j < window)
        x = x.masked_fill(~seen, float("-inf"))
    return x, t


def _probs_and_score_grads(s, dp, lse, delta, rows, scale: float, softcap: float, causal: bool, window: int,
                           dtype: torch.dtype):
    """(p, ds) in `dtype`: p = softmax rows from the forward's lse; ds = d loss / d raw score =
    p (dp - delta) (1 - t^2) scale (the cap's derivative, then the scale's)."""
    x, t = _capped_masked(s, rows, scale, softcap, causal, window)
    p = torch.exp(x - lse[..., None])
    ds = p * (dp - delta[..., None]) * ((1 - t * t) * scale)
    return p.to(dtype), ds.to(dtype)


_grads_pass = _materialized_pass("grads", _probs_and_score_grads)

def _row_blocks(heads: int, n: int) -> list[tuple[int, int]]:
    """The materialized backward's blocks of query rows: the attention model's rule (one
    definition, the model prices what runs)."""
    from coda_ir.analysis.attention_model import materialized_row_blocks

    return materialized_row_blocks(heads, n)


def _fp32_bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b with fp32 results: bf16/f16 operands on cuBLAS with fp32 output (`out_dtype`) on
    CUDA, fp32 operands elsewhere."""
    if a.is_cuda and a.dtype != torch.float32:
        return torch.bmm(a, b, out_dtype=torch.float32)
    return torch.bmm(a.float(), b.float())


BMM_WRITES_F32 = hasattr(torch.ops.aten.bmm, "dtype")
"""Whether this PyTorch has `torch.bmm(a, b, out_dtype=torch.float32)` (cuBLAS with an fp32 output of
bf16/f16 operands, added with `gemm_launch.MM_WRITES_F32`'s `mm` overloads). Decided from the
operator's overloads, not by running one: a probe would synchronize (not allowed while a CUDA graph is
captured) and could fail for reasons of its own (out of memory), which would be remembered as a
missing feature."""


def materialized_available(q: torch.Tensor) -> bool:
    """Whether this PyTorch takes fp32 results of low-precision GEMMs (`torch.bmm(out_dtype=)`,
    CUDA), which the materialized path needs to keep its scores in fp32."""
    return q.dtype == torch.float32 or not q.is_cuda or BMM_WRITES_F32


def _stacked(t: torch.Tensor, kv: int, r0: int, r1: int) -> torch.Tensor:
    """Rows r0..r1 of [B, H, S, d] as [B * KV, group * (r1 - r0), d]: each kv head's query group
    stacked (a copy: the q/do views are strided)."""
    b, h, _, d = t.shape
    return t[:, :, r0:r1].reshape(b * kv, (h // kv) * (r1 - r0), d)


def materialized_backward(do, q, k, v, out, lse, causal: bool, scale: float | None, window: int, softcap: float):
    """(dq, dk, dv) of a soft-capped attention from its output and log-sum-exp (natural log,
    [B, H, S]: FlexAttention's forward gives it), with the scores materialized per block of
    query rows for every (sequence, kv head) at once: s = q k^T and dp = do v^T by cuBLAS (bf16
    operands, fp32 results), one fused pass for p = exp(cap(s) - lse) and ds = p (dp - delta)
    (1 - t^2) scale, then dq = ds k, dk += ds^T q, dv += p^T do (a kv head's query group is one
    GEMM over its stacked rows; dk, dv accumulate in fp32 over the row blocks)."""
    b, h, n, d = q.shape
    kv = k.shape[1]
    group = h // kv
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    delta = (do.float() * out.float()).sum(-1)  # [B, H, S]: rowsum(do * o)
    kb = k.reshape(b * kv, n, d)  # a copy of the strided view, once
    vb = v.reshape(b * kv, n, d)
    kt, vt = kb.transpose(1, 2), vb.transpose(1, 2)
    dq = torch.empty((b, kv, group, n, d), dtype=q.dtype, device=q.device)
    dk = torch.zeros((b * kv, n, d), dtype=torch.float32, device=k.device)
    dv = torch.zeros((b * kv, n, d), dtype=torch.float32, device=v.device)
    for r0, r1 in _row_blocks(b * h, n):
        keys = r1 if causal else n  # a causal block's rows see no key past its last row
        qb, dob = _stacked(q, kv, r0, r1), _stacked(do, kv, r0, r1)
        rows = torch.arange(r0, r1, device=q.device).repeat(group)[:, None]
        s = _fp32_bmm(qb, kt[:, :, :keys])
        dp = _fp32_bmm(dob, vt[:, :, :keys])
        p, ds = _grads_pass(s, dp, _stacked(lse[..., None], kv, r0, r1)[..., 0],
                            _stacked(delta[..., None], kv, r0, r1)[..., 0], rows, scale, softcap, causal, window,
                            q.dtype)
        del s, dp
        dq[:, :, :, r0:r1] = torch.bmm(ds, kb[:, :keys]).view(b, kv, group, r1 - r0, d)
        dk[:, :keys] += _fp32_bmm(ds.transpose(1, 2), qb)
        dv[:, :keys] += _fp32_bmm(p.transpose(1, 2), dob)
    return dq.view(b, h, n, d), dk.view(b, kv, n, d).to(k.dtype), dv.view(b, kv, n, d).to(v.dtype)


def _effective_window(window: int, seq_len: int, causal: bool) -> int:
    """A causal window of at least the call's sequence length hides no key (i - j < seq_len
    always): 0, so the plain fused kernels run. A program of run-time rows carries its window
    whenever some sequence length of its bucket could exceed it (`from_hf`), and the call's
    length decides here."""
    return 0 if causal and window >= seq_len else window


def _materialized(q: torch.Tensor, softcap: float, segments) -> bool:
    """A soft-capped attention without documents or padding rows runs its backward with
    materialized scores (cuBLAS + one fused pass from the forward's lse) rather than
    FlexAttention's (its head_dim-256 blocks and forward rerun: bench/RESULTS.md session 21),
    where this PyTorch keeps low-precision GEMM results in fp32."""
    return bool(softcap) and segments is None and materialized_available(q)


def _masked(window: int, softcap: float, segments) -> bool:
    """The mask or the scores differ from plain (causal) SDPA: not one of its fused kernels."""
    return bool(window) or bool(softcap) or segments is not None


def attention_forward(qkv: torch.Tensor, heads: int, kv_heads: int, head_dim: int, seq_len: int, causal: bool,
                      scale: float | None = None, window: int = 0, softcap: float = 0.0,
                      segments: torch.Tensor | None = None):
    """(output [M, H*hd] in qkv's dtype, log-sum-exp flat fp32 [B*H*S])."""
    window = _effective_window(window, seq_len, causal)
    q, k, v = _views(qkv, heads, kv_heads, head_dim, seq_len)
    if qkv.device.type == "cuda" and _masked(window, softcap, segments):
        layout = varlen_layout(qkv, head_dim, seq_len, window, softcap, segments)
        if layout is not None:
            return varlen_forward(qkv, heads, kv_heads, head_dim, causal, scale, window, layout)
        out, lse = flex_forward(q, k, v, causal, scale, window, softcap, segments)
        return _flat_rows(out), lse.reshape(-1).float()
    which = backend(qkv, heads, kv_heads, head_dim, seq_len, causal, scale) if not _masked(window, softcap, segments) else MATH
    if which == CUDNN:
        result = torch.ops.aten._scaled_dot_product_cudnn_attention(q, k, v, None, True, 0.0, causal, False, scale=scale)
        out, lse = result[0], result[1]
    elif which == FLASH:
        result = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, False, scale=scale)
        out, lse = result[0], result[1]
    else:
        out, lse = math_forward(q, k, v, causal, scale, window, softcap, segments)
    return _flat_rows(out), lse.reshape(-1).float()


def attention_forward_segments(qkv: torch.Tensor, segments: torch.Tensor, heads: int, kv_heads: int, head_dim: int,
                               seq_len: int, causal: bool, scale: float | None = None, window: int = 0,
                               softcap: float = 0.0):
    """`attention_forward` with the segments operand (generated code passes tensors first)."""
    return attention_forward(qkv, heads, kv_heads, head_dim, seq_len, causal, scale, window, softcap, segments)


def attention_backward(qkv: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, dout: torch.Tensor,
                       heads: int, kv_heads: int, head_dim: int, seq_len: int, causal: bool,
                       scale: float | None = None, window: int = 0, softcap: float = 0.0,
                       segments: torch.Tensor | None = None) -> torch.Tensor:
    """d(qkv) [M, (H + 2 KV) * hd] from the forward's output and log-sum-exp."""
    window = _effective_window(window, seq_len, causal)
    q, k, v = _views(qkv, heads, kv_heads, head_dim, seq_len)
    b = q.shape[0]
    o = out.view(b, seq_len, heads, head_dim).transpose(1, 2)
    do = dout.view(b, seq_len, heads, head_dim).transpose(1, 2)
    masked = _masked(window, softcap, segments)
    which = MATH if masked else backend(qkv, heads, kv_heads, head_dim, seq_len, causal, scale)
    # Without dropout the random-state tensors are not read; the forward returns them as one
    # (cuDNN: seed, offset) or two (flash: rng state) int64 values. `None` is an undefined tensor
    # (no bias, no cumulative sequence lengths of a nested batch), as the forward returns them.
    if masked and qkv.device.type == "cuda":
        layout = varlen_layout(qkv, head_dim, seq_len, window, softcap, segments)
        if layout is not None:
            return varlen_backward(qkv, out, lse, dout, heads, kv_heads, head_dim, causal, scale, window, layout)
        if _materialized(q, softcap, segments):
            dq, dk, dv = materialized_backward(do, q, k, v, o, lse.view(b, heads, seq_len), causal, scale, window,
                                               softcap)
        else:
            dq, dk, dv = flex_backward(do, q, k, v, causal, scale, window, softcap, segments)
    elif which == CUDNN:
        seed = torch.zeros(1, dtype=torch.int64, device=qkv.device)
        dq, dk, dv = torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
            do, q, k, v, o, lse.view(b, heads, seq_len, 1), seed, seed, None, None, None, seq_len, seq_len,
            0.0, causal, scale=scale)
    elif which == FLASH:
        state = torch.zeros(2, dtype=torch.int64, device=qkv.device)
        empty = torch.empty(0, dtype=torch.int64, device=qkv.device)
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_backward(
            do, q, k, v, o, lse.view(b, heads, seq_len), None, None, seq_len, seq_len, 0.0, causal, state, empty,
            scale=scale)
    else:
        dq, dk, dv = math_backward(do, q, k, v, o, lse.view(b, heads, seq_len), causal, scale, window, softcap, segments)
    dqkv = torch.cat([_flat_rows(dq), _flat_rows(dk), _flat_rows(dv)], dim=1)
    return dqkv.to(qkv.dtype)


def attention_backward_segments(qkv: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, dout: torch.Tensor,
                                segments: torch.Tensor, heads: int, kv_heads: int, head_dim: int, seq_len: int,
                                causal: bool, scale: float | None = None, window: int = 0,
                                softcap: float = 0.0) -> torch.Tensor:
    """`attention_backward` with the segments operand (generated code passes tensors first)."""
    return attention_backward(qkv, out, lse, dout, heads, kv_heads, head_dim, seq_len, causal, scale, window, softcap,
                              segments)
