"""Report tables that compare head-sets and settings with each other.

- Head-set algebra (seed Table 15): for settings A and B that differ in query type, corpus
  or attention source (:func:`vheads.study._runner.algebra_pairs`), the heads they share (A∩B) and the heads only one has (A−B, B−A),
  each tested with NCS against same-size layer-matched controls: a one-sided paired t over
  items of the part against its controls' per-item mean
  (:func:`vheads.evaluation.paired_one_sided_p`).
- Paired comparisons between settings: the per-item values of two settings' S over the
  same evaluation items (:func:`vheads.evaluation.paired_t`), for settings that differ in
  one factor.
- Image attention vs steerability: Spearman ρ between a control head-set's mean baseline
  image-attention mass and its CERS (:func:`vheads.evaluation.spearman`).
"""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np

from vheads.evaluation import paired_one_sided_p, paired_t, spearman
from vheads.report._doc import Table
from vheads.report._tables import fmt, fmt_p, what_changes
from vheads.store import Store

HOW = (
    "Head-set algebra asks whether the heads two settings share, or the heads only one finds, carry the effect: each "
    "part is set against layer-matched random head-sets of its own size, item by item (one-sided paired t). Paired "
    "comparisons test whether two settings' head-sets differ on the same items. The Spearman ρ asks whether random "
    "head-sets that look at the image more also steer more: a high ρ says steering tracks attention mass, not "
    "the discovered heads."
)


def _per_item(store: Store, setting: str, test: str) -> dict[str, np.ndarray]:
    rows = store.query("SELECT headset_id, value FROM outcomes WHERE setting=? AND test=? ORDER BY headset_id, item_id", setting, test)
    out: dict[str, list[float]] = defaultdict(list)
    for hid, v in rows:
        out[hid].append(float(v))
    return {k: np.asarray(v) for k, v in out.items()}


def algebra_table(store: Store) -> Table | None:
    pids = [p for (p,) in store.query("SELECT DISTINCT setting FROM outcomes WHERE setting LIKE '%&%' ORDER BY setting")]
    rows = []
    for pid in pids:
        vals = _per_item(store, pid, "ncs-all")
        for part in sorted(k for k in vals if "/" not in k):
            ctrl = np.stack([v for k, v in sorted(vals.items()) if k.startswith(part + "/")]) if any(k.startswith(part + "/") for k in vals) else None
            if ctrl is None or len(vals[part]) < 2:
                continue
            n_heads = len(json.loads(store.query("SELECT heads FROM headsets WHERE setting=? AND headset_id=?", pid, part)[0][0]))
            pt = paired_one_sided_p(vals[part], ctrl)
            a, _, b = pid.partition("&")
            rows.append([what_changes(a, b), pid.replace("&", " vs "), part, str(n_heads), fmt(float(vals[part].mean())), fmt(float(ctrl.mean())), fmt(pt.mean_diff), fmt(pt.t, 2), fmt_p(pt.p)])
    if not rows:
        return None
    return Table("Head-set algebra (seed Table 15 layout): NCS of shared and setting-only heads",
                 ["what changes", "pair", "part", "heads", "NCS part", "NCS controls", "difference", "t", "one-sided p"], rows,
                 "Pairs differing in query type, corpus or attention source (two each, at the query-span and "
                 "last-token sources). Controls: same-size layer-matched head-sets; paired over the same items.",
                 text_cols=3)


def paired_settings_table(store: Store, settings: list[str], tests=("cers", "ncs-all")) -> Table | None:
    rows = []
    for test in tests:
        s_vals = {s: _per_item(store, s, test).get("S") for s in settings}
        for i, a in enumerate(settings):
            for b in settings[i + 1 :]:
                change = what_changes(a, b)
                if change in ("–", "same") or "+" in change or s_vals[a] is None or s_vals[b] is None or len(s_vals[a]) != len(s_vals[b]) or len(s_vals[a]) < 2:
                    continue
                if np.array_equal(s_vals[a], s_vals[b]):
                    rows.append([test, f"{a} vs {b}", change, fmt(float(s_vals[a].mean())), fmt(float(s_vals[b].mean())), "–", "identical values"])
                    continue
                pt = paired_t(s_vals[a], s_vals[b])
                rows.append([test, f"{a} vs {b}", change, fmt(float(s_vals[a].mean())), fmt(float(s_vals[b].mean())), fmt(pt.t, 2), fmt_p(pt.p)])
    if not rows:
        return None
    return Table("Paired comparisons between settings (same items)", ["test", "pair", "differs in", "A", "B", "t", "p (two-sided)"], rows,
                 "Settings that differ in one factor; paired t over the evaluation items, unadjusted.", text_cols=3)


MASS_STATS = {"mean": np.mean, "median": np.median, "min": np.min, "max": np.max, "SD": lambda x: np.std(x, ddof=1) if len(x) > 1 else 0.0}
MIN_SPEARMAN_P = 10  # fewer draws: ρ is shown with its n and no p


def mass_table(store: Store, settings: list[str]) -> Table | None:
    """Seed Table 17: image-attention mass of head-sets and its relation to CERS.

    Mass of a head-set: its heads' baseline image-attention mass (last prompt row, CERS
    grids, no intervention). Per setting and random control type: S's mean mass, the draws'
    mean mass as mean [min, max] over draws, and the Spearman ρ across the draws between each
    statistic of a draw's head masses (mean, median, min, max, SD) and the draw's CERS. With
    fewer than 10 draws ρ is shown with its n and no p; a constant column gives no ρ."""
    mass_json = store.query("SELECT value FROM meta WHERE key='image_mass'")
    if not mass_json:
        return None
    mass = np.array(json.loads(mass_json[0][0]))
    heads = {(s, h): json.loads(x) for s, h, x in store.query("SELECT setting, headset_id, heads FROM headsets")}
    rows = []
    for s in settings:
        vals = _per_item(store, s, "cers")
        by_control: dict[str, list[tuple[np.ndarray, float]]] = defaultdict(list)
        for hid, v in sorted(vals.items()):
            if "#" not in hid or "@" in hid or (s, hid) not in heads:
                continue
            by_control[hid.split("#")[0]].append((np.array([mass[l, h] for l, h in heads[(s, hid)]]), float(v.mean())))
        s_heads = heads.get((s, "S"))
        s_mass = fmt(float(np.mean([mass[l, h] for l, h in s_heads])), 3) if s_heads else "–"
        for name, draws in sorted(by_control.items()):
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
            rows.append([s, name, str(len(draws)), s_mass, f"{fmt(float(means.mean()))} [{fmt(float(means.min()))}, "
                         f"{fmt(float(means.max()))}]", *cells])
    if not rows:
        return None
    return Table("Image-attention mass of head-sets and its relation to CERS (seed Table 17)",
                 ["setting", "control", "draws", "S mass", "draws' mass mean [min, max]",
                  *(f"ρ {k} (p)" for k in MASS_STATS)], rows,
                 "Mass: mean over a head-set's heads of the baseline image-attention mass (last prompt row, CERS grids). "
                 "ρ: Spearman correlation, across the control draws, between the statistic of a draw's head masses and "
                 f"its CERS; p two-sided, shown from {MIN_SPEARMAN_P} draws on (fewer: n only). A strong ρ says "
                 "steering tracks how much a head-set looks at the image, not which heads it holds.", text_cols=2)


def comparison_tables(run_dir, settings: list[str], model: str = "") -> list[Table]:
    store = Store(run_dir, readonly=True, model=model)
    try:
        return [t for t in (algebra_table(store), paired_settings_table(store, settings), mass_table(store, settings)) if t]
    finally:
        store.close()
