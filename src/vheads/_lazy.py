"""Lazy package exports: a package's public names, imported from their module on first use.

A package whose ``__init__`` imports every submodule makes ``import vheads.<pkg>`` load
torch and transformers even for a caller that needs one light submodule (the CLI, which
must answer ``--help`` at once). Such a package lists its public names as imports under
``if TYPE_CHECKING:`` (what type checkers and mkdocstrings read) and calls
:func:`lazy_exports`, which reads that block and gives the package a module-level
``__getattr__`` (PEP 562): ``from vheads.discovery import load_headset`` still works, and
loads ``vheads.discovery._files`` (and what it imports) only then.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path


def type_checking_imports(path: str | Path) -> dict[str, tuple[str, str]]:
    """``{public name: (module, name in that module)}`` of the ``from M import a, b as c``
    statements under ``if TYPE_CHECKING:`` in the source file ``path``."""
    tree = ast.parse(Path(path).read_text(), str(path))
    where: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom):
                    for alias in stmt.names:
                        where[alias.asname or alias.name] = (stmt.module, alias.name)
    return where


def lazy_exports(package: str) -> tuple[Callable[[str], object], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package`` (its ``__name__``), from the
    imports under ``if TYPE_CHECKING:`` in its ``__init__``. A name, once resolved, is
    stored in the package's namespace (later look-ups are plain attribute reads)."""
    where = type_checking_imports(sys.modules[package].__file__)

    def __getattr__(name: str) -> object:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attr = where[name]
        value = getattr(importlib.import_module(module), attr)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(where) | set(vars(sys.modules[package])))

    return __getattr__, __dir__, sorted(where)
