"""The built-in synthetic world: six object classes, strips, grids, single objects, text.

Every generator is deterministic by ``seed`` and returns :class:`~vheads.data.Item` lists
whose regions are the pixel boxes of the panels / cells (the drawn object always lies
fully inside its region's box).

Six classes, each one word, one colour and one bold pattern (separable by colour alone):

=========  =======  ====================
word       colour   pattern
=========  =======  ====================
disk       red      filled disk
stripes    green    horizontal stripes
bars       blue     vertical bars
checker    yellow   checkerboard
ring       purple   ring
cross      orange   diagonal X
=========  =======  ====================

Two strip corpora with different image statistics:

- ``comics``: flat objects (size 16-26 px) on plain light panels with a black border.
- ``photo``: no borders; textured, noisy, muted backgrounds with gray-brown clutter
  blobs; objects of varied size (12-30 px), with colour jitter and pixel noise.

Questions (the default :class:`~vheads.data.Templates`; a study config may reword them),
with one-word answers for strips and option letters for the lettered kinds:

- ``strip-ordinal``:   "what is in panel 3 ?"           -> class word
- ``strip-referring``: "which panel shows the disk ?"  -> panel digit
- ``grid-oracle``:     "what is in cell 2 ?"  + options -> letter of that cell's class
- ``grid-neutral``:    "which object is shown ?" + options (the four shown classes)
- ``grid-blank``:      the oracle question on a blank image, key letter fixed in advance
- ``class-matched`` / ``class-mismatched``: "which object is shown ?" + options
- ``text``:            "the named object is the disk . which object is named ?" + options

The neutral grid question is the class question on purpose: on a grid it has four
equally valid answers, and which one the model gives depends on where it looks, which
is what steering measures.
"""

from __future__ import annotations

import zlib

import numpy as np
from PIL import Image

from vheads.data._items import OPTION_LETTERS, Item
from vheads.data._templates import DEFAULT_TEMPLATES, Templates

CLASSES: tuple[str, ...] = ("disk", "stripes", "bars", "checker", "ring", "cross")
COLOURS: dict[str, tuple[int, int, int]] = {
    "disk": (220, 30, 30),  # red
    "stripes": (30, 170, 30),  # green
    "bars": (30, 60, 220),  # blue
    "checker": (230, 210, 20),  # yellow
    "ring": (150, 40, 190),  # purple
    "cross": (245, 130, 0),  # orange
}
COLOUR_NAMES = {"disk": "red", "stripes": "green", "bars": "blue", "checker": "yellow", "ring": "purple", "cross": "orange"}
CORPORA = ("comics", "photo")
STRIP_QUERIES = ("ordinal", "referring")
GRID_KINDS = ("grid-neutral", "grid-oracle", "grid-blank")
CLASS_ARMS = ("matched", "mismatched")
PANEL = 32  # pixels per panel / cell: one merged image token at patch 16, merge 2
N_PANELS = 6
CLASS_IMAGE = 64  # single-object images: 2x2 merged tokens

#: every word the templates use (the tiny model's word-level vocabulary needs them)
WORDS: tuple[str, ...] = (
    *CLASSES, *COLOUR_NAMES.values(),
    "what", "is", "in", "panel", "which", "shows", "the", "cell", "object", "shown", "named",
    "?", ".", "A", "B", "C", "D", "0", "1", "2", "3", "4", "5", "6",
)



# ---- randomness ------------------------------------------------------------------------
def _rng(seed: int, *tags: str | int) -> np.random.Generator:
    """A generator fixed by ``seed`` and stable string tags (no Python ``hash``)."""
    words = [int(seed) & 0xFFFFFFFF] + [zlib.crc32(str(t).encode()) for t in tags]
    return np.random.default_rng(words)


#: public names for the other item builders (real photos, benchmarks, comics)
seeded_rng = _rng


def _check_n(n: int) -> None:
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive number of items, got {n!r}")


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; choose one of: {', '.join(allowed)}")


