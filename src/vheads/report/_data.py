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
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# the ids are parsed in vheads._ids; HeadSetId, TestId and the parsers are re-exported for the report's modules
from vheads._ids import S_K_GLOB, HeadSetId, TestId, parse_headset_id, parse_test_id, sweep_test_id  # noqa: F401
from vheads.evaluation import AUDIT_SETS
from vheads._errors import VheadsError
from vheads.store import METRIC_COLUMNS, STORE_NAME, Store

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
    #: rank p is Besag–Clifford's over the draws in draw order (:func:`sequential_of`)
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


def cfg_get(config: Any, *names: str, default: Any = None) -> Any:
    """The first value found under any of ``names`` in a (possibly nested) config dict.

    Keys compare with ``-``, ``_`` and spaces treated alike, top level first, then
    breadth-first through nested tables, so ``n_items`` finds ``[evaluation] n-items``.
    """
    want = {_norm(n) for n in names}
    queue = [config]
    while queue:
        nxt = []
        for d in queue:
            if not isinstance(d, dict):
                continue
            for k, v in d.items():
                if _norm(k) in want:
                    return v
            nxt.extend(v for v in d.values() if isinstance(v, dict))
        queue = nxt
    return default


def _norm(key: str) -> str:
    return str(key).lower().replace("-", "_").replace(" ", "_")


def _json(value: str | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return value


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


def control_pools(meta: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """How each control's head-sets were chosen, ``{setting: {label: {mode, pool, n, R}}}``
    (:func:`vheads.evaluation.draw_controls`; meta ``control_pools``); ``{}`` for a run from
    before wave 4, whose draws may repeat a head-set."""
    v = meta.get("control_pools")
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return {}
    return v if isinstance(v, dict) else {}


def control_fallbacks(meta: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    """``setting -> control label -> fallbacks`` of every control draw of the run, from
    a run's ``meta['control_fallbacks']`` (:mod:`vheads.store`; ``meta`` as JSON-decoded
    values, like :attr:`RunData.meta`). Labels: ``layer-matched`` (the
    main draws, reused by the row groups, the β sweep and the pointing suite),
    ``layer-matched@k=K`` (a k-sweep point), ``<part>/layer-matched`` (head-set algebra; the
    setting is ``A&B``). A store of an older run recorded only the main draws, as a list per
    setting: they come back under ``layer-matched``. Any other meta key naming
    'fallback' is read the same way."""
    out: dict[str, dict[str, list[str]]] = {}
    for key, value in meta.items():
        if "fallback" not in key.lower() or not isinstance(value, (dict, list)):
            continue
        if isinstance(value, list):
            value = {"": value}
        for setting, v in value.items():
            by_label = v if isinstance(v, dict) else {"layer-matched": v}
            for label, fbs in by_label.items():
                items = [str(x) for x in (fbs if isinstance(fbs, list) else [fbs]) if x not in (None, "")]
                if items:
                    out.setdefault(str(setting), {}).setdefault(str(label), []).extend(items)
    return out


def store_meta(store: Store) -> dict[str, Any]:
    """A store's ``meta`` rows, JSON-decoded (as :attr:`RunData.meta`)."""
    return {k: _json(v) for k, v in store.query("SELECT key, value FROM meta")}


def fallback_note(meta: dict[str, Any], labels, settings=None) -> str:
    """A caption sentence naming, by setting, the control draws of ``labels`` (a label, a
    list of labels, or a predicate on a label) that fell back, so do not keep S's per-layer
    counts; '' if none. ``settings``: only these settings (default: all)."""
    match = labels if callable(labels) else (lambda lab, want=tuple([labels] if isinstance(labels, str) else labels): lab in want)
    hits = [f"{s} ({label})" for s, by in control_fallbacks(meta).items() if settings is None or s in settings
            for label in by if match(label)]
    if not hits:
        return ""
    return (f" Layer-matched fallback (S fills a layer, so those draws borrow heads from nearby layers and do not keep "
            f"S's per-layer counts; see the protocol section): {', '.join(hits)}.")


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
        if "&" in setting:  # head-set algebra pseudo-settings: see vheads.report._extras
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
