"""Comparison tables against scipy on a hand-written store."""

import json

import numpy as np
from scipy import stats

from vheads.report._comparison_tables import algebra_table, mass_table, paired_settings_table
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


def _store(tmp_path, mass_draws=None):
    """A hand-written store: two settings' S (NCS values and both arms), one algebra part with
    three controls (both arms), five CERS control draws with head masses. ``mass_draws``:
    the CERS control draws' head lists (default: five distinct ones)."""
    st = Store(tmp_path)
    rng = np.random.default_rng(0)
    nm, nx = 6, 5  # matched and mismatched items
    arms = {"cm-ord-last": (rng.normal(0.3, 0.1, nm), rng.normal(0.05, 0.2, nx)),
            "cm-ref-last": (rng.normal(0.1, 0.1, nm), rng.normal(0.1, 0.2, nx))}
    rows, arm_rows = [], []
    for s, (m, x) in arms.items():  # as the study stores NCS: matched drops minus the mismatched mean
        rows += [("u", s, "ncs-all", "S", f"i{i}", float(v - x.mean())) for i, v in enumerate(m)]
        arm_rows += [("u", s, "ncs-all", "S", f"i{i}", "matched", float(v)) for i, v in enumerate(m)]
        arm_rows += [("u", s, "ncs-all", "S", f"x{j}", "mismatched", float(v)) for j, v in enumerate(x)]
    pid = "cm-ord-last&cm-ref-last"
    part = (rng.normal(0.3, 0.1, nm), rng.normal(0.1, 0.3, nx))
    ctrl = (rng.normal(0.1, 0.1, (3, nm)), rng.normal(0.05, 0.1, (3, nx)))
    for hid, (m, x) in [("shared", part)] + [(f"shared/layer-matched#{r}", (ctrl[0][r], ctrl[1][r])) for r in range(3)]:
        rows += [("u", pid, "ncs-all", hid, f"i{i}", float(v - x.mean())) for i, v in enumerate(m)]
        arm_rows += [("u", pid, "ncs-all", hid, f"i{i}", "matched", float(v)) for i, v in enumerate(m)]
        arm_rows += [("u", pid, "ncs-all", hid, f"x{j}", "mismatched", float(v)) for j, v in enumerate(x)]
    mass = rng.uniform(size=(2, 4))
    cers = []
    hs = [(pid, "shared", "S", 0, 0, json.dumps([[0, 1]]))]
    draws = mass_draws or [[[0, r % 4], [1, (r + 1 + r // 4) % 4]] for r in range(5)]
    values = {}
    for r, heads in enumerate(draws):
        hs.append(("cm-ord-last", f"layer-matched#{r}", "layer-matched", r, 0, json.dumps(heads)))
        key = json.dumps(sorted(heads))
        v = values.setdefault(key, rng.normal(size=6))  # one head-set gives one outcome, however often drawn
        cers.append(([mass[l, h] for l, h in heads], v.mean()))
        rows += [("u", "cm-ord-last", "cers", f"layer-matched#{r}", f"i{i}", float(x)) for i, x in enumerate(v)]
    st.commit_unit("u", "eval", 0.0, {"outcomes": rows, "arms": arm_rows, "headsets": hs,
                                      "meta": [("image_mass", json.dumps(mass.tolist()))]})
    return st, arms, part, ctrl, cers


def test_paired_ncs_of_two_settings_uses_both_arms_like_a_hand_welch_t(tmp_path):
    """NCS_A − NCS_B = mean over matched items of (drop_A − drop_B) − mean over mismatched
    items of (drop_A − drop_B); its test is scipy's Welch t of those two sets of differences,
    not a paired t of the stored values (which treats the mismatched mean as a constant)."""
    st, arms, *_ = _store(tmp_path)
    (am, ax), (bm, bx) = arms["cm-ord-last"], arms["cm-ref-last"]
    u, v = am - bm, ax - bx
    want = stats.ttest_ind(u, v, equal_var=False)
    ci = want.confidence_interval(0.95)
    (row,) = paired_settings_table(st, ["cm-ord-last", "cm-ref-last"], tests=("ncs-all",)).rows
    assert row[5] == f"{u.mean() - v.mean():.3f} [{ci.low:.3f}, {ci.high:.3f}]"
    assert row[6] == "Welch, both arms"
    assert row[7] == f"{want.statistic:.2f}" and float(row[8]) == round(want.pvalue, 3)
    old = stats.ttest_rel(am - ax.mean(), bm - bx.mean())  # what a paired t of the stored values gives
    assert abs(old.statistic - want.statistic) > 0.1
    st.close()


def test_algebra_part_against_controls_uses_both_arms_like_a_hand_welch_t(tmp_path):
    st, arms, part, ctrl, _ = _store(tmp_path)
    u = part[0] - ctrl[0].mean(axis=0)
    v = part[1] - ctrl[1].mean(axis=0)
    want = stats.ttest_ind(u, v, equal_var=False, alternative="greater")
    (row,) = algebra_table(st).rows
    assert row[0] == "query type" and row[2] == "shared" and row[4] == "3"
    assert row[5] == f"{part[0].mean() - part[1].mean():.3f}"
    assert row[8] == f"{want.statistic:.2f}" and row[9] == f"{want.df:.1f}" and float(row[10]) == round(want.pvalue, 3)
    st.close()


def test_comparison_tables_equal_scipy(tmp_path):
    st, *_, cers = _store(tmp_path)
    sp = mass_table(st, ["cm-ord-last"])
    (row,) = sp.rows
    draws, c = zip(*cers)
    means = [float(np.mean(d)) for d in draws]
    assert row[1] == "layer-matched" and row[2] == "5 (5 distinct)"
    assert row[4] == f"{np.mean(means):.3f} [{min(means):.3f}, {max(means):.3f}]"
    for col, stat in zip(row[5:], (np.mean, np.median, np.min, np.max, lambda x: np.std(x, ddof=1))):
        rho = stats.spearmanr([stat(d) for d in draws], c).statistic
        assert col == f"{rho:.2f} (n=5)"  # 5 < 10 distinct draws: no p
    st.close()


def test_spearman_of_repeated_draws_is_taken_over_distinct_head_sets(tmp_path):
    """30 draws that hold 10 distinct head-sets: the table says so, and ρ and p are those of
    scipy over the 10 distinct (mass, CERS) points, not over 30 copies."""
    distinct = [[[0, a], [1, b]] for a in range(4) for b in range(4)][:10]
    draws = [distinct[i % 10] for i in range(30)]
    st, *_, cers = _store(tmp_path, mass_draws=draws)
    (row,) = mass_table(st, ["cm-ord-last"]).rows
    assert row[2] == "30 (10 distinct)"
    pts = cers[:10]
    x = [float(np.mean(m)) for m, _ in pts]
    y = [c for _, c in pts]
    want = stats.spearmanr(x, y)
    assert row[5] == f"{want.statistic:.2f} ({want.pvalue:.3f})" or row[5] == f"{want.statistic:.2f} ({want.pvalue:.1e})"
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
