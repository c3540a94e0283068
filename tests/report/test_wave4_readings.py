"""The report's readings from the numbers: the headline β and its rule, a warning where S's
statistic changes sign or significance across a sweep, the generic-damage reading per
setting, and one count of settings."""

import json
from types import SimpleNamespace

import numpy as np
from scipy import stats as sps

from vheads.report import load_run, protocol_checks
from vheads.report._data import settings_text
from vheads.report._tables import damage_reading, generic_damage_table
from vheads.store import Store

L, H = 2, 6
S = [[0, 0], [1, 0], [1, 1]]


def _store(tmp_path, outcomes: dict, headline=None):
    """``outcomes``: {(setting, test): (S values, [control values, ...])}; the controls are
    distinct layer-matched head-sets of S (one of layer 0's 5 free heads, two of layer 1's 4)."""
    pool = [[[0, a], [1, b], [1, c]] for a in range(1, 6) for b in range(2, 6) for c in range(b + 1, 6)]
    st = Store(tmp_path)
    meta = {"config": {"model": "t", "controls": {"layer-matched": 9}, "seed": 0, "beta": 1e4}, "model_id": "t",
            "n_layers": L, "n_heads": H}
    if headline:
        meta["headline_beta"] = json.dumps(headline)
    st.set_meta(**meta)
    rows, hs, disc = [], [], []
    for (s, test), (s_vals, ctrl) in outcomes.items():
        items = [f"i{i}" for i in range(len(s_vals))]
        rows += [("u", s, test, "S", it, float(v)) for it, v in zip(items, s_vals)]
        for d, vals in enumerate(ctrl):
            rows += [("u", s, test, f"layer-matched#{d}", it, float(v)) for it, v in zip(items, vals)]
    for s in {s for s, _ in outcomes}:
        n = max(len(ctrl) for (ss, _), (_, ctrl) in outcomes.items() if ss == s)
        hs.append((s, "S", "S", 0, 0, json.dumps(S)))
        hs += [(s, f"layer-matched#{d}", "layer-matched", d, 1, json.dumps(pool[d])) for d in range(n)]
        disc.append((s, "ordinal", "last", "comics", 4, 3, json.dumps(np.zeros((L, H)).tolist()), json.dumps(S)))
    st.commit_unit("u", "eval", 0.0, {"outcomes": rows, "headsets": hs, "discovery": disc})
    st.close()
    return load_run(tmp_path)


def test_a_change_of_sign_or_significance_across_the_beta_sweep_is_warned(tmp_path):
    rng = np.random.default_rng(0)
    ctrl = [rng.normal(0, 0.01, 8) for _ in range(5)]
    steers = rng.normal(0.8, 0.05, 8)  # significant at β = 1 ...
    flat = rng.normal(0.0, 0.05, 8)  # ... not at β = 1e4
    run = _store(tmp_path, {("cm-ord-qsp", "cers@beta=1"): (steers, ctrl), ("cm-ord-qsp", "cers@beta=10000"): (flat, ctrl),
                            ("cm-ord-last", "cers@beta=1"): (steers + 0.1, ctrl),
                            ("cm-ord-last", "cers@beta=10000"): (steers, ctrl)},
                 headline={"beta": 1.0, "rule": "controls:0.05", "tolerance": 0.05, "met": True,
                           "rms": {"1": 0.01, "10000": 0.2}, "n_draws": 10})
    # independent: which intervals exclude 0
    assert sps.ttest_1samp(steers, 0).pvalue < 0.05 and sps.ttest_1samp(flat, 0).pvalue > 0.05
    checks = {c.item: c for c in protocol_checks(run)}
    beta = checks["β sweep: S across points (*: 95% interval excludes 0)"]
    assert "cm-ord-qsp" in beta.value and "cm-ord-last" not in beta.value  # cm-ord-last: significant at both
    assert beta.warning and "1 setting(s)" in beta.warning and len(beta.warning) <= 200
    head = checks["Steering strength β (headline)"]
    assert head.value.startswith("1, fixed by beta_rule controls:0.05 from the β sweep's controls alone")


def test_a_run_before_the_rule_states_its_config_beta(tmp_path):
    rng = np.random.default_rng(1)
    run = _store(tmp_path, {("cm-ord-qsp", "cers"): (rng.normal(0, 0.1, 6), [rng.normal(0, 0.1, 6) for _ in range(9)])})
    head = {c.item: c for c in protocol_checks(run)}["Steering strength β (headline)"]
    assert head.value.startswith("10000 (the config's beta; a run from before beta_rule)")


def test_the_generic_damage_reading_follows_the_numbers(tmp_path):
    rng = np.random.default_rng(2)
    ctrl_text = [rng.normal(0.3, 0.02, 6) for _ in range(25)]
    ctrl_ncs = [rng.normal(0.0, 0.02, 6) for _ in range(25)]
    run = _store(tmp_path, {("a-ord-last", "text"): (rng.normal(0.6, 0.02, 6), ctrl_text),
                            ("a-ord-last", "ncs-all"): (rng.normal(0.4, 0.02, 6), ctrl_ncs),
                            ("b-ord-last", "text"): (rng.normal(0.3, 0.02, 6), ctrl_text),
                            ("b-ord-last", "ncs-all"): (rng.normal(0.4, 0.02, 6), ctrl_ncs)})

    def rank(setting, test, ctrl):  # by hand, over the 25 distinct head-sets
        t_s = np.mean(run.cells[(setting, test)].s)
        return (1 + sum(np.mean(c) >= t_s for c in ctrl)) / 26

    assert rank("a-ord-last", "text", ctrl_text) == 1 / 26 and rank("a-ord-last", "ncs-all", ctrl_ncs) == 1 / 26
    assert rank("b-ord-last", "text", ctrl_text) > 0.05
    a, b = damage_reading(run, "a-ord-last"), damage_reading(run, "b-ord-last")
    assert a.startswith("generic damage: text-arm drop 0.6") and "may not be visual" in a and "p 0.038" in a
    assert b.startswith("visual: NCS 0.4")
    table = {r[0]: r for r in generic_damage_table(run).rows if r[0]}
    assert table["a-ord-last"][-1] == a


def test_one_count_of_settings():
    run = SimpleNamespace(settings=[f"g{i}" for i in range(12)] + ["causal-ncs"], score_settings=["a", "b", "c", "d"])
    assert settings_text(run) == "17 settings (12 grid, 4 score points, 1 causal)"
    assert settings_text(SimpleNamespace(settings=["g"], score_settings=[])) == "1 setting"


def test_a_text_arm_drop_above_every_one_of_few_controls_reads_cannot_tell_not_within(tmp_path):
    """10 controls: S above all of them still has rank p 1/11 > 0.05 (by hand), so the reading
    says cannot tell and names the floor, never "within the controls"."""
    rng = np.random.default_rng(3)
    ctrl_text = [rng.normal(0.1, 0.02, 6) for _ in range(10)]
    ctrl_ncs = [rng.normal(0.0, 0.02, 6) for _ in range(10)]
    run = _store(tmp_path, {("a-ord-last", "text"): (rng.normal(0.6, 0.02, 6), ctrl_text),
                            ("a-ord-last", "ncs-all"): (rng.normal(0.0, 0.02, 6), ctrl_ncs)})
    t_s = np.mean(run.cells[("a-ord-last", "text")].s)
    assert all(np.mean(c) < t_s for c in ctrl_text) and 1 / 11 > 0.05
    reading = damage_reading(run, "a-ord-last")
    assert reading.startswith("cannot tell:") and "within the controls" not in reading
    assert "1/(n+1) = 0.091" in reading and "S is above every one" in reading
