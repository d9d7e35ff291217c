"""`coda-opt --plan-hf CONFIG.json`: a training step predicted from a Hugging Face config alone
(coda_ir/torch/plan.py), on the CPU, for every GPU whose constants ship; bad input is a located
error and exit status 1, never a traceback."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from coda_ir.errors import ArgumentError, CompileError

ROOT = Path(__file__).resolve().parents[2]
TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256, "num_hidden_layers": 2,
        "tie_word_embeddings": True, "rope_theta": 10000.0, "rms_norm_eps": 1e-5}


def _rows(out: str) -> dict[str, dict[str, float]]:
    rows = {}
    for line in out.splitlines():
        match = re.match(r"\s+(a100|h100|h200)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x", line)
        if match:
            name, *values = match.groups()
            rows[name] = dict(zip(("step", "tps", "limit", "gemms", "attn", "ratio"), map(float, values)))
    return rows


def test_readme_plan_commands(capsys, monkeypatch):
    """The README's `--plan-hf` commands, run as written (in process: tools/coda-opt is this main)."""
    from coda_ir.tools.coda_opt import main

    readme = (ROOT / "README.md").read_text()
    commands = [line.split(" #")[0].strip() for block in re.findall(r"```sh\n(.*?)```", readme, re.S)
                for line in block.splitlines() if "--plan-hf" in line]
    assert len(commands) == 2, commands
    monkeypatch.chdir(ROOT)
    for command in commands:
        words = shlex.split(command)
        assert words[0] == ".venv/bin/coda-opt"
        main(words[1:])
        out = capsys.readouterr().out
        tokens = int(words[words.index("--tokens") + 1])
        gpus = {"h100"} if "--gpu" in words else {"a100", "h100", "h200"}
        assert "plan: llama (16 layers, hidden 2048, 32/8 heads of 64, vocab 128256)" in out
        rows = _rows(out)
        assert set(rows) == gpus, out
        for r in rows.values():
            assert r["tps"] == pytest.approx(tokens / (r["step"] / 1e3), rel=0.001)
            assert r["limit"] == pytest.approx(r["gemms"] + r["attn"], abs=0.0011)
            assert r["attn"] > 0 and r["ratio"] >= 1.0  # fused epilogues and folds cost more than the GEMMs alone
        if len(rows) == 3:
            assert rows["a100"]["step"] > rows["h100"]["step"]  # datasheet A100 vs calibrated H100
            assert "h100 attention: cudnn" in out and "a100 attention: flash" in out
        else:  # the second command: 2 sequences of 8192 tokens
            assert "16384 tokens (2 x 8192)" in out


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
