"""Reference interpreters, one per dialect, built on xDSL's `Interpreter` (`@impl` per op).

* `coda_ir.interpreters.nn`: the nn dialect on torch tensors (`run_nn`; its public face is
  `coda_ir.reference.run_reference` / `reference_pair`), the oracle of the numerics bar.
* `coda_ir.interpreters.coda`: the coda dialect on torch tensors (`run_coda`), the oracle of
  every test that checks a coda program or its lowering.
* `coda_ir.interpreters.arith`: `arith` / `math` on torch tensors (the scalar bodies of coda
  kernels).
* `coda_ir.interpreters.common`: what they share (element dtypes, f32 attribute values,
  `load_func`, `InterpreterInputError`); both run functions on xDSL's `FuncFunctions`.

The numerics bar both are compared with is `coda_ir.testing`.
"""

from coda_ir.interpreters.arith import TorchArithFunctions, TorchMathFunctions
from coda_ir.interpreters.coda import CodaFunctions, coda_interpreter, combine, interleave_perm, run_coda
from coda_ir.interpreters.common import InterpreterInputError
from coda_ir.interpreters.nn import NnFunctions, nn_interpreter, run_nn

__all__ = [
    "CodaFunctions",
    "InterpreterInputError",
    "NnFunctions",
    "TorchArithFunctions",
    "TorchMathFunctions",
    "coda_interpreter",
    "combine",
    "interleave_perm",
    "nn_interpreter",
    "run_coda",
    "run_nn",
]
