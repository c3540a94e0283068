"""Real-corpus loaders: strip folders and COCO strips, as discovery :class:`Item` lists.

Both give the items :func:`vheads.data.synthetic.strip_items` gives: regions ``panel1`` …
``panelN`` (left to right as listed), ``target`` = the asked panel, ``query_span`` on
"panel k" / "the <label>", a one-word (or one-label) answer, and ``meta`` with the corpus
name and the label of every panel. The asked panel of each strip is drawn with ``seed``.

Questions use the templates of :class:`vheads.data.Templates` (defaults: ordinal "what is in
panel {k} ?", answer: the panel's label; referring "which panel shows the {object} ?",
answer: the digit k; only panels whose label is unique in their strip can be asked, strips
without one are skipped).

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

import re
import zlib
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

import numpy as np
from PIL import Image

from vheads._errors import MissingFileError, VheadsError, inside_data_folder, plain_text, safe_name
from vheads._io import read_json
from vheads.data._items import Item
from vheads.data._open import BACKGROUND, MAX_ASPECT, MIN_SIDE, image_to_rgb, open_rgb  # noqa: F401 - re-exported
from vheads.data._templates import DEFAULT_TEMPLATES, Templates

QUERIES = ("ordinal", "referring")
STRIP_INDEX = "strips.json"


def _rng(seed: int, *tags: str) -> np.random.Generator:
    return np.random.default_rng([int(seed) & 0xFFFFFFFF] + [zlib.crc32(t.encode()) for t in tags])


def _check_query(query: str) -> None:
    if query not in QUERIES:
        raise VheadsError(f"unknown strip query {query!r}; choose one of: {', '.join(QUERIES)}")


def strip_item(corpus: str, query: str, item_id: str, image: Image.Image, boxes: Sequence[tuple[int, int, int, int]],
               labels: Sequence[str], asked: int, meta: dict | None = None, templates: Templates = DEFAULT_TEMPLATES) -> Item:
    """One strip question about panel ``asked`` (0-based) of a strip with these panel boxes/labels."""
    k = asked + 1
    label = labels[asked]
    question, span = templates.fill(query, k if query == "ordinal" else label)
    answer = label if query == "ordinal" else str(k)
    return Item(
        id=item_id, kind=f"strip-{query}", image=image, question=question, answer=answer,
        regions={f"panel{p + 1}": tuple(int(v) for v in b) for p, b in enumerate(boxes)},
        target=f"panel{k}", query_span=span,
        meta={"corpus": corpus, "panels": list(labels), "class": label, **(meta or {})},
    )


def item_id(prefix: str, relative: str) -> str:
    """The id of the item made from the file at ``relative`` (its path inside the data folder,
    suffix included): ``<prefix>-a/x.png``. Two files of one folder never share an id, so
    no item replaces another in the results store (``a/x.png`` and ``b/x.png``, or
    ``x.png`` and ``x.jpg``, used to both become ``…-x``)."""
    return f"{prefix}-{PurePosixPath(str(relative).replace(chr(92), '/')).as_posix()}"


def _ask(query: str, labels: Sequence[str], rng: np.random.Generator) -> int | None:
    """The asked panel (0-based): any panel (ordinal) or one with a unique label (referring)."""
    if query == "ordinal":
        return int(rng.integers(len(labels)))
    unique = [i for i, lab in enumerate(labels) if list(labels).count(lab) == 1]
    return int(rng.choice(unique)) if unique else None


#: a strip folder's setting-id abbreviation: letters, digits, ``_`` (no ``-``: ids split on it)
ABBREV = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]{0,15}")


def _relative_file(value: object, what: str) -> str:
    """A file name from data: a relative path that stays inside its folder (no ``..``, not absolute)."""
    if not isinstance(value, str) or not value or PurePosixPath(value).is_absolute() or Path(value).is_absolute() \
            or ".." in PurePosixPath(value.replace("\\", "/")).parts or "\x00" in value:
        raise VheadsError(f"{what} must be a file name relative to its folder (no '..', not absolute), got {value!r}")
    return value


def _box(value: object, what: str) -> tuple[int, int, int, int]:
    """A panel box ``[x0, y0, x1, y1]`` of whole pixels (``32.0`` is accepted, ``31.5`` refused)."""
    if not isinstance(value, list) or len(value) != 4 or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        raise VheadsError(f"{what}: 'box' must be [x0, y0, x1, y1] (4 numbers), got {value!r}")
    if not all(float(v).is_integer() for v in value):
        raise VheadsError(f"{what}: box {value} is not in whole pixels; round it (boxes are pixel edges, x1/y1 exclusive)")
    return tuple(int(v) for v in value)


def box_problem(box: tuple[int, int, int, int], w: int | None = None, h: int | None = None) -> str | None:
    """Why ``box`` is not a panel of a ``w`` x ``h`` image (None: it is; without a size, only
    its shape is checked). Boxes are ``[x0, y0, x1, y1]``, pixel edges, x1/y1 exclusive; a
    box that reads right as ``[x, y, width, height]`` is said to look like one."""
    x0, y0, x1, y1 = box
    fits = w is None or (0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h)
    if x0 < x1 and y0 < y1 and fits:
        return None
    xywh = (x0, y0, x0 + x1, y0 + y1)
    looks = min(x1, y1) > 0 and (w is None or (0 <= xywh[0] < xywh[2] <= w and 0 <= xywh[1] < xywh[3] <= h))
    hint = (f"; it looks like [x, y, width, height], which is {list(xywh)} as [x0, y0, x1, y1]" if looks else "")
    if not (x0 < x1 and y0 < y1):
        return f"box {list(box)} is empty or reversed: boxes are [x0, y0, x1, y1] (corners, x1/y1 exclusive), so x1 > x0 and y1 > y0{hint}"
    return f"box {list(box)} lies outside the {w}x{h} image (boxes are [x0, y0, x1, y1] pixel corners, x1/y1 exclusive){hint}"


def read_strip_index(folder: str | Path, index: str = STRIP_INDEX) -> dict:
    """The validated ``strips.json`` of a strip folder (images are checked for existence).

    Refused, with the file and key named: a non-object, no or an empty ``strips`` list;
    a ``corpus`` / ``abbrev`` that is not a plain name (they become parts of file names);
    an ``image`` that is absolute or climbs out of the folder; panels without a box of 4
    whole-pixel numbers or without a non-empty string label; an empty or reversed box (with a
    hint when it reads as ``[x, y, w, h]``); two panels of one strip with the same box (the
    asked panel could not be told apart); one image listed twice (its two items would share
    an id).
    """
    folder = Path(folder)
    path = folder / index
    if not folder.is_dir():
        raise MissingFileError(f"strip folder {folder} does not exist")
    if not path.is_file():
        raise MissingFileError(f"strip folder {folder} has no {index} (a JSON of panel boxes and labels)")
    data = read_json(path)
    strips = data.get("strips") if isinstance(data, dict) else None
    if not isinstance(strips, list):
        raise VheadsError(f"{path}: expected an object with a list under 'strips'")
    if not strips:
        raise VheadsError(f"strip folder {folder}: {index} lists no strips (empty corpus)")
    if data.get("corpus") is not None:
        safe_name(data["corpus"], f"{path}: key 'corpus'")
    if data.get("abbrev") is not None:
        safe_name(data["abbrev"], f"{path}: key 'abbrev'", ABBREV)
    seen: dict[str, int] = {}
    for i, s in enumerate(strips):
        if not isinstance(s, dict) or "image" not in s or not isinstance(s.get("panels"), list) or not s["panels"]:
            raise VheadsError(f"{path}: strip {i} needs an 'image' and a non-empty 'panels' list")
        image = _relative_file(s["image"], f"{path}: strip {i} 'image'")
        boxes = []
        for j, p in enumerate(s["panels"]):
            where = f"{path}: strip {i} ({image}) panel {j + 1}"
            if not isinstance(p, dict) or "box" not in p or "label" not in p:
                raise VheadsError(f"{where} needs 'box' [x0, y0, x1, y1] and 'label'")
            boxes.append(_box(p["box"], where))
            problem = box_problem(boxes[-1])
            if problem:
                raise VheadsError(f"{where}: {problem}")
            plain_text(p["label"], f"{where}: 'label'")
        if len(set(boxes)) < len(boxes):
            twin = next(b for b in boxes if boxes.count(b) > 1)
            raise VheadsError(f"{path}: strip {i} ({image}) has two panels with the same box {list(twin)}")
        first = seen.setdefault(PurePosixPath(image.replace("\\", "/")).as_posix(), i)
        if first != i:  # both items would get one id: one would replace the other in the store
            raise VheadsError(f"{path}: strips {first} and {i} both list the image {image!r}; list each image once")
        if not (folder / image).is_file():
            raise MissingFileError(f"strip folder {folder}: image {image!r} (strip {i} of {index}) is missing")
        inside_data_folder(folder, folder / image, f"strip folder {folder}: image {image!r} (strip {i} of {index})")
    return data


def strip_corpus_name(folder: str | Path, data: dict) -> str:
    """The corpus name of a strip folder: ``strips.json``'s ``corpus``, else the folder's
    name made a plain name (other characters become ``_``)."""
    if data.get("corpus") is not None:
        return safe_name(data["corpus"], f"{Path(folder) / STRIP_INDEX}: key 'corpus'")
    name = re.sub(r"[^A-Za-z0-9_.+-]", "_", Path(folder).resolve().name)[:64].lstrip("_.+-")
    return name or "strips"


def load_strip_folder(folder: str | Path, query: str, n: int | None = None, seed: int = 0, index: str = STRIP_INDEX,
                      templates: Templates = DEFAULT_TEMPLATES) -> list[Item]:
    """Items from a strip folder (format in the module docstring), at most ``n`` of them.

    Errors: no folder / index, an empty strip list, a missing image file, a panel box
    outside its image, and (referring) no strip with a uniquely labelled panel.
    """
    _check_query(query)
    folder = Path(folder)
    data = read_strip_index(folder, index)
    corpus = strip_corpus_name(folder, data)
    rng = _rng(seed, "strip-folder", query)
    items: list[Item] = []
    for i, s in enumerate(data["strips"]):
        if n is not None and len(items) >= n:
            break
        where = f"strip folder {folder}, strip {i} ({s['image']})"
        img = open_rgb(folder / s["image"], where)
        w, h = img.size
        boxes = [_box(p["box"], where) for p in s["panels"]]
        for j, box in enumerate(boxes):
            problem = box_problem(box, w, h)
            if problem:
                raise VheadsError(f"{where}: panel {j + 1} {problem}")
        labels = [str(p["label"]) for p in s["panels"]]
        asked = _ask(query, labels, rng)
        if asked is None:
            continue
        items.append(strip_item(corpus, query, item_id(f"{corpus}-{query}-s{seed}", s["image"]), img, boxes, labels, asked,
                                {"image_file": s["image"]}, templates))
    if not items:
        raise VheadsError(f"strip folder {folder}: no strip has a panel whose label is unique in its strip, so no referring question can be asked")
    return items


def find_coco_annotations(images: Path) -> Path:
    """``instances_*.json`` next to or above a COCO image folder (``annotations/`` included)."""
    cands = sorted(images.glob("instances_*.json")) + sorted((images.parent / "annotations").glob("instances_*.json")) \
        + sorted(images.parent.glob("instances_*.json"))
    if not cands:
        raise MissingFileError(f"no instances_*.json found in {images}, {images.parent / 'annotations'} or {images.parent}; pass the annotations file")
    named = [c for c in cands if images.name in c.name]  # instances_val2017.json for val2017/
    if len(named) == 1:
        return named[0]
    if len(set(cands)) > 1:
        raise VheadsError(f"several COCO annotation files found ({', '.join(map(str, cands))}); pass the one for {images}")
    return cands[0]


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _image_name(coco: dict, i: int) -> str:
    return repr(coco["images"][i]["file_name"])


def check_coco(coco: object, ann_path: Path) -> None:
    """Refuse (:class:`VheadsError`, the file and entry named) a COCO instances file whose
    ``images`` / ``annotations`` / ``categories`` lack the fields the loader reads:
    category ``id`` (int) and non-empty ``name``; image ``id`` (int) and a relative
    ``file_name``; annotation ``image_id``, ``category_id`` (ints) and ``bbox`` (4 numbers)
    or ``area`` (a number)."""
    if not isinstance(coco, dict):
        raise VheadsError(f"{ann_path} is not a COCO instances file: not a JSON object")
    for key in ("images", "annotations", "categories"):
        if not isinstance(coco.get(key), list):
            raise VheadsError(f"{ann_path} is not a COCO instances file: no {key!r} list")
    for i, c in enumerate(coco["categories"]):
        if not isinstance(c, dict) or not isinstance(c.get("id"), int) or not isinstance(c.get("name"), str) or not c["name"].strip():
            raise VheadsError(f"{ann_path}: categories[{i}] needs an integer 'id' and a non-empty 'name', got {c!r:.80}")
        plain_text(c["name"], f"{ann_path}: categories[{i}] 'name'")
    names = [c["name"] for c in coco["categories"]]
    twins = sorted({n for n in names if names.count(n) > 1})
    if twins:
        raise VheadsError(f"{ann_path}: category name {twins[0]!r} is used by several categories; panel labels must tell them apart")
    for i, im in enumerate(coco["images"]):
        if not isinstance(im, dict) or not isinstance(im.get("id"), int):
            raise VheadsError(f"{ann_path}: images[{i}] needs an integer 'id' and a 'file_name', got {im!r:.80}")
        _relative_file(im.get("file_name"), f"{ann_path}: images[{i}] 'file_name'")
    first: dict[int, int] = {}
    for i, im in enumerate(coco["images"]):
        j = first.setdefault(im["id"], i)
        if j != i:  # a later entry would silently replace the earlier one's file
            raise VheadsError(f"{ann_path}: images[{j}] ({_image_name(coco, j)}) and images[{i}] ({_image_name(coco, i)}) "
                              f"share the image id {im['id']}; every image needs its own id")
    for i, a in enumerate(coco["annotations"]):
        ok = isinstance(a, dict) and isinstance(a.get("image_id"), int) and isinstance(a.get("category_id"), int) and (
            _number(a.get("area")) and a["area"] > 0
            or isinstance(a.get("bbox"), list) and len(a["bbox"]) == 4 and all(_number(v) for v in a["bbox"]))
        if not ok:
            raise VheadsError(f"{ann_path}: annotations[{i}] needs integer 'image_id' and 'category_id' and a 'bbox' "
                              f"[x, y, w, h] or a positive 'area', got {a!r:.80}")


def load_coco_strips(images: str | Path, query: str, n: int | None = None, seed: int = 0, annotations: str | Path | None = None,
                     panel_size: int = 224, n_panels: int = 6, missing: str = "error",
                     templates: Templates = DEFAULT_TEMPLATES) -> list[Item]:
    """Six-panel strips from a local COCO image folder and its ``instances_*.json``.

    ``n``: number of strips (default: as many as the images allow; more than that is an
    error). ``missing="error"`` refuses an annotations file naming an image that is not in
    the folder; ``missing="skip"`` uses only the images present (a partial download).
    """
    _check_query(query)
    if missing not in ("error", "skip"):
        raise VheadsError(f"missing must be 'error' or 'skip', got {missing!r}")
    images = Path(images)
    if not images.is_dir():
        raise MissingFileError(f"COCO image folder {images} does not exist")
    ann_path = Path(annotations) if annotations else find_coco_annotations(images)
    if not ann_path.is_file():
        raise MissingFileError(f"COCO annotations file {ann_path} does not exist")
    coco = read_json(ann_path)
    check_coco(coco, ann_path)
    cats = {c["id"]: c["name"] for c in coco["categories"]}
    files = {im["id"]: im["file_name"] for im in coco["images"]}
    absent = sorted(f for f in files.values() if not (images / f).is_file())
    if absent and missing == "error":
        more = f" and {len(absent) - 3} more" if len(absent) > 3 else ""
        raise MissingFileError(
            f"{ann_path.name} names image {absent[0]!r}{', ' + ', '.join(map(repr, absent[1:3])) if len(absent) > 1 else ''}{more}, "
            f"not found in {images}; point to the matching image folder, or pass missing='skip' for a partial folder"
        )
    # dominant category: the largest-area non-crowd annotation of each image
    best: dict[int, tuple[float, int, int]] = {}  # image id -> (area, -ann id, category id)
    for a in coco["annotations"]:
        if a.get("iscrowd", 0) or a["image_id"] not in files or a["category_id"] not in cats:
            continue
        area = float(a["area"]) if _number(a.get("area")) and a["area"] > 0 else float(a["bbox"][2] * a["bbox"][3])
        cand = (area, -a["id"] if isinstance(a.get("id"), int) else 0, a["category_id"])
        if a["image_id"] not in best or cand > best[a["image_id"]]:
            best[a["image_id"]] = cand
    present = sorted(i for i in best if (images / files[i]).is_file())
    for i in present:
        inside_data_folder(images, images / files[i], f"COCO corpus {images}: image {files[i]!r}")
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
        raise VheadsError(
            f"COCO corpus {images}: {len(present)} annotated images make {len(strips)} strips of {n_panels} images with "
            f"distinct dominant categories; {n or 1} needed" + (" (empty corpus)" if not strips else "")
        )
    items = []
    P = int(panel_size)
    boxes = [(p * P, 0, (p + 1) * P, P) for p in range(n_panels)]
    for s, ids in enumerate(strips):
        canvas = Image.new("RGB", (P * n_panels, P))
        for p, i in enumerate(ids):
            canvas.paste(open_rgb(images / files[i], f"COCO corpus {images}").resize((P, P), Image.BICUBIC), (p * P, 0))
        labels = [cats[best[i][2]] for i in ids]
        asked = _ask(query, labels, rng)
        items.append(strip_item("coco", query, f"coco-{query}-s{seed}-{s}", canvas, boxes, labels, asked,
                                {"image_files": [files[i] for i in ids], "annotations": ann_path.name}, templates))
    return items