# ---- drawing ---------------------------------------------------------------------------
def object_mask(cls: str, size: int) -> np.ndarray:
    """Boolean [size, size] mask of class ``cls``'s bold pattern."""
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5
    c = size / 2
    d = np.sqrt((x - c) ** 2 + (y - c) ** 2)
    band = max(2, round(size / 6))
    if cls == "disk":
        return d <= size / 2
    if cls == "stripes":
        return (np.floor(y / band) % 2) == 0
    if cls == "bars":
        return (np.floor(x / band) % 2) == 0
    if cls == "checker":
        k = max(2, round(size / 4))
        return ((np.floor(x / k) + np.floor(y / k)) % 2) == 0
    if cls == "ring":
        return (d <= size / 2) & (d >= size / 2 - max(2.5, size / 5))
    if cls == "cross":
        t = max(1.5, size / 9)
        return (np.abs(x - y) <= t) | (np.abs(x + y - size) <= t)
    raise ValueError(f"unknown class {cls!r}; classes: {', '.join(CLASSES)}")


def _paint(canvas: np.ndarray, cls: str, x0: int, y0: int, size: int, colour, noise: float, rng) -> None:
    """Draw ``cls`` in a ``size`` square at (x0, y0) of ``canvas`` [H, W, 3] float."""
    m = object_mask(cls, size)
    patch = canvas[y0:y0 + size, x0:x0 + size]
    col = np.asarray(colour, dtype=np.float32)
    if noise:
        fill = col + rng.normal(0, noise, size=(size, size, 3))
    else:
        fill = np.broadcast_to(col, (size, size, 3))
    patch[m] = fill[m]


def _comics_background(h: int, w: int, rng) -> np.ndarray:
    base = rng.integers(225, 250, size=3).astype(np.float32)
    canvas = np.broadcast_to(base, (h, w, 3)).copy()
    canvas[:2, :] = canvas[-2:, :] = 20.0  # black border
    canvas[:, :2] = canvas[:, -2:] = 20.0
    return canvas


def _photo_background(h: int, w: int, rng) -> np.ndarray:
    """Muted, low-saturation texture: base tone + gradient + noise + gray-brown clutter."""
    base = rng.uniform(105, 155) + rng.uniform(-12, 12, size=3)
    gy, gx = np.mgrid[0:h, 0:w].astype(np.float32)
    grad = (gx / w - 0.5) * rng.uniform(-30, 30) + (gy / h - 0.5) * rng.uniform(-30, 30)
    canvas = base[None, None, :] + grad[..., None] + rng.normal(0, 9, size=(h, w, 3))
    for _ in range(int(rng.integers(2, 5))):  # clutter blobs
        cw, ch = (int(v) for v in rng.integers(4, 14, size=2))
        cx, cy = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        tone = rng.uniform(70, 170) + rng.uniform(-15, 15, size=3)
        if rng.random() < 0.5:
            canvas[cy:cy + ch, cx:cx + cw] = tone
        else:
            yy, xx = np.mgrid[0:ch, 0:cw]
            ell = ((xx + 0.5 - cw / 2) / (cw / 2)) ** 2 + ((yy + 0.5 - ch / 2) / (ch / 2)) ** 2 <= 1
            canvas[cy:cy + ch, cx:cx + cw][ell] = tone
    return canvas


def draw_panel(corpus: str, cls: str | None, rng, size: int = PANEL) -> np.ndarray:
    """One square panel [size, size, 3] float of ``corpus`` style holding ``cls`` (or blank)."""
    if corpus == "comics":
        canvas = _comics_background(size, size, rng)
        lo, hi, noise, jitter = round(size * 0.5), round(size * 0.81), 0.0, 0
    else:
        canvas = _photo_background(size, size, rng)
        lo, hi, noise, jitter = round(size * 0.375), round(size * 0.94), 8.0, 15
    if cls is not None:
        s = int(rng.integers(lo, hi + 1))
        margin = 3 if corpus == "comics" else 1
        x0 = int(rng.integers(margin, size - s - margin + 1))
        y0 = int(rng.integers(margin, size - s - margin + 1))
        colour = np.asarray(COLOURS[cls], dtype=np.float32) + rng.uniform(-jitter, jitter, size=3) if jitter else COLOURS[cls]
        _paint(canvas, cls, x0, y0, s, colour, noise, rng)
    return canvas


def _to_image(canvas: np.ndarray) -> Image.Image:
    return Image.fromarray(np.clip(np.rint(canvas), 0, 255).astype(np.uint8), "RGB")


