"""Properties of the causal tests that follow from DESIGN.md's definitions alone."""

import numpy as np
import pytest
from PIL import Image

from vheads.data import Item
from vheads.engine import Engine
from vheads._headset import HeadSet
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


# --- the three metrics of an outcome ---------------------------------------------------------


def test_three_metrics_on_a_hand_built_logit_vector_equal_a_hand_computation():
    import math
    from types import SimpleNamespace

    import torch

    from vheads.evaluation import METRICS, letter_metric

    logits = [0.3, -1.2, 2.0, 1.1, 0.0, -0.4, 3.3, 0.7, -2.5, 1.9]  # a vocabulary of 10 tokens
    ids = [3, 6, 1, 9]  # the letters A, B, C, D
    fake = SimpleNamespace(lm=SimpleNamespace(adapter=SimpleNamespace(letter_token_ids=lambda processor: ids), processor=None))
    scores = Engine.letter_scores(fake, torch.tensor([logits]))[0].numpy()  # [5]
    z = [logits[i] for i in ids]
    lse = math.log(sum(math.exp(v) for v in logits))
    for k in range(4):
        want = {"p4": math.exp(z[k]) / sum(math.exp(v) for v in z),
                "logprob": z[k] - lse,
                "logit-diff": z[k] - sum(v for j, v in enumerate(z) if j != k) / 3}
        for m in METRICS:
            assert float(letter_metric(scores, k, m)) == pytest.approx(want[m], abs=1e-6), m
    with pytest.raises(ValueError, match="unknown metric"):
        letter_metric(scores, 0, "logits")


def test_logprob_is_log_softmax_over_the_full_vocabulary_of_the_plain_model(engine):
    """The engine's letter scores at a baseline row: log P(letter) over every token of the
    vocabulary equals log_softmax of the plain model's last-position logits."""
    import torch

    from vheads.evaluation import letter_metric
    from vheads.evaluation._probe import Probe, run_scores

    lm = engine.lm
    pr = lm.adapter.build(_grid(3), lm.processor)
    with torch.no_grad():
        plain = lm.model(**pr.inputs).logits[0, -1].double()  # [V]
    want = torch.log_softmax(plain, dim=-1)[lm.adapter.letter_token_ids(lm.processor)].numpy()
    (sc,) = run_scores(engine, [Probe(pr, None)])
    for k in range(4):
        assert float(letter_metric(sc[0], k, "logprob")) == pytest.approx(float(want[k]), abs=1e-4)


def test_ncs_arms_under_each_metric_equal_their_definition_from_separate_runs(engine):
    """drop = metric_base(key) − metric_masked(key) in every metric, from one run per row."""
    from vheads.evaluation import METRICS, letter_metric
    from vheads.evaluation._probe import Probe, run_scores

    L, H = engine.shape
    hs = [HeadSet([(0, 0), (1, 1)], L, H), _all_heads(engine)]
    matched = [Item(f"m{s}", "class-matched", _grid(s).image, "which object is shown ?", "B", options=OPTS) for s in range(2)]
    out = ncs(engine, matched, matched[:1], hs)
    for m in METRICS:
        got = out.under(m)
        for i, it in enumerate(matched):
            pr = engine.lm.adapter.build(it, engine.lm.processor)
            (base,) = run_scores(engine, [Probe(pr, None)])
            for j, h in enumerate(hs):
                (masked,) = run_scores(engine, [Probe(pr, Action("mask", rows="all"), [h])], prefix_reuse=False)
                want = letter_metric(base[0], 1, m) - letter_metric(masked[0], 1, m)
                assert got.detail["drop_matched"][j, i] == pytest.approx(float(want), abs=1e-5)
        assert np.allclose(got.values, got.detail["drop_matched"] - got.detail["drop_mismatched"].mean(axis=1, keepdims=True))
    assert not np.allclose(out.under("logprob").values, out.values)  # the metrics differ (not vacuous)
