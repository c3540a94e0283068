"""Discovery: the scores ``s[l,h]`` of every setting (corpus × query × attention source, and
the published score points beside the grid) and its head-set, the top-k (DESIGN.md
"Discovery score"). One unit per corpus × query (the score points: one per corpus × query of
``score_on``, run first: a selection that keeps no head stops the run before the grid's work)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from vheads.study._scores import DEFAULT_SCORES, compute_score_unit, score_units, validate_scores
from vheads.study._stage import CHECK_PATHS, Key, Stage, register_stage

STRIP_FIGURE_ITEMS = 3  # strips per setting whose top heads' attention is stored for figures
STRIP_FIGURE_HEADS = 4
_json = json.dumps


def _png(img) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()

KEYS = (
    Key("corpora", ["comics", "photo"], "comics, photo (built-in), strips:FOLDER, comics:FOLDER, coco:IMAGES[,ANNOTATIONS.json]",
        gap=4),
    Key("queries", ["ordinal", "referring"]),
    Key("sources", ["last", "qspan", "out"]),
    Key("n_discovery", 48, "discovery items per corpus x query"),
    Key("k", 0, "head-set size; 0 = scaled to the model (100 of 1,152 heads)"),
    Key("selection", "flat", "flat | per-layer"),
    Key("scores", DEFAULT_SCORES, 'published score points beside the grid ([] = none): presets,\n'
        '"NAME:rows=out,keys=hit" or { name = "outhit", rows = "out", keys = "hit" } (axes: docs/scores.md)',
        later=True, type=list),
    Key("score_on", "first", "the scores' corpus x query: first (first corpus and query: cm-ord-gaze, ...) | all", later=True),
)


def validate_discovery(cfg, bad) -> None:
    """Query types, sources and corpora known (a corpus folder exists and, for strips, its
    ``strips.json`` reads), sizes in range, the score points well-formed."""
    from vheads._errors import MAX_ITEMS, VheadsError
    from vheads.discovery import QUERIES, SOURCES

    for q in cfg.queries:
        if q not in QUERIES:
            bad("queries", f"unknown query type {q!r}; choose from {', '.join(QUERIES)}")
    for s in cfg.sources:
        if s not in SOURCES:
            bad("sources", f"unknown attention source {s!r}; choose from {', '.join(SOURCES)}")
    for c in cfg.corpora:
        kind, _, rest = c.partition(":")
        if c in ("comics", "photo"):
            continue
        if kind in ("strips", "coco", "comics") and rest:
            folder = Path(rest.split(",")[0])
            if CHECK_PATHS.get() and not folder.is_dir():
                bad("corpora", f"corpus folder {str(folder)!r} does not exist")
            if kind == "strips" and CHECK_PATHS.get():
                from vheads.discovery import strip_folder_names

                try:
                    strip_folder_names(folder)  # strips.json read and checked: names, files, boxes
                except VheadsError as e:
                    bad("corpora", str(e))
            continue
        bad("corpora", f"unknown corpus {c!r}; use comics, photo, strips:FOLDER, comics:FOLDER or coco:IMAGES[,ANNOTATIONS.json]")
    if not cfg.corpora or not cfg.queries or not cfg.sources:
        bad("corpora", "a study needs at least one corpus, query type and source")
    if cfg.n_discovery < 2:
        bad("n_discovery", f"must be at least 2, got {cfg.n_discovery}")
    if cfg.n_discovery > MAX_ITEMS:
        bad("n_discovery", f"{cfg.n_discovery} is more than {MAX_ITEMS:,}")
    if cfg.k < 0:
        bad("k", f"must be 0 (scaled to the model) or positive, got {cfg.k}")
    if cfg.selection not in ("flat", "per-layer"):
        bad("selection", f"must be flat or per-layer, got {cfg.selection!r}")
    validate_scores(cfg, bad)
    for key in ("corpora", "queries", "sources"):
        values = getattr(cfg, key)
        twice = sorted({v for v in values if values.count(v) > 1})
        if twice:
            bad(key, f"{twice[0]!r} is listed twice")
    if any(c.startswith("strips:") for c in cfg.corpora):
        from vheads.discovery import corpus_abbrev

        seen: dict[str, str] = {}
        for c in cfg.corpora:
            a = corpus_abbrev(c)
            if a is not None and seen.setdefault(a, c) != c:
                bad("corpora", f"{seen[a]} and {c} share the setting-id abbreviation {a!r}; set 'abbrev' in a strips.json")


def setting_ids(cfg) -> list[str]:
    """The ids of every setting the run discovers (the grid's corpus-query-source, then the
    score points) and the causal setting, as the study names them; a strips folder's
    abbreviation is read from its ``strips.json`` (``c<i>`` while a plan cannot read it)."""
    from vheads.causal import CAUSAL_SETTING
    from vheads.discovery import QUERY_ABBREV, SOURCE_ABBREV, corpus_abbrev
    from vheads.study._scores import score_setting_ids

    out = []
    for i, c in enumerate(cfg.corpora):
        try:
            a = corpus_abbrev(c) or ("cm" if c.startswith("comics:") else f"c{i}")
        except VheadsError:  # a strips folder a plan cannot read
            a = f"c{i}"
        out += [f"{a}-{QUERY_ABBREV[q]}-{SOURCE_ABBREV[s]}" for q in cfg.queries for s in cfg.sources
                if q in QUERY_ABBREV and s in SOURCE_ABBREV]
    out += score_setting_ids(cfg)
    if "ncs" in cfg.causal_tests:
        out.append(CAUSAL_SETTING)
    return out


def discovery_units(ctx) -> list[dict]:
    """The score points' units first, then one unit per corpus × query of the grid."""
    cfg = ctx.cfg
    return score_units(cfg) + [{"unit_id": f"discovery/{c}/{q}", "kind": "discovery", "corpus": c, "query": q}
                               for c in cfg.corpora for q in cfg.queries]


