"""The Gluon warp-specialized mainloop (issue 11): the `#coda.mainloop` record and its verifier,
`coda-plan-mainloop`'s decisions on the LLaMA block, the runtime's fallback to the tl kernel
where no Hopper GPU runs (numerics through the interpreter are the tl kernel's), the autotune
key, and the generated Gluon kernels compiled for sm_90 without a GPU (Triton's own compiler,
`triton.compile(GluonASTSource(...), target=cuda:90)`): a few kernels by default, every kernel of
every example with `--gluon-compile-all`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

import coda_ir
from coda_ir import remarks
from coda_ir.context import make_context
from coda_ir.dialects import coda
from coda_ir.errors import ArgumentError
from coda_ir.runtime import gemm_launch
from coda_ir.testing import random_inputs
from coda_ir.transforms.plan_mainloop import PlanMainloopPass

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "programs"))

from generate import Llama, nn_llama_block  # noqa: E402

SMALL = Llama("small", m=96, d=64, f=96, hd=16, hq=2, hkv=1, eps=1e-5, theta=500000.0)

RECORD = ("#coda.mainloop<gluon_ws, bm = 128, bn = 256, bk = 64, stages = 3, handoff = bf16, accumulate_first = -1, "
          "epilogue_warps = 2, sub_rows = 16, regs = [168, 24, 176]>")


def parse_attr(text: str):
    return Parser(make_context(), text).parse_attribute()


def mainloops(cm) -> dict[str, coda.MainloopAttr | None]:
    """origin -> record of every gemm of the compiled module's functions, by function and index."""
    out = {}
    for fn in [op for op in cm.ir.walk() if op.name == "func.func"]:
        for i, k in enumerate(coda.kernels(fn)):
            if isinstance(k, coda.GemmOp):
                out[f"{fn.sym_name.data}:{i}:{k.attributes['coda.origin'].data}"] = coda.recorded_mainloop(k)
    return out


# ---------------------------------------------------------------------------------------- record


def test_record_round_trips_and_verifies():
    attr = parse_attr(RECORD)
    attr.verify()
    assert str(attr) == RECORD
    assert attr.as_dict()["regs"] == (168, 24, 176)


@pytest.mark.parametrize("field, bad, message", [
    ("bn = 256", "bn = 512", "bn = 128 or 256"),
    ("handoff = bf16", "handoff = f16", "handoff must be bf16 or f32"),
    ("regs = [168, 24, 176]", "regs = [168, 24]", "three multiples of 8"),
    ("stages = 3", "stages = 1", "stages must be 2..8"),
    ("sub_rows = 16", "sub_rows = 12", "sub_rows must be a power of two"),
    ("epilogue_warps = 2", "epilogue_warps = 3", "epilogue_warps must be 1, 2 or 4"),
    ("gluon_ws", "cutlass", "mainloop kind must be one of gluon_ws"),
])
def test_record_verifier_rejects(field, bad, message):
    with pytest.raises(VerifyException, match=message):
        parse_attr(RECORD.replace(field, bad)).verify()


def test_accumulate_first_needs_a_bf16_handoff():
    text = RECORD.replace("handoff = bf16, accumulate_first = -1", "handoff = f32, accumulate_first = 0")
    with pytest.raises(VerifyException, match="handoff must be bf16"):
        parse_attr(text).verify()


def test_record_is_a_gemm_attribute_naming_an_input():
    gemm = f"""
func.func @f(%a: tensor<64x128xbf16>, %b: tensor<256x128xbf16>) -> tensor<64x256xbf16> {{
  %y = coda.gemm %a, %b transpose_b : tensor<64x128xbf16>, tensor<256x128xbf16> -> tensor<64x256xbf16>
      attributes {{coda.mainloop = {RECORD.replace('accumulate_first = -1', 'accumulate_first = 0')}}} {{
  ^bb0(%acc: !coda.tile<64x256xf32>):
    coda.yield %acc : !coda.tile<64x256xf32>
  }}
  func.return %y : tensor<64x256xbf16>
}}"""
    with pytest.raises(coda_ir.CodaError, match="accumulate_first 0 is not an input"):
        coda_ir.compile(gemm, pipeline="")


# ---------------------------------------------------------------------------------------- plan


