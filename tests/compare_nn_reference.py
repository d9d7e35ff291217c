"""Temporary check (issue 13 item 3), removed with the old implementation: the xDSL nn interpreter
(coda_ir.interpreters.nn) against the op-by-op reference (coda_ir/reference.py, or the copy of it
named by OLD_REFERENCE), bit for bit, on
tests/programs/nn, the examples' templates at the sanitize sizes, the fuzzer's pinned programs and
N random fuzzer programs, each forward and its nn-autodiff functions (f_fwd, f_bwd), in
float64 / the program dtype / None / float32, plus autograd gradients through both (float64 and
program dtype)."""
import importlib.util, sys, random, time
from pathlib import Path
import torch

import os
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / "tests" / "programs"))
spec = importlib.util.spec_from_file_location("old_reference", os.environ.get("OLD_REFERENCE", ROOT / "coda_ir" / "reference.py"))
old = importlib.util.module_from_spec(spec); sys.modules["old_reference"] = old; spec.loader.exec_module(old)

import coda_ir
from coda_ir import testing
from coda_ir.interpreters import common, nn as nn_interpreter

new = SimpleNamespace(run_reference=nn_interpreter.run_nn, program_dtype=nn_interpreter.program_dtype,
                      load_func=common.load_func)
from tests.programs import random_nn

N = int(sys.argv[1]) if len(sys.argv) > 1 else 300  # usage: python tests/compare_nn_reference.py [N]
stats = {"runs": 0, "bitwise": 0, "nan_payload_or_zero_sign": 0, "both_raised": 0, "grad_runs": 0, "mismatch": []}

def same(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return "dtype/shape"
    if not a.dtype.is_floating_point:
        return None if torch.equal(a, b) else "ints"
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    if torch.equal(a.detach().contiguous().view(ints), b.detach().contiguous().view(ints)):
        return None
    if bool(((a == b) | (a.isnan() & b.isnan())).all()):
        return "nan"
    return "values"

def compare(label, fn, inputs):
    for cd in (torch.float64, new.program_dtype(fn), None, torch.float32):
        stats["runs"] += 1
        try:
            a = new.run_reference(fn, inputs, cd)
        except Exception as e:
            a = e
        try:
            b = old.run_reference(fn, inputs, cd)
        except Exception as e:
            b = e
        if isinstance(a, Exception) or isinstance(b, Exception):
            if isinstance(a, Exception) and isinstance(b, Exception):
                stats["both_raised"] += 1
            else:
                stats["mismatch"].append((label, str(cd), f"new={a!r}"[:300], f"old={b!r}"[:300]))
            continue
        v = [same(x, y) for x, y in zip(a, b)]
        if len(a) != len(b) or any(x not in (None, "nan") for x in v):
            stats["mismatch"].append((label, str(cd), v))
        elif all(x is None for x in v):
            stats["bitwise"] += 1
        else:
            stats["nan_payload_or_zero_sign"] += 1

def compare_grads(label, fn, inputs, seed):
    for cd in (torch.float64, new.program_dtype(fn)):
        grads = []
        for impl in (new, old):
            leaves = [x.detach().clone().to(torch.float64 if cd == torch.float64 else x.dtype).requires_grad_(True)
                      if x.is_floating_point() else x for x in inputs]
            try:
                outs = impl.run_reference(fn, leaves, cd)
            except Exception as e:
                grads.append(e); continue
            g = torch.Generator().manual_seed(seed)
            ups = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype) for o in outs]
            pairs = [(o, u) for o, u in zip(outs, ups) if o.requires_grad]
            wrt = [l for l in leaves if l.is_floating_point()]
            if not pairs:
                grads.append([]); continue
            got = torch.autograd.grad([o for o, _ in pairs], wrt, [u for _, u in pairs], allow_unused=True)
            grads.append([x if x is not None else torch.zeros_like(w) for x, w in zip(got, wrt)])
        stats["grad_runs"] += 1
        a, b = grads
        if isinstance(a, Exception) or isinstance(b, Exception):
            if not (isinstance(a, Exception) and isinstance(b, Exception)):
                stats["mismatch"].append((label + " grad", str(cd), repr(a)[:200], repr(b)[:200]))
            continue
        v = [same(x, y) for x, y in zip(a, b)]
        if len(a) != len(b) or any(x not in (None, "nan") for x in v):
            stats["mismatch"].append((label + " grad", str(cd), v))

def program(label, source, seed=0, autodiff=True, grads=True):
    module = coda_ir.parse(source)
    fn = new.load_func(module)
    inputs = testing.random_inputs(fn, seed=seed)
    compare(label, fn, inputs)
    if grads:
        compare_grads(label, fn, inputs, seed)
    if autodiff:
        try:
            diff = coda_ir.lower(coda_ir.parse(source), "nn-autodiff")
        except Exception as e:
            stats.setdefault("autodiff_refused", []).append((label, repr(e)[:200]))
            return
        for f in (op for op in diff.walk() if op.name == "func.func"):
            name = f.sym_name.data
            if name.endswith(("_fwd", "_bwd")):
                compare(f"{label}:{name}", f, testing.random_inputs(f, seed=seed + 1))

t0 = time.time()
for p in sorted((ROOT / "tests" / "programs" / "nn").glob("*.mlir")):
    program(p.name, p.read_text())
sys.path.insert(0, str(ROOT / "bench"))
import sanitize_examples
for size, four in sanitize_examples.sizes().items():
    if size == "odd":
        continue  # M=301, V=1037: slow on the shared CPU; tiny/small/unaligned cover the same templates
    for ex, specn in four.items():
        program(f"{ex}@{size}", sanitize_examples.source_of(ex, specn), grads=size == "tiny")
import tests.test_fuzz_numerics as tfn
for name, (rows, src) in tfn.PINNED.items():
    program(f"pinned:{name}", src, seed=len(name))
for name in dir(tfn):
    val = getattr(tfn, name)
    if name.isupper() and isinstance(val, str) and "func.func" in val:
        program(f"fuzz:{name}", val)
print("fixed programs done", time.time() - t0, {k: v for k, v in stats.items() if k != "mismatch"}, len(stats["mismatch"]), flush=True)
for seed in range(N):
    p = random_nn.build(random_nn.RandomChooser(seed))
    program(f"random:{seed}", p.source, seed=seed, grads=seed % 3 == 0)
    if seed % 50 == 49:
        print(seed + 1, time.time() - t0, {k: (v if not isinstance(v, list) else len(v)) for k, v in stats.items()}, flush=True)
print("DONE", time.time() - t0)
print({k: (v if not isinstance(v, list) else len(v)) for k, v in stats.items()})
for m in stats["mismatch"][:20]:
    print("MISMATCH", m)
for m in stats.get("autodiff_refused", [])[:10]:
    print("autodiff refused", m)
