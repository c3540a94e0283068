"""SIGINT / SIGTERM to a running study: the unit in flight is dropped, every finished unit
stays committed, the store is intact, one line says how to resume, and rerunning resumes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from tests.hardening.clitools import SRC

CONFIG = """
corpora = ["comics"]
queries = ["ordinal", "referring"]
sources = ["last"]
n_discovery = 2
n_eval = 2
splits = 2
tests = ["cers"]
beta_sweep = []
k_sweep = []
algebra_controls = 0
row_group_controls = []
controls = {layer-matched = 2}
"""


def _study(cfg, out, model):
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "vheads.cli", "study", str(cfg), "--out", str(out), "--model", str(model), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.slow  # a study run twice (interrupted, then resumed): run with VHEADS_SLOW=1
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_driver_leaves_a_consistent_store_and_says_how_to_resume(tiny_random_dirs, tmp_path, sig):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    out = tmp_path / "run"
    proc = _study(cfg, out, tiny_random_dirs["qwen3_vl"])
    log = out / "units.log"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if log.is_file() and "done " in log.read_text():
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the study ended before a unit was done: nothing to interrupt"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 128 + sig, err
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip() and not ln.startswith("Loading weights")]  # transformers' bar
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith(f"error: interrupted ({sig.name})") and "rerun the same command to resume" in lines[0]
    with sqlite3.connect(out / "results.sqlite") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        done = {u for (u,) in db.execute("SELECT unit_id FROM units")}
    logged = {ln.split(" ", 1)[1] for ln in log.read_text().splitlines() if ln.startswith("done ")}
    assert logged and logged <= done  # every unit logged done is committed (driver stages commit without a log line)
    before = len(log.read_text().splitlines())
    again = _study(cfg, out, tiny_random_dirs["qwen3_vl"])  # the lock was released: the rerun resumes
    _, se = again.communicate(timeout=600)
    assert again.returncode == 0, se
    started = {ln.split(" ", 1)[1] for ln in log.read_text().splitlines()[before:] if ln.startswith("start ")}
    assert started and not started & done  # no committed unit computed again
    assert (out / "report.html").is_file()
