"""The house: packages form a directed acyclic graph, use each other's public names, and
each imports alone in a fresh interpreter (no import-order accidents).

The graph is read from the source with ``ast`` (every import, also those inside
functions), so a lazy import that would close a circle counts as much as a top-level one.
Nodes are the top-level packages and modules of ``vheads`` (``vheads.models``,
``vheads.store``, ``vheads.cli``, …); the root ``vheads`` is its own node.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC / "vheads"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def node_of(module: str) -> str:
    """``vheads.discovery._files`` -> ``vheads.discovery``; ``vheads`` -> ``vheads``."""
    parts = module.split(".")
    return ".".join(parts[:2])


def imports_of(path: Path) -> list[str]:
    """Absolute names of every ``vheads`` module (or name) imported anywhere in ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import; vheads uses absolute imports"
            names += [f"{node.module}.{a.name}" for a in node.names]
    return [n for n in names if n == "vheads" or n.startswith("vheads.")]


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def package_graph() -> dict[str, set[str]]:
    """``{node: nodes it imports}``, self-edges dropped."""
    graph: dict[str, set[str]] = {}
    for mod, path in all_modules().items():
        src = node_of(mod)
        deps = graph.setdefault(src, set())
        for name in imports_of(path):
            dst = node_of(name)
            if dst == "vheads.__version__":
                dst = "vheads"
            if dst != src:
                deps.add(dst)
    return graph


def dependency_order() -> list[str]:
    return list(TopologicalSorter(package_graph()).static_order())


def test_packages_form_an_acyclic_graph():
    try:
        order = dependency_order()
    except CycleError as e:
        pytest.fail(f"import cycle between packages: {' -> '.join(e.args[1])}")
    graph = package_graph()
    pos = {n: i for i, n in enumerate(order)}
    for a, deps in graph.items():
        for b in deps:
            assert pos[b] < pos[a], f"{a} imports {b} but comes before it"


@pytest.mark.parametrize(
    "lower, upper",
    [("vheads.models", "vheads.tiny"), ("vheads.evaluation", "vheads.discovery"), ("vheads.report", "vheads.study"),
     ("vheads.engine", "vheads.evaluation"), ("vheads.data", "vheads.models")],
)
def test_a_lower_package_never_imports_a_higher_one(lower, upper):
    """The layering DESIGN.md draws: the model registry knows where the tiny weights are
    without importing ``vheads.tiny``; evaluation never reaches up into discovery; the
    report reads the store (``vheads.store``), not the study runner."""
    assert upper not in package_graph()[lower]


def is_private_to_another_package(importer: str, name: str) -> bool:
    """``name`` has a ``_private`` component whose parent package does not contain
    ``importer``. Root helpers (``vheads._io``) are private to ``vheads``, which contains
    everything, so any module may use them."""
    parts = name.split(".")
    for i, part in enumerate(parts[1:], start=1):
        if part.startswith("_") and not part.startswith("__"):
            owner = ".".join(parts[:i])
            return not (importer == owner or importer.startswith(owner + "."))
    return False


def test_packages_use_each_others_public_names():
    offenders = [
        f"{mod} imports {name}"
        for mod, path in all_modules().items()
        for name in imports_of(path)
        if is_private_to_another_package(mod, name)
    ]
    assert not offenders, "import the public name from the package instead:\n" + "\n".join(offenders)


def test_the_private_import_rule_flags_what_it_should():
    assert is_private_to_another_package("vheads.study._units", "vheads.discovery._selection.select_heads")
    assert is_private_to_another_package("vheads.cli", "vheads.tiny._cli.app")
    assert is_private_to_another_package("vheads.report._data", "vheads.study._store.Store")
    assert not is_private_to_another_package("vheads.discovery._files", "vheads.discovery._region_mass.Setting")
    assert not is_private_to_another_package("vheads.data.loaders", "vheads._io.read_json")
    assert not is_private_to_another_package("vheads.study._units", "vheads.discovery.select_heads")


def closure(graph: dict[str, set[str]], node: str) -> set[str]:
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        for d in graph.get(n, ()):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


#: a new Python imports every package once (so torch, transformers and the other
#: third-party libraries are loaded: the slow part), then drops every ``vheads`` module
#: from ``sys.modules`` and forks one child per package; in each child no ``vheads``
#: module is loaded, the package is imported first and the child reports what that loaded
DRIVER = """
import importlib, json, os, sys
order = json.loads(sys.argv[1])
for pkg in order:
    try:
        importlib.import_module(pkg)
    except BaseException:
        pass  # the child of this package reports the error
for m in [m for m in sys.modules if m == "vheads" or m.startswith("vheads.")]:
    del sys.modules[m]
results = {}
for pkg in order:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            importlib.import_module(pkg)
            out = {"ok": True, "loaded": sorted({".".join(m.split(".")[:2]) for m in sys.modules if m.startswith("vheads")})}
        except BaseException:
            import traceback
            out = {"ok": False, "error": traceback.format_exc()[-2000:]}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    results[pkg] = json.loads(data)
print(json.dumps(results))
"""


