"""Attention scores against the exact causal map (and its AtP estimate)."""

from __future__ import annotations

from vheads.report._causal import HOW, causal_blocks
from vheads.report._data import RunData
from vheads.report._registry import section


@section("causal", "Attention scores against the exact causal map", HOW, order=100, needs=("causal_map", "discovery", "outcomes"),
         tables=("Each attention score against the exact causal map", "AtP vs the exact map"),
         figures=("causal_map", "causal_vs_scores", "score_vs_effect"))
def causal(run: RunData) -> list:
    return causal_blocks(run)
