"""Where work units run: in this process, or on Ray actors that each hold a model replica.

Either way only the driver writes the results store; a backend just yields computed
units as they finish.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from typing import Any

from vheads._errors import VheadsError
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


class RayBackend:
    """``ray_workers`` actors (one GPU each when the cluster has GPUs), fed round-robin.

    Connects to ``run.ray_address`` or ``RAY_ADDRESS``; with neither, starts a local
    cluster. The ordering of results does not matter: every unit's rows carry its keys.

    An actor that dies in the middle of a unit (its process killed, its node removed) is
    replaced by a new one, wherever the cluster has room, and the unit runs again there
    (logged on the ``vheads`` logger); only the driver commits results, so a unit is stored
    once. A unit whose replica dies :data:`MAX_ATTEMPTS` times is an error naming it.
    ``computer`` is the actor class (tests pass a stand-in).
    """

    MAX_ATTEMPTS = 3

    def __init__(self, cfg: dict[str, Any], computer: type = UnitComputer):
        try:
            import ray
        except ImportError:
            raise RuntimeError("the ray backend needs Ray: pip install 'vheads[ray]'") from None
        self.ray = ray
        self.cfg = cfg
        address = cfg["run"].get("ray_address") or os.environ.get("RAY_ADDRESS") or None
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
                     num_cpus=None if address else max(2, cfg["run"]["ray_workers"]))
        gpus = ray.cluster_resources().get("GPU", 0)
        self.Actor = ray.remote(num_gpus=1 if gpus >= 1 else 0, num_cpus=1, max_restarts=0)(computer)
        self.actors = [self.Actor.remote(cfg) for _ in range(cfg["run"]["ray_workers"])]

    def run(self, units: Iterable[dict], on_start=None) -> Iterator[dict]:
        from ray.exceptions import RayActorError

        ray = self.ray
        queue = list(units)
        pending: dict = {}  # ref -> (actor, unit)
        attempts: dict[str, int] = {}
        free = list(self.actors)
        while queue or pending:
            while queue and free:
                u = queue.pop(0)
                a = free.pop()
                attempts[u["unit_id"]] = attempts.get(u["unit_id"], 0) + 1
                if on_start:
                    on_start(u)
                pending[a.compute.remote(u)] = (a, u)
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                a, u = pending.pop(ref)
                try:
                    res = ray.get(ref)
                except RayActorError as e:  # the replica died: replace it, run the unit again
                    if attempts[u["unit_id"]] >= self.MAX_ATTEMPTS:
                        raise VheadsError(f"work unit {u['unit_id']} failed on {self.MAX_ATTEMPTS} Ray replicas, each of "
                                          f"which died ({type(e).__name__}); see the Ray logs") from None
                    LOG.warning("Ray replica died during unit %s (%s); running it again on a new replica",
                                u["unit_id"], type(e).__name__)
                    self.actors = [x for x in self.actors if x is not a]
                    a = self.Actor.remote(self.cfg)
                    self.actors.append(a)
                    queue.insert(0, u)
                    free.append(a)
                    continue
                free.append(a)
                yield res

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)


def make_backend(cfg: dict[str, Any]):
    return RayBackend(cfg) if cfg["run"]["backend"] == "ray" else LocalBackend(cfg)
