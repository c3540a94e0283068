"""`vheads study` runs the doctor's fast checks before its first unit and refuses to start on a
failed invariant; ``--skip-doctor`` runs anyway and says so in the run's store."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from vheads._errors import VheadsError
from vheads.doctor import FAST_CHECKS
from vheads.engine import Engine, Intervention
from vheads.study import Store, config_from_dict
from vheads.study._backends import LocalBackend
from vheads.study._runner import _doctor_stage


@pytest.fixture
def broken_engine(monkeypatch):
    """An engine that ignores the last batch row of every plan of more than one row."""
    right = Engine.plan

    def drops_last_row(self, batch, interventions=(), captures=()):
        if batch > 1:
            interventions = [Intervention(torch.cat([iv.heads[:-1], torch.zeros_like(iv.heads[-1:])]), iv.rows, iv.key_bias)
                             for iv in interventions]
        return right(self, batch, interventions, captures)

    monkeypatch.setattr(Engine, "plan", drops_last_row)


def _stage(tmp_path, skip=False):
    cfg = config_from_dict({"model": "tiny"})
    store = Store(tmp_path)
    try:
        _doctor_stage(store, cfg, tmp_path, LocalBackend(cfg.to_dict()), skip)
        return store.done_units(), store.get_meta("doctor")
    finally:
        store.close()


def test_the_fast_checks_run_once_and_are_recorded(tmp_path):
    done, meta = _stage(tmp_path)
    assert "doctor" in done
    rep = json.loads(meta)
    assert rep["ok"] and [c["name"] for c in rep["checks"]] == list(FAST_CHECKS)
    assert all(c["ok"] is not False for c in rep["checks"])
    assert "done doctor" in (tmp_path / "units.log").read_text()


def test_a_failed_invariant_stops_the_study_before_any_unit(tmp_path, broken_engine):
    with pytest.raises(VheadsError, match="mask.*--skip-doctor"):
        _stage(tmp_path)
    store = Store(tmp_path)
    try:
        assert "doctor" not in store.done_units() and store.get_meta("doctor") is None  # checked again next run
    finally:
        store.close()


def test_skip_doctor_runs_anyway_and_is_recorded(tmp_path, broken_engine):
    done, meta = _stage(tmp_path, skip=True)
    assert "doctor" not in done and json.loads(meta) == {"skipped": True}


def test_the_study_command_refuses_to_start_naming_the_check(tmp_path, broken_engine):
    from vheads.cli import app

    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["study", "--out", str(out), "--quiet"])
    assert res.exit_code == 2, res.output
    err = [l for l in res.stderr.splitlines() if l.startswith("error:")]
    assert len(err) == 1 and "mask" in err[0] and "--skip-doctor" in err[0], res.stderr
    assert "Traceback" not in res.output
    assert "discovery" not in (out / "units.log").read_text()  # no unit started
