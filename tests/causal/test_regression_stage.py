"""The study's regression stage: with ``causal_subsets`` the causal-map units store the
regression map (per-item coefficients) beside the exact one, ``causal_method = "regression"``
takes the causal setting from it, and the report shows "Heads that matter together"."""

import json

import numpy as np
import pytest

from tests.causal.test_study_stage import _q
from tests.study.test_study import small_config
from vheads._errors import VheadsError
from vheads.study import run_study


@pytest.fixture(scope="module")
def regression_run(tiny_random_dirs, tmp_path_factory):
    out = tmp_path_factory.mktemp("regression")
    cfg = small_config(tiny_random_dirs["qwen3_vl"], algebra_controls=0, causal_subsets=64, causal_method="regression",
                       ablation=["attention"])
    run_study(cfg, out, progress=False, report=True)
    return out


def test_the_causal_setting_is_the_top_k_of_the_stored_regression_map(regression_run):
    out = regression_run
    rows = _q(out, "SELECT headset_id, arm, value FROM causal_map WHERE method = 'regression' AND test = 'ncs-all'")
    assert rows and {a for _, a, _ in rows} == {"matched", "mismatched"}
    coef: dict = {}
    for hid, arm, v in rows:
        coef.setdefault(hid, {}).setdefault(arm, []).append(v)
    effect = {h: np.mean(d["matched"]) - np.mean(d["mismatched"]) for h, d in coef.items()}
    (k,) = {k for (k,) in _q(out, "SELECT k FROM discovery WHERE source != 'score'")}
    ranked = sorted(effect, key=lambda h: (-effect[h], int(h[1:].split("H")[0]), int(h.split("H")[1])))[:k]
    (heads,) = _q(out, "SELECT heads FROM headsets WHERE setting = 'causal-ncs' AND headset_id = 'S'")
    assert {f"L{l}H{h}" for l, h in json.loads(heads[0])} == set(ranked)
    assert _q(out, "SELECT COUNT(*) FROM causal_map WHERE method = 'exact'")[0][0] > 0  # the exact map beside it


def test_the_report_shows_heads_that_matter_together(regression_run):
    md = (regression_run / "report.md").read_text()
    assert "Heads that matter together" in md and "The causal map by method: agreement" in md
    assert "exact vs regression" in md


@pytest.mark.parametrize("over, says", [({"causal_method": "shapley"}, "causal_method"),
                                        ({"causal_method": "regression"}, "causal_subsets"),
                                        ({"causal_subsets": 1}, "causal_subsets")])
def test_a_bad_regression_key_is_refused(tiny_random_dirs, over, says):
    with pytest.raises(VheadsError) as e:
        small_config(tiny_random_dirs["qwen3_vl"], **over)
    assert says in str(e.value)
