"""Work units of a study and the code that computes one.

A unit is a plain, JSON-serialisable dict (``unit_id``, ``kind`` and its parameters), so
the same unit runs in-process or on a Ray actor; :class:`UnitComputer` holds one model
replica and turns a unit into store rows with the compute of the stage that asked for it
(:attr:`vheads.study._stage.Stage.compute`). Items are rebuilt from (kind, n, seed) by the
computer: generation is deterministic, so nothing large travels.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from vheads.evaluation import ProbeMemo
from vheads.study._config import StudyConfig
from vheads.study._stage import unit_computers
from vheads.study.stages.discovery import STRIP_FIGURE_HEADS, STRIP_FIGURE_ITEMS  # noqa: F401 (re-exported)
from vheads.study.stages.evaluation import ALL_HEADS, K_SWEEP_TESTS  # noqa: F401 (re-exported)


def tiny_on_cpu(cfg: dict[str, Any]) -> bool:
    """Whether ``cfg`` (a study config as a dict) runs the built-in tiny model on a CPU."""
    return cfg.get("model") == "tiny" and str(cfg.get("device", "cpu")) == "cpu"


def replica_threads(cfg: dict[str, Any], workers: int) -> int:
    """Torch threads of one model replica: ``run.torch_threads`` where set; else 1 for the
    built-in tiny model on a CPU, however many workers (its float sums then do not depend on
    the machine's cores or the worker count: one store on every machine); else the cores
    shared among the ``workers`` replicas."""
    if cfg["run"].get("torch_threads"):
        return int(cfg["run"]["torch_threads"])
    return 1 if tiny_on_cpu(cfg) else max(1, (os.cpu_count() or 1) // max(1, workers))


@contextlib.contextmanager
def torch_threads(n: int):
    """Torch on ``n`` threads inside the block, the caller's count back after it (the study may
    run in a user's own process)."""
    import torch

    outer = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(outer)


class UnitComputer:
    """Computes units on one model replica (built lazily, so it can live on a Ray actor)."""

    def __init__(self, cfg: dict[str, Any]):
        from vheads.study._config import config_from_dict

        from vheads.study._data import eval_source

        self.cfg: StudyConfig = config_from_dict({k: v for k, v in cfg.items()})
        self.threads = replica_threads(cfg, 1)  # a worker's or Ray replica's cfg carries its own
        self.source = eval_source(self.cfg)  # None: synthetic items
        self.templates = self.cfg.question_templates
        self._ood: dict[str, dict] = {}  # pointing-suite items by task spec, built once per replica
        self._engine = None
        self.memo = None  # rows already run on this replica (vheads.evaluation.ProbeMemo), made with the engine

    @property
    def engine(self):
        if self._engine is None:
            import torch

            from vheads.engine import Batching, Engine
            from vheads.models import load_model

            cfg = self.cfg
            with torch_threads(self.threads):  # the replica's threads load it too (see compute)
                lm = load_model(cfg.model, cfg.revision or None, cfg.dtype, cfg.device, device_map=cfg.device_map or None,
                                quantization=cfg.quantization or None, trust_remote_code=cfg.trust_remote_code,
                                system_prompt=cfg.system_prompt or None, chat_template=cfg.chat_template or None)
            run = self.cfg.run
            self._engine = Engine(lm, Batching(cross_item=run.cross_item, max_rows=run.batch_size, token_budget=run.token_budget))
            # every setting's tests run the same items, and their controls share many head-sets
            # (VHEADS_PROBE_MEMO=0: run every row)
            self.memo = ProbeMemo() if os.environ.get("VHEADS_PROBE_MEMO", "1") != "0" else None
        return self._engine

    def compute(self, unit: dict[str, Any]) -> dict[str, Any]:
        from vheads.evaluation import ROWS_RUN

        t0, before = time.time(), dict(ROWS_RUN)
        fn = unit_computers().get(unit["kind"])  # each stage's compute of its units (vheads.study.stages)
        if fn is None:
            raise ValueError(f"unknown unit kind {unit['kind']!r}; the stages compute {', '.join(unit_computers())}")
        # on every device (a GPU replica still runs its image processing and host-side work on
        # the CPU); the same thread count on every backend gives the same float reductions on
        # CPU (per-item results then differ only where a replica's probe memo served a row from
        # another batch: ≤ 1e-5). A Ray replica gets its cores here.
        with torch_threads(self.threads):
            rows = fn(self, unit)
        return {"unit_id": unit["unit_id"], "kind": unit["kind"], "rows": rows, "seconds": time.time() - t0,
                "forward_rows": {k: ROWS_RUN[k] - before[k] for k in ROWS_RUN}}


def _json(x) -> str:
    import json

    return json.dumps(x)


def _png(img) -> bytes:
    import io

    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()
