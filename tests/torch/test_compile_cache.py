"""The compile cache (`coda_ir/runtime/compile_cache.py`): a program compiled before is read back.

A from_hf model whose programs a previous "run" compiled runs no pass (no `coda_ir.compile`, no
nn-autodiff) and gives bitwise the same loss and gradients; a changed program or pipeline, or a
compile asking for remarks, compiles; a corrupt entry is a miss, compiled again and replaced.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import coda_ir
from coda_ir.runtime import compile_cache
from coda_ir.runtime import config as runtime_config

transformers = pytest.importorskip("transformers")

from test_hf import VOCAB, tiny_model  # noqa: E402


@pytest.fixture
def cache(tmp_path):
    with runtime_config.using(dataclasses.replace(runtime_config.current(), cache_dir=tmp_path, compile_cache=True)):
        yield tmp_path / "programs"


@pytest.fixture
def compiles(monkeypatch):
    """Counts of `coda_ir.compile` and `coda_ir.lower` (nn-autodiff's) calls."""
    counts = {"compile": 0, "lower": 0}
    real_compile, real_lower = coda_ir.compile, coda_ir.lower

    def counted_compile(*args, **kwargs):
        counts["compile"] += 1
        return real_compile(*args, **kwargs)

    def counted_lower(*args, **kwargs):
        counts["lower"] += 1
        return real_lower(*args, **kwargs)

    monkeypatch.setattr(coda_ir, "compile", counted_compile)
    monkeypatch.setattr(coda_ir, "lower", counted_lower)
    return counts


def _step(monkeypatch, model, seed: int = 0):
    """A training step of a fresh from_hf model (the process's in-memory program cache emptied,
    as in a new run): the loss and every gradient."""
    from coda_ir.torch import hf

    monkeypatch.setattr(hf, "_COMPILED", {})
    cmodel = hf.from_hf(model, progress=False)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (2, 7), generator=g)
    model.zero_grad(set_to_none=True)
    loss = cmodel(ids, labels=ids).loss
    loss.backward()
    return [loss.detach()] + [p.grad.detach().clone() for p in model.parameters()]


def test_a_program_compiled_before_is_read_back_and_computes_the_same_bits(cache, compiles, monkeypatch):
    model = tiny_model("llama")
    first = _step(monkeypatch, model)
    assert compiles["compile"] > 0 and compiles["lower"] > 0
    assert any(cache.glob("*-nn.json")) and any(cache.glob("*-fwd.json")) and any(cache.glob("*-bwd-*.json"))
    compiles.update(compile=0, lower=0)
    again = _step(monkeypatch, model)
    assert compiles == {"compile": 0, "lower": 0}, "a cached program ran the passes again"
    for a, b in zip(first, again):
        assert torch.equal(a, b)


def test_the_cached_modules_answer_what_the_compiled_ones_do(cache):
    from coda_ir.torch.function import CodaFunction
    from coda_ir.torch import hf

    spec = hf.spec_of(tiny_model("llama"))
    lo, hi = hf.row_bucket(14)
    program = hf._symbolic(hf.decoder_program(spec, 13, 13, layer=0), 13, lo, hi)
    compiled = CodaFunction(program)
    read = CodaFunction(program)
    assert not compiled.from_cache and read.from_cache
    for a, b in ((compiled.forward_module, read.forward_module),
                 (compiled.backward_module([True] * len(compiled.float_args)),
                  read.backward_module([True] * len(read.float_args)))):
        assert a.source == b.source and a.functions == b.functions
        assert [a.takes_seq_len(f) for f in a.functions] == [b.takes_seq_len(f) for f in b.functions]
        assert any(a.takes_seq_len(f) for f in a.functions)  # the attention takes the call's length
        assert str(a.ir) == str(b.ir)  # the printed IR, parsed when read
    assert read.sizes == compiled.sizes == ("seq_len",) and read.op_name == compiled.op_name


def test_another_program_pipeline_or_a_remarks_compile_misses(cache, compiles):
    from coda_ir.torch.function import CodaFunction

    program = """func.func @f(%x: tensor<5x24xf32>, %w: tensor<40x24xf32>) -> tensor<5x40xf32> {
  %y = nn.linear %x, %w : tensor<5x24xf32>, tensor<40x24xf32> -> tensor<5x40xf32>
  func.return %y : tensor<5x40xf32>
}
"""
    CodaFunction(program)
    counted = compiles["compile"]
    assert counted > 0
    CodaFunction(program)
    assert compiles["compile"] == counted
    CodaFunction(program.replace("5x", "6x"))
    assert compiles["compile"] > counted
    counted = compiles["compile"]
    CodaFunction(program, pipeline="nn-to-coda{vendor-gemms=false}")
    assert compiles["compile"] > counted
    counted = compiles["compile"]
    # nn-autodiff's own options are part of the key too (they change what the forward saves)
    lowered = compiles["lower"]
    saved = CodaFunction(program, pipeline="nn-autodiff{cost-model=false},nn-to-coda")
    assert compiles["compile"] > counted and compiles["lower"] > lowered
    assert CodaFunction(program, pipeline="nn-autodiff{cost-model=false},nn-to-coda").from_cache and saved.from_cache is False
    counted = compiles["compile"]
    CodaFunction(program, remarks=True)
    assert compiles["compile"] > counted


def test_a_corrupt_entry_is_compiled_again_and_replaced(cache, compiles):
    from coda_ir.torch.function import CodaFunction

    program = """func.func @g(%x: tensor<3x8xf32>, %w: tensor<4x8xf32>) -> tensor<3x4xf32> {
  %y = nn.linear %x, %w : tensor<3x8xf32>, tensor<4x8xf32> -> tensor<3x4xf32>
  func.return %y : tensor<3x4xf32>
}
"""
    fn = CodaFunction(program)
    x, w = torch.randn(3, 8), torch.randn(4, 8)
    expected = fn(x, w)
    for path in cache.glob("*.json"):
        path.write_text("{not json")
    counted = compiles["compile"]
    fn = CodaFunction(program)
    torch.testing.assert_close(fn(x, w), expected, rtol=0, atol=0)
    assert compiles["compile"] > counted
    counted = compiles["compile"]
    CodaFunction(program).forward_module
    assert compiles["compile"] == counted  # replaced by a readable entry


def test_the_key_names_the_compiler():
    key = compile_cache.program_key("func.func @f() { func.return }", "f", ("nn-to-coda",))
    assert key != compile_cache.program_key("func.func @f() { func.return }", "f", ("nn-to-coda", "cse"))
    assert len(compile_cache.compiler_digest()) == 24
