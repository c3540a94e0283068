"""The scoped protocol (issue 43): ``[[scope]]`` keys for named settings (control counts, tests,
row groups, the k sweep and its tests) and ``[items]`` per test. A reduced study's store holds
what each setting's scope asks and nothing more; the plan counts the rows it records; bad scopes
are refused naming the key before any work."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.study.test_plan import recorded_rows
from vheads._errors import VheadsError
from vheads.study import Store, config_from_dict, run_study
from vheads.study._plan import Layout, study_plan


def _base(model_dir, **over):
    d = {"model": str(model_dir), "corpora": ["comics"], "queries": ["ordinal"], "sources": ["last"],
         "n_discovery": 4, "n_eval": 4, "splits": 10, "k": 2, "tests": ["cers", "ncs", "ncs-grid"],
         "row_groups": ["all"], "row_group_controls": ["layer-matched"], "controls": {"layer-matched": 1},
         "beta_sweep": [10.0, 10000.0], "beta_sweep_controls": 1, "k_sweep": [], "k_sweep_controls": 0,
         "algebra_controls": 0, "run": {"shard_size": 2, "batch_size": 16}, "scores": [], "ablation": ["attention"],
         "causal_tests": [], "controls_h": 0}
    d.update(over)
    return config_from_dict(d)


SCOPE = {"controls": {"layer-matched": 3}, "row_groups": ["all", "last"], "k_sweep": [1, 3], "k_sweep_tests": ["ncs"]}
ITEMS = {"ncs-grid": 2, "beta-sweep": 2}


@pytest.fixture(scope="module")
def two_settings(tiny_random_dirs, tmp_path_factory):
    """cm-ord-qsp under a scope (3 draws, two row groups, a k sweep in NCS only), cm-ord-last
    under the top-level keys (1 draw, all rows, no sweep); NCS_grid and the beta sweep on 2 of 4 items."""
    out = tmp_path_factory.mktemp("scope")
    cfg = _base(tiny_random_dirs["qwen3_vl"], sources=["last", "qspan"], items=ITEMS,
                test_controls={"ncs-grid": {"layer-matched": 1}}, scope=[{"settings": ["cm-ord-qsp"], **SCOPE}])
    run_study(cfg, out, progress=False, report=True, skip_doctor=True)
    s = Store(out, readonly=True)
    try:
        heads = s.query("SELECT setting, headset_id, control FROM headsets")
        rows = s.query("SELECT setting, test, headset_id, item_id FROM outcomes")
        pools = json.loads(s.get_meta("control_pools"))
    finally:
        s.close()
    return out, heads, rows, pools


def test_each_setting_gets_its_scope_s_controls_and_k_sweep(two_settings):
    _, heads, _, pools = two_settings
    by = Counter((s, c) for s, _, c in heads)
    assert pools["cm-ord-qsp"]["layer-matched"]["R"] == 3 and pools["cm-ord-last"]["layer-matched"]["R"] == 1
    for s in ("cm-ord-qsp", "cm-ord-last"):  # R distinct draws, or the whole pool where it holds at most 2R
        rec = pools[s]["layer-matched"]
        assert by[(s, "layer-matched")] == rec["n"] == (rec["pool"] if rec["mode"] == "exact" else rec["R"])
    assert {h for s, h, _ in heads if s == "cm-ord-qsp" and h.startswith("S@k")} == {"S@k=1", "S@k=3"}
    assert not any(h.startswith("S@k") for s, h, _ in heads if s == "cm-ord-last")


def test_the_store_holds_each_setting_s_tests_row_groups_and_items(two_settings):
    _, heads, rows, _ = two_settings
    tests = {(s, t) for s, t, _, _ in rows}
    assert ("cm-ord-qsp", "ncs-last") in tests and ("cm-ord-last", "ncs-last") not in tests
    sweep = {(s, t) for s, t, h, _ in rows if h.startswith("S@k")}
    assert sweep == {("cm-ord-qsp", "ncs-all")}  # k_sweep_tests = ["ncs"]: not in CERS
    items = {}
    for s, t, h, i in rows:
        if h == "S":
            items.setdefault((s, t), set()).add(i)
    for s in ("cm-ord-last", "cm-ord-qsp"):
        assert len(items[(s, "ncs-grid")]) == 2  # [items] ncs-grid = 2
        assert len(items[(s, "cers@beta=10")]) == 2  # [items] beta-sweep = 2
        assert len(items[(s, "cers")]) == 4 and len(items[(s, "ncs-all")]) == 4  # the rest: n_eval
    draws = {h for s, t, h, _ in rows if s == "cm-ord-qsp" and t == "ncs-last"}
    assert draws == {"S"} | {h for s, h, c in heads if s == "cm-ord-qsp" and c == "layer-matched"}
    # [test_controls] ncs-grid: one layer-matched draw there, every draw in the other tests
    for s in ("cm-ord-last", "cm-ord-qsp"):
        got = {t: {h for s2, t2, h, _ in rows if s2 == s and t2 == t and h.startswith("layer-matched#")}
               for t in ("ncs-grid", "cers")}
        assert got["ncs-grid"] == {"layer-matched#0"}
        assert got["cers"] == {h for s2, h, c in heads if s2 == s and c == "layer-matched"}


def test_the_report_of_a_scoped_run_reads(two_settings):
    out, *_ = two_settings
    md = "\n".join(p.read_text() for p in out.rglob("report*.md"))
    assert "Findings" in md and "cm-ord-qsp" in md


def test_the_plan_counts_the_rows_a_scoped_study_records(tiny_random_dirs, tmp_path):
    """One setting named by a scope: every stage's full and suffix rows the run records equal
    the plan's, which must read the scope's controls, row groups and k sweep and the [items]."""
    cfg = _base(tiny_random_dirs["qwen3_vl"], tests=["cers", "ncs", "ncs-grid", "text"], items=ITEMS,
                scope=[{"settings": ["cm-ord-last"], **SCOPE, "test_controls": {"text": {"layer-matched": 1}}}])
    run_study(cfg, tmp_path / "run", progress=False, report=False, skip_doctor=True)
    ran = recorded_rows(tmp_path / "run")
    plan = study_plan(cfg, Layout("tiny-random", 2, 4, 0, 0, 0), main_k=2)
    for stage in ("beta sweep", "cers", "ncs", "ncs-grid", "text"):
        s = plan.stage(stage)
        assert (s.full, s.suffix) == (ran[stage]["full"], ran[stage]["suffix"]), stage
    # by hand: at the last row (suffix rows) S and its D draws, 2 rows per item, and 2n unmasked
    # baselines; NCS_grid on 2 items ([items]): S, its D draws and every head hidden
    n = 4
    d = plan.stage("ncs-grid").head_sets - 2
    assert d >= 3 and ran["ncs-grid"]["full"] == (1 + d + 1) * 2 * 2
    assert ran["ncs"]["suffix"] == (1 + d) * 2 * n + 2 * n
    assert ran["text"]["suffix"] == (1 + 1 + 1) * n  # the text arm: S, its one draw ([test_controls]), the baseline


@pytest.mark.parametrize("over, key", [
    ({"scope": [{"settings": ["cm-ord-nope"], "controls": {"layer-matched": 3}}]}, "scope[0].settings"),
    ({"scope": [{"settings": ["cm-ord-last"], "controls": {"layer-matched": 3}},
                {"settings": ["cm-ord-last"], "k_sweep": [1]}]}, "scope[1].settings"),
    ({"scope": [{"settings": ["cm-ord-last"], "beta": 3.0}]}, "scope[0].beta"),
    ({"scope": [{"settings": ["cm-ord-last"]}]}, "scope[0]"),
    ({"scope": [{"settings": ["cm-ord-last"], "controls": {"layer-matchd": 3}}]}, "scope[0].controls.layer-matchd"),
    ({"scope": [{"settings": ["cm-ord-last"], "tests": ["ncs", "nope"]}]}, "scope[0].tests"),
    ({"scope": [{"settings": [], "tests": ["ncs"]}]}, "scope[0].settings"),
    ({"scope": {"settings": ["cm-ord-last"]}}, "scope"),
    ({"items": {"ncs-grid": 1}}, "items.ncs-grid"),
    ({"items": {"nope": 2}}, "items.nope"),
    ({"k_sweep_tests": ["text"]}, "k_sweep_tests"),
    ({"test_controls": {"ncs-grd": {"layer-matched": 2}}}, "test_controls.ncs-grd"),
    ({"test_controls": {"ncs-grid": {"any-layer": 2}}}, "test_controls.ncs-grid.any-layer"),
    ({"test_controls": {"ncs-grid": {"layer-matched": 0}}}, "test_controls.ncs-grid.layer-matched"),
    ({"test_controls": {"ncs-grid": 3}}, "test_controls"),
])
def test_a_bad_scope_is_refused_naming_its_key(tiny_random_dirs, over, key):
    with pytest.raises(VheadsError) as e:
        _base(tiny_random_dirs["qwen3_vl"], **over)
    msg = str(e.value)
    assert f"'{key}'" in msg and "\n" not in msg, msg


def test_an_h_above_a_test_s_r_names_that_test_s_key(tmp_path):
    from vheads.study import load_config

    p = tmp_path / "c.toml"
    p.write_text("controls_h = 10\n[controls]\nlayer-matched = 40\n[test_controls.ncs-grid]\nlayer-matched = 5\n")
    with pytest.raises(VheadsError, match=r"'controls_h'.*test_controls\.ncs-grid\.layer-matched's R_max = 5"):
        load_config(p)


def test_a_bad_scope_in_a_config_file_exits_2_with_one_line_before_any_work(tmp_path):
    import subprocess
    import sys

    cfg = tmp_path / "c.toml"
    cfg.write_text('[[scope]]\nsettings = ["cm-ref-qsx"]\ncontrols = { layer-matched = 250 }\n')
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "vheads", "study", str(cfg), "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "scope[0].settings" in r.stderr and "did you mean 'cm-ref-qsp'" in r.stderr
    assert not out.exists()


def test_sequential_comparisons_stop_at_each_test_s_own_r(tiny_random_dirs, tmp_path):
    """Sequential controls (h = 1, rounds of one draw) with [test_controls]: every comparison's R_max
    is its test's R, and no draw past it runs in that test."""
    cfg = _base(tiny_random_dirs["qwen3_vl"], controls={"any-layer": 4}, row_group_controls=[], beta_sweep=[], ood_controls=0, beta_rule="fixed",
                test_controls={"ncs-grid": {"any-layer": 2}}, controls_h=1, controls_batch=1)
    run_study(cfg, tmp_path / "run", progress=False, report=False, skip_doctor=True)
    s = Store(tmp_path / "run", readonly=True)
    try:
        stops = json.loads(s.get_meta("sequential_stops"))["comparisons"]
        ran = {(t, h) for t, h in s.query("SELECT DISTINCT test, headset_id FROM outcomes WHERE headset_id LIKE 'any-layer#%'")}
    finally:
        s.close()
    by = {c["unit_test"]: c["R_max"] for c in stops}
    assert by == {"cers": 4, "ncs": 4, "ncs-grid": 2}
    assert all(c["compared"] <= c["R_max"] for c in stops)
    assert {h for t, h in ran if t == "ncs-grid"} <= {"any-layer#0", "any-layer#1"}
