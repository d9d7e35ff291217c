"""One compiled program serves every token count (issue 30, part 3): `#coda.rows` programs.

A from_hf model runs a new [batch, seq] of a bucket it has compiled without compiling anything
(counted at the compile entry point), and its loss and every gradient still meet the float64
bar; a `coda_ir.torch.function` of a run-time row count takes any row count, still refuses a
wrong hidden size, and checks the sequence length its attention takes.
"""

from __future__ import annotations

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")

import coda_ir  # noqa: E402
from coda_ir.errors import ArgumentError  # noqa: E402
from coda_ir.testing import assert_matches  # noqa: E402
from coda_ir.torch import hf  # noqa: E402

from test_hf import VOCAB, coda_loss_and_grads, hf_loss_and_grads, tiny_model  # noqa: E402


def _batch(b: int, s: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (b, s), generator=g)
    labels = torch.randint(0, VOCAB, (b, s), generator=g)
    labels[0, 1] = -100
    return ids, labels


def test_a_new_batch_and_seq_compiles_nothing_and_matches_float64(monkeypatch):
    compiles = []
    real = hf.CodaFunction

    def counted(program, **kwargs):
        compiles.append(program)
        return real(program, **kwargs)

    monkeypatch.setattr(hf, "CodaFunction", counted)  # (programs test_hf compiled stay cached)
    model = tiny_model("llama")
    cmodel = hf.from_hf(model, progress=False)
    # 14 then 15 tokens: one bucket (1..16), sequences of 7 then 5
    for step, (b, s) in enumerate([(2, 7), (3, 5)]):
        ids, labels = _batch(b, s, seed=10 + step)
        loss, grads = coda_loss_and_grads(model, cmodel, ids, labels)
        if step == 0:
            # the embedding, one program for both decoder layers, the head: each of run-time rows
            assert len(compiles) <= 3 and all("#coda.rows<count = 13, lo = 1, hi = 16>" in p for p in compiles)
            first = len(compiles)
        else:
            assert len(compiles) == first, "a new [batch, seq] of a compiled bucket compiled again"
        loss64, grads64 = hf_loss_and_grads(copy.deepcopy(model).double(), ids, labels)
        lossT, gradsT = hf_loss_and_grads(copy.deepcopy(model), ids, labels)
        names = sorted(grads64)
        assert_matches([loss] + [grads[n] for n in names], [loss64] + [grads64[n] for n in names],
                       [lossT] + [gradsT[n] for n in names], ["loss"] + names, loss=(torch.float32, b * s))
    assert {k[:3] for k in cmodel.layers[0]._functions} == {("layer", "bucket", (1, 16, 13))}
    # logits without labels (the LM head's other program) at a third shape of the bucket
    ids, _ = _batch(1, 11, seed=20)
    out = cmodel(ids)
    ref64 = copy.deepcopy(model).double()(input_ids=ids).logits
    assert_matches([out.logits.detach()], [ref64.detach()], [model(input_ids=ids).logits.detach()], ["logits"])
    assert len(compiles) <= first + 1


def test_bucket_and_representative_row_count():
    assert hf.row_bucket(1) == (1, 16) and hf.row_bucket(16) == (1, 16)
    assert hf.row_bucket(17) == (17, 32) and hf.row_bucket(4096) == (2049, 4096) and hf.row_bucket(3072) == (2049, 4096)
    spec = hf.spec_of(tiny_model("llama"))
    one_row = hf.decoder_program(spec, 1, 1)
    # the largest prime of the bucket dividing no extent (hidden 64, vocab 128, intermediate 96 ...)
    assert hf.representative_rows(one_row, 2049, 4096) == 4093
    assert hf.representative_rows(one_row, 1, 16) == 13
    # a prime that divides an extent is passed over: 4093 divides an intermediate size of 4093 * 4
    big = hf.decoder_program(hf.replace(spec, intermediate=4 * 4093), 1, 1)
    assert hf.representative_rows(big, 2049, 4096) == 4091


def _norm_linear(count: int = 13) -> str:
    return f"""builtin.module attributes {{coda.rows = #coda.rows<count = {count}, lo = 9, hi = 16>}} {{
  func.func @f(%x: tensor<{count}x24xf32>, %w: tensor<24xf32>, %wl: tensor<40x24xf32>) -> tensor<{count}x40xf32> {{
    %h = nn.rms_norm %x, %w {{eps = 1.0e-05 : f32}} : tensor<{count}x24xf32>, tensor<24xf32> -> tensor<{count}x24xf32>
    %y = nn.linear %h, %wl : tensor<{count}x24xf32>, tensor<40x24xf32> -> tensor<{count}x40xf32>
    func.return %y : tensor<{count}x40xf32>
  }}
}}
"""


