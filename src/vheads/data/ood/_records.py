"""One benchmark question as the converters see it, and the table / file helpers the readers share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pyarrow.parquet as pq
from PIL import Image

from vheads._errors import inside_data_folder, plain_text
from vheads.data._open import open_rgb

from vheads.data.sources import table_image_cell


@dataclass
class MCQRecord:
    """A benchmark question: one image, a question, its choices and the index of the right one.

    ``where`` names the file and row / line it came from (every error quotes it); ``group``
    is the question family retrieval groups are drawn within (a Spatial457 level, a
    SpatialRGPT category); ``boxes`` are labelled regions drawn onto the photo
    (SpatialRGPT's "Region [0]" …).
    """

    id: str
    where: str
    load: Callable[[], Path | bytes] = field(repr=False)  # the image file, or its encoded bytes
    question: str
    choices: list[str]
    answer: int
    group: str = ""
    boxes: list[tuple[str, tuple[float, float, float, float]]] = field(default_factory=list)

    def image(self) -> Image.Image:
        """The RGB image; a missing, empty or unreadable one is an error naming file and row."""
        return open_rgb(self.load(), self.where)


def check_record(rec: MCQRecord, min_choices: int = 2) -> MCQRecord:
    """Choices must be distinct non-empty strings and the answer one of them (retrieval
    records carry only their answer: ``min_choices=1``)."""
    if not rec.question.strip():
        raise ValueError(f"{rec.where}: the question is empty")
    plain_text(rec.question, f"{rec.where}: the question", multiline=True)
    if len(rec.choices) < min_choices or any(not c.strip() for c in rec.choices):
        raise ValueError(f"{rec.where}: needs at least {min_choices} non-empty choices, got {rec.choices!r}")
    for k, c in enumerate(rec.choices):
        plain_text(c, f"{rec.where}: choice {k}")
    if len(set(rec.choices)) != len(rec.choices):
        raise ValueError(f"{rec.where}: choices repeat: {rec.choices!r}")
    if not 0 <= rec.answer < len(rec.choices):
        raise ValueError(f"{rec.where}: the answer is not among the choices {rec.choices!r}")
    return rec


def answer_index(where: str, answer, choices: list[str]) -> int:
    """The index of ``answer`` in ``choices``: the choice text itself, or a letter ``B`` /
    ``(B)`` when the text is not a choice. Anything else is an error naming the row."""
    text = str(answer).strip()
    if text in choices:
        return choices.index(text)
    letter = text.strip("()").strip()
    if len(letter) == 1 and "A" <= letter.upper() < chr(ord("A") + len(choices)):
        return ord(letter.upper()) - ord("A")
    raise ValueError(f"{where}: the answer {text!r} is not among the choices {choices!r}")


def file_image(path: Path) -> Callable[[], Path]:
    return lambda: path


def cell_image(path: Path, row: int, column: str) -> Callable[[], bytes]:
    """A parquet row's image bytes ({bytes, path} struct or raw bytes), read when needed."""
    def load():
        cell = table_image_cell("parquet", path, row, column)
        return (cell.get("bytes") if isinstance(cell, dict) else cell) or b""
    return load


def inside(folder: Path, name: str, where: str) -> Path:
    """``folder / name`` for a relative path read from data; absolute paths and ``..`` are refused."""
    p = PurePosixPath(str(name).replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise ValueError(f"{where}: image path {str(name)!r} must be relative and stay inside {folder}")
    return inside_data_folder(folder, folder.joinpath(*p.parts), f"{where}: image path {str(name)!r}")


def parquet_rows(files: list[Path], columns: list[str], spec: str) -> list[tuple[Path, int, dict]]:
    """(file, row, {column: value}) of every row; a missing column is an error naming the file."""
    out = []
    for f in files:
        names = pq.read_schema(f).names
        missing = [c for c in columns if c not in names]
        if missing:
            raise ValueError(f"{spec}: {f} has no column {missing[0]!r}; its columns: {', '.join(names)}")
        table = pq.read_table(f, columns=columns)
        for row, values in enumerate(table.to_pylist()):
            out.append((f, row, values))
    return out


def find_parquet(spec: str, root: Path, prefix: str = "") -> list[Path]:
    """The parquet files under ``root`` whose name starts with ``prefix`` (a split)."""
    if not root.is_dir():
        raise FileNotFoundError(f"{spec}: folder {root} does not exist")
    files = [inside_data_folder(root, f, spec) for f in sorted(root.rglob("*.parquet")) if f.name.startswith(prefix)]
    if not files:
        raise ValueError(f"{spec}: no {prefix + '*' if prefix else '*'}.parquet file under {root}")
    return files
