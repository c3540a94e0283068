"""Attribution patching: the gradient, the ablation it linearises, and its agreement with the exact map."""

import copy

import numpy as np
import pytest
import torch

from vheads.causal._atp import AtpMap, atp_map, estimate_drops, exact_map, metric_of_scores, scaled_ablation
from vheads.causal._compare import compare_maps
from vheads.data import OPTION_LETTERS
from vheads.data.synthetic import kind_items
from vheads.engine import Engine
from vheads.evaluation import Action, HeadSet, letter_metric
from vheads.evaluation._probe import Probe, run_scores

from tests.conftest import family_params



@pytest.fixture(scope="module")
def tiny64(tiny):
    """The tiny model in float64 (finite differences need the precision)."""
    lm = copy.copy(tiny)
    lm.model = copy.deepcopy(tiny.model).double()
    return Engine(lm)


def _ncs_sets(n: int, seed: int = 3) -> dict:
    return {"class-matched": kind_items("class-matched", n, seed), "class-mismatched": kind_items("class-mismatched", n, seed)}


def _prompt(eng, item):
    return eng.lm.adapter.build(item, eng.lm.processor), OPTION_LETTERS.index(item.answer)


def _least_sure(eng, items):
    """(prompt, letter) of the item whose baseline P(key) is nearest 1/2 (largest P·(1 − P))."""
    prompts = [_prompt(eng, it) for it in items]
    base = run_scores(eng, [Probe(pr, None) for pr, _ in prompts])
    p = [float(letter_metric(b, letter)[0]) for b, (_, letter) in zip(base, prompts)]
    return prompts[int(np.argmax([q * (1 - q) for q in p]))]


def _one_hot(L, H, heads, scale=1.0, dtype=torch.float64):
    """α [len(heads), L, H]: row j is ``scale`` at heads[j]."""
    a = torch.zeros(len(heads), L, H, dtype=dtype)
    for j, (l, h) in enumerate(heads):
        a[j, l, h] = scale
    return a


