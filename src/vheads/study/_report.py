"""The study's report stage (also ``vheads report DIR``): no model, no torch is loaded."""

from __future__ import annotations

from pathlib import Path


def build_report_if_available(run_dir: Path, out_dir: Path | None = None, metric: str | None = None,
                              screenshot_png: bool = False) -> Path | None:
    """Build the report (into ``out_dir``, default ``run_dir``; tables led by ``metric``,
    default the config's); with ``screenshot_png`` also leave ``report.png``, a screenshot of
    the page's top, where Chromium exists (a few seconds more: off in the study's report stage)."""
    try:
        from vheads.report import build_report, screenshot
    except ImportError:
        return None
    html = build_report(run_dir, out_dir, metric=metric)
    if not screenshot_png:
        return html
    try:
        screenshot(html, html.parent / "report.png")
    except Exception:  # noqa: BLE001 - the screenshot is a convenience, never a failure
        pass
    return html
