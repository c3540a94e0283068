"""The arms table's bootstrap: a seed per row derived from (run seed, table, row), and the
BCa interval beside the percentile one where an arm has fewer than 30 items."""

import hashlib
import sqlite3

import numpy as np
from scipy import stats as sps

from tests.report.synth import make_run
from vheads.report import load_run
from vheads.report._tables import arms_table, row_group_table

LEAN = {"row_groups": False, "text": False, "extra_controls": False, "sweeps": False, "overlap": False,
        "strips": False, "any_layer": False}


def _diff(a, b, axis=-1):
    return a.mean(axis=axis) - b.mean(axis=axis)


def _arms(d, s):
    with sqlite3.connect(d / "results.sqlite") as db:
        rows = db.execute("SELECT arm, value FROM arms WHERE setting=? AND test='ncs-all' AND headset_id='S' ORDER BY item_id",
                          (s,)).fetchall()
    return np.array([v for a, v in rows if a == "matched"]), np.array([v for a, v in rows if a == "mismatched"])


def test_each_row_bootstraps_from_its_own_seed_and_small_arms_get_bca(tmp_path):
    d = make_run(tmp_path, settings=["cm-ord-last", "cm-ref-qsp"], R=3, n_items=12, tests=("ncs-all",), **LEAN)
    table = arms_table(load_run(d))
    seeds = []
    for row in table.rows:
        m, x = _arms(d, row[0])
        seed = int(hashlib.sha256(f"0|table|arms|{row[0]}|ncs-all".encode()).hexdigest()[:8], 16)  # run seed 0
        seeds.append(seed)
        for col, method in ((5, "percentile"), (6, "BCa")):
            ci = sps.bootstrap((m, x), _diff, n_resamples=2000, method=method, rng=np.random.default_rng(seed)).confidence_interval
            assert row[col] == f"{m.mean() - x.mean():.3f} [{ci.low:.3f}, {ci.high:.3f}]"
    assert len(set(seeds)) == len(seeds)
    assert "may undercover" in table.caption and "BCa" in table.columns[6]


def test_arms_of_30_items_get_no_bca_and_the_row_group_caption_says_welch(tmp_path):
    d = make_run(tmp_path, settings=["cm-ord-last"], R=3, n_items=30, tests=("ncs-all",), **(LEAN | {"row_groups": True}))
    run = load_run(d)
    (row,) = [r for r in arms_table(run).rows if r[1] == "ncs-all"]
    assert row[6] == "–" and "may undercover" not in arms_table(run).caption
    assert "Welch" in row_group_table(run).caption and "t-interval over items;" not in row_group_table(run).caption
