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


def test_readme_plan_commands(capsys, monkeypatch, tmp_path):
    """The README's `--plan-hf` commands, run as written (in process: tools/coda-opt is this main;
    an `--svg` file goes to a temporary folder instead)."""
    from coda_ir.tools.coda_opt import main

    readme = (ROOT / "README.md").read_text()
    commands = [line.split(" #")[0].strip() for block in re.findall(r"```sh\n(.*?)```", readme, re.S)
                for line in block.splitlines() if "--plan-hf" in line]
    assert len(commands) == 3, commands
    monkeypatch.chdir(ROOT)
    for command in commands:
        words = shlex.split(command)
        assert words[0] == ".venv/bin/coda-opt"
        if "--svg" in words:
            words[words.index("--svg") + 1] = str(tmp_path / "step.svg")
        main(words[1:])
        out = capsys.readouterr().out
        if "--report" in words:  # the third: the whole-model report of one GPU, and its diagram
            assert set(_rows(out)) == {"h200"}
            total = re.search(r"= step ([\d.]+) ms", out)
            assert total and float(total.group(1)) == pytest.approx(_rows(out)["h200"]["step"], abs=0.0011)
            assert "decoder_layer fwd x16:" in out and "lm_head_loss bwd x1:" in out
            assert (tmp_path / "step.svg").read_text().startswith("<svg")
            continue
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


def _report(tmp_path, capsys, *extra):
    from coda_ir.tools.coda_opt import main

    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    main(["--plan-hf", str(config), "--tokens", "256", "--gpu", "h200", "--report", *extra])
    return capsys.readouterr().out


def test_plan_hf_report_units_kernels_and_totals(tmp_path, capsys):
    """`--report`: every unit forward then backward in step order, its kernels with the names the
    compiler gives them, the recorded choices, and totals equal to the summary's step."""
    out = _report(tmp_path, capsys)
    step = _rows(out)["h200"]["step"]
    units = re.findall(r"^  (\w+) (fwd|bwd) x(\d+):", out, re.M)
    assert units == [("embed_tokens", "fwd", "1"), ("decoder_layer", "fwd", "2"), ("lm_head_loss", "fwd", "1"),
                     ("lm_head_loss", "bwd", "1"), ("decoder_layer", "bwd", "2"), ("embed_tokens", "bwd", "1")], units
    total = re.search(r"total: forward ([\d.]+) ms \+ backward ([\d.]+) ms = step ([\d.]+) ms", out)
    assert total and float(total.group(3)) == pytest.approx(step, abs=0.0011)
    assert float(total.group(1)) + float(total.group(2)) == pytest.approx(step, abs=0.0021)
    # the kernel rows' per-step times (times the layer count) add up to the step
    rows = re.findall(r"^\s+\d+ \S+\s+(\S+)\s+\S+\s+.*?\s([\d.]+)\s+([\d.]+)\s+[\d.]+%$", out, re.M)
    assert len(rows) > 20
    assert sum(float(r[2]) for r in rows) == pytest.approx(step, rel=0.01)
    names = {r[0] for r in rows}
    assert "_decoder_layer_fwd_k0_elementwise" in names and "attention" in names and "cuBLAS" in names
    assert any(n.startswith("_lm_head_loss_bwd_k") for n in names)
    # the attention between the units, priced with its schedule and occupancy
    assert re.search(r"attention attn:\w+: cudnn \d+x\d+ .* fwd: \d+ CTA/SM = \d+ warps/SM", out)
    assert re.search(r"attention attn_grad:\w+: cudnn \d+x\d+ .* bwd:", out)
    # the choices the compile recorded: store or recompute, norm statistics, logits
    assert re.search(r"stored: rstd_x tensor<256xf32>, .*lse_y", out)
    assert re.search(r"recomputed: .*\bh1\b", out)
    assert "norm statistics: h1: " in out
    assert "logits: logits: stored by the forward for the backward" in out
    assert re.search(r"peak memory: [\d.]+ GiB = weights\+grads", out)


def test_plan_hf_svg_is_one_diagram_of_the_step(tmp_path, capsys):
    import xml.etree.ElementTree as ET

    svg = tmp_path / "step.svg"
    out = _report(tmp_path, capsys, "--svg", str(svg))
    assert f"wrote {svg}" in out
    root = ET.parse(svg).getroot()  # well-formed XML
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == ns + "svg"
    groups = [g for g in root.iter(ns + "g")]
    units = [g for g in groups if g.get("class") == "unit"]
    assert [u.get("data-unit") for u in units] == ["embed_tokens", "decoder_layer", "lm_head_loss"]
    for u in units:  # forward and backward of each unit, side by side
        assert [p.get("data-direction") for p in u if p.get("class") == "pass"] == ["fwd", "bwd"]
    attention = [g for g in groups if g.get("class") == "attention"]
    assert sorted(g.get("data-direction") for g in attention) == ["bwd", "fwd"]
    assert all(g.get("data-backend") == "cudnn" for g in attention)
    kernels = [g.get("data-name") for g in groups if g.get("class") == "kernel"]
    report_rows = re.findall(r"^\s+\d+ \S+\s+\S+\s+\S+\s+.*%$", out, re.M)
    assert len(kernels) == len(report_rows)
    assert "_decoder_layer_bwd_k" in " ".join(kernels)


def test_plan_hf_svg_path_errors_are_clear(tmp_path, capsys):
    from coda_ir.torch.plan import check_svg_path
    from coda_ir.tools.coda_opt import main

    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    for target, message in ((tmp_path / "missing" / "step.svg", "the folder '.*missing' does not exist"),
                            (tmp_path, "is a directory, not a file to write")):
        with pytest.raises(SystemExit) as exit_:
            main(["--plan-hf", str(config), "--tokens", "256", "--gpu", "h100", "--svg", str(target)])
        err = capsys.readouterr().err
        assert exit_.value.code == 1 and "Traceback" not in err
        assert re.match(rf"coda-opt: error: --svg: .*{message}", err), err
        with pytest.raises(ArgumentError, match=message):
            check_svg_path(target)
    with pytest.raises(ArgumentError, match="needs a file path"):
        check_svg_path("")
