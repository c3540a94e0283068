"""RefCOCO readers on fixtures written at test time in each publisher's layout, with real
photographs scikit-image ships: the refer API's pickle + instances.json + COCO train2014
files, and lmms-lab's parquet files."""

import io
import json
import os
import pickle

import numpy as np
import pytest
from PIL import Image

from vheads._errors import VheadsError
from vheads.data.refcoco import coco_box, load_plain_pickle, open_referring, parquet_items, refer_items

skdata = pytest.importorskip("skimage.data")

#: (image_id, photo); astronaut 512x512, coffee 600x400, chelsea 451x300 (width x height)
PHOTOS = {9: "astronaut", 581857: "coffee", 42: "chelsea"}


def _photo(name):
    return Image.fromarray(getattr(skdata, name)()).convert("RGB")


def _write_refer(root, refs, anns, dataset="refcoco", split_by="unc"):
    d = root / dataset
    d.mkdir(parents=True, exist_ok=True)
    with open(d / f"refs({split_by}).p", "wb") as f:
        pickle.dump(refs, f, protocol=2)  # the refer API's files are Python 2 pickles
    imgs = root / "images" / "mscoco" / "images" / "train2014"
    imgs.mkdir(parents=True, exist_ok=True)
    images = []
    for iid, name in PHOTOS.items():
        im = _photo(name)
        im.save(imgs / f"COCO_train2014_{iid:012d}.jpg")
        images.append({"id": iid, "width": im.size[0], "height": im.size[1], "file_name": f"COCO_train2014_{iid:012d}.jpg"})
    (d / "instances.json").write_text(json.dumps({"images": images, "annotations": anns,
                                                   "categories": [{"id": 1, "name": "person"}, {"id": 17, "name": "cat"}]}))


def _ref(ref_id, ann_id, image_id, split, sents):
    return {"ref_id": ref_id, "ann_id": ann_id, "image_id": image_id, "split": split, "category_id": 1,
            "file_name": f"COCO_train2014_{image_id:012d}_{ann_id}.jpg", "sent_ids": list(range(len(sents))),
            "sentences": [{"sent": s, "raw": s, "tokens": s.split(), "sent_id": 100 * ref_id + k} for k, s in enumerate(sents)]}


@pytest.fixture
def refer_root(tmp_path):
    refs = [_ref(1, 11, 9, "val", ["woman in white suit", "astronaut"]), _ref(2, 12, 42, "testA", ["cat on the left"]),
            _ref(3, 13, 581857, "val", ["the cup"])]
    anns = [{"id": 11, "image_id": 9, "bbox": [100.5, 20.0, 250.0, 400.25], "category_id": 1, "area": 1.0, "iscrowd": 0},
            {"id": 12, "image_id": 42, "bbox": [0.0, 0.0, 451.0, 300.0], "category_id": 17, "area": 1.0, "iscrowd": 0},
            {"id": 13, "image_id": 581857, "bbox": [150.0, 60.0, 300.0, 200.0], "category_id": 1, "area": 1.0, "iscrowd": 0}]
    _write_refer(tmp_path, refs, anns)
    return tmp_path


def test_refer_layout_gives_one_item_per_expression_with_corner_boxes(refer_root):
    items = refer_items(refer_root, "refcoco", "val")
    assert [it.meta["expression"] for it in items] == ["woman in white suit", "astronaut", "the cup"]
    # [x, y, w, h] = [100.5, 20, 250, 400.25] -> (100.5, 20, 350.5, 420.25); whole pixels (100, 20, 351, 421)
    assert items[0].meta["box"] == (100.5, 20.0, 350.5, 420.25)
    assert items[0].regions["object"] == (100, 20, 351, 421)
    assert items[0].image.size == (512, 512) and items[2].image.size == (600, 400)
    q = items[0].question
    assert q[slice(*items[0].query_span)] == "woman in white suit"
    assert items[2].meta["box"] == (150.0, 60.0, 450.0, 260.0)
    assert [it.meta["box"] for it in refer_items(refer_root, "refcoco", "testA")] == [(0.0, 0.0, 451.0, 300.0)]
    # a seeded draw of n expressions, in row order
    two = refer_items(refer_root, "refcoco", "val", n=2, seed=1)
    assert len(two) == 2 and [it.id for it in two] == [it.id for it in items if it.id in {t.id for t in two}]
    assert [it.id for it in open_referring(f"refer:{refer_root},refcoco,val")] == [it.id for it in items]


def test_coco_box_conversion_by_hand():
    assert coco_box([10, 20, 30, 40], (100, 100), "f") == (10, 20, 40, 60)
    assert coco_box([0.25, 0.5, 99.5, 99.0], (100, 100), "f") == (0.25, 0.5, 99.75, 99.5)
    assert coco_box([90, 0, 10.5, 10], (100, 100), "f") == (90, 0, 100, 10)  # half a pixel past the edge: clipped
    with pytest.raises(VheadsError, match=r"f: .*outside the 100x100 image"):
        coco_box([90, 0, 20, 10], (100, 100), "f")
    with pytest.raises(VheadsError, match="empty"):
        coco_box([1, 1, 0, 5], (100, 100), "f")


