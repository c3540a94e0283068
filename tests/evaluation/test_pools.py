"""Control pools and the rank p over distinct head-sets: the pool is what the draws can
reach, a small pool is compared whole (the exact permutation p), a large one is sampled
without repeats, and the p is valid under the null (P(p ≤ α) ≤ α)."""

import itertools
import math

import numpy as np
import pytest

from vheads.evaluation import HeadSet, control_pool_size, draw_controls, rank_p
from vheads.evaluation._controls import CONTROLS, layer_matched_controls, layer_matched_disjoint_controls
from vheads.evaluation._pools import EXACT_POOL_FACTOR, control_pool


def brute_force_pool(S: HeadSet, size: int, keep) -> set[HeadSet]:
    """Every ``size``-subset of the model's heads for which ``keep(subset)`` holds."""
    heads = [(l, h) for l in S.attention_layers for h in range(S.n_heads)]
    return {S.like(c) for c in itertools.combinations(heads, size) if keep(c)}


def layer_matched_brute(S: HeadSet, disjoint: bool = False) -> set[HeadSet]:
    """Every head-set of S's per-layer counts but S (``disjoint``: sharing no head with S)."""
    counts = S.per_layer_counts().tolist()
    return brute_force_pool(S, len(S), lambda c: (not set(c) & set(S) if disjoint else set(c) != set(S)) and np.bincount(
        [l for l, _ in c], minlength=S.n_layers).tolist() == counts)


@pytest.mark.parametrize("heads, n_layers, n_heads", [
    ([(0, 0), (0, 1), (1, 0)], 3, 5),          # C(3, 2) · C(4, 1) = 12
    ([(0, 2), (1, 1), (2, 3)], 3, 4),          # 3 · 3 · 3 = 27
    ([(1, 0), (1, 1), (1, 2)], 2, 5),          # 3 of layer 1: its 2 free heads and 1 of layer 0's 5
])
@pytest.mark.parametrize("disjoint", [False, True])
def test_layer_matched_pool_is_every_head_set_the_draws_can_reach(heads, n_layers, n_heads, disjoint):
    S = HeadSet(heads, n_layers, n_heads)
    name = "layer-matched-disjoint" if disjoint else "layer-matched"
    pool = control_pool(name, S, 10_000)
    assert len(pool) == len(set(pool)) and S not in pool
    if control_pool_size(name, S) is not None:  # no fallback: the brute-force pool
        assert set(pool) == layer_matched_brute(S, disjoint)
        assert len(pool) == control_pool_size(name, S)
    # whatever the rules, 1,000 independent draws reach the whole pool and nothing else
    draw = layer_matched_disjoint_controls if disjoint else layer_matched_controls
    assert set(draw(S, 1000, seed=1)) == set(pool)


def test_layer_matched_pool_with_a_fallback_mirrors_the_draws():
    S = HeadSet([(1, 0), (1, 1), (1, 2), (2, 0)], 4, 4)  # layer 1 keeps 1 free head, borrows 2 from layers 0 and 2
    pool = control_pool("layer-matched-disjoint", S, 10_000)
    drawn = set(layer_matched_disjoint_controls(S, 1500, seed=3))
    assert set(pool) == drawn
    assert all(len(c) == len(S) and not set(c) & set(S) for c in pool)
    assert control_pool("layer-matched-disjoint", S, len(pool) - 1) is None  # more than the limit: not enumerated


@pytest.mark.parametrize("name, keep_size", [
    ("any-layer", lambda S: (len(S), lambda c: set(c) != set(S))),
    ("any-layer-disjoint", lambda S: (len(S), lambda c: not set(c) & set(S))),
    ("random-n", lambda S: (len(S), lambda c: set(c) != set(S))),
])
def test_combination_pools_equal_brute_force(name, keep_size):
    S = HeadSet([(0, 1), (2, 3)], 3, 4)
    size, keep = keep_size(S)
    pool = control_pool(name, S, 10_000)
    assert set(pool) == brute_force_pool(S, size, keep)
    assert len(pool) == control_pool_size(name, S) == len(set(pool))


def test_whole_layer_pool_is_every_choice_of_layers():
    S = HeadSet([(0, 0), (1, 1), (2, 2), (3, 3), (0, 3)], 5, 4)  # round(5 / 4) = 1 layer
    pool = control_pool("whole-layers", S, 100)
    assert {tuple(sorted({l for l, _ in c})) for c in pool} == {(x,) for x in range(5)}
    assert control_pool_size("whole-layers", S) == math.comb(5, 1)


