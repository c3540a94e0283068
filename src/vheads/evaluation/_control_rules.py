"""How each control chooses its head-sets: the endless random streams (layer-matched,
any-layer, their S-disjoint variants, attention-matched, whole-layers, random-n) and the
rule-based picks (sinks, text-heavy). The registry that names them, ``draw_controls`` and the
spec: :mod:`vheads.evaluation._controls`, whose docstring says what each control is.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np

from vheads._headset import HeadSet
from vheads.evaluation._control_draws import _check_disjoint_room, _check_head_array, _check_nonempty
from vheads.evaluation._pools import _free_in, _rings


# --- random controls -------------------------------------------------------------------


def _layer_matched_stream(S: HeadSet, rng: np.random.Generator, borrowed: dict[int, set[int]]) -> Iterator[HeadSet]:
    """Endless layer-matched draws (see :func:`vheads.evaluation._controls.layer_matched_controls`); ``borrowed`` collects
    each fallback layer's source layers."""
    _check_nonempty(S, "layer-matched")
    _check_disjoint_room(S, "layer-matched")
    counts = S.per_layer_counts()  # [L]

    def draws() -> Iterator[HeadSet]:
        while True:
            free = (S.head_mask() & ~S.as_mask())  # [L, H] heads a control may still take
            chosen: list[tuple[int, int]] = []
            short: dict[int, int] = {}
            for layer in np.flatnonzero(counts):
                pool = np.flatnonzero(free[layer])
                take = min(int(counts[layer]), len(pool))
                for h in rng.choice(pool, size=take, replace=False):
                    free[layer, h] = False
                    chosen.append((int(layer), int(h)))
                if take < counts[layer]:
                    short[int(layer)] = int(counts[layer]) - take
            for layer, need in short.items():
                for ring in _rings(S.n_layers, layer):
                    pool = _free_in(free, ring)  # [n, 2]
                    if len(pool) == 0:
                        continue
                    take = min(need, len(pool))
                    for x, h in pool[rng.choice(len(pool), size=take, replace=False)]:
                        free[x, h] = False
                        chosen.append((int(x), int(h)))
                        borrowed.setdefault(layer, set()).add(int(x))
                    need -= take
                    if need == 0:
                        break
            yield S.like(chosen)
    return draws()


def _check_pattern_room(S: HeadSet, control: str, pool: int) -> None:
    _check_nonempty(S, control)
    if pool < 2:
        raise ValueError(f"{control} controls of {S}: S is the only head-set of its pattern, so there is "
                         "nothing to compare it with; use a larger model or another control")


def _layer_pattern_stream(S: HeadSet, rng: np.random.Generator, borrowed=None) -> Iterator[HeadSet]:
    """Endless exchangeable layer-matched draws: in every layer l, S's count c_l of the
    layer's heads, uniformly without replacement from *all* its heads; a draw equal to S is
    skipped. The stream depends on S only through its per-layer counts and the skip, so two
    head-sets of one pattern drawn from one seed share their draws."""
    from vheads.evaluation._pools import control_pool_size

    _check_pattern_room(S, "layer-matched", control_pool_size("layer-matched", S) + 1)
    counts = S.per_layer_counts()  # [L]
    mask = S.head_mask()  # [L, H]
    layers = [(int(x), np.flatnonzero(mask[x])) for x in np.flatnonzero(counts)]

    def draws() -> Iterator[HeadSet]:
        while True:
            hs = S.like((x, int(h)) for x, heads in layers for h in rng.choice(heads, size=int(counts[x]), replace=False))
            if hs != S:
                yield hs
    return draws()


def _any_pattern_stream(S: HeadSet, rng: np.random.Generator, borrowed=None, common: bool = False) -> Iterator[HeadSet]:
    """Endless exchangeable any-layer draws: |S| heads uniformly without replacement from
    all the model's heads, a draw equal to S skipped (``common`` changes nothing: the
    stream depends on S only through |S| and the skip)."""
    from vheads.evaluation._pools import control_pool_size

    _check_pattern_room(S, "any-layer", control_pool_size("any-layer", S) + 1)
    pool = np.flatnonzero(S.head_mask().ravel())  # flat (layer, head) indices

    def draws() -> Iterator[HeadSet]:
        while True:
            hs = S.like(divmod(int(i), S.n_heads) for i in rng.choice(pool, size=len(S), replace=False))
            if hs != S:
                yield hs
    return draws()


