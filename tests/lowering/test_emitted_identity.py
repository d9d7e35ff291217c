"""The emitted Triton module stays the same program when the lowering moves between forms.

Issue 13 moved the elementwise and then the gemm kernels from the string emitter of
`lowering/triton.py` onto `tl` IR (`lowering/tl_epilogue.py`, `tl_gemm.py`, printed by
`triton_printer`). This test pins that the moves changed no program: every function of the
module emitted for each program of the corpus below (every example-shaped test program through
several pipelines, the coda programs, the inputs of the lowering FileCheck tests) has the
digest of main's before the move, after a normalization that changes no semantics
(`normalized`; each rule renames variables or drops a copy only where no read can tell):

* Python's AST (parentheses and layout do not count);
* local names renamed in order of first binding (the printer numbers fresh names its own way);
* `x = y` aliases removed where both are bound once (the string emitter named a value again,
  `t_m = s9`; the tl kernel uses `s9`), or where y is bound only before the alias at the
  function's top level (`t_s = segacc` after the segment loop), or where x is bound only there
  or in branches that never run with it and is read only after it in its own statement list
  (a gemm kernel holds its epilogue twice, in the two branches of `if USE_TMA`);
* one variable per assignment where a name is assigned several times by the statements of one
  list and used nowhere else (`c = f(c)`: the string emitter rebound an interleaved tile's
  columns to their permutation), and one per branch where both branches of an `if` assign a
  name before reading it and it is used nowhere else (`rows64` in both branches of a sub-tiled
  epilogue's `if BN >= ...`);
* `x += y` as `x = x + y` (Triton's code generator treats them alike; tl tensors have no
  `__iadd__`), and `tl.zeros(s, dtype=d)` as `tl.full(s, 0.0, d)` (what `tl.zeros` is);
* a launch's autotune key `key='kernel:digest'` without the digest of the kernel's printed
  source (parentheses and names change it; the kernel itself is compared by its own digest);
* functions defined inside module-level code (the Gluon kernels, under `if _CODA_GLUON:`)
  normalized and compared one by one, like the module's own.

A function whose digest differs is named in the failure. When a change to the emitted code
is intended, record the digests anew (`.venv/bin/python -m tests.lowering.test_emitted_identity
--record`) and say in the commit why the programs changed; the interpreter outputs of the coda
programs are pinned the same way (bitwise, fixed inputs). The whole-corpus comparison of the
move (721 modules, also every module the test suite compiles) is in issue 13's session-11 note.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import re
import shlex
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DIGESTS = Path(__file__).with_name("emitted_digests.json")

# mainloop=gluon: the Gluon kernels of these small programs stay in the comparison (`auto` gives
# gemms this small the tl mainloop only)
NN_PIPELINES = ["nn-autodiff,nn-to-coda{mainloop=gluon}",
                "nn-autodiff,nn-to-coda{gated-grad=separate norm-grad=separate mainloop=gluon}",
                "nn-to-coda{fuse=false}"]
NN_PROGRAMS = ["llama_block", "qwen3_block", "gpt2_block", "lm_head"]


def corpus() -> list[tuple[str, str, str | None]]:
    """(id, text, pipeline) of every program compared (lowering options are the pipeline's
    `coda-to-triton{...}`, as on the command line)."""
    out: list[tuple[str, str, str | None]] = []
    for path in sorted((REPO / "tests/programs/coda").glob("*.mlir")):
        out.append((f"coda/{path.name}", path.read_text(), None))
    for name in NN_PROGRAMS:
        text = (REPO / "tests/programs/nn" / f"{name}.mlir").read_text()
        for i, pipeline in enumerate(NN_PIPELINES):
            out.append((f"nn/{name}#{i}", text, pipeline))
    for path in sorted((REPO / "tests/filecheck/lowering").glob("*.mlir")):
        text = path.read_text()
        for r, run in enumerate(line.split("RUN:", 1)[1] for line in text.splitlines() if "RUN:" in line):
            words = shlex.split(run.split("|")[0])
            if "-t" not in words or words[words.index("-t") + 1] != "triton":
                continue
            pipeline = words[words.index("-p") + 1] if "-p" in words else None
            chunks = text.split("// -----") if "--split-input-file" in words else [text]
            for c, chunk in enumerate(chunks):
                out.append((f"lit/{path.name}#{r}.{c}", chunk, pipeline))
    return out


def emitted(text: str, pipeline: str | None) -> str:
    """What `coda-opt -p PIPELINE -t triton` prints: coda-to-triton (defaults) runs after the
    pipeline unless the pipeline lowered the program itself."""
    import coda_ir
    from coda_ir.lowering.pipeline import lower_to_triton
    from coda_ir.lowering.triton import is_lowered, print_module

    module = coda_ir.parse(text)
    if pipeline:
        module = coda_ir.lower(module, pipeline)
    return print_module(module if is_lowered(module) else lower_to_triton(module))


# ---------------------------------------------------------------------------- normalization


class _Spellings(ast.NodeTransformer):
    """`x += y` -> `x = x + y`; `tl.zeros(s, dtype=d)` -> `tl.full(s, 0.0, d)`."""

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        assert isinstance(node.target, ast.Name)
        return ast.Assign([ast.Name(node.target.id, ast.Store())], ast.BinOp(ast.Name(node.target.id, ast.Load()),
                                                                             node.op, node.value), lineno=0)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        f = node.func
        if (isinstance(f, ast.Attribute) and f.attr == "zeros" and isinstance(f.value, ast.Name) and f.value.id == "tl"
                and len(node.args) == 1 and [k.arg for k in node.keywords] == ["dtype"]):
            return ast.Call(ast.Attribute(ast.Name("tl", ast.Load()), "full", ast.Load()),
                            [node.args[0], ast.Constant(0.0), node.keywords[0].value], [])
        return node


def _names(fn: ast.FunctionDef) -> list[ast.Name]:
    """The names of a function in evaluation order (an assignment's value before its targets)."""
    out: list[ast.Name] = []

    class Visitor(ast.NodeVisitor):
        def visit_Name(self, node: ast.Name) -> None:
            out.append(node)

        def visit_Assign(self, node: ast.Assign) -> None:
            self.visit(node.value)
            for target in node.targets:
                self.visit(target)

        def visit_For(self, node: ast.For) -> None:
            self.visit(node.iter)
            self.visit(node.target)
            for stmt in node.body + node.orelse:
                self.visit(stmt)

    Visitor().visit(fn)
    return out


def _statements(body: list[ast.stmt], in_if: bool = False):
    for stmt in body:
        yield stmt, in_if
        if isinstance(stmt, (ast.For, ast.While)):
            yield from _statements(stmt.body + stmt.orelse, in_if)
        elif isinstance(stmt, ast.If):
            yield from _statements(stmt.body + stmt.orelse, True)


def _drop_assignment(fn: ast.AST, stmt: ast.Assign) -> None:
    """Remove the assignment `stmt` from `fn` (its reads were renamed to the value it copied)."""

    class Drop(ast.NodeTransformer):
        def visit_Assign(self, node: ast.Assign) -> ast.AST | None:
            return None if node is stmt else node

    Drop().visit(fn)


def _remove_aliases(fn: ast.FunctionDef) -> None:
    params = {a.arg for a in fn.args.args}
    while True:
        names = _names(fn)
        position = {id(n): i for i, n in enumerate(names)}
        binds: dict[str, int] = {}
        for n in names:
            if isinstance(n.ctx, ast.Store):
                binds[n.id] = binds.get(n.id, 0) + 1
        for stmt, in_if in _statements(fn.body):
            if in_if or not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                             and isinstance(stmt.value, ast.Name)):
                continue
            x, y = stmt.targets[0].id, stmt.value.id
            at = position[id(stmt.targets[0])]
            once = (y in params and y not in binds) or binds.get(y) == 1
            before = stmt in fn.body and all(position[id(n)] < at for n in names if n.id == y and isinstance(n.ctx, ast.Store))
            loads = [n for n in names if n.id == x and isinstance(n.ctx, ast.Load)]
            if binds.get(x) != 1 or x in params or not (once or before) or any(position[id(n)] < at for n in loads):
                continue
            for n in loads:
                n.id = y

            _drop_assignment(fn, stmt)
            break
        else:
            return


