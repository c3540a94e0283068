"""Every data source reads images, ids, labels and files by one set of rules (second pass).

The same hostile image (16-bit grey, alpha, a float image, a 1x1 or a 10000x40 image) is put
into each source's own layout and read through that source's public path; the expected
pixels are computed here with numpy from the stored values (16-bit ``v / 257``, alpha
composited on white, float ``v · 255``). Ids, labels, binary files and symlinks follow.
"""

from __future__ import annotations

import io
import json
import os
import re

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from tests.data.benchmarks import make_mcq_jsonl
from tests.data.photos import make_comics, make_hf_saved, make_ilsvrc
from tests.discovery.test_loaders import make_coco_folder, make_strip_folder
from tests.hardening.clitools import NO_MODEL, refused, vheads
from vheads._errors import VheadsError
from vheads.data.comics import load_comic_folders
from vheads.data.loaders import load_coco_strips, load_strip_folder
from vheads.data.ood._readers import read_mcq_jsonl
from vheads.data.sources import open_source

S = 40  # side of the constant test images (square: no padding when fitted)
V16 = 30000  # a 16-bit grey level: PIL's plain conversion clips it to 255 (white)


def _grey16():
    return Image.fromarray(np.full((S, S), V16, np.uint16)), np.full(3, round(V16 / 257))


def _rgba():
    c, a = np.array([200, 40, 10]), 77
    return Image.fromarray(np.tile(np.array([*c, a], np.uint8), (S, S, 1)), "RGBA"), np.rint(a / 255 * c + (1 - a / 255) * 255)


def _float():
    return Image.fromarray(np.full((S, S), 0.5, np.float32), "F"), np.full(3, round(0.5 * 255))


CASES = {"grey16": (_grey16, ".png"), "rgba": (_rgba, ".png"), "float": (_float, ".tiff")}


def _encoded(im: Image.Image, suffix: str) -> bytes:
    buf = io.BytesIO()
    im.save(buf, format="TIFF" if suffix == ".tiff" else "PNG")
    return buf.getvalue()


# ---- one source each: (build a folder whose every image is `im`, read one image back as RGB) ----


def _imagefolder(tmp_path, im, suffix):
    root = tmp_path / "if"
    for c in ("ant", "bee", "cat", "dog"):
        (root / c).mkdir(parents=True)
        im.save(root / c / f"x{suffix}")
    src = open_source(f"imagefolder:{root}")
    return src.open(src.images["ant"][0])


def _imagenet(tmp_path, im, suffix):
    train = make_ilsvrc(tmp_path / "in")
    for d in train.iterdir():
        for f in d.iterdir():
            f.unlink()
        im.save(d / f"{d.name}_0.png", format="TIFF" if suffix == ".tiff" else "PNG")  # a .png suffix the source lists
    src = open_source(f"imagenet:{train}")
    return src.open(src.images[src.classes[0]][0])


def _hf(tmp_path, im, suffix):
    root = make_hf_saved(tmp_path / "hf")
    arrow = root / "data-00000-of-00001.arrow"
    with pa.memory_map(str(arrow)) as f:
        table = pa.ipc.open_stream(f).read_all()
    data = _encoded(im, suffix)
    cells = pa.array([{"bytes": data, "path": "x"}] * table.num_rows, type=table.schema.field("image").type)
    table = table.set_column(table.schema.get_field_index("image"), "image", cells)
    arrow.unlink()
    with pa.OSFile(str(arrow), "wb") as f, pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table)
    src = open_source(f"hf:{root}")
    return src.open(src.images[src.classes[0]][0])


def _mcq(tmp_path, im, suffix):
    path, _ = make_mcq_jsonl(tmp_path / "mcq")
    for f in (path.parent / "img").iterdir():
        f.write_bytes(_encoded(im, suffix))  # the file keeps its .png name; PIL reads the content
    return read_mcq_jsonl(str(path), f"mcq:{path}")[0].image()


def _comics(tmp_path, im, suffix):
    root = make_comics(tmp_path / "comics", n_comics=1, panels=6)
    for f in (root / "comic_00").glob("*.png"):
        f.write_bytes(_encoded(im, suffix))
    (item,) = load_comic_folders(root, "ordinal", n=1, panel_size=S)
    return item.image.crop((0, 0, S, S))


def _coco(tmp_path, im, suffix):
    imgs = make_coco_folder(tmp_path / "coco")
    for f in imgs.iterdir():
        f.write_bytes(_encoded(im, suffix))
    item = load_coco_strips(imgs, "ordinal", n=1, panel_size=S)[0]
    return item.image.crop((0, 0, S, S))


