"""coda-opt targets that report on a program instead of lowering it.

* `-t io-report{gpu=h100 pipeline="nn-to-coda" constants="" decisions=false}`: per function, a table of its
  kernels from the IO model (coda_ir/analysis/io_model.py): FLOPs (GEMM and epilogue),
  device-memory bytes (read and written once each; with the tiled GEMM's re-reads that miss
  L2; L2 -> SM), arithmetic intensity, on-chip footprint, the bounding resource, the
  exposed epilogue load time ("epi us", added to the bound) and the predicted time. For `nn` input it also runs `pipeline` (when its passes are registered) on
  a copy and prints the compiled `coda` program's table and a comparison of the two.
  `gpu` picks the constants in gpu_constants.json (h100, h200); `constants` names a JSON
  written by bench/calibrate.py to use instead. Attention steps (`nn.attention`, its forward and
  gradient, `coda.attention`) are priced by the attention model (attention_model.py): the tile
  column names the schedule, and a line under the table gives its occupancy, bytes per level
  and bound; `attention=cudnn|flash|flex|varlen` prices them as that backend (default:
  the runtime's choice), `doc-len=N` prices `segments` as documents of N rows (default: one
  document per sequence, the dense upper bound). `decisions=true` adds, for nn functions, what
  the model's decision API (stats_plan, qk_norm_tile_width, store_or_recompute) chooses for
  each choice the function offers, with both plans' predicted times.
* `-t fusion-plan{format=dot gpu=h100 pipeline="nn-to-coda"}`: the fusion plan as a Graphviz
  graph (coda_ir/analysis/fusion_plan.py); `format=svg` pipes it through `dot -Tsvg` when
  Graphviz is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.target import Target

from coda_ir.analysis import io_model as m
from coda_ir.analysis.io_extract import VENDOR_NOTE


def _gpu(name: str, constants: str) -> m.GPU:
    if constants:
        return m.load_calibration(constants, base=name or None)
    return m.load_gpu(name or "h100")


def compile_copy(ctx: Context, module: ModuleOp, pipeline: str) -> tuple[ModuleOp | None, str]:
    """(the module after `pipeline` on a copy, or None, and why not)."""
    if not pipeline:
        return None, "no pipeline given"
    if not any(op.name.startswith("nn.") for op in module.walk()):
        return None, "input has no nn ops"
    from xdsl.passes import PassPipeline

    from coda_ir.context import coda_passes

    passes = coda_passes()
    try:
        pipe = PassPipeline.parse_spec(passes, pipeline)
    except ValueError:
        return None, f"pipeline '{pipeline}' is not registered"
    copy = module.clone()
    pipe.apply(ctx, copy)
    return copy, ""


def _mb(n: float) -> str:
    return f"{n / 1e6:.3f}"


HEADER = (
    f"{'kernel':<22} {'kind':<12} {'tile':<17} {'GEMM GF':>9} {'epi MF':>9} {'read MB':>9} {'write MB':>9} "
    f"{'HBM MB':>9} {'L2 MB':>9} {'AI':>7} {'smem KB':>7} {'regs':>4} {'bound':<8} {'epi us':>7} {'time us':>9}"
)


def _row(c: m.KernelCost) -> str:
    k = c.kernel
    tile = c.tile.describe() if c.tile else "-"
    if k.attention is not None:  # its tile is the attention schedule's
        from coda_ir.analysis import attention_model

        tile = attention_model.schedule_label(k, c)
    regs = c.regs_per_thread or "-"
    smem = f"{c.smem_bytes / 1024:.1f}"
    if VENDOR_NOTE in k.notes:  # the library's kernel runs it on a GPU: no tile, registers or smem of ours
        tile, regs, smem = "cuBLAS", "-", "-"
    fits = "" if c.fits else " SPILLS"
    return (
        f"{k.name[:22]:<22} {k.kind[:12]:<12} {tile:<17} {c.gemm_flops / 1e9:>9.3f} {c.epilogue_flops / 1e6:>9.3f} "
        f"{_mb(c.read_bytes):>9} {_mb(c.write_bytes):>9} {_mb(c.hbm_bytes):>9} {_mb(c.l2_bytes):>9} "
        f"{c.intensity:>7.1f} {smem:>7} {regs:>4} {c.bound:<8} "
        f"{c.exposed_s * 1e6:>7.2f} {c.time_s * 1e6:>9.2f}{fits}"
    )


def _table(title: str, cost: m.ProgramCost, out: IO[str], gpu: m.GPU | None = None) -> None:
    print(f"// {title}", file=out)
    print(f"// {HEADER}", file=out)
    for c in cost.kernels:
        print(f"// {_row(c)}", file=out)
    for c in cost.kernels:
        if c.kernel.attention is not None and gpu is not None:
            from coda_ir.analysis import attention_model

            print(f"//   {c.kernel.name}: {attention_model.attention_summary(c.kernel, gpu)}", file=out)
    print(
        f"// total: {cost.launches} kernels, GEMM {cost.gemm_flops:.0f} FLOP, epilogue {cost.epilogue_flops:.0f} FLOP, "
        f"HBM {cost.hbm_unique} B unique ({cost.activation_bytes} activation, {cost.weight_bytes} weight), "
        f"{cost.hbm_bytes:.0f} B with re-reads, L2 {cost.l2_bytes:.0f} B, predicted {cost.time_s * 1e6:.2f} us",
        file=out,
    )


def plain_gemms(cost: m.ProgramCost, gpu: m.GPU) -> m.ProgramCost | None:
    """The speed of light of PERFORMANCE.md: each GEMM of the program as a plain GEMM (operands
    in, output out, default tile), nothing else."""
    plain = []
    for c in cost.kernels:
        g = c.kernel.gemm
        if g is not None:
            plain.append(m.Kernel(f"plain:{c.kernel.name}", "gemm", writes=(m.Tensor("c", (g.m, g.n), g.a.dtype),), gemm=g))
    return m.program_cost(plain, gpu) if plain else None


def _summary(rows: list[tuple[str, m.ProgramCost]], out: IO[str], gpu: m.GPU | None = None) -> None:
    print(f"// {'program':<18} {'kernels':>7} {'HBM MB':>10} {'act MB':>10} {'weight MB':>10} {'time us':>10}", file=out)
    for name, c in rows:
        print(
            f"// {name:<18} {c.launches:>7} {_mb(c.hbm_unique):>10} {_mb(c.activation_bytes):>10} "
            f"{_mb(c.weight_bytes):>10} {c.time_s * 1e6:>10.2f}",
            file=out,
        )
    if len(rows) == 2:
        (_, a), (_, b) = rows
        act = b.activation_bytes / a.activation_bytes if a.activation_bytes else 0.0
        tot = b.hbm_unique / a.hbm_unique if a.hbm_unique else 0.0
        time = b.time_s / a.time_s if a.time_s else 0.0
        print(f"// compiled/unfused: activation bytes {act:.3f}x, all bytes {tot:.3f}x, time {time:.3f}x", file=out)
    if gpu is not None:
        sol = plain_gemms(rows[-1][1], gpu)
        if sol is not None:
            ratios = ", ".join(f"{name} {c.time_s / sol.time_s:.3f}x" for name, c in rows)
            print(f"// plain GEMMs alone (speed of light): {sol.launches} kernels, {sol.time_s * 1e6:.2f} us; {ratios}", file=out)
            # a program with attention: its limit is the GEMMs plus the attention (PERFORMANCE.md)
            attention = sum(c.time_s for c in rows[-1][1].kernels if c.kernel.attention is not None)
            if attention:
                limit = sol.time_s + attention
                ratios = ", ".join(f"{name} {c.time_s / limit:.3f}x" for name, c in rows)
                print(f"// plain GEMMs + attention (the limit): {limit * 1e6:.2f} us; {ratios}", file=out)


@dataclass(frozen=True)
class IOReportTarget(Target):
    """Per-kernel FLOPs, bytes by memory level, bound and predicted time; unfused vs compiled."""

    name = "io-report"

    gpu: str = "h100"
    pipeline: str = "nn-to-coda"
    constants: str = ""
    decisions: bool = False
    attention: str = ""
    doc_len: int = 0

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        from xdsl.dialects import func

        from coda_ir.analysis.io_extract import extract_module, nn_decisions

        gpu = _gpu(self.gpu, self.constants)
        if self.attention:
            from coda_ir.analysis.attention_model import BACKENDS

            if self.attention not in BACKENDS:
                raise ValueError(f"io-report attention must be one of {', '.join(BACKENDS)} (or absent: the "
                                 f"runtime's choice), got '{self.attention}'")
        if self.doc_len < 0:
            raise ValueError(f"io-report doc-len must be non-negative, got {self.doc_len}")
        print(f"// io-report on {gpu.describe()}", file=output)
        compiled, why = compile_copy(ctx, module, self.pipeline)
        extract = {"attention_backend": self.attention, "doc_len": self.doc_len}
        compiled_plans = {p.name: p for p in extract_module(compiled, gpu, **extract)} if compiled is not None else {}
        for plan in extract_module(module, gpu, **extract):
            kind = "nn, one kernel per op (eager)" if plan.is_nn and not plan.is_coda else (
                "coda" if plan.is_coda and not plan.is_nn else "nn + coda")
            cost = m.program_cost(plan.kernels, gpu)
            print(f"// @{plan.name}", file=output)
            _table(f"program: {kind}", cost, output, gpu)
            rows = [("unfused nn" if plan.is_nn and not plan.is_coda else "this program", cost)]
            if plan.is_nn:
                other = compiled_plans.get(plan.name)
                if other is None:
                    print(f"// compiled: not shown ({why or 'function missing after the pipeline'})", file=output)
                else:
                    ccost = m.program_cost(other.kernels, gpu)
                    _table(f"compiled by '{self.pipeline}'", ccost, output, gpu)
                    rows.append(("compiled coda", ccost))
            _summary(rows, output, gpu)
            if self.decisions and plan.is_nn:
                fn = next(op for op in module.walk() if isinstance(op, func.FuncOp) and op.sym_name.data == plan.name)
                print("// decisions (coda_ir.analysis.io_model):", file=output)
                for call, decision in nn_decisions(fn, gpu):
                    print(f"//   {call} -> {decision.summary()}", file=output)


@dataclass(frozen=True)
class FusionPlanTarget(Target):
    """The fusion plan as a DOT (or SVG) graph: ops grouped into kernels, edges labelled with bytes (format=text: one line per kernel)."""

    name = "fusion-plan"

    format: str = "dot"
    gpu: str = "h100"
    pipeline: str = "nn-to-coda"
    constants: str = ""

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        from coda_ir.analysis import fusion_plan
        from coda_ir.analysis.io_extract import extract_module

        gpu = _gpu(self.gpu, self.constants)
        compiled, why = compile_copy(ctx, module, self.pipeline)
        plans = extract_module(compiled if compiled is not None else module, gpu)
        note = f"compiled by '{self.pipeline}'" if compiled is not None else (
            f"as written ({why})" if why else "as written")
        if self.format == "text":
            output.write(f"// fusion plan: {note}\n")
            output.write(fusion_plan.to_text(plans))
            return
        dot = fusion_plan.to_dot(plans, gpu, title=note)
        if self.format == "svg":
            svg = fusion_plan.render_svg(dot)
            if svg is None:
                output.write("// Graphviz 'dot' was not found: printing DOT instead of SVG\n")
                output.write(dot)
            else:
                output.write(svg)
        elif self.format == "dot":
            output.write(dot)
        else:
            raise ValueError(f"fusion-plan format must be dot, svg or text, got '{self.format}'")