def _any_layer_stream(S: HeadSet, rng: np.random.Generator, borrowed=None, common: bool = False) -> Iterator[HeadSet]:
    """Endless independent S-disjoint any-layer draws for S (``any-layer-disjoint``).

    ``common=False``: |S| heads uniformly without replacement from the heads outside S.
    ``common=True``: |S| heads uniformly from *all* the model's heads, the draws that touch
    S skipped. A uniform |S|-subset of all heads given that it misses S is a uniform
    |S|-subset of the heads outside S, so both streams draw from the same distribution;
    the common one depends on S only through the filter, so every head-set of one size
    drawn from one seed reads the same sequence (the study's settings then share most of
    their any-layer draws, and the probe memo runs each shared row once; docs/controls.md).
    """
    _check_nonempty(S, "any-layer")
    _check_disjoint_room(S, "any-layer")
    outside = S.head_mask() & ~S.as_mask()
    pool = np.flatnonzero((S.head_mask() if common else outside).ravel())  # flat (layer, head) indices
    free = outside.ravel()

    def draws() -> Iterator[HeadSet]:
        for _ in itertools.count():
            pick = rng.choice(pool, size=len(S), replace=False)
            if common and not free[pick].all():
                continue
            yield S.like(divmod(int(i), S.n_heads) for i in pick)

    return draws()


def _attention_matched_stream(S: HeadSet, rng: np.random.Generator, borrowed: dict[int, set[int]],
                              image_mass: np.ndarray, n_nearest: int = 3) -> Iterator[HeadSet]:
    """Endless attention-matched draws (see :func:`vheads.evaluation._controls.attention_matched_controls`)."""
    _check_nonempty(S, "attention-matched")
    _check_disjoint_room(S, "attention-matched")
    mass = _check_head_array(image_mass, S, "image_mass")  # [L, H]
    if isinstance(n_nearest, bool) or not isinstance(n_nearest, (int, np.integer)) or n_nearest < 1:
        raise ValueError(f"n_nearest must be an integer ≥ 1, got {n_nearest!r}")

    def pick_nearest(pool: np.ndarray, target: float) -> tuple[int, int]:
        # pool: [n, 2] (layer, head) rows in (layer, head) order; lexsort is stable.
        order = np.lexsort((np.arange(len(pool)), np.abs(mass[pool[:, 0], pool[:, 1]] - target)))
        x, h = pool[rng.choice(order[:n_nearest])]
        return int(x), int(h)

    s_by_layer: dict[int, list[int]] = {}
    for layer, h in S.heads:
        s_by_layer.setdefault(layer, []).append(h)

    def draws() -> Iterator[HeadSet]:
        while True:
            free = (S.head_mask() & ~S.as_mask())  # [L, H]
            chosen: list[tuple[int, int]] = []
            unmatched: list[tuple[int, int]] = []
            for layer, heads_of_s in s_by_layer.items():
                for h in rng.permutation(heads_of_s):
                    pool = _free_in(free, [layer])
                    if len(pool) == 0:
                        unmatched.append((layer, int(h)))
                        continue
                    x, g = pick_nearest(pool, mass[layer, h])
                    free[x, g] = False
                    chosen.append((x, g))
            for layer, h in unmatched:
                for ring in _rings(S.n_layers, layer):
                    pool = _free_in(free, ring)
                    if len(pool):
                        x, g = pick_nearest(pool, mass[layer, h])
                        free[x, g] = False
                        chosen.append((x, g))
                        borrowed.setdefault(layer, set()).add(x)
                        break
            yield S.like(chosen)
    return draws()


