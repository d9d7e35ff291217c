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


def format_bytes(n: float) -> str:
    """Bytes in B / KB / MB / GB (decimal), as the plans' labels print them."""
    return _bytes(n)


def kernel_entries(k: m.Kernel) -> list[str]:
    """The nn ops (or parts of them) kernel `k` runs, for its box: its `coda.origin` entries (or
    its kind), with a deferred row scale it applies named first."""
    entries = list(k.ops) or [k.kind]
    if "deferred row scale" in k.notes and not any(_role(e) == "scale" for e in entries):
        entries.insert(0, "deferred row scale (rstd)")
    return entries


def kernel_partial(k: m.Kernel) -> bool:
    """Whether `k`'s statistics are partial reductions (False: a `whole rows` kernel completes them)."""
    return "partial reduction" in k.notes or k.kind != "elementwise"


def kernel_color(k: m.Kernel) -> str:
    """The outline of a kernel's box: folds grey, GEMMs orange, attention purple, the rest blue."""
    if k.kind == "fold":
        return "gray60"
    if k.attention is not None:
        return "purple"
    return "darkorange" if k.gemm is not None else "steelblue"


def kernel_label(c: m.KernelCost) -> str:
    """`name: kind tile, time (bound)` of a priced kernel (attention: its schedule for the tile)."""
    k = c.kernel
    if k.attention is not None:
        from coda_ir.analysis import attention_model

        tile = " " + attention_model.schedule_label(k, c)
    else:
        tile = f" {c.tile.bm}x{c.tile.bn}" if c.tile else ""
    label = f"{k.name}: {k.kind}{tile}, {c.time_s * 1e6:.1f} us ({c.bound})"
    return label if c.fits else label + " SPILLS"


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
            joined = " + ".join(_op_label(e, kernel_partial(k)).replace("\\n", " ") for e in kernel_entries(k))
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
            lines.append(f"    subgraph cluster_f{f}_k{i} {{")
            lines.append(f"      label={_q(kernel_label(c))}; style=\"rounded,filled\"; fillcolor=\"gray97\"; color={_q(kernel_color(k))};")
            ids = []
            partial = kernel_partial(k)
            for j, entry in enumerate(kernel_entries(k)):
                node = f"f{f}_k{i}_o{j}"
                ids.append(node)
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


# ---------------------------------------------------------------- the whole step as SVG

_SVG_COLORS = {"gray60": "#999999"}  # Graphviz (X11) names that SVG lacks
ROW_H = 15
BOX_W = 560


def _x(text: object) -> str:
    from xml.sax.saxutils import escape

    return escape(str(text), {'"': "&quot;"})


def _svg_color(name: str) -> str:
    return _SVG_COLORS.get(name, name)


def _text(x: float, y: float, text: str, size: int = 10, weight: str = "normal", fill: str = "black") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-family="Helvetica, Arial, sans-serif" font-size="{size}" '
            f'font-weight="{weight}" fill="{fill}">{_x(text)}</text>')


def _pass_box(x: float, y: float, title: str, cost: m.ProgramCost | None, names: Sequence[str], count: int,
              step_s: float, notes: Sequence[str], direction: str, attention_anchor: list) -> tuple[list[str], float]:
    """One unit's forward or backward: a box with a bar per kernel (width: its share of the
    unit's time), labelled like the fusion plan's clusters (kernel_label, kernel_color)."""
    kernels = cost.kernels if cost is not None else []
    height = 22 + ROW_H * (len(kernels) + len(notes)) + 6
    out = [f'<g class="pass" data-direction="{direction}">',
           f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{height}" rx="6" fill="#fafafa" stroke="black"/>',
           _text(x + 6, y + 14, title, 11, "bold")]
    longest = max((c.time_s for c in kernels), default=0.0) or 1.0
    for i, c in enumerate(kernels):
        row = y + 22 + ROW_H * i
        k = c.kernel
        width = max(2.0, 120 * c.time_s / longest)
        gen = names[i] if i < len(names) else ""
        color = _svg_color(kernel_color(k))
        out.append(f'<g class="kernel" data-name="{_x(gen or k.name)}" data-kind="{_x(k.kind)}">')
        out.append(f"<title>{_x(gen or k.name)}: {_x(' + '.join(kernel_entries(k)))}</title>")
        out.append(f'<rect x="{x + 6}" y="{row + 2}" width="{width:.1f}" height="{ROW_H - 4}" fill="{color}" opacity="0.8"/>')
        label = f"{kernel_label(c)}, HBM {format_bytes(c.hbm_unique)}" + (" [cuBLAS]" if gen == "cuBLAS" else "")
        out.append(_text(x + 132, row + 11, label, 9))
        out.append("</g>")
        if k.attention is not None:
            attention_anchor.append((x + BOX_W, row + ROW_H / 2, k, c))
    for j, note in enumerate(notes):
        out.append(_text(x + 10, y + 22 + ROW_H * (len(kernels) + j) + 11, note, 9, fill="#444444"))
    out.append("</g>")
    return out, height


