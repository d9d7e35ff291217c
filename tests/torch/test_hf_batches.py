"""from_hf on the batches a Trainer passes: padding masks (left and right), packed documents
(position_ids restarting, flash-attention's cu_seq_lens), num_items_in_batch, and the
ArgumentErrors of bad ones. Tiny LLaMA (tests/torch/test_hf.py's), batch 2 x seq 9; every
check against the Hugging Face model in float64 under the NN_DIALECT bar (loss and every
gradient), with Hugging Face in the model's dtype as the low-precision reference.
"""

from __future__ import annotations

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")

import coda_ir  # noqa: E402
from coda_ir.testing import assert_matches  # noqa: E402
from coda_ir.torch.hf import _check_kwargs, batch_segments, from_hf  # noqa: E402

from tests.torch.test_hf import VOCAB, tiny_model  # noqa: E402

B, S = 2, 9
DOCS = [[4, 5], [3, 3, 3]]  # packed document lengths per row


def ids_and_labels(seed: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (B, S), generator=g)
    return ids, ids.clone()


def packed_positions():
    return torch.stack([torch.cat([torch.arange(n) for n in row]) for row in DOCS])


def grads_of(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def check(modelT, hf_loss, coda_loss, dtype, rows):
    """`hf_loss(model)` / `coda_loss(model, cmodel)`: the loss of one step; the HF model in
    float64 and in dtype against coda-ir, loss and every gradient."""
    model64 = copy.deepcopy(modelT).double()
    refT = copy.deepcopy(modelT)
    loss64, grads64 = grads_of(model64, hf_loss(model64))
    lossT, gradsT = grads_of(refT, hf_loss(refT))
    cmodel = from_hf(modelT, progress=False)
    loss, grads = grads_of(modelT, coda_loss(modelT, cmodel))
    names = sorted(grads64)
    assert torch.isfinite(loss64)
    assert_matches([loss] + [grads[n] for n in names], [loss64] + [grads64[n] for n in names],
                   [lossT] + [gradsT[n] for n in names], ["loss"] + names, loss=(dtype, rows))
    return cmodel


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("side", ["left", "right", "right_collated", "left_collated"])
def test_padded_batch_matches_hugging_face_with_the_same_mask(side, dtype):
    """Left padding with the padded labels ignored (what a padding collator does; the last
    padding row still predicts the first token); right padding with them counted: Hugging
    Face's mask hides padded keys only, so a padding query still sees its row's tokens, and
    coda-ir's loss counts those rows the same way. Right padding as a collator makes it (every
    padding row's target ignored): the padding runs as documents of its own (`batch_segments`),
    with Hugging Face's loss and gradients all the same."""
    model = tiny_model("llama", dtype)
    ids, labels = ids_and_labels(2)
    mask = torch.ones(B, S, dtype=torch.long)
    if side.startswith("left"):
        mask[0, :3] = 0
        labels[mask == 0] = -100
        if side == "left_collated":
            labels[0, 3] = -100  # a prompt's first token (SFT): the last padding row predicts nothing
    else:
        mask[1, S - 4:] = 0
        if side == "right_collated":
            labels[mask == 0] = -100
    labels[1, 2] = -100
    segments = batch_segments(ids, mask, labels=labels)
    assert (segments.min() >= 0) == side.endswith("collated")  # padding as documents, or as -1
    cmodel = check(model, lambda m: m(input_ids=ids, attention_mask=mask, labels=labels).loss,
                   lambda m, c: c(ids, mask, labels).loss, dtype, B * S)
    kinds = {key[0] for layer in cmodel.layers for key in layer._functions}
    assert kinds == {"layer_segments"}  # the masked program variant


def test_all_ones_mask_is_the_plain_program():
    """No padding: the plain decoder program (SDPA's fused kernel on a GPU), the same loss as
    without a mask. (test_hf.py's batch shape: its compiled programs serve.)"""
    from tests.torch.test_hf import batch

    model = tiny_model("llama")
    ids, labels = batch()
    cmodel = from_hf(model, progress=False)
    ones = torch.ones_like(ids, dtype=torch.bool)
    assert batch_segments(ids, ones) is None
    with torch.no_grad():
        assert torch.equal(cmodel(ids, ones, labels).loss, cmodel(ids, labels=labels).loss)
    assert {key[0] for layer in cmodel.layers for key in layer._functions} == {"layer"}


def _per_document_reference(ids, labels):
    """Hugging Face run on each packed document alone: the summed token losses of all
    documents over their count (each document's first label is ignored, as
    DataCollatorWithFlattening sets it)."""
    count = int((labels[:, 1:] != -100).sum() + sum(0 for _ in DOCS))

    def loss(model):
        total = 0
        for b, row in enumerate(DOCS):
            start = 0
            for n in row:
                doc_ids, doc_labels = ids[b:b + 1, start:start + n], labels[b:b + 1, start:start + n]
                total = total + model(input_ids=doc_ids, labels=doc_labels, num_items_in_batch=1).loss
                start += n
        return total / count

    return loss, count


def _packed_labels(ids):
    labels = ids.clone()
    for b, row in enumerate(DOCS):
        start = 0
        for n in row:
            labels[b, start] = -100  # the first token of a document predicts nothing of the previous one
            start += n
    return labels


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_rows_match_hugging_face_on_each_document(dtype):
    model = tiny_model("llama", dtype)
    ids, _ = ids_and_labels(5)
    labels = _packed_labels(ids)
    positions = packed_positions()
    reference, count = _per_document_reference(ids, labels)
    # position_ids restarting at 0 inside a row: several documents per row
    cmodel = check(model, reference, lambda m, c: c(ids, labels=labels, position_ids=positions).loss, dtype, count)
    assert {key[0] for layer in cmodel.layers for key in layer._functions} == {"layer_segments"}


def test_packed_rows_by_flash_attention_kwargs_match_hugging_face_packed():
    """The same packed batch given as flash-attention's cu_seq_lens (as Hugging Face computes
    them from position_ids), against Hugging Face's own packed forward: its SDPA mask from the
    position_ids, which transformers 5.24 builds only without a cache (use_cache=False; with the
    default cache it attends across the documents)."""
    from transformers.modeling_flash_attention_utils import prepare_fa_kwargs_from_position_ids

    model = tiny_model("llama")
    ids, _ = ids_and_labels(6)
    labels = _packed_labels(ids)
    positions = packed_positions()
    (cu_q, cu_k), (max_q, max_k) = prepare_fa_kwargs_from_position_ids(positions)
    assert cu_q.tolist() == [0, 4, 9, 12, 15, 18]
    check(model, lambda m: m(input_ids=ids, labels=labels, position_ids=positions, use_cache=False).loss,
          lambda m, c: c(ids, labels=labels, position_ids=positions, cu_seq_lens_q=cu_q, cu_seq_lens_k=cu_k,
                         max_length_q=max_q, max_length_k=max_k).loss, torch.float32, B * S)


def test_num_items_in_batch_normalizes_the_summed_loss_like_hugging_face():
    """(test_hf.py's batch shape: only the summed-loss head program is new.)"""
    from tests.torch.test_hf import BATCH, SEQ, batch

    model = tiny_model("llama")
    ids, labels = batch()
    n = torch.tensor(37)
    check(model, lambda m: m(input_ids=ids, labels=labels, num_items_in_batch=n).loss,
          lambda m, c: c(ids, labels=labels, num_items_in_batch=n, return_dict=True, use_cache=False,
                         output_attentions=False).loss, torch.float32, BATCH * SEQ)


def test_segments_of_a_batch():
    ids, _ = ids_and_labels(8)
    mask = torch.ones(B, S, dtype=torch.bool)
    mask[0, :2] = False
    assert batch_segments(ids, mask).view(B, S)[0].tolist() == [-1, -1] + [0] * 7
    assert batch_segments(ids, position_ids=packed_positions()).view(B, S).tolist() == [
        [0] * 4 + [1] * 5, [0] * 3 + [1] * 3 + [2] * 3]
    assert batch_segments(ids, position_ids=torch.arange(5, 5 + S)[None]) is None  # offset, not packed
    cu = torch.tensor([0, 4, 9, 12, 15, 18], dtype=torch.int32)
    assert batch_segments(ids, cu_seq_lens_q=cu, cu_seq_lens_k=cu).tolist() == [0] * 4 + [1] * 5 + [2] * 3 + [3] * 3 + [4] * 3


def test_padding_nobody_sees_is_dropped_from_the_step():
    """`without_padding`: the tokens of a batch whose padding is documents of its own, in order,
    with their padded-row positions (left padding: Hugging Face's positions count the padding)
    and shifted targets, one document per row; nothing where padding is seen or absent."""
    from coda_ir.torch.hf import shifted_targets, without_padding

    ids, _ = ids_and_labels(8)
    mask = torch.ones(B, S, dtype=torch.bool)
    mask[0, :2] = False
    mask[1, 6:] = False
    labels = torch.full((B, S), -100)
    labels[0, 3:] = 1
    labels[1, :6] = 2
    positions = torch.arange(S, dtype=torch.int32).repeat(B)
    flat = ids.reshape(-1).to(torch.int32)
    targets = shifted_targets(labels)
    kept = without_padding(mask, batch_segments(ids, mask, labels=labels), flat, positions, targets)
    index = mask.reshape(-1).nonzero().squeeze(1)
    got_ids, got_pos, got_targets, rows = kept
    assert torch.equal(got_ids, flat[index]) and torch.equal(got_targets, targets[index])
    assert got_pos.tolist() == list(range(2, S)) + list(range(6))
    assert rows.tolist() == [0] * (S - 2) + [1] * 6
    counted = labels.clone()
    counted[0, 2] = 5  # the padding row 1 predicts token 2: padding seen, nothing dropped
    assert without_padding(mask, batch_segments(ids, mask, labels=counted), flat, positions,
                           shifted_targets(counted)) is None
    ones = torch.ones(B, S, dtype=torch.bool)
    packed = torch.zeros(B * S, dtype=torch.int32)  # (segments without padding: nothing to drop)
    assert without_padding(ones, packed, flat, positions, targets) is None


def test_padding_nobody_sees_becomes_documents_of_its_own():
    """With labels whose every padding row's target is ignored, and each row's tokens one run,
    the padding before a row's tokens is document 0, the tokens 1, the padding after them 2;
    else (a padding row's target counted, a gap inside a row, no labels) padding stays -1."""
    ids, _ = ids_and_labels(8)
    mask = torch.ones(B, S, dtype=torch.bool)
    mask[0, :2] = False
    mask[1, 6:] = False
    labels = torch.full((B, S), -100)
    labels[0, 3:] = 1  # row 0's first token (position 2) predicts nothing: its last padding row's target
    labels[1, :6] = 1
    assert batch_segments(ids, mask, labels=labels).view(B, S).tolist() == [
        [0, 0] + [1] * 7, [1] * 6 + [2] * 3]
    counted = labels.clone()
    counted[0, 2] = 5  # the padding row 1 predicts token 2: Hugging Face's loss counts it
    assert batch_segments(ids, mask, labels=counted).view(B, S)[0].tolist() == [-1, -1] + [0] * 7
    gap = mask.clone()
    gap[1, 2] = False  # two runs of tokens in row 1
    labels[1, 3] = -100
    assert batch_segments(ids, gap, labels=labels).view(B, S)[1].tolist() == [0, 0, -1] + [0] * 3 + [-1] * 3
    assert batch_segments(ids, mask).view(B, S)[1].tolist() == [0] * 6 + [-1] * 3


def test_bad_batches_are_argument_errors_that_name_the_argument():
    model = tiny_model("llama")
    cmodel = from_hf(model, progress=False)
    ids, labels = ids_and_labels(9)
    ones = torch.ones(B, S, dtype=torch.long)
    cu = torch.tensor([0, 4, 9, 12, 15, 18])
    bad = [
        (dict(attention_mask=ones[:, :5]), "attention_mask must be \\[2, 9\\]"),
        (dict(attention_mask=ones[None]), "attention_mask must be \\[2, 9\\]"),
        (dict(attention_mask=ones.float()), "attention_mask must be a bool or integer"),
        (dict(attention_mask=ones * 2), "attention_mask holds values other than 0 and 1"),
        (dict(attention_mask=torch.cat([ones[:1], 0 * ones[:1]])), "attention_mask pads a whole row"),
        (dict(attention_mask=ones, cu_seq_lens_q=cu), "either attention_mask .* or cu_seq_lens"),
        (dict(cu_seq_lens_q=torch.tensor([0, 4, 10, 18])), "boundary at every row start"),
        (dict(cu_seq_lens_q=torch.tensor([0, 4, 9, 17])), "end at the token count 18"),
        (dict(cu_seq_lens_q=cu, cu_seq_lens_k=torch.tensor([0, 9, 9, 12, 15, 18])), "cu_seq_lens_k differs"),
        (dict(cu_seq_lens_q=cu.float()), "cu_seq_lens_q must be an integer tensor"),
        (dict(cu_seq_lens_q=cu, position_ids=torch.arange(S)[None]), "position_ids disagree with cu_seq_lens_q"),
        (dict(inputs_embeds=torch.zeros(B, S, 64)), "inputs_embeds=a tensor is not implemented"),
        (dict(use_cache=True), "use_cache=True is not implemented"),
        (dict(past_key_values=object()), "past_key_values"),
        (dict(output_hidden_states=True), "output_hidden_states"),
        (dict(seq_idx=ones), "'seq_idx', which coda-ir does not implement"),
        (dict(num_items_in_batch=torch.tensor([3, 4])), "num_items_in_batch must be a number or a one-element"),
        (dict(num_items_in_batch=0), "num_items_in_batch must be positive"),
    ]
    for kwargs, match in bad:
        with pytest.raises(coda_ir.ArgumentError, match=match):
            cmodel(ids, labels=labels, **kwargs)
    with pytest.raises(coda_ir.ArgumentError, match="needs labels"):
        cmodel(ids, num_items_in_batch=3)
    # what changes nothing passes (token_type_ids: the Hugging Face models ignore them too)
    _check_kwargs(dict(token_type_ids=ones, return_dict=False, use_cache=False, output_attentions=False,
                       output_hidden_states=None, logits_to_keep=0, inputs_embeds=None, past_key_values=None))


def test_readme_batches_example_runs(capsys):
    import re
    from pathlib import Path

    readme = Path(__file__).resolve().parents[2] / "README.md"
    snippet = next(s for s in re.findall(r"```python\n(.*?)```", readme.read_text(), re.S)
                   if "from_hf(" in s and "attention_mask=" in s)
    exec(compile(snippet, str(readme), "exec"), {})
    pairs = re.findall(r"(padded|packed): coda-ir loss ([0-9.]+), Hugging Face loss ([0-9.]+)", capsys.readouterr().out)
    assert [p[0] for p in pairs] == ["padded", "packed"]
    for _, ours, theirs in pairs:
        assert abs(float(ours) - float(theirs)) <= 2e-4


def test_masked_programs_are_valid_nn():
    """The masked decoder program and the masked tensor-parallel attention segment: the
    attention reads `%seg` (i32, one per row) as its segments operand."""
    from coda_ir.torch.hf import decoder_program, spec_of, tp_attention_program

    spec = spec_of(tiny_model("qwen3"))
    for text in (decoder_program(spec, B * S, S, segments=True), tp_attention_program(spec, B * S, S, segments=True)):
        module = coda_ir.parse(text)
        module.verify()
        (attention,) = [op for op in module.walk() if op.name == "nn.attention"]
        assert [a.name_hint for a in attention.operands] == ["r", "seg"]


def test_readme_trainer_example_runs(capsys):
    """The README's Trainer (padded) and SFTTrainer (packed) example, as written: both trainers
    train the Hugging Face model's parameters through coda-ir, and afterwards the coda-ir loss of
    a padded batch equals Hugging Face's own on those weights."""
    import re
    from pathlib import Path

    pytest.importorskip("trl")
    readme = Path(__file__).resolve().parents[2] / "README.md"
    snippet = next(s for s in re.findall(r"```python\n(.*?)```", readme.read_text(), re.S) if "SFTTrainer(" in s)
    scope: dict = {}
    exec(compile(snippet, str(readme), "exec"), scope)
    out = capsys.readouterr().out
    ours, theirs = map(float, re.search(r"after training: coda-ir loss ([0-9.]+), Hugging Face loss ([0-9.]+)", out).groups())
    assert abs(ours - theirs) <= 2e-4
    # every optimizer step was taken (3 Trainer steps, then 3 SFTTrainer steps), with finite losses
    for trainer in (scope["trainer"], scope["sft"]):
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        assert trainer.state.global_step == 3 and len(losses) == 3
        assert all(torch.isfinite(torch.tensor(float(x))) for x in losses)
    # and the weights moved: the trained model differs from a fresh one of the same seed
    torch.manual_seed(0)
    fresh = type(scope["model"])(scope["config"])
    assert not torch.equal(fresh.model.layers[0].mlp.up_proj.weight, scope["model"].model.layers[0].mlp.up_proj.weight)


def test_trainer_facing_attributes_and_checkpointing_kwargs():
    """What a Trainer asks of a PreTrainedModel comes from the Hugging Face model; the Trainer's
    gradient_checkpointing_kwargs are taken (non-reentrant only)."""
    from coda_ir import ArgumentError

    model = tiny_model("llama")
    cm = from_hf(model, progress=False)
    assert cm.generation_config is model.generation_config
    assert cm.get_output_embeddings() is model.lm_head
    # the Hugging Face model is no submodule: the parameters are the units', each once
    assert {id(p) for p in cm.parameters()} == {id(p) for p in model.parameters()}
    assert not any(name.startswith("_hf_model") for name, _ in cm.named_modules())
    with pytest.raises(AttributeError):
        cm.no_such_attribute
    cm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert cm.gradient_checkpointing
    with pytest.raises(ArgumentError, match="use_reentrant"):
        cm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})


