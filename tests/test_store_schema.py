"""The results store's schema 4: the per-item tables keep their text keys as integer ids of
``names``; every reader sees the same text columns as before; schema-3 stores still work."""

import sqlite3

import pytest

from vheads.store import SCHEMA_V3, Store


def _rows(n_items=200, settings=("cm-ord-last", "cm-ref-qsp"), heads=50):
    return [(f"eval/{s}/cers/0-8", s, "cers", "S" if h == 0 else f"layer-matched#{h}", f"grid-neutral-s3915794023-{i}",
             0.001 * i + h, -0.5 * i, 0.25 * h)
            for s in settings for h in range(heads) for i in range(n_items)]


def _v3_store(run_dir):
    """An empty store as vheads wrote it before schema 4 (text keys in every row)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(run_dir / "results.sqlite") as db:
        db.executescript(SCHEMA_V3 + "PRAGMA user_version = 3;")


def test_rows_read_back_as_written_and_the_keys_are_stored_as_ids(tmp_path):
    rows = _rows(n_items=5, heads=3)
    st = Store(tmp_path)
    st.commit_unit("u", "eval", 0.0, {"outcomes": rows, "arms": [(*r[:5], "matched", *r[5:]) for r in rows]})
    st.close()
    ro = Store(tmp_path, readonly=True)
    assert sorted(ro.query("SELECT unit_id, setting, test, headset_id, item_id, value, logprob, logit_diff FROM outcomes")) == sorted(rows)
    assert ro.query("SELECT count(*) FROM arms WHERE arm = 'matched' AND setting = 'cm-ref-qsp'") == [(15,)]
    ro.close()
    db = sqlite3.connect(tmp_path / "results.sqlite")
    stored = db.execute("SELECT setting, headset_id, item_id FROM coded_outcomes").fetchall()
    assert all(isinstance(x, int) for r in stored for x in r)
    names = dict(db.execute("SELECT id, name FROM names"))
    text = {r[0] for r in rows} | {r[1] for r in rows} | {r[2] for r in rows} | {r[3] for r in rows} | {r[4] for r in rows} | {"matched"}
    assert set(names.values()) == text and len(names) == len(text)  # each text once
    # a plain sqlite3 reader (no vheads) sees the text columns through the view of the table's name
    assert db.execute("SELECT count(*) FROM outcomes WHERE headset_id = 'S' AND model = ''").fetchone() == (10,)


def test_a_store_of_the_same_rows_is_under_half_the_size_of_schema_3(tmp_path):
    rows = _rows()
    _v3_store(tmp_path / "v3")
    for d in ("v3", "v4"):
        st = Store(tmp_path / d)
        assert st.coded == (d == "v4")
        st.commit_unit("u", "eval", 0.0, {"outcomes": rows})
        st.close()
    a, b = Store(tmp_path / "v3", readonly=True), Store(tmp_path / "v4", readonly=True)
    sql = "SELECT unit_id, setting, test, headset_id, item_id, value, logprob, logit_diff FROM outcomes ORDER BY setting, test, headset_id, item_id"
    assert a.query(sql) == b.query(sql)
    a.close()
    b.close()
    size = {d: (tmp_path / d / "results.sqlite").stat().st_size for d in ("v3", "v4")}
    assert size["v4"] < 0.5 * size["v3"], size


def test_a_schema_3_store_is_resumed_in_its_own_layout(tmp_path):
    _v3_store(tmp_path)
    st = Store(tmp_path)
    st.commit_unit("u1", "eval", 0.0, {"outcomes": _rows(n_items=2, heads=1)})
    st.close()
    st = Store(tmp_path)  # resumed: still schema 3, text keys
    st.commit_unit("u2", "eval", 0.0, {"outcomes": [("u2", "ph-ord-out", "cers", "S", "x", 0.5, 0.1, 0.2)]})
    assert not st.coded and st.query("SELECT count(*) FROM outcomes") == [(5,)]
    st.close()
    db = sqlite3.connect(tmp_path / "results.sqlite")
    assert db.execute("SELECT type FROM sqlite_master WHERE name = 'outcomes'").fetchone() == ("table",)
    assert db.execute("SELECT name FROM sqlite_master WHERE name = 'names'").fetchone() is None


def test_a_failed_write_leaves_no_id_behind_and_the_next_write_is_whole(tmp_path):
    st = Store(tmp_path)
    bad = [("u", "s1", "cers", "S", "new-item", 0.5, 0.1, 0.2), ("u", "s1", "cers", "S")]  # second row too short
    with pytest.raises(Exception):
        st.commit_unit("u", "eval", 0.0, {"outcomes": bad})
    st.commit_unit("v", "eval", 0.0, {"outcomes": [("v", "s2", "cers", "S", "other-item", 0.25, 0.1, 0.2)]})
    assert st.query("SELECT setting, item_id, value FROM outcomes") == [("s2", "other-item", 0.25)]
    st.close()
