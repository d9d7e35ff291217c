"""coda_ir.lowering.library: the host steps that are not GEMM epilogues (concat, slice)."""

from __future__ import annotations

import torch

from coda_ir.lowering import library


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
