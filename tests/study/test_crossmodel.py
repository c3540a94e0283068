"""Several models in one study: config, store scoping, per-model controls, the cross-model
tables, ``vheads compare``, resume after kill -9 and the Ray backend."""

import json
import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from vheads._errors import VheadsError
from vheads.study import Store, StudyConfig, config_from_dict, run_study
from tests.study.test_study import assert_same_outcomes

REPO = Path(__file__).resolve().parents[2]


def multi_config(dirs: dict[str, str], **over) -> dict:
    """A very small study over the models ``dirs`` (name -> model id or folder)."""
    d = {"models": [{"name": n, "model": str(m)} for n, m in dirs.items()], "corpora": ["comics"], "queries": ["ordinal"],
         "sources": ["last", "qspan"], "n_discovery": 4, "n_eval": 2, "splits": 4, "tests": ["cers", "ncs"],
         "row_groups": ["all"], "controls": {"layer-matched": 3}, "beta_sweep": [], "k_sweep": [], "algebra_controls": 0,
         "scores": [], "run": {"shard_size": 4, "batch_size": 16}}  # score points: tests/study/test_scores.py
    d.update(over)
    return d


def single_config(d: dict, model: str) -> dict:
    """The single-model study of one model of the multi-model config ``d``."""
    return {**{k: v for k, v in d.items() if k != "models"}, "model": model}


def rows(run_dir, sql, *args):
    with sqlite3.connect(Path(run_dir) / "results.sqlite") as db:
        return db.execute(sql, args).fetchall()


# ---- config ---------------------------------------------------------------------------------


@pytest.mark.parametrize("models,match", [
    ([{"name": "a", "model": "tiny"}, {"name": "a", "model": "tiny"}], "the name 'a' is used twice"),
    ([{"name": "../up", "model": "tiny"}], r"config key 'models\[0\].name' must be a plain name"),
    ([{"name": "a"}], r"config key 'models\[0\]': needs 'model'"),
    ([{"name": "a", "model": "tiny", "colour": "red"}], r"unknown config key 'models\[0\].colour'"),
    ([{"name": "a", "model": "tiny", "dtype": "int3"}], r"config key 'models\[0\].dtype': unknown dtype 'int3'"),
    ([{"name": "a", "model": "tiny", "device": "tpu"}], r"device.*\(in models\[0\], 'a'\)"),
    (["tiny"], r"config key 'models\[0\]': expected a table"),
    ([{"name": "a", "model": "tiny"}, {"name": "b", "model": "tiny", "quantization": "4bit"}],
     r"config key 'quantization'.*\(in models\[1\], 'b'\)"),
    ([{"name": "a", "model": "tiny", "trust_remote_code": "yes"}], r"config key 'models\[0\].trust_remote_code': expected bool"),
    ([{"name": "a", "model": "tiny"}, {"name": "b", "model": "tiny", "device": "cpu"}],
     r"config key 'models': models\[1\] \('b'\) loads model 'tiny' exactly as 'a'"),
])
def test_bad_models_entries_are_one_error_naming_the_entry(models, match):
    with pytest.raises(VheadsError, match=match):
        config_from_dict({"models": models})


def test_model_and_models_together_are_refused():
    with pytest.raises(VheadsError, match="'models' is set too"):
        config_from_dict({"model": "/some/model", "models": [{"name": "a", "model": "tiny"}]})


