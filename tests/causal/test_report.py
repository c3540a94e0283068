"""The report's causal section: each printed ρ is scipy's Spearman between the stored score
map and the causal map recomputed from the stored per-item arms, each gap is the causal
setting's held-out NCS minus the setting's, and the causal setting stays outside the Holm
family of the discovered settings."""

import json
import sqlite3

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from tests.report.synth import H, L, make_run
from vheads.report import load_run
from vheads.report._causal import causal_table, load_causal_maps
from vheads.report._tables import significance


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("run") / "r", causal=True)


def _db(run_dir):
    return sqlite3.connect(run_dir / "results.sqlite")


def _effect_map(run_dir) -> np.ndarray:
    """Each head's NCS from the stored drops: mean matched − mean mismatched."""
    drops: dict = {}
    for hid, arm, v in _db(run_dir).execute("SELECT headset_id, arm, value FROM causal_map WHERE test = 'ncs-all'"):
        drops.setdefault(hid, {}).setdefault(arm, []).append(v)
    m = np.full((L, H), np.nan)
    for l in range(L):
        for h in range(H):
            d = drops[f"L{l}H{h}"]
            m[l, h] = np.mean(d["matched"]) - np.mean(d["mismatched"])
    return m


def _held_out_ncs(run_dir, setting) -> float:
    sql = "SELECT value FROM arms WHERE setting = ? AND test = 'ncs-all' AND headset_id = 'S' AND arm = ?"
    arms = {a: [v for (v,) in _db(run_dir).execute(sql, (setting, a))] for a in ("matched", "mismatched")}
    return float(np.mean(arms["matched"]) - np.mean(arms["mismatched"]))


def test_printed_rho_and_gap_recompute_from_the_stored_maps(run_dir):
    run = load_run(run_dir)
    table = causal_table(run, load_causal_maps(run)["ncs-all"])
    effect = _effect_map(run_dir)
    best = _held_out_ncs(run_dir, "causal-ncs")
    assert len(table.rows) == 12
    for row in table.rows:
        setting = row[0]
        (scores,) = _db(run_dir).execute("SELECT scores FROM discovery WHERE setting = ?", (setting,)).fetchone()
        ref = sps.spearmanr(np.array(json.loads(scores)).ravel(), effect.ravel())
        assert float(row[1]) == pytest.approx(ref.statistic, abs=5e-4), setting
        assert row[3] == str(L * H)
        own = _held_out_ncs(run_dir, setting)
        assert float(row[5]) == pytest.approx(own, abs=5e-4) and float(row[6]) == pytest.approx(best, abs=5e-4)
        assert float(row[7]) == pytest.approx(best - own, abs=1e-3)
        # the heads S shares with the causal top-|S|, from the stored map
        (heads,) = _db(run_dir).execute("SELECT headset FROM discovery WHERE setting = ?", (setting,)).fetchone()
        S = {tuple(h) for h in json.loads(heads)}
        top = {divmod(int(i), H) for i in np.argsort(-effect.ravel(), kind="stable")[:len(S)]}
        assert row[4] == f"{len(S & top)} / {len(S)}"


def test_the_causal_setting_is_in_table_3_but_outside_the_holm_family(run_dir):
    run = load_run(run_dir)
    stats = {st.setting: st for st in significance(run, "ncs-all")}
    assert "causal-ncs" in stats and stats["causal-ncs"].controls["layer-matched"].p_holm is None
    family = [s for s in stats if s != "causal-ncs"]
    raw = [stats[s].controls["layer-matched"].rank.p for s in family]
    adjusted = multipletests(raw, method="holm")[1]
    assert [stats[s].controls["layer-matched"].p_holm for s in family] == pytest.approx(list(adjusted))


def test_a_run_without_a_causal_map_has_no_causal_section(tmp_path):
    run = load_run(make_run(tmp_path / "r"))
    assert load_causal_maps(run) == {}
