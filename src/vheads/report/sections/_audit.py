"""The baseline audit of every evaluation set (oracle, floor, matched, mismatched, leak)."""

from __future__ import annotations

from vheads.report import _tables as T
from vheads.report._data import RunData
from vheads.report._registry import section

HOW = (
    "Each evaluation set's baseline, without intervention. If the oracle is not near 1 the model cannot use the "
    "cue the test relies on; if the floor or the leak set is not near chance the answer can be read without "
    "the image; if the mismatched arm is not low, NCS mixes its arms. A flagged row makes the tests that use "
    "that set hard to interpret."
)


@section("audit", "Baseline audit", HOW, order=120, needs=("audit",), tables=("Baseline audit*",))
def audit(run: RunData) -> list:
    return [T.audit_table(run)]