def _locations(fn: ast.FunctionDef) -> tuple[dict[int, tuple], dict[int, ast.stmt]]:
    """Where each name and each statement is: the steps (compound statement, its field, index in
    that list) from the function's body down to the innermost statement that holds it."""
    names: dict[int, tuple] = {}
    statements: dict[int, ast.stmt] = {}

    def visit(body: list[ast.stmt], steps: tuple) -> None:
        for i, stmt in enumerate(body):
            here = (*steps[:-1], (*steps[-1][:2], i))
            statements[id(stmt)] = stmt
            names[id(stmt)] = here
            for field in ("body", "orelse"):
                if isinstance(getattr(stmt, field, None), list):
                    visit(getattr(stmt, field), (*here, (stmt, field, 0)))
            for node in ast.walk(stmt):  # the statement's own names (a loop's target, a test)
                if isinstance(node, ast.Name) and id(node) not in names:
                    names[id(node)] = here

    visit(fn.body, ((fn, "body", 0),))
    return names, statements


def _exclusive(a: tuple, b: tuple) -> bool:
    """Whether two locations are in different branches of one `if` that no loop around both
    repeats: then one never runs after the other."""
    for k, (sa, sb) in enumerate(zip(a, b)):
        if sa == sb:
            continue
        if sa[0] is sb[0] and sa[1] != sb[1] and isinstance(sa[0], ast.If):
            return not any(isinstance(step[0], (ast.For, ast.While)) for step in a[:k])
        return False
    return False