def test_single_model_config_keeps_its_hash():
    """``models`` left empty is neither in the stored config nor in the science hash:
    existing runs resume."""
    import hashlib

    cfg = StudyConfig()
    d = cfg.to_dict()
    assert "models" not in d
    d.pop("run")
    for key in ("eval_source", "eval_classes", "eval_exclude", "eval_groups", "eval_cell", "eval_resize", "ood_tasks",
                "n_ood", "ood_controls", "device_map", "quantization", "trust_remote_code", "templates",
                "scores", "score_on", "ablation", "causal_tests",  # the score points' defaults (issue 24)
                "causal_subsets", "causal_method",  # the regression map's keys (issue 33), off by default
                "controls_batch",  # at its default (controls_h = 10 is not: a fixed-R run has h = 0)
                "scope", "items", "k_sweep_tests", "test_controls",  # the scoped protocol (issue 43), unset
                "metric"):  # metric: which stored metric the report leads with, never in the hash
        d.pop(key)
    assert cfg.science_hash() == hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def test_duplicate_names_exit_2_with_one_line_before_any_file(tmp_path):
    from typer.testing import CliRunner

    from vheads.cli import app

    cfg = tmp_path / "c.toml"
    cfg.write_text('models = [{ name = "m", model = "tiny" }, { name = "m", model = "tiny" }]\n')
    res = CliRunner().invoke(app, ["study", str(cfg), "--out", str(tmp_path / "run"), "--quiet"])
    assert res.exit_code == 2
    err = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(err) == 1 and "'m' is used twice" in err[0]
    assert not (tmp_path / "run").exists()


def test_a_model_that_cannot_load_is_named_before_any_work(tmp_path):
    from transformers import Blip2Config

    Blip2Config().save_pretrained(tmp_path / "blip")  # a VLM of an unsupported family
    for bad, match in ((tmp_path / "nope", r"models\[1\]' \('second'\): cannot load"),
                       (tmp_path / "blip", r"models\[1\]' \('second'\).*not a supported VLM family")):
        cfg = config_from_dict(multi_config({"first": "tiny", "second": bad}))
        with pytest.raises(VheadsError, match=match):
            run_study(cfg, tmp_path / "run", progress=False)
        assert not (tmp_path / "run").exists()


# ---- the store ------------------------------------------------------------------------------


def test_store_views_show_one_models_rows(tmp_path):
    """Rows written through a model's view carry its name; each view reads its own rows only,
    with the single-model columns (``SELECT *`` unchanged)."""
    for model, v in (("", 0.5), ("a", 1.5), ("b", 2.5)):
        st = Store(tmp_path, model=model)
        st.commit_unit("u1", "eval", 0.0, {"outcomes": [("u1", "s", "cers", "S", "i0", v)]})
        st.set_meta(model_id=f"id-{model}")
        st.close()
    assert sorted(rows(tmp_path, "SELECT model, value FROM outcomes")) == [("", 0.5), ("a", 1.5), ("b", 2.5)]
    for model, v in (("", 0.5), ("a", 1.5), ("b", 2.5)):
        st = Store(tmp_path, readonly=True, model=model)
        # the single-model columns; the metric columns (logprob, logit_diff) stay NULL when not written
        assert st.query("SELECT * FROM outcomes") == [("u1", "s", "cers", "S", "i0", v, None, None)]
        assert st.done_units() == {"u1"} and st.get_meta("model_id") == f"id-{model}"
        st.close()
    assert Store(tmp_path, readonly=True).models() == ["", "a", "b"]


def test_a_schema_2_store_is_read_and_resumed(tmp_path):
    from vheads.store import SCHEMA_V2

    with sqlite3.connect(tmp_path / "results.sqlite") as db:
        db.executescript(SCHEMA_V2)
        db.execute("INSERT INTO units VALUES ('u1', 'eval', 0, 0)")
    st = Store(tmp_path)
    st.commit_unit("u2", "eval", 0.0, {"audit": [("oracle", 4, 0.9, 0.9, 1.0, 1)]})
    assert st.done_units() == {"u1", "u2"} and st.query("SELECT * FROM audit") == [("oracle", 4, 0.9, 0.9, 1.0, 1)]
    st.close()
    with pytest.raises(VheadsError, match="single-model"):
        Store(tmp_path, model="a")


# ---- per-model controls ---------------------------------------------------------------------


def _layer_counts(heads):
    return Counter(l for l, _ in heads)


