"""Attention in the IO model: tiled streaming attention priced the "FlashAttention on a Napkin"
way (plain Python; docs/NAPKIN_ATTENTION.md has the formulas and the paper's claims checked).

An attention step (`AttentionCall`: an `AttentionShape`, a backend and a direction) runs as a
`Schedule`: a grid of CTAs, each owning a block of `block_q` query rows (forward) or `block_k`
key rows (backward), streaming the other operand through shared memory in blocks, with the
online-softmax state (row max m, row sum l, the output accumulator) in registers. From the
schedule and the shape the model counts, per level of the memory hierarchy:

* FLOPs: the tensor-core products of every visited (query block, key block) tile (forward
  `4 d` per score: Q K^T and P V; backward `10 d`: the recomputed Q K^T, dO V^T, P^T dO, dS^T Q
  and dS K; a backward whose dQ runs as a separate loop recomputes Q K^T and dO V^T there,
  `14 d`), one exp per score (SFU; a softcap adds a tanh), and the fp32 softmax arithmetic;
  `useful_flops` counts only visible scores (what TFLOP/s figures quote), `flops` every score
  of a visited tile (masked tiles are computed, then masked).
* Bytes: HBM (each operand once when the in-flight working set of K/V fits in L2, else the
  streamed operand once per visiting CTA; plus the backward's fp32 dQ accumulator, its
  `D = rowsum(dO * O)` pre-pass and, for GQA, the per-q-head dK/dV that are summed after),
  L2 -> SM (the streamed operand once per visited tile), shared memory (each staged tile written
  once and read by every warp, or warpgroup for wgmma, that multiplies with it), registers
  (per thread: the accumulators and score tile of the CTA's rows over its threads).
* Block skipping: a causal, sliding-window or document mask leaves whole tiles empty; a
  schedule skips the empty tiles of the masks in `Schedule.skips` (at `skip_block`
  granularity) and computes the rest. `varlen` runs each document as its own sequence.
* Occupancy: CTAs (and warps) per SM from registers (allocated per warp in units of 8 per
  thread), shared memory per CTA and the warp limit, and which of them binds.
* Time: `max(t_core, t_hbm, t_l2, t_smem) * wave_tail + launches * launch_s`, where `t_core`
  combines the tensor-core time (at the schedule's instruction's share of the GPU's measured
  GEMM rate: Hopper's `mma.sync` reaches about 2/3 of its `wgmma` rate, FlashAttention-3 paper)
  with the softmax time (SFU exps plus fp32 ALU), hiding the fraction `overlap` of the smaller
  under the larger (a ping-pong schedule overlaps one warpgroup's softmax with the other's
  GEMMs). Like the GEMM model it is a lower bound with no latency term.

Backends (`BACKENDS`, the kernels coda-ir's runtime can call, coda_ir/runtime/attention.py):
"cudnn" and "flash" (SDPA's fused kernels: plain causal/full masks, GQA), "flex" (PyTorch's
FlexAttention Triton template: any mask, softcap; coda-ir's flex backward reruns the forward
first), "varlen" (`torch.nn.attention.varlen`: documents as separate sequences), "materialized" (backward
only: a soft-capped attention's backward from the forward's log-sum-exp with the scores
materialized per block of query rows, cuBLAS GEMMs and one fused pass, priced as those kernels run
one after another: FLOPs at the GEMM rate plus MATERIALIZED_BYTES_PER_SCORE at the HBM rate). The per-warp schedule
of docs/NAPKIN_ATTENTION.md (the paper's occupancy claim; not a kernel one can call) has only its
occupancy: `napkin_warps_per_sm`. The block sizes are the public defaults of each (FlashAttention-2's kernel
traits, FlexAttention's template configs); cuDNN's kernels are not public, so its schedule is
assumed FlashAttention-3-like on Hopper (128 x 128 tiles, two consumer warpgroups in ping-pong
and a producer warpgroup) and FlashAttention-2-like on Ampere. `bench/bench_attention_model.py`
measures every backend against these predictions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from coda_ir.analysis import io_model as m

BACKENDS = ("cudnn", "flash", "flex", "varlen", "materialized")

MATERIALIZED_SCORE_BYTES = 1 << 29
"""The fp32 scores one step of the materialized backward holds (every sequence and head, a block
of query rows, every key; dp as much again, p and ds half as much): 512 MiB, so Gemma2-2B's
2 x 4096 rows (8 heads) run in two blocks, the first over half the keys. The runtime
(coda_ir/runtime/attention.py) blocks its rows by `materialized_row_blocks`, the model prices them."""

MATERIALIZED_BYTES_PER_SCORE = 26
"""HBM bytes per computed score of the materialized backward: s and dp written by cuBLAS in fp32
and read by the fused pass (16), p and ds written in bf16 (4), ds read by the dq and dk GEMMs and
p by the dv GEMM (6). The scores of a block (1 GiB with dp) do not stay in L2."""

MATERIALIZED_LAUNCHES_PER_BLOCK = 9  # q / do stacking copies, 2 score GEMMs, the pass, 3 gradient GEMMs, 2 adds

REG_ALLOC_UNIT = 8
"""Registers are allocated per thread in multiples of 8 (256 per warp)."""

PRODUCER_REGS = 24
"""Registers per thread of a producer (TMA-issuing) warpgroup after `setmaxnreg` (FlashAttention-3)."""

MMA_SYNC_ON_HOPPER = 2.0 / 3.0
"""Share of Hopper's wgmma rate that Ampere-style `mma.sync` reaches (FlashAttention-3 paper:
FlashAttention-2's mma.sync kernels reach about 2/3 of the H100's peak)."""

FWD_MATMUL_FLOPS = 4  # per score and head dim: Q K^T and P V
BWD_MATMUL_FLOPS = 10  # recomputed Q K^T, dO V^T, P^T dO, dS^T Q, dS K
BWD_SEPARATE_DQ_FLOPS = 14  # + the dQ loop's own Q K^T and dO V^T
FWD_SOFTMAX_ALU = 4  # per score: scale-and-subtract (one FMA), max, sum, convert P
BWD_SOFTMAX_ALU = 5  # per score: P = exp(S - lse) FMA, dS = P (dP - D) (2), converts of P and dS
SOFTCAP_ALU = 2  # per score: divide (multiply by 1/cap), multiply back; plus a tanh on the SFU
SOFTCAP_BWD_ALU = 3  # the tanh's derivative 1 - t^2 times dS


# ============================================================================ the problem


@dataclass(frozen=True)
class AttentionShape:
    """One attention call: `batch` sequences of `seq_len` rows, `heads` query heads sharing
    `kv_heads` key/value heads (GQA), `head_dim`; the mask: `causal`, a sliding `window`
    (0: none; row i sees keys j with i - j < window) and `documents` (the lengths of the
    documents every sequence is packed from, summing to seq_len; None: one document); a
    `softcap` (0: none) on the scores."""

    batch: int
    seq_len: int
    heads: int
    kv_heads: int
    head_dim: int
    causal: bool = True
    window: int = 0
    softcap: float = 0.0
    documents: tuple[int, ...] | None = None
    dtype: str = "bf16"

    def __post_init__(self) -> None:
        for name in ("batch", "seq_len", "heads", "kv_heads", "head_dim"):
            if getattr(self, name) <= 0:
                raise ValueError(f"attention {name} must be positive, got {getattr(self, name)}")
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads ({self.kv_heads}) must divide heads ({self.heads})")
        if self.window < 0:
            raise ValueError(f"window must be non-negative, got {self.window}")
        if self.window and not self.causal:
            raise ValueError("a sliding window needs a causal mask")
        if self.documents is not None:
            if any(d <= 0 for d in self.documents) or sum(self.documents) != self.seq_len:
                raise ValueError(f"document lengths {self.documents} must be positive and sum to seq_len {self.seq_len}")

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    @property
    def elem(self) -> int:
        return m.dtype_bytes(self.dtype)

    @property
    def masks(self) -> frozenset[str]:
        out = set()
        if self.causal:
            out.add("causal")
        if self.window and self.window < self.seq_len:
            out.add("window")
        if self.documents is not None and len(self.documents) > 1:
            out.add("documents")
        return frozenset(out)

    def doc_spans(self) -> list[tuple[int, int]]:
        """(start, end) of each document in one sequence."""
        spans, start = [], 0
        for length in self.documents or (self.seq_len,):
            spans.append((start, start + length))
            start += length
        return spans

    def visible_scores(self) -> int:
        """Visible (query, key) pairs of one (sequence, head): the exact element count."""
        total = 0
        for start, end in self.doc_spans():
            n = end - start
            if not self.causal:
                total += n * n
                continue
            w = self.window if self.window else n
            w = min(w, n)
            # rows 0..w-1 see i + 1 keys, the rest see w
            total += w * (w + 1) // 2 + (n - w) * w
        return total

    def key_range(self, row: int) -> tuple[int, int]:
        """[lo, hi] keys row `row` sees (inclusive)."""
        start, end = next((s, e) for s, e in self.doc_spans() if s <= row < e)
        if not self.causal:
            return start, end - 1
        lo = start if not self.window else max(start, row - self.window + 1)
        return lo, row

    def describe(self) -> str:
        mask = "causal" if self.causal else "full"
        if "window" in self.masks:
            mask += f" window {self.window}"
        if "documents" in self.masks:
            mask += f" {len(self.documents or ())} docs"
        if self.softcap:
            mask += f" softcap {self.softcap:g}"
        return (f"{self.batch}x{self.seq_len} tokens, {self.heads}/{self.kv_heads} heads of {self.head_dim}, "
                f"{mask}, {self.dtype}")


def visited_tiles(shape: AttentionShape, block_q: int, block_k: int, skips: frozenset[str] = frozenset(),
                  per_document: bool = False) -> int:
    """(query block, key block) tiles of one (sequence, head) a kernel computes: every tile
    with a visible score when it skips all masks, otherwise the tiles the masks it does not
    skip leave (a kernel that skips only causal computes every tile below the diagonal).
    `per_document`: each document is its own sequence with its own blocks (varlen)."""
    if per_document:
        total = 0
        for length in (shape.documents or (shape.seq_len,)):
            one = replace(shape, batch=1, seq_len=length, documents=None)
            total += visited_tiles(one, block_q, block_k, skips & {"causal", "window"})
        return total
    # what the kernel treats as masked: the masks it skips; the rest it computes in full
    seen = replace(
        shape,
        causal=shape.causal and "causal" in skips,
        window=shape.window if "window" in skips else 0,
        documents=shape.documents if "documents" in skips else None,
    )
    if seen.window and not seen.causal:  # a kernel cannot skip a window without the diagonal
        seen = replace(seen, window=0)
    s = shape.seq_len
    nk = math.ceil(s / block_k)
    total = 0
    for q0 in range(0, s, block_q):
        q1 = min(s, q0 + block_q) - 1
        # the rows of one block see one contiguous key range: [lo(q0), hi(q1)] (keys seen by the
        # block's rows are unions of intervals whose lower ends never decrease)
        lo, _ = seen.key_range(q0)
        _, hi = seen.key_range(q1)
        total += min(nk - 1, hi // block_k) - lo // block_k + 1
    return total


# ============================================================================ schedules


@dataclass(frozen=True)
class Schedule:
    """How one backend runs one direction: the tile and the CTA's warps, and what it skips.

    * `block_q` x `block_k`: the score tile one CTA computes per step; forward CTAs own
      `block_q` rows and stream keys, backward CTAs own `block_k` keys and stream queries;
    * `warps`: warps per CTA that do the math; `producer_warps`: warps that only issue loads
      (TMA) at `PRODUCER_REGS` registers each;
    * `stages`: buffers of the streamed tile in shared memory;
    * `instr`: "mma.sync" (a warp's 16-row MMA, Ampere; each warp reads whole staged tiles) or
      "wgmma" (Hopper, a warpgroup's 64-row MMA reading its operand from shared memory);
    * `q_in_regs`: the forward keeps its Q fragment in registers (else re-read from shared memory
      every step);
    * `overlap`: fraction of the softmax time hidden under the tensor cores' (0: serial);
    * `skips`: the masks whose empty tiles the kernel never visits; `skip_block`: the tile
      size its mask is known at (FlexAttention's BlockMask: 128 x 128);
    * `supports`: options the kernel can run at all ("window", "softcap", "documents");
    * `dq`: backward only: "atomic" (fp32 dQ added into an L2-resident accumulator for every
      tile, then converted) or "separate" (a dQ loop in its own CTAs recomputes the scores);
    * `gqa_expand`: backward computes dK, dV per query head and sums the group after;
    * `recompute_forward`: the backward runs the forward again first (coda-ir's flex backward);
    * `launches`: kernel launches per call; `source`: where the parameters come from."""

    backend: str
    direction: str
    block_q: int
    block_k: int
    warps: int
    stages: int = 2
    instr: str = "mma.sync"
    q_in_regs: bool = False
    overlap: float = 0.0
    producer_warps: int = 0
    skips: frozenset[str] = frozenset({"causal"})
    skip_block: tuple[int, int] | None = None
    per_document: bool = False
    supports: frozenset[str] = frozenset()
    dq: str = "atomic"
    gqa_expand: bool = False
    recompute_forward: bool = False
    launches: int = 1
    source: str = ""

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def readers(self) -> float:
        """How many times a staged shared-memory tile is read: wgmma reads it once per warpgroup;
        mma.sync once per warp that multiplies with it: every warp in the forward (warps split the
        query rows), about sqrt(warps) in the backward (warps tile both dimensions of its products)."""
        if self.instr != "mma.sync":
            return max(1, self.warps // 4)
        return float(self.warps) if self.direction == "fwd" else math.sqrt(self.warps)

    def describe(self) -> str:
        extra = f"+{self.producer_warps}p" if self.producer_warps else ""
        return f"{self.backend} {self.block_q}x{self.block_k} w{self.warps}{extra}s{self.stages}"


def schedule(backend: str, direction: str, shape: AttentionShape, gpu: m.GPU) -> Schedule:
    """The schedule `backend` runs `direction` ("fwd" or "bwd") of `shape` with on `gpu`.
    Raises ValueError for a backend that does not exist or cannot run this mask."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown attention backend '{backend}' (known: {', '.join(BACKENDS)})")
    if direction not in ("fwd", "bwd"):
        raise ValueError(f"attention direction must be 'fwd' or 'bwd', got '{direction}'")
    hopper = gpu.arch == "hopper"
    d = shape.head_dim
    fwd = direction == "fwd"
    if backend == "flash":
        # FlashAttention-2 (vendored in PyTorch): kernel traits by head dim (flash_fwd/bwd_launch_template.h)
        if fwd:
            bq, bk = (128, 128) if d <= 64 else (128, 64)
            s = Schedule("flash", "fwd", bq, bk, warps=4, stages=1, q_in_regs=False)
        else:
            bq, bk = (128, 128) if d <= 64 else (64, 128)
            s = Schedule("flash", "bwd", bq, bk, warps=8, stages=1, dq="atomic", gqa_expand=shape.group > 1,
                         launches=3)  # D pre-pass, the kernel, dQ convert
        s = replace(s, source="FlashAttention-2 kernel traits (flash_fwd/bwd_launch_template.h)")
    elif backend == "varlen":
        s = replace(schedule("flash", direction, replace(shape, documents=None), gpu), backend="varlen",
                    per_document=True, supports=frozenset({"documents"}),
                    source="FlashAttention-2 varlen (cu_seqlens): documents as separate sequences")
    elif backend == "cudnn":
        if hopper:
            if fwd:
                s = Schedule("cudnn", "fwd", 128, 128, warps=8, producer_warps=4, stages=2, instr="wgmma",
                             q_in_regs=False, overlap=0.8)
            else:
                s = Schedule("cudnn", "bwd", 64, 128, warps=8, producer_warps=4, stages=2, instr="wgmma",
                             overlap=0.5, dq="atomic", launches=2)
            s = replace(s, source="assumed FlashAttention-3-like (cuDNN's kernels are not public)")
        else:
            s = replace(schedule("flash", direction, shape, gpu), backend="cudnn",
                        source="assumed FlashAttention-2-like on Ampere (cuDNN's kernels are not public)")
    elif backend == "materialized":
        if fwd:
            raise ValueError("attention backend 'materialized' runs backwards only (the forward is FlexAttention's)")
        rows = _materialized_row_block(shape)
        s = Schedule("materialized", "bwd", rows, shape.seq_len, warps=4, skips=frozenset({"causal"}),
                     supports=frozenset({"window", "softcap"}),
                     launches=MATERIALIZED_LAUNCHES_PER_BLOCK * -(-shape.seq_len // rows) + 1,
                     source="cuBLAS GEMMs + one Inductor-fused pass per block of query rows "
                            "(coda_ir/runtime/attention.py materialized_backward)")
        needed = {"window"} & shape.masks | ({"softcap"} if shape.softcap else set()) | {"documents"} & shape.masks
        if needed - s.supports:
            raise ValueError(f"attention backend 'materialized' cannot run {', '.join(sorted(needed - s.supports))}")
        return s  # no tile of its own to fit: the GEMMs are cuBLAS's
    else:  # "flex"
        instr = "wgmma" if hopper else "mma.sync"
        if fwd:
            s = Schedule("flex", "fwd", 128, 64, warps=4 if d <= 64 else 8, stages=3, instr=instr,
                         q_in_regs=not hopper, overlap=0.3)
        else:
            s = Schedule("flex", "bwd", 64, 128, warps=8, stages=3, instr=instr, overlap=0.3, dq="separate",
                         recompute_forward=True, launches=2)  # + the dq/dkdv kernel's D pre-pass
        s = replace(s, skips=frozenset({"causal", "window", "documents"}), skip_block=(128, 128),
                    supports=frozenset({"window", "softcap", "documents"}),
                    source="FlexAttention Triton template defaults (torch 2.11); BlockMask blocks 128x128")
    s = _fit(s, shape, gpu)
    needed = {"window"} & shape.masks | ({"softcap"} if shape.softcap else set()) | {"documents"} & shape.masks
    missing = needed - s.supports
    if missing:
        raise ValueError(f"attention backend '{backend}' cannot run {', '.join(sorted(missing))} "
                         f"(backends that can: {', '.join(b for b in BACKENDS if _can_run(b, needed, direction))})")
    return s


def _fit(sched: Schedule, shape: AttentionShape, gpu: m.GPU) -> Schedule:
    """The tile the kernel really runs for this head dim: the block sizes above are the kernels'
    choices up to head dim 128; larger heads get smaller tiles (FlashAttention-2's traits and
    FlexAttention's configs for head dim 256 halve the key block, then the query block) until
    the accumulators fit the 255 registers of a thread, and a configuration that does not fit
    one SM's shared memory does not compile (Triton: out of resources), so fewer stages, then
    smaller query blocks."""
    while occupancy(sched, shape, gpu).spills and (sched.block_k > 32 or sched.block_q > 16):
        if sched.block_k > 32:
            sched = replace(sched, block_k=sched.block_k // 2)
        else:
            sched = replace(sched, block_q=sched.block_q // 2)
    while occupancy(sched, shape, gpu).ctas_per_sm == 0:
        if sched.stages > 1:
            sched = replace(sched, stages=sched.stages - 1)
        elif sched.block_q > 16:
            sched = replace(sched, block_q=sched.block_q // 2)
        else:
            break
    return sched


def _can_run(backend: str, needed: set[str], direction: str) -> bool:
    if backend == "materialized" and direction == "fwd":
        return False  # a backward only
    return {"flex": {"window", "softcap", "documents"}, "varlen": {"documents"},
            "materialized": {"window", "softcap"}}.get(backend, set()) >= needed


def materialized_row_blocks(heads: int, seq_len: int) -> list[tuple[int, int]]:
    """Query-row blocks [r0, r1) of the materialized backward whose fp32 scores over `heads` heads
    (every sequence's) fit MATERIALIZED_SCORE_BYTES: equal blocks but the last, so that one
    compiled pass serves them."""
    per_row = heads * seq_len * 4
    count = max(1, -(-(per_row * seq_len) // MATERIALIZED_SCORE_BYTES))
    size = -(-seq_len // count)
    return [(r, min(r + size, seq_len)) for r in range(0, seq_len, size)]


def _materialized_row_block(shape: AttentionShape) -> int:
    """Query rows per block of the materialized backward."""
    r0, r1 = materialized_row_blocks(shape.batch * shape.heads, shape.seq_len)[0]
    return r1 - r0


def default_backend(shape: AttentionShape, gpu: m.GPU, direction: str = "fwd") -> str:
    """The backend coda-ir's runtime runs `shape` with (coda_ir/runtime/attention.py): a window,
    a softcap or documents run FlexAttention, except a softcap's backward without documents (the
    scores materialized); plain masks run SDPA's own choice, cuDNN on Hopper (bench/RESULTS.md),
    flash on Ampere."""
    if shape.softcap and direction == "bwd" and "documents" not in shape.masks:
        return "materialized"
    if shape.softcap or {"window", "documents"} & shape.masks:
        return "flex"
    return "cudnn" if gpu.arch == "hopper" else "flash"


# ============================================================================ occupancy


@dataclass(frozen=True)
class Occupancy:
    regs_per_thread: int  # allocated (rounded up; 255 at most)
    regs_needed: int  # before rounding and capping: above 255 the kernel spills
    smem_per_cta: int
    ctas_per_sm: int
    warps_per_sm: int
    limit: str  # "registers", "smem", "warps" or "ctas"

    @property
    def spills(self) -> bool:
        return self.regs_needed > 255


def occupancy(sched: Schedule, shape: AttentionShape, gpu: m.GPU) -> Occupancy:
    """Registers per thread and shared memory per CTA of the schedule, and how many CTAs (warps)
    fit on one SM."""
    d, b = shape.head_dim, shape.elem
    bq, bk = sched.block_q, sched.block_k
    words = b / 4  # 32-bit registers per element of a bf16 fragment
    if sched.direction == "fwd":
        fp32 = bq * d + bq * bk  # output accumulator + score tile (P converted in place)
        frag = bq * d * words if sched.q_in_regs else 0.0
        smem = (bq * d * b if not sched.q_in_regs or sched.instr == "wgmma" else 0) + sched.stages * 2 * bk * d * b
    else:
        fp32 = 2 * bk * d + 2 * bq * bk  # dK, dV accumulators + S/P and dP tiles
        frag = 0.0
        # K, V held; Q, dO (and lse, D) streamed; P and dS staged as the transposed products' operands
        smem = 2 * bk * d * b + sched.stages * (2 * bq * d * b + 2 * bq * 4) + 2 * bq * bk * b
    needed = math.ceil((fp32 + frag) / sched.threads) + m.REG_OVERHEAD
    regs = min(gpu.regs_per_thread, REG_ALLOC_UNIT * math.ceil(needed / REG_ALLOC_UNIT))
    regs_per_cta = regs * sched.threads + PRODUCER_REGS * 32 * sched.producer_warps
    warps_per_cta = sched.warps + sched.producer_warps
    limits = {
        "registers": gpu.regs_per_sm // regs_per_cta,
        "smem": (gpu.smem_per_sm // smem) if smem else gpu.max_ctas_per_sm,
        "warps": gpu.max_warps_per_sm // warps_per_cta,
        "ctas": gpu.max_ctas_per_sm,
    }
    limit = min(limits, key=lambda k: (limits[k], list(limits).index(k)))
    ctas = max(0, limits[limit])
    return Occupancy(regs, needed, int(smem), ctas, ctas * warps_per_cta, limit)


def napkin_warps_per_sm(gpu: m.GPU, head_dim: int = 128, block_k: int = 64, q_in_regs: bool = True) -> Occupancy:
    """Warps per SM of the per-warp schedule (docs/NAPKIN_ATTENTION.md): each warp owns 16 query
    rows (one m16 MMA row block) and holds its output accumulator, scores and (with `q_in_regs`)
    its Q fragment; K/V tiles are staged once per SM and shared by all its warps, so shared memory
    no longer caps the warp count and registers do."""
    shape = AttentionShape(1, 4096, 1, 1, head_dim)
    sched = Schedule("napkin", "fwd", 16, block_k, warps=1, stages=2, q_in_regs=q_in_regs)
    one = occupancy(sched, shape, gpu)
    by_regs = gpu.regs_per_sm // (one.regs_per_thread * 32)
    shared = sched.stages * 2 * block_k * head_dim * shape.elem  # one K/V ring for the whole SM
    per_warp_q = 0 if q_in_regs else 16 * head_dim * shape.elem
    by_smem = (gpu.smem_per_sm - shared) // per_warp_q if per_warp_q else gpu.max_warps_per_sm
    warps = min(by_regs, by_smem, gpu.max_warps_per_sm)
    limit = "registers" if warps == by_regs else ("smem" if warps == by_smem else "warps")
    return Occupancy(one.regs_per_thread, one.regs_needed, shared + per_warp_q * warps, 1, warps, limit)


# ============================================================================ cost


@dataclass(frozen=True)
class AttentionCall:
    """What an `io_model.Kernel` of kind "attention" carries: the shape, the backend (None: the
    runtime's default for the GPU) and the direction."""

    shape: AttentionShape
    direction: str = "fwd"
    backend: str | None = None

    def kernel_cost(self, kernel: m.Kernel, gpu: m.GPU) -> m.KernelCost:
        """What `io_model.kernel_cost` returns for the kernel carrying this call."""
        return attention_kernel_cost(kernel, gpu)


@dataclass(frozen=True)
class AttentionCost:
    shape: AttentionShape
    schedule: Schedule
    occupancy: Occupancy
    tiles: int  # visited tiles over all sequences and query heads
    matmul_flops: float  # executed
    useful_flops: float  # visible scores only, the matmuls of the direction (4 d / 10 d per score)
    sfu_ops: float
    alu_flops: float
    read_bytes: int  # unique: what the call's operands and results occupy
    write_bytes: int
    hbm_bytes: float
    l2_bytes: float
    smem_bytes: float  # shared-memory traffic (writes + reads)
    times: dict[str, float] = field(default_factory=dict)
    wave_tail: float = 1.0
    launch_s: float = 0.0
    forward: "AttentionCost | None" = None  # the forward a backward reruns first

    @property
    def time_s(self) -> float:
        own = max(self.times.values()) * self.wave_tail + self.launch_s
        return own + (self.forward.time_s if self.forward is not None else 0.0)

    @property
    def bound(self) -> str:
        return max(self.times, key=lambda k: self.times[k])

    @property
    def tflops(self) -> float:
        """Useful TFLOP/s (the figure attention benchmarks quote)."""
        return self.useful_flops / self.time_s / 1e12 if self.time_s else 0.0

    def summary(self) -> str:
        if self.schedule.backend == "materialized":
            return (f"materialized bwd: {self.tiles} blocks of {self.schedule.block_q} query rows, "
                    f"{self.matmul_flops / 1e9:.1f} GF in cuBLAS GEMMs, HBM {self.hbm_bytes / 1e6:.1f} MB, "
                    f"{self.time_s * 1e6:.1f} us = {self.tflops:.0f} TFLOP/s")
        o = self.occupancy
        rerun = " (+ its forward rerun)" if self.forward is not None else ""
        return (f"{self.schedule.describe()} {self.schedule.direction}{rerun}: {o.ctas_per_sm} CTA/SM = {o.warps_per_sm} "
                f"warps/SM ({o.limit}-bound, {o.regs_per_thread} regs{' SPILLS' if o.spills else ''}, "
                f"{o.smem_per_cta / 1024:.0f} KB smem/CTA), {self.tiles} tiles, HBM {self.hbm_bytes / 1e6:.1f} MB, "
                f"L2 {self.l2_bytes / 1e6:.1f} MB, smem {self.smem_bytes / 1e6:.1f} MB, "
                f"{self.matmul_flops / 1e9:.1f} GF ({self.useful_flops / 1e9:.1f} useful), bound {self.bound}, "
                f"{self.time_s * 1e6:.1f} us = {self.tflops:.0f} TFLOP/s")


def _mma_rate(sched: Schedule, shape: AttentionShape, gpu: m.GPU) -> float:
    rate = gpu.gemm_rate(shape.dtype)
    if sched.instr == "mma.sync" and gpu.arch == "hopper":
        rate *= MMA_SYNC_ON_HOPPER
    if sched.instr == "wgmma" and gpu.arch != "hopper":
        raise ValueError(f"{sched.backend}: wgmma needs a Hopper GPU, {gpu.name} is {gpu.arch}")
    return rate


def attention_cost(shape: AttentionShape, direction: str = "fwd", backend: str | None = None,
                   gpu: m.GPU | str | None = None) -> AttentionCost:
    """The predicted cost of one attention call (both directions: call it twice)."""
    gpu = m.as_gpu(gpu)
    backend = backend or default_backend(shape, gpu, direction)
    sched = schedule(backend, direction, shape, gpu)
    if sched.backend == "materialized":
        return _materialized_cost(shape, sched, gpu)
    occ = occupancy(sched, shape, gpu)
    B, S, H, KV, d, b = shape.batch, shape.seq_len, shape.heads, shape.kv_heads, shape.head_dim, shape.elem
    bq, bk = sched.block_q, sched.block_k
    # tiles: at the mask's granularity when the kernel knows it per skip block, then in its own tiles
    if sched.skip_block is not None:
        sq, sk = sched.skip_block
        tiles_per_head = visited_tiles(shape, sq, sk, sched.skips, sched.per_document) * (sq * sk) / (bq * bk)
    else:
        tiles_per_head = visited_tiles(shape, bq, bk, sched.skips, sched.per_document)
    tiles = tiles_per_head * B * H
    scores = tiles * bq * bk  # computed, masked or not
    visible = shape.visible_scores() * B * H
    fwd = direction == "fwd"
    per_score = FWD_MATMUL_FLOPS if fwd else (BWD_SEPARATE_DQ_FLOPS if sched.dq == "separate" else BWD_MATMUL_FLOPS)
    matmul = per_score * d * scores
    useful = (FWD_MATMUL_FLOPS if fwd else BWD_MATMUL_FLOPS) * d * visible
    recompute_scores = 2 if (not fwd and sched.dq == "separate") else 1  # the dQ loop recomputes P
    sfu = scores * recompute_scores * (1 + (1 if shape.softcap else 0))
    alu = scores * recompute_scores * ((FWD_SOFTMAX_ALU if fwd else BWD_SOFTMAX_ALU)
                                       + (SOFTCAP_ALU + (0 if fwd else SOFTCAP_BWD_ALU) if shape.softcap else 0))

    # ---- unique bytes: what the call reads and writes once
    q_bytes, kv_bytes = B * S * H * d * b, B * S * KV * d * b  # Q; each of K and V
    o_bytes, lse_bytes = B * S * H * d * b, B * S * H * 4
    if fwd:
        reads, writes = q_bytes + 2 * kv_bytes, o_bytes + lse_bytes
        streamed_per_tile = 2 * bk * d * b  # K and V
        held_once = q_bytes
        streamed_unique = 2 * kv_bytes
        ctas_per_head = math.ceil(S / bq)
    else:
        reads = q_bytes + 2 * kv_bytes + o_bytes + lse_bytes + o_bytes  # + O and dO
        writes = q_bytes + 2 * kv_bytes  # dQ, dK, dV
        streamed_per_tile = 2 * bq * d * b + 2 * bq * 4  # Q, dO, lse, D
        held_once = 2 * kv_bytes * shape.group  # each q head's CTAs load its kv head's K, V
        streamed_unique = 2 * q_bytes
        ctas_per_head = math.ceil(S / bk)
    extra_hbm = 0.0
    l2_extra = 0.0
    if not fwd:
        # D = rowsum(dO * O): reads O, dO, writes D (fp32)
        extra_hbm += 2 * o_bytes + lse_bytes
        if sched.dq == "atomic":
            dq_acc = B * S * H * d * 4
            extra_hbm += dq_acc + dq_acc + q_bytes  # zero it, read it to convert, (dQ written: in `writes`)
            l2_extra += tiles * bq * d * 4 * 2  # every tile adds its fp32 dQ block: read-modify-write in L2
        if sched.gqa_expand:
            expanded = 2 * B * S * H * d * b
            extra_hbm += expanded * 2  # written per q head, read back to sum over the group
    # ---- L2 -> SM: the streamed operand once per visited tile, the held one once per CTA
    l2 = tiles * streamed_per_tile + held_once + writes + l2_extra
    # ---- HBM: the streamed operand once if the heads in flight keep theirs in L2, else per tile
    slots = max(1, occ.ctas_per_sm) * gpu.sms
    heads_in_flight = max(1, math.ceil(slots / ctas_per_head))
    per_head_stream = streamed_unique / (B * (KV if fwd else H))
    in_flight = heads_in_flight / (shape.group if fwd else 1) * per_head_stream
    streamed_hbm = streamed_unique if in_flight <= gpu.l2_reuse_fraction * gpu.l2_bytes else tiles * streamed_per_tile
    hbm = (reads - streamed_unique) + streamed_hbm + writes + extra_hbm
    # ---- shared memory: each staged tile written once, read by every reader
    if fwd:
        staged = streamed_per_tile
        q_reads = 0.0 if sched.q_in_regs else bq * d * b  # each warp reads its own Q rows once per tile
        smem = tiles * (staged * (1 + sched.readers) + q_reads)
    else:
        staged = 2 * bq * d * b + 2 * bq * bk * b  # Q, dO in; P, dS out and back in
        kv_reads = 2 * bk * d * b * sched.readers
        smem = tiles * (staged * (1 + sched.readers) + kv_reads)
    # ---- time
    rate = _mma_rate(sched, shape, gpu)
    t_mma = matmul / rate
    t_softmax = sfu / gpu.sfu_rate + alu / gpu.simt_flops
    t_core = max(t_mma, t_softmax) + (1.0 - sched.overlap) * min(t_mma, t_softmax)
    times = {"mma" if t_mma >= t_softmax else "softmax": t_core, "hbm": hbm / gpu.hbm_bw, "l2": l2 / gpu.l2_bw,
             "smem": smem / gpu.smem_bw}
    units = B * H * ctas_per_head
    waves = units / slots
    tail = math.ceil(waves) / waves if waves < 4 else 1.0  # many waves: longest-first ordering evens the tail
    forward = None
    if sched.recompute_forward:
        forward = attention_cost(shape, "fwd", backend, gpu)
    return AttentionCost(shape, sched, occ, int(round(tiles)), matmul, useful, sfu, alu, int(reads), int(writes),
                         hbm, l2, smem, times, tail, sched.launches * gpu.launch_s, forward)


def _materialized_cost(shape: AttentionShape, sched: Schedule, gpu: m.GPU) -> AttentionCost:
    """The materialized backward: per block of R query rows every sequence's and head's scores
    against the keys up to the block's last row (causal) or all of them, five GEMMs of 2 d FLOPs
    per score (s, dp, dq, dk, dv) at the GEMM rate, then MATERIALIZED_BYTES_PER_SCORE per score at
    the HBM rate: kernels one after another, so the two times add."""
    B, S, H, KV, d, b = shape.batch, shape.seq_len, shape.heads, shape.kv_heads, shape.head_dim, shape.elem
    rows = sched.block_q
    scores = sum((min(r + rows, S) - r) * (min(r + rows, S) if shape.causal else S) for r in range(0, S, rows)) * B * H
    visible = shape.visible_scores() * B * H
    matmul = 2 * 5 * d * scores
    useful = BWD_MATMUL_FLOPS * d * visible
    sfu = scores * 2  # exp and tanh
    alu = scores * (BWD_SOFTMAX_ALU + SOFTCAP_ALU + SOFTCAP_BWD_ALU)
    q_bytes, kv_bytes, o_bytes = B * S * H * d * b, B * S * KV * d * b, B * S * H * d * b
    reads = q_bytes + 2 * kv_bytes + 2 * o_bytes + B * S * H * 4
    writes = q_bytes + 2 * kv_bytes
    operands = 2 * (q_bytes + o_bytes) * 2 + 2 * kv_bytes * 2 + 2 * B * S * KV * d * 4 * 2  # copies, fp32 dk / dv
    hbm = scores * MATERIALIZED_BYTES_PER_SCORE + reads + writes + operands
    t_gemm = matmul / gpu.gemm_rate(shape.dtype)
    t_pass = (scores * MATERIALIZED_BYTES_PER_SCORE + operands) / gpu.hbm_bw
    occ = Occupancy(0, 0, 0, 1, sched.warps, "cuBLAS and Inductor kernels")
    return AttentionCost(shape, sched, occ, -(-S // rows), matmul, useful, sfu, alu, int(reads), int(writes), hbm,
                         hbm, 0.0, {"mma": t_gemm + t_pass}, 1.0, sched.launches * gpu.launch_s, None)


def step_cost(shape: AttentionShape, backend: str | None = None, gpu: m.GPU | str | None = None) -> tuple[AttentionCost, AttentionCost]:
    """(forward, backward) of one training step's attention."""
    return attention_cost(shape, "fwd", backend, gpu), attention_cost(shape, "bwd", backend, gpu)


# ============================================================================ the IO model's kernels


def attention_kernel(name: str, shape: AttentionShape, direction: str = "fwd", backend: str | None = None,
                     ops: Sequence[str] = (), notes: Sequence[str] = ()) -> m.Kernel:
    """An `io_model.Kernel` for an attention step; `io_model.kernel_cost` prices it here."""
    B, S, H, KV, d = shape.batch, shape.seq_len, shape.heads, shape.kv_heads, shape.head_dim
    qkv = m.Tensor("qkv", (B * S, (H + 2 * KV) * d), shape.dtype)
    out = m.Tensor("out", (B * S, H * d), shape.dtype)
    lse = m.Tensor("lse", (B * S * H,), "f32")
    if direction == "fwd":
        reads, writes = (qkv,), (out, lse)
    else:
        reads, writes = (qkv, out, lse, m.Tensor("dout", out.shape, shape.dtype)), (m.Tensor("dqkv", qkv.shape, shape.dtype),)
    return m.Kernel(name, "attention" if direction == "fwd" else "attn_grad", reads, writes, ops=tuple(ops),
                    notes=tuple(notes), attention=AttentionCall(shape, direction, backend))


def attention_kernel_cost(kernel: m.Kernel, gpu: m.GPU) -> m.KernelCost:
    """`io_model.kernel_cost` of an attention kernel: the attention model's bytes and times in
    the GEMM model's record (GEMM FLOPs = the tensor-core FLOPs; epilogue = softmax ALU)."""
    call = kernel.attention
    assert isinstance(call, AttentionCall)
    cost = attention_cost(call.shape, call.direction, call.backend, gpu)
    times = dict(cost.times)
    times = {k: v * cost.wave_tail for k, v in times.items()}
    exposed = cost.forward.time_s if cost.forward is not None else 0.0
    weight = 0
    sched = cost.schedule
    label = f"{SCHEDULE_NOTE}{sched.backend} {sched.block_q}x{sched.block_k}"
    return m.KernelCost(
        kernel=replace(kernel, notes=(*kernel.notes, label)), tile=None, gemm_flops=cost.matmul_flops, epilogue_flops=cost.alu_flops, sfu_ops=cost.sfu_ops,
        read_bytes=cost.read_bytes, write_bytes=cost.write_bytes, weight_bytes=weight, hbm_bytes=cost.hbm_bytes,
        l2_bytes=cost.l2_bytes, smem_bytes=cost.occupancy.smem_per_cta, regs_per_thread=cost.occupancy.regs_per_thread,
        fits=not cost.occupancy.spills and cost.occupancy.ctas_per_sm > 0, times=times, launch_s=cost.launch_s,
        exposed_s=exposed,
    )


def attention_summary(kernel: m.Kernel, gpu: m.GPU) -> str:
    call = kernel.attention
    assert isinstance(call, AttentionCall)
    return attention_cost(call.shape, call.direction, call.backend, gpu).summary()


SCHEDULE_NOTE = "schedule "


def schedule_label(kernel: m.Kernel, cost: m.KernelCost) -> str:
    """The tile column of io-report for an attention kernel: backend and tile, e.g. `cudnn 128x128`."""
    for note in cost.kernel.notes:
        if note.startswith(SCHEDULE_NOTE):
            return note.removeprefix(SCHEDULE_NOTE)
    return "attention"


# ============================================================================ the paper's claims


def claims_table() -> str:
    """Warps per SM of FlashAttention-2's forward and of the per-warp schedule, on the shipped
    GPUs, and the predicted forward throughput of each backend on Hopper
    (`python -m coda_ir.analysis.attention_model`; docs/NAPKIN_ATTENTION.md quotes it)."""
    lines = ["warps per SM (forward, bf16; limit in parentheses):",
             f"  {'gpu':<5} {'head dim':>8}  {'FlashAttention-2 (128-row CTAs, 4 warps)':<42} per-warp schedule, Q in registers / in smem"]
    for name in ("a100", "h100"):
        gpu = m.load_gpu(name)
        for d in (64, 128):
            shape = AttentionShape(1, 4096, 32, 32, d)
            fa2 = occupancy(schedule("flash", "fwd", shape, gpu), shape, gpu)
            regs, smem = napkin_warps_per_sm(gpu, d, 64, True), napkin_warps_per_sm(gpu, d, 64, False)
            lines.append(f"  {name:<5} {d:>8}  {f'{fa2.warps_per_sm} ({fa2.ctas_per_sm} CTAs, {fa2.limit}, {fa2.regs_per_thread} regs)':<42} "
                         f"{regs.warps_per_sm} ({regs.regs_per_thread} regs) / {smem.warps_per_sm} ({smem.regs_per_thread} regs)")
    lines.append("predicted forward throughput, causal, 2 x 4096 tokens, 32/8 heads (useful TFLOP/s; GEMM rate of the constants):")
    for name in ("a100", "h100", "h200"):
        gpu = m.load_gpu(name)
        cells = []
        for backend in ("cudnn", "flash", "flex"):
            for d in (64, 128):
                cost = attention_cost(AttentionShape(2, 4096, 32, 8, d), "fwd", backend, gpu)
                cells.append(f"{backend} d{d} {cost.tflops:.0f} ({cost.bound})")
        lines.append(f"  {name:<5} (GEMM {gpu.gemm_rate('bf16') / 1e12:.0f}): " + ", ".join(cells))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m coda_ir.analysis.attention_model
    print(claims_table(), end="")
