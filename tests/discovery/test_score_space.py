"""The score space: each axis value and each preset against a hand computation."""

import math

import numpy as np
import pytest
import torch

from vheads._errors import VheadsError
from vheads.data.synthetic import strip_items
from vheads.discovery import score_settings, select_heads
from vheads.discovery._region_mass import region_masses
from vheads.discovery._score_space import (
    AXES, SCORES, PointStatistics, ScorePoint, aggregate, elbow_count, parse_score, point_statistics, score_point,
    select_point, setting_point, spatial_entropy,
)
from vheads.engine import Engine
from vheads.engine._attention import capture_rows

# one head, two query rows, five keys; keys 2 and 3 are the region, keys 1..3 the image
A = torch.tensor([[[[0.1, 0.2, 0.3, 0.1, 0.3],      # a tie: keys 2 and 4 share the max
                    [0.5, 0.1, 0.1, 0.2, 0.1]]]], dtype=torch.float64)  # [B=1, H=1, Q=2, T=5]
REGION = torch.tensor([[[False, False, True, True, False]]])  # [B, G=1, T]
IMAGE = torch.tensor([[False, True, True, True, False]])  # [B, T]


def test_mass_is_the_sum_over_region_keys_per_row():
    got = capture_rows(A, REGION)[0, 0, :, 0]
    assert got.tolist() == pytest.approx([0.3 + 0.1, 0.1 + 0.2])


def test_image_norm_renormalizes_each_row_over_image_keys():
    got = capture_rows(A, REGION, IMAGE)[0, 0, :, 0]
    assert got.tolist() == pytest.approx([0.4 / 0.6, 0.3 / 0.4])


def test_hit_takes_the_first_maximal_key_on_ties():
    got = capture_rows(A, REGION, stat="hit")[0, 0, :, 0]
    # row 0: max 0.3 at keys 2 and 4 -> key 2 (first) is in the region; row 1: argmax key 0 is not
    assert got.tolist() == [1.0, 0.0]
    later = torch.tensor([[[False, False, False, False, True]]])  # only the later tied key
    assert capture_rows(A, later, stat="hit")[0, 0, 0, 0].item() == 0.0


def test_hit_with_image_norm_takes_the_argmax_over_image_keys():
    # row 1: over image keys 1..3 the max is key 3 (0.2), inside the region
    got = capture_rows(A, REGION, IMAGE, stat="hit")[0, 0, :, 0]
    assert got.tolist() == [1.0, 1.0]


def test_elbow_is_cut_on_the_sorted_scores():
    s = np.array([[0.5, 10.0, 0.0], [9.0, 1.0, 0.4]])
    # sorted: 10, 9, 1, 0.5, 0.4, 0 -> x = i/5; y = (v - 0)/10; d = 1 - x - y
    v = [10, 9, 1, 0.5, 0.4, 0]
    d = [1 - i / 5 - v[i] / 10 for i in range(6)]
    assert elbow_count(s) == int(np.argmax(d)) == 2
    heads = select_point(s, ScorePoint(select="elbow"), k=0)
    assert heads == [(0, 1), (1, 0)]
    # cutting the unsorted flat tensor (the published bug) would keep other heads
    flat = s.ravel()
    dx = [1 - i / 5 - (flat[i] - flat.min()) / (flat.max() - flat.min()) for i in range(6)]
    unsorted = [divmod(i, 3) for i in range(int(np.argmax(dx)))]
    assert set(unsorted) != set(heads)


def test_entropy_rule_keeps_the_lowest_entropy_elbow_heads():
    s = np.array([[0.5, 10.0, 0.0], [9.0, 8.5, 0.4]])
    ent = np.array([[0.1, 0.9, 0.0], [0.2, 0.5, 0.0]])
    above = select_point(s, ScorePoint(select="elbow"), k=0)
    assert set(above) == {(0, 1), (1, 0), (1, 1)}
    got = select_point(s, ScorePoint(select="entropy"), k=2, entropy=ent)
    assert got == [(1, 0), (1, 1)]  # entropies 0.2, 0.5 beat 0.9; listed by score


