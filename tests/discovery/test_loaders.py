"""Strip-folder and COCO loaders on small fixture folders (vheads.data.loaders)."""

import json

import numpy as np
import pytest
from PIL import Image

from vheads.data.loaders import load_coco_strips, load_strip_folder

COLOURS = [(200, 0, 0), (0, 200, 0), (0, 0, 200), (200, 200, 0), (0, 200, 200), (200, 0, 200), (90, 90, 90)]


def make_strip_folder(root, n=3, labels=("dog", "cat", "car", "bus", "cup", "owl"), bad_box=False, missing=False):
    root.mkdir(parents=True, exist_ok=True)
    strips = []
    for i in range(n):
        img = Image.new("RGB", (6 * 32, 32))
        for p in range(6):
            img.paste(COLOURS[p], (p * 32, 0, (p + 1) * 32, 32))
        if not (missing and i == n - 1):
            img.save(root / f"s{i}.png")
        panels = [{"box": [p * 32, 0, (p + 1) * 32, 32], "label": lab} for p, lab in enumerate(labels)]
        if bad_box and i == 1:
            panels[5]["box"] = [160, 0, 200, 32]
        strips.append({"image": f"s{i}.png", "panels": panels})
    (root / "strips.json").write_text(json.dumps({"corpus": "fixture", "abbrev": "fx", "strips": strips}))
    return root


def make_coco_folder(root, n_images=14, n_cats=7, drop=None):
    imgs = root / "val2017"
    imgs.mkdir(parents=True)
    (root / "annotations").mkdir()
    images, anns = [], []
    for i in range(n_images):
        name = f"{i:012d}.jpg"
        if name != drop:
            Image.new("RGB", (40 + i, 30), COLOURS[i % 7]).save(imgs / name)
        images.append({"id": i, "file_name": name, "width": 40 + i, "height": 30})
        big = i % n_cats + 1
        small = (i + 1) % n_cats + 1
        anns += [
            {"id": 10 * i, "image_id": i, "category_id": small, "area": 50.0, "bbox": [0, 0, 5, 10], "iscrowd": 0},
            {"id": 10 * i + 1, "image_id": i, "category_id": big, "area": 400.0, "bbox": [0, 0, 20, 20], "iscrowd": 0},
            {"id": 10 * i + 2, "image_id": i, "category_id": small, "area": 900.0, "bbox": [0, 0, 30, 30], "iscrowd": 1},
        ]
    cats = [{"id": c, "name": f"thing{c}"} for c in range(1, n_cats + 1)]
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return imgs


@pytest.mark.parametrize("query", ["ordinal", "referring"])
def test_strip_folder_gives_strip_items(tmp_path, query):
    items = load_strip_folder(make_strip_folder(tmp_path / "f"), query, seed=1)
    assert len(items) == 3
    for it in items:
        k = int(it.target.removeprefix("panel"))
        label = it.meta["panels"][k - 1]
        assert sorted(it.regions) == [f"panel{p}" for p in range(1, 7)]
        assert it.regions[it.target] == ((k - 1) * 32, 0, k * 32, 32)
        phrase = it.question[slice(*it.query_span)]
        assert phrase == (f"panel {k}" if query == "ordinal" else f"the {label}")
        assert it.answer == (label if query == "ordinal" else str(k))
        # the asked panel's pixels are the panel's colour
        assert it.image.getpixel(((k - 1) * 32 + 5, 5)) == COLOURS[k - 1]


def test_strip_folder_errors(tmp_path):
    with pytest.raises(ValueError, match="lists no strips"):
        d = tmp_path / "empty"
        d.mkdir()
        (d / "strips.json").write_text('{"strips": []}')
        load_strip_folder(d, "ordinal")
    with pytest.raises(ValueError, match=r"panel 6 box \[160, 0, 200, 32\] lies outside the 192x32 image"):
        load_strip_folder(make_strip_folder(tmp_path / "bad", bad_box=True), "ordinal")
    with pytest.raises(FileNotFoundError, match="image 's2.png'.*is missing"):
        load_strip_folder(make_strip_folder(tmp_path / "miss", missing=True), "ordinal")
    with pytest.raises(ValueError, match="no strip has a panel whose label is unique"):
        load_strip_folder(make_strip_folder(tmp_path / "same", labels=("dog",) * 6), "referring")
    with pytest.raises(FileNotFoundError, match="has no strips.json"):
        load_strip_folder(tmp_path, "ordinal")


@pytest.mark.parametrize("query", ["ordinal", "referring"])
def test_coco_strips_use_the_dominant_category(tmp_path, query):
    imgs = make_coco_folder(tmp_path)
    items = load_coco_strips(imgs, query, n=2, seed=0, panel_size=32)
    assert len(items) == 2
    used = set()
    for it in items:
        assert it.image.size == (6 * 32, 32)
        files = it.meta["image_files"]
        assert len(set(files)) == 6 and not used & set(files)
        used |= set(files)
        ids = [int(f.split(".")[0]) for f in files]
        # dominant = largest non-crowd annotation: category i % 7 + 1
        assert it.meta["panels"] == [f"thing{i % 7 + 1}" for i in ids]
        assert len(set(it.meta["panels"])) == 6
        k = int(it.target.removeprefix("panel"))
        np.testing.assert_allclose(np.asarray(it.image)[5, (k - 1) * 32 + 5], COLOURS[ids[k - 1] % 7], atol=4)  # JPEG


def test_coco_errors(tmp_path):
    imgs = make_coco_folder(tmp_path / "a", drop="000000000003.jpg")
    with pytest.raises(FileNotFoundError, match="names image '000000000003.jpg'.*not found in"):
        load_coco_strips(imgs, "ordinal", n=1, panel_size=32)
    assert len(load_coco_strips(imgs, "ordinal", n=1, panel_size=32, missing="skip")) == 1
    few = make_coco_folder(tmp_path / "b", n_images=5)
    with pytest.raises(ValueError, match="empty corpus"):
        load_coco_strips(few, "ordinal", panel_size=32)