def compute_discovery(computer, unit):
    """One corpus × query: every source's scores and head-set (``discovery``), the per-item
    scores (``item_scores``: the overlap and stability stages resample them) and the top
    heads' attention over the panels of a few strips (``strip_attention``, for figures)."""
    import torch

    from vheads._seeds import derived_seed
    from vheads.discovery import load_corpus, resolve_k, score_settings, select_heads
    from vheads.engine import positions_mask

    cfg, eng = computer.cfg, computer.engine
    lm = eng.lm
    corpus = load_corpus(unit["corpus"], unit["query"], cfg.n_discovery, derived_seed(cfg.seed, "discovery", unit["corpus"], unit["query"]),
                         templates=computer.templates)
    scores = score_settings(lm, {(corpus.name, corpus.query): corpus.items}, cfg.sources,
                            corpus_abbrev={corpus.name: corpus.abbrev}, progress=False, engine=eng)
    k = resolve_k(len(lm.attention_layers), lm.n_heads, cfg.k or None, cfg.selection)
    rows: dict[str, list[tuple]] = {"discovery": [], "item_scores": [], "strip_attention": []}
    strips = {}
    for sid, sc in scores.items():
        S = select_heads(sc.scores, k, cfg.selection, lm.attention_layers)
        rows["discovery"].append((sid, sc.setting.query, sc.setting.source, corpus.name, sc.n_items, k,
                                  _json(sc.scores.tolist()), _json([list(h) for h in S.heads])))
        rows["item_scores"] += [(sid, iid, _json(m.tolist())) for iid, m in zip(sc.item_ids, sc.per_item)]
        # attention of the setting's top heads over the six panels of a few strips
        top = sorted(S.heads, key=lambda h: -sc.scores[h])[:STRIP_FIGURE_HEADS]
        span = {"last": "last", "qspan": "query", "out": "answer"}[sc.setting.source]
        requests, shown = [], []
        for item, answer in list(zip(corpus.items, sc.answers))[:STRIP_FIGURE_ITEMS]:
            pr = lm.adapter.build(item, lm.processor, answer_text=answer or None) if sc.setting.source == "out" else lm.adapter.build(item, lm.processor)
            if sc.setting.source == "out" and not answer:
                continue
            T = pr.layout.n_tokens
            groups = torch.stack([positions_mask(T, pr.layout.regions[n].positions) for n in sorted(item.regions)])  # [panels, T]
            requests.append((pr, {"capture": positions_mask(T, pr.layout.spans[span])}, groups))
            shown.append(item)
        for item, res in zip(shown, eng.capture_many(requests)):
            m = res["capture"].numpy()  # [L, H, panels]
            for (l, h) in top:
                rows["strip_attention"].append((sid, item.id, l, h, _json(m[l, h].tolist())))
            strips[item.id] = item
    return {"rows": rows, "strips": {k: _png(v.image) for k, v in strips.items()},
            "strip_meta": {k: {"question": v.question, "target": v.target, "answer": v.answer} for k, v in strips.items()}}


def discovery_rows(ctx) -> list:
    """One capture row per strip and query source, the ``out`` source's answer rows, and one
    capture row per score point's strip."""
    from vheads.study._rows import OUT_ROWS, PlanStage
    from vheads.study._scores import score_targets

    cfg = ctx.cfg
    strips = len(cfg.corpora) * len(cfg.queries) * cfg.n_discovery
    disc = strips * (1 + (OUT_ROWS if "out" in cfg.sources else 0)) + len(score_targets(cfg)) * cfg.n_discovery
    return [PlanStage("discovery", full=disc, tokens_full=ctx.layout.strip_tokens, items=cfg.n_discovery,
                      note="capture rows (not run through the evaluation's probes)")]


STAGE = register_stage(Stage("discovery", 10, keys=KEYS, validate=validate_discovery, units=discovery_units,
                             compute={"discovery": compute_discovery, "scores": compute_score_unit}, rows=discovery_rows,
                             tables=("discovery", "item_scores", "strip_attention")))
