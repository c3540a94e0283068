"""Necessity per item kind (vheads.study.stages.kinds, report section ``kinds``): every stored
statistic and every printed number equals an independent numpy / scipy computation on the
per-item values the evaluation stage stored; the stage runs no forward pass."""

from __future__ import annotations

import sqlite3
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from vheads.store import Store
from vheads.study.stages.kinds import kinds_stage

SETTINGS = ("cm-ord-last", "co-ref-qsp")
HEADSETS = ("S", *(f"layer-matched#{d}" for d in range(6)), "any-layer#0", "S@k=2", "layer-matched@k=2#0")
N_ITEMS = 7


def _value(rng):
    return tuple(float(v) for v in rng.normal(0.1, 0.3, 3))  # p4, logprob, logit_diff


def _fill(run_dir, seed: int = 3) -> dict:
    """A store with arms (ncs-all) and outcomes (ncs-grid, text) of every head-set; returns
    ``{(setting, kind, headset_id, metric): per-item values}`` as written."""
    rng = np.random.default_rng(seed)
    want, arms, outcomes = {}, [], []
    for s in SETTINGS:
        for h in HEADSETS:
            for kind, test, arm in (("class-matched", "ncs-all", "matched"), ("class-mismatched", "ncs-all", "mismatched"),
                                    ("grid-oracle", "ncs-grid", None), ("text", "text", None)):
                for i in range(N_ITEMS):
                    v = _value(rng)
                    iid = f"{kind}-s1-{i}"
                    if arm:
                        arms.append((f"eval/{s}", s, test, h, iid, arm, *v))
                    else:
                        outcomes.append((f"eval/{s}", s, test, h, iid, *v))
                    for m, x in zip(("p4", "logprob", "logit-diff"), v):
                        want.setdefault((s, kind, h, m), []).append(x)
    st = Store(run_dir)
    st.commit_unit("eval", "eval", 0.0, {"arms": arms, "outcomes": outcomes})
    kinds_stage(st, SimpleNamespace(seed=0))
    st.close()
    return want


def _stored(run_dir) -> list[dict]:
    db = sqlite3.connect(run_dir / "results.sqlite")  # a plain reader: no vheads between the test and the rows
    db.row_factory = sqlite3.Row
    rows = [dict(r) for r in db.execute("SELECT * FROM kind_necessity")]
    db.close()
    return rows


def test_each_stored_row_is_the_mean_sd_t_interval_and_bootstrap_of_its_items(tmp_path):
    want = _fill(tmp_path)
    rows = _stored(tmp_path)
    # S and the six layer-matched controls only (no other control, no k sweep set), every kind and metric
    assert {r["headset_id"] for r in rows} == {"S", *(f"layer-matched#{d}" for d in range(6))}
    assert len(rows) == len(SETTINGS) * 4 * 3 * 7
    for r in rows:
        x = np.array(want[(r["setting"], r["kind"], r["headset_id"], r["metric"])])
        assert r["n"] == N_ITEMS
        assert r["mean"] == pytest.approx(np.mean(x), abs=1e-12)
        assert r["sd"] == pytest.approx(np.std(x, ddof=1), abs=1e-12)
        if r["headset_id"] != "S":
            assert r["t_lo"] is None and r["boot_lo"] is None
            continue
        t = stats.ttest_1samp(x, 0.0).confidence_interval(0.95)
        assert (r["t_lo"], r["t_hi"]) == pytest.approx((t.low, t.high), abs=1e-12)
        b = stats.bootstrap((x,), np.mean, n_resamples=2000, method="percentile", rng=np.random.default_rng(r["boot_seed"]))
        assert (r["boot_lo"], r["boot_hi"]) == pytest.approx((b.confidence_interval.low, b.confidence_interval.high), abs=1e-12)


def test_the_stage_is_one_unit_and_a_resumed_run_keeps_it(tmp_path):
    _fill(tmp_path)
    st = Store(tmp_path)
    before = st.query("SELECT * FROM kind_necessity ORDER BY 1, 2, 3, 4, 5")
    kinds_stage(st, SimpleNamespace(seed=99))  # done: not recomputed
    assert st.query("SELECT * FROM kind_necessity ORDER BY 1, 2, 3, 4, 5") == before
    assert st.query("SELECT kind FROM units WHERE unit_id = 'kind-necessity'") == [("kind-necessity",)]
    st.close()


def _cell(text: str) -> list[float]:
    return [float(v) for v in text.replace("[", " ").replace("]", " ").replace(",", " ").split()]


