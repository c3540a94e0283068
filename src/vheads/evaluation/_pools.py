"""Control pools: every head-set a random control can draw for S, and draws without repeats.

A rank p compares S with control head-sets; a head-set drawn twice is the same outcome
counted twice, which shrinks the p below what the pool allows (S above every member of a
pool of 105 has exact p = 1/106, not 1/(R+1) for R = 249 draws with copies). So
:func:`vheads.evaluation.draw_controls` compares S with *distinct* head-sets only:

- **exact**: when a control's pool (the distinct head-sets it can draw for S) holds at
  most ``EXACT_POOL_FACTOR · R`` members, all of them, each once, in a seeded random order
  (so the first m of them are a uniform sample without replacement, as the β sweep and
  the pointing suite take). The rank p over them is the exact permutation p.
- **sampled**: otherwise, independent draws with every repeat skipped, until R distinct
  head-sets (or ``MAX_ATTEMPTS_FACTOR · R + 100`` draws; fewer distinct then are noted):
  a uniform sample without replacement of a uniform control's pool.

This module enumerates the pools (:func:`control_pool`) and counts them where that is a
closed form (:func:`control_pool_size`); both mirror the draws of
:mod:`vheads.evaluation._controls` rule for rule, fallbacks included.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np

from vheads._headset import HeadSet

#: a pool of at most this many times R head-sets is tested whole (exact permutation p):
#: at most twice the forwards R asked for, for the exact p instead of a sampled one
EXACT_POOL_FACTOR = 2
#: a sampled control stops after this many times R (+ 100) draws short of R distinct ones
MAX_ATTEMPTS_FACTOR = 20


def _rings(n_layers: int, layer: int) -> Iterator[list[int]]:
    """Layers at distance 1, 2, ... from ``layer`` (lower one first)."""
    for d in range(1, n_layers):
        ring = [x for x in (layer - d, layer + d) if 0 <= x < n_layers]
        if ring:
            yield ring


def _free_in(free: np.ndarray, layers: list[int]) -> np.ndarray:
    """(layer, head) rows of the free heads of ``layers``, in (layer, head) order. [n, 2]"""
    return np.array([(x, h) for x in layers for h in np.flatnonzero(free[x])], dtype=int).reshape(-1, 2)


# --- pool sizes ------------------------------------------------------------------------


def _free_counts(S: HeadSet) -> np.ndarray:
    """Heads outside S per layer ``[L]`` (0 in a layer without heads)."""
    return (S.head_mask() & ~S.as_mask()).sum(axis=1)


def _whole_layer_count(S: HeadSet) -> int:
    """m = max(1, round(|S| / H)) whole layers, capped at the layers with heads."""
    return min(len(S.attention_layers), max(1, int(math.floor(len(S) / S.n_heads + 0.5))))


def control_pool_size(name: str, S: HeadSet, n: int | None = None) -> int | None:
    """How many distinct head-sets control ``name`` can draw for S, where that is a closed
    form: ``layer-matched`` ∏_l C(H − c_l, c_l) (c_l = S's heads in layer l; ``None`` when a
    layer falls back: :func:`control_pool` counts those), ``any-layer`` C(N − |S|, |S|)
    (N = the model's heads), ``whole-layers`` C(L, m), ``random-n`` C(N, n) (n = |S| unless
    given), ``sinks`` / ``text-heavy`` 1. ``None`` for ``attention-matched`` (a matching
    among nearest heads has no simple count)."""
    total = int(S.head_mask().sum())
    if name == "layer-matched":  # every head-set of S's pattern but S
        per_layer = S.head_mask().sum(axis=1)
        return math.prod(math.comb(int(f), int(c)) for c, f in zip(S.per_layer_counts(), per_layer) if c) - 1
    if name == "layer-matched-disjoint":
        counts, free = S.per_layer_counts(), _free_counts(S)
        if any(c > f for c, f in zip(counts, free)):
            return None
        return math.prod(math.comb(int(f), int(c)) for c, f in zip(counts, free) if c)
    if name == "any-layer":
        return math.comb(total, len(S)) - 1
    if name == "any-layer-disjoint":
        return math.comb(total - len(S), len(S))
    if name == "whole-layers":
        return math.comb(len(S.attention_layers), _whole_layer_count(S))
    if name == "random-n":
        return math.comb(total, n or len(S)) - (1 if (n or len(S)) == len(S) else 0)
    if name in ("sinks", "text-heavy"):
        return 1
    return None


# --- pools -----------------------------------------------------------------------------


def _borrowings(free: np.ndarray, layer: int, need: int) -> Iterator[list[tuple[int, int]]]:
    """Every way the layer-matched fallback can take ``need`` heads for ``layer`` from the
    nearest rings: whole rings while they hold no more than it still needs, then every
    choice of the rest in the first ring that holds more."""
    fixed: list[tuple[int, int]] = []
    for ring in _rings(free.shape[0], layer):
        pool = [(int(x), int(h)) for x, h in _free_in(free, ring)]
        if not pool:
            continue
        if need < len(pool):
            for combo in itertools.combinations(pool, need):
                yield fixed + list(combo)
            return
        fixed += pool
        need -= len(pool)
        if need == 0:
            break
    yield fixed


def _with_borrowing(free: np.ndarray, chosen: list, shorts: list[tuple[int, int]],
                    borrowed: dict[int, set[int]]) -> Iterator[list]:
    """Every completion of a layer-local choice by the fallback's borrowing, short layer by layer."""
    if not shorts:
        yield chosen
        return
    (layer, need), rest = shorts[0], shorts[1:]
    for extra in _borrowings(free, layer, need):
        f = free.copy()
        for x, h in extra:
            f[x, h] = False
            borrowed.setdefault(layer, set()).add(x)
        yield from _with_borrowing(f, chosen + extra, rest, borrowed)


