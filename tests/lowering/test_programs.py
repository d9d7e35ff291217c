"""The hand-written coda programs (tests/programs/coda: LLaMA block forward and backward, GPT-2
block forward, LM head + cross-entropy) compiled with `coda_ir.compile(..., pipeline=None)` and run
in the Triton interpreter against their float64 references, with the numerics bar."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

import coda_ir
from coda_ir.testing import assert_matches

from .helpers import DEVICE

PROGRAMS_DIR = Path(__file__).resolve().parents[1] / "programs" / "coda"


def _references():
    spec = importlib.util.spec_from_file_location("coda_program_references", PROGRAMS_DIR / "references.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


refs = _references()


def _launches(source: str, name: str) -> int:
    fn = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name)
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
    names = [c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "") for c in calls]
    return sum(n in ("launch_gemm", "launch_elementwise", "launch_fold", "launch_group") for n in names)


# launches per call of the hand-written programs through `coda-group-launches`: independent
# small kernels share a launch (llama_bwd: the dgamma fold of one norm with the next rstd fold)
GROUPED = {"llama_bwd": 12}


@pytest.mark.parametrize("name", sorted(refs.PROGRAMS))
def test_program_matches_reference(name):
    program = refs.PROGRAMS[name]
    cm = coda_ir.compile(program.path, pipeline=None)
    assert _launches(cm.source, name) == cm.kernel_count(name)
    _check(cm, name, program)


@pytest.mark.parametrize("name", sorted(GROUPED))
def test_program_through_group_launches(name):
    program = refs.PROGRAMS[name]
    cm = coda_ir.compile(program.path, pipeline="coda-group-launches")
    assert cm.kernel_count(name) == _launches(cm.source, name) == GROUPED[name]
    _check(cm, name, program)


def _check(cm, name, program):
    inputs = refs.make_inputs(name, seed=1)
    outs = getattr(cm, name)(*[x.to(DEVICE) for x in inputs])
    outs = [o.cpu() for o in (outs if isinstance(outs, tuple) else (outs,))]
    ref64, ref_t = refs.reference_pair(name, inputs)
    assert_matches(outs, ref64, ref_t, program.outputs)
    if name == "llama_fwd":
        again = getattr(cm, name)(*[x.to(DEVICE) for x in inputs])
        for a, b in zip(outs, again):
            assert torch.equal(a.view(torch.int16) if a.dtype == torch.bfloat16 else a,
                               b.cpu().view(torch.int16) if b.dtype == torch.bfloat16 else b.cpu())