def test_spatial_entropy_is_normalized_shannon_entropy():
    a = np.array([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]])
    assert spatial_entropy(a).tolist() == pytest.approx([1.0, 0.0, math.log(2) / math.log(4)])


def _stats():
    per_item = np.array([[[0.9, 0.1], [0.2, 0.3]], [[0.0, 0.5], [0.6, 0.1]], [[0.3, 0.4], [0.8, 0.2]]])  # [N=3, L=2, H=2]
    return PointStatistics(per_item, np.array([1, 3, 2]), ["a", "b", "c"])


def test_across_mean_and_pooled_hit_frequency():
    st = _stats()
    got = aggregate(st, ScorePoint(k=1), 2, (0, 1), 2)
    assert got.scores[0, 0] == pytest.approx((0.9 + 0.0 + 0.3) / 3)
    assert got.heads == [(1, 0)]  # means: 0.4, 0.333, 0.533, 0.2
    hf = aggregate(st, ScorePoint(keys="hit", across="hit-frequency", k=1), 2, (0, 1), 2)
    assert hf.scores[1, 0] == pytest.approx((1 * 0.2 + 3 * 0.6 + 2 * 0.8) / 6)


def test_across_frequency_counts_each_items_top_k():
    st = _stats()
    got = aggregate(st, ScorePoint(across="frequency", k=1), 2, (0, 1), 2)
    # per-item top-1: item a (0,0); item b (1,0); item c (1,0)
    np.testing.assert_allclose(got.scores, [[1 / 3, 0.0], [2 / 3, 0.0]])
    assert got.heads == [(1, 0)]
    per_layer = aggregate(st, ScorePoint(select="per-layer", k=1), 2, (0, 1), 2)
    assert per_layer.heads == [(1, 0), (0, 0)]


def test_a_selection_of_nothing_is_refused():
    flat = PointStatistics(np.ones((2, 2, 3)), np.array([1, 1]), ["a", "b"])
    with pytest.raises(VheadsError, match="selects no head"):
        aggregate(flat, ScorePoint(select="elbow"), 3, (0, 1), 2)


@pytest.mark.parametrize("text", ["nope", "rows=everything", "colour=red", "keys=mean,across=hit-frequency", "k=0", "k=x"])
def test_bad_points_are_refused_naming_the_value(text):
    with pytest.raises(VheadsError, match=text.split(",")[-1].split("=")[-1] if "=" in text else text):
        parse_score(text)


def test_presets_are_the_published_points():
    assert set(SCORES) >= {"gaze", "localization", "vrh", "sparsemm"}
    assert parse_score("gaze") == ScorePoint(rows="last", region="target", norm="raw", keys="mass", across="mean", select="flat")
    assert parse_score("vrh") == ScorePoint(rows="out", keys="mass", across="mean", select="flat", k=20)
    assert parse_score("sparsemm") == ScorePoint(rows="out", keys="hit", across="hit-frequency")
    assert parse_score("localization") == ScorePoint(rows="last", region="image", across="frequency", select="entropy", k=10)
    assert all(SCORES[n].point.__doc__ for n in SCORES)


def _eager(lm, prompt):
    lm.model.set_attn_implementation({n: "eager" for n in lm.model.config.sub_configs})
    try:
        with torch.no_grad():
            attn = lm.model(**prompt.inputs, output_attentions=True).attentions  # L x [1, H, T, T]
    finally:
        lm.model.set_attn_implementation({n: "sdpa" for n in lm.model.config.sub_configs})
    return torch.stack([a[0].double() for a in attn])  # [L, H, T, T]


