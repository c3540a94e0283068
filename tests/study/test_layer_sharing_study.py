"""The evaluation speed-ups change no stored outcome of a study: layer-prefix sharing
(tests/engine/test_layer_sharing.py) and running a repeated head-set once
(tests/evaluation/test_distinct_headsets.py), against a run with both off."""

import numpy as np

from vheads.engine import _layers
from vheads.evaluation import _probe
from vheads.study import run_study
from tests.study.test_study import outcomes, small_config


def test_speedups_on_or_off_store_the_same_outcomes(tmp_path, monkeypatch):
    cuts = []
    distinct_rows = _layers.distinct_rows

    def counted_rows(*a):
        cut = distinct_rows(*a)
        cuts.append(cut is not None)
        return cut

    monkeypatch.setattr(_layers, "distinct_rows", counted_rows)
    # 12 layer-matched controls of a 3-head S on the 4 × 8 tiny model (distinct since issue 35: no repeat to count)
    cfg = small_config("tiny", sources=["last"], tests=["cers", "ncs"], row_groups=["all"], beta_sweep=[], k_sweep=[], splits=4,
                       controls={"layer-matched": 12, "any-layer": 3},
                       run={"shard_size": 2, "batch_size": 16, "workers": 1})  # the flags are flipped in this process
    run_study(cfg, tmp_path / "on", progress=False, report=False)
    assert any(cuts)  # some layer ran on fewer rows
    monkeypatch.setenv("VHEADS_SHARE_LAYERS", "0")
    monkeypatch.setattr(_probe, "_distinct_headsets", lambda probes: (probes, [np.arange(pb.n_rows) for pb in probes]))
    cuts.clear()
    run_study(cfg, tmp_path / "off", progress=False, report=False)
    assert not any(cuts)
    on, off = outcomes(tmp_path / "on"), outcomes(tmp_path / "off")
    assert [r[:4] for r in on] == [r[:4] for r in off] and len(on) > 0
    diffs = sorted(((abs(a[4] - b[4]), a[:4]) for a, b in zip(on, off)), reverse=True)
    # float rounding of differently composed batches (P(option) to 1e-5 in fp32, issue #13)
    assert diffs[0][0] <= 1e-5, f"largest differences {diffs[:5]}"
