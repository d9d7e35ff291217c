"""The warp-specialized Gluon mainloop of a `coda.gemm` that carries a `#coda.mainloop<gluon_ws, ...>`
(`coda-plan-mainloop`), beside the portable `tl` kernel of `mainloop.py`.

A persistent Hopper kernel, one program per SM walking the tiles in grouped order
(GROUP_M = 8), made of four partitions (`gl.warp_specialize`):

* two MMA warpgroups (cooperative: each owns BM / 2 rows of the BM x BN tile, both read the one B
  tile of a stage), async wgmma with one group in flight, the previous stage released after
  `warpgroup_mma_wait(1)`; after the K loop each writes its accumulator rows into the [BM, BN]
  hand-off buffer in shared memory (bf16 or f32, the record's `handoff`) and arrives on
  `acc_ready`, then starts the next tile;
* a one-warp TMA producer filling a STAGES-deep ring of A [BM, BK] and B tiles (mbarriers
  `ready` / `empty`), running ahead across tiles;
* the epilogue partition: waits on `acc_ready`, runs the epilogue on the buffer in row sub-tiles
  of `sub_rows` rows (`acc` = a sub-tile load of the buffer), then arrives on `acc_empty`. So tile
  i's epilogue runs under tile i + 1's MMAs (bench/RESULTS.md, session 10).

The kernel is a `tl.kernel` whose body is one `tl.mainloop gluon_ws` (built by
`lowering/tl_gemm.lower_gluon_gemm`); this module holds its fixed templates, which the printer
(`triton_printer`) fills, printing the op's region, the epilogue on one row sub-tile, where the
epilogue partition runs it. The region is built by the same epilogue lowering as the `tl`
kernel's, from the same `epilogue_schedule`, in the partition's layout: column index vectors in
the epilogue layout's column slice, a pair map's narrow operands in its split operands' layout
and its results converted back (`tl.convert_layout`, the layouts `#tl.layout` attributes), and
column partials carried across the row sub-tiles (the region's arguments, added in sub-tile
order and yielded; the template stores them once per tile); row partials complete per sub-tile.
Triton's `tl.*` builtins work on Gluon tensors, so the printed body is the `tl` kernel's text
with BM = the sub-tile's rows, `gl.*` only where a layout is stated.

`accumulate_first = i`: the epilogue starts with `coda.accumulate` of input i (a bf16 [M, N]
tile, e.g. the residual stream), whose sum it rounds to bf16 before any other use. The epilogue
partition then loads that input's next tile into the hand-off buffer by TMA (arming `acc_empty`
with its byte count) as soon as it has read the buffer; the MMA warpgroups add it to their
accumulator in f32 and hand the rounded sum over in bf16, which is exactly the value the epilogue
would have rounded. The region has no accumulate op (its result is `acc`).

Tile sizes are printed as literals: values passed through `warp_specialize` lose constexpr-ness.
Triton API differences (3.6 on the lent H100, 3.9 in CI) are resolved when the module is
imported (`GLUON_PRELUDE`): the TMA copy names and the partition barrier are probed by name.
"""

from __future__ import annotations

from collections.abc import Sequence

from coda_ir.dialects import coda
from coda_ir.dialects.tl_names import GLUON_SCOPE

# Every name the templates bind where the epilogue region is printed (the partition's locals and
# the frame it hands the region): a value of the region must not take one.
TEMPLATE_NAMES: frozenset[str] = frozenset(
    [*GLUON_SCOPE, "pid", "num_pid_m", "num_pid_n", "pid_m", "pid_n", "offs_n", "mask_n", "offs_m", "mask_m", "acc",
     "BM", "BN", "M", "N", "K"])

IND = "    "

GROUP_M = 8

