"""The shapes the report reads a run into: :class:`Cell` (one setting × test: S's per-item
values and each control's draws) and :class:`RunData` (everything of one run directory);
:func:`vheads.report.load_run` fills them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vheads.report._meta import cfg_get


@dataclass
class Cell:
    """The outcomes of one (setting, test): S's per-item values and each control's draws.

    ``s`` [n] per-item values of S (``None`` if S was not evaluated); ``controls`` maps a
    control name to its draws' statistics ``T_r`` (one mean over items per draw, in draw
    order).
    """

    s: np.ndarray | None = None
    controls: dict[str, np.ndarray] = field(default_factory=dict)
    #: per control, the head-set each draw holds (its heads as stored; the draw's id where
    #: the store has no heads for it), aligned with ``controls``: a small pool repeats sets
    draw_sets: dict[str, list[str]] = field(default_factory=dict)
    #: per exchangeable control of a sequential run (``controls_h ≥ 1``), ``(h, R_max)``: its
    #: rank p is Besag–Clifford's over the draws in draw order (:func:`~vheads.report._outcome_cells.sequential_of`)
    sequential: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: per sequential control the study stopped once its Holm verdict was settled (the store's
    #: ``sequential_stops``, ``stopped == "decided"``), its R_max: the p is then the largest its
    #: remaining draws could have given (:func:`vheads.evaluation.control_rank_p`)
    settled: dict[str, int] = field(default_factory=dict)

    def distinct(self, control: str) -> np.ndarray:
        """``T_r`` of the distinct head-sets of ``control``'s draws, one per head-set (its
        first draw), in draw order. A repeated head-set is the same heads on the same items,
        so the same outcome: counting it twice would shrink the SD and inflate z."""
        t = self.controls[control]
        keys = self.draw_sets.get(control)
        if not keys or len(keys) != len(t):  # heads not known: every draw counts
            return t
        first: dict[str, int] = {}
        for i, key in enumerate(keys):
            first.setdefault(key, i)
        return t[sorted(first.values())]


@dataclass
class RunData:
    """Everything the report reads from one run directory."""

    run_dir: Path
    config: dict[str, Any]
    meta: dict[str, Any]
    settings: list[str]  # in display order
    discovery: dict[str, dict[str, Any]]  # setting -> {query, source, corpus, n_items, k, scores [L,H], headset}
    cells: dict[tuple[str, str], Cell]  # (setting, test id) -> Cell of main head-sets (no k-sweep sets)
    ksweep: dict[tuple[str, str], dict[int, Cell]]  # (setting, base test) -> k -> Cell, from 'S@k=K' head-sets
    headset_sizes: dict[tuple[str, str], int]  # (setting, headset role) -> heads in it (first draw)
    arms: dict[tuple[str, str, str], np.ndarray]  # (setting, test, arm) -> per-item drops of S (k sweep: test@k=K)
    overlap: list[dict[str, Any]]  # one row per unordered pair (see vheads.store)
    ceilings: dict[str, dict[str, Any]]
    audit: list[dict[str, Any]]
    strip_attention: dict[str, dict[tuple[int, int], dict[str, list[float]]]]  # setting -> head -> item -> masses
    nonfinite: int = 0  # outcome rows left out because their value was NaN/inf
    random_overlap: dict[str, list[int]] = field(default_factory=dict)  # setting -> overlap with each uniform draw
    model: str = ""  # the model's name in a multi-model run's store ('' = a single-model run)
    metric: str = "p4"  # the metric of every outcome value above (the config's ``metric``)
    heads_of: dict[tuple[str, str], str] = field(default_factory=dict)  # (setting, head-set id) -> its heads
    # score points beside the grid (discovery source 'score'; vheads.report._methods): kept out of
    # ``settings`` and ``overlap``, so the seed's tables and their Holm family stay the grid's
    score_settings: list[str] = field(default_factory=list)
    score_points: dict[str, dict[str, Any]] = field(default_factory=dict)  # setting -> its point's axes (meta 'score:<id>')
    score_overlap: list[dict[str, Any]] = field(default_factory=list)  # overlap rows with a score setting in them
    # (cells, ksweep, arms, nonfinite) under every other metric the store holds, read in the same pass
    other_metrics: dict[str, tuple] = field(default_factory=dict, repr=False, compare=False)

    @property
    def model_id(self) -> str:
        return str(self.meta.get("model_id") or cfg_get(self.config, "model") or "?")

    @property
    def shape(self) -> tuple[int | None, int | None]:
        def as_int(v):
            try:
                return int(v)
            except (TypeError, ValueError):
                return None

        return as_int(self.meta.get("n_layers")), as_int(self.meta.get("n_heads"))

    @property
    def attention_layers(self) -> list[int] | None:
        """The layers with heads (softmax attention), when the run recorded them; a hybrid
        model's linear-attention layers are not among them."""
        v = self.meta.get("attention_layers")
        return [int(x) for x in v] if isinstance(v, list) else None

    @property
    def tests(self) -> list[str]:
        return sorted({t for (_, t) in self.cells})

    def cell(self, setting: str, test: str) -> Cell | None:
        return self.cells.get((setting, test))

    def strip_png(self, item_id: str) -> Path | None:
        p = self.run_dir / "strips" / f"{item_id}.png"
        return p if p.is_file() else None

    def strip_meta(self, item_id: str) -> dict | None:
        """``strips/<item>.json``: the strip's question, asked panel and answer, if stored."""
        p = self.run_dir / "strips" / f"{item_id}.json"
        try:
            return json.loads(p.read_text()) if p.is_file() else None
        except (OSError, ValueError):
            return None
