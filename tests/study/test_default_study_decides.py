"""The default study decides (issue 41): on the built-in tiny model every verdict of its
Findings is yes or no — no cell *cannot tell* — and each equals statsmodels' Holm over the
rank p's recomputed here from the store.

The rank p of an exchangeable control is Besag and Clifford's sequential p (the study's
default, ``controls_h``): walking the control's draws in draw order (the ``draw`` column of
the store's ``headsets`` table), ``p = h / L`` at the L-th draw, the h-th whose statistic
reaches T_S, else ``(1 + g) / (R_max + 1)`` with R_max every draw of the control — or, where
fewer than R_max ran (the study stopped it once its Holm verdict was settled), the largest p its
remaining draws could have given, ``h / (n + h − g)``. A member's
floor is Holm over the family with every member at ``1 / (R_max + 1)``.

The whole default study runs for minutes, so the test is slow; ``VHEADS_DEFAULT_RUN=DIR``
reads a finished default run instead (the benchmark's, or `make study`'s ``runs/study``).
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from statsmodels.stats.multitest import multipletests

from vheads.report import build_sections, load_run
from vheads.report._doc import Table

COLUMN = {"p4": "value", "logprob": "logprob", "logit-diff": "logit_diff"}
TESTS = {("NCS", "attention"): "ncs-all", ("NCS", "zero"): "ncs-all@ablation=zero", ("CERS", None): "cers"}
GRID = [f"{c}-{q}-{s}" for c in ("cm", "ph") for q in ("ord", "ref") for s in ("last", "out", "qsp")]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    given = os.environ.get("VHEADS_DEFAULT_RUN")
    if given:
        return Path(given)
    if not os.environ.get("VHEADS_SLOW"):
        pytest.skip("the whole default study (minutes): set VHEADS_SLOW=1, or VHEADS_DEFAULT_RUN=DIR of a finished run")
    from vheads.study import load_config, run_study

    out = tmp_path_factory.mktemp("default") / "run"
    run_study(load_config(), out, progress=False)
    return out


def _sequential_p(t_s: float, t: list[float], h: int, r_max: int) -> float:
    g = 0
    for L, x in enumerate(t, 1):
        g += x >= t_s
        if g == h:
            return h / L
    n = len(t)
    if n < r_max:  # stopped once its Holm verdict was settled: the largest p its remaining draws could give
        return h / (n + h - g) if n + h - g <= r_max else (1 + g + r_max - n) / (r_max + 1)
    return (1 + g) / (r_max + 1)


def _expected(run_dir: Path) -> dict[tuple[str, str, str], str]:
    cfg = json.loads(sqlite3.connect(run_dir / "results.sqlite").execute(
        "SELECT value FROM meta WHERE key='config'").fetchone()[0])
    h = cfg.get("controls_h", 0)
    out = {}
    with sqlite3.connect(run_dir / "results.sqlite") as db:
        for test in TESTS.values():
            for metric, col in COLUMN.items():
                ps, floors_at = [], []
                for s in GRID:
                    (t_s,) = db.execute(f"SELECT AVG({col}) FROM outcomes WHERE setting=? AND test=? AND headset_id='S'",
                                        (s, test)).fetchone()
                    order = [hid for (hid,) in db.execute("SELECT headset_id FROM headsets WHERE setting=? AND "
                                                          "control='layer-matched' ORDER BY draw", (s,))]
                    means = dict(db.execute(f"SELECT headset_id, AVG({col}) FROM outcomes WHERE setting=? AND test=? "
                                            "AND headset_id LIKE 'layer-matched#%' GROUP BY headset_id", (s, test)))
                    t = [means[x] for x in order if x in means]
                    ps.append(_sequential_p(t_s, t, h, len(order)) if h else (1 + sum(x >= t_s for x in t)) / (len(t) + 1))
                    floors_at.append(1 / (len(order) + 1))
                adjusted = multipletests(ps, method="holm")[1]
                floors = multipletests(floors_at, method="holm")[1]
                out |= {(s, test, metric): "cannot tell" if f > 0.05 else "yes" if a <= 0.05 else "no"
                        for s, a, f in zip(GRID, adjusted, floors)}
    return out


def test_every_default_verdict_decides_and_equals_holm_recomputed_from_the_store(default_run):
    run = load_run(default_run)
    sections, _ = build_sections(run)
    (findings,) = [s for s in sections if s.id == "findings"]
    table = next(b for b in findings.blocks if isinstance(b, Table) and b.title.startswith("Findings: verdict"))
    expected = _expected(default_run)
    assert "cannot tell" not in set(expected.values())  # the tiny model's pools let every cell decide
    keys, i = [], 3
    for label, span in table.groups[1:]:
        kind, _, abl = label.partition(", ")
        abl = abl.split(" · ")[0] if abl else None
        # the grounding columns' verdicts are recomputed in tests/report/test_findings_grounding.py
        keys += [None if kind == "Grounding" else (TESTS[(kind, abl)], table.columns[j].split(" · ")[-1])
                 for j in range(i, i + span)]
        i += span
    checked = 0
    for row in table.rows:
        if row[0] not in GRID:
            continue
        for key, cell in zip(keys, row[3:]):
            if key is None:
                continue
            test, metric = key
            word = cell.split(" (", 1)[0].strip("*")
            assert word == expected[(row[0], test, metric)], (row[0], test, metric, cell)
            checked += 1
    assert checked == len(GRID) * len(TESTS) * len(COLUMN)
