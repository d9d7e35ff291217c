"""`compiled.check_arguments` remembers the calls that passed (shapes, dtypes, devices per
argument): a call seen before returns its row count without the walk over the signature, and
anything else still gets the full check and its located error."""

from __future__ import annotations

import pytest
import torch

from coda_ir.runtime import compiled
from coda_ir.runtime.compiled import ArgumentError, Rows

SIGNATURE = (("x", (Rows(1), 8), torch.float32), ("w", (8, 8), torch.float32), ("ids", (Rows(1),), torch.int32))


def call(rows: int, dtype=torch.float32, width: int = 8):
    return (torch.zeros(rows, width, dtype=dtype), torch.zeros(8, 8), torch.zeros(rows, dtype=torch.int32))


def test_a_call_seen_before_returns_its_rows_without_the_walk(monkeypatch):
    monkeypatch.setattr(compiled, "_PASSED", {})  # the fake walk's -1 below stays in this test
    assert compiled.check_arguments("f", call(5), SIGNATURE) == 5
    walks = []
    monkeypatch.setattr(compiled, "_check_arguments", lambda *a: walks.append(a) or -1)
    assert compiled.check_arguments("f", call(5), SIGNATURE) == 5  # remembered
    assert not walks
    assert compiled.check_arguments("f", call(6), SIGNATURE) == -1  # another row count: checked
    assert len(walks) == 1


@pytest.mark.parametrize("bad, match", [
    (lambda: call(5, width=7), r"argument #0 'x' must be 5x8 float32, got 5x7 float32"),
    (lambda: call(5, dtype=torch.float64), r"argument #0 'x' must be 5x8 float32, got 5x8 float64"),
    (lambda: call(5)[:2], r"takes 3 tensors"),
    (lambda: (*call(5)[:2], 3), r"argument #2 'ids' must be a torch.Tensor"),
    (lambda: tuple(t.to("meta") for t in call(5)), r"meta tensor"),
])
def test_errors_stay_errors_after_a_good_call(bad, match):
    compiled.check_arguments("f", call(5), SIGNATURE)
    for _ in range(2):  # a failed check is never remembered
        with pytest.raises(ArgumentError, match=match):
            compiled.check_arguments("f", bad(), SIGNATURE)


def test_an_equal_signature_of_another_function_is_its_own_entry():
    other = tuple((n, s, torch.float64 if n == "x" else d) for n, s, d in SIGNATURE)
    compiled.check_arguments("f", call(5), SIGNATURE)
    with pytest.raises(ArgumentError, match="must be 5x8 float64"):
        compiled.check_arguments("f", call(5), other)


def test_the_memo_is_bounded(monkeypatch):
    monkeypatch.setattr(compiled, "_PASSED_LIMIT", 3)
    monkeypatch.setattr(compiled, "_PASSED", {})
    for rows in range(1, 8):
        assert compiled.check_arguments("f", call(rows), SIGNATURE) == rows
        assert len(compiled._PASSED) <= 3
