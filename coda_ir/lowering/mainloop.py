"""The fixed GEMM mainloop that every coda.gemm kernel shares; epilogues are spliced in.

Contract with the epilogue code generator (coda_ir/lowering/triton.py):

* `emit_gemm_kernel(name, extra_params, epilogue, ...)` returns the source of one
  `@triton.jit` function. Its parameters are `a_ptr, b_ptr`, then `extra_params` (the
  epilogue's inputs and outputs, in order), then the problem sizes, strides and constexprs
  that `gemm_launch.launch_gemm` passes.
* When the epilogue runs, these names are in scope: `acc` (fp32 [BM, BN] accumulator),
  `offs_m` ([BM] global row indices), `offs_n` ([BN] global accumulator column indices, in
  the GEMM's own -- possibly interleaved -- column space), `mask_m = offs_m < M`,
  `mask_n = offs_n < N`, `pid_m`, `pid_n` (tile coordinates), `M`, `N`, `K`, and the
  constexprs `BM`, `BN`, `BK`, `INTERLEAVE` (0, or the interleave half-width h).
  The epilogue does its own masked stores.
* With `INTERLEAVE = h`, accumulator column `c` holds the product with weight row
  `perm(c)`, where within each group of `2h` columns `c = 2i + j` maps to `i + j * h`.
  `natural_column(offs_n, h)` in generated code is `interleave_rows` below.

Two paths come from one template, picked at run time by `gemm_launch`: the portable
pointer-based tiled `tl.dot` loop (what the CPU interpreter runs) and, on Hopper with a
Triton that has tensor descriptors, a persistent TMA mainloop (`USE_TMA`).
"""

from __future__ import annotations

from collections.abc import Sequence

INDENT = "    "


def interleave_rows_source() -> list[str]:
    """A jit helper mapping interleaved accumulator columns to weight rows (or tensor columns)."""
    return [
        "@triton.jit",
        "def _coda_interleave_rows(cols, H: tl.constexpr):",
        "    group = cols // (2 * H)",
        "    within = cols % (2 * H)",
        "    return group * (2 * H) + within // 2 + (within % 2) * H",
    ]


def emit_gemm_kernel(
    name: str,
    extra_params: Sequence[str],
    epilogue: Sequence[str],
    *,
    float32_operands: bool,
) -> list[str]:
    """Source lines of a GEMM kernel with `epilogue` (already indented by one level) spliced in."""
    precision = ', input_precision="ieee"' if float32_operands else ""
    params = ", ".join(
        [
            "a_ptr",
            "b_ptr",
            *extra_params,
            "M",
            "N",
            "K",
            "stride_am",
            "stride_ak",
            "stride_bk",
            "stride_bn",
            "BM: tl.constexpr",
            "BN: tl.constexpr",
            "BK: tl.constexpr",
            "GROUP_M: tl.constexpr",
            "INTERLEAVE: tl.constexpr",
            "UPCAST: tl.constexpr",
        ]
    )
    lines = [
        "@triton.jit",
        f"def {name}({params}):",
        "    pid = tl.program_id(0)",
        "    num_pid_m = tl.cdiv(M, BM)",
        "    num_pid_n = tl.cdiv(N, BN)",
        "    # Grouped ordering: GROUP_M row-tiles share each B column-tile while it is in L2.",
        "    group_size = GROUP_M * num_pid_n",
        "    first_m = (pid // group_size) * GROUP_M",
        "    rows_in_group = min(num_pid_m - first_m, GROUP_M)",
        "    pid_m = first_m + (pid % group_size) % rows_in_group",
        "    pid_n = (pid % group_size) // rows_in_group",
        "    offs_m = pid_m * BM + tl.arange(0, BM)",
        "    offs_n = pid_n * BN + tl.arange(0, BN)",
        "    offs_k = tl.arange(0, BK)",
        "    mask_m = offs_m < M",
        "    mask_n = offs_n < N",
        "    if INTERLEAVE > 0:",
        "        b_cols = _coda_interleave_rows(offs_n, INTERLEAVE)",
        "    else:",
        "        b_cols = offs_n",
        "    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak",
        "    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + b_cols[None, :] * stride_bn",
        "    acc = tl.zeros((BM, BN), dtype=tl.float32)",
        "    for k0 in range(0, K, BK):",
        "        k_mask = (k0 + offs_k) < K",
        "        a = tl.load(a_ptrs, mask=mask_m[:, None] & k_mask[None, :], other=0.0)",
        "        b = tl.load(b_ptrs, mask=k_mask[:, None] & mask_n[None, :], other=0.0)",
        "        if UPCAST:",
        "            # The interpreter cannot do arithmetic on bf16; bf16 products are exact in fp32.",
        "            a = a.to(tl.float32)",
        "            b = b.to(tl.float32)",
        f"        acc = tl.dot(a, b, acc{precision})",
        "        a_ptrs += BK * stride_ak",
        "        b_ptrs += BK * stride_bk",
    ]
    lines.extend(epilogue)
    return lines
