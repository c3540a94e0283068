"""``vheads export``: a run's per-item outcomes and tables as Parquet or CSV (:func:`vheads.study.export_run`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from vheads._cli._common import RunDir, check_run_dir, die


def export(
    run_dir: RunDir,
    format: Annotated[str, typer.Option("--format", help="parquet (typed, compressed) or csv")] = "parquet",
    out: Annotated[Optional[Path], typer.Option(help="output folder (default: RUN_DIR/export)")] = None,  # noqa: UP007
) -> None:
    """Export the per-item outcomes and tables of a run as Parquet (default) or CSV."""
    if format not in ("parquet", "csv"):
        die(f"--format {format!r}: choose parquet or csv")
    check_run_dir(run_dir)
    from vheads.study import export_run

    for p in export_run(run_dir, format, out):
        typer.echo(str(p))
