"""nn.attention's optional properties (scale, window, softcap) and segments operand: the
reference interpreter, the CPU runtime (coda_ir.runtime.attention) and a compiled program,
each against an independent float64 attention written row by row from the op's definition.

Odd sizes: 2 sequences of 7 rows, 3 q heads over 1 kv head of head_dim 5.
"""

from __future__ import annotations

import math

import pytest
import torch

import coda_ir
import coda_ir.torch
from coda_ir.runtime.attention import attention_backward, attention_forward
from coda_ir.reference import run_reference
from coda_ir.testing import assert_matches

B, S, H, KV, HD = 2, 7, 3, 1, 5
M, N = B * S, (H + 2 * KV) * HD

# document ids per row: two packed documents in sequence 0, left padding (-1) and one document
# in sequence 1; and right padding
PACKED_LEFT_PAD = [0, 0, 0, 1, 1, 1, 1, -1, -1, 5, 5, 5, 5, 5]
RIGHT_PAD = [3, 3, 3, 3, 3, -1, -1, 0, 0, 0, 0, 0, 0, -1]

CASES = {
    "scale": dict(scale=0.37),
    "window": dict(window=3),
    "softcap": dict(softcap=1.5),
    "packed_left_padding": dict(segments=PACKED_LEFT_PAD),
    "right_padding": dict(segments=RIGHT_PAD),
    "all": dict(scale=0.8, window=2, softcap=2.0, segments=PACKED_LEFT_PAD),
}


def naive(qkv: torch.Tensor, causal=True, scale=None, window=0, softcap=0.0, segments=None) -> torch.Tensor:
    """The op's definition, one query row at a time, in float64 (differentiable)."""
    p = qkv.double().reshape(B, S, H + 2 * KV, HD)
    scale = 1 / math.sqrt(HD) if scale is None else scale
    rows = []
    for b in range(B):
        for i in range(S):
            heads = []
            for h in range(H):
                g = h // (H // KV)
                q, k, v = p[b, i, h], p[b, :, H + g], p[b, :, H + KV + g]
                seen = []
                for j in range(S):
                    ok = (not causal or j <= i) and (not window or i - j < window)
                    if segments is not None:
                        sq, sk = segments[b * S + i], segments[b * S + j]
                        ok = ok and sk >= 0 and (sq == sk or sq < 0)
                    if ok:
                        seen.append(j)
                if not seen:
                    heads.append(torch.zeros(HD, dtype=torch.float64))
                    continue
                s = (k[seen] @ q) * scale
                if softcap:
                    s = softcap * torch.tanh(s / softcap)
                heads.append(torch.softmax(s, 0) @ v[seen])
            rows.append(torch.cat(heads))
    return torch.stack(rows)


def props(causal=True, scale=None, window=0, softcap=0.0, segments=None) -> str:
    text = f"heads = {H} : i64, kv_heads = {KV} : i64, head_dim = {HD} : i64, seq_len = {S} : i64, causal = {str(causal).lower()}"
    if scale is not None:
        text += f", scale = {scale:.9e} : f32"
    if window:
        text += f", window = {window} : i64"
    if softcap:
        text += f", softcap = {softcap:.9e} : f32"
    return text


def f32(x: float | None) -> float | None:
    """The f32 value of a property (what the op means by `0.37 : f32`)."""
    return None if x is None else float(torch.tensor(x, dtype=torch.float32))


