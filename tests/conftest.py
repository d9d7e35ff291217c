"""Run the suite through Triton's CPU interpreter unless a GPU run is asked for.

TRITON_INTERPRET must be set before Triton is imported, so it is set here, at collection
start; `CODA_TEST_DEVICE=cuda` keeps compiled Triton for the tests that support the GPU.
"""

import os

if os.environ.get("CODA_TEST_DEVICE", "cpu") != "cuda":
    os.environ.setdefault("TRITON_INTERPRET", "1")
