"""The outcome metrics in the store and the report: every column recomputes with scipy /
statsmodels, a store of an older vheads stays readable, the metric key is validated."""

import sqlite3

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from tests.report.synth import LOGIT_DIFF, LOGPROB, make_run
from vheads._errors import VheadsError
from vheads.report import build_report, load_run
from vheads.report._tables import metric_robustness_table
from vheads.store import Store

FOUR = ["cm-ord-last", "cm-ref-qsp", "ph-ord-last", "ph-ref-qsp"]
LEAN = {"row_groups": False, "text": False, "extra_controls": False, "sweeps": False, "overlap": False,
        "strips": False, "any_layer": False}
COLUMN = {"p4": "value", "logprob": "logprob", "logit-diff": "logit_diff"}


def _hand(run_dir, test, metric, R):
    """Per setting: (S's per-item values, interval, rank p, Holm p) straight from the rows."""
    col = COLUMN[metric]
    with sqlite3.connect(run_dir / "results.sqlite") as db:
        rows = db.execute(f"SELECT setting, headset_id, {col} FROM outcomes WHERE test=? ORDER BY setting, headset_id, item_id",
                          (test,)).fetchall()
        arms = db.execute(f"SELECT setting, arm, {col} FROM arms WHERE test=? AND headset_id='S' ORDER BY item_id",
                          (test,)).fetchall()
    per: dict = {}
    for s, hid, v in rows:
        per.setdefault(s, {}).setdefault(hid, []).append(v)
    out = {}
    for s, d in per.items():
        t_s = np.mean(d["S"])
        t_c = np.array([np.mean(d[f"layer-matched#{r}"]) for r in range(R)])
        p = (1 + np.sum(t_c >= t_s)) / (R + 1)
        if test.startswith("ncs"):
            m = [v for ss, a, v in arms if ss == s and a == "matched"]
            x = [v for ss, a, v in arms if ss == s and a == "mismatched"]
            ci = sps.ttest_ind(m, x, equal_var=False).confidence_interval(0.95)
        else:
            ci = sps.ttest_1samp(d["S"], 0).confidence_interval(0.95)
        out[s] = (t_s, ci, p)
    holm = multipletests([out[s][2] for s in FOUR], method="holm")[1]
    return {s: (*out[s], h) for s, h in zip(FOUR, holm)}


def test_metric_robustness_table_recomputes_under_each_metric_from_the_stored_columns(tmp_path):
    R = 99  # Holm over 4 can reach 4/100 = 0.04
    d = make_run(tmp_path, settings=FOUR, R=R, n_items=8, **LEAN)
    table = metric_robustness_table(load_run(d))
    assert [g for g, _ in table.groups[1:4]] == ["p4 (P over the four letters)", "logprob (log P, full vocabulary)",
                                                 "logit-diff (key − mean of the other letters)"]
    changed = 0
    for row in table.rows:
        test = {"CERS (steerability)": "cers", "NCS (necessity)": "ncs-all"}[row[0]]
        verdicts = []
        for i, metric in enumerate(("p4", "logprob", "logit-diff")):
            t_s, ci, p, p_holm = _hand(d, test, metric, R)[row[1]]
            assert row[2 + 2 * i] == f"{t_s:.3f} [{ci.low:.3f}, {ci.high:.3f}]".replace("-0.000", "0.000")
            verdict = "yes" if p_holm <= 0.05 else "no"  # every n is 99: Holm over 4 can reach 0.04, no cell cannot tell
            assert row[3 + 2 * i].replace("*", "") == (f"{p_holm:.3f}" if p_holm >= 0.001 else f"{p_holm:.1e}") + f" {verdict}"
            verdicts.append(verdict)
        assert row[-1].startswith("same") == (len(set(verdicts)) == 1)
        changed += len(set(verdicts)) > 1
    assert changed > 0  # the synthetic logit-diff flips the sign: some conclusions change (not vacuous)
    assert f"changes (yes under one metric, no under another) for {changed} of {len(table.rows)} rows" in table.caption


def test_findings_and_the_metric_robustness_table_read_every_cell_with_one_rule(tmp_path):
    """The causal setting (outside the families) and a setting whose pool is too small read the
    same verdict in both, under every metric."""
    from vheads.report._findings import findings

    d = make_run(tmp_path, settings=FOUR, R=99, n_items=8, causal=True, small_pools={"cm-ref-qsp": 10}, **LEAN)
    run = load_run(d)
    table, f = metric_robustness_table(run), findings(run)
    metrics = ("p4", "logprob", "logit-diff")
    words = set()
    for row in table.rows:
        test = {"CERS (steerability)": "cers", "NCS (necessity)": "ncs-all"}[row[0]]
        for i, m in enumerate(metrics):
            col = next(c for c in f.columns if c.test == test and c.metric == m)
            word = row[3 + 2 * i].split(" ", 1)[1]
            assert word == f.verdicts[(row[1], col)].verdict, (row[1], test, m)
            words.add(word)
    assert {"yes", "cannot tell"} <= words and "causal-ncs" in {r[1] for r in table.rows}


