"""The report's sections as registered parts (a :class:`vheads._registry.Registry`,
entry-point group ``vheads.sections``).

Each section of a study's report is one module of :mod:`vheads.report.sections` that
registers itself with the :func:`section` decorator: its anchor (``id``), title, the
"How to read this" paragraph, its place in the page (``order``), the results-store tables
it reads (``needs``), and the tables and figures it may show (``tables``: title patterns,
``figures``: file-stem patterns, both :mod:`fnmatch` globs). The decorated function takes
the run's :class:`vheads.report.RunData` and returns the section's blocks (``Table``,
``Figure``, a ``list[Check]`` checklist, a paragraph ``str``; ``None`` entries are
dropped); a section that returns no block is left out of the report.

:func:`registered_sections` imports every module of the ``sections`` package (so adding a
section is adding one file there, nothing else) and the plugin modules of the entry-point
group ``vheads.sections`` (once; one that fails to import is left out with a warning naming
it) and returns the sections in page order. An ``id`` registered again with a different
section is refused (:class:`vheads.VheadsError`).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from fnmatch import fnmatch
from typing import Callable

from vheads._registry import Registry
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

    @property
    def name(self) -> str:
        """The registry's key: the section's anchor ``id``."""
        return self.id

    def shows_table(self, title: str) -> bool:
        return any(fnmatch(title, pat) for pat in self.tables)

    def shows_figure(self, name: str) -> bool:
        return any(fnmatch(name, pat) for pat in self.figures)


#: the entry-point group of report sections other packages add (``[project.entry-points."vheads.sections"]``
#: ``mine = "my_package.my_section"``: the module registers its section with :func:`section` when imported)
ENTRY_POINT_GROUP = "vheads.sections"

#: every report section, by id (plugins: :data:`ENTRY_POINT_GROUP`)
SECTION_REGISTRY: Registry[SectionSpec] = Registry("report section", group=ENTRY_POINT_GROUP)
#: section id -> its spec, filled as the section modules are imported (the registry's live view)
SECTIONS: dict[str, SectionSpec] = SECTION_REGISTRY.by_name


def section(id: str, title: str, how_to_read: str, order: float, needs: tuple[str, ...] = (),
            tables: tuple[str, ...] = (), figures: tuple[str, ...] = ()):
    """Decorator: register ``build(run) -> list of blocks`` as the report section ``id``."""
    return SECTION_REGISTRY.decorator(lambda build: SectionSpec(id, title, how_to_read, order, build, tuple(needs),
                                                                tuple(tables), tuple(figures)))


def registered_sections() -> list[SectionSpec]:
    """Every section of :mod:`vheads.report.sections` and of the installed plugins (entry
    points :data:`ENTRY_POINT_GROUP`; each module imported once), in page order."""
    pkg = importlib.import_module(SECTION_PACKAGE)
    for info in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{SECTION_PACKAGE}.{info.name}")
    return sorted(SECTION_REGISTRY.entries(), key=lambda s: (s.order, s.id))


def figure_patterns() -> list[str]:
    """The figure file-stem patterns of every registered section (a previous report's files)."""
    return [p for s in registered_sections() for p in s.figures]


def figure(name: str, png: bytes | None, caption: str, wide: bool = True, max_width: int | None = None) -> Figure | None:
    """A :class:`Figure` block, or ``None`` (dropped from the section) where nothing was drawn."""
    return Figure(name, png, caption, wide, max_width) if png else None