# The Gluon section of a generated module: defined only where the installed Triton has Gluon
# for Hopper (`_CODA_GLUON`); elsewhere each Gluon entry point is None and `launch_gemm` runs
# the tl kernel.
GLUON_PRELUDE = '''\
try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
    _CODA_GLUON = hasattr(gl, "warp_specialize")
except ImportError:  # a Triton without Gluon: the tl kernels only
    _CODA_GLUON = False

if _CODA_GLUON:
    # Triton 3.6 names; later releases renamed them (async_load / async_store, barrier)
    _coda_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
    _coda_partition_barrier = getattr(gl, "thread_barrier", None) or gl.barrier

    @gluon.jit
    def _coda_gl_tile(tile, num_pid_m, num_pid_n, GROUP_M: gl.constexpr):
        group = GROUP_M * num_pid_n
        first_m = (tile // group) * GROUP_M
        rows = min(num_pid_m - first_m, GROUP_M)
        return first_m + (tile % group) % rows, (tile % group) // rows

    @gluon.jit
    def _coda_gl_producer(a_bufs, b_bufs, ready, empty, a_desc, b_desc, M, N, K, BM: gl.constexpr,
                          BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, B_T: gl.constexpr,
                          GROUP_M: gl.constexpr):
        # TMA loads of the A and B tiles into the ring, running ahead across tiles
        pid = gl.program_id(0)
        nprog = gl.num_programs(0)
        num_pid_m = gl.cdiv(M, BM)
        num_pid_n = gl.cdiv(N, BN)
        k_tiles = gl.cdiv(K, BK)
        it = 0
        for tile in range(pid, num_pid_m * num_pid_n, nprog):
            pid_m, pid_n = _coda_gl_tile(tile, num_pid_m, num_pid_n, GROUP_M)
            for kk in range(k_tiles):
                s = it % STAGES
                # a fresh barrier counts as having completed the phase before 0
                mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
                mbarrier.expect(ready.index(s), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
                _coda_tma_load(a_desc, [pid_m * BM, kk * BK], ready.index(s), a_bufs.index(s))
                if B_T:
                    _coda_tma_load(b_desc, [pid_n * BN, kk * BK], ready.index(s), b_bufs.index(s))
                else:
                    _coda_tma_load(b_desc, [kk * BK, pid_n * BN], ready.index(s), b_bufs.index(s))
                it += 1

    @gluon.jit
    def _coda_gl_mma(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, M, N, K, BM: gl.constexpr,
                     BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, B_T: gl.constexpr,
                     GROUP_M: gl.constexpr, CID: gl.constexpr, ACC_FIRST: gl.constexpr):
        # one MMA warpgroup: rows [CID * BM / 2, (CID + 1) * BM / 2) of each tile
        HM: gl.constexpr = BM // 2
        layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                          instr_shape=[16, BN, 16])
        pid = gl.program_id(0)
        nprog = gl.num_programs(0)
        num_pid_m = gl.cdiv(M, BM)
        num_pid_n = gl.cdiv(N, BN)
        k_tiles = gl.cdiv(K, BK)
        it = 0
        j = 0
        for tile in range(pid, num_pid_m * num_pid_n, nprog):
            acc = gl.zeros([HM, BN], gl.float32, layout=layout)
            for kk in range(k_tiles):
                s = it % STAGES
                mbarrier.wait(ready.index(s), (it // STAGES) & 1)
                a = a_bufs.index(s).slice(CID * HM, HM)
                if B_T:
                    acc = warpgroup_mma(a, b_bufs.index(s).permute((1, 0)), acc, is_async=True)
                else:
                    acc = warpgroup_mma(a, b_bufs.index(s), acc, is_async=True)
                # one group in flight: the previous stage's wgmma is done, give its buffers back
                acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
                if kk > 0:
                    mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
                it += 1
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
            rows = c_smem.slice(CID * HM, HM)
            if ACC_FIRST:
                # the epilogue partition loaded the accumulated input's tile into the buffer: add it
                # in f32 per column half (the whole [HM, BN] input beside the accumulator spills),
                # and hand the rounded sum over in its place
                mbarrier.wait(acc_empty, j & 1)
                lo, hi = acc.reshape([HM, 2, BN // 2]).permute(0, 2, 1).split()
                left = rows.slice(0, BN // 2, dim=1)
                left.store((lo + left.load(lo.type.layout).to(gl.float32)).to(c_smem.dtype))
                right = rows.slice(BN // 2, BN // 2, dim=1)
                right.store((hi + right.load(hi.type.layout).to(gl.float32)).to(c_smem.dtype))
            else:
                # the epilogue partition has finished the previous tile
                mbarrier.wait(acc_empty, (j & 1) ^ 1)
                rows.store(acc.to(c_smem.dtype))
            fence_async_shared()
            _coda_partition_barrier()
            mbarrier.arrive(acc_ready)
            j += 1
'''


