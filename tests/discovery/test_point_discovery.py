"""`vheads discover --score`: named points, their head-set files (the point's full axes
recorded, validated on read), and bad input refused with one line before any work."""

import json

import jsonschema
import numpy as np
import pytest

from tests.discovery.test_schema import raw_schema
from tests.hardening.clitools import NO_MODEL, files_under, refused, vheads
from vheads._errors import VheadsError
from vheads.data import default_templates
from vheads.discovery import load_headset, load_per_item, score_settings
from vheads.discovery._discover import load_corpora
from vheads.discovery._point_setting import ScoreSetting, parse_named_score, point_name, setting_from_dict
from vheads.discovery._score_space import ScorePoint


def test_named_points_presets_custom_and_automatic_names():
    assert parse_named_score("vrh") == ("vrh", ScorePoint(rows="out", k=20))
    assert parse_named_score("outhit:rows=out,keys=hit") == ("outhit", ScorePoint(rows="out", keys="hit"))
    # unnamed: the values that differ from the defaults, in axis order, '-' dropped, then k
    name, point = parse_named_score("keys=hit,rows=out,across=hit-frequency,k=7")
    assert name == "out_hit_hitfrequency_k7" == point_name(point)


@pytest.mark.parametrize("text,fragment", [
    ("nope", "'nope'"), ("rows=everywhere", "'everywhere'"), ("colour=red", "'colour'"),
    ("my-score:rows=out", "no '-'"), ("rows=out", "'out' source part"), ("last:keys=hit", "'last' source part"),
    ("x:keys=mean,across=hit-frequency", "needs keys 'hit'"),
])
def test_bad_named_points_are_refused_naming_the_value(text, fragment):
    with pytest.raises(VheadsError, match="--score") as e:
        parse_named_score(text)
    assert fragment in str(e.value)


def test_a_score_setting_round_trips_through_its_dict():
    st = ScoreSetting("comics", "referring", "vrh", ScorePoint(rows="out", k=20))
    assert st.id == "cm-ref-vrh" and st.source == "score"
    d = st.to_dict()
    assert d["score"] == {"name": "vrh", "rows": "out", "region": "target", "norm": "raw", "keys": "mass",
                          "across": "mean", "select": "flat", "k": 20}
    assert setting_from_dict(json.loads(json.dumps(d))) == st
    assert setting_from_dict({"corpus": "comics", "query": "ordinal", "source": "last"}).id == "cm-ord-last"