def _attention_diagram(x: float, y: float, kernel: m.Kernel, gpu: m.GPU, count: int) -> tuple[list[str], float]:
    """The attention model's schedule of one attention step: the CTA's query block in registers,
    key/value blocks streaming from HBM through L2 into a shared-memory ring, its occupancy,
    bytes per level and bound (attention_model)."""
    from coda_ir.analysis import attention_model as am

    call = kernel.attention
    cost = am.attention_cost(call.shape, call.direction, call.backend, gpu)  # type: ignore[attr-defined]
    s, o = cost.schedule, cost.occupancy
    w, h = 430, 200
    fwd = call.direction == "fwd"  # type: ignore[attr-defined]
    grouped, streamed = ("Q", "K,V") if fwd else ("K,V", "Q,dO")
    out = [f'<g class="attention" data-direction="{call.direction}" data-backend="{_x(s.backend)}">',  # type: ignore[attr-defined]
           f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="8" fill="#f6f0fb" stroke="purple"/>',
           _text(x + 8, y + 16, f"attention {call.direction} x{count}: {s.describe()}", 11, "bold"),  # type: ignore[attr-defined]
           # HBM -> L2 -> SMEM ring -> registers, the streamed blocks moving right
           f'<rect x="{x + 10}" y="{y + 30}" width="60" height="70" fill="white" stroke="black"/>',
           _text(x + 18, y + 48, "HBM", 10, "bold"), _text(x + 14, y + 64, f"{cost.hbm_bytes / 1e6:.0f} MB", 9),
           f'<rect x="{x + 95}" y="{y + 30}" width="60" height="70" fill="white" stroke="black"/>',
           _text(x + 108, y + 48, "L2", 10, "bold"), _text(x + 99, y + 64, f"{cost.l2_bytes / 1e6:.0f} MB", 9),
           f'<line x1="{x + 70}" y1="{y + 65}" x2="{x + 95}" y2="{y + 65}" stroke="black" marker-end="url(#arrow)"/>',
           f'<line x1="{x + 155}" y1="{y + 65}" x2="{x + 180}" y2="{y + 65}" stroke="black" marker-end="url(#arrow)"/>']
    for i in range(max(1, min(s.stages, 4))):
        out.append(f'<rect x="{x + 182 + 22 * i}" y="{y + 40}" width="18" height="50" fill="#e0d0f0" stroke="purple"/>')
    out += [_text(x + 182, y + 34, f"SMEM ring: {streamed} blocks of {s.block_k if fwd else s.block_q} rows", 9),
            _text(x + 182, y + 104, f"{cost.smem_bytes / 1e6:.0f} MB smem traffic", 9),
            f'<rect x="{x + 290}" y="{y + 40}" width="130" height="50" fill="white" stroke="purple"/>',
            _text(x + 296, y + 56, f"registers: {grouped} block", 9),
            _text(x + 296, y + 70, f"{s.block_q if fwd else s.block_k} rows, {o.regs_per_thread} regs/thread", 9),
            _text(x + 296, y + 84, "online softmax m, l, O" if fwd else "dK, dV accumulate", 9),
            _text(x + 10, y + 124, f"occupancy: {o.ctas_per_sm} CTA/SM = {o.warps_per_sm} warps/SM ({o.limit}-bound, "
                                   f"{o.smem_per_cta / 1024:.0f} KB smem/CTA)", 10),
            _text(x + 10, y + 140, f"{cost.tiles} tiles, {cost.matmul_flops / 1e9:.1f} GFLOP ({cost.useful_flops / 1e9:.1f} useful)", 10),
            _text(x + 10, y + 156, f"bound {cost.bound}: {cost.time_s * 1e6:.1f} us = {cost.tflops:.0f} TFLOP/s each", 10),
            _text(x + 10, y + 172, f"{count} per step: {count * cost.time_s * 1e3:.3f} ms", 10),
            "</g>"]
    return out, h