def _layer_matched_compared(S, n_heads, R):
    """How many layer-matched head-sets the study compares S with (issue 35): the whole pool
    when it holds at most 2R distinct sets, else R distinct draws. The pool counted by hand
    (exchangeable layer-matched, issue 41): in each layer of S, |S ∩ layer| of *all* the
    layer's heads, every such head-set but S itself."""
    pool = 1
    for layer, c in _layer_counts(S).items():
        pool *= math.comb(n_heads, c)
    pool -= 1
    return pool if pool <= 2 * R else R


def test_per_model_control_draws_keep_each_models_layer_counts(tmp_path):
    """Two models of different depths in one store: each model's layer-matched draws have its
    own S's per-layer counts, lie on its own grid and are not its S (overlap with S is allowed:
    the exchangeable draw, issue 41)."""
    from vheads.study._runner import _headset_stage

    cfg = config_from_dict(multi_config({"deep": "tiny", "shallow": "/m/shallow"}, controls={"layer-matched": 25}))
    shapes = {"deep": (6, 4), "shallow": (2, 8)}
    S = {"deep": [[0, 1], [0, 2], [3, 0], [5, 3]], "shallow": [[0, 0], [1, 1], [1, 5], [1, 7]]}
    for name, (L, H) in shapes.items():
        st = Store(tmp_path, model=name)
        scores = np.zeros((L, H))
        st.commit_unit("discovery", "discovery", 0.0, {"discovery": [
            ("cm-ord-last", "ordinal", "last", "comics", 4, 4, json.dumps(scores.tolist()), json.dumps(S[name]))]})
        _headset_stage(st, cfg, (L, H))
        st.close()
    for name, (L, H) in shapes.items():
        st = Store(tmp_path, readonly=True, model=name)
        draws = [json.loads(h) for (h,) in st.query("SELECT heads FROM headsets WHERE control='layer-matched' "
                                                     "AND setting='cm-ord-last'")]
        st.close()
        assert len(draws) == _layer_matched_compared(S[name], H, 25) and len({json.dumps(d) for d in draws}) == len(draws)
        for d in draws:
            assert _layer_counts(d) == _layer_counts(S[name])
            assert all(0 <= l < L and 0 <= h < H for l, h in d)
            assert sorted(map(tuple, d)) != sorted(map(tuple, S[name]))


# ---- pointing-suite t-test ------------------------------------------------------------------


def test_pointing_suite_cers_is_t_tested_against_zero_as_scipy(tmp_path):
    from vheads.report._crossmodel import load_model_run, one_sample_t, pointing_per_setting_table, pointing_table

    rng = np.random.default_rng(3)
    values = {("a", "S"): rng.normal(0.05, 0.1, 7), ("a", "R"): rng.normal(0.0, 0.1, 7), ("b", "S"): rng.normal(0.2, 0.05, 5)}
    for model in ("a", "b"):
        st = Store(tmp_path, model=model)
        st.set_meta(config=json.dumps({}), n_layers="2", n_heads="2")
        ood = []
        for (m, role), x in values.items():
            if m == model:
                hid = "S" if role == "S" else "layer-matched#0"
                task_of = ["t1" if i % 2 else "t2" for i in range(len(x))]
                ood += [(f"u{i}", task_of[i], "cm-ord-last", "cers", hid, f"it{i}", float(v)) for i, v in enumerate(x)]
        st.commit_unit("ood", "ood-eval", 0.0, {"ood_outcomes": ood,
                                                "discovery": [("cm-ord-last", "ordinal", "last", "comics", 4, 1, "[]", "[]")]})
        st.close()
    table = pointing_table([load_model_run(tmp_path, m) for m in ("a", "b")])
    per_setting = pointing_per_setting_table([load_model_run(tmp_path, m) for m in ("a", "b")], "cers")
    assert per_setting.rows == [["cm-ord-last", f"{values[('a', 'S')].mean():.3f} ({values[('a', 'R')].mean():.3f})",
                                 f"{values[('b', 'S')].mean():.3f} (–)"]]
    got = {(r[0], r[1]): r for r in table.rows}
    for (m, role), x in values.items():
        label = "cm-ord-last" if role == "S" else "cm-ord-last · layer-matched"
        ref = sps.ttest_1samp(x, 0.0)
        row = got[(m, label)]
        assert int(row[3]) == len(x)
        assert float(row[5]) == pytest.approx(ref.statistic, abs=0.006)
        assert float(row[6]) == pytest.approx(ref.pvalue, rel=0.05, abs=5e-4)
        assert row[4].startswith("**") == (ref.pvalue < 0.05)
        t, p = one_sample_t(x)
        assert t == pytest.approx(ref.statistic, rel=1e-12) and p == pytest.approx(ref.pvalue, rel=1e-9)