def inputs(seed: int, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(M, N, generator=g).to(dtype)
    dout = torch.randn(M, H * HD, generator=g).to(dtype)
    return qkv, dout


def reference64(qkv, dout, case):
    opts = dict(case, scale=f32(case.get("scale")), softcap=f32(case.get("softcap", 0.0)))
    leaf = qkv.double().requires_grad_(True)
    out = naive(leaf, **opts)
    (grad,) = torch.autograd.grad(out, leaf, dout.double())
    return out.detach(), grad


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference_interpreter_is_the_definition(name):
    case = CASES[name]
    qkv, dout = inputs(1)
    seg = case.get("segments")
    args = [qkv] + ([torch.tensor(seg, dtype=torch.int32)] if seg is not None else [])
    seg_arg, seg_type, seg_use = ((", %seg: tensor<14xi32>", ", tensor<14xi32>", ", %seg") if seg is not None else ("", "", ""))
    text = (f"func.func @f(%qkv: tensor<{M}x{N}xf32>{seg_arg}, %dy: tensor<{M}x{H * HD}xf32>) -> (tensor<{M}x{H * HD}xf32>, tensor<{M}x{N}xf32>) {{\n"
            f'  %y, %lse = "nn.attention_fwd"(%qkv{seg_use}) <{{{props(**case)}}}> : (tensor<{M}x{N}xf32>{seg_type}) -> (tensor<{M}x{H * HD}xf32>, tensor<{M * H}xf32>)\n'
            f'  %g = "nn.attention_grad"(%qkv, %y, %lse, %dy{seg_use}) <{{{props(**case)}}}> : (tensor<{M}x{N}xf32>, tensor<{M}x{H * HD}xf32>, tensor<{M * H}xf32>, tensor<{M}x{H * HD}xf32>{seg_type}) -> tensor<{M}x{N}xf32>\n'
            f"  func.return %y, %g : tensor<{M}x{H * HD}xf32>, tensor<{M}x{N}xf32>\n}}\n")
    out, grad = run_reference(text, args + [dout], torch.float64)
    want_out, want_grad = reference64(qkv, dout, case)
    torch.testing.assert_close(out, want_out, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grad, want_grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu_runtime_forward_and_backward(name):
    case = CASES[name]
    qkv, dout = inputs(2)
    seg = case.get("segments")
    segments = torch.tensor(seg, dtype=torch.int32) if seg is not None else None
    scale, softcap = f32(case.get("scale")), f32(case.get("softcap", 0.0))
    out, lse = attention_forward(qkv, H, KV, HD, S, True, scale, case.get("window", 0), softcap, segments)
    assert lse.dtype == torch.float32 and lse.shape == (M * H,)
    dqkv = attention_backward(qkv, out, lse, dout, H, KV, HD, S, True, scale, case.get("window", 0), softcap, segments)
    want_out, want_grad = reference64(qkv, dout, case)
    assert torch.isfinite(out).all() and torch.isfinite(dqkv).all()
    torch.testing.assert_close(out.double(), want_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dqkv.double(), want_grad, rtol=1e-5, atol=1e-5)


def test_a_row_that_sees_no_key_has_output_zero_and_passes_no_gradient():
    qkv, dout = inputs(3)
    segments = torch.tensor(PACKED_LEFT_PAD, dtype=torch.int32)
    out, lse = attention_forward(qkv, H, KV, HD, S, True, segments=segments)
    pad = [7, 8]  # sequence 1's two left-padding rows see no key (causal, no non-padding key before them)
    assert (out[pad] == 0).all()
    assert torch.isneginf(lse.view(B, H, S)[1, :, :2]).all()
    dqkv = attention_backward(qkv, out, lse, dout, H, KV, HD, S, True, segments=segments)
    assert (dqkv[pad, : H * HD] == 0).all()  # their queries get no gradient
    assert (dqkv[pad, H * HD:] == 0).all()  # and as padding keys nobody reads them


def test_plain_call_is_unchanged():
    """Defaults spelled out give the plain call's numbers exactly (the same math)."""
    qkv, dout = inputs(4)
    out, lse = attention_forward(qkv, H, KV, HD, S, True)
    out2, lse2 = attention_forward(qkv, H, KV, HD, S, True, None, 0, 0.0, None)
    assert torch.equal(out, out2) and torch.equal(lse, lse2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_program_with_every_extension_meets_the_bar(dtype):
    """nn-autodiff carries the properties and the segments to attention_fwd / attention_grad, and
    nn-to-coda to the library call: a compiled program (a projection, attention with every
    extension, a projection) against the float64 reference, forward and every gradient."""
    e = {torch.float32: "f32", torch.bfloat16: "bf16"}[dtype]
    case = CASES["all"]
    D = 8
    text = (f"func.func @f(%x: tensor<{M}x{D}x{e}>, %seg: tensor<{M}xi32>, %w: tensor<{N}x{D}x{e}>, %wo: tensor<{D}x{H * HD}x{e}>) -> tensor<{M}x{D}x{e}> {{\n"
            f'  %qkv = "nn.linear"(%x, %w) : (tensor<{M}x{D}x{e}>, tensor<{N}x{D}x{e}>) -> tensor<{M}x{N}x{e}>\n'
            f'  %y = "nn.attention"(%qkv, %seg) <{{{props(**case)}}}> : (tensor<{M}x{N}x{e}>, tensor<{M}xi32>) -> tensor<{M}x{H * HD}x{e}>\n'
            f'  %o = "nn.linear"(%y, %wo) : (tensor<{M}x{H * HD}x{e}>, tensor<{D}x{H * HD}x{e}>) -> tensor<{M}x{D}x{e}>\n'
            f"  func.return %o : tensor<{M}x{D}x{e}>\n}}\n")
    g = torch.Generator().manual_seed(5)
    x, w, wo = (torch.randn(*s, generator=g).to(dtype) for s in ((M, D), (N, D), (D, H * HD)))
    dy = torch.randn(M, D, generator=g).to(dtype)
    seg = torch.tensor(case["segments"], dtype=torch.int32)
    fn = coda_ir.torch.function(text)
    leaves = [t.clone().requires_grad_(True) for t in (x, w, wo)]
    out = fn(leaves[0], seg, leaves[1], leaves[2])
    out.backward(dy)
    got = [out.detach()] + [t.grad for t in leaves]

    def run(compute):
        ls = [t.detach().to(compute).requires_grad_(True) for t in (x, w, wo)]
        (o,) = run_reference(text, [ls[0], seg, ls[1], ls[2]], compute)
        o.backward(dy.to(compute))
        return [o.detach()] + [t.grad for t in ls]

    assert_matches(got, run(torch.float64), run(dtype), ["out", "dx", "dw", "dwo"])


def check_cuda_path(b: int, s: int, h: int, kv: int, hd: int, segments: torch.Tensor | None, seed: int = 0,
                    **case) -> None:
    """nn.attention's CUDA runtime path for `case` (scale / window / softcap) in bf16, forward and
    backward, against the reference interpreter in float64 and bf16 (the NN_DIALECT bar)."""
    from coda_ir.interpreters.nn import attention_reference

    text = props(**case).replace(f"heads = {H}", f"heads = {h}").replace(
        f"kv_heads = {KV}", f"kv_heads = {kv}").replace(f"head_dim = {HD}", f"head_dim = {hd}").replace(
        f"seq_len = {S}", f"seq_len = {s}")
    n = (h + 2 * kv) * hd
    module = coda_ir.parse(f'func.func @f(%q: tensor<{b * s}x{n}xbf16>) -> tensor<{b * s}x{h * hd}xbf16> {{\n'
                           f'  %y = "nn.attention"(%q) <{{{text}}}> : (tensor<{b * s}x{n}xbf16>) -> tensor<{b * s}x{h * hd}xbf16>\n'
                           f'  func.return %y : tensor<{b * s}x{h * hd}xbf16>\n}}\n')
    op = next(o for o in module.walk() if o.name == "nn.attention")
    torch.manual_seed(seed)
    qkv = torch.randn(b * s, n, device="cuda", dtype=torch.bfloat16)
    dout = torch.randn(b * s, h * hd, device="cuda", dtype=torch.bfloat16)
    segs = segments.cuda() if segments is not None else None
    scale, window, softcap = f32(case.get("scale")), case.get("window", 0), f32(case.get("softcap", 0.0))
    out, lse = attention_forward(qkv, h, kv, hd, s, True, scale, window, softcap, segs)
    dqkv = attention_backward(qkv, out, lse, dout, h, kv, hd, s, True, scale, window, softcap, segs)

    def ref(dtype):
        leaf = qkv.to(dtype).requires_grad_(True)
        o, _ = attention_reference(leaf.float() if dtype == torch.bfloat16 else leaf, op, segs)
        o = o.to(dtype)
        (g,) = torch.autograd.grad(o, leaf, dout.to(dtype))
        return [o.detach().cpu(), g.cpu()]

    assert_matches([out.cpu(), dqkv.cpu()], ref(torch.float64), ref(torch.bfloat16), ["out", "dqkv"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_flex_path_meets_the_bar(name):
    """The CUDA path of a masked / soft-capped attention (FlexAttention) in bf16 at GPU shapes,
    forward and backward, against the reference in float64 and bf16 (the NN_DIALECT bar)."""
    b, s = 2, 256
    case = dict(CASES[name])
    seg = None
    if "segments" in case:  # the row pattern scaled up: packed documents, left and right padding
        seg = torch.tensor(case.pop("segments"), dtype=torch.int32).repeat_interleave(s * b // M + 1)[: b * s]
    case["window"] = case.get("window", 0) * 37
    check_cuda_path(b, s, 4, 2, 64, seg, **case)


def test_document_layout_of_segments():
    """Whole documents, each one run of its row, give flash varlen's cumulative lengths over the
    flattened rows (a document never spans two rows); padding (-1) or a document id returning
    after another keeps the mask (None). The layout is read once per segments tensor."""
    from coda_ir.runtime.attention import document_layout

    segments = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 0, 0, 5, 5, 5, 5, 5, 5], dtype=torch.int32)
    layout = document_layout(segments, 2, 8)
    assert layout.cu.tolist() == [0, 3, 7, 8, 10, 16] and layout.longest == 6
    assert document_layout(segments, 2, 8) is layout
    assert document_layout(torch.tensor(RIGHT_PAD, dtype=torch.int32), B, S) is None
    assert document_layout(torch.tensor([0, 1, 1, 0], dtype=torch.int32), 1, 4) is None
    assert document_layout(torch.tensor([7, 7, 7, 7], dtype=torch.int32), 2, 2).cu.tolist() == [0, 2, 4]


# packed documents without padding, each one run of its row (flash varlen's layout)
PACKED = [0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 3, 3, 3]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("name", ["documents", "window", "documents_window", "documents_scale"])
def test_cuda_varlen_path_meets_the_bar(name, monkeypatch):
    """Whole documents and sliding windows on CUDA run flash-attention's varlen kernels (not
    FlexAttention), forward and backward from the forward's log-sum-exp, in bf16 at GPU shapes
    with GQA and odd document lengths, against the reference in float64 and bf16."""
    from coda_ir.runtime import attention

    monkeypatch.setattr(attention, "flex_forward", None)  # would raise if the mask path ran
    monkeypatch.setattr(attention, "flex_backward", None)
    b, s = 2, 301
    seg = None
    if name.startswith("documents"):
        seg = torch.tensor(PACKED, dtype=torch.int32).repeat_interleave(b * s // M + 1)[: b * s]
        seg = seg.view(b, s)
        seg[1] += 1 - int(seg[1, 0])  # row 1's documents counted from 1: any ids, runs per row
        seg = seg.reshape(-1)
    case = {"window": 57 if "window" in name else 0, "scale": 0.11 if "scale" in name else None}
    check_cuda_path(b, s, 8, 2, 64, seg, seed=1, **case)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("name", ["window", "softcap", "packed_left_padding", "all"])
def test_flex_mask_and_score_mod_forward_on_cpu(name, monkeypatch):
    """The CUDA path's block mask and softcap score_mod, forward only, through FlexAttention's
    uncompiled CPU implementation (no backward there): the same numbers as the math path."""
    from torch.nn.attention.flex_attention import flex_attention

    from coda_ir.runtime import attention

    monkeypatch.setattr(attention, "_FLEX", flex_attention)
    case = CASES[name]
    qkv, _ = inputs(6)
    seg = case.get("segments")
    segments = torch.tensor(seg, dtype=torch.int32) if seg is not None else None
    q, k, v = attention._views(qkv, H, KV, HD, S)
    args = (True, f32(case.get("scale")), case.get("window", 0), f32(case.get("softcap", 0.0)), segments)
    out, lse = attention.flex_forward(q, k, v, *args)
    want_out, want_lse = attention.math_forward(q, k, v, *args)
    torch.testing.assert_close(out, want_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lse, want_lse, rtol=1e-5, atol=1e-5)  # -inf where a row sees no key


def test_a_window_that_covers_the_call_sequence_runs_the_plain_attention():
    """A program of run-time rows keeps its `window` when a sequence of its bucket may exceed it;
    at a call whose sequence the window covers, the attention is the plain causal one, bitwise
    (and on CUDA SDPA's fused kernel, not FlexAttention); a window one shorter masks."""
    torch.manual_seed(0)
    heads, kv, hd, seq = 4, 2, 16, 9
    qkv = torch.randn(2 * seq, (heads + 2 * kv) * hd, dtype=torch.float32)
    plain, plain_lse = attention_forward(qkv, heads, kv, hd, seq, True)
    covered, covered_lse = attention_forward(qkv, heads, kv, hd, seq, True, None, seq)
    assert torch.equal(plain, covered) and torch.equal(plain_lse, covered_lse)
    dout = torch.randn_like(plain)
    assert torch.equal(attention_backward(qkv, plain, plain_lse, dout, heads, kv, hd, seq, True),
                       attention_backward(qkv, covered, covered_lse, dout, heads, kv, hd, seq, True, None, seq))
    shorter, _ = attention_forward(qkv, heads, kv, hd, seq, True, None, seq - 1)
    assert not torch.equal(plain, shorter)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_flex_compiles_past_dynamos_recompile_limit():
    """More FlexAttention shapes in one process than Dynamo's default recompile limit (8), which
    with fullgraph=True is a hard failure: each compiles once, and the first still runs."""
    import torch._dynamo.config as dynamo_config

    from coda_ir.runtime import attention

    limit = dynamo_config.recompile_limit
    heads, kv, hd = 2, 1, 64
    first = None
    for i in range(limit + 3):
        seq = 128 * (i + 1)  # Flex's templates take whole 128-row blocks at these tiny head counts
        qkv = torch.randn(seq, (heads + 2 * kv) * hd, device="cuda", dtype=torch.bfloat16)
        out, _ = attention.attention_forward(qkv, heads, kv, hd, seq, True, None, 0, 30.0)  # softcap: Flex
        first = first or (qkv, out)
    again, _ = attention.attention_forward(first[0], heads, kv, hd, first[0].shape[0], True, None, 0, 30.0)
    assert torch.equal(again, first[1])


@pytest.mark.parametrize("name,blocks", [("softcap", 1), ("softcap", 3), ("all_but_segments", 2), ("softcap_full", 2)])
def test_materialized_softcap_backward_on_cpu(name, blocks, monkeypatch):
    """The soft-capped backward with materialized scores (CUDA's choice for Gemma2's attention,
    from FlexAttention's forward), run on the CPU in fp32 from the exact path's output and
    log-sum-exp: every gradient against the float64 definition, the scores in one block of query
    rows or several (causal blocks crop their keys at their last row), with GQA (3 q heads over 1
    kv head), a window, and a non-causal case."""
    from coda_ir.analysis import attention_model
    from coda_ir.runtime import attention

    case = {"softcap": dict(softcap=1.5), "all_but_segments": dict(scale=0.8, window=2, softcap=2.0),
            "softcap_full": dict(softcap=1.5, causal=False)}[name]
    causal = case.pop("causal", True)
    # a budget of one block's fp32 scores: every sequence and head, ceil(S / blocks) rows, every key
    monkeypatch.setattr(attention_model, "MATERIALIZED_SCORE_BYTES", B * H * S * 4 * -(-S // blocks))
    assert len(attention._row_blocks(B * H, S)) == blocks
    qkv, dout = inputs(11)
    q, k, v = attention._views(qkv, H, KV, HD, S)
    scale, window, softcap = f32(case.get("scale")), case.get("window", 0), f32(case.get("softcap", 0.0))
    out, lse = attention.math_forward(q, k, v, causal, scale, window, softcap)
    do = dout.view(B, S, H, HD).transpose(1, 2)
    dq, dk, dv = attention.materialized_backward(do, q, k, v, out, lse, causal, scale, window, softcap)
    dqkv = torch.cat([attention._flat_rows(dq), attention._flat_rows(dk), attention._flat_rows(dv)], dim=1)

    leaf = qkv.double().requires_grad_(True)
    want = naive(leaf, **dict(case, causal=causal, scale=scale, softcap=softcap))
    (want_grad,) = torch.autograd.grad(want, leaf, dout.double())
    torch.testing.assert_close(dqkv.double(), want_grad, rtol=1e-5, atol=1e-5)
