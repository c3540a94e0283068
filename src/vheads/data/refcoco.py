"""RefCOCO, RefCOCO+ and RefCOCOg as grounding items, read in their two published layouts.

An item is one referring expression: its image, the expression as the question (the whole
question is its query span), and the referred object's box — ``meta["box"]``, float
(x0, y0, x1, y1) pixels, the ground truth of the grounding test
(:mod:`vheads.evaluation._grounding`); ``regions["object"]`` is the same box widened to whole
pixels (an :class:`~vheads.data.Item` region). One object with three expressions gives three
items, as the benchmarks count them.

**The refer API layout** (github.com/lichengunc/refer, the datasets' original release)::

    ROOT/refcoco/refs(unc).p       ROOT/refcoco+/refs(unc).p      ROOT/refcocog/refs(umd).p
    ROOT/<dataset>/instances.json  (COCO format: images, annotations with bbox [x, y, w, h], categories)
    ROOT/images/mscoco/images/train2014/COCO_train2014_<image_id:012d>.jpg   (or IMAGES given)

``refs(<splitBy>).p`` is a pickle of a list of dicts: ``ref_id``, ``ann_id``, ``image_id``,
``split`` (train, val, testA, testB; RefCOCOg umd: train, val, test), ``sentences``
(``[{sent, raw, tokens, sent_id}]``), ``category_id``, ``file_name``, ``sent_ids``. A ref's
box is its annotation's (``ann_id``) ``bbox`` in ``instances.json``. **Reading a pickle runs
code**: it is opened with a restricted unpickler that builds plain containers only (dict,
list, tuple, str, bytes, int, float, bool, None) and refuses anything that would import or
call (:func:`load_plain_pickle`). The image file name is made from the integer ``image_id``
(COCO's own naming), never from a name read from the data.

**The Hugging Face parquet layout** (lmms-lab/RefCOCO, RefCOCOplus, RefCOCOg)::

    ROOT/data/{val,test,testA,testB}-0000K-of-0000N.parquet

with columns ``question_id``, ``image`` (struct: ``bytes`` of the encoded image, ``path``),
``question`` (an instruction, not read), ``answer`` (list of the object's referring
expressions), ``segmentation``, ``bbox`` (COCO ``[x, y, w, h]``), ``iscrowd``, ``file_name``.

Both layouts give COCO ``[x, y, w, h]`` boxes; :func:`coco_box` converts them, once, to
(x0, y0, x1, y1) = (x, y, x + w, y + h). A box may reach up to :data:`EDGE_SLACK` pixel
past the image (rounding in COCO's float boxes) and is then clipped; beyond that it is
refused, as are an empty expression, a split that does not exist and a pickle holding
anything but plain data — each in one line naming the file and the row.
"""

from __future__ import annotations

import io
import json
import math
import pickle
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

from vheads._errors import MissingFileError, VheadsError
from vheads.data._items import Item

#: how far (pixels) a box may reach past the image edge before it is refused (then clipped)
EDGE_SLACK = 1.0
#: the refer API's datasets and their default split-by (the file ``refs(<splitBy>).p``)
REFER_DATASETS = {"refcoco": "unc", "refcoco+": "unc", "refcocog": "umd"}
#: how a question is made of an expression (a study or caller may reword it)
QUESTION_FORMAT = "{expression}"


