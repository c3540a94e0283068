"""Stability curves against hand computations: every point is a set overlap of top-k's of
means over subsets drawn with the stated seeds; N90 on constructed curves."""

import hashlib

import numpy as np
import pytest

from vheads.discovery import StabilityCurve, items_to_reach, split_half_ceiling, stability_curve, stability_sizes


def _topk(mean: np.ndarray, k: int, per_layer: bool = False) -> set:
    """Hand top-k of ``mean [L, H]``: sort (score desc, flat index asc); per layer: each row's k."""
    L, H = mean.shape
    if per_layer:
        return {(l, h) for l in range(L) for _, h in sorted((-mean[l, h], h) for h in range(H))[:k]}
    return {divmod(i, H) for _, i in sorted((-v, i) for i, v in enumerate(mean.ravel()))[:k]}


def _seed(seed: int, n: int) -> int:
    """The documented per-size seed, written out: sha256 of 'seed|stability|n', first 8 hex digits."""
    return int(hashlib.sha256(f"{seed}|stability|{n}".encode()).hexdigest()[:8], 16)


def _items(N=30, L=4, H=6, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(0, 1, (1, L, H)) + rng.normal(0, 0.6, (N, L, H))  # continuous: no ties


@pytest.mark.parametrize("per_layer, k", [(False, 5), (True, 2)])
def test_curve_points_equal_a_hand_computation(per_layer, k):
    x = _items()
    sizes, draws, seed = [5, 12, 30], 9, 3
    c = stability_curve(x, k, sizes, draws, seed, per_layer=per_layer)
    assert c.sizes == sizes and c.seeds == [_seed(seed, n) for n in sizes]
    full = _topk(x.mean(0), k, per_layer)
    assert c.set_size == len(full)
    for i, n in enumerate(sizes):
        rng = np.random.default_rng(_seed(seed, n))
        for r in range(draws):
            sub = rng.permutation(len(x))[:n]
            assert c.overlaps["full"][i, r] == len(_topk(x[sub].mean(0), k, per_layer) & full)
            a, b = _topk(x[sub[: n // 2]].mean(0), k, per_layer), _topk(x[sub[n // 2:]].mean(0), k, per_layer)
            assert c.overlaps["split"][i, r] == len(a & b)
    # summaries: mean and numpy's percentiles over the draws
    assert np.allclose(c.mean("split"), [np.mean(row) for row in c.overlaps["split"]])
    assert np.allclose(c.band("full")[0], [np.percentile(row, 2.5) for row in c.overlaps["full"]])


def test_at_all_items_the_curves_are_k_and_the_split_half_ceiling():
    """At n = N the subset is the corpus (overlap k in every draw) and the split-half curve is
    the split-half noise ceiling, split for split, from the same seed."""
    x = _items(N=20)
    c = stability_curve(x, 4, [5, 20], draws=40, seed=7)
    assert (c.overlaps["full"][-1] == 4).all() and c.ceiling("full") == 4
    ceiling = split_half_ceiling(x, 4, splits=40, seed=c.seeds[-1])
    assert np.array_equal(c.overlaps["split"][-1], ceiling.values) and c.ceiling("split") == ceiling.mean


def test_identical_items_are_stable_at_every_size():
    x = np.tile(_items(N=1), (12, 1, 1))
    c = stability_curve(x, 5, draws=10)
    assert c.sizes == [5, 10, 12]
    assert (c.overlaps["full"] == 5).all() and (c.overlaps["split"] == 5).all()
    assert c.n90("full") == 5 and c.n90("split") == 5


def test_sizes_are_capped_at_the_corpus():
    assert stability_sizes(48) == [5, 10, 25, 48]
    assert stability_sizes(400) == [5, 10, 25, 50, 100, 200, 400]
    assert stability_sizes(1000) == [5, 10, 25, 50, 100, 200, 400, 1000]
    assert stability_sizes(3) == [3]
    with pytest.raises(ValueError, match="at least 2"):
        stability_sizes(1)
    with pytest.raises(ValueError, match="2..10"):
        stability_curve(_items(N=10), 3, [5, 11])


def test_n90_is_the_first_size_reaching_ninety_percent_of_the_ceiling():
    sizes = [5, 10, 25, 48]
    assert items_to_reach(sizes, [1.0, 5.0, 8.9, 10.0], 10.0) == 48  # 8.9 < 9
    assert items_to_reach(sizes, [1.0, 9.0, 8.0, 10.0], 10.0) == 10  # 9 = 90% exactly; the first reaching it
    assert items_to_reach(sizes, [9.5, 9.6, 9.8, 10.0], 10.0) == 5
    assert items_to_reach(sizes, [0.0, 0.0, 0.0, 0.0], 0.0) is None  # nothing to reach
    assert items_to_reach(sizes, [1.0, 2.0, 3.0, 4.0], 10.0, fraction=0.5) is None
    # a constructed curve: split means 1, 2, 3.5, 4 (ceiling 4 at N, 90% = 3.6) -> N90 = 48;
    # full means 3, 4.6, 5, 5 (ceiling 5, 4.5) -> N90 = 10
    split = np.array([[1, 1], [2, 2], [3, 4], [4, 4]])
    full = np.array([[3, 3], [5, 4], [5, 5], [5, 5]])
    c = StabilityCurve(5, sizes, {"full": full, "split": split}, [0, 0, 0, 0])
    assert c.ceiling("split") == 4.0 and c.n90("split") == 48
    assert c.ceiling("full") == 5.0 and c.n90("full") == 10
