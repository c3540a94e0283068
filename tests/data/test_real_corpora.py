"""Discovery corpora on real photos: COCO instances JSON -> six-panel strips, comics as one
folder of panel images per comic; the panels hold the right photos and labels."""

import json

import numpy as np
import pytest
from PIL import Image

from tests.data.photos import PHOTOS, make_coco, make_comics
from vheads.data.builders import fit_square
from vheads.data.comics import load_comic_folders
from vheads.data.loaders import load_coco_strips
from vheads.discovery import load_corpus

NAMES = {name for _, name in PHOTOS.values()}


def test_coco_strips_of_photos_name_each_panels_dominant_category(tmp_path):
    images = make_coco(tmp_path / "coco")
    ann = json.loads((tmp_path / "coco" / "annotations" / "instances_val2017.json").read_text())
    cat_name = {c["id"]: c["name"] for c in ann["categories"]}
    largest = {}  # image file -> category of its largest non-crowd annotation (computed here)
    for a in ann["annotations"]:
        if not a["iscrowd"] and a["area"] > largest.get(a["image_id"], (0, None))[0]:
            largest[a["image_id"]] = (a["area"], cat_name[a["category_id"]])
    file_cat = {im["file_name"]: largest[im["id"]][1] for im in ann["images"]}
    for query in ("ordinal", "referring"):
        items = load_coco_strips(images, query, n=4, seed=2, panel_size=40)
        for it in items:
            assert it.meta["panels"] == [file_cat[f] for f in it.meta["image_files"]]
            assert len(set(it.meta["panels"])) == 6
            for p, f in enumerate(it.meta["image_files"]):  # panel p shows that photo
                want = np.asarray(Image.open(images / f).convert("RGB").resize((40, 40), Image.BICUBIC)).astype(int)
                assert np.array_equal(np.asarray(it.image.crop((40 * p, 0, 40 * p + 40, 40))).astype(int), want)
            k = int(it.target.removeprefix("panel"))
            if query == "referring":
                assert it.question == f"which panel shows the {it.meta['panels'][k - 1]} ?" and it.answer == str(k)
            else:
                assert it.answer == it.meta["panels"][k - 1]


def test_comic_folders_make_strips_of_consecutive_panels(tmp_path):
    root = make_comics(tmp_path / "comics", n_comics=2, panels=7)
    items = load_comic_folders(root, "referring", seed=0, panel_size=32)
    assert len(items) == 2  # one strip per comic: 7 panels give one strip of 6, the 7th is dropped
    for it in items:
        comic = root / it.meta["comic"]
        labels = json.loads((comic / "labels.json").read_text())
        assert it.meta["panel_files"] == [f"{k:03d}.png" for k in range(1, 7)]
        assert it.meta["panels"] == [labels[f] for f in it.meta["panel_files"]]
        for p, f in enumerate(it.meta["panel_files"]):
            want = np.asarray(fit_square(Image.open(comic / f).convert("RGB"), 32, "pad"))
            assert np.array_equal(np.asarray(it.image.crop((32 * p, 0, 32 * p + 32, 32))), want)
        k = int(it.target.removeprefix("panel"))
        assert it.answer == str(k) and it.meta["panels"].count(it.meta["panels"][k - 1]) == 1
        a, b = it.query_span
        assert it.question[a:b] == f"the {it.meta['panels'][k - 1]}"


def test_comics_spec_is_a_discovery_corpus(tmp_path):
    root = make_comics(tmp_path / "comics")
    c = load_corpus(f"comics:{root}", "ordinal", 2, seed=1, panel_size=32)
    assert (c.name, c.abbrev) == ("comics", "cm") and len(c.items) == 2 and all(it.meta["class"] in NAMES for it in c.items)


def test_comic_bad_input_names_the_file(tmp_path):
    root = make_comics(tmp_path / "nolabels", labels=False)
    with pytest.raises(ValueError, match="has no labels.json, so no referring question"):
        load_comic_folders(root, "referring")
    assert len(load_comic_folders(root, "ordinal", panel_size=16)) == 2
    root = make_comics(tmp_path / "partial")
    lab = root / "comic_01" / "labels.json"
    d = json.loads(lab.read_text())
    del d["004.png"]
    lab.write_text(json.dumps(d))
    with pytest.raises(ValueError, match=r"comic_01/labels\.json gives no label for panel '004\.png'"):
        load_comic_folders(root, "ordinal")
    root = make_comics(tmp_path / "broken")
    (root / "comic_00" / "002.png").write_bytes(b"")
    with pytest.raises(ValueError, match=r"comic_00/002\.png is empty"):
        load_comic_folders(root, "ordinal", panel_size=16)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="has no comic folders"):
        load_comic_folders(tmp_path / "empty", "ordinal")
    short = make_comics(tmp_path / "short", panels=4)
    with pytest.raises(ValueError, match="no comic has 6 panels"):
        load_comic_folders(short, "ordinal")
