"""Report tables that compare head-sets and settings with each other.

- Head-set algebra (seed Table 15): for settings A and B that differ in query type, corpus
  or attention source (:func:`vheads.study._runner.algebra_pairs`), the heads they share (A∩B) and the heads only one has (A−B, B−A),
  each tested with NCS against same-size layer-matched controls: the part's NCS minus its
  controls' NCS, item by item within each arm, with both arms' variances (one-sided Welch
  t on the matched-arm differences against the mismatched-arm differences,
  :func:`vheads.evaluation.ncs_difference_t`).
- Paired comparisons between settings, for settings that differ in one factor, over the
  same evaluation items: on NCS the same two-arm Welch t of the per-item differences
  (:func:`vheads.evaluation.ncs_difference_t`); on CERS a paired t over items
  (:func:`vheads.evaluation.paired_t`).
- Image attention vs steerability: Spearman ρ between a control head-set's mean baseline
  image-attention mass and its CERS (:func:`vheads.evaluation.spearman`).
"""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np

from vheads.evaluation import ncs_difference_t, paired_t, spearman, t_interval
from vheads.report._data import fallback_note, store_meta
from vheads.report._doc import Table
from vheads.report._tables import fmt, fmt_p, what_changes
from vheads.store import METRIC_COLUMNS, Store

HOW = (
    "Head-set algebra asks whether the heads two settings share, or the heads only one finds, carry the effect: each "
    "part is set against layer-matched random head-sets of its own size, item by item within each NCS arm (one-sided "
    "Welch t, both arms' variances). Paired comparisons test whether two settings' head-sets differ on the same items "
    "(NCS: the same two-arm Welch t; CERS: paired t). The Spearman ρ asks whether random "
    "head-sets that look at the image more also steer more: a high ρ says steering tracks attention mass, not "
    "the discovered heads."
)


def _per_item(store: Store, setting: str, test: str, metric: str = "p4") -> dict[str, np.ndarray]:
    """Per head-set id, its per-item values of ``test`` in ``metric``, in item order."""
    rows = store.query(f"SELECT headset_id, {METRIC_COLUMNS[metric]} FROM outcomes WHERE setting=? AND test=? "
                       "ORDER BY headset_id, item_id", setting, test)
    out: dict[str, list[float]] = defaultdict(list)
    for hid, v in rows:
        out[hid].append(float(v))
    return {k: np.asarray(v) for k, v in out.items()}


def _arms(store: Store, setting: str, test: str, metric: str = "p4") -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per head-set id, its (matched, mismatched) per-item NCS drops in ``metric``, in item order."""
    rows = store.query(f"SELECT headset_id, arm, {METRIC_COLUMNS[metric]} FROM arms WHERE setting=? AND test=? "
                       "ORDER BY headset_id, arm, item_id", setting, test)
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for hid, arm, v in rows:
        out[hid][arm].append(float(v))
    return {hid: (np.asarray(a["matched"]), np.asarray(a["mismatched"])) for hid, a in out.items()
            if len(a["matched"]) and len(a["mismatched"])}


def _arm_items(store: Store, setting: str, test: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """S's (matched, mismatched) item ids in the order :func:`_arms` gives its drops."""
    rows = store.query("SELECT arm, item_id FROM arms WHERE setting=? AND test=? AND headset_id='S' ORDER BY arm, item_id",
                       setting, test)
    return tuple(i for a, i in rows if a == "matched"), tuple(i for a, i in rows if a == "mismatched")


