"""`coda-group-launches` (in the default nn-to-coda pipeline): the GPT-2 block runs in 6 launches
(4 GEMM-epilogue kernels + 2 launches of an LN statistics fold with a per-weight c/e GEMV),
matches the float64 reference, is bitwise deterministic, and gives bitwise the same results as
the ungrouped program (members keep their own grids and tile constants)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_numerics import (
    variant,  # tests/transforms is on sys.path (pytest prepend mode)
)

import coda_ir
from coda_ir import testing
from coda_ir.dialects import coda

PROGRAMS = Path(__file__).parent / "programs"


@pytest.mark.parametrize("rows,dtype", [(19, "bf16"), (7, "f32")])
def test_gpt2_grouped_matches_reference_and_ungrouped_bitwise(rows: int, dtype: str):
    source = variant((PROGRAMS / "gpt2_block.mlir").read_text(), rows, dtype)
    grouped = coda_ir.compile(source)
    plain = coda_ir.compile(source, pipeline="nn-to-coda{group-launches=false}")
    assert grouped.kernel_count("gpt2_block") == 6
    assert plain.kernel_count("gpt2_block") == 8
    groups = [op for op in grouped.ir.walk() if isinstance(op, coda.LaunchGroupOp)]
    assert [[m.name for m in g.members()] for g in groups] == [["coda.fold", "coda.elementwise"]] * 2
    inputs = testing.random_inputs(source, seed=4)
    first = grouped.gpt2_block(*inputs)
    testing.check_against_reference(source, inputs, first)
    again = grouped.gpt2_block(*inputs)
    ungrouped = plain.gpt2_block(*inputs)
    for a, b, c in zip(first, again, ungrouped):
        assert torch.equal(a, b) and torch.equal(a, c)


def test_llama_keeps_six_launches_and_no_groups():
    """Each LLaMA rstd fold reads the GEMM right before it: nothing to share a launch with."""
    compiled = coda_ir.compile(variant((PROGRAMS / "llama_block.mlir").read_text(), 5, "f32"))
    assert compiled.kernel_count("llama_block") == 6
    assert not any(isinstance(op, coda.LaunchGroupOp) for op in compiled.ir.walk())
