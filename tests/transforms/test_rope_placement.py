"""nn-plan keeps a RoPE out of its GEMM's epilogue where joining it would interleave the GEMM's
columns in groups no TMA tile fits (`NNPlanPass.plan_rope_placement`; Phi-3's head_dim 96: its QKV
GEMM ran the pointer mainloop at 3x its price, H200 session 20).

The rule reads the target machine (its SM count sets "a wave of 128-column tiles"; an Ampere
part has no TMA): with a table of constants whose GPU has one SM, the test shapes are big enough
for it. The separate rotation pass (pairs gathered from memory) is checked against float64,
forward and gradients.
"""

from __future__ import annotations

import json

import pytest

import coda_ir
from coda_ir import remarks, testing
from coda_ir.analysis import io_model
from coda_ir.dialects import coda
from test_rope_scaled import _freqs, linear_rope_program  # tests/transforms on sys.path


@pytest.fixture
def one_sm_table(tmp_path):
    """The shipped constants with one SM per GPU: every test-sized GEMM is a wave of tiles."""
    table = json.loads(io_model.CONSTANTS_PATH.read_text())
    small = {name: {**entry, "sms": 1} for name, entry in table.items() if not name.startswith("_")}
    path = tmp_path / "one_sm.json"
    path.write_text(json.dumps(small))
    return path


def _program(hd: int, rd: int, dt: str = "f32") -> str:
    return linear_rope_program(37, 32, hd, 2, 3, "half", rd, 1.0, _freqs(rd), dt)


def _gemm_and_kernels(source: str, pipeline: str):
    module = coda_ir.lower(coda_ir.parse(source), pipeline)
    gemms = [op for op in module.walk() if isinstance(op, coda.GemmOp)]
    elementwise = [op for op in module.walk() if isinstance(op, coda.ElementwiseOp)]
    return gemms, elementwise


def test_a_head_dim_whose_groups_hold_no_tma_tile_rotates_in_its_own_pass(one_sm_table):
    before = len(remarks.EMITTED)
    (gemm,), kernels = _gemm_and_kernels(_program(24, 24), f"nn-to-coda{{gpu=h100 gpu-constants=\"{one_sm_table}\"}}")
    assert gemm.interleave is None  # a plain GEMM: nothing interleaved
    assert not [op for op in gemm.walk() if isinstance(op, coda.PairMapOp)]
    rotation = [k for k in kernels if any(isinstance(op, coda.PairMapOp) for op in k.walk())]
    assert len(rotation) == 1 and coda.SEPARATE in rotation[0].attributes
    said = [r for r in remarks.EMITTED[before:] if "RoPE not fused" in r]
    assert said and "groups of 24" in said[0] and "128-column tile" in said[0]


@pytest.mark.parametrize("hd, gpu, constants", [
    (24, "h100", False),  # the shipped H100 (132 SMs): a 37 x 72 GEMM is no wave of tiles
    (24, "a100", True),  # no TMA mainloop to keep
    (32, "h100", True),  # a power-of-two head: pairs (i, i + 16) sit in 32-column tiles, no interleave
    (128 * 3, "h100", True),  # groups of 384 hold 128-column tiles
])
def test_the_rotation_stays_in_the_epilogue_elsewhere(hd, gpu, constants, one_sm_table):
    option = f" gpu-constants=\"{one_sm_table}\"" if constants else ""
    (gemm,), _ = _gemm_and_kernels(_program(hd, hd), f"nn-to-coda{{gpu={gpu}{option}}}")
    assert [op for op in gemm.walk() if isinstance(op, coda.PairMapOp)], "the rotation left the GEMM's epilogue"


@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("hd", [24, 40])
def test_the_separate_rotation_matches_float64(hd, dt, one_sm_table):
    source = _program(hd, hd, dt)
    pipeline = f"nn-autodiff,nn-to-coda{{gpu=h100 gpu-constants=\"{one_sm_table}\"}}"
    program = coda_ir.compile(source, pipeline)
    assert "interleave=0" in program.source and "pairs gathered from memory" in program.source
    inputs = testing.random_inputs(source, seed=hd)
    testing.check_against_reference(source, inputs, program.g(*inputs))
    testing.check_gradients(program, source, inputs, seed=3)
