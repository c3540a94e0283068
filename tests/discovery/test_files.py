"""Head-set files: round trip, provenance checks, atomic writes."""

import json
import os
from types import SimpleNamespace

import numpy as np
import pytest

from vheads.discovery import HeadSetRecord, Setting, load_headset, save_headset, select_heads


def _record(scores=None, fp="sha256:aaaa"):
    scores = np.random.default_rng(0).random((3, 4)) if scores is None else scores
    return HeadSetRecord(
        headset=select_heads(np.nan_to_num(scores), k=3), setting=Setting("comics", "referring", "qspan"), scores=scores,
        model={"id": "m", "revision": None, "fingerprint": fp, "n_layers": 3, "n_heads": 4},
        corpus={"id": "synthetic:comics", "n_items": 8, "seed": 0}, seed=0, k=3, mode="flat",
    )


def _lm(fp, L=3, H=4):
    return SimpleNamespace(fingerprint=fp, n_layers=L, n_heads=H, model_id="other")


def test_round_trip_keeps_everything_bit_for_bit(tmp_path):
    rec = _record()
    p = save_headset(rec, tmp_path / "cm-ref-qsp.json")
    got = load_headset(p)
    assert got.headset == rec.headset and got.setting == rec.setting
    assert np.array_equal(got.scores, rec.scores)
    d = json.loads(p.read_text())
    assert d["schema"] == "vheads.headset/1" and d["setting"]["id"] == "cm-ref-qsp"
    assert d["head_scores"] == sorted(d["head_scores"], reverse=True)
    assert [tuple(h) for h in d["heads"]] == got.ranked
    assert os.listdir(tmp_path) == ["cm-ref-qsp.json"]


def test_other_model_is_refused_unless_forced(tmp_path):
    p = save_headset(_record(fp="sha256:aaaa"), tmp_path / "h.json")
    with pytest.raises(ValueError, match=r"sha256:aaaa.*sha256:bbbb"):
        load_headset(p, lm=_lm("sha256:bbbb"))
    assert load_headset(p, lm=_lm("sha256:bbbb"), force=True).headset == _record().headset
    assert load_headset(p, lm=_lm("sha256:aaaa")).k == 3
    with pytest.raises(ValueError, match="even with force"):
        load_headset(p, lm=_lm("sha256:bbbb", L=4), force=True)


def test_bad_record_writes_nothing_and_keeps_the_old_file(tmp_path):
    p = save_headset(_record(), tmp_path / "h.json")
    before = p.read_bytes()
    bad = _record()
    bad.scores = bad.scores.copy()
    bad.scores[0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        save_headset(bad, p)
    with pytest.raises(ValueError, match="non-finite"):
        save_headset(bad, tmp_path / "new.json")
    assert p.read_bytes() == before
    assert os.listdir(tmp_path) == ["h.json"]


def test_crash_during_write_leaves_no_partial_file(tmp_path, monkeypatch):
    import vheads._io as files  # atomic_write lives there

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        save_headset(_record(), tmp_path / "h.json")
    assert os.listdir(tmp_path) == []


def test_not_a_headset_file_is_refused(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"schema": "something/2"}')
    with pytest.raises(ValueError, match="not 'vheads.headset/1'"):
        load_headset(p)
    p.write_text("{broken")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_headset(p)
