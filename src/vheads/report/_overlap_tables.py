"""Overlap of the discovered head-sets against the split-half noise ceilings (seed Table 20),
the ceilings themselves, and the matrix of shared heads the heatmap draws.
"""

from __future__ import annotations

import itertools

import numpy as np

from vheads.report._data import RunData
from vheads.report._doc import Table
from vheads.report._format import fmt


_PARTS = ("corpus", "query type", "attention source")


def what_changes(a: str, b: str) -> str:
    pa, pb = a.split("-"), b.split("-")
    if len(pa) != 3 or len(pb) != 3:
        return "–"
    diff = [name for name, x, y in zip(_PARTS, pa, pb) if x != y]
    return diff[0] if len(diff) == 1 else " + ".join(diff) if diff else "same"


def overlap_matrix(run: RunData) -> tuple[list[str], np.ndarray, int | None] | None:
    """``M[i, j] = |S_i ∩ S_j|``: from the stored ``overlap`` table, else from the head-sets."""
    settings = [s for s in run.settings if s in run.discovery and run.discovery[s]["headset"]]
    if len(settings) < 2:
        return None
    idx = {s: i for i, s in enumerate(settings)}
    m = np.full((len(settings), len(settings)), np.nan)
    for i, s in enumerate(settings):
        m[i, i] = len(run.discovery[s]["headset"])
    for a, b in itertools.combinations(settings, 2):
        m[idx[a], idx[b]] = m[idx[b], idx[a]] = len(set(run.discovery[a]["headset"]) & set(run.discovery[b]["headset"]))
    for r in run.overlap:
        if r["a"] in idx and r["b"] in idx and r["a"] != r["b"]:
            m[idx[r["a"]], idx[r["b"]]] = m[idx[r["b"]], idx[r["a"]]] = r["overlap"]
    ks = {run.discovery[s]["k"] for s in settings}
    return settings, m, ks.pop() if len(ks) == 1 else None


def overlap_table(run: RunData) -> Table | None:
    """Seed Table 20: each pair of settings that differ in one factor, with their top-k
    overlap at half size (mean [2.5, 97.5 pct] over the half-splits), the geometric-mean
    ceiling and the overlap as a fraction of it. Pairs differing in several factors are
    left to the heatmap."""
    if not run.overlap:
        return None
    order = {s: i for i, s in enumerate(run.settings)}
    single = [r for r in run.overlap if what_changes(r["a"], r["b"]) in _PARTS]
    shown = single if single else run.overlap
    shown = sorted(shown, key=lambda r: (_PARTS.index(w) if (w := what_changes(r["a"], r["b"])) in _PARTS else 9,
                                         order.get(r["a"], 99), order.get(r["b"], 99)))
    rows = [[f"{r['a']} vs. {r['b']}", what_changes(r["a"], r["b"]), str(r["k"]),
             f"{fmt(r['half_mean'], 1)} [{fmt(r['half_lo'], 0)}, {fmt(r['half_hi'], 0)}]", str(r["overlap"]),
             fmt(r["ceiling_a"], 1), fmt(r["ceiling_b"], 1), fmt(r["geo_ceiling"], 1), fmt(r["fraction"], 2)]
            for r in shown]
    left_out = len(run.overlap) - len(shown)
    return Table("Top-k overlap against the noise ceiling (seed Table 20)",
                 ["Pair", "What changes", "k", "Shared heads at half size [2.5, 97.5]", "Shared (all items)",
                  "Ceiling A", "Ceiling B", "Geo-mean ceiling", "Fraction"], rows,
                 "Shared heads at half size: top-k of A on one half of the discovery items against top-k of B on "
                 "the other half, over the same half-splits as the ceilings (mean [2.5, 97.5 percentile]). "
                 "Ceiling: the same overlap between two halves of one setting (split-half noise ceiling); "
                 "geo-mean ceiling = sqrt(ceiling A · ceiling B); fraction = shared at half size / geo-mean ceiling, "
                 "so both sides are taken at the same number of items and a fraction near 1 means the two settings "
                 "find the same heads up to sampling noise. The all-items overlap is shown for reference only: it "
                 "is not comparable with a half-size ceiling."
                 + (f" {left_out} pairs that differ in more than one factor are in the heatmap only." if left_out else ""),
                 text_cols=2)


def ceilings_table(run: RunData) -> Table | None:
    if not run.ceilings:
        return None
    rows = [[s, str(c["k"]), f"{fmt(c['mean'], 1)} [{fmt(c['lo'], 1)}, {fmt(c['hi'], 1)}]", str(c["splits"])]
            for s in run.settings if (c := run.ceilings.get(s))]
    return Table("Split-half noise ceilings", ["Setting", "k", "Ceiling mean [2.5, 97.5 pct]", "Splits"], rows,
                 "Overlap of the top-k heads of two random halves of the discovery items, over the splits.")
