"""Corpus specs and the whole discovery run: items → scores → head-set files.

A corpus spec names where the strips come from:

- ``comics``, ``photo`` — the built-in synthetic corpora (``vheads.data.synthetic``);
- ``strips:FOLDER`` — a strip folder (``vheads.data.loaders.load_strip_folder``);
- ``comics:FOLDER`` — one folder of panel images per comic (``vheads.data.comics``);
- ``coco:IMAGES`` or ``coco:IMAGES,ANNOTATIONS.json`` — COCO strips
  (``vheads.data.loaders.load_coco_strips``).
"""

from __future__ import annotations

import warnings

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vheads._errors import VheadsError, path_inside, safe_name
from vheads.data import DEFAULT_TEMPLATES, Item, Templates
from vheads.discovery._files import HeadSetRecord, check_out_folder, ids_hash, save_headset, save_per_item
from vheads.discovery._selection import resolve_k, select_heads
from vheads.discovery._source_setting import CORPUS_ABBREV, QUERIES, SOURCES

if TYPE_CHECKING:  # the scores import torch: loaded where they are computed
    from vheads.discovery._region_mass import SettingScores

SYNTHETIC = ("comics", "photo")


@dataclass
class Corpus:
    """Items of one corpus and query type, with the names a head-set file records."""

    name: str  # setting's corpus name (comics, photo, coco, a strip folder's name)
    abbrev: str  # setting-id part (cm, ph, co, …)
    id: str  # provenance: synthetic:comics, strips:/abs/folder, coco:/abs/images
    query: str
    items: list[Item]


def load_corpus(spec: str, query: str, n: int, seed: int = 0, panel_size: int = 224, templates: Templates = DEFAULT_TEMPLATES) -> Corpus:
    """The ``n`` discovery items of corpus ``spec`` (see module docstring) for ``query``,
    asked with ``templates`` (:class:`vheads.data.Templates`; the default wording if omitted)."""
    if query not in QUERIES:
        raise VheadsError(f"unknown query type {query!r}; choose one of: {', '.join(QUERIES)}")
    if spec in SYNTHETIC:
        from vheads.data.synthetic import strip_items

        return Corpus(spec, CORPUS_ABBREV[spec], f"synthetic:{spec}", query, strip_items(spec, query, n, seed, templates=templates))
    kind, _, rest = spec.partition(":")
    if kind == "strips" and rest:
        from vheads.data.loaders import load_strip_folder

        folder = Path(rest)
        name, abbrev = strip_folder_names(folder)
        items = load_strip_folder(folder, query, n, seed, templates=templates)
        return Corpus(name, abbrev, f"strips:{folder.resolve()}", query, items)
    if kind == "comics" and rest:
        from vheads.data.comics import load_comic_folders

        items = load_comic_folders(rest, query, n, seed, panel_size, templates=templates)
        return Corpus("comics", "cm", f"comics:{Path(rest).resolve()}", query, items)
    if kind == "coco" and rest:
        from vheads.data.loaders import load_coco_strips

        images, _, ann = rest.partition(",")
        items = load_coco_strips(images, query, n, seed, annotations=ann or None, panel_size=panel_size, templates=templates)
        return Corpus("coco", "co", f"coco:{Path(images).resolve()}", query, items)
    raise VheadsError(
        f"unknown corpus {spec!r}; use comics, photo (built-in), strips:FOLDER, comics:FOLDER or coco:IMAGES[,ANNOTATIONS.json]"
    )


def strip_folder_names(folder: str | Path) -> tuple[str, str]:
    """Corpus name and setting-id abbreviation of a strip folder (its ``strips.json`` read
    and checked): ``corpus`` / ``abbrev`` there, else from the folder's name."""
    from vheads.data.loaders import ABBREV, STRIP_INDEX, read_strip_index, strip_corpus_name

    folder = Path(folder)
    data = read_strip_index(folder)
    name = strip_corpus_name(folder, data)
    abbrev = data.get("abbrev") or CORPUS_ABBREV.get(name, "".join(ch for ch in name if ch.isalnum())[:2].lower() or "st")
    return name, safe_name(abbrev, f"{folder / STRIP_INDEX}: key 'abbrev'", ABBREV)


def corpus_abbrev(spec: str) -> str | None:
    """The setting-id abbreviation corpus ``spec`` gets (``None`` for an unknown spec)."""
    if spec in SYNTHETIC:
        return CORPUS_ABBREV[spec]
    kind, _, rest = spec.partition(":")
    if kind == "coco" and rest:
        return CORPUS_ABBREV["coco"]
    return strip_folder_names(rest)[1] if kind == "strips" and rest else None