def algebra_table(store: Store, metric: str = "p4") -> Table | None:
    """Seed Table 15: NCS of each part (shared heads, heads only one setting has) against
    its same-size layer-matched controls, with both arms' variances: per matched item the
    part's drop minus the controls' mean drop, per mismatched item the same, and a one-sided
    Welch t of the two (:func:`vheads.evaluation.ncs_difference_t`, H1: the part's NCS is
    above its controls'). Parts whose arms are not stored are left out."""
    pids = [p for (p,) in store.query("SELECT DISTINCT setting FROM outcomes WHERE setting LIKE '%&%' ORDER BY setting")]
    rows = []
    for pid in pids:
        arms = _arms(store, pid, "ncs-all", metric)
        for part in sorted(k for k in arms if "/" not in k):
            ctrl = [v for k, v in sorted(arms.items()) if k.startswith(part + "/")]
            if not ctrl or min(len(arms[part][0]), len(arms[part][1])) < 2:
                continue
            cm, cx = np.stack([m for m, _ in ctrl]), np.stack([x for _, x in ctrl])  # [R, n_matched], [R, n_mismatched]
            n_heads = len(json.loads(store.query("SELECT heads FROM headsets WHERE setting=? AND headset_id=?", pid, part)[0][0]))
            d = ncs_difference_t(*arms[part], cm, cx, alternative="greater")
            a, _, b = pid.partition("&")
            ncs_part = float(arms[part][0].mean() - arms[part][1].mean())
            rows.append([what_changes(a, b), pid.replace("&", " vs "), part, str(n_heads), str(len(ctrl)), fmt(ncs_part),
                         fmt(float(cm.mean() - cx.mean())), f"{fmt(d.mean_diff)} [{fmt(d.interval.low)}, {fmt(d.interval.high)}]",
                         fmt(d.t, 2), fmt(d.df, 1), fmt_p(d.p)])
    if not rows:
        return None
    return Table("Head-set algebra (seed Table 15 layout): NCS of shared and setting-only heads",
                 ["what changes", "pair", "part", "heads", "R", "NCS part", "NCS controls", "difference [Welch 95% CI]",
                  "t", "df", "one-sided p"], rows,
                 "Pairs differing in query type, corpus or attention source (two each, at the query-span and "
                 "last-token sources). Controls: R same-size layer-matched head-sets on the same items. Test: per "
                 "matched item u = part's drop − controls' mean drop, per mismatched item v the same; difference = "
                 "mean u − mean v = NCS part − NCS controls, with a Welch t (both arms' variances, Welch–Satterthwaite "
                 "df), one-sided (H1: part above its controls), unadjusted."
                 + fallback_note(store_meta(store), lambda label: label.endswith("/layer-matched"), set(pids)),
                 text_cols=3)


def paired_settings_table(store: Store, settings: list[str], tests=("cers", "ncs-all"), metric: str = "p4") -> Table | None:
    """Settings that differ in one factor, compared over the same evaluation items: NCS with
    :func:`vheads.evaluation.ncs_difference_t` on both stored arms (per-item differences in
    each arm, Welch t of the two); any other test with a paired t over items. A pair whose
    items differ is left out; NCS without stored arms gets no test."""
    rows = []
    for test in tests:
        arms = {s: _arms(store, s, test, metric).get("S") for s in settings} if test.startswith("ncs") else {}
        s_vals = {s: _per_item(store, s, test, metric).get("S") for s in settings}
        for i, a in enumerate(settings):
            for b in settings[i + 1 :]:
                change = what_changes(a, b)
                if change in ("–", "same") or "+" in change or s_vals[a] is None or s_vals[b] is None or len(s_vals[a]) != len(s_vals[b]) or len(s_vals[a]) < 2:
                    continue
                lead = [test, f"{a} vs {b}", change, fmt(float(s_vals[a].mean())), fmt(float(s_vals[b].mean()))]
                if np.array_equal(s_vals[a], s_vals[b]):
                    rows.append(lead + ["–", "–", "identical values", "–"])
                    continue
                if test.startswith("ncs"):
                    if arms.get(a) is None or arms.get(b) is None or _arm_items(store, a, test) != _arm_items(store, b, test):
                        rows.append(lead + ["–", "–", "no arms on the same items", "–"])
                        continue
                    d = ncs_difference_t(*arms[a], *arms[b])
                    rows.append(lead + [f"{fmt(d.mean_diff)} [{fmt(d.interval.low)}, {fmt(d.interval.high)}]",
                                        "Welch, both arms", fmt(d.t, 2), fmt_p(d.p)])
                    continue
                pt = paired_t(s_vals[a], s_vals[b])
                iv = t_interval(s_vals[a] - s_vals[b])
                rows.append(lead + [f"{fmt(pt.mean_diff)} [{fmt(iv.low)}, {fmt(iv.high)}]", "paired t", fmt(pt.t, 2), fmt_p(pt.p)])
    if not rows:
        return None
    return Table("Paired comparisons between settings (same items)",
                 ["test", "pair", "differs in", "A", "B", "A − B [95% CI]", "test used", "t", "p (two-sided)"], rows,
                 "Settings that differ in one factor, on the same evaluation items, unadjusted. NCS (Welch, both arms): "
                 "per matched item u = drop_A − drop_B, per mismatched item v the same; A − B = mean u − mean v with a "
                 "Welch t and interval (both arms' variances, Welch–Satterthwaite df), the rule of NCS's own interval. "
                 "CERS (paired t): t over the per-item differences A − B, with its t-interval.", text_cols=3)


