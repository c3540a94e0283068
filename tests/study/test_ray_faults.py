"""Ray replicas that die in the middle of a unit: the unit runs again on a new replica, each
unit is yielded (and so stored) once, and the results equal a local run's. The replica is a
stand-in computer whose process really exits (``os._exit``) on its first try of a unit, in
a real local Ray cluster."""

from __future__ import annotations

import logging
import os

import pytest

ray = pytest.importorskip("ray")

from vheads._errors import VheadsError  # noqa: E402
from vheads.study._backends import RayBackend  # noqa: E402


class Doomed:
    """Computes ``unit_id`` -> its square; dies (the actor's process exits) on the first try
    of every unit named in ``cfg['die_on']`` (a marker file per unit says it was tried)."""

    def __init__(self, cfg):
        self.cfg = cfg

    def compute(self, u):
        marker = os.path.join(self.cfg["marks"], u["unit_id"])
        if u["unit_id"] in self.cfg["die_on"] and (self.cfg["always"] or not os.path.exists(marker)):
            open(marker, "w").close()
            os._exit(1)
        return {"unit_id": u["unit_id"], "value": int(u["unit_id"][1:]) ** 2, "pid": os.getpid()}


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _cfg(tmp_path, die_on, always=False):
    return {"run": {"ray_workers": 2}, "marks": str(tmp_path), "die_on": die_on, "always": always}


def test_a_unit_whose_replica_dies_runs_again_once_and_equals_a_local_run(cluster, tmp_path, caplog):
    units = [{"unit_id": f"u{i}"} for i in range(6)]
    backend = RayBackend(_cfg(tmp_path, {"u1", "u4"}), computer=Doomed)
    started = []
    with caplog.at_level(logging.WARNING, logger="vheads"):
        got = list(backend.run(units, on_start=lambda u: started.append(u["unit_id"])))
    backend.close()
    ids = [r["unit_id"] for r in got]
    assert sorted(ids) == sorted(u["unit_id"] for u in units)  # every unit once: none lost, none twice
    assert sorted(started) == sorted([u["unit_id"] for u in units] + ["u1", "u4"])  # the two retried
    local = {r["unit_id"]: r["value"] for r in map(Doomed({"marks": str(tmp_path), "die_on": set(), "always": False}).compute, units)}
    assert {r["unit_id"]: r["value"] for r in got} == local
    assert sum("Ray replica died during unit" in r.getMessage() for r in caplog.records) == 2


def test_a_unit_that_kills_every_replica_is_an_error_naming_it(cluster, tmp_path):
    backend = RayBackend(_cfg(tmp_path, {"u2"}, always=True), computer=Doomed)
    with pytest.raises(VheadsError, match="work unit u2 failed on 3 Ray replicas"):
        list(backend.run([{"unit_id": f"u{i}"} for i in range(4)]))
    backend.close()


@pytest.mark.timeout(120, method="thread")  # a hang ends the session (Ray swallows the signal); the backend before this test waited forever on the replica that cannot start
def test_a_replica_the_cluster_has_no_room_for_holds_no_unit_back(cluster, tmp_path):
    """Three replicas of one CPU each on a cluster of two CPUs: the third never starts, the
    other two run every unit."""
    cfg = _cfg(tmp_path, set())
    cfg["run"]["ray_workers"] = 3
    backend = RayBackend(cfg, computer=Doomed)
    got = list(backend.run([{"unit_id": f"u{i}"} for i in range(5)]))
    assert backend.starting  # the third still waits for room
    backend.close()
    assert sorted(r["unit_id"] for r in got) == [f"u{i}" for i in range(5)]
    assert {r["value"] for r in got} == {i * i for i in range(5)}
    assert len({r["pid"] for r in got}) <= 2


@pytest.mark.timeout(120, method="thread")
def test_work_left_with_no_replica_that_can_start_is_an_error_not_a_wait(cluster, tmp_path, monkeypatch):
    monkeypatch.setattr(RayBackend, "START_TIMEOUT", 3.0)
    hog = ray.remote(num_cpus=2)(Doomed).remote({})  # every CPU of the cluster taken
    ray.get(hog.__ray_ready__.remote(), timeout=60)
    backend = RayBackend(_cfg(tmp_path, set()), computer=Doomed)
    with pytest.raises(VheadsError, match="no Ray replica started within 3 s and none is running, with 2 work unit"):
        list(backend.run([{"unit_id": "u0"}, {"unit_id": "u1"}]))
    backend.close()
    ray.kill(hog)
