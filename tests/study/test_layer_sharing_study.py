"""Layer-prefix sharing changes no stored outcome of a study (the engine-level check is
tests/engine/test_layer_sharing.py)."""

from vheads.engine import _layers
from vheads.study import run_study
from tests.study.test_study import outcomes, small_config


def test_layer_sharing_on_or_off_stores_the_same_outcomes(tmp_path, monkeypatch):
    cuts = []
    distinct_rows = _layers.distinct_rows

    def counted(*a):
        cut = distinct_rows(*a)
        cuts.append(cut is not None)
        return cut

    monkeypatch.setattr(_layers, "distinct_rows", counted)
    cfg = small_config("tiny", sources=["last"], tests=["cers", "ncs"], row_groups=["all"], beta_sweep=[], k_sweep=[], splits=4)
    run_study(cfg, tmp_path / "on", progress=False, report=False)
    assert any(cuts)  # some decoder layer ran on fewer rows than the batch has
    monkeypatch.setenv("VHEADS_SHARE_LAYERS", "0")
    cuts.clear()
    run_study(cfg, tmp_path / "off", progress=False, report=False)
    assert not cuts
    on, off = outcomes(tmp_path / "on"), outcomes(tmp_path / "off")
    assert [r[:4] for r in on] == [r[:4] for r in off] and len(on) > 0
    assert max(abs(a[4] - b[4]) for a, b in zip(on, off)) <= 1e-6