def warn_split_panels(lm, corpora: Sequence[Corpus]) -> None:
    """Warn (once per corpus) when a strip's panels do not fall on whole image tokens of
    ``lm``'s grid: a token that straddles two panels is counted in one panel's region (or
    neither), so a panel's mass holds part of its neighbour's. Seen on Qwen2.5-VL (28-pixel
    tokens) with 32-pixel panels: 6 panels become 7 tokens across."""
    seen = set()
    for c in corpora:
        if c.name in seen or not c.items:
            continue
        seen.add(c.name)
        item = c.items[0]
        panels = [r for r in item.regions if r.startswith("panel")]
        lay = lm.adapter.build(item, lm.processor).layout
        split = [r for r in panels if r in lay.regions and lay.regions[r].partial]
        if not split:
            continue
        tb = lay.token_boxes  # [N, 4] in the original image's pixels
        width = lay.image_size[0]
        across = round(width / float((tb[:, 2] - tb[:, 0]).median()))
        warnings.warn(f"corpus {c.id}: this model's processor makes the {width}-pixel-wide strip {across} image tokens "
                      f"across for {len(panels)} panels, so {len(split)} of {len(panels)} panels share a token with a "
                      "neighbour and a panel's region holds part of another's (strips whose panels fall on whole tokens "
                      "avoid it)", UserWarning, stacklevel=3)


def headset_records(lm, corpora: Sequence[Corpus], scores: dict[str, SettingScores], k: int | None, mode: str, seed: int) -> list[HeadSetRecord]:
    """One :class:`HeadSetRecord` per scored setting."""
    by_key = {(c.name, c.query): c for c in corpora}
    kk = resolve_k(len(lm.attention_layers), lm.n_heads, k, mode)
    model = lm.record()  # id, revision, fingerprint, shape, a local folder's resolved path
    records = []
    for sid, sc in scores.items():
        c = by_key[(sc.setting.corpus, sc.setting.query)]
        corpus = {"id": c.id, "n_items": sc.n_items, "seed": seed, "item_ids": ids_hash(c.items), "n_empty_answers": sc.n_empty_answers}
        records.append(HeadSetRecord(select_heads(sc.scores, kk, mode, lm.attention_layers), sc.setting, sc.scores, model, corpus, seed, kk, mode))
    return records


def load_corpora(corpora: Sequence[str], queries: Sequence[str], n: int, seed: int = 0, panel_size: int = 224,
                 templates: Templates = DEFAULT_TEMPLATES) -> list[Corpus]:
    """Every corpus × query of a discovery run (no model needed), asked with ``templates``,
    refused on bad input: ``n`` < 1, two corpora with one setting-id abbreviation. A corpus
    with fewer usable items than ``n`` gives all it has, each once, with a warning."""
    if n < 1:
        raise VheadsError(f"--n must be at least 1 discovery item per corpus and query, got {n}")
    loaded = [load_corpus(spec, q, n, seed, panel_size, templates) for spec in dict.fromkeys(corpora) for q in dict.fromkeys(queries)]
    for c in loaded:  # a folder of fewer strips than --n: all of them, each once, said aloud
        if len(c.items) < n:
            warnings.warn(f"corpus {c.id} ({c.query}) has {len(c.items)} usable items, fewer than the {n} asked (--n); "
                          f"discovery uses those {len(c.items)}, none repeated (the head-set file records n_items)",
                          UserWarning, stacklevel=2)
    seen: dict[str, str] = {}
    for c in loaded:
        if seen.setdefault(c.abbrev, c.id) != c.id:
            raise VheadsError(f"corpora {seen[c.abbrev]} and {c.id} share the setting-id abbreviation {c.abbrev!r}; set 'abbrev' in a strips.json")
    return loaded


def discover_headsets(lm, corpora: Sequence[str | Corpus] = SYNTHETIC, queries: Sequence[str] = QUERIES, sources: Sequence[str] = SOURCES,
                      k: int | None = None, mode: str = "flat", n: int = 32, seed: int = 0, out: str | Path | None = None,
                      max_new_tokens: int = 4, panel_size: int = 224, progress: bool = True, force: bool = False) -> list[HeadSetRecord]:
    """Run discovery for every corpus × query × source and (with ``out``) write the files.

    ``corpora`` are specs (loaded with :func:`load_corpora`) or already loaded
    :class:`Corpus` objects. All corpora are loaded and all settings scored before
    anything is written, so bad input never leaves a partial run behind; each file is
    written atomically, inside ``out`` (checked), which must not hold another run's
    head-set files unless ``force``. Writes ``{setting}.json`` (``{setting}.per-layer.json``
    for per-layer selection) and the per-item mass ``{setting}.items.npz`` that noise
    ceilings need.
    """
    resolve_k(len(lm.attention_layers), lm.n_heads, k, mode)  # mode check before any work
    if out is not None:
        check_out_folder(out, force)
    from vheads.discovery._region_mass import score_settings

    loaded = list(corpora) if all(isinstance(c, Corpus) for c in corpora) else load_corpora(corpora, queries, n, seed, panel_size)
    warn_split_panels(lm, loaded)
    scores = score_settings(lm, {(c.name, c.query): c.items for c in loaded}, sources, max_new_tokens,
                            corpus_abbrev={c.name: c.abbrev for c in loaded}, progress=progress)
    records = headset_records(lm, loaded, scores, k, mode, seed)
    if out is not None:
        out = Path(out)
        for rec in records:
            sid = rec.setting.id
            npz = f"{sid}.items.npz"
            save_per_item(path_inside(out, npz), scores[sid].per_item, scores[sid].item_ids, lm.fingerprint)
            rec.per_item_file = npz
            save_headset(rec, path_inside(out, f"{sid}.json" if mode == "flat" else f"{sid}.per-layer.json"))
    return records
