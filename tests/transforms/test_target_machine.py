"""The target machine is a pass option (issue 34), not an H100 default or the environment.

`nn-plan`, `nn-autodiff`, `coda-plan-mainloop` and `nn-to-coda` take `gpu=NAME` (an entry of
`analysis/gpu_constants.json`) and `gpu-constants=PATH` (a table to read it from). The default
is the H100 every recorded decision was tuned on (the emitted-identity test pins that the
default changed no program); another machine changes what is recorded; a machine that is not
there is an `ArgumentError` naming the pass and the option.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import coda_ir
from coda_ir.analysis.io_model import CONSTANTS_PATH
from coda_ir.dialects import coda, nn
from coda_ir.errors import ArgumentError

REPO = Path(__file__).resolve().parents[2]
LM_HEAD = (REPO / "examples/lm_head.mlir").read_text()
FEW_TILES = """\
func.func @few_tiles(%a: tensor<8192x4096xbf16>, %b: tensor<1024x4096xbf16>, %c: tensor<8192x1024xbf16>) -> tensor<8192x1024xbf16> {
  %y = coda.gemm %a, %b transpose_b ins(%c : tensor<8192x1024xbf16>) : tensor<8192x4096xbf16>, tensor<1024x4096xbf16> -> tensor<8192x1024xbf16> {
  ^bb0(%acc: !coda.tile<8192x1024xf32>, %ci: tensor<8192x1024xbf16>):
    %t = coda.accumulate %acc, %ci : !coda.tile<8192x1024xf32>, tensor<8192x1024xbf16>
    coda.yield %t : !coda.tile<8192x1024xf32>
  }
  func.return %y : tensor<8192x1024xbf16>
}
"""


def _cross_entropy_in_epilogue(pipeline: str) -> bool:
    module = coda_ir.lower(coda_ir.parse(LM_HEAD), pipeline)
    (ce,) = [op for op in module.walk() if isinstance(op, nn.CrossEntropyOp)]
    recorded = ce.properties.get("in_producer_epilogue")
    return recorded is None or bool(recorded.value.data)


def test_the_default_machine_is_the_h100():
    assert _cross_entropy_in_epilogue("nn-plan")
    assert str(coda_ir.lower(coda_ir.parse(LM_HEAD), "nn-to-coda")) == \
        str(coda_ir.lower(coda_ir.parse(LM_HEAD), "nn-to-coda{gpu=h100}"))


def test_another_machine_changes_a_recorded_plan():
    """The LLaMA-3-8B LM head's cross-entropy: in the logits GEMM's epilogue on the H100; on the
    H200 (faster HBM) the IO model prices the separate pass over the stored logits cheaper."""
    assert not _cross_entropy_in_epilogue("nn-plan{gpu=h200}")
    compiled = str(coda_ir.lower(coda_ir.parse(LM_HEAD), "nn-to-coda{gpu=h200}"))
    assert compiled != str(coda_ir.lower(coda_ir.parse(LM_HEAD), "nn-to-coda"))


def _gluon_record(pipeline: str) -> bool:
    module = coda_ir.lower(coda_ir.parse(FEW_TILES), pipeline)
    (gemm,) = [op for op in module.walk() if isinstance(op, coda.GemmOp)]
    return coda.MAINLOOP in gemm.attributes


def test_the_sm_count_is_the_machines(tmp_path):
    """256 tiles of 128x256 are fewer than 3 per SM of the 132-SM H100 (tl mainloop); a table
    whose machine has 64 SMs gives the same gemm the Gluon mainloop."""
    table = json.loads(CONSTANTS_PATH.read_text())
    table["small"] = dict(table["h100"], sms=64)
    path = tmp_path / "constants.json"
    path.write_text(json.dumps(table))
    assert not _gluon_record("coda-plan-mainloop")
    assert _gluon_record(f"coda-plan-mainloop{{gpu=small gpu-constants=\"{path}\"}}")


@pytest.mark.parametrize("pipeline,option", [
    ("nn-to-coda{gpu=b200}", "nn-to-coda: option gpu: unknown GPU 'b200' (known: a100, h100, h200)"),
    ("nn-plan{gpu=b200}", "nn-plan: option gpu: unknown GPU 'b200'"),
    ("nn-autodiff{gpu=b200}", "nn-autodiff: option gpu: unknown GPU 'b200'"),
    ("coda-plan-mainloop{gpu=b200}", "coda-plan-mainloop: option gpu: unknown GPU 'b200'"),
    ("nn-to-coda{gpu-constants=\"/no/such.json\"}", "nn-to-coda: option gpu-constants: cannot read '/no/such.json'"),
])
def test_a_machine_that_is_not_there_names_the_option(pipeline, option):
    with pytest.raises(ArgumentError, match=re.escape(option)):
        coda_ir.lower(coda_ir.parse(LM_HEAD), pipeline)
