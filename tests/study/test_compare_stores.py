"""benchmarks/compare_stores.py: two results stores compared key by key."""

from __future__ import annotations

import json

from benchmarks.compare_stores import compare_stores, main, stores_agree
from vheads.store import Store


def _store(run_dir, outcomes, scores="[[0.1, 0.2]]"):
    s = Store(run_dir)
    s.commit_unit("u", "eval", 1.0, {"outcomes": outcomes,
                                     "discovery": [("cm-ord-last", "ordinal", "last", "comics", 4, 1, scores, "[[0, 1]]")]})
    s.set_meta(vheads_version="x", image_mass=json.dumps([[0.5]]))
    s.close()


ROWS = [("u1", "cm-ord-last", "cers", "S", "it0", 0.25, -1.0, 0.5), ("u1", "cm-ord-last", "cers", "S", "it1", 0.75, -0.5, 1.5)]


def test_equal_stores_agree_even_with_other_unit_ids(tmp_path):
    _store(tmp_path / "a", ROWS)
    _store(tmp_path / "b", [("other-unit", *r[1:]) for r in ROWS])  # the unit id is where, not what
    res = compare_stores(tmp_path / "a", tmp_path / "b")
    assert stores_agree(res)
    assert res["outcomes"]["rows"] == 2 and res["outcomes"]["a_only"] == 0


def test_a_difference_beyond_the_tolerance_is_reported_with_its_size(tmp_path):
    _store(tmp_path / "a", ROWS)
    moved = [ROWS[0], (*ROWS[1][:5], 0.75 + 3e-5, *ROWS[1][6:])]
    _store(tmp_path / "b", moved, scores="[[0.1, 0.2000004]]")
    res = compare_stores(tmp_path / "a", tmp_path / "b")
    assert abs(res["outcomes"]["max_abs"]["value"] - 3e-5) < 1e-12
    assert abs(res["discovery"]["max_abs"]["scores"] - 4e-7) < 1e-12  # numbers inside JSON text
    assert not stores_agree(res, 1e-5) and stores_agree(res, 1e-4)


def test_keys_only_one_store_has_are_counted_and_the_cli_exits_1(tmp_path, capsys):
    _store(tmp_path / "a", ROWS)
    _store(tmp_path / "b", ROWS[:1])
    res = compare_stores(tmp_path / "a", tmp_path / "b")
    assert (res["outcomes"]["a_only"], res["outcomes"]["b_only"]) == (1, 0)
    assert res["outcomes"]["examples"] == [["cm-ord-last", "cers", "S", "it1"]]
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    assert "DIFFER" in capsys.readouterr().out


def test_a_folder_without_a_store_is_one_line_and_exit_2(tmp_path, capsys):
    _store(tmp_path / "a", ROWS)
    assert main([str(tmp_path / "a"), str(tmp_path / "missing")]) == 2
    assert "holds no results.sqlite" in capsys.readouterr().err
