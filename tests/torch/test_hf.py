"""coda_ir.torch.from_hf: Hugging Face causal LMs (LLaMA, Qwen3 and the other families of the
README table) trained through coda-ir.

Tiny random-init configurations (no downloads, tests/torch/hf_families.py): hidden 64, 2 layers,
GQA 4/2 of head_dim 16, vocab 128, intermediate 96; batch 2 x seq 7 (odd: no tile divides it).
Training over many steps against Hugging Face: tests/torch/test_convergence.py. Every check compares
against the same Hugging Face model run in float64, under the NN_DIALECT bar: coda-ir's error at
most twice the Hugging Face model's own error in the same dtype.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

transformers = pytest.importorskip("transformers")

import coda_ir  # noqa: E402
from coda_ir.testing import assert_matches  # noqa: E402
from coda_ir.torch.hf import decoder_program, from_hf, head_program, shifted_targets, spec_of  # noqa: E402
from tests.torch.hf_families import VOCAB, tiny_model  # noqa: E402 (the registry of families)

BATCH, SEQ = 2, 7




def batch(seed: int = 1, ignored: bool = True, vocab: int = VOCAB):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (BATCH, SEQ), generator=g)
    labels = torch.randint(0, vocab, (BATCH, SEQ), generator=g)
    if ignored:
        labels[0, 2] = -100
        labels[1, 4:] = -100
    return ids, labels


def hf_loss_and_grads(model, ids, labels):
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def coda_loss_and_grads(model, cmodel, ids, labels):
    model.zero_grad(set_to_none=True)
    loss = cmodel(ids, labels=labels).loss
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("family", ["llama", "qwen3"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_loss_and_every_gradient_match_float64(family, dtype):
    _check_loss_and_every_gradient(tiny_model(family, dtype), dtype)


@pytest.mark.parametrize("family", ["llama"])  # qwen3 runs the same RoPE (measured below); one is enough in CI
def test_fp32_rope_uses_the_models_frequencies_far_into_the_context(family):
    # Positions ~4000 with theta 5e5, head_dim 32: Hugging Face rotates by its inv_freq buffer,
    # computed in fp32 ops (1-2 ulp off the correctly rounded theta ** (-2i / hd) in about a
    # third of the frequencies: ~1e-4 rad of angle here), and its float64 model keeps those
    # fp32 frequencies. With theta's own frequencies coda-ir's gradients were up to 6.0x
    # (llama) / 4.2x (qwen3) Hugging Face fp32's error off its float64 model, beyond the 2x bar;
    # with the model's frequencies (nn.rope inv_freq) 1.4x / 1.2x.
    modelT = tiny_model(family, hidden_size=128, head_dim=32, rope_theta=500000.0)
    model64 = copy.deepcopy(modelT).double()
    ids, labels = batch()
    positions = torch.arange(4000, 4000 + SEQ).unsqueeze(0)
    assert spec_of(modelT).inv_freq == tuple(modelT.model.rotary_emb.inv_freq.tolist())
    grads = []
    for m in (model64, copy.deepcopy(modelT)):
        m(input_ids=ids, labels=labels, position_ids=positions, use_cache=False).loss.backward()
        grads.append({n: p.grad for n, p in m.named_parameters()})
    loss = from_hf(modelT, progress=False)(ids, labels=labels, position_ids=positions).loss
    loss.backward()
    names = sorted(grads[0])
    ours = {n: p.grad for n, p in modelT.named_parameters()}
    assert_matches([ours[n] for n in names], [grads[0][n] for n in names], [grads[1][n] for n in names], names)


@pytest.mark.parametrize("family", ["llama3_rope", "phi3_longrope", "phi4_mini", "qwen2_yarn"])
def test_scaled_rope_far_into_the_context(family):
    """Positions 3000.. (past the tiny configs' original contexts of 16 / 8 tokens): llama3's
    bent low frequencies carry ~1e3 rad of angle; longrope switches to its long factors, as
    Hugging Face does per forward (max(position_ids) + 1 > original_max_position_embeddings).
    The from_hf model's long frequencies are bit for bit the ones Hugging Face swaps in. yarn:
    7 of 8 frequencies divided by 4 and cos / sin times 0.1 ln 4 + 1 (rounded to fp32 as
    Hugging Face's fp32 multiply rounds it); its frequencies are the model's buffer bit for bit."""
    modelT = tiny_model(family)
    model64 = copy.deepcopy(modelT).double()
    ids, labels = batch()
    positions = torch.arange(3000, 3000 + SEQ).unsqueeze(0)
    grads = []
    for m in (model64, copy.deepcopy(modelT)):
        m(input_ids=ids, labels=labels, position_ids=positions, use_cache=False).loss.backward()
        grads.append({n: p.grad for n, p in m.named_parameters()})
    spec = spec_of(modelT)
    if family == "qwen2_yarn":
        rotary = modelT.model.rotary_emb
        assert spec.layer(0).inv_freq == tuple(rotary.inv_freq.tolist())
        assert spec.layer(0).rope_scaling == rotary.attention_scaling == 0.1 * math.log(4.0) + 1
    if family == "phi3_longrope":
        hf_rotary = copy.deepcopy(modelT).model.rotary_emb
        hf_rotary(torch.zeros(1), torch.arange(3000, 3000 + SEQ)[None])  # Hugging Face swaps the long ones in
        assert spec.layer(0).long_inv_freq == tuple(hf_rotary.inv_freq.tolist()) != spec.layer(0).inv_freq
        assert spec.layer(0).long_after == 8 and "rotary_dim = 8" in decoder_program(spec, BATCH * SEQ, SEQ)
    loss = from_hf(modelT, progress=False)(ids, labels=labels, position_ids=positions).loss
    loss.backward()
    names = sorted(grads[0])
    ours = {n: p.grad for n, p in modelT.named_parameters()}
    assert_matches([ours[n] for n in names], [grads[0][n] for n in names], [grads[1][n] for n in names], names)


def _check_loss_and_every_gradient(model_t, dtype, vocab: int = VOCAB):
    model64 = copy.deepcopy(model_t).double()  # the same (rounded) weights
    ids, labels = batch(vocab=vocab)
    loss64, grads64 = hf_loss_and_grads(model64, ids, labels)
    loss_t, grads_t = hf_loss_and_grads(copy.deepcopy(model_t), ids, labels)
    cmodel = from_hf(model_t, progress=False)
    loss, grads = coda_loss_and_grads(model_t, cmodel, ids, labels)
    names = sorted(grads64)
    assert set(grads) == set(names)
    assert_matches([loss] + [grads[n] for n in names], [loss64] + [grads64[n] for n in names],
                   [loss_t] + [grads_t[n] for n in names], ["loss"] + names, loss=(dtype, BATCH * SEQ))
    return cmodel


# One dtype per family in the default run (each case compiles its decoder programs on the Triton
# CPU interpreter, ~5-10 s): bf16 where the family's difference is in rounding (the fp32 norm math
# and rounded embedding scale of Gemma, the multipliers of Granite, biases), fp32 elsewhere;
# LLaMA and Qwen3 run both above.
FAMILY_CASES = [
    ("mistral", torch.bfloat16, {}),
    ("qwen2", torch.float32, {}),
    ("phi3", torch.bfloat16, {}),
    ("granite", torch.bfloat16, {}),
    ("smollm3", torch.float32, {}),
    ("olmo2", torch.float32, {}),
    ("gemma", torch.bfloat16, {}),
    ("gemma2", torch.float32, {}),
    ("gemma3", torch.bfloat16, {}),
    ("glm4", torch.float32, {}),
    ("llama", torch.float32, dict(attention_bias=True, mlp_bias=True)),  # every linear with a bias
    # scaled / partial RoPE (hf_families.py), one dtype each (llama3_rope: at positions 3000+,
    # where its bent frequencies matter, test_scaled_rope_far_into_the_context)
    ("phi3_longrope", torch.bfloat16, {}),
    ("glm4_partial", torch.float32, {}),
    # Phi-4-mini's partial rotation (rotary_dim 12 of head_dim 16); fp32 too with --long
    ("phi4_mini", torch.bfloat16, {}),
    ("gemma3_linear", torch.bfloat16, {}),
    ("qwen2_yarn", torch.float32, {}),
]


# --long only: phi4_mini's partial rotation also runs in fp32 in CI, far into the context
# (test_scaled_rope_far_into_the_context[phi4_mini]) and in the QKV GEMM
# (test_phi4_mini_rotation_rides_in_the_qkv_gemm); the bf16 case above checks every gradient
LONG_FAMILY_CASES = [("phi4_mini", torch.float32, {})]


def pytest_generate_tests(metafunc):
    if metafunc.function.__name__ == "test_an_odd_vocabulary_runs_its_head_padded_and_matches_float64":
        # CI: the tied head (the padded copy of the weight the embedding shares); --long: untied too
        metafunc.parametrize("tied", [True, False] if metafunc.config.getoption("--long") else [True])
    if metafunc.function.__name__ == "test_family_loss_and_every_gradient_match_float64":
        cases = FAMILY_CASES + (LONG_FAMILY_CASES if metafunc.config.getoption("--long") else [])
        metafunc.parametrize("family, dtype, overrides", cases,
                             ids=[f"{f}-{str(d)[6:]}" + ("-biases" if o else "") for f, d, o in cases])


def test_family_loss_and_every_gradient_match_float64(family, dtype, overrides):
    model = tiny_model(family, dtype, **overrides)
    cmodel = _check_loss_and_every_gradient(model, dtype)
    assert cmodel.spec.family == model.config.model_type


def test_an_odd_vocabulary_runs_its_head_padded_and_matches_float64(tied):
    """Granite's 49155-token vocabulary (and any tokenizer grown by a pad token) leaves the logits'
    rows unaligned: a loss's head runs padded to a multiple of VOCAB_ALIGNMENT rows (zero rows,
    `classes` keeping them out of the softmax); the loss and every gradient, the tied weight's
    included, are the unpadded model's (vocabulary 123 here, padded to 128)."""
    from coda_ir.torch.hf import VOCAB_ALIGNMENT

    model = tiny_model("granite", torch.bfloat16, vocab_size=123, tie_word_embeddings=tied)
    cmodel = _check_loss_and_every_gradient(model, torch.bfloat16, vocab=123)
    program = head_program(cmodel.spec, BATCH * SEQ, loss=True)
    assert f"tensor<{VOCAB_ALIGNMENT * 2}x64xbf16>" in program and "classes = 123" in program
    assert "classes" not in head_program(cmodel.spec, BATCH * SEQ, loss=False)  # the logits a caller gets: 123 wide
    ids, _ = batch(vocab=123)
    assert cmodel(ids).logits.shape == (BATCH, SEQ, 123)


def test_logits_without_labels_match_float64():
    model = tiny_model("llama")
    ids, _ = batch()
    ref64 = copy.deepcopy(model).double()(input_ids=ids).logits
    refT = model(input_ids=ids).logits
    out = from_hf(model, progress=False)(ids)
    assert out.loss is None and out.logits.shape == (BATCH, SEQ, VOCAB)
    assert_matches([out.logits.detach()], [ref64.detach()], [refT.detach()], ["logits"])


def test_training_after_an_inference_mode_forward():
    # from_hf keeps a step's default positions per shape; one made under inference_mode is an
    # inference tensor that a training step could not save for its backward: kept apart
    model = tiny_model("llama")
    coda = from_hf(model, progress=False)
    ids, labels = batch()
    with torch.inference_mode():
        logits = coda(ids).logits
    loss = coda(ids, labels=labels).loss
    loss.backward()
    reference = copy.deepcopy(model).double()
    expected = reference(input_ids=ids, labels=labels).loss
    torch.testing.assert_close(loss.double(), expected.double(), rtol=1e-4, atol=1e-5)
    assert logits.shape == (BATCH, SEQ, VOCAB)
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tied_embeddings_and_position_ids(dtype):
    model = tiny_model("llama", dtype, tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    ids, labels = batch()
    positions = torch.arange(3, 3 + SEQ).unsqueeze(0)
    model64 = copy.deepcopy(model).double()
    model64.zero_grad()
    loss64 = model64(input_ids=ids, labels=labels, position_ids=positions).loss
    loss64.backward()
    modelT = copy.deepcopy(model)
    lossT = modelT(input_ids=ids, labels=labels, position_ids=positions).loss
    lossT.backward()
    cmodel = from_hf(model, progress=False)
    assert cmodel.spec.tied
    loss = cmodel(ids, labels=labels, position_ids=positions).loss
    loss.backward()
    w, w64, wT = (m.model.embed_tokens.weight.grad for m in (model, model64, modelT))
    assert_matches([loss.detach(), w], [loss64.detach(), w64], [lossT.detach(), wT], ["loss", "tied embedding grad"],
                   loss=(dtype, BATCH * SEQ))


def _tied_grads(cmodel, model, batches, tied_path: bool, monkeypatch):
    """The tied weight's gradient of one backward over the summed losses of `batches`, through
    the TiedWeight path or (`tied_path=False`) autograd's sum of two dense gradients."""
    from coda_ir.torch.hf import CodaCausalLM

    with monkeypatch.context() as m:
        if not tied_path:
            m.setattr(CodaCausalLM, "_tied_weights", lambda self: None)
        model.zero_grad(set_to_none=True)
        sum(cmodel(ids, labels=labels).loss for ids, labels in batches).backward()
    return model.model.embed_tokens.weight.grad.clone()


def test_tied_weight_takes_the_embedding_rows_into_the_heads_gradient(monkeypatch):
    from coda_ir.runtime import library

    model = tiny_model("llama", tie_word_embeddings=True)
    cmodel = from_hf(model, progress=False)
    calls = []
    real = library.embedding_grad_into
    monkeypatch.setattr(library, "embedding_grad_into", lambda *a: calls.append(a[0].shape) or real(*a))
    dense = []
    real_dense = library.embedding_grad
    monkeypatch.setattr(library, "embedding_grad", lambda *a, **k: dense.append(1) or real_dense(*a, **k))
    ids, labels = batch()
    ids[0, :4] = 5  # a repeated id
    tied = _tied_grads(cmodel, model, [(ids, labels)], True, monkeypatch)
    assert calls == [(VOCAB, 64)] and not dense  # no dense [V, D] embedding gradient
    summed = _tied_grads(cmodel, model, [(ids, labels)], False, monkeypatch)
    assert dense  # the other path does take it
    torch.testing.assert_close(tied, summed, rtol=1e-5, atol=1e-6)


def test_tied_weight_gradient_of_two_forwards_in_one_backward(monkeypatch):
    # gradient accumulation in one backward: each forward's aliases meet their own gradients
    model = tiny_model("llama", tie_word_embeddings=True)
    cmodel = from_hf(model, progress=False)
    b1, b2 = batch(seed=1), batch(seed=2)
    both = _tied_grads(cmodel, model, [b1, b2], True, monkeypatch)
    one = _tied_grads(cmodel, model, [b1], True, monkeypatch)
    two = _tied_grads(cmodel, model, [b2], True, monkeypatch)
    torch.testing.assert_close(both, one + two, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(both, _tied_grads(cmodel, model, [b1, b2], False, monkeypatch), rtol=1e-5, atol=1e-6)


def test_tied_weight_under_create_graph_sums_out_of_place(monkeypatch):
    # a backward that records its own graph must not see gradients updated in place
    from coda_ir.runtime import library

    model = tiny_model("llama", tie_word_embeddings=True)
    cmodel = from_hf(model, progress=False)
    ids, labels = batch()
    reference = _tied_grads(cmodel, model, [(ids, labels)], True, monkeypatch)
    monkeypatch.setattr(library, "embedding_grad_into", lambda *a: (_ for _ in ()).throw(AssertionError("in place")))
    weight = model.model.embed_tokens.weight
    (grad,) = torch.autograd.grad(cmodel(ids, labels=labels).loss, [weight], create_graph=True)
    torch.testing.assert_close(grad.detach(), reference, rtol=1e-5, atol=1e-6)


def test_tied_padding_row_gets_only_the_heads_gradient_like_hugging_face():
    model = tiny_model("llama", tie_word_embeddings=True, pad_token_id=3)
    ids, labels = batch()
    ids[0, :3] = 3
    model64 = copy.deepcopy(model).double()
    model64(input_ids=ids, labels=labels).loss.backward()
    from_hf(model, progress=False)(ids, labels=labels).loss.backward()
    grad, grad64 = model.model.embed_tokens.weight.grad, model64.model.embed_tokens.weight.grad
    assert torch.count_nonzero(grad64[3]) > 0  # the LM head's share
    torch.testing.assert_close(grad.double(), grad64, rtol=1e-4, atol=1e-5)


def test_frozen_tied_weight_gets_no_gradient():
    model = tiny_model("llama", tie_word_embeddings=True)
    model.model.embed_tokens.weight.requires_grad_(False)
    ids, labels = batch()
    from_hf(model, progress=False)(ids, labels=labels).loss.backward()
    assert model.model.embed_tokens.weight.grad is None
    assert model.model.norm.weight.grad is not None


def test_padding_token_row_gets_no_gradient_like_hugging_face():
    model = tiny_model("llama", pad_token_id=3)
    assert model.model.embed_tokens.padding_idx == 3
    ids, labels = batch()
    ids[0, :3] = 3  # padding tokens in the input
    model64 = copy.deepcopy(model).double()
    model64(input_ids=ids, labels=labels).loss.backward()
    from_hf(model, progress=False)(ids, labels=labels).loss.backward()
    grad, grad64 = model.model.embed_tokens.weight.grad, model64.model.embed_tokens.weight.grad
    assert torch.count_nonzero(grad64[3]) == 0 and torch.count_nonzero(grad[3]) == 0
    torch.testing.assert_close(grad.double(), grad64, rtol=1e-4, atol=1e-5)


def test_unit_reads_the_weights_the_layer_has_now():
    """A decoder unit looks its weights up at each call, in the modules' own tables (not through
    nn.Module.__getattr__): a parameter replaced on its module (as FSDP2 and `p.data` swaps do),
    a replaced submodule and a weight exposed as a property are all seen as getattr sees them."""
    from coda_ir.torch import hf

    model = tiny_model("llama")
    unit = from_hf(model, progress=False).layers[0]
    layer = model.model.layers[0]
    names = [name for name, _, _ in unit.named_weights()]
    expect = {n: t for n, t in layer.named_parameters(prefix="model.layers.0")}
    assert [expect[n] is t for n, t, _ in unit.named_weights()] == [True] * len(names)
    layer.mlp.down_proj.weight = torch.nn.Parameter(layer.mlp.down_proj.weight.detach().clone())
    layer.self_attn.o_proj = torch.nn.Linear(*reversed(layer.self_attn.o_proj.weight.shape), bias=False)
    got = dict((n, t) for n, t, _ in unit.named_weights())
    assert got["model.layers.0.mlp.down_proj.weight"] is layer.mlp.down_proj.weight
    assert got["model.layers.0.self_attn.o_proj.weight"] is layer.self_attn.o_proj.weight

    class Wrapped(torch.nn.Module):  # a weight the module exposes as a property, not a parameter of its own
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        @property
        def weight(self):
            return self.inner.weight

    layer.mlp.up_proj = Wrapped(layer.mlp.up_proj)
    assert hf._child(layer, ["mlp", "up_proj", "weight"]) is layer.mlp.up_proj.inner.weight
    assert hf._child(layer, ["self_attn", "o_proj", "bias"]) is None  # a parameter slot holding None


def test_parameters_are_the_models_own():
    model = tiny_model("qwen3")
    cmodel = from_hf(model, progress=False)
    assert {id(p) for p in cmodel.parameters()} == {id(p) for p in model.parameters()}
    assert len(cmodel.layers) == 2 and isinstance(cmodel.layers, torch.nn.ModuleList)
    # a layer unit owns exactly its decoder layer's parameters
    assert {id(p) for p in cmodel.layers[1].parameters()} == {id(p) for p in model.model.layers[1].parameters()}


def test_sibling_weights_are_packed_once_and_a_step_copies_no_weight(monkeypatch):
    from coda_ir.runtime import library

    model = tiny_model("llama")
    before = copy.deepcopy(model)
    cmodel = from_hf(model, progress=False)
    for layer, ref in zip(model.model.layers, before.model.layers):
        attn, mlp = layer.self_attn, layer.mlp
        assert library.adjacent_view([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]) is not None
        assert library.adjacent_view([mlp.gate_proj.weight, mlp.up_proj.weight]) is not None
        torch.testing.assert_close(attn.k_proj.weight, ref.self_attn.k_proj.weight, rtol=0, atol=0)
        torch.testing.assert_close(mlp.up_proj.weight, ref.mlp.up_proj.weight, rtol=0, atol=0)
    # every concatenation the programs run (forward, and the backward's rebuild) is a view
    views = []
    real = library.concat

    def spy(tensors, axis):
        out = real(tensors, axis)
        views.append(out.untyped_storage().data_ptr() == tensors[0].untyped_storage().data_ptr())
        return out

    monkeypatch.setattr(library, "concat", spy)
    ids, labels = batch()
    cmodel(ids, labels=labels).loss.backward()
    assert views and all(views), views
    assert model.model.layers[0].self_attn.q_proj.weight.grad is not None


@pytest.mark.parametrize("family, dtype", [("qwen2", torch.float32), ("phi3", torch.bfloat16)])
def test_biases_are_packed_and_fused_weights_read_as_they_are(family, dtype, monkeypatch):
    # Qwen2: q/k/v biases moved into one storage like their weights, so the packed GEMM's bias
    # is a view; Phi3: qkv_proj / gate_up_proj are the packed weights, no concatenation at all
    # (the programs are the family test's: compiled once per process)
    from coda_ir.runtime import library

    model = tiny_model(family, dtype)
    cmodel = from_hf(model, progress=False)
    views = []
    real = library.concat

    def spy(tensors, axis):
        out = real(tensors, axis)
        views.append((tensors[0].dim(), out.untyped_storage().data_ptr() == tensors[0].untyped_storage().data_ptr()))
        return out

    monkeypatch.setattr(library, "concat", spy)
    ids, labels = batch()
    cmodel(ids, labels=labels).loss.backward()
    if family == "phi3":
        assert views == []
    else:
        assert {rank for rank, _ in views} == {1, 2} and all(view for _, view in views), views


def test_a_step_checks_its_token_ids_and_labels_once(monkeypatch):
    # the units' own host checks (a device-to-host sync each) are skipped: from_hf checks the
    # step's ids and labels once, up front; the backward reads the checked saved copies
    from coda_ir.runtime import compiled

    calls = []
    real = compiled.check_indices
    monkeypatch.setattr(compiled, "check_indices", lambda *a: calls.append(a[0]) or real(*a))
    model = tiny_model("llama")
    cmodel = from_hf(model, progress=False)
    ids, labels = batch()
    cmodel(ids, labels=labels).loss.backward()
    assert calls == []
    bad = labels.clone()
    bad[1, 2] = -7
    with pytest.raises(coda_ir.ArgumentError, match=r"labels holds -7 at \[1, 2\]"):
        cmodel(ids, labels=bad)
    bad_ids = ids.clone()
    bad_ids[0, 4] = VOCAB
    with pytest.raises(coda_ir.ArgumentError, match=rf"input_ids holds {VOCAB} at \[0, 4\], expected values in \[0, {VOCAB}\)"):
        cmodel(bad_ids)


def test_every_decoder_layer_shares_one_compiled_program(capsys):
    model = tiny_model("llama")
    cmodel = from_hf(model, progress=True)
    ids, labels = batch()
    cmodel(ids, labels=labels).loss.backward()
    first = cmodel.layers[0].function("layer", BATCH * SEQ, SEQ)
    assert all(unit.function("layer", BATCH * SEQ, SEQ) is first for unit in cmodel.layers)
    err = capsys.readouterr().err
    assert "coda-ir: compiling" in err or "coda-ir: compiled" not in err  # cached from an earlier test is fine
    quiet = from_hf(tiny_model("llama", seed=5, hidden_size=32, head_dim=8), progress=False)
    quiet(ids, labels=labels)
    assert capsys.readouterr().err == ""


def test_frozen_weights_get_no_gradient():
    model = tiny_model("llama")
    for name, p in model.named_parameters():
        p.requires_grad_("mlp" in name)  # LoRA-like: most of the model frozen
    ids, labels = batch()
    from_hf(model, progress=False)(ids, labels=labels).loss.backward()
    for name, p in model.named_parameters():
        assert (p.grad is not None) == ("mlp" in name), name


def test_torch_compile_fullgraph_with_ignored_labels():
    model = tiny_model("qwen3")
    ids, labels = batch(ignored=True)
    cmodel = from_hf(model, progress=False)
    eager_loss, eager_grads = coda_loss_and_grads(model, cmodel, ids, labels)
    compiled = torch.compile(cmodel, backend="aot_eager", fullgraph=True, dynamic=False)
    loss, grads = coda_loss_and_grads(model, compiled, ids, labels)
    assert torch.equal(loss, eager_loss)
    for name in eager_grads:
        assert torch.equal(grads[name], eager_grads[name]), name
    hf_loss = model(input_ids=ids, labels=labels).loss
    assert abs(loss.item() - hf_loss.item()) < 1e-4


def test_activation_checkpointing_of_layer_units():
    from torch.utils.checkpoint import checkpoint

    model = tiny_model("llama")
    ids, labels = batch()
    cmodel = from_hf(model, progress=False)
    plain_loss, plain_grads = coda_loss_and_grads(model, cmodel, ids, labels)
    for unit in cmodel.layers:
        forward = unit.forward
        unit.forward = lambda x, pos, s, _f=forward: checkpoint(_f, x, pos, s, use_reentrant=False)
    loss, grads = coda_loss_and_grads(model, cmodel, ids, labels)
    assert torch.equal(loss, plain_loss)
    for name in plain_grads:
        assert torch.equal(grads[name], plain_grads[name]), name


def test_shifted_targets_follow_hugging_face():
    labels = torch.tensor([[5, 6, -100, 8], [1, 2, 3, 4]])
    assert shifted_targets(labels).tolist() == [6, -100, 8, -100, 2, 3, 4, -100]


@pytest.mark.parametrize(
    "family, overrides, field",
    [
        # frequencies that follow each call's length: not static
        ("llama", dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0}), r"rope_scaling\['rope_type'\] = 'dynamic'"),
        ("llama", dict(hidden_act="relu"), "hidden_act"),
        ("llama", dict(attention_dropout=0.1), "attention_dropout"),
        ("olmo2", dict(layer_types=["full_attention", "chunked_attention"]), "layer_types"),
    ],
)
def test_unsupported_configuration_names_the_field(family, overrides, field):
    try:
        model = tiny_model(family, **overrides)
    except Exception as exc:  # this transformers version refuses the config itself
        pytest.skip(f"transformers refuses the config: {exc}")
    with pytest.raises(coda_ir.CodaError, match=field):
        from_hf(model)


def test_not_a_causal_lm_is_refused():
    with pytest.raises(coda_ir.CodaError, match="LlamaForCausalLM"):
        from_hf(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("config_cls, model_cls, field", [
    ("MixtralConfig", "MixtralForCausalLM", "num_local_experts"),
    ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", "num_(local_)?experts"),
])
def test_mixture_of_experts_is_refused_by_the_field(config_cls, model_cls, field):
    config = getattr(transformers, config_cls)(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                               num_key_value_heads=1, vocab_size=VOCAB, intermediate_size=32,
                                               head_dim=16, moe_intermediate_size=16)
    model = getattr(transformers, model_cls)(config)
    with pytest.raises(coda_ir.CompileError, match=rf"config\.{field} = \d+ is not supported: mixture-of-experts"):
        from_hf(model)


def test_another_model_type_is_refused_by_name():
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=VOCAB))
    with pytest.raises(coda_ir.CompileError, match=r"config\.model_type = 'gpt2'"):
        from_hf(model)


