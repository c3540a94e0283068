"""Evaluation items on real, class-labelled photos: the synthetic world's item kinds, seeded.

:class:`RealItems` builds the kinds of :mod:`vheads.data.synthetic` from a
:class:`~vheads.data.sources.ClassSource` (ImageNet, an image folder, a Hugging Face
dataset), with the same questions, regions, keys and ``meta`` fields, so every test,
control and report section runs on them unchanged:

- ``grid-neutral`` (CERS): a 2 x 2 grid of four photos of four classes with distinct
  names, "which object is shown ?", the four names as lettered options; the key is the
  letter of a target cell drawn in advance.
- ``grid-oracle`` (NCS_grid, audit "oracle"): the same grid, "what is in cell k ?".
- ``grid-blank`` (audit "floor"): the oracle question on a blank grid, key drawn in advance.
- ``class-matched`` / ``class-mismatched`` (NCS): one photo; its class is among the
  options (key = its letter), or excluded from them (key letter drawn in advance).
- ``text``: "the named object is the X . which object is named ?" over a blank image or a
  photo of a class that is not an option.

Each photo becomes a ``cell`` x ``cell`` square by the ``resize`` policy: ``crop`` (scale
the short side to ``cell``, cut the centre square) or ``pad`` (scale the long side to
``cell``, pad with gray). Single-photo items are ``2*cell`` squares, so they carry as many
image tokens as a grid. Choose ``cell`` so a grid needs no further resizing by the model:
224 is a multiple of the 28-pixel (Qwen2/2.5-VL) and 32-pixel (Qwen3-VL) merged patches,
so each cell maps to whole image tokens (``vheads.models`` layouts).

Every draw comes from ``seed`` and the kind (never from Python's ``hash``): the same
source, seed and settings give byte-identical images. ``meta["provenance"]`` records the
source, its class list and fingerprint, the seed, cell size and resize policy, and
``meta["images"]`` where each shown photo lies (file, or file and row).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from PIL import Image, ImageOps

from vheads._errors import VheadsError
from vheads.data._items import OPTION_LETTERS, Item
from vheads.data.sources import ClassSource, ImageRef, open_source
from vheads.data._templates import DEFAULT_TEMPLATES, Templates
from vheads.data.synthetic import seeded_rng

KINDS = ("grid-neutral", "grid-oracle", "grid-blank", "class-matched", "class-mismatched", "text")
RESIZE_POLICIES = ("crop", "pad")
BLANK = (128, 128, 128)


def fit_square(img: Image.Image, size: int, policy: str) -> Image.Image:
    """``img`` as a ``size`` square: ``crop`` = scale short side, centre crop; ``pad`` =
    scale long side, centre on gray. Bicubic resampling (deterministic)."""
    if policy == "crop":
        return ImageOps.fit(img, (size, size), method=Image.BICUBIC, centering=(0.5, 0.5))
    if policy == "pad":
        return ImageOps.pad(img, (size, size), method=Image.BICUBIC, color=BLANK, centering=(0.5, 0.5))
    raise ValueError(f"unknown resize policy {policy!r}; choose one of: {', '.join(RESIZE_POLICIES)}")


def grid_regions(cell: int) -> dict[str, tuple[int, int, int, int]]:
    """``cell0`` … ``cell3`` (row-major) of a 2 x 2 grid of ``cell``-pixel squares."""
    return {f"cell{r * 2 + c}": (c * cell, r * cell, (c + 1) * cell, (r + 1) * cell) for r in range(2) for c in range(2)}


#: the largest grid cell in pixels: a 2 x 2 grid is then 4096 pixels a side (a larger cell is
#: a typo, and its images would not fit in memory)
MAX_CELL = 2048


def check_cell(cell: object, what: str = "cell size") -> int:
    """``cell`` if it is a whole number of pixels in 8 … :data:`MAX_CELL`, else :class:`VheadsError`."""
    if isinstance(cell, bool) or not isinstance(cell, int) or not 8 <= cell <= MAX_CELL:
        raise VheadsError(f"{what} must be 8 to {MAX_CELL} pixels, got {cell!r}")
    return cell


@dataclass(frozen=True)
class RealItems:
    """Evaluation items from a class-labelled source (see the module docstring).

    ``source``: ``imagenet:DIR``, ``imagefolder:DIR`` or ``hf:DIR[,SPLIT]``; ``classes`` /
    ``exclude``: the path of a class list / exclusion list file ("" = none); ``groups``: a
    file of confusable groups, one a line, members (ids or names) separated by commas —
    classes of one group never share an item (e.g. the 120 dog breeds). ``templates``
    words the questions.
    """

    source: str
    classes: str = ""
    exclude: str = ""
    groups: str = ""
    cell: int = 224
    resize: str = "crop"
    templates: Templates = DEFAULT_TEMPLATES

    def __post_init__(self) -> None:
        if self.resize not in RESIZE_POLICIES:
            raise ValueError(f"unknown resize policy {self.resize!r}; choose one of: {', '.join(RESIZE_POLICIES)}")
        check_cell(self.cell)

    def open(self) -> ClassSource:
        return _open_cached(self.source, self.classes, self.exclude, self.groups)

    def items(self, kind: str, n: int, seed: int = 0) -> list[Item]:
        """``n`` items of ``kind`` drawn with ``seed``; every shown photo is opened (and so
        checked) here, before any model work."""
        if kind not in KINDS:
            raise ValueError(f"unknown item kind {kind!r} for real images; choose one of: {', '.join(KINDS)}")
        if not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be a positive number of items, got {n!r}")
        src = self.open()
        need = 5 if kind == "class-mismatched" else 4
        have = len(_draw_classes(src, None, len(src.classes), strict=False))
        if have < need:
            raise ValueError(f"{src.spec}: {kind} items need {need} classes with distinct names (and confusable groups), "
                             f"the source has {have}")
        prov = {**src.provenance(), "seed": int(seed), "kind": kind, "cell": self.cell, "resize": self.resize}
        rng = seeded_rng(seed, "real", kind)
        return [self._item(src, kind, i, int(seed), rng, prov) for i in range(int(n))]

    # ---- one item ------------------------------------------------------------------------------
    def _item(self, src: ClassSource, kind: str, i: int, seed: int, rng: np.random.Generator, prov: dict) -> Item:
        iid = f"{kind}-{src.kind}-s{seed}-{i}"
        side = 2 * self.cell
        if kind.startswith("grid-"):
            cells = _draw_classes(src, rng, 4)
            names = [src.names[c] for c in cells]
            options = tuple(str(x) for x in rng.permutation(names))
            t = int(rng.integers(4))
            question, span = self.templates.fill("object") if kind == "grid-neutral" else self.templates.fill("cell", t)
            if kind == "grid-blank":
                image, shown, refs = Image.new("RGB", (side, side), BLANK), [None] * 4, []
                answer = OPTION_LETTERS[int(rng.integers(4))]
            else:
                refs = [_draw_image(src, c, rng) for c in cells]
                image = Image.new("RGB", (side, side))
                for k, ref in enumerate(refs):
                    image.paste(fit_square(src.open(ref), self.cell, self.resize), grid_regions(self.cell)[f"cell{k}"][:2])
                shown, answer = names, OPTION_LETTERS[options.index(names[t])]
            return Item(iid, kind, image, question, answer, grid_regions(self.cell), f"cell{t}", options, span, meta={
                "cells": shown, "class": None if kind == "grid-blank" else names[t], "class_ids": cells,
                "images": [r.where() for r in refs], "provenance": prov})
        if kind in ("class-matched", "class-mismatched"):
            shown_id = _draw_classes(src, rng, 1)[0]
            shown = src.names[shown_id]
            if kind == "class-matched":
                others = [src.names[c] for c in _draw_classes(src, rng, 3, taken=[shown_id])]
                options = tuple(str(x) for x in rng.permutation([shown, *others]))
                answer = OPTION_LETTERS[options.index(shown)]
            else:
                options = tuple(src.names[c] for c in _draw_classes(src, rng, 4, taken=[shown_id]))
                answer = OPTION_LETTERS[int(rng.integers(4))]
            ref = _draw_image(src, shown_id, rng)
            image = fit_square(src.open(ref), side, self.resize)
            return Item(iid, kind, image, self.templates.fill("object")[0], answer, {"object": (0, 0, side, side)}, "object", options, meta={
                "class": shown, "class_ids": [shown_id], "images": [ref.where()], "provenance": prov})
        # text-solvable arm
        named_id = _draw_classes(src, rng, 1)[0]
        named = src.names[named_id]
        option_ids = [named_id, *_draw_classes(src, rng, 3, taken=[named_id])]
        options = tuple(str(x) for x in rng.permutation([src.names[c] for c in option_ids]))
        # a photo that shows no option (nor a class confusable with one)
        unused = _draw_classes(src, None, len(src.classes), taken=option_ids, strict=False)
        shown_id = unused[int(rng.integers(len(unused)))] if unused and rng.random() < 0.5 else None
        refs = [_draw_image(src, shown_id, rng)] if shown_id is not None else []
        image = fit_square(src.open(refs[0]), side, self.resize) if refs else Image.new("RGB", (side, side), BLANK)
        question, _ = self.templates.fill("text", named)
        return Item(iid, "text", image, question, OPTION_LETTERS[options.index(named)], {"object": (0, 0, side, side)}, None,
                    options, meta={"class": named, "shown": src.names[shown_id] if shown_id else None,
                                   "images": [r.where() for r in refs], "provenance": prov})


def _draw_classes(src: ClassSource, rng: np.random.Generator | None, k: int, taken: list[str] = (), strict: bool = True) -> list[str]:
    """``k`` class ids that share neither a display name nor a confusable group with each
    other or with the ``taken`` ids (ImageNet's two "crane"s, or two dog breeds of one group,
    never share an item). ``rng=None`` scans in class order; ``strict=False`` returns as many
    as fit instead of raising."""
    out, used = [], {key for c in taken for key in _keys(src, c)}
    order = range(len(src.classes)) if rng is None else rng.permutation(len(src.classes))
    for j in order:
        c = src.classes[int(j)]
        if c in taken or used & _keys(src, c):
            continue
        out.append(c)
        used |= _keys(src, c)
        if len(out) == k:
            return out
    if strict:
        raise ValueError(f"{src.spec}: fewer than {k + len(taken)} classes with distinct names and confusable groups")
    return out


def _keys(src: ClassSource, c: str) -> set[tuple[str, str]]:
    return {("name", src.names[c]), ("group", src.groups.get(c, "class:" + c))}


def _draw_image(src: ClassSource, cls: str, rng: np.random.Generator) -> ImageRef:
    refs = src.images[cls]
    return refs[int(rng.integers(len(refs)))]


@lru_cache(maxsize=4)
def _open_cached(spec: str, classes: str, exclude: str, groups: str) -> ClassSource:
    """A source is listed once per process (an ILSVRC train folder has 1.28 M files); its
    folder and list files are not reread if they change while the process runs."""
    return open_source(spec, classes or None, exclude or None, groups or None)
