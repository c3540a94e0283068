"""Study key ``scores = [...]``: score points beside the grid, taken by every later stage like
any setting; their report tables recomputed from the stored head-sets and outcomes."""

import json

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from tests.hardening.clitools import files_under, refused, vheads
from vheads._errors import VheadsError
from vheads.discovery._score_space import ScorePoint
from vheads.report._data import load_run
from vheads.report._methods import methods_overlap_table, methods_tests_table
from vheads.report._tables import fmt, fmt_p, significance
from vheads.store import Store
from vheads.study import run_study
from vheads.study._config import StudyConfig, config_from_dict
from vheads.study._scores import named_points, score_units

SCORES = ["gaze", "sparsemm", {"name": "outhit", "rows": "out", "keys": "hit"}]


def small(**over):
    d = {"model": "tiny", "corpora": ["comics"], "queries": ["ordinal"], "sources": ["last"], "n_discovery": 4, "n_eval": 2,
         "splits": 10, "tests": ["cers", "ncs"], "row_groups": ["all"], "controls": {"layer-matched": 4}, "beta_sweep": [],
         "k_sweep": [], "algebra_controls": 0, "scores": SCORES, "causal_tests": [], "run": {"shard_size": 2, "batch_size": 64}}
    d.update(over)
    return config_from_dict(d)


def test_the_default_study_runs_the_four_presets_on_its_first_corpus_and_query():
    cfg = StudyConfig()
    assert [n for n, _ in named_points(cfg)] == ["gaze", "localization", "vrh", "sparsemm"]
    assert [u["unit_id"] for u in score_units(cfg)] == ["scores/comics/ordinal"]
    every = config_from_dict({"score_on": "all"})
    assert len(score_units(every)) == len(every.corpora) * len(every.queries)
    assert score_units(config_from_dict({"scores": []})) == []


def test_presets_run_at_the_studys_k_and_custom_points_keep_theirs():
    got = dict(named_points(config_from_dict({"k": 2, "scores": ["vrh", "x:rows=out,k=1", {"name": "y", "keys": "hit"}]})))
    assert got == {"vrh": ScorePoint(rows="out", k=2), "x": ScorePoint(rows="out", k=1), "y": ScorePoint(keys="hit", k=2)}
    assert dict(named_points(config_from_dict({"scores": ["vrh"]})))["vrh"].k is None  # k = 0: scaled, as the grid


@pytest.mark.parametrize("over,fragment", [
    ({"scores": ["nope"]}, "'scores[0]'"), ({"scores": ["gaze", "rows=sideways"]}, "'sideways'"),
    ({"scores": [{"rows": "out"}]}, "needs a 'name'"), ({"scores": [{"name": "x", "colour": "red"}]}, "'colour'"),
    ({"scores": [{"name": "x", "k": "3"}]}, "'k' must be an integer"), ({"scores": [{"name": "x", "select": "best"}]}, "'best'"),
    ({"scores": ["vrh", "vrh"]}, "'vrh' is listed twice"), ({"scores": [{"name": "out"}]}, "source part"),
    ({"scores": "vrh"}, "'scores'"), ({"score_on": "some"}, "'score_on'"),
])
def test_bad_scores_are_refused_naming_the_key(over, fragment):
    with pytest.raises(VheadsError, match="config key") as e:
        config_from_dict(over)
    assert fragment in str(e.value)


def test_a_bad_score_in_a_config_file_exits_2_before_the_run_folder(tmp_path):
    p = tmp_path / "study.toml"
    p.write_text('scores = ["gaze", { name = "x", keys = "max" }]\n')
    refused(vheads("study", p, "--out", tmp_path / "run"), "scores[1]", "'max'")
    assert not (tmp_path / "run").exists()


def test_a_selection_of_nothing_stops_the_study_before_the_grids_work(tmp_path):
    """Every head hits at every image row (argmax over image keys lies in the image): no elbow."""
    cfg = small(scores=["gaze", {"name": "flat1", "rows": "image", "region": "image", "norm": "image", "keys": "hit",
                                 "select": "elbow"}])
    p = tmp_path / "study.toml"
    # controls_h = 0: a fixed R = 4 (the default h = 10 is out of reach of R = 4, and refused)
    p.write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in cfg.to_dict().items() if k not in ("run", "controls", "scores", "controls_h"))
                 + '\ncontrols_h = 0\nscores = ["gaze", { name = "flat1", rows = "image", region = "image", norm = "image", keys = "hit", '
                   'select = "elbow" }]\n[controls]\nlayer-matched = 4\n')
    line = refused(vheads("study", p, "--out", tmp_path / "run", "--quiet", "--skip-doctor"), "config key 'scores'", "cm-ord-flat1",
                   "selects no head")
    assert "'elbow'" in line
    s = Store(tmp_path / "run")
    try:  # the score unit runs first: nothing of the grid, no later stage
        assert s.query("SELECT COUNT(*) FROM discovery") == [(0,)]
        assert s.done_units() <= {"doctor"}
    finally:
        s.close()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("scores_run")
    run_study(small(), out, progress=False)
    return out


def _q(run_dir, sql, *args):
    s = Store(run_dir)
    try:
        return s.query(sql, *args)
    finally:
        s.close()


