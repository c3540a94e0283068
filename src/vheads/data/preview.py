"""Contact sheets of built items: check construction by eye before hours of GPU time.

``vheads data preview SOURCE --kind K [--n 8] --out sheet.png`` draws each item's image
with its regions framed (the target region in green, the others in gray), and under it
the question, the lettered options with the key marked, and the item id.

``SOURCE`` is any item source vheads knows: ``synthetic``; a class-labelled photo source
(``imagenet:DIR``, ``imagefolder:DIR``, ``hf:DIR``); a pointing-suite task
(``cvbench:DIR``, ``mcq:FILE.jsonl``, …); or a discovery corpus (``comics``, ``photo``,
``strips:DIR``, ``coco:IMAGES[,ANN.json]``, kinds ``strip-ordinal`` / ``strip-referring``).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from vheads._errors import MAX_SEED, VheadsError, check_output_file, check_range
from vheads._io import atomic_write
from vheads.data.builders import check_cell
from vheads.data._items import OPTION_LETTERS, Item

TILE = 256  # pixels: the width of one item's image on the sheet
STRIP_QUERIES = {"strip-ordinal": "ordinal", "strip-referring": "referring"}


def _strip_items(spec: str, query: str, n: int, seed: int) -> list[Item]:
    """Strips of a discovery corpus spec, read with the data loaders (as discovery reads them)."""
    from vheads.data.comics import load_comic_folders
    from vheads.data.loaders import load_coco_strips, load_strip_folder
    from vheads.data.synthetic import CORPORA, strip_items

    if spec in CORPORA:
        return strip_items(spec, query, n, seed)
    kind, _, arg = spec.partition(":")
    images, _, ann = arg.partition(",")
    readers = {"strips": lambda: load_strip_folder(arg, query, n, seed), "comics": lambda: load_comic_folders(arg, query, n, seed),
               "coco": lambda: load_coco_strips(images, query, n, seed, annotations=ann or None)}
    return readers[kind]()


DISCOVERY = ("comics", "photo", "strips", "coco")


def preview_items(source: str, kind: str, n: int = 8, seed: int = 0, cell: int = 224) -> list[Item]:
    """``n`` items of ``kind`` from ``source`` (see the module docstring)."""
    head = source.partition(":")[0]
    if source == "synthetic":
        from vheads.data.synthetic import ALL_KINDS, kind_items

        if kind not in ALL_KINDS:
            raise ValueError(f"unknown item kind {kind!r}; choose one of: {', '.join(ALL_KINDS)}")
        return kind_items(kind, n, seed)
    if head in DISCOVERY:
        if kind not in STRIP_QUERIES:
            raise ValueError(f"discovery corpus {source!r} builds strip-ordinal or strip-referring items, not {kind!r}")
        return _strip_items(source, STRIP_QUERIES[kind], n, seed)
    from vheads.data.ood import item_source

    return item_source(source, cell).items(kind, n, seed)


def _frame(img: Image.Image, item: Item, scale: float) -> Image.Image:
    draw = ImageDraw.Draw(img)
    for name, (x0, y0, x1, y1) in sorted(item.regions.items(), key=lambda kv: kv[0] == item.target):
        target = name == item.target
        draw.rectangle((x0 * scale, y0 * scale, x1 * scale - 1, y1 * scale - 1), outline=(0, 200, 0) if target else (150, 150, 150),
                       width=3 if target else 1)
    return img


def _caption(item: Item) -> list[str]:
    lines = textwrap.wrap(item.question, 42)[:4]
    if item.options:
        for letter, text in zip(OPTION_LETTERS, item.options):
            mark = "*" if letter == item.answer else " "
            lines.append(f"{mark}{letter}. {text}"[:44])
    else:
        lines.append(f"answer: {item.answer}"[:44])
    lines.append(item.id[:44])
    return lines


def contact_sheet(items: list[Item], cols: int = 4) -> Image.Image:
    """One RGB image: a grid of the items, each framed and captioned."""
    if not items:
        raise ValueError("no items to preview")
    font = ImageFont.load_default(size=12)
    tiles = []
    for it in items:
        w, h = it.image.size
        scale = TILE / w
        img = _frame(it.image.convert("RGB").resize((TILE, max(1, round(h * scale))), Image.NEAREST), it, scale)
        lines = _caption(it)
        tile = Image.new("RGB", (TILE + 8, img.height + 16 * len(lines) + 12), (255, 255, 255))
        tile.paste(img, (4, 4))
        draw = ImageDraw.Draw(tile)
        for k, line in enumerate(lines):
            draw.text((4, img.height + 8 + 16 * k), line, fill=(0, 0, 0), font=font)
        tiles.append(tile)
    cols = min(cols, len(tiles))
    rows = -(-len(tiles) // cols)
    th = max(t.height for t in tiles)
    sheet = Image.new("RGB", (cols * (TILE + 8), rows * th), (255, 255, 255))
    for k, t in enumerate(tiles):
        sheet.paste(t, ((k % cols) * (TILE + 8), (k // cols) * th))
    return sheet


#: items on one contact sheet (a larger sheet is not something a person looks at)
MAX_PREVIEW = 1000


def write_preview(source: str, kind: str, out: str | Path, n: int = 8, seed: int = 0, cell: int = 224) -> Path:
    """Build the items and write their contact sheet to ``out`` (PNG); nothing is written on error."""
    out = check_output_file(out, "--out", ".png")  # a rerun overwrites the sheet; a folder is named as one
    check_range("--n", n, 1, MAX_PREVIEW)
    check_range("--seed", seed, 0, MAX_SEED)
    check_cell(cell, "--cell")
    sheet = contact_sheet(preview_items(source, kind, n, seed, cell))
    atomic_write(out, lambda fh: sheet.save(fh, format="PNG"), mode="wb")
    return out
