"""A head-set listed twice in a probe runs once: the values equal those of running every
listed head-set (the row-per-head-set path, tests/engine/test_engine.py), with fewer rows."""

import numpy as np
import pytest

from vheads.engine import Engine
from vheads.evaluation._probe import Action, Probe, _run_probes, run_scores
from tests.evaluation.test_cross_item import _counting, _headsets, _items


@pytest.mark.parametrize("family", ["qwen3_vl", "llava"])
def test_repeated_headsets_run_once_and_give_the_values_of_every_row(loaded, family):
    lm = loaded[family]
    eng = Engine(lm)
    a, b, c = _headsets(lm.n_layers, lm.n_heads, n=3)
    listed = [a, b, a, c, b, a]  # three distinct
    prompts = [lm.adapter.build(it, lm.processor) for it in _items()[:2]]
    probes = [Probe(pr, None) for pr in prompts] + [Probe(pr, act, listed) for pr in prompts
                                                    for act in (Action("mask", rows="all"), Action("steer", rows="last", target="left", beta=3.0))]
    calls = _counting(eng)
    got = run_scores(eng, probes)  # letter logits and log-sum-exp: every metric follows from them
    rows_distinct = sum(n for _, counts, _, _ in calls for n in counts)
    calls.clear()
    every = _run_probes(eng, probes)
    rows_every = sum(n for _, counts, _, _ in calls for n in counts)
    assert rows_distinct == 2 + 4 * 3 and rows_every == 2 + 4 * 6
    for g, e in zip(got, every):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-6)
    # copies of one head-set carry one value; different head-sets differ (not vacuous)
    masked = got[2]
    assert np.array_equal(masked[0], masked[2]) and np.array_equal(masked[0], masked[5])
    assert np.abs(masked[0] - masked[1]).max() > 1e-6
