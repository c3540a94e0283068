"""Findings: every verdict of the run on one table and whether the seed's conclusion holds
(the report's first section)."""

from __future__ import annotations

from vheads.report._data import RunData
from vheads.report._findings import HOW, TITLE, findings_blocks
from vheads.report._registry import section


@section("findings", "Findings", HOW, order=0, needs=("outcomes", "arms", "headsets", "discovery", "meta"),
         tables=(TITLE,))
def findings(run: RunData) -> list:
    return findings_blocks(run)
