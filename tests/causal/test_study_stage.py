"""The study's causal-map stage: per-item rows of every head and layer on items of their own,
the causal setting = top-k of the stored NCS map, tested like every setting, and resumable."""

import json

import numpy as np
import pytest

from tests.study.test_study import small_config
from vheads.study import Store, run_study


@pytest.fixture(scope="module")
def causal_run(tiny_random_dirs, tmp_path_factory):
    out = tmp_path_factory.mktemp("causal")
    res = run_study(small_config(tiny_random_dirs["qwen3_vl"], algebra_controls=0), out, progress=False, report=True)
    return out, res


def _q(out, sql, *args):
    st = Store(out)
    try:
        return st.query(sql, *args)
    finally:
        st.close()


def test_the_map_is_stored_per_item_for_every_head_and_layer_on_items_apart_from_the_evaluation(causal_run):
    out, _ = causal_run
    L, H = (int(v) for (v,) in _q(out, "SELECT value FROM meta WHERE key IN ('n_layers', 'n_heads') ORDER BY key DESC"))
    rows = _q(out, "SELECT test, headset_id, item_id, arm, value FROM causal_map")
    units = {r[1] for r in rows}
    assert units == {f"L{l}H{h}" for l in range(L) for h in range(H)} | {f"L{l}" for l in range(L)}
    assert {r[0] for r in rows} == {"ncs-all"}
    matched = {r[2] for r in rows if r[3] == "matched"}
    assert len(matched) == 4 and len({r[2] for r in rows if r[3] == "mismatched"}) == 4  # n_eval items per arm
    evaluated = {r[0] for r in _q(out, "SELECT item_id FROM arms")}
    assert not matched & evaluated  # a discovery split: none of the held-out evaluation items


def test_the_causal_setting_is_the_top_k_of_the_stored_map_and_is_tested_with_the_same_controls(causal_run):
    out, _ = causal_run
    rows = _q(out, "SELECT headset_id, arm, item_id, value FROM causal_map WHERE method = 'exact' AND ablation = 'attention' "
                   "AND test = 'ncs-all' AND headset_id NOT GLOB 'L[0-9]' "
                   "AND headset_id NOT GLOB 'L[0-9][0-9]'")
    drops: dict = {}
    for hid, arm, _, v in rows:
        drops.setdefault(hid, {}).setdefault(arm, []).append(v)
    effect = {hid: np.mean(d["matched"]) - np.mean(d["mismatched"]) for hid, d in drops.items()}
    (k,) = {k for (k,) in _q(out, "SELECT k FROM discovery WHERE source != 'score'")}
    ranked = sorted(effect, key=lambda h: (-effect[h], int(h[1:].split("H")[0]), int(h.split("H")[1])))[:k]
    (heads,) = _q(out, "SELECT heads FROM headsets WHERE setting = 'causal-ncs' AND headset_id = 'S'")
    assert {f"L{l}H{h}" for l, h in json.loads(heads[0])} == set(ranked)
    controls = lambda sid: {c for (c,) in _q(out, "SELECT DISTINCT control FROM headsets WHERE setting = ?", sid)}  # noqa: E731
    assert controls("causal-ncs") == controls("cm-ord-last")
    tested = lambda sid: {t for (t,) in _q(out, "SELECT DISTINCT test FROM outcomes WHERE setting = ?", sid)}  # noqa: E731
    assert tested("causal-ncs") == tested("cm-ord-last")


def test_the_report_shows_the_causal_row_and_section(causal_run):
    out, _ = causal_run
    md = (out / "report.md").read_text()
    assert "| causal-ncs |" in md
    assert "Each attention score against the exact causal map" in md
    assert "AtP vs the exact map" in md and "| NCS (all rows) · zero ablation |" in md  # one row per ablation AtP covers
    for name in ("causal_map", "causal_vs_scores", "score_vs_effect"):
        assert (out / "figures" / f"{name}.png").is_file()


