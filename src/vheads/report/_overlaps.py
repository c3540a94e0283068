"""How the discovered head-sets overlap each other and chance, from the stored discovery
scores and the stored uniform random draws (nothing recomputed from a model):

- :func:`crossover_table` — seed Table 21: top-k' overlap (k' = min(20, k)) of each crossed
  query × source combination with each native set (ord-last, ref-qsp, ref-out) of its corpus;
- :func:`overlap_curve_figure` — seed Fig. 6: shared heads / k of two settings that differ
  only in corpus, for k = 1 … 2k;
- :func:`random_overlap_figure` — seed Fig. 7: the overlap of the native sets with each
  other and with a uniform random draw of the same size (mean, [min, max] over the draws).
"""

from __future__ import annotations

import itertools

import numpy as np

from vheads.discovery import overlap_curve, select_heads
from vheads.report._data import RunData
from vheads.report._doc import Table
from vheads.report._figures import _png, plt
from vheads.report._tables import fmt, what_changes

NATIVE = ("ord-last", "ref-qsp", "ref-out")  # the seed's three native query × source combinations
CROSS_K = 20


def _scored(run: RunData) -> list[str]:
    return [s for s in run.settings if s in run.discovery and run.discovery[s].get("scores") is not None]


def crossover_table(run: RunData) -> Table | None:
    settings = _scored(run)
    rows = []
    for corpus in dict.fromkeys(s.split("-", 1)[0] for s in settings):
        natives = [f"{corpus}-{n}" for n in NATIVE if f"{corpus}-{n}" in settings]
        crossed = [s for s in settings if s.startswith(corpus + "-") and s not in natives]
        if not natives or not crossed:
            continue
        for s in crossed:
            k = min(CROSS_K, int(run.discovery[s]["k"]))
            top = select_heads(run.discovery[s]["scores"], k)
            row = [s, str(k)]
            for n in NATIVE:
                nid = f"{corpus}-{n}"
                row.append(str(len(top & select_heads(run.discovery[nid]["scores"], k))) if nid in natives else "–")
            rows.append(row)
    if not rows:
        return None
    return Table("Crossover combinations against the native head-sets (seed Table 21)",
                 ["Setting", "k'", *NATIVE], rows,
                 f"Top-k' overlap (k' = min({CROSS_K}, k), flat top-k' of the stored discovery scores) of each query × "
                 "source combination that is not native with the native sets of its corpus.")


def overlap_curve_figure(run: RunData) -> bytes | None:
    settings = _scored(run)
    pairs = [(a, b) for a, b in itertools.combinations(settings, 2) if what_changes(a, b) == "corpus"]
    if not pairs:
        return None
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    for a, b in pairs:
        sa, sb = run.discovery[a]["scores"], run.discovery[b]["scores"]
        kmax = min(sa.size, 2 * int(run.discovery[a]["k"]))
        ks = np.arange(1, kmax + 1)
        ax.plot(ks, overlap_curve(sa, sb, ks) / ks, lw=1.3, label=f"{a} vs {b}")
    ax.axvline(int(run.discovery[pairs[0][0]]["k"]), color="#999", lw=0.8, ls=":")
    ax.set_xlabel("k (top-k heads)", fontsize=8)
    ax.set_ylabel("shared / k", fontsize=8)
    ax.set_ylim(0, 1.02)
    ax.tick_params(labelsize=7.5)
    ax.grid(alpha=0.25)
    ax.legend(fontsize=7, frameon=False, ncol=2)
    fig.tight_layout()
    return _png(fig)


def native_overlap_bars(run: RunData) -> list[tuple[str, int, list[str], list[float], list[float], list[float]]]:
    """Fig. 7's bars per corpus with native sets: ``(corpus, k, labels, values, lo, hi)`` —
    each pair of native sets' overlap, then each native set's overlap with the uniform
    random draws (mean, min, max over the draws)."""
    settings = _scored(run)
    out = []
    for corpus in dict.fromkeys(s.split("-", 1)[0] for s in settings):
        natives = [f"{corpus}-{n}" for n in NATIVE if f"{corpus}-{n}" in settings]
        if not natives or not all(n in run.random_overlap for n in natives):
            continue
        labels, vals, lo, hi = [], [], [], []
        for a, b in itertools.combinations(natives, 2):
            ov = len(set(run.discovery[a]["headset"]) & set(run.discovery[b]["headset"]))
            labels.append(f"{a.split('-', 1)[1]} / {b.split('-', 1)[1]}")
            vals.append(ov), lo.append(ov), hi.append(ov)
        for n in natives:
            r = np.asarray(run.random_overlap[n], dtype=float)
            labels.append(f"{n.split('-', 1)[1]} / random")
            vals.append(r.mean()), lo.append(r.min()), hi.append(r.max())
        out.append((corpus, int(run.discovery[natives[0]]["k"]), labels, vals, lo, hi))
    return out


def random_overlap_figure(run: RunData) -> bytes | None:
    return overlap_bars_figure(native_overlap_bars(run))


def overlap_bars_figure(groups: list[tuple[str, int, list[str], list[float], list[float], list[float]]]) -> bytes | None:
    """One panel of bars per ``(title, k, labels, values, lo, hi)`` (see :func:`native_overlap_bars`)."""
    if not groups:
        return None
    fig, axes = plt.subplots(1, len(groups), figsize=(2.9 * len(groups), 2.9), squeeze=False)
    for ax, (corpus, k, labels, vals, lo, hi) in zip(axes.flat, groups):
        x = np.arange(len(labels))
        colors = ["#2e6fb7" if "random" not in lab else "#7f8c8d" for lab in labels]
        ax.bar(x, vals, color=colors)
        err = np.array([np.subtract(vals, lo), np.subtract(hi, vals)])
        ax.errorbar(x, vals, yerr=err, fmt="none", ecolor="black", lw=0.8, capsize=2)
        ax.axhline(k, color="#999", lw=0.7, ls=":")
        ax.set_xticks(x, labels, rotation=45, ha="right", fontsize=8)
        ax.set_title(f"{corpus}: top-{k} overlap", fontsize=9.5)
        ax.set_xlabel("pair of head-sets", fontsize=9)
        ax.set_ylabel(f"shared heads (of {k})", fontsize=9)
        ax.tick_params(labelsize=8)
    fig.tight_layout()
    return _png(fig)


def random_overlap_table(run: RunData) -> Table | None:
    """The numbers of :func:`random_overlap_figure`: each setting's overlap with a uniform
    random draw of its size, mean [min, max] over the stored draws, beside k²/(L·H), the
    expected overlap of two independent uniform draws."""
    L, H = run.shape
    rows = []
    for s in _scored(run):
        r = run.random_overlap.get(s)
        if not r:
            continue
        k = len(run.discovery[s]["headset"])
        exp = fmt(k * k / (L * H), 2) if L and H else "–"
        rows.append([s, str(k), f"{fmt(float(np.mean(r)), 2)} [{min(r)}, {max(r)}]", str(len(r)), exp])
    if not rows:
        return None
    return Table("Overlap with a uniform random draw (seed Fig. 7)", ["Setting", "k", "shared [min, max]", "draws",
                 "expected k²/(L·H)"], rows, "Uniform draws of k heads anywhere in the model, seeded and stored.")
