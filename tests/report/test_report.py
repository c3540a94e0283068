"""The report, built from synthetic results stores whose rows we wrote ourselves.

Numbers are checked against independent computations (numpy, scipy, statsmodels
directly), never against the report code's own helpers.
"""

from __future__ import annotations

import re
import sqlite3

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from tests.report.synth import SETTINGS, make_run
from vheads.report import build_report, load_run, protocol_checks, screenshot, significance
from vheads.report._screenshot import find_chromium

FEW = SETTINGS[:3]  # small runs keep the tests fast
FOUR = ["cm-ord-last", "cm-ref-qsp", "ph-ord-last", "ph-ref-qsp"]
LEAN = {"row_groups": False, "text": False, "extra_controls": False, "sweeps": False, "overlap": False,
        "strips": False, "any_layer": False}


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """Four settings with every optional table, R = 9: too few for Holm over 4 (4/10 > 0.05)."""
    d = make_run(tmp_path_factory.mktemp("full"), settings=FOUR, R=9)
    return d, build_report(d)


def _rows(run_dir, sql, *args):
    with sqlite3.connect(run_dir / "results.sqlite") as db:
        return db.execute(sql, args).fetchall()


def _by_hand(run_dir, test):
    """(setting -> (T_S, per-item S, {control: [T_r]})) straight from the outcome rows."""
    out = {}
    for (setting,) in _rows(run_dir, "SELECT DISTINCT setting FROM outcomes WHERE test=?", test):
        s = np.array([v for (v,) in _rows(run_dir, "SELECT value FROM outcomes WHERE setting=? AND test=? AND "
                                          "headset_id='S'", setting, test)])
        ctrl = {}
        for hid, mean in _rows(run_dir, "SELECT headset_id, AVG(value) FROM outcomes WHERE setting=? AND test=? AND "
                               "headset_id != 'S' GROUP BY headset_id", setting, test):
            ctrl.setdefault(hid.split("#")[0], []).append(mean)
        out[setting] = (s.mean(), s, ctrl)
    return out


def test_report_files_exist_and_html_is_self_contained(full_run):
    run_dir, html_path = full_run
    assert html_path == run_dir / "report.html"
    assert (run_dir / "report.md").is_file()
    figs = sorted(p.name for p in (run_dir / "figures").glob("*.png"))
    for name in ("random_band.png", "overlap.png", "score_maps.png", "beta_sweep.png", "k_sweep.png",
                          "strips_cm-ref-qsp.png"):
        assert name in figs
    html = html_path.read_text()
    assert "http://" not in html and "https://" not in html
    srcs = re.findall(r"""\bsrc\s*=\s*["']([^"']*)""", html)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert len(srcs) == len(figs)  # every figure inline
    assert not re.search(r"<link\b|<script\b|@import|url\(", html)
    hrefs = re.findall(r"""\bhref\s*=\s*["']([^"']*)""", html)
    assert all(h.startswith("#") for h in hrefs)  # in-page anchors only


def test_table3_numbers_equal_independent_computation(full_run):
    run_dir, _ = full_run
    md = (run_dir / "report.md").read_text()
    run = load_run(run_dir)
    for test in ("cers", "ncs-all"):
        hand = _by_hand(run_dir, test)
        stats = {st.setting: st for st in significance(run, test)}
        for control in ("layer-matched", "any-layer"):
            settings = list(hand)
            p_rank = []
            for s in settings:
                t_s, _, ctrl = hand[s]
                t = np.array(ctrl[control])
                p_rank.append((1 + np.sum(t >= t_s)) / (len(t) + 1))
            _, p_holm, _, _ = multipletests(p_rank, method="holm")
            for s, p, ph in zip(settings, p_rank, p_holm):
                cs = stats[s].controls[control]
                assert cs.rank.p == pytest.approx(p)
                assert cs.p_holm == pytest.approx(ph)
                t = np.array(hand[s][2][control])
                assert cs.mean == pytest.approx(t.mean())
                assert cs.z == pytest.approx((hand[s][0] - t.mean()) / t.std(ddof=1))
        # the rendered row of each setting carries the same numbers, rounded
        section = md[md.index(f"Table 3 layout: {'CERS' if test == 'cers' else 'NCS'}"):]
        for s, (t_s, x, ctrl) in hand.items():
            line = next(ln for ln in section.splitlines() if ln.startswith(f"| {s} |"))
            if test == "cers":
                half = sps.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
                lo, hi = t_s - half, t_s + half
            else:  # NCS: Welch over its two independent arms
                arm = {a: np.array([v for (v,) in _rows(run_dir, "SELECT value FROM arms WHERE setting=? AND test=? "
                                                        "AND headset_id='S' AND arm=? ORDER BY item_id", s, test, a)])
                       for a in ("matched", "mismatched")}
                lo, hi = sps.ttest_ind(arm["matched"], arm["mismatched"], equal_var=False).confidence_interval(0.95)
            assert f"{t_s:.3f} [{lo:.3f}, {hi:.3f}]".replace("-0.000", "0.000") in line
            t = np.array(ctrl["layer-matched"])
            p = (1 + np.sum(t >= t_s)) / (len(t) + 1)
            assert f"{t.mean():.3f} ± {t.std(ddof=1):.3f}".replace("-0.000", "0.000") in line
            assert f"{p:.3f} (" in line


