"""Comparison tables against scipy on a hand-written store."""

import json

import numpy as np
from scipy import stats

from vheads.report._extras import algebra_table, paired_settings_table, spearman_table
from vheads.study._runner import algebra_pairs
from vheads.store import Store


def test_algebra_pairs_are_ordinal_vs_referring_of_the_same_corpus_and_source():
    s = ["cm-ord-last", "cm-ref-last", "cm-ref-qsp", "ph-ord-last", "cm-ord-qsp"]
    assert set(algebra_pairs(s)) == {("cm-ord-last", "cm-ref-last"), ("cm-ord-qsp", "cm-ref-qsp")}


def _store(tmp_path):
    st = Store(tmp_path)
    rng = np.random.default_rng(0)
    a, b = rng.normal(0.2, 0.1, 6), rng.normal(0.1, 0.1, 6)
    rows = [("u", "cm-ord-last", "ncs-all", "S", f"i{i}", float(v)) for i, v in enumerate(a)]
    rows += [("u", "cm-ref-last", "ncs-all", "S", f"i{i}", float(v)) for i, v in enumerate(b)]
    part = rng.normal(0.3, 0.1, 6)
    ctrl = rng.normal(0.1, 0.1, (3, 6))
    pid = "cm-ord-last&cm-ref-last"
    rows += [("u", pid, "ncs-all", "shared", f"i{i}", float(v)) for i, v in enumerate(part)]
    for r in range(3):
        rows += [("u", pid, "ncs-all", f"shared/layer-matched#{r}", f"i{i}", float(v)) for i, v in enumerate(ctrl[r])]
    mass = rng.uniform(size=(2, 4))
    cers = []
    hs = [(pid, "shared", "S", 0, 0, json.dumps([[0, 1]]))]
    for r in range(5):
        heads = [[0, r % 4], [1, (r + 1) % 4]]
        hs.append(("cm-ord-last", f"layer-matched#{r}", "layer-matched", r, 0, json.dumps(heads)))
        v = rng.normal(size=6)
        cers.append((np.mean([mass[l, h] for l, h in heads]), v.mean()))
        rows += [("u", "cm-ord-last", "cers", f"layer-matched#{r}", f"i{i}", float(x)) for i, x in enumerate(v)]
    st.commit_unit("u", "eval", 0.0, {"outcomes": rows, "headsets": hs, "meta": [("image_mass", json.dumps(mass.tolist()))]})
    return st, a, b, part, ctrl, cers


def test_comparison_tables_equal_scipy(tmp_path):
    st, a, b, part, ctrl, cers = _store(tmp_path)
    alg = algebra_table(st)
    want = stats.ttest_rel(part, ctrl.mean(0), alternative="greater")
    assert alg.rows[0][1] == "shared" and float(alg.rows[0][-1]) == round(want.pvalue, 3)
    pair = paired_settings_table(st, ["cm-ord-last", "cm-ref-last"], tests=("ncs-all",))
    assert float(pair.rows[0][-1]) == round(stats.ttest_rel(a, b).pvalue, 3)
    sp = spearman_table(st, ["cm-ord-last"])
    m, c = zip(*cers)
    assert float(sp.rows[0][3]) == round(stats.spearmanr(m, c).statistic, 2)
    st.close()