def test_refer_refuses_bad_input_in_one_line_naming_file_and_row(refer_root, tmp_path_factory):
    with pytest.raises(VheadsError, match=r"refs\(unc\)\.p: no split 'testC'; its splits are testA, val") as e:
        refer_items(refer_root, "refcoco", "testC")
    assert "\n" not in str(e.value)
    root = tmp_path_factory.mktemp("bad")
    _write_refer(root, [_ref(1, 11, 9, "val", ["ok"]), _ref(2, 12, 42, "val", ["  "])],
                 [{"id": 11, "image_id": 9, "bbox": [1, 1, 5, 5]}, {"id": 12, "image_id": 42, "bbox": [1, 1, 5, 5]}])
    with pytest.raises(VheadsError, match=r"refs\(unc\)\.p row 1 \(ref_id 2\): the referring expression is empty"):
        refer_items(root, "refcoco", "val")
    root = tmp_path_factory.mktemp("outside")
    _write_refer(root, [_ref(1, 11, 42, "val", ["cat"])], [{"id": 11, "image_id": 42, "bbox": [400, 10, 100, 20]}])
    with pytest.raises(VheadsError, match=r"instances\.json annotation 11 .*row 0.*outside the 451x300 image"):
        refer_items(root, "refcoco", "val")


class _Boom:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_a_pickle_holding_anything_but_plain_data_is_refused_unrun(tmp_path):
    p = tmp_path / "refs(unc).p"
    p.write_bytes(pickle.dumps([{"ref_id": 1}, _Boom()]))
    with pytest.raises(VheadsError, match=r"refs\(unc\)\.p: refused: .*plain data.*(posix|os)\.system"):
        load_plain_pickle(p)
    p.write_bytes(pickle.dumps([{"ref_id": 1, "x": (1.5, None, True, "s")}], protocol=2))
    assert load_plain_pickle(p) == [{"ref_id": 1, "x": (1.5, None, True, "s")}]


def _write_parquet(root, split, rows, shard="00000-of-00001"):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (root / "data").mkdir(parents=True, exist_ok=True)
    cols = {"question_id": [], "image": [], "question": [], "answer": [], "segmentation": [], "bbox": [], "iscrowd": [],
            "file_name": []}
    for qid, photo, answers, bbox in rows:
        buf = io.BytesIO()
        _photo(photo).save(buf, format="JPEG")
        cols["question_id"].append(qid)
        cols["image"].append({"bytes": buf.getvalue(), "path": None})
        cols["question"].append("Please carefully observe the area circled in the image and come up with a caption for the area.")
        cols["answer"].append(answers)
        cols["segmentation"].append([float(bbox[0]), float(bbox[1]), float(bbox[0] + bbox[2]), float(bbox[1])])
        cols["bbox"].append([float(v) for v in bbox])
        cols["iscrowd"].append(0)
        cols["file_name"].append(f"COCO_train2014_{abs(hash(qid)) % 10**12:012d}.jpg")
    schema = pa.schema([("question_id", pa.string()), ("image", pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
                        ("question", pa.string()), ("answer", pa.list_(pa.string())), ("segmentation", pa.list_(pa.float64())),
                        ("bbox", pa.list_(pa.float64())), ("iscrowd", pa.int64()), ("file_name", pa.string())])
    pq.write_table(pa.table(cols, schema=schema), root / "data" / f"{split}-{shard}.parquet")


def test_parquet_layout_gives_one_item_per_expression(tmp_path):
    _write_parquet(tmp_path, "val", [("q1", "coffee", ["the cup", "white mug"], [150, 60, 300, 200])])
    _write_parquet(tmp_path, "val", [("q2", "chelsea", ["cat"], [10.5, 20, 100, 50.5])], shard="00001-of-00002")
    _write_parquet(tmp_path, "testB", [("q3", "astronaut", ["flag"], [0, 0, 50, 60])])
    items = parquet_items(tmp_path, "val")
    assert [it.meta["expression"] for it in items] == ["the cup", "white mug", "cat"]
    assert [it.meta["box"] for it in items] == [(150, 60, 450, 260), (150, 60, 450, 260), (10.5, 20, 110.5, 70.5)]
    assert items[2].image.size == (451, 300)
    assert [it.meta["box"] for it in open_referring(f"refcoco-hf:{tmp_path},testB")] == [(0, 0, 50, 60)]


def test_parquet_refuses_bad_input_naming_file_and_row(tmp_path):
    _write_parquet(tmp_path, "val", [("q1", "coffee", ["the cup"], [150, 60, 300, 200]), ("q2", "coffee", ["", "x"], [1, 1, 2, 2])])
    with pytest.raises(VheadsError, match=r"val-00000-of-00001\.parquet row 1: the referring expression is empty"):
        parquet_items(tmp_path, "val")
    with pytest.raises(VheadsError, match=r"no split 'testA'.*its splits are val"):
        parquet_items(tmp_path, "testA")
    other = tmp_path / "o"
    _write_parquet(other, "val", [("q1", "coffee", ["the cup"], [550, 60, 100, 20])])
    with pytest.raises(VheadsError, match=r"val-00000-of-00001\.parquet row 0: .*outside the 600x400 image"):
        parquet_items(other, "val")


def test_a_referring_item_grounds_on_a_tiny_model(loaded, refer_root):
    # the grounding test reads a RefCOCO item like any other: its float box is the ground truth
    from vheads.engine import Engine
    from vheads.evaluation import HeadSet, grounding

    eng = Engine(loaded["qwen3_vl"])
    L, H = eng.shape
    items = refer_items(refer_root, "refcoco", "val", n=2, seed=0)
    out = grounding(eng, items, [HeadSet([(0, 0)], L, H), HeadSet([(1, 1), (0, 2)], L, H)])
    assert out.values.shape == (2, 2) and np.isin(out.values, [0, 1]).all()
    assert ((out.detail["iou"] >= 0) & (out.detail["iou"] <= 1)).all()
