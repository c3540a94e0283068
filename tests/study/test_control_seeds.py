"""A study's control draws are seeded by the head-set's heads, not by the setting's id, so
settings that select the same heads share their controls (and the probe memo runs them once)."""

import hashlib
import json

import numpy as np

from vheads.evaluation import HeadSet
from vheads.store import Store
from vheads.study import config_from_dict
from vheads.study._runner import _headset_stage

L, H = 4, 8


def _seed(heads: str, name: str) -> int:
    """The documented derivation, written out: sha256 of 'seed|control|heads|name', first 32 bits."""
    return int(hashlib.sha256(f"0|control|{heads}|{name}".encode()).hexdigest()[:8], 16)


def _draws(tmp_path):
    sc_a = np.zeros((L, H))
    sc_a[1, 0], sc_a[2, 0], sc_a[3, 3] = 1.0, 0.9, 0.1
    sc_b = sc_a.copy()
    sc_b[0, 5] = 0.05  # another score map, the same top-2
    rows = [(sid, "ordinal", "last", "comics", 4, 2, json.dumps(sc.tolist()), json.dumps(heads)) for sid, sc, heads in (
        ("cm-ord-gaze", sc_b, [[1, 0], [2, 0]]), ("cm-ord-last", sc_a, [[1, 0], [2, 0]]), ("cm-ord-qsp", sc_a, [[0, 1], [3, 2]]))]
    st = Store(tmp_path)
    st.commit_unit("discovery/x", "discovery", 0.0, {"discovery": rows})
    cfg = config_from_dict({"model": "unused", "controls": {"layer-matched": 6, "any-layer": 4}, "k_sweep": [2],
                            "k_sweep_controls": 3, "algebra_controls": 0, "causal_tests": []})
    _headset_stage(st, cfg, (L, H))
    got = st.query("SELECT setting, headset_id, seed, heads FROM headsets")
    st.close()
    return {(s, h): (seed, json.loads(x)) for s, h, seed, x in got}


def test_settings_with_the_same_heads_draw_the_same_controls(tmp_path):
    d = _draws(tmp_path)
    ids = [h for s, h in d if s == "cm-ord-last"]
    assert len(ids) == 1 + 6 + 4 + 1 + 3
    assert all(d[("cm-ord-gaze", h)] == d[("cm-ord-last", h)] for h in ids)
    assert d[("cm-ord-qsp", "layer-matched#0")][1] != d[("cm-ord-last", "layer-matched#0")][1]


def _pattern_layer_matched(S_heads, R, seed):
    """The documented exchangeable layer-matched rule, written out: per draw, in every layer l
    of S (in layer order) S's count c_l of heads uniformly without replacement from *all* H
    heads of the layer (numpy's choice), a draw equal to S skipped, repeats skipped, the
    first R kept (the pool, C(8,1)·C(8,1) − 1 = 63, is over 2R, so the draws are sampled)."""
    counts = np.bincount([l for l, _ in S_heads], minlength=L)
    rng, out, S = np.random.default_rng(seed), [], sorted(S_heads)
    while len(out) < R:
        pick = sorted((int(l), int(h)) for l in range(L) if counts[l]
                      for h in rng.choice(H, size=int(counts[l]), replace=False))
        if pick != S and pick not in out:
            out.append(pick)
    return [[list(h) for h in x] for x in out]


def test_the_seed_is_the_heads_and_the_control_name_and_the_draws_follow_from_it(tmp_path):
    d = _draws(tmp_path)
    # layer-matched (exchangeable, issue 41): seeded by S's per-layer counts, not its heads
    lm_seed = _seed("pattern:0,1,1,0", "layer-matched")
    assert d[("cm-ord-last", "layer-matched#0")][0] == lm_seed
    want = _pattern_layer_matched([(1, 0), (2, 0)], 6, lm_seed)
    assert [d[("cm-ord-last", f"layer-matched#{i}")][1] for i in range(6)] == want
    assert d[("cm-ord-qsp", "layer-matched#0")][0] == _seed("pattern:1,0,0,1", "layer-matched")
    assert [d[("cm-ord-qsp", f"layer-matched#{i}")][1] for i in range(6)] == \
        _pattern_layer_matched([(0, 1), (3, 2)], 6, _seed("pattern:1,0,0,1", "layer-matched"))
    # every draw keeps S's layer pattern; none is S itself
    for sid, S in (("cm-ord-last", [[1, 0], [2, 0]]), ("cm-ord-qsp", [[0, 1], [3, 2]])):
        for i in range(6):
            x = d[(sid, f"layer-matched#{i}")][1]
            assert sorted(l for l, _ in x) == sorted(l for l, _ in S) and x != S
    # a control that is not drawn by pattern or size is still seeded by the heads themselves
    from vheads.study._runner import control_seed
    assert control_seed(0, HeadSet([(1, 0), (2, 0)], L, H), "layer-matched-disjoint") == \
        _seed("1.0,2.0", "layer-matched-disjoint")


def _common_any_layer(S_heads, R, seed):
    """The documented common any-layer rule, written out: |S| heads uniformly from all L·H
    heads per draw (numpy's choice without replacement), a draw equal to S skipped (overlap
    with S allowed: exchangeable, issue 41), repeats skipped, the first R kept."""
    rng, out, S = np.random.default_rng(seed), [], sorted(S_heads)
    while len(out) < R:
        pick = sorted(divmod(int(i), H) for i in rng.choice(L * H, size=len(S_heads), replace=False))
        if pick != S and pick not in out:
            out.append(pick)
    return [[list(h) for h in x] for x in out]


def test_any_layer_draws_of_every_head_set_of_one_size_come_from_one_common_sequence(tmp_path):
    d = _draws(tmp_path)
    seed = _seed("common:2", "any-layer")  # the seed is the head-set's size, not its heads
    for sid, heads in (("cm-ord-last", [(1, 0), (2, 0)]), ("cm-ord-qsp", [(0, 1), (3, 2)])):
        assert all(d[(sid, f"any-layer#{i}")][0] == seed for i in range(4))
        assert [d[(sid, f"any-layer#{i}")][1] for i in range(4)] == _common_any_layer(heads, 4, seed)
    # the two settings' draws other than either S are the same draws
    both = ([[1, 0], [2, 0]], [[0, 1], [3, 2]])
    last = [x for x in _common_any_layer([(1, 0), (2, 0)], 4, seed) if x not in both]
    qsp = [x for x in _common_any_layer([(0, 1), (3, 2)], 4, seed) if x not in both]
    n = min(len(last), len(qsp))
    assert n >= 3 and last[:n] == qsp[:n]


def test_a_k_sweep_point_with_the_settings_heads_takes_the_first_main_draws(tmp_path):
    d = _draws(tmp_path)
    assert d[("cm-ord-last", "S@k=2")][1] == d[("cm-ord-last", "S")][1]
    assert [d[("cm-ord-last", f"layer-matched@k=2#{i}")][1] for i in range(3)] == \
        [d[("cm-ord-last", f"layer-matched#{i}")][1] for i in range(3)]