def test_config_metric_chooses_what_the_tables_lead_with(tmp_path):
    d = make_run(tmp_path, settings=FOUR, R=9, n_items=4, config_extra={"metric": "logprob"}, **LEAN)
    run = load_run(d)
    assert run.metric == "logprob"
    with sqlite3.connect(d / "results.sqlite") as db:
        v = [x for (x,) in db.execute("SELECT value FROM outcomes WHERE setting='cm-ord-last' AND test='cers' AND "
                                      "headset_id='S' ORDER BY item_id")]
    assert run.cells[("cm-ord-last", "cers")].s == pytest.approx([LOGPROB(x) for x in v])
    assert load_run(d, metric="logit-diff").cells[("cm-ord-last", "cers")].s == pytest.approx([LOGIT_DIFF(x) for x in v])
    md = (build_report(d).parent / "report.md").read_text()
    assert "Metric robustness" in md and "logprob in the tables" in md


def test_a_store_without_the_metric_columns_reads_as_p4_and_refuses_the_others(tmp_path):
    d = make_run(tmp_path, settings=FOUR, R=9, n_items=4, metrics=False, **LEAN)
    run = load_run(d)
    assert run.metric == "p4" and run.cells[("cm-ord-last", "cers")].s is not None
    with pytest.raises(VheadsError, match="no logprob values"):
        load_run(d, metric="logprob")
    table = metric_robustness_table(run)
    assert "Not stored in this run: logprob, logit-diff." in table.caption and len(table.groups) == 3


def test_an_older_store_gets_the_metric_columns_and_keeps_its_rows(tmp_path):
    """A store written before the metric columns: read-only it shows them as NULL; opened for
    writing (a resumed run) they are added, and new rows carry them."""
    with sqlite3.connect(tmp_path / "results.sqlite") as db:
        db.execute("CREATE TABLE meta(model TEXT NOT NULL DEFAULT '', key TEXT, value TEXT, PRIMARY KEY(model, key))")
        db.execute("CREATE TABLE outcomes(model TEXT NOT NULL DEFAULT '', unit_id TEXT, setting TEXT, test TEXT, "
                   "headset_id TEXT, item_id TEXT, value REAL, PRIMARY KEY(model, setting, test, headset_id, item_id))")
        db.execute("INSERT INTO outcomes VALUES ('', 'u', 's', 'cers', 'S', 'i0', 0.25)")
    ro = Store(tmp_path, readonly=True)
    assert ro.query("SELECT value, logprob, logit_diff FROM outcomes") == [(0.25, None, None)]
    assert ro.has_metric("p4") and not ro.has_metric("logprob")
    ro.close()
    st = Store(tmp_path)
    st.commit_unit("v", "eval", 0.0, {"outcomes": [("v", "s", "cers", "S", "i1", 0.5, -0.7, 1.2)]})
    assert st.query("SELECT item_id, value, logprob, logit_diff FROM outcomes ORDER BY item_id") == [
        ("i0", 0.25, None, None), ("i1", 0.5, -0.7, 1.2)]
    st.close()


def test_unknown_metric_in_the_config_is_refused_with_its_key():
    from vheads.study import config_from_dict

    with pytest.raises(VheadsError, match="'metric'.*logits"):
        config_from_dict({"metric": "logits"})
    assert config_from_dict({"metric": "logit-diff"}).science_hash() == config_from_dict({}).science_hash()


def test_vheads_report_metric_flag_leads_the_tables_with_that_metric(tmp_path):
    from typer.testing import CliRunner

    from vheads.cli import app

    d = make_run(tmp_path / "run", settings=FOUR, R=9, n_items=4, **LEAN)  # config metric: p4
    with sqlite3.connect(d / "results.sqlite") as db:
        v = [x for (x,) in db.execute("SELECT value FROM outcomes WHERE setting='cm-ord-last' AND test='cers' AND "
                                      "headset_id='S' ORDER BY item_id")]
    res = CliRunner().invoke(app, ["report", str(d), "--metric", "logit-diff", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "out" / "report.md").read_text()
    assert "logit-diff in the tables" in md
    # Table 3's CERS mean of S is the mean of the stored logit-diff column, not of p4
    cers = f"{np.mean([LOGIT_DIFF(x) for x in v]):.3f}"
    assert cers in md and load_run(d).metric == "p4"
    bad = CliRunner().invoke(app, ["report", str(d), "--metric", "accuracy", "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "unknown metric 'accuracy'" in bad.output and not (tmp_path / "bad").exists()