@pytest.mark.parametrize("rows", AXES["rows"])
def test_every_axis_equals_eager_attention_by_hand(small_qwen, rows):
    lm = small_qwen
    item = strip_items("comics", "ordinal", 1, seed=3)[0]
    answer = "red disk" if rows == "out" else None
    prompt = lm.adapter.build(item, lm.processor, answer_text=answer)
    lay = prompt.layout
    A_ = _eager(lm, prompt)
    spans = {"last": lay.spans["last"], "qspan": lay.spans["query"], "out": lay.spans.get("answer", []),
             "prompt": list(range(lay.last + 1)), "image": lay.image_positions.tolist()}
    q = spans[rows]
    img = lay.image_positions.tolist()
    tgt = lay.regions[item.target].positions.tolist()
    Aq = A_[:, :, q]  # [L, H, Q, T]
    # rows with no image mass (prompt rows before the image) contribute 0 once renormalized
    img_share = torch.nan_to_num(Aq[..., img] / Aq[..., img].sum(-1, keepdim=True), nan=0.0)  # [L, H, Q, |I|]
    want = {
        ("target", "raw", "mass"): Aq[..., tgt].sum(-1).mean(-1),
        ("target", "raw", "mean"): Aq[..., tgt].sum(-1).mean(-1) / len(tgt),
        ("image", "raw", "mass"): Aq[..., img].sum(-1).mean(-1),
        ("target", "image", "mass"): img_share[..., [img.index(t) for t in tgt]].sum(-1).mean(-1),
        ("target", "raw", "hit"): torch.isin(Aq.argmax(-1), torch.tensor(tgt)).double().mean(-1),
    }
    for (region, norm, keys), w in want.items():
        point = ScorePoint(rows=rows, region=region, norm=norm, keys=keys, select="entropy")
        st = point_statistics(Engine(lm), [item], [answer], point)
        np.testing.assert_allclose(st.per_item[0], w.numpy(), atol=1e-5, err_msg=str((region, norm, keys)))
        assert st.n_rows[0] == len(q)
    p = img_share.mean(2).numpy()  # [L, H, |I|]
    p = p / p.sum(-1, keepdims=True)
    ent = -(p * np.log(np.clip(p, 1e-300, None))).sum(-1) / np.log(len(img))
    np.testing.assert_allclose(st.entropy[0], ent, atol=1e-5)


def test_the_seeds_settings_are_points_that_reproduce_todays_scores(small_qwen):
    """Each of the 12 settings' points gives today's region mass: bit for bit against today's
    capture of that source alone; to float rounding against today's run, which captures all
    three sources in one forward (more recomputed rows: other matmul shapes)."""
    lm = small_qwen
    key = {(c, q): strip_items(c, q, 2, seed=1) for c in ("comics", "photo") for q in ("ordinal", "referring")}
    today = score_settings(lm, key, progress=False, max_new_tokens=2)
    assert len(today) == 12
    for sid, sc in today.items():
        st = sc.setting
        items = key[(st.corpus, st.query)]
        point = setting_point(st, k=3)
        stats = point_statistics(Engine(lm), items, sc.answers, point)
        alone = np.stack([m[st.source] for m in region_masses(Engine(lm), items, sc.answers, (st.source,))])
        assert np.array_equal(stats.per_item, alone), sid
        np.testing.assert_allclose(stats.per_item, sc.per_item, atol=1e-6, err_msg=sid)
        res = aggregate(stats, point, lm.n_heads, tuple(lm.attention_layers), lm.n_layers)
        assert res.scores.tolist() == alone.mean(0).tolist()
        assert res.heads == [tuple(h) for h in sorted(select_heads(alone.mean(0), k=3), key=lambda lh: (-alone.mean(0)[lh], lh))]


def test_presets_score_the_tiny_model(small_qwen):
    lm = small_qwen
    items = strip_items("comics", "ordinal", 2, seed=0)
    gaze, _ = score_point(lm, items, parse_score("gaze"))
    today = score_settings(lm, {("comics", "ordinal"): items}, sources=("last",), progress=False)["cm-ord-last"]
    assert gaze.scores.tolist() == today.scores.tolist()
    vrh, _ = score_point(lm, items, parse_score("vrh"), max_new_tokens=2)
    assert len(vrh.heads) == 12  # the published top-20, capped at this model's 3 x 4 heads
    sparse, st = score_point(lm, items, parse_score("sparsemm"), max_new_tokens=2)
    hits = st.per_item * st.n_rows[:, None, None]  # hits per item: whole numbers
    np.testing.assert_allclose(hits, np.round(hits), atol=1e-9)
    np.testing.assert_allclose(sparse.scores, hits.sum(0) / st.n_rows.sum())


