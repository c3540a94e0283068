"""Statistics equal independent computations: hand formulas, scipy and statsmodels."""

import math
import statistics

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from vheads.evaluation._stats import (
    bootstrap_ci,
    bootstrap_diff_ci,
    welch_interval,
    holm,
    ncs_difference_t,
    paired_one_sided_p,
    paired_t,
    rank_p,
    spearman,
    t_interval,
    z_score,
)


def hand_holm(p):
    """Holm step-down written from its definition."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):  # rank 0 is the smallest p
        running = max(running, (m - rank) * p[i])
        adjusted[i] = min(1.0, running)
    return adjusted


def hand_ranks(values):
    """1-based ranks, ties get the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


# --- t-interval and bootstrap ---------------------------------------------------------


def test_t_interval_is_mean_plus_minus_t_quantile_times_standard_error():
    x = [0.12, -0.03, 0.4, 0.25, 0.0, 0.31, 0.08, -0.11, 0.19]
    n = len(x)
    mean, sd = statistics.fmean(x), statistics.stdev(x)
    half = sps.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    ci = t_interval(x)
    assert ci.mean == pytest.approx(mean)
    assert (ci.low, ci.high) == pytest.approx((mean - half, mean + half))
    assert ci.n == n
    # and scipy's own t.interval agrees
    lo, hi = sps.t.interval(0.95, n - 1, loc=mean, scale=sd / math.sqrt(n))
    assert (ci.low, ci.high) == pytest.approx((lo, hi))


def test_t_interval_needs_two_finite_items():
    with pytest.raises(ValueError, match="at least 2"):
        t_interval([0.3])
    with pytest.raises(ValueError, match="finite"):
        t_interval([0.3, float("nan"), 0.1])


def test_bootstrap_equals_a_hand_loop_with_the_same_generator():
    x = np.random.default_rng(11).normal(0.1, 0.3, size=41)
    B, seed = 500, 7
    rng = np.random.default_rng(seed)
    means = []
    for _ in range(B):
        idx = rng.integers(0, len(x), size=len(x))
        means.append(sum(x[i] for i in idx) / len(x))
    means.sort()

    def percentile(q):  # linear interpolation between order statistics
        pos = q * (B - 1)
        lo = math.floor(pos)
        return means[lo] + (pos - lo) * (means[min(lo + 1, B - 1)] - means[lo])

    ci = bootstrap_ci(x, n_resamples=B, seed=seed)
    assert (ci.low, ci.high) == pytest.approx((percentile(0.025), percentile(0.975)))
    assert ci.mean == pytest.approx(x.mean())


def test_bootstrap_equals_scipy_percentile_bootstrap_with_default_2000_resamples():
    x = np.random.default_rng(12).normal(size=60)
    ref = sps.bootstrap((x,), np.mean, n_resamples=2000, method="percentile", rng=np.random.default_rng(3))
    ci = bootstrap_ci(x, seed=3)
    assert ci.n_resamples == 2000
    assert (ci.low, ci.high) == pytest.approx(tuple(ref.confidence_interval))


def test_bootstrap_is_reproducible_from_its_seed_and_changes_with_it():
    x = np.random.default_rng(0).normal(size=30)
    assert bootstrap_ci(x, seed=5) == bootstrap_ci(x, seed=5)
    assert bootstrap_ci(x, seed=5).low != bootstrap_ci(x, seed=6).low


# --- rank p, z ------------------------------------------------------------------------


def test_rank_p_counts_ties_against_the_head_set():
    t_s = 0.5
    controls = [0.5, 0.2, 0.7, 0.1, 0.5, 0.3]
    n_ge = sum(1 for t in controls if t >= t_s)  # 3: two ties and one above
    r = rank_p(t_s, controls)
    assert r.n_at_least == n_ge == 3
    assert r.p == pytest.approx((1 + 3) / (6 + 1))


def test_rank_p_has_floor_one_over_r_plus_one_and_ceiling_one():
    controls = np.linspace(-1, 0, 100)
    assert rank_p(5.0, controls).p == pytest.approx(1 / 101)
    assert rank_p(5.0, controls).floor == pytest.approx(1 / 101)
    assert rank_p(-5.0, controls).p == 1.0


def test_z_score_uses_sample_sd():
    controls = [0.01, -0.02, 0.005, 0.0, 0.015, -0.01]
    z = z_score(0.12, controls)
    assert z.mean == pytest.approx(statistics.fmean(controls))
    assert z.sd == pytest.approx(statistics.stdev(controls))  # ddof = 1
    assert z.z == pytest.approx((0.12 - statistics.fmean(controls)) / statistics.stdev(controls))


