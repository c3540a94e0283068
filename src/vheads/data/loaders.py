"""Real-corpus loaders: strip folders and COCO strips, as discovery :class:`Item` lists.

Both give the items :func:`vheads.data.synthetic.strip_items` gives: regions ``panel1`` …
``panelN`` (left to right as listed), ``target`` = the asked panel, ``query_span`` on
"panel k" / "the <label>", a one-word (or one-label) answer, and ``meta`` with the corpus
name and the label of every panel. The asked panel of each strip is drawn with ``seed``.

Questions use the synthetic templates: ordinal "what is in panel {k} ?" (answer: the
panel's label), referring "which panel shows the {label} ?" (answer: the digit k; only
panels whose label is unique in their strip can be asked, strips without one are skipped).

**Strip folder** — a folder of strip images plus ``strips.json``::

    {
      "corpus": "mycomics",          # optional, default: the folder name
      "abbrev": "mc",                # optional: setting-id abbreviation (default: 2 letters)
      "strips": [
        {"image": "strip_000.png",
         "panels": [{"box": [x0, y0, x1, y1], "label": "dog"}, …]},   # pixels, x1/y1 exclusive
        …
      ]
    }

**COCO strips** — a local COCO image folder and its ``instances_*.json``: six images with
six different dominant categories (the category of the image's largest-area non-crowd
annotation) are each resized to a ``panel_size`` square and joined left to right; a
panel's label is its dominant category's name. Images are drawn without replacement.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from vheads._io import read_json
from vheads.data._items import Item

QUERIES = ("ordinal", "referring")
QUESTION_ORDINAL = "what is in panel {k} ?"
QUESTION_REFERRING = "which panel shows the {label} ?"
STRIP_INDEX = "strips.json"


def _rng(seed: int, *tags: str) -> np.random.Generator:
    return np.random.default_rng([int(seed) & 0xFFFFFFFF] + [zlib.crc32(t.encode()) for t in tags])


def _check_query(query: str) -> None:
    if query not in QUERIES:
        raise ValueError(f"unknown strip query {query!r}; choose one of: {', '.join(QUERIES)}")


def _open_image(path: Path, where: str) -> Image.Image:
    if not path.is_file():
        raise FileNotFoundError(f"{where}: image file {path} is missing")
    try:
        with Image.open(path) as im:
            return im.convert("RGB")
    except OSError as e:
        raise ValueError(f"{where}: {path} is not a readable image ({e})") from None


def strip_item(corpus: str, query: str, item_id: str, image: Image.Image, boxes: Sequence[tuple[int, int, int, int]],
               labels: Sequence[str], asked: int, meta: dict | None = None) -> Item:
    """One strip question about panel ``asked`` (0-based) of a strip with these panel boxes/labels."""
    k = asked + 1
    label = labels[asked]
    if query == "ordinal":
        question, answer, phrase = QUESTION_ORDINAL.format(k=k), label, f"panel {k}"
    else:
        question, answer, phrase = QUESTION_REFERRING.format(label=label), str(k), f"the {label}"
    start = question.index(phrase)
    return Item(
        id=item_id, kind=f"strip-{query}", image=image, question=question, answer=answer,
        regions={f"panel{p + 1}": tuple(int(v) for v in b) for p, b in enumerate(boxes)},
        target=f"panel{k}", query_span=(start, start + len(phrase)),
        meta={"corpus": corpus, "panels": list(labels), "class": label, **(meta or {})},
    )


def _ask(query: str, labels: Sequence[str], rng: np.random.Generator) -> int | None:
    """The asked panel (0-based): any panel (ordinal) or one with a unique label (referring)."""
    if query == "ordinal":
        return int(rng.integers(len(labels)))
    unique = [i for i, lab in enumerate(labels) if list(labels).count(lab) == 1]
    return int(rng.choice(unique)) if unique else None


def read_strip_index(folder: str | Path, index: str = STRIP_INDEX) -> dict:
    """The validated ``strips.json`` of a strip folder (images are checked for existence)."""
    folder = Path(folder)
    path = folder / index
    if not folder.is_dir():
        raise FileNotFoundError(f"strip folder {folder} does not exist")
    if not path.is_file():
        raise FileNotFoundError(f"strip folder {folder} has no {index} (a JSON of panel boxes and labels)")
    data = read_json(path)
    strips = data.get("strips") if isinstance(data, dict) else None
    if not isinstance(strips, list):
        raise ValueError(f"{path}: expected an object with a list under 'strips'")
    if not strips:
        raise ValueError(f"strip folder {folder}: {index} lists no strips (empty corpus)")
    for i, s in enumerate(strips):
        if not isinstance(s, dict) or "image" not in s or not s.get("panels"):
            raise ValueError(f"{path}: strip {i} needs an 'image' and a non-empty 'panels' list")
        for j, p in enumerate(s["panels"]):
            if "box" not in p or "label" not in p or len(p["box"]) != 4:
                raise ValueError(f"{path}: strip {i} ({s['image']}) panel {j + 1} needs 'box' [x0, y0, x1, y1] and 'label'")
        if not (folder / s["image"]).is_file():
            raise FileNotFoundError(f"strip folder {folder}: image {s['image']!r} (strip {i} of {index}) is missing")
    return data


def load_strip_folder(folder: str | Path, query: str, n: int | None = None, seed: int = 0, index: str = STRIP_INDEX) -> list[Item]:
    """Items from a strip folder (format in the module docstring), at most ``n`` of them.

    Errors: no folder / index, an empty strip list, a missing image file, a panel box
    outside its image, and (referring) no strip with a uniquely labelled panel.
    """
    _check_query(query)
    folder = Path(folder)
    data = read_strip_index(folder, index)
    corpus = str(data.get("corpus") or folder.name)
    rng = _rng(seed, "strip-folder", query)
    items: list[Item] = []
    for i, s in enumerate(data["strips"]):
        if n is not None and len(items) >= n:
            break
        where = f"strip folder {folder}, strip {i} ({s['image']})"
        img = _open_image(folder / s["image"], where)
        w, h = img.size
        boxes = [tuple(int(v) for v in p["box"]) for p in s["panels"]]
        for j, (x0, y0, x1, y1) in enumerate(boxes):
            if not (0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h):
                raise ValueError(f"{where}: panel {j + 1} box {(x0, y0, x1, y1)} lies outside the {w}x{h} image")
        labels = [str(p["label"]) for p in s["panels"]]
        asked = _ask(query, labels, rng)
        if asked is None:
            continue
        items.append(strip_item(corpus, query, f"{corpus}-{query}-s{seed}-{Path(s['image']).stem}", img, boxes, labels, asked,
                                {"image_file": s["image"]}))
    if not items:
        raise ValueError(f"strip folder {folder}: no strip has a panel whose label is unique in its strip, so no referring question can be asked")
    return items


def find_coco_annotations(images: Path) -> Path:
    """``instances_*.json`` next to or above a COCO image folder (``annotations/`` included)."""
    cands = sorted(images.glob("instances_*.json")) + sorted((images.parent / "annotations").glob("instances_*.json")) \
        + sorted(images.parent.glob("instances_*.json"))
    if not cands:
        raise FileNotFoundError(f"no instances_*.json found in {images}, {images.parent / 'annotations'} or {images.parent}; pass the annotations file")
    named = [c for c in cands if images.name in c.name]  # instances_val2017.json for val2017/
    if len(named) == 1:
        return named[0]
    if len(set(cands)) > 1:
        raise ValueError(f"several COCO annotation files found ({', '.join(map(str, cands))}); pass the one for {images}")
    return cands[0]


def load_coco_strips(images: str | Path, query: str, n: int | None = None, seed: int = 0, annotations: str | Path | None = None,
                     panel_size: int = 224, n_panels: int = 6, missing: str = "error") -> list[Item]:
    """Six-panel strips from a local COCO image folder and its ``instances_*.json``.

    ``n``: number of strips (default: as many as the images allow; more than that is an
    error). ``missing="error"`` refuses an annotations file naming an image that is not in
    the folder; ``missing="skip"`` uses only the images present (a partial download).
    """
    _check_query(query)
    if missing not in ("error", "skip"):
        raise ValueError(f"missing must be 'error' or 'skip', got {missing!r}")
    images = Path(images)
    if not images.is_dir():
        raise FileNotFoundError(f"COCO image folder {images} does not exist")
    ann_path = Path(annotations) if annotations else find_coco_annotations(images)
    if not ann_path.is_file():
        raise FileNotFoundError(f"COCO annotations file {ann_path} does not exist")
    coco = read_json(ann_path)
    for key in ("images", "annotations", "categories"):
        if not isinstance(coco.get(key), list):
            raise ValueError(f"{ann_path} is not a COCO instances file: no {key!r} list")
    cats = {c["id"]: c["name"] for c in coco["categories"]}
    files = {im["id"]: im["file_name"] for im in coco["images"]}
    absent = sorted(f for f in files.values() if not (images / f).is_file())
    if absent and missing == "error":
        more = f" and {len(absent) - 3} more" if len(absent) > 3 else ""
        raise FileNotFoundError(
            f"{ann_path.name} names image {absent[0]!r}{', ' + ', '.join(map(repr, absent[1:3])) if len(absent) > 1 else ''}{more}, "
            f"not found in {images}; point to the matching image folder, or pass missing='skip' for a partial folder"
        )
    # dominant category: the largest-area non-crowd annotation of each image
    best: dict[int, tuple[float, int, int]] = {}  # image id -> (area, -ann id, category id)
    for a in coco["annotations"]:
        if a.get("iscrowd", 0) or a["image_id"] not in files or a["category_id"] not in cats:
            continue
        area = float(a.get("area") or a["bbox"][2] * a["bbox"][3])
        cand = (area, -int(a.get("id", 0)), a["category_id"])
        if a["image_id"] not in best or cand > best[a["image_id"]]:
            best[a["image_id"]] = cand
    present = sorted(i for i in best if (images / files[i]).is_file())
    rng = _rng(seed, "coco", query)
    pool = [present[i] for i in rng.permutation(len(present))]
    strips: list[list[int]] = []
    while n is None or len(strips) < n:
        chosen, seen, rest = [], set(), []
        for i in pool:
            c = best[i][2]
            if len(chosen) < n_panels and c not in seen:
                chosen.append(i)
                seen.add(c)
            else:
                rest.append(i)
        if len(chosen) < n_panels:
            break
        strips.append(chosen)
        pool = rest
    if not strips or (n is not None and len(strips) < n):
        raise ValueError(
            f"COCO corpus {images}: {len(present)} annotated images make {len(strips)} strips of {n_panels} images with "
            f"distinct dominant categories; {n or 1} needed" + (" (empty corpus)" if not strips else "")
        )
    items = []
    P = int(panel_size)
    boxes = [(p * P, 0, (p + 1) * P, P) for p in range(n_panels)]
    for s, ids in enumerate(strips):
        canvas = Image.new("RGB", (P * n_panels, P))
        for p, i in enumerate(ids):
            canvas.paste(_open_image(images / files[i], f"COCO corpus {images}").resize((P, P), Image.BICUBIC), (p * P, 0))
        labels = [cats[best[i][2]] for i in ids]
        asked = _ask(query, labels, rng)
        items.append(strip_item("coco", query, f"coco-{query}-s{seed}-{s}", canvas, boxes, labels, asked,
                                {"image_files": [files[i] for i in ids], "annotations": ann_path.name}))
    return items
