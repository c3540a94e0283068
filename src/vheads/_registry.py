"""One registry idiom for every kind of named part (ablations, tests, causal methods, stages, ...).

A :class:`Registry` holds named entries (frozen dataclasses with a ``name`` field) in the
order they were registered. :meth:`Registry.register` adds one ; :meth:`Registry.decorator`
makes a decorator that builds the entry from the decorated function; registering a different entry under a
taken name is an error, the same entry again is a no-op (a module imported twice).
:meth:`Registry.get` returns an entry or raises :class:`vheads.VheadsError` naming the
kind, the value, the closest name (:func:`difflib.get_close_matches`) and every name.

Plugins: a registry with an entry-point ``group`` (``vheads.<kind>``) imports, on first
look-up, the modules of that group's entry points (``[project.entry-points."vheads.ablations"]``
``mine = "my_package.my_ablation"``: the module registers its entries when imported). A
plugin that fails to import is left out with a warning naming it (``strict``: it raises).
Torch-free: a registry is consulted when a config is checked, before torch loads.
"""

from __future__ import annotations

import difflib
import importlib
import warnings
from typing import Callable, Generic, Iterator, TypeVar

from vheads._errors import VheadsError

E = TypeVar("E")


def did_you_mean(name: str, names) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``names`` to ``name``, else ``""``."""
    hint = difflib.get_close_matches(str(name), [str(n) for n in names], n=1)
    return f" (did you mean {hint[0]!r}?)" if hint else ""


class Registry(Generic[E]):
    """Named entries of one kind, in registration order, with plugins from ``group``.

    ``kind``: the word error messages use ("ablation"). ``group``: the entry-point group of
    plugin modules (default ``vheads.<kind>s``; ``""``: none)."""

    def __init__(self, kind: str, group: str | None = None, strict: bool = False):
        self.kind = kind
        self.group = f"vheads.{kind.replace(' ', '_')}s" if group is None else group
        self.strict = strict  # a plugin that fails to import raises (default: left out with a warning)
        self._entries: dict[str, E] = {}
        self._plugins_loaded = not self.group

    @property
    def by_name(self) -> dict[str, E]:
        """The live ``{name: entry}`` (plugins not loaded: :meth:`entries` loads them)."""
        return self._entries

    # ---- adding ---------------------------------------------------------------------------------
    def register(self, entry: E) -> E:
        """Add ``entry`` and return it (the same entry again is a no-op)."""
        name = entry.name
        old = self._entries.get(name)
        if old is not None and old != entry:
            raise VheadsError(f"{self.kind} {name!r} is registered twice, with different entries")
        self._entries[name] = entry
        return entry

    def decorator(self, build: Callable[..., E], **fields) -> Callable[[Callable], Callable]:
        """A decorator that registers ``build(fn, **fields)`` and returns ``fn`` unchanged."""

        def wrap(fn: Callable) -> Callable:
            self.register(build(fn, **fields))
            return fn

        return wrap

    def unregister(self, name: str) -> None:
        """Remove ``name`` (tests; a no-op when absent)."""
        self._entries.pop(name, None)

    # ---- looking up -----------------------------------------------------------------------------
    def load_plugins(self) -> None:
        """Import the modules of :attr:`group`'s entry points, once."""
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=self.group):
            try:
                importlib.import_module(ep.value.partition(":")[0])
            except Exception as e:  # a plugin's own error: never the whole run's
                if self.strict:
                    raise
                warnings.warn(f"{self.kind} plugin {ep.name!r} ({ep.value}) failed to import and is left out: {e}", stacklevel=2)

    def entries(self) -> list[E]:
        """Every entry, in registration order (plugins loaded)."""
        self.load_plugins()
        return list(self._entries.values())

    def names(self) -> tuple[str, ...]:
        """Every name, in registration order (plugins loaded)."""
        return tuple(e.name for e in self.entries())

    def __contains__(self, name) -> bool:
        self.load_plugins()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def unknown(self, name, what: str = "") -> VheadsError:
        """The error for an unknown ``name``: ``[what: ]unknown <kind> 'x' (did you mean 'y'?); choose from a, b``."""
        names = self.names()
        return VheadsError(f"{what + ': ' if what else ''}unknown {self.kind} {name!r}{did_you_mean(name, names)}; "
                           f"choose from {', '.join(names)}")

    def get(self, name, what: str = "") -> E:
        """The entry called ``name``; :meth:`unknown`'s error otherwise."""
        self.load_plugins()
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise self.unknown(name, what) from None
