"""The public Python API: coda_ir.compile, CompiledModule, errors, caching, determinism."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import coda_ir
from coda_ir.runtime.compiled import ArgumentError

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = """
func.func @out_proj(%y0: tensor<37x40xbf16>, %wo: tensor<48x40xbf16>, %x0: tensor<37x48xbf16>, %wn0: tensor<48xbf16>)
    -> (tensor<37x48xbf16>, tensor<37x48xbf16>, tensor<37xf32>) {
  %x1, %h1, %ss = coda.gemm %y0, %wo transpose_b ins(%x0, %wn0 : tensor<37x48xbf16>, tensor<48xbf16>)
      : tensor<37x40xbf16>, tensor<48x40xbf16>
      -> (tensor<37x48xbf16>, tensor<37x48xbf16>, !coda.partials<rows, 37, sum>) {
  ^bb0(%acc: !coda.tile<37x48xf32>, %res: tensor<37x48xbf16>, %g: tensor<48xbf16>):
    %x = coda.accumulate %acc, %res : !coda.tile<37x48xf32>, tensor<37x48xbf16>
    %h = coda.scale %x, %g cols : !coda.tile<37x48xf32>, tensor<48xbf16>
    %s = coda.reduce sumsq %x dim 1 : !coda.tile<37x48xf32> -> !coda.partials<rows, 37, sum>
    coda.yield %x, %h, %s : !coda.tile<37x48xf32>, !coda.tile<37x48xf32>, !coda.partials<rows, 37, sum>
  }
  %r = coda.fold %ss : !coda.partials<rows, 37, sum> -> tensor<37xf32> {
  ^bb0(%v: f32):
    %c = arith.constant 0.020833333 : f32
    %e = arith.constant 1.0e-6 : f32
    %m = arith.mulf %v, %c : f32
    %a = arith.addf %m, %e : f32
    %q = math.rsqrt %a : f32
    coda.yield %q : f32
  }
  func.return %x1, %h1, %r : tensor<37x48xbf16>, tensor<37x48xbf16>, tensor<37xf32>
}

