"""How much do the discovery choices move the head-set? Overlaps and noise ceilings.

- **Overlap** of settings A and B: ``|top-k(s_A) ∩ top-k(s_B)|`` (DESIGN.md "Overlap").
- **Noise ceiling** of one setting: split its discovery items at random into two halves
  (sizes ⌊N/2⌋ and ⌈N/2⌉), take top-k of each half's mean score, count the common heads;
  repeat ``splits`` times (default 200, seeded). Reported as the mean and the 2.5–97.5
  percentiles (numpy's default linear interpolation). It is the overlap two settings that
  measure *the same thing* would reach with half the items each.
- **Overlap at half size** of settings A and B (the seed's Table 20): over the same
  ``splits`` half-splits, ``|top-k(A on one half) ∩ top-k(B on the other half)|`` —
  mean and 2.5–97.5 percentiles. When A and B score the same items (same item ids, e.g.
  two attention sources of one corpus × query) one permutation splits both, A takes the
  first half and B the second, exactly as the ceiling compares a setting's two halves;
  otherwise each setting's items are split by its own permutation. Overlap and ceiling are
  thus taken at the same number of items and between independent halves, so two
  settings that measure the same thing have an expected fraction of 1. (The overlap on
  all N items is not comparable with an N/2-item ceiling: it is biased upwards.)
- **Geometric-mean ceiling** of a pair: ``sqrt(ceiling_A · ceiling_B)`` (means), and
  ``fraction = mean half-size overlap / geometric-mean ceiling`` (the seed's Table 20).
- **Overlap curve**: the overlap of two flat top-k's for k = 1 … K.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vheads._headset import HeadSet


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


def _per_item(per_item: np.ndarray, what: str = "per-item scores") -> np.ndarray:
    x = np.asarray(per_item, dtype=np.float64)
    if x.ndim != 3:
        raise ValueError(f"{what} must be [N, L, H], got shape {x.shape}")
    if x.shape[0] < 2:
        raise ValueError(f"a split-half ceiling needs at least 2 items, got {x.shape[0]}")
    return x


def _summary(vals: np.ndarray, k: int) -> Ceiling:
    return Ceiling(float(vals.mean()), float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5)), vals, k)


def split_half_ceiling(per_item: np.ndarray, k: int, splits: int = 200, seed: int = 0, per_layer: bool = False,
                       attention_layers: Sequence[int] | None = None) -> Ceiling:
    """Noise ceiling from random half-splits of the items of ``per_item [N, L, H]``:
    per split (``perm = rng.permutation(N)``), ``|top-k(mean of perm[:N//2]) ∩
    top-k(mean of perm[N//2:])|`` (on a hybrid model only the heads of
    ``attention_layers`` are ranked, as in discovery)."""
    return split_half_overlap(per_item, per_item, k, splits, seed, per_layer, same_items=True,
                              attention_layers=attention_layers)


def split_half_overlap(per_a: np.ndarray, per_b: np.ndarray, k: int, splits: int = 200, seed: int = 0,
                       per_layer: bool = False, same_items: bool = False,
                       attention_layers: Sequence[int] | None = None) -> Ceiling:
    """Overlap of settings A and B at half size, over ``splits`` seeded half-splits.

    Per split: ``|top-k(mean of A over half 1) ∩ top-k(mean of B over half 2)|``. With
    ``same_items`` (A and B score the same items in the same order) one permutation
    ``perm = rng.permutation(N)`` gives half 1 = ``perm[:N//2]`` of A and half 2 =
    ``perm[N//2:]`` of B; otherwise A's halves come from ``rng.permutation(N_A)`` and B's
    from a second ``rng.permutation(N_B)`` drawn right after it. With A = B and
    ``same_items`` this is the split-half ceiling itself, split for split.
    """
    xa, xb = _per_item(per_a, "per-item scores of A"), _per_item(per_b, "per-item scores of B")
    if xa.shape[1:] != xb.shape[1:]:
        raise ValueError(f"per-item scores of different models: {xa.shape[1:]} vs {xb.shape[1:]}")
    if same_items and len(xa) != len(xb):
        raise ValueError(f"same_items needs the same number of items, got {len(xa)} and {len(xb)}")
    if splits < 1:
        raise ValueError(f"splits must be at least 1, got {splits}")
    rng = np.random.default_rng(seed)
    na, nb = len(xa), len(xb)
    vals = np.empty(splits, dtype=int)
    for i in range(splits):
        pa = rng.permutation(na)
        pb = pa if same_items else rng.permutation(nb)
        ma = _topk_mask(xa[pa[: na // 2]].mean(0), k, per_layer, attention_layers)
        mb = _topk_mask(xb[pb[nb // 2:]].mean(0), k, per_layer, attention_layers)
        vals[i] = int((ma & mb).sum())
    return _summary(vals, k)


def geometric_ceiling(a: Ceiling, b: Ceiling) -> float:
    """``sqrt(mean ceiling A · mean ceiling B)``."""
    return float(np.sqrt(a.mean * b.mean))


def overlap_fraction(overlap: float, a: Ceiling, b: Ceiling) -> float:
    """Overlap as a fraction of the pair's geometric-mean ceiling (NaN when that is 0).

    Pass the half-size overlap (:func:`split_half_overlap`'s mean): the ceilings are
    taken at half size, so an overlap on all items would be biased upwards."""
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
    fig, ax = plt.subplots(figsize=(max(4.2, 1.0 + 0.55 * n), max(2.6, 0.8 + 0.5 * n)))  # room for the title at n = 2
    im = ax.imshow(shown, cmap="viridis", vmin=0, vmax=k or max(1.0, m.max()))
    ax.set_xticks(range(n), labels, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(n), labels, fontsize=8)
    ax.set_xlabel("setting", fontsize=8)
    ax.set_ylabel("setting", fontsize=8)
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
    pairs: list["PairOverlap"]  # each unordered pair once, in input order
    curves: dict[str, np.ndarray]  # "a|b" -> overlap for k = 1 … len

    def to_records(self) -> list[dict]:
        """One flat row per pair: overlap on all items, at half size (mean and 2.5–97.5
        percentiles over the splits), each setting's ceiling, and the fraction of their
        geometric mean (what ``vheads overlap`` prints)."""
        ceiling = dict(zip(self.ids, self.ceilings))
        return [{"a": p.a, "b": p.b, "k": p.k, "all": p.all_items, "half": p.half.mean, "half_lo": p.half.lo,
                 "half_hi": p.half.hi, "ceil_a": ceiling[p.a].mean, "ceil_b": ceiling[p.b].mean,
                 "fraction": float(p.fraction)} for p in self.pairs]

    def to_frame(self):
        """:meth:`to_records` as a pandas DataFrame (where pandas is installed)."""
        from vheads._table import frame

        return frame(self.to_records())

    def __repr__(self) -> str:
        from vheads._table import text_table

        rows = self.to_records() or [{"setting": i, "ceiling": c.mean, "lo": c.lo, "hi": c.hi} for i, c in zip(self.ids, self.ceilings)]
        return text_table(rows, f"OverlapReport: top-{self.k} ({self.mode}) of {len(self.ids)} head-sets; "
                                "to_records(), to_frame(), to_dict() for the rest")

    def to_dict(self) -> dict:
        return {
            "settings": self.ids, "k": self.k, "mode": self.mode,
            "overlap_all_items": self.matrix.tolist(),
            "ceilings": {i: c.to_dict() for i, c in zip(self.ids, self.ceilings)},
            "pairs": [p.to_dict() for p in self.pairs],
            "curves": {key: v.tolist() for key, v in self.curves.items()},
        }


@dataclass
class PairOverlap:
    """Two settings' overlap at half size against their geometric-mean ceiling (Table 20)."""

    a: str
    b: str
    k: int
    all_items: int  # |top-k(A) ∩ top-k(B)| on all items (not comparable with the ceilings)
    half: Ceiling  # overlap at half size over the splits
    same_items: bool
    geo_ceiling: float
    fraction: float  # half.mean / geo_ceiling

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "k": self.k, "overlap_all_items": self.all_items,
                "overlap_half": {"mean": self.half.mean, "p2.5": self.half.lo, "p97.5": self.half.hi,
                                 "splits": int(len(self.half.values))},
                "same_items": self.same_items, "geometric_ceiling": round(self.geo_ceiling, 6),
                "fraction_of_ceiling": None if not np.isfinite(self.fraction) else round(float(self.fraction), 6)}


def pair_overlap(a: str, b: str, per_a: np.ndarray, per_b: np.ndarray, ceil_a: Ceiling, ceil_b: Ceiling,
                 all_items: int, k: int, splits: int, seed: int, per_layer: bool, same_items: bool,
                 attention_layers: Sequence[int] | None = None) -> PairOverlap:
    """:class:`PairOverlap` of settings a and b from their per-item scores and ceilings."""
    half = split_half_overlap(per_a, per_b, k, splits, seed, per_layer, same_items, attention_layers)
    return PairOverlap(a, b, k, int(all_items), half, same_items, geometric_ceiling(ceil_a, ceil_b),
                       overlap_fraction(half.mean, ceil_a, ceil_b))


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
    # a score point's half-splits rank its per-item shares by top-k (per layer or flat), whatever its own rule
    ks = {(r.k, r.mode if r.mode in ("flat", "per-layer") else "flat") for r in records}
    if len(ks) > 1:
        raise ValueError(f"head-sets differ in size or selection mode {sorted(ks)}; overlap compares head-sets of one k and mode")
    k, mode = next(iter(ks))
    ids = [r.setting.id for r in records]
    if len(set(ids)) != len(ids):
        raise ValueError(f"the same setting is given twice: {ids}")
    matrix = overlap_matrix([r.headset for r in records])
    per_layer = mode == "per-layer"
    layers = records[0].headset.attention_layers  # the layers with heads (all but a hybrid model's linear ones)
    per = [load_per_item(r, with_ids=True) for r in records]
    ceilings = [split_half_ceiling(x, k, splits, seed, per_layer=per_layer, attention_layers=layers)
                for x, _ in tqdm(per, desc="ceilings", disable=not progress)]
    n = len(records)
    pairs = []
    for i in range(n):
        for j in range(i + 1, n):
            (xa, ida), (xb, idb) = per[i], per[j]
            same = ida is not None and ida == idb
            pairs.append(pair_overlap(ids[i], ids[j], xa, xb, ceilings[i], ceilings[j], int(matrix[i, j]), k,
                                      splits, seed, per_layer, same, attention_layers=layers))
    kmax = curve_k or min(len(layers) * records[0].scores.shape[1], 4 * k)
    curves = {f"{ids[i]}|{ids[j]}": overlap_curve(records[i].scores, records[j].scores, range(1, kmax + 1), layers)
              for i in range(n) for j in range(i + 1, n)}
    return OverlapReport(ids, k, mode, matrix, ceilings, pairs, curves)
