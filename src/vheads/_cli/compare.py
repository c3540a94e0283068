"""``vheads compare``: the cross-model report of separate single-model runs (:func:`vheads.study.compare_runs`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def compare(
    runs: Annotated[list[str], typer.Argument(help="finished single-model run folders (RUN or NAME=RUN), configs alike but for the model")],
    out: Annotated[Path, typer.Option(help="folder for the cross-model report")] = Path("runs/compare"),
) -> None:
    """The cross-model tables (seed Tables 8, 19, 27; Fig. 7) from separate single-model runs."""
    from vheads.study import compare_runs

    typer.echo(f"report: {compare_runs(runs, out)}")