def _after_in(loc: tuple, alias: tuple) -> bool:
    """Whether `loc` is in the alias's statement list after it (nested statements included)."""
    n = len(alias)
    return len(loc) >= n and loc[: n - 1] == alias[: n - 1] and loc[n - 1][:2] == alias[n - 1][:2] \
        and loc[n - 1][2] > alias[n - 1][2]


def _remove_branch_aliases(fn: ast.FunctionDef) -> None:
    """`x = y` removed (x's loads read y) where x is bound only there, or in branches that never run
    after it, and read only after it in its own statement list, which does not bind y again (a
    gemm kernel has its epilogue twice, in the two branches of `if USE_TMA`)."""
    params = {a.arg for a in fn.args.args}
    while True:
        where, statements = _locations(fn)
        names = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and id(n) in where]
        for stmt in statements.values():
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                    and isinstance(stmt.value, ast.Name)):
                continue
            x, y = stmt.targets[0].id, stmt.value.id
            at = where[id(stmt)]
            if x in params or x == y:
                continue
            reads = [n for n in names if n.id == x and isinstance(n.ctx, ast.Load) and _after_in(where[id(n)], at)]
            others = [n for n in names if n.id == x and n is not stmt.targets[0] and not any(n is r for r in reads)]
            if any(not _exclusive(where[id(n)], at) for n in others):
                continue
            if any(n.id == y and isinstance(n.ctx, ast.Store) and _after_in(where[id(n)], at) for n in names):
                continue
            for n in reads:
                n.id = y

            _drop_assignment(fn, stmt)
            break
        else:
            return


