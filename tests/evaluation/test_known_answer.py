"""Known-answer tests of the causal protocol.

Null: a head-set drawn at random is exchangeable with its layer-matched controls, so its
rank p is uniform and lands on the floor 1/(R+1) no more often than chance.
Planted: in one layer l* of the model, every head outside S has its output projection zeroed
(S = the 7 of 16 heads of l* with the most image attention; the other layers are intact).
The layer-matched S-disjoint controls are drawn from those 9 writeless heads, so hiding them
changes nothing (their NCS is exactly 0), while hiding S from the image hides it from every
head of l* that writes. l* is the layer whose full hiding costs the intact model's matched
arm the most, so S carries a real share of the image route there and must beat every control.
(Zeroing all non-S heads of *every* layer, the old construction, leaves the retrained tiny
model at chance: then NCS_S ~ -0.03.)
"""

import numpy as np
import pytest
import torch

from vheads.data.synthetic import kind_items
from vheads.engine import Engine
from vheads.evaluation import HeadSet, cers, layer_matched_controls, ncs, rank_p
from vheads.evaluation._controls import layer_matched_disjoint_controls


def test_random_head_sets_are_not_at_the_rank_p_floor_more_often_than_chance(tmp_path):
    # layers wide enough that "S excluded" barely changes the control pool (with 4 heads a
    # layer, S is the best of its layer 1 time in 4, far above 1/(R+1))
    from vheads.models import load_model
    from vheads.models.tiny_random import build_tiny_random

    eng = Engine(load_model(str(build_tiny_random("qwen3_vl", tmp_path / "m", heads=16, kv_heads=4, layers=2))))
    L, H = eng.shape
    rng = np.random.default_rng(0)
    R, n_sets = 19, 20
    headsets, groups = [], []
    for s in range(n_sets):
        S = HeadSet([(l, int(rng.integers(H))) for l in range(L)], L, H)
        draws = layer_matched_controls(S, R, seed=s)
        groups.append(len(headsets))
        headsets += [S, *draws]
    matched = kind_items("class-matched", 4, 1)
    mismatched = kind_items("class-mismatched", 4, 1)
    T = ncs(eng, matched, mismatched, headsets, batch_size=200).means()
    at_floor = sum(rank_p(T[g], T[g + 1 : g + 1 + R]).p <= 1 / (R + 1) + 1e-12 for g in groups)
    # P(Binomial(20, 0.05) >= 5) ~ 0.003
    assert at_floor <= 4, at_floor


def _planted(lm, S: HeadSet, layers=None):
    """Zero the output-projection columns of every head outside S in ``layers`` (default all;
    a copy of the model)."""
    import copy

    lm2 = copy.copy(lm)
    lm2.model = copy.deepcopy(lm.model)
    layers_ = lm2.model.model.language_model.layers
    hd = lm.head_dim
    keep = S.as_mask()
    with torch.no_grad():
        for l, layer in enumerate(layers_):
            if layers is not None and l not in layers:
                continue
            W = layer.self_attn.o_proj.weight  # [hidden, H * hd]
            for h in range(lm.n_heads):
                if not keep[l, h]:
                    W[:, h * hd : (h + 1) * hd] = 0
    return lm2


def _top_image_heads(eng, per_layer: int) -> HeadSet:
    """The heads of each layer with the most attention from the last row to the image."""
    from vheads.engine import Capture, positions_mask

    L, H = eng.shape
    mass = np.zeros((L, H))
    for it in kind_items("class-matched", 8, 5):
        pr = eng.lm.adapter.build(it, eng.lm.processor)
        T = pr.layout.n_tokens
        cap = Capture(positions_mask(T, pr.layout.spans["last"])[None], positions_mask(T, pr.layout.image_positions)[None, None])
        mass += eng.forward(pr, eng.plan(1, captures=[cap]), logits_at=[]).captures["capture"][0, :, :, 0].numpy()
    heads = [(l, int(h)) for l in range(L) for h in np.argsort(-mass[l])[:per_layer]]
    return HeadSet(heads, L, H)


def test_planted_head_set_reaches_the_rank_p_floor_and_steers(tiny):
    e0 = Engine(tiny)
    L, H = e0.shape
    matched = kind_items("class-matched", 12, 3)
    mismatched = kind_items("class-mismatched", 12, 3)
    whole = [HeadSet([(l, h) for h in range(H)], L, H) for l in range(L)]
    l_star = int(np.argmax(ncs(e0, matched, mismatched, whole, batch_size=101).detail["drop_matched"].mean(axis=1)))
    top = _top_image_heads(e0, per_layer=7).as_mask()
    S = HeadSet([(l_star, h) for h in range(H) if top[l_star, h]], L, H)
    eng = Engine(_planted(tiny, S, layers=[l_star]))
    R = 100
    controls = list(layer_matched_disjoint_controls(S, R, seed=0))  # drawn from l*'s writeless heads
    out = ncs(eng, matched, mismatched, [S, *controls], batch_size=101)
    T = out.means()
    assert T[0] > 0.02, f"hiding every writing head of layer {l_star} should cost the matched arm; NCS_S = {T[0]:.3f}"
    assert np.allclose(T[1:], 0, atol=1e-6)  # controls' heads write nothing
    assert rank_p(T[0], T[1:]).p == pytest.approx(1 / (R + 1))


def test_steering_the_heads_that_route_everything_moves_p_c_the_way_it_must(tiny):
    """Steer every head at every row onto cell c with β = 1: among image keys the model then
    reads cell c (like a one-object image) while text keys keep their logits, so P(c) must
    rise against steering onto a distractor d. (With β = 1e4 the target swamps the text
    keys too, and the model can no longer read the options: see docs/tiny_model.md.)"""
    eng = Engine(tiny)
    L, H = eng.shape
    everything = HeadSet([(l, h) for l in range(L) for h in range(H)], L, H)
    grids = kind_items("grid-neutral", 12, 4)
    out = cers(eng, grids, [everything], beta=1.0)
    assert out.means()[0] > 0.5, out.means()
    assert (out.values[0] > 0).mean() >= 0.75
