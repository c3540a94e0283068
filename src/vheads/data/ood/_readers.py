"""Readers of the benchmarks' local copies, each in the layout its publisher distributes.

=============  ==========================================================================
task           expected files (``TASK:DIR``)
=============  ==========================================================================
mcq            ``mcq:FILE.jsonl`` — one JSON object a line: ``image`` (path relative to
               the file's folder), ``question``, ``choices`` (list), ``answer`` (one of
               the choices, or its letter); optional ``id``, ``group``
cvbench        nyu-visionx/CV-Bench: ``DIR/**/*.parquet`` (``test.parquet`` or
               ``test_2d/test_3d``) with ``image``, ``question``, ``choices``, ``answer``
               ("(C)"), ``idx``
mmstar         Lin-Chen/MMStar: ``DIR/**/*.parquet`` (``mmstar.parquet``) with ``index``,
               ``question`` (ending "Options: A: …, B: …, C: …, D: …"), ``image``,
               ``answer`` (a letter)
mathvista      AI4Math/MathVista: ``DIR/**/testmini-*.parquet`` (``,test`` for the test
               split) with ``pid``, ``question``, ``decoded_image``, ``choices``,
               ``answer``, ``question_type`` (only ``multi_choice`` rows are used)
countbenchqa   vikhyatk/CountBenchQA: ``DIR/**/test-*.parquet`` with ``image``,
               ``question``, ``number``; the choices are the count and its near misses
spatial457     RyanWW/Spatial457: ``DIR/questions/*.json`` (``{"questions": [...]}`` or a
               list; ``image_filename``, ``question``, ``answer``) and ``DIR/images/``
spatialrgpt    a8cheng/SpatialRGPT-Bench: ``DIR/SpatialRGPT-Bench*.json[l]`` (``id``,
               ``image_info.file_path`` relative to ``DIR``, ``text_q``, ``conversations``
               whose last turn is the answer, ``bbox`` [[x0, y0, x1, y1], …],
               ``qa_info.category``)
=============  ==========================================================================
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from vheads._errors import VheadsError, plain_text
from vheads._io import read_text
from vheads.data.ood._records import (
    MCQRecord, answer_index, cell_image, check_record, file_image, find_parquet, inside, parquet_rows,
)


def _records(spec: str, recs: list[MCQRecord]) -> list[MCQRecord]:
    if not recs:
        raise ValueError(f"{spec}: no usable question found (empty benchmark)")
    return recs


def read_mcq_jsonl(arg: str, spec: str) -> list[MCQRecord]:
    """``mcq:FILE.jsonl``: every line a JSON object; ``choices`` texts (numbers read as text),
    ids unique within the file (a repeated ``id`` is refused, naming both lines)."""
    path = Path(arg)
    if not path.is_file():
        raise FileNotFoundError(f"{spec}: file {path} does not exist")
    out, lines_of = [], {}
    for i, line in enumerate(read_text(path, f"{spec}: {path}").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path} line {i}"
        try:
            d = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as e:
            raise ValueError(f"{where}: not valid JSON ({e})") from None
        if not isinstance(d, dict):
            raise VheadsError(f"{where}: expected a JSON object {{image, question, choices, answer}}, got {line.strip()[:80]!r}")
        for key in ("image", "question", "choices", "answer"):
            if key not in d:
                raise ValueError(f"{where}: missing field {key!r} (need image, question, choices, answer)")
        if not isinstance(d["choices"], list):
            raise ValueError(f"{where}: 'choices' must be a list, got {type(d['choices']).__name__}")
        choices = [plain_text(_scalar_text(c), f"{where}: choice {k}") for k, c in enumerate(d["choices"])]
        question = plain_text(d["question"], f"{where}: 'question'", multiline=True)
        rid = plain_text(_scalar_text(d.get("id", i)), f"{where}: 'id'")
        if rid in lines_of:
            raise VheadsError(f"{path}: lines {lines_of[rid]} and {i} share the id {rid!r}; every question needs its own id")
        lines_of[rid] = i
        group = d.get("group")
        group = "" if group in (None, "") else plain_text(_scalar_text(group), f"{where}: 'group'")
        out.append(check_record(MCQRecord(rid, where, file_image(inside(path.parent, d["image"], where)),
                                          question, choices, answer_index(where, d["answer"], choices), group)))
    return _records(spec, out)


def _scalar_text(v):
    """A number read as its text (``3`` -> ``"3"``); anything else unchanged, for :func:`plain_text` to check."""
    return str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v


def _parquet_mcq(arg: str, spec: str, prefix: str, image: str, id_col: str, columns: list[str], parse) -> list[MCQRecord]:
    """Records of parquet MCQ rows: ``parse(where, row) -> (question, choices)`` or None to skip."""
    out = []
    for f, row, v in parquet_rows(find_parquet(spec, Path(arg), prefix), ["question", "answer", id_col, *columns], spec):
        where = f"{f} row {row}"
        got = parse(where, v)
        if got is None:
            continue
        question, choices = got
        out.append(check_record(MCQRecord(str(v[id_col]), where, cell_image(f, row, image), question, choices,
                                          answer_index(where, v["answer"], choices))))
    return _records(spec, out)


def _cvbench(where, v):
    return str(v["question"]), [str(c) for c in (v["choices"] or [])]


def _mathvista(where, v):
    if v.get("question_type") != "multi_choice" or not v.get("choices"):
        return None
    return str(v["question"]), [str(c) for c in v["choices"]]


OPTIONS = re.compile(r"(?:^|,\s*|\n)([A-F]):\s*")


def _mmstar(where, v):
    """MMStar puts the choices in the question: "…?\nOptions: A: x, B: y, C: z, D: w"."""
    text = str(v["question"])
    head, sep, tail = text.rpartition("Options:")
    if not sep:
        raise ValueError(f"{where}: the question has no 'Options: A: …' part to read the choices from")
    parts = OPTIONS.split(tail.strip())
    letters, values = parts[1::2], [p.strip().rstrip(",").strip() for p in parts[2::2]]
    if letters != [chr(ord("A") + k) for k in range(len(letters))] or len(letters) < 2:
        raise ValueError(f"{where}: cannot read lettered choices from {tail.strip()[:80]!r}")
    return head.strip(), values


def read_cvbench(arg, spec):
    return _parquet_mcq(arg, spec, "", "image", "idx", ["choices"], _cvbench)


def read_mmstar(arg, spec):
    return _parquet_mcq(arg, spec, "", "image", "index", [], _mmstar)


def read_mathvista(arg, spec):
    path, _, split = arg.partition(",")
    return _parquet_mcq(path, spec, f"{split or 'testmini'}-", "decoded_image", "pid", ["choices", "question_type"], _mathvista)


def near_miss_counts(n: int) -> list[str]:
    """The count and its three nearest plausible neighbours (counts are at least 1), ascending:
    5 -> 3, 4, 5, 6; 2 -> 1, 2, 3, 4."""
    near = [c for c in (n - 1, n + 1, n - 2, n + 2, n + 3) if c >= 1][:3]
    return [str(c) for c in sorted([n, *near])]


def read_countbenchqa(arg, spec):
    out = []
    for f, row, v in parquet_rows(find_parquet(spec, Path(arg), "test-"), ["question", "number"], spec):
        where = f"{f} row {row}"
        if not isinstance(v["number"], int) or v["number"] < 0:
            raise ValueError(f"{where}: 'number' must be a count, got {v['number']!r}")
        choices = near_miss_counts(v["number"])
        out.append(check_record(MCQRecord(f"{f.stem}-{row}", where, cell_image(f, row, "image"), str(v["question"]), choices,
                                          choices.index(str(v["number"])))))
    return _records(spec, out)


def _answer_text(a) -> str:
    return ("yes" if a else "no") if isinstance(a, bool) else str(a).strip()


def read_spatial457(arg, spec):
    root = Path(arg)
    qdir = root / "questions"
    files = sorted(qdir.glob("*.json")) if qdir.is_dir() else []
    if not files:
        raise ValueError(f"{spec}: no question files {qdir}/*.json (the Spatial457 layout: questions/, images/)")
    out = []
    for f in files:
        try:
            data = json.loads(f.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{f}: not valid JSON ({e})") from None
        qs = data.get("questions") if isinstance(data, dict) else data
        if not isinstance(qs, list):
            raise ValueError(f"{f}: expected a list of questions (or an object with 'questions')")
        for i, q in enumerate(qs):
            where = f"{f} question {i}"
            for key in ("image_filename", "question", "answer"):
                if key not in q:
                    raise ValueError(f"{where}: missing field {key!r}")
            out.append(check_record(MCQRecord(f"{f.stem}-{q.get('question_index', i)}", where,
                                              file_image(inside(root / "images", q["image_filename"], where)),
                                              str(q["question"]), [_answer_text(q["answer"])], 0, group=f.stem), min_choices=1))
    return _records(spec, out)


def read_spatialrgpt(arg, spec):
    root = Path(arg)
    files = sorted(root.glob("SpatialRGPT-Bench*.json")) + sorted(root.glob("SpatialRGPT-Bench*.jsonl")) if root.is_dir() else []
    if not files:
        raise ValueError(f"{spec}: no SpatialRGPT-Bench*.json[l] in {root}")
    out = []
    for f in files:
        text = f.read_text()
        try:
            rows = json.loads(text) if f.suffix == ".json" else [json.loads(ln) for ln in text.splitlines() if ln.strip()]
        except json.JSONDecodeError as e:
            raise ValueError(f"{f}: not valid JSON ({e})") from None
        for i, d in enumerate(rows):
            where = f"{f} entry {i}"
            try:
                path = d["image_info"]["file_path"]
                question, answer = d["text_q"], d["conversations"][-1]["value"]
            except (KeyError, IndexError, TypeError):
                raise ValueError(f"{where}: needs image_info.file_path, text_q and conversations (answer last)") from None
            boxes = [(f"Region [{k}]", tuple(float(x) for x in b)) for k, b in enumerate(d.get("bbox") or [])]
            group = str((d.get("qa_info") or {}).get("category", ""))
            out.append(check_record(MCQRecord(str(d.get("id", i)), where, file_image(inside(root, path, where)), str(question),
                                              [str(answer).strip()], 0, group=group, boxes=boxes), min_choices=1))
    return _records(spec, out)
