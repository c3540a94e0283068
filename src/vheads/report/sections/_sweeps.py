"""β and k sweeps: each sweep point's S against its own controls."""

from __future__ import annotations

from vheads.report import _figures as F
from vheads.report import _tables as T
from vheads.report._data import RunData
from vheads.report._registry import figure, section

HOW = (
    "CERS (or NCS) against the steering strength β and the head-set size k, for S (red) and its controls (line: "
    "mean over draws; band: min to max). An effect that only exists at one β or one k, or that the random "
    "band reaches elsewhere, is not a property of the discovered heads."
)


@section("sweeps", "β and k sweeps", HOW, order=90, needs=("outcomes", "headsets"),
         tables=("Sweep over *",), figures=("beta_sweep", "k_sweep"))
def sweeps(run: RunData) -> list:
    return [figure("beta_sweep", F.sweep_figure(run, "beta"), "Statistic against steering strength β (log scale)."),
            figure("k_sweep", F.sweep_figure(run, "k"), "Statistic against head-set size k."),
            T.sweep_table(run, "beta"), T.sweep_table(run, "k")]
