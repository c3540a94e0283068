"""The store's outcomes as cells (:class:`~vheads.report._run_data.Cell`): S's per-item values and
each control draw's mean (taken by SQLite), under every metric in one pass, and the sequential
stopping each cell's rank p reads (Besag–Clifford's ``(h, R_max)``, a settled Holm verdict).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import numpy as np

from vheads._ids import S_K_GLOB, parse_headset_id, parse_test_id, sweep_test_id
from vheads.report._run_data import Cell
from vheads.store import METRIC_COLUMNS, Store


def outcome_cells(store: Store, metric: str, heads_of: dict[tuple[str, str], str], tests: tuple[str, ...] | None = None):
    """The per-item outcomes of the store under ``metric`` (its column,
    :data:`vheads.store.METRIC_COLUMNS`), as ``(cells, ksweep, arms, nonfinite)`` of
    :class:`RunData`; ``tests``: only these test ids (default: all). ``heads_of`` maps
    (setting, head-set id) to its heads, to tell repeated control draws apart."""
    return outcome_cells_by_metric(store, (metric,), heads_of, tests)[metric]


def outcome_cells_by_metric(store: Store, metrics: tuple[str, ...], heads_of: dict[tuple[str, str], str],
                            tests: tuple[str, ...] | None = None) -> dict[str, tuple]:
    """:func:`outcome_cells` under each of ``metrics``, read in one pass over the store (the
    report reads every metric). S's (and S@k's) per-item values are read row by row; a
    control draw needs only its mean over the items, which SQLite takes (``AVG`` over the
    finite values, ``GROUP BY`` the draw), so the hundreds of thousands of control rows never
    reach Python."""
    cols = [METRIC_COLUMNS[m] for m in metrics]
    finite = "abs({c}) < 1e308"  # NULL (NaN) and ±inf fail it
    args = tuple(tests or ())
    where = f" AND test IN ({', '.join('?' * len(tests))})" if tests else ""
    is_s = f"(headset_id = 'S' OR headset_id GLOB '{S_K_GLOB}')"
    s_values: list[dict[tuple[str, str, str], list[float]]] = [defaultdict(list) for _ in metrics]
    nonfinite = [0] * len(metrics)
    for setting, test, hid, *values in store.query(
        f"SELECT setting, test, headset_id, {', '.join(cols)} FROM outcomes WHERE {is_s}{where} "
        "ORDER BY setting, test, headset_id, item_id", *args
    ):
        if "&" in setting:  # head-set algebra pseudo-settings: see vheads.report._comparison_tables
            continue
        for n, value in enumerate(values):
            if value is None or not np.isfinite(float(value)):
                nonfinite[n] += 1
            else:
                s_values[n][(setting, test, hid)].append(float(value))
    means: list[dict[tuple[str, str, str], float]] = [{} for _ in metrics]
    stats = ", ".join(f"AVG(CASE WHEN {finite.format(c=c)} THEN {c} END), "
                      f"SUM(CASE WHEN {finite.format(c=c)} THEN 0 ELSE 1 END)" for c in cols)
    for setting, test, hid, *agg in store.query(
        f"SELECT setting, test, headset_id, {stats} FROM outcomes WHERE NOT {is_s}{where} "
        "GROUP BY setting, test, headset_id", *args
    ):
        if "&" in setting:
            continue
        for n in range(len(metrics)):
            mean, bad = agg[2 * n], agg[2 * n + 1]
            nonfinite[n] += int(bad or 0)
            if mean is not None:
                means[n][(setting, test, hid)] = float(mean)
    arm_values: list[dict[tuple[str, str, str], list[float]]] = [defaultdict(list) for _ in metrics]
    for setting, test, hid, arm, *values in store.query(
        f"SELECT setting, test, headset_id, arm, {', '.join(cols)} FROM arms WHERE {is_s}{where} "
        "ORDER BY setting, test, headset_id, arm, item_id", *args
    ):  # S's arms under (setting, test, arm); a k-sweep set's under (setting, "test@k=K", arm)
        k = parse_headset_id(hid).k
        key = (setting, test if k is None else sweep_test_id(test, "k", k), arm)
        for n, value in enumerate(values):
            arm_values[n][key].append(float(value))
    return {m: (*_cells(s_values[n], means[n], heads_of), {key: np.asarray(v, dtype=float) for key, v in arm_values[n].items()},
                nonfinite[n]) for n, m in enumerate(metrics)}


def _cells(s_values: dict[tuple[str, str, str], list[float]], means: dict[tuple[str, str, str], float],
           heads_of: dict[tuple[str, str], str]):
    """``(cells, ksweep)`` of :class:`RunData` from S's per-item values and each control draw's
    mean, both by (setting, test, head-set id)."""
    cells: dict[tuple[str, str], Cell] = {}
    ksweep: dict[tuple[str, str], dict[int, Cell]] = defaultdict(dict)
    draws: dict[tuple[str, str, str, int | None], list[tuple[int, float, str]]] = defaultdict(list)
    for (setting, test, hid), values in s_values.items():
        k = parse_headset_id(hid).k
        cell = (ksweep[(setting, parse_test_id(test).base)].setdefault(k, Cell()) if k is not None
                else cells.setdefault((setting, test), Cell()))
        cell.s = np.asarray(values, dtype=float)
    for (setting, test, hid), mean in sorted(means.items()):
        h = parse_headset_id(hid)
        if h.k is not None:  # a k-sweep set's control
            ksweep[(setting, parse_test_id(test).base)].setdefault(h.k, Cell())
        else:
            cells.setdefault((setting, test), Cell())
        draws[(setting, test, h.role, h.k)].append((h.draw or 0, mean, heads_of.get((setting, hid), hid)))
    for (setting, test, role, k), ts in draws.items():
        ts = sorted(ts)
        cell = cells[(setting, test)] if k is None else ksweep[(setting, parse_test_id(test).base)][k]
        cell.controls[role] = np.asarray([v for _, v, _ in ts], dtype=float)
        cell.draw_sets[role] = [key for _, _, key in ts]
    return cells, dict(ksweep)


def sequential_of(config: dict[str, Any], heads_of: dict[tuple[str, str], str]) -> dict[str, dict[str, tuple[int, int]]]:
    """``setting -> control -> (h, R_max)`` of a run with ``controls_h = h ≥ 1``
    (:mod:`vheads.study._sequential`): each exchangeable control's R_max is the number of its
    draws (R, or its pool when smaller, or the whole pool of at most 2R); ``{}`` for a
    fixed-R run (h = 0, or a run from before the key)."""
    from vheads.evaluation import is_exchangeable
    from vheads.evaluation import sequential_params

    h, _ = sequential_params(config)
    if not h:
        return {}
    n_draws: dict[tuple[str, str], int] = defaultdict(int)
    for setting, hid in heads_of:
        p = parse_headset_id(hid)
        if p.draw is not None and p.k is None and "&" not in setting:
            n_draws[(setting, p.role)] += 1
    out: dict[str, dict[str, tuple[int, int]]] = defaultdict(dict)
    for (setting, role), n in n_draws.items():
        size = len(json.loads(heads_of.get((setting, "S"), "[]")))
        if is_exchangeable(role, [None] * size):
            out[setting][role] = (h, n)
    return dict(out)


def settled_of(meta: dict[str, Any], metric: str) -> dict[tuple[str, str], dict[str, int]]:
    """``(setting, test) -> control -> R_max`` of the comparisons under ``metric`` that the study
    stopped once their Holm verdict was settled (meta ``sequential_stops``, ``stopped == "decided"``)."""
    rec = meta.get("sequential_stops")
    if isinstance(rec, str):
        try:
            rec = json.loads(rec)
        except ValueError:
            rec = None
    out: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for c in (rec.get("comparisons") or []) if isinstance(rec, dict) else []:
        if isinstance(c, dict) and c.get("stopped") == "decided" and c.get("metric") == metric and isinstance(c.get("R_max"), int):
            out[(c.get("setting"), c.get("test"))][c.get("control")] = c["R_max"]
    return dict(out)


def mark_sequential(cells: dict[tuple[str, str], Cell], config: dict[str, Any], heads_of: dict[tuple[str, str], str],
                    settled: dict[tuple[str, str], dict[str, int]] | None = None) -> None:
    """Set each main cell's :attr:`Cell.sequential` (β-sweep cells keep their few draws whole)
    and :attr:`Cell.settled` (``settled``: :func:`settled_of`)."""
    seq = sequential_of(config, heads_of)
    for (setting, test), cell in cells.items():
        if setting in seq and parse_test_id(test).param != "beta":
            cell.sequential = {c: v for c, v in seq[setting].items() if c in cell.controls}
            cell.settled = {c: r for c, r in (settled or {}).get((setting, test), {}).items() if c in cell.sequential}
