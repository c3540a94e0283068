"""How much do the discovery choices move the head-set? Overlaps and noise ceilings.

- **Overlap** of settings A and B: ``|top-k(s_A) ∩ top-k(s_B)|`` (DESIGN.md "Overlap").
- **Noise ceiling** of one setting: split its discovery items at random into two halves
  (sizes ⌊N/2⌋ and ⌈N/2⌉), take top-k of each half's mean score, count the common heads;
  repeat ``splits`` times (default 200, seeded). Reported as the mean and the 2.5–97.5
  percentiles (numpy's default linear interpolation). It is the overlap two settings that
  measure *the same thing* would reach with half the items each.
- **Geometric-mean ceiling** of a pair: ``sqrt(ceiling_A · ceiling_B)`` (means), and the
  overlap as a fraction of it (the seed's Table 20).
- **Overlap curve**: the overlap of two flat top-k's for k = 1 … K.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vheads.evaluation._headsets import HeadSet


def topk_overlap(a: HeadSet, b: HeadSet) -> int:
    """``|A ∩ B|`` of two head-sets of the same model."""
    return len(a & b)


def overlap_matrix(headsets: Sequence[HeadSet]) -> np.ndarray:
    """``M[i, j] = |S_i ∩ S_j|`` (int ``[S, S]``; the diagonal is each set's size)."""
    n = len(headsets)
    m = np.zeros((n, n), dtype=int)
    for i in range(n):
        for j in range(n):
            m[i, j] = topk_overlap(headsets[i], headsets[j])
    return m


def _topk_mask(scores: np.ndarray, k: int, per_layer: bool, attention_layers: Sequence[int] | None = None) -> np.ndarray:
    """Top-k membership ``[L, H]``; on a hybrid model only ``attention_layers``' heads are ranked."""
    return HeadSet.from_scores(scores, k, per_layer=per_layer, attention_layers=attention_layers).as_mask()


@dataclass
class Ceiling:
    """Split-half noise ceiling of one setting: ``values [splits]`` and their summary."""

    mean: float
    lo: float  # 2.5th percentile
    hi: float  # 97.5th percentile
    values: np.ndarray  # [splits] int
    k: int

    def to_dict(self) -> dict:
        return {"mean": self.mean, "p2.5": self.lo, "p97.5": self.hi, "k": self.k, "splits": int(len(self.values))}


def split_half_ceiling(per_item: np.ndarray, k: int, splits: int = 200, seed: int = 0, per_layer: bool = False,
                       attention_layers: Sequence[int] | None = None) -> Ceiling:
    """Noise ceiling from random half-splits of the items of ``per_item [N, L, H]`` (on a
    hybrid model only the heads of ``attention_layers`` are ranked, as in discovery)."""
    x = np.asarray(per_item, dtype=np.float64)
    if x.ndim != 3:
        raise ValueError(f"per-item scores must be [N, L, H], got shape {x.shape}")
    n = x.shape[0]
    if n < 2:
        raise ValueError(f"a split-half ceiling needs at least 2 items, got {n}")
    if splits < 1:
        raise ValueError(f"splits must be at least 1, got {splits}")
    rng = np.random.default_rng(seed)
    vals = np.empty(splits, dtype=int)
    for i in range(splits):
        perm = rng.permutation(n)
        a, b = perm[: n // 2], perm[n // 2:]
        ma = _topk_mask(x[a].mean(0), k, per_layer, attention_layers)
        mb = _topk_mask(x[b].mean(0), k, per_layer, attention_layers)
        vals[i] = int((ma & mb).sum())
    return Ceiling(float(vals.mean()), float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5)), vals, k)


def geometric_ceiling(a: Ceiling, b: Ceiling) -> float:
    """``sqrt(mean ceiling A · mean ceiling B)``."""
    return float(np.sqrt(a.mean * b.mean))


def overlap_fraction(overlap: int, a: Ceiling, b: Ceiling) -> float:
    """Overlap as a fraction of the pair's geometric-mean ceiling (NaN when that is 0)."""
    g = geometric_ceiling(a, b)
    return float(overlap / g) if g > 0 else float("nan")


def overlap_curve(scores_a: np.ndarray, scores_b: np.ndarray, ks: Sequence[int] | None = None,
                  attention_layers: Sequence[int] | None = None) -> np.ndarray:
    """``|top-k(A) ∩ top-k(B)|`` (flat) for each k in ``ks`` (default 1 … the model's heads)."""
    sa, sb = np.asarray(scores_a), np.asarray(scores_b)
    if sa.shape != sb.shape:
        raise ValueError(f"scores of different models: {sa.shape} vs {sb.shape}")
    n_heads = sa.size if attention_layers is None else len(attention_layers) * sa.shape[1]
    ks = list(range(1, n_heads + 1)) if ks is None else list(ks)
    return np.array([int((_topk_mask(sa, k, False, attention_layers) & _topk_mask(sb, k, False, attention_layers)).sum()) for k in ks])


