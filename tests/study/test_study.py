"""The study runner: resume after kill -9, refusal of mixed configs, config errors, Ray = local."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from vheads.data import NATURAL_TEMPLATES
from vheads.study import Store, config_from_dict, load_config, run_study


def small_config(model_dir, **over):
    d = {
        "model": str(model_dir), "corpora": ["comics"], "queries": ["ordinal"], "sources": ["last", "qspan"],
        "n_discovery": 4, "n_eval": 4, "splits": 10, "tests": ["cers", "ncs"], "row_groups": ["all", "last"],
        "controls": {"layer-matched": 3, "any-layer": 3}, "beta_sweep": [1.0], "k_sweep": [1],
        "scores": [],  # score points: tests/study/test_scores.py
        "run": {"shard_size": 2, "batch_size": 16},
    }
    d.update(over)
    return config_from_dict(d)


def outcomes(run_dir):
    s = Store(run_dir)
    try:
        return s.query("SELECT setting, test, headset_id, item_id, value FROM outcomes ORDER BY 1, 2, 3, 4")
    finally:
        s.close()


def assert_same_outcomes(got, ref, tol=1e-5):
    """The same keys, and values equal up to float rounding: a study replica's probe memo
    serves rows it ran before, so a resumed run or another backend can take a row from a
    differently composed batch (P(option) to 1e-5 in fp32, issue #13)."""
    assert [r[:-1] for r in got] == [r[:-1] for r in ref] and got
    worst = max(abs(a[-1] - b[-1]) for a, b in zip(got, ref))
    assert worst <= tol, f"largest difference {worst}"


@pytest.fixture(scope="module")
def reference_run(tiny_random_dirs, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref")
    res = run_study(small_config(tiny_random_dirs["qwen3_vl"]), out, progress=False, report=False)
    return out, res


def test_rerun_resumes_and_computes_nothing_twice(tiny_random_dirs, reference_run):
    out, first = reference_run
    assert first.units_computed > 0
    before = outcomes(out)
    again = run_study(small_config(tiny_random_dirs["qwen3_vl"]), out, progress=False, report=False)
    assert again.units_computed == 0
    assert outcomes(out) == before
    assert len(before) > 0


def test_every_sweep_point_is_stored_with_its_own_controls(reference_run):
    """β sweep: S and min(beta_sweep_controls, R) layer-matched draws at every β; k sweep:
    S@k and its layer-matched controls with the top-k set's layer counts: for k = 1 the
    pool is the H − 1 other heads of S@k's layer (at most 2 · 20), so every one of them, once."""
    out, _ = reference_run
    rows = outcomes(out)
    st = Store(out)
    try:
        n_heads = int(st.get_meta("n_heads"))
        heads = dict(st.query("SELECT headset_id, heads FROM headsets WHERE setting='cm-ord-qsp'"))
        pools = json.loads(st.get_meta("control_pools"))
    finally:
        st.close()
    for sid in ("cm-ord-last", "cm-ord-qsp"):
        at_beta = {h for s, t, h, _, _ in rows if s == sid and t == "cers@beta=1"}
        assert at_beta == {"S", "layer-matched#0", "layer-matched#1", "layer-matched#2"}
        for test in ("cers", "ncs-all"):
            at_k = {h for s, t, h, _, _ in rows if s == sid and t == test and "@k=" in h}
            assert at_k == {"S@k=1"} | {f"layer-matched@k=1#{i}" for i in range(n_heads - 1)}
        assert not any("@k=" in h for s, t, h, _, _ in rows if s == sid and t == "ncs-last")
        assert pools[sid]["layer-matched@k=1"] == {"mode": "exact", "pool": n_heads - 1, "n": n_heads - 1, "R": 20}
    (l_s, h_s), = json.loads(heads["S@k=1"])
    got = set()
    for i in range(n_heads - 1):
        (l_c, h_c), = json.loads(heads[f"layer-matched@k=1#{i}"])
        assert l_c == l_s
        got.add(h_c)
    assert got == set(range(n_heads)) - {h_s}


def test_cers_runs_at_the_headline_beta_the_sweeps_controls_chose(reference_run):
    """beta_rule = "controls": the sweep ran first; its controls alone (every setting's
    layer-matched draws at each β, p4) gave the headline β, recorded with the rule; Table 3's
    CERS of S then ran at that β (here the one sweep point, 1, not the config's beta = 1e4)."""
    out, _ = reference_run
    st = Store(out)
    try:
        record = json.loads(st.get_meta("headline_beta"))
        ctrl = st.query("SELECT avg(value) FROM outcomes WHERE test='cers@beta=1' AND headset_id LIKE 'layer-matched#%' "
                        "GROUP BY setting, headset_id")
        s_main = st.query("SELECT setting, item_id, value FROM outcomes WHERE test='cers' AND headset_id='S' ORDER BY 1, 2")
        s_sweep = st.query("SELECT setting, item_id, value FROM outcomes WHERE test='cers@beta=1' AND headset_id='S' ORDER BY 1, 2")
    finally:
        st.close()
    assert record["rule"] == "controls" and record["beta"] == 1.0 and record["tolerance"] == 0.05
    assert record["rms"]["1"] == pytest.approx(float(np.sqrt(np.mean(np.square([v for (v,) in ctrl])))))
    assert [r[:2] for r in s_main] == [r[:2] for r in s_sweep] and s_main
    assert max(abs(a[2] - b[2]) for a, b in zip(s_main, s_sweep)) <= 1e-5


def test_a_different_config_is_refused_not_mixed(tiny_random_dirs, reference_run):
    out, _ = reference_run
    with pytest.raises(ValueError, match="different configuration"):
        run_study(small_config(tiny_random_dirs["qwen3_vl"], n_eval=6), out, progress=False, report=False)


def test_kill_9_then_rerun_equals_an_uninterrupted_run(tiny_random_dirs, reference_run, tmp_path):
    ref_out, _ = reference_run
    out = tmp_path / "killed"
    cfg = small_config(tiny_random_dirs["qwen3_vl"]).to_dict()
    script = (
        "import json, sys; from vheads.study import config_from_dict, run_study; "
        f"run_study(config_from_dict(json.loads({json.dumps(json.dumps(cfg))})), {str(out)!r}, progress=False, report=False)"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    log = out / "units.log"
    deadline = time.time() + 300
    while time.time() < deadline and not (log.exists() and "done" in log.read_text()):
        time.sleep(0.05)
    time.sleep(random.Random(os.getpid()).uniform(0, 1.5))  # a random moment after the first commit
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = {l.split()[1] for l in log.read_text().splitlines() if l.startswith("done")}
    n_lines = len(log.read_text().splitlines())
    assert done_before, "the run was killed before any unit committed"
    run_study(config_from_dict(cfg), out, progress=False, report=False)
    started_after = {l.split()[1] for l in log.read_text().splitlines()[n_lines:] if l.startswith("start")}
    assert not (started_after & done_before), "a committed unit was computed again"
    assert_same_outcomes(outcomes(out), outcomes(ref_out))  # the resumed process starts with an empty memo


@pytest.mark.parametrize("over,match", [
    ({"colour": 1}, "unknown config key 'colour'"),
    ({"n_eval": "many"}, "config key 'n_eval': expected int"),
    ({"run": {"backend": "spark"}}, "config key 'run.backend'"),
    ({"corpora": ["strips:/no/such/folder"]}, "corpus folder '/no/such/folder' does not exist"),
    ({"controls": {"layer-matched": 0}}, "R must be at least 1"),
    ({"beta": float("inf")}, "config key 'beta'"),
])
def test_bad_config_is_one_error_naming_the_key(tiny_random_dirs, over, match):
    with pytest.raises(ValueError, match=match):
        small_config(tiny_random_dirs["qwen3_vl"], **over)


def test_unknown_model_is_refused_before_any_work(tmp_path):
    cfg = config_from_dict({"model": str(tmp_path / "nope")})
    with pytest.raises(ValueError, match="config key 'model'"):
        run_study(cfg, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_config_file_round_trip_and_errors(tmp_path):
    from vheads.study import DEFAULT_TOML, StudyConfig

    p = tmp_path / "c.toml"
    p.write_text(DEFAULT_TOML)
    assert load_config(p) == StudyConfig()
    p.write_text("n_eval = [1")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_config(p)
    with pytest.raises(FileNotFoundError):
        load_config(tmp_path / "missing.toml")


def test_ray_backend_gives_the_same_per_item_results(tiny_random_dirs, reference_run, tmp_path):
    pytest.importorskip("ray")
    ref_out, _ = reference_run
    cfg = small_config(tiny_random_dirs["qwen3_vl"], run={"shard_size": 2, "batch_size": 16, "backend": "ray", "ray_workers": 2})
    run_study(cfg, tmp_path / "ray", progress=False, report=False)
    import ray

    ray.shutdown()
    assert_same_outcomes(outcomes(tmp_path / "ray"), outcomes(ref_out))  # each replica has its own memo


def test_export_writes_every_table(reference_run, tmp_path):
    from vheads.study._export import export_run, export_tables

    out, _ = reference_run
    paths = export_run(out, "csv", tmp_path / "x")
    import sqlite3

    with sqlite3.connect(out / "results.sqlite") as db:  # every results table the run stored, read off the file itself
        stored = {n.removeprefix("coded_") for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    stored -= {"names", "meta", "units", "item_scores", "strip_attention"}  # bookkeeping, the figures' per-item vectors
    assert {p.stem for p in paths} == stored and set(export_tables()) >= stored
    assert "kind_necessity" in stored  # a table a stage registers (vheads.store.register_table)
    lines = (tmp_path / "x" / "outcomes.csv").read_text().splitlines()
    assert len(lines) == 1 + len(outcomes(out))


def _toml(d: dict) -> str:
    """A study config dict as TOML (the value types a config holds)."""
    top = [f"{k} = {json.dumps(v)}" for k, v in d.items() if not isinstance(v, dict)]
    tables = [f"[{k}]\n" + "\n".join(f"{kk} = {json.dumps(vv)}" for kk, vv in v.items()) for k, v in d.items() if isinstance(v, dict)]
    return "\n".join(top + tables) + "\n"


def test_a_second_run_on_the_folder_is_refused_and_a_kill_during_the_report_resumes(tiny_random_dirs, reference_run, tmp_path):
    """Two runs on one folder: the second is refused at once (exit 2, one line naming the
    holder) and changes nothing. Then kill -9 during the first run's report: a rerun
    computes no unit again, rebuilds the whole report and leaves no partial file."""
    from PIL import Image
    from typer.testing import CliRunner

    from vheads.cli import app

    ref_out, _ = reference_run
    cfg = tmp_path / "c.toml"
    d = small_config(tiny_random_dirs["qwen3_vl"]).to_dict()
    d["run"] = {k: v for k, v in d["run"].items() if k != "ray_address"}
    d["controls_h"] = 0  # fixed R = 3, as the reference run draws it (a file's h = 10 above R = 3 is refused)
    cfg.write_text(_toml(d))
    out = tmp_path / "shared"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src"), "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen([sys.executable, "-m", "vheads.cli", "study", str(cfg), "--out", str(out), "--quiet"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env)
    log = out / "units.log"
    deadline = time.time() + 300
    while time.time() < deadline and not (log.exists() and "start" in log.read_text()):
        time.sleep(0.05)
    second = CliRunner().invoke(app, ["study", str(cfg), "--out", str(out), "--quiet"])
    assert second.exit_code == 2, second.output
    err = [l for l in second.stderr.splitlines() if l.strip()]
    assert len(err) == 1 and "in use by another vheads study" in err[0] and f"process {first.pid}" in err[0], second.stderr
    while time.time() < deadline and "start report" not in log.read_text():
        time.sleep(0.02)
    time.sleep(random.Random(os.getpid()).uniform(0, 0.5))  # a random moment in the report
    assert first.poll() is None, "the first run finished before it could be killed during its report"
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    done_before = {l.split()[1] for l in log.read_text().splitlines() if l.startswith("done")}
    n_lines = len(log.read_text().splitlines())

    again = CliRunner().invoke(app, ["study", str(cfg), "--out", str(out), "--quiet"])
    assert again.exit_code == 0, again.output
    assert "(0 work units computed this run)" in again.stdout
    assert not {l.split()[1] for l in log.read_text().splitlines()[n_lines:] if l.startswith("start ") and "report" not in l} & done_before
    assert outcomes(out) == outcomes(ref_out)
    assert (out / "report.html").read_text().rstrip().endswith("</html>")
    files = [p for p in out.rglob("*") if p.is_file()]
    assert not [p for p in files if p.name.endswith(".tmp") or p.stat().st_size == 0]
    for p in (out / "figures").glob("*.png"):
        with Image.open(p) as im:
            im.load()


def test_cross_item_batching_on_or_off_stores_the_same_outcomes(tiny_random_dirs, reference_run, tmp_path):
    """The reference run batches across items (the default); the same study with
    ``run.cross_item = false`` (one item per forward) stores the same head-sets and
    outcomes (same keys; values equal up to float rounding of differently shaped batches)."""
    ref_out, _ = reference_run
    cfg = small_config(tiny_random_dirs["qwen3_vl"], run={"shard_size": 2, "batch_size": 16, "cross_item": False})
    run_study(cfg, tmp_path / "off", progress=False, report=False)
    on, off = outcomes(ref_out), outcomes(tmp_path / "off")
    assert [r[:4] for r in on] == [r[:4] for r in off] and len(on) > 0
    assert max(abs(a[4] - b[4]) for a, b in zip(on, off)) <= 1e-6
    heads = "SELECT setting, headset_id, heads FROM headsets ORDER BY 1, 2"
    s_on, s_off = Store(ref_out), Store(tmp_path / "off")
    try:
        assert s_on.query(heads) == s_off.query(heads)
    finally:
        s_on.close()
        s_off.close()


def test_reworded_questions_reach_the_study_and_its_report(tiny_random_dirs, reference_run, tmp_path):
    """A study config's [templates] are the questions its items ask: the strips it stores
    carry them, the discovery scores move with them, and the report lists them."""
    ordinal = "tell me what is in [panel {k}] please ?"
    cfg = small_config(tiny_random_dirs["qwen3_vl"], templates={"ordinal": ordinal}, tests=["ncs"], row_groups=["all"],
                       controls={"layer-matched": 2}, beta_sweep=[], k_sweep=[], algebra_controls=0)
    assert cfg.science_hash() != small_config(tiny_random_dirs["qwen3_vl"]).science_hash()
    # the model's default written out is the default (a model other than the built-in tiny one: the natural set)
    assert small_config(tiny_random_dirs["qwen3_vl"], templates={"ordinal": NATURAL_TEMPLATES.ordinal}).science_hash() \
        == small_config(tiny_random_dirs["qwen3_vl"]).science_hash()
    run_study(cfg, tmp_path, progress=False, report=True)
    metas = [json.loads(p.read_text()) for p in (tmp_path / "strips").glob("*.json")]
    assert metas
    for m in metas:
        k = m["target"].removeprefix("panel")
        assert m["question"] == f"tell me what is in panel {k} please ?"

    def scores(run_dir):
        s = Store(run_dir)
        try:
            return dict(s.query("SELECT setting, scores FROM discovery"))
        finally:
            s.close()

    ref, new = scores(reference_run[0]), scores(tmp_path)
    assert set(new) <= set(ref) and all(new[sid] != ref[sid] for sid in new)
    report = (tmp_path / "report.md").read_text()
    assert 'ordinal (changed): "tell me what is in [panel {k}] please ?"' in report
    assert f'cell: "{NATURAL_TEMPLATES.cell}"' in report and "natural set" in report
    # the rendered prompt of one item per kind, image block summarised, with the run's own ordinal wording
    assert "Rendered prompt: strip-ordinal" in report and "tell me what is in panel" in report
    assert "image_pad\\|>×" in report  # (Markdown escapes the pipes)
