"""The report's sections as registered parts.

Each section of a study's report is one module of :mod:`vheads.report.sections` that
registers itself with the :func:`section` decorator: its anchor (``id``), title, the
"How to read this" paragraph, its place in the page (``order``), the results-store tables
it reads (``needs``), and the tables and figures it may show (``tables``: title patterns,
``figures``: file-stem patterns, both :mod:`fnmatch` globs). The decorated function takes
the run's :class:`vheads.report.RunData` and returns the section's blocks (``Table``,
``Figure``, a ``list[Check]`` checklist, a paragraph ``str``; ``None`` entries are
dropped); a section that returns no block is left out of the report.

:func:`registered_sections` imports every module of the ``sections`` package (so adding a
section is adding one file there, nothing else) and returns the sections in page order.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from fnmatch import fnmatch
from typing import Callable

from vheads.report._doc import Figure

SECTION_PACKAGE = "vheads.report.sections"


@dataclass(frozen=True)
class SectionSpec:
    """One registered section (see the module docstring for the fields)."""

    id: str
    title: str
    how_to_read: str
    order: float
    build: Callable
    needs: tuple[str, ...] = ()
    tables: tuple[str, ...] = ()
    figures: tuple[str, ...] = ()

    def shows_table(self, title: str) -> bool:
        return any(fnmatch(title, pat) for pat in self.tables)

    def shows_figure(self, name: str) -> bool:
        return any(fnmatch(name, pat) for pat in self.figures)


#: section id -> its spec, filled as the section modules are imported
SECTIONS: dict[str, SectionSpec] = {}


def section(id: str, title: str, how_to_read: str, order: float, needs: tuple[str, ...] = (),
            tables: tuple[str, ...] = (), figures: tuple[str, ...] = ()):
    """Register the decorated ``build(run) -> list of blocks`` as the report section ``id``."""

    def register(build: Callable) -> Callable:
        if id in SECTIONS and SECTIONS[id].build.__qualname__ != build.__qualname__:
            raise ValueError(f"report section {id!r} is registered twice")
        SECTIONS[id] = SectionSpec(id, title, how_to_read, order, build, tuple(needs), tuple(tables), tuple(figures))
        return build

    return register


#: the entry-point group of report sections other packages add (``[project.entry-points."vheads.sections"]``
#: ``mine = "my_package.my_section"``: the module registers its section with :func:`section` when imported)
ENTRY_POINT_GROUP = "vheads.sections"


def _plugin_sections() -> None:
    """Import every module of the :data:`ENTRY_POINT_GROUP` entry points; one that fails is
    left out with a warning naming it (the report is still built)."""
    import warnings
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            importlib.import_module(ep.value.partition(":")[0])
        except Exception as e:  # a plugin's own error: never the whole report's
            warnings.warn(f"report section plugin {ep.name!r} ({ep.value}) failed to import and is left out: "
                          f"{type(e).__name__}: {e}", stacklevel=2)


def registered_sections() -> list[SectionSpec]:
    """Every section of :mod:`vheads.report.sections` and of the installed plugins (entry
    points :data:`ENTRY_POINT_GROUP`; each module imported once), in page order."""
    pkg = importlib.import_module(SECTION_PACKAGE)
    for info in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{SECTION_PACKAGE}.{info.name}")
    _plugin_sections()
    return sorted(SECTIONS.values(), key=lambda s: (s.order, s.id))


def figure_patterns() -> list[str]:
    """The figure file-stem patterns of every registered section (a previous report's files)."""
    return [p for s in registered_sections() for p in s.figures]


def figure(name: str, png: bytes | None, caption: str, wide: bool = True, max_width: int | None = None) -> Figure | None:
    """A :class:`Figure` block, or ``None`` (dropped from the section) where nothing was drawn."""
    return Figure(name, png, caption, wide, max_width) if png else None
