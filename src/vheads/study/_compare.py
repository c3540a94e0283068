"""``vheads compare``: the cross-model report of separate single-model runs (made on
different machines, say), refusing runs that are not the same study of different models."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

from vheads._errors import MissingFileError, VheadsError
from vheads.store import STORE_NAME, Store
from vheads.study._config import MODEL_LOADING_KEYS, RunConfig, StudyConfig

#: config keys that may differ between the runs ``compare`` puts side by side (the model and how it runs)
MODEL_ONLY_KEYS = ("model", *MODEL_LOADING_KEYS, "models", "run")


def _parse_run_arg(arg: str) -> tuple[str | None, Path]:
    """``NAME=RUN`` or ``RUN``."""
    name, sep, path = arg.partition("=")
    if sep and not Path(arg).exists():
        return name, Path(path)
    return None, Path(arg)


def _finished_config(run_dir: Path) -> dict:
    """The config of a finished single-model run at ``run_dir`` (one error line otherwise)."""
    if not (run_dir / STORE_NAME).is_file():
        raise MissingFileError(f"run {str(run_dir)!r}: no results store ({STORE_NAME}); pass run folders `vheads study` wrote")
    store = Store(run_dir, readonly=True)
    try:
        if store.get_meta("models"):
            raise VheadsError(f"run {str(run_dir)!r} is a multi-model run: its own report holds the cross-model tables; "
                              "compare takes single-model runs")
        raw = store.get_meta("config")
        config = json.loads(raw) if raw else None
        if not isinstance(config, dict):
            raise VheadsError(f"run {str(run_dir)!r} records no study config; compare takes runs of `vheads study`")
        from vheads.study._runner import run_finished  # here: a bad argument is refused before torch loads

        if not run_finished(store, _as_config(config)):
            raise VheadsError(f"run {str(run_dir)!r} is not finished; rerun its `vheads study` command to complete it")
        return config
    finally:
        store.close()


def _as_config(d: dict):
    """A stored config as a :class:`StudyConfig` without re-validating it (its folders may
    live on the machine that made the run)."""
    names = {f.name for f in fields(StudyConfig)} - {"run"}
    run = {k: v for k, v in (d.get("run") or {}).items() if k in {f.name for f in fields(RunConfig)}}
    return StudyConfig(**{k: v for k, v in d.items() if k in names}, run=RunConfig(**run))


def compare_runs(run_args: list[str], out: str | Path) -> Path:
    """The cross-model report of separate single-model runs (``RUN`` or ``NAME=RUN``; a
    name defaults to the last part of the run's model id). Refused, before anything is
    written: fewer than two runs, a missing, multi-model or unfinished run, two runs of one
    name, and runs whose configs differ in anything but the model (:data:`MODEL_ONLY_KEYS`)."""
    from vheads.report import build_crossmodel_report, load_model_run

    if len(run_args) < 2:
        raise VheadsError(f"compare needs at least two run folders, got {len(run_args)}")
    parsed = [_parse_run_arg(a) for a in run_args]
    configs = [_finished_config(p) for _, p in parsed]
    first = {k: v for k, v in configs[0].items() if k not in MODEL_ONLY_KEYS}
    for (_, p), c in zip(parsed[1:], configs[1:]):
        other = {k: v for k, v in c.items() if k not in MODEL_ONLY_KEYS}
        for key in sorted(set(first) | set(other)):
            if first.get(key) != other.get(key):
                raise VheadsError(
                    f"runs {str(parsed[0][1])!r} and {str(p)!r} differ in config key {key!r} "
                    f"({first.get(key)!r:.60} vs {other.get(key)!r:.60}); compare takes runs that differ only in the model")
    names = [n or Path(str(c.get("model", "?"))).name or str(c.get("model")) for (n, _), c in zip(parsed, configs)]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise VheadsError(f"two runs are both named {twice[0]!r}; name them on the command line as NAME=RUN")
    runs = [load_model_run(p, "", n) for n, (_, p) in zip(names, parsed)]
    return build_crossmodel_report(runs, out, "Compared runs " + ", ".join(str(p) for _, p in parsed))