SOURCES = {"imagefolder": _imagefolder, "imagenet": _imagenet, "hf": _hf, "mcq": _mcq, "comics": _comics, "coco": _coco}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_every_source_converts_every_mode_by_its_meaning(tmp_path, source, case):
    make, suffix = CASES[case]
    im, want = make()
    got = np.asarray(SOURCES[source](tmp_path, im, suffix)).astype(int)  # [S, S, 3]
    assert got.shape == (S, S, 3)
    assert np.abs(got - want.astype(int)).max() <= 1, (source, case, got[0, 0], want)


@pytest.mark.parametrize("make,suffix,fragment", [
    (lambda: Image.new("RGB", (1, 1)), ".png", "1x1 pixels"),
    (lambda: Image.new("RGB", (10000, 40)), ".png", "aspect ratio"),
    (lambda: Image.fromarray(np.full((S, S), 3.0, np.float32), "F"), ".tiff", "not [0, 1]"),
])
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_every_source_refuses_an_image_it_cannot_show_faithfully_naming_the_file(tmp_path, source, make, suffix, fragment):
    with pytest.raises(VheadsError, match=re.escape(fragment)) as e:
        SOURCES[source](tmp_path, make(), suffix)
    assert tmp_path.name in str(e.value)  # the file's path is named


# ---- one id rule: no two files share an item id --------------------------------------------------


def test_strips_in_two_subfolders_with_one_file_name_keep_both_items(tmp_path):
    folder = make_strip_folder(tmp_path / "st", n=2)
    d = json.loads((folder / "strips.json").read_text())
    for sub, s in zip(("a", "b"), d["strips"]):
        (folder / sub).mkdir()
        os.replace(folder / s["image"], folder / sub / "x.png")
        s["image"] = f"{sub}/x.png"
    (folder / "strips.json").write_text(json.dumps(d))
    items = load_strip_folder(folder, "ordinal")
    assert len({it.id for it in items}) == len(items) == 2
    assert [it.meta["image_file"] for it in items] == ["a/x.png", "b/x.png"]


def test_strips_with_one_stem_and_two_suffixes_keep_both_items(tmp_path):
    folder = make_strip_folder(tmp_path / "st", n=2)
    d = json.loads((folder / "strips.json").read_text())
    Image.open(folder / "s1.png").save(folder / "s0.jpg", quality=95)
    d["strips"][1]["image"] = "s0.jpg"
    (folder / "strips.json").write_text(json.dumps(d))
    items = load_strip_folder(folder, "ordinal")
    assert len({it.id for it in items}) == 2


def test_comic_strips_have_distinct_ids_naming_their_comic(tmp_path):
    root = make_comics(tmp_path / "c", n_comics=2, panels=12)
    items = load_comic_folders(root, "ordinal", panel_size=S)
    assert len(items) == 4 and len({it.id for it in items}) == 4
    assert all(it.meta["comic"] in it.id for it in items)


def test_duplicate_image_ids_in_coco_annotations_are_refused_naming_both(tmp_path):
    imgs = make_coco_folder(tmp_path / "coco")
    ann = tmp_path / "coco" / "annotations" / "instances_val2017.json"
    d = json.loads(ann.read_text())
    d["images"][5]["id"] = d["images"][2]["id"]
    ann.write_text(json.dumps(d))
    with pytest.raises(VheadsError, match=r"images\[2\].*images\[5\].*share the image id 2"):
        load_coco_strips(imgs, "ordinal", n=1)


def _edit_line(path, i: int, edit) -> None:
    """Apply ``edit`` to the JSON object on line ``i`` (0-based) of a JSONL file, in place."""
    lines = path.read_text().splitlines()
    d = json.loads(lines[i])
    edit(d)
    lines[i] = json.dumps(d)
    path.write_text("\n".join(lines) + "\n")


def test_duplicate_ids_in_an_mcq_file_are_refused_naming_both_lines(tmp_path):
    path, _ = make_mcq_jsonl(tmp_path / "mcq")
    _edit_line(path, 4, lambda d: d.update(id="m1"))
    r = vheads("audit", "--model", NO_MODEL, "--source", f"mcq:{path}", "--n", "2")
    refused(r, str(path), "lines 2 and 5", "'m1'")


# ---- labels and texts: control characters and non-text values refused, naming file and entry ------


