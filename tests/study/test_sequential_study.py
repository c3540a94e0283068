"""The study's sequential controls (``controls_h``, ``controls_batch``; :mod:`vheads.study._sequential`):
an exchangeable control stops once h of its draws reach S in every cell of its (setting, test),
the report's rank p is Besag and Clifford's over the stored draws in draw order, a resumed run
gives the same store, and ``controls_h = 0`` is the fixed-R rank p.

Every p here is recomputed by hand from the stored per-item outcomes (a head-set's T is its
mean over items), not read back from the code under test."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest

from tests.hardening.clitools import refused, vheads
from vheads._errors import VheadsError
from vheads.report._data import Cell
from vheads.report._tables import compare
from vheads.study import Store, config_from_dict, load_config, run_study


def _bc_p(t_s: float, t: list[float], h: int, R_max: int) -> float:
    """Besag and Clifford's p by its definition: walk the draws; at the h-th T_r >= T_S after L
    draws, h / L; after R_max draws with g of them reaching T_S, (1 + g) / (R_max + 1)."""
    g = 0
    for L, x in enumerate(t[:R_max], start=1):
        g += x >= t_s
        if g == h:
            return h / L
    return (1 + g) / (min(len(t), R_max) + 1)


def _settled_p(t_s: float, t: list[float], h: int, R_max: int) -> float:
    """A comparison the study stopped once its Holm verdict was settled, after n < R_max draws
    with g < h reaching T_S: the largest p a continuation could give — the next h − g draws
    all reach T_S (h / (n + h − g)), or, where fewer are left, every one left does."""
    n, g = len(t), sum(x >= t_s for x in t)
    return h / (n + h - g) if n + h - g <= R_max else (1 + g + R_max - n) / (R_max + 1)


# ---- config ------------------------------------------------------------------------------------


@pytest.mark.parametrize("over,key", [
    ({"controls_h": -1}, "controls_h"),
    ({"controls_batch": 0}, "controls_batch"),
    ({"controls_h": 1.5}, "controls_h"),
    ({"controls_h": 30, "controls": {"layer-matched": 20}}, "controls_h"),  # R_max < h, h set by the config
])
def test_a_bad_sequential_key_is_one_error_naming_it(over, key):
    with pytest.raises(VheadsError) as e:
        load_config(**over)  # a config file's keys (an h above R_max is refused where the user sets it)
    assert str(e.value).startswith(f"config key {key!r}") and "\n" not in str(e.value)


def test_a_bad_controls_h_exits_2_before_any_work(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text("controls_h = -2\n")
    refused(vheads("plan", toml), "controls_h")


def test_the_default_h_leaves_a_small_r_fixed_and_zero_is_fixed_r():
    """The default h (10) with an R below it is no error: such a control can never see h draws
    reach S, so its p is the fixed-R one; the default config is sequential."""
    from vheads.study._sequential import sequential_controls

    assert config_from_dict({}).controls_h == 10
    assert sequential_controls(config_from_dict({})) == ["layer-matched", "any-layer"]  # not attention-matched
    assert config_from_dict({"controls": {"layer-matched": 3}}).controls["layer-matched"] == 3
    assert sequential_controls(config_from_dict({"controls_h": 0})) == []


# ---- the report's p --------------------------------------------------------------------------


def test_fixed_r_p_is_one_plus_the_draws_reaching_s_over_n_plus_one():
    """``controls_h = 0`` (no ``Cell.sequential``): p = (1 + #{T_r >= T_S}) / (n + 1)."""
    rng = np.random.default_rng(3)
    s = rng.normal(0.3, 1, 12)
    t = rng.normal(0, 0.5, 40)
    cell = Cell(s=s, controls={"layer-matched": t})
    got = compare(cell, "x", "cers").controls["layer-matched"]
    assert got.rank.p == pytest.approx((1 + int(sum(x >= s.mean() for x in t))) / (len(t) + 1))
    assert got.n_max is None


def test_the_sequential_p_and_its_floor_are_read_from_h_and_r_max():
    """An exchangeable control of a sequential run: p = h / L at the h-th draw reaching T_S, the
    draws after it (a round runs past the stop) change nothing; the Holm floor's n is R_max."""
    t = np.array([0.1, 0.9, -0.2, 0.8, 0.7, 0.95, 0.0, -1.0])  # draws 2, 4 and 5 reach T_S = 0.5
    cell = Cell(s=np.full(4, 0.5), controls={"layer-matched": t}, sequential={"layer-matched": (3, 200)})
    cs = compare(cell, "x", "cers").controls["layer-matched"]
    assert cs.rank.p == pytest.approx(3 / 5) == pytest.approx(_bc_p(0.5, list(t), 3, 200))
    assert cs.n_max == 200 and cs.rank.stopped == "h"
    cell.controls["layer-matched"] = t[:5]  # nothing stored past the stop: the same p
    assert compare(cell, "x", "cers").controls["layer-matched"].rank.p == pytest.approx(3 / 5)


# ---- a reduced study -----------------------------------------------------------------------------

H, BATCH, R = 2, 2, 12


def _config(model_dir, **over):
    d = {"model": str(model_dir), "corpora": ["comics"], "queries": ["ordinal"], "sources": ["last", "qspan"],
         "n_discovery": 4, "n_eval": 4, "splits": 10, "k": 2, "tests": ["ncs"], "row_groups": ["all"],
         "ablation": ["attention"], "controls": {"layer-matched": R, "any-layer": R, "random-n@2": H},
         "beta_sweep": [], "k_sweep": [],
         "scores": [], "causal_tests": [], "algebra_controls": 0, "controls_h": H, "controls_batch": BATCH,
         "run": {"shard_size": 2, "batch_size": 64}}
    d.update(over)
    return config_from_dict(d)


def _stored(run_dir):
    """``(setting, test) -> head-set id -> T`` (mean over items, p4) and the draws of each
    control in draw order, straight from the store."""
    s = Store(run_dir)
    try:
        vals = defaultdict(list)
        for setting, test, hid, v in s.query("SELECT setting, test, headset_id, value FROM outcomes"):
            vals[(setting, test, hid)].append(v)
        draws = defaultdict(list)
        for setting, hid, control in s.query("SELECT setting, headset_id, control FROM headsets WHERE control != 'S' "
                                             "ORDER BY setting, control, draw"):
            draws[(setting, control)].append(hid)
        stops = json.loads(s.get_meta("sequential_stops"))
        rows = s.query("SELECT setting, test, headset_id, item_id, value FROM outcomes ORDER BY 1, 2, 3, 4")
    finally:
        s.close()
    T = defaultdict(dict)
    for (setting, test, hid), v in vals.items():
        T[(setting, test)][hid] = float(np.mean(v))
    return T, dict(draws), stops, rows


@pytest.fixture(scope="module")
def sequential_run(tiny_random_dirs, tmp_path_factory):
    out = tmp_path_factory.mktemp("seq") / "run"
    res = run_study(_config(tiny_random_dirs["qwen3_vl"]), out, progress=False, report=False, skip_doctor=True)
    return out, res


@pytest.mark.slow
def test_a_control_stops_early_where_s_sits_inside_it_and_another_runs_to_r_max(sequential_run):
    """On the random tiny model S is a typical head-set: some comparison stops after h of its
    draws reach S, with fewer draws stored than R_max; the small
    random-n control of |S| = 2 heads with R_max = h (2 draws) runs to R_max: it cannot stop before."""
    out, _ = sequential_run
    T, draws, stops, _ = _stored(out)
    ran = {(s, c): sum(h in T[(s, "ncs-all")] for h in ids) for (s, c), ids in draws.items()}
    assert any(n < len(draws[key]) for key, n in ran.items()), ran
    assert any(n == len(draws[key]) for key, n in ran.items()), ran
    for c in stops["comparisons"]:  # the record says how many ran, and it is what the store holds
        assert c["ran"] == ran[(c["setting"], c["control"])] and c["R_max"] == len(draws[(c["setting"], c["control"])])
        assert c["stopped"] in ("h", "decided") or c["ran"] == c["R_max"]  # every comparison decided


@pytest.mark.slow
def test_the_reports_rank_p_is_besag_clifford_over_the_stored_draws_in_order(sequential_run):
    from vheads.report._data import load_run
    from vheads.report._tables import MAIN_CONTROLS, significance

    out, _ = sequential_run
    T, draws, stops, _ = _stored(out)
    settled = {(c["setting"], c["test"], c["control"]) for c in stops["comparisons"] if c["stopped"] == "decided"
               and c["metric"] == "p4"}
    run = load_run(out)
    from statsmodels.stats.multitest import multipletests

    from vheads.report._tables import holm_family

    listed = holm_family(run)
    stats = significance(run, "ncs-all")
    checked = floors = 0
    for st in stats:
        for control, cs in st.controls.items():
            ids = draws[(st.setting, control)]
            t = [T[(st.setting, "ncs-all")][h] for h in ids if h in T[(st.setting, "ncs-all")]]
            by_hand = _settled_p if (st.setting, "ncs-all", control) in settled else _bc_p
            assert cs.rank.p == pytest.approx(by_hand(T[(st.setting, "ncs-all")]["S"], t, H, len(ids)))
            in_family = listed is None or st.setting in listed
            if control in MAIN_CONTROLS and in_family:  # Holm over Table 3's controls (layer-matched, any-layer)
                members = [x for x in stats if control in x.controls and (listed is None or x.setting in listed)]
                at_floor = [1 / (len(draws[(x.setting, control)]) + 1) for x in members]  # every member at R_max's floor
                want = multipletests(at_floor, method="holm")[1][members.index(st)]
                assert cs.holm_floor == pytest.approx(want)  # from R_max, not the n compared
                floors += 1
            elif cs.holm_floor is not None:  # read on its own (unadjusted): the rank p's floor from R_max
                assert cs.holm_floor == pytest.approx(1 / (len(ids) + 1))
            checked += 1
    assert checked == 6 and floors == 4  # two settings, three exchangeable controls


@pytest.mark.slow
def test_a_resumed_run_gives_the_same_store(tiny_random_dirs, tmp_path, monkeypatch):
    """A run stopped inside its first round of later controls, resumed, plans the same rounds (each
    from the rounds before it, not from the half-run round) and
    ends with the same outcomes and stops as an uninterrupted run."""
    import vheads.study._runner as runner

    # one setting of k = 3 (an any-layer pool of 55): a family of one whose cells can reach 0.05,
    # so not every comparison is settled after round 0 (the fixture's small pools would be)
    cfg = _config(tiny_random_dirs["qwen3_vl"], sources=["last"], k=3,
                  controls={"layer-matched": 40, "any-layer": 40, "random-n@3": H})
    out = tmp_path / "ref"
    run_study(cfg, out, progress=False, report=False, skip_doctor=True)
    real, calls = runner._run_units, []

    def stop_in_round_1(store, run_dir, backend, units, desc, progress):
        calls.append(desc)
        if "round 1" in desc:  # one unit of the round committed, then stopped
            real(store, run_dir, backend, units[:1], desc, progress)
            raise KeyboardInterrupt
        return real(store, run_dir, backend, units, desc, progress)

    monkeypatch.setattr(runner, "_run_units", stop_in_round_1)
    with pytest.raises(KeyboardInterrupt):
        run_study(cfg, tmp_path / "run", progress=False, report=False, skip_doctor=True)
    assert any("round 1" in d for d in calls)  # the run had a later round, and stopped there
    monkeypatch.setattr(runner, "_run_units", real)
    run_study(cfg, tmp_path / "run", progress=False, report=False, skip_doctor=True)
    _, _, stops_ref, ref = _stored(out)
    _, _, stops, got = _stored(tmp_path / "run")
    assert [r[:-1] for r in got] == [r[:-1] for r in ref]
    assert max(abs(a[-1] - b[-1]) for a, b in zip(got, ref)) <= 1e-5
    key = lambda c: (c["setting"], c["test"], c["metric"], c["control"])  # noqa: E731
    assert [(key(c), c["compared"], c["ran"], c["stopped"]) for c in stops["comparisons"]] == \
        [(key(c), c["compared"], c["ran"], c["stopped"]) for c in stops_ref["comparisons"]]