# ---- strips ----------------------------------------------------------------------------
def strip_items(corpus: str, query: str, n: int, seed: int = 0, filled: int = N_PANELS,
                templates: Templates = DEFAULT_TEMPLATES) -> list[Item]:
    """Six-panel strips (1 x 6 panels of 32 px, a 192 x 32 image) with one question each.

    ``query="ordinal"`` asks "what is in panel k ?" (answer: the class word);
    ``query="referring"`` asks "which panel shows the <class> ?" (answer: the digit k).
    Each class appears at most once per strip. ``filled`` < 6 leaves the other panels
    blank (the training curriculum); the asked panel is always filled. Regions
    ``panel1`` .. ``panel6``; ``target`` is the asked panel; ``query_span`` covers
    "panel k" / "the <class>" (``templates`` may word the questions otherwise); ``meta`` holds the corpus and the class of each panel
    (``None`` for a blank panel).
    """
    _check_choice("corpus", corpus, CORPORA)
    _check_choice("strip query", query, STRIP_QUERIES)
    _check_n(n)
    if not 1 <= filled <= N_PANELS:
        raise ValueError(f"filled must be between 1 and {N_PANELS} panels, got {filled!r}")
    kind = f"strip-{query}"
    rng = _rng(seed, "strip", corpus, query, filled)
    items = []
    for i in range(n):
        classes = [str(c) for c in rng.permutation(CLASSES)]
        full = sorted(int(p) for p in rng.choice(N_PANELS, size=filled, replace=False))
        panels: list[str | None] = [classes[p] if p in full else None for p in range(N_PANELS)]
        k = int(rng.choice(full)) + 1  # asked panel, 1-based
        canvas = np.concatenate([draw_panel(corpus, c, rng) for c in panels], axis=1)
        cls = panels[k - 1]
        question, span = templates.fill(query, k if query == "ordinal" else cls)
        answer = cls if query == "ordinal" else str(k)
        regions = {f"panel{p + 1}": (p * PANEL, 0, (p + 1) * PANEL, PANEL) for p in range(N_PANELS)}
        items.append(Item(
            id=f"{kind}-{corpus}-s{seed}-f{filled}-{i}", kind=kind, image=_to_image(canvas), question=question,
            answer=answer, regions=regions, target=f"panel{k}", query_span=span,
            meta={"corpus": corpus, "panels": panels, "class": cls, "filled": filled},
        ))
    return items


# ---- grids -----------------------------------------------------------------------------
def grid_items(kind: str, n: int, seed: int = 0, templates: Templates = DEFAULT_TEMPLATES) -> list[Item]:
    """2 x 2 grids of 32 px cells (64 x 64) showing four distinct classes (comics style).

    Regions ``cell0`` .. ``cell3`` (row-major); options are the four shown class words in
    a shuffled order. ``grid-neutral`` asks "which object is shown ?" (answer: the letter
    of the randomly drawn target cell's class; the question itself has four valid
    answers); ``grid-oracle`` asks "what is in cell k ?" (answer: that cell's letter;
    ``query_span`` covers "cell k"); ``grid-blank`` asks the oracle question of a blank
    image with the key letter drawn in advance (the floor: expect P(key) = 0.25).
    """
    _check_choice("grid kind", kind, GRID_KINDS)
    _check_n(n)
    rng = _rng(seed, "grid", kind)
    regions = {f"cell{r * 2 + c}": (c * PANEL, r * PANEL, (c + 1) * PANEL, (r + 1) * PANEL) for r in range(2) for c in range(2)}
    items = []
    for i in range(n):
        cells = [str(c) for c in rng.choice(CLASSES, size=4, replace=False)]
        options = tuple(str(c) for c in rng.permutation(cells))
        t = int(rng.integers(4))
        if kind == "grid-blank":
            canvas = np.full((2 * PANEL, 2 * PANEL, 3), 128.0)
            answer = OPTION_LETTERS[int(rng.integers(4))]
            shown: list[str | None] = [None] * 4
        else:
            rows = [np.concatenate([draw_panel("comics", cells[r * 2 + c], rng) for c in range(2)], axis=1) for r in range(2)]
            canvas = np.concatenate(rows, axis=0)
            answer = OPTION_LETTERS[options.index(cells[t])]
            shown = list(cells)
        if kind == "grid-neutral":
            question, span = templates.fill("object")
        else:
            question, span = templates.fill("cell", t)
        items.append(Item(
            id=f"{kind}-s{seed}-{i}", kind=kind, image=_to_image(canvas), question=question, answer=answer,
            regions=dict(regions), target=f"cell{t}", options=options, query_span=span,
            meta={"cells": shown, "class": cells[t] if kind != "grid-blank" else None},
        ))
    return items


