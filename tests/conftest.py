"""Run the suite through Triton's CPU interpreter unless a GPU run is asked for.

TRITON_INTERPRET must be set before Triton is imported, so it is set here, at collection
start; `CODA_TEST_DEVICE=cuda` keeps compiled Triton for the tests that support the GPU.
"""

import os

if os.environ.get("CODA_TEST_DEVICE", "cpu") != "cuda":
    os.environ.setdefault("TRITON_INTERPRET", "1")
# every test compiles its programs (the compile cache would read a previous run's back):
# tests/runtime/test_compile_cache.py turns it on where it is the subject
os.environ.setdefault("CODA_COMPILE_CACHE", "0")


def pytest_addoption(parser):
    parser.addoption(
        "--long",
        action="store_true",
        default=False,
        help="run every case of the parameter matrices that CI runs a representative subset of "
             "(tests/torch/test_convergence.py: both dtypes of every family trained; "
             "tests/transforms/test_rope_partial_half.py: every head x pipeline x dtype; "
             "tests/torch/test_hf.py: both dtypes of phi4_mini; "
             "the tests marked long_only: the host-time and block benchmarks' smoke runs)",
    )
    parser.addoption(
        "--fuzz-examples",
        type=int,
        default=None,
        help="examples per property in tests/test_fuzz_errors.py (default 300; same as CODA_FUZZ_EXAMPLES)",
    )
    parser.addoption(
        "--fuzz-numerics-examples",
        type=int,
        default=None,
        help="random programs in tests/test_fuzz_numerics.py (default 8; same as CODA_FUZZ_NUMERICS_EXAMPLES)",
    )
    parser.addoption(
        "--distributed-four-ranks",
        action="store_true",
        help="tests/torch/test_distributed.py: also train on 4 gloo ranks with FSDP2 x tensor parallelism "
             "(a 2 x 2 mesh; about a minute more on 2 cores)",
    )
    parser.addoption(
        "--convergence-steps",
        type=int,
        default=8,
        help="tests/torch/test_convergence.py: AdamW steps of each coda-ir / Hugging Face run (CI: 8; "
             "Liger-Kernel's convergence tests run 32)",
    )
    parser.addoption(
        "--convergence-families",
        default="llama,qwen3",
        help="tests/torch/test_convergence.py: the families to train, comma-separated, or 'all' for every one of "
             "tests/torch/hf_families.py (CI: llama,qwen3; ~15 s a family and dtype)",
    )
    parser.addoption(
        "--gluon-compile-all",
        action="store_true",
        default=False,
        help="tests/lowering/test_gluon_mainloop.py: compile every Gluon kernel of every example for sm_90 "
        "(default: one of each kind, ~1 minute)",
    )


def pytest_configure(config):
    config.addinivalue_line("markers", "long_only: collected only with --long (CI runs a representative "
                                       "subset; these add minutes and cover what another test covers in part)")
    examples = config.getoption("--fuzz-examples", default=None)
    if examples is not None:  # read when test_fuzz_errors.py is imported, i.e. after this hook
        os.environ["CODA_FUZZ_EXAMPLES"] = str(examples)
    examples = config.getoption("--fuzz-numerics-examples", default=None)
    if examples is not None:  # likewise for test_fuzz_numerics.py
        os.environ["CODA_FUZZ_NUMERICS_EXAMPLES"] = str(examples)



LONGEST_MODULES = (
    "tests/torch/test_hf.py",
    "tests/torch/test_distributed.py",
    "tests/test_bench_smoke.py",
    "tests/transforms/test_numerics.py",
    "tests/torch/test_convergence.py",
    "tests/transforms/test_autodiff.py",
    "tests/torch/test_hf_batches.py",
)
"""The modules that take longest, longest first (`pytest --durations=0` summed per module,
2026-11-29: 203, 107, 65, 62, 59, 55, 47 s of 1067), run first: `pytest -n 2 --dist loadscope`
hands whole modules to the workers in collection order, so long modules collected last
(tests/torch/ sorts late) kept one worker busy after the other had finished (local full run
585 -> 560 s)."""


def pytest_collection_modifyitems(config, items):
    """Without --long, the `long_only` tests are deselected (not skipped: CI does not run them).
    The longest modules go first (`LONGEST_MODULES`), the rest keep their order."""
    rank = {path: i for i, path in enumerate(LONGEST_MODULES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest in order
    if config.getoption("--long"):
        return
    kept = [item for item in items if item.get_closest_marker("long_only") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("long_only")])
        items[:] = kept