def test_holm_family_follows_config_list(tmp_path):
    d = make_run(tmp_path, settings=FEW, R=19, audit=None, **(LEAN | {"any_layer": True}))
    # restrict the family to two settings by rewriting the config
    import json

    cfg = json.loads(_rows(d, "SELECT value FROM meta WHERE key='config'")[0][0])
    cfg["holm_family"] = FEW[:2]
    with sqlite3.connect(d / "results.sqlite") as db:
        db.execute("UPDATE meta SET value=? WHERE key='config'", (json.dumps(cfg),))
    run = load_run(d)
    hand = _by_hand(d, "cers")
    p = [(1 + np.sum(np.array(hand[s][2]["layer-matched"]) >= hand[s][0])) / 20 for s in FEW[:2]]
    _, ph, _, _ = multipletests(p, method="holm")
    stats = {st.setting: st for st in significance(run, "cers")}
    assert [stats[s].controls["layer-matched"].p_holm for s in FEW[:2]] == pytest.approx(list(ph))
    assert stats[FEW[2]].controls["layer-matched"].p_holm is None  # outside the family


def _warnings(run_dir):
    return [c for c in protocol_checks(load_run(run_dir)) if c.warning]


def test_small_R_over_twelve_settings_warns(tmp_path):
    d = make_run(tmp_path, settings=SETTINGS, R=9, n_items=3, tests=("cers", "ncs-all"),
                 **(LEAN | {"any_layer": True}))
    warns = _warnings(d)
    assert {c.item for c in warns} == {"Holm family (layer-matched)", "Holm family (any-layer)"}
    assert all("Holm over 12 settings cannot reach 0.05 for 12 of them" in c.warning and "floor ≥ 1.000" in c.warning
               and "R ≥ 239" in c.warning for c in warns)


def test_warnings_reach_both_files(full_run):
    run_dir, html_path = full_run
    assert "Holm over 4 settings cannot reach 0.05" in html_path.read_text()  # 4/(9+1) = 0.4 > 0.05
    md = (run_dir / "report.md").read_text()
    assert "Holm over 4 settings cannot reach 0.05" in md and "floor ≥ 0.400" in md and "R ≥ 79" in md


def test_large_R_gives_no_warning(tmp_path):
    d = make_run(tmp_path, settings=SETTINGS, R=1000, n_items=3, tests=("cers",), **LEAN)
    assert _warnings(d) == []


def test_clean_run_says_so_at_the_top(tmp_path):
    d = make_run(tmp_path, settings=FEW, R=100, n_items=3, tests=("cers",), **LEAN)
    html = build_report(d).read_text()
    assert "meets every item" in html and 'class="warnbox"' not in html


@pytest.mark.parametrize("R, warned", [(238, True), (239, False)])
def test_holm_warning_threshold_is_m_over_R_plus_1(tmp_path, R, warned):
    """12 settings: 12/(R+1) ≤ 0.05 needs R ≥ 239."""
    d = make_run(tmp_path, settings=SETTINGS, R=R, n_items=2, tests=("cers",), **LEAN)
    assert any(c.item.startswith("Holm family") for c in _warnings(d)) is warned


