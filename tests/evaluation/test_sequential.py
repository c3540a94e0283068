"""Sequential rank p (Besag & Clifford 1991): valid under the null, exact where the pool is
enumerated, independent of the batch size; Holm over a family keeps its error rate.

Every expected value here is computed independently: by hand from the definition, by
enumerating a pool (itertools), or bounded by a binomial quantile (scipy) of a seeded null
simulation in which S is one more draw of its controls' distribution.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats as sps

from vheads.evaluation._sequential import (
    batches_needed, holm_floor, run_sequential, sequential_decisions, sequential_rank_p, stop_position,
)


def binomial_upper(n: int, alpha: float, tail: float = 1e-4) -> int:
    """The count of n Bernoulli(alpha) trials exceeded with probability ``tail`` at most."""
    return int(sps.binom.ppf(1 - tail, n, alpha))


def test_p_is_h_over_the_position_of_the_h_th_control_reaching_s():
    t_s = 0.5
    controls = [0.1, 0.7, 0.2, 0.9, 0.5, 0.8, 0.3]  # reach T_S (ties count) at positions 2, 4, 5, 6
    r = sequential_rank_p(t_s, controls, h=3, R_max=100)
    assert (r.p, r.compared, r.n_at_least, r.stopped, r.ran) == (3 / 5, 5, 3, "h", 7)
    assert stop_position(t_s, controls, 4) == 6 and stop_position(t_s, controls, 5) is None


def test_without_h_reached_p_is_the_fixed_r_rank_p_over_r_max():
    t_s = 0.5
    controls = [0.1, 0.7, 0.2, 0.3, 0.4, 0.9]  # two reach T_S among the first R_max = 5: one
    r = sequential_rank_p(t_s, controls, h=3, R_max=5)
    assert (r.p, r.compared, r.stopped, r.floor) == ((1 + 1) / (5 + 1), 5, "R_max", 1 / 6)
    # fewer than R_max exist (a pool compared whole): the fixed-R p over all of them
    r = sequential_rank_p(t_s, controls[:4], h=3, R_max=50)
    assert (r.p, r.stopped, r.floor) == ((1 + 1) / (4 + 1), "all", 1 / 5)


def test_the_floor_is_one_over_r_max_plus_one():
    r = sequential_rank_p(10.0, np.zeros(199), h=5, R_max=199)
    assert r.p == r.floor == 1 / 200


@pytest.mark.parametrize("h, R_max", [(0, 10), (3, 2), (1.5, 10)])
def test_bad_h_or_r_max_is_refused(h, R_max):
    with pytest.raises(ValueError, match="h|R_max"):
        sequential_rank_p(0.0, [1.0], h=h, R_max=R_max)


def test_the_batch_size_changes_the_forwards_run_not_p():
    rng = np.random.default_rng(3)
    for _ in range(50):
        t = rng.normal(size=120)
        got = {}
        for batch in (1, 7, 20, 120):
            asked = []

            def stats(lo, hi):
                asked.append((lo, hi))
                return t[1 + lo:1 + hi]

            r, ran = run_sequential(t[0], stats, h=4, R_max=119, batch=batch)
            assert len(ran) == r.ran and asked[-1][1] == r.ran and len(asked) == batches_needed(t[0], t[1:], 4, 119, batch)
            got[batch] = (r.p, r.compared)
        assert len(set(got.values())) == 1


@pytest.mark.parametrize("h", [1, 3, 27])
def test_on_an_enumerable_pool_the_fixed_r_path_equals_the_exact_permutation_p(h):
    """A layer-matched pool of a 3-layer × 4-head model for S = one head in each layer,
    enumerated by hand (3 · 3 · 3 = 27 head-sets), each head-set's statistic the sum of its
    heads' weights. The exact permutation p is the share of pool ∪ {S} at or above T_S. In
    every drawing order the sequential p with R_max = the pool and h above the number of
    members reaching T_S takes the fixed-R path and equals it."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=(3, 4))
    S = [(0, 1), (1, 2), (2, 0)]
    pool = list(itertools.product(*[[(l, x) for x in range(4) if (l, x) not in S] for l in range(3)]))
    assert len(pool) == 27
    T = lambda hs: float(sum(w[l, x] for l, x in hs))  # noqa: E731
    t_s, t_pool = T(S), [T(hs) for hs in pool]
    exact = sum(1 for v in [t_s, *t_pool] if v >= t_s) / (len(pool) + 1)
    at_least = sum(v >= t_s for v in t_pool)
    for order in (rng.permutation(27) for _ in range(20)):
        r, _ = run_sequential(t_s, lambda lo, hi: [t_pool[i] for i in order[lo:hi]], h=h, R_max=27, batch=5)
        if at_least < h:
            assert r.stopped == "R_max" and r.p == pytest.approx(exact, abs=1e-15)
        else:  # h members reach T_S: it stops at the h-th, p = h / L
            assert r.stopped == "h" and r.p == h / r.compared
    # every order of a small pool (6 members: 720 orders), h never reached: always the exact p
    small = t_pool[:6]
    exact6 = (1 + sum(v >= t_s for v in small)) / 7
    assert sum(v >= t_s for v in small) < 6
    for order in itertools.permutations(range(6)):
        assert sequential_rank_p(t_s, [small[i] for i in order], h=6, R_max=6).p == pytest.approx(exact6, abs=1e-15)


