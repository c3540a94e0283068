"""Work units on local worker processes, each a model replica of its own (``[run] workers``).

On a CPU the built-in tiny model's matmuls and softmaxes are too small to gain from a
second thread (head_dim 8, 28 tokens: one thread runs a batch about as fast as two), so
the study runs one single-threaded replica per core instead (``benchmarks/README.md``, "The
default study after issue 41"). Only the driver writes the results store: a worker receives
a unit, computes it and sends its rows back, exactly as a Ray replica does.

Each replica keeps its probe memo (rows it already ran; :class:`vheads.evaluation.ProbeMemo`),
and settings of one layer pattern draw the same controls, so a free worker takes the waiting
unit whose head-sets it has run most on the same test and shard, and least the ones another
worker has (ties: the first in the stage's order).

A unit that raises in a worker raises the same error in the driver; a worker that dies is an
error naming the unit; an interrupted run stops its workers, and the units committed before
stay committed (the run resumes from them).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from collections.abc import Iterable, Iterator
from typing import Any

from vheads._errors import VheadsError


def auto_workers(cfg: dict[str, Any]) -> int:
    """``[run] workers`` resolved: the key when set, else one per core (at most 8) for the
    built-in tiny model on a CPU, else 1 (this process)."""
    from vheads.study._units import tiny_on_cpu

    run = cfg["run"]
    if run.get("workers"):
        return int(run["workers"])
    return max(1, min(8, os.cpu_count() or 1)) if tiny_on_cpu(cfg) else 1


def _worker(conn, cfg: dict[str, Any], computer) -> None:
    """A worker's loop: units in, results (or the error) out, until ``None``."""
    c = computer(cfg)
    while True:
        unit = conn.recv()
        if unit is None:
            return
        try:
            conn.send(("ok", c.compute(unit)))
        except BaseException as e:  # noqa: BLE001 - the driver re-raises it
            try:
                conn.send(("error", e))
            except Exception:  # an error that does not pickle: its text
                conn.send(("error", RuntimeError(f"{type(e).__name__}: {e}")))


def _heads(unit: dict) -> set[str]:
    return {json.dumps(h) for h in unit.get("headsets") or ()}


def _place(unit: dict) -> tuple:
    return unit.get("kind"), unit.get("test"), tuple(unit.get("shard") or ())


class ProcessBackend:
    """``workers`` forked processes, each a :class:`~vheads.study._units.UnitComputer` on
    :func:`replica_threads` torch threads, started at the first
    call of :meth:`run` that has two units or more (one unit runs on the first worker)."""

    def __init__(self, cfg: dict[str, Any], workers: int, computer: type | None = None):
        from vheads.study._units import UnitComputer, replica_threads

        threads = replica_threads(cfg, workers)
        self.cfg = {**cfg, "run": {**cfg["run"], "torch_threads": threads}}
        self.n = workers
        self.computer = computer or UnitComputer
        # fork: a worker starts at once and inherits the driver's imports; a worker on more
        # than one thread is spawned (OpenMP's thread pool does not survive a fork)
        self.ctx = mp.get_context("fork" if threads == 1 else "spawn")
        self.procs: list = []
        self.conns: list = []
        self.seen: list[dict[tuple, set[str]]] = []

    def _start(self, n: int) -> None:
        while len(self.procs) < n:
            parent, child = self.ctx.Pipe()
            p = self.ctx.Process(target=_worker, args=(child, self.cfg, self.computer), daemon=True)
            p.start()
            child.close()
            self.procs.append(p)
            self.conns.append(parent)
            self.seen.append({})

    def _pick(self, w: int, queue: list[tuple[dict, set[str], tuple]]) -> int:
        """The index in ``queue`` (``(unit, its head-sets, its place)``) of the unit worker ``w``
        should run next."""
        best, score = 0, None
        for i, (_, heads, place) in enumerate(queue):
            own = len(heads & self.seen[w].get(place, set()))
            other = max((len(heads & s.get(place, set())) for j, s in enumerate(self.seen) if j != w), default=0)
            if score is None or own - other > score:
                best, score = i, own - other
        return best

    def run(self, units: Iterable[dict], on_start=None) -> Iterator[dict]:
        from multiprocessing.connection import wait

        queue = [(u, _heads(u), _place(u)) for u in units]  # each unit's head-sets read once
        if not queue:
            return
        self._start(min(self.n, max(len(queue), len(self.procs) or 1)))
        busy: dict[int, dict] = {}
        try:
            while queue or busy:
                for w in range(len(self.procs)):
                    if w in busy or not queue:
                        continue
                    u, heads, place = queue.pop(self._pick(w, queue))
                    if on_start:
                        on_start(u)
                    self.conns[w].send(u)
                    self.seen[w].setdefault(place, set()).update(heads)
                    busy[w] = u
                ready = wait([self.conns[w] for w in busy] + [self.procs[w].sentinel for w in busy])
                for w in list(busy):
                    if self.conns[w] in ready or self.conns[w].poll():
                        try:
                            status, value = self.conns[w].recv()
                        except EOFError:
                            status, value = "died", None
                    elif self.procs[w].sentinel in ready:
                        status, value = "died", None
                    else:
                        continue
                    u = busy.pop(w)
                    if status == "died":
                        raise VheadsError(f"work unit {u['unit_id']}: its worker process died "
                                          f"(exit code {self.procs[w].exitcode}; out of memory?)")
                    if status == "error":
                        raise value
                    yield value
        except BaseException:
            self.close()  # an error or an interrupt: stop every worker (committed units stay)
            raise

    def close(self) -> None:
        for c in self.conns:
            try:
                c.send(None)
            except (OSError, ValueError):
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        self.procs, self.conns, self.seen = [], [], []
