"""`coda-plan-mainloop`: record on each `coda.gemm` whose epilogue reads or writes [BM, BN]
tiles the warp-specialized Gluon mainloop it runs with on a Hopper GPU (`#coda.mainloop<...>`,
the `coda.mainloop` kernel attribute), or say in a remark why it keeps the portable `tl` one.

Why: one Triton program per SM runs a tile's epilogue after its mainloop, at ~255 registers, so
an epilogue that loads and stores [BM, BN] tiles is exposed (bench/RESULTS.md, session 8: the
out-projection + residual + norm statistics 1.2-1.4x the plain GEMM, the RMSNorm-backward dgrads
1.45-1.6x). The Gluon kernel (`lowering/gluon.py`) hands each accumulator to an epilogue partition
through shared memory and computes the next tile meanwhile (session 10's prototype: the same
epilogues 1.02-1.08x at the LLaMA-8B shapes).

Decided here, from the IR alone (the machine is the runtime's business: `launch_gemm` falls back
to the `tl` kernel where no Hopper GPU or no Gluon is present):

* eligibility: 16-bit operands, A not transposed, no interleaved columns, no fixed `#coda.config`,
  N and K multiples of 8 (16-byte TMA strides), an epilogue that reads a matrix tile or writes
  more than the accumulator (a plain epilogue already runs at cuBLAS speed in the TMA `tl`
  kernel), and every epilogue op one the Gluon epilogue emitter supports (`gluon_obstacle`);
* the hand-off precision: bf16 only where the program rounds the value handed over to bf16
  before any other use, else f32 (the results stay those of the `tl` kernel). When the
  accumulator's only use is `coda.accumulate` of a bf16 input tile whose sum is rounded before
  any other use (the residual add of the out- and down-projections), the MMA warpgroups add the
  input tile (loaded into the hand-off buffer by TMA) and hand over the rounded sum in bf16
  (`accumulate_first`);
* the configuration: 128 x 256 tiles; a bf16 hand-off (64 KB) leaves room for a 3-stage ring of
  64-wide K steps, an f32 one (128 KB) for 4 stages of 32 (session 10: 2 stages of 64 starve the
  mainloop); 2 epilogue warps (11 warps in all: ptxas then allows 168 registers a thread, which
  the 64 x 256 wgmma accumulator needs); epilogue sub-tiles of 16 rows, 8 when the epilogue
  holds more than one loaded matrix tile or carries column partials (session 10: 16-row
  sub-tiles of the RMSNorm backward spilled).

* size: the epilogue partition overlaps tile i's epilogue with tile i + 1's mainloop, so it needs
  a mainloop long enough to cover a tile's epilogue and several tiles per SM (`size_obstacle`:
  K >= `MIN_K`, at least `MIN_TILES_PER_SM` 128x256 tiles per SM of a 132-SM H100). Measured
  (H100, bench/RESULTS.md session 13): GPT-2 medium's K = 1024 epilogues ran 2.9-9.3x their
  cuBLAS GEMM on the Gluon mainloop (1.6-2.9x on tl), its N = 1024 gemms (256 tiles, ~2 per SM)
  1.5-2.3x (tl 1.2-1.6x); every LLaMA / Qwen3 gemm given the record (K >= 2048, >= 7.8 tiles per
  SM) ran 0-16% faster than its tl kernel.

A gemm whose epilogue stores the accumulator and nothing else (`coda.is_plain_gemm`: the
backward's dgrads and weight gradients, the LM head's) with 16-bit operands and an output of their
type or f32 (`coda.vendor_gemm_obstacle`) gets `#coda.vendor_gemm<cublas>` instead: there is no
epilogue to fuse, and the vendor's kernel is the faster mainloop. Measured on the H100
(bench/RESULTS.md, session 16), the autotuned TMA tl kernel against cuBLAS on the same operands:
0.98-1.05x on the LLaMA blocks' plain gemms (the 8B block's eight: 1.8% slower in sum), 1.07x /
1.11x on the LLaMA-1B LM head's weight gradient and dgrad (K = 128256). Its outputs are the
library's: the same products, summed in another order (within the bf16 bars, not bitwise the tl
kernel's).

Options: `mainloop=auto` (default: the Gluon mainloop wherever eligible and large enough, the
vendor library for plain gemms), `gluon` (the Gluon mainloop wherever eligible, at any size: tests
and experiments at small shapes; plain gemms as in `auto`) or `tl` (every gemm on the tl kernel);
`vendor-gemms=false` keeps plain gemms on the tl kernel under any mode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.context import Context
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import BFloat16Type, Float16Type, ModuleOp, TensorType
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass

from coda_ir.dialects import coda
from coda_ir.errors import ArgumentError
from coda_ir.remarks import emit_remark
from coda_ir.transforms.target_machine import DEFAULT_GPU, target_gpu

if TYPE_CHECKING:
    from coda_ir.analysis.io_model import GPU

MODES = ("auto", "gluon", "tl")

MIN_K = 2048
"""The shortest contraction given the Gluon mainloop: a 128x256 tile's mainloop at K = 2048 takes
~25 us on an H100, about what the 2-warp epilogue partition needs for a residual + norm-statistics
epilogue (LLaMA-1B out-projection, K = 2048: Gluon 1.18-1.23x cuBLAS, tl 1.28-1.35x); at K = 1024
every GPT-2 epilogue lost to tl, by 1.8-3.5x."""

MIN_TILES_PER_SM = 3
"""The fewest 128x256 tiles per SM (of the target machine's, `gpu` option) given the Gluon mainloop: the first tile's
mainloop and the last tile's epilogue are never overlapped, which at ~2 tiles per SM (GPT-2's
N = 1024 gemms, 256 tiles) left the Gluon kernel 1.2-1.4x slower than tl. 3 keeps the record on
the whole-model LLaMA-1B layers (8192 tokens x 2048: 512 tiles, 3.9 per SM)."""

# 11 warps (4 + 4 MMA, 1 producer, 2 epilogue): ptxas caps the kernel at 168 registers a thread;
# setmaxnreg moves them between partitions (session 10: (168, 24, 176) measured best).
REGS = (168, 24, 176)
EPILOGUE_WARPS = 2


def _is_matrix(value: SSAValue, m: int) -> bool:
    ty = value.type
    return isinstance(ty, TensorType) and len(ty.get_shape()) == 2 and ty.get_shape()[0] == m


def gluon_obstacle(op: coda.GemmOp) -> str | None:
    """Why the Gluon mainloop cannot run this gemm (None: it can)."""
    elt = op.a.type.get_element_type()  # type: ignore[union-attr]
    if not isinstance(elt, (BFloat16Type, Float16Type)):
        return f"its operands are {elt} (the Gluon mainloop runs 16-bit wgmma)"
    if op.transpose_a is not None:
        return "A is read transposed (the Gluon mainloop loads A as [M, K] tiles)"
    if op.interleave is not None or op.interleave_wide is not None:
        return "its columns are interleaved (paired-B loads and half-tile stores are tl-only)"
    if op.config is not None:
        return "a fixed #coda.config tile was requested"
    m, n, k = op.problem_shape()
    odd = [f"{d} = {v}" for d, v in (("N", n), ("K", k)) if v % 8]
    if odd:
        return f"{' and '.join(odd)} not a multiple of 8 (TMA needs 16-byte strides)"
    block = op.epilogue.blocks[0]
    for inner in block.ops:
        reason = _op_obstacle(inner)
        if reason is not None:
            return reason
        if isinstance(inner, coda.ReduceOp) and inner.dim.value.data == 0 and inner.tile.type.cols != n:  # type: ignore[attr-defined]
            return "its column partials are of a tile narrower or wider than N (carried only for N-wide tiles)"
    strides = {o.stride.value.data for o in block.ops if isinstance(o, coda.PairMapOp)}
    if len(strides) > 1:
        return f"its pair maps have strides {sorted(strides)} (the Gluon epilogue layout holds one)"
    return None


def size_obstacle(op: coda.GemmOp, record: coda.MainloopAttr, gpu: GPU) -> str | None:
    """Why this gemm is too small for the Gluon mainloop of `record` to pay on `gpu` (None: large enough)."""
    m, n, k = op.problem_shape()
    if k < MIN_K:
        return (f"K = {k} < {MIN_K}: a tile's mainloop is too short to hide the 2-warp epilogue partition "
                "(GPT-2 medium's K = 1024 epilogues ran 2.9-9.3x their GEMM on the Gluon mainloop on the H100)")
    bm, bn = record.as_dict()["bm"], record.as_dict()["bn"]
    tiles = -(-m // bm) * -(-n // bn)  # type: ignore[operator]
    if tiles < MIN_TILES_PER_SM * gpu.sms:
        # ("an H100", "an H200": the names of gpu_constants.json)
        return (f"{tiles} tiles of {bm}x{bn}, fewer than {MIN_TILES_PER_SM} per SM of an {gpu.name.upper()}: the first mainloop "
                "and the last epilogue are not overlapped (GPT-2's 256-tile gemms ran 1.2-1.4x slower than on tl)")
    return None


def epilogue_column_lanes(op: coda.GemmOp) -> int:
    """Lanes of a warp along the columns of the Gluon epilogue's layout (8 contiguous columns a
    thread): 32, or for an epilogue with pair maps of stride s, s / 8, so that each pair's
    partner, s columns on, is one of the thread's own registers (the pair map then reshapes and
    splits in registers; with 32 lanes it moved every pair through shared memory: QKV + RoPE
    1.6-2.7x cuBLAS on the H100, session 11). The rest of the lanes go along the rows."""
    strides = [o.stride.value.data for o in op.epilogue.blocks[0].ops if isinstance(o, coda.PairMapOp)]
    return min(32, strides[0] // 8) if strides else 32


def _op_obstacle(op: Operation) -> str | None:
    """Why the Gluon epilogue emitter cannot print this epilogue op (None: it can)."""
    if isinstance(op, (coda.LoadOp, coda.BroadcastOp, coda.IndexOp, coda.ScaleOp, coda.ShiftOp, coda.AccumulateOp,
                       coda.MapOp, coda.SelectOp, coda.YieldOp)):
        return None
    if isinstance(op, coda.PairMapOp):
        if coda.is_gathered(op) or coda.is_row_exchanged(op):
            return f"its {op.name} exchanges pairs across a whole row (tl.gather)"
        if op.period is not None:
            return f"its {op.name} pairs columns by a period of {op.period.value.data} (exchanged by tl.gather in the tile)"
        stride = op.stride.value.data
        if stride < 8 or stride > 128 or stride & (stride - 1):
            return f"its {op.name} pairs columns {stride} apart (the Gluon epilogue keeps pairs 8..128 apart in registers)"
        return None
    if isinstance(op, coda.ReduceOp):
        if op.kind.data == coda.ReduceKind.LSE:
            # Measured, not modelled: the LM head's cross-entropy epilogue (K = 2048, row LSE and
            # target-logit partials, logits stored) took 22.4 ms on the Gluon mainloop against
            # 5.5 ms for each backward GEMM of that size (H100, bench_model.py --profile,
            # session 12): the 2-warp epilogue partition, not the MMAs, set the pace.
            return ("its row log-sum-exp partials (the 2-warp Gluon epilogue ran the LM head's cross-entropy epilogue "
                    "at 4x its GEMM on the H100)")
        if op.dim.value.data == 0 and op.kind.data not in (coda.ReduceKind.SUM, coda.ReduceKind.SUMSQ,
                                                            coda.ReduceKind.MAX):
            return f"its column {op.kind.data.value} partials are not carried across row sub-tiles"
        return None
    if op.name.split(".")[0] in ("arith", "math"):
        return None
    return f"its epilogue has a {op.name}, which the Gluon epilogue emitter does not print"


def reads_or_writes_tiles(op: coda.GemmOp) -> bool:
    """Whether the epilogue loads a matrix tile or stores more than the accumulator."""
    m, _, _ = op.problem_shape()
    block = op.epilogue.blocks[0]
    for inner in block.ops:
        if isinstance(inner, (coda.LoadOp, coda.AccumulateOp)) and _is_matrix(inner.operands[-1 if isinstance(
                inner, coda.AccumulateOp) else 0], m):
            return True
    tiles = [r for r in op.outputs if isinstance(r.type, TensorType)]
    return len(tiles) > 1 or any(isinstance(r.type, coda.PartialsType) for r in op.outputs)


def _rounded_to_bf16(value: SSAValue, kernel: coda.GemmOp) -> bool:
    """Every use of `value` rounds it to bf16 before anything else: a bf16 output it is stored
    into, or a `coda.map` whose body's only use of it is `arith.truncf` to bf16."""
    if not value.uses:
        return False
    for use in value.uses:
        user = use.operation
        if isinstance(user, coda.YieldOp):
            out = kernel.outputs[use.index].type
            if not (isinstance(out, TensorType) and isinstance(out.get_element_type(), BFloat16Type)):
                return False
        elif isinstance(user, coda.MapOp):
            arg = user.body.blocks[0].args[use.index]
            if not arg.uses or not all(isinstance(u.operation, arith.TruncFOp)
                                       and isinstance(u.operation.result.type, BFloat16Type) for u in arg.uses):
                return False
        else:
            return False
    return True


