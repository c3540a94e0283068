"""The report's causal-map section: each attention score against the exact causal map.

- :func:`causal_map_figure` — a causal map (one row per test: each head alone as a
  layer × head heat map, its AtP estimate beside it, each whole layer as a bar), also the ``vheads causal-map`` PNG;
- :func:`maps_side_by_side_figure` — the causal NCS map beside every setting's discovery
  score map, Spearman ρ in each title;
- :func:`vheads.report._atp.atp_table` — the AtP estimate against the exact map (ρ,
  top-k recall, the heads and items where they disagree most), its map beside the exact one
  in :func:`causal_map_figure`;
- :func:`score_effect_figure` — per setting, each head's discovery score against its
  causal NCS effect;
- :func:`causal_table` — per setting: Spearman ρ between its score map and the causal map
  (``scipy.stats.spearmanr`` over the heads), the heads its S shares with the causal top-k,
  and its held-out NCS against the causal setting's (the best head-set of its size the map
  knows, tested on the same held-out items with the same controls: Table 3's
  ``causal-ncs`` row).

The causal map is read from the results store's ``causal_map`` table (every per-item
value, both NCS arms), so every ρ and effect shown is recomputable from it.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from vheads.causal import CAUSAL_SETTING, CausalMap, map_key
from vheads.evaluation import spearman
from vheads.report._data import RunData
from vheads.report._doc import Table
from vheads.report._figures import _png
from vheads.report._maps import _label, load_causal_maps
from vheads.report._tables import fmt, fmt_p

HOW = (
    "The exact causal map tests every head alone (and every whole layer) in NCS, on a discovery split of items "
    "of its own (not the held-out items of the tables above): effect = mean matched drop − mean mismatched drop "
    "with that one head hidden from the image. Its top-k heads form the causal setting (causal-ncs), tested in "
    "Table 3 on the held-out items with the same controls as every setting: the best head-set of its size that "
    "one-head effects point to. Each attention score is set against it: Spearman ρ between the setting's "
    "discovery score map and the causal map (over all heads), the heads its S shares with the causal top-k, and "
    "how far its held-out NCS falls below the causal setting's."
)
CMAP = "RdBu_r"


def _heat(ax, values: np.ndarray, vmax: float, cmap: str = CMAP, vmin: float | None = None):
    """A layer × head heat map on ``ax`` (layers down, heads across), ticks on both axes.
    Diverging maps (no ``vmin``) use a symmetric log scale, linear within 1% of ``vmax``:
    one dominant head would otherwise leave every other head white."""
    from matplotlib.colors import SymLogNorm

    L, H = values.shape
    norm = SymLogNorm(linthresh=0.01 * vmax, vmin=-vmax, vmax=vmax) if vmin is None else None
    im = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, norm=norm, vmin=None if norm else vmin,
                   vmax=None if norm else vmax, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(0, H, max(1, H // 8)))
    ax.set_yticks(range(0, L, max(1, L // 8)))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    return im


def _effect_colorbar(fig, im, ax, label: str, vmax: float, **kw) -> None:
    """The colour bar of a diverging effect map, ticked at 0, ±10% and ±100% of ``vmax``
    (the symmetric log scale's own ticks crowd around zero)."""
    ticks = [-vmax, -0.1 * vmax, 0.0, 0.1 * vmax, vmax]
    fig.colorbar(im, ax=ax, label=label, **kw).set_ticks(ticks, labels=[f"{t:.2g}" for t in ticks])


def causal_map_figure(maps: dict[str, CausalMap], metric: str = "p4") -> bytes | None:
    """One row per test: each head alone (heat map, red = hiding it costs the answer, blue =
    it helps), its AtP estimate where stored (heat map beside it, the same colour scale; AtP
    is in p4, so the scale is shared when ``metric`` is p4) and each whole layer (bars, same
    layers)."""
    from vheads.report._atp import METRIC as ATP_METRIC
    from vheads.report._atp import atp_partner

    drawn = {map_key(m.test, m.ablation, "atp") for m in maps.values() if m.method == "exact"}
    keys = [k for k in maps if k not in drawn]  # an AtP map is drawn beside its exact map
    if not keys:
        return None
    partner = {k: atp_partner(maps, k) for k in keys}
    m0 = maps[keys[0]]
    L, H = m0.n_layers, m0.n_heads
    heat_w = min(6.0, max(2.4, 0.3 * H + 1.2))
    height = min(9.0, max(3.0, 0.3 * L + 2.0))
    ratios = [heat_w, heat_w, 1.8] if any(partner.values()) else [heat_w, 1.8]
    fig, axes = plt.subplots(len(keys), len(ratios), figsize=(sum(ratios) + 0.6, len(keys) * height), squeeze=False,
                             width_ratios=ratios, layout="constrained")
    for row, key in zip(axes, keys):
        m, atp = maps[key], partner[key]
        ax, bar = row[0], row[-1]
        hm, le = m.head_map(metric), m.layer_effects(metric)
        am = atp.head_map(ATP_METRIC) if atp else None
        both = [hm] + ([am] if am is not None and metric == ATP_METRIC else [])
        vmax = max((float(np.nanmax(np.abs(x))) for x in both if np.isfinite(x).any()), default=0.0) or 1.0
        im = _heat(ax, hm, vmax)
        ax.set_title(f"{_label(key)}: each head alone", fontsize=9)
        shared = [ax]
        if len(ratios) == 3 and atp is None:
            row[1].axis("off")
            row[1].text(0.5, 0.5, "no AtP estimate\n(AtP covers NCS and the text arm\nunder attention and zero)", ha="center",
                        va="center", fontsize=8, color="#777", transform=row[1].transAxes)
        elif atp is not None:
            avmax = vmax if metric == ATP_METRIC else (float(np.nanmax(np.abs(am))) if np.isfinite(am).any() else 0.0) or 1.0
            aim = _heat(row[1], am, avmax)
            row[1].set_title(f"its AtP estimate ({ATP_METRIC})", fontsize=9)
            if metric == ATP_METRIC:
                shared.append(row[1])
            else:
                _effect_colorbar(fig, aim, row[1], f"AtP estimate ({ATP_METRIC}, symmetric log)", avmax, location="bottom", shrink=0.9)
        _effect_colorbar(fig, im, shared, f"effect of hiding the head ({metric}, symmetric log)", vmax, location="bottom", shrink=0.9)
        ys = np.arange(L)
        ok = np.isfinite(le)
        bar.barh(ys[ok], le[ok], color=np.where(le[ok] >= 0, "#c0392b", "#2e6fb7"), height=0.7)
        bar.axvline(0, color="#555", lw=0.8)
        bar.set_ylim(L - 0.5, -0.5)  # layer 0 on top, as in the heat map
        bar.set_yticks(range(0, L, max(1, L // 8)))
        bar.set_ylabel("layer")
        bar.set_xlabel(f"whole layer ({metric})")
        bar.set_title("each layer", fontsize=9)
        bar.tick_params(axis="x", labelsize=7)
    return _png(fig)


def _settings_with_scores(run: RunData) -> list[str]:
    return [s for s in run.settings if s in run.discovery and run.discovery[s].get("scores") is not None
            and np.asarray(run.discovery[s]["scores"]).ndim == 2]


def score_map_rho(run: RunData, effect: np.ndarray) -> dict[str, tuple[float, float, int]]:
    """Per setting: Spearman (ρ, two-sided p, n heads) between its discovery scores and the
    causal ``effect`` map [L, H], over the heads that have both (a hybrid model's
    linear-attention layers have neither)."""
    out = {}
    ok = np.isfinite(effect)
    for s in _settings_with_scores(run):
        sc = np.asarray(run.discovery[s]["scores"], dtype=float)
        both = ok & np.isfinite(sc)
        if both.sum() >= 3:
            r = spearman(sc[both], effect[both])
            out[s] = (r.rho, r.p, r.n)
    return out


def maps_side_by_side_figure(run: RunData, cmap: CausalMap, metric: str = "p4") -> bytes | None:
    """The causal NCS map (first panel, diverging colours) beside each setting's discovery
    score map (shared sequential scale), ρ between the two in each setting's title."""
    settings = _settings_with_scores(run)
    if not settings:
        return None
    effect = cmap.head_map(metric)
    rho = score_map_rho(run, effect)
    L, H = effect.shape
    n = len(settings) + 1
    ncol = min(4, n)
    nrow = -(-n // ncol)
    pw, ph = min(3.4, max(2.4, 0.28 * H + 1.0)), min(4.0, max(2.3, 0.26 * L + 1.6))
    fig, axes = plt.subplots(nrow, ncol, figsize=(ncol * pw, nrow * ph), squeeze=False, layout="constrained")
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    vmax = float(np.nanmax(np.abs(effect))) if np.isfinite(effect).any() else 0.0
    im = _heat(axes.flat[0], effect, vmax or 1.0)
    axes.flat[0].set_title("causal map: NCS of each head", fontsize=9)
    _effect_colorbar(fig, im, axes.flat[0], f"NCS effect ({metric}, symmetric log)", vmax or 1.0, shrink=0.85)
    smax = max(float(np.nanmax(run.discovery[s]["scores"])) for s in settings) or 1.0
    sim = None
    for ax, s in zip(axes.flat[1:], settings):
        sim = _heat(ax, np.asarray(run.discovery[s]["scores"], dtype=float), smax, cmap="viridis", vmin=0.0)
        r = rho.get(s)
        ax.set_title(f"{s}   ρ = {fmt(r[0], 2)}" if r else s, fontsize=9)
    if sim is not None:
        fig.colorbar(sim, ax=list(axes.flat[1:n]), shrink=0.6, label="discovery score (region mass)")
    return _png(fig)


def score_effect_figure(run: RunData, cmap: CausalMap, metric: str = "p4") -> bytes | None:
    """Per setting, one dot per head: discovery score (x) against the head's causal NCS
    effect (y); S's heads in red; ρ in the title."""
    settings = _settings_with_scores(run)
    if not settings:
        return None
    effect = cmap.head_map(metric)
    rho = score_map_rho(run, effect)
    ncol = min(4, len(settings))
    nrow = -(-len(settings) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(ncol * 2.8, nrow * 2.6 + 0.3), squeeze=False, sharey=True,
                             layout="constrained")
    for ax in axes.flat[len(settings):]:
        ax.set_visible(False)
    for ax, s in zip(axes.flat, settings):
        sc = np.asarray(run.discovery[s]["scores"], dtype=float)
        in_s = np.zeros(sc.shape, dtype=bool)
        for l, h in run.discovery[s]["headset"]:
            in_s[l, h] = True
        ok = np.isfinite(sc) & np.isfinite(effect)
        ax.scatter(sc[ok & ~in_s], effect[ok & ~in_s], s=10, color="#7f8c8d", alpha=0.7, label="other heads")
        ax.scatter(sc[ok & in_s], effect[ok & in_s], s=16, color="#c0392b", label="S")
        ax.axhline(0, color="#999", lw=0.6)
        r = rho.get(s)
        ax.set_title(f"{s}   ρ = {fmt(r[0], 2)}" if r else s, fontsize=9)
        ax.set_xlabel("discovery score")
        ax.set_ylabel(f"causal NCS effect ({metric})")
        ax.tick_params(labelsize=7.5)
    axes.flat[0].legend(fontsize=7.5, loc="best")
    return _png(fig)


def causal_table(run: RunData, cmap: CausalMap, metric: str = "p4") -> Table | None:
    """Per setting: ρ with the causal map, overlap of S with the causal top-k, and its
    held-out NCS against the causal setting's (gap = causal − setting)."""
    from vheads.report._tables import significance

    settings = _settings_with_scores(run)
    if not settings:
        return None
    effect = cmap.head_map(metric)
    rho = score_map_rho(run, effect)
    ncs = {st.setting: st.t_s for st in significance(run, "ncs-all", adjust=False)}
    best = ncs.get(CAUSAL_SETTING)
    rows = []
    for s in settings:
        hs = run.discovery[s]["headset"]
        top = {tuple(h) for h in cmap.top_heads(len(hs), metric).heads} if hs else set()
        r = rho.get(s)
        t = ncs.get(s)
        gap = None if best is None or t is None else best - t
        rows.append([s, fmt(r[0], 3) if r else "–", fmt_p(r[1]) if r else "–", str(r[2]) if r else "–",
                     f"{len(top & set(map(tuple, hs)))} / {len(hs)}", fmt(t), fmt(best), fmt(gap),
                     fmt(t / best, 2) if t is not None and best else "–"])
    n = {arm: len(ids) for arm, ids in cmap.item_ids.items()}
    caption = (f"ρ: Spearman (scipy.stats.spearmanr) between the setting's discovery scores and each head's causal NCS "
               f"effect, over the {int(np.isfinite(effect).sum())} heads, two-sided p. The causal map was taken on "
               f"{n.get('matched', '?')} matched and {n.get('mismatched', '?')} mismatched items of a discovery split; "
               "NCS (held out): Table 3's value on the evaluation items; causal-ncs: the top-k heads of the causal map "
               "(k = each setting's |S|) tested the same way. Gap = causal − setting; share = setting / causal.")
    return Table("Each attention score against the exact causal map",
                 ["Setting", "ρ (score, causal)", "p", "heads", "S ∩ causal top-k", "NCS (held out)",
                  "causal-ncs NCS", "gap", "share"], rows, caption)


def causal_blocks(run: RunData) -> list:
    """The section's tables and figures ([] for a run without a causal map)."""
    from vheads.report._atp import atp_table
    from vheads.report._doc import Figure

    maps = {k: m for k, m in load_causal_maps(run).items() if m.method in ("exact", "atp")}  # the others: "Heads that matter together"
    blocks: list = []
    if not maps:
        return blocks
    metric = run.metric
    t = causal_table(run, maps["ncs-all"], metric) if "ncs-all" in maps else None
    if t:
        blocks.append(t)
    t = atp_table(run, maps)
    if t:
        blocks.append(t)
    png = causal_map_figure(maps, metric)
    if png:
        blocks.append(Figure("causal_map", png, "The exact causal map: the effect of hiding each head alone from the "
                             "image (red: the answer suffers) and of hiding each whole layer, on the discovery split"
                             + ("; beside each head map its AtP estimate on the same items." if t else "."), True))
    if "ncs-all" in maps:
        png = maps_side_by_side_figure(run, maps["ncs-all"], metric)
        if png:
            blocks.append(Figure("causal_vs_scores", png, "The causal NCS map (first panel) beside each setting's "
                                 "discovery score map; ρ: Spearman between the two over all heads.", True))
        png = score_effect_figure(run, maps["ncs-all"], metric)
        if png:
            blocks.append(Figure("score_vs_effect", png, "Each head's discovery score against its causal NCS effect "
                                 "(red: the heads of the setting's S).", True))
    return blocks
