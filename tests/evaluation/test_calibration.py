"""Calibration of the rank p and Holm on simulated null outcomes (many seeds, no model).

Under the null, S is exchangeable with its R controls: its statistic is one more draw
from the same distribution. Then the rank p is uniform on {1, …, R+1}/(R+1), the floor
1/(R+1) is hit at rate 1/(R+1), and Holm over a family of null settings rejects anything
in at most alpha of the runs (family-wise error).
"""

import numpy as np
from scipy import stats as sps

from vheads.evaluation import holm, rank_p


def _null_rank_ps(rng, n_runs, R):
    t = rng.normal(size=(n_runs, R + 1))  # column 0 plays S, exchangeable with the R controls
    return np.array([rank_p(row[0], row[1:]).p for row in t])


def test_rank_p_is_uniform_on_its_grid_under_the_null():
    R, n_runs = 9, 6000
    p = _null_rank_ps(np.random.default_rng(0), n_runs, R)
    counts = np.bincount(np.rint(p * (R + 1)).astype(int) - 1, minlength=R + 1)
    assert counts.sum() == n_runs and len(counts) == R + 1  # every p lies on the grid
    assert sps.chisquare(counts).pvalue > 0.001


def test_rank_p_floor_is_hit_at_rate_one_over_R_plus_one():
    R, n_runs = 19, 8000
    p = _null_rank_ps(np.random.default_rng(1), n_runs, R)
    hits = int(np.sum(np.isclose(p, 1 / (R + 1))))
    assert sps.binomtest(hits, n_runs, 1 / (R + 1)).pvalue > 0.001


def test_holm_over_twelve_null_settings_keeps_the_family_wise_error():
    """R = 249 so that a Holm-adjusted p can reach 12/250 = 0.048 < 0.05 at all."""
    R, m, n_runs, alpha = 249, 12, 1500, 0.05
    rng = np.random.default_rng(2)
    any_reject = 0
    for _ in range(n_runs):
        ps = _null_rank_ps(rng, m, R)
        any_reject += bool(holm(ps, alpha).reject.any())
    rate = any_reject / n_runs
    # FWER <= alpha; allow binomial noise (one-sided test that the true rate exceeds alpha)
    assert sps.binomtest(any_reject, n_runs, alpha, alternative="greater").pvalue > 0.01, rate


def test_a_real_effect_is_found_so_the_calibration_tests_can_fail():
    """The same machinery with S shifted above its controls: the floor is hit far more
    often than 1/(R+1) and Holm rejects — the null tests above are not vacuous."""
    R, n_runs = 19, 2000
    t = np.random.default_rng(3).normal(size=(n_runs, R + 1))
    t[:, 0] += 2.5
    p = np.array([rank_p(row[0], row[1:]).p for row in t])
    assert np.mean(np.isclose(p, 1 / (R + 1))) > 0.3
