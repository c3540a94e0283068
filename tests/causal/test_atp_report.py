"""The report's "AtP vs the exact map": each printed ρ, p, top-k recall, worst head and worst
item recomputes from the raw ``causal_map`` rows (scipy's Spearman, a hand top-k), and the
causal-map figure gains the AtP panel only where AtP rows are stored."""

import sqlite3

import numpy as np
import pytest
from scipy import stats as sps

from tests.report.synth import H, K, L, make_run
from vheads.report import load_run
from vheads.report._atp import N_SHOW, atp_table
from vheads.report._causal import causal_blocks, load_causal_maps


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("run") / "r", causal=True, atp=True)


def _drops(run_dir, method) -> dict:
    """{(head, arm, item): p4 drop} of the heads of ``method``'s NCS map, straight from SQLite."""
    db = sqlite3.connect(run_dir / "results.sqlite")
    sql = ("SELECT headset_id, arm, item_id, value FROM causal_map WHERE method = ? AND test = 'ncs-all' "
           "AND ablation = 'attention' AND headset_id LIKE 'L%H%'")
    return {(h, a, i): v for h, a, i, v in db.execute(sql, (method,))}


def _head_map(drops) -> np.ndarray:
    m = np.zeros((L, H))
    for l in range(L):
        for h in range(H):
            arm = {a: [v for (hid, aa, _), v in drops.items() if hid == f"L{l}H{h}" and aa == a] for a in ("matched", "mismatched")}
            m[l, h] = np.mean(arm["matched"]) - np.mean(arm["mismatched"])
    return m


def test_printed_agreement_recomputes_from_the_stored_rows(run_dir):
    table = atp_table(load_run(run_dir), load_causal_maps(load_run(run_dir)))
    assert table.title == "AtP vs the exact map" and len(table.rows) == 1
    label, n_heads, rho, p, topk, heads, items = table.rows[0]
    ex, at = _drops(run_dir, "exact"), _drops(run_dir, "atp")
    assert set(ex) == set(at) and len(ex) == L * H * 16  # the same heads, arms and items
    e, a = _head_map(ex), _head_map(at)
    ref = sps.spearmanr(e.ravel(), a.ravel())
    assert label == "NCS (all rows)" and n_heads == str(L * H)
    assert float(rho) == pytest.approx(ref.statistic, abs=5e-4)
    assert float(p) == pytest.approx(ref.pvalue, rel=0.06)
    top = lambda m: set(np.argsort(-m.ravel())[:K])  # noqa: E731  (no ties: continuous values)
    assert topk == f"{len(top(e) & top(a))} / {K}"
    worst = np.argsort(-np.abs(e - a).ravel())[:N_SHOW]
    assert [s.split(" ")[0] for s in heads.split("; ")] == [f"L{i // H}H{i % H}" for i in worst]
    per_item = {}
    for arm in ("matched", "mismatched"):
        for iid in {i for (_, aa, i) in ex if aa == arm}:
            hs = [f"L{l}H{h}" for l in range(L) for h in range(H)]
            per_item[f"{arm}:{iid}"] = sps.spearmanr([ex[(h, arm, iid)] for h in hs], [at[(h, arm, iid)] for h in hs]).statistic
    lowest = sorted(per_item, key=per_item.get)[:N_SHOW]
    printed = [s.rsplit(" ", 1) for s in items.split("; ")]
    assert [x for x, _ in printed] == lowest
    assert [float(r) for _, r in printed] == pytest.approx([per_item[i] for i in lowest], abs=5e-3)


def test_the_section_shows_the_table_and_the_map_gains_its_atp_panel(run_dir, tmp_path):
    with_atp = causal_blocks(load_run(run_dir))
    without = causal_blocks(load_run(make_run(tmp_path / "plain", causal=True)))
    titles = lambda bs: [getattr(b, "title", getattr(b, "name", None)) for b in bs]  # noqa: E731
    assert "AtP vs the exact map" in titles(with_atp) and "AtP vs the exact map" not in titles(without)
    fig = {b.name: b for b in with_atp if hasattr(b, "png")}["causal_map"]
    plain = {b.name: b for b in without if hasattr(b, "png")}["causal_map"]
    from PIL import Image
    import io

    w_atp, w_plain = Image.open(io.BytesIO(fig.png)).size[0], Image.open(io.BytesIO(plain.png)).size[0]
    assert w_atp > w_plain  # one more heat-map panel, beside the exact one
    assert "AtP estimate" in fig.caption