@pytest.mark.parametrize("family, overrides, prop, field, value", [
    # every layer sliding with a window of 4 < 7 positions (a window of at least the sequence
    # is a full causal layer: Mistral's case above)
    ("qwen3", dict(use_sliding_window=True, sliding_window=4, max_window_layers=0), "window", "sliding_window", "4"),
    ("granite", dict(attention_multiplier=0.125), "scale", "attention_multiplier", "0.125"),  # not 1/sqrt(head_dim)
    ("gemma2", dict(query_pre_attn_scalar=64), "scale", "query_pre_attn_scalar", "0.125"),
    ("gemma2", dict(attn_logit_softcapping=2.0), "softcap", "attn_logit_softcapping", "2.0"),
], ids=["window", "granite-scale", "gemma2-scale", "gemma2-softcap"])
def test_attention_properties_from_config_fields(family, overrides, prop, field, value):
    """nn.attention's optional `window` / `scale` / `softcap` properties from their config fields:
    the program carries them and the layer matches Hugging Face."""
    model = tiny_model(family, **overrides)
    assert f"{prop} = " in decoder_program(spec_of(model), BATCH * SEQ, SEQ)
    _check_loss_and_every_gradient(model, torch.float32)


def test_phi4_mini_rotation_rides_in_the_qkv_gemm():
    # Phi-4-mini's partial rotation (12 of 16 here, 96 of 128 released) is a pair map with a
    # period in the fused qkv_proj GEMM's epilogue, forward; its gradient an elementwise pass
    from xdsl.passes import PassPipeline

    from coda_ir.context import coda_passes, make_context
    from coda_ir.dialects import coda

    module = coda_ir.parse(decoder_program(spec_of(tiny_model("phi4_mini")), BATCH * SEQ, SEQ))
    PassPipeline.parse_spec(coda_passes(), "nn-autodiff,nn-to-coda").apply(make_context(), module)
    pair_maps = [op for op in module.walk() if isinstance(op, coda.PairMapOp) and op.period is not None]
    assert {(op.stride.value.data, op.period.value.data) for op in pair_maps} == {(6, 16)}  # type: ignore[union-attr]
    owners = {str(op.parent_op().attributes.get("coda.origin")) for op in pair_maps}  # type: ignore[union-attr]
    assert any("nn.linear" in o and "nn.rope" in o for o in owners) and any("nn.rope_grad" in o for o in owners)


