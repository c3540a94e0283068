"""The study's plan (``vheads plan``): the rows it projects are the rows a study runs, the
doctor and ``gpu_check`` read it, and bad input is refused before any work.

The rows a study ran are read from the run folder (``forward_rows.jsonl``: each unit's rows as
the evaluation's probes counted them while it ran), not from the plan's code.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest

from vheads.study import config_from_dict, run_study
from vheads.study._plan import Layout, expected_union, study_plan

ROOT = Path(__file__).resolve().parents[2]


def _stage_of(unit_id: str) -> str | None:
    """The plan's stage of a unit, from the runner's unit ids."""
    if unit_id.startswith("beta-sweep/"):
        return "beta sweep"
    if unit_id.startswith("eval/"):
        _, setting, test = unit_id.split("/")[:3]  # eval/<setting>/<test>/<lo>-<hi>[/r<round>]
        return "algebra" if "&" in setting else test
    if unit_id.startswith("causal-map/"):
        return "causal map"
    return {"audit": "audit"}.get(unit_id)


def recorded_rows(run_dir: Path) -> dict[str, Counter]:
    """``stage -> Counter(full, suffix)`` of the rows a run recorded (``forward_rows.jsonl``)."""
    ran: dict[str, Counter] = {}
    for line in (run_dir / "forward_rows.jsonl").read_text().splitlines():
        r = json.loads(line)
        stage = _stage_of(r["unit_id"])
        if stage is not None:
            ran.setdefault(stage, Counter()).update({"full": r["full"], "suffix": r["suffix"]})
    return ran


def test_the_plan_equals_the_rows_a_reduced_study_records(tiny_random_dirs, tmp_path):
    """One setting, one control draw, the beta and k sweeps, two row groups and every test:
    each stage's full and suffix rows, as the run folder records them, equal the plan's."""
    cfg = config_from_dict({
        "model": str(tiny_random_dirs["qwen3_vl"]), "corpora": ["comics"], "queries": ["ordinal"], "sources": ["last"],
        "n_discovery": 4, "n_eval": 4, "splits": 10, "k": 2, "tests": ["cers", "ncs", "ncs-grid", "text"],
        "row_groups": ["all", "last"], "row_group_controls": ["layer-matched"], "controls": {"layer-matched": 2},
        "beta_sweep": [10.0, 10000.0], "beta_sweep_controls": 1, "k_sweep": [1, 2], "k_sweep_controls": 0,
        "algebra_controls": 0, "run": {"shard_size": 2, "batch_size": 16}, "scores": [], "ablation": ["attention"],
        "causal_tests": []})
    run_study(cfg, tmp_path / "run", progress=False, report=False, skip_doctor=True)
    ran = recorded_rows(tmp_path / "run")
    plan = study_plan(cfg, Layout("tiny-random", 2, 4, 0, 0, 0), main_k=2)
    for stage in ("beta sweep", "cers", "ncs", "ncs-grid", "text", "audit"):
        s = plan.stage(stage)
        assert (s.full, s.suffix) == (ran[stage]["full"], ran[stage]["suffix"]), stage
    # by hand, n = 4 items: CERS 2n rows for S, its 2 draws and S@k=1 less S and the first draw
    # at the main beta (the sweep's); the sweep 2n for S and 1 draw at both betas
    n = 4
    assert ran["cers"]["full"] == (4 - 2) * 2 * n and ran["beta sweep"]["full"] == 2 * 2 * 2 * n


def test_expected_union_does_not_underflow_on_a_huge_pool():
    """A pool of 1e121 (the 8B model's layer-matched pool): 12 settings of 249 draws almost
    never meet, so the union is 12 · 249 less about C(12, 2) · 249² / N (binomial expansion,
    exact in rationals here); the old power form rounded (1 − 249/N)^12 to 1 and gave 0."""
    N, per, sets = 10**121, 249, 12
    exact = Fraction(N) * (1 - (1 - Fraction(per, N)) ** sets)
    assert expected_union(N, per, sets) == pytest.approx(float(exact), rel=1e-12)
    assert expected_union(N, per, sets) == pytest.approx(sets * per, rel=1e-9)
    # and a small pool still: 10 members, three subsets of 4 -> 10 (1 - 0.6^3)
    assert expected_union(10, 4, 3) == pytest.approx(10 * (1 - 0.6**3), rel=1e-12)


def test_the_doctor_and_gpu_check_read_the_plan(monkeypatch):
    """Both projections change when the plan does: they hold no count of their own."""
    import vheads.study._plan as plan_mod
    from vheads.study import study_rows
    from vheads.study import StudyConfig

    sys.path.insert(0, str(ROOT))
    from benchmarks.gpu_check import evaluation_rows

    cfg = StudyConfig(n_eval=8)
    before = (study_rows(cfg, main_k=3), evaluation_rows(cfg))
    real = plan_mod.study_plan

    def doubled(*a, **kw):
        p = real(*a, **kw)
        for s in p.stages:
            s.full, s.suffix = 2 * s.full, 2 * s.suffix
        return p

    monkeypatch.setattr(plan_mod, "study_plan", doubled)
    import vheads.study._projection as proj

    monkeypatch.setattr(proj, "study_plan", doubled)
    after = (study_rows(cfg, main_k=3), evaluation_rows(cfg))
    assert after[0]["evaluation"] == 2 * before[0]["evaluation"]
    assert after[1]["full_rows"] == 2 * before[1]["full_rows"] and after[1]["suffix_rows"] == 2 * before[1]["suffix_rows"]


def _plan_cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "vheads.cli", "plan", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300, env={**__import__("os").environ, "PYTHONPATH": str(ROOT / "src")})


def test_vheads_plan_prints_every_stage_and_the_hours(tmp_path):
    r = _plan_cli("--model-layout", "qwen3-vl-8b", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert {"discovery", "cers", "ncs", "ncs-grid", "text", "beta sweep"} <= set(d["stages"])
    # the hours are the rows times the measured ms per row (one point: the 8B rate at 1,057 tokens)
    s = d["stages"]["cers"]
    assert d["gpu_hours"]["cers"] == pytest.approx(s["full"] * 36.16 / 3.6e6, rel=1e-9)
    assert math.isclose(d["gpu_hours"]["total"], sum(v for k, v in d["gpu_hours"].items() if k != "total"))


@pytest.mark.parametrize("args, key", [
    (["--model-layout", "no-such-layout"], "--model-layout"),
    (["--model-layout", "qwen3-vl-2b", "--rates", "RATES_8B"], "rates.layout"),
])
def test_bad_plan_input_is_one_line_naming_the_key_exit_2(tmp_path, args, key):
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps({"layout": "qwen3-vl-8b", "gpu": {"device": "x", "full": [[1057, 36.2]], "suffix": [[1057, 6.1]]}}))
    r = _plan_cli(*[str(rates) if a == "RATES_8B" else a for a in args])
    assert r.returncode == 2 and key in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
