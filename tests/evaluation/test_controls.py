"""Head-sets and their controls: counts, exclusion, reproducibility, matching, fallbacks."""

import numpy as np
import pytest

from vheads.evaluation._controls import (
    CONTROLS,
    ControlRequest,
    any_layer_controls,
    any_layer_disjoint_controls,
    attention_matched_controls,
    draw_controls,
    layer_matched_controls,
    layer_matched_disjoint_controls,
    parse_control_spec,
    random_n_controls,
    sink_heads,
    text_heavy_heads,
    whole_layer_controls,
)
from vheads._headset import HeadSet, default_k

L, H = 8, 12


def random_headset(seed, k=14, n_layers=L, n_heads=H):
    rng = np.random.default_rng(seed)
    flat = rng.choice(n_layers * n_heads, size=k, replace=False)
    return HeadSet([divmod(int(i), n_heads) for i in flat], n_layers, n_heads)


def counts_of(heads, n_layers=L):
    counts = [0] * n_layers
    for layer, _ in heads:
        counts[layer] += 1
    return counts


# --- HeadSet --------------------------------------------------------------------------


def test_headset_is_sorted_and_reports_counts_and_mask():
    S = HeadSet([(3, 1), (0, 5), (3, 0)], 4, 6)
    assert S.heads == ((0, 5), (3, 0), (3, 1))
    assert S.per_layer_counts().tolist() == [1, 0, 0, 2]
    mask = S.as_mask()
    assert mask.shape == (4, 6) and mask.sum() == 3 and mask[3, 1] and not mask[1, 1]
    assert HeadSet.from_mask(mask) == S
    assert HeadSet.from_dict(S.to_dict()) == S


def test_headset_out_of_range_names_the_head_and_the_range():
    with pytest.raises(ValueError, match=r"\(4, 0\).*4 layers × 6 heads"):
        HeadSet([(4, 0)], 4, 6)
    with pytest.raises(ValueError, match=r"\(0, 6\)"):
        HeadSet([(0, 6)], 4, 6)
    with pytest.raises(ValueError, match="more than once"):
        HeadSet([(0, 1), (0, 1)], 4, 6)


def test_headset_algebra_matches_python_sets_and_refuses_other_models():
    A = HeadSet([(0, 0), (1, 2), (2, 3)], 3, 4)
    B = HeadSet([(1, 2), (2, 0)], 3, 4)
    assert set(A & B) == {(1, 2)}
    assert set(A | B) == {(0, 0), (1, 2), (2, 3), (2, 0)}
    assert set(A - B) == {(0, 0), (2, 3)}
    with pytest.raises(ValueError, match="another model|this model has"):
        A & HeadSet([(0, 0)], 3, 5)


def test_from_scores_flat_top_k_breaks_ties_by_layer_then_head():
    scores = np.array([[0.1, 0.9, 0.5], [0.9, 0.2, 0.5], [0.5, 0.0, 0.9]])
    # three 0.9s and three 0.5s: a top-4 takes all 0.9s and the first 0.5 in (layer, head) order
    assert set(HeadSet.from_scores(scores, 4)) == {(0, 1), (1, 0), (2, 2), (0, 2)}
    assert set(HeadSet.from_scores(scores, 5)) == {(0, 1), (1, 0), (2, 2), (0, 2), (1, 2)}


def test_from_scores_per_layer_takes_k_heads_from_every_layer():
    scores = np.random.default_rng(0).normal(size=(5, 7))
    S = HeadSet.from_scores(scores, 2, per_layer=True)
    assert S.per_layer_counts().tolist() == [2] * 5
    for layer in range(5):
        top = sorted(range(7), key=lambda h: -scores[layer, h])[:2]
        assert {h for (l, h) in S if l == layer} == set(top)


def test_from_scores_rejects_bad_k_and_nan():
    with pytest.raises(ValueError, match="k must be"):
        HeadSet.from_scores(np.zeros((2, 3)), 7)
    with pytest.raises(ValueError, match="k must be"):
        HeadSet.from_scores(np.zeros((2, 3)), 4, per_layer=True)
    with pytest.raises(ValueError, match="finite"):
        HeadSet.from_scores(np.array([[0.0, np.nan]]), 1)


