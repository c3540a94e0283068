"""Reporting protocol: the checklist of the choices a visual-head result depends on, and
where the run falls short (its warnings open the report)."""

from __future__ import annotations

from vheads.report._data import RunData
from vheads.report._protocol import CASES_TITLE, protocol_checks
from vheads.report._registry import section

HOW = (
    "Every visual-head result depends on choices that move the head-set (query type, attention source, corpus, "
    "k) and on how it was tested (controls, R, the family corrected for, β, row groups, the audit). Each line "
    "states what this run used; ⚠ marks where it falls short, with what to change. In particular, compared with n "
    "distinct control head-sets (at most the control's pool) the rank p cannot go below 1/(n+1), and Holm over m "
    "settings cannot go below m/(n+1)."
)


@section("protocol", "Reporting protocol", HOW, order=10, needs=("meta", "discovery", "headsets", "outcomes", "audit"),
         tables=(CASES_TITLE.format(item="*"),))
def protocol(run: RunData) -> list:
    """The checklist, then each long list of cases as a table (folded in the HTML)."""
    checks = protocol_checks(run)
    return [checks, *(c.cases for c in checks if c.cases is not None)]
