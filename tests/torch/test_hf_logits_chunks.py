"""from_hf with the LM head's backward recomputing the logits in vocabulary chunks (nn-autodiff's
`logits-chunk`, forced here: the tiny vocabulary of 128 is far under the default memory budget):
Gemma2's soft-capped, tied head in bf16, chunks of 48 (48 + 48 + 32), loss and every gradient
against the Hugging Face model in float64 under the NN_DIALECT bar, through the unit programs
with run-time rows (#coda.rows) that from_hf compiles."""

from __future__ import annotations

import copy

import pytest
import torch

pytest.importorskip("transformers")

from coda_ir.testing import assert_matches  # noqa: E402
from coda_ir.torch.hf import from_hf  # noqa: E402
from tests.torch.hf_families import tiny_model  # noqa: E402
from tests.torch.test_hf import BATCH, SEQ, batch, coda_loss_and_grads, hf_loss_and_grads  # noqa: E402


def test_softcapped_tied_head_in_chunks_matches_float64():
    dtype = torch.bfloat16
    model_t = tiny_model("gemma2", dtype)
    assert model_t.config.final_logit_softcapping
    model64 = copy.deepcopy(model_t).double()
    ids, labels = batch()
    loss64, grads64 = hf_loss_and_grads(model64, ids, labels)
    loss_t, grads_t = hf_loss_and_grads(copy.deepcopy(model_t), ids, labels)
    cmodel = from_hf(model_t, pipeline="nn-autodiff{logits-chunk=48},nn-to-coda", progress=False)
    loss, grads = coda_loss_and_grads(model_t, cmodel, ids, labels)
    head = cmodel.head.function("loss", BATCH * SEQ, SEQ)
    assert "nn.linear_cross_entropy_grad" in str(head.nn_module) and "chunk = 48" in str(head.nn_module)
    names = sorted(grads64)
    assert_matches([loss] + [grads[n] for n in names], [loss64] + [grads64[n] for n in names],
                   [loss_t] + [grads_t[n] for n in names], ["loss"] + names, loss=(dtype, BATCH * SEQ))


def test_readme_memory_budget_example_runs(capsys):
    """The README's chunked-logits example runs as written and gives the stored-logits loss."""
    import re
    from pathlib import Path

    readme = Path(__file__).resolve().parents[2] / "README.md"
    snippet = next(s for s in re.findall(r"```python\n(.*?)```", readme.read_text(), re.S) if "logits-chunk=64" in s)
    exec(compile(snippet, str(readme), "exec"), {})
    stored, chunked = map(float, re.search(r"logits stored: loss ([0-9.]+); chunks of 64: loss ([0-9.]+)",
                                           capsys.readouterr().out).groups())
    assert abs(stored - chunked) <= 1e-4 * stored
