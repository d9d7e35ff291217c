"""The fusion plan as a Graphviz graph (DOT; SVG through `dot -Tsvg` when installed).

One cluster per kernel, holding the nn ops (or parts of them) it runs, from the kernel's
`coda.origin` provenance (see io_extract) or, without it, from its epilogue primitives. The
cluster's label gives the kernel's name, tile, predicted time and bound. Edges carry the
tensors that cross device memory between kernels, labelled with their name, type and bytes;
function arguments and results are ellipses (weights grey). Marked specially:

* partial reductions: dashed blue edges for `partials` tensors, dashed op boxes for
  `stats`/`lse` roles and kernels that emit partials;
* deferred scales: green edges into the GEMM that applies a folded row vector (rstd) as a
  row scale, and yellow op boxes for `scale` roles;
* folds (`rstd`/`loss` roles, coda.fold kernels): small grey clusters.

Pure Python over `io_extract.FunctionPlan` values (no xDSL objects are touched).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from coda_ir.analysis import io_model as m

PARTIAL_ROLES = ("stats", "lse", "partial")
FOLD_ROLES = ("rstd", "loss", "fold")
SCALE_ROLES = ("scale", "prescale")


def _q(text: str) -> str:
    return '"' + text.replace('"', '\\"') + '"'


def _bytes(n: float) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.2f} GB"
    if n >= 1e6:
        return f"{n / 1e6:.1f} MB"
    if n >= 1e3:
        return f"{n / 1e3:.1f} KB"
    return f"{n:.0f} B"


def _role(entry: str) -> str:
    """The role of a `coda.origin` entry: "nn.rms_norm.stats@h1" -> "stats"."""
    head = entry.split("@")[0].split("#")[0]
    parts = head.split(".")
    return parts[2] if len(parts) > 2 and parts[0] == "nn" else ""


def _op_style(entry: str, partial: bool = True) -> str:
    """`partial`: the kernel emits partials (False: a `whole rows` kernel completes its reductions)."""
    role = _role(entry)
    if partial and (role in PARTIAL_ROLES or entry.startswith(("reduce", "segment_reduce", "select"))):
        return 'style="dashed", color="blue"'
    if role in SCALE_ROLES or entry.startswith(("scale rows", "deferred")):
        return 'style="filled", fillcolor="lightyellow"'
    if role in FOLD_ROLES:
        return 'style="filled", fillcolor="gray90"'
    return 'style="filled", fillcolor="white"'


def _op_label(entry: str, partial: bool = True) -> str:
    """`partial` as for `_op_style`: a whole-rows kernel's stats / lse are complete row reductions."""
    role = _role(entry)
    reduction = "\\n(partial reduction)" if partial else "\\n(row reduction, whole rows)"
    extra = {"stats": reduction, "lse": reduction, "scale": "\\n(deferred scale)",
             "prescale": "\\n(aux store x*w)", "rstd": "\\n(fold)", "loss": "\\n(fold)"}.get(role, "")
    return entry + extra


def to_text(plans: Sequence[object]) -> str:
    """A short text summary: per function, one line per kernel naming the nn ops (or parts of
    them) it runs, in program order (`coda-opt -t 'fusion-plan{format=text}'`, and what
    `examples/run_example.py` prints). No costs: they are one GPU's predictions, and the
    summary is read on any machine."""
    lines: list[str] = []
    for plan in plans:
        kernels: list[m.Kernel] = plan.kernels  # type: ignore[attr-defined]
        launches = sum(1 for k in kernels if not k.shares_launch)
        grouped = f" in {launches} launches" if launches != len(kernels) else ""
        lines.append(f"@{plan.name}: {len(kernels)} kernels{grouped}")  # type: ignore[attr-defined]
        width = max((len(k.name) for k in kernels), default=0)
        for k in kernels:
            entries = list(k.ops) or [k.kind]
            if "deferred row scale" in k.notes and not any(_role(e) == "scale" for e in entries):
                entries.insert(0, "deferred row scale (rstd)")
            joined = " + ".join(_op_label(e, "partial reduction" in k.notes or k.kind != "elementwise")
                                .replace("\\n", " ") for e in entries)
            lines.append(f"  {k.name:<{width}}  {k.kind:<11}  {joined}")
    return "\n".join(lines) + "\n"


