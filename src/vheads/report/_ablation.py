"""The "ablation × setting" table: each setting's NCS under every ablation type the run has.

The study stores NCS under a head-output ablation (``zero``, ``mean``, ``resample``) under the
test id ``ncs-<group>@ablation=<name>`` (:mod:`vheads.study._ablation`), beside NCS under
``attention`` (``ncs-<group>``), for S and its layer-matched draws over the same items. Each
cell is S's NCS with its Welch interval over the two stored arms and its layer-matched rank
p, Holm-adjusted over the settings (:func:`vheads.report._tables.significance`: the same
statistics as Table 3). A setting *passes* under an ablation when that Holm p ≤ 0.05; the
caption says whether the attention ablation's passing settings (the seed's conclusion) are
the same under every other ablation.
"""

from __future__ import annotations
from vheads._ids import parse_ablation_test_id, row_group_test_id
from vheads.report._data import RunData
from vheads.report._doc import Table
from vheads.report._tables import fmt, fmt_ci, fmt_p, fmt_verdict, significance

CONTROL = "layer-matched"


def ablation_tests(run: RunData) -> tuple[str, dict[str, str]] | None:
    """``(row group, {ablation: test id})`` of the run's NCS under each ablation (attention
    first), or None when it has no head-output ablation."""
    found: dict[str, dict[str, str]] = {}
    for _, t in run.cells:
        m = parse_ablation_test_id(t)
        if m:
            found.setdefault(m[0], {})[m[1]] = t
    if not found:
        return None
    group = next(iter(sorted(found)))
    if not any((s, row_group_test_id(group)) in run.cells for s in run.settings):
        return None
    order = ("zero", "mean", "resample")
    shown = sorted(found[group], key=lambda a: order.index(a) if a in order else len(order))
    return group, {"attention": row_group_test_id(group), **{a: found[group][a] for a in shown}}


def ablation_table(run: RunData) -> Table | None:
    """Settings as rows; per ablation, NCS [95% CI] and the layer-matched rank p (Holm)."""
    got = ablation_tests(run)
    if got is None:
        return None
    group, tests = got
    stats = {a: {st.setting: st for st in significance(run, t, controls=(CONTROL,))} for a, t in tests.items()}
    columns, groups = ["Setting"], [("", 1)]
    for a in tests:
        m = max((st.controls[CONTROL].family_m for st in stats[a].values() if CONTROL in st.controls), default=0)
        columns += ["NCS [95% CI]", "z", f"{CONTROL} p (Holm over {m})", "verdict"]
        groups.append((a, 4))
    rows, passing, undecided = [], {a: set() for a in tests}, {a: set() for a in tests}
    for s in run.settings:
        if not any(s in stats[a] for a in tests):
            continue
        row = [s]
        for a in tests:
            st = stats[a].get(s)
            cs = st.controls.get(CONTROL) if st is not None else None
            if st is None or cs is None or cs.rank is None:
                row += [fmt_ci(st.interval, st.s) if st is not None else "–", "–", "–", "–"]
                continue
            ph = fmt_p(cs.p_holm) if cs.p_holm is not None else "none: a reference"
            row += [fmt_ci(st.interval, st.s), fmt(cs.z, 1),
                    f"{fmt_p(cs.rank.p)} (**{ph}**)" if cs.reject else f"{fmt_p(cs.rank.p)} ({ph})", fmt_verdict(cs.verdict)]
            if cs.verdict == "yes" and cs.family_m:
                passing[a].add(s)
            elif cs.verdict == "cannot tell" and cs.family_m:
                undecided[a].add(s)
        rows.append(row)
    seed = passing["attention"]
    differ = [a for a in tests if a != "attention" and passing[a] != seed]
    names = ", ".join(sorted(seed)) or "none"
    if differ:
        verdict_line = "does not hold under every ablation: " + "; ".join(
            f"under {a} {', '.join(sorted(passing[a])) or 'none'} pass" for a in differ)
    else:
        verdict_line = "holds under every ablation (the same settings pass)"
    cannot = "; ".join(f"{a}: {len(v)}" for a, v in undecided.items() if v)
    caption = (f"NCS at {group} rows of S under each ablation (attention: S's image keys hidden; zero / mean / resample: S's "
               f"head outputs replaced; DESIGN.md \"Ablation types\"), Welch 95% interval over the two arms; z and p: against "
               f"the {CONTROL} draws run under the same ablation (one-sided rank p), Holm over the grid settings in parentheses "
               f"(one family per ablation; bold ≤ 0.05); verdict as in Table 3: yes (the setting passes), no, or cannot tell "
               f"(its Holm floor is above 0.05: no result could have passed). The seed's conclusion — passing under attention: "
               f"{names} — {verdict_line}."
               + (f" Cells that cannot tell, by ablation (not counted as failing): {cannot}." if cannot else ""))
    return Table("Ablation × setting: NCS under each ablation type", columns, rows, caption, groups)