def test_audit_out_of_range_is_flagged(tmp_path):
    d = make_run(tmp_path, settings=FEW, R=100, n_items=3, tests=("cers",), audit="bad", **LEAN)
    warns = _warnings(d)
    assert [c.item for c in warns] == ["Baseline audit"] and "oracle = 0.550" in warns[0].warning
    md = (build_report(d).parent / "report.md").read_text()
    assert "OUTSIDE expected range" in md and "| ⚠ oracle |" in md


def test_missing_audit_and_fallbacks_warn(tmp_path):
    d = make_run(tmp_path, settings=FEW, R=100, n_items=3, tests=("cers",), audit=None, **LEAN,
                 meta_extra={"fallbacks": {"cm-ord-last": ["layer 3: S has 8 heads there but only 0 other heads"]}})
    items = {c.item for c in _warnings(d)}
    assert items == {"Baseline audit", "Layer-matched fallbacks"}


def test_unfinished_controls_warn(tmp_path):
    d = make_run(tmp_path, settings=FEW, R=100, config_R=200, n_items=3, tests=("cers",), **LEAN)
    warns = _warnings(d)
    assert [c.item for c in warns] == ["Controls: layer-matched, R"] and "the config asks for 200" in warns[0].warning


def test_nonfinite_outcomes_are_left_out_and_warned(tmp_path):
    d = make_run(tmp_path, settings=FEW, R=100, n_items=4, tests=("cers",), **LEAN)
    with sqlite3.connect(d / "results.sqlite") as db:
        db.execute("UPDATE coded_outcomes SET value=NULL WHERE setting=(SELECT id FROM names WHERE name=?) AND "  # schema 4
                   "headset_id=(SELECT id FROM names WHERE name='S') AND item_id=(SELECT id FROM names WHERE name='item000')",
                   (FEW[0],))
    kept = [v for (v,) in _rows(d, "SELECT value FROM outcomes WHERE setting=? AND headset_id='S' AND value IS NOT NULL",
                                FEW[0])]
    run = load_run(d)
    assert run.cells[(FEW[0], "cers")].s.mean() == pytest.approx(np.mean(kept)) and len(kept) == 3
    assert [c.item for c in _warnings(d)] == ["Non-finite outcomes"]


def test_minimal_run_skips_missing_sections(tmp_path):
    """Only CERS with layer-matched controls: no NCS, sweeps, overlap, audit, strips — no error."""
    d = make_run(tmp_path, settings=FEW, R=5, n_items=4, tests=("cers",), audit=None, **LEAN)
    html = build_report(d).read_text()
    md = (d / "report.md").read_text()
    assert "Table 3 layout: CERS" in md and "Table 3 layout: NCS" not in md
    for absent in ("Generic-damage controls", "β and k sweeps", "Baseline audit (seed", "NCS per row group",
                   "noise ceiling (seed Table 20)"):
        assert absent not in md
    figs = {p.name for p in (d / "figures").glob("*.png")}
    assert figs == {"random_band.png", "score_maps.png", "overlap.png"}
    assert html.count("data:image/png;base64,") == 3


def test_empty_store_builds_a_report(tmp_path):
    from vheads.store import Store

    Store(tmp_path).close()
    html = build_report(tmp_path).read_text()
    assert "Reporting protocol" in html and "no discovery recorded" in html


def test_missing_store_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no results store"):
        build_report(tmp_path / "nope")


def test_screenshot_returns_false_without_chromium(tmp_path, monkeypatch):
    import vheads.report._screenshot as shot

    monkeypatch.setattr(shot, "find_chromium", lambda: None)
    (tmp_path / "a.html").write_text("<html></html>")
    assert shot.screenshot(tmp_path / "a.html", tmp_path / "a.png") is False
    assert not (tmp_path / "a.png").exists()


@pytest.mark.skipif(find_chromium() is None, reason="no chromium installed")
def test_screenshot_renders_the_report(full_run, tmp_path):
    _, html_path = full_run
    png = tmp_path / "shot.png"
    assert screenshot(html_path, png, height=1200)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
