"""Lazy package exports: a package's public names, imported from their module on first use.

A package whose ``__init__`` imports every submodule makes ``import vheads.<pkg>`` load
torch and transformers even for a caller that needs one light submodule (the CLI, which
must answer ``--help`` at once). :func:`lazy_exports` gives the package a module-level
``__getattr__`` (PEP 562) instead: ``from vheads.discovery import load_headset`` still
works, and loads ``vheads.discovery._files`` (and what it imports) only then.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, list[str | tuple[str, str]]]
                 ) -> tuple[Callable[[str], object], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package`` from ``{module: public names}``;
    ``module`` is relative to the package (``"_files"``), and a name is either the module's
    own or a ``(public name, module's name)`` pair.

    A name, once resolved, is stored in the package's namespace (later look-ups are plain).
    """
    where = {}
    for module, names in exports.items():
        for name in names:
            public, attr = (name, name) if isinstance(name, str) else name
            where[public] = (module, attr)

    def __getattr__(name: str) -> object:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attr = where[name]
        value = getattr(importlib.import_module(f"{package}.{module}"), attr)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(where) | set(vars(sys.modules[package])))

    return __getattr__, __dir__, sorted(where)
