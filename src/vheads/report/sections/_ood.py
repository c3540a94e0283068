"""The out-of-domain pointing suite (seed Tables 22, 23, 26)."""

from __future__ import annotations

from vheads.report._data import RunData
from vheads.report._ood import HOW, ood_blocks
from vheads.report._registry import section


@section("ood", "Out-of-domain pointing suite", HOW, order=130, needs=("ood_outcomes", "ood_audit"),
         tables=("Out-of-domain *",))
def ood(run: RunData) -> list:
    return ood_blocks(run.run_dir, run.model, run.metric)
