"""Report tables of the out-of-domain pointing suite (seed Tables 22, 23, 26).

- Baseline audit per task (Table 22): mean P(key) without intervention on the oracle grid
  (target cell named, expect ≈ 1), the blank floor (0.25), the matched and mismatched
  single-photo arms and the leak set (matched questions on a blank image); values outside
  the expected range are bold — a task whose oracle or matched arm is at chance cannot
  show steering or necessity, and its CERS / NCS are not read.
- Pooled CERS / NCS (Table 23): each discovered S and its layer-matched draw(s), items of
  all tasks pooled. CERS: mean over items with a 95% t-interval. NCS = mean matched drop −
  mean mismatched drop, with the Welch 95% interval of a difference of two independent means
  (scipy ``ttest_ind(equal_var=False).confidence_interval``).
- CERS per task (Table 26): S, its random draw(s) and the gap.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from scipy import stats as sps

from vheads.evaluation import t_interval
from vheads.report._data import fallback_note, store_meta
from vheads.report._doc import Table
from vheads.report._tables import fmt
from vheads.store import METRIC_COLUMNS, Store

HOW = (
    "The pointing suite converts benchmarks into the 2×2 apparatus (same-image overlay: one photo, one answer "
    "choice written on each copy; image retrieval: four scenes, the question is one scene's). First check the "
    "baseline audit: where the oracle or the matched arm sits at chance the model cannot read the task, and its "
    "steering and necessity say nothing about the heads. Then compare each discovered head-set with its "
    "layer-matched random draw(s), pooled over tasks and per task."
)
AUDIT_SETS = ("oracle", "floor", "matched", "mismatched", "leak")


def ood_audit_table(store: Store) -> Table | None:
    rows_db = store.query("SELECT task, name, n, mean_p_key, lo, hi, ok FROM ood_audit ORDER BY task")
    if not rows_db:
        return None
    by_task: dict[str, dict[str, tuple]] = defaultdict(dict)
    for task, name, n, m, lo, hi, ok in rows_db:
        by_task[task][name] = (n, m, lo, hi, ok)
    rows, flagged = [], set()
    for i, (task, sets) in enumerate(sorted(by_task.items())):
        cells = []
        for name in AUDIT_SETS:
            if name not in sets:
                cells.append("–")
                continue
            _, m, _, _, ok = sets[name]
            cells.append(fmt(m) if ok else f"**{fmt(m)}**")
            if not ok:
                flagged.add(i)
        rows.append([task, str(max(v[0] for v in sets.values())), *cells])
    return Table("Out-of-domain baseline audit (seed Table 22)", ["Task", "n", *AUDIT_SETS], rows,
                 "Mean P(key) without intervention. Expected: oracle ≈ 1, floor 0.25, matched high, mismatched low, "
                 "leak 0.25 (the ranges of the in-domain audit). Bold: outside the expected range.", flagged_rows=flagged)


def _values(store: Store, metric: str = "p4") -> dict[tuple[str, str, str, str], dict[str, np.ndarray]]:
    """(task, setting, test, role) -> {item_id-ordered values in ``metric``}; role 'S' or 'random' (draws averaged)."""
    raw: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for task, setting, test, hid, _item, v in store.query(
            f"SELECT task, setting, test, headset_id, item_id, {METRIC_COLUMNS[metric]} FROM ood_outcomes "
            "ORDER BY task, setting, test, headset_id, item_id"):
        raw[(task, setting, test, "S" if hid == "S" else "random")][hid].append(float(v))
    return {k: np.mean([np.asarray(v) for v in d.values()], axis=0) for k, d in raw.items()}


def _ncs(matched: np.ndarray, mismatched: np.ndarray) -> str:
    d = float(matched.mean() - mismatched.mean())
    if len(matched) < 2 or len(mismatched) < 2:
        return fmt(d)
    ci = sps.ttest_ind(matched, mismatched, equal_var=False).confidence_interval(0.95)
    return f"{fmt(d)} [{fmt(float(ci.low))}, {fmt(float(ci.high))}]"


def _cers(x: np.ndarray) -> str:
    if len(x) < 2:
        return fmt(float(x.mean()))
    iv = t_interval(x)
    return f"{fmt(iv.mean)} [{fmt(iv.low)}, {fmt(iv.high)}]"


def ood_pooled_table(store: Store, metric: str = "p4") -> Table | None:
    vals = _values(store, metric)
    if not vals:
        return None
    tasks = sorted({k[0] for k in vals})
    rows = []
    for setting in sorted({k[1] for k in vals}):
        for role in ("S", "random"):
            def pooled(test):
                parts = [vals[(t, setting, test, role)] for t in tasks if (t, setting, test, role) in vals]
                return np.concatenate(parts) if parts else None
            cers, m, mm = pooled("cers"), pooled("ncs-matched"), pooled("ncs-mismatched")
            if cers is None and m is None:
                continue
            rows.append([setting if role == "S" else "layer-matched random", _cers(cers) if cers is not None else "–",
                         _ncs(m, mm) if m is not None and mm is not None else "–"])
    return Table(f"Out-of-domain CERS and NCS pooled over {len(tasks)} task(s) (seed Table 23)",
                 ["Head-set", "CERS [95% CI]", "NCS [95% CI]"], rows,
                 "Each discovered set is followed by its layer-matched random draw(s) (averaged per item). CERS: t-interval "
                 "over items; NCS: matched minus mismatched mean drop, Welch interval."
                 + fallback_note(store_meta(store), "layer-matched", {k[1] for k in vals}))


def ood_task_table(store: Store, metric: str = "p4") -> Table | None:
    vals = _values(store, metric)
    rows = []
    for task, setting in sorted({(k[0], k[1]) for k in vals if k[2] == "cers"}):
        s, r = vals.get((task, setting, "cers", "S")), vals.get((task, setting, "cers", "random"))
        if s is None:
            continue
        rows.append([task, setting, fmt(float(s.mean())), fmt(float(r.mean())) if r is not None else "–",
                     fmt(float(s.mean() - r.mean())) if r is not None else "–", str(len(s))])
    if not rows:
        return None
    return Table("Out-of-domain CERS per task (seed Table 26)", ["Task", "Head-set", "S", "Random", "Gap", "n"], rows,
                 "Gap = S − random, from unrounded values.", text_cols=2)


def ood_blocks(run_dir, model: str = "", metric: str = "p4") -> list[Table]:
    """The pointing-suite tables of a run's ``model`` (empty when it has none), in ``metric``."""
    store = Store(run_dir, readonly=True, model=model)
    try:
        return [t for t in (ood_audit_table(store), ood_pooled_table(store, metric), ood_task_table(store, metric)) if t]
    finally:
        store.close()
