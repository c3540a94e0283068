"""The shipped head-set JSON Schema: files vheads writes validate with a plain JSON Schema
validator (no vheads code involved), and hand-broken files are rejected — by the schema
and by ``load_headset``."""

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from vheads.discovery import MODES, QUERIES, SOURCES, discover_headsets, headset_schema, load_headset
from vheads.discovery._score_space import AXES

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "src" / "vheads" / "schemas" / "headset.schema.json"


def raw_schema() -> dict:
    """The schema read straight from its file, as an outside user would."""
    return json.loads(SCHEMA_FILE.read_text())


@pytest.fixture(scope="module")
def written(small_qwen_dir, tmp_path_factory):
    """Head-set files of a real discovery run: both query types, two sources, both selection modes."""
    from vheads.models import load_model

    lm = load_model(str(small_qwen_dir))
    out = tmp_path_factory.mktemp("schema_run")
    discover_headsets(lm, ["comics"], ["ordinal", "referring"], ["last", "qspan"], k=3, n=3, seed=1, out=out, progress=False)
    discover_headsets(lm, ["photo"], ["referring"], ["last"], k=1, mode="per-layer", n=3, seed=1, out=out, progress=False,
                      force=True)  # a second run into the same folder
    return sorted(out.glob("*.json"))


def test_the_package_ships_the_schema_file():
    assert headset_schema() == raw_schema()
    jsonschema.Draft202012Validator.check_schema(raw_schema())


def test_files_from_a_discovery_run_validate(written):
    assert len(written) == 5
    for p in written:
        jsonschema.validate(json.loads(p.read_text()), raw_schema(), cls=jsonschema.Draft202012Validator)


def test_schema_enums_are_the_library_vocabulary():
    props = raw_schema()["properties"]
    assert tuple(props["setting"]["properties"]["query"]["enum"]) == QUERIES
    assert tuple(props["setting"]["properties"]["source"]["enum"]) == (*SOURCES, "score")
    # a score point's file: its own selection rule, and every axis with the score space's values
    assert tuple(props["selection"]["properties"]["mode"]["enum"]) == AXES["select"] and set(MODES) <= set(AXES["select"])
    score = props["setting"]["properties"]["score"]["properties"]
    assert {a: tuple(score[a]["enum"]) for a in AXES} == AXES


def _drop(key):
    def f(d):
        del d[key]
    return f


BREAKS = {
    "missing heads": _drop("heads"),
    "missing model fingerprint": lambda d: d["model"].pop("fingerprint"),
    "head with one index": lambda d: d["heads"].__setitem__(0, [d["heads"][0][0]]),
    "negative layer": lambda d: d["heads"].__setitem__(0, [-1, 0]),
    "head index as text": lambda d: d["heads"].__setitem__(0, ["0", 1]),
    "duplicate head": lambda d: d["heads"].append(list(d["heads"][0])),
    "unknown query type": lambda d: d["setting"].__setitem__("query", "sideways"),
    "unknown selection mode": lambda d: d["selection"].__setitem__("mode", "top"),
    "k of zero": lambda d: d["selection"].__setitem__("k", 0),
    "score as text": lambda d: d["scores"][0].__setitem__(0, "0.5"),
    "per-item file outside the folder": lambda d: d.__setitem__("per_item_file", "../elsewhere.npz"),
    "fractional n_layers": lambda d: d["model"].__setitem__("n_layers", 3.5),
}


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_hand_broken_files_are_rejected(written, tmp_path, name):
    good = json.loads(written[0].read_text())
    bad = copy.deepcopy(good)
    BREAKS[name](bad)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, raw_schema(), cls=jsonschema.Draft202012Validator)
    p = tmp_path / "broken.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="broken.json"):
        load_headset(p)
