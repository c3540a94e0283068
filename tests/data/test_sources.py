"""Class-labelled sources read in their publishers' layouts (ILSVRC folder, Hub parquet,
save_to_disk), on real photographs; bad input is one error naming the file and row."""

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from tests.data.photos import PHOTOS, class_photos, hf_table, make_hf_parquet, make_hf_saved, make_ilsvrc
from vheads.data.sources import open_source


def _pixels(im):
    return np.asarray(im.convert("RGB"), dtype=np.int16)


def test_ilsvrc_folder_reads_wnids_and_first_synonym_names(tmp_path):
    train = make_ilsvrc(tmp_path)
    src = open_source(f"imagenet:{train}")
    assert src.classes == tuple(sorted(PHOTOS))
    assert src.names == {w: name for w, (_, name) in PHOTOS.items()}  # "astronaut", not "astronaut, synonym of …"
    for w in PHOTOS:
        files = [r.path for r in src.images[w]]
        assert files == sorted((train / w).glob("*.JPEG"))
        # the image opened is the JPEG on disk (decoded independently here)
        assert np.array_equal(_pixels(src.open(src.images[w][0])), _pixels(Image.open(files[0])))
    assert src.provenance()["synset_mapping"].endswith("LOC_synset_mapping.txt")


def test_ilsvrc_without_mapping_names_classes_by_wnid(tmp_path):
    train = make_ilsvrc(tmp_path, mapping=False)
    src = open_source(f"imagenet:{train}")
    assert src.names == {w: w for w in PHOTOS}


def test_hub_parquet_names_come_from_the_classlabel_and_rows_hold_the_right_photos(tmp_path):
    make_hf_parquet(tmp_path / "repo", shards=2)
    src = open_source(f"hf:{tmp_path / 'repo'}")
    ids = list(PHOTOS)
    assert [src.names[c] for c in src.classes] == [PHOTOS[w][1] for w in ids]
    photos = class_photos()
    for c in src.classes:
        assert len(src.images[c]) == 2
        for k, ref in enumerate(src.images[c]):
            # PNG round trip is lossless: the row's image is exactly the photo written there
            assert np.array_equal(_pixels(src.open(ref)), _pixels(photos[ids[int(c)]][k]))
    assert {r.path.name for refs in src.images.values() for r in refs} == {"train-00000-of-00002.parquet", "train-00001-of-00002.parquet"}


def test_hub_parquet_split_selection(tmp_path):
    root = make_hf_parquet(tmp_path / "repo", split="train", shards=1)
    table, _ = hf_table()
    pq.write_table(table.slice(0, 8), root / "data" / "test-00000-of-00001.parquet")
    assert sum(len(v) for v in open_source(f"hf:{root},train").images.values()) == 12
    assert sum(len(v) for v in open_source(f"hf:{root},test").images.values()) == 8


def test_save_to_disk_folder_reads_like_the_parquet_files(tmp_path):
    saved = open_source(f"hf:{make_hf_saved(tmp_path / 'saved')}")
    hub = open_source(f"hf:{make_hf_parquet(tmp_path / 'repo')}")
    assert saved.names == hub.names
    for c in saved.classes:
        for a, b in zip(saved.images[c], hub.images[c]):
            assert np.array_equal(_pixels(saved.open(a)), _pixels(hub.open(b)))


def test_datasetdict_needs_a_split(tmp_path):
    make_hf_saved(tmp_path / "dd" / "validation")
    (tmp_path / "dd" / "dataset_dict.json").write_text(json.dumps({"splits": ["validation"]}))
    with pytest.raises(ValueError, match=r"DatasetDict with splits validation; write hf:.*,SPLIT"):
        open_source(f"hf:{tmp_path / 'dd'}")
    assert len(open_source(f"hf:{tmp_path / 'dd'},validation").classes) == 6


def test_class_list_and_exclusion_list_by_id_or_name(tmp_path):
    train = make_ilsvrc(tmp_path)
    keep = tmp_path / "keep.txt"
    keep.write_text("# the five kept\nn00000001\ntabby cat\ncoffee mug\nrocket\nmotorcycle\n")
    drop = tmp_path / "drop.txt"
    drop.write_text("rocket\n")
    src = open_source(f"imagenet:{train}", str(keep), str(drop))
    assert src.classes == ("n00000001", "n00000002", "n00000003", "n00000006")
    assert src.provenance()["classes"] == list(src.classes)


