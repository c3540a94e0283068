"""Heads that matter together: the causal map by method (exact, AtP, regression), backup heads."""

from __future__ import annotations

from vheads.report._data import RunData
from vheads.report._registry import section
from vheads.report._together import AGREE_TITLE, BACKUP_TITLE, HOW, SUPPORT_TITLE, together_blocks


@section("together", "Heads that matter together", HOW, order=105, needs=("causal_map", "discovery"),
         tables=(AGREE_TITLE, BACKUP_TITLE, SUPPORT_TITLE), figures=("causal_methods",))
def together(run: RunData) -> list:
    return together_blocks(run)
