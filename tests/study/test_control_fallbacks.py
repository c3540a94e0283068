"""Every control draw of a study records its layer-matched fallbacks, and the report shows them."""

import json

import numpy as np

from tests.report.synth import make_run
from vheads.evaluation import HeadSet
from vheads.evaluation._controls import layer_matched_disjoint_controls
from vheads.report import load_run, protocol_checks
from vheads.report._tables import sweep_table
from vheads.store import Store
from vheads.study import config_from_dict
from vheads.study._runner import _headset_stage

L, H = 4, 8


def _scores() -> np.ndarray:
    """Top 2: heads (1, 0) and (2, 0); top 8 adds six heads of layer 3 (which has 8)."""
    s = np.zeros((L, H))
    s[1, 0], s[2, 0] = 1.0, 0.9
    s[3, :6] = 0.5 - 0.01 * np.arange(6)
    return s


def test_disjoint_draws_record_their_fallback_and_the_report_shows_it(tmp_path):
    st = Store(tmp_path)
    sc = _scores()
    S8 = HeadSet([(1, 0), (2, 0)] + [(3, h) for h in range(6)], L, H)
    st.commit_unit("discovery/x", "discovery", 0.0, {"discovery": [
        ("cm-ref-out", "referring", "out", "comics", 4, 8, json.dumps(sc.tolist()), json.dumps([list(h) for h in S8.heads]))]})
    cfg = config_from_dict({"model": "unused", "controls": {"layer-matched": 5, "layer-matched-disjoint": 4},
                            "k_sweep": [2, 8], "k_sweep_controls": 4, "algebra_controls": 0})
    _headset_stage(st, cfg, (L, H))
    recorded = json.loads(st.get_meta("control_fallbacks"))
    st.close()
    # S has 6 of layer 3's 8 heads: an S-disjoint layer-matched draw can take only the other 2 there
    want = [str(f) for f in layer_matched_disjoint_controls(S8, 4, 0).fallbacks]
    assert want and want[0].startswith("layer 3: S has 6 heads there but only 2")
    # the exchangeable draws (main and k sweep) keep S's counts in every layer: no fallback
    assert recorded == {"cm-ref-out": {"layer-matched-disjoint": want}}
    recorded = {"cm-ref-out": {"layer-matched@k=8": want}}  # as a run before issue 41 stored a k-sweep fallback

    d = make_run(tmp_path / "run", settings=["cm-ref-out", "cm-ref-qsp"], R=3, n_items=4, tests=("cers",),
                 row_groups=False, text=False, extra_controls=False, overlap=False, strips=False, any_layer=False,
                 meta_extra={"control_fallbacks": recorded})
    run = load_run(d)
    (check,) = [c for c in protocol_checks(run) if c.item == "Layer-matched fallbacks"]
    assert "cm-ref-out, layer-matched@k=8: layer 3" in check.value and check.warning
    # the warning is one line (issue 36): what and how many; the case itself is in the value above
    assert check.warning.startswith("1 fallback(s) in 1 setting") and len(check.warning) <= 200
    assert "cm-ref-out (layer-matched@k=8)" in sweep_table(run, "k").caption
    assert "fallback" not in sweep_table(run, "beta").caption  # the β sweep reuses the main draws, which keep counts


def test_fallbacks_of_an_older_run_are_read_as_the_main_draws(tmp_path):
    d = make_run(tmp_path, settings=["cm-ord-last"], R=3, n_items=3, tests=("cers",), row_groups=False, text=False,
                 extra_controls=False, sweeps=False, overlap=False, strips=False, any_layer=False,
                 meta_extra={"control_fallbacks": {"cm-ord-last": ["layer 3: S has 8 heads there but only 0 other heads"]}})
    (check,) = [c for c in protocol_checks(load_run(d)) if c.item == "Layer-matched fallbacks"]
    assert check.value == "cm-ord-last, layer-matched: layer 3: S has 8 heads there but only 0 other heads"