def _strip_label(tmp_path, label):
    folder = make_strip_folder(tmp_path / "st", n=1)
    d = json.loads((folder / "strips.json").read_text())
    d["strips"][0]["panels"][2]["label"] = label
    (folder / "strips.json").write_text(json.dumps(d))
    return f"strips:{folder}", "panel 3"


def _comic_label(tmp_path, label):
    root = make_comics(tmp_path / "c", n_comics=1, panels=6)
    p = root / "comic_00" / "labels.json"
    d = json.loads(p.read_text())
    d["003.png"] = label
    p.write_text(json.dumps(d))
    return f"comics:{root}", "003.png"


def _coco_label(tmp_path, label):
    imgs = make_coco_folder(tmp_path / "coco")
    ann = tmp_path / "coco" / "annotations" / "instances_val2017.json"
    d = json.loads(ann.read_text())
    d["categories"][3]["name"] = label
    ann.write_text(json.dumps(d))
    return f"coco:{imgs}", "categories[3]"


@pytest.mark.parametrize("label,fragment", [("dog\nbus", "control character '\\n'"), ("dog\x00", "control character '\\x00'"),
                                            (["disk", "ring"], "must be a non-empty string, got list")])
@pytest.mark.parametrize("make", [_strip_label, _comic_label, _coco_label])
def test_discovery_labels_with_control_characters_or_not_text_are_refused(tmp_path, make, label, fragment):
    if make is _coco_label and not isinstance(label, str):
        fragment = "non-empty 'name'"
    corpus, entry = make(tmp_path, label)
    r = vheads("discover", "--model", NO_MODEL, "--corpus", corpus, "--query", "ordinal", "--n", "1", "--out", tmp_path / "hs")
    refused(r, entry, fragment)
    assert not (tmp_path / "hs").exists()


@pytest.mark.parametrize("edit,fragment", [
    (lambda d: d.update(choices=["red", ["a", "b"], "blue", "green"]), "choice 1 must be a non-empty string, got list"),
    (lambda d: d.update(choices=["red", "gr\x00een", "blue", "green2"]), "choice 1 holds the control character"),
    (lambda d: d.update(question="what\x07 colour ?"), "'question' holds the control character '\\x07'"),
])
def test_mcq_texts_are_checked_naming_the_line(tmp_path, edit, fragment):
    path, _ = make_mcq_jsonl(tmp_path / "mcq")

    def edit_keeping_an_answer(d):
        edit(d)
        d["answer"] = d["choices"][0] if isinstance(d["choices"][0], str) else "red"

    _edit_line(path, 2, edit_keeping_an_answer)
    refused(vheads("audit", "--model", NO_MODEL, "--source", f"mcq:{path}", "--n", "2"), f"{path} line 3", fragment)


def test_an_mcq_question_may_hold_newlines(tmp_path):
    path, _ = make_mcq_jsonl(tmp_path / "mcq")
    question = "look at the photo.\nwhat colour is it ?"
    _edit_line(path, 0, lambda d: d.update(question=question))
    assert read_mcq_jsonl(str(path), "mcq")[0].question == question


@pytest.mark.parametrize("line", ["5", "null", "[1, 2]", '"text"'])
def test_an_mcq_line_that_is_not_an_object_is_one_line(tmp_path, line):
    path, _ = make_mcq_jsonl(tmp_path / "mcq")
    path.write_text(path.read_text() + line + "\n")
    refused(vheads("audit", "--model", NO_MODEL, "--source", f"mcq:{path}", "--n", "2"), f"{path} line 7", "JSON object")


def test_a_class_folder_name_with_a_newline_is_refused(tmp_path):
    root = tmp_path / "if"
    for c in ("ant", "bee", "cat", "do\ng"):
        (root / c).mkdir(parents=True)
        Image.new("RGB", (S, S)).save(root / c / "x.png")
    refused(vheads("audit", "--model", NO_MODEL, "--source", f"imagefolder:{root}", "--n", "2"), "class folder", "control character")


# ---- binary / non-UTF-8 text files: the message names the file --------------------------------------


def test_a_binary_synset_mapping_is_named(tmp_path):
    train = make_ilsvrc(tmp_path / "in")
    mapping = tmp_path / "in" / "LOC_synset_mapping.txt"
    mapping.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x00")
    refused(vheads("audit", "--model", NO_MODEL, "--source", f"imagenet:{train}", "--n", "2"), str(mapping), "not UTF-8 text")


def test_a_non_utf8_mcq_file_is_named(tmp_path):
    path, _ = make_mcq_jsonl(tmp_path / "mcq")
    path.write_bytes(path.read_bytes().replace(b"colour", b"col\xe9ur", 1))
    refused(vheads("audit", "--model", NO_MODEL, "--source", f"mcq:{path}", "--n", "2"), str(path), "not UTF-8 text")