def test_readme_deterministic_mode_example_runs(capsys):
    """The README's deterministic-mode example, as written: nothing in a from_hf step (padded
    batch included) is a kernel PyTorch's strict deterministic mode refuses, and two steps give
    the same bits."""
    import re
    from pathlib import Path

    readme = Path(__file__).resolve().parents[2] / "README.md"
    snippet = next(s for s in re.findall(r"```python\n(.*?)```", readme.read_text(), re.S)
                   if "use_deterministic_algorithms(True)" in s)
    try:
        exec(compile(snippet, str(readme), "exec"), {})
    finally:
        torch.use_deterministic_algorithms(False)
    assert "every gradient of two steps bitwise equal: True" in capsys.readouterr().out


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("padded", [False, True])
def test_cuda_deterministic_mode_repeats_every_gradient_bitwise(padded, monkeypatch):
    """Under torch.use_deterministic_algorithms(True) SDPA's choice leaves cuDNN out (its dq
    accumulation is not reproducible) and coda-ir's attention follows it; a padded batch runs
    flash-attention's varlen backward, which then runs deterministically too. Shapes where SDPA
    picks a fused backend (head_dim 64, seq 256)."""
    from coda_ir.runtime import attention

    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    overrides = dict(hidden_size=256, intermediate_size=640, num_attention_heads=4, num_key_value_heads=2,
                     head_dim=64, vocab_size=1000)
    model = tiny_model("qwen3", torch.bfloat16, **overrides).cuda()
    cmodel = from_hf(model, progress=False)
    torch.manual_seed(3)
    ids = torch.randint(0, 1000, (2, 256), device="cuda")
    kwargs = {"labels": ids.clone()}
    if padded:
        mask = torch.ones_like(ids)
        mask[1, 200:] = 0
        kwargs = {"attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}
    torch.use_deterministic_algorithms(True)
    try:
        qkv = torch.empty(512, (4 + 2 * 2) * 64, device="cuda", dtype=torch.bfloat16)
        assert attention.backend(qkv, 4, 2, 64, 256, True) == attention.FLASH
        runs = []
        for _ in range(3):  # the first compiles and tunes
            model.zero_grad(set_to_none=True)
            loss = cmodel(ids, **kwargs).loss
            loss.backward()
            runs.append((loss.detach().clone(), [p.grad.clone() for p in model.parameters()]))
    finally:
        torch.use_deterministic_algorithms(False)
    (loss1, grads1), (loss2, grads2) = runs[1:]
    assert torch.equal(loss1, loss2)
    assert all(torch.equal(a, b) for a, b in zip(grads1, grads2))
