"""Head attribution by regression: the design as asked for, bad requests refused before any
forward, and every fitted number equal to statsmodels' OLS on the same design matrix."""

import numpy as np
import pytest
import statsmodels.api as sm

from vheads._errors import VheadsError
from vheads.causal import check_design, draw_design, head_attribution, stored_design
from vheads.data.synthetic import kind_items
from vheads.engine import Engine

L, H = 4, 8  # a 4 x 8 model (the tiny model before issue 41; the design does not depend on it)
N = L * H


@pytest.mark.parametrize("kwargs, says", [
    (dict(n_subsets=32, q=0.5), "--subsets 32"),  # 32 heads and the intercept: 33 coefficients
    (dict(n_subsets=31, m=4), "--subsets 31"),
    (dict(n_subsets=64, q=0.0), "--q 0.0"),
    (dict(n_subsets=64, q=1.0), "--q 1.0"),
    (dict(n_subsets=64, q=-0.2), "--q -0.2"),
    (dict(n_subsets=64, m=0), "--m 0"),
    (dict(n_subsets=64, m=N), f"--m {N}"),
    (dict(n_subsets=64, q=0.5, m=3), "not both"),
])
def test_a_bad_design_is_refused_with_one_line(kwargs, says):
    with pytest.raises(VheadsError) as e:
        draw_design(L, H, **kwargs)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_the_design_is_the_one_asked_for_and_reproducible():
    d = draw_design(L, H, 4000, q=0.3, seed=5)
    assert d.X.shape == (4000, N) and d.mode == "bernoulli" and d.q == 0.3 and d.intercept
    share = d.X.mean()
    assert abs(share - 0.3) < 4 * np.sqrt(0.3 * 0.7 / d.X.size)  # each head in with probability q
    assert np.array_equal(d.X, draw_design(L, H, 4000, q=0.3, seed=5).X)
    assert not np.array_equal(d.X, draw_design(L, H, 4000, q=0.3, seed=6).X)
    f = draw_design(L, H, 200, m=5, seed=1)
    assert f.mode == "fixed" and not f.intercept and set(f.X.sum(axis=1)) == {5}
    # uniform: every head about equally often (m / N of the subsets)
    assert np.abs(f.X.mean(0) - 5 / N).max() < 5 * np.sqrt(5 / N / 200)
    check_design(33, N, 0.5)  # the smallest Bernoulli design


def test_stored_control_draws_qualify_only_where_they_are_independent_uniform_subsets():
    assert stored_design("random-12")[0] and stored_design("any-layer")[0]
    for name in ("layer-matched", "layer+attention-matched", "whole-layers", "sinks", "text-heavy"):
        ok, why = stored_design(name)
        assert not ok and why


@pytest.fixture(scope="module")
def fits(tiny):
    eng = Engine(tiny)
    sets = {k: kind_items(k, 3, 2) for k in ("class-matched", "class-mismatched", "text")}
    return {
        "bernoulli": head_attribution(eng, sets, ("ncs", "text"), draw_design(L, H, 48, q=0.5, seed=2)),
        "fixed": head_attribution(eng, sets, ("ncs",), draw_design(L, H, 48, m=6, seed=3)),
    }


def _statistic(att, metric):
    """The per-subset statistic recomputed from the outcomes: NCS matched mean − mismatched mean."""
    o = att.outcomes[metric]
    return o["matched"].mean(1) - o["mismatched"].mean(1) if "matched" in o else o["value"].mean(1)


@pytest.mark.parametrize("kind, key", [("bernoulli", "ncs-all:regression"), ("bernoulli", "text:regression"),
                                       ("fixed", "ncs-all:regression")])
@pytest.mark.parametrize("metric", ["p4", "logit-diff"])
def test_coefficients_and_standard_errors_equal_statsmodels_ols(fits, kind, key, metric):
    att = fits[kind][key]
    X = att.design.X.astype(float)
    Z = sm.add_constant(X, has_constant="add") if kind == "bernoulli" else X
    y = _statistic(att, metric)
    ref = sm.OLS(y, Z).fit()
    beta, se = att.fit(metric)
    np.testing.assert_allclose(beta, ref.params, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(se, ref.bse, rtol=1e-6, atol=1e-12)
    # the map's coefficient (the statistic of per-item fits) is the fit of the statistic: OLS is linear in y
    cut = 1 if kind == "bernoulli" else 0
    np.testing.assert_allclose(att.coefficients(metric), ref.params[cut:], rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(att.causal_map().effects(metric), ref.params[cut:], rtol=1e-8, atol=1e-10)
    # per item: each item's own OLS
    arm = "matched" if "matched" in att.outcomes[metric] else "value"
    per = att.item_coefficients(metric)[arm]
    for i in range(per.shape[1]):
        np.testing.assert_allclose(per[:, i], sm.OLS(att.outcomes[metric][arm][:, i], Z).fit().params, rtol=1e-7, atol=1e-9)


def test_interactions_equal_statsmodels_with_the_products_added(fits):
    att = fits["bernoulli"]["ncs-all:regression"]
    top = 3
    got = att.interactions(top=top)
    order = np.argsort(-att.coefficients(), kind="stable")[:top]
    X = att.design.X.astype(float)
    pairs = [(a, b) for i, a in enumerate(order) for b in order[i + 1:]]
    Z = np.column_stack([np.ones(len(X)), X] + [X[:, a] * X[:, b] for a, b in pairs])
    ref = sm.OLS(_statistic(att, "p4"), Z).fit()
    assert len(got) == len(pairs)
    for r, (a, b), c, s in zip(got, pairs, ref.params[1 + N:], ref.bse[1 + N:]):
        assert (tuple(r["a"]), tuple(r["b"])) == (att.design.heads[a], att.design.heads[b])
        assert r["coef"] == pytest.approx(c, rel=1e-7, abs=1e-10) and r["se"] == pytest.approx(s, rel=1e-6)


def test_the_bootstrap_interval_spreads_like_the_items_standard_error(fits):
    """Resampling items: the interval's half-width ≈ 1.96 × the standard error of a
    difference of two independent means of the per-item coefficients (plug-in variances)."""
    att = fits["bernoulli"]["ncs-all:regression"]
    ci = att.bootstrap_ci(n_boot=4000, seed=1)
    B = {a: b[1:] for a, b in att.item_coefficients().items()}
    se = np.sqrt(sum(b.var(axis=1, ddof=0) / b.shape[1] for b in B.values()))
    c = att.coefficients()
    assert np.all(ci[:, 0] <= c + 1e-12) and np.all(c <= ci[:, 1] + 1e-12)
    ratio = (ci[:, 1] - ci[:, 0]) / (2 * 1.96 * se)
    assert 0.7 < np.median(ratio) < 1.2, ratio
