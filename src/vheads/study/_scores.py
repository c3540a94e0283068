"""Score points beside the grid: the config keys ``scores`` and ``score_on``, their units.

``scores = [...]`` lists presets (``"vrh"``), custom points as text (``"outhit:rows=out,keys=hit"``,
see :func:`vheads.discovery._point_setting.parse_named_score`) or as tables
(``{ name = "outhit", rows = "out", keys = "hit" }``). Each one is a setting
``{corpus}-{query}-{name}`` (``cm-ord-vrh``), discovered on the same items as the grid's
settings of that corpus and query, and from then on a setting like any other: noise ceiling
and overlaps, head-set and controls, every test, the report (its own tables; the seed's
tables and their Holm family stay the grid's).

Choices, for comparisons at equal size and a modest cost:

- ``score_on = "first"`` (default) discovers every score on the study's first corpus and
  first query type only (``cm-ord-*``: four presets add 4 settings to the 12, a third more
  evaluation forwards); ``"all"`` on every corpus × query.
- A preset runs at the study's ``k`` (0: scaled to the model, as the grid), not its paper's
  k (vrh's 20, localization's 10 are sizes for models of ~1,000 heads; ``vheads discover
  --score`` keeps them): overlaps and controls then compare head-sets of one size. A custom
  point keeps its own ``k`` when it sets one.
- The per-item scores stored for the noise ceilings are each item's share of the point's
  score (:attr:`vheads.discovery._score_space.PointResult.per_item`): a half of the items ranks
  heads as the point would (exact for flat and per-layer selection; the ceiling of an
  ``elbow`` / ``entropy`` point over ``mean`` is that of the flat top-|S| of its score).
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import Any

from vheads._errors import VheadsError

LOG = logging.getLogger("vheads.study")

DEFAULT_SCORES = ["gaze", "localization", "vrh", "sparsemm"]
SCORE_ON = ("first", "all")
#: the keys of a ``scores`` table entry
ENTRY_KEYS = ("name", "rows", "region", "norm", "keys", "across", "select", "k", "sinks", "sink_layer", "sink_factor", "entropy")
#: the entry keys that hold numbers (the others are text)
NUMBER_KEYS = {"k": "an integer", "sink_layer": "an integer", "sink_factor": "a number"}


def named_points(cfg) -> list[tuple[str, Any]]:
    """``(name, ScorePoint)`` of every ``scores`` entry as the study runs it (presets at the
    study's k); :class:`VheadsError` naming ``scores[i]`` on bad input."""
    from vheads.discovery import SCORE_REGISTRY, ScorePoint, check_score_name, parse_named_score

    if not isinstance(cfg.scores, list):
        raise VheadsError(f"config key 'scores': expected a list of presets or points, got {cfg.scores!r:.80}")
    out = []
    for i, e in enumerate(cfg.scores):
        where = f"config key 'scores[{i}]'"
        if isinstance(e, dict):
            unknown = [k for k in e if k not in ENTRY_KEYS]
            if unknown:
                raise VheadsError(f"{where}: unknown key {unknown[0]!r}; a score table takes {', '.join(ENTRY_KEYS)}")
            if "name" not in e:
                raise VheadsError(f"{where}: needs a 'name' (the last part of its setting id, e.g. {{ name = \"outhit\", rows = \"out\" }})")
            name = check_score_name(e["name"], where)
            for key, v in e.items():
                kinds = (int, float) if key == "sink_factor" else int
                if key != "name" and (not isinstance(v, str) if key not in NUMBER_KEYS else (isinstance(v, bool) or not isinstance(v, kinds))):
                    raise VheadsError(f"{where}: key {key!r} must be {NUMBER_KEYS.get(key, 'text')}, got {v!r:.80}")
            try:
                point = ScorePoint(**{k: v for k, v in e.items() if k != "name"})
            except VheadsError as err:
                raise VheadsError(f"{where}: {err}") from None
        else:
            name, point = parse_named_score(e, where)
            if e.strip() in SCORE_REGISTRY:  # a preset: the study's size, for comparisons at equal k
                point = replace(point, k=cfg.k or None)
        if point.k is None and cfg.k:
            point = replace(point, k=cfg.k)
        out.append((name, point))
    names = [n for n, _ in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise VheadsError(f"config key 'scores': the name {twice[0]!r} is listed twice; give each point its own name")
    return out


def validate_scores(cfg, bad) -> None:
    """``scores`` and ``score_on`` checked before any work (:func:`named_points`)."""
    if cfg.score_on not in SCORE_ON:
        bad("score_on", f"must be one of {', '.join(SCORE_ON)}, got {cfg.score_on!r}")
    named_points(cfg)


def ranks_per_layer(cfg):
    """``setting id -> bool``: whether its noise ceiling and overlaps take the top-k per layer —
    a score setting's own ``select`` (``per-layer``, else flat), a grid setting's the study's
    ``selection`` (a pair: its first setting's)."""
    per_layer = {n: p.select == "per-layer" for n, p in named_points(cfg)} if cfg.scores else {}

    def of(sid: str) -> bool:
        name = sid.rsplit("-", 1)[-1]
        return per_layer[name] if name in per_layer else cfg.selection == "per-layer"

    return of


def score_targets(cfg) -> list[tuple[str, str]]:
    """The (corpus spec, query) pairs the scores are discovered on (``score_on``)."""
    if not cfg.scores:
        return []
    if cfg.score_on == "first":
        return [(cfg.corpora[0], cfg.queries[0])]
    return [(c, q) for c in cfg.corpora for q in cfg.queries]


def score_setting_ids(cfg) -> list[str]:
    """The setting ids of the score points (``<corpus>-<query>-<name>``, as :class:`ScoreSetting`
    names them) on each (corpus, query) of :func:`score_targets`."""
    from vheads.discovery import CORPUS_ABBREV, QUERY_ABBREV, corpus_abbrev
    from vheads._errors import VheadsError

    out = []
    for i, (c, q) in enumerate(score_targets(cfg)):
        try:
            a = corpus_abbrev(c) or CORPUS_ABBREV.get(c.partition(":")[0], f"c{i}")
        except VheadsError:
            a = f"c{i}"
        out += [f"{a}-{QUERY_ABBREV.get(q, q)}-{name}" for name, _ in named_points(cfg)]
    return out


def score_units(cfg) -> list[dict]:
    """One discovery unit per (corpus, query) of :func:`score_targets`: all points on its items;
    ``first``: they run before the grid's units (a point that selects no head stops the study
    before any grid work, on several workers too)."""
    return [{"unit_id": f"scores/{c}/{q}", "kind": "scores", "corpus": c, "query": q, "first": True}
            for c, q in score_targets(cfg)]


def compute_score_unit(computer, unit: dict) -> dict:
    """Rows of one ``scores`` unit on ``computer``'s replica: per point a ``discovery`` row
    (source ``score``), its per-item shares (``item_scores``) and a meta row
    ``score:<setting>`` holding the point's full axes."""
    from vheads._seeds import derived_seed
    from vheads.discovery import ScoreSetting, load_corpus, record_k, score_items

    cfg, eng = computer.cfg, computer.engine
    lm = eng.lm
    corpus = load_corpus(unit["corpus"], unit["query"], cfg.n_discovery,
                         derived_seed(cfg.seed, "discovery", unit["corpus"], unit["query"]), templates=computer.templates)
    named = named_points(cfg)
    settings = [ScoreSetting(corpus.name, corpus.query, n, p, corpus.abbrev) for n, p in named]
    labels = [f"config key 'scores' ({n!r}), setting {st.id}" for (n, _), st in zip(named, settings)]
    # the default points are the field's methods, not the user's choice: one whose selection
    # keeps no head on these items is left out, with a warning and a meta row the report shows
    default = cfg.scores == DEFAULT_SCORES
    results, ids, n_empty = score_items(lm, corpus.items, [p for _, p in named], engine=eng, labels=labels, skip_empty=default)
    rows: dict[str, list[tuple]] = {"discovery": [], "item_scores": [], "meta": []}
    for st, res in zip(settings, results):
        if isinstance(res, str):
            LOG.warning("%s; this default score point is left out of the run", res)
            rows["meta"].append((f"score-left-out:{st.id}", json.dumps({"reason": res})))
            continue
        rows["discovery"].append((st.id, st.query, "score", corpus.name, len(ids), record_k(res), json.dumps(res.scores.tolist()),
                                  json.dumps([list(h) for h in res.heads])))
        rows["item_scores"] += [(st.id, iid, json.dumps(m.tolist())) for iid, m in zip(ids, res.per_item)]
        sinks = {} if res.sinks is None else {"sinks_dropped": {k: v for k, v in res.sinks.items() if k in ("n_items_with_sinks", "n_dropped", "items")}}
        rows["meta"].append((f"score:{st.id}", json.dumps({**st.to_dict()["score"], "order": sum(m[0].startswith("score:") for m in rows["meta"]),
                                                           "n_empty_answers": n_empty, **sinks})))
    return {"rows": rows}
