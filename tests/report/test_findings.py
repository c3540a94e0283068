"""The findings section: every verdict recomputed from the store's per-draw values with
statsmodels' Holm, the seed's conclusion read from those verdicts, identical head-sets named,
and the section first in the report."""

from __future__ import annotations

import re
import sqlite3

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from tests.report.synth import make_run
from vheads.report import build_report, build_sections, load_run

GRID = ["cm-ord-last", "cm-ord-qsp", "cm-ord-out", "cm-ref-last"]
POINTS = {"cm-ord-gaze": "cm-ord-last", "cm-ord-vrh": None}  # gaze copies cm-ord-last's heads exactly
CAUSAL = "causal-ncs"
COLUMN = {"p4": "value", "logprob": "logprob", "logit-diff": "logit_diff"}
TESTS = {("NCS", "attention"): "ncs-all", ("NCS", "zero"): "ncs-all@ablation=zero", ("CERS", None): "cers"}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Four grid settings whose effect grows with their index (R = 99: Holm over 4 can reach 0.04),
    the causal setting, two score points (one a copy of cm-ord-last's head-set), NCS under
    attention and zero, every metric."""
    d = make_run(tmp_path_factory.mktemp("findings"), settings=GRID, R=99, n_items=12, causal=True,
                 ablations=("zero",), score_points=POINTS)
    sections, _ = build_sections(load_run(d))
    return d, sections


def _rank_p(db, col, setting, test):
    """(1 + #{layer-matched draws with T ≥ T_S}) / (R + 1), T the mean over items of ``col``."""
    (t_s,) = db.execute(f"SELECT AVG({col}) FROM outcomes WHERE setting=? AND test=? AND headset_id='S'",
                        (setting, test)).fetchone()
    t = np.array([v for (v,) in db.execute(
        f"SELECT AVG({col}) FROM outcomes WHERE setting=? AND test=? AND headset_id LIKE 'layer-matched#%' "
        "GROUP BY headset_id", (setting, test))])
    return (1 + np.sum(t >= t_s)) / (len(t) + 1)


def _expected(run_dir):
    """{(setting, test, metric): (significant, adjusted)} from the rows: Holm over the grid,
    Holm over the score points, the causal setting's raw rank p."""
    out = {}
    with sqlite3.connect(run_dir / "results.sqlite") as db:
        for test in TESTS.values():
            for metric, col in COLUMN.items():
                for family in (GRID, list(POINTS)):
                    p = [_rank_p(db, col, s, test) for s in family]
                    reject = multipletests(p, alpha=0.05, method="holm")[0]
                    out |= {(s, test, metric): (bool(r), True) for s, r in zip(family, reject)}
                out[(CAUSAL, test, metric)] = (bool(_rank_p(db, col, CAUSAL, test) <= 0.05), False)
    return out


def _findings(sections):
    (sec,) = [s for s in sections if s.id == "findings"]
    return sec


def _table(sec):
    """The verdict table of the findings section (after the question and conclusion lines)."""
    return next(b for b in sec.blocks if isinstance(getattr(b, "title", None), str) and b.title.startswith("Findings: verdict"))


def _column_keys(table):
    """Each verdict column's (test, metric), from its header group and column name."""
    keys, i = [], table.groups[0][1]
    for label, span in table.groups[1:]:
        kind, _, abl = label.partition(", ")
        test = TESTS[(kind, abl or None)]
        keys += [(test, table.columns[j]) for j in range(i, i + span)]
        i += span
    return keys


def test_every_verdict_equals_holm_over_rank_ps_recomputed_from_the_draws(study):
    run_dir, sections = study
    table = _table(_findings(sections))
    expected = _expected(run_dir)
    keys = _column_keys(table)
    assert sorted(keys) == sorted((t, m) for t in TESTS.values() for m in COLUMN)  # every ablation × metric
    assert [r[0] for r in table.rows] == [*GRID, CAUSAL, *POINTS]
    assert table.rows[len(GRID)][1].startswith("none")  # the causal setting: unadjusted, outside every family
    seen = set()
    for row in table.rows:
        for (test, metric), cell in zip(keys, row[table.groups[0][1]:]):
            significant, adjusted = expected[(row[0], test, metric)]
            # R = 99: every family's Holm floor (4/100, 2/100, 1/100) is below 0.05, so no cell is "cannot tell"
            assert cell.split(" (")[0] == ("**yes**" if significant else "no"), (row[0], test, metric, cell)
            seen.add(significant)
    assert seen == {True, False}  # the fixture has both verdicts: the check can fail either way


def test_the_seeds_conclusion_is_read_from_the_verdicts(study):
    run_dir, sections = study
    expected = _expected(run_dir)
    lines = [b for b in _findings(sections).blocks if isinstance(b, str)]
    ncs_line = next(ln for ln in lines if ln.startswith("**NCS**"))
    cers_line = next(ln for ln in lines if ln.startswith("**CERS**"))
    ncs_cols = [(t, m) for t in ("ncs-all", "ncs-all@ablation=zero") for m in COLUMN]
    n_pass = {c: sum(expected[(s, *c)][0] for s in GRID) for c in ncs_cols}
    separates = [c for c in ncs_cols if 0 < n_pass[c] < len(GRID)]
    assert 0 < len(separates) < len(ncs_cols)  # the fixture holds both cases
    assert f"holds under {len(separates)} of the {len(ncs_cols)} columns that could decide" in ncs_line
    cers_pass = {m: [s for s in GRID if expected[(s, "cers", m)][0]] for m in COLUMN}
    holds = [m for m in COLUMN if not cers_pass[m]]
    assert 0 < len(holds) < len(COLUMN)
    assert f"holds under {len(holds)} of the {len(COLUMN)} columns that could decide" in cers_line
    for m, names in cers_pass.items():
        for s in names:
            assert s in cers_line.split("it does not under", 1)[1]


def test_identical_head_sets_are_named_in_the_findings_and_the_methods_table(study):
    run_dir, sections = study
    with sqlite3.connect(run_dir / "results.sqlite") as db:
        heads = {s: h for s, h in db.execute("SELECT setting, headset FROM discovery")}
    groups = {}
    for s, h in heads.items():  # the stored lists, compared as sets of heads
        groups.setdefault(frozenset(map(tuple, __import__("json").loads(h))), []).append(s)
    same = [sorted(g) for g in groups.values() if len(g) > 1]
    assert same == [["cm-ord-gaze", "cm-ord-last"]]
    f = _findings(sections)
    table = _table(f)
    col = table.columns.index("Identical S")
    ident = {r[0]: r[col] for r in table.rows}
    assert ident["cm-ord-last"] == "cm-ord-gaze" and ident["cm-ord-gaze"] == "cm-ord-last" and ident["cm-ord-qsp"] == "–"
    assert any(isinstance(b, str) and "cm-ord-last = cm-ord-gaze" in b for b in f.blocks)
    (methods,) = [s for s in sections if s.id == "methods"]
    overlap = next(b for b in methods.blocks if getattr(b, "title", "").endswith("shared heads"))
    col = overlap.columns.index("Identical S")
    assert {r[0]: r[col] for r in overlap.rows} == {"cm-ord-gaze": "cm-ord-last", "cm-ord-vrh": "–"}


def test_findings_come_first_with_links_that_resolve(study):
    run_dir, sections = study
    assert sections[0].id == "findings"
    html = build_report(run_dir).read_text()
    ids = set(re.findall(r'<section id="([^"]+)"', html))
    links = re.findall(r'href="#([^"]+)"', html[html.index('<section id="findings"'):html.index('<section id="protocol"')])
    assert links and set(links) <= ids