# ---- single objects --------------------------------------------------------------------
def _single_object_canvas(cls: str | None, corpus: str, rng) -> np.ndarray:
    return draw_panel(corpus, cls, rng, size=CLASS_IMAGE)


def class_items(arm: str, n: int, seed: int = 0, templates: Templates = DEFAULT_TEMPLATES) -> list[Item]:
    """One object per 64 x 64 image (comics or photo style), "which object is shown ?".

    ``matched``: the shown class is one of the four options; the key is its letter.
    ``mismatched``: the shown class is excluded from the options and the key letter is
    drawn in advance (expect P(key) = 0.25). Region ``object`` is the whole image.
    """
    _check_choice("class arm", arm, CLASS_ARMS)
    _check_n(n)
    kind = f"class-{arm}"
    rng = _rng(seed, "class", arm)
    items = []
    for i in range(n):
        shown = str(rng.choice(CLASSES))
        corpus = str(rng.choice(CORPORA))
        others = [c for c in CLASSES if c != shown]
        if arm == "matched":
            options = tuple(str(c) for c in rng.permutation([shown, *rng.choice(others, size=3, replace=False)]))
            answer = OPTION_LETTERS[options.index(shown)]
        else:
            options = tuple(str(c) for c in rng.permutation(rng.choice(others, size=4, replace=False)))
            answer = OPTION_LETTERS[int(rng.integers(4))]
        canvas = _single_object_canvas(shown, corpus, rng)
        items.append(Item(
            id=f"{kind}-s{seed}-{i}", kind=kind, image=_to_image(canvas), question=templates.fill("object")[0], answer=answer,
            regions={"object": (0, 0, CLASS_IMAGE, CLASS_IMAGE)}, target="object", options=options,
            meta={"class": shown, "corpus": corpus},
        ))
    return items


def text_items(n: int, seed: int = 0, templates: Templates = DEFAULT_TEMPLATES) -> list[Item]:
    """Text-solvable four-option items: "the named object is the <cls> . which object is named ?".

    The image (64 x 64, as for class items, so the layout matches) is blank or shows a
    class that is not among the options, so only the text gives the answer.
    """
    _check_n(n)
    rng = _rng(seed, "text")
    items = []
    for i in range(n):
        named = str(rng.choice(CLASSES))
        others = [c for c in CLASSES if c != named]
        distract = [str(c) for c in rng.choice(others, size=3, replace=False)]
        options = tuple(str(c) for c in rng.permutation([named, *distract]))
        unused = [c for c in CLASSES if c not in options]
        shown = str(rng.choice(unused)) if rng.random() < 0.5 else None
        canvas = _single_object_canvas(shown, str(rng.choice(CORPORA)), rng)
        question, _ = templates.fill("text", named)
        items.append(Item(
            id=f"text-s{seed}-{i}", kind="text", image=_to_image(canvas), question=question,
            answer=OPTION_LETTERS[options.index(named)], regions={"object": (0, 0, CLASS_IMAGE, CLASS_IMAGE)},
            target=None, options=options, meta={"class": named, "shown": shown},
        ))
    return items


#: every question kind the generators make, with a function (n, seed) -> items
def kind_items(kind: str, n: int, seed: int = 0, corpus: str = "comics", templates: Templates = DEFAULT_TEMPLATES) -> list[Item]:
    """Items of any kind by name (strip kinds take ``corpus``)."""
    if kind in ("strip-ordinal", "strip-referring"):
        return strip_items(corpus, kind.split("-")[1], n, seed, templates=templates)
    if kind in GRID_KINDS:
        return grid_items(kind, n, seed, templates)
    if kind in ("class-matched", "class-mismatched"):
        return class_items(kind.split("-")[1], n, seed, templates)
    if kind == "text":
        return text_items(n, seed, templates)
    raise ValueError(f"unknown item kind {kind!r}; choose one of: {', '.join(ALL_KINDS)}")


ALL_KINDS = ("strip-ordinal", "strip-referring", *GRID_KINDS, "class-matched", "class-mismatched", "text")
