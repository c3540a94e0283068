"""The grounding test in a study: per-item outcomes of every head-set stored under three test
ids, one capture per shard whatever the number of settings, S's stored maps, and the
report's grounding section."""

import json

import numpy as np
import pytest

from tests.study.test_study import small_config
from vheads.study import Store, run_study


@pytest.fixture(scope="module")
def grounding_run(tiny_random_dirs, tmp_path_factory):
    import vheads.study._grounding as G

    calls = []
    orig = G.capture_maps
    G.capture_maps = lambda eng, items, rule: calls.append([it.id for it in items]) or orig(eng, items, rule)
    try:
        out = tmp_path_factory.mktemp("grounding")
        cfg = small_config(tiny_random_dirs["qwen3_vl"], tests=["grounding"], row_groups=["all"], beta_sweep=[], k_sweep=[],
                           algebra_controls=0, causal_tests=[])
        res = run_study(cfg, out, progress=False, report=True)
    finally:
        G.capture_maps = orig
    return out, res, calls


def test_grounding_outcomes_are_stored_for_every_head_set_and_measure(grounding_run):
    out, res, calls = grounding_run
    s = Store(out, readonly=True)
    try:
        rows = s.query("SELECT setting, test, headset_id, item_id, value, logprob, logit_diff FROM outcomes")
        heads = s.query("SELECT setting, headset_id FROM headsets")
    finally:
        s.close()
    settings = {r[0] for r in heads}
    assert len(settings) == 2  # cm-ord-last, cm-ord-qsp
    by = {}
    for setting, test, hid, iid, v, lp, ld in rows:
        assert v == lp == ld  # a grounding outcome does not depend on the letter metric
        by.setdefault((setting, test), {}).setdefault(hid, {})[iid] = v
    for setting in settings:
        ids = {h for s2, h in heads if s2 == setting}
        for test in ("grounding", "grounding-iou", "grounding-acc50"):
            got = by[(setting, test)]
            assert set(got) == ids and all(len(v) == 4 for v in got.values())  # n_eval = 4 items each
        for hid in ids:
            iou = np.array(list(by[(setting, "grounding-iou")][hid].values()))
            acc = np.array(list(by[(setting, "grounding-acc50")][hid].values()))
            point = np.array(list(by[(setting, "grounding")][hid].values()))
            assert ((iou >= 0) & (iou <= 1)).all() and np.isin(point, [0, 1]).all()
            np.testing.assert_array_equal(acc, (iou >= 0.5).astype(float))
    # two shards of two items: one capture each, shared by both settings' S and controls
    assert len(calls) == 2 and sorted(len(c) for c in calls) == [2, 2]


def test_the_stored_outcomes_equal_the_api_on_the_same_items(grounding_run, loaded, tiny_random_dirs):
    from vheads.engine import Engine
    from vheads.evaluation import HeadSet, grounding, item_sets
    from vheads.study._data import eval_seed

    out, _, _ = grounding_run
    s = Store(out, readonly=True)
    try:
        (heads,) = s.query("SELECT heads FROM headsets WHERE setting='cm-ord-last' AND headset_id='S'")[0]
        stored = dict(s.query("SELECT item_id, value FROM outcomes WHERE setting='cm-ord-last' AND test='grounding-iou' "
                              "AND headset_id='S'"))
    finally:
        s.close()
    eng = Engine(loaded["qwen3_vl"])
    L, H = eng.shape
    templates = small_config(tiny_random_dirs["qwen3_vl"]).question_templates
    items = item_sets(["grid-oracle"], 4, eval_seed(0), templates=templates)["grid-oracle"]
    res = grounding(eng, items, [HeadSet([tuple(h) for h in json.loads(heads)], L, H)])
    assert {it.id: float(v) for it, v in zip(items, res.detail["iou"][0])} == pytest.approx(stored)


def test_the_report_shows_grounding_against_controls_with_s_maps(grounding_run):
    out, res, _ = grounding_run
    maps = sorted((out / "grounding").glob("*.json"))
    assert maps and all(p.with_suffix(".png").is_file() for p in maps)
    m = json.loads(maps[0].read_text())
    assert len(m["density"]) == len(m["ys"]) - 1 and len(m["density"][0]) == len(m["xs"]) - 1
    html = next(out.rglob("report*.html")).read_text() if list(out.rglob("report*.html")) else ""
    md = "\n".join(p.read_text() for p in out.rglob("*.md"))
    text = html + md
    assert "Table 3 layout: grounding (pointing accuracy and IoU)" in text and "Grounding: Acc@0.5" in text
    assert "Grounds?" in text  # the Findings answer it (a run of the grounding test alone)
    assert "grounding_maps" in text
