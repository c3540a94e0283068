"""Score points as discovery settings: named points, their setting ids, head-set records.

A named point is a registered preset (``vrh``) or a custom point, optionally named
(``outhit:rows=out,keys=hit``; unnamed, the name is its non-default values joined by ``_``:
``rows=out,keys=hit`` → ``out_hit``). On a corpus and query type it is a
:class:`ScoreSetting` with an id like the seed's: ``{corpus}-{query}-{name}`` (``cm-ord-vrh``
beside ``cm-ord-last``). A name holds no ``-`` (ids split on it) and is none of the seed's
source parts (``last``, ``qsp``, ``out``), so a score never shadows a grid setting.

:func:`discover_scores` is ``vheads discover --score``: every corpus × query × point scored
(greedy answers generated once per item for all points that read the ``out`` rows), then the
files written: ``{setting}.json`` (``vheads.headset/1``, the point's full axes under
``setting.score``) and ``{setting}.items.npz``, each item's share of the score
(:attr:`PointResult.per_item`), which the noise ceilings read as they read region mass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from vheads._errors import VheadsError, path_inside
from vheads.data import Item
from vheads.discovery._files import HeadSetRecord, check_out_folder, ids_hash, save_headset, save_per_item
from vheads.discovery._point_setting import ScoreSetting
from vheads.discovery._score_space import PointResult, ScorePoint, aggregate, point_statistics
from vheads._headset import HeadSet


def record_k(res: PointResult) -> int:
    """The selection size a file records: the point's k, or for ``elbow`` (k unused) the heads kept."""
    return len(res.heads) if res.point.select == "elbow" else res.k


def score_items(lm, items: Sequence[Item], points: Sequence[ScorePoint], max_new_tokens: int = 4, engine=None,
                labels: Sequence[str] | None = None, skip_empty: bool = False) -> tuple[list[PointResult | str], list[str], int]:
    """Every point's :class:`PointResult` on ``items`` (greedy answers made once, when a point
    reads the ``out`` rows; an empty one teacher-forces the end-of-turn token), the item ids and
    the count of empty answers. A selection of nothing is a :class:`VheadsError` that starts
    with the point's label (``labels``, one per point: ``setting cm-ord-vrh``); with
    ``skip_empty`` that point's entry is the error's text instead (the caller records it)."""
    from vheads.discovery._region_mass import _eos_text, greedy_answer
    from vheads.engine import Engine

    if not items:
        raise VheadsError("no items to score")
    engine = engine or Engine(lm)
    answers: list[str | None] = [None] * len(items)
    n_empty = 0
    if any(p.rows == "out" for p in points):
        answers = [greedy_answer(lm, lm.adapter.build(it, lm.processor), max_new_tokens) for it in items]
        n_empty = sum(not a for a in answers)
        answers = [a or _eos_text(lm) for a in answers]
    results = []
    for i, point in enumerate(points):
        stats = point_statistics(engine, items, answers if point.rows == "out" else [None] * len(items), point)
        try:
            results.append(aggregate(stats, point, lm.n_heads, tuple(lm.attention_layers), lm.n_layers))
        except VheadsError as e:
            msg = f"{labels[i]}: {e}" if labels else str(e)
            if not skip_empty:
                raise VheadsError(msg) from None
            results.append(msg)
    return results, [it.id for it in items], n_empty


def discover_scores(lm, corpora: Sequence, named: Sequence[tuple[str, ScorePoint]], k: int | None = None, seed: int = 0,
                    out: str | Path | None = None, max_new_tokens: int = 4, progress: bool = True,
                    force: bool = False) -> list[HeadSetRecord]:
    """``vheads discover --score``: every loaded :class:`~vheads.discovery.Corpus` × named point
    (``k`` given: it replaces every point's own k), all scored before anything is written, then
    (with ``out``) one head-set file and one per-item file each, as :func:`discover_headsets` writes."""
    from tqdm.auto import tqdm

    if out is not None:
        check_out_folder(out, force)
    names = [n for n, _ in named]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise VheadsError(f"--score: the name {twice[0]!r} is given twice; give each point its own name (NAME:axis=value,...)")
    named = [(n, p if k is None else replace(p, k=k)) for n, p in named]
    model = lm.record()  # id, revision, fingerprint, shape, a local folder's resolved path
    records, per_item = [], {}
    from vheads.discovery._discover import warn_split_panels

    warn_split_panels(lm, corpora)
    for c in tqdm(corpora, desc="scores", unit="corpus", disable=not progress):
        settings = [ScoreSetting(c.name, c.query, n, p, c.abbrev) for n, p in named]
        results, ids, n_empty = score_items(lm, c.items, [p for _, p in named], max_new_tokens,
                                            labels=[f"--score, setting {st.id}" for st in settings])
        for st, res in zip(settings, results):
            corpus = {"id": c.id, "n_items": len(ids), "seed": seed, "item_ids": ids_hash(c.items), "n_empty_answers": n_empty}
            hs = HeadSet(res.heads, lm.n_layers, lm.n_heads, tuple(lm.attention_layers) if "attention_layers" in model else None)
            records.append(HeadSetRecord(hs, st, res.scores, model, corpus, seed, record_k(res), st.point.select, sinks=res.sinks))
            per_item[st.id] = (res.per_item, ids)
    if out is not None:
        out = Path(out)
        for rec in records:
            sid = rec.setting.id
            save_per_item(path_inside(out, f"{sid}.items.npz"), per_item[sid][0], per_item[sid][1], lm.fingerprint)
            rec.per_item_file = f"{sid}.items.npz"
            save_headset(rec, path_inside(out, f"{sid}.json"))
    return records
