"""Grouped head norms (`nn-fuse-siblings`: Qwen3's q-norm then k-norm -> one `nn.head_rms_norm`
with a weight per group of heads, `weight_heads`).

* For every split of a run of heads into groups (either order of the chain, any first head,
  head widths that are not powers of two), the grouped op equals the chain of single-weight ops
  bit for bit in float64, forward and backward (`nn-autodiff`'s grouped `head_rms_norm_grad`
  against the chain's two grad ops): the rewrite changes no number.
* A Qwen3-shaped attention input (packed QKV linear, q-norm, k-norm, RoPE) compiled through
  `nn-fuse-siblings,nn-autodiff,nn-to-coda` meets the NN_DIALECT.md bar against the chain's
  op-by-op reference, forward and every gradient, and its backward runs the two norms as one
  kernel (one `head_rms_norm_grad` pass, one dw fold), the forward in the QKV GEMM's epilogue.
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

os.environ.setdefault("TRITON_INTERPRET", "1")

import coda_ir  # noqa: E402
from coda_ir import reference, testing  # noqa: E402
from coda_ir.dialects import nn  # noqa: E402


def chain_program(m: int, hd: int, heads_total: int, first: int, counts: list[int], reverse: bool) -> str:
    """x -> one single-weight head norm per group (groups of `counts` heads from `first`), applied
    in head order or in reverse; the result of the last, summed with x so x's gradient flows
    through the pass-through columns too."""
    n = heads_total * hd
    T = f"tensor<{m}x{n}xf32>"
    W = f"tensor<{hd}xf32>"
    args = ", ".join(f"%w{i}: {W}" for i in range(len(counts)))
    starts = [first + sum(counts[:i]) for i in range(len(counts))]
    order = list(range(len(counts)))[::-1] if reverse else list(range(len(counts)))
    lines, value = [], "%x"
    for step, i in enumerate(order):
        props = f"head_dim = {hd} : i64, heads = {counts[i]} : i64, eps = 1.0e-06 : f32, first_head = {starts[i]} : i64"
        lines.append(f'  %n{step} = "nn.head_rms_norm"({value}, %w{i}) <{{{props}}}> : ({T}, {W}) -> {T}')
        value = f"%n{step}"
    return (f"func.func @f(%x: {T}, {args}) -> {T} {{\n" + "\n".join(lines) + "\n"
            f'  %y = "nn.add"({value}, %x) : ({T}, {T}) -> {T}\n  func.return %y : {T}\n}}')


def _run(module, name: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return reference.run_reference(module, inputs, torch.float64, func_name=name)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hd=st.sampled_from([4, 6, 12]), m=st.integers(1, 9), groups=st.integers(2, 3), data=st.data())
def test_grouped_norm_equals_the_chain_in_float64(hd: int, m: int, groups: int, data):
    counts = [data.draw(st.integers(1, 3)) for _ in range(groups)]
    first = data.draw(st.integers(0, 2))
    heads_total = first + sum(counts) + data.draw(st.integers(0, 2))  # heads after the run pass through
    reverse = data.draw(st.booleans())
    source = chain_program(m, hd, heads_total, first, counts, reverse)
    seed = data.draw(st.integers(0, 2**16))
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(m, heads_total * hd, generator=gen, dtype=torch.float64)
    ws = [1 + 0.1 * torch.randn(hd, generator=gen, dtype=torch.float64) for _ in counts]
    dy = torch.randn(m, heads_total * hd, generator=gen, dtype=torch.float64)

    chain = coda_ir.lower(coda_ir.parse(source), "nn-autodiff")
    grouped = coda_ir.lower(coda_ir.parse(source), "nn-fuse-siblings,nn-autodiff")
    fns = {op.sym_name.data: op for op in grouped.walk() if op.name == "func.func"}
    norms = [op for op in fns["f_fwd"].walk() if isinstance(op, nn.HeadRMSNormOp)]
    grads = [op for op in fns["f_bwd"].walk() if isinstance(op, nn.HeadRMSNormGradOp)]
    assert len(norms) == 1 and len(grads) == 1  # one forward norm, one backward op, all weights
    assert [h for _, _, h in nn.head_weight_groups(norms[0])] == counts and nn.first_head_of(norms[0]) == first
    assert len(grads[0].dw) == groups

    fwd_chain, fwd_grouped = _run(chain, "f_fwd", [x, *ws]), _run(grouped, "f_fwd", [x, *ws])
    assert torch.equal(fwd_chain[0], fwd_grouped[0])
    # the backward of each: its saved values (whatever each forward saves) and dy
    bwd_chain = _run(chain, "f_bwd", [*fwd_chain[1:], dy])
    bwd_grouped = _run(grouped, "f_bwd", [*fwd_grouped[1:], dy])
    assert len(bwd_chain) == len(bwd_grouped) == 1 + groups
    for a, b in zip(bwd_chain, bwd_grouped):
        assert torch.equal(a, b)


def qwen3_attention_input(dtype: str) -> str:
    """Packed q/k/v projection of 3 query heads and 2 kv heads of width 16 (37 rows, 40 inputs),
    the q-norm, the k-norm of its output, RoPE over q and k heads: Qwen3's attention input."""
    M, K, hd, H, KV = 37, 40, 16, 3, 2
    N = (H + 2 * KV) * hd
    T = lambda *s: "tensor<" + "x".join(map(str, s)) + f"x{dtype}>"  # noqa: E731
    return f"""
func.func @qk(%h: {T(M, K)}, %w: {T(N, K)}, %wqn: {T(hd)}, %wkn: {T(hd)}, %pos: tensor<{M}xi32>) -> {T(M, N)} {{
  %qkv = "nn.linear"(%h, %w) : ({T(M, K)}, {T(N, K)}) -> {T(M, N)}
  %qhn = "nn.head_rms_norm"(%qkv, %wqn) <{{head_dim = {hd} : i64, heads = {H} : i64, eps = 1.0e-06 : f32}}> : ({T(M, N)}, {T(hd)}) -> {T(M, N)}
  %khn = "nn.head_rms_norm"(%qhn, %wkn) <{{head_dim = {hd} : i64, heads = {KV} : i64, eps = 1.0e-06 : f32, first_head = {H} : i64}}> : ({T(M, N)}, {T(hd)}) -> {T(M, N)}
  %r = "nn.rope"(%khn, %pos) <{{head_dim = {hd} : i64, rotary_heads = {H + KV} : i64, theta = 10000.0 : f32, style = "half"}}> : ({T(M, N)}, tensor<{M}xi32>) -> {T(M, N)}
  func.return %r : {T(M, N)}
}}"""


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_qwen3_attention_input_grouped_matches_the_chain_reference(dtype: str):
    source = qwen3_attention_input(dtype)
    compiled = coda_ir.compile(source, "nn-fuse-siblings,nn-autodiff,nn-to-coda")
    inputs = testing.random_inputs(source, seed=3)
    testing.check_gradients(compiled, source, inputs, seed=3)
    fns = {op.sym_name.data: op for op in compiled.ir.walk() if op.name == "func.func"}

    def origins(fn: str) -> list[str]:
        return [op.attributes["coda.origin"].data for op in fns[fn].walk() if "coda.origin" in op.attributes]

    # forward: both norms (and RoPE) in the QKV GEMM's epilogue, as one grouped norm
    assert origins("qk_fwd").count("nn.linear+nn.head_rms_norm+nn.rope") == 1
    origins = origins("qk_bwd")
    # backward: one pass computes both norms' gradients; one column fold; one per-head sum kernel
    assert sum(o.endswith("nn.head_rms_norm_grad") or "nn.head_rms_norm_grad+" in o for o in origins) == 1
    assert sum(o == "nn.head_rms_norm_grad.dw_cols" for o in origins) == 1
    assert sum(o == "nn.head_rms_norm_grad.dw_heads" for o in origins) == 1
