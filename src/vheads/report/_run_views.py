"""What a loaded run says about its settings beyond the tables: the one count of settings,
the headline β, the points of a β or k sweep, and the settings whose S holds the same heads.
"""

from __future__ import annotations

import json
from typing import Any

from vheads._ids import parse_test_id
from vheads.report._meta import cfg_get
from vheads.report._run_data import Cell, RunData


def settings_text(run: RunData) -> str:
    """The one count of settings every part of the report uses: the discovery grid's, the score
    points beside it and the causal setting, ``17 settings (12 grid, 4 score points, 1 causal)``."""
    from vheads.causal import CAUSAL_SETTING

    causal = [s for s in run.settings if s == CAUSAL_SETTING]
    grid = len(run.settings) - len(causal)
    parts = [f"{grid} grid"] + ([f"{len(run.score_settings)} score point{'s' * (len(run.score_settings) != 1)}"]
                                if run.score_settings else []) + (["1 causal"] if causal else [])
    total = grid + len(run.score_settings) + len(causal)
    return f"{total} setting{'s' * (total != 1)}" + (f" ({', '.join(parts)})" if len(parts) > 1 else "")


def headline_beta(run: RunData) -> tuple[float | None, dict[str, Any] | None]:
    """The β Table 3's CERS ran at and the record of the rule that chose it (meta
    ``headline_beta``, :mod:`vheads.study._headline`); a run from before wave 4 has no record
    and ran at its config's ``beta``."""
    rec = run.meta.get("headline_beta")
    if isinstance(rec, dict) and isinstance(rec.get("beta"), (int, float)):
        return float(rec["beta"]), rec
    beta = cfg_get(run.config, "beta")
    return (float(beta) if isinstance(beta, (int, float)) else None), None


def sweep_points(run: RunData, param: str) -> dict[tuple[str, str], dict[float, Cell]]:
    """``(setting, base test) -> value -> Cell`` for a β (``param="beta"``) or k sweep.

    Points come from tests ``<base>@<param>=v`` and, for k, from ``S@k=K`` head-sets; the
    main test adds its own point (the headline β; the discovery k) when the sweep exists.
    """
    pts: dict[tuple[str, str], dict[float, Cell]] = {}
    for (s, t), cell in run.cells.items():
        tid = parse_test_id(t)
        if tid.param == param:
            pts.setdefault((s, tid.base), {})[tid.value] = cell
    if param == "k":
        for (s, base), by_k in run.ksweep.items():
            for k, cell in by_k.items():
                pts.setdefault((s, base), {}).setdefault(float(k), cell)
    for (s, base), d in pts.items():
        if param == "beta":
            main = headline_beta(run)[0]
        else:
            main = run.discovery.get(s, {}).get("k")
        if isinstance(main, (int, float)) and (s, base) in run.cells and float(main) not in d:
            d[float(main)] = run.cells[(s, base)]
    return {key: d for key, d in pts.items() if len(d) >= 2}


def headset_key(run: RunData, setting: str) -> str | None:
    """S's heads of ``setting`` as one comparable text (sorted ``[layer, head]`` pairs): the
    stored head-set row, else the discovery's; ``None`` when the store has neither."""
    key = run.heads_of.get((setting, "S"))
    if key is None and setting in run.discovery:
        key = json.dumps(sorted(map(tuple, run.discovery[setting]["headset"])))
    return key if key not in (None, "[]") else None


def identical_headsets(run: RunData) -> list[list[str]]:
    """Groups of settings (grid, score points and the causal setting alike) whose S holds
    exactly the same heads, each group in the report's setting order, groups in the order
    of their first member. Their tests are one result measured again, not independent
    evidence: on a small model several discovery scores often pick the same top-k."""
    order = [*run.settings, *run.score_settings]
    by_key: dict[str, list[str]] = {}
    for s in order:
        key = headset_key(run, s)
        if key is not None:
            by_key.setdefault(key, []).append(s)
    return [group for group in by_key.values() if len(group) > 1]


def identical_to(run: RunData) -> dict[str, list[str]]:
    """setting -> the other settings whose S is identical to its (settings in no group absent)."""
    return {s: [o for o in group if o != s] for group in identical_headsets(run) for s in group}