def test_family_specs_are_data():
    # a family that differs from LLaMA only by name has LLaMA's spec and programs
    llama, mistral = spec_of(tiny_model("llama")), spec_of(tiny_model("mistral"))
    ministral = spec_of(tiny_model("ministral"))
    assert ministral.layer(0).window == mistral.layer(0).window == 4096
    for spec in (mistral, ministral):
        assert decoder_program(spec, BATCH * SEQ, SEQ) == decoder_program(llama, BATCH * SEQ, SEQ)
    qwen2 = spec_of(tiny_model("qwen2"))
    assert qwen2.qkv_bias and not qwen2.o_bias and not qwen2.mlp_bias
    phi3 = spec_of(tiny_model("phi3"))
    assert phi3.fused_qkv and phi3.fused_gate_up
    phi4 = spec_of(tiny_model("phi4_mini"))  # partial_rotary_factor 0.75 of head_dim 16, style "half"
    assert phi4.rope_style == "half" and phi4.layer(0).rotary_dim == 12 and len(phi4.layer(0).inv_freq) == 6
    assert "rotary_dim = 12" in decoder_program(phi4, BATCH * SEQ, SEQ)
    olmo2 = spec_of(tiny_model("olmo2"))
    assert olmo2.qk_norm == "full" and olmo2.norms == (None, "post_attention_layernorm", None, "post_feedforward_layernorm")
    smol = spec_of(tiny_model("smollm3"))
    assert [smol.layer(i).rope for i in range(2)] == [True, False]
    assert decoder_program(smol, BATCH * SEQ, SEQ, 0) != decoder_program(smol, BATCH * SEQ, SEQ, 1)
    gemma = spec_of(tiny_model("gemma"))
    assert (gemma.norm_offset, gemma.embed_scale, gemma.embed_scale_rounded, gemma.activation) == (1.0, 8.0, True, "gelu_tanh")
    assert "offset = 1.0" in decoder_program(gemma, BATCH * SEQ, SEQ)
    assert "nn.softcap " in head_program(spec_of(tiny_model("gemma2")), BATCH * SEQ, loss=True)
    gemma3 = spec_of(tiny_model("gemma3"))
    assert [gemma3.layer(i).theta for i in range(2)] == [1e4, 1e6] and gemma3.qk_norm == "head"
    assert 'offset = 1.0' in decoder_program(gemma3, BATCH * SEQ, SEQ).split("nn.head_rms_norm ")[1].split("\n")[0]
    glm4 = spec_of(tiny_model("glm4"))
    assert glm4.rope_style == "interleaved" and glm4.fused_gate_up and glm4.qkv_bias
    assert glm4.norms == ("input_layernorm", "post_self_attn_layernorm", "post_attention_layernorm", "post_mlp_layernorm")
    granite = spec_of(tiny_model("granite"))
    assert (granite.embed_scale, granite.residual_scale, granite.logits_scale) == (12.0, 0.22, 1 / 8.0)
    assert not llama.tensor_parallel_gaps() and "qkv_bias" in qwen2.tensor_parallel_gaps()


