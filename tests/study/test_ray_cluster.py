"""A study on a Ray cluster of several nodes on this machine (``ray.cluster_utils.Cluster``,
one CPU per node, so each node holds one replica), and a replica killed or its node
removed in the middle of a unit: the study finishes, the unit runs again on another
replica, no unit is stored twice, and the exported tables equal a local run's (≤ 1e-5: a
replica's probe memo may serve a row from a differently composed batch).

Every wait has a bound: the cluster's own (``wait_for_nodes``), the fault thread's,
and each test's timeout, which ends the session (``method="thread"``: Ray swallows the
signal) rather than letting CI wait on a hung cluster.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import signal
import threading
import time

import pytest
import torch

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

import vheads.study._runner as runner  # noqa: E402
from vheads.study import config_from_dict, run_study  # noqa: E402
from vheads.study._backends import RayBackend  # noqa: E402
from vheads.study._export import export_run  # noqa: E402
from vheads.study._units import UnitComputer  # noqa: E402

#: a small study: 2 discovery units, 4 evaluation units (2 settings x 2 one-item shards), audit, image mass
CONFIG = {
    "corpora": ["comics"], "queries": ["ordinal", "referring"], "sources": ["last"], "n_discovery": 2, "n_eval": 2, "splits": 2,
    "tests": ["cers"], "beta_sweep": [], "k_sweep": [], "algebra_controls": 0, "row_group_controls": [],
    "controls": {"layer-matched": 2}, "run": {"shard_size": 1, "batch_size": 16, "torch_threads": 1},
}
#: the head notices a dead node within ~1.5 s (default: 15 s)
HEALTH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500, "health_check_failure_threshold": 3}


def _config(model_dir, **run):
    return config_from_dict({**CONFIG, "model": str(model_dir), "run": {**CONFIG["run"], **run}})


@pytest.fixture(scope="module")
def cluster():
    """A head node and one worker node, one CPU each; the driver attached to the head."""
    if ray.is_initialized():
        ray.shutdown()  # another module's local cluster
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False, "_system_config": HEALTH})
    try:
        c.add_node(num_cpus=1)
        c.wait_for_nodes(timeout=120)
        ray.init(address=c.address, log_to_driver=False)
        assert ray.get_runtime_context().get_node_id() == c.head_node.node_id  # a removed node is never the driver's
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def local_run(tiny_random_dirs, tmp_path_factory):
    """The same study on the local backend (this process; its thread count restored after)."""
    out = tmp_path_factory.mktemp("local")
    threads = torch.get_num_threads()
    try:
        run_study(_config(tiny_random_dirs["qwen3_vl"]), out, progress=False, report=False)
    finally:
        torch.set_num_threads(threads)
    return out


def _replica(head: str, stall_dir: str | None):
    """A :class:`UnitComputer` that says on which node and in which process it ran each
    unit. With ``stall_dir``, the first replica off the head node to get an evaluation unit
    writes ``stalled`` (its node, process and unit) there and waits to be killed. Made in a
    function, so Ray ships the class by value."""

    class OnNode(UnitComputer):
        def compute(self, unit):
            node = ray.get_runtime_context().get_node_id()
            if stall_dir and unit["kind"] == "eval" and node != head:
                try:
                    os.close(os.open(os.path.join(stall_dir, "claim"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    pass
                else:
                    tmp = os.path.join(stall_dir, "stalled.tmp")
                    with open(tmp, "w") as f:
                        json.dump({"node": node, "pid": os.getpid(), "unit": unit["unit_id"]}, f)
                    os.replace(tmp, os.path.join(stall_dir, "stalled"))
                    time.sleep(240)  # killed long before
            return {**UnitComputer.compute(self, unit), "node": node, "pid": os.getpid()}

    return OnNode


def _watched_backends(monkeypatch, head: str, stall_dir: str | None = None) -> list[tuple[str, str]]:
    """The study's backends are Ray backends of :func:`_replica` replicas, started before
    they take a unit; returns the (unit id, node, pid) of every unit they yield, in order."""
    seen: list[tuple[str, str, int]] = []

    class Watched(RayBackend):
        def __init__(self, cfg, computer):
            super().__init__(cfg, computer)
            ray.get([a.__ray_ready__.remote() for a in self.actors], timeout=120)  # every replica up before the first unit, so each takes some

        def run(self, units, on_start=None):
            for res in super().run(units, on_start):
                seen.append((res["unit_id"], res.pop("node"), res.pop("pid")))
                yield res

    monkeypatch.setattr(runner, "make_backend", lambda cfg: Watched(cfg, computer=_replica(head, stall_dir)))
    return seen


def _cells(value: str) -> list:
    """A CSV cell as numbers where it holds numbers (a number, or JSON of numbers), else as text."""
    try:
        return [float(value)]
    except ValueError:
        pass
    try:
        parsed = json.loads(value)
    except ValueError:
        return [value]
    flat, todo = [], [parsed]
    while todo:
        x = todo.pop()
        if isinstance(x, list):
            todo += x
        else:
            flat.append(x)
    return flat


def assert_same_exports(got_run, want_run, tmp_path, tol=1e-5):
    """Every exported table of ``got_run`` holds the rows of ``want_run``'s, numbers equal to ``tol``."""
    got_paths, want_paths = export_run(got_run, "csv", tmp_path / "got"), export_run(want_run, "csv", tmp_path / "want")
    assert [p.name for p in got_paths] == [p.name for p in want_paths]
    got_dir, want_dir = got_paths[0].parent, want_paths[0].parent
    n_rows = 0
    for table in (p.stem for p in got_paths):
        with open(got_dir / f"{table}.csv") as f:
            got = sorted(csv.reader(f))
        with open(want_dir / f"{table}.csv") as f:
            want = sorted(csv.reader(f))
        assert len(got) == len(want), table
        for g, w in zip(got, want):
            for a, b in zip(g, w, strict=True):
                ca, cb = _cells(a), _cells(b)
                assert len(ca) == len(cb), (table, a, b)
                for x, y in zip(ca, cb):
                    same = math.isclose(x, y, rel_tol=tol, abs_tol=tol) if isinstance(x, float) and isinstance(y, float) else x == y
                    assert same or (isinstance(x, float) and math.isnan(x) and math.isnan(y)), (table, g, w)
        n_rows += len(got) - 1
    assert n_rows > 0


