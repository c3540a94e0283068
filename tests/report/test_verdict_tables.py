"""Every table that prints a verdict or an n prints its own: Table 9 each row's n compared (and
a warning where an attention-matched control gave fewer than R), the floors table the n Holm
over m needs and the pool where the pool is the limit, the β sweep's caption what its rows show."""

from __future__ import annotations

import numpy as np
from statsmodels.stats.multitest import multipletests

from tests.report.synth import make_run
from vheads.report import load_run, protocol_checks
from vheads.report._tables import matched_controls_table, significance_table, sweep_table

GRID = ["cm-ord-last", "cm-ord-qsp", "cm-ord-out", "cm-ref-last"]
LEAN = {"row_groups": False, "text": False, "extra_controls": False, "overlap": False, "strips": False, "any_layer": False}


def test_table_9_prints_each_row_s_own_n_and_warns_of_an_uncountable_pool_below_r(tmp_path):
    d = make_run(tmp_path, settings=GRID, R=19, n_items=4, sweeps=False, small_pools={"cm-ord-qsp": 10},
                 attention_matched=(20, 10), **LEAN)
    run = load_run(d)
    table = matched_controls_table(run)
    assert not any("R=" in c for c in table.columns)
    n_of = {s: (len(run.cells[(s, "cers")].distinct("layer-matched")), len(run.cells[(s, "cers")].distinct("attention-matched")))
            for s in GRID}
    assert n_of["cm-ord-qsp"] == (10, 10) and n_of["cm-ord-last"] == (19, 10)
    for row in table.rows:
        assert row[2].endswith(f"[{n_of[row[0]][0]}]") and row[3].endswith(f"[{n_of[row[0]][1]}]")
    assert "attention-matched: 4 setting(s) compared with fewer distinct head-sets than R = 20" in table.caption
    assert "its pool is not countable" in table.caption
    (other,) = [c for c in protocol_checks(run) if c.item == "Other controls"]
    assert other.warning.startswith("attention-matched compared 10–10 distinct head-sets of R = 20 asked")


def test_table_3_verdicts_use_each_member_s_own_floor(tmp_path):
    """n = 99, 99, 99 and a pool of 10: the small one's floor is Holm of the four floors
    (statsmodels) = 1/11, above 0.05: cannot tell; the others can still decide."""
    d = make_run(tmp_path, settings=GRID, R=99, n_items=6, sweeps=False, small_pools={"cm-ord-qsp": 10}, **LEAN)
    run = load_run(d)
    table = significance_table(run, ["ncs-all"], "Table 3 layout: NCS", "")
    floors = multipletests([1 / 100, 1 / 11, 1 / 100, 1 / 100], method="holm")[1]
    verdicts = {r[0]: r[5] for r in table.rows}
    assert floors[1] > 0.05 and verdicts["cm-ord-qsp"] == "cannot tell"
    assert all(v in ("**yes**", "no") for s, v in verdicts.items() if s != "cm-ord-qsp") and max(np.delete(floors, 1)) <= 0.05
    assert "p (Holm over 4)" in table.columns


def test_the_floors_table_says_the_n_holm_needs_and_that_the_pool_is_the_limit(tmp_path):
    d = make_run(tmp_path, settings=GRID, R=99, n_items=3, tests=("cers",), sweeps=True, small_pools={"cm-ord-qsp": 10}, **LEAN)
    checks = {c.item: c for c in protocol_checks(load_run(d))}
    floors = checks["Rank-p and Holm floors by table"]
    rows = {(r[0], r[1]): r for r in floors.cases.rows} if floors.cases else None
    text = floors.value if rows is None else ""
    if rows is not None:
        t3 = rows[("Table 3 (cers)", "layer-matched")]
        assert t3[2] == "10" and t3[5] == "79 (m=4)" and t3[6].startswith("the pool (10) is the limit")
    else:
        assert "Table 3 (cers), layer-matched: n=10" in text and "needs n ≥ 79 (m=4): the pool (10) is the limit" in text
    family = checks["Holm family (layer-matched)"]
    assert "needs n ≥ 79)" in family.warning and "the pool (10, compared whole) is the limit, not R" in family.warning
    assert "[controls]" not in family.warning


def test_the_beta_sweep_caption_says_its_rows_show_their_own_draws(tmp_path):
    d = make_run(tmp_path, settings=["cm-ord-last"], R=5, n_items=3, tests=("cers",), sweeps=True, **LEAN)
    table = sweep_table(load_run(d), "beta")
    assert "carries the main controls" not in table.caption
    assert "shows that point's own draws" in table.caption