# ---- compare: refusals ----------------------------------------------------------------------


def _finished_run(run_dir: Path, **over) -> Path:
    """A store that records a finished study of ``over`` (no model work)."""
    cfg = config_from_dict({"corpora": ["comics"], "queries": ["ordinal"], "sources": ["last"], **over})
    st = Store(run_dir)
    st.set_meta(config=json.dumps(cfg.to_dict()), model_id=cfg.model)
    st.commit_unit("audit", "audit", 0.0, {})
    st.close()
    return run_dir


def test_compare_refuses_runs_it_cannot_put_side_by_side(tmp_path):
    from typer.testing import CliRunner

    from vheads.cli import app

    a = _finished_run(tmp_path / "a", n_eval=4)
    b = _finished_run(tmp_path / "b", n_eval=6, dtype="bfloat16")
    same = _finished_run(tmp_path / "same", n_eval=4, dtype="bfloat16")
    unfinished = tmp_path / "unfinished"
    st = Store(unfinished)
    st.set_meta(config=json.dumps(config_from_dict({}).to_dict()))
    st.close()
    multi = tmp_path / "multi"
    st = Store(multi)
    st.set_meta(config="{}", models=json.dumps([{"name": "x"}]))
    st.close()
    cases = [([a, b], "differ in config key 'n_eval' (4 vs 6)"), ([a, tmp_path / "missing"], "no results store"),
             ([a, unfinished], "is not finished"), ([a, multi], "is a multi-model run"), ([a], "at least two"),
             ([a, same], "both named 'tiny'")]
    for runs, match in cases:
        res = CliRunner().invoke(app, ["compare", *map(str, runs), "--out", str(tmp_path / "cmp")])
        err = [line for line in res.stderr.splitlines() if line.strip()]
        assert res.exit_code == 2 and len(err) == 1 and match in err[0], (runs, res.stderr)
        assert not (tmp_path / "cmp").exists()
    # how a model is loaded may differ between the runs (a large model in 4-bit, another not)
    remote = _finished_run(tmp_path / "remote", n_eval=4, model="/elsewhere/other", trust_remote_code=True)
    res = CliRunner().invoke(app, ["compare", str(a), str(remote), "--out", str(tmp_path / "cmp2")])
    assert "differ in config key" not in (res.stdout or "") + (res.stderr or ""), res.stderr


# ---- end to end: two models of different depths (fast) --------------------------------------


