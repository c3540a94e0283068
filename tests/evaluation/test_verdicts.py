"""The three verdicts: the Holm floor of each member of a family, checked against an
enumeration of every rank p the members can reach, with statsmodels' Holm."""

from __future__ import annotations

import itertools
from unittest import mock

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from vheads.evaluation import VERDICTS, holm_floors, member_required_n, required_n, verdict

FAMILIES = [(9,), (4, 4), (19, 3), (39, 4, 4), (5, 2, 7), (3, 3, 3, 3), (9, 1, 5, 2), (24, 2, 1)]


def enumerated_floors(ns):
    """For each member, the smallest Holm-adjusted p over every combination of attainable
    rank p's j / (n_i + 1), j = 1 … n_i + 1, each family adjusted by statsmodels."""
    grids = [[j / (n + 1) for j in range(1, n + 2)] for n in ns]
    best = np.ones(len(ns))
    with mock.patch("gc.collect"):  # multipletests collects garbage on every call: thousands of calls here
        for ps in itertools.product(*grids):
            best = np.minimum(best, multipletests(list(ps), method="holm")[1])
    return best


@pytest.mark.parametrize("ns", FAMILIES)
def test_holm_floors_equal_the_smallest_adjusted_p_over_every_attainable_rank_p(ns):
    assert holm_floors(list(ns)) == pytest.approx(enumerated_floors(ns))


def test_the_floor_can_exceed_the_simple_bound_when_members_share_a_small_n():
    """Two members with 4 controls beside one with 39: each can reach no better than 2 × 1/5."""
    floors = holm_floors([39, 4, 4])
    bound = [max(3 / 40, 1 / (n + 1)) for n in (39, 4, 4)]
    assert floors == pytest.approx(enumerated_floors((39, 4, 4)))
    assert floors[1] == pytest.approx(0.4) and floors[1] > bound[1]


def test_one_n_for_the_whole_family_gives_m_over_n_plus_one():
    assert holm_floors([105] * 12) == pytest.approx(np.full(12, 12 / 106))


def test_required_n_is_the_smallest_n_whose_floor_reaches_alpha():
    for m in (1, 4, 12, 17):
        n = required_n(m)
        assert holm_floors([n] * m).max() <= 0.05 < holm_floors([n - 1] * m).max() or n == 1
    assert required_n(12) == 239 and required_n(1) == 19


def test_verdict_is_cannot_tell_whenever_the_floor_is_above_alpha_whatever_the_p():
    assert set(VERDICTS) == {"yes", "no", "cannot tell"}
    assert verdict(0.113, 12 / 106) == "cannot tell"
    assert verdict(1.0, 0.2) == "cannot tell"
    assert verdict(0.04, 0.03) == "yes" and verdict(0.05, 0.05) == "yes"
    assert verdict(0.06, 0.03) == "no"


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="whole number"):
        holm_floors([0, 3])
    with pytest.raises(ValueError, match="non-empty"):
        holm_floors([])
    with pytest.raises(ValueError, match="alpha"):
        verdict(0.1, 0.01, alpha=1.5)


@pytest.mark.parametrize("ns", [(99, 99, 99, 10), (9, 9, 9), (39, 4, 4), (24, 2, 1)])
def test_member_required_n_is_the_smallest_n_that_lets_that_member_reach_alpha(ns):
    """Searched by hand over n = 1 … 10,000 with every other member's n as it is."""
    for i in range(len(ns)):
        def floor_with(n):
            return holm_floors([*ns[:i], n, *ns[i + 1:]])[i]
        by_hand = next(n for n in range(1, 10_001) if floor_with(n) <= 0.05)
        assert member_required_n(list(ns), i) == by_hand