def test_score_settings_are_discovered_beside_the_grid_and_tested_like_it(run_dir):
    ids = ["cm-ord-gaze", "cm-ord-sparsemm", "cm-ord-outhit"]
    disc = {s: (src, json.loads(sc), json.loads(hs)) for s, src, sc, hs in _q(run_dir, "SELECT setting, source, scores, headset FROM discovery")}
    assert set(disc) == {"cm-ord-last", *ids} and all(disc[s][0] == "score" for s in ids)
    np.testing.assert_allclose(disc["cm-ord-gaze"][1], disc["cm-ord-last"][1], atol=1e-6)  # gaze is the seed's last
    meta = json.loads(_q(run_dir, "SELECT value FROM meta WHERE key='score:cm-ord-sparsemm'")[0][0])
    assert ScorePoint(**{a: meta[a] for a in ("rows", "region", "norm", "keys", "across", "select", "k")}) == \
        ScorePoint(rows="out", keys="hit", across="hit-frequency")
    items = {s: [i for (i,) in _q(run_dir, "SELECT item_id FROM item_scores WHERE setting=? ORDER BY item_id", s)] for s in disc}
    assert all(items[s] == items["cm-ord-last"] for s in ids)  # the grid's discovery items
    for s in ids:
        S = {tuple(h) for h in disc[s][2]}
        draws = [{tuple(h) for h in json.loads(x)} for (x,) in
                 _q(run_dir, "SELECT heads FROM headsets WHERE setting=? AND control='layer-matched' ORDER BY draw", s)]
        assert len(draws) == 4
        for d in draws:  # layer-matched (exchangeable, issue 41): S's per-layer counts, overlap allowed, S itself excluded
            assert d != S and sorted(l for l, _ in d) == sorted(l for l, _ in S)
        tests = {t for (t,) in _q(run_dir, "SELECT DISTINCT test FROM outcomes WHERE setting=?", s)}
        assert {"cers", "ncs-all"} <= tests
        assert _q(run_dir, "SELECT COUNT(*) FROM ceilings WHERE setting=?", s) == [(1,)]
        assert _q(run_dir, "SELECT COUNT(*) FROM overlap WHERE setting_a=? OR setting_b=?", s, s)[0][0] == 3


def test_the_seeds_tables_keep_the_grid_as_their_family(run_dir):
    run = load_run(run_dir)
    assert run.settings == ["cm-ord-last"]
    assert run.score_settings == ["cm-ord-gaze", "cm-ord-sparsemm", "cm-ord-outhit"]  # config order
    assert [st.setting for st in significance(run, "ncs-all")] == ["cm-ord-last"]
    assert all(r["a"] in run.settings and r["b"] in run.settings for r in run.overlap)
    html = (run_dir / "report.html").read_text()
    assert "Published methods vs the seed&#x27;s settings" in html or "Published methods vs the seed's settings" in html


def test_the_methods_tables_recompute_from_the_store(run_dir):
    run = load_run(run_dir)
    heads = {s: {tuple(h) for h in json.loads(x)} for s, x in _q(run_dir, "SELECT setting, headset FROM discovery")}
    ov = methods_overlap_table(run)
    assert ov.columns[4:] == ["cm-ord-last"]  # after the setting, its point, its identical settings, |S|
    for row in ov.rows:
        assert int(row[4].split()[0]) == len(heads[row[0]] & heads["cm-ord-last"]) and int(row[3]) == len(heads[row[0]])

    def T(s, test, hid):  # a head-set's statistic, from the per-item rows
        if test == "ncs-all":
            arm = {a: [v for (v,) in _q(run_dir, "SELECT value FROM arms WHERE setting=? AND test=? AND headset_id=? AND arm=?",
                                        s, test, hid, a)] for a in ("matched", "mismatched")}
            return np.mean(arm["matched"]) - np.mean(arm["mismatched"])
        return np.mean([v for (v,) in _q(run_dir, "SELECT value FROM outcomes WHERE setting=? AND test=? AND headset_id=?",
                                         s, test, hid)])

    tab = methods_tests_table(run)
    for g, test in enumerate(("cers", "ncs-all")):
        p = []
        for s in run.score_settings:
            t_s = T(s, test, "S")
            t_r = [T(s, test, f"layer-matched#{i}") for i in range(4)]
            p.append((1 + sum(t >= t_s for t in t_r)) / 5)
        holm = multipletests(p, method="holm")[1]
        # the smallest Holm-adjusted p any of the m = 3 members can reach with n = 4 distinct controls each
        floor = min(1.0, len(p) / (4 + 1))
        for i, row in enumerate(tab.rows):
            assert row[0] == run.score_settings[i]
            # per test: S [95% CI], controls, z, p (Holm), verdict
            cell = row[1 + 5 * g + 3].replace("*", "")
            assert cell == f"{fmt_p(p[i])} ({fmt_p(holm[i])})", (test, row[0], cell)
            want = "**yes**" if holm[i] <= 0.05 else "cannot tell" if floor > 0.05 else "no"
            assert row[1 + 5 * g + 4] == want, (test, row[0], row[1 + 5 * g + 4])
            assert row[1 + 5 * g].startswith(fmt(T(row[0], test, "S")) + " [")
            assert row[1 + 5 * g].endswith("*") == (want == "**yes**")


def test_the_run_holds_no_file_outside_the_run_folder(run_dir):
    assert "report.html" in files_under(run_dir) and "figures/methods_overlap.png" in files_under(run_dir)


def test_ceilings_rank_per_layer_where_the_point_selects_per_layer():
    from vheads.study._scores import ranks_per_layer

    of = ranks_per_layer(config_from_dict({"scores": ["vrh", "pl:select=per-layer"], "selection": "per-layer"}))
    assert of("cm-ord-pl") and not of("cm-ord-vrh") and of("cm-ord-last")
    assert not ranks_per_layer(config_from_dict({"scores": []}))("cm-ord-last")