def test_default_k_scales_the_seed_100_of_1152():
    assert default_k(36, 32) == 100
    assert default_k(72, 32) == 200
    assert default_k(2, 2) == 1  # at least one head
    assert default_k(16, 16) == round(100 * 256 / 1152)


# --- layer-matched, any-layer ---------------------------------------------------------


def test_layer_matched_draws_have_s_counts_and_are_never_s_over_many_seeds():
    overlaps = 0
    for seed in range(40):
        S = random_headset(seed)
        draws = layer_matched_controls(S, R=5, seed=seed)
        assert len(draws) == 5 and draws.fallbacks == () and draws.seed == seed
        for C in draws:
            assert counts_of(C) == counts_of(S) and C != S
            overlaps += bool(set(C) & set(S))
    assert overlaps > 0  # exchangeable draws may share heads with S


def test_disjoint_layer_matched_draws_have_s_counts_and_exclude_s_over_many_seeds():
    for seed in range(40):
        S = random_headset(seed)
        draws = layer_matched_disjoint_controls(S, R=5, seed=seed)
        assert len(draws) == 5 and draws.fallbacks == () and draws.seed == seed
        for C in draws:
            assert counts_of(C) == counts_of(S)
            assert not set(C) & set(S)


def test_same_seed_same_draws_different_seed_different_draws():
    S = random_headset(1)
    for draw in (layer_matched_controls, any_layer_controls, whole_layer_controls):
        assert draw(S, 10, 123).sets == draw(S, 10, 123).sets, draw.__name__
        assert draw(S, 10, 123).sets != draw(S, 10, 124).sets, draw.__name__


def test_draws_within_one_call_differ():
    S = random_headset(2)
    sets = layer_matched_controls(S, 20, 0).sets
    assert len(set(sets)) > 15


def test_any_layer_draws_have_s_size_and_are_never_s():
    S = random_headset(3)
    for C in any_layer_controls(S, 30, 5):
        assert len(C) == len(S) and C != S
    for C in any_layer_disjoint_controls(S, 30, 5):
        assert len(C) == len(S) and not set(C) & set(S)


def test_layer_matched_reports_fallback_when_s_saturates_a_layer():
    # layer 2 of a 5 × 4 model: S holds 3 of its 4 heads, so only 1 other head is there
    S = HeadSet([(2, 0), (2, 1), (2, 3), (0, 1)], 5, 4)
    draws = layer_matched_disjoint_controls(S, 25, 0)
    assert len(draws.fallbacks) == 1
    fb = draws.fallbacks[0]
    assert (fb.layer, fb.needed, fb.available) == (2, 3, 1)
    assert set(fb.borrowed_from) <= {1, 3}
    assert "layer 2" in str(fb)
    for C in draws:
        assert len(C) == len(S) and not set(C) & set(S)
        assert (2, 2) in C  # the one free head of layer 2 is always taken
        counts = counts_of(C, 5)
        assert counts[0] == 1 and counts[2] == 1 and counts[1] + counts[3] == 2


def test_controls_refuse_a_head_set_too_large_to_avoid():
    S = HeadSet([(layer, h) for layer in range(2) for h in range(3)], 2, 4)  # 6 of 8
    for draw in (layer_matched_disjoint_controls, any_layer_disjoint_controls):
        with pytest.raises(ValueError, match="disjoint"):
            draw(S, 3, 0)
    # the exchangeable draws need only one other head-set of S's pattern; a whole model has none
    whole = HeadSet([(layer, h) for layer in range(2) for h in range(4)], 2, 4)
    for draw in (layer_matched_controls, any_layer_controls):
        assert all(C != S for C in draw(S, 3, 0))
        with pytest.raises(ValueError, match="only head-set of its pattern"):
            draw(whole, 3, 0)


