"""The study's ``ablation`` key: head-output ablations of NCS stored beside the attention
tests (which stay as they were), recorded, and shown in the report's ablation table."""

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.study.test_study import small_config
from vheads._errors import VheadsError
from vheads.store import Store


@pytest.mark.parametrize("over,match", [
    ({"ablation": ["attention", "shuffle"]}, "config key 'ablation': unknown ablation 'shuffle'"),
    ({"ablation": ["zero", "zero"]}, "config key 'ablation': 'zero' is listed twice"),
    ({"ablation": ["attention", "resample"], "tests": ["cers"]}, "config key 'ablation': the head-output ablations run NCS"),
])
def test_bad_ablation_key_is_one_error_naming_it(tiny_random_dirs, over, match):
    with pytest.raises(VheadsError, match=match):
        small_config(tiny_random_dirs["qwen3_vl"], **over)


def test_the_default_ablations_need_no_ncs(tiny_random_dirs):
    """The default's zero ablation runs where the study runs NCS: a study without NCS keeps the default."""
    assert small_config(tiny_random_dirs["qwen3_vl"], tests=["cers"]).ablation == ["attention", "zero"]


def test_unknown_ablation_exits_2_before_any_file_is_written(tmp_path):
    from vheads.cli import app

    cfg = tmp_path / "c.toml"
    cfg.write_text('ablation = ["attention", "shuffle"]\n')
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["study", str(cfg), "--out", str(out)])
    assert r.exit_code == 2 and "ablation" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not out.exists()


def _report(run_dir) -> str:
    from vheads.report import build_report

    return (build_report(run_dir).parent / "report.md").read_text()


@pytest.mark.slow
def test_ablations_are_stored_recorded_and_tabled_and_leave_the_attention_tables_alone(tiny_random_dirs, tmp_path):
    from vheads.study import run_study

    model = tiny_random_dirs["qwen3_vl"]
    plain, abl = tmp_path / "plain", tmp_path / "abl"
    run_study(small_config(model, ablation=["attention"]), plain, progress=False, report=False)
    run_study(small_config(model, ablation=["attention", "zero", "mean", "resample"]), abl, progress=False, report=False)
    s = Store(abl)
    try:
        rows = s.query("SELECT setting, test, headset_id, item_id, value FROM outcomes ORDER BY 1, 2, 3, 4")
        tests = {t for _, t, _, _, _ in rows}
        assert {"ncs-all@ablation=zero", "ncs-all@ablation=mean", "ncs-all@ablation=resample"} <= tests
        # S and the row-group controls (layer-matched) only, every item
        ids = {h for _, t, h, _, _ in rows if t == "ncs-all@ablation=zero"}
        assert ids == {"S", "layer-matched#0", "layer-matched#1", "layer-matched#2"}
        # NCS is recomputable from the two stored arms: mean matched drop − mean mismatched drop
        # (each shard's values subtract that shard's mismatched mean; the shards are equal)
        for setting in {r[0] for r in rows}:
            arms = {arm: np.array([v for (v,) in s.query(
                "SELECT value FROM arms WHERE setting=? AND test='ncs-all@ablation=zero' AND headset_id='S' AND arm=? "
                "ORDER BY item_id", setting, arm)]) for arm in ("matched", "mismatched")}
            vals = np.array([v for st, t, h, _, v in rows if st == setting and t == "ncs-all@ablation=zero" and h == "S"])
            assert vals.mean() == pytest.approx(arms["matched"].mean() - arms["mismatched"].mean(), abs=1e-12)
            assert np.abs(arms["matched"]).max() > 0  # zeroing S's outputs moved P(key)
        meta = json.loads(s.query("SELECT value FROM meta WHERE key='ablation_reference:mean'")[0][0])
        assert meta["n"] == 4 and set(meta["items"]) == {"class-matched", "class-mismatched"}
    finally:
        s.close()
    # the attention outcomes are those of a run without the other ablations, value for value
    s0 = Store(plain)
    try:
        ref = s0.query("SELECT setting, test, headset_id, item_id, value FROM outcomes ORDER BY 1, 2, 3, 4")
    finally:
        s0.close()
    assert [r for r in rows if "@ablation=" not in r[1]] == ref
    with_table, without = _report(abl), _report(plain)
    assert "Ablation × setting" in with_table and "Ablation × setting" not in without
    assert "The seed's conclusion" in with_table
    # the rest of the report is the report of the run without them, line for line (the run's path aside)
    block = with_table[with_table.index("**Ablation × setting"):]
    block = block[: block.index("._\n") + 4]
    same = lambda md, run: re.sub(r"built [0-9-]+ [0-9:]+", "built", md.replace(str(run), "RUN"))  # noqa: E731
    assert same(with_table.replace(block, ""), abl) == same(without, plain)