def step_svg(plans: Sequence[object]) -> str:
    """The whole training step of each plan (coda_ir.torch.plan.StepPlan) as one SVG: the units
    in step order as boxes (forward down the left column, backward up the right, each unit one
    `<g class="unit">` row), each with a bar per kernel labelled as the fusion plan labels its
    clusters, the plan's recorded choices under the forward, and every distinct attention step
    drawn as its own diagram (`<g class="attention">`: schedule, occupancy, bytes per level)."""
    body: list[str] = []
    y = 10.0
    width = 20 + 2 * BOX_W + 40 + 450
    for p in plans:
        total = p.step_s  # type: ignore[attr-defined]
        body.append(f'<g class="step" data-gpu="{_x(p.gpu.name)}">')  # type: ignore[attr-defined]
        body.append(_text(10, y + 16, f"{p.model} on {p.gpu.name}: {p.tokens} tokens, forward + backward, "  # type: ignore[attr-defined]
                                      f"predicted {total * 1e3:.3f} ms (limit {p.limit_s * 1e3:.3f} ms), "  # type: ignore[attr-defined]
                                      f"peak {p.peak_bytes / 2**30:.2f} GiB", 13, "bold"))  # type: ignore[attr-defined]
        body.append(_text(10, y + 32, "forward (down)", 11, "bold"))
        body.append(_text(20 + BOX_W + 20, y + 32, "backward (up)", 11, "bold"))
        y += 42
        order = p.step_units()  # type: ignore[attr-defined]  (the step order is the plan's)
        rows: dict[str, dict[str, tuple]] = {}
        for name, u, direction in order:
            rows.setdefault(name, {})[direction] = (u,)
        anchors: list = []
        centers: list[tuple[float, float, float, float]] = []
        for name, passes in rows.items():
            u = passes["fwd"][0]
            top = y
            body.append(f'<g class="unit" data-unit="{_x(name)}" data-count="{u.count if u else 1}">')
            heights = []
            for col, direction in enumerate(("fwd", "bwd")):
                x = 20 + col * (BOX_W + 20)
                if u is None:
                    title = f"{name} {direction}: library {'gather' if direction == 'fwd' else 'scatter-add'} (not priced)"
                    box, hgt = _pass_box(x, top, title, None, [], 1, total, [], direction, anchors)
                else:
                    cost = u.fwd if direction == "fwd" else u.bwd
                    share = u.count * cost.time_s / total * 100 if cost is not None and total else 0.0
                    title = (f"{name} {direction} x{u.count}: {cost.time_s * 1e3:.3f} ms each, "
                             f"{u.count * cost.time_s * 1e3:.2f} ms/step ({share:.1f}%)") if cost is not None else f"{name} {direction}"
                    notes = []
                    if direction == "fwd":
                        stored = [c.value for c in u.choices if c.what == "stored"]
                        recomputed = [c.value for c in u.choices if c.what == "recomputed"]
                        notes.append(f"stored: {', '.join(stored) or '-'}; recomputed: {', '.join(recomputed) or '-'}")
                        notes += [f"{c.what}: {c.value}: {c.detail}"[:110] for c in u.choices if c.what not in ("stored", "recomputed")]
                    names = u.fwd_names if direction == "fwd" else u.bwd_names
                    box, hgt = _pass_box(x, top, title, cost, names, u.count, total, notes, direction, anchors)
                body += box
                heights.append(hgt)
                centers.append((x + BOX_W / 2, top, top + hgt, col))
            body.append("</g>")
            y = top + max(heights) + 16
        # the step's flow: down the forward column, across, up the backward column
        fx = 20 + BOX_W / 2
        bx = 20 + BOX_W + 20 + BOX_W / 2
        body.append(f'<path class="flow" d="M {fx - 200} {y - 16} L {fx - 200} {y - 6} L {bx + 200} {y - 6} '
                    f'L {bx + 200} {y - 16}" fill="none" stroke="gray" marker-end="url(#arrow)"/>')
        # every distinct attention step, its own diagram to the right, linked from its kernels
        ax, ay = 20 + 2 * (BOX_W + 20) + 20, None
        drawn: dict[tuple, float] = {}
        top_attention = min((a[1] for a in anchors), default=y) - 20
        ay = top_attention
        for x_end, row_y, kernel, c in anchors:
            key = (kernel.attention,)
            if key not in drawn:
                count = sum(u.count for _, u, _d in order if u is not None
                            for kc in ((u.fwd.kernels if _d == "fwd" else (u.bwd.kernels if u.bwd else [])))
                            if kc.kernel.attention == kernel.attention)
                diagram, hgt = _attention_diagram(ax, ay, kernel, p.gpu, count)  # type: ignore[attr-defined]
                body += diagram
                drawn[key] = ay + 16
                ay += hgt + 12
            body.append(f'<line class="attention-link" x1="{x_end}" y1="{row_y}" x2="{ax}" y2="{drawn[key]}" '
                        f'stroke="purple" stroke-dasharray="4 3"/>')
        y = max(y, ay) + 20
        body.append("</g>")
    head = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y:.0f}" viewBox="0 0 {width} {y:.0f}">',
            '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
            'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z"/></marker></defs>',
            f'<rect x="0" y="0" width="{width}" height="{y:.0f}" fill="white"/>']
    return "\n".join(head + body + ["</svg>"]) + "\n"
