"""Metric robustness: Table 3's CERS and NCS rows under each metric of an outcome (``p4``,
``logprob``, ``logit-diff``), and whether the verdict is the same under every one.
"""

from __future__ import annotations

from vheads.report._data import RunData
from vheads.report._doc import Table
from vheads.report._format import fmt_ci, fmt_p
from vheads.report._verdicts import ALPHA, MAIN_CONTROLS, TEST_NAMES, significance


METRIC_NAMES = {"p4": "p4 (P over the four letters)", "logprob": "logprob (log P, full vocabulary)",
                "logit-diff": "logit-diff (key − mean of the other letters)"}


def metric_runs(run: RunData, tests: tuple[str, ...]) -> dict[str, RunData]:
    """``run`` under every metric the store holds for all its outcomes, ``tests`` only
    (``run`` itself for its own metric), in :data:`vheads.evaluation.METRICS` order."""
    import dataclasses

    from vheads.evaluation import METRICS
    from vheads.report._data import outcome_cells
    from vheads.store import Store

    out: dict[str, RunData] = {}
    store = Store(run.run_dir, readonly=True, model=run.model)
    try:
        for m in METRICS:
            if m == run.metric:
                out[m] = run
            elif m in run.other_metrics:  # read with the run (every test: the tables look tests up by id)
                cells, ksweep, arms, nonfinite = run.other_metrics[m]
                out[m] = dataclasses.replace(run, cells=cells, ksweep=ksweep, arms=arms, nonfinite=nonfinite, metric=m)
            elif m == "p4" or store.has_metric(m):
                cells, ksweep, arms, nonfinite = outcome_cells(store, m, run.heads_of, tests)
                out[m] = dataclasses.replace(run, cells=cells, ksweep=ksweep, arms=arms, nonfinite=nonfinite, metric=m)
    finally:
        store.close()
    return out


def metric_robustness_table(run: RunData) -> Table | None:
    """Table 3's CERS and NCS rows under each metric of an outcome (``p4``, ``logprob``,
    ``logit-diff``; the one the report leads with first): per setting and metric, S with its
    interval (as in Table 3) and the Holm-adjusted rank p against the first main control
    (layer-matched), and whether the conclusion (Holm-significant at 0.05 or not) is the same
    under every metric. A metric the store lacks (an older run) is left out and named."""
    ncs = "ncs-all" if any((s, "ncs-all") in run.cells for s in run.settings) else "ncs"
    tests = tuple(t for t in ("cers", ncs) if any((s, t) in run.cells for s in run.settings))
    if not tests:
        return None
    runs = metric_runs(run, tests)
    metrics = [run.metric] + [m for m in runs if m != run.metric]
    control = next((c for c in MAIN_CONTROLS if any(c in run.cells[k].controls for k in run.cells if k[1] in tests)), None)
    if control is None:
        return None
    per = {(m, t): {st.setting: st for st in significance(runs[m], t, controls=(control,))} for m in metrics for t in tests}
    columns, groups = ["Test", "Setting"], [("", 2)]
    for m in metrics:
        columns += ["S [95% CI]", f"p (Holm) vs {control}, verdict"]
        groups.append((METRIC_NAMES.get(m, m), 2))
    columns.append("conclusion")
    groups.append(("", 1))
    rows, changed = [], []
    for t in tests:
        for s in run.settings:
            sts = [per[(m, t)].get(s) for m in metrics]
            if any(st is None or control not in st.controls for st in sts):
                continue
            row = [TEST_NAMES.get(t, t), s]
            verdicts = []
            for st in sts:
                cs = st.controls[control]
                verdicts.append(cs.verdict)
                p = fmt_p(cs.p_verdict)
                row += [fmt_ci(st.interval, st.s), f"{f'**{p}**' if cs.verdict == 'yes' else p} {cs.verdict}"]
            if len(set(verdicts)) == 1:
                row.append(f"same: {verdicts[0]}")
            else:
                row.append("changes: " + "; ".join(f"{v} under {', '.join(m for m, x in zip(metrics, verdicts) if x == v)}"
                                                   for v in dict.fromkeys(verdicts)))
                if {"yes", "no"} <= set(verdicts):  # decided both ways: the metric changes the conclusion
                    changed.append(f"{s} ({t})")
            rows.append(row)
    if not rows:
        return None
    missing = [m for m in ("p4", "logprob", "logit-diff") if m not in runs]
    undecided = sum("cannot tell" in r[-1] for r in rows)
    verdict_line = (f"The conclusion changes (yes under one metric, no under another) for {len(changed)} of {len(rows)} rows: "
                    f"{', '.join(changed)}." if changed else
                    f"No row is decided yes under one metric and no under another ({len(rows)} rows).")
    if undecided:
        verdict_line += f" {undecided} row(s) cannot tell under at least one metric: their controls cannot reach {ALPHA} there."
    return Table("Metric robustness: Table 3's CERS and NCS under each metric", columns, rows,
                 f"{verdict_line} Each metric's S and interval as in Table 3 (NCS: Welch over its arms; CERS: t over items), "
                 f"drops and contrasts taken in that metric; p: one-sided rank p against the {control} draws, "
                 "Holm-adjusted over the grid settings (one family per test and metric; the causal setting, a reference "
                 "outside every family, unadjusted), and the verdict read from it as in Table 3 and the Findings: yes, no, or "
                 "cannot tell (its Holm floor is above 0.05); bold ≤ 0.05. p4 is P renormalised over the "
                 "four option letters (bounded, saturates near 0 and 1); logprob and logit-diff are close to linear "
                 "in the logits. The report's other tables use " + run.metric + "."
                 + (f" Not stored in this run: {', '.join(missing)}." if missing else ""), groups, text_cols=2)