@pytest.mark.parametrize("metric", ["p4", "logprob", "logit-diff"])
def test_torch_metric_equals_the_evaluations_letter_metric(metric):
    scores = torch.randn(7, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    scores[:, 4] = torch.logsumexp(scores[:, :4], -1) + 1.0
    letters = torch.tensor([0, 1, 2, 3, 0, 1, 2])
    got = metric_of_scores(scores, letters, metric).numpy()
    want = np.array([letter_metric(s, int(k), metric) for s, k in zip(scores.numpy(), letters)])
    assert np.allclose(got, want, atol=1e-12)


@pytest.mark.parametrize("ablation,metric", [("attention", "p4"), ("zero", "p4"), ("attention", "logit-diff")])
def test_gradient_equals_a_central_finite_difference(tiny64, ablation, metric):
    """∂m/∂α_h from the backward equals (m(+ε e_h) − m(−ε e_h)) / 2ε for every head. The
    model runs in float64 but its RMS norms compute in float32, so the metric is resolved to
    ~1e-7 and ε = 1e-3 balances that rounding (~1e-4 / ε) against the O(ε²) truncation.
    The item is the one of both NCS arms the model is least sure of at baseline (largest
    P(key)·(1 − P(key)), from a plain forward): a saturated P(key) has a p4 gradient of
    ~P(1 − P) ≈ 1e-5, too small to tell a right gradient from a wrong one."""
    eng = tiny64
    L, H = eng.shape
    heads = [(l, h) for l in range(L) for h in range(H)]
    pr, letter = _least_sure(eng, [*kind_items("class-matched", 4, 5), *kind_items("class-mismatched", 4, 5)])
    alpha = torch.zeros(1, L, H, dtype=torch.float64, requires_grad=True)
    _, grad = scaled_ablation(eng, [pr], [letter], alpha, ablation=ablation, metric=metric)
    eps = 1e-3
    plus, _ = scaled_ablation(eng, [pr] * len(heads), [letter] * len(heads), _one_hot(L, H, heads, eps), ablation=ablation, metric=metric)
    minus, _ = scaled_ablation(eng, [pr] * len(heads), [letter] * len(heads), _one_hot(L, H, heads, -eps), ablation=ablation, metric=metric)
    fd = ((plus - minus) / (2 * eps)).numpy()
    g = grad[0].numpy()[tuple(np.array(heads).T)]
    assert np.abs(g).max() > 1e-2  # not vacuous: heads move the metric
    assert np.allclose(g, fd, rtol=1e-2, atol=2e-4), np.abs(g - fd).max()


@pytest.mark.parametrize("rows,keys", [("all", "image"), ("question", "image"), ("image", "image"), ("all", "text")])
def test_unit_alpha_is_the_evaluations_one_head_mask(tiny, rows, keys):
    """α = e_h gives exactly the metric of the engine's mask of h alone (α = 0: the baseline)."""
    eng = Engine(tiny)
    L, H = eng.shape
    heads = [(l, h) for l in range(L) for h in range(H)]
    pr, letter = _prompt(eng, kind_items("class-matched", 1, 6)[0])
    got, _ = scaled_ablation(eng, [pr] * (len(heads) + 1), [letter] * (len(heads) + 1),
                             torch.cat([torch.zeros(1, L, H, dtype=torch.float64), _one_hot(L, H, heads)]), keys=keys, rows=rows)
    base, masked = run_scores(eng, [Probe(pr, None), Probe(pr, Action("mask", rows=rows, keys=keys), [HeadSet([lh], L, H) for lh in heads])])
    want = np.concatenate([letter_metric(base, letter), letter_metric(masked, letter)])
    assert np.abs(got.numpy() - want).max() <= 1e-5


def test_unit_alpha_zero_ablation_equals_zeroing_the_heads_o_proj_input(tiny):
    """Reference: a pre-hook on o_proj that zeroes head h's slice at every row, plain model."""
    eng = Engine(tiny)
    L, H = eng.shape
    D = tiny.head_dim
    pr, letter = _prompt(eng, kind_items("class-mismatched", 1, 2)[0])
    ids = tiny.adapter.letter_token_ids(tiny.processor)
    layers = tiny.model.model.language_model.layers
    for l, h in [(0, 7), (1, 2), (3, 5)]:
        def zero_slice(module, args, h=h):
            x = args[0].clone()
            x[..., h * D : (h + 1) * D] = 0
            return (x,)

        handle = layers[l].self_attn.o_proj.register_forward_pre_hook(zero_slice)
        try:
            with torch.no_grad():
                logits = tiny.model(**pr.inputs, logits_to_keep=1).logits[0, -1]
        finally:
            handle.remove()
        want = torch.softmax(logits[ids].double(), -1)[letter].item()
        got, _ = scaled_ablation(eng, [pr], [letter], _one_hot(L, H, [(l, h)]), ablation="zero")
        assert got.item() == pytest.approx(want, abs=1e-5)


def test_checkpointing_and_batching_leave_the_estimates_unchanged(tiny):
    eng = Engine(tiny)
    # both NCS arms: the model is all but certain on the matched arm (P(key) ≈ 1 - 1e-5, its
    # p4 drops ~1e-6), the mismatched arm's key is at chance, so its drops show a change
    items = [*kind_items("class-matched", 2, 7), *kind_items("class-mismatched", 2, 7)]
    prompts = [eng.lm.adapter.build(it, eng.lm.processor) for it in items]
    letters = [OPTION_LETTERS.index(it.answer) for it in items]
    b1, d1 = estimate_drops(eng, prompts, letters, batch_size=1, checkpoint=False)
    b4, d4 = estimate_drops(eng, prompts, letters, batch_size=4, checkpoint=True)
    assert np.abs(b1 - b4).max() <= 1e-6
    assert np.abs(d1 - d4).max() <= 1e-6
    assert np.abs(d1).max() > 1e-3


def test_agreement_with_the_exact_one_head_map_on_the_tiny_model(tiny, capsys):
    """Prints Spearman ρ and top-5 recall of the AtP* map against the exact map (one-head
    sets through the evaluation), and the items where they disagree most."""
    eng = Engine(tiny)
    sets = _ncs_sets(6)
    atp = atp_map(eng, sets)
    exact, arms = exact_map(eng, sets)
    res = compare_maps(exact, atp.map(), k=5, exact_items=arms["matched"], approx_items=atp.arms["matched"].drops,
                       item_ids=atp.arms["matched"].item_ids)
    with capsys.disabled():
        print(f"\n[AtP* vs exact NCS map, tiny model, 6+6 items] Spearman rho = {res['spearman']:.3f}, "
              f"top-5 recall = {res['top_k_recall']:.2f}; most different heads: "
              + ", ".join(f"{tuple(d['head'])} exact {d['exact']:+.3f} AtP {d['approx']:+.3f}" for d in res["heads"][:3])
              + "; lowest per-item rho (matched arm): " + ", ".join(f"{d['item']} {d['spearman']:.2f}" for d in res["items"][:3]))
    # both maps come from the same arms' drops: the map is the mean of the stored per-item values
    assert np.allclose(atp.map(), atp.per_item().mean(0))
    assert np.allclose(exact, arms["matched"].mean(0) - arms["mismatched"].mean(0), atol=1e-9)
    # the clean metric AtP linearises around is the evaluation's baseline
    base = run_scores(eng, [Probe(_prompt(eng, it)[0], None) for it in sets["class-matched"]])
    assert np.allclose(atp.arms["matched"].base, [letter_metric(b[0], OPTION_LETTERS.index(it.answer)) for b, it in zip(base, sets["class-matched"])], atol=1e-5)
    assert np.isfinite(res["spearman"])


def test_planted_route_heads_rank_at_the_top_of_both_maps(tiny):
    """Known answer: with every head outside S writing nothing (its o_proj columns zeroed),
    a head outside S has no effect at all, and both maps must put S's heads first by size."""
    from tests.evaluation.test_known_answer import _planted, _top_image_heads

    S = _top_image_heads(Engine(tiny), per_layer=2)
    eng = Engine(_planted(tiny, S))
    L, H = eng.shape
    sets = _ncs_sets(4)
    in_s = S.as_mask()
    for name, m in (("atp", atp_map(eng, sets).map()), ("atp-zero", atp_map(eng, sets, ablation="zero").map()), ("exact", exact_map(eng, sets)[0])):
        size = np.abs(m)
        top = set(zip(*np.unravel_index(np.argsort(-size, axis=None, kind="stable")[: in_s.sum()], (L, H))))
        assert top == set(S.heads), (name, np.round(m, 4))
        assert size[in_s].min() > 100 * size[~in_s].max(), name


def test_linear_attention_layers_of_a_hybrid_model_have_no_estimate(loaded):
    """Qwen3.5 (tiny random): the Gated DeltaNet layers have no heads, so their entries are
    0, and a softmax layer's head at α = 1 is the engine's one-head mask."""
    lm = loaded["qwen3_5"]
    eng = Engine(lm)
    L, H = eng.shape
    linear = [l for l in range(L) if l not in lm.attention_layers]
    assert linear
    atp = atp_map(eng, _ncs_sets(2))
    assert atp.attention_layers == tuple(lm.attention_layers)
    for arm in atp.arms.values():
        assert np.all(arm.drops[:, linear] == 0)
        assert np.abs(arm.drops[:, list(lm.attention_layers)]).max() > 0
    heads = [(l, h) for l in lm.attention_layers for h in range(H)]
    pr, letter = _prompt(eng, kind_items("class-matched", 1, 1)[0])
    got, _ = scaled_ablation(eng, [pr] * len(heads), [letter] * len(heads), _one_hot(L, H, heads))
    masked = run_scores(eng, [Probe(pr, Action("mask", rows="all", keys="image"), [HeadSet([lh], L, H, lm.attention_layers) for lh in heads])])[0]
    assert np.abs(got.numpy() - letter_metric(masked, letter)).max() <= 1e-5


@pytest.mark.parametrize("family", family_params())
def test_every_family_unit_alpha_is_the_engines_one_head_mask_and_agreement_is_printed(loaded, family, capsys):
    """On each tiny random family (its own masks: sliding windows, bidirectional image blocks,
    tiles, hybrid layers), Δ is the engine's mask exactly; ρ and top-5 recall of AtP* against
    the exact map are printed (random weights: no claim on their size)."""
    lm = loaded[family]
    eng = Engine(lm)
    L, H = eng.shape
    heads = [(l, h) for l in lm.attention_layers for h in range(H)]
    pr, letter = _prompt(eng, kind_items("class-matched", 1, 6)[0])
    got, _ = scaled_ablation(eng, [pr] * len(heads), [letter] * len(heads), _one_hot(L, H, heads))
    masked = run_scores(eng, [Probe(pr, Action("mask", rows="all", keys="image"), [HeadSet([lh], L, H, lm.attention_layers) for lh in heads])])[0]
    assert np.abs(got.numpy() - letter_metric(masked, letter)).max() <= 1e-5
    sets = _ncs_sets(2, seed=1)
    valid = np.zeros((L, H), dtype=bool)
    valid[list(lm.attention_layers)] = True
    res = compare_maps(exact_map(eng, sets)[0], atp_map(eng, sets).map(), k=5, valid=valid)
    with capsys.disabled():
        print(f"\n[AtP* vs exact NCS map, random {family}, 2+2 items] rho = {res['spearman']:.3f}, top-5 recall = {res['top_k_recall']:.2f}")


def test_the_text_arm_map_is_the_mean_estimated_drop_of_hiding_the_question(tiny):
    eng = Engine(tiny)
    items = kind_items("text", 3, 0)
    atp = atp_map(eng, {"text": items}, test="text", rows="question")
    assert (list(atp.arms), atp.rows) == (["text"], "all")  # the text arm hides the question at all rows, as text_arm does
    prompts = [eng.lm.adapter.build(it, eng.lm.processor) for it in items]
    _, drops = estimate_drops(eng, prompts, [OPTION_LETTERS.index(it.answer) for it in items], keys="text", rows="all")
    assert np.allclose(atp.map(), drops.mean(0), atol=1e-9)
    assert np.abs(atp.map()).max() > 0


def test_compare_maps_against_a_hand_computation():
    exact = np.arange(12, dtype=float).reshape(3, 4)  # head (l, h) has rank 12 − (4l + h)
    approx = exact.copy()
    approx[2, 3], approx[0, 0] = approx[0, 0], approx[2, 3]  # the best and the worst head swap
    res = compare_maps(exact, approx, k=3)
    n, d2 = 12, 2 * 11**2
    assert res["spearman"] == pytest.approx(1 - 6 * d2 / (n * (n * n - 1)))
    assert res["top_k_recall"] == pytest.approx(2 / 3)  # top-3 exact {11, 10, 9}; approx {10, 9, (0, 0)}
    assert {tuple(h["head"]) for h in res["heads"][:2]} == {(0, 0), (2, 3)}
    valid = np.ones((3, 4), dtype=bool)
    valid[0, 0] = valid[2, 3] = False
    assert compare_maps(exact, approx, k=3, valid=valid)["spearman"] == pytest.approx(1.0)
    items_e = np.stack([exact, exact])
    items_a = np.stack([exact, -exact])
    res = compare_maps(exact, approx, k=3, exact_items=items_e, approx_items=items_a, item_ids=["a", "b"])
    assert [d["item"] for d in res["items"]] == ["b", "a"]
    assert res["items"][0]["spearman"] == pytest.approx(-1.0)


def test_a_saved_map_loads_and_its_map_is_recomputed_from_the_arms(tiny, tmp_path):
    atp = atp_map(Engine(tiny), _ncs_sets(3), rows="question", metric="logprob")
    back = AtpMap.load(atp.save(tmp_path / "atp.npz"))
    assert (back.test, back.ablation, back.rows, back.metric) == ("ncs", "attention", "question", "logprob")
    assert back.arms["matched"].item_ids == atp.arms["matched"].item_ids
    m, mm = back.arms["matched"].drops, back.arms["mismatched"].drops
    assert np.array_equal(back.map(), m.mean(0) - mm.mean(0))
    assert np.array_equal(back.map(), atp.map())


@pytest.mark.parametrize("kwargs,word", [({"test": "cers"}, "test"), ({"ablation": "mean"}, "ablation"),
                                         ({"rows": "some"}, "rows"), ({"metric": "p2"}, "metric"), ({"batch_size": 0}, "batch_size")])
def test_a_bad_request_is_refused_before_any_forward(kwargs, word):
    with pytest.raises(ValueError, match=word):
        atp_map(object(), {}, **kwargs)  # no engine is touched


def test_missing_item_kinds_are_named():
    with pytest.raises(ValueError, match="class-mismatched"):
        atp_map(object(), {"class-matched": kind_items("class-matched", 2, 0)})
