"""The target machine of the planning passes: which GPU's constants their decisions are priced on.

`nn-plan` (RoPE tables, QK-norm placement, norm statistics, backward placements), `nn-autodiff`
(store or recompute) and `coda-plan-mainloop` (the Gluon mainloop's SM-count threshold) take it as
pass options, and `nn-to-coda` passes its own on to its stages:

    gpu=h100            an entry of `analysis/gpu_constants.json` (a100, h100, h200): bandwidths, tensor /
                        ALU / SFU throughput, launch overhead, SM count (`sms`), on-chip limits
    gpu-constants=PATH  a table in that format to read `gpu` from instead (e.g. one with a
                        calibrated entry: `python -m coda_ir.analysis.io_model --merge FILE`)

The default, h100 from the shipped table, is the machine every recorded decision was measured and
tuned on; nothing here reads the environment (issue 34: `CODA_GPU_CONSTANTS` is gone).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from coda_ir.errors import ArgumentError

if TYPE_CHECKING:
    from coda_ir.analysis.io_model import GPU

DEFAULT_GPU = "h100"


def target_gpu(pass_name: str, gpu: str, gpu_constants: str = "") -> GPU:
    """The constants of the target machine a pass's `gpu` / `gpu-constants` options name;
    `ArgumentError` naming the pass and the option for a name or table that is not there."""
    from coda_ir.analysis.io_model import load_gpu  # (the IO model loads only when a pass prices)

    try:
        return load_gpu(gpu, gpu_constants or None)
    except json.JSONDecodeError as error:
        raise ArgumentError(f"{pass_name}: option gpu-constants: '{gpu_constants}' is not JSON: {error}",
                            "gpu-constants") from None
    except ValueError as error:  # an unknown name, or a table entry without the required fields
        raise ArgumentError(f"{pass_name}: option gpu: {error}", "gpu") from None
    except OSError as error:
        raise ArgumentError(f"{pass_name}: option gpu-constants: cannot read '{gpu_constants}': "
                            f"{error.strerror or error}", "gpu-constants") from None
