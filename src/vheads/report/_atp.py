"""The report's check of attribution patching against the exact causal map.

Per test × ablation that has both maps in the results store's ``causal_map`` table (the
exact one, method ``exact``, and its AtP estimate, method ``atp``, on the same items),
:func:`atp_table` prints :func:`vheads.causal.compare_maps` of the two p4 head maps: Spearman
ρ over the heads (``scipy.stats.spearmanr``) and its p, the top-k recall at the study's k,
the heads where the two values differ most, and the items (of either NCS arm) whose per-item
ρ over heads — exact drop against AtP drop of that item — is lowest. Everything is
recomputed from the stored per-item rows.
"""

from __future__ import annotations

import numpy as np

from vheads.causal import CausalMap, head_id, map_key
from vheads.report._data import RunData
from vheads.report._doc import Table
from vheads.report._maps import _label
from vheads.report._tables import fmt, fmt_p

N_SHOW = 3  # heads and items listed per row
METRIC = "p4"  # AtP stores the p4 drop only


def atp_partner(maps: dict[str, CausalMap], key: str) -> CausalMap | None:
    """The AtP map of the exact map ``maps[key]`` (same test and ablation), if stored."""
    m = maps[key]
    return maps.get(map_key(m.test, m.ablation, "atp")) if m.method == "exact" else None


def item_maps(cm: CausalMap, arm: str, metric: str = METRIC) -> np.ndarray:
    """``[n_items, L, H]``: each item's value of every head alone in ``arm`` (NaN where no head)."""
    vals = cm.per_item[metric][arm]  # [n_units, n_items]
    out = np.full((vals.shape[1], cm.n_layers, cm.n_heads), np.nan)
    row = {u: j for j, u in enumerate(cm.unit_ids)}
    for l in cm.attention_layers:
        for h in range(cm.n_heads):
            if head_id(l, h) in row:
                out[:, l, h] = vals[row[head_id(l, h)]]
    return out


def compare_atp(exact: CausalMap, atp: CausalMap, k: int, n_show: int = N_SHOW) -> dict:
    """:func:`vheads.causal.compare_maps` of the two p4 head maps, the items being every item
    of every arm both maps hold (ids ``arm:item``), each compared by its own drops."""
    from vheads.causal import compare_maps

    xs, ys, ids = [], [], []
    for arm, items in exact.item_ids.items():
        if arm not in atp.item_ids:
            continue
        at = {iid: i for i, iid in enumerate(atp.item_ids[arm])}
        both = [i for i, iid in enumerate(items) if iid in at]
        xs.append(item_maps(exact, arm)[both])
        ys.append(item_maps(atp, arm)[[at[items[i]] for i in both]])
        ids += [f"{arm}:{items[i]}" for i in both]
    e, a = exact.head_map(METRIC), atp.head_map(METRIC)
    k = min(k, int((np.isfinite(e) & np.isfinite(a)).sum()))
    return compare_maps(e, a, k, exact_items=np.concatenate(xs) if xs else None, approx_items=np.concatenate(ys) if ys else None,
                        item_ids=ids, n_show=n_show)


def study_k(run: RunData) -> int | None:
    """The study's k (every discovered S has it; the causal setting's top-k too)."""
    ks = [d["k"] for d in run.discovery.values() if d.get("k")]
    return int(ks[0]) if ks else None


def atp_table(run: RunData, maps: dict[str, CausalMap]) -> Table | None:
    """One row per exact map with an AtP estimate: ρ, p, top-k recall, the heads and items
    where they disagree most (None without any AtP map)."""
    pairs = [(key, maps[key], atp_partner(maps, key)) for key in maps]
    pairs = [p for p in pairs if p[2] is not None]
    if not pairs:
        return None
    k = study_k(run) or 10
    rows = []
    for key, exact, atp in pairs:
        c = compare_atp(exact, atp, k)
        heads = "; ".join(f"L{h['head'][0]}H{h['head'][1]} {fmt(h['exact'], 3)} / {fmt(h['approx'], 3)}" for h in c["heads"])
        items = "; ".join(f"{it['item']} {fmt(it['spearman'], 2)}" for it in c.get("items", []))
        rows.append([_label(key), str(c["n_heads"]), fmt(c["spearman"], 3), fmt_p(c["spearman_p"]),
                     f"{round(c['top_k_recall'] * c['k'])} / {c['k']}", heads, items or "–"])
    n = {arm: len(v) for arm, v in pairs[0][1].item_ids.items()}
    caption = ("AtP estimates every head's drop from one forward and one backward per item: −Σ_rows ⟨∂p4/∂o_h, o_h^abl − o_h⟩ "
               "(attention ablation: AtP*, the head's exact change of attention, linearised downstream; zero: o_h^abl = 0). "
               f"Both maps in p4 on the same items ({', '.join(f'{v} {a}' for a, v in n.items())}). ρ: Spearman "
               "(scipy.stats.spearmanr) between the exact and the AtP head map over the heads, two-sided p; top-k: heads in "
               f"both top-{k} (by value, largest first; k = the study's k); heads: the {N_SHOW} of largest |exact − AtP| "
               f"(exact / AtP); items: the {N_SHOW} whose own ρ over heads (its exact drops against its AtP drops) is lowest.")
    return Table("AtP vs the exact map", ["Map", "heads", "ρ (exact, AtP)", "p", "top-k", "largest disagreement (exact / AtP)",
                                          "items of lowest ρ"], rows, caption, text_cols=1)
