"""Reading a run's results store into the shapes the report needs.

Everything the report shows comes from ``results.sqlite`` (schema in
:mod:`vheads.store`) and, for the strip figures, ``strips/<item_id>.png``. Ids:

- head-set ids in ``outcomes``: ``S`` (the discovered set), ``<control>#<draw>`` (one
  control draw, e.g. ``layer-matched#17``), ``S@k=K`` (the k-sweep set of size K); a
  control of a k-sweep set may read ``<control>@k=K#<draw>``. A deterministic control may
  carry no ``#draw`` (``sinks``).
- test ids: ``cers``, ``ncs-all``, ``ncs-image``, …, ``text``, and sweep points
  ``<test>@beta=B`` / ``<test>@k=K``.

A head-set's statistic ``T`` is the mean over items of its per-item ``value``.

The shapes are :mod:`vheads.report._run_data`, the config and meta readers
:mod:`vheads.report._meta`, the outcome cells :mod:`vheads.report._outcome_cells` and the
readings of a loaded run's settings :mod:`vheads.report._run_views`; every name is re-exported
here.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

# the ids are parsed in vheads._ids; HeadSetId, TestId and the parsers are re-exported for the report's modules
from vheads._ids import S_K_GLOB, HeadSetId, TestId, parse_headset_id, parse_test_id, sweep_test_id  # noqa: F401
from vheads.evaluation import AUDIT_SETS
from vheads._errors import VheadsError
from vheads.report._meta import (  # noqa: F401 - re-exported
    _json, _norm, cfg_get, control_fallbacks, control_pools, fallback_note, store_meta,
)
from vheads.report._outcome_cells import (  # noqa: F401 - re-exported
    _cells, mark_sequential, outcome_cells, outcome_cells_by_metric, sequential_of, settled_of,
)
from vheads.report._run_data import Cell, RunData  # noqa: F401 - re-exported
from vheads.report._run_views import (  # noqa: F401 - re-exported
    headline_beta, headset_key, identical_headsets, identical_to, settings_text, sweep_points,
)
from vheads.store import METRIC_COLUMNS, STORE_NAME, Store


def _setting_order(ids: set[str], config_settings: Any) -> list[str]:
    """Settings in the config's order where it lists them, the rest sorted by id."""
    listed = []
    if isinstance(config_settings, (list, tuple)):
        for s in config_settings:
            sid = s.get("id") if isinstance(s, dict) else s
            if isinstance(sid, str) and sid in ids and sid not in listed:
                listed.append(sid)
    return listed + sorted(ids - set(listed))


def load_run(run_dir: str | Path, model: str = "", metric: str | None = None) -> RunData:
    """Read ``run_dir/results.sqlite`` (read only; nothing is written): the rows of
    ``model`` (a name of a multi-model run's ``models``; '' = a single-model run), every
    outcome in ``metric`` (``p4``, ``logprob``, ``logit-diff``; default: the config's
    ``metric``, else ``p4``)."""
    run_dir = Path(run_dir)
    if not (run_dir / STORE_NAME).is_file():
        raise FileNotFoundError(
            f"no results store at {run_dir / STORE_NAME}; pass the run directory a `vheads study` wrote"
        )
    store = Store(run_dir, readonly=True, model=model)
    try:
        run = _load(store, run_dir, metric)
        run.model = model
        return run
    finally:
        store.close()


