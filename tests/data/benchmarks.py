"""Local copies of the six benchmarks in their publishers' layouts (column names as on their
dataset cards), made from scikit-image's photographs. Each builder returns (spec, truth):
truth lists, per question, (question, choices, right choice) as written."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.data.photos import _png, photo_views

IMAGE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _photos(n):
    return [im for _, im in photo_views(n)]


def _write(path: Path, columns: dict, features: dict | None = None):
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table(columns)
    if features:
        table = table.replace_schema_metadata({b"huggingface": json.dumps({"info": {"features": features}}).encode()})
    pq.write_table(table, path, row_group_size=4)


def _qa(n):
    """n questions with four choices (the right one at a varying position)."""
    words = ["red", "green", "blue", "yellow", "purple", "orange", "black", "white"]
    out = []
    for i in range(n):
        choices = [words[(i + k) % 8] for k in range(4)]
        out.append((f"what colour is thing {i} ?", choices, choices[i % 4]))
    return out


def make_cvbench(root: Path, n: int = 8, bad_answer_row: int | None = None):
    qa = _qa(n)
    photos = _photos(n)
    answers = [f"({'ABCD'[c.index(a)]})" for _, c, a in qa]
    if bad_answer_row is not None:
        answers[bad_answer_row] = "(F)"
    _write(root / "test.parquet", {
        "idx": pa.array(range(n), pa.int64()),
        "type": ["2D"] * n, "task": ["Count"] * n,
        "image": pa.array([{"bytes": _png(im), "path": f"img/2D/count/{i}.png"} for i, im in enumerate(photos)], IMAGE),
        "question": [q for q, _, _ in qa], "choices": [c for _, c, _ in qa], "answer": answers,
        "prompt": [q for q, _, _ in qa], "filename": [f"img/2D/count/{i}.png" for i in range(n)],
        "source": ["COCO"] * n, "source_dataset": ["COCO 2017 Validation Set"] * n,
    })
    return f"cvbench:{root}", qa


def make_mmstar(root: Path, n: int = 8):
    qa = _qa(n)
    photos = _photos(n)
    text = [f"{q}\nOptions: A: {c[0]}, B: {c[1]}, C: {c[2]}, D: {c[3]}" for q, c, _ in qa]
    _write(root / "mmstar.parquet", {
        "index": pa.array(range(n), pa.int64()), "question": text,
        "image": pa.array([{"bytes": _png(im), "path": None} for im in photos], IMAGE),
        "answer": ["ABCD"[c.index(a)] for _, c, a in qa],
        "category": ["coarse perception"] * n, "l2_category": ["image scene and topic"] * n,
    })
    return f"mmstar:{root}", qa


def make_mathvista(root: Path, n: int = 8):
    qa = _qa(n)
    photos = _photos(n)
    # every third question is free-form (no choices): the reader skips it
    _write(root / "data" / "testmini-00000-of-00001-725687bf7a18d64b.parquet", {
        "pid": [str(i + 1) for i in range(n)], "question": [q for q, _, _ in qa],
        "image": [f"images/{i + 1}.jpg" for i in range(n)],
        "decoded_image": pa.array([{"bytes": _png(im), "path": f"{i + 1}.jpg"} for i, im in enumerate(photos)], IMAGE),
        "choices": pa.array([None if i % 3 == 2 else c for i, (_, c, _) in enumerate(qa)], pa.list_(pa.string())),
        "unit": [None] * n, "precision": pa.array([None] * n, pa.float64()), "answer": [a for _, _, a in qa],
        "question_type": ["free_form" if i % 3 == 2 else "multi_choice" for i in range(n)],
        "answer_type": ["text"] * n, "query": [q for q, _, _ in qa],
    })
    return f"mathvista:{root}", [x for i, x in enumerate(qa) if i % 3 != 2]


def make_countbenchqa(root: Path, n: int = 8):
    photos = _photos(n)
    numbers = [2 + i % 9 for i in range(n)]
    _write(root / "data" / "test-00000-of-00001.parquet", {
        "image": pa.array([{"bytes": _png(im), "path": None} for im in photos], IMAGE),
        "text": [f"a photo of {k} things" for k in numbers],
        "question": [f"How many things are there in the image?" for _ in numbers],
        "number": pa.array(numbers, pa.int32()),
    })
    return f"countbenchqa:{root}", numbers


def make_spatial457(root: Path, n: int = 12):
    (root / "images").mkdir(parents=True)
    answers = ["red", "blue", "green", "yellow", True, False, 3, "cube"]
    qs = []
    for i, im in enumerate(_photos(n)):
        name = f"superCLEVR_new_{i:06d}.png"
        im.save(root / "images" / name)
        qs.append({"image_index": i, "image_filename": name, "question": f"What is the colour of object {i}?",
                   "answer": answers[i % len(answers)], "question_index": i})
    (root / "questions").mkdir()
    (root / "questions" / "L1_single.json").write_text(json.dumps({"info": {"split": "val"}, "questions": qs}))
    return f"spatial457:{root}", qs


def make_spatialrgpt(root: Path, n: int = 8):
    rows = []
    for i, im in enumerate(_photos(n)):
        rel = f"hypersim/images/{i:04d}.jpg"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        im.save(root / rel)
        w, h = im.size
        rows.append({"id": f"q{i}", "image_info": {"file_path": rel, "width": w, "height": h},
                     "text_q": "Is Region [0] behind Region [1]?",
                     "conversations": [{"from": "human", "value": "<image>\nIs <mask> <depth> behind <mask> <depth>?"},
                                       {"from": "gpt", "value": f"Answer {i}: region 0 is {'not ' if i % 2 else ''}behind."}],
                     "bbox": [[2, 2, w // 2, h // 2], [w // 2, h // 2, w - 2, h - 2]],
                     "qa_info": {"type": "qualitative", "category": "behind_predicate"}})
    (root / "SpatialRGPT-Bench_v1.json").write_text(json.dumps(rows))
    return f"spatialrgpt:{root}", rows


def make_mcq_jsonl(root: Path, n: int = 6, bad: str | None = None):
    (root / "img").mkdir(parents=True)
    qa = _qa(n)
    lines = []
    for i, (im, (q, c, a)) in enumerate(zip(_photos(n), qa)):
        im.save(root / "img" / f"{i}.png")
        d = {"id": f"m{i}", "image": f"img/{i}.png", "question": q, "choices": c, "answer": a}
        if bad == "answer" and i == 3:
            d["answer"] = "magenta"
        if bad == "escape" and i == 2:
            d["image"] = "../outside.png"
        if bad == "missing" and i == 1:
            del d["choices"]
        lines.append(json.dumps(d))
    (root / "mcq.jsonl").write_text("\n".join(lines) + "\n")
    return root / "mcq.jsonl", qa
