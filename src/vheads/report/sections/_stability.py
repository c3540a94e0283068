"""How many discovery items a head-set needs (the study's stability stage)."""

from __future__ import annotations

from vheads.report._data import RunData
from vheads.report._registry import section
from vheads.report._stability import HOW, stability_blocks


@section("stability", "How many discovery items a head-set needs", HOW, order=50, needs=("stability", "discovery"),
         tables=("Discovery items needed*",), figures=("stability",))
def stability(run: RunData) -> list:
    return stability_blocks(run.run_dir, run.model)