@pytest.mark.parametrize("ties", [False, True])
def test_under_the_null_p_is_valid_at_001_and_005(ties):
    """S and its controls iid (S exchangeable with its pool): P(p ≤ α) ≤ α, within the
    binomial bound of the simulation, at α = 0.01 and 0.05; with ties (integer statistics)
    the ties count against S, so it stays valid. With h = 5 and R_max = 99 these α are
    attained exactly (p ≤ 0.05 ⇔ at most 4 of 99 reach T_S), so the rate is also not far below α."""
    rng = np.random.default_rng(12345)
    n_sim, h, R_max = 20_000, 5, 99
    draws = rng.integers(0, 30, size=(n_sim, R_max + 1)).astype(float) if ties else rng.normal(size=(n_sim, R_max + 1))
    ps, compared = np.empty(n_sim), np.empty(n_sim)
    for i in range(n_sim):
        r = sequential_rank_p(draws[i, 0], draws[i, 1:], h, R_max)
        ps[i], compared[i] = r.p, r.compared
    for alpha in (0.01, 0.05):
        hits = int(np.sum(ps <= alpha))
        assert hits <= binomial_upper(n_sim, alpha), (alpha, hits / n_sim)
        if not ties:
            assert hits >= int(sps.binom.ppf(1e-4, n_sim, alpha)), (alpha, hits / n_sim)  # exact, not merely conservative
    # the point of it: under the null most comparisons stop long before R_max
    assert np.mean(compared) < 0.25 * R_max


def test_holm_over_a_null_family_keeps_the_family_wise_error():
    """12 null comparisons a family (iid, and positively dependent through a shared term),
    Besag–Clifford p's, Holm at α: the share of families with any rejection stays ≤ α."""
    rng = np.random.default_rng(7)
    n_fam, m, h, R_max = 3000, 12, 4, 199
    for shared in (0.0, 0.8):
        any_reject = 0
        for _ in range(n_fam):
            common = rng.normal(size=R_max + 1)
            ranks = []
            for _ in range(m):
                x = shared * common + rng.normal(size=R_max + 1)
                ranks.append(sequential_rank_p(x[0], x[1:], h, R_max))
            any_reject += any(d.verdict == "yes" for d in sequential_decisions(ranks, alpha=0.05))
        assert any_reject <= binomial_upper(n_fam, 0.05), (shared, any_reject / n_fam)


def test_verdicts_yes_no_and_cannot_tell():
    far_above = sequential_rank_p(10.0, np.zeros(999), h=5, R_max=999)  # p = 1/1000
    inside = sequential_rank_p(0.0, np.ones(30), h=5, R_max=999)  # stops at 5 of 5: p = 1
    edge = sequential_rank_p(1.0, np.r_[np.ones(3) * 2, np.zeros(996)], h=5, R_max=999)  # p = 4/1000: ≤ α, Holm 2 · 4/1000 > α
    d = sequential_decisions([far_above, inside, edge], alpha=0.005)
    assert [x.verdict for x in d] == ["yes", "no", "cannot tell"]
    assert d[0].p_holm == pytest.approx(3 / 1000) and d[1].p_holm == 1.0 and d[2].p_holm == pytest.approx(2 * 4 / 1000)
    # an R_max too small for the family: even S above every control cannot be told
    few = [sequential_rank_p(10.0, np.zeros(19), h=5, R_max=19) for _ in range(2)]
    assert holm_floor(2, 19) == 0.1 and [x.verdict for x in sequential_decisions(few, 0.05)] == ["cannot tell"] * 2
