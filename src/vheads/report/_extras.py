"""Report tables that compare head-sets and settings with each other.

- Head-set algebra (seed Table 15): for settings A (ordinal) and B (referring) of the same
  corpus and source, the heads they share (A∩B) and the heads only one has (A−B, B−A),
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
from vheads.study._store import Store

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
            rows.append([pid.replace("&", " vs "), part, str(n_heads), fmt(float(vals[part].mean())), fmt(float(ctrl.mean())), fmt(pt.mean_diff), fmt(pt.t, 2), fmt_p(pt.p)])
    if not rows:
        return None
    return Table("Head-set algebra (seed Table 15 layout): NCS of shared and setting-only heads",
                 ["pair", "part", "heads", "NCS part", "NCS controls", "difference", "t", "one-sided p"], rows,
                 "Controls: same-size layer-matched head-sets; paired over the same items.", text_cols=2)


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


def spearman_table(store: Store, settings: list[str]) -> Table | None:
    mass_json = store.query("SELECT value FROM meta WHERE key='image_mass'")
    if not mass_json:
        return None
    mass = np.array(json.loads(mass_json[0][0]))
    heads = {(s, h): json.loads(x) for s, h, x in store.query("SELECT setting, headset_id, heads FROM headsets")}
    rows = []
    for s in settings:
        vals = _per_item(store, s, "cers")
        by_control: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
        for hid, v in vals.items():
            if "#" not in hid or "@" in hid or (s, hid) not in heads:
                continue
            m, c = by_control[hid.split("#")[0]]
            m.append(float(np.mean([mass[l, h] for l, h in heads[(s, hid)]])))
            c.append(float(v.mean()))
        for name, (m, c) in sorted(by_control.items()):
            if len(m) >= 3 and np.ptp(m) > 0 and np.ptp(c) > 0:
                r = spearman(m, c)
                rows.append([s, name, str(len(m)), fmt(r.rho, 2), fmt_p(r.p)])
    if not rows:
        return None
    return Table("Image attention vs steerability of random head-sets (Spearman)", ["setting", "control", "draws", "ρ", "p"], rows,
                 "Per control draw: its heads' mean baseline image-attention mass (last row, CERS grids) against its CERS.", text_cols=2)


def comparison_tables(run_dir, settings: list[str]) -> list[Table]:
    store = Store(run_dir, readonly=True)
    try:
        return [t for t in (algebra_table(store), paired_settings_table(store, settings), spearman_table(store, settings)) if t]
    finally:
        store.close()