def to_dot(plans: Sequence[object], gpu: m.GPU | str | None = None, title: str = "") -> str:
    """DOT text for the functions `plans` (io_extract.FunctionPlan values)."""
    gpu = m.as_gpu(gpu)
    lines = [
        "digraph fusion_plan {",
        "  compound=true;",
        "  rankdir=TB;",
        '  node [shape=box, fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=9];',
    ]
    if title:
        lines.append(f"  label={_q('fusion plan: ' + title + ' (' + gpu.name + ')')};")
        lines.append("  labelloc=t;")
    for f, plan in enumerate(plans):
        kernels: list[m.Kernel] = plan.kernels  # type: ignore[attr-defined]
        cost = m.program_cost(kernels, gpu)
        act = cost.activation_bytes
        lines.append(f"  subgraph cluster_f{f} {{")
        lines.append(
            f"    label={_q(f'@{plan.name}: {cost.launches} kernels, {_bytes(cost.hbm_unique)} moved ({_bytes(act)} activations), predicted {cost.time_s * 1e6:.1f} us')};"  # type: ignore[attr-defined]
        )
        lines.append('    style="rounded"; color="black";')
        producer: dict[str, tuple[int, str]] = {}
        anchors: list[tuple[str, str]] = []
        for i, c in enumerate(cost.kernels):
            k = c.kernel
            tile = f" {c.tile.bm}x{c.tile.bn}" if c.tile else ""
            fold = k.kind == "fold"
            color = "gray60" if fold else ("darkorange" if k.gemm is not None else "steelblue")
            lines.append(f"    subgraph cluster_f{f}_k{i} {{")
            label = f"{k.name}: {k.kind}{tile}, {c.time_s * 1e6:.1f} us ({c.bound})"
            if not c.fits:
                label += " SPILLS"
            lines.append(f"      label={_q(label)}; style=\"rounded,filled\"; fillcolor=\"gray97\"; color={_q(color)};")
            entries = list(k.ops) or [k.kind]
            if "deferred row scale" in k.notes and not any(_role(e) == "scale" for e in entries):
                entries.insert(0, "deferred row scale (rstd)")
            ids = []
            for j, entry in enumerate(entries):
                node = f"f{f}_k{i}_o{j}"
                ids.append(node)
                partial = "partial reduction" in k.notes or k.kind != "elementwise"
                lines.append(f"      {node} [label={_q(_op_label(entry, partial))}, {_op_style(entry, partial)}];")
            for a, b in zip(ids, ids[1:]):
                lines.append(f"      {a} -> {b} [style=invis];")
            lines.append("    }")
            anchors.append((ids[0], ids[-1]))
            for t in k.writes:
                producer[t.name] = (i, ids[-1])
        # inputs, edges, outputs
        inputs = {t.name: t for t in plan.inputs}  # type: ignore[attr-defined]
        for name, t in inputs.items():
            style = 'color="gray50", fontcolor="gray40"' if t.role == "weight" else ""
            lines.append(f"    {_q(f'f{f}_in_{name}')} [shape=ellipse, label={_q(t.describe())}{', ' + style if style else ''}];")
        for i, c in enumerate(cost.kernels):
            k = c.kernel
            first = anchors[i][0]
            seen: set[str] = set()
            for t in k.all_reads():
                if t.name in seen:
                    continue
                seen.add(t.name)
                attrs = [f"lhead=cluster_f{f}_k{i}"]
                label = f"{t.describe()}\\n{_bytes(t.nbytes)}"
                if t.role == "partials":
                    attrs.append('style="dashed", color="blue"')
                    label += "\\npartials"
                elif t.name in producer and "deferred row scale" in k.notes and cost.kernels[producer[t.name][0]].kernel.kind == "fold":
                    attrs.append('color="darkgreen", penwidth=2')
                    label += "\\ndeferred row scale"
                elif t.role == "weight":
                    attrs.append('color="gray60"')
                attrs.append(f"label={_q(label)}")
                if t.name in producer:
                    j, tail = producer[t.name]
                    attrs.append(f"ltail=cluster_f{f}_k{j}")
                    lines.append(f"    {tail} -> {first} [{', '.join(attrs)}];")
                elif t.name in inputs:
                    lines.append(f"    {_q(f'f{f}_in_{t.name}')} -> {first} [{', '.join(attrs)}];")
        for o, t in enumerate(plan.outputs):  # type: ignore[attr-defined]
            node = f"f{f}_out{o}"
            lines.append(f"    {node} [shape=doubleoctagon, label={_q('return ' + t.describe())}];")
            if t.name in producer:
                j, tail = producer[t.name]
                lines.append(f"    {tail} -> {node} [ltail=cluster_f{f}_k{j}, label={_q(_bytes(t.nbytes))}];")
            elif t.name in inputs:
                lines.append(f"    {_q(f'f{f}_in_{t.name}')} -> {node};")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_svg(dot: str) -> str | None:
    """SVG text from Graphviz `dot -Tsvg`, or None when Graphviz is not installed."""
    exe = shutil.which("dot")
    if exe is None:
        return None
    done = subprocess.run([exe, "-Tsvg"], input=dot, capture_output=True, text=True, check=True)
    return done.stdout
