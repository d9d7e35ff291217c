"""`nn-plan`: the IO model's choices, made once at the nn level and recorded as typed properties.

Which form a fused operator takes depends on the GEMM whose epilogue will carry it (its M, N,
K), and that GEMM is still visible here: an `nn.rope` or `nn.head_rms_norm` reads the result of
an `nn.linear` / `nn.matmul` / `nn.gemm`, possibly through other such epilogue ops (Qwen3:
linear -> q-norm -> k-norm -> rope). This pass asks `coda_ir.analysis.io_model` and writes the
answer on the op (`nn.PLAN_PROPERTIES`); `convert-nn-to-coda` builds what the plan says and
`coda-fuse` obeys it, so no later pass re-recognizes an operator in lowered arithmetic:

* `cos_sin_table` on `nn.rope` / `nn.rope_grad` (`io_plans.rope_table_plan`): rotation
  coefficients from [M, hd/2] cos/sin tables that one small kernel computes, or libdevice
  sin/cos per pair in every tile of the GEMM's epilogue; a RoPE whose input no GEMM produces (the
  backward's rotation of the attention gradient) the same in its elementwise pass
  (`io_plans.rope_pass_plan`);
* `in_producer_epilogue = false` on `nn.head_rms_norm` (`io_plans.qk_norm_tile_width`): the
  cheapest tile width does not hold whole heads, so the norm stays its own kernel;
* `stats_in_producer_epilogue = false` on `nn.rms_norm` (`io_plans.stats_plan`): a row kernel
  beats per-tile statistics in the producing GEMM's epilogue plus a fold, so
  `coda-defer-norms` leaves the norm alone (only where a GEMM produces its input, another
  consumes it, and a row kernel can hold its rows);
* `in_producer_epilogue = false` on `nn.swiglu_grad` / `nn.geglu_grad` whose dy a GEMM produces
  (`io_plans.gated_grad_plan`): the plain GEMM storing dy plus one elementwise pass (dz and the
  z . dz row partials, the pair halves read as [BM, BN] tiles) beats the epilogue, which holds z
  and dz beside the accumulator (spills) after every tile's mainloop. Where nn-autodiff rebuilds the
  gated output g for the weight gradient it made this same decision first and recorded it (the
  rebuild joins that pass): a recorded decision is obeyed, not priced again;
* `in_producer_epilogue = false` on `nn.rms_norm_grad` with its row statistic given (`hdh`: dx
  elementwise in dy) whose dy a GEMM produces (`io_plans.norm_grad_plan`): the plain GEMM storing
  dy in f32 plus one elementwise pass reading it unrounded (dx, the dw column partials, the
  residual add that joins them and, where the backward rebuilds the norm's output for a weight
  gradient, that output) beats the epilogue, whose x and dres loads, spills and column reduction
  follow every tile's mainloop at one CTA per SM;
* `in_producer_epilogue = false` on `nn.cross_entropy` / `nn.cross_entropy_fwd` whose logits a
  GEMM produces (`io_plans.cross_entropy_plan`): the plain GEMM storing the logits plus one
  `whole rows` pass (each row's log-sum-exp and target logit, a row per program) beats the
  epilogue, whose exps and row reductions follow every tile's mainloop at one CTA per SM, where
  the logits are stored anyway (a differentiated forward saves them: the LLaMA-1B LM head's GEMM
  + pass 6.10 + 0.77 ms vs 7.65 with the epilogue on the H100); where nothing else reads them the
  epilogue, which then stores only partials, stays (the 8B LM head forward 12.98 vs 14.57 ms
  timed back to back). (`nn.layer_norm_grad` has no such form: its dx needs mean(q) and mean(q n)
  over whole rows of dy, so only its statistics pass can join the producer's epilogue, which keeps
  storing dy; that is a different trade, not planned here.)

Each decision is stated as a remark (informational) with both predicted costs. Options:
`cost-model=false` records no decision (sin/cos in the epilogue, QK-norm and gated backward fused
wherever legal, norm statistics deferred wherever they can be); `rope-table=always|never` forces the
RoPE choice (tests, experiments); `gated-grad=epilogue|separate` forces the gated backward's, `norm-grad=epilogue|separate` the RMSNorm
backward's, `cross-entropy=epilogue|separate` the cross-entropy forward's (all `auto` by default); `epilogues=false` skips the RoPE and QK-norm plans and
`norm-stats=false` the statistics plan (nn-to-coda turns them off with `fuse=false` and
`defer-norms=false`: nothing would read them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.context import Context
from xdsl.dialects.builtin import BoolAttr, ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from coda_ir import remarks
from coda_ir.diagnostics import location_of
from coda_ir.dialects import nn
from coda_ir.dialects.element_types import element_name
from coda_ir.tiling import TMA_TILE_MIN_COLS
from coda_ir.transforms.defer_norms import ELEMENTWISE_NN, gemm_consumes, gemm_produced
from coda_ir.transforms.kernel_builder import shape_of
from coda_ir.transforms.lower_nn import prop_value, row_kernel_fits
from coda_ir.transforms.target_machine import DEFAULT_GPU, target_gpu

if TYPE_CHECKING:
    from coda_ir.analysis.io_model import GPU

ROPE_TABLE_MODES = ("auto", "always", "never")
GATED_GRAD_MODES = ("auto", "epilogue", "separate")
NORM_GRAD_MODES = ("auto", "epilogue", "separate")
CROSS_ENTROPY_MODES = ("auto", "epilogue", "separate")
GEMMS = (nn.LinearOp, nn.MatmulOp, nn.GemmOp)
EPILOGUE_CHAIN = (nn.HeadRMSNormOp, nn.RoPEOp)  # ops that ride in the producer's epilogue


def producing_gemm(value: SSAValue) -> Operation | None:
    """The GEMM whose epilogue `value`'s consumer would join: its producer, seen through the
    epilogue ops that fuse into the same GEMM first (QK-norms, RoPE)."""
    owner = value.owner
    while isinstance(owner, EPILOGUE_CHAIN):
        owner = owner.operands[0].owner
    return owner if isinstance(owner, GEMMS) else None


def gemm_shape(gemm: Operation) -> tuple[int, int, int]:
    """(M, N, K) of an nn GEMM."""
    m, n = gemm.results[0].type.get_shape()  # type: ignore[attr-defined]
    a = gemm.operands[0].type
    assert isinstance(a, TensorType)
    rows, cols = a.get_shape()
    k = rows if isinstance(gemm, nn.GemmOp) and prop_value(gemm, "transpose_a") else cols
    return m, n, k


def producer_k(value: SSAValue, depth: int = 4) -> int | None:
    """The contraction size of the GEMM that produces `value` (through elementwise ops)."""
    owner = value.owner
    if isinstance(owner, nn.LinearOp):
        return shape_of(owner.x)[1]
    if isinstance(owner, nn.MatmulOp):
        return shape_of(owner.a)[1]
    if depth > 0 and isinstance(owner, ELEMENTWISE_NN):
        for v in owner.operands:
            if len(shape_of(v)) == 2:
                k = producer_k(v, depth - 1)
                if k is not None:
                    return k
    return None


def _dtype(value: SSAValue) -> str:
    name = element_name(value.type.get_element_type())  # type: ignore[attr-defined]
    return name if name in ("bf16", "f16", "f32") else "bf16"


def _describe(gemm: Operation) -> str:
    return f"'{gemm.name}' ({location_of(gemm)})"


def _pairs_fit_tiles(op: Operation, interleave: bool) -> bool:
    """RoPE's pairs can sit in power-of-two column tiles of its GEMM (so the rotation can join the
    GEMM's epilogue at all): adjacent pairs, groups of a power-of-two rotary_dim (pairs
    (i, i + rd/2); rd = head_dim unless the RoPE is partial), or (coda-interleave on) those
    pairs made adjacent by interleaving the GEMM's columns. A "half" rotation whose rotary_dim
    does not divide head_dim (Phi-4-mini's 96 of 128: `coda.pair_map period hd`) is never
    interleaved; its pairs fit when whole heads do (a power-of-two head_dim). (Otherwise it may
    still join a GEMM of at most 256 columns, exchanging its pairs in one tile covering the row.)"""
    rd, hd = nn.rotary_dim_of(op), prop_value(op, "head_dim")
    if prop_value(op, "style") == "half" and hd % rd:
        return not hd & (hd - 1)
    return prop_value(op, "style") == "interleaved" or not rd & (rd - 1) or interleave


@dataclass(frozen=True)
class NNPlanPass(ModulePass):
    """Record the IO model's choices (RoPE cos/sin tables, QK-norm placement, where norm
    statistics are taken) on nn ops."""

    name = "nn-plan"

    cost_model: bool = True
    rope_table: str = "auto"
    interleave: bool = True
    """Whether coda-interleave will run (a RoPE of any head_dim can then join its GEMM)."""
    epilogues: bool = True
    """Plan the ops that ride in a GEMM's epilogue (RoPE, QK-norm): coda-fuse reads these."""
    norm_stats: bool = True
    """Plan where RMSNorm statistics are taken: coda-defer-norms reads this."""
    gated_grad: str = "auto"
    """Where a gated activation's backward runs: `epilogue` of the GEMM producing dy, a
    `separate` elementwise pass, or `auto` (the IO model)."""
    norm_grad: str = "auto"
    """Where an RMSNorm backward with its row statistic given runs: `epilogue` of the GEMM
    producing dy, a `separate` elementwise pass (reading dy in f32 and writing the rebuilt norm
    output beside dx), or `auto` (the IO model)."""
    cross_entropy: str = "auto"
    """Where a cross-entropy forward whose logits a GEMM produces runs: `epilogue` of that GEMM,
    a `separate` elementwise pass over the stored logits, or `auto` (the IO model)."""
    gpu: str = DEFAULT_GPU
    """The target machine the IO model prices the choices on (`transforms/target_machine.py`)."""
    gpu_constants: str = ""
    """A table of GPU constants to read `gpu` from instead of the shipped one."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from coda_ir.errors import ArgumentError

        if self.rope_table not in ROPE_TABLE_MODES:
            raise ArgumentError(f"pass option rope-table must be auto, always or never, got '{self.rope_table}'",
                                "rope-table")
        if self.gated_grad not in GATED_GRAD_MODES:
            raise ArgumentError(f"pass option gated-grad must be auto, epilogue or separate, got '{self.gated_grad}'",
                                "gated-grad")
        if self.norm_grad not in NORM_GRAD_MODES:
            raise ArgumentError(f"pass option norm-grad must be auto, epilogue or separate, got '{self.norm_grad}'",
                                "norm-grad")
        if self.cross_entropy not in CROSS_ENTROPY_MODES:
            raise ArgumentError("pass option cross-entropy must be auto, epilogue or separate, got "
                                f"'{self.cross_entropy}'", "cross-entropy")
        gpu = target_gpu(self.name, self.gpu, self.gpu_constants)
        reported: set[Operation] = set()
        for target in list(op.walk()):
            if isinstance(target, (nn.RoPEOp, nn.RoPEGradOp)) and self.epilogues:
                self.plan_rope(target, gpu)
            elif isinstance(target, nn.HeadRMSNormOp) and self.cost_model and self.epilogues:
                self.plan_head_norm(target, reported, gpu)
            elif isinstance(target, nn.RMSNormOp) and self.cost_model and self.norm_stats:
                self.plan_norm_stats(target, gpu)
            elif isinstance(target, (nn.SwiGLUGradOp, nn.GeGLUGradOp)) and self.epilogues:
                self.plan_gated_grad(target, gpu)
            elif isinstance(target, nn.RMSNormGradOp) and self.epilogues:
                self.plan_norm_grad(target, gpu)
            elif isinstance(target, (nn.CrossEntropyOp, nn.CrossEntropyFwdOp)) and self.epilogues:
                self.plan_cross_entropy(target, gpu)

    def plan_rope_placement(self, rope: nn.RoPEOp, gemm: Operation, gpu: GPU) -> None:
        """`in_producer_epilogue = false` on a RoPE whose half-style pairs (i, i + rd/2) only join
        the GEMM's epilogue by interleaving its columns in groups of rd, when those groups hold no
        tile of the TMA mainloop (`TMA_TILE_MIN_COLS`) and the GEMM is big enough for that mainloop
        to be the one that runs (a wave of such tiles) on a GPU that has it: its B tiles are then
        gathered through the pointer mainloop. Measured (H200, Phi-3-mini, head_dim 96): the QKV GEMM
        with RoPE interleaved in groups of 96 took 2.2 ms a layer, 3x the model's TMA price; a
        plain GEMM and a rotation pass move the q/k columns once more instead."""
        if _pairs_fit_tiles(rope, interleave=False) or not self.interleave:
            return  # the pairs sit in power-of-two tiles as they are: no interleave needed (or none to come)
        rd = nn.rotary_dim_of(rope)
        if rd != prop_value(rope, "head_dim") or gpu.arch != "hopper" or rd % TMA_TILE_MIN_COLS == 0:
            return  # a partial rotation pairs in place (a period pair map); no TMA, or TMA tiles fit
        m, n, _ = gemm_shape(gemm)
        if -(-m // TMA_TILE_MIN_COLS) * -(-n // TMA_TILE_MIN_COLS) < gpu.sms:
            return  # small: the pointer mainloop is what runs anyway
        rope.properties["in_producer_epilogue"] = BoolAttr.from_bool(False)
        remarks.emit_remark(rope, f"RoPE not fused into the epilogue of {_describe(gemm)}: its pairs (i, i + {rd // 2}) "
                                  f"would interleave the GEMM's columns in groups of {rd}, which hold no "
                                  f"{TMA_TILE_MIN_COLS}-column tile of the TMA mainloop; a plain GEMM, then a "
                                  "rotation pass", informational=True)

    def plan_norm_stats(self, norm: nn.RMSNormOp, gpu: GPU) -> None:
        x = norm.x
        m, d = shape_of(x)
        if not (gemm_produced(x) and gemm_consumes(norm.result) and row_kernel_fits(d)):
            return  # defer-norms has one way for it (or none): nothing to choose
        from coda_ir.analysis import io_plans

        try:
            decision = io_plans.stats_plan(m, d, K=producer_k(x), dtype=_dtype(x), gpu=gpu)
        except (ValueError, KeyError, ZeroDivisionError):  # a shape the model cannot price: no plan
            return
        if decision.choice == "row_kernel":
            norm.properties["stats_in_producer_epilogue"] = BoolAttr.from_bool(False)
            remarks.emit_remark(norm, f"row scale not deferred: the IO model prefers a row kernel: {decision.summary()}")

    def plan_rope(self, rope: Operation, gpu: GPU) -> None:
        """`cos_sin_table` on a RoPE: in the epilogue of the GEMM producing its input
        (`io_plans.rope_table_plan`), or, when no GEMM produces it (the backward's rotation of
        the attention gradient), in an elementwise pass (`io_plans.rope_pass_plan`)."""
        gemm = producing_gemm(rope.operands[0])
        if isinstance(rope, nn.RoPEOp) and gemm is not None and self.cost_model:
            self.plan_rope_placement(rope, gemm, gpu)
            if nn.planned(rope, "in_producer_epilogue") is False:
                gemm = None  # priced as the pass it now is
        if not _pairs_fit_tiles(rope, self.interleave) or self.rope_table == "never":
            return
        if self.rope_table == "always":  # forced: no model, no remark
            rope.properties["cos_sin_table"] = BoolAttr.from_bool(True)
            return
        if not self.cost_model:
            return
        from coda_ir.analysis import io_plans

        hd = prop_value(rope, "head_dim")
        dtype = _dtype(rope.operands[0])
        explicit = rope.properties.get("inv_freq") is not None  # one select chain of hd/2 per angle
        if gemm is None:
            m, n = shape_of(rope.operands[0])
            decision = io_plans.rope_pass_plan(m, n, hd, dtype=dtype, explicit_freqs=explicit, gpu=gpu)
            where, inside = "RoPE pass", "in-pass"
        else:
            m, n, k = gemm_shape(gemm)
            decision = io_plans.rope_table_plan(m, n, hd, K=k, dtype=dtype, explicit_freqs=explicit, gpu=gpu)
            where, inside = f"RoPE in the epilogue of {_describe(gemm)}", "in-epilogue"
        costs = decision.costs
        text = (f"table (cos/sin [{m}x{hd // 2}] computed once, one more kernel) "
                f"{costs['table'].time_s * 1e6:.1f} us vs {inside} sin/cos {costs['epilogue'].time_s * 1e6:.1f} us")
        table = decision.choice == "table"
        rope.properties["cos_sin_table"] = BoolAttr.from_bool(table)
        if table:
            remarks.emit_remark(rope, f"{where} reads cos/sin tables: the IO model found them cheaper: {text}",
                                informational=True)
        else:
            remarks.emit_remark(rope, f"{where} computes sin/cos per pair: the IO model found it cheaper: {text}",
                                informational=True)

    def plan_gated_grad(self, grad: Operation, gpu: GPU) -> None:
        """`in_producer_epilogue` on a gated activation's backward whose dy a GEMM produces: in
        that GEMM's epilogue, or a plain GEMM storing dy and one elementwise pass (the pair's two
        halves read and written as [BM, BN] tiles, the z . dz row partials in the same pass)."""
        gemm = grad.operands[0].owner
        if not isinstance(gemm, GEMMS):
            return
        from coda_ir.analysis import io_plans

        m, f, k = gemm_shape(gemm)
        self.plan_epilogue_or_pass(
            grad, gemm, self.gated_grad, lambda: io_plans.gated_grad_plan(m, f, K=k, dtype=_dtype(grad.operands[0]), gpu=gpu),
            f"separate (plain GEMM storing dy [{m}x{f}], then one pass over dy and z)",
            "the epilogue holds z and dz beside the accumulator: spills, and its loads, stores and spills follow "
            "each tile's mainloop at one CTA per SM")

    def plan_norm_grad(self, grad: nn.RMSNormGradOp, gpu: GPU) -> None:
        """`in_producer_epilogue` on an RMSNorm backward with `hdh` whose dy a GEMM produces: dx
        (plus a residual gradient added to it) and the dw partials in that GEMM's epilogue, or a
        plain GEMM storing dy and one elementwise pass. Without `hdh` dx needs a row statistic of
        dy first and never joins the producer's epilogue: nothing to choose (a forced `separate`
        is still recorded and obeyed)."""
        gemm = grad.dy.owner
        if not isinstance(gemm, GEMMS):
            return
        from coda_ir.analysis import io_plans

        m, d, k = gemm_shape(gemm)
        residual = _residual_add(grad.dx)
        rebuilt = _rebuilds_output(grad)
        loads = "x and dres" if residual else "x"
        price = None if grad.hdh is None else (
            lambda: io_plans.norm_grad_plan(m, d, K=k, dtype=_dtype(grad.dy), residual=residual, rebuilt_h=rebuilt,
                                          gpu=gpu))
        self.plan_epilogue_or_pass(
            grad, gemm, self.norm_grad, price,
            f"separate (plain GEMM storing dy [{m}x{d}] in f32, then one pass over dy, {loads}"
            f"{' writing the rebuilt norm output too' if rebuilt else ''})",
            f"the epilogue's {loads} loads, spills and dw column reduction follow each tile's mainloop at one CTA per SM")

    def plan_cross_entropy(self, ce: nn.CrossEntropyOp | nn.CrossEntropyFwdOp, gpu: GPU) -> None:
        """`in_producer_epilogue` on a cross-entropy forward whose logits a GEMM produces: the row
        log-sum-exp and target-logit partials in that GEMM's epilogue, or a plain GEMM storing
        the logits and one elementwise pass over them. The logits are stored either way where
        anything else reads them (the saved logits of a differentiated forward)."""
        gemm = ce.logits.owner
        if not isinstance(gemm, GEMMS):
            return
        from coda_ir.analysis import io_plans

        m, v, k = gemm_shape(gemm)
        stored = any(use.operation is not ce for use in ce.logits.uses)
        self.plan_epilogue_or_pass(
            ce, gemm, self.cross_entropy,
            lambda: io_plans.cross_entropy_plan(m, v, K=k, dtype=_dtype(ce.logits), logits_stored=stored, gpu=gpu),
            f"separate (plain GEMM storing the logits [{m}x{v}], then one pass over them)",
            "its exps and row reductions follow each tile's mainloop at one CTA per SM"
            + ("" if stored else "; the epilogue form stores no logits"))

    def plan_epilogue_or_pass(self, op: Operation, gemm: Operation, mode: str, price, separate: str, why: str) -> None:
        """Record `in_producer_epilogue = false` on `op` (a backward elementwise in dy, which
        `gemm` produces) when it runs as a separate pass after a plain GEMM: forced by `mode`, or
        (`auto`) when the IO model's `price()` (an `epilogue` / `separate` Decision; None: nothing
        to price) finds the pass cheaper, with a remark giving both costs and `why`."""
        recorded = nn.planned(op, "in_producer_epilogue")
        if mode == "epilogue":  # forced, over a decision nn-autodiff recorded too
            if recorded is False:
                del op.properties["in_producer_epilogue"]
                remarks.emit_remark(op, f"{op.name} forced into the epilogue of {_describe(gemm)} over the separate pass "
                                    "recorded before nn-plan (nn-autodiff's rebuild of a gated output, which would "
                                    "have joined that pass, runs as a kernel of its own)", informational=True)
            return
        if mode == "separate":  # forced: no model, no remark
            op.properties["in_producer_epilogue"] = BoolAttr.from_bool(False)
            return
        if recorded is not None:  # decided where it was needed first (nn-autodiff's gated rebuild): obeyed
            return
        if not self.cost_model or price is None:
            return
        try:
            decision = price()
        except (ValueError, KeyError, ZeroDivisionError):  # a shape the model cannot price: no plan
            return
        costs = decision.costs
        text = (f"{separate} {costs['separate'].time_s * 1e6:.1f} us vs in the epilogue ({costs['epilogue'].note}) "
                f"{costs['epilogue'].time_s * 1e6:.1f} us")
        if decision.choice == "separate":
            op.properties["in_producer_epilogue"] = BoolAttr.from_bool(False)
            remarks.emit_remark(op, f"{op.name} not fused into the epilogue of {_describe(gemm)}: the IO model found a "
                                f"separate pass cheaper ({why}): {text}", informational=True)
        else:
            remarks.emit_remark(op, f"{op.name} in the epilogue of {_describe(gemm)}: the IO model found it cheaper: "
                                f"{text}", informational=True)

    def plan_head_norm(self, norm: nn.HeadRMSNormOp, reported: set[Operation], gpu: GPU) -> None:
        gemm = producing_gemm(norm.x)
        if gemm is None:
            return
        from coda_ir.analysis import io_plans

        m, n, k = gemm_shape(gemm)
        hd = prop_value(norm, "head_dim")
        decision = io_plans.qk_norm_tile_width(hd, n, M=m, K=k, heads=max(1, n // hd), dtype=_dtype(norm.x),
                                               gpu=gpu)
        unfused, costs = prefers_unfused(decision, hd)
        if not unfused:
            return
        norm.properties["in_producer_epilogue"] = BoolAttr.from_bool(False)
        if gemm not in reported:  # one remark per GEMM (Qwen3 has a q-norm and a k-norm)
            reported.add(gemm)
            remarks.emit_remark(norm, f"QK-norm not fused into the epilogue of {_describe(gemm)}: the IO model found "
                                f"the unfused plan cheaper: {costs}; it stays a separate kernel")


def _rebuilds_output(grad: nn.RMSNormGradOp) -> bool:
    """Whether the program also rebuilds the norm's output from the same x, w and rstd (an
    `nn.rms_norm_apply`, what nn-autodiff writes for the weight gradient of the GEMM that read
    it): a separate backward pass, which loads x anyway, then writes it too (coda-fuse's sibling
    merge), where the epilogue form leaves that kernel reading x once more."""
    return any(isinstance(use.operation, nn.RMSNormApplyOp) and use.operation.w is grad.w
               and use.operation.rstd is grad.rstd for use in grad.x.uses)


def _residual_add(dx: SSAValue) -> bool:
    """Whether dx's only use adds it to another [M, D] tensor (a residual gradient): that add
    joins whichever kernel makes dx and reads one more matrix there."""
    uses = list(dx.uses)
    return (len(uses) == 1 and isinstance(uses[0].operation, nn.AddOp)
            and all(shape_of(v) == shape_of(dx) for v in uses[0].operation.operands))


def prefers_unfused(decision, head_dim: int) -> tuple[bool, str]:
    """(whether the cheapest plan splits heads across tiles, the remark text's cost comparison)."""
    choice = int(decision.choice)
    if choice % head_dim == 0:
        return False, ""
    fused = [k for k in decision.costs if int(k.split("=")[1]) % head_dim == 0]
    best = decision.costs[f"bn={choice}"]
    text = f"unfused (per-head partials + a norm kernel, BN={choice}) {best.time_s * 1e6:.1f} us"
    if fused:
        alt = min(fused, key=lambda k: decision.costs[k].time_s)
        text += f" vs fused (whole heads in the tile, BN={alt.split('=')[1]}) {decision.costs[alt].time_s * 1e6:.1f} us"
    else:
        text += " (no tile width holds whole heads)"
    return True, text
