"""How many discovery items does a head-set need? Stability curves over the number of items.

For one setting with per-item scores ``X [N, L, H]`` (the region mass of every item, as
discovery stores it) and head-set size k, at each size n of :func:`stability_sizes`
(5, 10, 25, 50, 100, 200, 400 below N, then N itself) and each of R seeded draws:

- draw ``sub = rng.permutation(N)[:n]`` (``rng = numpy.random.default_rng(seed_n)``, one
  generator per size, its draws in order; ``seed_n`` is stored per size);
- **overlap with the full corpus**: ``|top-k(mean of X[sub]) ∩ top-k(mean of X)|``: how
  much of the head-set all N items find, n items already find;
- **split-half overlap at n**: ``|top-k(mean of X[sub[:n//2]]) ∩ top-k(mean of X[sub[n//2:]])|``:
  the noise ceiling of :func:`vheads.discovery.split_half_ceiling` (halves of ⌊n/2⌋ and
  ⌈n/2⌉ items), for a corpus of n items.

top-k is discovery's own selection (flat or per layer, ties by (layer, head); on a hybrid
model only the softmax layers' heads). Each curve is summarised by its mean and 2.5–97.5
percentiles over the draws. Its **ceiling** is its mean at the largest size, n = N: for the
full-corpus overlap that is k (the subset is the corpus); for the split-half overlap it is
the split-half noise ceiling of the whole corpus (the definition of ``split_half_ceiling``;
the study draws it with the ceiling's own seed, so it is the overlap table's ceiling).
**N90** is the smallest size on the grid whose mean reaches 90% of that ceiling (none when
the ceiling is 0: nothing to reach).

The full-corpus overlap counts items the subset shares with the corpus, so it rises to k
by construction; the split-half overlap compares disjoint halves and is the honest
measure of how reproducible a head-set of n items is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from vheads._seeds import derived_seed
from vheads.discovery._overlap import _topk_mask

#: the discovery sizes a curve visits (those below the corpus size, then the corpus size)
SIZES: tuple[int, ...] = (5, 10, 25, 50, 100, 200, 400)
#: the share of its ceiling a curve must reach for N90
FRACTION = 0.9
#: the two curves: overlap with the full-corpus head-set, split-half overlap
CURVES = ("full", "split")


def stability_sizes(n_items: int, sizes: Sequence[int] = SIZES) -> list[int]:
    """The sizes of ``sizes`` from 2 (a split-half needs an item per half) up to below
    ``n_items``, then ``n_items`` itself: ``[5, 10, 25, 48]`` for the default study's 48."""
    if n_items < 2:
        raise ValueError(f"a stability curve needs at least 2 items, got {n_items}")
    return sorted({int(n) for n in sizes if 2 <= n < n_items}) + [int(n_items)]


def size_seed(seed: int, n: int) -> int:
    """The seed of the draws at size ``n`` under a curve's ``seed``."""
    return derived_seed(seed, "stability", n)


@dataclass
class StabilityCurve:
    """One setting's two curves: ``overlaps[curve]`` is ``[len(sizes), draws]`` int, the
    overlap of each draw at each size; ``seeds[i]`` seeds the draws at ``sizes[i]``;
    ``set_size`` the heads of a head-set (k, or k per layer times the layers)."""

    set_size: int
    sizes: list[int]
    overlaps: dict[str, np.ndarray]  # curve -> [S, R] int
    seeds: list[int]

    def mean(self, curve: str) -> np.ndarray:  # [S]
        return self.overlaps[curve].mean(axis=1)

    def band(self, curve: str) -> tuple[np.ndarray, np.ndarray]:
        """2.5th and 97.5th percentiles over the draws, per size."""
        x = self.overlaps[curve]
        return np.percentile(x, 2.5, axis=1), np.percentile(x, 97.5, axis=1)

    def ceiling(self, curve: str) -> float:
        """The curve's mean at the largest size (all N items)."""
        return float(self.mean(curve)[-1])

    def n90(self, curve: str, fraction: float = FRACTION) -> int | None:
        return items_to_reach(self.sizes, self.mean(curve), self.ceiling(curve), fraction)


def items_to_reach(sizes: Sequence[int], means: Sequence[float], ceiling: float, fraction: float = FRACTION) -> int | None:
    """The smallest size whose mean overlap is at least ``fraction × ceiling``; ``None`` if
    the ceiling is not above 0 or no size reaches it."""
    if not ceiling > 0:
        return None
    for n, m in zip(sizes, means):
        if m >= fraction * ceiling:
            return int(n)
    return None