@pytest.mark.parametrize("content,fragment", [("[1, 2]", "JSON object, got list"), ("{broken", "not valid JSON"),
                                              ('{"_data_files": 7}', "lists no data files")])
def test_a_broken_state_json_is_one_line_naming_it(tmp_path, content, fragment):
    root = make_hf_saved(tmp_path / "hf")
    (root / "state.json").write_text(content)
    refused(vheads("audit", "--model", NO_MODEL, "--source", f"hf:{root}", "--n", "2"), "state.json", fragment)


# ---- nothing read from outside the data folder ------------------------------------------------------


def test_a_state_json_naming_a_file_outside_the_folder_is_refused(tmp_path):
    root = make_hf_saved(tmp_path / "d" / "hf")
    outside = tmp_path / "outside.arrow"
    os.replace(root / "data-00000-of-00001.arrow", outside)
    (root / "state.json").write_text(json.dumps({"_data_files": [{"filename": "../../outside.arrow"}]}))
    refused(vheads("audit", "--model", NO_MODEL, "--source", f"hf:{root}", "--n", "2"), "state.json", "leads outside the data folder")


def _link_out(tmp_path, target_dir, name):
    """Replace ``target_dir / name`` by a symlink to a copy of it outside the data folder."""
    outside = tmp_path / "outside" / name
    outside.parent.mkdir(exist_ok=True)
    os.replace(target_dir / name, outside)
    (target_dir / name).symlink_to(outside)


def test_symlinks_out_of_a_data_folder_are_refused_for_every_source(tmp_path):
    ilsvrc = make_ilsvrc(tmp_path / "in")
    _link_out(tmp_path, ilsvrc / "n00000002", "n00000002_1.JPEG")
    with pytest.raises(VheadsError, match="n00000002_1.JPEG leads outside the data folder"):
        open_source(f"imagenet:{ilsvrc}")

    folder = make_strip_folder(tmp_path / "st", n=2)
    _link_out(tmp_path, folder, "s1.png")
    r = vheads("discover", "--model", NO_MODEL, "--corpus", f"strips:{folder}", "--query", "ordinal", "--out", tmp_path / "hs")
    refused(r, "s1.png", "leads outside the data folder")

    comics = make_comics(tmp_path / "c", n_comics=1, panels=6)
    _link_out(tmp_path, comics / "comic_00", "004.png")
    with pytest.raises(VheadsError, match="004.png leads outside"):
        load_comic_folders(comics, "ordinal")

    imgs = make_coco_folder(tmp_path / "coco")
    _link_out(tmp_path, imgs, "000000000003.jpg")
    with pytest.raises(VheadsError, match="000000000003.jpg.*leads outside"):
        load_coco_strips(imgs, "ordinal", n=1)

    path, _ = make_mcq_jsonl(tmp_path / "mcq")
    _link_out(tmp_path, path.parent / "img", "2.png")
    refused(vheads("audit", "--model", NO_MODEL, "--source", f"mcq:{path}", "--n", "2"), "line 3", "leads outside")


def test_a_symlink_inside_the_data_folder_is_fine(tmp_path):
    folder = make_strip_folder(tmp_path / "st", n=2)
    (folder / "alias.png").symlink_to(folder / "s1.png")
    d = json.loads((folder / "strips.json").read_text())
    d["strips"][1]["image"] = "alias.png"
    (folder / "strips.json").write_text(json.dumps(d))
    assert len(load_strip_folder(folder, "ordinal")) == 2


def test_class_names_with_control_characters_are_refused_in_imagenet_and_hf(tmp_path):
    train = make_ilsvrc(tmp_path / "in")
    mapping = tmp_path / "in" / "LOC_synset_mapping.txt"
    mapping.write_text(mapping.read_text().replace("tabby cat,", "tab\x07by cat,"))
    refused(vheads("audit", "--model", NO_MODEL, "--source", f"imagenet:{train}", "--n", "2"),
            str(mapping), "line 2", "control character '\\x07'")
    root = make_hf_saved(tmp_path / "hf")
    info = root / "dataset_info.json"
    d = json.loads(info.read_text())
    d["features"]["label"]["names"][3] = "rocket\nlauncher"
    info.write_text(json.dumps(d))
    refused(vheads("audit", "--model", NO_MODEL, "--source", f"hf:{root}", "--n", "2"), "ClassLabel name 3", "control character '\\n'")
