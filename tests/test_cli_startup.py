"""The CLI answers at once: ``vheads --help``, a command's ``--help``, a mistyped flag and
``vheads models`` load neither torch nor transformers (checked in ``sys.modules`` of a
fresh interpreter); ``vheads models`` prints the shipped copy of the adapter registry,
which must equal the registry itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: run the CLI in a fresh interpreter, then report which heavy libraries it loaded
DRIVER = """
import json, sys
from vheads.cli import app
code = 0
try:
    app(sys.argv[1:], prog_name="vheads")
except SystemExit as e:
    code = e.code
heavy = [m for m in ("torch", "transformers") if m in sys.modules]
print("LOADED=" + json.dumps(heavy), file=sys.stderr)
sys.exit(code)
"""


def run_cli(args: list[str], cwd: Path) -> tuple[int, str, str, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "COLUMNS": "200"}
    r = subprocess.run([sys.executable, "-c", DRIVER, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    lines = r.stderr.splitlines()
    assert lines and lines[-1].startswith("LOADED="), r.stderr[-3000:]
    return r.returncode, r.stdout, "\n".join(lines[:-1]), json.loads(lines[-1][len("LOADED="):])


@pytest.mark.parametrize("args", [
    ["--help"], ["study", "--help"], ["evaluate", "--help"], ["discover", "--help"], ["overlap", "--help"],
    ["report", "--help"], ["causal-map", "--help"], ["tiny", "--help"], ["tiny", "eval", "--help"], ["data", "preview", "--help"],
])
def test_help_loads_neither_torch_nor_transformers(args, tmp_path):
    code, out, err, loaded = run_cli(args, tmp_path)
    assert code == 0, err
    assert "Usage:" in out
    assert loaded == [], f"`vheads {' '.join(args)}` imported {loaded}"


@pytest.mark.parametrize("args, says", [
    (["evaluate", "--no-such-flag"], "--no-such-flag"),
    (["discover", "--n", "many"], "Invalid value for '--n'"),
    (["study", "--quite"], "--quite"),
    (["no-such-command"], "no-such-command"),
    (["report", "not-a-run"], "results.sqlite"),
    (["report", "not-a-run", "--metric", "accuracy"], "--metric: unknown metric 'accuracy'"),
])
def test_a_usage_error_loads_neither_torch_nor_transformers(args, says, tmp_path):
    code, out, err, loaded = run_cli(args, tmp_path)
    assert code == 2
    assert says in err
    assert loaded == [], f"`vheads {' '.join(args)}` imported {loaded}"


def test_models_prints_the_registry_without_torch(tmp_path):
    code, out, err, loaded = run_cli(["models", "--json"], tmp_path)
    assert code == 0, err
    assert loaded == []
    from vheads.models import ADAPTERS, describe_adapters

    rows = json.loads(out)
    assert rows == describe_adapters(), (
        "src/vheads/models/adapters.json is out of date; rewrite it with\n"
        "python -c \"import json, vheads.models as m; open('src/vheads/models/adapters.json', 'w')"
        ".write(json.dumps(m.describe_adapters(), indent=1) + '\\n')\"")
    assert sorted(t for r in rows for t in r["model_types"]) == sorted(ADAPTERS)


def test_python_dash_m_vheads_is_the_command(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    r = subprocess.run([sys.executable, "-m", "vheads", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Usage: vheads" in r.stdout, r.stderr


@pytest.mark.parametrize("args, config, says", [
    (["study", "bad.toml"], "n_eval = 1\n", "config key 'n_eval'"),
    (["study", "bad.toml"], "no_such_key = 3\n", "unknown config key 'no_such_key'"),
    (["study", "bad.toml"], 'tests = ["ncs", "ncs"]\nrow_groups = ["nowhere"]\n', "config key 'row_groups'"),
    (["study", "bad.toml"], 'metric = "accuracy"\n', "config key 'metric'"),
    (["study", "bad.toml"], "tests = []\n", "config key 'tests'"),  # after the score points' check, which reads the score space
    (["study", "bad.toml"], 'scores = ["nope"]\n', "config key 'scores[0]'"),
    (["study", "bad.toml"], "[controls]\nlayer-matched = 1000000\n", "config key 'controls.layer-matched'"),
    (["doctor", "--config", "bad.toml"], 'sources = ["nowhere"]\n', "config key 'sources'"),
    (["evaluate", "--headset", "h.json", "--test", "bogus"], None, "unknown test 'bogus'"),
    (["evaluate", "--headset", "h.json", "--rows", "nowhere"], None, "unknown row group 'nowhere'"),
    (["evaluate", "--headset", "h.json", "--controls", "layer-matched:0"], None, "layer-matched"),
    (["evaluate", "--headset", "h.json"], None, "h.json does not exist"),
    (["discover", "--source", "nowhere"], None, "unknown attention source 'nowhere'"),
    (["discover", "--query", "nowhere"], None, "unknown query type 'nowhere'"),
    (["audit", "--n", "0"], None, "--n"),
    (["overlap", "h.json"], None, "h.json does not exist"),
    (["compare", "one-run"], None, "at least two run folders"),
    (["compare", "a", "b"], None, "no results store"),
])
def test_a_bad_config_or_argument_is_refused_before_torch_loads(args, config, says, tmp_path):
    """Config and argument checks run before torch is imported: one line, exit 2, and
    neither torch nor transformers in ``sys.modules`` (the constants they check against
    live in torch-free modules; the device check, which needs torch, runs last)."""
    if config is not None:
        (tmp_path / "bad.toml").write_text(config)
    code, out, err, loaded = run_cli(args, tmp_path)
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and says in err, err
    assert loaded == [], f"`vheads {' '.join(args)}` imported {loaded} before refusing"
    assert not (tmp_path / "runs").exists() and not (tmp_path / "headsets").exists()  # nothing written
