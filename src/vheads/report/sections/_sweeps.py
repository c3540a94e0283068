"""β and k sweeps: each sweep point's S against its own controls."""

from __future__ import annotations

from vheads.report import _figures as F
from vheads.report import _tables as T
from vheads.report._data import RunData
from vheads.report._registry import figure, section

HOW = (
    "CERS (or NCS) against the steering strength β and the head-set size k: in the figures, one panel per test, "
    "one row per setting, one cell per sweep point, coloured by S minus the mean of that point's own controls "
    "(* where S is above every draw); the tables give S and each control at every point. An effect that only "
    "exists at one β or one k, or that the random draws reach elsewhere, is not a property of the discovered heads."
)


@section("sweeps", "β and k sweeps", HOW, order=90, needs=("outcomes", "headsets"),
         tables=("Sweep over *",), figures=("beta_sweep", "k_sweep"))
def sweeps(run: RunData) -> list:
    return [figure("beta_sweep", F.sweep_figure(run, "beta"), "S − the mean of its layer-matched draws at each steering strength β, per test and setting (*: S above every draw)."),
            figure("k_sweep", F.sweep_figure(run, "k"), "S − the mean of its layer-matched draws at each head-set size k, per test and setting (*: S above every draw)."),
            T.sweep_table(run, "beta"), T.sweep_table(run, "k")]
