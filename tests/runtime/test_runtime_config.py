"""`RuntimeConfig` (issue 34): the runtime's settings in one explicit object.

The environment supplies defaults only, read in `coda_ir.environment` (the structure test pins
that no other module reads it); `configure` / `using` put a configuration in force; the
interpreter switch is one context (`runtime.config.interpreter`).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coda_ir.errors import ArgumentError
from coda_ir.runtime import compiled, gemm_launch
from coda_ir.runtime import config as runtime_config
from coda_ir.runtime.config import LaunchOptions, RuntimeConfig


@pytest.mark.parametrize("env,autotune,progress", [
    ({}, "shared", True),
    ({"CODA_AUTOTUNE": "1", "CODA_AUTOTUNE_PROGRESS": "1"}, "shared", True),
    ({"CODA_AUTOTUNE": " FULL "}, "full", True),
    ({"CODA_AUTOTUNE": "0", "CODA_AUTOTUNE_PROGRESS": "0"}, "off", False),
    ({"CODA_AUTOTUNE": ""}, "off", True),
])
def test_the_environment_gives_the_defaults(monkeypatch, env, autotune, progress):
    for name in ("CODA_AUTOTUNE", "CODA_AUTOTUNE_PROGRESS", "CODA_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = RuntimeConfig.from_environment()
    assert (config.autotune, config.autotune_progress, config.cache_dir) == (autotune, progress, None)
    monkeypatch.setenv("CODA_CACHE_DIR", "/tmp/somewhere")
    assert RuntimeConfig.from_environment().cache_dir == Path("/tmp/somewhere")


def test_the_cache_directory_is_the_configurations(tmp_path):
    with runtime_config.using(cache_dir=tmp_path / "cache"):
        assert compiled.cache_dir() == tmp_path / "cache"
        assert gemm_launch.cache_path() == tmp_path / "cache" / "autotune.json"
        written = compiled.write_source("x = 1\n")
        assert written.parent == tmp_path / "cache" and written.read_text() == "x = 1\n"
    assert compiled.cache_dir() != tmp_path / "cache"  # restored after the block


def test_launch_options_live_in_the_configuration():
    before = gemm_launch.set_launch_options(path="tma")
    try:
        assert runtime_config.current().launch == LaunchOptions(path="tma") == gemm_launch.launch_options()
    finally:
        gemm_launch.set_launch_options(before)
    assert runtime_config.current().launch == before
    with runtime_config.using(launch_plans=False):
        assert gemm_launch.set_launch_plans(True) is False and runtime_config.current().launch_plans
    assert runtime_config.current().launch_plans


def test_autotune_progress_is_the_configurations(capsys):
    with runtime_config.using(autotune_progress=False):
        gemm_launch._progress("tuning")
    assert capsys.readouterr().err == ""
    with runtime_config.using(autotune_progress=True):
        gemm_launch._progress("tuning")
    assert capsys.readouterr().err == "tuning\n"


def test_one_interpreter_switch_restores_what_it_found(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with runtime_config.interpreter(False):
        assert not runtime_config.interpreting() and not compiled.interpreting() and not gemm_launch.interpreting()
        with runtime_config.interpreter(True):
            assert runtime_config.interpreting()
        assert not runtime_config.interpreting()
    assert os.environ["TRITON_INTERPRET"] == "1"
    monkeypatch.delenv("TRITON_INTERPRET")
    with runtime_config.interpreter(True):
        assert compiled.interpreting()
    assert "TRITON_INTERPRET" not in os.environ


def test_bad_settings_name_the_argument():
    with pytest.raises(ArgumentError, match=r"RuntimeConfig\(\): argument 'autotune': expected one of shared, "
                                            r"full, off, got 'fast'") as info:
        RuntimeConfig(autotune="fast")
    assert info.value.argument == "autotune"
    with pytest.raises(ArgumentError, match="argument 'launch': expected a LaunchOptions, got dict"):
        RuntimeConfig(launch={"path": "tma"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not both"):
        runtime_config.configure(RuntimeConfig(), autotune="off")
