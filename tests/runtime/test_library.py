"""coda_ir.runtime.library: the host steps that are not GEMM epilogues (concat, slice, the tied
weight's embedding rows added into the LM head's gradient)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from coda_ir.runtime import library


def test_concat_of_adjacent_rows_is_a_view():
    packed = torch.randn(7, 5)
    parts = [packed[0:3], packed[3:4], packed[4:7]]
    out = library.concat(parts, 0)
    assert out.data_ptr() == packed.data_ptr() and out.shape == (7, 5) and out.is_contiguous()
    torch.testing.assert_close(out, torch.cat(parts), rtol=0, atol=0)


def test_concat_copies_when_not_adjacent_or_not_rows():
    packed = torch.randn(7, 5)
    # out of order, a gap, separate storages, columns: each a correct copy
    cases = [([packed[3:7], packed[0:3]], 0), ([packed[0:2], packed[3:7]], 0),
             ([torch.randn(2, 5), torch.randn(3, 5)], 0), ([packed[:, :2], packed[:, 2:]], 1)]
    for parts, axis in cases:
        out = library.concat(parts, axis)
        torch.testing.assert_close(out, torch.cat(parts, axis), rtol=0, atol=0)
        assert out.untyped_storage().data_ptr() != packed.untyped_storage().data_ptr()


def test_concat_refuses_views_that_differ_in_dtype_or_trailing_shape():
    a = torch.randn(4, 6)
    assert library.adjacent_view([a[0:2], a[2:4]]) is not None
    flat = torch.randn(24)
    assert library.adjacent_view([flat[0:12].view(2, 6), flat[12:24].view(3, 4)]) is None
    assert library.adjacent_view([a[0:2], a[2:4].t()]) is None


def test_row_slice_is_a_view_and_column_slice_a_copy():
    x = torch.randn(6, 4)
    rows = library.slice_copy(x, 0, 2, 3)
    assert rows.data_ptr() == x[2].data_ptr()
    cols = library.slice_copy(x, 1, 1, 2)
    assert cols.is_contiguous()
    torch.testing.assert_close(cols, x[:, 1:3], rtol=0, atol=0)


def test_embedding_never_reads_out_of_bounds():
    # from_hf checks ids on the device and raises before its forward returns: meanwhile an id
    # out of range must not be read out of bounds (on CUDA a device assert), only clamped
    w = torch.randn(5, 3)
    ids = torch.tensor([0, 4, 7, -2], dtype=torch.int32)
    out = library.embedding(ids, w)
    torch.testing.assert_close(out[:2], w[[0, 4]], rtol=0, atol=0)
    torch.testing.assert_close(out[2:], w[[4, 0]], rtol=0, atol=0)


# ------------------------------------------------ embedding_grad_into (the tied weight's rows)


def _rows_case(V: int, D: int, N: int, seed: int, dst_dtype=torch.float32, repeat: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (N,), generator=g)
    if repeat:
        ids[torch.randperm(N, generator=g)[:repeat]] = V // 2  # one run longer than a chunk
    dst = torch.randn(V, D, generator=g).to(dst_dtype)
    dy = torch.randn(N, D, generator=g).to(torch.bfloat16)
    return dst, dy, ids, dst.double().index_add(0, ids, dy.double())


@pytest.mark.parametrize("V,D,N,repeat", [(50, 300, 77, 40), (7, 33, 5, 0), (130, 257, 64, 64), (3, 1, 19, 19)])
def test_embedding_grad_into_sums_every_run_of_ids_in_fp32(V, D, N, repeat):
    # odd widths (not a multiple of the 256-column block), runs longer than the 16-row chunk,
    # a run of exactly one chunk's multiple, every id the same
    dst, dy, ids, ref = _rows_case(V, D, N, seed=V + D, repeat=repeat)
    out = library.embedding_grad_into(dst, dy, ids)
    assert out is dst  # in place
    # f32 sums of bf16 rows: within a few f32 ulps of the float64 sum
    torch.testing.assert_close(out.double(), ref, rtol=1e-6, atol=1e-5)
    untouched = torch.ones(V, dtype=torch.bool)
    untouched[ids] = False
    assert torch.equal(out[untouched].double(), ref[untouched])


def test_embedding_grad_into_bf16_rounds_the_fp32_sum_once():
    dst, dy, ids, ref = _rows_case(40, 96, 120, seed=3, dst_dtype=torch.bfloat16, repeat=50)
    out = library.embedding_grad_into(dst, dy, ids)
    # one rounding to bf16 (the interpreter rounds toward zero, the GPU to nearest): < 1 ulp
    ulp = ref.abs().clamp_min(2.0**-126) * 2.0**-7
    assert ((out.double() - ref).abs() <= ulp).all()


def test_embedding_grad_into_is_deterministic_and_leaves_triton_language_as_it_was():
    # the interpreted kernel runs under runtime.triton_mode, as generated calls do: a later GPU
    # compile in the same process must not meet the interpreter's patches of triton.language
    from coda_ir.runtime import compiled

    dst, dy, ids, _ = _rows_case(60, 130, 200, seed=5, repeat=90)
    first = library.embedding_grad_into(dst.clone(), dy, ids)
    before = [(obj, dict(vars(obj))) for obj in compiled._language_objects()]
    second = library.embedding_grad_into(dst.clone(), dy, ids)
    assert torch.equal(first, second)
    changed = [f"{getattr(obj, '__name__', obj)}.{name}" for obj, attrs in before for name in attrs
               if vars(obj).get(name, compiled._MISSING) is not attrs[name]]
    assert changed == []


def test_embedding_grad_into_takes_a_non_contiguous_destination():
    dst, dy, ids, ref = _rows_case(20, 48, 30, seed=9, repeat=20)
    wide = torch.zeros(20, 96)
    view = wide[:, ::2]
    view.copy_(dst)
    library.embedding_grad_into(view, dy, ids)
    torch.testing.assert_close(view.double(), ref, rtol=1e-6, atol=1e-5)
    assert torch.count_nonzero(wide[:, 1::2]) == 0


def test_embedding_grad_into_refuses_mismatched_shapes():
    from coda_ir.errors import ArgumentError

    with pytest.raises(ArgumentError, match="dst \\[V, D\\], dy \\[N, D\\], ids \\[N\\]; got dst \\[4, 3\\]"):
        library.embedding_grad_into(torch.zeros(4, 3), torch.zeros(2, 5), torch.zeros(2, dtype=torch.long))


@settings(max_examples=12, deadline=None)
@given(V=st.integers(1, 40), D=st.integers(1, 70), N=st.integers(0, 60), seed=st.integers(0, 2**16))
def test_embedding_grad_into_equals_index_add_for_all_small_cases(V, D, N, seed):
    dst, dy, ids, ref = _rows_case(V, D, N, seed=seed)
    torch.testing.assert_close(library.embedding_grad_into(dst, dy, ids).double(), ref, rtol=1e-6, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 3), seq=st.integers(1, 1100), vocab=st.integers(1, 300), seed=st.integers(0, 2**16),
       bad_ids=st.booleans(), bad_labels=st.booleans(), wide=st.booleans(), with_labels=st.booleans())
def test_step_tokens_is_the_torch_preparation_in_one_kernel(batch, seq, vocab, seed, bad_ids, bad_labels, wide,
                                                           with_labels):
    # a step's int32 ids, its shifted targets (Hugging Face's: position s predicts labels[s + 1],
    # a row's last position the ignore index) and the range flags of both; sequences longer than
    # the kernel's block (1024) cross programs, and the shift crosses them too
    g = torch.Generator().manual_seed(seed)
    dtype = torch.int64 if wide else torch.int32
    ids = torch.randint(0, vocab, (batch, seq), generator=g, dtype=dtype)
    labels = torch.randint(0, vocab, (batch, seq), generator=g, dtype=dtype)
    labels[torch.rand(batch, seq, generator=g) < 0.2] = -100
    if bad_ids:
        ids[batch - 1, seq // 2] = vocab if seed % 2 else -1
    if bad_labels:
        labels[0, seq - 1] = vocab + 5 if seed % 2 else -7
    out_ids, targets, flags = library.step_tokens(ids, labels if with_labels else None, vocab, -100)
    assert out_ids.dtype == torch.int32 and torch.equal(out_ids, ids.reshape(-1).to(torch.int32))
    expected = torch.cat([labels[:, 1:], torch.full_like(labels[:, :1], -100)], dim=1).reshape(-1).to(torch.int32)
    if with_labels:
        assert targets.dtype == torch.int32 and torch.equal(targets, expected)
    else:
        assert targets is None
    assert flags.tolist() == [int(bad_ids), int(bad_labels and with_labels)]


def test_step_tokens_refuses_labels_of_another_shape():
    with pytest.raises(library.ArgumentError, match="labels of its shape"):
        library.step_tokens(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long), 10, -100)
