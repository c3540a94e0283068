"""Control draws that repeat head-sets (a store from before wave 4): every statistic, the rank p
included, is taken over the distinct head-sets; the checklist warns only where the repeats
exceed what independent draws from the pool predict."""

import itertools

import json
import math

import numpy as np

from vheads.report import load_run, protocol_checks, significance
from vheads.report._tables import significance_table
from vheads.store import Store

L, H = 2, 6
POOL = math.comb(H, 1) * math.comb(H, 2) - 1  # 89


def _run(tmp_path, R=30, n_sets=10, n_items=5):
    """S with 1 head in layer 0 and 2 in layer 1: a pool of C(6, 1) · C(6, 2) − 1 = 89
    layer-matched sets (every other set of S's pattern, overlap with S allowed: the
    exchangeable pool); R draws cycle through ``n_sets`` of them, and a set's outcome is the
    same every time it is drawn."""
    rng = np.random.default_rng(3)
    S = [[0, 0], [1, 0], [1, 1]]
    pool = [[[0, a], [1, b], [1, c]] for a in range(H) for b in range(H) for c in range(b + 1, H)]
    pool.remove(S)
    assert len(pool) == POOL
    st = Store(tmp_path)
    st.set_meta(config={"model": "t", "settings": ["cm-ord-last"], "controls": {"layer-matched": R}, "seed": 0},
                model_id="t", n_layers=L, n_heads=H)
    items = [f"i{i}" for i in range(n_items)]
    s_vals = rng.normal(0.2, 0.1, n_items)
    rows = [("u", "cm-ord-last", "cers", "S", it, float(v)) for it, v in zip(items, s_vals)]
    hs = [("cm-ord-last", "S", "S", 0, 0, json.dumps(S))]
    per_set = {j: rng.normal(0.0, 0.1, n_items) for j in range(n_sets)}
    for d in range(R):
        j = d % n_sets
        hs.append(("cm-ord-last", f"layer-matched#{d}", "layer-matched", d, 1, json.dumps(pool[j])))
        rows += [("u", "cm-ord-last", "cers", f"layer-matched#{d}", it, float(v)) for it, v in zip(items, per_set[j])]
    st.commit_unit("u", "eval", 0.0, {"outcomes": rows, "headsets": hs, "discovery": [
        ("cm-ord-last", "ordinal", "last", "comics", 4, 3, json.dumps(np.zeros((L, H)).tolist()), json.dumps(S))]})
    st.close()
    T = np.array([per_set[d % n_sets].mean() for d in range(R)])
    return tmp_path, s_vals.mean(), T, np.array([per_set[j].mean() for j in range(n_sets)])


def test_repeated_draws_count_once_for_every_statistic_the_rank_p_included(tmp_path):
    d, t_s, T, distinct = _run(tmp_path)
    run = load_run(d)
    (st,) = significance(run, "cers")
    cs = st.controls["layer-matched"]
    assert cs.R == 30 and cs.n_distinct == cs.n == 10
    assert math.isclose(cs.sd, np.std(distinct, ddof=1)) and math.isclose(cs.mean, distinct.mean())
    assert not math.isclose(cs.sd, np.std(T, ddof=1))  # the 30 draws' SD is another number
    assert math.isclose(cs.z, (t_s - distinct.mean()) / np.std(distinct, ddof=1))
    assert math.isclose(cs.rank.p, (1 + np.sum(distinct >= t_s)) / 11)  # over the 10 head-sets compared
    table = significance_table(run, ["cers"], "t", "c")
    assert table.rows[0][2].endswith("[10]") and "[n compared]" in table.columns[2]
    (check,) = [c for c in protocol_checks(run) if c.item == "Distinct control head-sets"]
    # 30 independent draws from a pool of 89 hold about 25.6 ± 1.7 distinct sets: 10 is far fewer
    assert f"cm-ord-last, layer-matched: 10 distinct of R=30 (pool {POOL})" in check.value and check.warning


def test_repeats_that_independent_draws_predict_are_not_warned(tmp_path):
    from vheads.report._protocol import expected_distinct

    n = round(expected_distinct(POOL, 30)[0])  # 26 distinct of 30 draws from 89: what chance gives
    d, *_ = _run(tmp_path, R=30, n_sets=n)
    (check,) = [c for c in protocol_checks(load_run(d)) if c.item == "Distinct control head-sets"]
    assert f"{n} distinct of R=30" in check.value and check.warning is None


def test_no_warning_when_every_draw_is_distinct(tmp_path):
    d, *_ = _run(tmp_path, R=10, n_sets=10)
    (check,) = [c for c in protocol_checks(load_run(d)) if c.item == "Distinct control head-sets"]
    assert check.warning is None


def test_expected_distinct_equals_enumeration():
    from vheads.report._protocol import expected_distinct

    for N, R in [(3, 2), (4, 5), (5, 3)]:
        counts = [len(set(seq)) for seq in itertools.product(range(N), repeat=R)]  # every sequence, equally likely
        mean, sd = expected_distinct(N, R)
        assert math.isclose(mean, np.mean(counts)) and math.isclose(sd, np.std(counts))


def test_a_pool_smaller_than_r_compared_whole_is_stated(tmp_path):
    d, *_ = _run(tmp_path, R=10, n_sets=10)
    st = Store(d)
    st.set_meta(control_pools={"cm-ord-last": {"layer-matched": {"mode": "exact", "pool": 10, "n": 10, "R": 49}}})
    st.close()
    (check,) = [c for c in protocol_checks(load_run(d)) if c.item == "Distinct control head-sets"]
    assert "compared whole" in check.value and "fewer head-sets than the R asked (n = 10)" in check.warning