@pytest.mark.parametrize("R", [0, -2, 1.5])
def test_bad_r_is_an_error_naming_r(R):
    with pytest.raises(ValueError, match="R"):
        layer_matched_controls(random_headset(0), R, 0)


def test_seed_must_be_recordable():
    with pytest.raises(ValueError, match="seed"):
        any_layer_controls(random_headset(0), 3, None)


# --- attention-matched ----------------------------------------------------------------


@pytest.mark.parametrize("which", ["top-k by mass", "random"])
def test_attention_matched_is_closer_to_s_in_image_mass_than_layer_matched(which):
    rng = np.random.default_rng(0)
    n_layers, n_heads = 12, 16
    mass = rng.beta(0.7, 3.0, size=(n_layers, n_heads))  # a few image-heavy heads per layer
    if which == "top-k by mass":  # like a discovered set: the image-heaviest heads
        S = HeadSet.from_scores(mass, 20)
    else:
        S = random_headset(3, k=20, n_layers=n_layers, n_heads=n_heads)

    def mean_mass(hs):
        return float(np.mean([mass[l, h] for l, h in hs]))

    m_s = mean_mass(S)
    att = attention_matched_controls(S, mass, 50, seed=1)
    lay = layer_matched_controls(S, 50, seed=1)
    gap_att = float(np.mean([abs(mean_mass(C) - m_s) for C in att]))
    gap_lay = float(np.mean([abs(mean_mass(C) - m_s) for C in lay]))
    msg = (
        f"S = {which}: mean image mass S {m_s:.3f}, "
        f"attention-matched {np.mean([mean_mass(C) for C in att]):.3f} (mean |gap| {gap_att:.3f}), "
        f"layer-matched {np.mean([mean_mass(C) for C in lay]):.3f} (mean |gap| {gap_lay:.3f})"
    )
    print(msg)
    assert gap_att < gap_lay, msg
    for C in att:
        assert counts_of(C, n_layers) == counts_of(S, n_layers), msg
        assert not set(C) & set(S)
    assert len(set(att.sets)) > 1  # draws vary


def test_attention_matched_falls_back_and_reports_it():
    mass = np.arange(20, dtype=float).reshape(5, 4)
    S = HeadSet([(1, 0), (1, 1), (1, 2), (1, 3)], 5, 4)  # all of layer 1
    draws = attention_matched_controls(S, mass, 10, seed=0)
    assert [(f.layer, f.needed, f.available) for f in draws.fallbacks] == [(1, 4, 0)]
    for C in draws:
        assert len(C) == 4 and not set(C) & set(S)


def test_attention_matched_needs_an_image_mass_of_the_models_shape():
    S = random_headset(0)
    with pytest.raises(ValueError, match="shape"):
        attention_matched_controls(S, np.zeros((L, H + 1)), 3, 0)
    with pytest.raises(ValueError, match="image_mass"):
        draw_controls("attention-matched", S, 3, 0)


# --- whole layers, random-n, sinks, text-heavy ----------------------------------------


def test_whole_layer_draws_are_whole_layers_of_about_s_size():
    S = HeadSet.from_scores(np.random.default_rng(0).normal(size=(36, 32)), 100)
    draws = whole_layer_controls(S, 10, 0)
    for C in draws:
        assert len(C) == 96  # round(100 / 32) = 3 layers
        counts = counts_of(C, 36)
        assert sorted(set(counts)) == [0, 32]
    assert "3 whole layers" in draws.notes[0]


def test_random_n_draws_n_distinct_heads():
    draws = random_n_controls(7, 12, 0, L, H)
    assert all(len(C) == 7 for C in draws)
    with pytest.raises(ValueError, match="n must be"):
        random_n_controls(L * H + 1, 2, 0, L, H)