def test_tensor_parallel_refuses_what_its_segments_do_not_cover():
    from coda_ir.torch.hf import _refuse_tensor_parallel

    _refuse_tensor_parallel("layers.0", spec_of(tiny_model("qwen3")))  # the Qwen3 block: covered
    spec = spec_of(tiny_model("olmo2"))
    with pytest.raises(coda_ir.ArgumentError, match=r"layers\.0: tensor parallelism .* olmo2 .*norms.*qk_norm='full'"):
        _refuse_tensor_parallel("layers.0", spec)


def test_bad_inputs_are_argument_errors():
    model = tiny_model("llama")
    cmodel = from_hf(model, progress=False)
    ids, labels = batch()
    with pytest.raises(coda_ir.ArgumentError, match="input_ids"):
        cmodel(ids.float())
    with pytest.raises(coda_ir.ArgumentError, match="labels"):
        cmodel(ids, labels=labels[:, :3])
    bad = labels.clone()
    bad[0, 3] = VOCAB + 5  # a target outside [0, V) that is not the ignore index
    with pytest.raises(coda_ir.CodaError):
        cmodel(ids, labels=bad)
    bad_ids = ids.clone()
    bad_ids[1, 1] = VOCAB
    with pytest.raises(coda_ir.CodaError):
        cmodel(bad_ids, labels=labels)