def epilogue_layout(warps: int, column_lanes: int) -> str:
    """The one distributed layout of the epilogue's [sub_rows, BN] tensors: 8 contiguous columns
    per thread (16-byte accesses), `column_lanes` lanes along the columns
    (`plan_mainloop.epilogue_column_lanes`), the other lanes and the warps along the rows."""
    return f"gl.BlockedLayout([1, 8], [{32 // column_lanes}, {column_lanes}], [{warps}, 1], [1, 0])"


def emit_gluon_kernel(entry: str, record: coda.MainloopAttr, column_lanes: int, transpose_b: bool,
                      tensors: Sequence[str], body: Sequence[str], carried: Sequence[tuple[str, str, str]],
                      unspecialized: Sequence[str] = ()) -> list[str]:
    """Source lines (module level, inside the `if _CODA_GLUON:` block, indented one level) of the
    Gluon kernel `entry` and its partitions, for a `tl.mainloop gluon_ws` (the printer's call).

    `tensors`: the epilogue's input and output pointer parameters; `body`: the printed epilogue
    region, for one sub-tile (one indentation level); `carried`: the column partials it carries,
    (variable, output pointer, combine: sum or max)."""
    ml = record
    d = ml.as_dict()
    bm, bn, bk, stages = d["bm"], d["bn"], d["bk"], d["stages"]
    sub, warps = d["sub_rows"], d["epilogue_warps"]
    mma_regs, producer_regs, epi_regs = d["regs"]  # type: ignore[misc]
    first = d["accumulate_first"]
    b_t = transpose_b
    r_desc = ["r_desc"] if first >= 0 else []  # type: ignore[operator]
    shared = ["a_bufs", "b_bufs", "c_smem", "ready", "empty", "acc_ready", "acc_empty", "a_desc", "b_desc", *r_desc]
    params = [*shared, *tensors, "M", "N", "K"]
    sig = ", ".join(params)
    out: list[str] = []

    def fn(lines: list[str]) -> None:
        out.extend(["", *[IND + line if line.strip() else line for line in lines]])

    consts = f"{bm}, {bn}, {bk}, {stages}, {b_t}, {GROUP_M}"
    for cid in (0, 1):
        fn(["@gluon.jit", f"def {entry}_mma{cid}({sig}):",
            f"{IND}_coda_gl_mma(a_bufs, b_bufs, c_smem, ready, empty, acc_ready, acc_empty, M, N, K, {consts}, "
            f"{cid}, {first >= 0})"])  # type: ignore[operator]
    fn(["@gluon.jit", f"def {entry}_producer({sig}):",
        f"{IND}_coda_gl_producer(a_bufs, b_bufs, ready, empty, a_desc, b_desc, M, N, K, {consts})"])

    # ---- the epilogue partition
    layout = epilogue_layout(warps, column_lanes)
    e = [
        "@gluon.jit",
        f"def {entry}_epilogue({sig}):",
        f"    # the epilogue on row sub-tiles of the hand-off buffer ({d['handoff']}); BM is the sub-tile's rows",
        f"    BM: gl.constexpr = {sub}",
        f"    BN: gl.constexpr = {bn}",
        f"    EPI_LAYOUT: gl.constexpr = {layout}",
        "    pid = gl.program_id(0)",
        "    nprog = gl.num_programs(0)",
        f"    num_pid_m = gl.cdiv(M, {bm})",
        f"    num_pid_n = gl.cdiv(N, {bn})",
        "    num_tiles = num_pid_m * num_pid_n",
        "    j = 0",
    ]
    if first >= 0:  # type: ignore[operator]
        e += [
            "    # the accumulated input's first tile, into the hand-off buffer (acc_empty counts its bytes)",
            "    if pid < num_tiles:",
            f"        first_m, first_n = _coda_gl_tile(pid, num_pid_m, num_pid_n, {GROUP_M})",
            "        mbarrier.expect(acc_empty, r_desc.block_type.nbytes)",
            f"        _coda_tma_load(r_desc, [first_m * {bm}, first_n * {bn}], acc_empty, c_smem)",
        ]
    e += [
        "    for tile in range(pid, num_tiles, nprog):",
        f"        pid_m, pid_n = _coda_gl_tile(tile, num_pid_m, num_pid_n, {GROUP_M})",
        "        offs_n = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, EPI_LAYOUT))",
        "        mask_n = offs_n < N",
    ]
    for var, _, combine in carried:
        init = '-float("inf")' if combine == "max" else "0.0"
        e.append(f"        {var} = gl.full([BN], {init}, gl.float32, layout=gl.SliceLayout(0, EPI_LAYOUT))")
    e += [
        "        mbarrier.wait(acc_ready, j & 1)",
        f"        for sub in gl.static_range({bm // sub}):",  # type: ignore[operator]
        f"            offs_m = pid_m * {bm} + sub * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, EPI_LAYOUT))",
        "            mask_m = offs_m < M",
        "            acc = c_smem.slice(sub * BM, BM).load(EPI_LAYOUT).to(gl.float32)",
        *[IND * 2 + line if line.strip() else line for line in body],
        "        # every thread of the partition has read the buffer",
        "        _coda_partition_barrier()",
    ]
    if first >= 0:  # type: ignore[operator]
        e += [
            "        if tile + nprog < num_tiles:",
            f"            next_m, next_n = _coda_gl_tile(tile + nprog, num_pid_m, num_pid_n, {GROUP_M})",
            "            fence_async_shared()",
            "            mbarrier.expect(acc_empty, r_desc.block_type.nbytes)",
            f"            _coda_tma_load(r_desc, [next_m * {bm}, next_n * {bn}], acc_empty, c_smem)",
        ]
    else:
        e.append("        mbarrier.arrive(acc_empty)")
    for var, ptr, _ in carried:
        e += [
            "        # column partials [L, tiles_m] at [n, pid_m], summed over the sub-tiles in order",
            f"        tl.store({ptr} + offs_n.to(tl.int64) * tl.cdiv(M, {bm}) + pid_m, {var}, mask=mask_n)",
        ]
    e.append("        j += 1")
    fn(e)

    # ---- the entry point: shared memory, barriers, partitions
    operand = "a_desc.dtype"
    handoff = "gl.float32" if d["handoff"] == "f32" else "gl.bfloat16"
    ins = ", ".join(tensors)
    fn([
        f"@gluon.jit(do_not_specialize={list(unspecialized)!r})" if unspecialized else "@gluon.jit",
        f"def {entry}(a_desc, b_desc, {'r_desc, ' if r_desc else ''}{ins}, M, N, K, HANDOFF_LAYOUT: gl.constexpr):",
        f"    a_bufs = gl.allocate_shared_memory({operand}, [{stages}] + a_desc.block_type.shape, a_desc.layout)",
        f"    b_bufs = gl.allocate_shared_memory({operand}, [{stages}] + b_desc.block_type.shape, b_desc.layout)",
        f"    c_smem = gl.allocate_shared_memory({handoff}, [{bm}, {bn}], HANDOFF_LAYOUT)",
        f"    ready = gl.allocate_shared_memory(gl.int64, [{stages}, 1], mbarrier.MBarrierLayout())",
        f"    empty = gl.allocate_shared_memory(gl.int64, [{stages}, 1], mbarrier.MBarrierLayout())",
        "    acc_ready = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())",
        "    acc_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())",
        f"    for i in gl.static_range({stages}):",
        "        mbarrier.init(ready.index(i), count=1)",
        "        mbarrier.init(empty.index(i), count=2)  # one arrival per MMA warpgroup",
        "    mbarrier.init(acc_ready, count=2)",
        "    mbarrier.init(acc_empty, count=1)",
        "    fence_async_shared()",
        f"    args = ({', '.join(params)})",
        f"    gl.warp_specialize([({entry}_mma0, args), ({entry}_mma1, args), ({entry}_producer, args), "
        f"({entry}_epilogue, args)], [4, 1, {warps}], [{mma_regs}, {producer_regs}, {epi_regs}])",
    ])
    return out
