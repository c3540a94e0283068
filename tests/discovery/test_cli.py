"""`vheads discover` / `vheads overlap` as typer commands, and bad input leaving no files."""

import json
import math

import typer
from typer.testing import CliRunner

from tests.discovery.test_loaders import make_strip_folder
from vheads.discovery._cli import discover, overlap


def _app():
    app = typer.Typer()
    app.command("discover")(discover)
    app.command("overlap")(overlap)
    return app


def test_discover_then_overlap(small_qwen_dir, tmp_path):
    strips = make_strip_folder(tmp_path / "strips", n=3)
    out = tmp_path / "hs"
    r = CliRunner().invoke(_app(), ["discover", "--model", str(small_qwen_dir), "--corpus", "comics", "--corpus", f"strips:{strips}",
                                    "--query", "ordinal", "--source", "last", "--source", "qspan", "--n", "3", "--k", "2",
                                    "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    listed = json.loads(r.stdout)
    assert [d["setting"] for d in listed] == ["cm-ord-last", "cm-ord-qsp", "fx-ord-last", "fx-ord-qsp"]
    files = sorted(out.glob("*.json"))
    assert len(files) == 4 and len(list(out.glob("*.items.npz"))) == 4
    fig = tmp_path / "overlap.png"
    r = CliRunner().invoke(_app(), ["overlap", *map(str, files), "--splits", "20", "--json", "--figure", str(fig)])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["settings"] == ["cm-ord-last", "cm-ord-qsp", "fx-ord-last", "fx-ord-qsp"]
    assert [rep["overlap_all_items"][i][i] for i in range(4)] == [2] * 4
    pairs = {(p["a"], p["b"]): p for p in rep["pairs"]}
    assert len(pairs) == 6 == len(rep["pairs"])  # each unordered pair once
    assert pairs[("cm-ord-last", "cm-ord-qsp")]["same_items"] and not pairs[("cm-ord-last", "fx-ord-last")]["same_items"]
    assert 0 <= rep["ceilings"]["cm-ord-qsp"]["mean"] <= 2 and rep["ceilings"]["cm-ord-qsp"]["splits"] == 20
    assert fig.stat().st_size > 1000


def test_bad_corpus_fails_before_any_file_is_written(small_qwen_dir, tmp_path):
    out = tmp_path / "hs"
    for name, kwargs in [("miss", {"missing": True}), ("box", {"bad_box": True}), ("empty", {"n": 0})]:
        strips = make_strip_folder(tmp_path / name, **kwargs)
        r = CliRunner().invoke(_app(), ["discover", "--model", str(small_qwen_dir), "--corpus", "comics", "--corpus", f"strips:{strips}",
                                        "--query", "ordinal", "--n", "2", "--out", str(out)])
        assert r.exit_code != 0
        assert isinstance(r.exception, (ValueError, FileNotFoundError)), r.exception
        assert not out.exists() or list(out.iterdir()) == []


def test_discover_overlap_json_is_one_document_and_the_table_has_one_row_per_pair(small_qwen_dir, tmp_path):
    args = ["discover", "--model", str(small_qwen_dir), "--corpus", "comics", "--query", "ordinal", "--query", "referring",
            "--source", "last", "--source", "qspan", "--n", "4", "--k", "2", "--overlap", "--splits", "10"]
    r = CliRunner().invoke(_app(), [*args, "--out", str(tmp_path / "j"), "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)  # the whole output parses as one document
    assert [h["setting"] for h in doc["headsets"]] == doc["overlap"]["settings"]
    assert len(doc["overlap"]["pairs"]) == 6 and doc["overlap"]["figure"].endswith("overlap.png")

    r = CliRunner().invoke(_app(), [*args, "--out", str(tmp_path / "t")])
    assert r.exit_code == 0, r.output
    ceil = {s: c["mean"] for s, c in doc["overlap"]["ceilings"].items()}
    rows = [line.split() for line in r.stdout.splitlines() if line.split()[:1] and line.split()[0] in ceil and len(line.split()) == 9]
    assert len(rows) == 6  # one row per pair, nothing else shaped like one
    for row, p in zip(rows, doc["overlap"]["pairs"]):  # same seed: the same numbers, printed rounded
        a, b, all_items, half, ca, cb, frac, lo, hi = row[0], row[1], int(row[2]), *map(float, (row[3], row[4], row[5], row[6])), \
            float(row[7].strip("[,")), float(row[8].strip("]"))
        geo = math.sqrt(ceil[a] * ceil[b])
        assert (a, b, all_items) == (p["a"], p["b"], p["overlap_all_items"])
        assert abs(half - p["overlap_half"]["mean"]) <= 0.005 and abs(ca - ceil[a]) <= 0.005 and abs(cb - ceil[b]) <= 0.005
        if geo > 0:
            assert abs(frac - p["overlap_half"]["mean"] / geo) <= 0.005
            assert abs(lo - p["overlap_half"]["p2.5"] / geo) <= 0.005 and abs(hi - p["overlap_half"]["p97.5"] / geo) <= 0.005
    assert sum("can exceed 1" in line for line in r.stdout.splitlines()) == 1
