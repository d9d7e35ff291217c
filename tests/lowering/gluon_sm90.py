"""Compile the generated Gluon kernels for sm_90 without a GPU (Triton's own compiler for
`cuda:90`), for tests/lowering/test_gluon_mainloop.py, which runs this in a child process without
TRITON_INTERPRET. Prints one JSON line last: {"compiled", "failed", "kinds", "shared",
"resources"}; `resources` (with `--resources`): per kernel its shared memory, and per function of
the cubin (the entry and its partitions) the registers, spill stack bytes and local-memory
instructions (LDL/STL) that the cuobjdump shipped with Triton reads from it.

    python tests/lowering/gluon_sm90.py [--all] [--resources]

Default: the LLaMA block at a small shape (RoPE tables forced, so its QKV kernel has a pair map
over loaded tiles), one kernel of each kind; `--all`: every Gluon kernel of every example.
To compare two trees or Tritons, run it in each (a Triton first on PYTHONPATH in a child
process) with `--all --resources` and compare the JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "programs"))


def _ptr(ty) -> str:
    from coda_ir.dialects import coda
    from coda_ir.dialects.element_types import element_name

    if isinstance(ty, coda.PartialsType):
        return "*fp32"
    return "*" + {"f32": "fp32", "bf16": "bf16", "f16": "fp16", "i32": "i32"}[element_name(ty.get_element_type())]


def kind(k) -> str:
    from coda_ir.dialects import coda

    ml = coda.recorded_mainloop(k)
    ops = list(k.epilogue.walk())
    if ml.accumulate_first.data >= 0:
        return f"{ml.handoff.data} accumulate_first"
    if any(isinstance(o, coda.PairMapOp) for o in ops):
        return f"{ml.handoff.data} pair_map"
    if any(isinstance(o, coda.ReduceOp) and o.dim.value.data == 0 for o in ops):
        return f"{ml.handoff.data} column partials"
    return ml.handoff.data


def compile_sm90(fn_name: str, index: int, gemm, module):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from coda_ir.dialects import coda

    ml = gemm.attributes[coda.MAINLOOP].as_dict()
    kernel = getattr(module, f"_{fn_name}_k{index}_gemm_ws")
    names = kernel.arg_names

    def desc(shape, dtype):
        layout = gl.NVMMASharedLayout.get_default_for(shape, dtype)
        return f"tensordesc<{'bf16' if dtype == gl.bfloat16 else 'fp32'}[{','.join(map(str, shape))}],{layout!r}>"

    bm, bn, bk = ml["bm"], ml["bn"], ml["bk"]
    sig = {"a_desc": desc([bm, bk], gl.bfloat16),
           "b_desc": desc([bn, bk] if gemm.transpose_b is not None else [bk, bn], gl.bfloat16)}
    if ml["accumulate_first"] >= 0:
        sig["r_desc"] = desc([bm, bn], gl.bfloat16)
    ptrs = [n for n in names if n not in sig and n not in ("M", "N", "K", "HANDOFF_LAYOUT")]
    values = [*gemm.inputs, *gemm.outputs]
    assert len(ptrs) == len(values), (ptrs, len(values))
    sig.update({n: _ptr(v.type) for n, v in zip(ptrs, values)})
    sig.update(M="i32", N="i32", K="i32", HANDOFF_LAYOUT="constexpr")
    handoff = gl.NVMMASharedLayout.get_default_for([bm, bn], gl.float32 if ml["handoff"] == "f32" else gl.bfloat16)
    src = GluonASTSource(kernel, signature=sig, constexprs={(names.index("HANDOFF_LAYOUT"),): handoff})
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    assert "cubin" in compiled.asm
    return compiled


def resources(compiled) -> dict:
    """Shared memory, and per function of the cubin its registers, spill stack and LDL/STL count."""
    import re
    import subprocess

    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        usage = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
        sass = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True).stdout
    functions = {}
    for m in re.finditer(r"Function (\S+):\n\s*(.*)", usage):
        fields = dict(re.findall(r"(\w+):(\d+)", m.group(2)))
        functions[m.group(1)] = {"regs": int(fields.get("REG", -1)), "stack": int(fields.get("STACK", -1))}
    local = {}
    for name, body in re.findall(r"Function : (\S+)\n(.*?)(?=\n\s*Function : |\Z)", sass, re.S):
        local[name] = len(re.findall(r"\b(?:LDL|STL)\b", body))
    for name, row in functions.items():
        row["ldl_stl"] = local.get(name, -1)
    return {"shared": compiled.metadata.shared, "functions": functions}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--resources", action="store_true", help="registers, spills and shared memory per kernel")
    args = ap.parse_args()
    assert "TRITON_INTERPRET" not in os.environ, "compile for sm_90 without the interpreter"
    # Triton's language first: coda_ir's runtime would otherwise ask for the interpreter on a
    # machine without a GPU, and Triton's own jit functions (tl.sum, ...) would be interpreted ones
    import triton.language  # noqa: F401

    import coda_ir
    from coda_ir import remarks
    from coda_ir.dialects import coda
    from generate import Llama, nn_llama_block

    small = Llama("small", m=96, d=64, f=96, hd=16, hq=2, hkv=1, eps=1e-5, theta=500000.0)
    sources = [(n, (ROOT / "examples" / f"{n}.mlir").read_text()) for n in
               ("llama_block", "qwen3_block", "gpt2_block", "lm_head")] if args.all else [("small", nn_llama_block(small))]
    report = {"compiled": 0, "failed": {}, "kinds": [], "shared": {}, "resources": {}}
    tmp = Path(tempfile.mkdtemp())
    for tag, text in sources:
        # norm-grad=epilogue: the default plan runs the RMSNorm backward as a separate pass at
        # these shapes, leaving the dgrads plain; the epilogue form is the Gluon kernel with carried
        # column partials, which must keep compiling.
        with remarks.printed_remarks(False):
            cm = coda_ir.compile(text, pipeline="nn-autodiff,nn-to-coda{rope-table=always norm-grad=epilogue mainloop=gluon}")
        path = tmp / f"coda_gluon_sm90_{report['compiled']}.py"
        path.write_text(cm.source)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        for fn in [op for op in cm.ir.walk() if op.name == "func.func"]:
            for i, k in enumerate(coda.kernels(fn)):
                if not (isinstance(k, coda.GemmOp) and coda.recorded_mainloop(k) is not None):
                    continue
                what = kind(k)
                if not args.all and what in report["kinds"]:
                    continue
                name = f"{tag}:{fn.sym_name.data}:k{i}"
                try:
                    compiled = compile_sm90(fn.sym_name.data, i, k, module)
                    report["shared"][name] = compiled.metadata.shared
                    if args.resources:
                        report["resources"][name] = resources(compiled)
                    report["compiled"] += 1
                    if what not in report["kinds"]:
                        report["kinds"].append(what)
                except Exception as exc:  # noqa: BLE001
                    report["failed"][name] = f"{type(exc).__name__}: {str(exc)[-1500:]}"
                print(name, what, report["shared"].get(name), report["failed"].get(name, "ok"), file=sys.stderr, flush=True)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
