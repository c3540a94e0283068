"""The study's stability stage and its report section: every stored draw is recomputed by
hand from the stored per-item scores and seed, N90 in the table from the stored draws, and
the figure fits its canvas."""

from __future__ import annotations

import hashlib
import json
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from tests.discovery.test_stability import _topk
from tests.report.synth import SETTINGS, H, K, L, make_run
from tests.report.test_figures import check_saved, drawn  # noqa: F401 - the fixture
from vheads.discovery import split_half_ceiling
from vheads.report import load_run
from vheads.report._build import build_sections
from vheads.report._doc import Figure, Table
from vheads.report._stability import stability_blocks
from vheads.store import Store
from vheads.study._stability import stability_stage

N_ITEMS = 20


def _sha_seed(*parts) -> int:
    return int(hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:8], 16)


def _run_with_stability(tmp_path, settings, draws=15, seed=5):
    """A synthetic run whose settings have per-item scores (stored in shuffled order, ids
    that sort differently from insertion), then the stability stage."""
    run_dir = make_run(tmp_path / "run", settings=settings)
    rng = np.random.default_rng(1)
    per = {}
    store = Store(run_dir)
    try:
        rows = []
        for j, s in enumerate(settings):
            x = rng.uniform(0, 1, (1, L, H)) * (1 + j % 3) + rng.normal(0, 0.5, (N_ITEMS, L, H))
            ids = [f"item-{i:02d}" for i in range(N_ITEMS)]
            per[s] = x
            rows += [(s, ids[i], json.dumps(x[i].tolist())) for i in rng.permutation(N_ITEMS)]
        store.commit_unit("items", "items", 0.0, {"item_scores": rows})
        cfg = SimpleNamespace(splits=draws, seed=seed, selection="flat")
        stability_stage(store, cfg)
        n_rows = len(store.query("SELECT * FROM stability"))
        stability_stage(store, cfg)  # resumed: done already
        assert len(store.query("SELECT * FROM stability")) == n_rows
    finally:
        store.close()
    return run_dir, per


def test_every_stored_draw_recomputes_from_the_stored_scores_and_seed(tmp_path):
    settings = SETTINGS[:3]
    run_dir, per = _run_with_stability(tmp_path, settings, draws=6, seed=5)
    store = Store(run_dir, readonly=True)
    try:
        rows = store.query("SELECT setting, k, curve, n_items, draw, seed, overlap FROM stability")
        scores = {s: np.array([json.loads(v) for _, v in store.query(
            "SELECT item_id, scores FROM item_scores WHERE setting=? ORDER BY item_id", s)]) for s in settings}
    finally:
        store.close()
    assert len(rows) == len(settings) * 2 * 3 * 6  # settings x curves x sizes (5, 10 and N = 20) x draws
    for s in settings:
        assert np.allclose(scores[s], per[s])  # item_id order is the order items were made in
    by = {}
    for s, k, curve, n, draw, seed, ov in rows:
        # the size's seed; at all N items the noise ceiling's seed (the overlap stage's draws)
        want = _sha_seed(5, "ceiling", s) if n == N_ITEMS else _sha_seed(_sha_seed(5, "stability", s), "stability", n)
        assert k == K and seed == want
        by[(s, curve, n, draw)] = (seed, ov)
    for s in settings:
        x = scores[s]
        full = _topk(x.mean(0), K)
        for n in sorted({key[2] for key in by if key[0] == s}):
            rng = np.random.default_rng(by[(s, "full", n, 0)][0])
            for d in range(6):
                sub = rng.permutation(N_ITEMS)[:n]
                assert by[(s, "full", n, d)][1] == len(_topk(x[sub].mean(0), K) & full)
                half = len(_topk(x[sub[: n // 2]].mean(0), K) & _topk(x[sub[n // 2:]].mean(0), K))
                assert by[(s, "split", n, d)][1] == half
    for s in settings:  # so the split-half curve ends on the split-half ceiling, split for split
        ceiling = split_half_ceiling(scores[s], K, splits=6, seed=_sha_seed(5, "ceiling", s))
        assert [by[(s, "split", N_ITEMS, d)][1] for d in range(6)] == ceiling.values.tolist()
    # the report's N90 column, from the stored draws by hand
    table = next(b for b in stability_blocks(run_dir) if isinstance(b, Table))
    for row in table.rows:
        s = row[0]
        for curve, col in (("full", 3), ("split", 5)):
            sizes = sorted({key[2] for key in by if key[0] == s})
            means = [np.mean([by[(s, curve, n, d)][1] for d in range(6)]) for n in sizes]
            want = next((n for n, m in zip(sizes, means) if means[-1] > 0 and m >= 0.9 * means[-1]), None)
            shown = "–" if want is None else (f"≤ {want}" if want == sizes[0] else str(want))
            assert row[col] == shown, (s, curve, means)
        assert row[2] == str(N_ITEMS) and row[1] == str(K)


@pytest.mark.parametrize("n_settings", [1, 2, 12])
def test_the_stability_figure_fits_its_canvas_and_is_in_the_report(n_settings, tmp_path, drawn):  # noqa: F811
    run_dir, _ = _run_with_stability(tmp_path, SETTINGS[:n_settings])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sections, _ = build_sections(load_run(run_dir))
    sec = next(s for s in sections if s.id == "stability")
    assert [type(b) for b in sec.blocks] == [Figure, Table] and sec.blocks[0].name == "stability"
    assert len(sec.blocks[1].rows) == n_settings
    assert not [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    mine = [rec for rec in drawn if any(t.get_text() == "split-half" for t, _, _ in rec["texts"])]
    assert len(mine) == 1  # the stability figure (its legend names the split-half curve)
    check_saved(mine)


def test_a_run_without_the_stage_has_no_stability_section(tmp_path):
    run_dir = make_run(tmp_path / "run", settings=SETTINGS[:2])
    sections, _ = build_sections(load_run(run_dir))
    assert "stability" not in {s.id for s in sections}
