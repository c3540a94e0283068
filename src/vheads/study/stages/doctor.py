"""The doctor's fast checks (:func:`vheads.doctor.fast_checks`) on the backend's replica,
once per run, before any other unit: a failed invariant stops the run with its name
(``--skip-doctor``: recorded in the store's ``doctor`` meta instead)."""

from __future__ import annotations

import json

from vheads._errors import VheadsError
from vheads.study._stage import Stage, register_stage


def doctor_stage(store, cfg, run_dir, backend, skip: bool) -> None:
    """The doctor's unit (module docstring); a failure is a :class:`VheadsError` naming the
    check (nothing is committed, so the next run checks again)."""
    from vheads.study._execute import _commit, _log, _logged

    if "doctor" in store.done_units():
        return
    if skip:
        store.set_meta(doctor=json.dumps({"skipped": True}))
        _log(run_dir, f"skip {_logged(store, 'doctor')} (--skip-doctor)")
        return
    (res,) = list(backend.run([{"unit_id": "doctor", "kind": "doctor"}], on_start=lambda u: _log(run_dir, f"start {_logged(store, 'doctor')}")))
    failed = res["rows"]["doctor"]["failed"]
    if failed:
        first = next(c for c in res["rows"]["doctor"]["checks"] if c["name"] == failed[0])
        raise VheadsError(f"vheads doctor: invariant(s) {', '.join(failed)} failed on {cfg.model!r} ({first['summary']}); "
                          f"run `vheads doctor --model {cfg.model}` for the details, or pass --skip-doctor to run anyway "
                          "(recorded in the run)")
    _commit(store, run_dir, res)


def compute_doctor(computer, unit):
    """The doctor's fast checks on this replica's model; the driver refuses to start the
    study when an invariant fails."""
    from vheads.doctor import fast_checks
    rep = fast_checks(computer.engine.lm, computer.engine, computer.templates, computer.cfg.seed).to_dict()
    return {"rows": {"meta": [("doctor", json.dumps(rep))]}, "doctor": rep}


def _run(ctx) -> int:
    doctor_stage(ctx.store, ctx.cfg, ctx.run_dir, ctx.backend, ctx.skip_doctor)
    return 0


STAGE = register_stage(Stage("doctor", 5, run=_run, compute={"doctor": compute_doctor}, tables=("meta",)))
