"""Head-set selection from a discovery score: flat top-k or top-k per layer.

Built on :class:`vheads.evaluation.HeadSet` (defined in ``vheads._headset``, below discovery and evaluation); this module only fixes what ``k`` means when it
is not given, and the rank order a head-set file lists its heads in.
"""

from __future__ import annotations

import numpy as np

from vheads._errors import VheadsError
from vheads._headset import HeadSet, default_k

MODES = ("flat", "per-layer")


def resolve_k(n_layers: int, n_heads: int, k: int | None, mode: str = "flat") -> int:
    """``k`` when given; otherwise the seed's size scaled to the model.

    ``flat``: :func:`default_k` (100 of 1,152 heads → ~8.7% of all heads).
    ``per-layer``: the same share per layer, ``max(1, round(default_k / n_layers))`` heads of
    every layer.
    """
    if mode not in MODES:
        raise ValueError(f"unknown selection mode {mode!r}; choose one of: {', '.join(MODES)}")
    if k is not None:
        limit = n_heads if mode == "per-layer" else n_layers * n_heads
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= limit:
            where = "heads per layer" if mode == "per-layer" else "heads in the model"
            raise VheadsError(f"k must be an integer in 1..{limit} ({where} of this {n_layers}x{n_heads} model), got {k!r}")
        return k
    flat = default_k(n_layers, n_heads)
    return flat if mode == "flat" else max(1, int(np.floor(flat / n_layers + 0.5)))


def select_heads(scores: np.ndarray, k: int | None = None, mode: str = "flat", attention_layers: tuple[int, ...] | None = None) -> HeadSet:
    """Top-k heads of ``scores [L, H]`` (``mode`` ``flat`` or ``per-layer``; ties by (layer, head)).

    ``attention_layers`` (a hybrid model's softmax layers): only their heads are ranked, and
    the default k scales with their number of heads."""
    L, H = np.asarray(scores).shape
    n_attn = L if attention_layers is None else len(attention_layers)
    return HeadSet.from_scores(scores, resolve_k(n_attn, H, k, mode), per_layer=(mode == "per-layer"), attention_layers=attention_layers)


def ranked_heads(scores: np.ndarray, heads: HeadSet) -> list[tuple[int, int]]:
    """The heads of ``heads`` by descending score, ties by (layer, head)."""
    s = np.asarray(scores)
    return sorted(heads, key=lambda lh: (-s[lh], lh))