def _layer_pattern_pool(S: HeadSet, limit: int) -> list[HeadSet] | None:
    """Every head-set with S's per-layer counts but S, overlap with S allowed (``layer-matched``)."""
    if control_pool_size("layer-matched", S) > limit:
        return None
    counts, mask = S.per_layer_counts(), S.head_mask()  # [L], [L, H]
    local = [list(itertools.combinations([(int(x), int(h)) for h in np.flatnonzero(mask[x])], int(counts[x])))
             for x in np.flatnonzero(counts)]
    return [hs for pick in itertools.product(*local) if (hs := S.like(h for combo in pick for h in combo)) != S]


def _layer_matched_pool(S: HeadSet, limit: int, borrowed: dict[int, set[int]]) -> list[HeadSet] | None:
    """Every distinct S-disjoint layer-matched head-set of S (the draw's choices, fallback included)."""
    size = control_pool_size("layer-matched-disjoint", S)
    if size is not None and size > limit:
        return None
    counts = S.per_layer_counts()  # [L]
    free0 = S.head_mask() & ~S.as_mask()  # [L, H]
    layers = [int(x) for x in np.flatnonzero(counts)]
    local = [list(itertools.combinations([(x, int(h)) for h in np.flatnonzero(free0[x])],
                                         min(int(counts[x]), int(free0[x].sum())))) for x in layers]
    shorts = [(x, int(counts[x] - free0[x].sum())) for x in layers if counts[x] > free0[x].sum()]
    seen: dict[HeadSet, None] = {}
    for pick in itertools.product(*local):
        free = free0.copy()
        chosen = [head for combo in pick for head in combo]
        for x, h in chosen:
            free[x, h] = False
        for heads in _with_borrowing(free, chosen, shorts, borrowed):
            seen.setdefault(S.like(heads), None)
            if len(seen) > limit:
                return None
    return list(seen)


def _combination_pool(S: HeadSet, pool: list, size: int, limit: int, as_heads) -> list[HeadSet] | None:
    """Every choice of ``size`` of ``pool``'s elements, each made a head-set by ``as_heads``."""
    if math.comb(len(pool), size) > limit:
        return None
    return [S.like(as_heads(combo)) for combo in itertools.combinations(pool, size)]


def control_pool(name: str, S: HeadSet, limit: int, n: int | None = None,
                 borrowed: dict[int, set[int]] | None = None, fixed: HeadSet | None = None) -> list[HeadSet] | None:
    """Every distinct head-set control ``name`` can draw for S, in a fixed order, when there
    are at most ``limit`` of them; ``None`` when there are more, or when the pool cannot be
    enumerated (``attention-matched``). ``n``: random-n's heads per draw (default |S|);
    ``borrowed``: filled with the layer-matched fallback's source layers; ``fixed``: the one
    head-set of a deterministic control (``sinks``, ``text-heavy``)."""
    if fixed is not None:
        return [fixed]
    heads = [(int(x), int(h)) for x, h in np.argwhere(S.head_mask())]  # every head of the model, (layer, head) order
    if name == "layer-matched":
        return _layer_pattern_pool(S, limit)
    if name == "layer-matched-disjoint":
        return _layer_matched_pool(S, limit, {} if borrowed is None else borrowed)
    if name == "any-layer":
        return _without_s(S, _combination_pool(S, heads, len(S), limit + 1, lambda c: c))
    if name == "any-layer-disjoint":
        return _combination_pool(S, [h for h in heads if h not in S], len(S), limit, lambda c: c)
    if name == "whole-layers":
        return _combination_pool(S, list(S.attention_layers), _whole_layer_count(S), limit,
                                 lambda c: [(x, h) for x in c for h in range(S.n_heads)])
    if name == "random-n":
        k = n or len(S)
        pool = _combination_pool(S, heads, k, limit + (k == len(S)), lambda c: c)
        return _without_s(S, pool) if k == len(S) else pool
    return None


def _without_s(S: HeadSet, pool: list[HeadSet] | None) -> list[HeadSet] | None:
    """``pool`` less S itself: S is never its own control."""
    return None if pool is None else [hs for hs in pool if hs != S]


def take_distinct(stream: Iterator[HeadSet], R: int) -> tuple[list[HeadSet], int]:
    """The first R distinct head-sets of ``stream`` (repeats skipped), within
    ``MAX_ATTEMPTS_FACTOR · R + 100`` draws; returns them and the draws it took."""
    seen: dict[HeadSet, None] = {}
    attempts = 0
    for hs in itertools.islice(stream, MAX_ATTEMPTS_FACTOR * R + 100):
        attempts += 1
        seen.setdefault(hs, None)
        if len(seen) == R:
            break
    return list(seen), attempts