def test_function_of_run_time_rows_takes_any_row_count_and_refuses_a_wrong_hidden_size():
    fn = coda_ir.torch.function(_norm_linear(), remarks=False)
    g = torch.Generator().manual_seed(3)
    w, wl = 1 + 0.3 * torch.randn(24, generator=g), torch.randn(40, 24, generator=g)
    for rows in (13, 5, 29):  # the planned count, fewer, more (outside the bucket: still correct)
        x = torch.randn(rows, 24, generator=g)
        dy = torch.randn(rows, 40, generator=g)
        results = []
        for dtype, run in ((torch.float32, fn), (torch.float64, None), (torch.float32, None)):
            xv, wv = (t.detach().to(dtype).clone().requires_grad_() for t in (x, w))
            if run is not None:
                y = run(xv, wv, wl)
            else:
                y = torch.nn.functional.rms_norm(xv, (24,), wv, eps=1e-5) @ wl.to(dtype).t()
            y.backward(dy.to(dtype))
            results.append([y.detach(), xv.grad, wv.grad])
        assert results[0][0].shape == (rows, 40)
        assert_matches(*results, ["y", "dx", "dw"])
    with pytest.raises(ArgumentError, match="argument #0 'x' must be 13x24 float32, got 13x25"):
        fn(torch.randn(13, 25), w, wl)
    with pytest.raises(ArgumentError, match="argument #0 'x' must be Mx24 float32 with M >= 1 rows"):
        fn(torch.randn(0, 24), w, wl)
    with pytest.raises(ArgumentError, match="argument #1 'w' must be 24 float32, got 23"):
        fn(torch.randn(13, 24), torch.randn(23), wl)
    with pytest.raises(ArgumentError, match="takes no seq_len"):
        fn(torch.randn(13, 24), w, wl, seq_len=13)
    # the fake implementation sizes its result by the inputs' rows (torch.compile traces it)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = fn.forward_op(mode.from_tensor(torch.randn(7, 24)), mode.from_tensor(w), mode.from_tensor(wl))
    assert fake.shape == (7, 40)


def test_the_attention_takes_the_calls_sequence_length():
    spec = hf.spec_of(tiny_model("llama"))
    # the program from_hf runs for 1..16 tokens (shared with the tests that ran it)
    fn = hf._compiled(hf._symbolic(hf.decoder_program(spec, 13, 13), 13, 1, 16), "", "nn-to-coda", False, False)
    assert fn.sizes == ("seq_len",)
    model = tiny_model("llama")
    layer = model.model.layers[0]
    unit = hf.DecoderUnit(layer, spec, hf.Options("nn-to-coda", False, False))
    x = torch.randn(12, 64, generator=torch.Generator().manual_seed(4))
    positions = torch.arange(4, dtype=torch.int32).repeat(3)
    with pytest.raises(ArgumentError, match="seq_len=<int>"):
        fn(x, positions, *unit.weights())
    with pytest.raises(ArgumentError, match="seq_len = 5 must be >= 1 and divide the 12 rows"):
        fn(x, positions, *unit.weights(), seq_len=5)
    out = fn(x, positions, *unit.weights(), seq_len=4)  # three sequences of 4
    pos_ids = positions.view(3, 4).long()
    rope = model.model.rotary_emb(x.view(3, 4, 64), pos_ids)
    ref = layer(x.view(3, 4, 64), position_embeddings=rope, attention_mask=None, position_ids=pos_ids)
    ref = ref[0] if isinstance(ref, tuple) else ref
    torch.testing.assert_close(out, ref.reshape(12, 64), rtol=1e-4, atol=1e-4)


def test_gemm_tuning_is_keyed_by_the_bucket_of_its_row_extents():
    from coda_ir.runtime import gemm_launch

    a = torch.empty(4, 4, dtype=torch.bfloat16)

    def key(m, n, k, rows=""):
        return gemm_launch._tuning_key(None, "kernel:abc", a, a, m, n, k, False, True, 0, 1, 1, "tma", (True, True),
                                       "tl", rows)

    # 3072 and 4000 rows share 4096's tuning; 4097 is the next bucket
    assert key(3072, 512, 256) == key(4000, 512, 256) == key(4096, 512, 256) != key(4097, 512, 256)
    # a weight gradient's K is the token count: bucketed only where the launch says it is a row extent
    assert key(512, 256, 3072, "K") == key(512, 256, 4096, "K") and key(512, 256, 3072) != key(512, 256, 4096)
