"""Errors name the key that is wrong (issue 35 point 6): a misspelt control under
``[controls]``, the keys a changed config changes, an ``--out`` that is a file; each refused
before any work."""

import json

import pytest

from tests.hardening.clitools import refused, vheads
from vheads._errors import VheadsError, check_output_path
from vheads.store import Store
from vheads.study import config_from_dict, load_config
from vheads.study._config import config_differences


def test_a_misspelt_control_is_named_itself_not_the_key_that_lists_controls(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text("[controls]\nlayer_matched = 49\n")
    with pytest.raises(VheadsError) as e:
        load_config(toml)
    msg = str(e.value)
    # the file first (issue 44: a refused key names the file it is in), then the key itself
    assert msg.startswith(f"config file {str(toml)!r}: config key 'controls.layer_matched'") and "did you mean 'layer-matched'" in msg
    assert "row_group_controls" not in msg


def test_config_differences_lists_exactly_the_changed_keys():
    base = {"seed": 1, "n_eval": 8, "controls": {"layer-matched": 20, "any-layer": 5}}
    stored = json.loads(json.dumps(config_from_dict(base).to_dict()))
    changed = config_from_dict({**base, "seed": 2, "controls": {"layer-matched": 20, "any-layer": 7},
                                "run": {"batch_size": 3}, "metric": "logprob"})  # run and metric change no result
    assert config_differences(stored, changed) == ["controls.any-layer: 5 -> 7", "seed: 1 -> 2"]
    assert config_differences(stored, config_from_dict(base)) == []
    # a key added after a run was made, still at its default, is no difference
    old = {k: v for k, v in stored.items() if k not in ("ablation", "causal_tests", "scores")}
    assert config_differences(old, config_from_dict(base)) == []
    assert config_differences(old, config_from_dict({**base, "causal_tests": []})) == ['causal_tests: "(not set)" -> []']


def test_a_changed_config_is_refused_at_once_naming_the_keys(tmp_path, monkeypatch):
    """The run folder holds a committed unit of seed 1; a run of seed 2 is refused before the
    model's shape or any data is read (both are made to fail if they are reached)."""
    from vheads.study import _runner

    first = config_from_dict({"seed": 1})
    store = Store(tmp_path)
    _runner._claim(store, first, tmp_path, model_id="tiny")
    store.commit_unit("u1", "discovery", 0.0, {})
    store.close()

    def reached(*a, **k):
        raise AssertionError("work began before the config was checked")

    monkeypatch.setattr(_runner, "study_models", reached)
    monkeypatch.setattr("vheads.study._data.preflight_data", reached)
    with pytest.raises(VheadsError) as e:
        _runner.run_study(config_from_dict({"seed": 2}), tmp_path, progress=False, report=False)
    assert "seed: 1 -> 2" in str(e.value) and "hash" not in str(e.value)


def test_an_out_that_is_a_file_is_called_a_file(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("x")
    with pytest.raises(VheadsError) as e:
        check_output_path(f)
    assert "is a file, not a folder" in str(e.value) and "lies below" not in str(e.value)
    with pytest.raises(VheadsError, match="lies below"):  # a path below a file still says so
        check_output_path(f / "run")


def test_report_out_file_is_refused_before_the_report_is_built(tmp_path, monkeypatch):
    """``vheads report DIR --out FILE``: refused before the report is built (building it is
    made to fail if it is reached), the file untouched."""
    def reached(*a, **k):
        raise AssertionError("the report was built before --out was checked")

    monkeypatch.setattr("vheads.study.build_report_if_available", reached)
    run = tmp_path / "run"
    Store(run).close()
    f = tmp_path / "out.html"
    f.write_text("x")
    r = vheads("report", run, "--out", f)
    refused(r, "--out", "is a file, not a folder")
    assert f.read_text() == "x"
