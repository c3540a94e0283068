"""``run_study``: discovery × evaluation × report, resumable, on any backend.

The study is a loop over the registered stages (:mod:`vheads.study.stages`, in their
order): the doctor's checks → discovery (one unit per corpus × query) → baseline attention →
overlap and noise ceilings, stability curves (no forward pass: the stored per-item scores) →
the exact causal map (one unit per item shard) → head-sets (the causal setting among them)
and their random controls → evaluation (the β sweep, then one unit per setting × test × item
shard) → baseline audit → pointing suite → report. Every unit is committed to the store atomically; rerunning the
same command into the same directory computes only what is missing, and a run directory
made with a different configuration is refused.

A study of several models (``models = [...]``) runs these stages once per model, in config
order, into the same run directory and store: each model's rows are scoped by its name
(:class:`vheads.store.Store`), so it resumes per (model, unit); each model gets a backend of
its own, whose replicas load that model once. The report is then the cross-model one.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from vheads import __version__
from vheads._errors import VheadsError, check_output_path, storage_error
from vheads.study._backends import make_backend
from vheads.study._execute import FORWARD_ROWS, _commit, _log, _logged, _run_units  # noqa: F401 (re-exported)
from vheads.study._config import StudyConfig, changed_config_error, model_config, model_entries, validate_for_model
from vheads.study._lock import RunLock
from vheads.study._report import build_report_if_available
from vheads.study._stage import registered_stages
from vheads.store import STORE_NAME, Store
# the stages' names other modules and tests read here (re-exported)
from vheads.study.stages.controls import algebra_pairs, control_seed, headset_stage as _headset_stage  # noqa: F401
from vheads.study.stages.doctor import doctor_stage as _doctor_stage  # noqa: F401
from vheads.study.stages.evaluation import beta_sweep_units as _beta_sweep_units, eval_units as _eval_units  # noqa: F401
from vheads.study.stages.ood import ood_units
from vheads.study.stages.overlap import RANDOM_OVERLAP_DRAWS, overlap_stage as _overlap_stage  # noqa: F401

_ood_units = ood_units


@dataclass
class StudyResult:
    run_dir: Path
    report: Path | None
    seconds: dict[str, float]
    units_computed: int


def preflight_model(cfg: StudyConfig, key: str = "'model'") -> dict:
    """Check that the model exists and is a supported VLM, without loading weights
    (errors name the config ``key``: ``model``, or ``models[i] ('name')``)."""
    from transformers import AutoConfig

    import os

    from vheads.models import adapter_for, check_model_folder, resolve_model_path

    path = resolve_model_path(cfg.model)
    local = os.path.isdir(path)  # a local folder's files are checked now, before the run folder exists

    def check_folder(weights: bool) -> None:
        try:
            check_model_folder(path, weights)
        except VheadsError as e:
            raise VheadsError(f"config key {key}: {e}") from None

    if local:
        check_folder(weights=False)
    try:
        mc = AutoConfig.from_pretrained(path, revision=cfg.revision or None, **({"trust_remote_code": True} if cfg.trust_remote_code else {}))
    except Exception as e:  # noqa: BLE001 - the message is what matters
        raise VheadsError(f"config key {key}: cannot load {cfg.model!r}: {str(e).splitlines()[0]}") from None
    if getattr(mc, "vision_config", None) is None:
        raise VheadsError(f"config key {key}: {cfg.model!r} is not a vision-language model")
    try:
        adapter = adapter_for(mc.model_type)
    except ValueError as e:
        raise VheadsError(f"config key {key}: {cfg.model!r}: {e}") from None
    if local:
        check_folder(weights=True)
    tc = getattr(mc, "text_config", mc)
    return {"n_layers": tc.num_hidden_layers, "n_heads": tc.num_attention_heads, "attention_layers": adapter.attention_layers(tc),
            "prompts": _prompts(cfg, key)}


def _prompts(cfg: StudyConfig, key: str) -> dict[str, str]:
    """The rendered prompt of one item per kind (the report's protocol shows them); a
    checkpoint whose prompts cannot be built (chat template) is refused here, before any work."""
    from vheads.models import preflight_prompts, prompt_examples

    try:
        adapter, processor = preflight_prompts(cfg.model, cfg.revision or None, chat_template=cfg.chat_template or None,
                                               system_prompt=cfg.system_prompt or None, trust_remote_code=cfg.trust_remote_code)
        return prompt_examples(adapter, processor, cfg.question_templates, cfg.seed)
    except (ValueError, OSError) as e:
        raise VheadsError(f"config key {key}: {str(e).splitlines()[0]}") from None


@dataclass
class StageRun:
    """What a stage's ``units`` / ``run`` (:class:`vheads.study._stage.Stage`) reads: one model's
    store and config, its shape, the run folder and backend; ``beta`` is the headline β once
    the evaluation stage has fixed it. :meth:`run_units` runs units on the backend, resumably."""

    store: Store
    cfg: StudyConfig
    run_dir: Path
    backend: object
    shape: dict
    progress: bool = True
    skip_doctor: bool = False
    beta: float | None = None

    def run_units(self, units: list[dict], desc: str) -> int:
        """Run the units not yet in the store (each committed as it ends); returns how many ran."""
        return _run_units(self.store, self.run_dir, self.backend, units, desc, self.progress)


def run_study(cfg: StudyConfig, out: str | Path = "runs/study", progress: bool = True, report: bool = True,
              skip_doctor: bool = False) -> StudyResult:
    """Run (or resume) the whole study of ``cfg`` into ``out``; returns the report's path.

    Before a model's first unit its replica runs the doctor's fast checks
    (:func:`vheads.doctor.fast_checks`); a failed invariant stops the run with the check's
    name. ``skip_doctor`` runs anyway; the store's ``doctor`` meta records the checks or the skip.

    Everything is checked before the run folder is made (the config against the model's
    shape included); the run holds ``out``'s lock (:class:`RunLock`) throughout, so a
    second run on the same folder is refused instead of racing this one.
    """
    from vheads.study._data import preflight_data

    run_dir = check_output_path(Path(out))
    if run_dir.exists() and not run_dir.is_dir():
        raise VheadsError(f"--out {run_dir} is a file, not a run folder; pass a folder")
    _refuse_other_config(cfg, run_dir)  # at once: before the model's shape, the data or the lock
    models = study_models(cfg)
    preflight_data(cfg)  # every photo and corpus read once, before the model or the run directory
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise (storage_error(e, run_dir) or VheadsError(f"cannot make the run folder {run_dir} ({e.strerror or e})")) from None
    with RunLock(run_dir):
        return _run_locked(cfg, run_dir, models, progress, report, skip_doctor)


def study_models(cfg: StudyConfig) -> list[tuple[str, StudyConfig, dict]]:
    """``(name, that model's single-model config, its shape)`` per model of the study —
    ``[("", cfg, shape)]`` for a single-model study — each checked (loadable, supported,
    ``k`` within its heads) without loading weights."""
    entries = model_entries(cfg)
    if not entries:
        shape = preflight_model(cfg)
        validate_for_model(cfg, shape["n_layers"], shape["n_heads"], shape["attention_layers"])
        return [("", cfg, shape)]
    out = []
    for i, e in enumerate(entries):
        mcfg = model_config(cfg, e)
        shape = preflight_model(mcfg, f"'models[{i}]' ({e.name!r})")
        try:
            validate_for_model(mcfg, shape["n_layers"], shape["n_heads"], shape["attention_layers"])
        except VheadsError as err:
            raise VheadsError(f"{err} (for models[{i}], {e.name!r})") from None
        out.append((e.name, mcfg, shape))
    return out


def _refuse_other_config(cfg: StudyConfig, run_dir: Path) -> None:
    """A run folder holding units of another configuration is refused before any work, the
    error naming the keys that differ (:func:`_claim` checks again under the lock)."""
    if not (run_dir / STORE_NAME).is_file():
        return
    store = Store(run_dir, readonly=True)
    try:
        have = store.get_meta("config_hash")
        if have is not None and have != cfg.science_hash() and store.query("SELECT 1 FROM main.units LIMIT 1"):
            raise changed_config_error(run_dir, store.get_meta("config"), cfg)
    finally:
        store.close()


def _claim(store: Store, cfg: StudyConfig, run_dir: Path, **meta) -> None:
    """Refuse a store that holds a run of another configuration; record ``cfg`` (and
    ``meta``) in a new one."""
    have = store.get_meta("config_hash")
    if have is not None and have != cfg.science_hash() and not store.query("SELECT 1 FROM main.units LIMIT 1"):
        # a run that stopped before its first unit holds nothing but its claim: the corrected
        # configuration takes the folder over instead of being refused
        with store.transaction() as db:
            db.execute("DELETE FROM main.meta")
        have = None
    if have is not None and have != cfg.science_hash():
        error = changed_config_error(run_dir, store.get_meta("config"), cfg)
        store.close()
        raise error
    if have is None:
        store.set_meta(config=json.dumps(cfg.to_dict()), config_hash=cfg.science_hash(), vheads_version=__version__,
                       **meta)


def _model_meta(cfg: StudyConfig, shape: dict) -> dict[str, str]:
    return {"model_id": cfg.model, "n_layers": str(shape["n_layers"]), "n_heads": str(shape["n_heads"]),
            "attention_layers": json.dumps(list(shape["attention_layers"])), "prompts": json.dumps(shape.get("prompts", {})),
            "model_fingerprint": _fingerprint(cfg)}


def _fingerprint(cfg: StudyConfig) -> str:
    """The model's fingerprint as :func:`vheads.models.load_model` computes it (a local folder's
    weight files hashed, a hub model's id and revision), so the head-set files the report
    writes (``RUN/headsets/``) load in ``vheads evaluate`` without ``--force``."""
    import os

    from vheads.models import resolve_model_path, weights_fingerprint

    path = resolve_model_path(cfg.model)
    return weights_fingerprint(Path(path)) if os.path.isdir(path) else f"hub:{cfg.model}@{cfg.revision or 'main'}"


def _run_locked(cfg: StudyConfig, run_dir: Path, models: list[tuple[str, StudyConfig, dict]], progress: bool,
                report: bool, skip_doctor: bool = False) -> StudyResult:
    """Every model's stages in turn (one store; a model's rows scoped by its name), then the report."""
    secs: dict[str, float] = {}
    n_computed = 0
    if models[0][0]:  # a multi-model run: the run's own rows name its models
        top = Store(run_dir)
        _claim(top, cfg, run_dir, models=json.dumps([{"name": n, **_model_meta(m, sh)} for n, m, sh in models]))
        top.close()
    for name, mcfg, shape in models:
        store = Store(run_dir, model=name)
        _claim(store, mcfg, run_dir, **_model_meta(mcfg, shape))
        n_computed += _run_model(store, mcfg, run_dir, shape, progress, secs, skip_doctor)
    report_path = None
    if report:
        t = time.time()
        _log(run_dir, "start report")
        report_path = build_report_if_available(run_dir)
        secs["report"] = time.time() - t
    return StudyResult(run_dir, report_path, secs, n_computed)


def _run_model(store: Store, cfg: StudyConfig, run_dir: Path, shape: dict, progress: bool, secs: dict[str, float],
               skip_doctor: bool = False) -> int:
    """One model's stages into its (scoped) ``store``, on a backend of its own: each replica
    loads the model once. Adds each stage's seconds to ``secs``; closes ``store``."""
    n_computed = 0

    def timed(stage, t):
        secs[stage] = secs.get(stage, 0.0) + time.time() - t

    backend = make_backend(cfg.to_dict())
    ctx = StageRun(store, cfg, run_dir, backend, shape, progress, skip_doctor)
    try:
        for stage in registered_stages():
            t = time.time()
            if stage.run is not None:
                n_computed += stage.run(ctx)
            elif stage.units is not None:
                units = stage.units(ctx)
                if not units:
                    continue
                n_computed += ctx.run_units(units, stage.desc or stage.name)
            else:
                continue  # the report: built once every model is done (_run_locked)
            timed(stage.timing or stage.name, t)
    finally:
        backend.close()
        store.close()
    return n_computed


def run_finished(store: Store, cfg: StudyConfig) -> bool:
    """Whether every stage of ``cfg``'s study is in ``store`` (the audit runs after the
    evaluation; the pointing suite, where configured, last)."""
    done = store.done_units()
    return "audit" in done and all(u["unit_id"] in done for u in ood_units(store, cfg))
