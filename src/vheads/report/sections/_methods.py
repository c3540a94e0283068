"""Published methods (the study's score points) against the seed's settings."""

from __future__ import annotations

from vheads.report._data import RunData
from vheads.report._methods import HOW, methods_blocks
from vheads.report._registry import section


@section("methods", "Published methods vs the seed's settings", HOW, order=60,
         needs=("discovery", "overlap", "outcomes", "arms", "meta"),
         tables=("Published methods *",), figures=("methods_overlap",))
def methods(run: RunData) -> list:
    return methods_blocks(run)
