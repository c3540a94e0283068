"""``hf:PATH[,SPLIT]``: a Hugging Face dataset on disk, read with pyarrow (no ``datasets`` needed).

Two layouts, as the ``datasets`` library and the Hub write them:

- **``save_to_disk`` folder** — ``state.json`` (``"_data_files": [{"filename":
  "data-00000-of-00001.arrow"}, …]``), ``dataset_info.json`` (``"features"``) and the Arrow
  IPC *stream* files it names. A ``DatasetDict`` (``dataset_dict.json`` + one folder per
  split) needs ``,SPLIT`` (or point ``PATH`` at the split's folder).
- **Parquet files** of a dataset repository — ``PATH/**/*.parquet``, e.g.
  ``data/train-00000-of-00004.parquet``; ``,SPLIT`` keeps the files whose name starts with
  ``SPLIT-`` or that lie in a folder named ``SPLIT``. The features come from the
  ``huggingface`` key of the parquet schema metadata.

Columns: the image column is the one whose feature is ``Image`` (else one named ``image``
or ``img``), stored as ``{bytes, path}``; the label column is the one whose feature is
``ClassLabel`` (else ``label`` / ``labels``). Class names come from the ``ClassLabel``'s
``names``; a string label column is its own names. Rows with a negative label (unlabelled
test splits) are skipped.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from vheads._errors import MissingFileError, VheadsError, inside_data_folder, plain_text
from vheads._io import read_json
from vheads.data.sources._base import ClassSource, ImageRef

IMAGE_COLUMNS = ("image", "img")
LABEL_COLUMNS = ("label", "labels")


def _features_of_parquet(path: Path) -> dict:
    meta = pq.read_schema(path).metadata or {}
    raw = meta.get(b"huggingface")
    if not raw:
        return {}
    try:
        return json.loads(raw).get("info", {}).get("features", {}) or {}
    except json.JSONDecodeError:
        return {}


def _pick_columns(spec: str, where: Path, schema: pa.Schema, features: dict) -> tuple[str, str]:
    names = schema.names
    image = next((c for c, f in features.items() if isinstance(f, dict) and f.get("_type") == "Image" and c in names), None)
    image = image or next((c for c in IMAGE_COLUMNS if c in names), None)
    label = next((c for c, f in features.items() if isinstance(f, dict) and f.get("_type") == "ClassLabel" and c in names), None)
    label = label or next((c for c in LABEL_COLUMNS if c in names), None)
    if image is None:
        raise ValueError(f"{spec}: {where} has no image column (an Image feature, or a column named "
                         f"{' or '.join(IMAGE_COLUMNS)}); its columns: {', '.join(names)}")
    if label is None:
        raise ValueError(f"{spec}: {where} has no label column (a ClassLabel feature, or a column named "
                         f"{' or '.join(LABEL_COLUMNS)}); its columns: {', '.join(names)}")
    return image, label


def _class_names(spec: str, where: Path, features: dict, label: str, labels: pa.ChunkedArray) -> list[str] | None:
    """The ClassLabel names, or None for a string label column."""
    f = features.get(label)
    if isinstance(f, dict) and f.get("_type") == "ClassLabel" and f.get("names"):
        return [plain_text(n, f"{spec}: {where}: ClassLabel name {i} of {label!r}") for i, n in enumerate(f["names"])]
    if pa.types.is_string(labels.type) or pa.types.is_large_string(labels.type):
        return None
    raise ValueError(f"{spec}: {where}: label column {label!r} is numeric but no ClassLabel names are recorded "
                     "(dataset_info.json / the parquet 'huggingface' metadata), so options cannot be named")


def _json_object(spec: str, path: Path) -> dict:
    """A metadata file of the dataset folder: a JSON object, or an error naming the file."""
    data = read_json(path, f"{spec}: {path}")
    if not isinstance(data, dict):
        raise VheadsError(f"{spec}: {path} must hold a JSON object, got {type(data).__name__}")
    return data


def _split_files(spec: str, root: Path, split: str | None) -> tuple[str, list[Path], dict]:
    """(layout, data files, features) of an ``hf:`` path."""
    if (root / "dataset_dict.json").is_file():
        splits = _json_object(spec, root / "dataset_dict.json").get("splits", [])
        if not split:
            raise ValueError(f"{spec}: {root} is a DatasetDict with splits {', '.join(map(str, splits))}; "
                             f"write hf:{root},SPLIT")
        if split not in splits or not (root / split).is_dir():
            raise ValueError(f"{spec}: split {split!r} is not one of {', '.join(map(str, splits))}")
        return _split_files(spec, root / split, None)
    if (root / "state.json").is_file():
        state = _json_object(spec, root / "state.json")
        entries = state.get("_data_files", [])
        files = [root / d["filename"] for d in entries if isinstance(d, dict) and isinstance(d.get("filename"), str)] \
            if isinstance(entries, list) else []
        if not files:
            raise VheadsError(f"{spec}: {root / 'state.json'} lists no data files (a '_data_files' list of {{\"filename\": …}})")
        for f in files:
            inside_data_folder(root, f, f"{spec}: {root / 'state.json'} names a data file")
            if not f.is_file():
                raise MissingFileError(f"{spec}: {root / 'state.json'} names {f.name}, which is missing")
        info = root / "dataset_info.json"
        features = _json_object(spec, info).get("features", {}) if info.is_file() else {}
        return "save_to_disk", files, features if isinstance(features, dict) else {}
    files = [inside_data_folder(root, f, spec) for f in sorted(root.rglob("*.parquet"))]
    if split:
        files = [f for f in files if f.name.startswith(f"{split}-") or f.name.startswith(f"{split}.") or f.parent.name == split]
    if not files:
        raise ValueError(f"{spec}: {root} holds no save_to_disk dataset (state.json) and no "
                         f"{'parquet files of split ' + repr(split) if split else '*.parquet files'}")
    return "parquet", files, _features_of_parquet(files[0])


@lru_cache(maxsize=4)
def _arrow_table(path: Path) -> pa.Table:
    """A save_to_disk Arrow stream file, memory-mapped (images are not copied)."""
    with pa.memory_map(str(path)) as src:
        return pa.ipc.open_stream(src).read_all()


def _table_columns(layout: str, path: Path, columns: list[str]) -> pa.Table:
    if layout == "parquet":
        return pq.read_table(path, columns=columns)
    return _arrow_table(path).select(columns)


@lru_cache(maxsize=8)
def _parquet_row_group(path: Path, group: int, column: str) -> pa.ChunkedArray:
    return pq.ParquetFile(path).read_row_group(group, columns=[column]).column(column)


def _image_cell(layout: str, path: Path, row: int, column: str):
    if layout == "parquet":
        pf = pq.ParquetFile(path)
        start = 0
        for g in range(pf.metadata.num_row_groups):
            n = pf.metadata.row_group(g).num_rows
            if row < start + n:
                return _parquet_row_group(path, g, column)[row - start].as_py()
            start += n
        raise IndexError(row)
    return _arrow_table(path).column(column)[row].as_py()


def hf_source(arg: str, spec: str | None = None) -> ClassSource:
    path, _, split = arg.partition(",")
    root = Path(path)
    spec = spec or f"hf:{arg}"
    if not root.is_dir():
        raise FileNotFoundError(f"{spec}: folder {root} does not exist")
    layout, files, features = _split_files(spec, root, split or None)
    schema = pq.read_schema(files[0]) if layout == "parquet" else _arrow_table(files[0]).schema
    image_col, label_col = _pick_columns(spec, files[0], schema, features)
    images: dict[str, list[ImageRef]] = {}
    names: list[str] | None = None
    for f in files:
        try:
            labels = _table_columns(layout, f, [label_col]).column(label_col)
        except KeyError:
            raise ValueError(f"{spec}: {f} has no column {label_col!r} (the first file has it)") from None
        if f == files[0]:
            names = _class_names(spec, f, features, label_col, labels)
        for row, lab in enumerate(labels.to_pylist()):
            if lab is None or (isinstance(lab, int) and lab < 0):
                continue
            if names is not None and (not isinstance(lab, int) or lab >= len(names)):
                raise ValueError(f"{spec}: {f} row {row}: label {lab!r} is not one of the {len(names)} ClassLabel indices")
            if names is None:
                plain_text(lab, f"{spec}: {f} row {row}: label")
            images.setdefault(str(lab), []).append(ImageRef(f, row))
    if names is not None:
        display = {str(i): n for i, n in enumerate(names)}
        classes = tuple(str(i) for i in range(len(names)))
        images = {c: images.get(c, []) for c in classes}
    else:
        classes = tuple(sorted(images))
        display = {c: c for c in classes}

    def read_bytes(ref: ImageRef) -> bytes:
        cell = _image_cell(layout, ref.path, ref.row, image_col)
        if isinstance(cell, dict):
            data = cell.get("bytes")
            if not data:
                raise ValueError(f"{spec}: {ref.where()}: the image holds no bytes"
                                 + (f" (only a path, {cell.get('path')!r})" if cell.get("path") else ""))
            return data
        if isinstance(cell, (bytes, bytearray)):
            return bytes(cell)
        raise ValueError(f"{spec}: {ref.where()}: column {image_col!r} holds {type(cell).__name__}, not image bytes")

    return ClassSource(spec, "hf", classes, display, images, read_bytes,
                       info={"layout": layout, "files": [str(f) for f in files], "image_column": image_col, "label_column": label_col})