def _done_and_started(run_dir) -> tuple[list[str], list[str]]:
    lines = (run_dir / "units.log").read_text().splitlines()
    return [ln.split(" ", 1)[1] for ln in lines if ln.startswith("done ")], [ln.split(" ", 1)[1] for ln in lines if ln.startswith("start ")]


@pytest.mark.timeout(300, method="thread")
def test_a_study_on_two_nodes_equals_a_local_run(cluster, local_run, tiny_random_dirs, tmp_path, monkeypatch):
    head = cluster.head_node.node_id
    (worker,) = cluster.worker_nodes
    seen = _watched_backends(monkeypatch, head)
    run_study(_config(tiny_random_dirs["qwen3_vl"], backend="ray", ray_workers=2), tmp_path / "ray", progress=False, report=False)
    assert {n for _, n, _ in seen} == {head, worker.node_id}  # both nodes ran units
    assert len(seen) == len({u for u, _, _ in seen})  # each unit once
    assert_same_exports(tmp_path / "ray", local_run, tmp_path)


@pytest.mark.timeout(300, method="thread")
@pytest.mark.parametrize("fault", ["replica-killed", pytest.param("node-removed-spare-node", marks=pytest.mark.slow), "node-removed"])
def test_a_replica_or_node_lost_in_the_middle_of_a_unit_leaves_a_study_equal_to_a_local_run(cluster, local_run, tiny_random_dirs,
                                                                                            tmp_path, monkeypatch, caplog, fault):
    """Two replicas of one CPU; one that is running an evaluation unit off the head node is
    lost, and its unit runs again on another replica. ``replica-killed``: its process gets
    SIGKILL (its node stays, with room for the replacement). ``node-removed``: its node is
    removed; the survivor alone finishes the study while the replacement waits for room
    (the backend before this test waited on it forever). ``-spare-node``: a third node has
    room for the replacement."""
    if fault == "node-removed-spare-node":
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes(timeout=120)
    assert len(cluster.worker_nodes) == (2 if fault == "node-removed-spare-node" else 1)
    head = cluster.head_node.node_id
    stall = tmp_path / "stall"
    stall.mkdir()
    seen = _watched_backends(monkeypatch, head, str(stall))
    lost: list[dict] = []

    def lose_the_stalled_replica():
        deadline = time.time() + 240
        while time.time() < deadline and not (stall / "stalled").exists():
            time.sleep(0.05)
        if (stall / "stalled").exists():
            stalled = json.loads((stall / "stalled").read_text())
            if fault == "replica-killed":
                os.kill(stalled["pid"], signal.SIGKILL)
            else:
                cluster.remove_node(next(n for n in cluster.worker_nodes if n.node_id == stalled["node"]))
            lost.append(stalled)

    loser = threading.Thread(target=lose_the_stalled_replica, daemon=True)
    loser.start()
    out = tmp_path / "ray"
    with caplog.at_level(logging.WARNING, logger="vheads"):
        run_study(_config(tiny_random_dirs["qwen3_vl"], backend="ray", ray_workers=2), out, progress=False, report=False)
    loser.join(timeout=60)
    assert lost, "no replica stalled off the head node: nothing was lost"
    (stalled,) = lost
    died = [r.getMessage() for r in caplog.records if "Ray replica died during unit" in r.getMessage()]
    assert len(died) == 1 and f"during unit {stalled['unit']} " in died[0]
    assert len(seen) == len({u for u, _, _ in seen})  # every unit yielded once
    (_, node, pid), = [s for s in seen if s[0] == stalled["unit"]]
    assert pid != stalled["pid"] and (fault == "replica-killed" or node != stalled["node"])  # run again elsewhere
    done, started = _done_and_started(out)
    assert len(done) == len(set(done)) and started.count(stalled["unit"]) == 2  # stored once, started twice
    assert_same_exports(out, local_run, tmp_path)
