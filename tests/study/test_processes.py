"""Local worker processes ([run] workers, vheads.study._processes): the same stores as one
process, errors and dead workers surfaced in the driver, the auto rule."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from vheads._errors import VheadsError
from vheads.study._processes import ProcessBackend, auto_workers
from vheads.study._units import replica_threads

ROOT = Path(__file__).resolve().parents[2]


class _Square:
    """A stand-in replica: a unit's rows are its number squared, and its process id."""

    def __init__(self, cfg):
        self.cfg = cfg

    def compute(self, unit):
        if unit.get("fail"):
            raise VheadsError(f"unit {unit['unit_id']} asked to fail")
        if unit.get("die"):
            os.kill(os.getpid(), signal.SIGKILL)
        return {"unit_id": unit["unit_id"], "rows": unit["x"] ** 2, "pid": os.getpid()}


CFG = {"model": "tiny", "device": "cpu", "run": {"workers": 2, "torch_threads": 0}}


def test_every_unit_comes_back_once_from_two_processes():
    b = ProcessBackend(CFG, 2, _Square)
    started = []
    try:
        got = list(b.run([{"unit_id": f"u{i}", "x": i} for i in range(12)], on_start=lambda u: started.append(u["unit_id"])))
    finally:
        b.close()
    assert sorted(r["unit_id"] for r in got) == sorted(f"u{i}" for i in range(12))
    assert all(r["rows"] == int(r["unit_id"][1:]) ** 2 for r in got)
    assert sorted(started) == sorted(f"u{i}" for i in range(12))
    assert len({r["pid"] for r in got}) == 2 and os.getpid() not in {r["pid"] for r in got}


def test_an_error_in_a_worker_is_raised_in_the_driver():
    b = ProcessBackend(CFG, 2, _Square)
    with pytest.raises(VheadsError, match="u3 asked to fail"):
        list(b.run([{"unit_id": f"u{i}", "x": i, "fail": i == 3} for i in range(6)]))
    assert not b.procs  # stopped


def test_a_dead_worker_names_its_unit():
    b = ProcessBackend(CFG, 2, _Square)
    with pytest.raises(VheadsError, match="work unit u2: its worker process died"):
        list(b.run([{"unit_id": f"u{i}", "x": i, "die": i == 2} for i in range(4)]))


def test_a_free_worker_takes_the_unit_whose_head_sets_it_has_run():
    b = ProcessBackend(CFG, 2, _Square)
    b.seen = [{("eval", "ncs", (0, 8)): {"[[1, 2]]"}}, {}]
    from vheads.study._processes import _heads, _place

    units = [{"kind": "eval", "test": "ncs", "shard": [0, 8], "headsets": [[[3, 4]]]},
             {"kind": "eval", "test": "ncs", "shard": [0, 8], "headsets": [[[1, 2]]]}]
    queue = [(u, _heads(u), _place(u)) for u in units]
    assert b._pick(0, queue) == 1  # its own head-set
    assert b._pick(1, queue) == 0  # not the one worker 0 has in its memo


@pytest.mark.parametrize("cfg, n", [
    ({"model": "tiny", "device": "cpu", "run": {"workers": 0, "torch_threads": 0}}, min(8, os.cpu_count() or 1)),
    ({"model": "tiny", "device": "cuda", "run": {"workers": 0, "torch_threads": 0}}, 1),
    ({"model": "models/x", "device": "cpu", "run": {"workers": 0, "torch_threads": 0}}, 1),
    ({"model": "tiny", "device": "cpu", "run": {"workers": 0, "torch_threads": 2}}, min(8, os.cpu_count() or 1)),
    ({"model": "models/x", "device": "cpu", "run": {"workers": 3, "torch_threads": 0}}, 3),
])
def test_auto_workers(cfg, n):
    assert auto_workers(cfg) == n


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_the_tiny_model_on_a_cpu_runs_one_thread_a_replica_however_many_workers(workers):
    cores = os.cpu_count() or 1
    tiny = {"model": "tiny", "device": "cpu", "run": {"workers": workers, "torch_threads": 0}}
    assert replica_threads(tiny, workers) == 1
    assert replica_threads({**tiny, "run": {"workers": workers, "torch_threads": 3}}, workers) == 3
    other = {"model": "models/x", "device": "cpu", "run": {"workers": workers, "torch_threads": 0}}
    assert replica_threads(other, workers) == max(1, cores // workers)


def test_a_unit_runs_on_the_replica_threads_and_gives_the_callers_back(monkeypatch):
    """The in-process replica sets torch's threads for a unit and restores the caller's."""
    import torch

    from vheads.study import _units

    seen = []
    monkeypatch.setattr(_units, "unit_computers", lambda: {"probe-threads": lambda c, u: seen.append(torch.get_num_threads()) or []})
    c = _units.UnitComputer(CFG)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        c.compute({"unit_id": "u", "kind": "probe-threads"})
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_two_workers_store_what_one_process_stores(tmp_path):
    """A reduced study on the tiny model with workers = 2 and workers = 1: every stored
    outcome the same (benchmarks/compare_stores.py, |Δ| ≤ 1e-5)."""
    import subprocess

    base = ('corpora = ["comics"]\nqueries = ["ordinal"]\nsources = ["last", "qspan"]\nn_discovery = 8\nscores = []\n'
            'n_eval = 8\ntests = ["cers", "ncs"]\nrow_groups = ["all"]\nbeta_sweep = []\nk_sweep = []\nsplits = 10\n'
            'causal_tests = []\n')
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for w in (1, 2):
        (tmp_path / f"w{w}.toml").write_text(base + f"[run]\nworkers = {w}\n[controls]\nlayer-matched = 20\n")
        r = subprocess.run([sys.executable, "-m", "vheads.cli", "study", str(tmp_path / f"w{w}.toml"), "--out",
                            str(tmp_path / f"r{w}"), "--quiet"], capture_output=True, text=True, env=env, timeout=600)
        assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compare_stores.py"), str(tmp_path / "r1"), str(tmp_path / "r2")],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0 and "stores agree" in r.stdout, r.stdout + r.stderr