def _load(store: Store, run_dir: Path, metric: str | None = None) -> RunData:
    meta = store_meta(store)
    config = meta.get("config") if isinstance(meta.get("config"), dict) else {}

    discovery = {}
    for setting, query, source, corpus, n_items, k, scores, headset in store.query(
        "SELECT setting, query, source, corpus, n_items, k, scores, headset FROM discovery"
    ):
        discovery[setting] = {
            "query": query, "source": source, "corpus": corpus, "n_items": n_items, "k": k,
            "scores": np.asarray(_json(scores), dtype=float) if scores else None,
            "headset": [tuple(h) for h in (_json(headset) or [])],
        }

    heads_of = {(setting, hid): json.dumps(sorted(map(tuple, _json(heads) or [])))
                for setting, hid, heads in store.query("SELECT setting, headset_id, heads FROM headsets")}
    metric = metric or cfg_get(config, "metric", default="p4")
    if metric not in METRIC_COLUMNS:
        raise VheadsError(f"config key 'metric': unknown metric {metric!r}; choose from {', '.join(METRIC_COLUMNS)}")
    if metric != "p4" and not store.has_metric(metric):  # p4 is the value every vheads stored
        raise VheadsError(f"this run's results store holds no {metric} values for some outcomes (written by a vheads "
                          f"from before the metric columns); report it with metric = \"p4\", or rerun the study")
    others = tuple(m for m in METRIC_COLUMNS if m != metric and (m == "p4" or store.has_metric(m)))
    by_metric = outcome_cells_by_metric(store, (metric, *others), heads_of)  # one pass for every metric
    cells, ksweep, arms, nonfinite = by_metric.pop(metric)
    for m, c in ((metric, cells), *((k, v[0]) for k, v in by_metric.items())):
        mark_sequential(c, config, heads_of, settled_of(meta, m))

    headset_sizes: dict[tuple[str, str], int] = {}
    for setting, hid, control, heads in store.query(
        "SELECT setting, headset_id, control, heads FROM headsets ORDER BY setting, headset_id"
    ):
        role = parse_headset_id(hid).role if control in (None, "") else control
        if parse_headset_id(hid).k is not None or "&" in setting:
            continue
        headset_sizes.setdefault((setting, role), len(_json(heads) or []))
    for setting, d in discovery.items():
        headset_sizes.setdefault((setting, "S"), len(d["headset"]))

    cols = ("a", "b", "k", "overlap", "half_mean", "half_lo", "half_hi", "same_items", "ceiling_a", "ceiling_b",
            "geo_ceiling", "fraction")
    overlap = [dict(zip(cols, row)) for row in store.query(
        "SELECT setting_a, setting_b, k, overlap, half_mean, half_lo, half_hi, same_items, ceiling_a, ceiling_b, "
        "geo_ceiling, fraction FROM overlap ORDER BY setting_a, setting_b")]
    random_overlap: dict[str, list[int]] = defaultdict(list)
    for setting, ov in store.query("SELECT setting, overlap FROM random_overlap ORDER BY setting, draw"):
        random_overlap[setting].append(int(ov))
    ceilings = {
        s: {"k": k, "mean": mean, "lo": lo, "hi": hi, "splits": splits}
        for s, k, mean, lo, hi, splits in store.query("SELECT setting, k, mean, lo, hi, splits FROM ceilings")
    }
    order = [*AUDIT_SETS, "leak"]  # the order the audit runs its sets in (the store keeps no insertion order)
    audit = [
        dict(zip(("name", "n", "mean_p_key", "lo", "hi", "ok"), row))
        for row in sorted(store.query("SELECT name, n, mean_p_key, lo, hi, ok FROM audit"),
                          key=lambda r: (order.index(r[0]) if r[0] in order else len(order), r[0]))
    ]
    strips: dict[str, dict[tuple[int, int], dict[str, list[float]]]] = defaultdict(lambda: defaultdict(dict))
    for setting, item_id, layer, head, masses in store.query(
        "SELECT setting, item_id, layer, head, masses FROM strip_attention ORDER BY setting, item_id"
    ):
        strips[setting][(int(layer), int(head))][item_id] = [float(m) for m in (_json(masses) or [])]

    scored = {s for s, d in discovery.items() if d["source"] == "score"}
    ids = (set(discovery) | {s for (s, _) in cells} | {s for (s, _) in ksweep} | set(ceilings)) - scored
    settings = _setting_order(ids, cfg_get(config, "settings"))
    return RunData(
        run_dir=run_dir, config=config, meta=meta, settings=settings, discovery=discovery, cells=cells,
        ksweep=ksweep, headset_sizes=headset_sizes, arms=arms,
        overlap=[r for r in overlap if r["a"] not in scored and r["b"] not in scored], ceilings=ceilings,
        audit=audit, strip_attention={s: dict(v) for s, v in strips.items()}, nonfinite=nonfinite,
        random_overlap=dict(random_overlap), metric=metric, heads_of=heads_of,
        score_settings=sorted(scored, key=lambda s: (s.rsplit("-", 1)[0], (meta.get(f"score:{s}") or {}).get("order", 0), s)),
        score_points={s: meta.get(f"score:{s}") or {} for s in scored},
        score_overlap=[r for r in overlap if r["a"] in scored or r["b"] in scored],
        other_metrics=by_metric,
    )
