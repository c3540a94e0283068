"""The report's stability section: how many discovery items each setting's head-set needs.

Read from the stored draws of the study's stability stage (table ``stability``; nothing is
recomputed from a model): per setting and size n, the overlap of every seeded draw with
the full-corpus head-set and the split-half overlap
(:func:`vheads.discovery.stability_curve`). The figure (one panel per setting) draws the
mean over the draws with a 2.5–97.5 percentile band; the table gives N90, the smallest size whose mean reaches 90% of
the curve's ceiling (its mean at all N items: the head-set's size for the full-corpus
overlap, the split-half noise ceiling for the split-half overlap).
"""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np

from vheads.discovery import StabilityCurve, plot_stability
from vheads.report._doc import Figure, Table
from vheads.report._figures import _png
from vheads.report._tables import fmt
from vheads.store import Store

HOW = (
    "How many discovery items does a head-set need? Each setting's top-k is found again on random subsets of n of "
    "its discovery items (seeded draws, stored). Blue: how many heads the subset's top-k shares with the top-k of "
    "all N items (it reaches the head-set's size at n = N by construction: the subset is then the corpus). Orange: "
    "the split-half overlap of n items (top-k of one half against top-k of the other), the noise ceiling a corpus of "
    "n items would have; at n = N it is the split-half ceiling of the overlap table, draw for draw. Line: mean over "
    "the draws; band: 2.5–97.5 percentiles; ringed dot: N90, the smallest n whose mean reaches 90% of the curve's "
    "value at N. A curve still rising at N says more items would still move the head-set; a split-half ceiling near "
    "0 says the setting does not reproduce even at N, and its N90 then says nothing."
)


def stability_curves(store: Store) -> dict[str, StabilityCurve]:
    """``{setting: StabilityCurve}`` from the stored draws (empty for a run without them)."""
    if "stability" not in store.done_units():
        return {}
    sizes_of = {sid: len(json.loads(hs)) for sid, hs in store.query("SELECT setting, headset FROM discovery")}
    raw: dict[str, dict[str, dict[int, list[tuple[int, int, int]]]]] = defaultdict(lambda: defaultdict(dict))
    for sid, curve, n, draw, seed, ov in store.query(
            "SELECT setting, curve, n_items, draw, seed, overlap FROM stability ORDER BY setting, curve, n_items, draw"):
        raw[sid][curve].setdefault(n, []).append((draw, seed, ov))
    out = {}
    for sid, curves in raw.items():
        sizes = sorted(next(iter(curves.values())))
        seeds = [curves["full"][n][0][1] for n in sizes]
        overlaps = {c: np.array([[ov for _, _, ov in by_n[n]] for n in sizes]) for c, by_n in curves.items()}
        out[sid] = StabilityCurve(sizes_of.get(sid, 0), sizes, overlaps, seeds)
    return out


def n90_table(curves: dict[str, StabilityCurve]) -> Table | None:
    """N90 of both curves per setting, with the split-half ceiling it is measured against."""
    if not curves:
        return None

    def n90(c: StabilityCurve, curve: str) -> str:
        n = c.n90(curve)
        if n is None:
            return "–"
        return f"≤ {n}" if n == c.sizes[0] else str(n)

    rows = []
    for sid, c in curves.items():
        lo, hi = (float(v[-1]) for v in c.band("split"))
        rows.append([sid, str(c.set_size), str(c.sizes[-1]), n90(c, "full"),
                     f"{fmt(c.ceiling('split'), 2)} [{fmt(lo, 1)}, {fmt(hi, 1)}]", n90(c, "split"),
                     str(c.overlaps["split"].shape[1])])
    return Table("Discovery items needed: N90 per setting", ["Setting", "heads", "N", "N90 full-corpus",
                 "split-half ceiling at N", "N90 split-half", "draws"], rows,
                 "N90: the smallest number of discovery items, of the sizes visited ("
                 + ", ".join(str(n) for n in next(iter(curves.values())).sizes)
                 + "), whose mean overlap reaches 90% of the curve's value at all N items (full-corpus overlap: the "
                 "head-set's size; split-half: the split-half ceiling, mean [2.5, 97.5] over the draws). '≤ n': "
                 "reached at the smallest size visited; –: a ceiling of 0.")


def stability_blocks(run_dir, model: str = "") -> list:
    """The stability figure and N90 table of a run's ``model`` (empty when it has none)."""
    store = Store(run_dir, readonly=True, model=model)
    try:
        curves = stability_curves(store)
    finally:
        store.close()
    if not curves:
        return []
    fig = Figure("stability", _png(plot_stability(curves)),
                 "Top-k overlap against the number of discovery items (log scale), one panel per setting: with the "
                 "head-set of all items (blue) and split-half (orange); line: mean over the draws, band: 2.5–97.5 "
                 "percentiles, ringed: N90; dotted: the head-set's size.")
    return [fig, n90_table(curves)]