def test_a_small_pool_is_compared_whole_and_a_large_one_without_repeats():
    S = HeadSet([(0, 0), (0, 1), (1, 0)], 4, 8)  # layer-matched pool C(8, 2) · C(8, 1) − 1 = 223
    brute = layer_matched_brute(S)
    exact = draw_controls("layer-matched", S, 249, seed=0)
    assert exact.mode == "exact" and exact.pool == len(brute) and len(exact) == len(brute)
    assert set(exact) == brute
    assert len(draw_controls("layer-matched", S, len(brute) // EXACT_POOL_FACTOR + 1, seed=0)) == len(brute)  # 2R ≥ pool
    sampled = draw_controls("layer-matched", S, 50, seed=0)  # 2R < 223: 50 distinct draws
    assert sampled.mode == "sampled" and len(sampled) == 50 and len(set(sampled)) == 50
    assert set(sampled) <= set(exact)
    # the order of a whole pool is drawn from the seed: its first m are a sample, not the first m in (layer, head) order
    again = draw_controls("layer-matched", S, 249, seed=0)
    assert again.sets == exact.sets and draw_controls("layer-matched", S, 249, seed=1).sets != exact.sets


def test_attention_matched_draws_stop_short_when_the_pool_runs_dry():
    S = HeadSet([(0, 0), (1, 0)], 2, 4)
    mass = np.arange(8, dtype=float).reshape(2, 4)
    draws = draw_controls("attention-matched", S, 50, seed=0, image_mass=mass)  # 3 · 3 = 9 matchings at most
    assert draws.mode == "sampled" and len(draws) == len(set(draws)) == 9
    assert any("distinct head-sets in" in n for n in draws.notes)


def test_every_registered_control_returns_distinct_head_sets():
    S = HeadSet([(0, 0), (1, 2), (1, 3), (3, 1)], 4, 6)
    rng = np.random.default_rng(0)
    inputs = {"image_mass": rng.random((4, 6)), "sink_mass": rng.random((4, 6))}
    for name, control in CONTROLS.items():
        draws = draw_controls(name, S, 30 if control.random else 1, 0, **inputs)
        assert len(draws) == len(set(draws)) >= 1, name
        assert draws.mode in ("exact", "sampled"), name


# --- the rank p over the compared head-sets -----------------------------------------------


def test_rank_p_over_a_whole_pool_is_the_exact_permutation_p():
    S = HeadSet([(0, 0), (0, 1), (1, 0)], 3, 5)
    rng = np.random.default_rng(7)
    for _ in range(20):
        w = rng.integers(0, 4, size=(3, 5))  # small integers: ties between head-sets happen
        T = lambda c: float(sum(w[l, h] for l, h in c))  # noqa: E731  a statistic of the heads alone
        draws = draw_controls("layer-matched", S, 100, seed=int(rng.integers(1 << 30)))
        assert draws.mode == "exact"
        # independent: the permutation p over S and every member of the brute-force pool, ties against S
        universe = layer_matched_brute(S)
        exact = (1 + sum(T(c) >= T(S) for c in universe)) / (len(universe) + 1)
        assert rank_p(T(S), [T(c) for c in draws]).p == pytest.approx(exact, abs=1e-15)


def _null_rate(p_values, alpha):
    return float(np.mean(np.asarray(p_values) <= alpha))


def _upper(alpha, reps):
    return alpha + 3 * math.sqrt(alpha * (1 - alpha) / reps)


@pytest.mark.parametrize("alpha", [0.01, 0.05])
@pytest.mark.parametrize("ties", [False, True])
def test_exact_rank_p_is_valid_under_the_null(alpha, ties):
    # S exchangeable with the members of its pool (223 layer-matched head-sets): its value is one more draw of theirs
    S = HeadSet([(0, 0), (0, 1), (1, 0)], 4, 8)
    draws = draw_controls("layer-matched", S, 249, seed=0)
    n, reps = len(draws), 20_000
    rng = np.random.default_rng(11)
    values = rng.integers(0, 8, size=(reps, n + 1)) if ties else rng.random((reps, n + 1))  # [reps, S + pool]
    ps = [rank_p(v[0], v[1:]).p for v in values]
    assert _null_rate(ps, alpha) <= _upper(alpha, reps)
    if not ties:  # the p's floor is the pool's, 1/(223 + 1), not 1/(R + 1)
        assert min(ps) == pytest.approx(1 / (len(layer_matched_brute(S)) + 1))


@pytest.mark.parametrize("alpha", [0.01, 0.05])
def test_sampled_rank_p_is_valid_under_the_null(alpha):
    S = HeadSet([(0, 0), (1, 0), (2, 0)], 4, 8)  # layer-matched pool 8³ − 1 = 511 > 2 · 100: sampled
    rng = np.random.default_rng(5)
    ps = []
    for seed in range(10):  # 10 samples of the pool, 1,000 null values of S and the pool each
        draws = draw_controls("layer-matched", S, 100, seed=seed)
        assert draws.mode == "sampled" and len(draws) == 100
        pool = {c: i for i, c in enumerate(control_pool("layer-matched", S, 1000))}
        idx = [pool[c] for c in draws]
        for _ in range(1000):
            value = rng.random(len(pool))  # iid over the pool's head-sets
            ps.append(rank_p(rng.random(), value[idx]).p)
    assert _null_rate(ps, alpha) <= _upper(alpha, len(ps))


def test_counting_copies_of_a_small_pool_is_not_valid():
    """The check above can fail: R = 249 independent draws from a pool of 10 (copies counted)
    give p = 1/250 whenever S beats the pool, which happens with probability 1/11."""
    S = HeadSet([(0, 0), (0, 1), (0, 2)], 4, 8)  # C(5, 3) = 10 S-disjoint layer-matched head-sets
    copies = layer_matched_disjoint_controls(S, 249, seed=0)
    distinct = draw_controls("layer-matched-disjoint", S, 249, seed=0)
    assert len(set(copies)) == len(distinct) == 10
    rng = np.random.default_rng(2)
    reps = 4000
    old, new = [], []
    for _ in range(reps):
        value = dict(zip(distinct, rng.random(10)))
        s = rng.random()
        old.append(rank_p(s, [value[c] for c in copies]).p)
        new.append(rank_p(s, [value[c] for c in distinct]).p)
    assert _null_rate(old, 0.05) > _upper(0.05, reps)  # ≈ 1/11
    assert _null_rate(new, 0.05) == 0  # the exact p cannot fall below 1/11