def plot_overlap_heatmap(matrix: np.ndarray, labels: Sequence[str], path, k: int | None = None,
                         ceilings: Sequence[Ceiling] | None = None, title: str | None = None):
    """Heatmap of the overlap matrix (like the seed's Figure 2), annotated with counts;
    with ``ceilings`` the diagonal shows each setting's split-half ceiling instead of k."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = np.asarray(matrix, dtype=float)
    n = len(labels)
    shown = m.copy()
    if ceilings is not None:
        for i, c in enumerate(ceilings):
            shown[i, i] = c.mean
    fig, ax = plt.subplots(figsize=(1.0 + 0.55 * n, 0.8 + 0.5 * n))
    im = ax.imshow(shown, cmap="viridis", vmin=0, vmax=k or max(1.0, m.max()))
    ax.set_xticks(range(n), labels, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(n), labels, fontsize=8)
    for i in range(n):
        for j in range(n):
            txt = f"{shown[i, j]:.1f}" if (ceilings is not None and i == j) else f"{int(m[i, j])}"
            ax.text(j, i, txt, ha="center", va="center", fontsize=7,
                    color="white" if shown[i, j] < 0.6 * (k or m.max() or 1) else "black")
    fig.colorbar(im, ax=ax, label="|top-k ∩ top-k|")
    ax.set_title(title or (f"top-{k} overlap" + (" (diagonal: split-half ceiling)" if ceilings is not None else "")), fontsize=9)
    fig.tight_layout()
    from pathlib import Path

    from vheads.discovery._files import atomic_write

    atomic_write(Path(path), lambda fh: fig.savefig(fh, format=Path(path).suffix.lstrip(".") or "png", dpi=150), mode="wb")
    plt.close(fig)
    return Path(path)


@dataclass
class OverlapReport:
    """Overlap matrix of several head-sets of one model, with split-half ceilings."""

    ids: list[str]
    k: int
    mode: str
    matrix: np.ndarray  # [S, S] int
    ceilings: list[Ceiling]
    geo_ceiling: np.ndarray  # [S, S] float
    fraction: np.ndarray  # [S, S] float: overlap / geometric-mean ceiling
    curves: dict[str, np.ndarray]  # "a|b" -> overlap for k = 1 … len

    def to_dict(self) -> dict:
        return {
            "settings": self.ids, "k": self.k, "mode": self.mode,
            "overlap": self.matrix.tolist(),
            "ceilings": {i: c.to_dict() for i, c in zip(self.ids, self.ceilings)},
            "geometric_ceiling": np.round(self.geo_ceiling, 6).tolist(),
            "fraction_of_ceiling": [[None if not np.isfinite(v) else round(float(v), 6) for v in row] for row in self.fraction],
            "curves": {key: v.tolist() for key, v in self.curves.items()},
        }


def overlap_report(records, splits: int = 200, seed: int = 0, curve_k: int | None = None, progress: bool = False) -> OverlapReport:
    """Overlaps, ceilings and curves of head-set records (:class:`HeadSetRecord`) of one model.

    All records must come from the same model (fingerprint) and use the same k and
    selection mode. Ceilings need each record's per-item scores file.
    """
    from tqdm.auto import tqdm

    from vheads.discovery._files import load_per_item

    records = list(records)
    if len(records) < 1:
        raise ValueError("overlap needs at least one head-set")
    fps = {r.model["fingerprint"] for r in records}
    if len(fps) > 1:
        raise ValueError(f"head-sets come from different models ({', '.join(sorted(fps))}); overlap compares head-sets of one model")
    ks = {(r.k, r.mode) for r in records}
    if len(ks) > 1:
        raise ValueError(f"head-sets differ in size or selection mode {sorted(ks)}; overlap compares head-sets of one k and mode")
    k, mode = next(iter(ks))
    ids = [r.setting.id for r in records]
    if len(set(ids)) != len(ids):
        raise ValueError(f"the same setting is given twice: {ids}")
    matrix = overlap_matrix([r.headset for r in records])
    layers = records[0].headset.attention_layers  # the layers with heads (all but a hybrid model's linear ones)
    ceilings = [split_half_ceiling(load_per_item(r), k, splits, seed, per_layer=(mode == "per-layer"), attention_layers=layers)
                for r in tqdm(records, desc="ceilings", disable=not progress)]
    n = len(records)
    geo = np.array([[geometric_ceiling(ceilings[i], ceilings[j]) for j in range(n)] for i in range(n)])
    frac = np.array([[overlap_fraction(int(matrix[i, j]), ceilings[i], ceilings[j]) for j in range(n)] for i in range(n)])
    kmax = curve_k or min(len(layers) * records[0].scores.shape[1], 4 * k)
    curves = {f"{ids[i]}|{ids[j]}": overlap_curve(records[i].scores, records[j].scores, range(1, kmax + 1), layers)
              for i in range(n) for j in range(i + 1, n)}
    return OverlapReport(ids, k, mode, matrix, ceilings, geo, frac, curves)