def test_two_models_of_different_depths_in_one_run(tiny_random_dirs, tmp_path, monkeypatch):
    """The built-in tiny model (4 layers) and a tiny qwen2_vl (2 layers) in one run folder:
    each model loaded once, its rows in its scope, its own k and shape, and layer-matched
    draws with its S's per-layer counts on its own grid."""
    import vheads.models

    loads = []
    real_load = vheads.models.load_model
    monkeypatch.setattr(vheads.models, "load_model", lambda model, *a, **kw: loads.append(model) or real_load(model, *a, **kw))
    # loads are counted in this process: the tiny model's replica here, not in worker processes
    d = multi_config({"tiny": "tiny", "qwen2_vl": tiny_random_dirs["qwen2_vl"]}, sources=["qspan"], tests=["cers"],
                     controls={"layer-matched": 2}, run={"shard_size": 4, "batch_size": 16, "workers": 1})
    res = run_study(config_from_dict(d), tmp_path / "run", progress=False, report=False)
    assert res.units_computed > 3 and loads == ["tiny", str(tiny_random_dirs["qwen2_vl"])]
    assert {m for (m,) in rows(tmp_path / "run", "SELECT DISTINCT model FROM meta")} == {"", "tiny", "qwen2_vl"}
    assert rows(tmp_path / "run", "SELECT count(*) FROM outcomes WHERE model=''") == [(0,)]
    shapes = {}
    for name in ("tiny", "qwen2_vl"):
        st = Store(tmp_path / "run", readonly=True, model=name)
        L, H = int(st.get_meta("n_layers")), int(st.get_meta("n_heads"))
        shapes[name] = L
        (s_heads,), = st.query("SELECT heads FROM headsets WHERE control='S' AND setting='cm-ord-qsp'")
        S = json.loads(s_heads)
        draws = [json.loads(h) for (h,) in st.query("SELECT heads FROM headsets WHERE control='layer-matched' "
                                                     "AND setting='cm-ord-qsp'")]
        assert json.loads(st.get_meta("config"))["model"] == str(dict((m["name"], m["model"]) for m in d["models"])[name])
        assert {s for (s,) in st.query("SELECT DISTINCT setting FROM outcomes")} == {"cm-ord-qsp", "causal-ncs"}
        st.close()
        assert len(draws) == _layer_matched_compared(S, H, 2) and len({json.dumps(x) for x in draws}) == len(draws)
        for dr in draws:
            assert _layer_counts(dr) == _layer_counts(S) and all(0 <= l < L and 0 <= h < H for l, h in dr)
    assert shapes["tiny"] != shapes["qwen2_vl"]
    again = run_study(config_from_dict(d), tmp_path / "run", progress=False, report=False)
    assert again.units_computed == 0


# ---- end to end: three models (slow) --------------------------------------------------------

THREE = ("tiny", "qwen2_vl", "gemma3")


@pytest.fixture(scope="module")
def three(tiny_random_dirs, tmp_path_factory):
    """A three-model run with the pointing suite and its report."""
    from tests.data.benchmarks import make_mcq_jsonl

    root = tmp_path_factory.mktemp("three")
    spec, _ = make_mcq_jsonl(root / "mcq")
    dirs = {n: "tiny" if n == "tiny" else str(tiny_random_dirs[n]) for n in THREE}
    d = multi_config(dirs, ood_tasks=[f"mcq:{spec}"], n_ood=2, eval_cell=32)
    res = run_study(config_from_dict(d), root / "run", progress=False, report=True)
    return d, root / "run", res


def _all_outcomes(run_dir):
    return (rows(run_dir, "SELECT model, setting, test, headset_id, item_id, value FROM outcomes ORDER BY 1, 2, 3, 4, 5"),
            rows(run_dir, "SELECT model, task, setting, test, headset_id, item_id, value FROM ood_outcomes ORDER BY 1, 2, 3, 4, 5, 6"),
            rows(run_dir, "SELECT model, setting, headset_id, heads FROM headsets ORDER BY 1, 2, 3"))


def _table_rows(blocks):
    from vheads.report._doc import Table

    return [(b.title, b.columns, b.rows) for b in blocks if isinstance(b, Table)]


