"""Head-sets: which (layer, head) pairs of a model's language model a test acts on.

A :class:`HeadSet` is a frozen set of query heads ``(layer, head)``, kept sorted by
``(layer, head)`` so that iteration, printing and files are reproducible. It remembers
the shape of the model it belongs to (``n_layers`` × ``n_heads``), so a head-set made
for one model cannot silently be used on another, and set algebra between head-sets of
different models is an error. On a hybrid model (Qwen3.5: Gated DeltaNet layers between
softmax-attention layers) only the softmax layers have heads: a head-set then also
remembers those ``attention_layers``, refuses a head in any other layer, and every
control drawn for it stays among them.

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

from vheads._layers import check_attention_layers

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
    #: the layers that have heads; every layer unless the model is hybrid
    attention_layers: tuple[int, ...]

    def __init__(self, heads: Iterable[Iterable[int]], n_layers: int, n_heads: int,
                 attention_layers: Iterable[int] | None = None) -> None:
        _check_shape(n_layers, n_heads)
        layers = tuple(range(n_layers)) if attention_layers is None else tuple(sorted({int(x) for x in attention_layers}))
        if not layers or not all(0 <= x < n_layers for x in layers):
            raise ValueError(f"attention_layers {list(layers)} must be a non-empty subset of 0..{n_layers - 1}")
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
        check_attention_layers((layer for layer, _ in pairs), layers, n_layers)
        unique = sorted(set(pairs))
        if len(unique) != len(pairs):
            dupes = sorted(p for p, n in Counter(pairs).items() if n > 1)
            raise ValueError(f"heads listed more than once: {dupes}; a head-set lists each head once")
        object.__setattr__(self, "heads", tuple(unique))
        object.__setattr__(self, "n_layers", int(n_layers))
        object.__setattr__(self, "n_heads", int(n_heads))
        object.__setattr__(self, "attention_layers", layers)

    def like(self, heads: Iterable[Iterable[int]]) -> HeadSet:
        """A head-set of ``heads`` on the same model as this one (shape and attention layers)."""
        return HeadSet(heads, self.n_layers, self.n_heads, self.attention_layers)

    @property
    def hybrid(self) -> bool:
        """True when some layers of the model have no heads (linear-attention layers)."""
        return len(self.attention_layers) < self.n_layers

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
    def from_flat(cls, indices: Iterable[int], n_layers: int, n_heads: int,
                  attention_layers: Iterable[int] | None = None) -> HeadSet:
        """Heads given by flat index ``layer · n_heads + head`` (row-major order of ``[L, H]``)."""
        return cls((divmod(int(i), n_heads) for i in indices), n_layers, n_heads, attention_layers)

    @classmethod
    def from_scores(cls, scores: np.ndarray, k: int, per_layer: bool = False,
                    attention_layers: Iterable[int] | None = None) -> HeadSet:
        """The k heads with the highest score ``s[l, h]``; scores has shape ``[L, H]``.

        ``per_layer=False``: flat top-k over all heads. ``per_layer=True``: the top k
        heads of every layer (k per layer in all). With ``attention_layers`` (a hybrid
        model) only the heads of those layers are ranked; the rows of the other layers are
        ignored (they have no heads, so no score).

        Ties are broken deterministically by ``(layer, head)`` order: among equal scores the
        head with the smaller layer, then the smaller head index, is taken first. NaN or
        infinite scores are an error (a missing score must not be ranked by accident).
        """
        scores = np.asarray(scores, dtype=float)  # [L, H]
        if scores.ndim != 2:
            raise ValueError(f"scores must be a 2-d array [L, H], got shape {scores.shape}")
        n_layers, n_heads = scores.shape
        layers = list(range(n_layers)) if attention_layers is None else sorted({int(x) for x in attention_layers})
        ranked = scores[layers]  # [L_attn, H]
        if not np.all(np.isfinite(ranked)):
            bad = [(layers[i], int(h)) for i, h in np.argwhere(~np.isfinite(ranked))[:5]]
            raise ValueError(f"scores must be finite; non-finite at heads {bad}")
        limit = n_heads if per_layer else len(layers) * n_heads
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= limit:
            where = "heads per layer" if per_layer else "heads in the model"
            raise ValueError(f"k must be an integer in 1..{limit} ({where}), got {k!r}")
        if per_layer:
            # argsort of -score is stable: equal scores keep head order.
            order = np.argsort(-ranked, axis=1, kind="stable")[:, :k]  # [L_attn, k]
            heads = [(layer, int(h)) for i, layer in enumerate(layers) for h in order[i]]
        else:
            flat = np.argsort(-ranked.ravel(), kind="stable")[:k]  # row-major = (layer, head)
            heads = [(layers[i // n_heads], int(i % n_heads)) for i in flat]
        return cls(heads, n_layers, n_heads, attention_layers)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HeadSet:
        """Inverse of :meth:`to_dict`."""
        missing = {"heads", "n_layers", "n_heads"} - set(data)
        if missing:
            raise ValueError(
                f"a head-set record needs keys heads, n_layers, n_heads; missing {sorted(missing)}"
            )
        return cls(data["heads"], data["n_layers"], data["n_heads"], data.get("attention_layers"))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record: ``{"n_layers", "n_heads", "heads": [[layer, head], ...]}``,
        plus ``"attention_layers"`` on a hybrid model."""
        d: dict[str, Any] = {"n_layers": self.n_layers, "n_heads": self.n_heads, "heads": [list(h) for h in self.heads]}
        if self.hybrid:
            d["attention_layers"] = list(self.attention_layers)
        return d

    # --- views --------------------------------------------------------------------------

    def per_layer_counts(self) -> np.ndarray:
        """Number of heads of the set in each layer, int array ``[L]``."""
        counts = np.zeros(self.n_layers, dtype=int)
        for layer, _ in self.heads:
            counts[layer] += 1
        return counts

    def head_mask(self) -> np.ndarray:
        """Boolean mask ``[L, H]`` of the heads the model has (all but linear-attention layers)."""
        mask = np.zeros((self.n_layers, self.n_heads), dtype=bool)
        mask[list(self.attention_layers)] = True
        return mask

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
        return self.like(set(self.heads) & set(other.heads))

    def __or__(self, other: HeadSet) -> HeadSet:
        other = self._same_model(other, "|")
        return self.like(set(self.heads) | set(other.heads))

    def __sub__(self, other: HeadSet) -> HeadSet:
        other = self._same_model(other, "-")
        return self.like(set(self.heads) - set(other.heads))

    def __repr__(self) -> str:
        shown = ", ".join(f"({l},{h})" for l, h in self.heads[:6])
        more = f", … {len(self) - 6} more" if len(self) > 6 else ""
        return f"HeadSet({len(self)} of {self.n_layers}×{self.n_heads}: {shown}{more})"