# ---- bad input: one error naming the file (and row) ------------------------------------------
def test_fewer_than_four_classes_is_refused(tmp_path):
    train = make_ilsvrc(tmp_path)
    drop = tmp_path / "drop.txt"
    drop.write_text("astronaut\nrocket\ncameraman\n")
    with pytest.raises(ValueError, match="3 usable classes.*at least 4"):
        open_source(f"imagenet:{train}", exclude=str(drop))


def test_unknown_class_in_a_list_is_named(tmp_path):
    train = make_ilsvrc(tmp_path)
    keep = tmp_path / "keep.txt"
    keep.write_text("astronaut\nzebra\n")
    with pytest.raises(ValueError, match="class list names class 'zebra'"):
        open_source(f"imagenet:{train}", str(keep))


def test_empty_folder_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="has no class folders"):
        open_source(f"imagefolder:{tmp_path / 'empty'}")
    with pytest.raises(ValueError, match="no class folders named by wnid"):
        open_source(f"imagenet:{tmp_path / 'empty'}")
    with pytest.raises(ValueError, match=r"no save_to_disk dataset .* no \*\.parquet files"):
        open_source(f"hf:{tmp_path / 'empty'}")


def test_missing_label_column_is_named_with_its_file(tmp_path):
    table, _ = hf_table()
    (tmp_path / "data").mkdir()
    pq.write_table(table.drop(["label"]), tmp_path / "data" / "train-00000-of-00001.parquet")
    with pytest.raises(ValueError, match=r"train-00000-of-00001\.parquet has no label column.*columns: image"):
        open_source(f"hf:{tmp_path}")


def test_numeric_labels_without_classlabel_names_are_refused(tmp_path):
    make_hf_parquet(tmp_path / "repo", label_names=False)
    with pytest.raises(ValueError, match="no ClassLabel names"):
        open_source(f"hf:{tmp_path / 'repo'}")


def test_label_outside_the_classlabel_names_the_row(tmp_path):
    table, features = hf_table()
    labels = table.column("label").to_pylist()
    labels[5] = 17
    table = table.set_column(1, "label", pa.array(labels, pa.int64()))
    (tmp_path / "data").mkdir()
    pq.write_table(table, tmp_path / "data" / "train.parquet")
    with pytest.raises(ValueError, match=r"train\.parquet row 5: label 17 is not one of the 6"):
        open_source(f"hf:{tmp_path}")


def test_unreadable_row_image_names_file_and_row(tmp_path):
    table, _ = hf_table()
    cells = table.column("image").to_pylist()
    cells[3] = {"bytes": b"not an image", "path": "x.png"}
    cells[4] = {"bytes": b"", "path": "y.png"}
    table = table.set_column(0, "image", pa.array(cells, table.schema.field("image").type))
    (tmp_path / "data").mkdir()
    pq.write_table(table, tmp_path / "data" / "train.parquet")
    src = open_source(f"hf:{tmp_path}")
    with pytest.raises(ValueError, match=r"train\.parquet row 3: not a readable image"):
        src.open(src.images["1"][1])
    with pytest.raises(ValueError, match=r"train\.parquet row 4: the image holds no bytes \(only a path"):
        src.open(src.images["2"][0])


def test_zero_size_and_corrupt_image_files_are_named(tmp_path):
    train = make_ilsvrc(tmp_path)
    (train / "n00000001" / "n00000001_0.JPEG").write_bytes(b"")
    (train / "n00000002" / "n00000002_0.JPEG").write_bytes(b"\xff\xd8garbage")
    src = open_source(f"imagenet:{train}")
    with pytest.raises(ValueError, match=r"n00000001_0\.JPEG is empty \(0 bytes\)"):
        src.open(src.images["n00000001"][0])
    with pytest.raises(ValueError, match=r"n00000002_0\.JPEG: not a readable image"):
        src.open(src.images["n00000002"][0])


def test_unknown_source_kind_is_refused():
    with pytest.raises(ValueError, match="unknown image source 'webdataset:/x'"):
        open_source("webdataset:/x")


def test_png_bytes_helper_roundtrip():
    # the fixture's encoder is lossless, which the pixel-equality tests above rely on
    im = class_photos()["n00000002"][0]
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    assert np.array_equal(_pixels(Image.open(io.BytesIO(buf.getvalue()))), _pixels(im))
