"""Grounding in the Findings and Table 3: every verdict of the pointing and IoU columns equals
statsmodels' Holm over rank p's recomputed from the store's per-draw values (one family per
measure over the grid settings), and the "Grounds?" line names the same settings."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from tests.report.synth import make_run
from vheads.report import build_sections, load_run
from vheads.report._doc import Table

GRID = ["cm-ord-last", "cm-ord-qsp", "cm-ord-out", "cm-ref-last", "cm-ref-qsp", "cm-ref-out"]
MEASURES = {"grounding": "pointing", "grounding-iou": "IoU"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """Six grid settings whose effect grows with their index (synth: 0.02 per setting), R = 199
    (Holm over 6 can reach 0.03), NCS, CERS and the two grounding measures."""
    return make_run(tmp_path_factory.mktemp("fgr"), settings=GRID, R=199, n_items=12,
                    tests=("cers", "ncs-all", "grounding", "grounding-iou"), row_groups=False, text=False,
                    sweeps=False, extra_controls=False, strips=False)


def _draws(run_dir, test):
    """Per grid setting: T_S and every layer-matched draw's T (the mean over items of p4)."""
    out = []
    with sqlite3.connect(run_dir / "results.sqlite") as db:
        for s in GRID:
            (t_s,) = db.execute("SELECT AVG(value) FROM outcomes WHERE setting=? AND test=? AND headset_id='S'",
                                (s, test)).fetchone()
            t = np.array([v for (v,) in db.execute(
                "SELECT AVG(value) FROM outcomes WHERE setting=? AND test=? AND headset_id LIKE 'layer-matched#%' "
                "GROUP BY headset_id", (s, test))])
            out.append((t_s, t))
    return out


def _expected(run_dir, test):
    """{setting: (verdict, T_S, z)}: rank p (1 + #{T_r ≥ T_S}) / (n + 1) over the layer-matched
    draws, statsmodels' Holm over the grid, cannot tell where the Holm floor (every member at
    1/(n+1)) is above 0.05."""
    ps, ns, stats = [], [], []
    for t_s, t in _draws(run_dir, test):
        ps.append((1 + np.sum(t >= t_s)) / (len(t) + 1))
        ns.append(len(t))
        stats.append((t_s, (t_s - t.mean()) / t.std(ddof=1)))
    adjusted = multipletests(ps, method="holm")[1]
    floors = multipletests([1 / (n + 1) for n in ns], method="holm")[1]
    return {s: ("cannot tell" if f > 0.05 else "yes" if a <= 0.05 else "no", *st)
            for s, a, f, st in zip(GRID, adjusted, floors, stats)}


def test_grounding_verdicts_in_the_findings_equal_holm_recomputed_from_the_draws(run_dir):
    sections, _ = build_sections(load_run(run_dir))
    (sec,) = [s for s in sections if s.id == "findings"]
    table = next(b for b in sec.blocks if isinstance(b, Table) and b.title.startswith("Findings: verdict"))
    labels = [g for g, _ in table.groups]
    assert "Grounding" in labels
    start = 3 + sum(span for g, span in table.groups[1:labels.index("Grounding")])
    assert table.columns[start:start + 2] == ["pointing", "IoU"]
    seen = set()
    for j, test in enumerate(MEASURES):
        want = _expected(run_dir, test)
        cells = {r[0]: r[start + j] for r in table.rows}
        for s in GRID:
            word, t_s, z = want[s]
            assert cells[s].split(" (", 1)[0].strip("*") == word, (s, test)
            assert cells[s].endswith(f"({t_s:.3f}, z {z:.1f})")
            seen.add(word)
    assert {"yes", "no"} <= seen  # the fixture decides both ways: the check can fail either way
    line = next(b for b in sec.blocks if isinstance(b, str) and b.startswith("**Grounds?**"))
    point = _expected(run_dir, "grounding")
    yes = [s for s in GRID if point[s][0] == "yes"]
    head = line.split(". IoU:", 1)[0]
    assert all(f"{s} (pointing " in head for s in yes)
    no = [s for s in GRID if point[s][0] == "no"]
    if no:
        assert f"no for {len(no)} ({', '.join(no)})" in head
    iou = _expected(run_dir, "grounding-iou")
    tail = line.split(". IoU:", 1)[1]
    assert all(f"{s} (IoU " in tail for s in GRID if iou[s][0] == "yes")
    assert any(getattr(b, "name", None) == "random_band" for b in sec.blocks)


def test_table_3_shows_grounding_with_the_same_holm_p(run_dir):
    sections, _ = build_sections(load_run(run_dir))
    (sec,) = [s for s in sections if s.id == "significance"]
    table = next(b for b in sec.blocks if isinstance(b, Table) and "grounding (pointing accuracy and IoU)" in b.title)
    assert [g for g, _ in table.groups[1:]] == ["grounding: pointing accuracy", "grounding: mean IoU"]
    width = table.groups[1][1]
    p_col = table.columns.index(next(c for c in table.columns if c.startswith("p (Holm over 6)")))
    for j, test in enumerate(MEASURES):
        ps = [(1 + np.sum(t >= t_s)) / (len(t) + 1) for t_s, t in _draws(run_dir, test)]
        adjusted = multipletests(ps, method="holm")[1]
        for row, a in zip(sorted(table.rows, key=lambda r: GRID.index(r[0])), adjusted):
            cell = row[p_col + j * width]
            assert float(cell.split("(", 1)[1].strip("*)")) == pytest.approx(a, abs=5e-4)


def test_score_points_are_answered_in_both_grounding_measures(tmp_path):
    """The score points' line answers pointing and IoU, each from its own Holm family over the points."""
    d = make_run(tmp_path / "run", settings=GRID[:2], R=199, n_items=12, tests=("cers", "ncs-all", "grounding", "grounding-iou"),
                 row_groups=False, text=False, sweeps=False, extra_controls=False, strips=False,
                 score_points={"cm-ord-gaze": None, "cm-ord-vrh": None})
    sections, _ = build_sections(load_run(d))
    (sec,) = [s for s in sections if s.id == "findings"]
    line = next(b for b in sec.blocks if isinstance(b, str) and b.startswith("**Score points**"))
    assert "Grounds: " in line and "Grounds (IoU): " in line
    for name in ("cm-ord-gaze", "cm-ord-vrh"):
        assert line.count(name) >= 4  # named in NCS, CERS, pointing and IoU