_PINNED_QWEN3_LAYER = """\
func.func @decoder_layer(%x: tensor<5x8xf32>, %pos: tensor<5xi32>, %seg: tensor<5xi32>, %w_in: tensor<8xf32>, %wq: tensor<8x8xf32>, %wk: tensor<4x8xf32>, %wv: tensor<4x8xf32>, %wqn: tensor<4xf32>, %wkn: tensor<4xf32>, %wo: tensor<8x8xf32>, %w_post: tensor<8xf32>, %wg: tensor<6x8xf32>, %wu: tensor<6x8xf32>, %wd: tensor<8x6xf32>) -> tensor<5x8xf32> {
  %h = nn.rms_norm %x, %w_in {eps = 1.000000e-06 : f32} : tensor<5x8xf32>, tensor<8xf32> -> tensor<5x8xf32>
  %q = nn.linear %h, %wq : tensor<5x8xf32>, tensor<8x8xf32> -> tensor<5x8xf32>
  %k = nn.linear %h, %wk : tensor<5x8xf32>, tensor<4x8xf32> -> tensor<5x4xf32>
  %v = nn.linear %h, %wv : tensor<5x8xf32>, tensor<4x8xf32> -> tensor<5x4xf32>
  %qkv = nn.concat %q, %k, %v {axis = 1 : i64} : tensor<5x8xf32>, tensor<5x4xf32>, tensor<5x4xf32> -> tensor<5x16xf32>
  %qhn = nn.head_rms_norm %qkv, %wqn {head_dim = 4 : i64, heads = 2 : i64, eps = 1.000000e-06 : f32} : tensor<5x16xf32>, tensor<4xf32> -> tensor<5x16xf32>
  %khn = nn.head_rms_norm %qhn, %wkn {head_dim = 4 : i64, heads = 1 : i64, eps = 1.000000e-06 : f32, first_head = 2 : i64} : tensor<5x16xf32>, tensor<4xf32> -> tensor<5x16xf32>
  %r = nn.rope %khn, %pos {head_dim = 4 : i64, rotary_heads = 3 : i64, theta = 1.000000e+04 : f32, style = "half"} : tensor<5x16xf32>, tensor<5xi32> -> tensor<5x16xf32>
  %y = nn.attention %r, %seg {heads = 2 : i64, kv_heads = 1 : i64, head_dim = 4 : i64, seq_len = 5 : i64, causal = true} : tensor<5x16xf32>, tensor<5xi32> -> tensor<5x8xf32>
  %a = nn.linear %y, %wo : tensor<5x8xf32>, tensor<8x8xf32> -> tensor<5x8xf32>
  %x1 = nn.add %x, %a : tensor<5x8xf32>, tensor<5x8xf32> -> tensor<5x8xf32>
  %h1 = nn.rms_norm %x1, %w_post {eps = 1.000000e-06 : f32} : tensor<5x8xf32>, tensor<8xf32> -> tensor<5x8xf32>
  %g = nn.linear %h1, %wg : tensor<5x8xf32>, tensor<6x8xf32> -> tensor<5x6xf32>
  %u = nn.linear %h1, %wu : tensor<5x8xf32>, tensor<6x8xf32> -> tensor<5x6xf32>
  %s = nn.silu %g : tensor<5x6xf32> -> tensor<5x6xf32>
  %m = nn.mul %s, %u : tensor<5x6xf32>, tensor<5x6xf32> -> tensor<5x6xf32>
  %dn = nn.linear %m, %wd : tensor<5x6xf32>, tensor<8x6xf32> -> tensor<5x8xf32>
  %x2 = nn.add %x1, %dn : tensor<5x8xf32>, tensor<5x8xf32> -> tensor<5x8xf32>
  func.return %x2 : tensor<5x8xf32>
}
"""


