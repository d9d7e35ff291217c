"""Registers and spills of the generated GEMM kernels, compiled for sm_90a without a GPU.

    TRITON_DEFAULT_FP_FUSION=1 .venv/bin/python tests/lowering/sm90_resources.py [FILE.mlir] [--bn 256,128] [--aligned]
        [--epilogue-subtile N]

Compiles each `coda.gemm` kernel of FILE (default examples/llama_block.mlir, through the nn-to-coda
pipeline) on the persistent TMA path with Triton's own compiler for `cuda:90` (no device needed),
then reads the cubin with the cuobjdump that ships with Triton: registers, spill stack bytes and
LDL/STL instructions per config (128xBN x64, 8 warps, 3 stages at BN 256, 4 below). The numbers
are those of the local Triton, which may differ from a GPU machine's. `--epilogue-subtile N`
compares the sub-tiled epilogues (`TritonOptions.epilogue_subtile`). Not a test (pytest does not collect it).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _ptr_type(ty) -> str:
    from coda_ir.dialects import coda
    from coda_ir.dialects.element_types import TRITON_DTYPE_NAMES, element_name

    if isinstance(ty, coda.PartialsType):
        return "*fp32"
    name = TRITON_DTYPE_NAMES[element_name(ty.get_element_type())]
    return "*" + {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "int1": "i1", "int8": "i8", "int16": "i16",
                  "int32": "i32", "int64": "i64"}.get(name, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", nargs="?", default=str(ROOT / "examples" / "llama_block.mlir"))
    parser.add_argument("--bn", default="256,128")
    parser.add_argument("--epilogue-subtile", type=int, default=0, help="TritonOptions.epilogue_subtile (0: off)")
    parser.add_argument(
        "--aligned", action="store_true",
        help="compile as the JIT does on a GPU for aligned tensors: epilogue pointers 16-byte aligned and "
        "integer arguments multiples of 16 (tt.divisibility = 16; without it no access is vectorized)",
    )
    args = parser.parse_args()
    os.environ.pop("TRITON_INTERPRET", None)
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import coda_ir
    from coda_ir.dialects import coda

    from coda_ir.lowering.pipeline import TritonOptions

    cm = coda_ir.compile(args.file, options=TritonOptions(epilogue_subtile=args.epilogue_subtile))
    path = Path(tempfile.mkdtemp()) / "coda_sm90_resources.py"
    path.write_text(cm.source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    for fn_op in [op for op in cm.ir.walk() if op.name == "func.func"]:
        for i, k in enumerate(coda.kernels(fn_op)):
            if not isinstance(k, coda.GemmOp):
                continue
            name = f"_{fn_op.sym_name.data}_k{i}_gemm"
            kernel = getattr(mod, name)
            h = k.interleave.value.data if k.interleave is not None else 0
            ptrs = [_ptr_type(v.type) for v in [*k.inputs, *k.outputs]]
            elt = "bf16" if "bf16" in str(k.a.type) else "fp16" if "f16" in str(k.a.type) else "fp32"
            for bn in [int(x) for x in args.bn.split(",")]:
                bm, bk, warps, stages = 128, 64, 8, 3 if bn >= 256 else 4
                values = dict(BM=bm, BN=bn, BK=bk, GROUP_M=8, INTERLEAVE=h, UPCAST=False, USE_TMA=1, A_K_CONTIG=True,
                              B_K_CONTIG=True, NUM_SMS=132, FLATTEN=False, WARP_SPECIALIZE=False, L2_PREFETCH=False,
                              B_PAIRED=bool(h))
                sig, const, extra = {}, {}, iter(ptrs)
                for p in kernel.params:
                    if p.is_constexpr:
                        sig[p.name], const[p.name] = "constexpr", values[p.name]
                    elif p.name == "a_ptr":
                        sig[p.name] = f"tensordesc<{elt}[{bm}, {bk}]>"
                    elif p.name == "b_ptr":
                        sig[p.name] = f"tensordesc<{elt}[1, {bn // 2}, 2, {bk}]>" if h else f"tensordesc<{elt}[{bn}, {bk}]>"
                    elif p.name.endswith("_ptr"):
                        sig[p.name] = next(extra)
                    else:
                        sig[p.name] = "i32"
                attrs = {}
                if args.aligned:
                    for idx, p in enumerate(kernel.params):
                        if sig[p.name] == "i32" or sig[p.name].startswith("*"):
                            attrs[(idx,)] = [["tt.divisibility", 16]]
                tag = f"{name} {bm}x{bn}x{bk} w{warps} s{stages}" + (" aligned" if args.aligned else "")
                try:
                    compiled = triton.compile(ASTSource(kernel, sig, constexprs=const, attrs=attrs),
                                              target=GPUTarget("cuda", 90, 32),
                                              options=dict(num_warps=warps, num_stages=stages))
                except Exception as error:  # noqa: BLE001 - report and go on
                    print(f"{tag}: compile failed: {type(error).__name__}: {str(error)[:200]}")
                    continue
                cubin = path.with_suffix(f".{i}.{bn}.cubin")
                cubin.write_bytes(compiled.asm["cubin"])
                usage = subprocess.run([cuobjdump, "--dump-resource-usage", cubin], capture_output=True, text=True).stdout
                sass = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True).stdout

                def field(key: str) -> str:
                    m = re.search(key + r":(\d+)", usage)
                    return m.group(1) if m else "?"

                local = len(re.findall(r"\b(?:LDL|STL)\b", sass))
                print(f"{tag}: regs {field('REG')}, spill stack {field('STACK')} B, LDL/STL {local}, "
                      f"shared {compiled.metadata.shared} B", flush=True)


if __name__ == "__main__":
    main()
