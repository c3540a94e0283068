"""The exact causal map: each entry is the one-head test of that head, batching changes
nothing, singleton sets share the layers below their head, and on a model whose only
image route is a few planted heads those heads lead the map."""

import copy

import numpy as np
import pytest
import torch

from vheads.causal import CausalMap, causal_units, exact_causal_map, head_id, layer_id, load_causal_map, save_causal_map
from vheads.data.synthetic import kind_items
from vheads.engine import Batching, Engine
from vheads.engine._layers import distinct_rows
from vheads.evaluation import HeadSet, ncs, ncs_grid, text_arm
from vheads.evaluation._probe import Action, Probe, probe_batch

TESTS = ("ncs", "ncs-grid", "text")



def _sets(n=3, seed=1):
    return {"class-matched": kind_items("class-matched", n, seed), "class-mismatched": kind_items("class-mismatched", n, seed),
            "grid-oracle": kind_items("grid-oracle", n, seed), "text": kind_items("text", n, seed)}


@pytest.fixture(scope="module")
def scanned(tiny):
    sets = _sets()
    return sets, exact_causal_map(Engine(tiny), sets, TESTS, batch_size=64)


def test_each_entry_equals_a_separate_one_head_run_of_that_head(tiny, scanned):
    sets, maps = scanned
    eng = Engine(tiny)
    L, H = eng.shape
    for l, h in [(0, 0), (1, 6), (3, 7)]:
        S = [HeadSet([(l, h)], L, H)]
        out = ncs(eng, sets["class-matched"], sets["class-mismatched"], S, batch_size=1)
        ref = out.detail["drop_matched"][0].mean() - out.detail["drop_mismatched"][0].mean()
        assert abs(maps["ncs-all"].head_map()[l, h] - ref) <= 1e-5
        grid = ncs_grid(eng, sets["grid-oracle"], S, batch_size=1).values[0].mean()
        assert abs(maps["ncs-grid"].head_map()[l, h] - grid) <= 1e-5
        text = text_arm(eng, sets["text"], S, batch_size=1).values[0].mean()
        assert abs(maps["text"].head_map()[l, h] - text) <= 1e-5
    whole = HeadSet([(2, h) for h in range(H)], L, H)
    out = ncs(eng, sets["class-matched"], sets["class-mismatched"], [whole], batch_size=1)
    assert abs(maps["ncs-all"].layer_effects()[2] - out.means()[0]) <= 1e-5  # values: matched drops − mismatched mean


def test_the_batched_scan_equals_one_forward_per_head_set(tiny, scanned):
    sets, batched = scanned
    alone = Engine(tiny, Batching(cross_item=False, share_layers=False, max_rows=1))
    single = exact_causal_map(alone, sets, TESTS, batch_size=1)
    assert set(single) == set(batched)
    for key, m in batched.items():
        assert single[key].unit_ids == m.unit_ids and single[key].item_ids == m.item_ids
        for metric, arms in m.per_item.items():
            for arm, v in arms.items():
                # p4 to 1e-5; logprob and logit-diff are fp32 logits of size ~10 (their last bits ~1e-6 each)
                tol = 1e-5 if metric == "p4" else 1e-4
                np.testing.assert_allclose(v, single[key].per_item[metric][arm], atol=tol, rtol=0, err_msg=f"{key} {metric} {arm}")


def test_a_single_head_at_layer_l_shares_every_layer_below_l(tiny):
    """In one item's forward of every one-head and whole-layer set plus the baseline, layer l
    runs once per set with a head in layers 0 … l, and once for all the others (they act on
    nothing up to l, like the baseline)."""
    eng = Engine(tiny)
    L, H = eng.shape
    ids, hsets = causal_units(L, H)
    pr = tiny.adapter.build(kind_items("class-matched", 1, 2)[0], tiny.processor)
    probes = [Probe(pr, None), Probe(pr, Action("mask", rows="all", keys="image"), hsets)]
    batch, plan = probe_batch(eng, probes, [(0, 0, 1), (1, 0, len(hsets))])
    assert batch.prefix == 0  # hiding the image at every row leaves no prefix: a full forward, where sharing applies
    items = batch.row_items()
    for layer in range(L):
        acting = sum(1 for hs in hsets if min(l for l, _ in hs) <= layer)
        cut = distinct_rows(plan, items, layer)
        computed = batch.n_rows if cut is None else len(cut[0])
        assert computed == acting + 1  # + the baseline's group (at the last layer every set acts: no sharing left)


def _planted(lm, S: HeadSet):
    """A copy of ``lm`` whose heads outside S write nothing (their output-projection columns
    zeroed): S is then the only route from the image to the answer."""
    lm2 = copy.copy(lm)
    lm2.model = copy.deepcopy(lm.model)
    keep, hd = S.as_mask(), lm.head_dim
    with torch.no_grad():
        for l, layer in enumerate(lm2.model.model.language_model.layers):
            W = layer.self_attn.o_proj.weight  # [hidden, H · hd]
            for h in range(lm.n_heads):
                if not keep[l, h]:
                    W[:, h * hd:(h + 1) * hd] = 0
    return lm2


def test_planted_heads_lead_the_map_and_every_other_head_is_zero(tiny):
    L, H = Engine(tiny).shape
    S = HeadSet([(0, 2), (1, 5), (2, 0), (3, 4)], L, H)
    eng = Engine(_planted(tiny, S))
    sets = _sets(n=6, seed=3)
    maps = exact_causal_map(eng, sets, ("ncs",), layers=False)
    m = np.abs(maps["ncs-all"].head_map())
    others = ~S.as_mask()
    assert np.all(m[others] <= 1e-6), m  # a head that writes nothing changes nothing, hidden or not
    assert np.all(m[S.as_mask()] > 1e-4), m
    ranked = {divmod(int(i), H) for i in np.argsort(-m.ravel())[:len(S)]}
    assert ranked == set(S.heads)


def test_a_saved_map_reads_back_and_store_rows_rebuild_it(scanned, tmp_path):
    _, maps = scanned
    back = load_causal_map(save_causal_map(maps, tmp_path / "m.json", {"id": "tiny"}))
    rows = [r[1:] for m in maps.values() for r in m.store_rows("causal")]
    m0 = maps["ncs-all"]
    from_rows = CausalMap.from_store_rows(rows, m0.n_layers, m0.n_heads)
    for key, m in maps.items():
        for other in (back[key], from_rows[key]):
            # the store sorts item ids; compare each arm by item id
            for arm, ids in m.item_ids.items():
                order = [other.item_ids[arm].index(i) for i in ids]
                for metric in m.per_item:
                    np.testing.assert_array_equal(other.per_item[metric][arm][:, order], m.per_item[metric][arm])
            assert other.unit_ids == m.unit_ids
    assert m0.unit_ids[:2] == [head_id(0, 0), head_id(0, 1)] and m0.unit_ids[-1] == layer_id(m0.n_layers - 1)
    # the NCS effect is the difference of the two arm means, recomputed from the stored drops
    d = back["ncs-all"].per_item["p4"]
    np.testing.assert_allclose(back["ncs-all"].effects(), d["matched"].mean(1) - d["mismatched"].mean(1))
