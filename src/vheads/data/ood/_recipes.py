"""The two conversions of a benchmark into the 2 x 2 CERS apparatus (seed Tables 25, 29).

- **overlay** (same-image overlay): the photo in all four cells, one answer choice written
  on each copy; the cell with the right answer is the target. Questions with more than
  four choices keep the right one and three drawn wrong ones; fewer than four are skipped
  (counted in the provenance).
- **retrieval** (image retrieval): four scenes of one question family with four different
  answers; the question is one scene's, the options are the four scenes' answers, and the
  asked scene's cell is the target.

Both give the evaluation kinds of :mod:`vheads.data.builders` — ``grid-neutral`` (CERS:
the benchmark question), ``grid-oracle`` ("what is in cell k ?"), ``grid-blank`` (floor),
``class-matched`` (the original question on its own photo) and ``class-mismatched`` (the
same question, options and key on another question's photo) — so the baseline audit
(Table 22) and every test run on them unchanged. A cell's ``meta["cells"]`` entry is the
option it stands for, which is what CERS steers towards.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from vheads._errors import VheadsError
from vheads.data._items import OPTION_LETTERS, Item
from vheads.data.builders import BLANK, fit_square, grid_regions
from vheads.data.ood._records import MCQRecord
from vheads.data._templates import DEFAULT_TEMPLATES, Templates
from vheads.data.synthetic import seeded_rng

RECIPES = ("overlay", "retrieval")
KINDS = ("grid-neutral", "grid-oracle", "grid-blank", "class-matched", "class-mismatched")


def overlay_text(img: Image.Image, text: str) -> Image.Image:
    """``img`` with ``text`` on a white band along its bottom (wrapped, at most three lines)."""
    img = img.copy()
    w, h = img.size
    size = max(8, h // 9)
    font = ImageFont.load_default(size=size)
    chars = max(4, int(w / (0.55 * size)))
    lines = textwrap.wrap(text, chars)[:3] or [""]
    band = (size + 2) * len(lines) + 4
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, h - band, w, h), fill=(255, 255, 255))
    for k, line in enumerate(lines):
        draw.text((3, h - band + 2 + k * (size + 2)), line, fill=(0, 0, 0), font=font)
    return img


def draw_boxes(img: Image.Image, boxes) -> Image.Image:
    """Labelled region boxes (SpatialRGPT's "Region [0]" …) drawn onto the photo."""
    if not boxes:
        return img
    img = img.copy()
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=max(10, img.height // 30))
    for k, (label, (x0, y0, x1, y1)) in enumerate(boxes):
        colour = [(230, 30, 30), (30, 90, 230), (30, 170, 30), (230, 150, 0)][k % 4]
        draw.rectangle((x0, y0, x1, y1), outline=colour, width=max(2, img.height // 150))
        draw.text((x0 + 3, y0 + 2), label, fill=colour, font=font)
    return img


@dataclass
class Converted:
    """One converted question: four cells (image, option text), the target cell, the question."""

    cells: list[tuple[MCQRecord, str]]  # (record whose photo fills the cell, option the cell stands for)
    target: int
    question: str
    record: MCQRecord  # the question's own record
    overlay: bool


def usable(recipe: str, records: list[MCQRecord], spec: str) -> list[MCQRecord]:
    """The questions ``recipe`` can convert: four or more choices (overlay); in a family with
    four different answers (retrieval). None is an error naming what is missing."""
    if recipe == "overlay":
        pool = [r for r in records if len(r.choices) >= 4]
        if not pool:
            raise ValueError(f"{spec}: no question has four choices, which the overlay recipe needs")
        return pool
    if recipe == "retrieval":
        by_group: dict[str, list[MCQRecord]] = {}
        for r in records:
            by_group.setdefault(r.group, []).append(r)
        pool = [r for g, rs in sorted(by_group.items()) if len({x.choices[x.answer] for x in rs}) >= 4 for r in rs]
        if not pool:
            raise ValueError(f"{spec}: no question family has four different answers, which the retrieval recipe needs")
        return pool
    raise ValueError(f"unknown recipe {recipe!r}; choose one of: {', '.join(RECIPES)}")


def convert(recipe: str, records: list[MCQRecord], rng: np.random.Generator, spec: str,
            record: MCQRecord | None = None) -> Converted:
    """Build the four cells of question ``record`` (None: one drawn from :func:`usable`) by ``recipe``."""
    pool = usable(recipe, records, spec)
    if recipe == "overlay":
        r = record if record is not None else pool[int(rng.integers(len(pool)))]
        wrong = [c for k, c in enumerate(r.choices) if k != r.answer]
        texts = [r.choices[r.answer], *(str(c) for c in rng.choice(wrong, size=3, replace=False))]
        order = [int(k) for k in rng.permutation(4)]  # cell -> text
        return Converted([(r, texts[k]) for k in order], order.index(0), r.question, r, True)
    if recipe == "retrieval":
        by_group: dict[str, list[MCQRecord]] = {}
        for r in records:
            by_group.setdefault(r.group, []).append(r)
        # a family with four different answers always has three answers besides the drawn one
        r = record if record is not None else pool[int(rng.integers(len(pool)))]
        rs = by_group[r.group]
        seen, cells = {r.choices[r.answer]}, [r]
        for k in rng.permutation(len(rs)):
            o = rs[int(k)]
            if len(cells) < 4 and o.choices[o.answer] not in seen:
                cells.append(o)
                seen.add(o.choices[o.answer])
        order = [int(k) for k in rng.permutation(4)]
        return Converted([(cells[k], cells[k].choices[cells[k].answer]) for k in order], order.index(0), r.question, r, False)
    raise ValueError(f"unknown recipe {recipe!r}; choose one of: {', '.join(RECIPES)}")


def converted_item(conv: Converted, kind: str, iid: str, cell: int, rng: np.random.Generator, prov: dict,
                   other: MCQRecord | None = None, templates: Templates = DEFAULT_TEMPLATES) -> Item:
    """The item of ``kind`` made from one converted question (``other``: the photo shown by
    the mismatched arm)."""
    options = tuple(str(x) for x in rng.permutation([t for _, t in conv.cells]))
    key_text = conv.cells[conv.target][1]
    side = 2 * cell

    def photo(rec: MCQRecord, size: int, text: str | None) -> Image.Image:
        im = fit_square(draw_boxes(rec.image(), rec.boxes), size, "pad")
        return overlay_text(im, text) if text is not None else im

    base = {"task_question": conv.record.where, "provenance": prov}
    if kind in ("class-matched", "class-mismatched"):
        rec = conv.record if kind == "class-matched" else other
        image = photo(rec, side, None)
        return Item(iid, kind, image, conv.question, OPTION_LETTERS[options.index(key_text)], {"object": (0, 0, side, side)},
                    "object", options, meta={**base, "class": key_text, "images": [rec.where]})
    regions = grid_regions(cell)
    t = conv.target
    if kind == "grid-blank":
        image, shown, answer = Image.new("RGB", (side, side), BLANK), [None] * 4, OPTION_LETTERS[int(rng.integers(4))]
    else:
        image = Image.new("RGB", (side, side))
        for k, (rec, text) in enumerate(conv.cells):
            image.paste(photo(rec, cell, text if conv.overlay else None), regions[f"cell{k}"][:2])
        shown, answer = [text for _, text in conv.cells], OPTION_LETTERS[options.index(key_text)]
    question, span = conv.question, None
    if kind == "grid-oracle":
        question, span = templates.fill("cell", t)
    return Item(iid, kind, image, question, answer, regions, f"cell{t}", options, span,
                meta={**base, "cells": shown, "class": None if kind == "grid-blank" else key_text,
                      "images": [rec.where for rec, _ in conv.cells] if kind != "grid-blank" else []})


def build_items(task: str, spec: str, recipe: str, records: list[MCQRecord], kind: str, n: int, seed: int, cell: int,
                templates: Templates = DEFAULT_TEMPLATES) -> list[Item]:
    """``n`` items of ``kind`` converted from ``records`` with ``recipe`` (seeded): ``n``
    different questions, drawn without replacement. More items than the file has usable
    questions is refused, naming the count (repeated questions would enter the intervals as
    independent items)."""
    if kind not in KINDS:
        raise ValueError(f"{spec}: kind {kind!r} is not built for benchmark tasks; choose one of: {', '.join(KINDS)}")
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive number of items, got {n!r}")
    rng = seeded_rng(seed, "ood", task, kind)
    prov = {"task": task, "source": spec, "recipe": recipe, "seed": int(seed), "kind": kind, "cell": cell, "resize": "pad",
            "n_records": len(records), "skipped_fewer_than_four_choices": sum(len(r.choices) < 4 for r in records) if recipe == "overlay" else 0}
    pool = usable(recipe, records, spec)
    if n > len(pool):
        why = "with four or more choices" if recipe == "overlay" else "in a family with four different answers"
        raise VheadsError(f"{spec}: {n} items asked, but it has {len(pool)} usable questions ({why}, of "
                          f"{len(records)} read); ask for {len(pool)} or fewer (--n; n_ood / n_eval in a study config): "
                          "a question is never repeated, as repeats would count as independent items")
    drawn = [pool[int(k)] for k in rng.permutation(len(pool))[: int(n)]]
    items = []
    for i in range(int(n)):
        conv = convert(recipe, records, rng, spec, drawn[i])
        other = None
        if kind == "class-mismatched":
            rest = [r for r in records if r is not conv.record]
            if not rest:
                raise ValueError(f"{spec}: the mismatched arm needs a second question's photo")
            other = rest[int(rng.integers(len(rest)))]
        items.append(converted_item(conv, kind, f"{kind}-{task}-s{seed}-{i}", cell, rng, prov, other, templates))
    return items