def _attention_matched_notes(S: HeadSet, sets, n_nearest: int = 3, **_) -> tuple[str, ...]:
    return (f"matched among the {n_nearest} nearest heads by image-attention mass",)


def _whole_layer_stream(S: HeadSet, rng: np.random.Generator, borrowed=None) -> Iterator[HeadSet]:
    _check_nonempty(S, "whole-layers")
    H, layers_with_heads = S.n_heads, np.array(S.attention_layers)
    L = len(layers_with_heads)  # whole layers are drawn among the layers that have heads
    m = min(L, max(1, int(math.floor(len(S) / H + 0.5))))
    return (S.like((int(x), h) for x in layers_with_heads[rng.choice(L, size=m, replace=False)] for h in range(H))
            for _ in itertools.count())


def _whole_layer_notes(S: HeadSet, sets, **_) -> tuple[str, ...]:
    L, m = len(S.attention_layers), len(sets[0]) // S.n_heads
    overlap = float(np.mean([len(c & S) for c in sets]))
    notes = [f"{m} whole layers × {S.n_heads} heads = {m * S.n_heads} heads for |S| = {len(S)}; "
             f"mean overlap with S {overlap:.1f} heads"]
    if math.comb(L, m) < len(sets):
        notes.append(f"only {math.comb(L, m)} distinct choices of {m} of {L} layers exist, so draws repeat")
    return tuple(notes)


def _random_n_stream(S: HeadSet, rng: np.random.Generator, borrowed=None, n: int | None = None) -> Iterator[HeadSet]:
    model = HeadSet((), S.n_layers, S.n_heads, S.attention_layers)
    pool = np.flatnonzero(model.head_mask().ravel())  # flat (layer, head) indices of existing heads
    n = n or len(S)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= len(pool):
        raise ValueError(f"n must be an integer in 1..{len(pool)} (the model's heads), got {n!r}")
    own = frozenset(S.heads) if n == len(S) else None  # S itself is never its own control
    draws = (model.like(divmod(int(i), S.n_heads) for i in rng.choice(pool, size=n, replace=False))
             for _ in itertools.count())
    return (d for d in draws if own is None or frozenset(d.heads) != own)


# --- rule-based controls ---------------------------------------------------------------


def _top_n(scores: np.ndarray, n: int, exclude: HeadSet | None, what: str) -> HeadSet:
    """The n heads with the highest ``scores`` [L, H] outside ``exclude``; ties by (layer, head)."""
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 2 or not np.all(np.isfinite(scores)):
        raise ValueError(f"{what} must be a finite 2-d array [L, H], got shape {scores.shape}")
    L, H = scores.shape
    # heads of linear-attention layers (hybrid models) have no score: never taken
    allowed = np.ones((L, H), dtype=bool) if exclude is None else exclude.head_mask() & ~exclude.as_mask()
    if exclude is not None:
        exclude.check_model(L, H)
    pool = np.flatnonzero(allowed.ravel())
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 1 <= n <= len(pool):
        raise ValueError(f"n must be an integer in 1..{len(pool)} (heads available), got {n!r}")
    order = pool[np.argsort(-scores.ravel()[pool], kind="stable")[:n]]
    model = exclude if exclude is not None else HeadSet((), L, H)
    return model.like(divmod(int(i), H) for i in order)


def sink_heads(sink_mass: np.ndarray, n: int, exclude: HeadSet | None = None) -> HeadSet:
    """The n heads with the most attention mass on sink tokens, ``sink_mass`` [L, H].

    Heads of ``exclude`` are skipped; ties go to the lower (layer, head).
    """
    return _top_n(sink_mass, n, exclude, "sink_mass")


def text_heavy_heads(image_mass: np.ndarray, n: int, exclude: HeadSet | None = None) -> HeadSet:
    """The n heads with the least image-attention mass, ``image_mass`` [L, H].

    Heads of ``exclude`` are skipped; ties go to the lower (layer, head).
    """
    return _top_n(-np.asarray(image_mass, dtype=float), n, exclude, "image_mass")
