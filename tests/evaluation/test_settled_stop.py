"""Stopping a sequential comparison once its Holm verdict is settled (vheads.evaluation._sequential:
p_bounds, settled_no, control_rank_p(settled=True)).

Every p here is Besag and Clifford's by its definition (a walk over the draws), every Holm
is statsmodels'; the rule is checked against completions of the draws it did not see."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from vheads.evaluation import control_rank_p, p_bounds, settled_no


@pytest.fixture(autouse=True)
def _no_heap_walks(monkeypatch):
    """statsmodels' Holm calls ``gc.collect()`` on every call; inside the full suite each call
    walks the whole heap the earlier tests left (20+ minutes for these simulations), so it
    is skipped here (the Holm itself is statsmodels')."""
    import gc

    monkeypatch.setattr(gc, "collect", lambda *a, **k: 0)


def _bc_p(t_s: float, t, h: int, R_max: int) -> float:
    g = 0
    for L, x in enumerate(list(t)[:R_max], start=1):
        g += x >= t_s
        if g == h:
            return h / L
    return (1 + g) / (R_max + 1)


def _hi_by_hand(n: int, e: int, h: int, R_max: int) -> float:
    """The largest final p over every continuation of n draws with e reaching T_S (enumerated:
    the next j draws reach T_S, the rest do not, for every j)."""
    best = 0.0
    for j in range(R_max - n + 1):
        cont = [1.0] * j + [-1.0] * (R_max - n - j)
        best = max(best, _bc_p(0.0, [1.0] * e + [-1.0] * (n - e) + cont, h, R_max))
    return best


@pytest.mark.parametrize("h,R_max", [(3, 12), (10, 40), (2, 5)])
def test_the_bounds_hold_every_completion_and_are_reached(h, R_max):
    rng = np.random.default_rng(h * R_max)
    for _ in range(200):
        n = int(rng.integers(1, R_max))
        t_s = float(rng.normal(0.8, 0.5))
        head = rng.normal(0, 1, n)
        if np.sum(head >= t_s) >= h:
            continue
        lo, hi = p_bounds(t_s, head, h, R_max)
        e = int(np.sum(head >= t_s))
        assert lo == pytest.approx((1 + e) / (R_max + 1))  # no later draw reaches T_S
        assert hi == pytest.approx(_hi_by_hand(n, e, h, R_max))
        for _ in range(5):  # any completion's p lies inside
            full = np.concatenate([head, rng.normal(0, 1.5, R_max - n)])
            assert lo - 1e-12 <= _bc_p(t_s, full, h, R_max) <= hi + 1e-12
        got = control_rank_p(t_s, head, h, R_max, settled=True)
        assert got.stopped == "decided" and got.p == pytest.approx(hi) and got.compared == n


def test_a_stopped_comparison_keeps_its_own_p_when_marked_settled():
    t = [0.9, 0.1, 0.8, 0.7]  # h = 3 reached at the 4th draw
    assert control_rank_p(0.5, t, 3, 50, settled=True).p == pytest.approx(3 / 4)
    full = np.linspace(-1, 0.4, 20)  # R_max run, none reaching T_S
    assert control_rank_p(0.5, full, 3, 20, settled=True).p == pytest.approx(1 / 21)


def test_settled_no_is_holm_not_rejecting_at_the_least_p():
    rng = np.random.default_rng(5)
    for _ in range(300):
        lo = rng.uniform(0, 0.1, int(rng.integers(1, 15))) ** rng.uniform(0.5, 2)
        assert settled_no(lo) == [not r for r in multipletests(lo, alpha=0.05, method="holm")[0]]


def _family_run(rng, m, h, R_max, b, strong):
    """One family of m comparisons run round by round as the study does: a comparison goes on
    while open (fewer than h draws reached T_S, fewer than R_max run) and not settled; returns
    the reported p's, each member's settled flag and its full-sequence p."""
    t_s = rng.normal(0, 1, m) + np.where(np.arange(m) < strong, 3.0, 0.0)
    seqs = rng.normal(0, 1, (m, R_max))
    n = np.zeros(m, dtype=int)
    done = np.zeros(m, dtype=bool)
    settled = np.zeros(m, dtype=bool)
    while not done.all():
        n[~done] = np.minimum(R_max, n[~done] + b)
        for i in np.flatnonzero(~done):
            if np.sum(seqs[i, :n[i]] >= t_s[i]) >= h or n[i] >= R_max:
                done[i] = True
        lo = [p_bounds(t_s[i], seqs[i, :n[i]], h, R_max)[0] for i in range(m)]
        for i, no in enumerate(settled_no(lo)):
            if no and not done[i]:
                done[i] = settled[i] = True
    reported = [control_rank_p(t_s[i], seqs[i, :n[i]], h, R_max, settled=bool(settled[i])).p for i in range(m)]
    full = [_bc_p(t_s[i], seqs[i], h, R_max) for i in range(m)]
    return np.array(reported), settled, np.array(full), n


def test_a_settled_member_is_never_rejected_and_stops_early():
    rng = np.random.default_rng(11)
    stopped_early = 0
    for _ in range(150):
        reported, settled, full, n = _family_run(rng, m=8, h=5, R_max=99, b=16, strong=int(rng.integers(0, 4)))
        rej_reported = multipletests(reported, alpha=0.05, method="holm")[0]
        rej_full = multipletests(full, alpha=0.05, method="holm")[0]
        assert not np.any(rej_reported & settled)  # the report's Holm agrees with the settled verdict
        assert not np.any(rej_full & settled)  # and so does the full run's
        assert np.all(reported >= full - 1e-12)  # a settled p is no smaller than its full sequence's
        stopped_early += int(np.sum(settled & (n < 99)))
    assert stopped_early > 0


@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_under_the_null_the_family_wise_error_stays_at_alpha(alpha):
    """S exchangeable with its controls in every member (T_S one more draw of the same law):
    P(Holm rejects any member) ≤ α, and P(p ≤ α) ≤ α for each member, with settled stops."""
    rng = np.random.default_rng(int(alpha * 1000))
    reps, any_rej, member_hits, members = 1500, 0, 0, 0
    for _ in range(reps):
        t_s = rng.normal(0, 1, 6)
        seqs = rng.normal(0, 1, (6, 99))
        n, done, settled = np.zeros(6, dtype=int), np.zeros(6, dtype=bool), np.zeros(6, dtype=bool)
        while not done.all():
            n[~done] = np.minimum(99, n[~done] + 16)
            done |= np.array([np.sum(seqs[i, :n[i]] >= t_s[i]) >= 3 or n[i] >= 99 for i in range(6)])
            lo = [p_bounds(t_s[i], seqs[i, :n[i]], 3, 99)[0] for i in range(6)]
            for i, no in enumerate(settled_no(lo, alpha=alpha)):
                if no and not done[i]:
                    done[i] = settled[i] = True
        p = np.array([control_rank_p(t_s[i], seqs[i, :n[i]], 3, 99, settled=bool(settled[i])).p for i in range(6)])
        any_rej += bool(multipletests(p, alpha=alpha, method="holm")[0].any())
        member_hits += int(np.sum(p <= alpha))
        members += 6
    se = np.sqrt(alpha * (1 - alpha) / reps)
    assert any_rej / reps <= alpha + 2.5 * se
    assert member_hits / members <= alpha + 2.5 * np.sqrt(alpha * (1 - alpha) / members)
