"""Head-sets: which (layer, head) pairs of a model's language model a test acts on.

A :class:`HeadSet` is a frozen set of query heads ``(layer, head)``, kept sorted by
``(layer, head)`` so that iteration, printing and files are reproducible. It remembers
the shape of the model it belongs to (``n_layers`` × ``n_heads``), so a head-set made
for one model cannot silently be used on another, and set algebra between head-sets of
different models is an error.

Head-sets are made from a discovery score ``s[l, h]`` by :meth:`HeadSet.from_scores`
(flat top-k or top-k per layer); :func:`default_k` scales the seed study's 100 of
1,152 heads to another model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

Head = tuple[int, int]  # (layer, head), both 0-based

# The seed study selects the top 100 of 1,152 heads (36 layers × 32 heads, Qwen3-VL-8B).
SEED_K = 100
SEED_N_HEADS_TOTAL = 1152


def default_k(n_layers: int, n_heads: int) -> int:
    """The seed's head-set size scaled to a model: ``k = max(1, round(100 · L·H / 1152))``.

    100 of 1,152 heads is about 8.7%; rounding is half-up (so 1,152 heads give 100 and a
    model of 4 layers × 4 heads gives 1).
    """
    _check_shape(n_layers, n_heads)
    return max(1, int(np.floor(SEED_K * n_layers * n_heads / SEED_N_HEADS_TOTAL + 0.5)))


def _check_shape(n_layers: int, n_heads: int) -> None:
    for name, value in (("n_layers", n_layers), ("n_heads", n_heads)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True, init=False)
class HeadSet:
    """A frozen set of heads ``(layer, head)`` of a model with ``n_layers`` × ``n_heads``.

    ``heads`` is sorted by ``(layer, head)`` whatever order it was given in. A head out of
    range or listed twice is a ``ValueError``. Supports ``len``, ``in``, iteration,
    ``==`` / hashing, and ``&``, ``|``, ``-`` with another head-set of the same model.
    """

    heads: tuple[Head, ...]
    n_layers: int
    n_heads: int

    def __init__(self, heads: Iterable[Iterable[int]], n_layers: int, n_heads: int) -> None:
        _check_shape(n_layers, n_heads)
        pairs: list[Head] = []
        for pair in heads:
            pair = tuple(pair)
            if len(pair) != 2:
                raise ValueError(f"a head is a (layer, head) pair, got {pair!r}")
            layer, head = pair
            if not all(
                isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in pair
            ):
                raise ValueError(f"head {pair!r}: layer and head must be integers")
            layer, head = int(layer), int(head)
            if not (0 <= layer < n_layers and 0 <= head < n_heads):
                raise ValueError(
                    f"head ({layer}, {head}) is out of range for a model with {n_layers} "
                    f"layers × {n_heads} heads (layer in 0..{n_layers - 1}, head in "
                    f"0..{n_heads - 1}); is this head-set for another model?"
                )
            pairs.append((layer, head))
        unique = sorted(set(pairs))
        if len(unique) != len(pairs):
            dupes = sorted(p for p, n in Counter(pairs).items() if n > 1)
            raise ValueError(f"heads listed more than once: {dupes}; a head-set lists each head once")
        object.__setattr__(self, "heads", tuple(unique))
        object.__setattr__(self, "n_layers", int(n_layers))
        object.__setattr__(self, "n_heads", int(n_heads))

    # --- construction -------------------------------------------------------------------

    @classmethod
    def from_mask(cls, mask: np.ndarray) -> HeadSet:
        """The heads where a boolean ``mask`` of shape ``[L, H]`` is true."""
        mask = np.asarray(mask)
        if mask.ndim != 2 or mask.dtype != bool:
            raise ValueError(f"mask must be a bool array [L, H], got {mask.dtype} {mask.shape}")
        layers, heads = np.nonzero(mask)
        return cls(zip(layers.tolist(), heads.tolist()), *mask.shape)

    @classmethod
    def from_flat(cls, indices: Iterable[int], n_layers: int, n_heads: int) -> HeadSet:
        """Heads given by flat index ``layer · n_heads + head`` (row-major order of ``[L, H]``)."""
        return cls((divmod(int(i), n_heads) for i in indices), n_layers, n_heads)

    @classmethod
    def from_scores(cls, scores: np.ndarray, k: int, per_layer: bool = False) -> HeadSet:
        """The k heads with the highest score ``s[l, h]``; scores has shape ``[L, H]``.

        ``per_layer=False``: flat top-k over all L·H heads. ``per_layer=True``: the top k
        heads of every layer (L·k heads in all).

        Ties are broken deterministically by ``(layer, head)`` order: among equal scores the
        head with the smaller layer, then the smaller head index, is taken first. NaN or
        infinite scores are an error (a missing score must not be ranked by accident).
        """
        scores = np.asarray(scores, dtype=float)  # [L, H]
        if scores.ndim != 2:
            raise ValueError(f"scores must be a 2-d array [L, H], got shape {scores.shape}")
        if not np.all(np.isfinite(scores)):
            bad = [tuple(map(int, ix)) for ix in np.argwhere(~np.isfinite(scores))[:5]]
            raise ValueError(f"scores must be finite; non-finite at heads {bad}")
        n_layers, n_heads = scores.shape
        limit = n_heads if per_layer else n_layers * n_heads
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= limit:
            where = "heads per layer" if per_layer else "heads in the model"
            raise ValueError(f"k must be an integer in 1..{limit} ({where}), got {k!r}")
        if per_layer:
            # argsort of -score is stable: equal scores keep head order.
            order = np.argsort(-scores, axis=1, kind="stable")[:, :k]  # [L, k]
            heads = [(layer, int(h)) for layer in range(n_layers) for h in order[layer]]
        else:
            flat = np.argsort(-scores.ravel(), kind="stable")[:k]  # row-major = (layer, head)
            return cls.from_flat(flat, n_layers, n_heads)
        return cls(heads, n_layers, n_heads)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HeadSet:
        """Inverse of :meth:`to_dict`."""
        missing = {"heads", "n_layers", "n_heads"} - set(data)
        if missing:
            raise ValueError(
                f"a head-set record needs keys heads, n_layers, n_heads; missing {sorted(missing)}"
            )
        return cls(data["heads"], data["n_layers"], data["n_heads"])

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record: ``{"n_layers", "n_heads", "heads": [[layer, head], ...]}``."""
        return {"n_layers": self.n_layers, "n_heads": self.n_heads, "heads": [list(h) for h in self.heads]}

    # --- views --------------------------------------------------------------------------

    def per_layer_counts(self) -> np.ndarray:
        """Number of heads of the set in each layer, int array ``[L]``."""
        counts = np.zeros(self.n_layers, dtype=int)
        for layer, _ in self.heads:
            counts[layer] += 1
        return counts

    def as_mask(self) -> np.ndarray:
        """Boolean membership mask ``[L, H]``."""
        mask = np.zeros((self.n_layers, self.n_heads), dtype=bool)
        for layer, head in self.heads:
            mask[layer, head] = True
        return mask

    def check_model(self, n_layers: int, n_heads: int) -> None:
        """Raise ``ValueError`` unless this head-set was made for an ``n_layers`` × ``n_heads`` model."""
        if (self.n_layers, self.n_heads) != (n_layers, n_heads):
            raise ValueError(
                f"head-set is for a model with {self.n_layers} layers × {self.n_heads} heads, "
                f"but this model has {n_layers} × {n_heads}; discover heads on this model instead"
            )

    # --- set protocol -------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.heads)

    def __iter__(self) -> Iterator[Head]:
        return iter(self.heads)

    def __contains__(self, head: object) -> bool:
        return head in self.heads

    def _same_model(self, other: object, op: str) -> HeadSet:
        if not isinstance(other, HeadSet):
            raise TypeError(f"{op} needs two HeadSets, got {type(other).__name__}")
        other.check_model(self.n_layers, self.n_heads)
        return other

    def __and__(self, other: HeadSet) -> HeadSet:
        other = self._same_model(other, "&")
        return HeadSet(set(self.heads) & set(other.heads), self.n_layers, self.n_heads)

    def __or__(self, other: HeadSet) -> HeadSet:
        other = self._same_model(other, "|")
        return HeadSet(set(self.heads) | set(other.heads), self.n_layers, self.n_heads)

    def __sub__(self, other: HeadSet) -> HeadSet:
        other = self._same_model(other, "-")
        return HeadSet(set(self.heads) - set(other.heads), self.n_layers, self.n_heads)

    def __repr__(self) -> str:
        shown = ", ".join(f"({l},{h})" for l, h in self.heads[:6])
        more = f", … {len(self) - 6} more" if len(self) > 6 else ""
        return f"HeadSet({len(self)} of {self.n_layers}×{self.n_heads}: {shown}{more})"
