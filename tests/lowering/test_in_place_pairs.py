"""dz written over the donated z in the separate SwiGLU backward pass (`coda_ir.analysis.in_place`,
the pair-halves rule; bench/RESULTS.md session 10).

The pass nn-plan's gated-grad plan chooses reads z [M, 2F] in pair halves (gate and up columns of
each pair index in one program) and stores dz [M, 2F] at the same columns. With z donated (the
`coda_ir.torch` backward donates it: the forward saved it only for the backward), the pass stores
dz over z: one [M, 2F] buffer less at the backward's peak. Checked here on the CPU interpreter, at
odd row counts and F a power of two and not: the decision is recorded on the pass (also as a
launch-group member), the kernel waits at a CTA barrier before those stores, the outputs are
bitwise those of the non-donating backward and z's buffer holds dz afterwards. Since session 23
the pass also rebuilds g = swiglu(z) for the down-projection's weight gradient (nn-autodiff no
longer saves g): dz still goes over z, g is a fresh output; `rebuild-gated=false` (g saved) keeps
the pass of before.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import coda_ir.torch
from coda_ir.dialects.coda import WRITES_OVER, writes_over
from coda_ir.testing import random_inputs, random_upstream

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "programs"))

from generate import Llama, nn_llama_block  # noqa: E402

PASS = "nn.swiglu+nn.swiglu_grad+nn.row_dot.partials"  # inputs (z, dy), outputs (g, dz, partials)
SAVED_G_PASS = "nn.swiglu_grad+nn.row_dot.partials"  # g saved: inputs (dy, z), outputs (dz, partials)
NORM_PASS = "nn.rms_norm_apply.apply+nn.rms_norm_grad.apply+nn.add"


def _block(m: int, f: int) -> str:
    return nn_llama_block(Llama(f"odd{m}x{f}", m=m, d=48, f=f, hd=16, hq=2, hkv=1, eps=1e-5, theta=10000.0),
                          fname="llama_block")


def _records(cm, origin: str | None = PASS) -> list[tuple[str, list[int], bool]]:
    """(origin, writes_over, in a launch group) of every kernel recording coda.writes_over (of
    the SwiGLU-backward pass's, by default; None: all)."""
    out = []
    for op in cm.ir.walk():
        if WRITES_OVER in op.attributes and (origin is None or op.attributes["coda.origin"].data == origin):
            parent = op.parent_op()
            out.append((op.attributes["coda.origin"].data, writes_over(op), parent is not None and parent.name == "coda.launch_group"))
    return out


@pytest.mark.parametrize("m, f, rebuilt", [(37, 80, True), (37, 256, True), (21, 96, False)])
def test_dz_over_donated_z_is_bitwise_the_fresh_buffer_result(m, f, rebuilt):
    text = _block(m, f)
    autodiff = "" if rebuilt else "nn-autodiff{rebuild-gated=false},"
    fn = coda_ir.torch.function(text, pipeline=autodiff + "nn-to-coda{gated-grad=separate}", remarks=False)
    mask = (True,) * len(fn.float_args)
    plain = fn.backward_module(mask, donate=False)
    donated = fn.backward_module(mask, donate=True)
    names = [fn._bwd_args[j].name for j in fn.donated_arguments()]
    z_index = next(j for j in fn.donated_arguments() if fn._bwd_args[j].name == "z")
    assert "z" in names and ("g" in names) is not rebuilt  # a saved g is donated too, a rebuilt one is not saved
    (origin, over, grouped), = _records(donated, PASS if rebuilt else SAVED_G_PASS)
    if rebuilt:
        # dz (output 1) over z (input 0); the rebuilt g and the z . dz partials are fresh
        assert over == [-1, 0, -1]
    else:
        # dz (output 0) over z; z is the pass's input #1 (dy, z); the z . dz partials are fresh
        assert over == [1, -1]
    # and the first norm's backward pass writes the rebuilt h1 over the donated x1 (its input #0,
    # read at the same element): the per-element rule
    assert _records(donated, NORM_PASS) == [(NORM_PASS, [0, -1, -1], False)]
    assert not _records(plain, None)
    # the kernel waits for every thread's loads before storing over z, and only that kernel
    src = donated.source
    assert src.count("tl.debug_barrier()") == 1 and "tl.debug_barrier()" not in plain.source
    inputs = random_inputs(text, seed=m + f)
    ups = random_upstream(text, seed=m + f)
    outs = fn.forward_module.llama_block_fwd(*inputs)
    saved = list(outs[len(fn.results):])
    z_saved = saved[z_index]
    ref = plain.llama_block_bwd(*[t.clone() for t in saved], *ups)
    args = [t.clone() for t in saved]
    z_before = args[z_index].clone()
    got = donated.llama_block_bwd(*args, *ups)
    assert len(ref) == len(got) == len(mask)
    for a, b in zip(ref, got):
        assert torch.equal(a, b)
    # z's buffer now holds dz, not z
    assert not torch.equal(args[z_index], z_before)
    assert torch.equal(z_before, z_saved)


def test_launch_group_member_is_written_over_at_a_bench_shape():
    """At the smoke shape of bench_block.py, the pass shares a launch with the RMSNorm-weight fold
    (coda-group-launches): the group does not block the write, since no other member reads z."""
    text = nn_llama_block(Llama("smoke", m=64, d=64, f=96, hd=16, hq=2, hkv=1, eps=1e-5, theta=500000.0),
                          fname="llama_block")
    fn = coda_ir.torch.function(text, pipeline="nn-to-coda{gated-grad=separate}", remarks=False)
    donated = fn.backward_module((True,) * len(fn.float_args), donate=True)
    assert [(o, g) for o, _, g in _records(donated)] == [(PASS, True)]


def test_pairs_exchanged_in_registers_are_not_written_over():
    """F = 64: the pass loads z whole and exchanges each pair in registers (the pair_map is
    warp-local when BN is a multiple of F: only for F <= 128), not in pair halves: the rule does
    not cover that form (its loads and stores are not the pair-halves ones whose columns it
    proves equal), so z keeps its buffer and dz gets a fresh one."""
    fn = coda_ir.torch.function(_block(37, 64), pipeline="nn-to-coda{gated-grad=separate}", remarks=False)
    donated = fn.backward_module((True,) * len(fn.float_args), donate=True)
    assert _records(donated) == []


def test_epilogue_form_reads_z_in_a_gemm_and_writes_nothing_over_it():
    """With the SwiGLU backward in the dgrad GEMM's epilogue (gated-grad=epilogue) z is read by a
    GEMM epilogue, which the rule does not cover: nothing is written over z."""
    fn = coda_ir.torch.function(_block(37, 80), pipeline="nn-to-coda{gated-grad=epilogue}", remarks=False)
    donated = fn.backward_module((True,) * len(fn.float_args), donate=True)
    assert _records(donated) == []
