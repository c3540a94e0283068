"""What a control returns and the checks every draw makes: :class:`ControlDraws` (the head-sets,
their seed, how they were chosen) and :class:`Fallback` (a layer where S left too few other heads
for a layer-local draw). The controls themselves: :mod:`vheads.evaluation._controls`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from vheads._headset import HeadSet

MAX_R = 100_000  # more draws than this is a typo, not a study (each draw is a forward per item)


@dataclass(frozen=True)
class Fallback:
    """A layer where S left too few other heads for a layer-local draw.

    In that layer every draw takes all ``available`` non-S heads and the other
    ``needed - available`` heads from the nearest layers that still had free heads
    (``borrowed_from``, over all draws). Such a draw no longer has S's per-layer counts
    in these layers; its total size is still |S|.
    """

    layer: int
    needed: int  # heads S has in this layer
    available: int  # heads of this layer outside S
    borrowed_from: tuple[int, ...]

    def __str__(self) -> str:
        return (
            f"layer {self.layer}: S has {self.needed} heads there but only {self.available} "
            f"other heads exist; each draw took all {self.available} and "
            f"{self.needed - self.available} from the nearest layers with free heads "
            f"{list(self.borrowed_from)}"
        )


@dataclass(frozen=True)
class ControlDraws:
    """The control head-sets of one control for one head-set S.

    ``seed`` is the seed the draws came from (``None`` for a deterministic control).
    ``fallbacks`` lists layers where the draw could not stay layer-local; ``notes`` says
    anything else a reader of the results should know (sizes, overlaps with S).
    """

    control: str
    seed: int | None
    sets: tuple[HeadSet, ...]
    fallbacks: tuple[Fallback, ...] = ()
    notes: tuple[str, ...] = ()
    #: how the sets were chosen: "exact" (the whole pool), "sampled" (distinct draws, no
    #: repeats; :func:`draw_controls`) or "independent" (R draws, repeats possible)
    mode: str = "independent"
    pool: int | None = None  # distinct head-sets the control can draw for S, where known

    def __len__(self) -> int:
        return len(self.sets)

    def __iter__(self) -> Iterator[HeadSet]:
        return iter(self.sets)

    def __getitem__(self, i: int) -> HeadSet:
        return self.sets[i]


def _check_draws(R: int, seed: int) -> np.random.Generator:
    if isinstance(R, bool) or not isinstance(R, (int, np.integer)) or not 1 <= R <= MAX_R:
        raise ValueError(f"R (number of control draws) must be an integer in 1..{MAX_R}, got {R!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(
            f"seed must be a non-negative integer so the draws can be reproduced, got {seed!r}"
        )
    return np.random.default_rng(int(seed))


def _check_nonempty(S: HeadSet, control: str) -> None:
    if len(S) == 0:
        raise ValueError(f"{control} controls of an empty head-set: there is nothing to match")


def _check_disjoint_room(S: HeadSet, control: str) -> None:
    total = int(S.head_mask().sum())
    if total - len(S) < len(S):
        raise ValueError(
            f"{control} controls must be disjoint from S, but S has {len(S)} of the model's "
            f"{total} heads and only {total - len(S)} lie outside it; use a smaller head-set "
            f"or the random-n control"
        )


def _check_head_array(values: np.ndarray, S: HeadSet, what: str) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    if values.shape != (S.n_layers, S.n_heads):
        raise ValueError(
            f"{what} must have shape [L, H] = [{S.n_layers}, {S.n_heads}] like the head-set, "
            f"got {values.shape}"
        )
    if not np.all(np.isfinite(values)):
        raise ValueError(f"{what} must be finite")
    return values


def _collect_fallbacks(S: HeadSet, borrowed: dict[int, set[int]]) -> tuple[Fallback, ...]:
    counts = S.per_layer_counts()
    return tuple(
        Fallback(layer, int(counts[layer]), S.n_heads - int(counts[layer]), tuple(sorted(src)))
        for layer, src in sorted(borrowed.items())
    )
