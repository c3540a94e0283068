"""The findings section: every verdict recomputed from the store's per-draw values with
statsmodels' Holm, the seed's conclusion read from those verdicts, identical head-sets named,
and the section first in the report."""

from __future__ import annotations

import json
import re
import sqlite3

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from tests.report.synth import make_run
from vheads.report import build_report, build_sections, load_run
from vheads.discovery import load_headset
from vheads.report._doc import Table
from vheads.report._headsets import headset_file_name, write_headset_files

GRID = ["cm-ord-last", "cm-ord-qsp", "cm-ord-out", "cm-ref-last"]
POINTS = {"cm-ord-gaze": "cm-ord-last", "cm-ord-vrh": None}  # gaze copies cm-ord-last's heads exactly
CAUSAL = "causal-ncs"
COLUMN = {"p4": "value", "logprob": "logprob", "logit-diff": "logit_diff"}
TESTS = {("NCS", "attention"): "ncs-all", ("NCS", "zero"): "ncs-all@ablation=zero", ("CERS", None): "cers"}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Four grid settings whose effect grows with their index (R = 99: Holm over 4 can reach 0.04),
    one of them (cm-ord-qsp) with a layer-matched pool of 10 head-sets on purpose (compared whole:
    its floor is above 0.05, it cannot tell), the causal setting, two score points (one a copy of
    cm-ord-last's head-set), NCS under attention and zero, every metric."""
    d = make_run(tmp_path_factory.mktemp("findings"), settings=GRID, R=99, n_items=12, causal=True,
                 ablations=("zero",), score_points=POINTS, small_pools={SMALL: 10})
    sections, _ = build_sections(load_run(d))
    return d, sections


SMALL = "cm-ord-qsp"


def _draws(db, col, setting, test):
    """T_S and each layer-matched draw's T (the mean over items of ``col``)."""
    (t_s,) = db.execute(f"SELECT AVG({col}) FROM outcomes WHERE setting=? AND test=? AND headset_id='S'",
                        (setting, test)).fetchone()
    t = np.array([v for (v,) in db.execute(
        f"SELECT AVG({col}) FROM outcomes WHERE setting=? AND test=? AND headset_id LIKE 'layer-matched#%' "
        "GROUP BY headset_id", (setting, test))])
    return t_s, t


def _rank_p(db, col, setting, test):
    """(1 + #{layer-matched draws with T ≥ T_S}) / (n + 1) and n."""
    t_s, t = _draws(db, col, setting, test)
    return (1 + np.sum(t >= t_s)) / (len(t) + 1), len(t)


def _expected(run_dir):
    """{(setting, test, metric): verdict} from the rows: statsmodels' Holm over the grid and
    over the score points, each member's floor the Holm-adjusted p of every member at its own
    floor 1/(n+1) (the smallest it can reach: Holm is monotone in each p), "cannot tell"
    where that floor is above 0.05; the causal setting's raw rank p with floor 1/(n+1)."""
    out = {}
    with sqlite3.connect(run_dir / "results.sqlite") as db:
        for test in TESTS.values():
            for metric, col in COLUMN.items():
                for family in (GRID, list(POINTS)):
                    p, n = zip(*(_rank_p(db, col, s, test) for s in family))
                    adjusted = multipletests(p, method="holm")[1]
                    floors = multipletests([1 / (x + 1) for x in n], method="holm")[1]
                    out |= {(s, test, metric): "cannot tell" if f > 0.05 else "yes" if a <= 0.05 else "no"
                            for s, a, f in zip(family, adjusted, floors)}
                p, n = _rank_p(db, col, CAUSAL, test)
                out[(CAUSAL, test, metric)] = "cannot tell" if 1 / (n + 1) > 0.05 else "yes" if p <= 0.05 else "no"
    return out


def _findings(sections):
    (sec,) = [s for s in sections if s.id == "findings"]
    return sec


def _table(sections):
    return next(b for b in _findings(sections).blocks if isinstance(b, Table) and b.title.startswith("Findings: verdict"))


def _column_keys(table):
    """Each verdict column's (test, metric), from its header group and column name."""
    keys, i = [], 3
    for label, span in table.groups[1:]:
        kind, _, abl = label.partition(", ")
        test = TESTS[(kind, abl or None)]
        keys += [(test, table.columns[j]) for j in range(i, i + span)]
        i += span
    return keys


def _word(cell):
    """The verdict of a cell "**yes** (0.090, z 4.1)"."""
    return cell.split(" (", 1)[0].strip("*")


def test_every_verdict_equals_holm_over_rank_ps_recomputed_from_the_draws(study):
    run_dir, sections = study
    table = _table(sections)
    expected = _expected(run_dir)
    keys = _column_keys(table)
    assert sorted(keys) == sorted((t, m) for t in TESTS.values() for m in COLUMN)  # every ablation × metric
    assert [r[0] for r in table.rows] == [*GRID, CAUSAL, *POINTS]
    seen = set()
    with sqlite3.connect(run_dir / "results.sqlite") as db:
        for row in table.rows:
            for (test, metric), cell in zip(keys, row[3:]):
                assert _word(cell) == expected[(row[0], test, metric)], (row[0], test, metric)
                t_s, t = _draws(db, COLUMN[metric], row[0], test)  # beside it: S's statistic and z
                assert cell.endswith(f"({t_s:.3f}, z {(t_s - t.mean()) / t.std(ddof=1):.1f})".replace("-0.000", "0.000"))
                seen.add(_word(cell))
    assert seen == {"yes", "no", "cannot tell"}  # the fixture has all three: the check can fail every way


def test_a_cannot_tell_cell_is_never_counted_as_no(study):
    run_dir, sections = study
    expected = _expected(run_dir)
    assert {expected[(SMALL, t, m)] for t in TESTS.values() for m in COLUMN} == {"cannot tell"}
    lines = [b for b in _findings(sections).blocks if isinstance(b, str)]
    necessary = next(ln for ln in lines if ln.startswith("**Necessary?**"))
    no_part = necessary.split("no for ", 1)[1].split(";")[0] if "no for " in necessary else ""
    assert SMALL not in no_part
    assert f"cannot tell with these controls for 1 — {SMALL}: the layer-matched pool holds 10 head-sets" in necessary
    assert "the pool is the limit" in necessary  # not "raise R": R = 99 already exceeds the pool
    no = [s for s in GRID if expected[(s, "ncs-all", "p4")] == "no"]
    assert f"no for {len(no)} ({', '.join(no)})" in necessary
    for ln in (ln for ln in lines if ln.startswith(("**NCS**", "**CERS**"))):
        kind = "NCS" if ln.startswith("**NCS**") else "CERS"
        cols = [(t, m) for (k, _), t in TESTS.items() if k == kind for m in COLUMN]
        n_cannot = sum(expected[(s, *c)] == "cannot tell" for s in GRID for c in cols)
        assert f"{n_cannot} of {len(GRID) * len(cols)} cells cannot tell and are not counted" in ln


def test_the_seeds_conclusion_is_read_from_the_deciding_verdicts(study):
    run_dir, sections = study
    expected = _expected(run_dir)
    lines = [b for b in _findings(sections).blocks if isinstance(b, str)]
    ncs_line = next(ln for ln in lines if ln.startswith("**NCS**"))
    cers_line = next(ln for ln in lines if ln.startswith("**CERS**"))

    def decided(c):
        return [s for s in GRID if expected[(s, *c)] in ("yes", "no")]

    ncs_cols = [(t, m) for t in ("ncs-all", "ncs-all@ablation=zero") for m in COLUMN]
    n_pass = {c: sum(expected[(s, *c)] == "yes" for s in GRID) for c in ncs_cols}
    separates = [c for c in ncs_cols if 0 < n_pass[c] < len(decided(c))]
    assert 0 < len(separates) < len(ncs_cols)  # the fixture holds both cases
    assert f"holds under {len(separates)} of the {len(ncs_cols)} columns that could decide" in ncs_line
    cers_pass = {m: [s for s in GRID if expected[(s, "cers", m)] == "yes"] for m in COLUMN}
    holds = [m for m in COLUMN if not cers_pass[m]]
    if len(holds) == len(COLUMN):
        assert f"holds under every column that could decide ({len(COLUMN)} of {len(COLUMN)})" in cers_line
    else:
        assert f"holds under {len(holds)} of the {len(COLUMN)} columns that could decide" in cers_line
        for m, names in cers_pass.items():
            for s in names:
                assert s in cers_line.split("it does not under", 1)[1]


def test_the_question_is_answered_first_in_the_main_column_with_effect_z_and_family(study):
    run_dir, sections = study
    expected = _expected(run_dir)
    blocks = _findings(sections).blocks
    assert blocks[0].startswith("**Necessary?**") and blocks[1].startswith("**Steerable?**")
    assert "Holm over the 4 grid settings" in blocks[0]
    yes = [s for s in GRID if expected[(s, "ncs-all", "p4")] == "yes"]
    assert yes and all(f"{s} (NCS " in blocks[0] for s in yes)
    points = next(b for b in blocks if isinstance(b, str) and b.startswith("**Score points**"))
    assert "Holm over the 2 score points" in points
    table = _table(sections)
    fam = {r[0]: r[1] for r in table.rows}
    assert fam["cm-ord-last"].startswith("grid (4") and fam["cm-ord-gaze"].startswith("score points (2")
    assert fam[CAUSAL].startswith("none")


def test_the_random_band_figure_and_every_setting_s_heads_are_in_the_findings(study, tmp_path):
    run_dir, sections = study
    blocks = _findings(sections).blocks
    assert any(getattr(b, "name", None) == "random_band" for b in blocks)
    assert not any(getattr(b, "name", None) == "random_band" for s in sections if s.id != "findings" for b in s.blocks)
    heads = next(b for b in blocks if isinstance(b, Table) and b.title == "Findings: the heads of every setting")
    with sqlite3.connect(run_dir / "results.sqlite") as db:
        stored = {s: (json.loads(h), np.array(json.loads(sc))) for s, h, sc in db.execute("SELECT setting, headset, scores FROM discovery")}
    for row in heads.rows:
        if row[0] == CAUSAL:
            assert row[3] == "–"
            continue
        hs, sc = stored[row[0]]
        by_score = sorted(map(tuple, hs), key=lambda lh: (-sc[lh], lh))
        assert row[2] == ", ".join(f"L{l}H{h}" for l, h in by_score) and row[3] == f"headsets/{row[0]}.json"
    written = write_headset_files(load_run(run_dir), tmp_path)
    assert sorted(p.name for p in written) == sorted(f"{s}.json" for s in [*GRID, *POINTS])
    for p in written:  # each file reads back, every check of load_headset run on it, with the stored heads
        rec = load_headset(p)
        assert sorted(rec.headset.heads) == sorted(map(tuple, stored[p.stem][0]))
        assert rec.scores == pytest.approx(stored[p.stem][1]) and rec.setting.id == p.stem


def test_a_setting_id_that_is_no_safe_file_name_gets_no_head_set_file(tmp_path):
    d = make_run(tmp_path / "run", settings=["cm-ord-last", "cm-ref-last"], R=3, n_items=3, row_groups=False, text=False,
                 extra_controls=False, sweeps=False, overlap=False, strips=False, any_layer=False)
    with sqlite3.connect(d / "results.sqlite") as db:  # a store whose setting id reads as a path
        for table in ("discovery", "headsets"):
            db.execute(f"UPDATE {table} SET setting='../cm-ref-last' WHERE setting='cm-ref-last'")
    run = load_run(d)
    assert "../cm-ref-last" in run.settings and headset_file_name(run, "../cm-ref-last") is None
    (tmp_path / "out").mkdir()
    written = write_headset_files(run, tmp_path / "out")
    assert [p.name for p in written] == ["cm-ord-last.json"] and not (tmp_path / "cm-ref-last.json").exists()


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
    table = _table(sections)
    ident = {r[0]: r[2] for r in table.rows}
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
