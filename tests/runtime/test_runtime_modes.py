"""compiled.triton_mode: an interpreted call leaves `triton.language` as it found it; calls reuse the loaded module.

Triton's interpreter patches `triton.language` builtins while it runs, and a device function
called from an interpreted kernel (`tl.cdiv` in every GEMM kernel) re-patches them without
restoring; in a GPU process the next CUDA compile then fails inside `tl.cdiv` (seen on the H100:
tests/torch/test_function.py::test_cuda_gradients_match_cpu). The snapshot/restore makes an
interpreted call side-effect free, which this checks on CPU by identity of every attribute.
"""

from __future__ import annotations

import copy
import threading

import torch

import coda_ir
from coda_ir.runtime import compiled

PROGRAM = """
func.func @f(%x: tensor<24x40xf32>, %w: tensor<48x40xf32>) -> tensor<24x48xf32> {
  %y = nn.linear %x, %w : tensor<24x40xf32>, tensor<48x40xf32> -> tensor<24x48xf32>
  %z = nn.silu %y : tensor<24x48xf32> -> tensor<24x48xf32>
  func.return %z : tensor<24x48xf32>
}
"""


def _state():
    return [(obj, dict(vars(obj))) for obj in compiled._language_objects()]


def _changed(before):
    changes = []
    for obj, attrs in before:
        now = dict(vars(obj))
        for name in attrs:  # names the interpreter adds (globals of its rewritten functions) may stay
            if attrs.get(name, compiled._MISSING) is not now.get(name, compiled._MISSING):
                changes.append(f"{getattr(obj, '__name__', obj)}.{name}")
    return changes


def test_interpreted_call_leaves_triton_language_untouched():
    module = coda_ir.compile(PROGRAM)
    x, w = torch.randn(24, 40), torch.randn(48, 40)
    module.f(x, w)  # first call: loads the module (decoration may add attributes once)
    before = _state()
    out = module.f(x, w)
    assert _changed(before) == []
    torch.testing.assert_close(out, torch.nn.functional.silu(x @ w.T), rtol=1e-4, atol=1e-4)


def test_concurrent_interpreted_calls_agree():
    module = coda_ir.compile(PROGRAM)
    x, w = torch.randn(24, 40), torch.randn(48, 40)
    expected = module.f(x, w)
    results, errors = [], []

    def work():
        try:
            results.append(module.f(x, w))
        except Exception as error:  # surfaced below with the thread's error
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert all(torch.equal(r, expected) for r in results)


def test_calls_reuse_the_loaded_module_without_hashing_the_source(monkeypatch):
    """A call finds its module by the digest the CompiledModule took once: hashing the generated
    source (what `load_module` keys its cache by) cost ~0.15 ms of host time per call before the
    first launch. The module object stays copyable after a call (a from_hf model is deep-copied
    for EMA weights and the like)."""
    program = coda_ir.compile(PROGRAM)
    x, w = torch.randn(24, 40), torch.randn(48, 40)
    first = program.f(x, w)
    hashed = []
    real = compiled.source_hash
    monkeypatch.setattr(compiled, "source_hash", lambda source: hashed.append(len(source)) or real(source))
    again = program.f(x, w)
    assert hashed == []
    assert torch.equal(first, again)
    assert program.module(True) is compiled.load_module(program.source, True)
    assert len(hashed) == 1  # the direct load_module call above hashed; the module is the cached one
    twin = copy.deepcopy(program)
    assert torch.equal(twin.f(x, w), first)


ROW_PROGRAM = """
func.func @f(%x: tensor<14x64xf32>, %w: tensor<64xf32>, %wq: tensor<24x64xf32>) -> tensor<14x24xf32> {
  %h = nn.rms_norm %x, %w {eps = 1.0e-06 : f32} : tensor<14x64xf32>, tensor<64xf32> -> tensor<14x64xf32>
  %y = nn.linear %h, %wq : tensor<14x64xf32>, tensor<24x64xf32> -> tensor<14x24xf32>
  func.return %y : tensor<14x24xf32>
}
"""


def _interpreter_of_triton_36_under_numpy_24(monkeypatch):
    """Triton 3.6's interpreter as NumPy >= 2.4 sees it (the lent GPU machine: Triton 3.6, NumPy
    2.5): its scalar `__index__` is `int()` of a 1-element array, which NumPy refuses."""
    from triton.runtime import interpreter

    def strict_index(t):
        data = t.handle.data
        if getattr(data, "ndim", 0):
            raise TypeError("only 0-dimensional arrays can be converted to Python scalars")
        return int(data)

    patch_tensor = interpreter._patch_lang_tensor

    def patch_like_triton_36(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: strict_index(self))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", patch_like_triton_36)
    monkeypatch.setattr(interpreter._LangPatchScope, "set_attr", interpreter._LangPatchScope.set_attr)


def test_loops_over_runtime_bounds_run_under_triton_36_and_numpy_24(monkeypatch):
    # the whole-row kernel of an RMSNorm loops `range(0, tl.cdiv(N, BN))`: on the GPU machine every
    # CPU call of such a program failed ("only 0-dimensional arrays ..."), until the compat check
    _interpreter_of_triton_36_under_numpy_24(monkeypatch)
    module = coda_ir.compile(ROW_PROGRAM)
    assert "range(0, tl.cdiv(" in module.source
    x, w, wq = torch.randn(14, 64), torch.randn(64), torch.randn(24, 64)
    monkeypatch.setattr(compiled, "_INDEX_COMPAT", [False])  # as if checked and left alone
    try:
        module.f(x, w, wq)
        raise AssertionError("the simulated interpreter did not fail: the test checks nothing")
    except coda_ir.CodaError as error:
        assert "0-dimensional arrays" in str(error)
    monkeypatch.setattr(compiled, "_INDEX_COMPAT", [])  # the first interpreted call checks
    out = module.f(x, w, wq)
    assert compiled._INDEX_COMPAT == [True]
    ref = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w) @ wq.T
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def test_index_compat_is_in_place_exactly_where_the_interpreter_needs_it(monkeypatch):
    # here (Triton 3.9) the probe passes and nothing is replaced; on the GPU machine (Triton 3.6,
    # NumPy 2.5) it fails and the replacement must make it pass
    from triton.runtime import interpreter

    monkeypatch.setattr(interpreter._LangPatchScope, "set_attr", interpreter._LangPatchScope.set_attr)  # restored after
    monkeypatch.setattr(compiled, "_INDEX_COMPAT", [])
    set_attr = interpreter._LangPatchScope.set_attr
    with compiled._LOCK, compiled.interpret_mode(True), compiled.stdlib_mode(True), compiled.restored_language():
        needed = compiled._range_probe_fails()
        assert compiled.interpreter_index_compat() is needed
        assert (interpreter._LangPatchScope.set_attr is set_attr) is not needed
        assert not compiled._range_probe_fails()
