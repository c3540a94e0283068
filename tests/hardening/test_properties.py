"""Property: any TOML / strips.json / COCO JSON either loads or raises VheadsError naming
the key or file — never another exception — and loading writes nothing, while every output
name a loaded corpus gives stays inside ``--out`` (point 1 and the issue's "must show")."""

import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from PIL import Image

from vheads._errors import VheadsError
from vheads.study import StudyConfig, load_config

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---- TOML -----------------------------------------------------------------------------------------

scalars = st.one_of(st.integers(-3, 300), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                    st.sampled_from(["comics", "photo", "strips:/nonexistent", "coco:", "ncs", "all", "cuda", "cpu", "",
                                     "layer-matched", "../x", "strips:"]), st.text(max_size=8))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=8)
KEYS = [f for f in StudyConfig.__dataclass_fields__] + ["colour", ""]
RUN_KEYS = ["backend", "ray_workers", "shard_size", "batch_size", "torch_threads", "nope"]


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
    if isinstance(v, (int, str)):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"


configs = st.dictionaries(st.sampled_from(KEYS), values, max_size=5) | st.fixed_dictionaries(
    {"run": st.dictionaries(st.sampled_from(RUN_KEYS), scalars, max_size=3)})


@SETTINGS
@given(configs, st.booleans(), st.text(max_size=40))
def test_any_toml_loads_or_names_the_key(cfg, raw, text):
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "c.toml"
        p.write_text(text if raw else "".join(f"{json.dumps(k)} = {_toml_value(v)}\n" for k, v in cfg.items()))
        try:
            assert isinstance(load_config(p), StudyConfig)
            event("loaded")
        except VheadsError as e:
            event("refused")
            assert "config key" in str(e) or "config file" in str(e), str(e)
        assert [q.name for q in Path(tmp).iterdir()] == ["c.toml"]


# ---- strips.json ----------------------------------------------------------------------------------

names = st.one_of(st.none(), st.integers(), st.sampled_from(["mc", "../../x", "/tmp/abs", "a-b", "ok_name", "", ".."]), st.text(max_size=8))
numbers = st.one_of(st.integers(-5, 200), st.floats(-5, 200), st.booleans(), st.text(max_size=2))
panel = st.fixed_dictionaries({"box": st.one_of(st.lists(numbers, min_size=4, max_size=4), st.just([0, 0, 32, 32]), numbers),
                               "label": st.one_of(st.sampled_from(["dog", "cat", "", " "]), st.text(max_size=6), st.integers())})
tiled = st.lists(st.sampled_from(["dog", "cat", "car", "dog "]), min_size=1, max_size=4).map(  # side by side, as real strips
    lambda labels: [{"box": [32 * j, 0, 32 * (j + 1), 32], "label": lab} for j, lab in enumerate(labels)])
strip = st.fixed_dictionaries({"image": st.one_of(st.sampled_from(["s0.png", "../s0.png", "/etc/hostname", "", "nope.png", "."]),
                                                  st.text(max_size=6)),
                               "panels": st.one_of(tiled, st.lists(panel, max_size=4), st.integers())})
index = st.one_of(st.fixed_dictionaries({"strips": st.lists(strip, max_size=3)}, optional={"corpus": names, "abbrev": names}),
                  values)


@SETTINGS
@given(index, st.sampled_from(["ordinal", "referring"]))
def test_any_strips_json_loads_or_names_the_file(data, query):
    from vheads.discovery import load_corpus

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folder = root / "strips"
        folder.mkdir()
        Image.new("RGB", (128, 32), (10, 200, 30)).save(folder / "s0.png")
        (folder / "strips.json").write_text(json.dumps(data))
        before = sorted(str(p) for p in root.rglob("*"))
        try:
            c = load_corpus(f"strips:{folder}", query, 4)
        except VheadsError as e:
            event("refused")
            assert str(folder) in str(e), str(e)
        else:
            event("loaded")
            out = (root / "out").resolve()
            for name in [f"{c.abbrev}-ord-last.json", f"{c.abbrev}-ref-qsp.items.npz", *(f"strips/{it.id}.png" for it in c.items)]:
                assert (out / name).resolve().parent in (out, out / "strips"), name
        assert sorted(str(p) for p in root.rglob("*")) == before  # loading wrote nothing


# ---- COCO instances JSON --------------------------------------------------------------------------

ids = st.one_of(st.integers(0, 7), st.text(max_size=2), st.none())
coco = st.fixed_dictionaries({
    "images": st.one_of(st.lists(st.fixed_dictionaries({"id": ids, "file_name": st.sampled_from(
        [f"{i}.jpg" for i in range(8)] + ["../0.jpg", "/etc/hostname", "", "x.jpg"])}), max_size=8), values),
    "annotations": st.one_of(st.lists(st.fixed_dictionaries(
        {"image_id": ids, "category_id": ids, "bbox": st.one_of(st.lists(numbers, min_size=4, max_size=4), numbers)},
        optional={"area": numbers, "iscrowd": st.integers(0, 1), "id": ids}), max_size=10), values),
    "categories": st.one_of(st.lists(st.fixed_dictionaries({"id": ids, "name": st.one_of(
        st.sampled_from(["dog", "cat", "car", "bus", "cup", "owl", "dog", ""]), st.integers())}), max_size=8), values),
}) | values
coco_ok = st.lists(st.integers(1, 3), min_size=2, max_size=8).map(lambda cats: {  # image i's one object is of category cats[i]
    "images": [{"id": i, "file_name": f"{i}.jpg"} for i in range(len(cats))],
    "annotations": [{"id": i, "image_id": i, "category_id": c, "bbox": [0, 0, 4, 4]} for i, c in enumerate(cats)],
    "categories": [{"id": c, "name": n} for c, n in ((1, "dog"), (2, "cat"), (3, "owl"))]})


@SETTINGS
@given(coco | coco_ok)
def test_any_coco_json_loads_or_names_the_file(data):
    from vheads.data.loaders import load_coco_strips

    with tempfile.TemporaryDirectory() as tmp:
        images = Path(tmp) / "val"
        images.mkdir()
        for i in range(8):
            Image.new("RGB", (20, 16), (30 * i, 0, 0)).save(images / f"{i}.jpg")
        ann = Path(tmp) / "instances_val.json"
        ann.write_text(json.dumps(data))
        try:
            items = load_coco_strips(images, "ordinal", 1, annotations=ann, panel_size=16, n_panels=2)
            event("loaded")
        except VheadsError as e:
            event("refused")
            assert str(ann) in str(e) or ann.name in str(e) or str(images) in str(e), str(e)
        else:
            assert len(items) == 1 and items[0].image.size == (32, 16)
