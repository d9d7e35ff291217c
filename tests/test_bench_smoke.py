"""CI runs the block benchmark's code path at a tiny shape through the CPU interpreter:
`bench/bench_block.py --smoke` compiles the LLaMA block forward (nn-to-coda) and forward+backward
(nn-autodiff,nn-to-coda; and the hand-written coda programs), runs them, and checks results and
gradients against the float64 reference (`coda_ir.testing.check_gradients` for the derived one)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.long_only  # the block's programs are checked by tests/transforms/test_autodiff.py too
def test_bench_block_smoke(tmp_path):
    env = dict(os.environ, TRITON_INTERPRET="1", CODA_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_block.py"), "--smoke", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    report = json.loads((tmp_path / "bench_block.json").read_text())
    variants = report["shapes"]["smoke"]["variants"]
    for name in ("coda", "coda derived", "coda hand-written", "eager"):
        assert variants[name]["check_ok"], (name, variants[name])
    assert variants["coda derived"]["check_gradients"] == "ok"
    assert variants["coda derived"]["kernels_bwd"] > 0


def test_bench_model_smoke(tmp_path):
    # the whole-model step benchmark at a tiny LLaMA on CPU: the limit, HF eager and coda-ir
    # (from_hf) all run, and coda-ir's loss matches eager's on the same batch
    env = dict(os.environ, TRITON_INTERPRET="1", CODA_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "model.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_model.py"), "--smoke", "--out", str(out)],
                       capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    results = json.loads(out.read_text())["results"]
    for name in ("limit", "eager", "coda"):
        assert "error" not in results[name], results[name]
        assert results[name]["median_ms"] > 0
        assert results[name]["pipelined_median_ms"] > 0  # steps back to back, beside the synced ones
    assert results["limit"]["x_limit_pipelined"] == 1.0
    assert abs(results["coda"]["loss_minus_eager"]) < 1e-4


def test_bench_families_smoke(tmp_path, request):
    # the per-family step benchmark at tiny shapes on CPU: llama trains through from_hf (loss =
    # eager's; every other family's loss against float64: tests/torch/test_hf.py), the padded /
    # packed batches run or say 'not supported'. (qwen3 too with --long: 11 s more of CI.)
    env = dict(os.environ, TRITON_INTERPRET="1", CODA_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "families.json"
    families = ["llama", "qwen3"] if request.config.getoption("--long") else ["llama"]
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_families.py"), "--smoke", "--families",
                        ",".join(families), "--out", str(out)], capture_output=True, text=True, timeout=300, env=env,
                       cwd=ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    cases = {(c["family"], c["batch_kind"]): c for c in json.loads(out.read_text())["cases"]}
    for key in [(f, "plain") for f in families]:
        v = cases[key]["variants"]
        assert cases[key]["inv_freq_dtype"] == "torch.float32"
        for name in ("limit", "eager", "coda"):
            assert v[name]["median_ms"] > 0, (key, name, v[name])
        assert abs(v["coda"]["loss_minus_eager"]) < 1e-4
    padded, packed = cases[("llama", "padded")], cases[("llama", "packed")]
    assert padded.get("not_supported") or abs(padded["variants"]["coda"]["loss_minus_eager"]) < 1e-4, padded
    # HF's packed run has no document masking under sdpa (timing only): coda-ir's loss just runs
    assert packed.get("not_supported") or packed["variants"]["coda"]["median_ms"] > 0, packed


def test_sanitize_examples_smoke(tmp_path):
    # the compute-sanitizer / GPU gradient-check driver at its tiny size on CPU: every example
    # compiles (nn-autodiff,nn-to-coda), runs @f, @f_fwd, @f_bwd and is within the bar
    env = dict(os.environ, TRITON_INTERPRET="1", CODA_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "sanitize.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "sanitize_examples.py"), "--cpu", "--check", "--out", str(out)],
                       capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    records = json.loads(out.read_text())["records"]
    assert {r["example"] for r in records} == {"llama_block", "qwen3_block", "gpt2_block", "lm_head"}
    assert all(r["ok"] and r["worst"][0] <= 1.0 for r in records), records


@pytest.mark.long_only  # a measurement tool whose launch paths every from_hf test runs
def test_bench_host_smoke(tmp_path):
    # the host-overhead A/B (launch plans on / off) at a tiny LLaMA on CPU: both variants run,
    # every launch helper is measured, and plans change no bit of the loss
    env = dict(os.environ, TRITON_INTERPRET="1", CODA_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "host.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_host.py"), "--smoke", "--out", str(out)],
                       capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["same_loss_across_variants"]
    for variant in ("plans", "no plans"):
        assert report["results"][variant]["gemm_us_per_launch"]["launches per step"] > 0


def test_bwd_passes_smoke(tmp_path):
    # the backward kernel table at the tiny shape on CPU, one variant (the default pipeline):
    # compiled, checked against float64, every launch of the backward listed with its bytes
    env = dict(os.environ, TRITON_INTERPRET="1", CODA_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "bwd_passes.py"), "--cpu", "--variants", "default=",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    rec = json.loads((tmp_path / "bwd_passes.json").read_text())["shapes"]["smoke"]["variants"]["default"]
    assert rec["check_ok"]
    kernels = rec["kernels"].values()
    assert any(k["origin"] == "nn.rope_grad+nn.row_dot.partials" for k in kernels)
    assert all(k["bytes"] > 0 for k in kernels)


def test_bench_attention_model_smoke(tmp_path):
    # the attention benchmark's code path on CPU (SDPA math kernels, eager FlexAttention forward):
    # every case gets the attention model's prediction, and every backend that runs on a CPU is
    # measured; what cannot run here (varlen needs CUDA) is recorded, not fatal
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_attention_model.py"), "--smoke", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    rows = json.loads((tmp_path / "bench_attention_model.json").read_text())["results"]
    assert {row["backend"] for row in rows} == {"cudnn", "flash", "flex", "varlen"}
    for row in rows:
        predicted = row["predicted"]
        assert 0 < predicted["fwd_s"] < predicted["fwd_bwd_s"], row
        if row["backend"] != "varlen":
            assert row["measured"]["fwd_s"] > 0, row
    assert "fwd_bwd_s" in next(r for r in rows if r["backend"] == "cudnn")["measured"]


def test_bench_plan_hf_dry_run(tmp_path):
    # the predicted-vs-measured step benchmark's CPU side: the predictions of both families, keyed
    # by the names the profiler will show, adding up to the predicted step; a bad family is refused
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "plan.json"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_plan_hf.py"), "--dry-run", "--layers", "1",
                        "--tokens", "4096", "--seq-len", "4096", "--out", str(out)],
                       capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    report = json.loads(out.read_text())
    assert [res["family"] for res in report["results"]] == ["llama", "qwen3"]
    for res in report["results"]:
        pred = res["predicted"]
        assert sum(pred["rows"].values()) == pytest.approx(pred["step_s"], rel=1e-9)
        names = [row["kernel"] for row in res["table"]]
        assert {"attention fwd", "attention bwd", "cuBLAS"} <= set(names)
        assert "_decoder_layer_fwd_k0_elementwise" in names and any(n.startswith("_lm_head_loss_bwd_k") for n in names)
        assert all(row["measured_s"] is None for row in res["table"])
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_plan_hf.py"), "--dry-run", "--families", "gpt2"],
                       capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    assert r.returncode != 0 and "unknown family 'gpt2'" in r.stderr
