"""Reference interpreters, one per dialect, built on xDSL's `Interpreter` (`@impl` per op).

* `coda_ir.interpreters.coda`: the coda dialect on torch tensors (`run_coda`), the oracle of
  every test that checks a coda program or its lowering.
* `coda_ir.interpreters.arith`: `arith` / `math` on torch tensors (the scalar bodies of coda
  kernels).

The nn dialect's reference is `coda_ir.reference` (`run_reference`, `reference_pair`); the
numerics bar both are compared with is `coda_ir.testing`.
"""

from coda_ir.interpreters.arith import TorchArithFunctions, TorchMathFunctions
from coda_ir.interpreters.coda import CodaFunctions, coda_interpreter, combine, interleave_perm, run_coda

__all__ = [
    "CodaFunctions",
    "TorchArithFunctions",
    "TorchMathFunctions",
    "coda_interpreter",
    "combine",
    "interleave_perm",
    "run_coda",
]
