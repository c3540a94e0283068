"""The pointing suite: each benchmark read from its publisher's layout, converted into the
2 x 2 apparatus by overlay or retrieval, seeded; bad input names the file and row."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.data.benchmarks import (
    make_countbenchqa, make_cvbench, make_mathvista, make_mcq_jsonl, make_mmstar, make_spatial457, make_spatialrgpt,
)
from vheads.cli import app
from vheads.data import OPTION_LETTERS
from vheads.data.ood import KINDS, TASKS, BenchmarkItems
from vheads.data.ood._readers import near_miss_counts

CELL = 48


def _key(it):
    return it.options[OPTION_LETTERS.index(it.answer)]


def _cells(it):
    img = np.asarray(it.image).astype(int)
    return [img[(k // 2) * CELL:(k // 2 + 1) * CELL, (k % 2) * CELL:(k % 2 + 1) * CELL] for k in range(4)]


@pytest.mark.parametrize("make", [make_cvbench, make_mmstar, make_mathvista])
def test_mcq_readers_keep_question_choices_and_right_answer(tmp_path, make):
    spec, truth = make(tmp_path / "b")
    recs = BenchmarkItems(spec, CELL).open()
    assert [(r.question, r.choices, r.choices[r.answer]) for r in recs] == truth


def test_countbench_choices_are_the_count_and_its_near_misses(tmp_path):
    spec, numbers = make_countbenchqa(tmp_path / "b")
    recs = BenchmarkItems(spec, CELL).open()
    for r, k in zip(recs, numbers):
        assert r.choices[r.answer] == str(k)
        got = sorted(int(c) for c in r.choices)
        assert len(got) == 4 and k in got and all(c >= 1 for c in got) and max(got) - min(got) <= 4
    assert near_miss_counts(5) == ["3", "4", "5", "6"] and near_miss_counts(1) == ["1", "2", "3", "4"]


def _grids(make, tmp_path, seed):
    """(item, its question's record, records by location) of six CERS grids of a fixture benchmark."""
    spec, _ = make(tmp_path / "b")
    bench = BenchmarkItems(spec, CELL)
    by_where = {r.where: r for r in bench.open()}
    return [(it, by_where[it.meta["task_question"]], by_where) for it in bench.items("grid-neutral", 6, seed)]


@pytest.mark.parametrize("make", [make_cvbench, make_countbenchqa, make_mmstar])
def test_overlay_grid_is_one_photo_four_times_with_the_key_on_the_target_cell(tmp_path, make):
    for it, rec, _ in _grids(make, tmp_path, 0):
        assert it.question == rec.question
        assert _key(it) == rec.choices[rec.answer] == it.meta["cells"][int(it.target[-1])]
        assert sorted(it.options) == sorted(it.meta["cells"]) and set(it.options) <= set(rec.choices)
        cells = _cells(it)
        # the four copies agree above the text band and differ inside it (different choices)
        top = CELL // 2
        assert all(np.array_equal(cells[0][:top], c[:top]) for c in cells[1:])
        assert len({c[top:].tobytes() for c in cells}) == 4


@pytest.mark.parametrize("make", [make_spatial457, make_spatialrgpt])
def test_retrieval_grid_shows_four_scenes_and_keys_the_asked_one(tmp_path, make):
    for it, rec, by_where in _grids(make, tmp_path, 1):
        shown = [by_where[w] for w in it.meta["images"]]
        assert len({r.where for r in shown}) == 4 and len(set(it.options)) == 4
        t = int(it.target[-1])
        assert shown[t] is rec and it.question == rec.question and _key(it) == rec.choices[0]
        assert it.meta["cells"] == [r.choices[0] for r in shown]
        assert len({r.group for r in shown}) == 1


@pytest.mark.parametrize("task", ["cvbench", "spatial457"])
def test_every_kind_same_seed_same_bytes(tmp_path, task):
    spec, _ = {"cvbench": make_cvbench, "spatial457": make_spatial457}[task](tmp_path / "b")
    for kind in KINDS:
        a = BenchmarkItems(spec, CELL).items(kind, 4, 7)
        b = BenchmarkItems(spec, CELL).items(kind, 4, 7)
        assert [x.image.tobytes() for x in a] == [x.image.tobytes() for x in b]
        assert [(x.question, x.options, x.answer) for x in a] == [(x.question, x.options, x.answer) for x in b]
        assert all(x.meta["provenance"]["recipe"] == TASKS[task].recipe and x.meta["provenance"]["seed"] == 7 for x in a)


def test_audit_arms(tmp_path):
    spec, _ = make_cvbench(tmp_path / "b")
    bench = BenchmarkItems(spec, CELL)
    by_where = {r.where: r for r in bench.open()}
    for it in bench.items("class-matched", 4, 0):
        assert it.meta["images"] == [it.meta["task_question"]]
        rec = by_where[it.meta["task_question"]]
        assert _key(it) == rec.choices[rec.answer]
    for it in bench.items("class-mismatched", 4, 0):
        assert it.meta["images"] != [it.meta["task_question"]]  # another question's photo
    for it in bench.items("grid-oracle", 4, 0):
        assert it.question == f"what is in cell {it.target[-1]} ?" and _key(it) == it.meta["cells"][int(it.target[-1])]
    assert all(np.all(np.asarray(it.image) == 128) for it in bench.items("grid-blank", 3, 0))


def test_mcq_jsonl_both_recipes(tmp_path):
    path, qa = make_mcq_jsonl(tmp_path / "m")
    recs = BenchmarkItems(f"mcq:{path}", CELL).open()
    assert [(r.question, r.choices, r.choices[r.answer]) for r in recs] == qa
    it = BenchmarkItems(f"mcq-retrieval:{path}", CELL).items("grid-neutral", 1, 0)[0]
    assert len(set(it.meta["images"])) == 4


# ---- bad input --------------------------------------------------------------------------
def test_answer_not_among_the_choices_names_file_and_row(tmp_path):
    spec, _ = make_cvbench(tmp_path / "b", bad_answer_row=5)
    with pytest.raises(ValueError, match=r"test\.parquet row 5: the answer '\(F\)' is not among the choices"):
        BenchmarkItems(spec, CELL).open()
    path, _ = make_mcq_jsonl(tmp_path / "m", bad="answer")
    with pytest.raises(ValueError, match=r"mcq\.jsonl line 4: the answer 'magenta' is not among the choices"):
        BenchmarkItems(f"mcq:{path}", CELL).open()


def test_missing_field_or_column_is_named(tmp_path):
    path, _ = make_mcq_jsonl(tmp_path / "m", bad="missing")
    with pytest.raises(ValueError, match=r"mcq\.jsonl line 2: missing field 'choices'"):
        BenchmarkItems(f"mcq:{path}", CELL).open()
    import pyarrow.parquet as pq

    spec, _ = make_cvbench(tmp_path / "b")
    f = tmp_path / "b" / "test.parquet"
    pq.write_table(pq.read_table(f).drop(["choices"]), f)
    with pytest.raises(ValueError, match=r"test\.parquet has no column 'choices'"):
        BenchmarkItems(spec, CELL).open()


def test_image_path_leaving_the_folder_is_refused(tmp_path):
    path, _ = make_mcq_jsonl(tmp_path / "m", bad="escape")
    with pytest.raises(ValueError, match=r"line 3: image path '\.\./outside\.png' must be relative and stay inside"):
        BenchmarkItems(f"mcq:{path}", CELL).open()


def test_unreadable_benchmark_image_names_the_row(tmp_path):
    spec, _ = make_spatial457(tmp_path / "b", n=12)
    for f in (tmp_path / "b" / "images").iterdir():
        f.write_bytes(b"")
    with pytest.raises(ValueError, match=r"L1_single\.json question \d+: image file \S+ is empty \(0 bytes\)"):
        BenchmarkItems(spec, CELL).items("grid-neutral", 2, 0)


def test_empty_benchmark_and_unknown_task(tmp_path):
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "mcq.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="no usable question found"):
        BenchmarkItems(f"mcq:{tmp_path / 'e' / 'mcq.jsonl'}", CELL).open()
    with pytest.raises(ValueError, match=r"no \*\.parquet file"):
        BenchmarkItems(f"cvbench:{tmp_path / 'e'}", CELL).open()
    with pytest.raises(ValueError, match="unknown benchmark task 'seedbench:/x'"):
        BenchmarkItems("seedbench:/x")


def test_overlay_needs_four_choices(tmp_path):
    (tmp_path / "img").mkdir()
    from tests.data.photos import photo_views

    photo_views(1)[0][1].save(tmp_path / "img" / "0.png")
    (tmp_path / "two.jsonl").write_text(json.dumps({"image": "img/0.png", "question": "left or right ?", "choices": ["left", "right"], "answer": "left"}))
    with pytest.raises(ValueError, match="no question has four choices"):
        BenchmarkItems(f"mcq:{tmp_path / 'two.jsonl'}", CELL).items("grid-neutral", 1, 0)


def test_ood_baseline_audit_from_the_command_line(tmp_path):
    spec, _ = make_cvbench(tmp_path / "b")
    r = CliRunner().invoke(app, ["audit", "--model", "tiny", "--n", "2", "--source", spec, "--cell", "32", "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert set(rep) == {"oracle", "floor", "matched", "mismatched", "leak"}
    for v in rep.values():
        assert v["ok"] == (v["expected"][0] <= v["mean_p_key"] <= v["expected"][1])


def test_evaluate_command_tests_a_headset_on_a_benchmark(tmp_path):
    spec, _ = make_cvbench(tmp_path / "b")
    hs = tmp_path / "hs"
    r = CliRunner().invoke(app, ["discover", "--model", "tiny", "--corpus", "comics", "--query", "ordinal", "--source", "last",
                                 "--n", "2", "--k", "2", "--out", str(hs)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["evaluate", "--headset", str(hs / "cm-ord-last.json"), "--test", "cers", "--test", "ncs",
                                 "--controls", "layer-matched:2", "--n", "2", "--source", spec, "--cell", "32", "--json"])
    assert r.exit_code == 0, r.output
    res = {d["test"]: d for d in json.loads(r.stdout)}
    assert set(res) == {"cers", "ncs-all"}
    assert all(i.startswith("grid-neutral-cvbench-") for i in res["cers"]["per_item"]["item_ids"])
    assert all(i.startswith("class-matched-cvbench-") for i in res["ncs-all"]["per_item"]["item_ids"])
    r = CliRunner().invoke(app, ["evaluate", "--headset", str(hs / "cm-ord-last.json"), "--test", "text", "--source", spec, "--n", "2"])
    assert r.exit_code == 2 and "kind 'text' is not built for benchmark tasks" in r.output