def test_a_qwen3_decoder_program_is_pinned():
    """The program from_hf writes for one decoder layer (built through coda_ir.builder), op by op
    and property by property: a change to what the families' layers compute shows here first. A
    ModelSpec written as data (no Hugging Face model): Qwen3's per-head q/k norms, GQA, a
    padded / packed batch's segments."""
    from coda_ir.torch.hf import ModelSpec

    spec = ModelSpec(family="qwen3", hidden=8, layers=1, heads=2, kv_heads=1, head_dim=4, intermediate=6, vocab=16,
                     eps=1e-6, theta=10000.0, qk_norm="head", tied=False, dtype=torch.float32)
    assert decoder_program(spec, 5, 5, segments=True) == _PINNED_QWEN3_LAYER


def test_decoder_program_is_valid_nn():
    spec = spec_of(tiny_model("qwen3"))
    module = coda_ir.parse(decoder_program(spec, BATCH * SEQ, SEQ))
    module.verify()


def test_readme_example_runs(capsys):
    import re
    from pathlib import Path

    readme = Path(__file__).resolve().parents[2] / "README.md"
    snippet = next(s for s in re.findall(r"```python\n(.*?)```", readme.read_text(), re.S) if "from_hf(" in s)
    exec(compile(snippet, str(readme), "exec"), {})
    steps = re.findall(r"coda-ir loss ([0-9.]+), Hugging Face loss ([0-9.]+)", capsys.readouterr().out)
    assert len(steps) == 5
    assert float(steps[-1][0]) < float(steps[0][0])  # it trains
    for ours, theirs in steps:
        assert abs(float(ours) - float(theirs)) <= 2e-4