@pytest.mark.slow
def test_three_models_end_to_end_with_the_cross_model_section_from_the_store(three):
    from vheads.report._crossmodel import crossmodel_blocks, load_model_run

    d, run_dir, res = three
    assert res.report == run_dir / "report.html"
    html = res.report.read_text()
    for title in ("Replication across models", "per setting and model", "Pointing-suite CERS per model", "Fig. 7"):
        assert title in html
    for n in THREE:
        assert (run_dir / "models" / n / "report.html").is_file()
        assert rows(run_dir, "SELECT count(*) FROM outcomes WHERE model=?", n)[0][0] > 0
        assert rows(run_dir, "SELECT count(*) FROM ood_outcomes WHERE model=?", n)[0][0] > 0
    tables = _table_rows(crossmodel_blocks([load_model_run(run_dir, n) for n in THREE]))
    models = next(r for t, _, r in tables if t == "Models")
    for row, n in zip(models, THREE):  # each model's k and head count, as its store says
        L, H = (int(rows(run_dir, "SELECT value FROM meta WHERE model=? AND key=?", n, k)[0][0]) for k in ("n_layers", "n_heads"))
        ks = {k for (k,) in rows(run_dir, "SELECT DISTINCT k FROM discovery WHERE model=?", n)}
        assert row[0] == n and row[3] == str(L * H) and row[4] == ", ".join(map(str, sorted(ks)))
    # Table 19 layout: each cell's S and control mean straight from the outcome rows
    ncs = next(r for t, _, r in tables if t.startswith("NCS (necessity) per setting"))
    for row in ncs:
        for n, cell in zip(THREE, row[1:]):
            s = np.mean([v for (v,) in rows(run_dir, "SELECT value FROM outcomes WHERE model=? AND setting=? AND "
                                                     "test='ncs-all' AND headset_id='S'", n, row[0])])
            means = [m for (_, m) in rows(run_dir, "SELECT headset_id, AVG(value) FROM outcomes WHERE model=? AND setting=? "
                                                   "AND test='ncs-all' AND headset_id LIKE 'layer-matched#%' GROUP BY headset_id", n, row[0])]
            p = (1 + sum(m >= s for m in means)) / (len(means) + 1)
            assert cell == f"{'**' if p == 1 / (len(means) + 1) else ''}{s:.3f}{'**' if p == 1 / (len(means) + 1) else ''} vs. " \
                           f"{np.mean(means):.3f} ({p:.3f})".replace("-0.000", "0.000")


@pytest.mark.slow
def test_kill_9_then_rerun_equals_an_uninterrupted_multi_model_run(three, tmp_path):
    d, ref_dir, _ = three
    out = tmp_path / "killed"
    script = ("import json; from vheads.study import config_from_dict, run_study; "
              f"run_study(config_from_dict(json.loads({json.dumps(json.dumps(d))})), {str(out)!r}, progress=False, report=False)")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src") + os.pathsep + str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env)
    log = out / "units.log"
    deadline = time.time() + 600
    # a random moment after a unit of the second model committed
    while time.time() < deadline and not (log.exists() and "done qwen2_vl/" in log.read_text()):
        time.sleep(0.05)
    time.sleep(random.Random(os.getpid()).uniform(0, 2.0))
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = {line.split()[1] for line in log.read_text().splitlines() if line.startswith("done")}
    n_lines = len(log.read_text().splitlines())
    assert any(u.startswith("tiny/") for u in done_before)
    run_study(config_from_dict(d), out, progress=False, report=False)
    started_after = {line.split()[1] for line in log.read_text().splitlines()[n_lines:] if line.startswith("start")}
    assert not started_after & done_before, "a committed unit was computed again"
    got, ref = _all_outcomes(out), _all_outcomes(ref_dir)
    assert got[2] == ref[2]  # the head-sets
    for a, b in zip(got[:2], ref[:2]):  # the resumed process starts with an empty probe memo: float rounding
        if a or b:
            assert_same_outcomes(a, b)


