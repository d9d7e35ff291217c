"""Donated saved tensors (issue 11, peak memory): the backward of `coda_ir.torch.function` gives
`@f_bwd` the tensors the forward saved only for it, and a kernel that reads one for the last
time may store its output over it (`coda_ir.analysis.in_place`). For the LM head + cross-entropy
that is dlogits written over the saved logits: one logits-sized buffer less at the step's peak.

Checked here (CPU, Triton interpreter): the decision is recorded in the IR and obeyed (no
logits-sized allocation in the backward, the saved logits' storage holds dlogits afterwards),
the gradients are bitwise those of the non-donating backward and within the NN_DIALECT.md bar,
and a backward that keeps the graph (`retain_graph`) donates nothing. The same backward hands
all its saved tensors over (`coda.owned`): those only the ctx held are freed at their last
reader, before `@f_bwd` returns.
"""

from __future__ import annotations

import contextlib
import sys
import weakref
from pathlib import Path

import pytest
import torch

import coda_ir.torch
from coda_ir.dialects.coda import WRITES_OVER, writes_over
from coda_ir.testing import assert_matches, random_inputs, reference_gradients
from coda_ir.torch.function import set_donation

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_function import tiny_program  # noqa: E402

M, V = 19, 40  # tiny_program("lm_head"): m=19 tokens, vocab 40


@contextlib.contextmanager
def donation(enabled: bool):
    before = set_donation(enabled)
    try:
        yield
    finally:
        set_donation(before)


class Allocations:
    """Records the shape of every `torch.empty` call (the generated host code's allocator: it
    looks `torch.empty` up at each call) while active. A dispatch mode would not see them: the
    custom op runs its implementation with modes off."""

    def __init__(self):
        self.shapes: list[tuple[int, ...]] = []
        self._empty = torch.empty

    def _record(self, *size, **kwargs):
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else tuple(size)
        self.shapes.append(shape)
        return self._empty(*size, **kwargs)

    def __enter__(self):
        torch.empty = self._record
        return self

    def __exit__(self, *exc):
        torch.empty = self._empty


@pytest.fixture(scope="module")
def head():
    text = tiny_program("lm_head", "bf16")
    fn = coda_ir.torch.function(text)
    return text, fn


def step(fn, inputs, *, retain: bool = False, record_logits: list | None = None):
    """Forward + backward of the loss; returns the gradients and the backward's allocations.
    `record_logits`: gets the saved logits tensor (a pack hook keeps a reference to it)."""
    leaves = [t.clone().requires_grad_(True) if t.is_floating_point() else t for t in inputs]

    def pack(t):
        if record_logits is not None and tuple(t.shape) == (M, V):
            record_logits.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn(*leaves)
    allocations = Allocations()
    with allocations:
        loss.backward(retain_graph=retain)
    grads = [t.grad for t in leaves if t.is_floating_point()]
    return loss.detach(), grads, allocations.shapes, leaves, loss


def test_decision_is_recorded_on_the_cross_entropy_gradient_kernel(head):
    _, fn = head
    mask = (True,) * len(fn.float_args)
    donated = fn.backward_module(mask, donate=True)
    plain = fn.backward_module(mask, donate=False)
    names = [fn._bwd_args[j].name for j in fn.donated_arguments()]
    assert "logits" in names  # saved by the forward only for the backward
    records = [(op.attributes.get("coda.origin").data, writes_over(op)) for op in donated.ir.walk() if WRITES_OVER in op.attributes]
    # exactly one kernel writes over a donated buffer: dlogits (output 0) over the logits (input 0)
    assert records == [("nn.cross_entropy_grad.apply+nn.row_dot.partials", [0, -1])]
    assert not any(WRITES_OVER in op.attributes for op in plain.ir.walk())


def test_donating_backward_allocates_no_dlogits_and_is_bitwise_equal(head):
    text, fn = head
    inputs = random_inputs(text, seed=0)
    with donation(False):
        loss0, grads0, allocs0, _, _ = step(fn, inputs)
    saved: list[torch.Tensor] = []
    with donation(True):
        loss1, grads1, allocs1, _, _ = step(fn, inputs, record_logits=saved)
    # the non-donating backward allocates dlogits [M, V]; the donating one writes over the logits
    assert allocs0.count((M, V)) == 1
    assert allocs1.count((M, V)) == 0
    assert len(allocs1) == len(allocs0) - 1
    # same kernels, same arithmetic: bitwise the same loss and gradients
    assert torch.equal(loss0, loss1)
    for a, b in zip(grads0, grads1):
        assert torch.equal(a, b)
    # the saved logits' storage now holds dlogits (softmax - onehot, scaled: rows sum to ~0),
    # not the logits a fresh forward saves
    (logits_after,) = saved
    fresh: list[torch.Tensor] = []
    leaves = [t.clone().requires_grad_(True) if t.is_floating_point() else t for t in inputs]
    with torch.autograd.graph.saved_tensors_hooks(lambda t: fresh.append(t) or t, lambda t: t):
        fn(*leaves)
    (logits_before,) = [t for t in fresh if tuple(t.shape) == (M, V)]
    assert not torch.equal(logits_after, logits_before)
    assert logits_after.float().sum(dim=1).abs().max() < 1e-2 < logits_before.float().sum(dim=1).abs().max()
    # and within the NN_DIALECT.md bar against float64 autograd
    upstream = [torch.ones((), dtype=loss1.dtype)]
    names = [a.name for a in fn.args if a.is_float]
    assert_matches(grads1, *reference_gradients(text, inputs, upstream), names)


