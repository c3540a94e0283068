"""House rules over ``src/vheads`` read with ``ast`` (issue 42): no import circle between modules
at import time, and no source file over :data:`MAX_LINES` lines.

:mod:`tests.test_imports` holds the package graph and two module graphs: the imports that run
(every function's lazy import included) and every import at all (``TYPE_CHECKING`` blocks
included); both refuse a relative import. The graph here is the one Python walks while it
imports a module: the statements that run at import time (the module's body, its class bodies,
its ``if``/``try`` blocks, ``if TYPE_CHECKING:`` blocks counted, so that an annotation's import can
be turned on without closing a circle) but no function body, with a relative import resolved
against the package it stands in, so the rule holds whatever spelling an import uses.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.test_imports import ROOT, all_modules, find_cycle

#: the most lines a source file of ``src/vheads`` may have
MAX_LINES = 500

#: files over MAX_LINES that are being split elsewhere (issue 42), relative to ``src/vheads``; the
#: change that brings one to MAX_LINES or under removes it here (the test below fails until it does)
BEING_SPLIT = {
}


def line_count(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_no_source_file_is_over_max_lines():
    over = {p.relative_to(ROOT).as_posix(): n for p in sorted(ROOT.rglob("*.py")) if (n := line_count(p)) > MAX_LINES}
    new = {f: n for f, n in over.items() if f not in BEING_SPLIT}
    assert not new, (f"source files over {MAX_LINES} lines: "
                     + ", ".join(f"{f} ({n})" for f, n in new.items())
                     + "; split each into modules named for what their parts hold, re-exporting the old names")


@pytest.mark.parametrize("name", sorted(BEING_SPLIT))
def test_a_file_being_split_is_still_over_max_lines(name):
    path = ROOT / name
    assert path.is_file(), f"{name} is on BEING_SPLIT but does not exist: remove it from the list"
    assert line_count(path) > MAX_LINES, (
        f"{name} has {line_count(path)} lines, no more than {MAX_LINES}: remove it from BEING_SPLIT")


# ---- no import circle at import time, relative imports resolved ----------------------------


def absolute_module(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute name ``from <node.module> import …`` names in ``module`` (file ``path``):
    ``from .x import f`` in ``vheads.report._tables`` -> ``vheads.report.x``; in a package's
    ``__init__`` one dot is the package itself."""
    if node.level == 0:
        return node.module
    parts = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    if node.level - 1 >= len(parts):
        raise ValueError(f"{path}: `from {'.' * node.level}{node.module or ''} import …` climbs above the top package")
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def import_time_imports(module: str, path: Path) -> list[str]:
    """The names ``module`` imports while it is being imported: every import statement outside a
    function body (classes' bodies and ``if TYPE_CHECKING:`` blocks included), relative ones made
    absolute; ``import a.b`` names ``a.b``, ``from a import b`` names ``a.b``."""
    names: list[str] = []
    todo: list[ast.AST] = [ast.parse(path.read_text(), str(path))]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue  # runs when called, not when imported: tests/test_imports.py counts it
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = absolute_module(module, path, node)
            names += [f"{base}.{a.name}" for a in node.names]
        todo.extend(ast.iter_child_nodes(node))
    return names


def import_time_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """``{module: the modules it imports at import time}`` over ``modules``: a name is the deepest
    module it names (``vheads.report._tables.fmt`` -> ``vheads.report._tables``)."""

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    return {m: {r for n in import_time_imports(m, p) if (r := resolve(n))} - {m} for m, p in modules.items()}


def test_no_import_circle_between_modules_at_import_time():
    cycle = find_cycle(import_time_graph(all_modules()))
    assert cycle is None, "import circle between vheads modules at import time: " + " -> ".join(cycle)


def test_the_import_time_graph_resolves_relative_imports_and_skips_function_bodies(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "pkg": pkg / "__init__.py", "pkg.a": pkg / "a.py", "pkg.b": pkg / "b.py",
        "pkg.sub": pkg / "sub" / "__init__.py", "pkg.sub.c": pkg / "sub" / "c.py",
    }
    files["pkg"].write_text("from . import a\n")
    files["pkg.a"].write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub.c import X\n"
                              "def f():\n    from .b import g\n")
    files["pkg.b"].write_text("")
    files["pkg.sub"].write_text("from .c import X\n")
    files["pkg.sub.c"].write_text("class X:\n    from ..b import h\n")
    graph = import_time_graph(files)
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.sub.c"}, "pkg.b": set(), "pkg.sub": {"pkg.sub.c"},
                     "pkg.sub.c": {"pkg.b"}}
    assert find_cycle(graph) is None
    files["pkg.sub.c"].write_text("from .. import a\n")  # a -> sub.c (an annotation) -> a
    assert find_cycle(import_time_graph(files)) is not None
