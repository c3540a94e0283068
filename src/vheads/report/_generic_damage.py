"""Generic-damage controls (seed Table 12): S against every control type on NCS, CERS and the
text arm, and one reading per setting: is S's text-arm drop above its controls' (generic
damage: S matters for text it cannot see through the image), and is its NCS?
"""

from __future__ import annotations

import numpy as np

from vheads.report._data import RunData, fallback_note
from vheads.report._doc import Table
from vheads.report._format import fmt, fmt_p
from vheads.report._verdicts import ALPHA, MAIN_CONTROLS, TEST_NAMES, _control_order, compare


def damage_reading(run: RunData, setting: str, ncs: str = "ncs-all", control: str = "layer-matched") -> str:
    """One sentence per setting, from the numbers: is S's text-arm drop above its ``control``
    head-sets' (one-sided rank p over the distinct ones ≤ 0.05, not adjusted), and is its NCS?
    A text-arm drop above the controls is the generic damage this section looks for: S then
    matters for text it cannot see through the image, and its NCS need not be visual."""
    def vs(test):
        cell = run.cells.get((setting, test))
        if cell is None or cell.s is None or control not in cell.controls:
            return None
        cs = compare(cell, setting, test).controls[control]
        floor = 1 / (cs.n + 1)
        t_s = float(np.mean(cell.s))
        state = "cannot tell" if floor > ALPHA else "above" if cs.rank.p <= ALPHA and t_s > cs.mean else "within"
        return t_s, cs.mean, cs.rank.p, state, cs.n
    text, nc = vs("text"), vs(ncs) or vs("ncs")
    if text is None:
        return "–"
    above = text[3] == "above"
    t_txt = f"text-arm drop {fmt(text[0])} vs {fmt(text[1])} ({control}, p {fmt_p(text[2])})"
    if nc is None:
        return t_txt + (": generic damage" if above else ": cannot tell" + _few(text) if text[3] == "cannot tell"
                        else ": not above its controls")
    n_sig = nc[3] == "above"
    n_txt = f"NCS {fmt(nc[0])} vs {fmt(nc[1])} (p {fmt_p(nc[2])})"
    if above and n_sig:
        return f"generic damage: {t_txt}; its {n_txt} may not be visual"
    if above:
        return f"generic damage: {t_txt}; {n_txt}, " + ("cannot tell" + _few(nc) if nc[3] == "cannot tell" else
                                                       "not above its controls")
    if n_sig:
        return (f"visual: {n_txt} above its controls while its {t_txt} is not" if text[3] == "within" else
                f"{n_txt} above its controls; its {t_txt}: cannot tell{_few(text)}")
    undecided = [x for x in (nc, text) if x[3] == "cannot tell"]
    if undecided:
        return f"cannot tell: {n_txt}; {t_txt}{_few(min(undecided, key=lambda x: x[4]))}"
    return f"neither: {n_txt} and {t_txt} within the controls"


def _few(part) -> str:
    """Why a reading cannot tell: with n controls no rank p falls below 1/(n+1) > 0.05."""
    n = part[4]
    return (f" (with {n} {'control' if n == 1 else 'controls'} no rank p can fall below 1/(n+1) = {1 / (n + 1):.3f}"
            + ("; S is above every one" if part[0] > part[1] and part[2] == 1 / (n + 1) else "") + ")")


def generic_damage_table(run: RunData) -> Table | None:
    """Seed Table 12: S against every control type on NCS, CERS and the text arm, with a
    reading per setting (:func:`damage_reading`).

    Shown when the run has a text arm or any control beyond layer-matched / any-layer. A
    control shows the mean over its distinct head-sets, with their number and [min, max]
    where there is more than one (a copy of a head-set is the same outcome again).
    """
    tests = [t for t in ("ncs-all", "ncs", "cers", "text") if any((s, t) in run.cells for s in run.settings)]
    extra = {c for (s, t), cell in run.cells.items() if t in tests for c in cell.controls if c not in MAIN_CONTROLS}
    if "text" not in tests and not extra:
        return None
    reading = "text" in tests
    columns = ["Setting", "Head-set", "Heads"] + [TEST_NAMES.get(t, t) for t in tests] + (["Reading"] if reading else [])
    rows = []
    for s in run.settings:
        cells = {t: run.cells.get((s, t)) for t in tests}
        if not any(cells.values()):
            continue
        roles = ["S"] + sorted({c for cell in cells.values() if cell for c in cell.controls}, key=_control_order)
        for role in roles:
            row = [s if role == "S" else "", "discovered (S)" if role == "S" else role,
                   str(run.headset_sizes.get((s, role), "–"))]
            for t in tests:
                cell = cells[t]
                if cell is None:
                    row.append("–")
                elif role == "S":
                    row.append(fmt(float(np.mean(cell.s))) if cell.s is not None else "–")
                elif role in cell.controls:
                    v = cell.distinct(role)  # one value per distinct head-set
                    row.append(fmt(float(v.mean())) + (f" [{fmt(v.min())}, {fmt(v.max())}; {len(v)}]" if len(v) > 1 else ""))
                else:
                    row.append("–")
            if reading:
                row.append(damage_reading(run, s) if role == "S" else "")
            rows.append(row)
    return Table("Generic-damage controls (seed Table 12)", columns, rows,
                 "Each control type's statistic: the mean over its distinct head-sets, [min, max; their number]. The text "
                 "arm is the drop in P(key) on text-solvable items when the head-set is hidden from the text tokens: a "
                 "set that is merely generically important hurts there too. Reading (S's row): its text-arm drop and "
                 "its NCS against the layer-matched head-sets (one-sided rank p over the distinct ones, not adjusted, "
                 f"≤ {ALPHA}): a text-arm drop above the controls is generic damage, and then an NCS above them need not "
                 f"be visual. cannot tell: with n controls the rank p cannot fall below 1/(n+1) > {ALPHA}, so a p above "
                 f"{ALPHA} is no evidence that the drop lies within the controls."
                 + fallback_note(run.meta, lambda label: "@" not in label and "/" not in label), text_cols=2)