func.func @just_fold(%p: tensor<37xf32>) -> tensor<f32> {
  %s = coda.fold ins(%p : tensor<37xf32>) -> tensor<f32> {
  ^bb0(%v: f32):
    coda.yield %v : f32
  }
  func.return %s : tensor<f32>
}
"""


def inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(37, 40, generator=g).bfloat16(),
        torch.randn(48, 40, generator=g).bfloat16(),
        torch.randn(37, 48, generator=g).bfloat16(),
        torch.randn(48, generator=g).bfloat16(),
    )


@pytest.fixture(scope="module")
def cm():
    return coda_ir.compile(PROGRAM, pipeline=None)


def test_compile_and_run(cm):
    y0, wo, x0, wn0 = inputs()
    x1, h1, r = cm.out_proj(y0, wo, x0, wn0)
    ref = x0.double() + y0.double() @ wo.double().T
    assert x1.dtype == torch.bfloat16 and x1.shape == (37, 48)
    assert (x1.double() - ref).abs().max() <= 2 ** -7 * ref.abs().max()
    assert (h1.double() - ref * wn0.double()).abs().max() <= 2 ** -7 * (ref * wn0.double()).abs().max()
    # r is computed from the fp32 (not the rounded) x
    rstd = torch.rsqrt((ref ** 2).mean(1) + 1e-6)
    assert torch.allclose(r.double(), rstd, rtol=1e-5)
    total = cm.just_fold(r)
    assert total.shape == () and torch.allclose(total.double(), r.double().sum(), rtol=1e-6)


def test_bitwise_deterministic(cm):
    a = cm.out_proj(*inputs(1))
    b = cm.out_proj(*inputs(1))
    for x, y in zip(a, b):
        assert torch.equal(x.view(torch.int16) if x.dtype == torch.bfloat16 else x, y.view(torch.int16) if y.dtype == torch.bfloat16 else y)


def _launches_in_host(source: str, name: str) -> int:
    tree = ast.parse(source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    count = 0
    for node in ast.walk(fn):
        if isinstance(node, ast.Call):
            f = node.func
            callee = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if callee in ("launch_gemm", "launch_elementwise", "launch_fold"):
                count += 1
    return count


def test_kernel_count_matches_host_function(cm):
    assert cm.kernel_count("out_proj") == 2
    assert cm.kernel_count("just_fold") == 1
    for name in cm.functions:
        assert _launches_in_host(cm.source, name) == cm.kernel_count(name)
    with pytest.raises(AttributeError):
        cm.kernel_count("nope")


def test_source_is_one_module_with_one_host_function_per_func(cm):
    tree = ast.parse(cm.source)
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert "out_proj" in names and "just_fold" in names
    jitted = [
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in n.decorator_list)
    ]
    assert "_out_proj_k0_gemm" in jitted and "_out_proj_k1_fold" in jitted and "_just_fold_k0_fold" in jitted


def test_argument_checks(cm):
    y0, wo, x0, wn0 = inputs()
    with pytest.raises(ArgumentError, match="takes 4 tensors"):
        cm.out_proj(y0, wo, x0)
    with pytest.raises(ArgumentError, match="'wo' must be 48x40 bfloat16, got 40x48 bfloat16"):
        cm.out_proj(y0, wo.T, x0, wn0)
    with pytest.raises(ArgumentError, match="'wn0' must be 48 bfloat16, got 48 float32"):
        cm.out_proj(y0, wo, x0, wn0.float())
    with pytest.raises(AttributeError, match="no function 'nope'"):
        cm.nope


def test_non_contiguous_inputs(cm):
    y0, wo, x0, wn0 = inputs(2)
    wo_t = wo.T.contiguous().T  # same values, transposed strides
    x0_nc = torch.empty(48, 37, dtype=torch.bfloat16).T
    x0_nc.copy_(x0)
    a = cm.out_proj(y0, wo, x0, wn0)
    b = cm.out_proj(y0, wo_t, x0_nc, wn0)
    for x, y in zip(a, b):
        assert torch.equal(x.float(), y.float())


def test_sources_paths_and_module_ops(tmp_path):
    path = tmp_path / "prog.mlir"
    path.write_text(PROGRAM)
    from_path = coda_ir.compile(str(path), pipeline=None)
    from_pathlike = coda_ir.compile(path)
    module = coda_ir.parse(PROGRAM)
    from_module = coda_ir.compile(module, pipeline="")
    assert from_path.source == from_pathlike.source == from_module.source
    assert from_path.path == from_module.path and from_path.path.exists()
    # the caller's module is not modified
    assert str(module) == str(coda_ir.parse(PROGRAM))


def test_cache_dir_is_the_runtime_configs(tmp_path):
    """`RuntimeConfig.cache_dir` (issue 34; `CODA_CACHE_DIR` is its default, read once when the
    runtime first asks: tests/runtime/test_runtime_config.py)."""
    from coda_ir.runtime import config as runtime_config

    with runtime_config.using(cache_dir=tmp_path / "cache"):
        cm = coda_ir.compile(PROGRAM, pipeline=None)
        assert cm.path.parent == tmp_path / "cache"
        assert cm.path.read_text() == cm.source


def test_bad_input_names_op_and_location(tmp_path):
    bad = PROGRAM.replace("tensor<48xbf16>) {\n  ^bb0", "tensor<48xbf16>) {\n  ^bb0", 1).replace(
        "%h = coda.scale %x, %g cols", "%h = coda.scale %x, %g rows"
    )
    with pytest.raises(coda_ir.CompileError) as info:
        coda_ir.compile(bad, pipeline=None)
    text = str(info.value)
    assert "<input>:9:5: error: 'coda.scale' op" in text
    path = tmp_path / "bad.mlir"
    path.write_text("func.func @f() {\n  %x = coda.nope\n}\n")
    with pytest.raises(coda_ir.CompileError, match=r"bad.mlir:\d+:\d+: error: Operation coda.nope is not registered"):
        coda_ir.compile(str(path))


def test_nn_ops_without_pipeline_are_refused():
    text = """
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = nn.relu %x : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
"""
    with pytest.raises(coda_ir.CompileError, match="'nn.relu' op"):
        coda_ir.compile(text, pipeline=None)


def test_coda_opt_prints_a_module_that_imports_and_runs(tmp_path):
    prog = tmp_path / "prog.mlir"
    prog.write_text(PROGRAM)
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "coda-opt"), str(prog), "-t", "triton"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == coda_ir.compile(PROGRAM, pipeline=None).source
    gen = tmp_path / "gen_out_proj.py"
    gen.write_text(out)
    spec = importlib.util.spec_from_file_location("gen_out_proj", gen)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    x1, h1, r = mod.out_proj(*inputs())
    assert x1.shape == (37, 48) and r.shape == (37,)


def test_cpu_call_after_triton_was_imported_in_compiled_mode():
    """Triton decorates its standard library in the mode of its first import; a CPU call in a
    process that imported Triton without TRITON_INTERPRET still runs (the runtime swaps modes)."""
    code = f"""