def test_readme_scaled_rope_example_runs(capsys):
    import re
    from pathlib import Path

    readme = Path(__file__).resolve().parents[2] / "README.md"
    snippet = next(s for s in re.findall(r"```python\n(.*?)```", readme.read_text(), re.S) if "longrope" in s)
    exec(compile(snippet, str(readme), "exec"), {})
    out = capsys.readouterr().out
    assert "rotary_dim 8 scaling 1.4142 long past 8" in out
    ours, theirs = re.search(r"longrope: coda-ir loss ([0-9.]+), Hugging Face loss ([0-9.]+)", out).groups()
    assert abs(float(ours) - float(theirs)) <= 2e-5 * float(theirs)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_cuda_bf16_loss_and_gradients_match_float64(family):
    # GPU shapes where SDPA picks a fused attention backend (head_dim 64, seq 256)
    overrides = dict(hidden_size=256, intermediate_size=640, num_attention_heads=4, num_key_value_heads=2,
                     head_dim=64, vocab_size=1000)
    modelT = tiny_model(family, torch.bfloat16, **overrides).cuda()
    model64 = copy.deepcopy(modelT).double()
    torch.manual_seed(3)
    ids = torch.randint(0, 1000, (2, 256), device="cuda")
    labels = ids.clone()
    labels[:, :5] = -100
    loss64, grads64 = hf_loss_and_grads(model64, ids, labels)
    lossT, gradsT = hf_loss_and_grads(copy.deepcopy(modelT), ids, labels)
    loss, grads = coda_loss_and_grads(modelT, from_hf(modelT, progress=False), ids, labels)
    names = sorted(grads64)
    assert_matches([loss.cpu()] + [grads[n].cpu() for n in names], [loss64.cpu()] + [grads64[n].cpu() for n in names],
                   [lossT.cpu()] + [gradsT[n].cpu() for n in names], ["loss"] + names, loss=(torch.bfloat16, 2 * 256))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_cuda_bf16_tied_weight_gradient_matches_float64(family):
    # the TiedWeight path on the GPU: the compiled row-run kernel adds the embedding's rows into
    # the head's gradient. (Every gradient of this tied model: layer 0's q_proj gradient lands at
    # 1.05x the bar in both the TiedWeight and the dense-sum path, session 14: not this path's.)
    overrides = dict(hidden_size=256, intermediate_size=640, num_attention_heads=4, num_key_value_heads=2,
                     head_dim=64, vocab_size=1000, tie_word_embeddings=True)
    modelT = tiny_model(family, torch.bfloat16, **overrides).cuda()
    model64 = copy.deepcopy(modelT).double()
    torch.manual_seed(3)
    ids = torch.randint(0, 1000, (2, 256), device="cuda")
    ids[0, :40] = 7  # a run longer than the kernel's 16-row chunk
    labels = ids.clone()
    labels[:, :5] = -100
    name = "model.embed_tokens.weight"
    loss64, grads64 = hf_loss_and_grads(model64, ids, labels)
    lossT, gradsT = hf_loss_and_grads(copy.deepcopy(modelT), ids, labels)
    loss, grads = coda_loss_and_grads(modelT, from_hf(modelT, progress=False), ids, labels)
    assert_matches([loss.cpu(), grads[name].cpu()], [loss64.cpu(), grads64[name].cpu()], [lossT.cpu(), gradsT[name].cpu()],
                   ["loss", name], loss=(torch.bfloat16, 2 * 256))


def test_a_bf16_rounded_rope_buffer_is_not_taken():
    """`Module.to(torch.bfloat16)` rounds the rotary `inv_freq` buffer to bf16 (angles off by up to
    position x 2^-9 rad): from_hf then rotates by the config's theta, not by the rounded
    frequencies; an fp32 buffer (from_pretrained(dtype=...) keeps it fp32) is taken bit for bit."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                                      vocab_size=VOCAB, intermediate_size=96, head_dim=16)
    rounded = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    assert rounded.model.rotary_emb.inv_freq.dtype == torch.bfloat16
    assert spec_of(rounded).inv_freq is None
    assert "inv_freq" not in decoder_program(spec_of(rounded), BATCH * SEQ, SEQ)
    kept = tiny_model("llama", torch.bfloat16)
    assert kept.model.rotary_emb.inv_freq.dtype == torch.float32
    assert spec_of(kept).inv_freq == tuple(kept.model.rotary_emb.inv_freq.tolist())
