"""Overlap, split-half ceilings and curves against hand computations."""

import itertools
import math

import numpy as np
import pytest

from vheads.discovery import (
    geometric_ceiling, overlap_curve, overlap_fraction, overlap_matrix, select_heads, split_half_ceiling,
    split_half_overlap,
)
from vheads.discovery._overlap import Ceiling


def _topk(scores, k):
    """Hand top-k: sort (score desc, flat index asc)."""
    flat = [(-v, i) for i, v in enumerate(np.asarray(scores).ravel())]
    H = scores.shape[1]
    return {divmod(i, H) for _, i in sorted(flat)[:k]}


def test_overlap_matrix_counts_common_heads():
    rng = np.random.default_rng(0)
    scores = [rng.random((4, 5)) for _ in range(3)]
    hs = [select_heads(s, k=6) for s in scores]
    m = overlap_matrix(hs)
    for i, j in itertools.product(range(3), repeat=2):
        assert m[i, j] == len(_topk(scores[i], 6) & _topk(scores[j], 6))


def test_ceiling_of_identical_items_is_k():
    per_item = np.tile(np.random.default_rng(1).random((1, 3, 4)), (6, 1, 1))
    c = split_half_ceiling(per_item, k=5, splits=50)
    assert (c.mean, c.lo, c.hi) == (5.0, 5.0, 5.0)


def test_ceiling_of_two_items_is_their_topk_overlap():
    """With two items every split puts one in each half: the overlap is fixed."""
    rng = np.random.default_rng(2)
    a, b = rng.random((3, 4)), rng.random((3, 4))
    c = split_half_ceiling(np.stack([a, b]), k=4, splits=30, seed=9)
    want = len(_topk(a, 4) & _topk(b, 4))
    assert c.mean == want and c.lo == want and c.hi == want and len(c.values) == 30


def test_ceiling_of_three_items_matches_hand_enumeration():
    """Halves of sizes 1 and 2: each split's value is one of the three singleton splits."""
    rng = np.random.default_rng(3)
    x = rng.random((3, 2, 5))
    possible = {len(_topk(x[i], 3) & _topk(x[[j for j in range(3) if j != i]].mean(0), 3)) for i in range(3)}
    c = split_half_ceiling(x, k=3, splits=200, seed=0)
    assert set(c.values.tolist()) <= possible
    assert min(possible) <= c.lo <= c.mean <= c.hi <= max(possible)
    assert c.lo == np.percentile(c.values, 2.5) and c.hi == np.percentile(c.values, 97.5)
    again = split_half_ceiling(x, k=3, splits=200, seed=0)
    assert np.array_equal(c.values, again.values)


def test_geometric_ceiling_and_fraction():
    a = Ceiling(4.0, 3, 5, np.array([4]), 5)
    b = Ceiling(9.0, 8, 10, np.array([9]), 5)
    assert geometric_ceiling(a, b) == 6.0
    assert overlap_fraction(3, a, b) == 0.5
    assert math.isnan(overlap_fraction(1, a, Ceiling(0.0, 0, 0, np.array([0]), 5)))


def test_overlap_curve_is_topk_overlap_for_each_k():
    rng = np.random.default_rng(4)
    a, b = rng.random((3, 4)), rng.random((3, 4))
    curve = overlap_curve(a, b)
    assert curve.tolist() == [len(_topk(a, k) & _topk(b, k)) for k in range(1, 13)]
    assert curve[-1] == 12


def test_too_few_items_for_a_ceiling_is_refused():
    with pytest.raises(ValueError, match="at least 2 items"):
        split_half_ceiling(np.zeros((1, 2, 2)), k=1)


# ---- overlap at half size against the ceiling (seed Table 20) ------------------------------

def _planted(n, signal, rng, L=6, H=8, noise=1.0):
    """Per-item mass [n, L, H]: heads in ``signal`` carry +1 on average, every head noise."""
    x = rng.normal(0.0, noise, size=(n, L, H))
    for l, h in signal:
        x[:, l, h] += 1.0
    return x


def test_half_overlap_of_a_setting_with_itself_is_its_ceiling_split_for_split():
    x = np.random.default_rng(5).random((9, 3, 4))
    c = split_half_ceiling(x, k=4, splits=40, seed=7)
    h = split_half_overlap(x, x, k=4, splits=40, seed=7, same_items=True)
    assert np.array_equal(c.values, h.values)


def test_half_overlap_one_split_matches_hand_computation():
    rng = np.random.default_rng(6)
    a, b = rng.random((7, 3, 4)), rng.random((5, 3, 4))
    h = split_half_overlap(a, b, k=3, splits=1, seed=11)
    r = np.random.default_rng(11)
    pa, pb = r.permutation(7), r.permutation(5)
    assert h.values[0] == len(_topk(a[pa[:3]].mean(0), 3) & _topk(b[pb[2:]].mean(0), 3))


@pytest.mark.parametrize("seed", range(4))
def test_fraction_is_near_one_for_identical_settings_and_the_all_items_overlap_is_biased(seed):
    """Two settings that measure the same thing (same planted heads, independent items):
    the half-size fraction sits at 1 up to noise, while the all-items overlap over the
    half-size ceiling — the old estimate — exceeds it."""
    rng = np.random.default_rng(100 + seed)
    signal = [(l, h) for l in range(6) for h in range(8) if (l * 8 + h) % 4 == 0]  # 12 heads
    a, b = _planted(40, signal, rng, noise=2.5), _planted(40, signal, rng, noise=2.5)
    k = 12
    ca, cb = split_half_ceiling(a, k, 100, seed=1), split_half_ceiling(b, k, 100, seed=2)
    half = split_half_overlap(a, b, k, 100, seed=3)
    frac = overlap_fraction(half.mean, ca, cb)
    assert 0.8 <= frac <= 1.2
    full = len(_topk(a.mean(0), k) & _topk(b.mean(0), k))
    assert full / geometric_ceiling(ca, cb) > frac


def test_fraction_is_near_zero_for_disjoint_settings():
    rng = np.random.default_rng(9)
    heads = [(l, h) for l in range(6) for h in range(8)]
    sa, sb = heads[:10], heads[20:30]
    a, b = _planted(40, sa, rng, noise=0.5), _planted(40, sb, rng, noise=0.5)
    ca, cb = split_half_ceiling(a, 10, 50, seed=1), split_half_ceiling(b, 10, 50, seed=2)
    frac = overlap_fraction(split_half_overlap(a, b, 10, 50, seed=3).mean, ca, cb)
    assert frac < 0.15
