"""The doctor's projected study size against the rows a study really runs.

The count here is independent of :func:`vheads.study.study_rows`: it wraps the
function every evaluation forward goes through (``vheads.evaluation._probe._run_probes``,
reached after the probe memo and the repeated-head-set check) and adds up the rows it is
asked to run while a small study runs on a tiny random model.
"""

from __future__ import annotations

import pytest

import vheads.evaluation._probe as probe
from vheads.study import study_rows
from vheads.study import config_from_dict, run_study

#: the evaluation's progress labels (``run_scores(desc=...)``); the baseline audit runs without the memo
EVAL_DESCS = {"CERS", "NCS matched", "NCS mismatched", "NCS_grid", "text arm"}


def _small(model_dir, **over):
    """One setting and one control draw, so that the memo's only repeats are the structural ones
    the projection counts (on a model this small, control draws of two settings often coincide)."""
    d = {
        "model": str(model_dir), "corpora": ["comics"], "queries": ["ordinal"], "sources": ["last"],
        "n_discovery": 4, "n_eval": 4, "splits": 10, "k": 2, "tests": ["cers", "ncs", "ncs-grid", "text"],
        "row_groups": ["all", "last"], "row_group_controls": [], "controls": {"layer-matched": 1},
        "beta_sweep": [10.0, 10000.0], "beta_sweep_controls": 0, "k_sweep": [1, 2], "k_sweep_controls": 0,
        "algebra_controls": 0, "run": {"shard_size": 2, "batch_size": 16},
        "scores": [], "ablation": ["attention"], "causal_tests": [],  # the later stages: the test below
    }
    d.update(over)
    return config_from_dict(d)


def _counted_rows(monkeypatch, cfg, out) -> int:
    run = probe._run_probes
    seen = {"rows": 0}

    def counting(engine, probes, *args, **kwargs):
        desc = kwargs.get("desc", args[3] if len(args) > 3 else "forwards")
        if desc in EVAL_DESCS:
            seen["rows"] += sum(pb.n_rows for pb in probes)
        return run(engine, probes, *args, **kwargs)

    monkeypatch.setattr(probe, "_run_probes", counting)
    run_study(cfg, out, progress=False, report=False)
    return seen["rows"]


def test_projected_evaluation_rows_are_the_rows_the_study_runs(tiny_random_dirs, monkeypatch, tmp_path):
    cfg = _small(tiny_random_dirs["qwen3_vl"])
    ran = _counted_rows(monkeypatch, cfg, tmp_path / "run")
    assert study_rows(cfg, main_k=cfg.k)["evaluation"] == ran
    # by hand, n items: CERS 2n rows for each of S, its draw and S@k=1 (S@k=2 is S), plus S at
    # β = 10 (β = 10000 is the main run); NCS 2n for those three at all rows, S at the last row
    # and the unmasked baselines; NCS_grid 2n for S, the draw and all heads; text n for S, the
    # draw and the baseline
    n = cfg.n_eval
    assert ran == (3 + 1) * 2 * n + (3 + 1 + 1) * 2 * n + 3 * 2 * n + 3 * n


@pytest.mark.slow
def test_the_projection_is_an_upper_bound_with_controls(tiny_random_dirs, monkeypatch, tmp_path):
    """With controls and two settings the memo also serves draws the settings share, which the
    projection leaves out: it may only overestimate."""
    cfg = _small(tiny_random_dirs["qwen3_vl"], sources=["last", "qspan"], controls={"layer-matched": 3, "any-layer": 2},
                 row_group_controls=["layer-matched"], beta_sweep_controls=2, k_sweep_controls=1)
    ran = _counted_rows(monkeypatch, cfg, tmp_path / "run")
    assert 0 < ran <= study_rows(cfg, main_k=cfg.k)["evaluation"]


@pytest.mark.slow
def test_the_projection_counts_the_score_points_the_ablations_and_the_causal_map(tiny_random_dirs, monkeypatch, tmp_path):
    """The defaults' later stages (four score points, the zero ablation, the causal map and
    the causal setting) are counted: the projection bounds the rows from above and from below
    by the rows without them."""
    from vheads.models import load_model

    over = {"scores": ["gaze", "vrh"], "ablation": ["attention", "zero"], "causal_tests": ["ncs"]}
    cfg = _small(tiny_random_dirs["qwen3_vl"], **over)
    lm = load_model(str(tiny_random_dirs["qwen3_vl"]))
    heads = (len(lm.attention_layers), lm.n_heads)
    ran = _counted_rows(monkeypatch, cfg, tmp_path / "run")
    plain = study_rows(_small(tiny_random_dirs["qwen3_vl"]), main_k=cfg.k)["evaluation"]
    assert plain < ran <= study_rows(cfg, main_k=cfg.k, heads=heads)["evaluation"]


@pytest.mark.slow
def test_the_projected_time_is_within_twice_a_measured_small_study(tmp_path):
    """A real study on the built-in tiny model (two settings, controls whose draws repeat on
    its 32 heads, the beta and k sweeps), timed, against the doctor's projection for the same
    config on the same machine, measured just after it: within a factor of 2 either way."""
    import time

    from vheads.doctor import doctor
    from vheads.models import tiny_model_path

    try:
        tiny_model_path()
    except FileNotFoundError:
        pytest.skip("the built-in tiny model is not built")
    cfg = config_from_dict({
        "model": "tiny", "corpora": ["comics"], "queries": ["ordinal"], "sources": ["last", "qspan"], "n_discovery": 8,
        "n_eval": 8, "splits": 10, "controls": {"layer-matched": 40, "any-layer": 10}, "beta_sweep": [1.0, 10000.0],
        "beta_sweep_controls": 2, "k_sweep": [1, 2], "k_sweep_controls": 4, "algebra_controls": 0, "scores": [],
        "causal_tests": []})
    t0 = time.perf_counter()
    run_study(cfg, tmp_path / "run", progress=False, report=False, skip_doctor=True)
    measured = time.perf_counter() - t0
    speed = next(c for c in doctor("tiny", study=cfg, study_rows=study_rows).checks if c.name == "speed")
    projected = speed.numbers["projected_s"]
    assert 0.5 <= projected / measured <= 2.0, (projected, measured, speed.summary)
    # with sequential controls (the default) the line gives a range: fewest rows … every control to R_max
    low = speed.numbers["projected_low_s"]
    assert sum(speed.numbers["study_rows_low"].values()) <= sum(speed.numbers["study_rows"].values())
    assert 0.5 * low <= measured and low <= projected, (low, measured, projected)