def test_z_score_of_constant_controls_is_infinite_not_an_error():
    assert z_score(1.0, [0.0, 0.0, 0.0]).z == math.inf
    with pytest.raises(ValueError, match="at least 2"):
        z_score(1.0, [0.0])


# --- Holm -----------------------------------------------------------------------------


def test_holm_equals_hand_step_down_and_statsmodels_holm():
    p = [0.004, 0.048, 0.3, 0.011, 0.0002, 0.02, 0.6, 0.049, 0.001, 0.9, 0.03, 0.004]
    res = holm(p)
    assert res.p_adjusted == pytest.approx(hand_holm(p))
    reject, p_sm, _, _ = multipletests(p, alpha=0.05, method="holm")
    assert res.p_adjusted == pytest.approx(p_sm)
    assert (res.reject == reject).all()
    assert (res.reject == (np.array(hand_holm(p)) <= 0.05)).all()


def test_holm_is_not_statsmodels_default_holm_sidak():
    p = [0.01, 0.02, 0.03, 0.04]
    _, p_hs, _, _ = multipletests(p)  # default method="hs"
    assert not np.allclose(holm(p).p_adjusted, p_hs), (holm(p).p_adjusted, p_hs)
    assert holm(p).p_adjusted == pytest.approx(hand_holm(p))


def test_holm_rejects_p_values_outside_zero_one():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm([0.2, 1.5])


# --- paired tests, Spearman -----------------------------------------------------------


def test_paired_t_equals_scipy_and_hand_formula():
    rng = np.random.default_rng(4)
    a = rng.normal(0.1, 0.2, size=25)
    b = a - rng.normal(0.03, 0.1, size=25)
    d = a - b
    t_hand = d.mean() / (d.std(ddof=1) / math.sqrt(len(d)))
    res = paired_t(a, b)
    ref = sps.ttest_rel(a, b)
    assert res.t == pytest.approx(t_hand) and res.t == pytest.approx(ref.statistic)
    assert res.p == pytest.approx(ref.pvalue)
    assert res.p == pytest.approx(2 * sps.t.sf(abs(t_hand), len(d) - 1))
    greater = paired_t(a, b, alternative="greater")
    assert greater.p == pytest.approx(sps.t.sf(t_hand, len(d) - 1))
    assert greater.p == pytest.approx(sps.ttest_rel(a, b, alternative="greater").pvalue)


def test_paired_t_rejects_unpaired_input_and_unknown_alternative():
    with pytest.raises(ValueError, match="same items"):
        paired_t([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="alternative"):
        paired_t([1, 2, 3], [1, 2, 4], alternative="bigger")


def test_spearman_equals_pearson_of_hand_ranks_with_ties():
    x = [0.3, 0.1, 0.1, 0.7, 0.5, 0.2, 0.9, 0.5]
    y = [1.0, 0.4, 0.2, 0.9, 0.9, 0.1, 1.5, 0.3]
    rho_hand = np.corrcoef(hand_ranks(x), hand_ranks(y))[0, 1]
    res = spearman(x, y)
    assert res.rho == pytest.approx(rho_hand)
    assert res.p == pytest.approx(sps.spearmanr(x, y).pvalue)
    assert res.n == len(x)


def test_paired_one_sided_p_compares_each_item_with_the_controls_mean():
    rng = np.random.default_rng(9)
    n, R = 40, 20
    controls = rng.normal(0.0, 0.1, size=(R, n))
    s_part = controls.mean(axis=0) + rng.normal(0.02, 0.05, size=n)
    d = [s_part[i] - sum(controls[r, i] for r in range(R)) / R for i in range(n)]
    t_hand = statistics.fmean(d) / (statistics.stdev(d) / math.sqrt(n))
    res = paired_one_sided_p(s_part, controls)
    assert res.t == pytest.approx(t_hand)
    assert res.p == pytest.approx(sps.t.sf(t_hand, n - 1))
    assert res.mean_diff == pytest.approx(statistics.fmean(d))
    assert res.alternative == "greater"


def test_paired_one_sided_p_needs_controls_on_the_same_items():
    with pytest.raises(ValueError, match=r"\[R, n\]"):
        paired_one_sided_p([0.1, 0.2, 0.3], np.zeros((5, 4)))


# --- NCS: a difference of two independent means ------------------------------------------------

def test_welch_interval_equals_scipy_ttest_ind_unequal_variances():
    rng = np.random.default_rng(21)
    x, y = rng.normal(0.3, 0.2, 23), rng.normal(0.05, 0.6, 17)
    ref = sps.ttest_ind(x, y, equal_var=False).confidence_interval(0.95)
    iv = welch_interval(x, y)
    assert iv.mean == pytest.approx(x.mean() - y.mean(), abs=1e-15)
    assert iv.low == pytest.approx(ref.low, rel=1e-12) and iv.high == pytest.approx(ref.high, rel=1e-12)
    ref90 = sps.ttest_ind(x, y, equal_var=False).confidence_interval(0.90)
    iv90 = welch_interval(x, y, confidence=0.90)
    assert (iv90.low, iv90.high) == pytest.approx((ref90.low, ref90.high), rel=1e-12)


def test_welch_interval_is_wider_than_the_interval_that_ignores_the_second_arm():
    """The old NCS interval: t over matched drops minus the mismatched *mean* — too narrow."""
    rng = np.random.default_rng(22)
    m, mm = rng.normal(0.2, 0.1, 16), rng.normal(0.05, 0.1, 16)
    old = t_interval(m - mm.mean())
    new = welch_interval(m, mm)
    assert new.mean == pytest.approx(old.mean, abs=1e-12)
    assert (new.high - new.low) > 1.2 * (old.high - old.low)  # about sqrt(2) with equal arms


def test_bootstrap_diff_equals_scipy_bootstrap_with_both_arms_resampled():
    rng = np.random.default_rng(23)
    x, y = rng.normal(0.3, 0.2, 19), rng.exponential(0.2, 13)
    ref = sps.bootstrap((x, y), lambda a, b, axis=-1: a.mean(axis=axis) - b.mean(axis=axis), n_resamples=2000,
                        method="percentile", rng=np.random.default_rng(4))
    ci = bootstrap_diff_ci(x, y, seed=4)
    assert ci.low == pytest.approx(ref.confidence_interval.low, rel=1e-12)
    assert ci.high == pytest.approx(ref.confidence_interval.high, rel=1e-12)
    assert ci.mean == pytest.approx(x.mean() - y.mean(), abs=1e-15)


@pytest.mark.parametrize("seed", range(6))
def test_holm_equals_statsmodels_holm_on_random_families_with_ties(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 16))
    p = rng.integers(1, 21, m) / 20  # rank p's on a grid: many ties
    reject, p_sm, _, _ = multipletests(p, alpha=0.05, method="holm")
    res = holm(p)
    assert res.p_adjusted == pytest.approx(p_sm, abs=1e-15)
    assert (res.reject == reject).all()


