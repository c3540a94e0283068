"""Where work units run: in this process, or on Ray actors that each hold a model replica.

Either way only the driver writes the results store; a backend just yields computed
units as they finish.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

from vheads.study._units import UnitComputer


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
    """

    def __init__(self, cfg: dict[str, Any]):
        try:
            import ray
        except ImportError:
            raise RuntimeError("the ray backend needs Ray: pip install 'vheads[ray]'") from None
        self.ray = ray
        address = cfg["run"].get("ray_address") or os.environ.get("RAY_ADDRESS") or None
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
                     num_cpus=None if address else max(2, cfg["run"]["ray_workers"]))
        gpus = ray.cluster_resources().get("GPU", 0)
        Actor = ray.remote(num_gpus=1 if gpus >= 1 else 0, num_cpus=1)(UnitComputer)
        self.actors = [Actor.remote(cfg) for _ in range(cfg["run"]["ray_workers"])]

    def run(self, units: Iterable[dict], on_start=None) -> Iterator[dict]:
        ray = self.ray
        queue = list(units)
        pending: dict = {}
        free = list(self.actors)
        while queue or pending:
            while queue and free:
                u = queue.pop(0)
                a = free.pop()
                if on_start:
                    on_start(u)
                pending[a.compute.remote(u)] = a
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                free.append(pending.pop(ref))
                yield ray.get(ref)

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)


def make_backend(cfg: dict[str, Any]):
    return RayBackend(cfg) if cfg["run"]["backend"] == "ray" else LocalBackend(cfg)