def test_the_stored_atp_rows_equal_a_direct_atp_map_on_the_same_items(tiny_random_dirs, causal_run):
    """Per ablation AtP covers (attention: AtP*, zero: AtP), per arm, item and head: the
    stored estimate equals :func:`vheads.causal.atp_map` on the stage's items (its own
    seed), made here from the config, not from the store; heads only, p4 only. The exact
    map's rows stay what a direct scan gives though AtP ran before them on the same replica."""
    from vheads.causal import atp_map, causal_item_sets, exact_causal_map
    from vheads.engine import Engine
    from vheads.models import load_model
    from vheads.study._causal import causal_seed

    out, _ = causal_run
    cfg = small_config(tiny_random_dirs["qwen3_vl"], algebra_controls=0)
    sets = causal_item_sets(cfg.causal_tests, cfg.n_eval, causal_seed(cfg.seed), None, cfg.question_templates)
    eng = Engine(load_model(cfg.model))
    L, H = eng.shape
    rows = _q(out, "SELECT ablation, headset_id, item_id, arm, value, logprob, logit_diff FROM causal_map "
                   "WHERE method = 'atp' AND test = 'ncs-all'")
    assert {r[0] for r in rows} == {"attention", "zero"} == set(cfg.ablation)
    assert {r[1] for r in rows} == {f"L{l}H{h}" for l in range(L) for h in range(H)}  # heads, no whole layers
    assert all(r[5] is None and r[6] is None for r in rows)  # AtP differentiates p4 only
    stored = {r[:4]: r[4] for r in rows}
    for ablation in cfg.ablation:
        ref = atp_map(eng, sets, "ncs", ablation)
        for arm, a in ref.arms.items():
            for i, iid in enumerate(a.item_ids):
                for l in range(L):
                    for h in range(H):
                        assert stored.pop((ablation, f"L{l}H{h}", iid, arm)) == pytest.approx(a.drops[i, l, h], abs=1e-6)
    assert not stored  # nothing stored beyond those items
    # and the AtP that ran between them left the exact map as a direct scan gives it (≤ 1e-5)
    exact = exact_causal_map(eng, sets, ["ncs"], ablation="zero")["ncs-all@zero"]
    got = {r[:3]: r[3] for r in _q(out, "SELECT headset_id, item_id, arm, value FROM causal_map WHERE method = 'exact' "
                                        "AND ablation = 'zero' AND test = 'ncs-all'")}
    for arm, ids in exact.item_ids.items():
        for j, uid in enumerate(exact.unit_ids):
            for i, iid in enumerate(ids):
                assert got[(uid, iid, arm)] == pytest.approx(exact.per_item["p4"][arm][j, i], abs=1e-5)


def test_a_rerun_computes_nothing_again(tiny_random_dirs, causal_run):
    out, _ = causal_run
    before = _q(out, "SELECT * FROM causal_map ORDER BY 1, 2, 3, 4, 5, 6")
    assert {r[1] for r in before} == {"exact", "atp"}
    again = run_study(small_config(tiny_random_dirs["qwen3_vl"], algebra_controls=0), out, progress=False, report=False)
    assert again.units_computed == 0
    assert _q(out, "SELECT * FROM causal_map ORDER BY 1, 2, 3, 4, 5, 6") == before


@pytest.mark.parametrize("value, says", [(["cers"], "unknown test 'cers'"), (["ncs", "ncs"], "twice"), ("ncs", "expected list")])
def test_a_bad_causal_tests_key_is_refused_naming_it(value, says):
    from vheads.study import config_from_dict

    with pytest.raises(ValueError, match=f"config key 'causal_tests'.*{says}"):
        config_from_dict({"causal_tests": value})


def test_an_empty_causal_tests_key_skips_the_stage():
    from vheads.study import config_from_dict
    from vheads.study._causal import causal_map_units

    assert causal_map_units(config_from_dict({"causal_tests": []})) == []
    units = causal_map_units(config_from_dict({"n_eval": 10, "run": {"shard_size": 4}}))
    assert [u["shard"] for u in units] == [[0, 4], [4, 8], [8, 10]]  # every item in one shard, once