class _PlainUnpickler(pickle.Unpickler):
    """Builds plain containers only: any global (a class, a function) is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"the pickle names {module}.{name}, not plain data")


def load_plain_pickle(path: Path):
    """The contents of the pickle at ``path`` if it holds plain data only (dict, list, tuple,
    str, bytes, int, float, bool, None); anything else is a :class:`VheadsError` naming the
    file, and nothing of it runs."""
    try:
        with open(path, "rb") as f:
            return _PlainUnpickler(f, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, IndexError, TypeError, ValueError) as e:
        raise VheadsError(f"{path}: refused: a refs pickle must hold plain data only (dicts, lists, strings, numbers); "
                          f"{e}") from None


def coco_box(bbox, image_size: tuple[int, int], where: str) -> tuple[float, float, float, float]:
    """COCO ``[x, y, w, h]`` → (x0, y0, x1, y1) = (x, y, x + w, y + h), clipped to the image of
    ``image_size`` (width, height) within :data:`EDGE_SLACK`; an empty box or one outside the
    image is a :class:`VheadsError` naming ``where`` (file and row)."""
    try:
        x, y, w, h = (float(v) for v in bbox)
    except (TypeError, ValueError):
        raise VheadsError(f"{where}: bbox {bbox!r} is not four numbers [x, y, w, h]") from None
    W, H = image_size
    if not all(math.isfinite(v) for v in (x, y, w, h)) or w <= 0 or h <= 0:
        raise VheadsError(f"{where}: bbox {bbox!r} is empty or not finite; COCO boxes are [x, y, w, h] with w, h > 0")
    x0, y0, x1, y1 = x, y, x + w, y + h
    if x0 < -EDGE_SLACK or y0 < -EDGE_SLACK or x1 > W + EDGE_SLACK or y1 > H + EDGE_SLACK:
        raise VheadsError(f"{where}: box (x0, y0, x1, y1) = {(x0, y0, x1, y1)} from bbox [x, y, w, h] = {list(bbox)} lies "
                          f"outside the {W}x{H} image")
    return max(0.0, x0), max(0.0, y0), min(float(W), x1), min(float(H), y1)


def _expression(text, where: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise VheadsError(f"{where}: the referring expression is empty ({text!r}); every expression names the object")
    return " ".join(text.split())


def referring_item(iid: str, image: Image.Image, expression: str, box: tuple[float, float, float, float],
                   meta: dict, question_format: str = QUESTION_FORMAT) -> Item:
    """One grounding item: ``expression`` asked as ``question_format`` (its span the query
    span), the float ``box`` in ``meta["box"]`` and widened to whole pixels as region ``object``."""
    question = question_format.format(expression=expression)
    start = question.index(expression)
    W, H = image.size
    region = (math.floor(box[0]), math.floor(box[1]), min(W, math.ceil(box[2])), min(H, math.ceil(box[3])))
    return Item(iid, "referring", image, question, "", {"object": region}, "object", None,
                (start, start + len(expression)), {**meta, "box": tuple(box), "expression": expression})


def _choose(n_total: int, n: int | None, seed: int) -> list[int]:
    """``n`` of ``n_total`` rows (all when ``n`` is None or larger), a seeded draw in row order."""
    if n is None or n >= n_total:
        return list(range(n_total))
    return sorted(np.random.default_rng(seed).choice(n_total, size=n, replace=False).tolist())


# ---- the refer API layout ----------------------------------------------------------------

def refer_items(root: str | Path, dataset: str = "refcoco", split: str = "val", split_by: str | None = None,
                n: int | None = None, seed: int = 0, images: str | Path | None = None,
                question_format: str = QUESTION_FORMAT) -> list[Item]:
    """``n`` expressions (all by default; else a seeded draw) of ``split`` of ``dataset``
    (refcoco, refcoco+, refcocog) in the refer API layout under ``root`` (module docstring)."""
    root = Path(root)
    if dataset not in REFER_DATASETS:
        raise VheadsError(f"unknown refer dataset {dataset!r}; choose one of {', '.join(REFER_DATASETS)}")
    split_by = split_by or REFER_DATASETS[dataset]
    if split_by not in ("unc", "umd", "google"):
        raise VheadsError(f"unknown splitBy {split_by!r}; the refer API has refs(unc).p, refs(umd).p, refs(google).p")
    refs_path = root / dataset / f"refs({split_by}).p"
    inst_path = root / dataset / "instances.json"
    for p in (refs_path, inst_path):
        if not p.is_file():
            raise MissingFileError(f"{p}: not found; the refer API layout is ROOT/{dataset}/refs({split_by}).p and "
                                   f"ROOT/{dataset}/instances.json")
    img_dir = Path(images) if images is not None else root / "images" / "mscoco" / "images" / "train2014"
    refs = load_plain_pickle(refs_path)
    if not isinstance(refs, list):
        raise VheadsError(f"{refs_path}: holds a {type(refs).__name__}; the refer API's refs file is a list of dicts")
    with open(inst_path) as f:
        inst = json.load(f)
    anns = {a["id"]: a for a in inst.get("annotations", [])}
    sizes = {im["id"]: (int(im["width"]), int(im["height"])) for im in inst.get("images", [])}
    splits = sorted({str(r.get("split")) for r in refs if isinstance(r, dict)})
    if split not in splits:
        raise VheadsError(f"{refs_path}: no split {split!r}; its splits are {', '.join(splits)}")
    rows = []  # (row, ref, sentence) of every expression of the split
    for i, r in enumerate(refs):
        where = f"{refs_path} row {i}"
        if not isinstance(r, dict) or not {"ref_id", "ann_id", "image_id", "split", "sentences"} <= set(r):
            raise VheadsError(f"{where}: not a ref (a dict with ref_id, ann_id, image_id, split, sentences)")
        if r["split"] != split:
            continue
        for s in r["sentences"]:
            rows.append((i, r, s))
    items = []
    for i, r, s in (rows[j] for j in _choose(len(rows), n, seed)):
        where = f"{refs_path} row {i} (ref_id {r['ref_id']})"
        expression = _expression(s.get("sent") if isinstance(s, dict) else None, where)
        image_id, ann_id = r["image_id"], r["ann_id"]
        if not isinstance(image_id, int) or isinstance(image_id, bool) or image_id < 0:
            raise VheadsError(f"{where}: image_id {image_id!r} is not a COCO image id (a non-negative integer)")
        if ann_id not in anns:
            raise VheadsError(f"{where}: ann_id {ann_id!r} is not in {inst_path}")
        if image_id not in sizes:
            raise VheadsError(f"{where}: image_id {image_id} is not in {inst_path}")
        box = coco_box(anns[ann_id].get("bbox"), sizes[image_id], f"{inst_path} annotation {ann_id} ({where})")
        path = img_dir / f"COCO_train2014_{image_id:012d}.jpg"  # from the integer id only
        if not path.is_file():
            raise MissingFileError(f"{where}: image {path} not found; give the COCO train2014 folder")
        image = Image.open(path).convert("RGB")
        if image.size != sizes[image_id]:
            raise VheadsError(f"{path}: is {image.size[0]}x{image.size[1]} but {inst_path} says {sizes[image_id]}")
        items.append(referring_item(f"{dataset}-{split}-r{int(r['ref_id'])}-s{int(s.get('sent_id', 0))}", image, expression, box,
                                    {"dataset": dataset, "split": split, "ref_id": r["ref_id"], "image_id": image_id},
                                    question_format))
    return items


# ---- the Hugging Face parquet layout ----------------------------------------------------------

def parquet_splits(root: str | Path) -> list[str]:
    """The splits of a parquet layout: the ``{split}`` of every ``data/{split}-*-of-*.parquet``."""
    return sorted({p.name.split("-")[0] for p in (Path(root) / "data").glob("*-*-of-*.parquet")})


def parquet_items(root: str | Path, split: str = "val", n: int | None = None, seed: int = 0, dataset: str = "refcoco",
                  question_format: str = QUESTION_FORMAT) -> list[Item]:
    """``n`` expressions (all by default; else a seeded draw) of ``split`` in the lmms-lab
    parquet layout under ``root`` (module docstring). Every row's expressions and box shape
    are checked; the images (and the box against them) of the chosen rows only."""
    import pyarrow.parquet as pq

    root = Path(root)
    files = sorted((root / "data").glob(f"{split}-*-of-*.parquet"))
    if not files:
        have = parquet_splits(root)
        raise VheadsError(f"{root / 'data'}: no split {split!r} (no {split}-*-of-*.parquet); "
                          + (f"its splits are {', '.join(have)}" if have else "it holds no data/{split}-K-of-N.parquet files"))
    rows = []  # (file, row, question_id, expression, bbox)
    for path in files:
        table = pq.read_table(path, columns=["question_id", "answer", "bbox"])
        for i, (qid, answers, bbox) in enumerate(zip(*(table.column(c).to_pylist() for c in ("question_id", "answer", "bbox")))):
            where = f"{path} row {i}"
            if not isinstance(answers, list) or not answers:
                raise VheadsError(f"{where}: answer {answers!r} holds no referring expression")
            if not isinstance(bbox, list) or len(bbox) != 4:
                raise VheadsError(f"{where}: bbox {bbox!r} is not [x, y, w, h]")
            for k, a in enumerate(answers):
                rows.append((path, i, qid, k, _expression(a, where), bbox))
    chosen = [rows[j] for j in _choose(len(rows), n, seed)]
    images: dict = {}
    for path in sorted({r[0] for r in chosen}):
        want = sorted({r[1] for r in chosen if r[0] == path})
        col = pq.read_table(path, columns=["image"]).column("image").take(want).to_pylist()
        images.update({(path, i): v for i, v in zip(want, col)})
    items = []
    for path, i, qid, k, expression, bbox in chosen:
        where = f"{path} row {i}"
        cell = images[(path, i)]
        data = cell.get("bytes") if isinstance(cell, dict) else None
        if not data:
            raise VheadsError(f"{where}: the image column holds no encoded image bytes")
        try:
            image = Image.open(io.BytesIO(data)).convert("RGB")
        except OSError as e:
            raise VheadsError(f"{where}: the image bytes do not decode ({e})") from None
        box = coco_box(bbox, image.size, where)
        items.append(referring_item(f"{dataset}-{split}-q{i}-e{k}" if qid is None else f"{dataset}-{split}-{qid}-e{k}",
                                    image, expression, box, {"dataset": dataset, "split": split, "question_id": qid},
                                    question_format))
    return items


def open_referring(spec: str, n: int | None = None, seed: int = 0) -> list[Item]:
    """Items of a command-line spec: ``refer:ROOT[,DATASET[,SPLIT[,SPLITBY]]]`` (refer API
    layout; default refcoco, val) or ``refcoco-hf:ROOT[,SPLIT]`` (parquet layout; default val)."""
    kind, _, rest = spec.partition(":")
    parts = [p.strip() for p in rest.split(",")] if rest else []
    if kind == "refer" and 1 <= len(parts) <= 4:
        root, dataset, split, split_by = (parts + [None] * 4)[:4]
        return refer_items(root, dataset or "refcoco", split or "val", split_by or None, n=n, seed=seed)
    if kind == "refcoco-hf" and 1 <= len(parts) <= 2:
        root, split = (parts + [None])[:2]
        return parquet_items(root, split or "val", n=n, seed=seed)
    raise VheadsError(f"--refer {spec!r}: write refer:ROOT[,DATASET[,SPLIT[,SPLITBY]]] or refcoco-hf:ROOT[,SPLIT]")


__all__: Sequence[str] = ["EDGE_SLACK", "REFER_DATASETS", "coco_box", "load_plain_pickle", "open_referring",
                          "parquet_items", "parquet_splits", "referring_item", "refer_items"]