# --- NCS of two head-sets on the same items: both arms -------------------------------------------

def test_ncs_difference_t_equals_a_hand_welch_t_of_the_per_arm_differences():
    rng = np.random.default_rng(31)
    am, ax = rng.normal(0.3, 0.1, 16), rng.normal(0.1, 0.2, 14)
    bm, bx = am - rng.normal(0.05, 0.05, 16), ax + rng.normal(0.0, 0.2, 14)
    u, v = am - bm, ax - bx
    se2 = u.var(ddof=1) / 16 + v.var(ddof=1) / 14
    t_hand = (u.mean() - v.mean()) / math.sqrt(se2)
    df_hand = se2**2 / ((u.var(ddof=1) / 16) ** 2 / 15 + (v.var(ddof=1) / 14) ** 2 / 13)
    res = ncs_difference_t(am, ax, bm, bx)
    assert res.t == pytest.approx(t_hand) and res.df == pytest.approx(df_hand)
    assert res.p == pytest.approx(2 * sps.t.sf(abs(t_hand), df_hand))
    assert res.mean_diff == pytest.approx((am.mean() - ax.mean()) - (bm.mean() - bx.mean()))
    ci = sps.ttest_ind(u, v, equal_var=False).confidence_interval(0.95)
    assert (res.interval.low, res.interval.high) == pytest.approx((ci.low, ci.high))
    # the old test: a paired t of matched drops minus each head-set's mismatched mean
    old = sps.ttest_rel(am - ax.mean(), bm - bx.mean())
    assert old.statistic == pytest.approx(res.mean_diff / (u.std(ddof=1) / 4))  # ignores v's variance
    assert abs(res.t) < abs(old.statistic)


def test_ncs_difference_t_against_controls_averages_them_per_item_one_sided():
    rng = np.random.default_rng(32)
    pm, px = rng.normal(0.3, 0.1, 12), rng.normal(0.1, 0.1, 10)
    cm, cx = rng.normal(0.1, 0.1, (7, 12)), rng.normal(0.05, 0.1, (7, 10))
    u = [pm[i] - statistics.fmean(cm[:, i]) for i in range(12)]
    v = [px[j] - statistics.fmean(cx[:, j]) for j in range(10)]
    want = sps.ttest_ind(u, v, equal_var=False, alternative="greater")
    res = ncs_difference_t(pm, px, cm, cx, alternative="greater")
    assert res.t == pytest.approx(want.statistic) and res.p == pytest.approx(want.pvalue)
    with pytest.raises(ValueError, match="same items"):
        ncs_difference_t(pm, px, cm[:, :11], cx)