def _split_rebindings(fn: ast.FunctionDef) -> None:
    """A name assigned several times by statements of one statement list, and used nowhere else
    (but in branches that never run with it), becomes one name per assignment: `c = a; ...;
    c = f(c)` reads as `c = a; ...; c__1 = f(c)` (the string emitter rebound the columns of an
    interleaved tile to their permutation; the tl kernel names the permutation anew)."""
    where, statements = _locations(fn)
    names = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and id(n) in where]
    params = {a.arg for a in fn.args.args}
    lists: dict[tuple, list[ast.Assign]] = {}
    for stmt in statements.values():
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            loc = where[id(stmt)]
            lists.setdefault((*loc[:-1], loc[-1][:2], stmt.targets[0].id), []).append(stmt)
    for key, binds in lists.items():
        x = key[-1]
        if len(binds) < 2 or x in params:
            continue
        prefix = key[:-1]
        first = where[id(binds[0])]

        def inside(loc: tuple) -> bool:
            return len(loc) >= len(first) and (*loc[: len(first) - 1], loc[len(first) - 1][:2]) == prefix

        occurrences = [n for n in names if n.id == x]
        targets = {id(b.targets[0]) for b in binds}
        if any(not inside(where[id(n)]) and not _exclusive(where[id(n)], first) for n in occurrences):
            continue
        if any(isinstance(n.ctx, ast.Store) and id(n) not in targets and inside(where[id(n)]) for n in occurrences):
            continue  # bound again in a nested statement
        at = sorted(where[id(b)][len(first) - 1][2] for b in binds)
        depth = len(first) - 1
        if any(isinstance(n.ctx, ast.Load) and inside(where[id(n)]) and where[id(n)][depth][2] < at[0] for n in occurrences):
            continue  # read before its first assignment here (a loop's previous iteration)
        for n in occurrences:
            if not inside(where[id(n)]):
                continue
            i = where[id(n)][depth][2]
            k = sum(1 for a in at if a < i or (a == i and isinstance(n.ctx, ast.Store))) - 1
            if k > 0:
                n.id = f"{x}__{k}"


def _split_branch_locals(fn: ast.FunctionDef) -> None:
    """A name assigned in both branches of an `if`, first by a statement of the branch itself and
    read there only after it, and used nowhere else (but in code that never runs with the if), is
    one variable per branch: its `else` occurrences are renamed (the string emitter bound `rows64`
    in both branches of a sub-tiled epilogue's `if BN >= ...`; the tl kernel has two values)."""
    where, statements = _locations(fn)
    names = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and id(n) in where]
    params = {a.arg for a in fn.args.args}
    for stmt in statements.values():
        if not isinstance(stmt, ast.If) or not stmt.orelse:
            continue
        at = where[id(stmt)]
        depth = len(at)

        def branch_of(n: ast.Name) -> str | None:
            loc = where[id(n)]
            return loc[depth][1] if len(loc) > depth and loc[:depth] == at and loc[depth][0] is stmt else None

        for x in sorted({n.id for n in names} - params):
            occurrences = [n for n in names if n.id == x]
            inside = {"body": [], "orelse": []}
            if any(branch_of(n) is None and not _exclusive(where[id(n)], at) for n in occurrences):
                continue
            for n in occurrences:
                if branch_of(n) is not None:
                    inside[branch_of(n)].append(n)
            if not inside["body"] or not inside["orelse"]:
                continue

            def first_bound(field: str) -> bool:
                """Bound by a statement of the branch before any other occurrence there."""
                body = getattr(stmt, field)
                for i, inner in enumerate(body):
                    mine = [n for n in inside[field] if where[id(n)][depth][2] == i]
                    if not mine:
                        continue
                    return (isinstance(inner, ast.Assign) and len(inner.targets) == 1
                            and isinstance(inner.targets[0], ast.Name) and inner.targets[0].id == x and mine == [inner.targets[0]])
                return False

            if first_bound("body") and first_bound("orelse"):
                for n in inside["orelse"]:
                    n.id = f"{x}__else"


def _rename_locals(fn: ast.FunctionDef) -> None:
    params = {a.arg for a in fn.args.args}
    canonical: dict[str, str] = {}
    for n in _names(fn):
        if isinstance(n.ctx, ast.Store) and n.id not in params and n.id not in canonical:
            canonical[n.id] = f"_v{len(canonical)}"
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and n.id in canonical:
            n.id = canonical[n.id]


# the autotune key of a launch: the kernel's name and a digest of its printed source, which
# changes with the kernel's text; the kernel is compared on its own (its normalized AST)
_LAUNCH_KEY = re.compile(r"key='(\w+):[0-9a-f]{12}'")


