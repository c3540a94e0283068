"""``--quiet`` on the commands that compute (issue 35 point 10): each, run in a fresh
interpreter on the built-in tiny model, leaves stderr empty (no vheads progress bar, no
transformers "Loading weights" bar); without ``--quiet`` its progress bar is there, so the
check can fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ENV = {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def run_vheads(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "vheads", *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


@pytest.fixture(scope="module")
def tiny_model():
    from vheads.models import tiny_model_path

    try:
        tiny_model_path()
    except FileNotFoundError:
        pytest.skip("the built-in tiny model is not built")


def test_causal_map_quiet_prints_nothing_on_stderr(tiny_model, tmp_path):
    args = ("causal-map", "--test", "text", "--n", "2", "--no-layers", "--out")
    loud = run_vheads(tmp_path, *args, "loud")
    assert "%" in loud.stderr  # its progress bar
    quiet = run_vheads(tmp_path, *args, "quiet", "--quiet")
    assert quiet.stderr == "" and "causal map:" in quiet.stdout
    assert "Loading weights" not in loud.stderr  # the weight-loading bar is never printed