def test_retained_graph_is_not_donated(head):
    text, fn = head
    inputs = random_inputs(text, seed=2)
    with donation(True):
        _, grads, allocs, leaves, loss = step(fn, inputs, retain=True)
        first = [g.clone() for g in grads]
        assert allocs.count((M, V)) == 1  # kept graph: dlogits in a fresh buffer
        for t in leaves:
            if t.is_floating_point():
                t.grad = None
        loss.backward()  # the second backward reads the same saved logits, intact
    for a, t in zip(first, [t for t in leaves if t.is_floating_point()]):
        assert torch.equal(a, t.grad)


class Liveness:
    """While active: at every `torch.empty` (each allocation of the generated host code), which
    of the tracked tensors still exist (weak references: tracking keeps nothing alive)."""

    def __init__(self):
        self.refs: list[weakref.ref] = []
        self.shapes: list[tuple[int, ...]] = []
        self.alive: list[list[bool]] = []
        self._empty = torch.empty

    def track(self, t: torch.Tensor) -> torch.Tensor:
        self.refs.append(weakref.ref(t))
        self.shapes.append(tuple(t.shape))
        return t

    def _record(self, *size, **kwargs):
        self.alive.append([r() is not None for r in self.refs])
        return self._empty(*size, **kwargs)

    def __enter__(self):
        torch.empty = self._record
        return self

    def __exit__(self, *exc):
        torch.empty = self._empty


@pytest.mark.parametrize("enabled", [True, False])
def test_backward_releases_saved_tensors_at_their_last_use(enabled):
    """The backward hands its saved tensors over (`coda.owned`): the ctx releases them and
    `@f_bwd` drops each after its last reader, so the tensors the forward saved only for the
    backward (held by nothing else) are freed while it still runs; z [M, 2F] (the gate/up GEMM's
    output) among them. With donation off, every saved tensor lives until it returns. Gradients
    are bitwise the same."""
    text = tiny_program("llama_block", "bf16")  # m=19, d=32, f=24
    fn = coda_ir.torch.function(text)
    inputs = random_inputs(text, seed=5)
    results = {}
    for mode in (enabled, not enabled):
        leaves = [t.clone().requires_grad_(True) if t.is_floating_point() else t for t in inputs]
        live = Liveness()
        with donation(mode):
            with torch.autograd.graph.saved_tensors_hooks(live.track, lambda t: t):
                outs = fn(*leaves)
            loss = sum((o.float() * (k + 1)).sum() for k, o in enumerate(outs))
            with live:
                loss.backward()
        results[mode] = ([t.grad for t in leaves if t.is_floating_point()], live)
    grads, live = results[enabled]
    # the allocations of the backward (the first ones are the loss's own backward, none here:
    # every torch.empty during backward() is the host function's)
    assert live.alive, "the backward allocated nothing"
    assert len(live.refs) == len(fn.saved)  # the pack hook saw each saved tensor, in order
    extras = {j for j, s in enumerate(fn.saved) if s.source == "extra"}  # x1, rstd_x1, z, g, rstd_x2
    assert (19, 48) in [live.shapes[j] for j in extras]  # z
    freed_during = {i for i in range(len(live.refs)) if not all(a[i] for a in live.alive)}
    if enabled:
        # every tensor saved only for the backward is freed before it returns; the inputs and
        # f's results it also read are the caller's (held by this test): they stay
        assert freed_during == extras
        assert not any(live.alive[-1][j] for j in extras)
    else:
        assert freed_during == set()
    for a, b in zip(grads, results[not enabled][0]):
        assert torch.equal(a, b)


def test_retained_graph_releases_nothing():
    """A backward that keeps the graph (`retain_graph`) hands nothing over: every saved tensor is
    alive at every allocation, and the second backward reads them intact."""
    text = tiny_program("llama_block", "bf16")
    fn = coda_ir.torch.function(text)
    inputs = random_inputs(text, seed=6)
    leaves = [t.clone().requires_grad_(True) if t.is_floating_point() else t for t in inputs]
    live = Liveness()
    with donation(True):
        with torch.autograd.graph.saved_tensors_hooks(live.track, lambda t: t):
            outs = fn(*leaves)
        loss = sum(o.float().sum() for o in outs)
        with live:
            loss.backward(retain_graph=True)
        first = [t.grad.clone() for t in leaves if t.is_floating_point()]
        for t in leaves:
            t.grad = None
        loss.backward()
    assert live.alive and all(all(a) for a in live.alive)
    for a, t in zip(first, [t for t in leaves if t.is_floating_point()]):
        assert torch.equal(a, t.grad)