@pytest.mark.slow
def test_compare_of_three_single_model_runs_equals_the_multi_model_tables(three, tmp_path):
    from typer.testing import CliRunner

    from vheads.cli import app
    from vheads.report._crossmodel import crossmodel_blocks, load_model_run

    d, run_dir, _ = three
    singles = []
    for m in d["models"]:
        out = tmp_path / m["name"]
        run_study(config_from_dict(single_config(d, m["model"])), out, progress=False, report=False)
        singles.append(out)
    res = CliRunner().invoke(app, ["compare", *map(str, singles), "--out", str(tmp_path / "cmp")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "cmp" / "report.html").is_file() and (tmp_path / "cmp" / "figures" / "crossmodel_band.png").is_file()
    from vheads.report._crossmodel import ModelRun

    compared = [load_model_run(p, "", Path(m["model"]).name) for p, m in zip(singles, d["models"])]
    multi = [load_model_run(run_dir, m["name"]) for m in d["models"]]
    assert all(isinstance(r, ModelRun) for r in compared)
    assert _table_rows(crossmodel_blocks(compared)) == _table_rows(crossmodel_blocks(multi))


@pytest.mark.slow
def test_ray_backend_gives_each_model_the_same_rows(three, tiny_random_dirs, tmp_path):
    pytest.importorskip("ray")
    d, ref_dir, _ = three
    two = {**d, "models": d["models"][:2], "run": {"shard_size": 4, "batch_size": 16, "backend": "ray", "ray_workers": 2}}
    run_study(config_from_dict(two), tmp_path / "ray", progress=False, report=False)
    import ray

    ray.shutdown()
    for name in ("tiny", "qwen2_vl"):
        sql = "SELECT setting, test, headset_id, item_id, value FROM outcomes WHERE model=? ORDER BY 1, 2, 3, 4"
        assert rows(tmp_path / "ray", sql, name) == rows(ref_dir, sql, name) != []


def test_model_on_the_command_line_replaces_the_models(tmp_path):
    from vheads.study import load_config

    p = tmp_path / "c.toml"
    p.write_text('models = [{ name = "a", model = "tiny" }, { name = "b", model = "/x" }]\n')
    assert len(load_config(p).models) == 2
    cfg = load_config(p, model="tiny")
    assert cfg.models == [] and cfg.model == "tiny"


def test_example_config_is_valid():
    from vheads.study import load_config
    from vheads.study._config import model_entries

    cfg = load_config(REPO / "configs" / "cross_model_tiny.toml")
    assert [e.name for e in model_entries(cfg)] == ["tiny", "qwen2_vl", "gemma3"]


def test_export_of_a_multi_model_store_names_each_rows_model(tmp_path):
    import csv

    from vheads.study import export_run

    st = Store(tmp_path / "run")
    st.set_meta(models=json.dumps([{"name": "a"}, {"name": "b"}]))
    st.close()
    for model, v in (("a", 1.5), ("b", 2.5)):
        st = Store(tmp_path / "run", model=model)
        st.commit_unit("u1", "eval", 0.0, {"outcomes": [("u1", "s", "cers", "S", "i0", v)]})
        st.close()
    export_run(tmp_path / "run", "csv", tmp_path / "x")
    with open(tmp_path / "x" / "outcomes.csv") as f:
        got = list(csv.reader(f))
    assert got == [["model", "unit_id", "setting", "test", "headset_id", "item_id", "value", "logprob", "logit_diff"],
                   ["a", "u1", "s", "cers", "S", "i0", "1.5", "", ""], ["b", "u1", "s", "cers", "S", "i0", "2.5", "", ""]]


def test_a_model_name_read_from_a_store_never_leaves_the_report_folder(tmp_path):
    from vheads.report import build_report

    st = Store(tmp_path / "run")
    st.set_meta(models=json.dumps([{"name": "../../evil"}]))
    st.close()
    with pytest.raises(VheadsError, match="must be a plain name"):
        build_report(tmp_path / "run")
    assert not (tmp_path / "evil").exists() and not (tmp_path / "run" / "report.html").exists()


def test_each_model_takes_its_own_loading_options_and_falls_back_to_the_top_level_ones():
    from vheads.study._config import model_config, model_entries

    cfg = config_from_dict({"dtype": "bfloat16", "trust_remote_code": True,
                            "models": [{"name": "a", "model": "tiny"},
                                       {"name": "b", "model": "/m/b", "dtype": "float32", "trust_remote_code": False}]})
    a, b = (model_config(cfg, e) for e in model_entries(cfg))
    assert (a.model, a.dtype, a.trust_remote_code) == ("tiny", "bfloat16", True)
    assert (b.model, b.dtype, b.trust_remote_code) == ("/m/b", "float32", False)