def test_the_report_table_prints_the_stored_numbers_and_the_controls_band_and_rank_p(tmp_path):
    from vheads.report._data import load_run
    from vheads.report.sections._kinds import kind_cells, kinds_table

    _fill(tmp_path)
    run = load_run(tmp_path)
    table = kinds_table(run, kind_cells(tmp_path, "", run.metric))
    rows = [r for r in _stored(tmp_path) if r["metric"] == run.metric]
    assert len(table.rows) == len(SETTINGS) * 4
    for setting, kind, test, n, s_ci, boot, band, R, p in table.rows:
        mine = [r for r in rows if r["setting"] == setting and r["kind"] == kind]
        s = next(r for r in mine if r["headset_id"] == "S")
        ctl = np.array([r["mean"] for r in mine if r["headset_id"] != "S"])
        assert test == s["test"] and int(n) == s["n"] and int(R) == len(ctl) == 6
        assert _cell(s_ci) == pytest.approx([s["mean"], s["t_lo"], s["t_hi"]], abs=5e-4)
        assert _cell(boot) == pytest.approx([s["boot_lo"], s["boot_hi"]], abs=5e-4)
        assert _cell(band) == pytest.approx([ctl.mean(), *np.percentile(ctl, [2.5, 97.5])], abs=5e-4)
        # rank p: the share of the R controls and S itself at or above S's mean
        assert float(p) == pytest.approx((1 + np.sum(ctl >= s["mean"])) / (len(ctl) + 1), abs=5e-4)


def test_the_section_draws_its_figure_and_a_run_without_the_table_has_no_section(tmp_path):
    from vheads.report._data import load_run
    from vheads.report.sections._kinds import kinds

    _fill(tmp_path / "with")
    blocks = kinds(load_run(tmp_path / "with"))
    assert blocks[0].name == "kind_necessity" and blocks[0].png.startswith(b"\x89PNG")
    st = Store(tmp_path / "without")
    st.commit_unit("eval", "eval", 0.0, {"outcomes": [("u", "cm-ord-last", "text", "S", "text-s1-0", 0.1, 0.1, 0.1)]})
    st.close()
    assert kinds(load_run(tmp_path / "without")) == []


def test_a_kind_with_a_non_finite_value_of_s_is_stored_without_a_mean_and_left_out_of_the_table(tmp_path):
    from vheads.report._data import load_run
    from vheads.report.sections._kinds import kind_cells, kinds_table

    st = Store(tmp_path)
    rows = [("u", "cm-ord-last", "text", h, f"text-s1-{i}", v, v, v)
            for h in ("S", "layer-matched#0") for i, v in enumerate((0.1, float("nan") if h == "S" else 0.2, 0.3))]
    st.commit_unit("eval", "eval", 0.0, {"outcomes": rows})
    kinds_stage(st, SimpleNamespace(seed=0))
    st.close()
    s_row = next(r for r in _stored(tmp_path) if r["headset_id"] == "S" and r["metric"] == "p4")
    assert s_row["mean"] is None and s_row["t_lo"] is None and s_row["n"] == 3
    run = load_run(tmp_path)
    assert kind_cells(tmp_path, "", run.metric) == {} and kinds_table(run, {}) is None


@pytest.mark.parametrize("alpha", [0.01, 0.05])
@pytest.mark.parametrize("discrete", [False, True])
def test_the_per_kind_rank_p_holds_its_level_under_its_null(alpha, discrete):
    """Under the null the section tests (S's items drawn as every control's: S exchangeable with
    its layer-matched controls within the kind), P(kind rank p <= alpha) <= alpha: the rejection
    count of 4,000 simulated kinds is not above alpha by a one-sided binomial test (scipy). The
    discrete case (per-item values 0 / 1, as p4 often is on the tiny model) has tied means."""
    from vheads.report.sections._kinds import kind_rank_p

    rng = np.random.default_rng(11 if discrete else 12)
    sims, n_items, n_controls = 4000, 6, 39
    draw = (lambda size: rng.integers(0, 2, size).astype(float)) if discrete else (lambda size: rng.normal(0.0, 1.0, size))
    rejected = 0
    for _ in range(sims):
        means = draw((1 + n_controls, n_items)).mean(axis=1)  # S first, then its controls
        rejected += kind_rank_p(float(means[0]), [float(m) for m in means[1:]]) <= alpha
    assert stats.binomtest(rejected, sims, alpha, alternative="greater").pvalue > 1e-3, (rejected, sims)
    assert rejected / sims <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / sims)
