"""The report's "Heads that matter together" section: the causal map by every stored method.

- :func:`methods_figure` — per test, the exact, AtP and regression head maps side by side on
  one colour scale (also ``vheads causal-map``'s ``causal_methods.png``, which
  :func:`write_causal_figures` writes beside its ``causal_map.png``);
- :func:`methods_table` — Spearman ρ, its p and top-k recall between every pair of methods
  (:func:`vheads.causal.agreement`);
- :func:`backup_table` — the backup pairs of the co-ablation scan (method ``backup-LxHy``):
  with the top head hidden, the other head's effect, against its effect alone;
- :func:`support_table` — which discovery score's head-set each method supports: per
  setting, Spearman ρ between its score map and each method's map, and |S ∩ top-k|.

Every number is read from the results store's ``causal_map`` table (per-item values:
one-head drops, AtP estimates, per-item regression coefficients, per-item backup gains).
"""

from __future__ import annotations

import numpy as np

from vheads.causal import METHODS, CausalMap, agreement
from vheads.report._causal import _effect_colorbar, _heat, causal_map_figure, score_map_rho, _settings_with_scores
from vheads.report._data import RunData
from vheads.report._doc import Figure, Table
from vheads.report._maps import _label, load_causal_maps
from vheads.report._tables import fmt, fmt_p

HOW = (
    "The exact map hides one head at a time, so it misses heads that matter only together (a backup takes over "
    "when one is hidden); AtP linearises the same one-head effect. Head attribution by regression hides random "
    "subsets of heads and fits the drop on which heads were hidden: a head's coefficient is its average share of "
    "the damage, whatever else is hidden. The three maps are shown on one colour scale; ρ and top-k recall say how "
    "far they agree. A backup pair (hidden head, other head) is one where the other head's effect grows once the "
    "first is hidden (gain = effect with it hidden − effect alone). The last table asks which discovery score's "
    "head-set each map supports."
)
AGREE_TITLE = "The causal map by method: agreement"
BACKUP_TITLE = "Backup heads"
SUPPORT_TITLE = "Which score's heads each causal method supports"


def _method_maps(maps: dict[str, CausalMap]) -> dict[tuple[str, str], dict[str, CausalMap]]:
    """``{(test, ablation): {method: map}}`` of the maps by :data:`vheads.causal.METHODS`."""
    out: dict[tuple[str, str], dict[str, CausalMap]] = {}
    for m in maps.values():
        if m.method in METHODS:
            out.setdefault((m.test, m.ablation), {})[m.method] = m
    return {k: v for k, v in out.items() if len(v) > 1 or "regression" in v}


def methods_figure(maps: dict[str, CausalMap], metric: str = "p4") -> bytes | None:
    """One row per test with more than one method: each method's head map, one shared scale."""
    import matplotlib.pyplot as plt

    from vheads.report._figures import _png

    groups = _method_maps(maps)
    if not groups:
        return None
    ncol = max(len(g) for g in groups.values())
    m0 = next(iter(next(iter(groups.values())).values()))
    w = min(6.0, max(2.4, 0.3 * m0.n_heads + 1.2))
    h = min(9.0, max(3.0, 0.3 * m0.n_layers + 2.0))
    fig, axes = plt.subplots(len(groups), ncol, figsize=(ncol * w + 0.8, len(groups) * h), squeeze=False, layout="constrained")
    for row, ((test, ablation), got) in zip(axes, groups.items()):
        names = [x for x in METHODS if x in got]
        hms = [got[x].head_map(metric if x != "atp" else "p4") for x in names]
        vmax = max((float(np.nanmax(np.abs(x))) for x in hms if np.isfinite(x).any()), default=0.0) or 1.0
        im = None
        for ax, name, hm in zip(row, names, hms):
            im = _heat(ax, hm, vmax)
            ax.set_title(f"{_label(test + ('' if ablation == 'attention' else '@' + ablation))}: {name}", fontsize=9)
        for ax in row[len(names):]:
            ax.axis("off")
        _effect_colorbar(fig, im, list(row[:len(names)]), f"effect ({metric})", vmax, shrink=0.8)
    return _png(fig)


def write_causal_figures(run) -> list:
    """The figures of a :class:`vheads.causal.CausalMapRun`, written to its folder and added to
    its ``files``: ``causal_map.png`` (the exact and AtP maps, :func:`causal_map_figure`) and,
    when a method other than exact ran, ``causal_methods.png`` (:func:`methods_figure`)."""
    from vheads._io import atomic_write

    figures = [("causal_map.png", causal_map_figure({key: x for key, x in run.maps.items() if x.method in ("exact", "atp")},
                                                    run.metric))]
    if run.methods != ["exact"]:
        figures.append(("causal_methods.png", methods_figure(run.maps, run.metric)))
    for name, png in figures:
        if png is not None:
            atomic_write(run.out / name, lambda fh, png=png: fh.write(png), mode="wb")
            run.files.append(run.out / name)
    return run.files


