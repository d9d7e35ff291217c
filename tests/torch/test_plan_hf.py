"""`coda-opt --plan-hf CONFIG.json`: a training step predicted from a Hugging Face config alone
(coda_ir/torch/plan.py), on the CPU, for every GPU whose constants ship; bad input is a located
error and exit status 1, never a traceback."""

from __future__ import annotations

import json
import re

import pytest

from coda_ir.errors import ArgumentError, CompileError

TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256, "num_hidden_layers": 2,
        "tie_word_embeddings": True, "rope_theta": 10000.0, "rms_norm_eps": 1e-5}


def test_plan_hf_prints_every_shipped_gpu(tmp_path, capsys):
    from coda_ir.tools.coda_opt import main

    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    main(["--plan-hf", str(config), "--tokens", "512", "--seq-len", "256"])  # in process: no second torch import
    out = capsys.readouterr().out
    assert "plan: llama (2 layers, hidden 64, 4/2 heads of 16, vocab 256)" in out
    assert "512 tokens (2 x 256)" in out
    rows = {}
    for line in out.splitlines():
        match = re.match(r"\s+(a100|h100|h200)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x", line)
        if match:
            name, step, tps, limit, gemms, attn, ratio = match.groups()
            rows[name] = dict(step=float(step), tps=int(tps), limit=float(limit), gemms=float(gemms),
                              attn=float(attn), ratio=float(ratio))
    assert set(rows) == {"a100", "h100", "h200"}, out
    for r in rows.values():
        assert r["tps"] == pytest.approx(512 / (r["step"] / 1e3), rel=0.01)
        assert r["limit"] == pytest.approx(r["gemms"] + r["attn"], abs=0.0011)
        assert r["attn"] > 0
    # the A100's datasheet rates are below the H100's calibrated ones
    assert rows["a100"]["step"] > rows["h100"]["step"]
    assert "h100 attention: cudnn" in out and "a100 attention: flash" in out


def test_plan_hf_errors_are_located_not_tracebacks(tmp_path, capsys):
    from coda_ir.tools.coda_opt import main

    bad = tmp_path / "bad.json"
    bad.write_text('{"model_type": "llama",\n "hidden_size": 64,}\n')
    with pytest.raises(SystemExit) as exit_:  # tools/coda-opt runs this main(): its exit status and stderr
        main(["--plan-hf", str(bad)])
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and "Traceback" not in err
    assert err.startswith(f"{bad}:2:20: error: not valid JSON")
    good = tmp_path / "config.json"
    good.write_text(json.dumps(TINY))
    with pytest.raises(SystemExit) as exit_:
        main(["--plan-hf", str(good), "--gpu", "b200"])
    assert exit_.value.code == 1
    assert capsys.readouterr().err == "coda-opt: error: unknown GPU 'b200' (constants ship for: a100, h100, h200)\n"


def test_plan_from_config_names_what_it_cannot_plan(tmp_path):
    from coda_ir.torch.plan import plan_from_config

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY, "model_type": "gpt2"}))
    with pytest.raises(CompileError, match=r"config.json: error: .*model_type = 'gpt2'"):
        plan_from_config(path, 256, gpus=["h100"])
    path.write_text(json.dumps({k: v for k, v in TINY.items() if k != "model_type"}))
    with pytest.raises(CompileError, match="no \"model_type\""):
        plan_from_config(path, 256, gpus=["h100"])
    with pytest.raises(ArgumentError, match="multiple of --seq-len"):
        plan_from_config(path, 300, 256)