def test_sinks_and_text_heavy_take_extremes_outside_the_exclusion():
    rng = np.random.default_rng(5)
    sink = rng.random((L, H))
    image = rng.random((L, H))
    S = random_headset(0, k=5)
    flat = [(l, h) for l in range(L) for h in range(H) if (l, h) not in set(S)]
    top_sink = sorted(flat, key=lambda lh: -sink[lh])[:5]
    least_image = sorted(flat, key=lambda lh: image[lh])[:5]
    assert set(sink_heads(sink, 5, exclude=S)) == set(top_sink)
    assert set(text_heavy_heads(image, 5, exclude=S)) == set(least_image)


# --- registry and spec ----------------------------------------------------------------


def test_every_registered_control_draws_for_a_head_set():
    S = random_headset(4)
    rng = np.random.default_rng(0)
    inputs = {"image_mass": rng.random((L, H)), "sink_mass": rng.random((L, H))}
    for name, control in CONTROLS.items():
        R = 4 if control.random else 1
        draws = draw_controls(name, S, R, 0, **inputs)
        # a pool of at most 2R (whole-layers: C(8, 1) = 8 choices of one layer) is compared whole
        assert len(draws) == (draws.pool if draws.mode == "exact" else R), name
        assert len(set(draws)) == len(draws), name
        assert all(C.n_layers == L and C.n_heads == H for C in draws), name


def test_deterministic_controls_refuse_r_above_one():
    S = random_headset(4)
    with pytest.raises(ValueError, match="deterministic"):
        draw_controls("sinks", S, 5, 0, sink_mass=np.ones((L, H)))


def test_parse_control_spec_reads_names_and_r():
    assert parse_control_spec("layer-matched:100, any-layer:50,sinks") == [
        ControlRequest("layer-matched", 100),
        ControlRequest("any-layer", 50),
        ControlRequest("sinks", 1),
    ]
    assert parse_control_spec("layer+attention-matched:20") == [ControlRequest("attention-matched", 20)]


@pytest.mark.parametrize(
    "spec, message",
    [
        ("layer-matched:0", "at least 1"),
        ("any-layer:-3", "at least 1"),
        ("layer-matched:ten", "integer"),
        ("layer-matchd:10", "unknown control 'layer-matchd'.*did you mean"),
        ("sinks:5", "deterministic"),
        ("any-layer:5,any-layer:6", "twice"),
        ("any-layer:5,", "empty entry"),
        ("", "empty control spec"),
    ],
)
def test_parse_control_spec_errors_name_the_problem(spec, message):
    with pytest.raises(ValueError, match=message):
        parse_control_spec(spec)


def test_the_common_any_layer_stream_is_uniform_over_the_heads_outside_s():
    """``common=True`` draws over all heads and skips draws touching S: each draw must still be
    a uniform |S|-subset of the heads outside S (chi-square against the enumerated pool)."""
    from itertools import combinations

    from scipy.stats import chisquare

    from vheads.evaluation._controls import _any_layer_stream

    S = HeadSet([(0, 1), (1, 2)], 2, 4)
    outside = [(x, h) for x in range(2) for h in range(4) if (x, h) not in S.heads]
    pool = {c: 0 for c in combinations(outside, 2)}  # C(6, 2) = 15 head-sets
    stream = _any_layer_stream(S, np.random.default_rng(3), common=True)
    n = 15_000
    for _ in range(n):
        pool[tuple(next(stream).heads)] += 1
    assert sum(pool.values()) == n  # every draw misses S
    assert chisquare(list(pool.values())).pvalue > 1e-3
    # and the plain stream (heads outside S only) agrees with it in distribution
    plain = _any_layer_stream(S, np.random.default_rng(4))
    counts = {c: 0 for c in pool}
    for _ in range(n):
        counts[tuple(next(plain).heads)] += 1
    assert chisquare(list(counts.values())).pvalue > 1e-3


def test_draw_controls_common_any_layer_gives_distinct_head_sets_outside_s():
    S = random_headset(1, k=5)
    d = draw_controls("any-layer-disjoint", S, 40, 9, common=True)
    assert len(d) == len(set(d)) == 40 and d.mode == "sampled"
    assert all(len(x) == 5 and not set(x.heads) & set(S.heads) for x in d)
