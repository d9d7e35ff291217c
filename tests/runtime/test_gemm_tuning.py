"""A new bucket of token counts does not tune in the middle of a training run (issue 30, part 3).

A gemm of run-time rows that already ran at another bucket, with no tuned neighbouring bucket,
takes the tile the IO model ranks fastest (`gemm_launch.ranked_by_io_model`) instead of tuning;
the run's first bucket still tunes. The ranking is checked on CPU against the IO model's own
prices; the rule on a GPU, through `from_hf`, with the loss and every gradient against float64.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from coda_ir.analysis import io_model
from coda_ir.runtime import gemm_launch
from coda_ir.tiling import TMA_CANDIDATES


def _h200_like(sms: int = 132):
    return dataclasses.replace(io_model.load_gpu("h200"), sms=sms)


def test_ranking_is_the_io_models_order_with_ties_kept_in_candidate_order():
    gpu = _h200_like()
    for m, n, k in [(4093, 3072, 2048), (1408, 3328, 2048), (8191, 16384, 2048), (300, 1000, 96)]:
        ranked = gemm_launch.ranked_by_io_model(TMA_CANDIDATES, m, n, k, "bf16", gpu)
        assert sorted(ranked, key=TMA_CANDIDATES.index) == list(TMA_CANDIDATES)  # a permutation
        gemm = io_model.GemmSpec(m, n, k, io_model.Tensor("a", (m, k)), io_model.Tensor("b", (k, n), role="weight"))
        kernel = io_model.Kernel("gemm", "gemm", writes=(io_model.Tensor("c", (m, n)),), gemm=gemm)
        times = [io_model.kernel_cost(dataclasses.replace(kernel, tile=c), gpu).time_s for c in ranked]
        assert times == sorted(times)
        for x, y in zip(ranked, ranked[1:]):  # equal prices: the candidates' best-guess order
            if round(io_model.kernel_cost(dataclasses.replace(kernel, tile=x), gpu).time_s, 12) == round(
                    io_model.kernel_cost(dataclasses.replace(kernel, tile=y), gpu).time_s, 12):
                assert TMA_CANDIDATES.index(x) < TMA_CANDIDATES.index(y)


def test_a_partial_last_wave_of_wide_tiles_ranks_narrower_tiles_first():
    # 11 x 13 = 143 tiles of 128x256 on 132 SMs: a second wave of 11 tiles (two waves of the wide
    # tile's work per SM); 11 x 26 = 286 tiles of 128x128: three waves of half the work each
    gpu = _h200_like()
    ranked = gemm_launch.ranked_by_io_model(TMA_CANDIDATES, 11 * 128, 13 * 256, 4096, "bf16", gpu)
    assert (ranked[0].bm, ranked[0].bn) == (128, 128)
    # 132 tiles of 128x256 exactly fill one wave: the first candidate (128x256) stays first
    ranked = gemm_launch.ranked_by_io_model(TMA_CANDIDATES, 11 * 128, 12 * 256, 4096, "bf16", gpu)
    assert ranked[0] == TMA_CANDIDATES[0]


def test_the_process_remembers_which_buckets_gemms_of_run_time_rows_ran_at(monkeypatch):
    monkeypatch.setattr(gemm_launch, "_RAN_BUCKETS", set())
    assert not gemm_launch._ran_in_other_bucket(4096)  # the run's first bucket: tuned
    gemm_launch._ran(8000)  # bucket 8192
    assert gemm_launch._ran_in_other_bucket(4096)
    assert not gemm_launch._ran_in_other_bucket(5000)  # the bucket that ran


def test_inferred_tiles_are_tuned_after_their_launches_one_after_another(monkeypatch):
    monkeypatch.setattr(gemm_launch, "_DEFERRED", {})
    monkeypatch.setattr(gemm_launch, "_PLANS", {("plan", 1): "p1", ("plan", 2): "p2", ("plan", 3): "p3"})
    monkeypatch.setattr(gemm_launch, "_MEMO", {"tune:a": "cfg a", "tune:b": "cfg b"})
    monkeypatch.setattr(gemm_launch, "_DUE", set())
    monkeypatch.setattr(gemm_launch, "DEFERRED_TUNING_LAUNCHES", 3)
    gemm_launch._defer_tuning(("plan", 1), "tune:a")
    gemm_launch._defer_tuning(("plan", 2), "tune:a")  # another launch (strides) of the same gemm
    gemm_launch._defer_tuning(("plan", 3), "tune:b")  # the second gemm inferred: due twice as late
    due = [gemm_launch._deferred_tuning_due(("plan", 1)) for _ in range(3)]
    assert due == [False, False, True]  # its third launch
    # every plan of that tuning key is forgotten, its memo too, and the key is due
    assert gemm_launch._DEFERRED == {("plan", 3): ["tune:b", 0, 6]}
    assert gemm_launch._PLANS == {("plan", 3): "p3"} and gemm_launch._MEMO == {"tune:b": "cfg b"}
    assert gemm_launch._DUE == {"tune:a"}
    due = [gemm_launch._deferred_tuning_due(("plan", 3)) for _ in range(6)]
    assert due == [False] * 5 + [True] and gemm_launch._DUE == {"tune:a", "tune:b"} and not gemm_launch._DEFERRED


def _with_parameters_in(model, dtype):
    """`model` with its parameters cast, its buffers kept: `Module.to` would also round the rotary
    `inv_freq` buffer (fp32, as `from_pretrained(dtype=...)` keeps it)."""
    for p in model.parameters():
        p.data = p.data.to(dtype)
    return model


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_new_bucket_on_a_gpu_takes_the_io_models_tile_and_trains_correctly(tmp_path, monkeypatch):
    transformers = pytest.importorskip("transformers")
    from coda_ir.runtime import config as runtime_config
    from coda_ir.testing import assert_matches
    from coda_ir.torch import hf

    tunings = []
    real = gemm_launch._autotune

    def counted(*args, **kwargs):
        tunings.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(gemm_launch, "_autotune", counted)
    monkeypatch.setattr(gemm_launch, "INFERRED", [])
    monkeypatch.setattr(gemm_launch, "_RAN_BUCKETS", set())  # this test's first bucket is the run's
    config = transformers.LlamaConfig(vocab_size=1000, hidden_size=192, intermediate_size=416, num_hidden_layers=2,
                                      num_attention_heads=3, num_key_value_heads=1, head_dim=64,
                                      max_position_embeddings=4096, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = _with_parameters_in(transformers.LlamaForCausalLM(config).cuda(), torch.bfloat16)
    with runtime_config.using(dataclasses.replace(runtime_config.current(), cache_dir=tmp_path, autotune_progress=False)):
        cmodel = hf.from_hf(model, progress=False)
        for step, (b, s) in enumerate([(2, 256), (2, 2048)]):  # buckets 512 and 4096: not neighbours
            g = torch.Generator().manual_seed(step)
            ids = torch.randint(0, 1000, (b, s), generator=g).cuda()
            model.zero_grad(set_to_none=True)
            loss = cmodel(ids, labels=ids).loss
            loss.backward()
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
            if step == 0:
                assert tunings and not gemm_launch.INFERRED, "the run's first bucket tunes"
                tuned = len(tunings)
                continue
            assert len(tunings) == tuned, "the new bucket tuned in the middle of the run"
            assert gemm_launch.INFERRED, "no tile was inferred for the new bucket"
            # their deferred tunings come later: every entry due at its next launch here
            for entry in gemm_launch._DEFERRED.values():
                entry[2] = 1
            cmodel(ids, labels=ids).loss.backward()
            assert len(tunings) > tuned and not gemm_launch._DEFERRED
            assert all(gemm_launch._cached_config(key) is not None for key in gemm_launch.INFERRED)

            def reference(dtype):
                ref = _with_parameters_in(copy.deepcopy(model), dtype)
                ref.zero_grad(set_to_none=True)
                out = ref(input_ids=ids, labels=ids).loss
                out.backward()
                return [out.detach().cpu()] + [p.grad.detach().cpu() for _, p in ref.named_parameters()]

            names = ["loss"] + [n for n, _ in model.named_parameters()]
            assert_matches([loss.detach().cpu()] + [grads[n].cpu() for n in names[1:]], reference(torch.float64),
                           reference(torch.bfloat16), names, loss=(torch.bfloat16, b * s))
