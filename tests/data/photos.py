"""Fixtures in each source's exact layout, made from real photographs scikit-image ships.

``skimage/data`` holds a few photos as plain files (astronaut.png, chelsea.png, …); they
are read straight from the package folder (nothing is downloaded). Each class gets two
different views of its photo (the whole photo and a flipped crop), so a seeded draw has a
choice to make.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from PIL import Image, ImageOps

#: wnid-style id -> (skimage file, display name)
PHOTOS = {
    "n00000001": ("astronaut.png", "astronaut"),
    "n00000002": ("chelsea.png", "tabby cat"),
    "n00000003": ("coffee.png", "coffee mug"),
    "n00000004": ("rocket.jpg", "rocket"),
    "n00000005": ("camera.png", "cameraman"),
    "n00000006": ("motorcycle_left.png", "motorcycle"),
}


def skimage_data_dir() -> Path:
    skimage = pytest.importorskip("skimage")
    return Path(skimage.__file__).parent / "data"


def class_photos() -> dict[str, list[Image.Image]]:
    """Two RGB views of each class's photo (downscaled to keep the tests light)."""
    root = skimage_data_dir()
    out = {}
    for wnid, (fname, _) in PHOTOS.items():
        with Image.open(root / fname) as im:
            im = im.convert("RGB")
        im.thumbnail((160, 160))
        w, h = im.size
        crop = ImageOps.mirror(im.crop((w // 8, h // 8, w, h)))
        out[wnid] = [im, crop]
    return out


def make_ilsvrc(root: Path, mapping: bool = True) -> Path:
    """``root/<wnid>/<wnid>_<k>.JPEG`` and ``LOC_synset_mapping.txt`` one folder up (as in
    the Kaggle ILSVRC download, where it sits above ``ILSVRC/Data/CLS-LOC/train``)."""
    train = root / "ILSVRC" / "Data" / "CLS-LOC" / "train"
    for wnid, views in class_photos().items():
        (train / wnid).mkdir(parents=True)
        for k, im in enumerate(views):
            im.save(train / wnid / f"{wnid}_{k}.JPEG", quality=90)
    if mapping:
        (root / "LOC_synset_mapping.txt").write_text(
            "".join(f"{w} {name}, synonym of {name}\n" for w, (_, name) in PHOTOS.items()))
    return train


def _png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


def hf_table(label_names=True):
    """An Arrow table with the Hub's columns: ``image`` {bytes, path} and ``label`` (ClassLabel)."""
    import pyarrow as pa

    ids = list(PHOTOS)
    rows = [(i, im) for i, w in enumerate(ids) for im in class_photos()[w]]
    image = pa.array([{"bytes": _png(im), "path": f"{ids[i]}_{k}.png"} for k, (i, im) in enumerate(rows)],
                     type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    label = pa.array([i for i, _ in rows], type=pa.int64())
    features = {"image": {"_type": "Image"},
                "label": {"_type": "ClassLabel", "names": [PHOTOS[w][1] for w in ids]} if label_names else {"dtype": "int64", "_type": "Value"}}
    meta = {b"huggingface": json.dumps({"info": {"features": features}}).encode()}
    return pa.table({"image": image, "label": label}).replace_schema_metadata(meta), features


def make_hf_parquet(root: Path, split: str = "train", shards: int = 2, **kw) -> Path:
    """``root/data/{split}-0000k-of-0000n.parquet`` as a dataset repository publishes them."""
    import pyarrow.parquet as pq

    table, _ = hf_table(**kw)
    (root / "data").mkdir(parents=True)
    step = -(-table.num_rows // shards)
    for s in range(shards):
        pq.write_table(table.slice(s * step, step), root / "data" / f"{split}-{s:05d}-of-{shards:05d}.parquet", row_group_size=3)
    return root


def make_hf_saved(root: Path) -> Path:
    """A ``datasets.save_to_disk`` folder: Arrow stream file + state.json + dataset_info.json."""
    import pyarrow as pa

    table, features = hf_table()
    root.mkdir(parents=True)
    with pa.OSFile(str(root / "data-00000-of-00001.arrow"), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table)
    (root / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}], "_split": "train"}))
    (root / "dataset_info.json").write_text(json.dumps({"features": features}))
    return root


def photo_views(n: int) -> list[tuple[str, Image.Image]]:
    """``n`` (class name, photo) pairs cycling through the classes, each view a different crop."""
    photos = class_photos()
    out = []
    for i in range(n):
        wnid = list(PHOTOS)[i % len(PHOTOS)]
        im = photos[wnid][(i // len(PHOTOS)) % 2]
        w, h = im.size
        s = (i // (2 * len(PHOTOS))) * 6
        out.append((PHOTOS[wnid][1], im.crop((s, s, w - s, h - s))))
    return out


def make_coco(root: Path, n_images: int = 24) -> Path:
    """``root/val2017/*.jpg`` and ``root/annotations/instances_val2017.json`` in COCO's
    instances format; each photo's largest annotation is its class (plus a smaller one of
    another class and a crowd box, which must not decide the dominant category)."""
    imgs = root / "val2017"
    imgs.mkdir(parents=True)
    (root / "annotations").mkdir()
    names = [name for _, name in PHOTOS.values()]
    images, anns = [], []
    for i, (name, im) in enumerate(photo_views(n_images)):
        fname = f"{i:012d}.jpg"
        im.save(imgs / fname, quality=90)
        w, h = im.size
        cat = names.index(name) + 1
        other = cat % len(names) + 1
        images.append({"id": i, "file_name": fname, "width": w, "height": h})
        anns += [
            {"id": 10 * i, "image_id": i, "category_id": cat, "area": w * h * 0.5, "bbox": [0, 0, w / 2, h], "iscrowd": 0},
            {"id": 10 * i + 1, "image_id": i, "category_id": other, "area": 30.0, "bbox": [0, 0, 5, 6], "iscrowd": 0},
            {"id": 10 * i + 2, "image_id": i, "category_id": other, "area": w * h * 0.9, "bbox": [0, 0, w, h], "iscrowd": 1},
        ]
    cats = [{"id": k + 1, "name": n, "supercategory": "thing"} for k, n in enumerate(names)]
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return imgs


def make_photo_strips(root: Path, n: int = 4, panel: int = 64) -> Path:
    """A strip folder (``strips.json`` + images): six photo panels per strip, labelled by class."""
    root.mkdir(parents=True)
    views = photo_views(6 * n)
    strips = []
    for s in range(n):
        img = Image.new("RGB", (6 * panel, panel))
        panels = []
        for p in range(6):
            name, im = views[6 * s + p]
            img.paste(ImageOps.fit(im, (panel, panel)), (p * panel, 0))
            panels.append({"box": [p * panel, 0, (p + 1) * panel, panel], "label": name})
        img.save(root / f"strip_{s:03d}.png")
        strips.append({"image": f"strip_{s:03d}.png", "panels": panels})
    (root / "strips.json").write_text(json.dumps({"corpus": "photostrips", "abbrev": "ps", "strips": strips}))
    return root


def make_comics(root: Path, n_comics: int = 2, panels: int = 7, labels: bool = True) -> Path:
    """``root/<comic>/<NNN>.png`` panels (photos) and a ``labels.json`` naming each panel's class."""
    views = photo_views(n_comics * panels)
    for c in range(n_comics):
        d = root / f"comic_{c:02d}"
        d.mkdir(parents=True)
        lab = {}
        for p in range(panels):
            name, im = views[c * panels + p]
            im.save(d / f"{p + 1:03d}.png")
            lab[f"{p + 1:03d}.png"] = name
        if labels:
            (d / "labels.json").write_text(json.dumps(lab))
    return root
