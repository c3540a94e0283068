"""The study configuration: one validated object, loaded from TOML or built in code.

Every key is written once, with the stage that reads it (:mod:`vheads.study.stages`: its
default, help and check, a :class:`vheads.study._stage.Key`); from them come the fields of
:class:`StudyConfig` and :class:`RunConfig`, :data:`LATER_KEY_DEFAULTS` and the default
TOML that ``vheads study --print-config`` prints (:func:`default_toml` of the ``--model``
given, :mod:`vheads.study._toml`). Unknown keys and wrong types are refused with the key's
name before any work; then every stage checks its keys (:func:`validate`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import tomllib
from dataclasses import asdict, field, fields, make_dataclass, replace
from pathlib import Path
from typing import Any

from vheads._errors import MissingFileError, VheadsError
from vheads.evaluation import TESTS
from vheads.study._models import (  # noqa: F401 (re-exported: the study's models and loading checks)
    MODEL_KEYS, MODEL_LOADING_KEYS, ModelEntry, _same_model, _validate_loading, _validate_models, check_ray_device, model_config,
    model_entries,
)
from vheads.study._stage import CHECK_PATHS, MAX_INT, Key, check_value, registered_stages, stage_keys  # noqa: F401
from vheads.study._toml import default_toml, printed_order
from vheads.study.stages.core import DTYPES, templates_table, validate_templates  # noqa: F401
from vheads.study.stages.discovery import setting_ids  # noqa: F401 (re-exported)

_check = check_value  # the old names
_templates = templates_table

DEFAULT_TOML = default_toml("tiny")

#: keys added after the first release (real images, the pointing suite, loading options,
#: templates, ...: each :class:`Key` with ``later``), with the value a run made before them had
#: (left out of the hash while at it, so runs made before them keep their hash)
LATER_KEY_DEFAULTS = {k.name: k.old_default for k in stage_keys() if k.later}
#: the keys a ``[[scope]]`` table may set for its settings (:meth:`StudyConfig.for_setting`)
SCOPE_KEYS = ("controls", "test_controls", "tests", "row_groups", "k_sweep", "k_sweep_tests", "k_sweep_controls")
#: the keys of ``[items]``: the tests (items per test) and the beta sweep
ITEM_KEYS = (*TESTS, "beta-sweep")
#: prompt keys left out of the stored config while at their default ("")
PROMPT_KEYS = ("system_prompt", "chat_template")
#: the table fields, after the others (the order ``to_dict`` and stored configs have)
_TABLE_FIELDS = ("models", "controls", "items", "test_controls", "scope", "run", "templates")


def _field(key: Key):
    """The dataclass field of ``key``: its type and default (a list or table copied per config)."""
    kind = key.type or type(key.default)
    if isinstance(key.default, (list, dict)):
        return (key.name, kind, field(default_factory=lambda d=key.default: copy.deepcopy(d)))
    return (key.name, kind, field(default=key.default))


def _dataclass(name: str, specs: list, doc: str, bases: tuple = ()):
    cls = make_dataclass(name, specs, bases=bases)
    cls.__module__, cls.__qualname__, cls.__doc__ = __name__, name, doc
    return cls


RunConfig = _dataclass("RunConfig", [_field(k) for k in stage_keys("run")],
                       "The ``[run]`` table: backend and batching (they change no result). Fields: the ``run`` keys of the stages.")


class _StudyConfigMethods:
    """What a :class:`StudyConfig` answers beyond its fields."""

    def __post_init__(self) -> None:
        if self.dtype == "auto":  # the device's default (vheads._device.default_dtype), stored and hashed as resolved
            from vheads._device import default_dtype

            self.dtype = default_dtype(self.device_map or self.device)

    def for_setting(self, setting: str):
        """The config setting ``setting`` runs under: this one with the keys of the ``[[scope]]``
        that names it (at most one does; the algebra's pairs ``A&B`` and unnamed settings: as is)."""
        for sc in self.scope:
            if setting in sc["settings"]:
                return replace(self, scope=[], **{k: v for k, v in sc.items() if k != "settings"})
        return self

    def control_R(self, test: str, name: str) -> int:
        """R of ``[controls]`` entry ``name`` in ``test``: ``[test_controls.<test>]``'s, else ``[controls]``'s."""
        return self.test_controls.get(test, {}).get(name, self.controls[name])

    def drawn_R(self, name: str) -> int:
        """The draws of control ``name`` a setting needs: the most any of its tests compares."""
        return max([self.controls[name], *(self.control_R(t, name) for t in self.tests)])

    def n_items(self, test: str) -> int:
        """Items test ``test`` (or ``beta-sweep``) runs on: ``[items]``, else ``n_eval``."""
        return min(self.items.get(test, self.n_eval), self.n_eval)

    @property
    def question_templates(self):
        """The :class:`vheads.data.Templates` the study asks its questions with: the
        model's default set (:func:`vheads.data.default_templates`) with the config's own."""
        from vheads.data import default_templates, templates_from_dict

        return templates_from_dict(self.templates, base=default_templates(self.model))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if not d["models"]:  # a single-model config reads (and is stored) as before models existed
            d.pop("models")
        for key in PROMPT_KEYS:  # likewise before the prompt keys
            if not d[key]:
                d.pop(key)
        return d

    def science_hash(self) -> str:
        """Hash of everything that changes results (not the backend or batching)."""
        d = science_dict(self.to_dict())
        if self.chat_template:  # what the template says, not where it lies
            d["chat_template"] = hashlib.sha256(Path(self.chat_template).read_bytes()).hexdigest()[:16]
        from vheads.data import templates_name

        models = [m.get("model", self.model) for m in self.models] or [self.model]
        if any(templates_name(m) != "tiny" for m in models):  # the natural-language questions since issue 22
            d["question_set"] = "natural"
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def _study_fields() -> list:
    keys = {k.name: k for k in stage_keys()}
    names = [n for n in printed_order() if n not in _TABLE_FIELDS] + [n for n in _TABLE_FIELDS if n in keys or n == "run"]
    return [_field(keys[n]) if n != "run" else ("run", RunConfig, field(default_factory=RunConfig)) for n in names]


StudyConfig = _dataclass("StudyConfig", _study_fields(), """The whole study's configuration. Its fields are the
stages' keys (``vheads study --print-config`` prints each with its default and help); ``dtype`` "auto" is resolved at once
(``__post_init__``: the results are the dtype's).""", bases=(_StudyConfigMethods,))


def science_dict(config: dict[str, Any]) -> dict[str, Any]:
    """The keys of a config (in :meth:`StudyConfig.to_dict`'s form, or as a store's ``config``
    meta holds it) that change results: not ``run`` (backend, batching) nor ``metric``, and
    no later key still at its default (runs made before it keep their hash)."""
    d = {k: v for k, v in config.items() if k not in ("run", "metric")}
    for key, default in LATER_KEY_DEFAULTS.items():
        if d.get(key, default) == default:
            d.pop(key, None)
    for key in ("models", *PROMPT_KEYS):  # to_dict leaves these out while empty
        if not d.get(key, True):
            d.pop(key)
    return d


def config_differences(stored: dict[str, Any], cfg) -> list[str]:
    """``KEY: OLD -> NEW`` for each result-changing key where a run's stored config and
    ``cfg`` differ (a table such as ``[controls]`` entry by entry), sorted by key."""
    missing = "(not set)"

    def flat(d: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for k, v in d.items():
            if isinstance(v, dict) and v:
                out.update({f"{k}.{k2}": v2 for k2, v2 in v.items()})
            else:
                out[k] = v
        return out

    a, b = flat(science_dict(stored)), flat(science_dict(json.loads(json.dumps(cfg.to_dict()))))
    return [f"{k}: {json.dumps(a.get(k, missing))} -> {json.dumps(b.get(k, missing))}"
            for k in sorted(set(a) | set(b)) if a.get(k, missing) != b.get(k, missing)]


def changed_config_error(run_dir: Path, stored_config: str | None, cfg) -> VheadsError:
    """The error for a run folder that holds a run of another configuration: the keys that
    differ (or, where every key reads the same, what else enters the hash)."""
    diffs = config_differences(json.loads(stored_config), cfg) if stored_config else []
    what = ("; ".join(diffs[:6]) + (f"; and {len(diffs) - 6} more" if len(diffs) > 6 else "") if diffs else
            "every key reads the same, so the chat template file's contents or vheads' question set changed")
    return VheadsError(f"{run_dir} holds a run of a different configuration ({what}); rerun with the run's own "
                       "config, choose a new --out directory, or delete the old one")


def config_from_dict(data: dict[str, Any]):
    """Validate a parsed TOML table into a :class:`StudyConfig` (errors name the key)."""
    base, run = StudyConfig(), RunConfig()
    known = {f.name for f in fields(StudyConfig)}
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            raise VheadsError(f"unknown config key {key!r}; known keys: {', '.join(sorted(known))}")
        if key == "run":
            if not isinstance(value, dict):
                raise VheadsError(f"config key 'run' must be a table, got {value!r:.80}")
            run_known = {f.name for f in fields(RunConfig)}
            rk = {}
            for k2, v2 in value.items():
                if k2 not in run_known:
                    raise VheadsError(f"unknown config key 'run.{k2}'; known keys: {', '.join(sorted(run_known))}")
                rk[k2] = check_value(f"run.{k2}", v2, getattr(run, k2))
            kwargs["run"] = RunConfig(**rk)
        elif key in ("templates", "scores"):
            kwargs[key] = value  # templates: against the model's defaults, below; scores: in validate
        elif key == "scope":
            kwargs[key] = _scopes(value, base)
        elif key == "test_controls":
            kwargs[key] = _test_controls(value, key)
        elif key == "items":
            if not isinstance(value, dict):
                raise VheadsError(f"config key 'items' must be a table of test = items, got {value!r:.80}")
            kwargs[key] = {k: check_value(f"items.{k}", v, 1) for k, v in value.items()}
        else:
            kwargs[key] = check_value(key, value, getattr(base, key))
    if "templates" in kwargs:
        kwargs["templates"] = templates_table(kwargs["templates"], kwargs.get("model", base.model))
    cfg = StudyConfig(**kwargs)
    validate(cfg)
    return cfg


def _scopes(value: Any, base: StudyConfig) -> list[dict[str, Any]]:
    """The ``[[scope]]`` tables, each key checked against its top-level type (errors name
    ``scope[i].KEY``); which settings they name is checked by :func:`validate`."""
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise VheadsError(f"config key 'scope' must be an array of tables ([[scope]]), got {value!r:.80}")
    out = []
    for i, sc in enumerate(value):
        where = f"scope[{i}]"
        settings = sc.get("settings")
        if not isinstance(settings, list) or not settings or not all(isinstance(x, str) for x in settings):
            raise VheadsError(f"config key '{where}.settings': a scope needs a non-empty list of setting ids, got {settings!r:.80}")
        got = {"settings": list(settings)}
        for k, v in sc.items():
            if k == "settings":
                continue
            if k not in SCOPE_KEYS:
                raise VheadsError(f"unknown config key '{where}.{k}'; a scope may set: settings, {', '.join(SCOPE_KEYS)}")
            got[k] = _test_controls(v, f"{where}.{k}") if k == "test_controls" else check_value(f"{where}.{k}", v, getattr(base, k))
        if len(got) == 1:
            raise VheadsError(f"config key '{where}': sets no key for its settings; add some of {', '.join(SCOPE_KEYS)}")
        out.append(got)
    return out


def _test_controls(value: Any, key: str) -> dict[str, dict[str, int]]:
    """``[test_controls]``: a table per test of ``control = R`` (errors name ``KEY.TEST.CONTROL``)."""
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise VheadsError(f"config key {key!r} must hold a table per test of control = R "
                          f"(e.g. [test_controls.ncs-grid] layer-matched = 100), got {value!r:.80}")
    return {t: {c: check_value(f"{key}.{t}.{c}", r, 1) for c, r in v.items()} for t, v in value.items()}


def _validate_scopes(cfg, bad) -> None:
    """Each ``[[scope]]`` names settings of this run, each setting at most once, and its keys
    pass every check the top-level ones do (the error names ``scope[i].KEY``)."""
    if not cfg.scope:
        return
    from vheads._registry import did_you_mean

    ids, seen = setting_ids(cfg), {}
    for i, sc in enumerate(cfg.scope):
        for sid in sc["settings"]:
            if sid not in ids:
                bad(f"scope[{i}].settings", f"{sid!r} is no setting of this run{did_you_mean(sid, ids)}; its settings: {', '.join(ids)}")
            if sid in seen:
                bad(f"scope[{i}].settings", f"{sid!r} is already in scope[{seen[sid]}]; a setting takes one scope")
            seen[sid] = i
        try:
            validate(cfg.for_setting(sc["settings"][0]))
        except VheadsError as e:
            msg = str(e)
            raise VheadsError(msg.replace("config key '", f"config key 'scope[{i}].", 1) if msg.startswith("config key '")
                              else f"config key 'scope[{i}]': {msg}") from None


def _check_h_reachable(cfg, data: dict[str, Any]) -> None:
    """An h that a config file sets must not exceed an exchangeable control's R (R_max): the
    default's h leaves a small R fixed (it can never see h draws reach S)."""
    if "controls_h" not in data:
        return
    from vheads.study._sequential import sequential_controls

    for where, c in [("", cfg), *((f"scope[{i}].", cfg.for_setting(sc["settings"][0])) for i, sc in enumerate(cfg.scope))]:
        for name in sequential_controls(c):
            for t in c.tests:
                if c.control_R(t, name) < c.controls_h:
                    key = f"test_controls.{t}.{name}" if name in c.test_controls.get(t, {}) else f"controls.{name}"
                    raise VheadsError(f"config key 'controls_h': h = {c.controls_h} is more than {where}{key}'s R_max = "
                                      f"{c.control_R(t, name)}; raise R to at least h, lower h, or set controls_h = 0 (fixed R)")


def validate(cfg) -> None:
    """Semantic checks that need no model: each stage's keys (:attr:`Stage.validate`, in stage
    order), then the scopes and models; the device (it imports torch) last."""
    def bad(key, msg):
        raise VheadsError(f"config key {key!r}: {msg}")

    validate_templates(cfg)
    for stage in registered_stages():
        if stage.validate is not None:
            stage.validate(cfg, bad)
    _validate_scopes(cfg, bad)
    _validate_models(cfg, bad)
    if CHECK_PATHS.get():  # not for a plan (vheads plan): no device or data is used
        _validate_loading(cfg, bad)


def validate_for_model(cfg, n_layers: int, n_heads: int, attention_layers: tuple[int, ...] | None = None) -> None:
    """Checks that need the model's shape (read from its config, no weights): ``k`` and
    ``k_sweep`` within the model's heads, and the head count N of every ``random-n@N``
    control within the heads it draws from (all heads, or those of ``attention_layers``)."""
    from vheads.discovery import resolve_k
    from vheads.evaluation import split_control_name

    for key, ks in (("k", [cfg.k or None]), ("k_sweep", cfg.k_sweep)):
        for kk in ks:
            try:
                resolve_k(n_layers, n_heads, kk, cfg.selection)
            except VheadsError as e:
                raise VheadsError(f"config key {key!r}: {e}") from None
    total = n_heads * (n_layers if attention_layers is None else len(attention_layers))
    for name in cfg.controls:
        n = split_control_name(name)[1]
        if n is not None and n > total:
            raise VheadsError(f"config key 'controls.{name}': draws {n} heads, but the model has {total} "
                              f"({n_layers} layers x {n_heads} heads{'' if attention_layers is None else ', softmax layers only'})")


def load_config(path: str | Path | None = None, **overrides):
    """The default config, or the TOML file at ``path``, with ``overrides`` applied (a refused
    key is named with the file)."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise MissingFileError(f"config file {str(p)!r} does not exist" + (" (it is a folder)" if p.is_dir() else ""))
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise VheadsError(f"config file {str(p)!r} is not valid TOML: {e}") from None
    data.update({k: v for k, v in overrides.items() if v is not None})
    if overrides.get("model") is not None:  # a model given on the command line replaces the config's models
        data.pop("models", None)
    try:
        cfg = config_from_dict(data)
        _check_h_reachable(cfg, data)
        return cfg
    except VheadsError as e:  # every refusal of a key names the file it is in
        if path is None:
            raise
        raise type(e)(f"config file {str(path)!r}: {e}") from None


def load_config_for_plan(path: str | Path | None = None, **overrides):
    """:func:`load_config` with every check but those of data paths and the device: a plan
    (``vheads plan``) is made on a machine that need not hold the data or the GPU."""
    token = CHECK_PATHS.set(False)
    try:
        return load_config(path, **overrides)
    finally:
        CHECK_PATHS.reset(token)
