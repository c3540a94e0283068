"""A score point's score over items and its head-set: the across-item aggregate (``mean``,
``frequency``, ``hit-frequency``) and the selection (flat or per-layer top-k, the elbow of the
sorted scores, the entropy filter), with the sink rule's record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from vheads._errors import VheadsError
from vheads._headset import HeadSet
from vheads.discovery._point_statistics import PointStatistics
from vheads.discovery._score_point import ScorePoint
from vheads.discovery._selection import resolve_k


def elbow_count(scores: np.ndarray) -> int:
    """How many heads lie before the elbow of ``scores`` sorted descending.

    With ``v`` the sorted scores (n of them), ``x_i = i/(n-1)`` and ``y_i = (v_i - v_{n-1}) /
    (v_0 - v_{n-1})``, the elbow is ``i* = argmax_i (1 - x_i) - y_i`` (the point farthest
    below the chord from the first to the last point, first on ties); the heads ranked
    0 … i*-1 are kept. 0 when the curve has no elbow (all equal, or never below the chord).
    The scores are SORTED first: cutting the unsorted tensor is the bug of a published code.
    """
    v = np.sort(np.asarray(scores, dtype=float).ravel())[::-1]
    n = len(v)
    if n < 3 or v[0] == v[-1]:
        return 0
    x = np.arange(n) / (n - 1)
    y = (v - v[-1]) / (v[0] - v[-1])
    return int(np.argmax((1 - x) - y))


def _ranked(scores: np.ndarray, heads: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    return sorted(heads, key=lambda lh: (-scores[lh], lh))


def select_point(scores: np.ndarray, point: ScorePoint, k: int, entropy: np.ndarray | None = None,
                 attention_layers: tuple[int, ...] | None = None) -> list[tuple[int, int]]:
    """The heads ``point.select`` keeps of ``scores [L, H]`` (``entropy [L, H]`` for the
    ``entropy`` rule), by descending score, ties by (layer, head); may be empty."""
    L, H = scores.shape
    layers = range(L) if attention_layers is None else attention_layers
    heads = [(l, h) for l in layers for h in range(H)]
    if point.select in ("flat", "per-layer"):
        hs = HeadSet.from_scores(scores, k, per_layer=point.select == "per-layer", attention_layers=attention_layers)
        return _ranked(scores, list(hs))
    ranked = _ranked(scores, heads)
    above = ranked[: elbow_count(np.array([scores[lh] for lh in heads]))]
    if point.select == "elbow":
        return above
    return _ranked(scores, sorted(above, key=lambda lh: (entropy[lh], lh))[:k])


@dataclass
class PointResult:
    """A point's score ``scores [L, H]`` (the across-item aggregate), its head-set ``heads``
    (by descending score, ties by (layer, head)), the k its selection was asked for (scaled
    to the model when the point leaves it unset; unused by ``elbow``) and ``per_item [N, L, H]``,
    each item's share of the score: ``scores`` is its mean over items (``mean``: ``m_i``;
    ``frequency``: 1 where item i's own selection holds the head; ``hit-frequency``:
    ``N·|Q_i|·m_i / Σ_j |Q_j|``), so a half of the items ranks heads as the point would.
    ``sinks``: for a point that drops sinks, its rule and what it dropped (:func:`sink_record`)."""

    point: ScorePoint
    scores: np.ndarray
    heads: list[tuple[int, int]]
    k: int
    per_item: np.ndarray
    sinks: dict | None = None


def sink_record(point: ScorePoint, stats: PointStatistics) -> dict | None:
    """What a sink-aware head-set records of its sink rule (None for a sink-blind point): the
    layer and factor, and per item the threshold (factor × median image-token norm) and the
    image tokens dropped (0-based indices into the item's image tokens, in position order)."""
    if not point.drops_sinks or stats.sinks is None:
        return None
    items = [{"item": iid, **s} for iid, s in zip(stats.item_ids, stats.sinks)]
    return {"layer": point.sink_layer, "factor": point.sink_factor, "rule": "norm > factor x median image-token norm",
            "n_items_with_sinks": sum(bool(s["dropped"]) for s in stats.sinks),
            "n_dropped": sum(len(s["dropped"]) for s in stats.sinks), "items": items}


def aggregate(stats: PointStatistics, point: ScorePoint, n_heads: int, attention_layers: tuple[int, ...],
              n_layers: int) -> PointResult:
    """The point's score over items and its head-set (see :mod:`vheads.discovery._score_space`). A selection
    that keeps no head is a :class:`VheadsError`."""
    per_layer = point.select == "per-layer"
    cap = n_heads if per_layer else len(attention_layers) * n_heads
    k = resolve_k(len(attention_layers), n_heads, None if point.k is None else min(point.k, cap), "per-layer" if per_layer else "flat")
    layers = None if len(attention_layers) == n_layers else tuple(attention_layers)
    if point.across == "mean":
        per_item = stats.per_item
        scores = per_item.mean(0)
    elif point.across == "hit-frequency":
        w = stats.n_rows.astype(float)
        scores = np.tensordot(w, stats.per_item, axes=1) / w.sum()
        per_item = stats.per_item * (len(w) * w / w.sum())[:, None, None]
    else:
        per_item = np.zeros(stats.per_item.shape)
        for i, m in enumerate(stats.per_item):
            for lh in select_point(m, point, k, None if stats.entropy is None else stats.entropy[i], layers):
                per_item[(i, *lh)] = 1.0
        scores = per_item.mean(0)
    if point.across == "frequency":
        final = replace(point, select="flat")
        heads = select_point(scores, final, k, None, layers)
        heads = [lh for lh in heads if scores[lh] > 0]
    else:
        entropy = None if stats.entropy is None else stats.entropy.mean(0)
        heads = select_point(scores, point, k, entropy, layers)
    if not heads:
        raise VheadsError(f"selection {point.select!r} of score point {point.to_dict()} selects no head on these items "
                          "(no elbow in the sorted scores, or no item selects any head); choose select 'flat'")
    return PointResult(point, scores, heads, k, per_item, sink_record(point, stats))