def normalized(source: str) -> dict[str, str]:
    """Function name -> the digest of its normalized AST (module-level code under `<module>`)."""
    source = _LAUNCH_KEY.sub(r"key='\1:<source digest>'", source)
    tree = _Spellings().visit(ast.parse(source))
    out: dict[str, str] = {}
    rest: list[ast.stmt] = []

    def function(node: ast.FunctionDef) -> str:
        _split_rebindings(node)
        _split_branch_locals(node)
        _remove_aliases(node)
        _remove_branch_aliases(node)
        _rename_locals(node)
        return hashlib.sha256(ast.dump(node).encode()).hexdigest()[:16]

    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = function(node)
            continue
        # functions defined inside module-level code (the Gluon kernels, under `if _CODA_GLUON:`)
        # are compared one by one, as the module's own functions are
        for inner in ast.walk(node):
            for field in ("body", "orelse"):
                body = getattr(inner, field, None)
                if isinstance(body, list) and any(isinstance(f, ast.FunctionDef) for f in body):
                    for f in body:
                        if isinstance(f, ast.FunctionDef):
                            out[f"{f.name} (nested)"] = function(f)
                    setattr(inner, field, [f for f in body if not isinstance(f, ast.FunctionDef)])
        rest.append(node)
    out["<module>"] = hashlib.sha256(ast.dump(ast.Module(rest, [])).encode()).hexdigest()[:16]
    return out


# ---------------------------------------------------------------------------- outputs


def output_digests(name: str) -> list[str]:
    """The bitwise digests of coda program `name`'s outputs in the interpreter, inputs of seed 0."""
    import os

    import torch

    import coda_ir

    os.environ.setdefault("TRITON_INTERPRET", "1")
    refs = sys.modules.get("coda_program_references")
    if refs is None:
        spec = importlib.util.spec_from_file_location("coda_program_references",
                                                      REPO / "tests/programs/coda/references.py")
        assert spec is not None and spec.loader is not None
        refs = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = refs  # its dataclasses look their module up
        spec.loader.exec_module(refs)
    compiled = coda_ir.compile((REPO / "tests/programs/coda" / f"{name}.mlir").read_text(), pipeline=None)
    outputs = getattr(compiled, name)(*refs.make_inputs(name, seed=0))
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    def digest(t: torch.Tensor) -> str:
        raw = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        return hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode() + raw).hexdigest()[:16]

    return [digest(t) for t in outputs]


CODA_PROGRAMS = ["llama_fwd", "llama_bwd", "gpt2_fwd", "lm_head_ce"]


# ---------------------------------------------------------------------------- tests


def refusal(error: Exception) -> str:
    """The error without its source locations (tests/filecheck/lowering/errors.mlir pins those)."""
    return re.sub(r"\S*:\d+:\d+: ", "", f"{type(error).__name__}: {error}")


def _recorded() -> dict:
    return json.loads(DIGESTS.read_text())


@pytest.mark.parametrize("ident,text,pipeline", corpus(), ids=[c[0] for c in corpus()])
def test_emitted_module_is_mains_program(ident, text, pipeline):
    recorded = _recorded()["modules"][ident]
    try:
        now = normalized(emitted(text, pipeline))
    except Exception as error:  # a program the lowering refuses must still be refused the same way
        now = {"<error>": refusal(error)}
    changed = sorted(name for name in set(now) | set(recorded) if now.get(name) != recorded.get(name))
    assert not changed, f"{ident}: these functions are no longer main's program: {changed}"


@pytest.mark.parametrize("name", CODA_PROGRAMS)
def test_interpreter_outputs_are_mains_bit_for_bit(name):
    assert output_digests(name) == _recorded()["outputs"][name]


def record() -> dict:
    modules = {}
    for ident, text, pipeline in corpus():
        try:
            modules[ident] = normalized(emitted(text, pipeline))
        except Exception as error:
            modules[ident] = {"<error>": refusal(error)}
    return {"modules": modules, "outputs": {name: output_digests(name) for name in CODA_PROGRAMS}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help=f"write the digests of this tree's lowering to {DIGESTS}")
    parser.add_argument("--output", type=Path, default=DIGESTS, help="where --record writes")
    args = parser.parse_args()
    if not args.record:
        sys.exit(parser.print_help())
    args.output.write_text(json.dumps(record(), indent=1, sort_keys=True) + "\n")