def methods_table(maps: dict[str, CausalMap], k: int, metric: str = "p4") -> Table | None:
    """Spearman ρ, p and top-k recall between every pair of methods, per test."""
    chosen = {key: m for key, m in maps.items() if m.method in METHODS}
    rows = [[_label(a["test"] + ("" if a["ablation"] == "attention" else "@" + a["ablation"])), f"{a['a']} vs {a['b']}",
             fmt(a["spearman"], 3), fmt_p(a["spearman_p"]), fmt(a["top_k_recall"], 2)] for a in agreement(chosen, k, metric)]
    if not rows:
        return None
    return Table(AGREE_TITLE, ["Test", "Methods", "ρ", "p", f"top-{k} recall"], rows,
                 f"Spearman ρ (scipy.stats.spearmanr) between two methods' head maps over every head, two-sided p; top-{k} "
                 f"recall = |top-{k}(a) ∩ top-{k}(b)| / {k}. AtP is in p4; the other maps in {metric}.", text_cols=2)


def backup_table(maps: dict[str, CausalMap], metric: str = "p4", per_head: int = 3) -> Table | None:
    """The ``per_head`` largest gains of each hidden head's co-ablation scan, with their numbers."""
    rows = []
    for key, m in maps.items():
        if not m.method.startswith("backup-"):
            continue
        hidden = m.method.removeprefix("backup-")
        exact = maps.get(key.partition(":")[0])  # the same test's exact map: each head alone
        gain = m.effects(metric)
        for j in np.argsort(-np.nan_to_num(gain, nan=-np.inf), kind="stable")[:per_head]:
            uid = m.unit_ids[j]
            alone = exact.effects(metric)[exact.unit_ids.index(uid)] if exact is not None and uid in exact.unit_ids else None
            rows.append([_label(key.partition(":")[0]), hidden, uid, fmt(alone), fmt(None if alone is None else alone + gain[j]), fmt(gain[j])])
    if not rows:
        return None
    return Table(BACKUP_TITLE, ["Test", "Hidden head", "Other head", "effect alone", "effect with the hidden head hidden",
                                "gain"], rows,
                 f"Co-ablation ({metric}): gain = T(hidden + other) − T(hidden) − T(other), per item then averaged like the "
                 "test's statistic; effect with it hidden = alone + gain. Alone: the exact map on the same items.", text_cols=3)


def support_table(run: RunData, maps: dict[str, CausalMap], metric: str = "p4") -> Table | None:
    """Per setting and method: ρ between the score map and the method's map, and |S ∩ top-|S||."""
    settings = _settings_with_scores(run)
    by = {m.method: m for m in maps.values() if m.method in METHODS and m.test == "ncs-all" and m.ablation == "attention"}
    if not settings or len(by) < 2 and "regression" not in by:
        return None
    names = [x for x in METHODS if x in by]
    rho = {x: score_map_rho(run, by[x].head_map(metric if x != "atp" else "p4")) for x in names}
    rows = []
    for s in settings:
        hs = {tuple(h) for h in run.discovery[s]["headset"]}
        row = [s]
        for x in names:
            r = rho[x].get(s)
            top = {tuple(h) for h in by[x].top_heads(len(hs), metric if x != "atp" else "p4").heads} if hs else set()
            row += [fmt(r[0], 3) if r else "–", f"{len(top & hs)} / {len(hs)}"]
        rows.append(row)
    cols = ["Setting"] + [c for x in names for c in (f"ρ ({x})", f"S ∩ top ({x})")]
    return Table(SUPPORT_TITLE, cols, rows, "ρ: Spearman between the setting's discovery scores and the method's NCS "
                 "map over every head; S ∩ top: the setting's heads among the method's top-|S|.")


def together_blocks(run: RunData) -> list:
    """The section's blocks ([] for a run without a regression map or a backup scan)."""
    from vheads.evaluation import default_k
    from vheads.report._atp import study_k

    maps = load_causal_maps(run)
    if not any(m.method == "regression" or m.method.startswith("backup-") for m in maps.values()):
        return []
    metric = run.metric
    L, H = run.shape
    k = study_k(run) or default_k(len(run.attention_layers or range(L)), H)
    png = methods_figure(maps, metric)
    return [methods_table(maps, k, metric), backup_table(maps, metric), support_table(run, maps, metric),
            Figure("causal_methods", png, "The causal map by method on one colour scale: each head alone (exact), its "
                   "AtP estimate, and its regression coefficient over random multi-head ablations.", True) if png else None]
