"""Findings: the answer to the study's question (which settings' heads are necessary, which
steerable), whether the seed's conclusion holds, every verdict on one table, S against every
control and each setting's heads (the report's first section)."""

from __future__ import annotations

from vheads.report._data import RunData
from vheads.report._findings import HEADS_TITLE, HOW, TITLE, findings_blocks
from vheads.report._registry import section


@section("findings", "Findings", HOW, order=0, needs=("outcomes", "arms", "headsets", "discovery", "meta"),
         tables=(TITLE, HEADS_TITLE), figures=("random_band",))
def findings(run: RunData) -> list:
    return findings_blocks(run)
