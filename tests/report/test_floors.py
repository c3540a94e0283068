"""The protocol warns for every table whose rank-p floor 1/(n+1) (n distinct head-sets compared) or Holm floor is above 0.05."""

from tests.report.synth import make_run
from vheads.report import load_run, protocol_checks

LEAN = {"row_groups": False, "text": False, "extra_controls": False, "overlap": False, "strips": False,
        "any_layer": False}


def _floors(d):
    (check,) = [c for c in protocol_checks(load_run(d)) if c.item == "Rank-p and Holm floors by table"]
    return check


def test_a_beta_sweep_with_five_controls_is_warned_with_its_floor(tmp_path):
    d = make_run(tmp_path, settings=["cm-ord-last"], R=5, n_items=3, tests=("cers",), sweeps=True, **LEAN)
    check = _floors(d)
    assert "β sweep (cers), layer-matched: n=5, rank-p floor 0.167" in check.value
    assert "β sweep (cers), layer-matched: a rank p alone cannot fall below 0.167 with n=5; it needs n ≥ 19" in check.warning
    assert "beta_sweep_controls ≥ 19" in check.warning


def test_enough_draws_everywhere_gives_no_floor_warning(tmp_path):
    d = make_run(tmp_path, settings=["cm-ord-last"], R=19, n_items=3, tests=("cers",), sweeps=True, **LEAN)
    check = _floors(d)
    assert "rank-p floor 0.050" in check.value and check.warning is None  # 1/20 = 0.05 is not above 0.05