MASS_STATS = {"mean": np.mean, "median": np.median, "min": np.min, "max": np.max, "SD": lambda x: np.std(x, ddof=1) if len(x) > 1 else 0.0}
MIN_SPEARMAN_P = 10  # fewer distinct head-sets: ρ is shown with its n and no p


def mass_table(store: Store, settings: list[str], metric: str = "p4") -> Table | None:
    """Seed Table 17: image-attention mass of head-sets and its relation to CERS.

    Mass of a head-set: its heads' baseline image-attention mass (last prompt row, CERS
    grids, no intervention). Per setting and random control type: S's mean mass, the draws'
    mean mass as mean [min, max] over distinct draws, and the Spearman ρ across the distinct
    head-sets drawn between each statistic of a draw's head masses (mean, median, min, max,
    SD) and the draw's CERS. A small pool repeats head-sets; a repeat is the same point again
    (same heads, same items, same CERS), so ρ and its p are taken over the distinct head-sets
    (``draws`` shows R and how many are distinct). With fewer than 10 distinct head-sets ρ is
    shown with its n and no p; a constant column gives no ρ."""
    mass_json = store.query("SELECT value FROM meta WHERE key='image_mass'")
    if not mass_json:
        return None
    mass = np.array(json.loads(mass_json[0][0]))
    heads = {(s, h): json.loads(x) for s, h, x in store.query("SELECT setting, headset_id, heads FROM headsets")}
    rows = []
    for s in settings:
        vals = _per_item(store, s, "cers", metric)
        by_control: dict[str, dict[tuple, tuple[np.ndarray, float]]] = defaultdict(dict)
        n_draws: dict[str, int] = defaultdict(int)
        for hid, v in sorted(vals.items(), key=lambda kv: _draw_order(kv[0])):
            if "#" not in hid or "@" in hid or (s, hid) not in heads:
                continue
            name = hid.split("#")[0]
            n_draws[name] += 1
            key = tuple(sorted(tuple(h) for h in heads[(s, hid)]))
            by_control[name].setdefault(key, (np.array([mass[l, h] for l, h in key]), float(v.mean())))
        s_heads = heads.get((s, "S"))
        s_mass = fmt(float(np.mean([mass[l, h] for l, h in s_heads])), 3) if s_heads else "–"
        for name, distinct in sorted(by_control.items()):
            draws = list(distinct.values())
            means = np.array([m.mean() for m, _ in draws])
            c = np.array([x for _, x in draws])
            cells = []
            for stat in MASS_STATS.values():
                x = np.array([float(stat(m)) for m, _ in draws])
                if len(x) < 3 or np.ptp(x) == 0 or np.ptp(c) == 0:
                    cells.append("–")
                    continue
                r = spearman(x, c)
                cells.append(f"{fmt(r.rho, 2)} ({fmt_p(r.p)})" if len(x) >= MIN_SPEARMAN_P else f"{fmt(r.rho, 2)} (n={len(x)})")
            rows.append([s, name, f"{n_draws[name]} ({len(draws)} distinct)", s_mass,
                         f"{fmt(float(means.mean()))} [{fmt(float(means.min()))}, {fmt(float(means.max()))}]", *cells])
    if not rows:
        return None
    return Table("Image-attention mass of head-sets and its relation to CERS (seed Table 17)",
                 ["setting", "control", "draws R (distinct)", "S mass", "draws' mass mean [min, max]",
                  *(f"ρ {k} (p)" for k in MASS_STATS)], rows,
                 "Mass: mean over a head-set's heads of the baseline image-attention mass (last prompt row, CERS grids). "
                 "ρ: Spearman correlation, across the distinct control head-sets drawn (a head-set drawn twice is one "
                 "point: same heads, same items, same CERS), between the statistic of a draw's head masses and "
                 f"its CERS; p two-sided, shown from {MIN_SPEARMAN_P} distinct head-sets on (fewer: n only). A strong ρ "
                 "says steering tracks how much a head-set looks at the image, not which heads it holds.", text_cols=2)


def _draw_order(hid: str) -> tuple[str, int]:
    """``layer-matched#12`` → ("layer-matched", 12): draws in draw order, not string order."""
    name, _, draw = hid.partition("#")
    return name, int(draw) if draw.isdigit() else -1


def comparison_tables(run_dir, settings: list[str], model: str = "", metric: str = "p4") -> list[Table]:
    """The comparison tables of a run's ``model``, every outcome in ``metric``."""
    store = Store(run_dir, readonly=True, model=model)
    try:
        return [t for t in (algebra_table(store, metric), paired_settings_table(store, settings, metric=metric),
                            mass_table(store, settings, metric)) if t]
    finally:
        store.close()
