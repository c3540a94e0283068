"""The pointing-suite report tables against hand computations on a hand-filled store."""

import numpy as np
from scipy import stats as sps

from vheads.report._ood import ood_audit_table, ood_pooled_table, ood_task_table
from vheads.study import Store


def _welch(a, b):
    """Welch 95% interval of mean(a) − mean(b), written out."""
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = sps.t.ppf(0.975, df) * np.sqrt(va + vb)
    d = a.mean() - b.mean()
    return d, d - half, d + half


def test_ood_tables_match_hand_computations(tmp_path):
    rng = np.random.default_rng(0)
    store = Store(tmp_path)
    vals = {}
    rows = []
    for task in ("cvbench", "spatial457"):
        for test in ("cers", "ncs-matched", "ncs-mismatched"):
            for hid in ("S", "layer-matched#0", "layer-matched#1"):
                v = rng.normal(0.3 if hid == "S" else 0.0, 0.2, size=5)
                vals[(task, test, hid)] = v
                rows += [("u", task, "cm-ref-qsp", test, hid, f"{task}-{i}", float(x)) for i, x in enumerate(v)]
    store.commit_unit("u", "ood-eval", 0.0, {"ood_outcomes": rows})
    store.commit_unit("a", "ood-audit", 0.0, {"ood_audit": [("cvbench", "oracle", 5, 0.95, 0.9, 1.0, 1), ("cvbench", "matched", 5, 0.3, 0.9, 1.0, 0)]})

    pooled = ood_pooled_table(store)
    s_cers = np.concatenate([vals[(t, "cers", "S")] for t in ("cvbench", "spatial457")])
    half = sps.t.ppf(0.975, len(s_cers) - 1) * s_cers.std(ddof=1) / np.sqrt(len(s_cers))
    assert pooled.rows[0][1] == f"{s_cers.mean():.3f} [{s_cers.mean() - half:.3f}, {s_cers.mean() + half:.3f}]"
    rnd = {test: np.concatenate([(vals[(t, test, "layer-matched#0")] + vals[(t, test, "layer-matched#1")]) / 2
                                 for t in ("cvbench", "spatial457")]) for test in ("ncs-matched", "ncs-mismatched")}
    d, lo, hi = _welch(rnd["ncs-matched"], rnd["ncs-mismatched"])
    assert pooled.rows[1][0] == "layer-matched random" and pooled.rows[1][2] == f"{d:.3f} [{lo:.3f}, {hi:.3f}]"

    per_task = ood_task_table(store)
    s, r = vals[("spatial457", "cers", "S")], (vals[("spatial457", "cers", "layer-matched#0")] + vals[("spatial457", "cers", "layer-matched#1")]) / 2
    assert per_task.rows[1][:5] == ["spatial457", "cm-ref-qsp", f"{s.mean():.3f}", f"{r.mean():.3f}", f"{s.mean() - r.mean():.3f}"]

    audit = ood_audit_table(store)
    assert audit.rows[0][:4] == ["cvbench", "5", "0.950", "–"] and audit.rows[0][4] == "**0.300**" and audit.flagged_rows == {0}
    store.close()
