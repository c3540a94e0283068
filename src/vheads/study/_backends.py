"""Where work units run: in this process, or on Ray actors that each hold a model replica.

Either way only the driver writes the results store; a backend just yields computed
units as they finish.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from vheads._errors import VheadsError
from vheads.study._config import check_ray_device
from vheads.study._units import UnitComputer

LOG = logging.getLogger("vheads")


class LocalBackend:
    def __init__(self, cfg: dict[str, Any]):
        self.computer = UnitComputer(cfg)

    def run(self, units: Iterable[dict], on_start=None) -> Iterator[dict]:
        for u in units:
            if on_start:
                on_start(u)
            yield self.computer.compute(u)

    def close(self) -> None:
        pass


def actor_options(nodes: Sequence[tuple[float, float]], workers: int) -> dict[str, int]:
    """Ray resources of one replica, from the ``(cores, GPUs)`` of each node of the cluster.

    With GPUs: one GPU and its share of its node's cores (``cores ÷ GPUs``, the smallest share
    over the nodes that have GPUs, at least 1), so the replicas of one node split its cores.
    Without: the most cores each of the ``workers`` replicas can have with all of them fitting
    on the nodes (a replica lives on one node), at least 1. Ray sets a replica's thread count
    (``OMP_NUM_THREADS``) to its cores, and :class:`RayBackend` sets torch's threads to them
    too, so ``num_cpus = 1`` would leave every replica one thread."""
    gpu_nodes = [(c, int(g)) for c, g in nodes if g >= 1]
    if gpu_nodes:
        return {"num_cpus": max(1, min(int(c) // g for c, g in gpu_nodes)), "num_gpus": 1}
    n = 1
    while sum(int(c) // (n + 1) for c, _ in nodes) >= max(1, workers):
        n += 1
    return {"num_cpus": n, "num_gpus": 0}


def _cluster_nodes(ray) -> list[tuple[float, float]]:
    """``(cores, GPUs)`` of every live node of the cluster."""
    return [(n["Resources"].get("CPU", 0), n["Resources"].get("GPU", 0)) for n in ray.nodes() if n.get("Alive")]


class RayBackend:
    """``ray_workers`` actors, each fed a unit when it is free; each actor has the resources of
    :func:`actor_options` (one GPU and ``cores ÷ GPUs`` cores when the cluster has GPUs) and runs
    torch on that many threads (``run.torch_threads`` where set: the same on every backend).

    Connects to ``run.ray_address`` or ``RAY_ADDRESS``; with neither, starts a local
    cluster. The ordering of results does not matter: every unit's rows carry its keys.

    An actor gets work once it has started (``__ray_ready__``), so a replica the cluster has
    no room for yet takes nothing and holds nothing up. An actor that dies in the middle of
    a unit (its process killed, its node removed) is replaced by a new one, which joins
    when the cluster has room for it, and the unit goes back to the queue, run by the first
    free replica (logged on the ``vheads`` logger); only the driver commits results, so a
    unit is stored once. A unit whose replica dies :data:`MAX_ATTEMPTS` times is an error
    naming it; so is work left with no replica running and none started within
    :data:`START_TIMEOUT` seconds (a replica that dies as it starts is replaced up to
    :data:`MAX_ATTEMPTS` times in all). ``computer`` is the actor class (tests pass a stand-in).
    """

    MAX_ATTEMPTS = 3
    START_TIMEOUT = 600.0

    def __init__(self, cfg: dict[str, Any], computer: type = UnitComputer):
        try:
            import ray
        except ImportError:
            raise RuntimeError("the ray backend needs Ray: pip install 'vheads[ray]'") from None
        check_ray_device(cfg.get("device", "cpu"))
        self.ray = ray
        workers = cfg["run"]["ray_workers"]
        address = cfg["run"].get("ray_address") or os.environ.get("RAY_ADDRESS") or None
        if not ray.is_initialized():  # a local cluster: every core (at least one per replica)
            ray.init(address=address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
                     num_cpus=None if address else max(2, os.cpu_count() or 1, workers))
        self.options = actor_options(_cluster_nodes(ray), workers)
        self.gpus = self.options["num_gpus"]
        # the replica's torch threads: its cores, unless the study fixes them
        self.cfg = {**cfg, "run": {**cfg["run"], "torch_threads": cfg["run"].get("torch_threads") or self.options["num_cpus"]}}
        self.Actor = ray.remote(**self.options, max_restarts=0)(computer)
        self.actors: list = []  # every replica not known dead
        self.starting: dict = {}  # ready ref -> replica not started yet
        self.free: list = []  # started replicas without a unit
        self.start_deaths = 0  # replicas that died before they started
        for _ in range(cfg["run"]["ray_workers"]):
            self._start()

    def _start(self) -> None:
        a = self.Actor.remote(self.cfg)
        self.actors.append(a)
        self.starting[a.__ray_ready__.remote()] = a

    def _drop(self, a) -> None:
        """Forget a dead replica (and make sure it is gone: an unreachable one may still hold its resources)."""
        self.actors = [x for x in self.actors if x is not a]
        try:
            self.ray.kill(a, no_restart=True)
        except Exception:  # already gone with its node
            pass

    def run(self, units: Iterable[dict], on_start=None) -> Iterator[dict]:
        from ray.exceptions import RayActorError

        ray = self.ray
        queue = list(units)
        pending: dict = {}  # ref -> (actor, unit)
        attempts: dict[str, int] = {}
        while queue or pending:
            while queue and self.free:
                u = queue.pop(0)
                a = self.free.pop()
                attempts[u["unit_id"]] = attempts.get(u["unit_id"], 0) + 1
                if on_start:
                    on_start(u)
                pending[a.compute.remote(u)] = (a, u)
            if not pending and not self.starting:
                raise VheadsError(f"every Ray replica died, with {len(queue)} work unit(s) left; see the Ray logs")
            done, _ = ray.wait(list(pending) + list(self.starting), num_returns=1, timeout=None if pending else self.START_TIMEOUT)
            if not done:
                raise VheadsError(f"no Ray replica started within {self.START_TIMEOUT:.0f} s and none is running, with "
                                  f"{len(queue)} work unit(s) left: the cluster has no room for one (each needs "
                                  f"{self.options['num_cpus']} CPU{' and 1 GPU' if self.gpus else ''}); see `ray status`")
            for ref in done:
                if ref in self.starting:
                    a = self.starting.pop(ref)
                    try:
                        ray.get(ref)
                        self.free.append(a)
                    except RayActorError as e:  # died before it took a unit (its node removed, its constructor failed)
                        self._drop(a)
                        self.start_deaths += 1
                        again = self.start_deaths <= self.MAX_ATTEMPTS
                        LOG.warning("Ray replica died as it started (%s)%s", type(e).__name__,
                                    "; starting another" if again else "; going on with the others")
                        if again:
                            self._start()
                    continue
                a, u = pending.pop(ref)
                try:
                    res = ray.get(ref)
                except RayActorError as e:  # the replica died: replace it, run the unit again
                    if attempts[u["unit_id"]] >= self.MAX_ATTEMPTS:
                        raise VheadsError(f"work unit {u['unit_id']} failed on {self.MAX_ATTEMPTS} Ray replicas, each of "
                                          f"which died ({type(e).__name__}); see the Ray logs") from None
                    LOG.warning("Ray replica died during unit %s (%s); running it again on the first free replica",
                                u["unit_id"], type(e).__name__)
                    self._drop(a)
                    self._start()
                    queue.insert(0, u)
                    continue
                self.free.append(a)
                yield res

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)


def make_backend(cfg: dict[str, Any]):
    """Ray's replicas, local worker processes (``[run] workers``: :mod:`vheads.study._processes`)
    or this process."""
    from vheads.study._processes import ProcessBackend, auto_workers

    if cfg["run"]["backend"] == "ray":
        return RayBackend(cfg)
    workers = auto_workers(cfg)
    return ProcessBackend(cfg, workers) if workers > 1 else LocalBackend(cfg)
