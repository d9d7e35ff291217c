"""Names shared by the Triton backend's conversions and its printers (`tl` / `host` IR).

The conversions (`coda_ir.lowering.coda_to_tl`, `coda_to_host`) choose every Python name of the
emitted module; the printers print those names and must avoid the same reserved ones, so the
naming rules live here, beside the `tl` and `host` dialects, and the printers import only dialects.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Sequence

from xdsl.dialects.builtin import SymbolRefAttr
from xdsl.ir import Operation

from coda_ir.diagnostics import CompilerError


class KernelNames:
    """Fresh Python identifiers: `base`, else `base0`, `base1`, ... (never a keyword or a
    reserved name)."""

    def __init__(self, reserved: Sequence[str] = ()):
        self.used: set[str] = set(reserved)

    def __call__(self, base: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", base) or "v"
        if base[0].isdigit():
            base = "v" + base
        if base not in self.used and not keyword.iskeyword(base):
            self.used.add(base)
            return base
        i = 0
        while f"{base}{i}" in self.used:
            i += 1
        self.used.add(f"{base}{i}")
        return f"{base}{i}"


# Names a kernel's parameters must not take: the locals and constexprs of the mainloop and the
# kernel bodies, and the modules a kernel refers to.
KERNEL_SCOPE = (
    "acc a b a_ptr b_ptr a_ptrs b_ptrs b_cols offs_m offs_n offs_k mask_m mask_n pid pid_m pid_n M N K BM BN BK "
    "GROUP_M INTERLEAVE UPCAST num_pid_m num_pid_n group_size first_m rows_in_group k0 k_mask stride_am stride_ak "
    "stride_bk stride_bn rows64 cols_n mask_mn tl triton torch libdevice it rows mask L ITERS BLOCK t "
    "lanes t0 BT PB WORK TICKET NPROG ticket blocks "
    "USE_TMA A_K_CONTIG B_K_CONTIG NUM_SMS FLATTEN WARP_SPECIALIZE start_pid num_tiles k_tiles tile_id off_m off_n "
    "off_k ki b_row acc_lo acc_hi b_lo b_hi min max range float int"
).split()


# Names the partitions of a Gluon gemm kernel bind besides those (lowering/gluon.py's templates).
GLUON_SCOPE = (
    "a_bufs b_bufs c_smem ready empty acc_ready acc_empty a_desc b_desc r_desc nprog num_tiles tile j sub "
    "EPI_LAYOUT HANDOFF_LAYOUT first_m first_n next_m next_n args gl gluon mbarrier tma i"
).split()


def gluon_entry_name(kernel_name: str) -> str:
    """The entry point of a gemm's warp-specialized Gluon kernel, built beside the tl kernel
    `kernel_name` when the gemm carries a `#coda.mainloop`."""
    return f"{kernel_name}_ws"


KERNEL_NAME_ATTR = "tl.kernel"
"""The discardable attribute naming a coda kernel's Triton kernel (a symbol reference), recorded
by convert-coda-to-tl; the host lowering launches that symbol and the printer prints it."""


def kernel_symbol(op: Operation) -> str:
    """The Triton kernel name `convert-coda-to-tl` recorded on a coda kernel or launch group."""
    ref = op.attributes.get(KERNEL_NAME_ATTR)
    if not isinstance(ref, SymbolRefAttr):
        raise CompilerError(op, "internal: no Triton kernel name recorded (run convert-coda-to-tl first)")
    return ref.root_reference.data
