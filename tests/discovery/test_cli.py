"""`vheads discover` / `vheads overlap` as typer commands, and bad input leaving no files."""

import json

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