def stability_curve(per_item: np.ndarray, k: int, sizes: Sequence[int] | None = None, draws: int = 200, seed: int = 0,
                    per_layer: bool = False, attention_layers: Sequence[int] | None = None,
                    seeds: Mapping[int, int] | None = None) -> StabilityCurve:
    """Both stability curves of one setting from its per-item scores ``[N, L, H]`` (see the
    module docstring for the draws); ``sizes`` default :func:`stability_sizes` of N, each
    size at most N; draws at size n seeded by ``seeds[n]`` where given, else by
    :func:`size_seed` ``(seed, n)``. (With ``seeds = {N: s}`` and ``draws = splits`` the
    split-half curve at N is :func:`split_half_ceiling` ``(per_item, k, splits, s)``, draw
    for draw: the study passes its ceiling's seed, so the two agree exactly.)"""
    x = np.asarray(per_item, dtype=np.float64)
    if x.ndim != 3:
        raise ValueError(f"per-item scores must be [N, L, H], got shape {x.shape}")
    N = len(x)
    sizes = stability_sizes(N) if sizes is None else [int(n) for n in sizes]
    if not sizes or any(not 2 <= n <= N for n in sizes):
        raise ValueError(f"stability sizes must lie in 2..{N} (the items scored), got {sizes}")
    if draws < 1:
        raise ValueError(f"draws must be at least 1, got {draws}")
    full = _topk_mask(x.mean(0), k, per_layer, attention_layers)
    out = {c: np.empty((len(sizes), draws), dtype=int) for c in CURVES}
    chosen = [int((seeds or {}).get(n, size_seed(seed, n))) for n in sizes]
    for i, (n, s) in enumerate(zip(sizes, chosen)):
        rng = np.random.default_rng(s)
        for r in range(draws):
            sub = rng.permutation(N)[:n]
            out["full"][i, r] = int((_topk_mask(x[sub].mean(0), k, per_layer, attention_layers) & full).sum())
            a = _topk_mask(x[sub[: n // 2]].mean(0), k, per_layer, attention_layers)
            b = _topk_mask(x[sub[n // 2:]].mean(0), k, per_layer, attention_layers)
            out["split"][i, r] = int((a & b).sum())
    return StabilityCurve(int(full.sum()), sizes, out, chosen)


def plot_stability(curves: dict[str, StabilityCurve], path=None, fraction: float = FRACTION):
    """One panel per setting (shared axes): overlap against the number of discovery items
    (log scale), the overlap with the full-corpus head-set (blue) and the split-half overlap
    (orange), each the mean over the draws with its 2.5–97.5 percentile band; a ringed dot
    marks N90, the dotted line the head-set's size. Returns the figure (saved to ``path``
    if given)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ids = list(curves)
    ncols = min(4, len(ids))
    nrows = -(-len(ids) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.6 * ncols + 0.6, 2.1 * nrows + 0.7), squeeze=False,
                             sharex=True, sharey=True, layout="constrained")
    size = max(c.set_size for c in curves.values())
    sizes = sorted({n for c in curves.values() for n in c.sizes})
    colors = {"full": "#2e6fb7", "split": "#d68910"}
    labels = {"full": "with the full-corpus head-set", "split": "split-half"}
    for ax, sid in zip(axes.flat, ids):
        c = curves[sid]
        for curve in CURVES:
            lo, hi = c.band(curve)
            ax.fill_between(c.sizes, lo, hi, color=colors[curve], alpha=0.18, lw=0)
            ax.plot(c.sizes, c.mean(curve), color=colors[curve], lw=1.5, marker="o", ms=2.5, label=labels[curve])
            n90 = c.n90(curve, fraction)
            if n90 is not None:
                ax.plot([n90], [c.mean(curve)[c.sizes.index(n90)]], "o", mfc="white", mec=colors[curve], ms=6.5, mew=1.5,
                        label=f"N90 ({int(fraction * 100)}% of the value at all items)" if curve == "full" else None)
        ax.axhline(c.set_size, color="#999", lw=0.8, ls=":")
        ax.set_title(sid, fontsize=8.5)
        ax.grid(alpha=0.25)
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(ids):]:
        ax.set_visible(False)
    ax0 = axes[0, 0]
    ax0.set_xscale("log")
    ax0.set_xticks(sizes, [str(n) for n in sizes])
    ax0.minorticks_off()
    ax0.set_ylim(0, size * 1.05)
    for ax in axes[-1]:
        ax.set_xlabel("discovery items", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel(f"shared heads (of {size})", fontsize=8)
    legend = dict(zip(*reversed(ax0.get_legend_handles_labels())))  # label -> handle
    order = sorted(legend, key=lambda name: name.startswith("N90"))  # the two curves, then the N90 ring
    fig.legend([legend[n] for n in order], order, loc="outside lower center", ncol=min(ncols, 3), fontsize=7.5,
               frameon=False)
    if path is not None:
        from pathlib import Path

        from vheads._io import atomic_write

        atomic_write(Path(path), lambda fh: fig.savefig(fh, format=Path(path).suffix.lstrip(".") or "png", dpi=150), mode="wb")
        plt.close(fig)
    return fig
