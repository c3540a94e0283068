"""Properties of the causal tests that follow from DESIGN.md's definitions alone."""

import numpy as np
import pytest
from PIL import Image

from vheads.data import Item
from vheads.engine import Engine
from vheads.evaluation._headsets import HeadSet
from vheads.evaluation._metrics import baseline_audit, cers, ncs, ncs_grid
from vheads.evaluation._probe import Action, option_probs

OPTS = ("red", "blue", "green", "white")


def _grid(seed, cells=("red", "blue", "green", "white")):
    rng = np.random.default_rng(seed)
    img = Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8))
    regions = {f"cell{r * 2 + c}": (c * 32, r * 32, (c + 1) * 32, (r + 1) * 32) for r in range(2) for c in range(2)}
    return Item(f"g{seed}", "grid-neutral", img, "which object is shown ?", "A", regions, "cell0", OPTS, meta={"cells": list(cells)})


@pytest.fixture(scope="module")
def engine(loaded):
    return Engine(loaded["qwen3_vl"])


def _all_heads(engine):
    L, H = engine.shape
    return HeadSet([(l, h) for l in range(L) for h in range(H)], L, H)


def test_masking_every_head_from_the_image_makes_the_answer_blind_to_it(engine):
    a, b = _grid(1), _grid(2)
    hs = [_all_heads(engine)]
    pa = option_probs(engine, engine.lm.adapter.build(a, engine.lm.processor), hs, Action("mask", rows="all"))
    pb = option_probs(engine, engine.lm.adapter.build(b, engine.lm.processor), hs, Action("mask", rows="all"))
    np.testing.assert_allclose(pa, pb, atol=1e-6)
    base_a = option_probs(engine, engine.lm.adapter.build(a, engine.lm.processor), [], None)
    base_b = option_probs(engine, engine.lm.adapter.build(b, engine.lm.processor), [], None)
    assert np.abs(base_a - base_b).max() > 1e-6  # without the mask the image matters


def test_empty_head_set_has_zero_effect_on_every_test(engine):
    L, H = engine.shape
    empty = [HeadSet([], L, H)]
    items = [_grid(s) for s in range(3)]
    assert np.allclose(cers(engine, items, empty).values, 0, atol=1e-6)
    matched = [Item(f"m{s}", "class-matched", _grid(s).image, "which object is shown ?", "B", options=OPTS) for s in range(2)]
    assert np.allclose(ncs(engine, matched, matched, empty).values, 0, atol=1e-6)
    oracle = [_grid(s) for s in range(2)]
    assert np.allclose(ncs_grid(engine, oracle, empty).values, 0, atol=1e-6)


def test_cers_equals_its_definition_from_separate_runs(engine):
    items = [_grid(s) for s in range(2)]
    L, H = engine.shape
    hs = [HeadSet([(0, 1), (1, 0)], L, H), _all_heads(engine)]
    out = cers(engine, items, hs, beta=5.0, seed=0)
    from vheads.evaluation._metrics import distractor_cell

    for i, it in enumerate(items):
        pr = engine.lm.adapter.build(it, engine.lm.processor)
        d = distractor_cell(it, 0)
        lc = OPTS.index(it.meta["cells"][0])
        for j, h in enumerate(hs):
            pc = option_probs(engine, pr, [h], Action("steer", target="cell0", beta=5.0), prefix_reuse=False)[0, lc]
            pd = option_probs(engine, pr, [h], Action("steer", target=d, beta=5.0), prefix_reuse=False)[0, lc]
            assert out.values[j, i] == pytest.approx(pc - pd, abs=1e-6)


def test_items_without_four_options_are_refused_before_any_work(engine):
    bad = Item("b", "grid-neutral", _grid(0).image, "q ?", "A", options=("x", "y", "z"))
    with pytest.raises(ValueError, match="has 3 options"):
        cers(engine, [bad], [_all_heads(engine)])
    with pytest.raises(ValueError, match="must be finite"):
        cers(engine, [_grid(0)], [_all_heads(engine)], beta=float("nan"))


def test_audit_flags_values_outside_their_expected_range(engine):
    rep = baseline_audit(engine, {"oracle": [_grid(0)], "floor": [_grid(1)]})
    for name, r in rep.items():
        lo, hi = r["expected"]
        assert r["ok"] == (lo <= r["mean_p_key"] <= hi)