def handoff_plan(op: coda.GemmOp) -> tuple[str, int, str]:
    """(hand-off element type, accumulate_first, why) for an eligible gemm."""
    block: Block = op.epilogue.blocks[0]
    acc = block.args[0]
    if _rounded_to_bf16(acc, op):
        return "bf16", -1, "the epilogue rounds the accumulator to bf16 before any other use"
    m, n, _ = op.problem_shape()
    uses = list(acc.uses)
    if len(uses) == 1 and isinstance(uses[0].operation, coda.AccumulateOp) and uses[0].index == 0:
        first = uses[0].operation
        matrix = first.matrix
        ty = matrix.type
        if (isinstance(matrix, BlockArgument) and isinstance(ty, TensorType) and ty.get_shape() == (m, n)
                and isinstance(ty.get_element_type(), BFloat16Type) and _rounded_to_bf16(first.result, op)):
            return "bf16", matrix.index - 1, (
                "the MMA warpgroups add the accumulated tile, whose sum the epilogue rounds to bf16 before any other use")
    return "f32", -1, "the epilogue uses the accumulator unrounded (an f32 hand-off keeps the tl kernel's results)"


def _sub_rows(op: coda.GemmOp) -> int:
    block = op.epilogue.blocks[0]
    loads = sum(isinstance(o, (coda.LoadOp, coda.AccumulateOp)) for o in block.ops)
    columns = any(isinstance(o, coda.ReduceOp) and o.dim.value.data == 0 for o in block.ops)
    rows = 8 if loads > 1 or columns else 16
    # at least the rows the epilogue layout covers (no thread holds a copy of another's element)
    return max(rows, (32 // epilogue_column_lanes(op)) * EPILOGUE_WARPS)


def plan_mainloop(op: coda.GemmOp) -> tuple[coda.MainloopAttr | None, str]:
    """The mainloop record of a gemm whose epilogue reads or writes tiles, and the remark's reason."""
    reason = gluon_obstacle(op)
    if reason is not None:
        return None, reason
    handoff, first, why = handoff_plan(op)
    bk, stages = (64, 3) if handoff == "bf16" else (32, 4)
    attr = coda.MainloopAttr("gluon_ws", 128, 256, bk, stages, handoff, first, EPILOGUE_WARPS, _sub_rows(op), REGS)
    return attr, why


@dataclass(frozen=True)
class PlanMainloopPass(ModulePass):
    """Record each gemm's mainloop: Gluon where it suits (`coda.mainloop`), cuBLAS for plain ones (`coda.vendor_gemm`).

    The module docstring says why and when; the options are `mainloop` and `vendor_gemms`."""

    name = "coda-plan-mainloop"

    mainloop: str = "auto"
    vendor_gemms: bool = True
    """false: plain gemms keep the generated mainloop too (`mainloop=tl` implies it)."""
    gpu: str = DEFAULT_GPU
    """The target machine whose SM count sets the size threshold (`transforms/target_machine.py`)."""
    gpu_constants: str = ""
    """A table of GPU constants to read `gpu` from instead of the shipped one."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.mainloop not in MODES:
            raise ArgumentError(f"coda-plan-mainloop: mainloop must be one of {', '.join(MODES)}, got {self.mainloop!r}")
        gpu = target_gpu(self.name, self.gpu, self.gpu_constants)
        for fn in [f for f in op.walk() if isinstance(f, func.FuncOp) and f.body.blocks]:
            for k in [k for k in fn.walk() if isinstance(k, coda.GemmOp)]:
                k.attributes.pop(coda.MAINLOOP, None)
                k.attributes.pop(coda.VENDOR_GEMM, None)
                if coda.is_plain_gemm(k):
                    # no remark either way: nothing was fused or lost (the IR shows the record)
                    if self.mainloop != "tl" and self.vendor_gemms and coda.vendor_gemm_obstacle(k) is None:
                        k.attributes[coda.VENDOR_GEMM] = coda.VendorGemmAttr("cublas")
                    continue
                if not reads_or_writes_tiles(k):
                    continue  # row / column vectors and the accumulator alone: the TMA tl kernel keeps up
                if self.mainloop == "tl":
                    emit_remark(k, "keeps the tl mainloop: mainloop=tl", informational=True)
                    continue
                attr, why = plan_mainloop(k)
                small = size_obstacle(k, attr, gpu) if attr is not None and self.mainloop == "auto" else None
                if small is not None:
                    attr, why = None, small
                if attr is None:
                    emit_remark(k, f"keeps the tl mainloop: {why}", informational=True)
                    continue
                k.attributes[coda.MAINLOOP] = attr
                d = attr.as_dict()
                emit_remark(k, "runs the Gluon warp-specialized mainloop on Hopper "
                               f"({d['bm']}x{d['bn']}x{d['bk']}, {d['stages']} stages, {d['handoff']} hand-off: {why})",
                            informational=True)
