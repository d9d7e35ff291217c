"""Buffer lifetimes of host functions (`coda_ir.analysis.liveness`): the emitted host code drops
each buffer after its last use, never an argument or a result, and never reads a dropped name;
the memory timeline of the derived LLaMA block at the 1B / 8B bench shapes (the numbers
bench/RESULTS.md session 9 predicts and measures)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from xdsl.dialects import func

import coda_ir
from coda_ir.analysis.liveness import buffer_bytes, dead_after, timeline
from coda_ir.testing import check_gradients, random_inputs, random_upstream

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "programs"))

from generate import Llama, nn_llama_block  # noqa: E402

MiB = 2**20
SHAPES = {  # bench/bench_block.py's
    "1b": Llama("LLaMA-3.2-1B", m=16384, d=2048, f=8192, hd=64, hq=32, hkv=8, eps=1e-5, theta=500000.0),
    "8b": Llama("LLaMA-3-8B", m=8192, d=4096, f=14336, hd=128, hq=32, hkv=8, eps=1e-5, theta=500000.0),
}
EXAMPLES = sorted((ROOT / "examples").glob("*.mlir"))


def _functions(cm) -> dict[str, func.FuncOp]:
    return {f.sym_name.data: f for f in cm.ir.walk() if isinstance(f, func.FuncOp) and f.body.blocks}


def _host_functions(source: str) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and not n.decorator_list}


def _check_drops(fn_ast: ast.FunctionDef, fn: func.FuncOp) -> int:
    """Statement by statement: no name is read after its `del`, no argument or returned name is
    dropped, and every buffer `dead_after` names is dropped once. Returns the number dropped."""
    params = {a.arg for a in fn_ast.args.args}
    ret = fn_ast.body[-1]
    assert isinstance(ret, ast.Return)
    returned = {n.id for n in ast.walk(ret) if isinstance(n, ast.Name)}
    dropped: set[str] = set()
    for stmt in fn_ast.body:
        if isinstance(stmt, ast.Delete):
            names = {t.id for t in stmt.targets if isinstance(t, ast.Name)}
            assert not names & params, f"drops an argument: {names & params}"
            assert not names & returned, f"drops a returned value: {names & returned}"
            assert not (names - {"_e"}) & dropped, f"dropped twice: {names & dropped}"
            dropped |= names - {"_e"}
            continue
        read = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        assert not read & dropped, f"reads {read & dropped} after dropping it: {ast.unparse(stmt)[:200]}"
    specs = {n for n in dropped if n.startswith("_g")}
    assert len(dropped) - len(specs) == sum(len(v) for v in dead_after(fn).values())
    return len(dropped) - len(specs)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_drop_dead_buffers_only(path):
    cm = coda_ir.compile(path.read_text(), pipeline="nn-autodiff,nn-to-coda")
    hosts = _host_functions(cm.source)
    fns = _functions(cm)
    assert set(fns) <= set(hosts)
    total = sum(_check_drops(hosts[name], fn) for name, fn in fns.items())
    assert total > 0  # every example's backward has temporaries


def test_llama_block_1b_backward_drops():
    """Which buffers the derived backward drops where, at the 1B shape (IR only, no launch)."""
    # the norm backward in the dgrad epilogues (norm-grad=epilogue), the form these drops were read from
    cm = coda_ir.compile(nn_llama_block(SHAPES["1b"], fname="llama_block"), pipeline="nn-autodiff,nn-to-coda{norm-grad=epilogue}")
    bwd = _functions(cm)["llama_block_bwd"]
    steps = timeline(bwd)
    by_origin = [(s.op.attributes["coda.origin"].data if "coda.origin" in s.op.attributes else s.op.name, s) for s in steps]
    # h2 dies at dWqkv, h1 at dWgu; dz [M, 2F] (512 MiB) with the gate/up dgrad + RMSNorm backward
    dwgu = [s for o, s in by_origin if o == "nn.gemm" and s.allocated == 64 * MiB]
    assert [v.name_hint for v in dwgu[0].dropped] == ["h1"]
    gate_up_dgrad = [s for o, s in by_origin if o == "nn.matmul+nn.rms_norm_grad.apply+nn.add"][-1]
    assert 512 * MiB < gate_up_dgrad.freed < 580 * MiB
    assert len(cm.source.split("def llama_block_bwd(")[1].split("\ndef ")[0].split("del ")) > 8


@pytest.mark.parametrize("key, saved_mib, kept_mib, dropped_mib, sunk_mib, separate_mib",
                         [("1b", 992, 1056, 753, 721, 1105), ("8b", 896, 1291, 964, 852, 1013)])
def test_llama_block_peak_model(key, saved_mib, kept_mib, dropped_mib, sunk_mib, separate_mib):
    """The backward's memory above the saved set, with the SwiGLU backward in the down-proj dgrad's
    epilogue (`gated-grad=epilogue`, the form measured here): buffers kept to the end (the host
    before session 9: with the saved set, the measured 2044 / 2184 MiB fwd+bwd on the H100; +4 MiB
    since session 11, the backward's RoPE cos/sin tables),
    dropped at last use, and with `coda-sink-results` (dWd after the gate/up dgrad; measured
    1713 / 1749 MiB). The default plan (session 11): the separate SwiGLU-backward pass (nn-plan's
    gated-grad choice at both shapes) stores dy [M, F] beside dz (+192 MiB at 1B, +1 at 8B:
    913 / 853 MiB, session 9); the separate RMSNorm-backward passes (norm-grad) store dy [M, D]
    in f32 and write the rebuilt h1, h2 at the pass instead of at the backward's start: 849 MiB at
    1B (-64: h1 is born later), 961 at 8B (+108: the f32 dy of the gate/up dgrad beside dz). The
    default backward rebuilds g = swiglu(z) in that pass instead of reading a saved g (session 23;
    the epilogue forms above save it, `rebuild-gated=false`): g is now born in the backward, 1105 at
    1B (+256: g [M, F] beside z, dz and dy at the pass), 1013 at 8B (+52), while the forward holds
    256 / 224 MiB less per layer until its backward."""
    text = nn_llama_block(SHAPES[key], fname="llama_block")
    unsunk = _functions(coda_ir.compile(text, pipeline="nn-autodiff{rebuild-gated=false},nn-to-coda{sink-results=false gated-grad=epilogue norm-grad=epilogue}"))
    fns = _functions(coda_ir.compile(text, pipeline="nn-autodiff{rebuild-gated=false},nn-to-coda{gated-grad=epilogue norm-grad=epilogue}"))
    default = _functions(coda_ir.compile(text, pipeline="nn-autodiff,nn-to-coda"))
    assert round(max(s.live for s in timeline(default["llama_block_bwd"])) / MiB) == separate_mib
    fwd = timeline(fns["llama_block_fwd"])
    held = fwd[-1].live - fwd[-1].freed  # f_fwd's results and saved tensors
    assert round(held / MiB) == saved_mib
    assert round(max(s.live for s in timeline(unsunk["llama_block_bwd"], drop_dead=False)) / MiB) == kept_mib
    assert round(max(s.live for s in timeline(unsunk["llama_block_bwd"])) / MiB) == dropped_mib
    dropped = timeline(fns["llama_block_bwd"])
    assert round(max(s.live for s in dropped) / MiB) == sunk_mib
    # what is left after the last launch is exactly the returned gradients
    grads = fns["llama_block_bwd"].body.blocks[0].last_op.operands
    assert dropped[-1].live - dropped[-1].freed == sum(buffer_bytes(g.type) for g in grads)


def test_sink_results_moves_dwd_after_gate_up_dgrad():
    """The one move in the derived block: dWd (`nn.gemm` [D, F], a result) from right after the
    SwiGLU backward's kernel to right after the gate/up dgrad + RMSNorm backward, its operand dh's
    last other reader; the forward and the other weight gradients stay where they were."""
    text = nn_llama_block(SHAPES["1b"], fname="llama_block")
    before = _functions(coda_ir.compile(text, pipeline="nn-autodiff{rebuild-gated=false},nn-to-coda{sink-results=false gated-grad=epilogue norm-grad=epilogue}"))
    after = _functions(coda_ir.compile(text, pipeline="nn-autodiff{rebuild-gated=false},nn-to-coda{gated-grad=epilogue norm-grad=epilogue}"))

    def order(fn):
        out = []
        for op in fn.body.blocks[0].ops:
            origin = op.attributes.get("coda.origin")
            shape = tuple(op.results[0].type.get_shape()) if op.results and hasattr(op.results[0].type, "get_shape") else ()
            out.append((origin.data if origin is not None else op.name, shape))
        return out

    assert order(after["llama_block_fwd"]) == order(before["llama_block_fwd"])
    old, new = order(before["llama_block_bwd"]), order(after["llama_block_bwd"])
    dwd = ("nn.gemm", (2048, 8192))
    assert sorted(old) == sorted(new) and old != new
    assert old[old.index(dwd) - 1][0] == "nn.matmul+nn.swiglu_grad+nn.row_dot.partials"
    assert new[new.index(dwd) - 1][0] == "nn.matmul+nn.rms_norm_grad.apply+nn.add"
    assert [x for x in old if x != dwd] == [x for x in new if x != dwd]


def test_dropping_keeps_gradients():
    """The derived block at a small odd shape through the interpreter, with the drops in its host
    functions: gradients against float64 (the NN_DIALECT.md bar)."""
    s = Llama("odd", m=40, d=48, f=80, hd=16, hq=2, hkv=1, eps=1e-5, theta=10000.0)
    text = nn_llama_block(s, fname="llama_block")
    cm = coda_ir.compile(text, pipeline="nn-autodiff,nn-to-coda")
    assert "del " in cm.source.split("def llama_block_bwd(")[1]
    inputs = random_inputs(text, seed=3)
    check_gradients(cm, text, inputs, upstream=random_upstream(text, seed=3))


OWNED_PROGRAM = """
func.func @g(%a: tensor<16x24xf32> {coda.owned}, %b: tensor<24x24xf32> {coda.owned}, %c: tensor<24x24xf32>, %u: tensor<16x24xf32> {coda.owned}) -> (tensor<16x24xf32>, tensor<24x24xf32>) {
  %x = nn.linear %a, %b : tensor<16x24xf32>, tensor<24x24xf32> -> tensor<16x24xf32>
  %y = nn.silu %x : tensor<16x24xf32> -> tensor<16x24xf32>
  %z = nn.linear %y, %c : tensor<16x24xf32>, tensor<24x24xf32> -> tensor<16x24xf32>
  func.return %z, %b : tensor<16x24xf32>, tensor<24x24xf32>
}
"""


def test_owned_arguments_are_freed_before_the_function_returns(monkeypatch):
    """A function owning arguments (`coda.owned`) takes them in a list it empties and drops each
    after its last reader: %u (unread) before the first launch, %a after the first GEMM; %b is
    returned (kept), %c is not owned (kept). The caller's list is emptied; the result is the
    float64 reference's within the bar."""
    import weakref

    import torch

    from coda_ir.runtime.compiled import ArgumentError
    from coda_ir.testing import check_close

    cm = coda_ir.compile(OWNED_PROGRAM, pipeline="nn-to-coda")
    g = torch.Generator().manual_seed(0)
    a, b, c, u = (torch.randn(s, generator=g) for s in [(16, 24), (24, 24), (24, 24), (16, 24)])
    ref64 = torch.nn.functional.silu(a.double() @ b.double().T) @ c.double().T
    ref32 = torch.nn.functional.silu(a @ b.T) @ c.T
    with pytest.raises(ArgumentError, match="one list"):
        cm.g(a, b, c, u)  # positional: refused, nothing released
    refs = {name: weakref.ref(t) for name, t in zip("abcu", (a, b, c, u))}
    arguments = [a, b, c, u]
    del a, u  # the list holds the only references to a and u
    alive_at_alloc: list[dict[str, bool]] = []
    empty = torch.empty

    def record(*size, **kwargs):
        alive_at_alloc.append({n: r() is not None for n, r in refs.items()})
        return empty(*size, **kwargs)

    monkeypatch.setattr(torch, "empty", record)
    z, b_out = cm.g(arguments)
    monkeypatch.setattr(torch, "empty", empty)
    assert arguments == []  # the function emptied the caller's list
    assert b_out is b
    # two GEMMs allocate: y at the first (u already dropped, a still read), z at the second
    assert [s["u"] for s in alive_at_alloc] == [False, False]
    assert [s["a"] for s in alive_at_alloc] == [True, False]
    assert all(s["b"] and s["c"] for s in alive_at_alloc)
    assert refs["a"]() is None and refs["u"]() is None
    ok, error, bound = check_close(z, ref64, ref32)
    assert ok, (error, bound)


def test_owned_arguments_in_the_timeline():
    """The memory model of an owning function: released arguments count from the entry and are
    freed at their drop (u on entry, a after the first GEMM)."""
    cm = coda_ir.compile(OWNED_PROGRAM, pipeline="nn-to-coda")
    fn = _functions(cm)["g"]
    dead = dead_after(fn)
    assert [v.name_hint for v in dead[fn]] == ["u"]
    steps = timeline(fn)
    size, b = 16 * 24 * 4, 24 * 24 * 4
    # from the entry: a, b (returned: held to the end) and u (dropped on entry); c is not owned
    assert steps[0].live == size + b + size  # a, b, y
    assert [v.name_hint for v in steps[0].dropped] == ["a"] and steps[0].freed == size
    assert steps[1].live == b + size + size  # b, y, z
    assert timeline(fn, released=[])[0].live == size  # y only: no argument counted


@pytest.mark.parametrize("key, before_mib, owned_mib, donated_mib", [("1b", 1841, 1841, 1329), ("8b", 1685, 1685, 1237)])
def test_llama_block_peak_model_with_saved_tensors_handed_over(key, before_mib, owned_mib, donated_mib):
    """The forward+backward peak the model predicts for `coda_ir.torch`'s backward (bench/RESULTS.md
    session 10): the caller keeps f's results (x2, r) and the inputs; the saved extras (x1, rstd_x1,
    z, rstd_x2; g before session 23) are held before the backward and, handed over (`coda.owned`), freed at their last
    reader; donated too, dz is written over z (the separate SwiGLU-backward pass). Handing over
    alone leaves the 1B peak where it was: at the SwiGLU-backward pass, z's last reader, where z,
    dz and dy coexist; dz over z removes one [M, 2F] buffer there (-496 MiB); at 8B handing over
    frees x1, z, g before the gate/up dgrad's f32 dy meets dz (-284), dz over z then -228. Session 10
    measured 1905 / 1749 -> 1393 / 1301 MiB with the norm backwards in the dgrads' epilogues; the
    separate passes (session 11's default: dy in f32, h rebuilt at the pass) move it to
    1841 / 1857 -> 1345 / 1345 MiB (torch.compile: 1756 / 1712). Session 23: g is rebuilt in the
    backward's SwiGLU pass, not saved (-256 / -224 MiB held between forward and backward in every
    other layer of a model); this block alone: 1841 / 1685 -> 1329 / 1237 MiB."""
    from coda_ir.dialects.coda import donate_arguments, own_arguments
    from coda_ir.torch.function import _funcs, _only_functions

    text = nn_llama_block(SHAPES[key], fname="llama_block")
    module = coda_ir.parse(text)
    coda_ir.lower(module, "nn-fuse-siblings,nn-autodiff")
    funcs = _funcs(module)
    n = len(funcs["llama_block"].function_type.outputs.data)
    fwd_block = funcs["llama_block_fwd"].body.blocks[0]
    returned = list(fwd_block.last_op.operands)
    saved = returned[n:]
    results = [j for j, v in enumerate(saved) if any(v is r for r in returned[:n])]  # x2, r: the caller's
    extras = [j for j, v in enumerate(saved) if v.owner is not fwd_block and j not in results]
    results_bytes = sum(buffer_bytes(saved[j].type) for j in results)
    extras_bytes = sum(buffer_bytes(saved[j].type) for j in extras)
    assert round((results_bytes + extras_bytes) / MiB) == {"1b": 736, "8b": 672}[key]
    peaks = []
    for own, donate in ((False, False), (True, False), (True, True)):
        variant = _only_functions(module, ["llama_block_bwd"])
        bwd = _funcs(variant)["llama_block_bwd"]
        if own:
            own_arguments(bwd, range(len(saved)))
        if donate:
            donate_arguments(bwd, extras)
        fn = _functions(coda_ir.compile(variant, pipeline="nn-to-coda"))["llama_block_bwd"]
        # not owned: the extras are held beside the backward's own buffers to its end; owned:
        # the timeline counts them (released) from the entry to their last reader
        above = max(s.live for s in timeline(fn, released=extras))
        peaks.append(round((results_bytes + (0 if own else extras_bytes) + above) / MiB))
    assert peaks == [before_mib, owned_mib, donated_mib]
