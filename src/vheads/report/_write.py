"""Writing a built report to disk: ``report.md``, ``report.html`` and ``figures/*.png``."""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

from vheads._errors import path_inside
from vheads._io import atomic_write
from vheads.report._doc import Figure, Section, render_html, render_markdown
from vheads.report._registry import figure_patterns


def write_report(out: Path, title: str, subtitle: str, warnings: list[str], sections: list[Section],
                 figures: tuple[str, ...] = ()) -> Path:
    """Write ``report.md``, ``report.html`` and the figures of ``sections`` into ``out``
    (replacing a previous report's: the PNGs whose names match a registered section's
    figures or ``figures``, other files are left alone); returns the path of ``report.html``."""
    figdir = out / "figures"
    figdir.mkdir(exist_ok=True)
    ours = [*figure_patterns(), *figures]
    for old in figdir.glob("*.png"):  # a previous report's figures
        if any(fnmatch(old.stem, pat) for pat in ours):
            old.unlink()
    for old in [*figdir.glob(".*.tmp"), *out.glob(".report.*.tmp")]:  # left by a report killed mid-write
        old.unlink()
    # every file is written to a temp file and renamed: a full disk or a kill leaves the
    # previous file or none, never a truncated one
    for s in sections:
        for blk in s.blocks:
            if isinstance(blk, Figure):
                atomic_write(path_inside(figdir, f"{blk.name}.png"), lambda fh, png=blk.png: fh.write(png), mode="wb")
    md = render_markdown(title, subtitle, warnings, sections)
    atomic_write(out / "report.md", lambda fh: fh.write(md.encode("utf-8")), mode="wb")
    html_path = out / "report.html"
    html = render_html(title, subtitle, warnings, sections)
    atomic_write(html_path, lambda fh: fh.write(html.encode("utf-8")), mode="wb")
    return html_path
