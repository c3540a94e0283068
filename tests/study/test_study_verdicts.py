"""On a small study: every verdict of the Findings agrees with statsmodels' Holm over rank p's
recomputed from the store (each member's floor: Holm of every member's 1/(n+1)), and the
report writes each setting's head-set file with the model's fingerprint."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
from statsmodels.stats.multitest import multipletests

from tests.study.test_study import small_config
from vheads.discovery import load_headset
from vheads.report import build_report, load_run
from vheads.report._findings import findings
from vheads.study import run_study


def test_findings_verdicts_agree_with_statsmodels_holm_over_the_stored_rank_ps(tiny_random_dirs, tmp_path):
    cfg = small_config(tiny_random_dirs["qwen3_vl"], controls={"layer-matched": 19}, beta_sweep=[], k_sweep=[],
                       algebra_controls=0, row_groups=["all"])
    run_study(cfg, tmp_path, progress=False, report=False)
    build_report(tmp_path)
    run = load_run(tmp_path)
    f = findings(run)
    with sqlite3.connect(tmp_path / "results.sqlite") as db:
        for col in (c for c in f.columns if c.metric == "p4"):
            ps, ns = [], []
            for s in f.grid:
                (t_s,) = db.execute("SELECT AVG(value) FROM outcomes WHERE setting=? AND test=? AND headset_id='S'",
                                    (s, col.test)).fetchone()
                t = np.array([v for (v,) in db.execute(
                    "SELECT AVG(value) FROM outcomes WHERE setting=? AND test=? AND headset_id LIKE 'layer-matched#%' "
                    "GROUP BY headset_id", (s, col.test))])
                heads = {h for (h,) in db.execute("SELECT heads FROM headsets WHERE setting=? AND control='layer-matched'", (s,))}
                assert len(heads) == len(t)  # the study compares distinct head-sets only
                ps.append((1 + np.sum(t >= t_s)) / (len(t) + 1))
                ns.append(len(t))
            adjusted = multipletests(ps, method="holm")[1]
            floors = multipletests([1 / (n + 1) for n in ns], method="holm")[1]
            for s, p, floor in zip(f.grid, adjusted, floors):
                v = f.verdicts[(s, col)]
                assert v.p == np.float64(p) or abs(v.p - p) < 1e-12
                assert v.verdict == ("cannot tell" if floor > 0.05 else "yes" if p <= 0.05 else "no"), (s, col)
    meta_fp = json.loads(json.dumps(run.meta.get("model_fingerprint")))
    assert isinstance(meta_fp, str) and meta_fp.startswith("sha256:")
    for s in f.grid:
        rec = load_headset(tmp_path / "headsets" / f"{s}.json")
        assert rec.model["fingerprint"] == meta_fp and sorted(rec.headset.heads) == sorted(map(tuple, run.discovery[s]["headset"]))
