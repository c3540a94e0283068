"""Comparing head-sets and settings: head-set algebra, paired setting comparisons, attention
mass against CERS."""

from __future__ import annotations

from vheads.report._data import RunData
from vheads.report._comparison_tables import HOW, comparison_tables
from vheads.report._registry import section


@section("comparisons", "Comparing head-sets and settings", HOW, order=110, needs=("outcomes", "arms", "headsets", "meta"),
         tables=("Head-set algebra *", "Paired comparisons *", "Image-attention mass *"))
def comparisons(run: RunData) -> list:
    return comparison_tables(run.run_dir, run.settings, run.model, run.metric)