def test_localization_selects_per_item_then_counts_by_hand():
    """Per item: heads before the elbow of the sorted scores, of those the k of lowest entropy;
    the score is the share of items selecting a head; the head-set its flat top-k."""
    per_item = np.array([[[0.9, 0.8, 0.1, 0.0]], [[0.1, 0.7, 0.6, 0.05]]])  # [N=2, L=1, H=4]
    entropy = np.array([[[0.7, 0.2, 0.1, 0.5]], [[0.0, 0.9, 0.3, 0.0]]])
    # item a sorted: .9 .8 .1 0 -> y = v/.9; d = 1 - i/3 - y = 0, -.22, .22, 0 -> 2 heads: h0, h1
    # item b sorted: .7 .6 .1 .05 -> y = (v-.05)/.65; d = 0, -.18, .26, 0 -> 2 heads: h1, h2
    st = PointStatistics(per_item, np.array([1, 1]), ["a", "b"], entropy)
    one = aggregate(st, ScorePoint(region="image", across="frequency", select="entropy", k=1), 4, (0,), 1)
    # k=1: item a keeps h1 (entropy .2 < .7), item b keeps h2 (.3 < .9)
    np.testing.assert_array_equal(one.scores, [[0.0, 0.5, 0.5, 0.0]])
    assert one.heads == [(0, 1)]  # h1 and h2 tie at 1/2: the lower (layer, head) first
    np.testing.assert_array_equal(one.per_item, [[[0, 1, 0, 0]], [[0, 0, 1, 0]]])
    two = aggregate(st, ScorePoint(region="image", across="frequency", select="entropy", k=2), 4, (0,), 1)
    np.testing.assert_array_equal(two.scores, [[0.5, 1.0, 0.5, 0.0]])
    assert two.heads == [(0, 1), (0, 0)]


def test_per_item_shares_rank_a_half_of_the_items_as_the_point_would():
    st = _stats()  # n_rows 1, 3, 2
    hf = aggregate(st, ScorePoint(keys="hit", across="hit-frequency", k=1), 2, (0, 1), 2)
    np.testing.assert_allclose(hf.per_item.mean(0), hf.scores)
    half = [1, 2]  # pooled hits over items b and c: (3 m_b + 2 m_c) / 5
    pooled = (3 * st.per_item[1] + 2 * st.per_item[2]) / 5
    shares = hf.per_item[half].mean(0)
    assert np.argsort(shares, axis=None).tolist() == np.argsort(pooled, axis=None).tolist()
    np.testing.assert_allclose(shares / shares.sum(), pooled / pooled.sum())
    mean = aggregate(st, ScorePoint(k=1), 2, (0, 1), 2)
    np.testing.assert_array_equal(mean.per_item, st.per_item)


def test_top_k_per_layer_breaks_ties_by_head():
    s = np.array([[0.5, 0.5, 0.1], [0.2, 0.3, 0.3]])
    assert select_point(s, ScorePoint(select="per-layer"), k=1) == [(0, 0), (1, 1)]
    assert select_point(s, ScorePoint(select="per-layer"), k=2) == [(0, 0), (0, 1), (1, 1), (1, 2)]


def test_elbow_keeps_tied_top_scores_together():
    s = np.array([[0.0, 3.0, 0.0], [3.0, 0.0, 3.0]])
    # sorted 3 3 3 0 0 0: y = 1 1 1 0 0 0, d = 1 - i/5 - y = 0 -.2 -.4 .4 .2 0 -> 3 heads
    assert elbow_count(s) == 3
    assert select_point(s, ScorePoint(select="elbow"), k=0) == [(0, 1), (1, 0), (1, 2)]