def test_each_package_imports_alone_in_a_fresh_interpreter(tmp_path):
    """In dependency order, each package is the first ``vheads`` import of its process
    (run outside the source tree), and it loads no package that it does not depend on."""
    graph = package_graph()
    order = [n for n in dependency_order() if not n.rsplit(".", 1)[-1].startswith("_")]
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(order)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    results = json.loads(r.stdout.strip().splitlines()[-1])
    assert list(results) == order
    for node in order:
        assert results[node]["ok"], f"`import {node}` alone fails:\n{results[node].get('error')}"
        extra = set(results[node]["loaded"]) - closure(graph, node) - {node, "vheads"}
        assert not extra, f"importing {node} loads {sorted(extra)}, which it does not depend on"


# ---- no import circle between modules --------------------------------------------------------
# (tests/test_house.py: the graph Python walks at import time, relative imports resolved)


def is_type_checking_block(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def runtime_imports_of(path: Path) -> list[str]:
    """The ``vheads`` names ``path`` imports when it runs: every import (top level or inside a
    function) except those under ``if TYPE_CHECKING:`` outside a package ``__init__``
    (annotations only, never executed; in an ``__init__`` that block is the lazy exports
    (:mod:`vheads._lazy`), imported on first use, so it counts)."""
    tree = ast.parse(path.read_text(), str(path))
    skip: set[int] = set()
    if path.name != "__init__.py":
        for node in ast.walk(tree):
            if is_type_checking_block(node):
                skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    names = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names += [f"{node.module}.{a.name}" for a in node.names]
    return [n for n in names if n == "vheads" or n.startswith("vheads.")]


def module_graph() -> dict[str, set[str]]:
    """``{module: modules it imports}`` over every module of ``vheads``: an imported name is
    the deepest module it names (``vheads.report._tables.fmt`` -> ``vheads.report._tables``,
    ``from vheads.report import _figures`` -> ``vheads.report._figures``, ``vheads.evaluation.rank_p``
    -> the package ``vheads.evaluation``, whose ``__init__`` imports its modules in turn)."""
    modules = all_modules()

    def resolve(name: str) -> str:
        while name not in modules:
            name = name.rpartition(".")[0]
        return name

    return {mod: {resolve(n) for n in runtime_imports_of(path)} - {mod} for mod, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (``[a, b, …, a]``), or None."""
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as e:
        return list(reversed(e.args[1]))
    return None


def test_no_import_cycle_between_modules():
    cycle = find_cycle(module_graph())
    assert cycle is None, "import cycle between vheads modules: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_circle_and_ignores_a_line():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) is not None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_the_module_graph_reads_lazy_and_type_only_imports_as_they_run(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from vheads.study._config import X\n"
                   "def f():\n    from vheads.report._tables import fmt\n")
    assert runtime_imports_of(src) == ["vheads.report._tables.fmt"]
    init = tmp_path / "__init__.py"
    init.write_text(src.read_text())
    assert sorted(runtime_imports_of(init)) == ["vheads.report._tables.fmt", "vheads.study._config.X"]



def test_no_import_circle_between_modules_even_through_annotations():
    """Stricter than the runtime graph above: counting ``TYPE_CHECKING`` imports too, no circle
    (issue 42: the config imported the ablations, which read the study's items, which named the
    config for their annotations; the config now validates its own ablation key)."""
    modules = all_modules()

    def resolve(name: str) -> str:
        while name not in modules:
            name = name.rpartition(".")[0]
        return name

    cycle = find_cycle({m: {resolve(n) for n in imports_of(p)} - {m} for m, p in modules.items()})
    assert cycle is None, "import circle (annotations included): " + " -> ".join(cycle)


def test_the_headset_stands_below_discovery_and_evaluation():
    """``HeadSet``, the central noun, lives in ``vheads._headset``, which imports neither
    discovery nor evaluation (issue 42); both packages import it from there."""
    graph = package_graph()
    assert not {"vheads.discovery", "vheads.evaluation"} & closure(graph, "vheads._headset")
    for pkg in ("vheads.discovery", "vheads.evaluation"):
        assert "vheads._headset" in graph[pkg]
