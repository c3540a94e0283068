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


def test_discover_and_evaluate_quiet_print_nothing_on_stderr(tiny_model, tmp_path):
    disc = ("discover", "--corpus", "comics", "--query", "ordinal", "--source", "last", "--n", "2", "--out", "hs", "--quiet")
    r = run_vheads(tmp_path, *disc)
    assert r.stderr == "" and (tmp_path / "hs" / "cm-ord-last.json").is_file()
    ev = ("evaluate", "--headset", "hs/cm-ord-last.json", "--test", "text", "--controls", "layer-matched:2", "--n", "2")
    loud = run_vheads(tmp_path, *ev)
    assert "%" in loud.stderr  # its progress bar
    quiet = run_vheads(tmp_path, *ev, "--quiet")
    assert quiet.stderr == "" and "cm-ord-last" in quiet.stdout


def test_the_discovery_bar_counts_items_once_they_are_scored(monkeypatch):
    """The bar moves by a (corpus, query) group's items after that group's captures ran: never
    ahead of the work (before, the items ran past at hundreds of thousands a second and the
    captures came after)."""
    import numpy as np

    import vheads.discovery._region_mass as sc

    events = []

    class Bar:
        def __init__(self, total, **kw):
            events.append(("total", total))

        def set_postfix_str(self, s):
            pass

        def update(self, n):
            events.append(("update", n))

        def close(self):
            pass

    def masses(engine, items, answers, sources):
        events.append(("captured", len(items)))
        return [{s: np.zeros((1, 1)) for s in sources} for _ in items]

    monkeypatch.setattr(sc, "tqdm", Bar)
    monkeypatch.setattr(sc, "region_masses", masses)
    from types import SimpleNamespace

    items = {(c, "ordinal"): [SimpleNamespace(id=f"{c}{i}") for i in range(n)] for c, n in (("comics", 3), ("photo", 2))}
    sc.score_settings(None, items, sources=("last",), engine=object())
    assert events == [("total", 5), ("captured", 3), ("update", 3), ("captured", 2), ("update", 2)]
