"""``vheads report``: rebuild a run's report (:func:`vheads.study.build_report_if_available`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from vheads._cli._common import RunDir, check_run_dir, die


def report(
    run_dir: RunDir,
    out: Annotated[Optional[Path], typer.Option(help="write the report here (default: RUN_DIR; for a run on read-only media)")] = None,  # noqa: UP007
    metric: Annotated[Optional[str], typer.Option(help="the metric the tables lead with: p4, logprob or logit-diff (default: the run's config key metric)")] = None,  # noqa: UP007
    screenshot: Annotated[bool, typer.Option("--screenshot", help="also write report.png, the top of the page in headless Chromium (where installed)")] = False,
) -> None:
    """Rebuild the report (Markdown + HTML) of a study run from its results store."""
    from vheads.store import METRIC_COLUMNS

    if metric is not None and metric not in METRIC_COLUMNS:
        die(f"--metric: unknown metric {metric!r}; choose from {', '.join(METRIC_COLUMNS)}")
    check_run_dir(run_dir)
    if out is not None:  # before any work: the report is a folder of files
        from vheads._errors import check_output_path

        check_output_path(out, "--out")
    from vheads.study import build_report_if_available

    png = (out if out is not None else run_dir) / "report.png"
    before = png.stat().st_mtime_ns if png.is_file() else None
    typer.echo(f"report: {build_report_if_available(run_dir, out, metric, screenshot)}")
    if screenshot and (not png.is_file() or png.stat().st_mtime_ns == before):  # the screenshot never fails the report: say so
        from vheads.report import CHROMIUM_NAMES, find_chromium

        why = (f"no Chromium on PATH ({', '.join(CHROMIUM_NAMES)}); install one (Debian: apt-get install chromium)"
               if find_chromium() is None else "Chromium ran but wrote no image")
        typer.echo(f"⚠ --screenshot: report.png not written: {why}", err=True)