@pytest.fixture(scope="module")
def written(small_qwen_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("scored")
    r = vheads("discover", "--model", small_qwen_dir, "--corpus", "comics", "--query", "ordinal", "--n", "4", "--k", "3",
               "--score", "gaze", "--score", "sparsemm", "--score", "loc:rows=last,region=image,across=frequency,select=entropy",
               "--max-new-tokens", "2", "--out", out, "--json")
    assert r.exit_code == 0, r.output
    return out, json.loads(r.stdout)


def test_discover_score_writes_one_valid_file_per_point(written):
    out, listed = written
    assert [d["setting"] for d in listed] == ["cm-ord-gaze", "cm-ord-sparsemm", "cm-ord-loc"]
    for d in listed:
        raw = json.loads(open(d["file"]).read())
        jsonschema.validate(raw, raw_schema(), cls=jsonschema.Draft202012Validator)
        rec = load_headset(d["file"])
        assert isinstance(rec.setting, ScoreSetting) and rec.setting.id == d["setting"]
        assert raw["setting"]["score"]["k"] == 3 and raw["selection"]["mode"] == rec.setting.point.select
        per_item = load_per_item(rec)  # each item's share of the score: its mean is the score
        np.testing.assert_allclose(per_item.mean(0), rec.scores, atol=1e-12)
    loc = load_headset(out / "cm-ord-loc.json")
    assert loc.setting.point == ScorePoint(rows="last", region="image", across="frequency", select="entropy", k=3)


def test_the_gaze_file_is_the_seeds_last_setting(written, small_qwen_dir):
    """gaze = raw last-token mass on the panel, mean over items: today's cm-ord-last, computed
    on its own path (all sources captured in one forward, so to float rounding)."""
    from vheads.models import load_model

    out, _ = written
    rec = load_headset(out / "cm-ord-gaze.json")
    items = load_corpora(["comics"], ["ordinal"], 4, 0, templates=default_templates(str(small_qwen_dir)))[0].items  # as the CLI
    today = score_settings(load_model(str(small_qwen_dir)), {("comics", "ordinal"): items}, progress=False)["cm-ord-last"]
    np.testing.assert_allclose(rec.scores, today.scores, atol=1e-6)
    top = sorted(((-today.scores[l, h], l, h) for l in range(today.scores.shape[0]) for h in range(today.scores.shape[1])))[:3]
    assert set(rec.headset) == {(l, h) for _, l, h in top}


def test_score_files_with_an_edited_point_are_refused_on_read(written, tmp_path):
    out, _ = written
    good = json.loads((out / "cm-ord-gaze.json").read_text())
    for edit, fragment in [(lambda d: d["setting"]["score"].__setitem__("keys", "max"), "keys"),
                           (lambda d: d["setting"].pop("score"), "score"),
                           (lambda d: d["selection"].__setitem__("mode", "elbow"), "select")]:
        bad = json.loads(json.dumps(good))
        edit(bad)
        p = tmp_path / "bad.json"
        p.write_text(json.dumps(bad))
        with pytest.raises(VheadsError, match=str(p)) as e:
            load_headset(p)
        assert fragment in str(e.value)
        refused(vheads("overlap", p), str(p))


def test_old_files_without_a_score_still_read(small_qwen_dir, tmp_path):
    r = vheads("discover", "--model", small_qwen_dir, "--corpus", "comics", "--query", "ordinal", "--source", "last",
               "--n", "2", "--k", "2", "--out", tmp_path / "grid")
    assert r.exit_code == 0, r.output
    rec = load_headset(tmp_path / "grid" / "cm-ord-last.json")
    assert rec.setting.source == "last" and "score" not in json.loads((tmp_path / "grid" / "cm-ord-last.json").read_text())["setting"]


@pytest.mark.parametrize("args,fragment", [
    (["--score", "nope"], "unknown score 'nope'"),
    (["--score", "rows=sideways"], "'sideways'"),
    (["--score", "vrh", "--score", "vrh"], "'vrh' is given twice"),
    (["--score", "vrh", "--per-layer"], "--per-layer"),
    (["--score", "vrh", "--k", "0"], "--k"),
    (["--score", "vrh", "--score", "gaze", "--overlap"], "pass --k"),
    (["--score", "select=elbow", "--overlap", "--k", "3"], "'elbow'"),
])
def test_bad_scores_are_refused_before_the_model(tmp_path, args, fragment):
    out = tmp_path / "hs"
    refused(vheads("discover", "--model", NO_MODEL, "--corpus", "comics", "--n", "2", "--out", out, *args), fragment)
    assert not out.exists()


def test_a_selection_of_nothing_names_the_setting_and_writes_nothing(small_qwen_dir, tmp_path):
    """Argmax over image keys always lies in the image, so every head hits at every image row:
    all scores equal 1, the sorted curve has no elbow, the rule keeps no head."""
    out = tmp_path / "hs"
    r = vheads("discover", "--model", small_qwen_dir, "--corpus", "comics", "--query", "ordinal", "--n", "2",
               "--score", "gaze", "--score", "flat1:rows=image,region=image,norm=image,keys=hit,select=elbow", "--out", out)
    assert r.exit_code == 2 and "Traceback" not in r.stderr, r.stderr
    errors = [l for l in r.stderr.splitlines() if l.startswith("error: ")]  # (the model's loading bar is above it)
    assert len(errors) == 1 and r.stderr.rstrip().endswith(errors[0])
    assert "setting cm-ord-flat1" in errors[0] and "'elbow'" in errors[0] and "selects no head" in errors[0]
    assert not out.exists() or files_under(out) == set()


def test_overlap_compares_score_files_with_grid_files_of_one_k(written, small_qwen_dir, tmp_path):
    out, _ = written
    r = vheads("discover", "--model", small_qwen_dir, "--corpus", "comics", "--query", "ordinal", "--source", "last",
               "--n", "4", "--k", "3", "--out", tmp_path / "grid")
    assert r.exit_code == 0, r.output
    files = [tmp_path / "grid" / "cm-ord-last.json", out / "cm-ord-gaze.json", out / "cm-ord-loc.json"]
    r = vheads("overlap", *files, "--splits", "10", "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    recs = [load_headset(f) for f in files]
    for i, a in enumerate(recs):
        for j, b in enumerate(recs):
            if i != j:
                assert rep["overlap_all_items"][i][j] == len(set(a.headset) & set(b.headset))
