"""The baseline audit (seed Table 22): each evaluation set's mean P(key) without intervention
against the range it should fall in (oracle ≈ 1, floor 0.25, matched high, mismatched low).
"""

from __future__ import annotations

from vheads.report._data import RunData
from vheads.report._doc import Table
from vheads.report._format import fmt


def audit_flags(run: RunData) -> list[dict]:
    """Audit rows whose mean P(key) lies outside the expected range (or stored as not ok)."""
    out = []
    for r in run.audit:
        inside = r["lo"] is None or r["hi"] is None or (r["lo"] <= r["mean_p_key"] <= r["hi"])
        if not inside or r["ok"] in (0, False):
            out.append(r)
    return out


def audit_table(run: RunData) -> Table | None:
    if not run.audit:
        return None
    flagged = {id(r) for r in audit_flags(run)}
    rows, flag_rows = [], set()
    for i, r in enumerate(run.audit):
        bad = id(r) in flagged
        mean = fmt(r["mean_p_key"])
        rows.append([r["name"], str(r["n"]), f"**{mean}**" if bad else mean, f"[{fmt(r['lo'], 2)}, {fmt(r['hi'], 2)}]",
                     "OUTSIDE expected range" if bad else "ok"])
        if bad:
            flag_rows.add(i)
    return Table("Baseline audit (seed Table 22)", ["Evaluation set", "n", "mean P(key)", "Expected", "Flag"], rows,
                 "No intervention. oracle: target cell named in the prompt (expect ≈ 1); floor: blank image "
                 "(expect 0.25); matched: the image shows the keyed class (high); mismatched: the keyed option "
                 "is wrong (low); leak: matched questions with the image blanked (chance).", flagged_rows=flag_rows)