import os
os.environ.pop("TRITON_INTERPRET", None)
import triton.language  # compiled-mode standard library
import torch, coda_ir
program = coda_ir.compile({PROGRAM!r}, pipeline=None)
g = torch.Generator().manual_seed(0)
args = [torch.randn(37, 40, generator=g).bfloat16(), torch.randn(48, 40, generator=g).bfloat16(),
        torch.randn(37, 48, generator=g).bfloat16(), torch.randn(48, generator=g).bfloat16()]
x1, h1, r = program.out_proj(*args)
ref = args[2].double() + args[0].double() @ args[1].double().T
assert (x1.double() - ref).abs().max() <= 2 ** -7 * ref.abs().max()
print("ok", os.environ.get("TRITON_INTERPRET"))
"""
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().startswith("ok")


def test_remarks_are_off_by_default_and_on_when_asked(capfd):
    """Issue 34: every compile printed its remarks (6-26 lines for a small program). Off by
    default (recorded in coda_ir.remarks.EMITTED), printed with remarks=True and with
    `coda-opt --remarks`; coda-opt prints none without it."""
    from coda_ir import remarks

    norm = """func.func @f(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %y = nn.rms_norm %x, %w {eps = 1.0e-06 : f32} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
"""
    wanted = "<input>:2:3: remark: 'nn.rms_norm' op row scale not deferred"
    start = len(remarks.EMITTED)
    coda_ir.compile(norm)
    assert capfd.readouterr().err == ""
    assert any(r.startswith(wanted) for r in remarks.EMITTED[start:])
    coda_ir.compile(norm, remarks=True)
    assert wanted in capfd.readouterr().err
    coda_ir.compile(norm, name="norm.mlir", remarks=True)  # text located at the file it came from
    assert "norm.mlir:2:3: remark: 'nn.rms_norm'" in capfd.readouterr().err
    with pytest.raises(coda_ir.CompileError, match="row scale not deferred"):  # remarks-as-errors still raises
        coda_ir.compile(norm, pipeline="nn-to-coda{remarks-as-errors=true}")
    tool = [sys.executable, str(ROOT / "tools" / "coda-opt"), "-p", "nn-to-coda"]
    quiet = subprocess.run(tool, input=norm, capture_output=True, text=True, check=True)
    loud = subprocess.run([*tool, "--remarks"], input=norm, capture_output=True, text=True, check=True)
    assert quiet.stderr == "" and "stdin:2:3: remark: 'nn.rms_norm' op row scale not deferred" in loud.stderr
    assert quiet.stdout == loud.stdout