@pytest.mark.parametrize("norm_grad", ["epilogue", "auto"])
def test_plan_on_the_llama_block(norm_grad):
    """Forward: out- and down-projection with the residual added by the MMA warpgroups (bf16
    hand-off), QKV + RoPE reading cos/sin tables f32 (16 rows: its layout has 16 / 8 lanes along
    the columns); the interleaved gate/up keeps tl. Backward: with the RMSNorm backward in the
    dgrads' epilogues, both dgrads f32 with 8-row sub-tiles (column partials); with the default
    plan (`auto`: the norm backward a separate pass at these shapes) the dgrads are plain gemms;
    plain gemms get no record. (`mainloop=gluon`: at these small shapes `auto` gives no record.)"""
    remarks.EMITTED.clear()
    with remarks.printed_remarks(False):
        cm = coda_ir.compile(nn_llama_block(SMALL),
                             pipeline=f"nn-autodiff,nn-to-coda{{rope-table=always norm-grad={norm_grad} mainloop=gluon}}")
    got = {k: v for k, v in mainloops(cm).items() if k.startswith("llama_block_")}
    fwd = {k.split(":")[2]: v for k, v in got.items() if k.startswith("llama_block_fwd:")}
    residual = "nn.linear+nn.add+nn.rms_norm.stats+nn.rms_norm.prescale"
    assert fwd[residual] is not None and fwd[residual].handoff.data == "bf16"
    assert fwd[residual].accumulate_first.data == 0 and fwd[residual].bk.data == 64
    rope = fwd["nn.linear+nn.rope"]
    assert rope is not None and rope.handoff.data == "f32" and rope.bk.data == 32
    assert rope.sub_rows.data == (32 // (SMALL.hd // 2 // 8)) * 2
    assert fwd["nn.linear+nn.swiglu"] is None
    bwd = [(k.split(":")[2], v) for k, v in got.items() if k.startswith("llama_block_bwd:")]
    norms = [v for o, v in bwd if o.startswith("nn.matmul+nn.rms_norm_grad")]
    if norm_grad == "epilogue":
        assert len(norms) == 2 and all(v is not None and v.handoff.data == "f32" and v.sub_rows.data == 8 for v in norms)
    else:
        assert norms == [] and sum(o == "nn.matmul" for o, _ in bwd) >= 2
    assert all(v is None for o, v in bwd if o in ("nn.gemm", "nn.matmul"))
    assert any("keeps the tl mainloop: its columns are interleaved" in r for r in remarks.EMITTED)


def test_plan_option_tl_and_bad_mode():
    with remarks.printed_remarks(False):
        cm = coda_ir.compile(nn_llama_block(SMALL), pipeline="nn-to-coda{mainloop=tl}")
    assert not any(mainloops(cm).values())
    with pytest.raises(ArgumentError, match="mainloop must be one of auto, gluon, tl"):
        PlanMainloopPass(mainloop="cutlass").apply(make_context(), cm.ir)


def test_auto_leaves_small_gemms_on_tl():
    """`auto` keeps the tl mainloop where a tile's mainloop is too short (K < MIN_K) or there are
    too few tiles per SM to overlap epilogues with mainloops; at the LLaMA-8B shape it gives the
    record to the same gemms as `gluon`. The GPT-2 medium example (K = 1024 and N = 1024 gemms,
    measured slower on Gluon) gets none."""
    from types import SimpleNamespace

    def planned(text: str, pipeline: str) -> dict:
        return mainloops(SimpleNamespace(ir=coda_ir.lower(coda_ir.parse(text), pipeline)))

    remarks.EMITTED.clear()
    with remarks.printed_remarks(False):
        small = coda_ir.compile(nn_llama_block(SMALL), pipeline="nn-to-coda")
    assert not any(mainloops(small).values())
    assert any(f"K = {SMALL.d} < 2048" in r for r in remarks.EMITTED)
    big = nn_llama_block(Llama("8b", m=8192, d=4096, f=14336, hd=128, hq=32, hkv=8, eps=1e-5, theta=500000.0))
    with remarks.printed_remarks(False):
        auto = planned(big, "nn-autodiff,nn-to-coda")
        every = planned(big, "nn-autodiff,nn-to-coda{mainloop=gluon}")
    assert {k: v is not None for k, v in auto.items()} == {k: v is not None for k, v in every.items()}
    # out-, down-projection and QKV + RoPE, in @llama_block and in @llama_block_fwd
    assert sorted(k.split(":")[0] for k, v in auto.items() if v is not None) == ["llama_block"] * 3 + ["llama_block_fwd"] * 3
    remarks.EMITTED.clear()
    with remarks.printed_remarks(False):
        gpt2 = planned((ROOT / "examples" / "gpt2_block.mlir").read_text(), "nn-autodiff,nn-to-coda")
    assert not any(gpt2.values())
    assert any("K = 1024 < 2048" in r for r in remarks.EMITTED)
    assert any("256 tiles of 128x256, fewer than 3 per SM" in r for r in remarks.EMITTED)


# ---------------------------------------------------------------------------------------- runtime


def test_cpu_runs_the_tl_kernel_with_the_same_results():
    """Under the interpreter the Gluon record is inert: the tl kernel runs, and the results equal
    those of the program compiled without records (same kernels, same math)."""
    text = nn_llama_block(SMALL)
    with remarks.printed_remarks(False):
        with_record = coda_ir.compile(text, pipeline="nn-to-coda{mainloop=gluon}")
        without = coda_ir.compile(text, pipeline="nn-to-coda{mainloop=tl}")
    assert "mainloop=_rt.GluonMainloop(" in with_record.source
    args = random_inputs(text, seed=3)
    for got, want in zip(with_record.llama_block(*args), without.llama_block(*args)):
        assert torch.equal(got, want)
    assert gemm_launch.LAST_LAUNCH["path"] != "gluon_ws"


def test_gluon_plan_needs_a_hopper_gpu():
    a = torch.zeros(128, 64, dtype=torch.bfloat16)
    b = torch.zeros(256, 64, dtype=torch.bfloat16)
    ml = gemm_launch.GluonMainloop(object(), 128, 256, 64, 3, "bf16", -1)
    assert gemm_launch._gluon_plan(ml, a, b, [], 128, 256, 64, False, True) is None
    assert isinstance(gemm_launch.gluon_supported(), bool)
    # records compare by configuration (a launch's plan key holds the tl kernel, whose Gluon kernel it is)
    assert ml == gemm_launch.GluonMainloop(object(), 128, 256, 64, 3, "bf16", -1)


def test_tuning_key_names_the_mainloop_kind():
    a = torch.zeros(4, 4, dtype=torch.bfloat16)
    key = gemm_launch._tuning_key(None, "k", a, a, 4, 4, 4, False, False, 0, 1, 1, "tma", None, "tl")
    assert "|mainloop=tl|" in key


# ---------------------------------------------------------------------------------------- sm_90


@pytest.mark.skipif(not gemm_launch.gluon_supported(), reason="the installed Triton has no Gluon for Hopper")
def test_generated_gluon_kernels_compile_for_sm90(request):
    """One Gluon kernel of each kind of the LLaMA block (the residual added by the MMA warpgroups,
    f32 with a RoPE pair map, f32 with carried column partials) compiles for sm_90 within the
    H100's shared memory; `--gluon-compile-all`: every Gluon kernel of every example. In a child
    process: Triton's own library functions (tl.sum, ...) are interpreter functions in this one."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    args = [sys.executable, str(Path(__file__).with_name("gluon_sm90.py"))]
    if request.config.getoption("--gluon-compile-all"):
        args.append("--all")
    run = subprocess.run(args, env=env, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["compiled"] >= 3 and not report["failed"], report
    assert {"bf16 accumulate_first", "f32 pair_map", "f32 column partials"} <= set(report["kinds"]), report
    assert all(shared <= 232448 for shared in report["shared"].values()), report  # an H100 block's shared memory


def test_readme_gluon_snippet_runs(capsys):
    import re

    doc = (ROOT / "README.md").read_text()
    snippet = next(s for s in re.findall(r"```python\n(.*?)```", doc, re.S) if "@out_proj" in s)
    exec(compile(snippet, "README.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("#coda.mainloop<gluon_ws, bm = 128, bn = 256, bk = 64") and "accumulate_first = 0" in out[0]
    assert "runs the Gluon warp-specialized mainloop on Hopper" in out[1] and "MMA warpgroups add" in out[1]
    assert "keeps the tl mainloop: K = 512 < 2048" in out[2]
    assert out[3] == "True False"
