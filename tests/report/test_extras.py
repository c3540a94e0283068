"""Comparison tables against scipy on a hand-written store."""

import json

import numpy as np
from scipy import stats

from vheads.report._extras import algebra_table, mass_table, paired_settings_table
from vheads.study._runner import algebra_pairs
from vheads.store import Store


def test_algebra_pairs_cover_query_type_corpus_and_source_like_the_seed():
    s = ["cm-ord-last", "cm-ref-last", "cm-ref-qsp", "ph-ord-last", "cm-ord-qsp", "ph-ord-out", "ph-ord-qsp"]
    assert algebra_pairs(s) == [("cm-ord-qsp", "cm-ref-qsp"), ("cm-ord-qsp", "ph-ord-qsp"), ("ph-ord-qsp", "ph-ord-out"),
                                ("cm-ord-last", "cm-ref-last"), ("cm-ord-last", "ph-ord-last"), ("ph-ord-last", "ph-ord-out")]
    # each pair differs in exactly one factor
    from vheads.report._tables import what_changes
    assert {what_changes(a, b) for a, b in algebra_pairs(s)} == {"query type", "corpus", "attention source"}
    assert algebra_pairs(["cm-ord-last", "cm-ref-qsp"]) == []


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
        cers.append(([mass[l, h] for l, h in heads], v.mean()))
        rows += [("u", "cm-ord-last", "cers", f"layer-matched#{r}", f"i{i}", float(x)) for i, x in enumerate(v)]
    st.commit_unit("u", "eval", 0.0, {"outcomes": rows, "headsets": hs, "meta": [("image_mass", json.dumps(mass.tolist()))]})
    return st, a, b, part, ctrl, cers


def test_comparison_tables_equal_scipy(tmp_path):
    st, a, b, part, ctrl, cers = _store(tmp_path)
    alg = algebra_table(st)
    want = stats.ttest_rel(part, ctrl.mean(0), alternative="greater")
    assert alg.rows[0][0] == "query type" and alg.rows[0][2] == "shared" and float(alg.rows[0][-1]) == round(want.pvalue, 3)
    pair = paired_settings_table(st, ["cm-ord-last", "cm-ref-last"], tests=("ncs-all",))
    assert float(pair.rows[0][-1]) == round(stats.ttest_rel(a, b).pvalue, 3)
    sp = mass_table(st, ["cm-ord-last"])
    (row,) = sp.rows
    draws, c = zip(*cers)
    means = [float(np.mean(d)) for d in draws]
    assert row[1] == "layer-matched" and row[2] == "5"
    assert row[4] == f"{np.mean(means):.3f} [{min(means):.3f}, {max(means):.3f}]"
    for col, stat in zip(row[5:], (np.mean, np.median, np.min, np.max, lambda x: np.std(x, ddof=1))):
        rho = stats.spearmanr([stat(d) for d in draws], c).statistic
        assert col == f"{rho:.2f} (n=5)"  # 5 < 10 draws: no p
    st.close()


def test_crossover_and_random_overlap_tables_from_the_store(tmp_path):
    """Table 21 against a hand top-k of the stored scores; Fig. 7's numbers against the
    stored random draws."""
    import sqlite3

    from tests.report.synth import SETTINGS, make_run
    from vheads.report import load_run
    from vheads.report._overlaps import crossover_table, random_overlap_table

    d = make_run(tmp_path, settings=SETTINGS, R=2, n_items=4)
    run = load_run(d)
    with sqlite3.connect(d / "results.sqlite") as db:
        scores = {s: np.array(json.loads(x)) for s, x in db.execute("SELECT setting, scores FROM discovery")}
        draws = {}
        for s, ov in db.execute("SELECT setting, overlap FROM random_overlap ORDER BY draw"):
            draws.setdefault(s, []).append(ov)

    def top(x, k):
        flat = sorted(((-v, i) for i, v in enumerate(x.ravel())))[:k]
        return {divmod(i, x.shape[1]) for _, i in flat}

    cross = {r[0]: r for r in crossover_table(run).rows}
    assert set(cross) == {"cm-ord-qsp", "cm-ord-out", "cm-ref-last", "ph-ord-qsp", "ph-ord-out", "ph-ref-last"}
    for s, row in cross.items():
        k = int(row[1])
        c = s.split("-")[0]
        for native, cell in zip(("ord-last", "ref-qsp", "ref-out"), row[2:]):
            assert int(cell) == len(top(scores[s], k) & top(scores[f"{c}-{native}"], k))
    rand = {r[0]: r for r in random_overlap_table(run).rows}
    for s, ov in draws.items():
        assert rand[s][2] == f"{np.mean(ov):.2f} [{min(ov)}, {max(ov)}]" and rand[s][3] == str(len(ov))
