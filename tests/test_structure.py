"""The package's layering (ARCHITECTURE.md): data flows one way, so imports do too.

- `coda_ir.tools` holds the `coda-opt` CLI only: no other module imports it (diagnostics,
  remarks and the dialect/pass registry live in the base modules below passes and lowering).
- No import cycles among coda_ir's modules, counting imports inside functions as well (a lazy
  import still ties two modules together); a package's `__init__` is not an edge target when a
  module merely lives inside it.
- No module imports another module's private names (`from x import _name`).
- Printers (the `triton` target among them) import only dialects and base modules, and no
  target runs a pass (issue 34).
- Only `coda_ir.environment` touches the process environment (issue 34: configuration is explicit).
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1] / "coda_ir"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, list[tuple[str, list[str], int]]]:
    """module -> [(imported module, imported names, line)] for every coda_ir import in it."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    found: dict[str, list[tuple[str, list[str], int]]] = {}
    for name, path in modules.items():
        entries = []
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                entries += [(a.name, [], node.lineno) for a in node.names if a.name.startswith("coda_ir")]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                if not base.startswith("coda_ir"):
                    continue
                names = [a.name for a in node.names]
                # `from coda_ir.x import y` imports module coda_ir.x.y when that is a module
                submodules = [f"{base}.{n}" for n in names if f"{base}.{n}" in modules]
                if submodules:
                    entries += [(s, [], node.lineno) for s in submodules]
                    names = [n for n in names if f"{base}.{n}" not in modules]
                if names:
                    entries.append((base, names, node.lineno))
        found[name] = entries
    return found


def test_only_the_cli_imports_tools():
    offenders = [
        f"{module} line {line} imports {target}"
        for module, entries in _imports().items()
        if not module.startswith("coda_ir.tools")
        for target, _, line in entries
        if target == "coda_ir.tools" or target.startswith("coda_ir.tools.")
    ]
    assert offenders == []


def test_no_import_cycles():
    graph = nx.DiGraph()
    for module, entries in _imports().items():
        graph.add_node(module)
        for target, _, _ in entries:
            if target != module and not module.startswith(target + "."):
                graph.add_edge(module, target)
    cycles = list(nx.simple_cycles(graph))
    assert cycles == [], f"import cycles: {cycles[:5]}"


def test_no_private_cross_module_imports():
    offenders = [
        f"{module} line {line}: from {target} import {name}"
        for module, entries in _imports().items()
        for target, names, line in entries
        for name in names
        if name.startswith("_") and target != module
    ]
    assert offenders == []


# The printers and the templates they fill print what the conversions decided: they may read
# the dialects and the base modules, never a conversion, a pass or the runtime (issue 34).
# The `triton` target (`lowering/triton.py`) is a printer too: it prints the module the
# coda-to-triton pipeline lowered and imports no conversion or pass.
PRINTERS = ("coda_ir.lowering.triton_printer", "coda_ir.lowering.host_printer", "coda_ir.lowering.mainloop",
            "coda_ir.lowering.gluon", "coda_ir.lowering.triton")
PRINTER_MAY_IMPORT = ("coda_ir.dialects", "coda_ir.diagnostics", "coda_ir.lowering.mainloop", "coda_ir.lowering.gluon",
                      "coda_ir.lowering.triton_printer", "coda_ir.lowering.host_printer")


def test_printers_import_only_dialects():
    imports = _imports()
    offenders = [
        f"{module} line {line} imports {target}"
        for module in PRINTERS
        for target, _, line in imports[module]
        if not any(target == allowed or target.startswith(allowed + ".") for allowed in PRINTER_MAY_IMPORT)
    ]
    assert offenders == []


def test_runtime_is_below_the_backend():
    """The runtime runs emitted modules; it never imports the conversions or printers (the
    mainloop template's feature probe excepted: launches ask which Triton features it uses)."""
    offenders = [
        f"{module} line {line} imports {target}"
        for module, entries in _imports().items()
        if module.startswith("coda_ir.runtime")
        for target, _, line in entries
        if target.startswith("coda_ir.lowering") and target != "coda_ir.lowering.mainloop"
    ]
    assert offenders == []


def test_no_target_runs_a_pass(monkeypatch):
    """Every coda-opt target emits a lowered coda program with every registered pass (and xDSL's
    pipeline runner) refusing to run, and leaves the module as it was. (The report targets
    compile a copy of an *nn* input to compare it with the compiled program: an analysis of two
    programs, documented in `analysis/report_targets.py`; on coda input they compile nothing.)"""
    from io import StringIO

    from xdsl.passes import PassPipeline

    import coda_ir
    from coda_ir.context import coda_passes, make_context
    from coda_ir.lowering.pipeline import lower_to_triton
    from coda_ir.targets import TARGETS

    first = sorted((ROOT.parent / "tests/programs/coda").glob("*.mlir"))[0]
    program = lower_to_triton(coda_ir.parse(first.read_text(), str(first)))

    def refuse(self, *args, **kwargs):
        raise AssertionError(f"a target ran {type(self).__name__}")

    for factory in coda_passes().values():
        monkeypatch.setattr(factory(), "apply", refuse)
    monkeypatch.setattr(PassPipeline, "apply", refuse)
    before = str(program)
    for name, factory in TARGETS.items():
        out = StringIO()
        factory()().emit(make_context(), program, out)
        assert out.getvalue(), name
        assert str(program) == before, f"target {name} changed its input"


ENVIRONMENT_MODULE = "coda_ir.environment"
ENVIRONMENT_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def test_only_the_environment_module_reads_the_environment():
    """No module but `coda_ir/environment.py` uses `os.environ` / `os.getenv` / ... (as an
    attribute of `os` or imported from it). Text that only *generated* code runs (the Triton
    prelude, a string) is not a read."""
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        module = _module_name(path)
        if module == ENVIRONMENT_MODULE:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and node.attr in ENVIRONMENT_NAMES
                    and isinstance(node.value, ast.Name) and node.value.id == "os"):
                offenders.append(f"{module} line {node.lineno}: os.{node.attr}")
            elif isinstance(node, ast.ImportFrom) and node.module == "os":
                offenders += [f"{module} line {node.lineno}: from os import {a.name}"
                              for a in node.names if a.name in ENVIRONMENT_NAMES]
    assert offenders == []
    assert (ROOT / "environment.py").exists()  # the one documented place
